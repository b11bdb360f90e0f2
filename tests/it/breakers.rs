//! Providers taken out while they fail, over HTTP against the running
//! application with the simulator as the providers. `sim-down` answers
//! every call with a 500 for its first `OUTAGE_MS` (`outage_ms`), then
//! well; its breaker opens after three calls mostly failed and cools down
//! in `COOL_DOWN_MS` (long enough for what the test checks while it is
//! open). `summarize` runs on it and fails over to `sim-fast`.
//! Opened, the breaker sends new jobs straight to sim-fast (the simulator
//! never hears of them), fails a job that named sim-down fast without a
//! call, and shows on `GET /providers` and `/metrics`; a probe after the
//! outage closes it. Two replicas agree on it through the database, and an
//! operator opens and closes it by hand.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::processes::eventually;
use crate::common::{Backend, TestApp, expect_problem, ok_json, provider};
use onejob::app::Role;
use onejob::config::Settings;

const OUTAGE_MS: u64 = 3_000;
/// Long enough for the checks made while the breaker is open.
const COOL_DOWN_MS: u64 = 2_000;

/// sim-down, with its outage and its breaker, and summarize on it.
fn settings(s: &mut Settings, outage_ms: u64) {
    let sim = "kind = \"sim\"\nmodel = \"sim-1\"\nlatency_ms = 5\nerror_status = 500";
    let breaker =
        format!("breaker = {{ failure_rate = 0.5, min_calls = 3, window_ms = 10000, cool_down_ms = {COOL_DOWN_MS} }}");
    s.providers.insert("sim-down".into(), provider(&format!("{sim}\noutage_ms = {outage_ms}\n{breaker}")));
    let summarize = s.tasks.get_mut("summarize").unwrap();
    summarize.default_provider = "sim-down".into();
    summarize.failover = vec!["sim-fast".into()];
}

async fn create(app: &TestApp, key: &str, provider: Option<&str>) -> String {
    let mut body = json!({"task": "summarize", "input": {"text": format!("breaker {key}")}});
    if let Some(provider) = provider {
        body["provider"] = json!(provider);
    }
    let response = app.post_job(key, &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

async fn succeeded(app: &TestApp, id: &str) -> Value {
    let job = app.wait_for(id, "the job finished", |job| job["state"] != "queued" && job["state"] != "running").await;
    assert_eq!(job["state"], "succeeded", "{job:#}");
    job
}

/// sim-down's breaker on `GET /providers`, as the operator reads it.
async fn breaker(app: &TestApp) -> Value {
    let providers = ok_json(app.get(&app.operator, "/providers").await).await;
    let sim_down = providers["providers"].as_array().unwrap().iter().find(|p| p["name"] == "sim-down").unwrap();
    sim_down["breaker"].clone()
}

fn providers_of(job: &Value) -> Vec<&str> {
    job["attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap()).collect()
}

async fn a_breaker_opens_on_a_provider_failing_every_call_routes_new_jobs_around_it_and_a_probe_closes_it(
    backend: Backend,
) {
    let app = TestApp::spawn_live(backend, |s| settings(s, OUTAGE_MS)).await;
    assert_eq!(breaker(&app).await["state"], "closed");
    // Jobs during the outage fail on sim-down, then fail over.
    for n in 0..2 {
        let job = succeeded(&app, &create(&app, &format!("during-{n}"), None).await).await;
        assert_eq!(providers_of(&job).last(), Some(&"sim-fast"), "{job:#}");
    }
    let open = breaker(&app).await;
    assert_eq!((open["state"].as_str(), open["by"].as_str()), (Some("open"), Some("worker")), "{open:#}");
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains(r#"onejob_provider_breaker_state{provider="sim-down",state="open"} 1"#),
        "{}",
        metrics.lines().filter(|l| l.contains("breaker")).collect::<Vec<_>>().join("\n")
    );

    // Open: a new job goes straight to sim-fast, without a failure.
    let around = succeeded(&app, &create(&app, "around", None).await).await;
    assert_eq!(providers_of(&around), ["sim-fast"], "{around:#}");
    // A job that named sim-down is not moved: it fails fast there, unsent,
    // and its chain goes on.
    let named = succeeded(&app, &create(&app, "named", Some("sim-down")).await).await;
    assert_eq!(providers_of(&named), ["sim-down", "sim-fast"], "{named:#}");
    assert_eq!(named["attempts"][0]["error"]["type"], "provider-open", "{named:#}");
    let log = app.simulator_log().await;
    assert!(!log.contains_key(named["attempts"][0]["id"].as_str().unwrap()), "the open provider was not called");

    // After the outage, a probe answers and closes the breaker; new jobs
    // run on sim-down again.
    let mut n = 0;
    eventually("a probe closed the breaker", Duration::from_secs(20), || {
        n += 1;
        let app = &app;
        async move {
            succeeded(app, &create(app, &format!("after-{n}"), None).await).await;
            breaker(app).await["state"] == "closed"
        }
    })
    .await;
    let closed = succeeded(&app, &create(&app, "closed", None).await).await;
    assert_eq!(providers_of(&closed), ["sim-down"], "{closed:#}");
}

async fn an_operator_opens_a_breaker_until_closing_it_by_hand(backend: Backend) {
    // sim-down never fails here.
    let app = TestApp::spawn_live(backend, |s| settings(s, 0)).await;
    let set = |token: &str, provider: &str, body: Value| {
        app.client.post(app.url(&format!("/providers/{provider}/breaker"))).bearer_auth(token).json(&body).send()
    };
    let open = json!({"state": "open", "reason": "maintenance window"});
    expect_problem(set(&app.alice, "sim-down", open.clone()).await.unwrap(), StatusCode::FORBIDDEN, "forbidden").await;
    expect_problem(set(&app.operator, "nowhere", open.clone()).await.unwrap(), StatusCode::NOT_FOUND, "not-found")
        .await;
    let no_breaker = set(&app.operator, "sim-slow", open.clone()).await.unwrap();
    expect_problem(no_breaker, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    let bad = set(&app.operator, "sim-down", json!({"state": "half", "reason": "x"})).await.unwrap();
    expect_problem(bad, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;

    let opened = ok_json(set(&app.operator, "sim-down", open).await.unwrap()).await;
    assert_eq!((opened["state"].as_str(), opened["by"].as_str()), (Some("open"), Some("operator")), "{opened:#}");
    assert_eq!(opened["reason"], "maintenance window");
    // The dashboard's providers page shows it.
    let (status, page) = crate::ui::sign_in(&app, &app.operator).await.page("/ui/providers").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains(r#"data-breaker="open""#) && page.contains("maintenance window"), "{page}");
    // Past a worker's cool-down, no probe is let through.
    tokio::time::sleep(Duration::from_millis(COOL_DOWN_MS + 500)).await;
    let around = succeeded(&app, &create(&app, "around", None).await).await;
    assert_eq!(providers_of(&around), ["sim-fast"], "{around:#}");
    assert_eq!(breaker(&app).await["state"], "open");

    let closed =
        ok_json(set(&app.operator, "sim-down", json!({"state": "closed", "reason": "done"})).await.unwrap()).await;
    assert_eq!(closed["state"], "closed", "{closed:#}");
    let back = succeeded(&app, &create(&app, "back", None).await).await;
    assert_eq!(providers_of(&back), ["sim-down"], "{back:#}");
}

async fn two_replicas_agree_on_an_open_breaker() {
    let backend = Backend::Postgres;
    let url = backend.fresh_database().await;
    let outage = |s: &mut Settings| settings(s, 60_000);
    // Every attempt runs on the first; the second only takes requests.
    let worker = TestApp::spawn_on(backend, &url, Role::All, outage).await;
    let api = TestApp::spawn_on(backend, &url, Role::Api, outage).await;
    for n in 0..2 {
        succeeded(&worker, &create(&worker, &format!("during-{n}"), None).await).await;
    }
    assert_eq!(breaker(&worker).await["state"], "open");
    eventually("the other replica sees the breaker open", Duration::from_secs(5), || async {
        breaker(&api).await["state"] == "open"
    })
    .await;
    let around = succeeded(&api, &create(&api, "around", None).await).await;
    assert_eq!(providers_of(&around), ["sim-fast"], "routed by the replica that saw no failure: {around:#}");
}

on_both_backends!(
    a_breaker_opens_on_a_provider_failing_every_call_routes_new_jobs_around_it_and_a_probe_closes_it,
    an_operator_opens_a_breaker_until_closing_it_by_hand,
);

on_postgres!(two_replicas_agree_on_an_open_breaker);
