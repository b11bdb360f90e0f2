//! The lifecycle on OpenAI's Responses API in background mode, against the
//! simulator speaking it (`api = "responses"`), on both backends: the
//! response id is kept on the attempt before the response is followed; a
//! deadline leaves the attempt `unknown` with that id, and the reconciler's
//! later reads settle it (succeeded when the response completed late,
//! failed when the provider failed it, canceled when it was canceled there); a lost race cancels the losing
//! response at the provider; an answer that breaks the contract fails its
//! attempt, unless a strict schema made the provider keep to it. Chat
//! completions' refusals, cut-off answers and strict schemas, end to end.

use std::time::Duration;

use crate::common::processes::eventually;
use crate::common::{Backend, TestApp, provider};
use onejob::config::Settings;
use onejob::domain::{JobId, OwnerId};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The latency of a response that outlives its attempt's deadline.
const SLOW_MS: u64 = 3_000;
/// The latency of the response that loses a race or is canceled: a
/// minute, so that nothing but the race or the cancel ends it while the
/// test reads it.
const LOSER_MS: u64 = 60_000;

/// Simulated providers speaking the Responses API (`resp-…`), and chat
/// completion providers that refuse, cut off or follow a strict schema.
fn settings(s: &mut Settings) {
    let base = "kind = \"sim\"\nmodel = \"sim-1\"\ntokenizer = \"o200k_base\"\ncontext_tokens = 8192\nmax_output_tokens = 512\n\
                price = { input_per_million = \"0.15\", output_per_million = \"0.60\", currency = \"USD\" }\n";
    let responses = |extra: &str| provider(&format!("{base}api = \"responses\"\npoll_interval_ms = 20\n{extra}"));
    let chat = |extra: &str| provider(&format!("{base}{extra}"));
    let providers = [
        ("resp-fast", responses("latency_ms = 5\ntimeout_ms = 2000")),
        ("resp-slow", responses(&format!("latency_ms = {LOSER_MS}\ntimeout_ms = {}", 2 * LOSER_MS))),
        ("resp-late", responses("late_ms = 900\ntimeout_ms = 300")),
        ("resp-outlived", responses(&format!("latency_ms = {SLOW_MS}\ntimeout_ms = 300"))),
        ("resp-hang", responses("hang_ms = 1200\ntimeout_ms = 300")),
        ("resp-bad-json", responses("latency_ms = 5\ntimeout_ms = 2000\noutput = \"extra_top_level_key\"")),
        (
            "resp-strict",
            responses("latency_ms = 5\ntimeout_ms = 2000\noutput = \"extra_top_level_key\"\nresponse_format = true"),
        ),
        (
            "resp-limited",
            responses("latency_ms = 5\ntimeout_ms = 2000\nerror_rate = 1.0\nerror_status = 429\nretry_after_secs = 1"),
        ),
        (
            "chat-strict",
            chat("latency_ms = 5\ntimeout_ms = 2000\noutput = \"extra_top_level_key\"\nresponse_format = true"),
        ),
        ("chat-refuses", chat("latency_ms = 5\ntimeout_ms = 2000\noutput = \"refusal\"")),
        ("chat-cut-off", chat("latency_ms = 5\ntimeout_ms = 2000\noutput = \"truncated\"")),
    ];
    for (name, settings) in providers {
        s.providers.insert(name.into(), settings);
    }
}

async fn create(app: &TestApp, key: &str, provider: &str) -> String {
    let body = json!({"task": "summarize", "input": {"text": "one job per intent, on the Responses API"}, "provider": provider});
    let response = app.post_job(key, &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// The simulator's record of the first attempt of `job`.
async fn at_provider(app: &TestApp, job: &Value) -> Value {
    let attempt = job["attempts"][0]["id"].as_str().unwrap();
    app.simulator_log().await.remove(attempt).unwrap_or_else(|| panic!("the provider has no record of {attempt}"))
}

async fn events_of(app: &TestApp, id: &str) -> Vec<(String, Option<i32>, Value)> {
    let events = app.store().list_events(&OwnerId::parse("alice").unwrap(), JobId::parse(id).unwrap()).await.unwrap();
    events.into_iter().map(|e| (e.kind.to_string(), e.attempt_number, e.detail)).collect()
}

async fn a_background_response_succeeds_with_its_id_kept_and_its_usage_from_the_response(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    let id = create(&app, "fast", "resp-fast").await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    let attempt = &job["attempts"][0];
    assert_eq!(
        job["result"],
        json!({"summary": "one job per intent, on the Responses API", "word_count": 8}),
        "{job:#}"
    );
    let record = at_provider(&app, &job).await;
    let response_id = attempt["provider_request_id"].as_str().expect("the response id is kept");
    assert!(response_id.starts_with("resp_"), "{attempt:#}");
    assert_eq!(record["response_id"], response_id, "{record:#}");
    assert_eq!(record["received"], 1, "one create per attempt: {record:#}");
    assert_eq!(attempt["usage"]["estimated"], false, "{attempt:#}");
    assert_eq!(attempt["usage"]["prompt_tokens"], record["usage"]["prompt_tokens"], "{attempt:#} {record:#}");
    assert_eq!(attempt["usage"]["completion_tokens"], record["usage"]["completion_tokens"], "{attempt:#} {record:#}");
    assert!(attempt["cost"]["amount"].is_string(), "costed as any attempt: {attempt:#}");
}

/// Runs a job on `provider`, whose response outlives the attempt's
/// deadline, until its first attempt is settled; checks it was unknown
/// with its response id first, and returns the job.
async fn unknown_then_reconciled(app: &TestApp, provider: &str, settled: &str) -> Value {
    let id = create(app, provider, provider).await;
    let job = app.wait_for(&id, "the first attempt reconciled", |j| j["attempts"][0]["state"] == settled).await;
    let attempt = &job["attempts"][0];
    let response_id = attempt["provider_request_id"].as_str().expect("the response id is kept");
    let events = events_of(app, &id).await;
    let unknown =
        events.iter().find(|(kind, n, _)| kind == "attempt-unknown" && *n == Some(1)).expect("it was unknown first");
    assert_eq!(unknown.2["error"]["type"], "timeout", "{unknown:?}");
    assert_eq!(
        unknown.2["error"]["detail"]["provider_request_id"], response_id,
        "unknown with its response id: {unknown:?}"
    );
    job
}

async fn a_timed_out_background_response_is_unknown_with_its_id_then_reconciled_succeeded_by_a_later_read(
    backend: Backend,
) {
    let app = TestApp::spawn_live(backend, settings).await;
    let job = unknown_then_reconciled(&app, "resp-late", "succeeded").await;
    assert_eq!((job["state"].as_str(), job["winning_attempt"].as_i64()), (Some("succeeded"), Some(1)), "{job:#}");
    assert_eq!(
        job["attempts"].as_array().unwrap().len(),
        1,
        "no new attempt: the first one's late answer won: {job:#}"
    );
    let record = at_provider(&app, &job).await;
    assert_eq!((record["status"].as_str(), record["received"].as_i64()), (Some("succeeded"), Some(1)), "{record:#}");
    assert_eq!(job["attempts"][0]["usage"]["estimated"], false, "the provider's usage, read late: {job:#}");
}

async fn a_timed_out_background_response_the_provider_failed_is_reconciled_failed(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    let job = unknown_then_reconciled(&app, "resp-hang", "failed").await;
    let error = &job["attempts"][0]["error"];
    assert_eq!(error["type"], "provider-error", "{job:#}");
    assert!(error["message"].as_str().unwrap().contains("server_error"), "the provider's reason: {error:#}");
    assert!(job["attempts"][0]["output"].is_null(), "{job:#}");
}

async fn an_unknown_background_response_canceled_at_the_provider_is_reconciled_canceled(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    let id = create(&app, "outlived", "resp-outlived").await;
    let job = app.wait_for(&id, "unknown", |j| j["state"] == "unknown").await;
    // Someone cancels the response at the provider while it is unknown here.
    let response_id = job["attempts"][0]["provider_request_id"].as_str().expect("unknown with its response id");
    let cancel =
        format!("{}/providers/resp-outlived/v1/responses/{response_id}/cancel", app.simulator.as_ref().unwrap().url());
    let canceled: Value = app.client.post(cancel).send().await.unwrap().json().await.unwrap();
    assert_eq!(canceled["status"], "cancelled", "{canceled:#}");
    let job = app.wait_for(&id, "the attempt canceled", |j| j["attempts"][0]["state"] == "canceled").await;
    assert_eq!(job["state"], "failed", "nothing else is open: a new attempt may be started: {job:#}");
    let attempt = &job["attempts"][0];
    assert_eq!(
        (&attempt["error"]["type"], &attempt["usage"]["estimated"]),
        (&json!("canceled"), &json!(false)),
        "{attempt:#}"
    );
    let events = events_of(&app, &id).await;
    assert!(events.iter().any(|(kind, n, _)| kind == "attempt-canceled" && *n == Some(1)), "{events:?}");
}

async fn a_lost_race_cancels_the_losing_background_response_at_the_provider(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    let id = create(&app, "race", "resp-slow").await;
    // The id is kept while the response runs, before any answer.
    let running = app
        .wait_for(&id, "the response id kept", |j| {
            j["attempts"][0]["state"] == "running" && j["attempts"][0]["provider_request_id"].is_string()
        })
        .await;
    let record = at_provider(&app, &running).await;
    assert_eq!(record["status"], "running", "kept before the response finished: {record:#}");
    assert_eq!(record["response_id"], running["attempts"][0]["provider_request_id"]);
    let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "sim-fast"})).await;
    assert_eq!(fallback.status(), StatusCode::CREATED);
    let job = app.wait_for(&id, "the loser canceled", |j| j["attempts"][0]["state"] == "canceled").await;
    assert_eq!((job["state"].as_str(), job["winning_attempt"].as_i64()), (Some("succeeded"), Some(2)), "{job:#}");
    let record = at_provider(&app, &job).await;
    assert_eq!(record["status"], "canceled", "{record:#}");
    assert!(
        record["canceled_after_ms"].as_u64().is_some_and(|ms| ms < LOSER_MS),
        "canceled long before its answer: {record:#}"
    );
    let loser = &job["attempts"][0];
    assert_eq!(loser["error"]["detail"]["cancel_call"], "made", "{loser:#}");
    assert_eq!(loser["usage"]["estimated"], false, "what it used, as the cancel's answer said: {loser:#}");
    assert_eq!(loser["usage"]["prompt_tokens"], record["usage"]["prompt_tokens"], "{loser:#} {record:#}");
}

async fn canceling_a_job_cancels_its_background_response_at_the_provider(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    let id = create(&app, "canceled", "resp-slow").await;
    app.wait_for(&id, "the response id kept", |j| j["attempts"][0]["provider_request_id"].is_string()).await;
    let response =
        app.client.post(app.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&app.alice).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let job = app.wait_for(&id, "the attempt canceled", |j| j["attempts"][0]["state"] == "canceled").await;
    assert_eq!(job["state"], "canceled");
    let record = at_provider(&app, &job).await;
    assert_eq!(record["status"], "canceled", "{record:#}");
    assert!(record["canceled_after_ms"].as_u64().is_some_and(|ms| ms < LOSER_MS), "{record:#}");
    assert_eq!(job["attempts"][0]["error"]["detail"]["cancel_call"], "made", "{job:#}");
}

async fn a_background_response_that_breaks_the_contract_fails_its_attempt_unless_a_strict_schema_kept_it(
    backend: Backend,
) {
    let app = TestApp::spawn_live(backend, settings).await;
    let id = create(&app, "bad", "resp-bad-json").await;
    let job = app.wait_for(&id, "the first attempt failed", |j| j["attempts"][0]["state"] == "failed").await;
    let attempt = &job["attempts"][0];
    assert_eq!(attempt["error"]["type"], "contract-violation", "{attempt:#}");
    assert!(
        attempt["unapplied_output"]["output"]["note"].is_string(),
        "the breaking output is kept for audit: {attempt:#}"
    );
    assert_eq!(at_provider(&app, &job).await["strict_schema"], false);

    // The same provider told the schema, strict: the answer keeps to it.
    for (key, provider) in [("strict-responses", "resp-strict"), ("strict-chat", "chat-strict")] {
        let id = create(&app, key, provider).await;
        let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
        assert!(job["result"].get("note").is_none(), "{provider}: {job:#}");
        assert_eq!(at_provider(&app, &job).await["strict_schema"], true, "{provider} was sent the schema, strict");
    }
}

async fn a_refusal_or_an_answer_cut_off_at_the_limit_fails_the_attempt_saying_so(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    for (provider, kind, says) in
        [("chat-refuses", "refusal", "refused"), ("chat-cut-off", "output-truncated", "cut off")]
    {
        let id = create(&app, provider, provider).await;
        let job = app.wait_for(&id, "the first attempt failed", |j| j["attempts"][0]["state"] == "failed").await;
        let attempt = &job["attempts"][0];
        assert_eq!(
            (&attempt["error"]["type"], &attempt["error"]["detail"]["retryable"]),
            (&json!(kind), &json!(false)),
            "{attempt:#}"
        );
        assert!(attempt["error"]["message"].as_str().unwrap().contains(says), "{attempt:#}");
        assert_eq!(attempt["usage"]["estimated"], false, "the provider charged for it: {attempt:#}");
    }
}

async fn a_429_from_the_responses_api_past_max_requeues_is_retried_after_the_wait_it_asked_for(backend: Backend) {
    // No requeue allowed: the refusal fails the attempt, retryable.
    let app = TestApp::spawn_live(backend, |s| {
        settings(s);
        s.worker.max_requeues = 0;
    })
    .await;
    let id = create(&app, "limited", "resp-limited").await;
    let job = app
        .wait_for(&id, "two attempts failed", |j| {
            j["attempts"].as_array().unwrap().len() >= 2 && j["attempts"][1]["state"] == "failed"
        })
        .await;
    let (first, second) = (&job["attempts"][0], &job["attempts"][1]);
    assert_eq!(
        (&first["error"]["detail"]["status"], &first["error"]["detail"]["retry_after_ms"]),
        (&json!(429), &json!(1000)),
        "{first:#}"
    );
    assert!(first["provider_request_id"].is_null(), "refused before a response existed: {first:#}");
    let time = |v: &Value| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    let waited = (time(&second["not_before"]) - time(&first["finished_at"])).num_milliseconds();
    assert!(waited >= 950, "the retry waited {waited} ms: {job:#}");
}

async fn an_unknown_background_response_without_an_id_waits_for_an_operator(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        settings(s);
        // The create is taken and its answer never comes: no id to ask by.
        let mut lost = s.providers["resp-fast"].clone();
        lost.fault = Some(onejob::config::SimFault::NoHeaders);
        lost.timeout = Duration::from_millis(300);
        s.providers.insert("resp-lost".into(), lost);
    })
    .await;
    let id = create(&app, "lost", "resp-lost").await;
    let job = app.wait_for(&id, "unknown", |j| j["state"] == "unknown").await;
    assert!(job["attempts"][0]["provider_request_id"].is_null(), "{job:#}");
    // Asked about by the reconciler nonetheless: nothing to ask by, it stays unknown.
    let looked = || async {
        let count: i64 =
            sqlx::query_scalar("select max(reconcile_count) from attempts").fetch_one(&app.db).await.unwrap_or(0);
        count >= 1
    };
    eventually("the reconciler looked at it", Duration::from_secs(10), looked).await;
    let job = app.wait_for(&id, "still unknown", |j| j["state"] == "unknown").await;
    assert_eq!(job["attempts"][0]["state"], "unknown", "{job:#}");
}

on_both_backends!(
    a_background_response_succeeds_with_its_id_kept_and_its_usage_from_the_response,
    a_timed_out_background_response_is_unknown_with_its_id_then_reconciled_succeeded_by_a_later_read,
    a_timed_out_background_response_the_provider_failed_is_reconciled_failed,
    an_unknown_background_response_canceled_at_the_provider_is_reconciled_canceled,
    a_lost_race_cancels_the_losing_background_response_at_the_provider,
    canceling_a_job_cancels_its_background_response_at_the_provider,
    a_background_response_that_breaks_the_contract_fails_its_attempt_unless_a_strict_schema_kept_it,
    a_refusal_or_an_answer_cut_off_at_the_limit_fails_the_attempt_saying_so,
    a_429_from_the_responses_api_past_max_requeues_is_retried_after_the_wait_it_asked_for,
    an_unknown_background_response_without_an_id_waits_for_an_operator,
);
