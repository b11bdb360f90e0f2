//! Idempotency keys and request fingerprints: the two halves of I1 and I2.
//! The key names an intent; the fingerprint says what the intent was, so the
//! same key with another payload can be told from a replay.

use std::fmt;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The longest key accepted, in characters.
pub const MAX_KEY_LEN: usize = 255;

/// A client-chosen key: 1–255 visible ASCII characters (`!` to `~`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why an `Idempotency-Key` header value is not a key.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidKey {
    /// Nothing between the quotes, or an empty header.
    #[error("the key is empty")]
    Empty,
    /// Over [`MAX_KEY_LEN`] characters.
    #[error("the key is longer than 255 characters")]
    TooLong,
    /// A space, a control character or a non-ASCII byte.
    #[error("the key may hold only visible ASCII characters ('!' to '~')")]
    BadCharacter,
    /// An opening quote without a well-formed structured-field string.
    #[error("a quoted key must be one structured-field string: \"...\" with only \\\" and \\\\ escapes")]
    BadQuoting,
}

impl IdempotencyKey {
    /// Parses a header value. Both the bare form `abc` and the structured
    /// field string form `"abc"` (RFC 8941, as the IETF Idempotency-Key draft
    /// writes it) name the same key.
    pub fn parse(raw: &[u8]) -> Result<Self, InvalidKey> {
        let raw = raw.trim_ascii();
        let key = match raw.first() {
            Some(b'"') => unquote_sf_string(raw)?,
            _ => raw.to_vec(),
        };
        Self::from_bytes(key)
    }

    /// Checks an already unquoted key (read back from storage, or from a body).
    pub fn from_bytes(key: Vec<u8>) -> Result<Self, InvalidKey> {
        if key.is_empty() {
            return Err(InvalidKey::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(InvalidKey::TooLong);
        }
        if !key.iter().all(|b| (b'!'..=b'~').contains(b)) {
            return Err(InvalidKey::BadCharacter);
        }
        // Only visible ASCII is left, so this cannot fail.
        Ok(Self(String::from_utf8(key).map_err(|_| InvalidKey::BadCharacter)?))
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn unquote_sf_string(raw: &[u8]) -> Result<Vec<u8>, InvalidKey> {
    let inner = raw.strip_prefix(b"\"").and_then(|rest| rest.strip_suffix(b"\"")).ok_or(InvalidKey::BadQuoting)?;
    let mut key = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => key.push(escaped),
                _ => return Err(InvalidKey::BadQuoting),
            },
            // An unescaped quote inside would end the string early.
            b'"' => return Err(InvalidKey::BadQuoting),
            _ => key.push(b),
        }
    }
    Ok(key)
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// SHA-256 over the RFC 8785 canonical JSON of a request's intent.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

/// What a request to create a job asks for, as the client sent it: the
/// provider as named, or `None`; the budget in its shortest decimal form
/// (`Money`'s, so that `0.050` is the same budget as `0.05`), or `None`.
#[derive(Clone, Copy, Debug)]
pub struct JobIntent<'a> {
    /// The task's name.
    pub task: &'a str,
    /// The input.
    pub input: &'a Value,
    /// The provider the request named, if it named one.
    pub provider: Option<&'a str>,
    /// The budget the request set, if it set one.
    pub max_cost: Option<&'a str>,
}

/// The canonical JSON a job's fingerprint is taken over. `intent` marks the
/// form: a fingerprint of this form never equals one of the first form
/// ([`FirstForm`]), which had no such member.
#[derive(Serialize)]
struct IntentForm<'a> {
    intent: u8,
    task: &'a str,
    input: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_cost: Option<&'a str>,
}

/// The first form, over the provider the job resolved to (the task's
/// default at the time when the request named none). Jobs stored before the
/// fingerprint covered the intent as sent still carry it, and still replay.
#[derive(Serialize)]
struct FirstForm<'a> {
    task: &'a str,
    input: &'a Value,
    provider: &'a str,
    // Left out when absent, so that a job without a budget keeps the
    // fingerprint it had before budgets existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    max_cost: Option<&'a str>,
}

impl<'a> JobIntent<'a> {
    /// The fingerprint a new job of this intent is stored with, when
    /// `default` is its task's default provider now: naming the default is
    /// the same intent as naming none, so it is left out.
    pub fn fingerprint(&self, default: &str) -> Fingerprint {
        self.form(self.provider.filter(|named| *named != default))
    }

    /// Whether this intent is the one a job was made for, from what the job
    /// stored alone (its fingerprint and its provider), whatever the
    /// configuration says now. Naming the job's provider matches a job made
    /// without naming one (it was made under that default); naming none
    /// matches only a job made without naming one (or naming its default
    /// then). A job stored with the first form matches the request that
    /// made it, with its provider named or not.
    pub fn made(&self, stored: Fingerprint, job_provider: &str) -> bool {
        self.form(self.provider) == stored
            || (self.provider == Some(job_provider) && self.form(None) == stored)
            || self.first_form(self.provider.unwrap_or(job_provider)) == stored
    }

    fn form(&self, provider: Option<&str>) -> Fingerprint {
        let form = IntentForm { intent: 2, task: self.task, input: self.input, provider, max_cost: self.max_cost };
        Fingerprint::of_canonical(&form)
    }

    fn first_form(&self, provider: &str) -> Fingerprint {
        Fingerprint::of_canonical(&FirstForm { task: self.task, input: self.input, provider, max_cost: self.max_cost })
    }
}

impl Fingerprint {
    /// The first form's fingerprint of a job's intent, over its resolved
    /// provider (see [`JobIntent::made`]). (This file is also built alone by
    /// the fuzzer: it names no other module.)
    pub fn of_job(task: &str, input: &Value, provider: &str) -> Self {
        Self::of_job_with_budget(task, input, provider, None)
    }

    /// [`Self::of_job`] with the job's budget in its shortest decimal form.
    pub fn of_job_with_budget(task: &str, input: &Value, provider: &str, max_cost: Option<String>) -> Self {
        let intent = JobIntent { task, input, provider: Some(provider), max_cost: max_cost.as_deref() };
        intent.first_form(provider)
    }

    fn of_canonical(form: &impl Serialize) -> Self {
        // Serialising a `Value` tree cannot fail: every map key is a string.
        let canonical = serde_json_canonicalizer::to_vec(form).expect("canonical JSON of a JSON value");
        Self(Sha256::digest(&canonical).into())
    }

    /// Rebuilds a fingerprint read back from storage.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The raw digest.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", hex::encode(self.0))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bare_and_quoted_forms_name_the_same_key() {
        let bare = IdempotencyKey::parse(b"order-42").unwrap();
        let quoted = IdempotencyKey::parse(b"\"order-42\"").unwrap();
        assert_eq!(bare, quoted);
        assert_eq!(IdempotencyKey::parse(br#""a\"b\\c""#).unwrap().as_str(), r#"a"b\c"#);
        assert_eq!(IdempotencyKey::parse(b"  padded\t").unwrap().as_str(), "padded");
    }

    #[test]
    fn keys_outside_visible_ascii_or_length_are_refused() {
        assert_eq!(IdempotencyKey::parse(b""), Err(InvalidKey::Empty));
        assert_eq!(IdempotencyKey::parse(b"\"\""), Err(InvalidKey::Empty));
        assert_eq!(IdempotencyKey::parse(b"a b"), Err(InvalidKey::BadCharacter));
        assert_eq!(IdempotencyKey::parse("clé".as_bytes()), Err(InvalidKey::BadCharacter));
        assert_eq!(IdempotencyKey::parse(b"a\x7fb"), Err(InvalidKey::BadCharacter));
        assert_eq!(IdempotencyKey::parse(b"\"open"), Err(InvalidKey::BadQuoting));
        assert_eq!(IdempotencyKey::parse(b"\"a\"b\""), Err(InvalidKey::BadQuoting));
        assert_eq!(IdempotencyKey::parse(br#""a\nb""#), Err(InvalidKey::BadQuoting));
        assert!(IdempotencyKey::parse("k".repeat(255).as_bytes()).is_ok());
        assert_eq!(IdempotencyKey::parse("k".repeat(256).as_bytes()), Err(InvalidKey::TooLong));
    }

    #[test]
    fn fingerprint_ignores_key_order_and_whitespace() {
        let a: Value = serde_json::from_str(r#"{"text": "hi", "max_words": 3}"#).unwrap();
        let b: Value = serde_json::from_str("{\"max_words\":3,\n\"text\":\"hi\"}").unwrap();
        assert_eq!(Fingerprint::of_job("summarize", &a, "sim-fast"), Fingerprint::of_job("summarize", &b, "sim-fast"));
    }

    #[test]
    fn fingerprint_changes_with_any_part_of_the_intent() {
        let input = json!({"text": "hi"});
        let base = Fingerprint::of_job("summarize", &input, "sim-fast");
        assert_ne!(base, Fingerprint::of_job("summarize", &json!({"text": "ho"}), "sim-fast"));
        assert_ne!(base, Fingerprint::of_job("summarize", &input, "sim-slow"));
        assert_ne!(base, Fingerprint::of_job("translate", &input, "sim-fast"));
        let budget = |text: &str| Fingerprint::of_job_with_budget("summarize", &input, "sim-fast", Some(text.into()));
        assert_eq!(base, Fingerprint::of_job_with_budget("summarize", &input, "sim-fast", None));
        assert_ne!(base, budget("0.05"));
        assert_ne!(budget("0.05"), budget("0.06"));
    }

    fn intent<'a>(input: &'a Value, provider: Option<&'a str>, max_cost: Option<&'a str>) -> JobIntent<'a> {
        JobIntent { task: "summarize", input, provider, max_cost }
    }

    #[test]
    fn naming_the_default_is_the_same_intent_only_for_a_job_made_under_that_default() {
        let input = json!({"text": "hi"});
        let unnamed = intent(&input, None, None);
        let named = |p| intent(&input, Some(p), None);
        // Made without naming one, under the default sim-fast.
        let made = unnamed.fingerprint("sim-fast");
        assert_eq!(made, named("sim-fast").fingerprint("sim-fast"));
        assert!(unnamed.made(made, "sim-fast"));
        assert!(named("sim-fast").made(made, "sim-fast"));
        assert!(!named("sim-slow").made(made, "sim-fast"));
        // Made naming sim-slow, which was not the default: leaving it out is another intent.
        let named_slow = named("sim-slow").fingerprint("sim-fast");
        assert!(named("sim-slow").made(named_slow, "sim-slow"));
        assert!(!unnamed.made(named_slow, "sim-slow"));
        assert!(!named("sim-fast").made(named_slow, "sim-slow"));
    }

    #[test]
    fn a_job_stored_with_the_first_form_matches_the_requests_that_made_it() {
        let input = json!({"text": "hi"});
        let first = Fingerprint::of_job_with_budget("summarize", &input, "sim-fast", Some("0.05".into()));
        assert!(intent(&input, None, Some("0.05")).made(first, "sim-fast"));
        assert!(intent(&input, Some("sim-fast"), Some("0.05")).made(first, "sim-fast"));
        assert!(!intent(&input, Some("sim-slow"), Some("0.05")).made(first, "sim-fast"));
        assert!(!intent(&input, None, None).made(first, "sim-fast"));
        assert!(!intent(&json!({"text": "ho"}), None, Some("0.05")).made(first, "sim-fast"));
        // The two forms never collide.
        assert_ne!(intent(&input, Some("sim-fast"), Some("0.05")).fingerprint("sim-slow"), first);
    }

    #[test]
    fn the_budget_is_part_of_the_intent() {
        let input = json!({"text": "hi"});
        let made = intent(&input, None, Some("0.05")).fingerprint("sim-fast");
        assert!(intent(&input, None, Some("0.05")).made(made, "sim-fast"));
        assert!(!intent(&input, None, Some("0.06")).made(made, "sim-fast"));
        assert!(!intent(&input, None, None).made(made, "sim-fast"));
    }

    #[test]
    fn a_key_shows_as_it_is_stored() {
        let key = IdempotencyKey::parse(br#""a\"b""#).unwrap();
        assert_eq!(key.to_string(), r#"a"b"#);
        assert_eq!(key.to_string(), key.as_str());
    }

    #[test]
    fn a_fingerprint_reads_back_from_its_stored_bytes_and_only_from_32() {
        let fingerprint = Fingerprint::of_job("summarize", &json!({"text": "hi"}), "sim-fast");
        let stored = fingerprint.as_bytes().to_vec();
        assert_eq!(stored, Sha256::digest(br#"{"input":{"text":"hi"},"provider":"sim-fast","task":"summarize"}"#)[..]);
        assert_eq!(Fingerprint::from_slice(&stored), Some(fingerprint));
        assert_eq!(Fingerprint::from_slice(&stored[..31]), None);
        assert_eq!(Fingerprint::from_slice(&[stored.clone(), vec![0]].concat()), None);
        // Debug output (logs, assertion failures) is the same prefixed hex.
        assert_eq!(format!("{fingerprint:?}"), fingerprint.to_string());
    }

    #[test]
    fn fingerprint_is_shown_as_prefixed_hex() {
        let shown = Fingerprint::of_job("t", &json!(null), "p").to_string();
        // Pinned: budgets did not change the fingerprint of a job without one.
        assert_eq!(
            Fingerprint::of_job("summarize", &json!({"text": "hi"}), "sim-fast").to_string(),
            format!(
                "sha256:{}",
                hex::encode(Sha256::digest(br#"{"input":{"text":"hi"},"provider":"sim-fast","task":"summarize"}"#))
            )
        );
        assert!(shown.starts_with("sha256:"));
        assert_eq!(shown.len(), "sha256:".len() + 64);
    }
}
