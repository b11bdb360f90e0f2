//! Anthropic's Messages API, over HTTP against the running application with
//! the simulator speaking it (`api = "messages"`), on both backends: a job
//! answered through the forced tool, its output validated, its usage and
//! cost (cache tokens at their own rates) recorded and reported, its
//! `request-id` kept; each stop reason and error status in its documented
//! outcome; a 529 retried after its `retry-after`; a reset after sending
//! leaves the attempt unknown; a prompt the estimate finds too long sent
//! once the provider counts it; a streamed answer in pieces, and a broken
//! stream `stream-broken`; failover from an OpenAI-shaped provider to an
//! Anthropic-shaped one after its qualification, never before.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, ok_json, provider};
use crate::events::read_to_end;
use onejob::config::Settings;
use onejob::domain::{Money, Price, Usage};

const CLAUDE: &str = "kind = \"sim\"\napi = \"messages\"\nmodel = \"claude-sim\"\nlatency_ms = 5";

fn price() -> Price {
    serde_json::from_value(json!({"input_per_million": "3", "output_per_million": "15",
        "cache_write_per_million": "3.75", "cache_read_per_million": "0.3", "currency": "USD"}))
    .unwrap()
}

/// `summarize` on `claude`, with nothing to fail over to, and `extra`
/// Messages API providers.
fn on_claude(extra: &'static [(&'static str, &'static str)]) -> impl FnOnce(&mut Settings) {
    move |s| {
        let mut claude = provider(&format!("{CLAUDE}\ncache_read_tokens = 4\ncache_write_tokens = 3"));
        claude.price = Some(price());
        s.providers.insert("claude".into(), claude);
        for (name, settings) in extra {
            s.providers.insert((*name).into(), provider(&format!("{CLAUDE}\n{settings}")));
        }
        let summarize = s.tasks.get_mut("summarize").unwrap();
        summarize.default_provider = "claude".into();
        summarize.failover.clear();
    }
}

async fn create(app: &TestApp, key: &str, text: &str, provider: &str) -> String {
    let body = json!({"task": "summarize", "input": {"text": text}, "provider": provider});
    let response = app.post_job(key, &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn ended(app: &TestApp, id: &str) -> Value {
    app.wait_for(id, "the job ended", |j| !["queued", "running"].contains(&j["state"].as_str().unwrap())).await
}

fn usage_of(attempt: &Value) -> Usage {
    serde_json::from_value(attempt["usage"].clone()).unwrap()
}

async fn a_job_on_the_messages_api_succeeds_through_the_forced_tool_with_usage_cost_and_request_id(backend: Backend) {
    // `claude-prose` answers a text request in prose, never JSON: only a
    // request that forces the tool gets the tool's input from it.
    let app = TestApp::spawn_live(backend, on_claude(&[("claude-prose", "output = \"not_json\"")])).await;
    let id = create(&app, "k", "the quick brown fox", "claude").await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["result"], json!({"summary": "the quick brown fox", "word_count": 4}));
    let attempt = &job["attempts"][0];
    assert!(attempt["provider_request_id"].as_str().unwrap().starts_with("req_sim"), "{attempt:#}");
    let usage = usage_of(attempt);
    assert_eq!((usage.cache_write_tokens, usage.cache_read_tokens, usage.estimated), (3, 4, false), "{usage:?}");
    assert!(usage.prompt_tokens > 7 && usage.completion_tokens > 0, "{usage:?}");
    // Cache reads at 0.3, writes at 3.75, the rest of the prompt at 3.
    let by_hand = Money::from_units(
        i128::from(usage.prompt_tokens - 7) * 3_000_000_000_000
            + 3 * 3_750_000_000_000
            + 4 * 300_000_000_000
            + i128::from(usage.completion_tokens) * 15_000_000_000_000,
    );
    assert_eq!(attempt["cost"]["amount"], json!(by_hand.to_string()), "{attempt:#}");
    assert_eq!(attempt["cost"]["price_version"], json!(price().version()));
    let report = ok_json(app.get(&app.alice, "/usage").await).await;
    assert_eq!((&report["total"]["cache_write_tokens"], &report["total"]["cache_read_tokens"]), (&json!(3), &json!(4)));
    assert_eq!(report["total"]["cost"]["USD"], json!(by_hand.to_string()), "{report:#}");
    // Asked for through the forced tool, as the Messages API takes it: a
    // provider that answers text in prose answers the tool's input (the
    // simulator logs a forced tool as a strict schema).
    let prose = create(&app, "prose", "the quick brown fox", "claude-prose").await;
    let through_the_tool = ended(&app, &prose).await;
    assert_eq!(through_the_tool["result"], job["result"], "{through_the_tool:#}");
    let log = app.simulator_log().await;
    assert_eq!(log[attempt["id"].as_str().unwrap()]["received"], 1);
    let forced = &log[through_the_tool["attempts"][0]["id"].as_str().unwrap()];
    assert_eq!((&forced["received"], &forced["strict_schema"]), (&json!(1), &json!(true)), "{forced:#}");
}

async fn each_stop_reason_and_error_status_lands_in_its_documented_outcome(backend: Backend) {
    const CASES: &[(&str, &str)] = &[
        ("refusal", "output = \"refusal\""),
        ("max-tokens", "output = \"truncated\""),
        ("context", "output = \"context_window_exceeded\""),
        ("paused", "output = \"pause_turn\""),
        ("extra-key", "output = \"extra_top_level_key\""),
        ("s400", "error_rate = 1.0\nerror_status = 400"),
        ("s401", "error_rate = 1.0\nerror_status = 401"),
        ("s403", "error_rate = 1.0\nerror_status = 403"),
        ("s404", "error_rate = 1.0\nerror_status = 404"),
        ("s413", "error_rate = 1.0\nerror_status = 413"),
        ("s429", "error_rate = 1.0\nerror_status = 429"),
        ("s500", "error_rate = 1.0\nerror_status = 500\nretry_after_secs = 7"),
        ("s529", "error_rate = 1.0\nerror_status = 529\nretry_after_secs = 7"),
    ];
    let app = TestApp::spawn_live(backend, |s| {
        on_claude(CASES)(s);
        s.tasks.get_mut("summarize").unwrap().max_attempts = 1;
    })
    .await;
    // (provider, error type, retryable, status)
    let expected = [
        ("refusal", "refusal", false, None::<u64>),
        ("max-tokens", "output-truncated", false, None),
        ("context", "prompt-too-long", false, None),
        ("paused", "incomplete", true, None),
        ("extra-key", "contract-violation", false, None),
        ("s400", "provider-error", false, Some(400)),
        ("s401", "provider-error", false, Some(401)),
        ("s403", "provider-error", false, Some(403)),
        ("s404", "provider-error", false, Some(404)),
        ("s413", "provider-error", false, Some(413)),
        ("s429", "provider-error", true, Some(429)),
        ("s500", "provider-error", true, Some(500)),
        ("s529", "provider-error", true, Some(529)),
    ];
    let mut ids = Vec::new();
    for (provider, ..) in expected {
        ids.push(create(&app, provider, "stop here", provider).await);
    }
    for ((provider, kind, retryable, status), id) in expected.into_iter().zip(ids) {
        let job = ended(&app, &id).await;
        assert_eq!(job["state"], "failed", "{provider}: {job:#}");
        let attempt = &job["attempts"][0];
        let error = &attempt["error"];
        assert_eq!(
            (error["type"].as_str(), error["detail"]["retryable"].as_bool(), error["detail"]["status"].as_u64()),
            (Some(kind), Some(retryable), status),
            "{provider}: {error:#}"
        );
        assert!(
            attempt["provider_request_id"].as_str().is_some_and(|id| id.starts_with("req_sim")),
            "{provider}: the request-id is kept: {attempt:#}"
        );
        if status.is_none() {
            assert!(usage_of(attempt).prompt_tokens > 0, "{provider}: an answer is charged: {attempt:#}");
        }
        if retryable && status.is_some_and(|status| status != 429) {
            assert_eq!(error["detail"]["retry_after_ms"], 7_000, "{provider}: {error:#}");
            assert!(error["message"].as_str().unwrap().contains("_error"), "the envelope's type: {error:#}");
        }
    }
}

async fn a_529_is_retried_after_its_retry_after(backend: Backend) {
    // Every call in the simulator's first 3 s is overloaded.
    let app = TestApp::spawn_live(backend, |s| {
        on_claude(&[("overloaded", "error_status = 529\nretry_after_secs = 1\noutage_ms = 3000")])(s);
        s.tasks.get_mut("summarize").unwrap().retries_per_provider = 5;
    })
    .await;
    let id = create(&app, "k", "once it is not overloaded", "overloaded").await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let attempts = job["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 2, "{job:#}");
    for pair in attempts.windows(2) {
        let (failed, next) = (&pair[0], &pair[1]);
        assert_eq!(
            (&failed["error"]["detail"]["status"], &failed["error"]["detail"]["retry_after_ms"]),
            (&json!(529), &json!(1000))
        );
        let at = |value: &Value| chrono::DateTime::parse_from_rfc3339(value.as_str().unwrap()).unwrap();
        let waited = at(&next["started_at"]) - at(&failed["finished_at"]);
        assert!(waited >= chrono::Duration::milliseconds(990), "retried after {waited}: {job:#}");
    }
}

async fn a_reset_after_sending_leaves_the_attempt_unknown(backend: Backend) {
    let app = TestApp::spawn_live(backend, on_claude(&[("resets", "fault = \"reset_after_request\"")])).await;
    let id = create(&app, "k", "lost on the way back", "resets").await;
    let job = ended(&app, &id).await;
    assert_eq!(job["state"], "unknown", "{job:#}");
    let attempt = &job["attempts"][0];
    assert_eq!((&attempt["state"], &attempt["error"]["type"]), (&json!("unknown"), &json!("connection-lost")));
    let log = app.simulator_log().await;
    assert_eq!(log[attempt["id"].as_str().unwrap()]["status"], "succeeded", "the provider did the work");
}

async fn a_streamed_answer_comes_in_pieces_and_a_broken_stream_is_stream_broken(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        on_claude(&[
            ("claude-stream", "tokens_per_second = 200"),
            ("claude-breaks", "tokens_per_second = 200\nstream_break_after = 5"),
        ])(s);
        let summarize = s.tasks.get_mut("summarize").unwrap();
        summarize.stream = true;
        summarize.retries_per_provider = 0;
    })
    .await;
    let id = create(&app, "k", "the whole answer in pieces", "claude-stream").await;
    let response = app.client.get(app.url(&format!("/jobs/{id}/output"))).bearer_auth(&app.alice).send().await.unwrap();
    let received = read_to_end(response).await;
    let job = ok_json(app.get(&app.alice, &format!("/jobs/{id}")).await).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let pieces: String =
        received.iter().filter(|e| e.kind == "delta").map(|e| e.data["text"].as_str().unwrap()).collect();
    assert!(received.iter().filter(|e| e.kind == "delta").count() >= 3, "in pieces");
    assert_eq!(serde_json::from_str::<Value>(&pieces).unwrap(), job["result"], "the tool's input, in pieces");
    assert!(usage_of(&job["attempts"][0]).completion_tokens > 0, "from message_delta");

    let broken = create(&app, "k2", "the whole answer in pieces", "claude-breaks").await;
    let job = ended(&app, &broken).await;
    assert_eq!(job["state"], "failed", "{job:#}");
    let error = &job["attempts"][0]["error"];
    assert_eq!((&error["type"], &error["detail"]["retryable"]), (&json!("stream-broken"), &json!(true)), "{error:#}");
}

/// The estimate (characters ÷ 3) finds the prompt too long for a context
/// the simulated model's own count (characters ÷ 4) fits: unsent without
/// `count_tokens`, sent with it.
async fn a_prompt_the_estimate_finds_too_long_is_sent_when_the_provider_counts_it_shorter(backend: Backend) {
    use onejob::config::Tokenizer;
    use onejob::provider::tokens;
    let input = json!({"text": "lorem ipsum dolor sit amet ".repeat(100)});
    let mut settings = Settings::builtin();
    on_claude(&[])(&mut settings);
    let contract = onejob::task::contract::Contract::new(&settings.tasks["summarize"]).unwrap();
    let messages = contract.render(&input).unwrap();
    let estimate = tokens::count_prompt(&settings.providers["claude"], &messages, &contract.output_schema);
    let counted = tokens::count_messages(Tokenizer::Approx, &messages)
        + tokens::count(Tokenizer::Approx, &contract.output_schema.to_string())
        + tokens::FORCED_TOOL_TOKENS;
    assert!(counted + 100 < estimate, "{counted} against {estimate}");
    let context = (counted + estimate) / 2 + 256;
    let app = TestApp::spawn_live(backend, |s| {
        on_claude(&[])(s);
        let sized = format!("{CLAUDE}\nmax_output_tokens = 256\ncontext_tokens = {context}");
        s.providers.insert("estimated".into(), provider(&sized));
        s.providers.insert("counted".into(), provider(&format!("{sized}\ncount_tokens = true")));
        let lost = format!("{sized}\ncount_tokens = true\nfault = \"reset_after_request\"");
        s.providers.insert("counted-lost".into(), provider(&lost));
    })
    .await;
    let create = |key: &'static str, provider: &'static str| {
        let body = json!({"task": "summarize", "input": input, "provider": provider});
        let app = &app;
        async move {
            let response = app.post_job(key, &body).await;
            assert_eq!(response.status(), StatusCode::CREATED);
            response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
        }
    };
    let job = ended(&app, &create("estimated", "estimated").await).await;
    let error = &job["attempts"][0]["error"];
    assert_eq!((&job["state"], &error["type"]), (&json!("failed"), &json!("prompt-too-long")), "{job:#}");
    assert_eq!(error["detail"]["prompt_tokens"], estimate, "{error:#}");
    assert!(app.simulator_log().await.is_empty(), "not sent");
    let job = ended(&app, &create("counted", "counted").await).await;
    assert_eq!(job["state"], "succeeded", "counted {counted}, it fits: {job:#}");
    let log = app.simulator_log().await;
    let sent = &log[job["attempts"][0]["id"].as_str().unwrap()];
    assert_eq!((&sent["provider"], &sent["received"]), (&json!("counted"), &json!(1)), "sent once: {sent:#}");
    // Sent, the answer lost: the attempt is charged the prompt as the
    // provider counted it, not as estimated.
    let job = ended(&app, &create("counted-lost", "counted-lost").await).await;
    let attempt = &job["attempts"][0];
    assert_eq!((&job["state"], &attempt["error"]["type"]), (&json!("unknown"), &json!("connection-lost")), "{job:#}");
    let usage = usage_of(attempt);
    assert_eq!((usage.prompt_tokens, usage.estimated), (counted as i64, true), "{counted} not {estimate}: {usage:?}");
    assert_eq!(app.simulator_log().await[attempt["id"].as_str().unwrap()]["received"], 1, "sent");
}

async fn a_task_fails_over_from_an_openai_shaped_provider_to_an_anthropic_shaped_one_only_once_qualified(
    backend: Backend,
) {
    let app = TestApp::spawn_live(backend, |s| {
        on_claude(&[])(s);
        s.providers.insert("openai-down".into(), provider("kind = \"sim\"\nerror_rate = 1.0\nerror_status = 503"));
        let summarize = s.tasks.get_mut("summarize").unwrap();
        summarize.default_provider = "openai-down".into();
        summarize.failover = vec!["claude".into()];
        summarize.retries_per_provider = 0;
    })
    .await;
    // Not qualified: the failover skips it, and nothing reaches it.
    let before = create(&app, "before", "not yet", "openai-down").await;
    let job = ended(&app, &before).await;
    assert_eq!(job["state"], "failed", "{job:#}");
    let used: Vec<&str> = job["attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(used, ["openai-down"], "{job:#}");
    // Qualified against the task's contract, by its examples, through the Messages API.
    let qualified = app.client.post(app.url("/providers/claude/qualifications")).bearer_auth(&app.operator);
    let record = ok_json(qualified.json(&json!({"task": "summarize"})).send().await.unwrap()).await;
    assert_eq!(record["passed"], true, "{record:#}");
    let after = create(&app, "after", "now it may", "openai-down").await;
    let job = ended(&app, &after).await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let used: Vec<&str> = job["attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap()).collect();
    assert_eq!(used, ["openai-down", "claude"], "{job:#}");
    assert_eq!(job["result"], json!({"summary": "now it may", "word_count": 3}));
    let log = app.simulator_log().await;
    assert_eq!(log.values().filter(|r| r["provider"] == "claude").count(), 1, "only the failover after qualification");
}

/// The official `anthropic` Python package, pointed at the simulator,
/// reads a message as text and through a forced tool, both streamed, counts
/// tokens, raises its own errors for a 529 and a 429 (with `retry-after`
/// and the request id), waits the `retry-after` when it retries, reads
/// cache tokens, and the simulator refuses a request without `max_tokens`
/// (`tests/anthropic/sdk_check.py`, in the Python environment `.ci/run`
/// sets up).
#[tokio::test]
#[ignore = "needs the anthropic Python package: installed by .ci/run"]
async fn the_official_anthropic_sdk_reads_the_simulators_messages() {
    let mut settings = Settings::builtin();
    let sim = |extra: &str| provider(&format!("{CLAUDE}\n{extra}"));
    settings.providers.insert("sdk-messages".into(), sim(""));
    settings.providers.insert("sdk-stream".into(), sim("tokens_per_second = 500"));
    settings
        .providers
        .insert("sdk-overloaded".into(), sim("error_rate = 1.0\nerror_status = 529\nretry_after_secs = 1"));
    settings.providers.insert("sdk-limited".into(), sim("error_rate = 1.0\nerror_status = 429\nretry_after_secs = 1"));
    settings.providers.insert("sdk-cached".into(), sim("cache_read_tokens = 3\ncache_write_tokens = 2"));
    let simulator = onejob::provider::sim::spawn(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    crate::common::sdk_check("anthropic/sdk_check.py", "anthropic", &simulator.url()).await;
    // The SDK's retry reached the simulator: two calls under one id.
    let log: Value = reqwest::get(format!("{}/v1/requests", simulator.url())).await.unwrap().json().await.unwrap();
    let retried = log["requests"].as_array().unwrap().iter().find(|r| r["id"] == "sdk-overloaded-retried").unwrap();
    assert_eq!(retried["received"], 2, "{retried:#}");
}

on_both_backends!(
    a_job_on_the_messages_api_succeeds_through_the_forced_tool_with_usage_cost_and_request_id,
    each_stop_reason_and_error_status_lands_in_its_documented_outcome,
    a_529_is_retried_after_its_retry_after,
    a_reset_after_sending_leaves_the_attempt_unknown,
    a_prompt_the_estimate_finds_too_long_is_sent_when_the_provider_counts_it_shorter,
    a_streamed_answer_comes_in_pieces_and_a_broken_stream_is_stream_broken,
    a_task_fails_over_from_an_openai_shaped_provider_to_an_anthropic_shaped_one_only_once_qualified,
);
