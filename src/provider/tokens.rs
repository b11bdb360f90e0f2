//! Counting a prompt's tokens the way its provider will, before it is sent:
//! a prompt that cannot fit the provider's context fails its attempt with
//! `prompt-too-long`, with no call and no cost. The OpenAI encodings ship
//! inside the tiktoken-rs crate (no download); each is loaded once, on
//! first use.

use serde_json::Value;

use crate::config::Tokenizer;

/// Tokens in `text`.
pub fn count(tokenizer: Tokenizer, text: &str) -> usize {
    match tokenizer {
        Tokenizer::O200kBase => tiktoken_rs::o200k_base_singleton().encode_ordinary(text).len(),
        Tokenizer::Cl100kBase => tiktoken_rs::cl100k_base_singleton().encode_ordinary(text).len(),
        Tokenizer::Approx => text.chars().count().div_ceil(4),
    }
}

/// Tokens of chat messages: their contents, plus OpenAI's framing of 3 per
/// message and 3 to prime the answer.
pub fn count_messages(tokenizer: Tokenizer, messages: &[Value]) -> usize {
    let contents: usize =
        messages.iter().map(|m| count(tokenizer, m["content"].as_str().unwrap_or_default()) + 3).sum();
    contents + 3
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodings_count_as_openai_does() {
        assert_eq!(count(Tokenizer::O200kBase, "hello world"), 2);
        assert_eq!(count(Tokenizer::Cl100kBase, "hello world"), 2);
        assert_eq!(count(Tokenizer::Approx, "hello world"), 3);
        assert_eq!(count(Tokenizer::Approx, ""), 0);
    }

    #[test]
    fn messages_carry_their_framing() {
        let messages = [json!({"role": "user", "content": "hello world"})];
        assert_eq!(count_messages(Tokenizer::O200kBase, &messages), 2 + 3 + 3);
    }
}
