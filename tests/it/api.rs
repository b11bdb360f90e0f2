//! The HTTP API over a real socket, against a real Postgres: I1, I2, I7 and
//! the admission rules as a client sees them.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{Backend, TestApp, claim_all, expect_problem};
use onejob::domain::{AttemptError, JobId, OwnerId};
use onejob::store::{AttemptRef, Transition};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Barrier;

fn summarize(text: &str) -> Value {
    json!({"task": "summarize", "input": {"text": text}})
}

fn job_id(body: &Value) -> JobId {
    JobId::parse(body["id"].as_str().unwrap()).unwrap()
}

fn alice_attempt(job: JobId, number: i32) -> AttemptRef {
    AttemptRef { owner: OwnerId::parse("alice").unwrap(), job_id: job, number }
}

async fn fifty_concurrent_posts_with_one_key_make_one_job(backend: Backend) {
    let app = Arc::new(TestApp::spawn(backend).await);
    let barrier = Arc::new(Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                let request = app.post_job_raw(&app.alice, "double-click", summarize("same intent").to_string());
                barrier.wait().await;
                let response = request.send().await.unwrap();
                let status = response.status();
                let replayed = response.headers().get("idempotent-replayed").is_some();
                let body: Value = response.json().await.unwrap();
                (status, replayed, body["id"].as_str().unwrap().to_owned())
            })
        })
        .collect();
    let mut results = vec![];
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let created = results.iter().filter(|(s, _, _)| *s == StatusCode::CREATED).count();
    let replays = results.iter().filter(|(s, replayed, _)| *s == StatusCode::OK && *replayed).count();
    assert_eq!((created, replays), (1, 49), "one 201, every other caller a replay");
    let ids: std::collections::HashSet<_> = results.iter().map(|(_, _, id)| id.clone()).collect();
    assert_eq!(ids.len(), 1, "every caller got the same job id");

    let jobs: i64 = sqlx::query_scalar("select count(*) from jobs").fetch_one(&app.db).await.unwrap();
    let attempts: i64 = sqlx::query_scalar("select count(*) from attempts").fetch_one(&app.db).await.unwrap();
    assert_eq!((jobs, attempts), (1, 1), "one row in jobs, one first attempt");
}

async fn same_key_with_different_input_is_a_conflict_and_changes_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let job = app.create_job("k", None).await;
    let response = app.post_job("k", &summarize("something else")).await;
    let problem = expect_problem(response, StatusCode::CONFLICT, "idempotency-key-reused").await;
    assert_eq!(problem["job_id"], job["id"]);
    // The detail names every part of the intent, the budget included.
    let detail = problem["detail"].as_str().unwrap();
    for part in ["task", "input", "provider", "max_cost"] {
        assert!(detail.contains(part), "the detail names {part}: {detail}");
    }
    let other_provider = app
        .post_job("k", &json!({"task": "summarize", "input": {"text": "one two three"}, "provider": "sim-slow"}))
        .await;
    expect_problem(other_provider, StatusCode::CONFLICT, "idempotency-key-reused").await;
    let now: Value = app.get(&app.alice, &format!("/jobs/{}", job["id"].as_str().unwrap())).await.json().await.unwrap();
    assert_eq!(now["input"], json!({"text": "one two three"}));
    assert_eq!(now["fingerprint"], job["fingerprint"]);
    assert_eq!(now["attempts"].as_array().unwrap().len(), 1);
}

async fn same_input_with_keys_reordered_and_other_whitespace_is_a_replay(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let first = app
        .post_job_raw(&app.alice, "k", r#"{"task":"summarize","input":{"text":"hi there","max_words":2}}"#.into())
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first: Value = first.json().await.unwrap();
    assert!(first["fingerprint"].as_str().unwrap().starts_with("sha256:"));
    let again = app
        .post_job_raw(
            &app.alice,
            "k",
            "{\n  \"input\" : { \"max_words\" : 2 , \"text\" : \"hi there\" },\n  \"task\" : \"summarize\"\n}".into(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    let again: Value = again.json().await.unwrap();
    assert_eq!(
        (again["id"].clone(), again["fingerprint"].clone()),
        (first["id"].clone(), first["fingerprint"].clone())
    );
}

async fn naming_the_default_provider_explicitly_is_a_replay_and_a_quoted_key_is_the_same_key(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let job = app.create_job("order-7", None).await;
    assert_eq!(job["provider"], "sim-fast");
    let explicit = json!({"task": "summarize", "input": {"text": "one two three"}, "provider": "sim-fast"});
    let response = app.post_job_raw(&app.alice, "\"order-7\"", explicit.to_string()).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["idempotent-replayed"], "true");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["id"], job["id"]);
}

async fn a_new_job_answers_201_with_location_and_its_pending_first_attempt(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let response = app.post_job("k", &summarize("hello world")).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(location, format!("/jobs/{}", body["id"].as_str().unwrap()));
    assert_eq!(body["state"], "queued");
    assert_eq!(body["idempotency_key"], "k");
    assert_eq!(body["attempts"][0]["number"], 1);
    assert_eq!(body["attempts"][0]["state"], "pending");
    let polled: Value = app.get(&app.alice, &location).await.json().await.unwrap();
    assert_eq!(polled["id"], body["id"]);
    assert_eq!(polled["attempts"][0]["id"], body["attempts"][0]["id"]);
}

async fn the_same_key_under_two_owners_makes_two_jobs(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let a = app.post_job_raw(&app.alice, "shared", summarize("x").to_string()).send().await.unwrap();
    let b = app.post_job_raw(&app.bob, "shared", summarize("x").to_string()).send().await.unwrap();
    assert_eq!((a.status(), b.status()), (StatusCode::CREATED, StatusCode::CREATED));
    let (a, b): (Value, Value) = (a.json().await.unwrap(), b.json().await.unwrap());
    assert_ne!(a["id"], b["id"]);
}

async fn another_owner_reading_or_adding_attempts_gets_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let job = app.create_job("k", None).await;
    let id = job["id"].as_str().unwrap();
    expect_problem(app.get(&app.bob, &format!("/jobs/{id}")).await, StatusCode::NOT_FOUND, "not-found").await;
    let attempt = app.post_attempt(&app.bob, id, "b-1", &json!({"provider": "sim-slow"})).await;
    expect_problem(attempt, StatusCode::NOT_FOUND, "not-found").await;
    let listed: Value = app.get(&app.bob, "/jobs").await.json().await.unwrap();
    assert_eq!(listed["jobs"], json!([]));
    // And nothing was added to alice's job.
    let mine: Value = app.get(&app.alice, &format!("/jobs/{id}")).await.json().await.unwrap();
    assert_eq!(mine["attempts"].as_array().unwrap().len(), 1);
}

async fn admission_matrix_answers_each_documented_refusal(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.tasks.get_mut("summarize").unwrap().max_attempts = 3;
        s.server.unknown_retry_after = Duration::from_secs(7);
    })
    .await;
    let job = app.create_job("k", Some("sim-slow")).await;
    let id = job["id"].as_str().unwrap();
    let job = job_id(&job);

    // The first attempt is pending: 409 attempt-pending.
    let response = app.post_attempt(&app.alice, id, "a", &json!({})).await;
    expect_problem(response, StatusCode::CONFLICT, "attempt-pending").await;

    // Unknown provider: 422 provider-unknown; unqualified: 422 provider-not-qualified.
    claim_all(&app).await;
    let response = app.post_attempt(&app.alice, id, "b", &json!({"provider": "nowhere"})).await;
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "provider-unknown").await;
    assert_eq!(problem["errors"][0]["pointer"], "/provider");
    let response = app.post_attempt(&app.alice, id, "c", &json!({"provider": "sim-bad-json"})).await;
    let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "provider-not-qualified").await;
    assert!(problem["detail"].as_str().unwrap().contains("never qualified"), "{problem}");
    app.qualify("sim-fast").await;

    // A running attempt does not block a fallback; two running do.
    let response = app.post_attempt(&app.alice, id, "d", &json!({"provider": "sim-fast"})).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(response.headers()["location"], format!("/jobs/{id}"));
    let attempt: Value = response.json().await.unwrap();
    assert_eq!((attempt["number"].clone(), attempt["provider"].clone()), (json!(2), json!("sim-fast")));
    assert_eq!(attempt["job_id"], id);
    claim_all(&app).await;
    let response = app.post_attempt(&app.alice, id, "e", &json!({})).await;
    expect_problem(response, StatusCode::CONFLICT, "too-many-attempts-in-flight").await;

    // Unknown outcome: 409 with Retry-After (the setting's), until it is resolved. Failing
    // attempts by hand goes through the real retry policy, which has
    // nowhere left to go here (sim-slow was tried; sim-fast is not next).
    let catalog = &app.catalog;
    let timeout = AttemptError::new("timeout", "deadline passed");
    assert_eq!(
        app.store().mark_unknown(&alice_attempt(job, 1), &timeout, None, None).await.unwrap(),
        Transition::Applied
    );
    let response = app.post_attempt(&app.alice, id, "f", &json!({})).await;
    assert_eq!(response.headers()["retry-after"], "7");
    expect_problem(response, StatusCode::CONFLICT, "attempt-outcome-unknown").await;
    let failed = AttemptError::new("provider-error", "503");
    app.store().fail_attempt(&alice_attempt(job, 1), &failed, catalog, None, None).await.unwrap();
    app.store().fail_attempt(&alice_attempt(job, 2), &failed, catalog, None, None).await.unwrap();

    // Attempt 3 of 3 is admitted; a fourth is over the limit.
    let response = app.post_attempt(&app.alice, id, "g", &json!({})).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    claim_all(&app).await;
    app.store().fail_attempt(&alice_attempt(job, 3), &failed, catalog, None, None).await.unwrap();
    let response = app.post_attempt(&app.alice, id, "h", &json!({})).await;
    expect_problem(response, StatusCode::CONFLICT, "attempt-limit-reached").await;

    // A finished job takes no attempt.
    let other = app.create_job("k2", None).await;
    let other_id = job_id(&other);
    claim_all(&app).await;
    app.store()
        .finish_attempt(&alice_attempt(other_id, 1), &json!({"summary": "x", "word_count": 1}), None, None)
        .await
        .unwrap();
    let response = app.post_attempt(&app.alice, &other_id.to_string(), "i", &json!({})).await;
    expect_problem(response, StatusCode::CONFLICT, "job-finished").await;

    // Every refusal left an event.
    let events = app.store().list_events(&OwnerId::parse("alice").unwrap(), job).await.unwrap();
    let refused: Vec<_> =
        events.iter().filter(|e| e.kind == "admission-refused").map(|e| e.detail["problem"].clone()).collect();
    assert_eq!(
        refused,
        [
            json!("attempt-pending"),
            json!("provider-not-qualified"),
            json!("too-many-attempts-in-flight"),
            json!("attempt-outcome-unknown"),
            json!("attempt-limit-reached")
        ]
    );
}

async fn twenty_concurrent_attempt_posts_never_leave_two_pending(backend: Backend) {
    let app = Arc::new(
        TestApp::spawn_with(backend, |s| {
            let task = s.tasks.get_mut("summarize").unwrap();
            task.max_attempts = 50;
            task.max_in_flight = 50;
        })
        .await,
    );
    app.qualify("sim-slow").await;
    let job = app.create_job("k", None).await;
    let id = job["id"].as_str().unwrap().to_owned();
    claim_all(&app).await;
    let barrier = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (app, barrier, id) = (app.clone(), barrier.clone(), id.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                app.post_attempt(&app.alice, &id, &format!("fallback-{i}"), &json!({"provider": "sim-slow"}))
                    .await
                    .status()
            })
        })
        .collect();
    let mut statuses = vec![];
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == StatusCode::CREATED).count(), 1, "{statuses:?}");
    assert!(statuses.iter().all(|s| *s == StatusCode::CREATED || *s == StatusCode::CONFLICT), "{statuses:?}");
    let pending: i64 =
        sqlx::query_scalar("select count(*) from attempts where state = 'pending'").fetch_one(&app.db).await.unwrap();
    assert_eq!(pending, 1);
}

async fn a_double_clicked_fallback_button_makes_one_attempt(backend: Backend) {
    let app = Arc::new(TestApp::spawn(backend).await);
    app.qualify("sim-fast").await;
    let job = app.create_job("k", Some("sim-slow")).await;
    let id = job["id"].as_str().unwrap().to_owned();
    claim_all(&app).await;
    let barrier = Arc::new(Barrier::new(10));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (app, barrier, id) = (app.clone(), barrier.clone(), id.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let response =
                    app.post_attempt(&app.alice, &id, "use-fallback", &json!({"provider": "sim-fast"})).await;
                let status = response.status();
                let body: Value = response.json().await.unwrap();
                (status, body["number"].clone())
            })
        })
        .collect();
    let mut results = vec![];
    for task in tasks {
        results.push(task.await.unwrap());
    }
    assert_eq!(results.iter().filter(|(s, _)| *s == StatusCode::CREATED).count(), 1, "{results:?}");
    assert!(
        results.iter().all(|(s, n)| (*s == StatusCode::CREATED || *s == StatusCode::OK) && *n == json!(2)),
        "{results:?}"
    );
    let job: Value = app.get(&app.alice, &format!("/jobs/{id}")).await.json().await.unwrap();
    assert_eq!(job["attempts"].as_array().unwrap().len(), 2);
    let reused = app.post_attempt(&app.alice, &id, "use-fallback", &json!({"provider": "sim-slow"})).await;
    expect_problem(reused, StatusCode::CONFLICT, "idempotency-key-reused").await;
}

async fn bad_requests_get_problem_answers_naming_what_is_wrong(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.server.max_body_bytes = 1024).await;
    let body = summarize("x").to_string();

    let no_key = app
        .client
        .post(app.url("/jobs"))
        .bearer_auth(&app.alice)
        .header("content-type", "application/json")
        .body(body.clone());
    expect_problem(no_key.send().await.unwrap(), StatusCode::BAD_REQUEST, "idempotency-key-missing").await;
    for bad in ["has space", "\"unterminated", &"k".repeat(256)] {
        let response = app.post_job_raw(&app.alice, bad, body.clone()).send().await.unwrap();
        expect_problem(response, StatusCode::BAD_REQUEST, "idempotency-key-invalid").await;
    }

    let no_token = app.client.post(app.url("/jobs")).header("idempotency-key", "k").body(body.clone());
    let response = no_token.send().await.unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    expect_problem(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let fake = format!("oj_{}", "0".repeat(64));
    for token in [fake.as_str(), "not-a-token"] {
        let response = app.post_job_raw(token, "k", body.clone()).send().await.unwrap();
        expect_problem(response, StatusCode::UNAUTHORIZED, "unauthorized").await;
    }
    let basic = app.client.get(app.url("/jobs")).header("authorization", "Basic YWxpY2U6eA==");
    expect_problem(basic.send().await.unwrap(), StatusCode::UNAUTHORIZED, "unauthorized").await;
    // Two Authorization headers, a live key first or second: which one
    // authenticates would be a guess.
    for (first, second) in [(app.alice.as_str(), fake.as_str()), (fake.as_str(), app.alice.as_str())] {
        let twice = app
            .client
            .get(app.url("/jobs"))
            .header("authorization", format!("Bearer {first}"))
            .header("authorization", format!("Bearer {second}"));
        expect_problem(twice.send().await.unwrap(), StatusCode::BAD_REQUEST, "header-repeated").await;
    }

    let huge = summarize(&"x".repeat(4096)).to_string();
    let response = app.post_job_raw(&app.alice, "k", huge).send().await.unwrap();
    expect_problem(response, StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large").await;

    let form = app
        .client
        .post(app.url("/jobs"))
        .bearer_auth(&app.alice)
        .header("idempotency-key", "k")
        .header("content-type", "text/plain")
        .body(body.clone());
    expect_problem(form.send().await.unwrap(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type").await;
    // JSON is UTF-8: a body said to be UTF-16 is not read as UTF-8.
    let typed = |token: &str, content_type: &str| {
        let url = app.url("/jobs");
        app.client.post(url).bearer_auth(token).header("idempotency-key", "k").header("content-type", content_type)
    };
    for content_type in ["application/json; charset=utf-16", "application/json;charset=ISO-8859-1"] {
        let other = typed(&app.alice, content_type).body(body.clone());
        expect_problem(other.send().await.unwrap(), StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported-media-type").await;
    }
    // (Said UTF-8, it is read; made by another owner, it is not in alice's list below.)
    let said_utf8 = typed(&app.operator, "application/json; charset=UTF-8").body(body.clone());
    assert_eq!(said_utf8.send().await.unwrap().status(), StatusCode::CREATED);

    let cases: [(&str, &str); 7] = [
        ("{\"task\": ", ""),
        (r#"{"task": "translate", "input": {}}"#, "/task"),
        (r#"{"input": {"text": "x"}}"#, "/task"),
        (r#"{"task": "summarize"}"#, "/input"),
        (r#"{"task": "summarize", "input": {"text": "x", "max_words": "three"}}"#, "/input/max_words"),
        (r#"{"task": "summarize", "input": {"text": "x", "colour": "red"}}"#, "/input"),
        (r#"{"task": "summarize", "input": {"text": "x"}, "priority": 1}"#, "/priority"),
    ];
    for (raw, pointer) in cases {
        let response = app.post_job_raw(&app.alice, "k", raw.into()).send().await.unwrap();
        let problem = expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "validation-failed").await;
        assert_eq!(problem["errors"][0]["pointer"], pointer, "{raw}: {problem}");
    }
    let response = app
        .post_job_raw(
            &app.alice,
            "k",
            json!({"task": "summarize", "input": {"text": "x"}, "provider": "gpt-9"}).to_string(),
        )
        .send()
        .await
        .unwrap();
    expect_problem(response, StatusCode::UNPROCESSABLE_ENTITY, "provider-unknown").await;

    // None of that created anything.
    let listed: Value = app.get(&app.alice, "/jobs").await.json().await.unwrap();
    assert_eq!(listed["jobs"], json!([]));

    for path in ["/jobs/not-a-uuid", &format!("/jobs/{}", JobId::new()), "/nowhere"] {
        expect_problem(app.get(&app.alice, path).await, StatusCode::NOT_FOUND, "not-found").await;
    }
    expect_problem(
        app.get(&app.alice, "/jobs?limit=1000").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation-failed",
    )
    .await;
    expect_problem(
        app.get(&app.alice, "/jobs?state=done").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation-failed",
    )
    .await;
    let delete = app.client.delete(app.url("/jobs")).bearer_auth(&app.alice).send().await.unwrap();
    expect_problem(delete, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;
}

async fn listing_pages_newest_first_and_filters(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut ids = vec![];
    for i in 0..5 {
        ids.push(app.create_job(&format!("k{i}"), None).await["id"].clone());
    }
    let page: Value = app.get(&app.alice, "/jobs?limit=2").await.json().await.unwrap();
    assert_eq!(
        page["jobs"].as_array().unwrap().iter().map(|j| j["id"].clone()).collect::<Vec<_>>(),
        [ids[4].clone(), ids[3].clone()]
    );
    let cursor = page["next_cursor"].as_str().unwrap();
    let page: Value = app.get(&app.alice, &format!("/jobs?limit=2&cursor={cursor}")).await.json().await.unwrap();
    assert_eq!(
        page["jobs"].as_array().unwrap().iter().map(|j| j["id"].clone()).collect::<Vec<_>>(),
        [ids[2].clone(), ids[1].clone()]
    );
    let cursor = page["next_cursor"].as_str().unwrap();
    let last: Value = app.get(&app.alice, &format!("/jobs?limit=2&cursor={cursor}")).await.json().await.unwrap();
    assert_eq!(last["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(last["next_cursor"], Value::Null);
    claim_all(&app).await;
    let running: Value = app.get(&app.alice, "/jobs?state=running&task=summarize").await.json().await.unwrap();
    assert_eq!(running["jobs"].as_array().unwrap().len(), 5);
    let queued: Value = app.get(&app.alice, "/jobs?state=queued").await.json().await.unwrap();
    assert_eq!(queued["jobs"], json!([]));
}

/// A database that cannot be reached answers 503 with `Retry-After`,
/// promptly; the server stays alive. On Postgres the server is a process
/// started that way without migrating, as replicas start: it listens at
/// once and waits for the database (`app::database`).
async fn an_unreachable_database_answers_503_with_retry_after(backend: Backend) {
    // Whichever serves, kept until the test ends.
    let (mut _process, mut _app) = (None, None);
    let (base, token) = match backend {
        // A socket directory where no server listens.
        Backend::Postgres => {
            let unreachable = "postgres://postgres@localhost/onejob?host=/nonexistent-onejob-socket-dir";
            let started = std::time::Instant::now();
            let (child, address) = crate::common::spawn_server_with(unreachable, None, &[]).await;
            assert!(started.elapsed() < Duration::from_secs(10), "listening at once, not after the database");
            _process = Some(child);
            (format!("http://{address}"), "not-checked".to_owned())
        }
        // A file in a directory that does not exist. The test's own keys go
        // to the test database, so the tokens are well-formed but unverifiable.
        Backend::Sqlite => {
            let app = TestApp::spawn_with(backend, |s| {
                s.database.url = Some("sqlite:///nonexistent-onejob-dir/onejob.db".into());
                s.database.migrate_on_start = false;
                s.database.acquire_timeout = Duration::from_millis(500);
            })
            .await;
            let served = (app.url(""), app.alice.clone());
            _app = Some(app);
            served
        }
    };
    let http = reqwest::Client::new();
    let started = std::time::Instant::now();
    let response = http
        .post(format!("{base}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "k")
        .json(&json!({"task": "summarize", "input": {"text": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["retry-after"], "1");
    expect_problem(response, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
    assert!(started.elapsed() < Duration::from_secs(5), "answered promptly, not after a hang");
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    let alive = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(alive.status(), StatusCode::OK);
}

async fn a_revoked_key_stops_working(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.server.auth_cache_ttl = Duration::ZERO).await;
    let owner = OwnerId::parse("carol").unwrap();
    let (id, token) = onejob::keys::create_key(app.store(), &owner).await.unwrap();
    assert_eq!(app.get(&token, "/jobs").await.status(), StatusCode::OK);
    assert!(app.store().revoke_api_key(id, None).await.unwrap());
    expect_problem(app.get(&token, "/jobs").await, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

/// The create path for a new key is one statement (so one round trip once
/// the statement is prepared on the connection), and it sends no NOTIFY.
/// Counted by pg_stat_statements in this test's own database.
async fn creating_a_job_with_a_new_key_is_one_statement_without_notify() {
    // Postgres only: round trips are what a networked database costs; the
    // embedded SQLite store has none to count.
    let app = TestApp::spawn(Backend::Postgres).await;
    let pool = &sqlx::PgPool::connect(&app.database_url).await.unwrap();
    // Warm up: authenticate once (cached afterwards) and prepare the statement.
    app.create_job("warm-up", None).await;
    crate::common::postgres::reset_statement_counts(pool).await;
    app.create_job("counted", None).await;
    let rows = crate::common::postgres::statement_counts(pool).await;
    let calls: i64 = rows.iter().map(|(_, calls)| calls).sum();
    assert_eq!(calls, 1, "statements run for one create: {rows:#?}");
    assert!(rows[0].0.contains("insert into jobs"), "{rows:#?}");
    assert!(!rows.iter().any(|(query, _)| query.to_lowercase().contains("notify")), "{rows:#?}");
}

/// An address that sends unknown keys is refused, past its limit, before
/// any look-up: with 429 and the wait, whatever key it sends next, except a
/// key the server checked lately. Behind a trusted proxy, the client's
/// address is the last of `X-Forwarded-For`.
async fn unknown_keys_from_one_address_are_refused_past_its_limit_before_a_look_up(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.server.auth_failures_per_minute = 3;
        s.server.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
    })
    .await;
    // Alice's key, checked once: the server knows it for a while.
    assert_eq!(app.get(&app.alice, "/jobs").await.status(), StatusCode::OK);
    let fake = format!("oj_{}", "0".repeat(64));
    let from = |address: &'static str, token: &str| {
        app.client.get(app.url("/jobs")).bearer_auth(token).header("x-forwarded-for", format!("203.0.113.9, {address}"))
    };
    for _ in 0..3 {
        expect_problem(from("198.51.100.7", &fake).send().await.unwrap(), StatusCode::UNAUTHORIZED, "unauthorized")
            .await;
    }
    let refused = from("198.51.100.7", &fake).send().await.unwrap();
    let retry_after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    expect_problem(refused, StatusCode::TOO_MANY_REQUESTS, "rate-limited").await;
    // A key never checked would need a look-up: refused too. A key checked
    // lately needs none.
    let (_, unchecked) = onejob::keys::create_key(app.store(), &OwnerId::parse("carol").unwrap()).await.unwrap();
    expect_problem(
        from("198.51.100.7", &unchecked).send().await.unwrap(),
        StatusCode::TOO_MANY_REQUESTS,
        "rate-limited",
    )
    .await;
    // (SQLite servers keep no checked keys: there, every key needs a look-up.)
    let lately = match backend {
        Backend::Postgres => StatusCode::OK,
        Backend::Sqlite => StatusCode::TOO_MANY_REQUESTS,
    };
    assert_eq!(from("198.51.100.7", &app.alice).send().await.unwrap().status(), lately);
    // Another client behind the same proxy is its own.
    assert_eq!(from("198.51.100.8", &unchecked).send().await.unwrap().status(), StatusCode::OK);
}

on_both_backends!(
    unknown_keys_from_one_address_are_refused_past_its_limit_before_a_look_up,
    fifty_concurrent_posts_with_one_key_make_one_job,
    same_key_with_different_input_is_a_conflict_and_changes_nothing,
    same_input_with_keys_reordered_and_other_whitespace_is_a_replay,
    naming_the_default_provider_explicitly_is_a_replay_and_a_quoted_key_is_the_same_key,
    a_new_job_answers_201_with_location_and_its_pending_first_attempt,
    the_same_key_under_two_owners_makes_two_jobs,
    another_owner_reading_or_adding_attempts_gets_404,
    admission_matrix_answers_each_documented_refusal,
    twenty_concurrent_attempt_posts_never_leave_two_pending,
    a_double_clicked_fallback_button_makes_one_attempt,
    bad_requests_get_problem_answers_naming_what_is_wrong,
    listing_pages_newest_first_and_filters,
    an_unreachable_database_answers_503_with_retry_after,
    a_revoked_key_stops_working,
);

on_postgres!(creating_a_job_with_a_new_key_is_one_statement_without_notify);
