//! Jobs brought to life: the worker, the simulator, timeouts as unknown,
//! reconciliation, races and the retry policy, over HTTP against the running
//! application, a real Postgres and the simulator (a real HTTP server).
//! Timing comes from the simulator's configured latencies; the tests wait
//! by long-polling for the states they expect, never by sleeping.

use std::sync::Arc;

use crate::common::{Backend, TestApp, expect_problem, provider};
use onejob::domain::{JobId, OwnerId};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Barrier;

fn attempts(job: &Value) -> &Vec<Value> {
    job["attempts"].as_array().unwrap()
}

fn summarize_on(provider: &str, text: &str) -> Value {
    json!({"task": "summarize", "input": {"text": text}, "provider": provider})
}

async fn create(app: &TestApp, key: &str, body: &Value) -> String {
    let response = app.post_job(key, body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let job: Value = response.json().await.unwrap();
    job["id"].as_str().unwrap().to_owned()
}

async fn events(app: &TestApp, id: &str) -> Vec<(String, Option<i32>)> {
    let events = app.store().list_events(&OwnerId::parse("alice").unwrap(), JobId::parse(id).unwrap()).await.unwrap();
    events.into_iter().map(|e| (e.kind.to_string(), e.attempt_number)).collect()
}

async fn a_double_click_with_the_worker_running_makes_one_job_and_one_provider_request(backend: Backend) {
    let app = Arc::new(TestApp::spawn_live(backend, |_| {}).await);
    let barrier = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                let request = app.post_job_raw(
                    &app.alice,
                    "click",
                    json!({"task": "summarize", "input": {"text": "one two three four"}}).to_string(),
                );
                barrier.wait().await;
                let body: Value = request.send().await.unwrap().json().await.unwrap();
                body["id"].as_str().unwrap().to_owned()
            })
        })
        .collect();
    let mut ids = std::collections::HashSet::new();
    for task in tasks {
        ids.insert(task.await.unwrap());
    }
    assert_eq!(ids.len(), 1);
    let id = ids.into_iter().next().unwrap();
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    assert_eq!(job["result"], json!({"summary": "one two three four", "word_count": 4}));
    assert_eq!(attempts(&job).len(), 1);
    let log = app.simulator_log().await;
    assert_eq!(log.len(), 1, "one request reached the provider: {log:#?}");
    let attempt_id = attempts(&job)[0]["id"].as_str().unwrap();
    assert_eq!(log[attempt_id]["received"], 1, "the attempt id is the provider's request id");
}

async fn mismatched_input_under_one_key_is_refused_with_the_worker_running(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let id = create(&app, "k", &json!({"task": "summarize", "input": {"text": "a b"}})).await;
    let other = app.post_job("k", &json!({"task": "summarize", "input": {"text": "c d"}})).await;
    expect_problem(other, StatusCode::CONFLICT, "idempotency-key-reused").await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    assert_eq!(job["input"], json!({"text": "a b"}));
}

async fn a_timeout_is_unknown_not_failed_and_blocks_new_attempts_until_reconciled(backend: Backend) {
    // No failover: once reconciled, the next attempt is the client's to make.
    let app = TestApp::spawn_live(backend, |s| s.tasks.get_mut("summarize").unwrap().failover.clear()).await;
    let id = create(&app, "k", &summarize_on("sim-hang", "never answered")).await;
    let job = app.wait_for(&id, "unknown", |j| j["state"] == "unknown").await;
    assert_eq!(attempts(&job)[0]["state"], "unknown");
    assert_eq!(attempts(&job)[0]["error"]["type"], "timeout");

    let refused = app.post_attempt(&app.alice, &id, "retry-1", &json!({})).await;
    assert!(refused.headers().contains_key("retry-after"));
    expect_problem(refused, StatusCode::CONFLICT, "attempt-outcome-unknown").await;

    // The simulator's status lookup says `running`, then `failed`: the
    // reconciler settles the attempt as failed, and a new attempt is admitted.
    let job = app.wait_for(&id, "reconciled", |j| j["state"] != "unknown").await;
    assert_eq!((job["state"].clone(), attempts(&job)[0]["state"].clone()), (json!("failed"), json!("failed")));
    let message = attempts(&job)[0]["error"]["message"].as_str().unwrap().to_owned();
    assert_eq!(
        message, "the provider's status lookup says the request failed: gave up",
        "says what the lookup answered"
    );
    let admitted = app.post_attempt(&app.alice, &id, "retry-2", &json!({"provider": "sim-fast"})).await;
    assert_eq!(admitted.status(), StatusCode::CREATED);
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    assert_eq!(job["winning_attempt"], 2);
    assert_eq!(app.simulator_log().await.values().filter(|r| r["received"] != 1).count(), 0);
}

/// A task that lets a losing call run to its answer (`cancel_losers` off).
fn losers_run_on(s: &mut onejob::config::Settings) {
    s.tasks.get_mut("summarize").unwrap().cancel_losers = false;
}

async fn reverse_order_finish_the_fallback_wins_and_the_slow_primary_is_superseded(backend: Backend) {
    let app = TestApp::spawn_live(backend, losers_run_on).await;
    let id = create(&app, "k", &summarize_on("sim-slow", "slow primary answer")).await;
    app.wait_for(&id, "running", |j| j["state"] == "running").await;
    let fallback = app.post_attempt(&app.alice, &id, "use-fallback", &json!({"provider": "sim-fast"})).await;
    assert_eq!(fallback.status(), StatusCode::CREATED);
    let job = app
        .wait_for(&id, "the primary finished too", |j| {
            j["attempts"].as_array().is_some_and(|a| a.len() == 2 && a[0]["state"] == "superseded")
        })
        .await;
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["winning_attempt"], 2, "the second to leave, first to return, wins");
    assert_eq!(attempts(&job)[1]["state"], "succeeded");
    assert_eq!(attempts(&job)[1]["provider"], "sim-fast");
    assert_eq!(job["result"], attempts(&job)[1]["output"]);
    assert!(attempts(&job)[0]["output"].is_object(), "the loser's output is kept for audit");
    let log = events(&app, &id).await;
    assert!(log.contains(&("race-lost".to_owned(), Some(1))), "{log:?}");
}

async fn a_late_success_is_unknown_then_reconciled_to_succeeded_with_the_providers_output(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let id = create(&app, "k", &summarize_on("sim-late", "late but fine")).await;
    app.wait_for(&id, "unknown", |j| j["state"] == "unknown").await;
    let job = app.wait_for(&id, "reconciled", |j| j["state"] != "unknown").await;
    assert_eq!(job["state"], "succeeded");
    assert_eq!(job["result"], json!({"summary": "late but fine", "word_count": 3}));
    assert_eq!(attempts(&job).len(), 1, "nothing was retried while the outcome was unknown");
    let log = events(&app, &id).await;
    let kinds: Vec<&str> = log.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["job-created", "attempt-claimed", "attempt-unknown", "attempt-succeeded"]);
}

async fn a_retryable_failure_is_retried_then_failed_over_in_order_within_the_budget(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert("sim-down".into(), provider("kind = \"sim\"\nerror_rate = 1.0\nerror_status = 503"));
        s.providers.insert("sim-refuses".into(), provider("kind = \"sim\"\nerror_rate = 1.0\nerror_status = 400"));
        let task = s.tasks.get_mut("summarize").unwrap();
        task.default_provider = "sim-down".into();
        task.failover = vec!["sim-refuses".into(), "sim-fast".into()];
    })
    .await;
    // Qualification is about the contract, not availability: sim-refuses
    // counts as proven (as if it had passed before it broke).
    app.qualify("sim-refuses").await;
    let id = create(&app, "k", &json!({"task": "summarize", "input": {"text": "third time lucky"}})).await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    let chain: Vec<(Value, Value, Value)> =
        attempts(&job).iter().map(|a| (a["provider"].clone(), a["origin"].clone(), a["state"].clone())).collect();
    assert_eq!(
        chain,
        [
            (json!("sim-down"), json!("client"), json!("failed")),
            (json!("sim-down"), json!("policy"), json!("failed")),
            (json!("sim-refuses"), json!("policy"), json!("failed")),
            (json!("sim-fast"), json!("policy"), json!("succeeded")),
        ]
    );
    assert_eq!(attempts(&job)[0]["error"]["detail"], json!({"status": 503, "retryable": true}));
    assert_eq!(attempts(&job)[2]["error"]["detail"], json!({"status": 400, "retryable": false}));
}

async fn the_policy_stops_at_the_attempt_budget(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert("sim-down".into(), provider("kind = \"sim\"\nerror_rate = 1.0\nerror_status = 503"));
        let task = s.tasks.get_mut("summarize").unwrap();
        task.default_provider = "sim-down".into();
        task.max_attempts = 2;
    })
    .await;
    let id = create(&app, "k", &json!({"task": "summarize", "input": {"text": "x"}})).await;
    let job = app
        .wait_for(&id, "two failures", |j| {
            j["state"] == "failed" && j["attempts"].as_array().is_some_and(|a| a.len() == 2)
        })
        .await;
    assert!(attempts(&job).iter().all(|a| a["state"] == "failed"));
    let more = app.post_attempt(&app.alice, &id, "one-more", &json!({})).await;
    expect_problem(more, StatusCode::CONFLICT, "attempt-limit-reached").await;
}

async fn nothing_is_retried_automatically_while_an_attempt_is_unknown(backend: Backend) {
    // sim-hang fails over to sim-fast, but only once reconciliation has
    // settled the unknown attempt as failed.
    let app =
        TestApp::spawn_live(backend, |s| s.tasks.get_mut("summarize").unwrap().failover = vec!["sim-fast".into()])
            .await;
    let id = create(&app, "k", &summarize_on("sim-hang", "wait for me")).await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    assert_eq!(job["winning_attempt"], 2);
    assert_eq!(attempts(&job)[1]["origin"], "policy");
    let kinds: Vec<(String, Option<i32>)> = events(&app, &id).await;
    let position = |kind: &str, number: i32| kinds.iter().position(|(k, n)| k == kind && *n == Some(number)).unwrap();
    assert!(position("attempt-unknown", 1) < position("attempt-failed", 1), "{kinds:?}");
    assert!(position("attempt-failed", 1) < position("attempt-admitted", 2), "the failover waited: {kinds:?}");
}

async fn an_output_that_is_not_json_fails_the_attempt_and_never_wins(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert("sim-chatty".into(), provider("kind = \"sim\"\noutput = \"not_json\""));
        s.tasks.get_mut("summarize").unwrap().failover = vec!["sim-chatty".into()];
    })
    .await;
    let id = create(&app, "k", &summarize_on("sim-chatty", "x y")).await;
    let job = app.wait_for(&id, "failed", |j| j["state"] == "failed").await;
    let attempt = &attempts(&job)[0];
    assert_eq!(attempt["error"]["type"], "contract-violation");
    assert_eq!(job["result"], Value::Null);
    // What the provider said is kept on the attempt, marked as never applied.
    let kept = &attempt["unapplied_output"];
    assert_eq!(kept["why"], "contract-violation", "{attempt:#}");
    assert!(kept["output"].as_str().is_some_and(|text| !text.is_empty()), "the provider's text: {attempt:#}");
    assert!(attempt["error"]["detail"].get("received_text").is_none(), "kept once, not in the error too: {attempt:#}");
}

async fn an_output_that_breaks_the_schema_is_kept_on_its_attempt_unvalidated(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert("sim-extra".into(), provider("kind = \"sim\"\noutput = \"extra_top_level_key\""));
        s.tasks.get_mut("summarize").unwrap().failover = vec!["sim-extra".into()];
    })
    .await;
    let id = create(&app, "k", &summarize_on("sim-extra", "x y")).await;
    let job = app.wait_for(&id, "failed", |j| j["state"] == "failed").await;
    let attempt = &attempts(&job)[0];
    assert_eq!(
        (&attempt["error"]["type"], &attempt["output"]),
        (&json!("contract-violation"), &Value::Null),
        "{attempt:#}"
    );
    let kept = &attempt["unapplied_output"];
    assert_eq!(kept["why"], "contract-violation", "{attempt:#}");
    assert_eq!(kept["output"]["summary"], "x y", "the output as the provider gave it: {attempt:#}");
    assert!(kept["output"].as_object().unwrap().len() > 2, "with the member the contract refuses: {attempt:#}");
}

async fn cancel_stops_a_job_and_a_running_attempts_late_output_is_never_applied(backend: Backend) {
    let app = TestApp::spawn_live(backend, losers_run_on).await;
    let id = create(&app, "k", &summarize_on("sim-slow", "too slow")).await;
    app.wait_for(&id, "running", |j| j["state"] == "running").await;
    let cancel = |id: String| app.client.post(app.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&app.alice).send();
    let canceled = cancel(id.clone()).await.unwrap();
    assert_eq!(canceled.status(), StatusCode::OK);
    let job = app.wait_for(&id, "the running attempt finished", |j| j["attempts"][0]["state"] == "superseded").await;
    assert_eq!((job["state"].clone(), job["result"].clone()), (json!("canceled"), Value::Null));
    assert_eq!(cancel(id.clone()).await.unwrap().status(), StatusCode::OK, "canceling twice is harmless");
    let refused = app.post_attempt(&app.alice, &id, "after-cancel", &json!({})).await;
    expect_problem(refused, StatusCode::CONFLICT, "job-finished").await;

    let done = create(&app, "k2", &json!({"task": "summarize", "input": {"text": "quick"}})).await;
    app.wait_for(&done, "succeeded", |j| j["state"] == "succeeded").await;
    expect_problem(cancel(done).await.unwrap(), StatusCode::CONFLICT, "job-finished").await;
    let bobs = app.client.post(app.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&app.bob).send().await.unwrap();
    expect_problem(bobs, StatusCode::NOT_FOUND, "not-found").await;
}

async fn an_unknown_attempt_without_a_status_lookup_waits_for_an_operators_resolve(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.providers.insert(
            "sim-blind".into(),
            provider("kind = \"sim\"\ntimeout_ms = 300\nhang_ms = 60000\nstatus_lookup = false"),
        );
        s.tasks.get_mut("summarize").unwrap().failover = vec!["sim-blind".into()];
    })
    .await;
    let id = create(&app, "k", &summarize_on("sim-blind", "who knows")).await;
    app.wait_for(&id, "unknown", |j| j["state"] == "unknown").await;
    let resolve = |body: Value, token: String| {
        app.client.post(app.url(&format!("/jobs/{id}/attempts/1/resolve"))).bearer_auth(token).json(&body).send()
    };
    let no_output = resolve(json!({"outcome": "succeeded", "reason": "checked"}), app.alice.clone()).await.unwrap();
    expect_problem(no_output, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
    let bobs = resolve(json!({"outcome": "failed", "reason": "not mine"}), app.bob.clone()).await.unwrap();
    expect_problem(bobs, StatusCode::NOT_FOUND, "not-found").await;

    let output = json!({"summary": "who knows", "word_count": 2});
    let resolved = resolve(
        json!({"outcome": "succeeded", "output": output, "reason": "seen in the provider's console"}),
        app.alice.clone(),
    )
    .await
    .unwrap();
    assert_eq!(resolved.status(), StatusCode::OK);
    let job: Value = resolved.json().await.unwrap();
    assert_eq!((job["state"].clone(), job["result"].clone()), (json!("succeeded"), output));
    // The event says who resolved it: the key and its role, with the reason.
    let alice = onejob::domain::OwnerId::parse("alice").unwrap();
    let keys = app.store.list_api_keys(Some(&alice)).await.unwrap();
    let events = app.store.list_events(&alice, onejob::domain::JobId::parse(&id).unwrap()).await.unwrap();
    let won = events.iter().find(|e| e.kind == "attempt-succeeded").expect("the resolve's event");
    assert_eq!(won.detail["reason"], "seen in the provider's console");
    assert_eq!(won.detail["resolved_by"]["role"], "client", "{:?}", won.detail);
    assert!(keys.iter().any(|k| won.detail["resolved_by"]["key"] == k.id.to_string().as_str()), "{:?}", won.detail);
    let again = resolve(json!({"outcome": "failed", "reason": "twice"}), app.alice.clone()).await.unwrap();
    let problem = expect_problem(again, StatusCode::CONFLICT, "attempt-not-unknown").await;
    assert_eq!(problem["state"], "succeeded");
}

async fn a_long_poll_answers_when_the_job_changes_and_304_when_the_client_is_up_to_date(backend: Backend) {
    // The attempt waits a minute at the provider: nothing changes the job
    // but the cancel below, so the reads before it see one version.
    let app = TestApp::spawn_live(backend, |s| {
        let slow = s.providers.get_mut("sim-slow").unwrap();
        slow.latency = std::time::Duration::from_millis(60_000);
        slow.timeout = std::time::Duration::from_millis(120_000);
    })
    .await;
    let id = create(&app, "k", &summarize_on("sim-slow", "wait for it")).await;
    let job = app.wait_for(&id, "running", |j| j["state"] == "running").await;
    let first = app.client.get(app.url(&format!("/jobs/{id}"))).bearer_auth(&app.alice).send().await.unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_owned();
    let unchanged = app
        .client
        .get(app.url(&format!("/jobs/{id}")))
        .bearer_auth(&app.alice)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(job["state"], "running");
    // A long poll (up to 10 s) answers once the job changes: here, when it
    // is canceled (before or after the poll began, the answer is the same).
    let poll = app
        .client
        .get(app.url(&format!("/jobs/{id}?wait=10")))
        .bearer_auth(&app.alice)
        .header("if-none-match", &etag)
        .send();
    let cancel = app.client.post(app.url(&format!("/jobs/{id}/cancel"))).bearer_auth(&app.alice).send();
    let (changed, canceled) = tokio::join!(poll, cancel);
    assert_eq!(canceled.unwrap().status(), StatusCode::OK);
    let changed = changed.unwrap();
    assert_eq!(changed.status(), StatusCode::OK);
    assert_ne!(changed.headers()["etag"].to_str().unwrap(), etag);
    let done: Value = changed.json().await.unwrap();
    assert_eq!(done["state"], "canceled");
    // Its running attempt is canceled after the job: then nothing changes.
    app.wait_for(&id, "its attempt canceled", |j| j["attempts"][0]["state"] == "canceled").await;
    let final_tag =
        app.client.get(app.url(&format!("/jobs/{id}"))).bearer_auth(&app.alice).send().await.unwrap().headers()["etag"]
            .clone();
    let started = std::time::Instant::now();
    let terminal = app
        .client
        .get(app.url(&format!("/jobs/{id}?wait=10")))
        .bearer_auth(&app.alice)
        .header("if-none-match", final_tag)
        .send()
        .await
        .unwrap();
    assert_eq!(terminal.status(), StatusCode::NOT_MODIFIED);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "a finished job does not make the client wait");
}

async fn a_creation_that_prefers_to_wait_is_answered_with_its_job_finished_or_when_the_wait_has_passed(
    backend: Backend,
) {
    // sim-slow answers in 3 s; the owner has one place for long-polls; a
    // request may take a second, and a wait on top.
    let app = TestApp::spawn_live(backend, |s| {
        s.server.max_long_polls_per_owner = 1;
        s.server.request_timeout = std::time::Duration::from_millis(1_000);
        let slow = s.providers.get_mut("sim-slow").unwrap();
        slow.latency = std::time::Duration::from_millis(3_000);
        slow.timeout = std::time::Duration::from_millis(10_000);
    })
    .await;
    let prefer = |key: &str, body: &Value, preference: &str| {
        app.post_job_raw(&app.alice, key, body.to_string()).header("prefer", preference).send()
    };
    let applied = |response: &reqwest::Response| {
        response.headers().get("preference-applied").map(|v| v.to_str().unwrap().to_owned())
    };
    let fast = summarize_on("sim-fast", "answered in one round trip");
    let created = prefer("fast", &fast, "respond-async, wait=10").await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    assert_eq!(applied(&created).as_deref(), Some("wait=10"));
    let job: Value = created.json().await.unwrap();
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(attempts(&job)[0]["state"], "succeeded", "{job}");
    let replay = prefer("fast", &fast, "wait=10").await.unwrap();
    assert_eq!(replay.status(), StatusCode::OK);
    assert_eq!(applied(&replay).as_deref(), Some("wait=10"));
    assert_eq!(replay.json::<Value>().await.unwrap()["state"], "succeeded");

    // A wait shorter than the provider's answer ends with the job unfinished.
    let started = std::time::Instant::now();
    let slow = summarize_on("sim-slow", "longer than the wait");
    let waited = prefer("slow", &slow, "wait=1").await.unwrap();
    assert_eq!(waited.status(), StatusCode::CREATED);
    assert_eq!(applied(&waited).as_deref(), Some("wait=1"));
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "it waited");
    let job: Value = waited.json().await.unwrap();
    assert!(job["state"] == "queued" || job["state"] == "running", "{job}");
    // With the owner's one place held (by an event stream on that job,
    // unfinished for two more seconds), a wait is declined: the job is
    // answered at once.
    let id = job["id"].as_str().unwrap();
    let stream = app.client.get(app.url(&format!("/jobs/{id}/events"))).bearer_auth(&app.alice).send().await.unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    let declined = prefer("declined", &slow, "wait=30").await.unwrap();
    assert_eq!(declined.status(), StatusCode::CREATED);
    assert_eq!(applied(&declined), None, "declined when no place is free");
    assert_eq!(declined.json::<Value>().await.unwrap()["state"], "queued");
    drop(stream);
    app.wait_for(id, "succeeded", |j| j["state"] == "succeeded").await;

    // A bad wait is refused before anything is made.
    for bad in ["wait=31", "wait=soon", "wait=-1"] {
        let refused = prefer("refused", &fast, bad).await.unwrap();
        let problem = expect_problem(refused, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
        assert_eq!(problem["errors"][0]["parameter"], "Prefer", "{problem}");
    }
    assert_eq!(app.post_job("refused", &fast).await.status(), StatusCode::CREATED, "the refused requests made no job");

    // Another preference alone is ignored.
    let ignored = prefer("ignored", &fast, "handling=lenient").await.unwrap();
    assert_eq!(ignored.status(), StatusCode::CREATED);
    assert_eq!(applied(&ignored), None);
}

on_both_backends!(
    a_double_click_with_the_worker_running_makes_one_job_and_one_provider_request,
    mismatched_input_under_one_key_is_refused_with_the_worker_running,
    a_timeout_is_unknown_not_failed_and_blocks_new_attempts_until_reconciled,
    reverse_order_finish_the_fallback_wins_and_the_slow_primary_is_superseded,
    a_late_success_is_unknown_then_reconciled_to_succeeded_with_the_providers_output,
    a_retryable_failure_is_retried_then_failed_over_in_order_within_the_budget,
    the_policy_stops_at_the_attempt_budget,
    nothing_is_retried_automatically_while_an_attempt_is_unknown,
    an_output_that_is_not_json_fails_the_attempt_and_never_wins,
    an_output_that_breaks_the_schema_is_kept_on_its_attempt_unvalidated,
    cancel_stops_a_job_and_a_running_attempts_late_output_is_never_applied,
    an_unknown_attempt_without_a_status_lookup_waits_for_an_operators_resolve,
    a_long_poll_answers_when_the_job_changes_and_304_when_the_client_is_up_to_date,
    a_creation_that_prefers_to_wait_is_answered_with_its_job_finished_or_when_the_wait_has_passed,
);
