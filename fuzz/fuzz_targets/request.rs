//! Fuzzes what parses untrusted bytes of a job-creating request: the
//! `Idempotency-Key` parser, and the body through the strict JSON parser to
//! the fingerprint. The input's first byte says where the key ends and the
//! body begins. The task's input-schema check is not built here (its
//! validator would dominate the build); schemathesis and the hostile-input
//! tests cover it over HTTP.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/onejob-domain/src/idempotency.rs"]
mod idempotency;
#[allow(dead_code)]
#[path = "../../src/http/json.rs"]
mod json;

use idempotency::{Fingerprint, IdempotencyKey, MAX_KEY_LEN};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let (key, body) = rest.split_at(usize::from(split).min(rest.len()));

    if let Ok(key) = IdempotencyKey::parse(key) {
        let text = key.as_str();
        assert!((1..=MAX_KEY_LEN).contains(&text.len()), "{text:?}");
        assert!(text.bytes().all(|b| (b'!'..=b'~').contains(&b)), "{text:?}");
        // A key read back from storage is accepted as it is.
        assert_eq!(IdempotencyKey::from_bytes(text.as_bytes().to_vec()).as_ref(), Ok(&key));
    }

    let Ok(value) = json::parse(body) else { return };
    // What the API accepted, written out again, is accepted again as the
    // same intent: the same value and the same fingerprint.
    let again = json::parse(serde_json::to_string(&value).expect("a value serialises").as_bytes())
        .unwrap_or_else(|error| panic!("our own output was refused: {error:?}"));
    assert_eq!(again, value);
    let task = value.get("task").and_then(Value::as_str).unwrap_or("summarize");
    let input = value.get("input").unwrap_or(&Value::Null);
    let provider = value.get("provider").and_then(Value::as_str).unwrap_or("sim-fast");
    let fingerprint = Fingerprint::of_job(task, input, provider);
    let input_again = again.get("input").unwrap_or(&Value::Null);
    assert_eq!(Fingerprint::of_job(task, input_again, provider), fingerprint);
});
