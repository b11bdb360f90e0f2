//! Counting tokens with OpenAI's byte-pair encodings, o200k_base and
//! cl100k_base, as tiktoken does, with their vocabularies left in the
//! binary rather than copied to the heap.
//!
//! A text is cut into pieces by the encoding's pattern. A piece that is a
//! token counts one; any other starts as its bytes, and the adjacent pair
//! whose union has the lowest rank is merged (the leftmost of equals) until
//! no union is a token: it counts the parts left.
//!
//! The vocabulary, written by `build.rs`, is read where it lies: the tokens'
//! bytes in rank order and where each starts. The one allocation is an
//! index from a token's bytes to its rank, open addressing with linear
//! probing over 4-byte slots, at least twice as many as tokens (2 MiB for
//! o200k_base, 1 MiB for cl100k_base), built on first use.

use std::{cell::RefCell, cmp::Reverse, collections::BinaryHeap, sync::LazyLock};

use fancy_regex::Regex;

/// The pattern that cuts a text into pieces for o200k_base (GPT-4o, the o
/// series, GPT-4.1 and later), as OpenAI publishes it with tiktoken.
const O200K_PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}",
    r"| ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"|\s*[\r\n]+",
    r"|\s+(?!\S)",
    r"|\s+",
);

/// The pattern for cl100k_base (GPT-4, GPT-3.5), as OpenAI publishes it.
const CL100K_PATTERN: &str = concat!(
    r"'(?i:[sdmt]|ll|ve|re)",
    r"|[^\r\n\p{L}\p{N}]?+\p{L}++",
    r"|\p{N}{1,3}+",
    r"| ?[^\s\p{L}\p{N}]++[\r\n]*+",
    r"|\s++$",
    r"|\s*[\r\n]",
    r"|\s+(?!\S)",
    r"|\s",
);

/// o200k_base, its index built on first use.
pub(super) static O200K_BASE: LazyLock<Encoding> = LazyLock::new(|| {
    Encoding::new(
        include_bytes!(concat!(env!("OUT_DIR"), "/o200k_base.bytes")),
        include_bytes!(concat!(env!("OUT_DIR"), "/o200k_base.offsets")),
        O200K_PATTERN,
    )
});

/// cl100k_base, its index built on first use.
pub(super) static CL100K_BASE: LazyLock<Encoding> = LazyLock::new(|| {
    Encoding::new(
        include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_base.bytes")),
        include_bytes!(concat!(env!("OUT_DIR"), "/cl100k_base.offsets")),
        CL100K_PATTERN,
    )
});

/// An index slot's bits for a rank plus one (both vocabularies have fewer
/// than 2¹⁸ tokens) and for the tag beside it.
const RANK_BITS: u32 = 18;
const TAG_BITS: u32 = 32 - RANK_BITS;

/// The rank of a pair whose union is no token: above every rank.
const NOT_A_TOKEN: u32 = u32::MAX;

/// The space `Encoding::merge` works in, kept per thread so that counting
/// allocates only for a piece longer than any the thread has merged, up to
/// `SCRATCH_KEPT` bytes (about 100 KiB of space); a longer piece's space is
/// freed after it.
#[derive(Default)]
struct Scratch {
    ends: Vec<u32>,
    before: Vec<u32>,
    pair_ranks: Vec<u32>,
    pairs: BinaryHeap<Reverse<u64>>,
}

const SCRATCH_KEPT: usize = 4096;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// One byte-pair encoding: its vocabulary, its index and its pattern.
pub(super) struct Encoding {
    /// The tokens' bytes, one after another in rank order.
    bytes: &'static [u8],
    /// Where token `r` starts, as the little-endian `u32` at `4 * r`; one
    /// more at the end.
    offsets: &'static [u8],
    /// The index: 0 for an empty slot, else a token's rank plus one in the
    /// low `RANK_BITS` and `TAG_BITS` more of its hash above, so that most
    /// slots holding another token are passed without reading its bytes. A
    /// token sits at the slot its hash names or the first empty one after.
    slots: Box<[u32]>,
    /// How far a hash is shifted right to name a slot (64 − log₂ slots).
    shift: u32,
    pattern: Regex,
}

impl Encoding {
    fn new(bytes: &'static [u8], offsets: &'static [u8], pattern: &str) -> Self {
        let tokens = offsets.len() / 4 - 1;
        assert!(tokens < (1 << RANK_BITS) - 1, "a rank plus one fits its bits");
        let slot_count = (2 * tokens).next_power_of_two();
        let mut encoding = Encoding {
            bytes,
            offsets,
            slots: vec![0; slot_count].into_boxed_slice(),
            shift: 64 - slot_count.trailing_zeros(),
            pattern: Regex::new(pattern).expect("the encoding's pattern compiles"),
        };
        for rank in 0..tokens {
            let rank = u32::try_from(rank).expect("a vocabulary fits u32");
            let (mut at, tag) = encoding.place(encoding.token(rank));
            while encoding.slots[at] != 0 {
                at = (at + 1) & (slot_count - 1);
            }
            encoding.slots[at] = tag << RANK_BITS | (rank + 1);
        }
        encoding
    }

    /// Tokens in `text`. Should the pattern fail on a text (its lookahead
    /// has a backtracking limit), the text's length in bytes, which no
    /// count can exceed, answers instead.
    pub(super) fn count(&self, text: &str) -> usize {
        let mut tokens = 0;
        for piece in self.pattern.find_iter(text) {
            let Ok(piece) = piece else { return text.len() };
            let piece = piece.as_str().as_bytes();
            tokens += if self.rank(piece).is_some() { 1 } else { self.merged_parts(piece) };
        }
        tokens
    }

    /// The parts a piece that is not itself a token merges into, in
    /// O(n log n): pairs wait in a heap by the rank of their union, then
    /// their start; a pair whose left part has merged since it was pushed is
    /// stale and skipped.
    fn merged_parts(&self, piece: &[u8]) -> usize {
        SCRATCH.with_borrow_mut(|scratch| {
            let parts = self.merge(piece, scratch);
            if piece.len() > SCRATCH_KEPT {
                // A long piece (a run of letters in a pasted blob) does not
                // leave its space held by the thread for good.
                *scratch = Scratch::default();
            }
            parts
        })
    }

    fn merge(&self, piece: &[u8], Scratch { ends, before, pair_ranks, pairs }: &mut Scratch) -> usize {
        let len = u32::try_from(piece.len()).expect("a piece of a request is under 4 GiB");
        // The part starting at byte i ends at `ends[i]` (0 once merged into
        // the part before it), follows the part at `before[i]` and merges
        // with the part after it into the token `pair_ranks[i]`.
        let pair = |start: u32, end: u32| self.rank(&piece[start as usize..end as usize]).unwrap_or(NOT_A_TOKEN);
        ends.clear();
        ends.extend(1..=len);
        before.clear();
        before.extend((0..len).map(|i| i.wrapping_sub(1)));
        pair_ranks.clear();
        pair_ranks.extend((0..len - 1).map(|start| pair(start, start + 2)));
        pairs.clear();
        pairs.extend(
            pair_ranks
                .iter()
                .zip(0..)
                .filter(|(rank, _)| **rank != NOT_A_TOKEN)
                .map(|(&rank, start)| Reverse(u64::from(rank) << 32 | start)),
        );
        let mut parts = piece.len();
        while let Some(Reverse(entry)) = pairs.pop() {
            let (rank, start) = ((entry >> 32) as u32, entry as u32 as usize);
            if ends[start] == 0 || pair_ranks[start] != rank {
                continue;
            }
            let next = ends[start] as usize;
            let end = ends[next];
            ends[start] = end;
            ends[next] = 0;
            parts -= 1;
            let mut update = |start: u32, rank: u32| {
                pair_ranks[start as usize] = rank;
                if rank != NOT_A_TOKEN {
                    pairs.push(Reverse(u64::from(rank) << 32 | u64::from(start)));
                }
            };
            if end < len {
                before[end as usize] = start as u32;
                update(start as u32, pair(start as u32, ends[end as usize]));
            } else {
                update(start as u32, NOT_A_TOKEN);
            }
            if before[start] != u32::MAX {
                update(before[start], pair(before[start], end));
            }
        }
        parts
    }

    /// The rank of the token with these bytes, if there is one.
    fn rank(&self, bytes: &[u8]) -> Option<u32> {
        let (mut at, tag) = self.place(bytes);
        loop {
            let slot = self.slots[at];
            if slot == 0 {
                return None;
            }
            let rank = (slot & ((1 << RANK_BITS) - 1)) - 1;
            if slot >> RANK_BITS == tag && self.token(rank) == bytes {
                return Some(rank);
            }
            at = (at + 1) & (self.slots.len() - 1);
        }
    }

    fn token(&self, rank: u32) -> &'static [u8] {
        let offset = |rank: usize| {
            let at = 4 * rank;
            u32::from_le_bytes(self.offsets[at..at + 4].try_into().expect("four bytes")) as usize
        };
        let rank = rank as usize;
        &self.bytes[offset(rank)..offset(rank + 1)]
    }

    /// The slot a token's bytes hash to and the tag kept with it: a
    /// multiply-rotate hash over 8-byte words, whose top bits mix every
    /// byte, names the slot by its top bits and the tag by the next ones.
    fn place(&self, bytes: &[u8]) -> (usize, u32) {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut hash = bytes.len() as u64;
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            hash = (hash.rotate_left(23) ^ u64::from_le_bytes(word.try_into().expect("eight bytes"))).wrapping_mul(K);
        }
        hash = (hash.rotate_left(23) ^ tail(words.remainder())).wrapping_mul(K);
        let tag = (hash >> (self.shift - TAG_BITS)) as u32 & ((1 << TAG_BITS) - 1);
        ((hash >> self.shift) as usize, tag)
    }
}

/// The last 0 to 7 bytes of a token as one word, read in at most two loads
/// (overlapping when they are 4 to 7); a copy to the stack would stall the
/// load that reads it back.
fn tail(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    let word = |at: usize| u64::from(u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes")));
    match len {
        0 => 0,
        1..4 => u64::from(bytes[0]) << 16 | u64::from(bytes[len / 2]) << 8 | u64::from(bytes[len - 1]),
        _ => word(0) << 32 | word(len - 4),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Texts that exercise every branch of both patterns and long merges:
    /// contractions, capitals inside words, digits in threes, punctuation
    /// runs, line ends, trailing and inner spaces, scripts without spaces,
    /// emoji and combining marks, and long runs that are no token.
    fn corpus() -> Vec<String> {
        let mut texts: Vec<String> = [
            "",
            "hello world",
            "Hello, World! It's the CEO's 3rd time; they'll say \"we've\" 1234567 times.",
            "  leading and trailing  \n\n\tindented\r\nwindows\r\n  \n",
            "camelCaseWords and SCREAMING_SNAKE and MixedUPPERlower",
            "https://example.com/path?query=1&other=two#fragment",
            "fn main() { println!(\"{}\", x.iter().map(|y| y * 2).sum::<u64>()); }",
            "日本語のテキストと中文文本，还有한국어 텍스트。",
            "Ünïcödé çombining: e\u{301} a\u{308} ñ, emoji 👩‍👩‍👧‍👦 🎉🎉🎉",
            "مرحبا بالعالم שלום עולם Привет мир",
            "    \n\n\n    x",
            "'S 'T 'RE 'VE 'M 'LL 'D 's 't 're 've 'm 'll 'd",
        ]
        .map(String::from)
        .to_vec();
        texts.push("a".repeat(1000));
        texts.push("abcdefghij".repeat(300));
        // Longer than the scratch space a thread keeps.
        texts.push("quuxzy".repeat(1000));
        texts.push("9".repeat(1000));
        texts.push(" ".repeat(500) + "end");
        texts.push("-=".repeat(400));
        texts
            .push((0..2000u32).map(|i| char::from_u32(0x4e00 + (i * 7919) % 20000).unwrap_or('x')).collect::<String>());
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let alphabet: Vec<char> = "aeiou bcdfgxyzAEQ.,;'!?0123\n\t-_é漢😀".chars().collect();
        for length in [5, 17, 64, 250, 1500] {
            let text = (0..length)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    alphabet[(seed % alphabet.len() as u64) as usize]
                })
                .collect();
            texts.push(text);
        }
        texts
    }

    #[test]
    fn the_corpus_counts_as_tiktoken_counts_it() {
        let encodings = [
            (&*O200K_BASE, tiktoken_rs::o200k_base_singleton()),
            (&*CL100K_BASE, tiktoken_rs::cl100k_base_singleton()),
        ];
        for (encoding, reference) in encodings {
            for text in corpus() {
                assert_eq!(encoding.count(&text), reference.encode_ordinary(&text).len(), "{text:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Generated texts, from an alphabet that makes pieces merge often
        /// and from any printable characters, count as tiktoken counts.
        #[test]
        fn generated_texts_count_as_tiktoken_counts(
            text in prop_oneof!["[a-zA-Z0-9 '.,!?\\n\\t_/é漢😀-]{0,400}", "\\PC{0,120}"],
        ) {
            prop_assert_eq!(O200K_BASE.count(&text), tiktoken_rs::o200k_base_singleton().encode_ordinary(&text).len());
            prop_assert_eq!(CL100K_BASE.count(&text), tiktoken_rs::cl100k_base_singleton().encode_ordinary(&text).len());
        }
    }

    #[test]
    fn every_token_is_found_at_its_own_rank() {
        for encoding in [&*O200K_BASE, &*CL100K_BASE] {
            let tokens = encoding.offsets.len() / 4 - 1;
            for rank in 0..u32::try_from(tokens).unwrap() {
                assert_eq!(encoding.rank(encoding.token(rank)), Some(rank));
            }
            assert_eq!(encoding.rank(b"\xff\xfe not a token \xfd"), None);
        }
    }
}
