//! Token counting on the hot path (a prompt's count before each attempt,
//! an output's after it): onejob's counter against tiktoken-rs, the
//! reference, on the same texts in the same run. Five rounds in turns;
//! per text, the median time a count takes and the ratio onejob ÷
//! tiktoken-rs (below 1 is faster). `cargo bench --bench tokenizer [-- NAME]`.

use std::{hint::black_box, time::Instant};

use onejob::{config::Tokenizer, provider::tokens};

const ROUNDS: usize = 5;

fn main() {
    // `cargo bench --bench tokenizer -- cjk` times only the texts so named.
    let only = std::env::args().skip(1).find(|arg| !arg.starts_with('-'));
    // The first count of each builds what it needs: onejob its index,
    // tiktoken-rs its vocabulary's maps.
    let started = Instant::now();
    tokens::count(Tokenizer::O200kBase, "hello");
    let onejob_first = started.elapsed();
    let started = Instant::now();
    tiktoken_rs::o200k_base_singleton().encode_ordinary("hello");
    let tiktoken_first = started.elapsed();
    println!("o200k_base  first count: onejob {onejob_first:.1?}, tiktoken-rs {tiktoken_first:.1?}");
    let prose = "The quick brown fox jumps over the lazy dog. It's a sentence that \
                 uses every letter, and we'll repeat it with numbers like 1,234.56 and \
                 names like McDonald's or O'Reilly.\n"
        .repeat(20);
    let code = "fn main() {\n    let total: u64 = (1..=100).map(|x| x * x).sum();\n    \
                println!(\"{total}\");\n}\n"
        .repeat(30);
    let cjk = "日本語のテキストと中文文本，还有한국어 텍스트。".repeat(40);
    let blob: String = (0..20_000u32)
        .map(|i| {
            char::from(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i as usize * 7919) % 64])
        })
        .collect();
    let texts = [("prose", prose), ("code", code), ("cjk", cjk), ("base64 blob", blob)];
    for (tokenizer, name) in [(Tokenizer::O200kBase, "o200k_base"), (Tokenizer::Cl100kBase, "cl100k_base")] {
        let reference = match tokenizer {
            Tokenizer::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            _ => tiktoken_rs::o200k_base_singleton(),
        };
        for (label, text) in
            texts.iter().filter(|(label, _)| only.as_ref().is_none_or(|only| label.contains(only.as_str())))
        {
            let ours = tokens::count(tokenizer, text);
            assert_eq!(ours, reference.encode_ordinary(text).len(), "{name} {label}");
            let iterations = (2_000_000 / text.len()).max(5);
            let (mut onejob, mut tiktoken) = (Vec::new(), Vec::new());
            for _ in 0..ROUNDS {
                onejob.push(time(iterations, || tokens::count(tokenizer, black_box(text))));
                tiktoken.push(time(iterations, || reference.encode_ordinary(black_box(text)).len()));
            }
            let (ours_ns, theirs_ns) = (median(onejob), median(tiktoken));
            println!(
                "{name:11} {label:11} {:6} bytes {ours:5} tokens: onejob {:9.1} µs, tiktoken-rs {:9.1} µs, ratio {:.2}",
                text.len(),
                ours_ns / 1e3,
                theirs_ns / 1e3,
                ours_ns / theirs_ns
            );
        }
    }
}

/// Nanoseconds a call of `count` takes, on average over `iterations`.
fn time(iterations: usize, count: impl Fn() -> usize) -> f64 {
    let started = Instant::now();
    for _ in 0..iterations {
        black_box(count());
    }
    started.elapsed().as_nanos() as f64 / iterations as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
