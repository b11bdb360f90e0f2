//! The promises through a deploy that changes the configuration: a replay
//! is answered from the job as stored, whatever the tasks, providers and
//! prices say now (I2), and only new jobs are checked against them.

use crate::common::{Backend, TestApp, expect_problem};
use onejob::app::Role;
use onejob::config::Settings;
use onejob::domain::{AttemptId, Fingerprint, IdempotencyKey, JobId, OwnerId, Price};
use onejob::store::NewJob;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn with_digest_task(settings: &mut Settings) {
    let summarize = settings.tasks["summarize"].clone();
    settings.tasks.insert("digest".into(), summarize);
}

/// The deploy: sim-slow is the default now, every price is ten thousand
/// times higher, inputs may be at most three characters, and `digest` is gone.
fn after_the_deploy(settings: &mut Settings) {
    let task = settings.tasks.get_mut("summarize").unwrap();
    task.default_provider = "sim-slow".into();
    task.input_schema["properties"]["text"]["maxLength"] = json!(3);
    for provider in settings.providers.values_mut() {
        provider.price = Some(Price {
            input_per_million: "1500".parse().unwrap(),
            output_per_million: "6000".parse().unwrap(),
            cache_write_per_million: None,
            cache_read_per_million: None,
            per_second: None,
            per_output: None,
            currency: "USD".into(),
        });
    }
}

async fn post(app: &TestApp, key: &str, body: &Value) -> (StatusCode, Value) {
    let response = app.post_job(key, body).await;
    let status = response.status();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let body: Value = response.json().await.unwrap();
    assert_eq!(replayed, status == StatusCode::OK, "{status} {body}");
    (status, body)
}

async fn a_replay_is_answered_from_the_stored_job_whatever_the_configuration_says_now(backend: Backend) {
    let before = TestApp::spawn_with(backend, with_digest_task).await;
    let requests = [
        ("no-provider", json!({"task": "summarize", "input": {"text": "one two three"}})),
        ("budget", json!({"task": "summarize", "input": {"text": "one two three"}, "max_cost": "0.01"})),
        ("removed-task", json!({"task": "digest", "input": {"text": "one two three"}})),
    ];
    let mut made = vec![];
    for (key, body) in &requests {
        let (status, job) = post(&before, key, body).await;
        assert_eq!(status, StatusCode::CREATED, "{job}");
        made.push(job);
    }

    let after = TestApp::spawn_on(backend, &before.database_url, Role::Api, after_the_deploy).await;
    for ((key, body), job) in requests.iter().zip(&made) {
        let (status, replay) = post(&after, key, body).await;
        assert_eq!(status, StatusCode::OK, "{key}: the identical request is a replay after the deploy: {replay}");
        assert_eq!(
            (&replay["id"], &replay["provider"]),
            (&job["id"], &job["provider"]),
            "{key}: the stored job answers"
        );
    }
    // Another intent under a taken key is still a conflict.
    let other = json!({"task": "summarize", "input": {"text": "four five six"}});
    expect_problem(after.post_job("no-provider", &other).await, StatusCode::CONFLICT, "idempotency-key-reused").await;

    // New jobs are checked against the configuration as it is now.
    let (status, fresh) = post(&after, "new", &json!({"task": "summarize", "input": {"text": "abc"}})).await;
    assert_eq!((status, fresh["provider"].as_str()), (StatusCode::CREATED, Some("sim-slow")), "{fresh}");
    let too_long = json!({"task": "summarize", "input": {"text": "one two three"}});
    expect_problem(after.post_job("new-long", &too_long).await, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed")
        .await;
    let over_budget = json!({"task": "summarize", "input": {"text": "abc"}, "max_cost": "0.01"});
    expect_problem(after.post_job("new-budget", &over_budget).await, StatusCode::CONFLICT, "budget-exceeded").await;
    let gone = json!({"task": "digest", "input": {"text": "abc"}});
    expect_problem(after.post_job("new-digest", &gone).await, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed")
        .await;
}

async fn naming_the_default_provider_is_the_same_intent_only_for_a_job_made_under_that_default(backend: Backend) {
    let before = TestApp::spawn(backend).await;
    let input = json!({"text": "one two three"});
    let unnamed = json!({"task": "summarize", "input": input});
    let named = |provider: &str| json!({"task": "summarize", "input": input, "provider": provider});
    for (key, body) in
        [("unnamed", &unnamed), ("named-default", &named("sim-fast")), ("named-other", &named("sim-slow"))]
    {
        assert_eq!(post(&before, key, body).await.0, StatusCode::CREATED);
    }
    // Under the default the jobs were made with.
    assert_eq!(post(&before, "unnamed", &named("sim-fast")).await.0, StatusCode::OK);
    assert_eq!(post(&before, "named-default", &unnamed).await.0, StatusCode::OK);
    assert_eq!(post(&before, "named-other", &unnamed).await.0, StatusCode::CONFLICT);

    // After sim-slow became the default, the jobs still answer for the intents they were made for.
    let after = TestApp::spawn_on(backend, &before.database_url, Role::Api, |s| {
        s.tasks.get_mut("summarize").unwrap().default_provider = "sim-slow".into();
    })
    .await;
    let expected = [
        ("unnamed", &unnamed, StatusCode::OK),
        ("unnamed", &named("sim-fast"), StatusCode::OK),
        ("unnamed", &named("sim-slow"), StatusCode::CONFLICT),
        ("named-default", &unnamed, StatusCode::OK),
        ("named-default", &named("sim-fast"), StatusCode::OK),
        ("named-other", &named("sim-slow"), StatusCode::OK),
        // sim-slow was not the default when this job was made.
        ("named-other", &unnamed, StatusCode::CONFLICT),
    ];
    for (key, body, status) in expected {
        let (got, answer) = post(&after, key, body).await;
        assert_eq!(got, status, "{key} with {body}: {answer}");
    }
}

async fn a_job_stored_with_the_first_fingerprint_form_still_replays(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let input = json!({"text": "one two three"});
    // A job as stored before the fingerprint covered the intent as sent:
    // over the provider it resolved to, here the default.
    let old = NewJob {
        owner: OwnerId::parse("alice").unwrap(),
        id: JobId::new(),
        idempotency_key: IdempotencyKey::parse(b"stored-long-ago").unwrap(),
        fingerprint: Fingerprint::of_job_with_budget("summarize", &input, "sim-fast", Some("0.05".into())),
        task: "summarize".into(),
        input: input.clone(),
        provider: "sim-fast".into(),
        first_attempt_id: AttemptId::new(),
        first_provider: None,
        max_cost: Some("0.05".parse().unwrap()),
        trace: None,
    };
    app.store.create_job(&old).await.unwrap();
    let id = old.id.to_string();
    for body in [
        json!({"task": "summarize", "input": input, "max_cost": "0.05"}),
        json!({"task": "summarize", "input": input, "max_cost": "0.050", "provider": "sim-fast"}),
    ] {
        let (status, job) = post(&app, "stored-long-ago", &body).await;
        assert_eq!((status, job["id"].as_str()), (StatusCode::OK, Some(id.as_str())), "{body}");
    }
    for body in [
        json!({"task": "summarize", "input": input}),
        json!({"task": "summarize", "input": input, "max_cost": "0.05", "provider": "sim-slow"}),
    ] {
        expect_problem(app.post_job("stored-long-ago", &body).await, StatusCode::CONFLICT, "idempotency-key-reused")
            .await;
    }
}

on_both_backends!(
    a_replay_is_answered_from_the_stored_job_whatever_the_configuration_says_now,
    naming_the_default_provider_is_the_same_intent_only_for_a_job_made_under_that_default,
    a_job_stored_with_the_first_fingerprint_form_still_replays,
);
