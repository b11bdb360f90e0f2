//! The `openai` provider against a real HTTP server that answers with the
//! shapes of OpenAI's chat completions API, recorded from its documentation
//! and error responses: success, refusals, prose instead of JSON, and the
//! error bodies of 400, 401, 429, 500, 503 and 504. Each must be classified
//! as DESIGN.md says, and the attempt id must travel as the request id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use onejob::config::Settings;
use onejob::domain::AttemptId;
use onejob::provider::{self, FailureClass, ProviderRequest};
use serde_json::{Value, json};

const KEY_VARIABLE: &str = "ONEJOB_TEST_OPENAI_KEY";
const KEY: &str = "sk-test-recorded-shapes";

type Seen = Arc<Mutex<Vec<(HeaderMap, Value)>>>;

fn chat_completion(content: Value) -> Value {
    json!({
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": null, "annotations": []},
            "logprobs": null,
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 1117, "completion_tokens": 46, "total_tokens": 1163,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default",
        "system_fingerprint": "fp_fc9f1d7035"
    })
}

fn error(status: u16, message: &str, kind: &str, code: Value) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    (StatusCode::from_u16(status).unwrap(), Json(body)).into_response()
}

async fn answer(State(seen): State<Seen>, Path(scenario): Path<String>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    seen.lock().unwrap().push((headers, body));
    match scenario.as_str() {
        "ok" => Json(chat_completion(json!("{\"summary\": \"a fox\", \"word_count\": 2}"))).into_response(),
        "prose" => Json(chat_completion(json!("Here is a summary: a fox."))).into_response(),
        "refusal" => {
            let mut body = chat_completion(Value::Null);
            body["choices"][0]["message"]["refusal"] = json!("I'm sorry, I can't help with that.");
            Json(body).into_response()
        }
        "unauthorized" => error(401, "Incorrect API key provided: sk-test-***apes. You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", json!("invalid_api_key")),
        "context" => error(400, "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.", "invalid_request_error", json!("context_length_exceeded")),
        "rate-limited" => error(429, "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29876, Requested 1163. Please try again in 2.078s.", "tokens", json!("rate_limit_exceeded")),
        "server-error" => error(500, "The server had an error while processing your request. Sorry about that!", "server_error", Value::Null),
        "overloaded" => error(503, "The engine is currently overloaded, please try again later", "server_error", Value::Null),
        "gateway-timeout" => (StatusCode::GATEWAY_TIMEOUT, "<html><body><h1>504 Gateway Time-out</h1></body></html>").into_response(),
        _ => error(404, "unknown scenario", "invalid_request_error", Value::Null),
    }
}

fn provider_settings(base_url: &str) -> Settings {
    let text = format!(
        r#"
        [providers.openai]
        kind = "openai"
        base_url = "{base_url}"
        api_key_env = "{KEY_VARIABLE}"
        model = "gpt-4o-mini"
        temperature = 0.0
        max_output_tokens = 256
        "#
    );
    let settings = Settings::parse(&text).unwrap();
    settings.validate().unwrap();
    settings
}

/// Runs `test`, a test of this module, alone in a child process of this test
/// binary with the provider's key variable set; fails unless it ran there
/// and passed. (The provider reads its key from the environment, and the
/// environment cannot be set safely while other tests of this binary run.)
async fn in_a_child_with_the_key(test: &str) {
    let module = module_path!().split_once("::").map_or("", |(_crate, module)| module);
    let name = format!("{module}::{test}");
    let output = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--include-ignored", "--test-threads=1"])
        .env(KEY_VARIABLE, KEY)
        .kill_on_drop(true)
        .output()
        .await
        .expect("the test binary runs again");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{name} failed in its own process:\n{stdout}\n{stderr}");
    assert!(stdout.contains("test result: ok. 1 passed"), "{name} did not run in its own process:\n{stdout}\n{stderr}");
}

#[tokio::test]
async fn recorded_openai_answers_are_classified_and_the_attempt_id_travels() {
    if std::env::var(KEY_VARIABLE).as_deref() != Ok(KEY) {
        return in_a_child_with_the_key("recorded_openai_answers_are_classified_and_the_attempt_id_travels").await;
    }
    let seen: Seen = Arc::default();
    let app = Router::new().route("/{scenario}/v1/chat/completions", post(answer)).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let call = |scenario: &str| {
        let settings = provider_settings(&format!("http://{addr}/{scenario}/v1"));
        async move {
            let providers = provider::build(&settings, None).unwrap();
            let request = ProviderRequest {
                request_id: AttemptId::new().to_string(),
                task: "summarize".into(),
                input: json!({"text": "a quick brown fox"}),
                messages: vec![json!({"role": "user", "content": "Summarize: a quick brown fox"})],
                temperature: 0.0,
                output_schema: Some(json!({"type": "object"})),
            };
            (request.request_id.clone(), providers["openai"].call(&request).await)
        }
    };

    let (attempt_id, ok) = call("ok").await;
    assert_eq!(ok.unwrap().output, json!({"summary": "a fox", "word_count": 2}));
    let (headers, body) = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(headers["x-client-request-id"], attempt_id);
    assert_eq!(headers["idempotency-key"], attempt_id);
    assert_eq!((body["model"].clone(), body["temperature"].clone(), body["max_tokens"].clone()), (json!("gpt-4o-mini"), json!(0.0), json!(256)));
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);
    assert!(body.get("response_format").is_none(), "response_format only where the provider is marked as supporting it");
    assert!(body.get("onejob_input").is_none(), "nothing non-standard goes to a real provider");

    let expected: HashMap<&str, (FailureClass, &str, Option<u16>, &str)> = HashMap::from([
        ("prose", (FailureClass::Definitive { retryable: false }, "contract-violation", None, "not JSON")),
        ("refusal", (FailureClass::Definitive { retryable: false }, "contract-violation", None, "I'm sorry")),
        ("unauthorized", (FailureClass::Definitive { retryable: false }, "provider-error", Some(401), "Incorrect API key")),
        ("context", (FailureClass::Definitive { retryable: false }, "provider-error", Some(400), "maximum context length")),
        ("rate-limited", (FailureClass::Definitive { retryable: true }, "provider-error", Some(429), "Rate limit reached")),
        ("server-error", (FailureClass::Definitive { retryable: true }, "provider-error", Some(500), "had an error")),
        ("overloaded", (FailureClass::Definitive { retryable: true }, "provider-error", Some(503), "overloaded")),
        ("gateway-timeout", (FailureClass::Ambiguous, "provider-error", Some(504), "Gateway Time-out")),
    ]);
    for (scenario, (class, kind, status, message)) in expected {
        let error = call(scenario).await.1.unwrap_err();
        assert_eq!((error.class, error.kind, error.status), (class, kind, status), "{scenario}: {error}");
        assert!(error.message.contains(message), "{scenario}: {}", error.message);
    }

    // Nobody listens: the request never left, so a retry is safe.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let settings = provider_settings(&format!("http://127.0.0.1:{port}/v1"));
    let providers = provider::build(&settings, None).unwrap();
    let request = ProviderRequest {
        request_id: AttemptId::new().to_string(),
        task: "t".into(),
        input: json!({}),
        messages: vec![],
        temperature: 0.0,
        output_schema: None,
    };
    let refused = providers["openai"].call(&request).await.unwrap_err();
    assert_eq!((refused.class, refused.kind), (FailureClass::Definitive { retryable: true }, "connection-failed"));
    assert!(providers["openai"].status(AttemptId::new()).await.is_none(), "OpenAI has no status lookup");
}
