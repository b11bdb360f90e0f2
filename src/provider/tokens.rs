//! Counting a prompt's tokens the way its provider will, before it is sent:
//! a prompt that cannot fit the provider's context fails its attempt with
//! `prompt-too-long`, with no call and no cost. The OpenAI encodings are
//! counted by `bpe`, from vocabularies built into the binary (no download).
//! Anthropic's tokenizer is not published: its prompts are
//! estimated with a margin (characters ÷ 3), or counted by the provider's
//! token-counting endpoint where `count_tokens` is set.

use serde_json::Value;

use crate::config::{ProviderApi, ProviderSettings, Tokenizer};

/// The tokens the Messages API adds to a prompt for a forced tool (its
/// tool-use system prompt): at most 346 on Claude's models, by Anthropic's
/// documentation of tool use's pricing, rounded up.
pub const FORCED_TOOL_TOKENS: usize = 350;

/// Tokens in `text`.
pub fn count(tokenizer: Tokenizer, text: &str) -> usize {
    match tokenizer {
        Tokenizer::O200kBase => super::bpe::O200K_BASE.count(text),
        Tokenizer::Cl100kBase => super::bpe::CL100K_BASE.count(text),
        Tokenizer::Approx => text.chars().count().div_ceil(4),
        Tokenizer::ApproxWithMargin => text.chars().count().div_ceil(3),
    }
}

/// Tokens of a request to `provider`: its messages, and, for the Messages
/// API, the output schema it carries as a forced tool with the tool-use
/// prompt that comes with it.
pub fn count_prompt(provider: &ProviderSettings, messages: &[Value], output_schema: &Value) -> usize {
    let tokenizer = provider.tokenizer();
    let mut tokens = count_messages(tokenizer, messages);
    if provider.api() == ProviderApi::Messages && super::anthropic::is_forced_tool(output_schema) {
        tokens += count(tokenizer, &output_schema.to_string()) + FORCED_TOOL_TOKENS;
    }
    tokens
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
        assert_eq!(count(Tokenizer::ApproxWithMargin, "hello world"), 4);
    }

    #[test]
    fn messages_carry_their_framing() {
        let messages = [json!({"role": "user", "content": "hello world"})];
        assert_eq!(count_messages(Tokenizer::O200kBase, &messages), 2 + 3 + 3);
    }
}
