//! Cancellation that reaches the provider: when a job is won or canceled,
//! the calls of its attempts still running are aborted (their connections
//! closed) and canceled at the provider where it has a cancel call; the
//! attempts end `canceled` with what they used as the provider said, or at
//! worst. With the task's `cancel_losers` off, the loser runs to its answer
//! and is kept as superseded, as an answer that arrived before the abort
//! is. Over HTTP against the running application, on both backends, with
//! the simulator's request log as the provider's own word.

use std::time::Duration;

use crate::common::processes::{database, eventually, job, set, simulator_and_config_with, simulator_log};
use crate::common::{Backend, TestApp, provider};
use onejob::app::Role;
use onejob::config::Settings;
use onejob::domain::{JobId, Money, OwnerId};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// sim-slow's latency in these tests: each loser is aborted long before it.
const SLOW_MS: u64 = 3_000;

/// The test timings, sim-slow slower, a `summarize-kept` task that is
/// `summarize` with `cancel_losers` off, and `sim-slow-uncancelable`, a
/// sim-slow without a cancel call.
fn settings(s: &mut Settings) {
    let slow = s.providers.get_mut("sim-slow").unwrap();
    slow.latency = Duration::from_millis(SLOW_MS);
    slow.timeout = Duration::from_millis(2 * SLOW_MS);
    let mut uncancelable = s.providers["sim-slow"].clone();
    uncancelable.cancel_call = Some(false);
    s.providers.insert("sim-slow-uncancelable".into(), uncancelable);
    let mut kept = s.tasks["summarize"].clone();
    kept.cancel_losers = false;
    s.tasks.insert("summarize-kept".into(), kept);
}

fn money(value: &Value) -> Money {
    value.as_str().unwrap_or_else(|| panic!("an amount is a decimal string: {value}")).parse().unwrap()
}

async fn create(app: &TestApp, key: &str, body: &Value) -> String {
    let response = app.post_job(key, body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let job: Value = response.json().await.unwrap();
    job["id"].as_str().unwrap().to_owned()
}

/// Waits until the provider has the first attempt of job `id` in flight,
/// and returns that attempt's id.
async fn first_attempt_at_the_provider(app: &TestApp, id: &str) -> String {
    let job = app.wait_for(id, "running", |j| j["state"] == "running").await;
    let attempt = job["attempts"][0]["id"].as_str().unwrap().to_owned();
    eventually("the provider received the first attempt", Duration::from_secs(10), || async {
        app.simulator_log().await.contains_key(&attempt)
    })
    .await;
    attempt
}

async fn events_of(app: &TestApp, id: &str) -> Vec<(String, Option<i32>, Value)> {
    let events = app.store().list_events(&OwnerId::parse("alice").unwrap(), JobId::parse(id).unwrap()).await.unwrap();
    events.into_iter().map(|e| (e.kind.to_string(), e.attempt_number, e.detail)).collect()
}

/// A job of `task` on sim-slow, raced by a fallback on sim-fast that wins:
/// the job once its loser has settled, and the loser's provider record.
async fn race(app: &TestApp, task: &str, key: &str) -> (Value, Value) {
    let body =
        json!({"task": task, "input": {"text": "a slow primary raced by a fast fallback"}, "provider": "sim-slow"});
    let id = create(app, key, &body).await;
    let loser = first_attempt_at_the_provider(app, &id).await;
    let fallback = app.post_attempt(&app.alice, &id, "fallback", &json!({"provider": "sim-fast"})).await;
    assert_eq!(fallback.status(), StatusCode::CREATED);
    let job = app
        .wait_for(&id, "the loser settled", |j| {
            j["attempts"][0]["state"] != "running"
                && j["attempts"][0]["state"] != "unknown"
                && !j["attempts"][0]["cost"].is_null()
        })
        .await;
    assert_eq!((job["state"].as_str(), job["winning_attempt"].as_i64()), (Some("succeeded"), Some(2)), "{job:#}");
    (job, app.simulator_log().await[&loser].clone())
}

async fn a_win_aborts_the_losing_call_cancels_it_at_the_provider_and_wastes_less_than_letting_it_run(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    let (canceled, at_provider) = race(&app, "summarize", "canceled").await;
    let (kept, kept_at_provider) = race(&app, "summarize-kept", "kept").await;

    // cancel_losers on: the connection closed and the cancel call came
    // long before the loser's answer was due.
    let loser = &canceled["attempts"][0];
    assert_eq!(loser["state"], "canceled", "{canceled:#}");
    assert_eq!(loser["error"]["type"], "canceled", "{loser:#}");
    assert!(loser["output"].is_null(), "{loser:#}");
    let closed = at_provider["connection_closed_after_ms"].as_u64().expect("the provider saw the connection close");
    let stopped = at_provider["canceled_after_ms"].as_u64().expect("the provider's cancel call was made");
    assert!(closed < SLOW_MS && stopped < SLOW_MS, "{at_provider:#}");
    assert_eq!(at_provider["status"], "canceled", "{at_provider:#}");
    // Its usage is the provider's word: the whole prompt, part of the answer.
    assert_eq!(loser["usage"]["estimated"], false, "{loser:#}");
    assert_eq!(loser["usage"]["prompt_tokens"], at_provider["usage"]["prompt_tokens"], "{loser:#} {at_provider:#}");
    assert_eq!(
        loser["usage"]["completion_tokens"], at_provider["usage"]["completion_tokens"],
        "{loser:#} {at_provider:#}"
    );
    let id = canceled["id"].as_str().unwrap();
    let events = events_of(&app, id).await;
    let aborted = events
        .iter()
        .find(|(kind, number, _)| kind == "attempt-canceled" && *number == Some(1))
        .expect("the abort is logged");
    assert_eq!((&aborted.2["winner"], &aborted.2["job_state"]), (&json!(2), &json!("succeeded")), "{aborted:?}");
    assert_eq!(aborted.2["error"]["detail"]["cancel_call"], "made", "{aborted:?}");
    assert!(!events.iter().any(|(kind, _, _)| kind == "race-lost"), "no answer came to lose the race with: {events:?}");

    // cancel_losers off: the loser ran to its answer, kept as superseded.
    let kept_loser = &kept["attempts"][0];
    assert_eq!(kept_loser["state"], "superseded", "{kept:#}");
    assert!(kept_loser["output"].is_object(), "{kept_loser:#}");
    assert!(
        kept_at_provider["connection_closed_after_ms"].is_null() && kept_at_provider["canceled_after_ms"].is_null(),
        "{kept_at_provider:#}"
    );
    assert!(
        loser["usage"]["completion_tokens"].as_i64() < kept_loser["usage"]["completion_tokens"].as_i64(),
        "{loser:#} {kept_loser:#}"
    );

    // The same race wastes less when the loser is canceled.
    let (waste, kept_waste) = (money(&canceled["cost"]["waste"]), money(&kept["cost"]["waste"]));
    assert!(waste.is_positive(), "the canceled loser's prompt was charged: {canceled:#}");
    assert!(waste < kept_waste, "canceled {waste} < kept {kept_waste}");
}

async fn canceling_a_job_aborts_its_running_call_and_cancels_it_where_the_provider_can(backend: Backend) {
    let app = TestApp::spawn_live(backend, settings).await;
    for (key, provider) in [("cancelable", "sim-slow"), ("uncancelable", "sim-slow-uncancelable")] {
        let id = create(
            &app,
            key,
            &json!({"task": "summarize", "input": {"text": "canceled by its owner"}, "provider": provider}),
        )
        .await;
        let attempt = first_attempt_at_the_provider(&app, &id).await;
        let response =
            app.client.post(app.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&app.alice).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        // The answer says the running attempt is being canceled (unless its
        // worker was quicker than the answer's read).
        let answer: Value = response.json().await.unwrap();
        let first = &answer["attempts"][0]["state"];
        assert!(
            (answer["canceling"] == json!([1]) && first == "running")
                || (answer["canceling"] == json!([]) && first == "canceled"),
            "{answer:#}"
        );
        let job = app.wait_for(&id, "the running attempt canceled", |j| j["attempts"][0]["state"] == "canceled").await;
        assert_eq!(job["canceling"], json!([]), "nothing left being canceled: {job:#}");
        assert_eq!(job["state"], "canceled");
        let at_provider = &app.simulator_log().await[&attempt];
        assert!(
            at_provider["connection_closed_after_ms"].as_u64().is_some_and(|ms| ms < SLOW_MS),
            "{provider}: {at_provider:#}"
        );
        let usage = &job["attempts"][0]["usage"];
        let events = events_of(&app, &id).await;
        let canceled = events.iter().find(|(kind, _, _)| kind == "job-canceled").expect("the cancel is logged");
        assert_eq!((&canceled.2["canceled"], &canceled.2["canceling"]), (&json!([]), &json!([1])), "{canceled:?}");
        let aborted = events.iter().find(|(kind, _, _)| kind == "attempt-canceled").expect("the abort is logged");
        assert_eq!((&aborted.2["winner"], &aborted.2["job_state"]), (&Value::Null, &json!("canceled")), "{aborted:?}");
        if provider == "sim-slow" {
            assert!(at_provider["canceled_after_ms"].as_u64().is_some_and(|ms| ms < SLOW_MS), "{at_provider:#}");
            assert_eq!(usage["estimated"], false, "the provider said what it used: {usage}");
            assert_eq!(aborted.2["error"]["detail"]["cancel_call"], "made", "{aborted:?}");
        } else {
            // No cancel call: the provider may have gone on; the worst case is charged.
            assert!(at_provider["canceled_after_ms"].is_null(), "{at_provider:#}");
            assert_eq!((&usage["estimated"], &usage["completion_tokens"]), (&json!(true), &json!(512)), "{usage}");
            assert_eq!(aborted.2["error"]["detail"]["cancel_call"], "none", "{aborted:?}");
        }
    }
}

async fn a_cancel_through_another_api_server_reaches_the_call_in_flight_on_this_worker(backend: Backend) {
    let worker = TestApp::spawn_live(backend, settings).await;
    // An API server of its own process state, on the same database.
    let api = TestApp::spawn_on(backend, &worker.database_url, Role::Api, settings).await;
    let id = create(
        &worker,
        "elsewhere",
        &json!({"task": "summarize", "input": {"text": "canceled elsewhere"}, "provider": "sim-slow"}),
    )
    .await;
    let attempt = first_attempt_at_the_provider(&worker, &id).await;
    let response =
        api.client.post(api.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&api.alice).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // The worker hears of it at its next sweep, not from the other process.
    let job = worker.wait_for(&id, "the running attempt canceled", |j| j["attempts"][0]["state"] == "canceled").await;
    assert_eq!(job["state"], "canceled");
    let at_provider = &worker.simulator_log().await[&attempt];
    assert!(at_provider["connection_closed_after_ms"].as_u64().is_some_and(|ms| ms < SLOW_MS), "{at_provider:#}");
    assert!(at_provider["canceled_after_ms"].as_u64().is_some_and(|ms| ms < SLOW_MS), "{at_provider:#}");
}

on_both_backends!(
    a_win_aborts_the_losing_call_cancels_it_at_the_provider_and_wastes_less_than_letting_it_run,
    canceling_a_job_aborts_its_running_call_and_cancels_it_where_the_provider_can,
    a_cancel_through_another_api_server_reaches_the_call_in_flight_on_this_worker,
    an_answer_that_arrived_before_the_win_is_superseded_not_canceled,
);

/// How long the failpoint holds the first answer before it is recorded:
/// long enough for the fallback to be admitted, answered and to win;
/// inside the lease (sim-fast's 5 s deadline plus the margin).
const HOLD_MS: u64 = 2_500;

async fn an_answer_that_arrived_before_the_win_is_superseded_not_canceled(backend: Backend) {
    let (simulator, config) = simulator_and_config_with(200, |t| {
        set(t, &["providers", "sim-fast", "timeout_ms"], 5_000.into());
    })
    .await;
    let (database_url, _pool, token) = database(backend).await;
    let client = reqwest::Client::new();
    // The first answer to be recorded waits with it; later ones do not.
    let failpoint = format!("worker-before-record=1*return({HOLD_MS})");
    let (_server, address, _log) =
        crate::common::spawn_server_logged(&database_url, Some(&config), &[], &[("FAILPOINTS", &failpoint)]).await;
    let response = client
        .post(format!("http://{address}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "answered-first")
        .json(&json!({"task": "summarize", "input": {"text": "answered before the win"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let id = response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let first = job(&client, &address, &token, &id).await["attempts"][0]["id"].as_str().unwrap().to_owned();
    eventually("the first answer given", Duration::from_secs(10), || async {
        simulator_log(&client, &simulator).await.iter().any(|r| r["id"] == first.as_str() && r["status"] == "succeeded")
    })
    .await;
    // While that answer waits to be recorded, a fallback wins.
    let fallback = client
        .post(format!("http://{address}/jobs/{id}/attempts"))
        .bearer_auth(&token)
        .header("idempotency-key", "fallback")
        .json(&json!({"provider": "sim-fast"}))
        .send()
        .await
        .unwrap();
    assert_eq!(fallback.status(), StatusCode::CREATED);
    eventually("the first answer recorded after the win", Duration::from_secs(HOLD_MS / 1_000 + 10), || async {
        job(&client, &address, &token, &id).await["attempts"][0]["state"] != "running"
    })
    .await;
    let settled = job(&client, &address, &token, &id).await;
    assert_eq!(settled["winning_attempt"], 2, "{settled:#}");
    let first_attempt = &settled["attempts"][0];
    assert_eq!(first_attempt["state"], "superseded", "its answer had arrived: nothing to cancel: {settled:#}");
    assert!(first_attempt["output"].is_object(), "{settled:#}");
    let record = simulator_log(&client, &simulator).await.into_iter().find(|r| r["id"] == first.as_str()).unwrap();
    assert!(record["connection_closed_after_ms"].is_null() && record["canceled_after_ms"].is_null(), "{record:#}");
    let _ = std::fs::remove_file(config);
}

#[test]
fn cancel_losers_is_on_unless_a_task_turns_it_off() {
    let settings = Settings::builtin();
    assert!(settings.tasks.values().all(|task| task.cancel_losers));
    let sim = provider("kind = \"sim\"");
    assert!(sim.has_cancel_call(), "the simulator has a cancel call");
    let openai = provider("kind = \"openai\"\nbase_url = \"https://api.example.com/v1\"\napi_key_env = \"KEY\"");
    assert!(!openai.has_cancel_call(), "chat completions has none");
}
