//! Writes the OpenAI encodings' vocabularies in the compact form that
//! `src/provider/bpe.rs` reads in place from the binary: for each encoding,
//! its tokens' bytes one after another in rank order (`NAME.bytes`) and
//! where each token starts, as little-endian `u32`s with one more at the
//! end (`NAME.offsets`). The vocabularies come from tiktoken-rs, which ships
//! them; it is needed here and by the tests that count against it, not at
//! run time.

use std::{env, fs, path::Path};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out = env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let encodings = [
        ("o200k_base", tiktoken_rs::o200k_base().expect("o200k_base loads"), 199_998),
        ("cl100k_base", tiktoken_rs::cl100k_base().expect("cl100k_base loads"), 100_256),
    ];
    for (name, encoding, tokens) in encodings {
        let (bytes, offsets) = vocabulary(&encoding);
        assert_eq!(offsets.len() / 4 - 1, tokens, "{name} has {tokens} ordinary tokens");
        fs::write(Path::new(&out).join(format!("{name}.bytes")), bytes).expect("OUT_DIR is writable");
        fs::write(Path::new(&out).join(format!("{name}.offsets")), offsets).expect("OUT_DIR is writable");
    }
}

/// The ordinary tokens, ranks 0 up to the first rank the encoding does not
/// have (the special tokens come after a gap and are left out: counting a
/// text never produces them).
fn vocabulary(encoding: &tiktoken_rs::CoreBPE) -> (Vec<u8>, Vec<u8>) {
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    let mut rank = 0;
    while let Ok(token) = encoding.decode_bytes(&[rank]) {
        offsets.extend_from_slice(&u32::try_from(bytes.len()).expect("under 4 GiB").to_le_bytes());
        bytes.extend_from_slice(&token);
        rank += 1;
    }
    offsets.extend_from_slice(&u32::try_from(bytes.len()).expect("under 4 GiB").to_le_bytes());
    (bytes, offsets)
}
