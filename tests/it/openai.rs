//! The `openai` and `openai-responses` providers against a real HTTP server
//! that answers with the shapes of OpenAI's chat completions and Responses
//! APIs, recorded from its reference and error responses: success,
//! refusals, answers cut off at the limit or filtered, prose instead of
//! JSON, background responses queued, completed, failed, incomplete and
//! cancelled, and the error bodies of 400, 401, 429, 500, 503 and 504. Each
//! must be classified as DESIGN.md says, and the attempt id must travel as
//! the request id.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use onejob::config::Settings;
use onejob::domain::AttemptId;
use onejob::provider::{self, FailureClass, ProviderRequest, Reply, RequestRef, RequestStatus};
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

async fn answer(
    State(seen): State<Seen>,
    Path(scenario): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    seen.lock().unwrap().push((headers, body));
    match scenario.as_str() {
        "ok" => Json(chat_completion(json!("{\"summary\": \"a fox\", \"word_count\": 2}"))).into_response(),
        "prose" => Json(chat_completion(json!("Here is a summary: a fox."))).into_response(),
        "refusal" => {
            let mut body = chat_completion(Value::Null);
            body["choices"][0]["message"]["refusal"] = json!("I'm sorry, I can't help with that.");
            Json(body).into_response()
        }
        "length" => {
            let mut body = chat_completion(json!("{\"summary\": \"a f"));
            body["choices"][0]["finish_reason"] = json!("length");
            Json(body).into_response()
        }
        "filtered" => {
            let mut body = chat_completion(json!(""));
            body["choices"][0]["finish_reason"] = json!("content_filter");
            Json(body).into_response()
        }
        "unauthorized" => error(
            401,
            "Incorrect API key provided: sk-test-***apes. You can find your API key at https://platform.openai.com/account/api-keys.",
            "invalid_request_error",
            json!("invalid_api_key"),
        ),
        "context" => error(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.",
            "invalid_request_error",
            json!("context_length_exceeded"),
        ),
        "rate-limited" => error(
            429,
            "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29876, Requested 1163. Please try again in 2.078s.",
            "tokens",
            json!("rate_limit_exceeded"),
        ),
        "server-error" => error(
            500,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            Value::Null,
        ),
        "overloaded" => {
            error(503, "The engine is currently overloaded, please try again later", "server_error", Value::Null)
        }
        "gateway-timeout" => {
            (StatusCode::GATEWAY_TIMEOUT, "<html><body><h1>504 Gateway Time-out</h1></body></html>").into_response()
        }
        _ => error(404, "unknown scenario", "invalid_request_error", Value::Null),
    }
}

fn provider_settings(base_url: &str) -> Settings {
    provider_settings_of("openai", "gpt-4o-mini", base_url, "")
}

fn provider_settings_of(kind: &str, model: &str, base_url: &str, extra: &str) -> Settings {
    let text = format!(
        r#"
        [providers.openai]
        kind = "{kind}"
        base_url = "{base_url}"
        api_key_env = "{KEY_VARIABLE}"
        model = "{model}"
        temperature = 0.0
        max_output_tokens = 256
        poll_interval_ms = 10
        {extra}
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
                trace: None,
                deltas: None,
                callback_url: None,
            };
            (
                request.request_id.clone(),
                provider::call(providers["openai"].as_ref(), &request, async |_: &str| {}, std::future::pending())
                    .await,
            )
        }
    };

    let (attempt_id, ok) = call("ok").await;
    assert_eq!(ok.unwrap().output, json!({"summary": "a fox", "word_count": 2}));
    let (headers, body) = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(headers["authorization"], format!("Bearer {KEY}"));
    assert_eq!(headers["x-client-request-id"], attempt_id);
    assert_eq!(headers["idempotency-key"], attempt_id);
    assert_eq!(
        (body["model"].clone(), body["temperature"].clone(), body["max_tokens"].clone()),
        (json!("gpt-4o-mini"), json!(0.0), json!(256))
    );
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);
    assert!(
        body.get("response_format").is_none(),
        "response_format only where the provider is marked as supporting it"
    );
    assert!(body.get("onejob_input").is_none(), "nothing non-standard goes to a real provider");

    let expected: HashMap<&str, (FailureClass, &str, Option<u16>, &str)> = HashMap::from([
        ("prose", (FailureClass::Definitive { retryable: false }, "contract-violation", None, "not JSON")),
        ("refusal", (FailureClass::Definitive { retryable: false }, "refusal", None, "I'm sorry")),
        (
            "length",
            (FailureClass::Definitive { retryable: false }, "output-truncated", None, "cut off at the token limit"),
        ),
        ("filtered", (FailureClass::Definitive { retryable: false }, "content-filtered", None, "content filter")),
        (
            "unauthorized",
            (FailureClass::Definitive { retryable: false }, "provider-error", Some(401), "Incorrect API key"),
        ),
        (
            "context",
            (FailureClass::Definitive { retryable: false }, "provider-error", Some(400), "maximum context length"),
        ),
        (
            "rate-limited",
            (FailureClass::Definitive { retryable: true }, "provider-error", Some(429), "Rate limit reached"),
        ),
        ("server-error", (FailureClass::Definitive { retryable: true }, "provider-error", Some(500), "had an error")),
        ("overloaded", (FailureClass::Definitive { retryable: true }, "provider-error", Some(503), "overloaded")),
        ("gateway-timeout", (FailureClass::Ambiguous, "provider-error", Some(504), "Gateway Time-out")),
    ]);
    for (scenario, (class, kind, status, message)) in expected {
        let error = call(scenario).await.1.unwrap_err();
        assert_eq!((error.class, error.kind.as_str(), error.status), (class, kind, status), "{scenario}: {error}");
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
        trace: None,
        deltas: None,
        callback_url: None,
    };
    let refused = providers["openai"].send(&request).await.unwrap_err();
    assert_eq!(
        (refused.class, refused.kind.as_str()),
        (FailureClass::Definitive { retryable: true }, "connection-failed")
    );
    let asked = RequestRef { client_id: &request.request_id, provider_id: None, output: request.output_kind() };
    assert!(providers["openai"].status(asked).await.is_none(), "chat completions have no status lookup");

    // A reasoning model's limit is max_completion_tokens; a strict schema
    // goes as response_format, named after the task.
    let settings = provider_settings_of("openai", "o4-mini", &format!("http://{addr}/ok/v1"), "response_format = true");
    let providers = provider::build(&settings, None).unwrap();
    let request =
        ProviderRequest { task: "summarize.v2".into(), output_schema: Some(json!({"type": "object"})), ..request };
    providers["openai"].send(&request).await.unwrap();
    let (_, body) = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!((body.get("max_tokens"), &body["max_completion_tokens"]), (None, &json!(256)), "{body}");
    let format = &body["response_format"];
    assert_eq!(
        (&format["type"], &format["json_schema"]["name"], &format["json_schema"]["strict"]),
        (&json!("json_schema"), &json!("summarize_v2"), &json!(true))
    );
    assert_eq!(
        providers["openai"].settings().tokenizer(),
        onejob::config::Tokenizer::O200kBase,
        "the model family's encoding"
    );
}

/// A response object as OpenAI's reference shows one.
fn response_object(id: &str, status: &str) -> Value {
    json!({
        "id": id, "object": "response", "created_at": 1741476777, "status": status, "background": true,
        "error": null, "incomplete_details": null, "instructions": "You summarize text.", "max_output_tokens": 256,
        "model": "gpt-4o-2024-08-06", "output": [], "parallel_tool_calls": true, "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null}, "store": true, "temperature": 0.0,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
        "usage": null, "user": null, "metadata": {}
    })
}

fn with_usage(mut object: Value) -> Value {
    object["usage"] = json!({"input_tokens": 328, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 52,
                             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 380});
    object
}

/// What response `id` of a scenario says when read: each scenario's
/// background response ends its own way.
fn recorded_response(scenario: &str, id: &str) -> Value {
    let message = |status: &str, part: Value| {
        json!([{"type": "message", "id": "msg_67ccd3acc8d48190a77525dc6de64b4104becb25c1f9e9a4",
                                                      "status": status, "role": "assistant", "content": [part]}])
    };
    match scenario {
        "completes" => {
            let mut object = with_usage(response_object(id, "completed"));
            let text = json!({"type": "output_text", "text": "{\"summary\": \"a fox\", \"word_count\": 2}", "annotations": []});
            object["output"] = message("completed", text);
            object
        }
        "fails" => {
            let mut object = response_object(id, "failed");
            object["error"] = json!({"code": "server_error", "message": "The model failed to generate a response."});
            object
        }
        "cut-off" => {
            let mut object = with_usage(response_object(id, "incomplete"));
            object["incomplete_details"] = json!({"reason": "max_output_tokens"});
            object["output"] =
                message("incomplete", json!({"type": "output_text", "text": "{\"summary\": \"a", "annotations": []}));
            object
        }
        "refuses" => {
            let mut object = with_usage(response_object(id, "completed"));
            object["output"] = message(
                "completed",
                json!({"type": "refusal", "refusal": "I'm sorry, I cannot assist with that request."}),
            );
            object
        }
        _ => response_object(id, "cancelled"),
    }
}

type Polls = Arc<Mutex<Vec<String>>>;

async fn create_response(
    State((seen, _)): State<(Seen, Polls)>,
    Path(scenario): Path<String>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    seen.lock().unwrap().push((headers, body));
    match scenario.as_str() {
        "unauthorized" => error(
            401,
            "Incorrect API key provided: sk-test-***apes.",
            "invalid_request_error",
            json!("invalid_api_key"),
        ),
        "invalid" => error(
            400,
            "Invalid schema for response_format 'summarize': In context=(), 'additionalProperties' is required to be supplied and to be false.",
            "invalid_request_error",
            json!("invalid_json_schema"),
        ),
        "rate-limited" => error(
            429,
            "Rate limit reached for gpt-4o in organization org-abc on requests per min (RPM): Limit 500, Used 500, Requested 1.",
            "requests",
            json!("rate_limit_exceeded"),
        ),
        "server-error" => error(
            500,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            Value::Null,
        ),
        _ => Json(response_object(&format!("resp_{scenario}"), "queued")).into_response(),
    }
}

/// The first read of a background response finds it in progress; the next ones, done.
async fn read_response(
    State((_, polls)): State<(Seen, Polls)>,
    Path((scenario, id)): Path<(String, String)>,
) -> Response {
    let mut polls = polls.lock().unwrap();
    polls.push(id.clone());
    if id != format!("resp_{scenario}") {
        return error(404, &format!("Response with id '{id}' not found."), "invalid_request_error", Value::Null);
    }
    if polls.iter().filter(|p| **p == id).count() == 1 {
        return Json(response_object(&id, "in_progress")).into_response();
    }
    Json(recorded_response(&scenario, &id)).into_response()
}

async fn cancel_response(Path((_, id)): Path<(String, String)>) -> Response {
    Json(with_usage(response_object(&id, "cancelled"))).into_response()
}

#[tokio::test]
async fn recorded_responses_api_answers_are_classified_followed_and_canceled() {
    if std::env::var(KEY_VARIABLE).as_deref() != Ok(KEY) {
        return in_a_child_with_the_key("recorded_responses_api_answers_are_classified_followed_and_canceled").await;
    }
    let seen: Seen = Arc::default();
    let polls: Polls = Arc::default();
    let app = Router::new()
        .route("/{scenario}/v1/responses", post(create_response))
        .route("/{scenario}/v1/responses/{id}", get(read_response))
        .route("/{scenario}/v1/responses/{id}/cancel", post(cancel_response))
        .with_state((seen.clone(), polls.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let request = ProviderRequest {
        request_id: AttemptId::new().to_string(),
        task: "summarize".into(),
        input: json!({"text": "a quick brown fox"}),
        messages: vec![
            json!({"role": "system", "content": "You summarize text."}),
            json!({"role": "user", "content": "Summarize: a quick brown fox"}),
        ],
        temperature: 0.0,
        output_schema: Some(json!({"type": "object", "properties": {}, "additionalProperties": false})),
        trace: None,
        deltas: None,
        callback_url: None,
    };
    let provider_at = |scenario: &str| {
        let settings = provider_settings_of(
            "openai-responses",
            "gpt-4o",
            &format!("http://{addr}/{scenario}/v1"),
            "response_format = true",
        );
        provider::build(&settings, None).unwrap().remove("openai").unwrap()
    };

    // The create: in the background, stored, the schema strict; the id
    // comes back at once, and is handed over before anything is read.
    let completes = provider_at("completes");
    assert_eq!(completes.send(&request).await.unwrap(), Reply::Accepted("resp_completes".into()));
    let (headers, body) = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        (headers["x-client-request-id"].to_str().unwrap(), headers["authorization"].to_str().unwrap()),
        (request.request_id.as_str(), format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        (&body["background"], &body["store"], &body["max_output_tokens"]),
        (&json!(true), &json!(true), &json!(256)),
        "{body}"
    );
    assert_eq!(
        (&body["instructions"], &body["input"][0]["role"]),
        (&json!("You summarize text."), &json!("user")),
        "{body}"
    );
    assert_eq!(
        (&body["text"]["format"]["type"], &body["text"]["format"]["strict"]),
        (&json!("json_schema"), &json!(true)),
        "{body}"
    );
    assert!(body.get("onejob_input").is_none() && body.get("messages").is_none(), "{body}");
    let handed = Mutex::new(None);
    let done = provider::call(
        completes.as_ref(),
        &request,
        async |id: &str| {
            assert!(polls.lock().unwrap().iter().all(|p| p != id), "the id is handed over before the first read");
            *handed.lock().unwrap() = Some(id.to_owned());
        },
        std::future::pending(),
    )
    .await
    .unwrap();
    assert_eq!(handed.into_inner().unwrap().as_deref(), Some("resp_completes"));
    assert_eq!(done.output, json!({"summary": "a fox", "word_count": 2}));
    assert_eq!(done.usage.map(|u| (u.prompt_tokens, u.completion_tokens)), Some((328, 52)));

    // How each background response's end is classified.
    let ends: [(&str, FailureClass, &str); 3] = [
        ("fails", FailureClass::Definitive { retryable: true }, "provider-error"),
        ("cut-off", FailureClass::Definitive { retryable: false }, "output-truncated"),
        ("refuses", FailureClass::Definitive { retryable: false }, "refusal"),
    ];
    for (scenario, class, kind) in ends {
        let error =
            provider::call(provider_at(scenario).as_ref(), &request, async |_: &str| {}, std::future::pending())
                .await
                .unwrap_err();
        assert_eq!((error.class, error.kind.as_str()), (class, kind), "{scenario}: {error}");
    }
    let canceled =
        provider::call(provider_at("canceled").as_ref(), &request, async |_: &str| {}, std::future::pending())
            .await
            .unwrap_err();
    assert_eq!(canceled.class, FailureClass::Canceled);

    // The status lookup asks by the response id, and only by one.
    let asked = |id| RequestRef { client_id: &request.request_id, provider_id: id, output: request.output_kind() };
    assert!(completes.status(asked(None)).await.is_none(), "no id: nothing to ask by");
    assert!(matches!(completes.status(asked(Some("resp_completes"))).await, Some(Ok(RequestStatus::Succeeded(_)))));
    assert_eq!(completes.status(asked(Some("resp_other"))).await.unwrap().unwrap(), RequestStatus::NotFound);
    assert!(completes.status(asked(Some("../../admin"))).await.is_none(), "an id is never a path");
    let answer = completes.cancel(asked(Some("resp_completes"))).await.unwrap().unwrap();
    assert_eq!((answer.status.as_str(), answer.usage.map(|u| u.completion_tokens)), ("canceled", Some(52)));

    // Errors of the create, as for chat completions.
    let expected: [(&str, FailureClass, Option<u16>); 4] = [
        ("unauthorized", FailureClass::Definitive { retryable: false }, Some(401)),
        ("invalid", FailureClass::Definitive { retryable: false }, Some(400)),
        ("rate-limited", FailureClass::Definitive { retryable: true }, Some(429)),
        ("server-error", FailureClass::Definitive { retryable: true }, Some(500)),
    ];
    for (scenario, class, status) in expected {
        let error = provider_at(scenario).send(&request).await.unwrap_err();
        assert_eq!(
            (error.class, error.kind.as_str(), error.status),
            (class, "provider-error", status),
            "{scenario}: {error}"
        );
    }
}

/// The official `openai` Python package, pointed at the simulator, creates
/// and reads a background response, cancels one, raises its own errors for
/// a missing response and a 429, parses a chat completion made under a
/// strict schema back into its model, reads a streamed one, whole and
/// broken, and a streamed background response, broken and resumed
/// (`tests/openai/sdk_check.py`, in the
/// Python environment `.ci/run` sets up).
#[tokio::test]
#[ignore = "needs the openai Python package: installed by .ci/run"]
async fn the_official_openai_sdk_reads_the_simulators_responses_and_chat_completions() {
    let mut settings = Settings::builtin();
    let sim = |extra: &str| {
        crate::common::provider(&format!("kind = \"sim\"\nmodel = \"sim-1\"\ntokenizer = \"o200k_base\"\n{extra}"))
    };
    settings.providers.insert("sdk-responses".into(), sim("api = \"responses\"\nlatency_ms = 20"));
    settings.providers.insert("sdk-slow".into(), sim("api = \"responses\"\nlatency_ms = 60000"));
    settings.providers.insert(
        "sdk-limited".into(),
        sim("api = \"responses\"\nerror_rate = 1.0\nerror_status = 429\nretry_after_secs = 1"),
    );
    settings.providers.insert("sdk-chat".into(), sim("latency_ms = 5\noutput = \"extra_top_level_key\""));
    settings.providers.insert("sdk-stream".into(), sim("latency_ms = 5\ntokens_per_second = 500"));
    settings.providers.insert("sdk-stream-broken".into(), sim("latency_ms = 5\nstream_break_after = 3"));
    settings
        .providers
        .insert("sdk-responses-broken".into(), sim("api = \"responses\"\nlatency_ms = 5\nstream_break_after = 3"));
    let simulator = onejob::provider::sim::spawn(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    crate::common::sdk_check("openai/sdk_check.py", "openai", &simulator.url()).await;

    // What the simulator saw of it.
    let log: Value = reqwest::get(format!("{}/v1/requests", simulator.url())).await.unwrap().json().await.unwrap();
    let by_id: HashMap<&str, &Value> =
        log["requests"].as_array().unwrap().iter().map(|r| (r["id"].as_str().unwrap(), r)).collect();
    assert_eq!(
        (&by_id["sdk-background"]["status"], &by_id["sdk-background"]["strict_schema"]),
        (&json!("succeeded"), &json!(true))
    );
    assert!(by_id["sdk-canceled"]["canceled_after_ms"].is_u64(), "{:#}", by_id["sdk-canceled"]);
    assert_eq!(by_id["sdk-chat"]["strict_schema"], true, "the SDK's schema met strict mode's rules");
    assert_eq!(by_id["sdk-responses-stream"]["stream_resumed"], 1, "{:#}", by_id["sdk-responses-stream"]);
}
