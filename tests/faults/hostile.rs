//! Hostile input over a real socket: every request below ends in a clear
//! 4xx problem (or, for bytes HTTP itself forbids, the HTTP layer's own 400)
//! or a timeout answer within the request deadline: never a 5xx, never a
//! hang, never a panic, and never more memory than the body limit allows
//! (measured on a server in a process of its own).

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Backend, TestApp, expect_problem};

/// Sends `body` as a job to create, as alice.
async fn post(app: &TestApp, body: impl Into<String>) -> reqwest::Response {
    app.post_job_raw(&app.alice, "hostile", body.into()).send().await.unwrap()
}

/// Expects 422 `validation-failed` naming `pointer` among its errors.
async fn refused_at(response: reqwest::Response, pointer: &str) -> Value {
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    let pointers: Vec<&str> =
        problem["errors"].as_array().unwrap().iter().filter_map(|e| e["pointer"].as_str()).collect();
    assert!(pointers.contains(&pointer), "expected a violation at {pointer}: {problem:#}");
    problem
}

/// A job body with `input` spliced in as raw JSON text.
fn job_with_input(input: &str) -> String {
    format!(r#"{{"task": "summarize", "input": {input}}}"#)
}

/// The request deadline of the slow-client tests.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1_000);

async fn deeply_nested_json_is_refused_with_a_problem(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let deep = "[".repeat(100_000);
    let problem = refused_at(post(&app, deep.clone()).await, "").await;
    assert!(problem["detail"].as_str().unwrap().contains("recursion limit"), "{problem:#}");
    refused_at(post(&app, job_with_input(&deep)).await, "").await;
}

async fn numbers_beyond_a_double_or_its_exact_integers_are_refused_and_large_ones_checked_by_the_schema(
    backend: Backend,
) {
    let app = TestApp::spawn(backend).await;
    for number in ["1e400".to_owned(), "-1e400".to_owned(), "9".repeat(400)] {
        let problem =
            refused_at(post(&app, job_with_input(&format!(r#"{{"text": "a", "max_words": {number}}}"#))).await, "")
                .await;
        assert!(problem["detail"].as_str().unwrap().contains("number out of range"), "{problem:#}");
    }
    // An integer a double cannot hold exactly would share its fingerprint
    // with its neighbour while being stored apart: refused where it is.
    let problem = refused_at(
        post(&app, job_with_input(r#"{"text": "a", "max_words": 9007199254740993}"#)).await,
        "/input/max_words",
    )
    .await;
    assert!(problem["detail"].as_str().unwrap().contains("2^53"), "{problem:#}");
    // Within a double's range, the input schema decides.
    refused_at(post(&app, job_with_input(r#"{"text": "a", "max_words": 1e300}"#)).await, "/input/max_words").await;
    refused_at(
        post(&app, job_with_input(&format!(r#"{{"text": "a", "max_words": {}}}"#, "9".repeat(300)))).await,
        "/input/max_words",
    )
    .await;
}

async fn duplicate_object_keys_are_refused_because_they_make_the_intent_ambiguous(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let problem =
        refused_at(post(&app, r#"{"task": "summarize", "task": "other", "input": {"text": "a"}}"#).await, "/task")
            .await;
    assert!(problem["detail"].as_str().unwrap().contains("duplicate"), "{problem:#}");
    refused_at(post(&app, job_with_input(r#"{"text": "a", "text": "b"}"#)).await, "/input/text").await;
    refused_at(
        post(&app, job_with_input(r#"{"text": "a", "nested": [{"k/~": 1, "k/~": 2}]}"#)).await,
        "/input/nested/0/k~1~0",
    )
    .await;
}

async fn nul_characters_in_strings_and_member_names_are_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    refused_at(post(&app, job_with_input(r#"{"text": "a\u0000b"}"#)).await, "/input/text").await;
    refused_at(post(&app, job_with_input(r#"{"text": "a", "x\u0000": 1}"#)).await, "/input/x\u{0}").await;
    refused_at(post(&app, r#"{"task": "summ\u0000arize", "input": {"text": "a"}}"#).await, "/task").await;
    // Nothing was stored on either backend.
    let jobs: Value = app.get(&app.alice, "/jobs").await.json().await.unwrap();
    assert_eq!(jobs["jobs"], serde_json::json!([]));
}

async fn a_nul_byte_in_the_idempotency_key_is_refused_by_the_http_layer(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = job_with_input(r#"{"text": "a"}"#);
    let head = format!(
        "POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\nIdempotency-Key: a",
        app.alice,
        body.len()
    );
    let request = [head.as_bytes(), b"\0b\r\n\r\n", body.as_bytes()].concat();
    let answer = exchange(&app, &request, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // The quoted form cannot carry one either: only \" and \\ are escapes.
    let quoted = app.post_job_raw(&app.alice, r#""a\0b""#, job_with_input(r#"{"text": "a"}"#)).send().await.unwrap();
    expect_problem(quoted, StatusCode::BAD_REQUEST, "idempotency-key-invalid").await;
}

async fn an_object_of_10000_members_is_refused_with_a_bounded_problem(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let members: Vec<String> = (0..10_000).map(|i| format!(r#""k{i}": {i}"#)).collect();
    let input = format!(r#"{{"text": "a", {}}}"#, members.join(", "));
    let started = Instant::now();
    let response = post(&app, job_with_input(&input)).await;
    let problem = refused_at(response, "/input").await;
    assert!(started.elapsed() < Duration::from_secs(5), "answered in {:?}", started.elapsed());
    let errors = problem["errors"].as_array().unwrap();
    assert!(errors.len() <= 101, "the problem lists at most 100 violations and says how many more: {}", errors.len());
    assert!(problem.to_string().len() < 64 * 1024, "a bounded answer");
    // The same members at the top level are unknown fields, listed as boundedly.
    let top = format!(r#"{{"task": "summarize", "input": {{"text": "a"}}, {}}}"#, members.join(", "));
    let problem = refused_at(post(&app, top).await, "/k0").await;
    assert!(problem["errors"].as_array().unwrap().len() <= 101);
}

async fn a_body_over_the_limit_is_refused_with_413_declared_or_chunked(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let big = job_with_input(&format!(r#"{{"text": "{}"}}"#, "a".repeat(300 * 1024)));
    expect_problem(post(&app, big.clone()).await, StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large").await;
    // Without a Content-Length, counting the chunks refuses it just the same.
    let mut request = format!(
        "POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nIdempotency-Key: chunked\r\nConnection: close\r\n\r\n",
        app.alice
    )
    .into_bytes();
    for chunk in big.as_bytes().chunks(8192) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let answer = exchange(&app, &request, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("payload-too-large"), "{answer}");
}

/// The server in a process of its own, whose peak memory is measured while
/// it drains a 12 MiB chunked body: it keeps no more than the 256 KiB limit.
async fn a_12_mib_body_is_refused_holding_no_more_than_the_limit(backend: Backend) {
    use crate::common::processes::{database, peak_memory, reset_peak_memory, resident_memory};
    let (database_url, _pool, token) = database(backend).await;
    let (server, address, _log) = crate::common::spawn_server_logged(&database_url, None, &[], &[]).await;
    let pid = server.id().unwrap();
    let body = job_with_input(&format!(r#"{{"text": "{}"}}"#, "a".repeat(12 << 20)));
    let mut request = format!(
        "POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nIdempotency-Key: huge\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for chunk in body.as_bytes().chunks(64 * 1024) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    // A first job warms the server's paths up (its tokenizer, its schemas).
    let warm = reqwest::Client::new()
        .post(format!("http://{address}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "warm")
        .json(&serde_json::json!({"task": "summarize", "input": {"text": "warm"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(warm.status(), StatusCode::CREATED);

    reset_peak_memory(pid);
    let before = resident_memory(pid);
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let (mut reader, mut writer) = stream.split();
    let (_, answer) = tokio::join!(writer.write_all(&request), async {
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), reader.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    });
    let grew = peak_memory(pid).saturating_sub(before);

    assert!(answer.starts_with("HTTP/1.1 413") && answer.contains("payload-too-large"), "{answer}");
    // Measured: 1.5 to 2.2 MB draining it; about 18 MB when the body is
    // kept whole before its size is checked.
    assert!(grew < 4 << 20, "the server's peak memory grew by {grew} bytes draining a 12 MiB body");
}

/// Connects, sends `request`, and reads what comes back until the server
/// closes the connection or `patience` runs out.
async fn exchange(app: &TestApp, request: &[u8], patience: Duration) -> String {
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(patience, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Sends `head` at once, then `trickle` a byte every 100 ms until the server
/// answers or closes; what the server sent, and when it was done.
async fn trickle(app: &TestApp, head: String, trickle: &'static [u8]) -> (String, Duration) {
    let (mut reader, mut writer) = TcpStream::connect(app.addr).await.unwrap().into_split();
    writer.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let trickler = tokio::spawn(async move {
        for byte in trickle.iter().cycle() {
            if writer.write_all(std::slice::from_ref(byte)).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut answer = Vec::new();
    // Bounded: a server that never ends the exchange fails the test below.
    let _ = tokio::time::timeout(REQUEST_TIMEOUT * 5, reader.read_to_end(&mut answer)).await;
    let elapsed = started.elapsed();
    trickler.abort();
    (String::from_utf8_lossy(&answer).into_owned(), elapsed)
}

async fn a_body_trickled_byte_by_byte_ends_in_a_timeout_answer_within_the_request_deadline(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.server.request_timeout = REQUEST_TIMEOUT).await;
    let head = format!(
        "POST /jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nIdempotency-Key: slow\r\n\r\n",
        app.alice
    );
    let (answer, elapsed) = trickle(&app, head, b"{\"task\": \"summarize\"").await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("application/problem+json") && answer.contains("request-timeout"), "{answer}");
    assert!(elapsed < REQUEST_TIMEOUT + Duration::from_millis(1_500), "answered after {elapsed:?}");
}

async fn headers_trickled_byte_by_byte_end_in_a_closed_connection_within_the_request_deadline(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.server.request_timeout = REQUEST_TIMEOUT).await;
    let (answer, elapsed) = trickle(&app, "POST /jobs HTTP/1.1\r\nHost: x\r\n".to_owned(), b"X-Slow: a\r\n").await;
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(elapsed < REQUEST_TIMEOUT + Duration::from_millis(1_500), "closed after {elapsed:?}");
}

on_both_backends!(
    deeply_nested_json_is_refused_with_a_problem,
    numbers_beyond_a_double_or_its_exact_integers_are_refused_and_large_ones_checked_by_the_schema,
    duplicate_object_keys_are_refused_because_they_make_the_intent_ambiguous,
    nul_characters_in_strings_and_member_names_are_refused,
    a_nul_byte_in_the_idempotency_key_is_refused_by_the_http_layer,
    an_object_of_10000_members_is_refused_with_a_bounded_problem,
    a_body_over_the_limit_is_refused_with_413_declared_or_chunked,
    a_12_mib_body_is_refused_holding_no_more_than_the_limit,
    a_body_trickled_byte_by_byte_ends_in_a_timeout_answer_within_the_request_deadline,
    headers_trickled_byte_by_byte_end_in_a_closed_connection_within_the_request_deadline,
);

/// Property tests of the two parsers of untrusted bytes that decide I1 and
/// I2: the fingerprint of a body (through the strict JSON parser the API
/// uses) and the `Idempotency-Key` parser.
mod properties {
    use onejob::domain::{Fingerprint, IdempotencyKey};
    use onejob::http::json;
    use proptest::collection::{btree_map, vec};
    use proptest::prelude::*;
    use serde_json::Value;

    /// Any string but one holding NUL (which the API refuses).
    fn text() -> impl Strategy<Value = String> {
        vec(any::<char>(), 0..8).prop_map(|chars| chars.into_iter().map(|c| if c == '\0' { 'z' } else { c }).collect())
    }

    /// Any JSON value the API accepts. Floats are never whole numbers, so
    /// that two values that differ as JSON data differ as numbers too (RFC
    /// 8785 writes 1 and 1.0 alike: they are one JSON number).
    fn json_value() -> impl Strategy<Value = Value> {
        let exact = json::MAX_EXACT_INTEGER as i64;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-exact..=exact).prop_map(Value::from),
            (-1e12f64..1e12).prop_filter("not a whole number", |f| f.fract() != 0.0).prop_map(Value::from),
            text().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..6).prop_map(Value::Array),
                btree_map(text(), inner, 0..6).prop_map(|members| Value::Object(members.into_iter().collect())),
            ]
        })
    }

    /// A little generator driven by a test's seed.
    struct Dice(u64);

    impl Dice {
        fn roll(&mut self, sides: usize) -> usize {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 33) % sides as u64) as usize
        }

        fn space(&mut self) -> &'static str {
            ["", " ", "\n", "\t", "\r\n  ", "   "][self.roll(6)]
        }
    }

    /// `value` as JSON text with its members in a shuffled order, random
    /// whitespace between tokens, and some characters written as `\u` escapes.
    fn render(value: &Value, dice: &mut Dice) -> String {
        let space = dice.space();
        let inner = match value {
            Value::String(text) => {
                let mut out = String::from("\"");
                for c in text.chars() {
                    match c {
                        'a'..='z' if dice.roll(3) == 0 => out.push_str(&format!("\\u{:04x}", c as u32)),
                        _ => {
                            let quoted = serde_json::to_string(&c.to_string()).unwrap();
                            out.push_str(&quoted[1..quoted.len() - 1]);
                        }
                    }
                }
                out.push('"');
                out
            }
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(|item| render(item, dice)).collect();
                format!("[{}]", items.join(","))
            }
            Value::Object(members) => {
                let mut members: Vec<(&String, &Value)> = members.iter().collect();
                for i in (1..members.len()).rev() {
                    members.swap(i, dice.roll(i + 1));
                }
                let members: Vec<String> = members
                    .iter()
                    .map(|(name, value)| {
                        format!("{}:{}", render(&Value::String((*name).clone()), dice), render(value, dice))
                    })
                    .collect();
                format!("{{{}}}", members.join(","))
            }
            other => other.to_string(),
        };
        format!("{space}{inner}{}", dice.space())
    }

    /// `value` with one leaf changed (or one element added to an empty container).
    fn change_one(value: &Value, dice: &mut Dice) -> Value {
        match value {
            Value::Null => Value::from(0),
            Value::Bool(b) => Value::Bool(!b),
            Value::Number(n) => match n.as_i64() {
                Some(i) if i < json::MAX_EXACT_INTEGER as i64 => Value::from(i + 1),
                Some(i) => Value::from(i - 1),
                None => Value::from(n.as_f64().unwrap() * 2.0 + 0.5),
            },
            Value::String(text) => Value::String(format!("{text}!")),
            Value::Array(items) if items.is_empty() => Value::Array(vec![Value::Null]),
            Value::Array(items) => {
                let mut items = items.clone();
                let i = dice.roll(items.len());
                items[i] = change_one(&items[i], dice);
                Value::Array(items)
            }
            Value::Object(members) if members.is_empty() => serde_json::json!({ "": null }),
            Value::Object(members) => {
                let mut members = members.clone();
                let name = members.keys().nth(dice.roll(members.len())).unwrap().clone();
                let changed = change_one(&members[&name], dice);
                members.insert(name, changed);
                Value::Object(members)
            }
        }
    }

    fn fingerprint_of_text(text: &str) -> Fingerprint {
        let input = json::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{e:?} in {text}"));
        Fingerprint::of_job("summarize", &input, "sim-fast")
    }

    /// What the README says a key is, written from the README alone.
    fn documented_key(raw: &[u8]) -> Option<String> {
        let raw = raw.trim_ascii();
        let key = if raw.first() == Some(&b'"') {
            let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
            let mut key = Vec::new();
            let mut i = 0;
            while i < inner.len() {
                match inner[i] {
                    b'\\' if matches!(inner.get(i + 1), Some(b'"' | b'\\')) => {
                        key.push(inner[i + 1]);
                        i += 2;
                    }
                    b'\\' | b'"' => return None,
                    b => {
                        key.push(b);
                        i += 1;
                    }
                }
            }
            key
        } else {
            raw.to_vec()
        };
        let visible = key.iter().all(|b| (b'!'..=b'~').contains(b));
        (visible && (1..=255).contains(&key.len())).then(|| String::from_utf8(key).unwrap())
    }

    /// Header values, biased towards the bytes that matter to the rules.
    fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
        let tricky = prop::sample::select(vec![b'"', b'\\', b' ', b'\t', b'a', b'!', b'~', 0, 0x7f, 0xff, b'\n']);
        prop_oneof![
            vec(any::<u8>(), 0..300),
            vec(tricky, 0..12),
            (250usize..260).prop_map(|n| vec![b'k'; n]),
            (250usize..260).prop_map(|n| [b"\"".as_slice(), &vec![b'k'; n], b"\""].concat()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn the_fingerprint_is_equal_for_every_member_order_whitespace_and_escape_variant(value in json_value(), a: u64, b: u64) {
            let direct = Fingerprint::of_job("summarize", &value, "sim-fast");
            prop_assert_eq!(fingerprint_of_text(&render(&value, &mut Dice(a))), direct);
            prop_assert_eq!(fingerprint_of_text(&render(&value, &mut Dice(b))), direct);
        }

        #[test]
        fn the_fingerprint_differs_for_any_change_of_a_value(value in json_value(), seed: u64) {
            let changed = change_one(&value, &mut Dice(seed));
            prop_assert_ne!(&changed, &value);
            prop_assert_ne!(Fingerprint::of_job("summarize", &changed, "sim-fast"), Fingerprint::of_job("summarize", &value, "sim-fast"));
        }

        #[test]
        fn the_idempotency_key_parser_accepts_exactly_what_the_readme_says(raw in header_bytes()) {
            let parsed = IdempotencyKey::parse(&raw).ok().map(|key| key.as_str().to_owned());
            prop_assert_eq!(parsed, documented_key(&raw));
        }

        #[test]
        fn every_key_can_be_sent_quoted_and_a_bare_one_names_the_same_key(key in vec(b'!'..=b'~', 1..=255)) {
            let escaped: Vec<u8> = key.iter().flat_map(|&b| if b == b'"' || b == b'\\' { vec![b'\\', b] } else { vec![b] }).collect();
            let quoted = IdempotencyKey::parse(&[b"\"".as_slice(), &escaped, b"\""].concat()).unwrap();
            prop_assert_eq!(quoted.as_str().as_bytes(), key.as_slice());
            // A value that begins with a quote is read as the quoted form.
            if key[0] != b'"' {
                prop_assert_eq!(IdempotencyKey::parse(&key).unwrap(), quoted);
            }
        }

        #[test]
        fn the_strict_json_parser_never_panics(bytes in vec(any::<u8>(), 0..200)) {
            let _ = json::parse(&bytes);
        }
    }
}
