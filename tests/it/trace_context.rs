//! W3C Trace Context over HTTP, on both backends: the `traceparent` and
//! `tracestate` of `POST /jobs` and `POST /jobs/{id}/attempts` are kept
//! with the attempt they ask for, shown on it, and sent to the provider
//! with the attempt's call (the same trace, the call's own parent id); a
//! retry stays in its failed attempt's trace; a malformed `traceparent` is
//! ignored. The simulator's request log is the provider's word.

use crate::common::{Backend, TestApp, provider};
use reqwest::StatusCode;
use serde_json::{Value, json};

const TRACE_A: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_B: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

fn settings(s: &mut onejob::config::Settings) {
    // Two providers that fail every call, retryably: the retry policy adds
    // the next attempt, on the same provider once (no failover).
    for name in ["sim-down", "sim-down-2"] {
        s.providers.insert(
            name.into(),
            provider("kind = \"sim\"\nmodel = \"sim-1\"\ntokenizer = \"o200k_base\"\ncontext_tokens = 8192\nmax_output_tokens = 512\nlatency_ms = 5\nerror_rate = 1.0\nerror_status = 503"),
        );
    }
    let summarize = s.tasks.get_mut("summarize").unwrap();
    summarize.failover.clear();
    summarize.retries_per_provider = 1;
}

async fn create(app: &TestApp, key: &str, provider: &str, traceparent: &str, tracestate: Option<&str>) -> String {
    let body = json!({"task": "summarize", "input": {"text": "one trace from the click to the provider"}, "provider": provider});
    let mut request = app.post_job_raw(&app.alice, key, body.to_string()).header("traceparent", traceparent);
    if let Some(state) = tracestate {
        request = request.header("tracestate", state);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// The `traceparent` the provider received for attempt `attempt` of `job`.
async fn sent_for(app: &TestApp, job: &Value, number: usize) -> Value {
    let id = job["attempts"][number - 1]["id"].as_str().unwrap();
    app.simulator_log().await[id]["traceparent"].clone()
}

/// `00-<trace>-<parent>-<flags>`: the trace and flags of `sent` are those
/// of `asked`, its parent its own.
fn child_of(sent: &Value, asked: &str) {
    let sent = sent.as_str().unwrap_or_else(|| panic!("no traceparent reached the provider: {sent}"));
    assert_eq!(
        (&sent[..35], &sent[53..]),
        (&asked[..35], &asked[53..]),
        "the same trace and flags: {sent} for {asked}"
    );
    assert_ne!(&sent[36..52], &asked[36..52], "the call is a span of its own: {sent}");
}

async fn the_callers_trace_context_is_kept_on_its_attempt_and_reaches_the_provider(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    let id = create(&app, "traced", "sim-fast", TRACE_A, Some("congo=t61rcWkgMzE")).await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    let trace = &job["attempts"][0]["trace"];
    assert_eq!(
        (&trace["traceparent"], &trace["tracestate"]),
        (&json!(TRACE_A), &json!("congo=t61rcWkgMzE")),
        "{job:#}"
    );
    child_of(&sent_for(&app, &job, 1).await, TRACE_A);
}

async fn a_fallback_carries_its_own_requests_trace_and_a_retry_its_failed_attempts(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    app.qualify("sim-fast").await;
    let id = create(&app, "fallback", "sim-slow", TRACE_A, None).await;
    app.wait_for(&id, "running", |j| j["attempts"][0]["state"] == "running").await;
    let fallback = app
        .client
        .post(app.url(&format!("/jobs/{id}/attempts")))
        .bearer_auth(&app.alice)
        .header("idempotency-key", "fallback-1")
        .header("traceparent", TRACE_B)
        .json(&json!({"provider": "sim-fast"}))
        .send()
        .await
        .unwrap();
    assert_eq!(fallback.status(), StatusCode::CREATED);
    let job = app.wait_for(&id, "the fallback won", |j| j["state"] == "succeeded").await;
    assert_eq!(job["attempts"][1]["trace"]["traceparent"], TRACE_B, "{job:#}");
    child_of(&sent_for(&app, &job, 2).await, TRACE_B);

    // A retry is done for the same request as the attempt that failed: it
    // takes that attempt's trace, not the job's. The job fails on sim-down
    // (TRACE_A, retried once there); then the client's attempt on
    // sim-down-2 (TRACE_B) fails and is retried.
    let id = create(&app, "retried", "sim-down", TRACE_A, None).await;
    let job = app.wait_for(&id, "failed", |j| j["state"] == "failed").await;
    assert_eq!(
        (&job["attempts"][1]["origin"], &job["attempts"][1]["trace"]["traceparent"]),
        (&json!("policy"), &json!(TRACE_A)),
        "{job:#}"
    );
    app.qualify("sim-down-2").await;
    let again = app
        .client
        .post(app.url(&format!("/jobs/{id}/attempts")))
        .bearer_auth(&app.alice)
        .header("idempotency-key", "again-1")
        .header("traceparent", TRACE_B)
        .json(&json!({"provider": "sim-down-2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    let job = app
        .wait_for(&id, "retried", |j| {
            j["attempts"].as_array().unwrap().len() >= 4 && j["attempts"][3]["state"] != "pending"
        })
        .await;
    assert_eq!(
        (&job["attempts"][3]["origin"], &job["attempts"][3]["provider"], &job["attempts"][3]["trace"]["traceparent"]),
        (&json!("policy"), &json!("sim-down-2"), &json!(TRACE_B)),
        "{job:#}"
    );
    child_of(&sent_for(&app, &job, 4).await, TRACE_B);
}

async fn a_malformed_traceparent_is_ignored(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    let id = create(&app, "malformed", "sim-fast", "00-not-a-trace-01", Some("a=b")).await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    assert!(job["attempts"][0]["trace"].is_null(), "{job:#}");
    assert!(sent_for(&app, &job, 1).await.is_null(), "nothing is made up for the provider");
}

on_both_backends!(
    the_callers_trace_context_is_kept_on_its_attempt_and_reaches_the_provider,
    a_fallback_carries_its_own_requests_trace_and_a_retry_its_failed_attempts,
    a_malformed_traceparent_is_ignored,
);
