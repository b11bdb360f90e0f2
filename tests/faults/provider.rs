//! Provider faults, driven by the simulator: each fault mode lands its
//! attempt in the state DESIGN.md's failure classification gives it, with
//! the reason recorded. A definitive failure is `failed` (retryable or not);
//! anything after which the provider may have done the work is `unknown`.
//! The tests wait by long-polling, never by sleeping.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, provider};

/// The deadline of the faulty provider's attempts.
const DEADLINE_MS: i64 = 400;
/// How long past it the status lookup's "no such request" must last.
const ABSENCE_GRACE_MS: i64 = 300;

/// A live application with provider `sim-faulty` configured by `settings`
/// (TOML lines), and no retry or failover unless `retries` says so.
async fn app_with(backend: Backend, settings: &str, retries: u32) -> TestApp {
    TestApp::spawn_live(backend, |s| {
        let text =
            format!("kind = \"sim\"\ntimeout_ms = {DEADLINE_MS}\nabsence_grace_ms = {ABSENCE_GRACE_MS}\n{settings}");
        s.providers.insert("sim-faulty".into(), provider(&text));
        let summarize = s.tasks.get_mut("summarize").unwrap();
        summarize.failover.clear();
        summarize.retries_per_provider = retries;
    })
    .await
}

async fn create_on_faulty(app: &TestApp) -> String {
    let body = json!({"task": "summarize", "input": {"text": "under faults"}, "provider": "sim-faulty"});
    let response = app.post_job("fault", &body).await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let job: Value = response.json().await.unwrap();
    job["id"].as_str().unwrap().to_owned()
}

fn first_attempt(job: &Value) -> &Value {
    &job["attempts"][0]
}

fn time(value: &Value) -> DateTime<Utc> {
    value.as_str().unwrap_or_else(|| panic!("a timestamp: {value}")).parse().unwrap()
}

/// How long the attempt ran, from its claim to its outcome, in milliseconds.
fn ran_for_ms(attempt: &Value) -> i64 {
    (time(&attempt["finished_at"]) - time(&attempt["started_at"])).num_milliseconds()
}

/// Waits for the first attempt to reach `state` and checks its error type.
async fn first_attempt_ends(app: &TestApp, id: &str, state: &str, error_type: &str) -> Value {
    let job = app.wait_for(id, state, |j| first_attempt(j)["state"] == state).await;
    let attempt = first_attempt(&job).clone();
    assert_eq!(attempt["error"]["type"], error_type, "{attempt:#}");
    attempt
}

async fn a_reset_before_the_request_was_read_fails_the_attempt_as_never_received_retryable_and_free(backend: Backend) {
    // The client cannot tell a reset before the provider took its request
    // from one after: the attempt is `unknown` first. The provider's status
    // lookup then says it never received the request, which settles it as
    // failed and safe to retry.
    let priced = "fault = \"reset_before_request\"\nprice = { input_per_million = \"2.50\", output_per_million = \"10.00\", currency = \"USD\" }";
    let app = app_with(backend, priced, 0).await;
    let id = create_on_faulty(&app).await;
    let attempt = first_attempt_ends(&app, &id, "failed", "not-received").await;
    assert_eq!(attempt["error"]["detail"]["retryable"], true, "{attempt:#}");
    assert!(
        ran_for_ms(&attempt) >= DEADLINE_MS + ABSENCE_GRACE_MS,
        "absence is believed only past the deadline and its grace: {attempt:#}"
    );
    // Never received: nothing used, nothing to pay.
    assert_eq!(
        attempt["usage"],
        json!({"prompt_tokens": 0, "completion_tokens": 0, "cache_write_tokens": 0, "cache_read_tokens": 0,
               "estimated": false}),
        "{attempt:#}"
    );
    assert_eq!(attempt["cost"]["amount"], "0", "{attempt:#}");
    assert!(app.simulator_log().await.is_empty(), "the provider never took the request");
    let job = app.wait_for(&id, "failed", |j| j["state"] == "failed").await;
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "no retry budget was given: {job:#}");
}

async fn a_reset_before_the_request_was_read_is_retried_on_the_same_provider(backend: Backend) {
    let app = app_with(backend, "fault = \"reset_before_request\"", 1).await;
    let id = create_on_faulty(&app).await;
    let job = app
        .wait_for(&id, "two attempts failed", |j| {
            j["state"] == "failed" && j["attempts"].as_array().unwrap().len() == 2
        })
        .await;
    let second = &job["attempts"][1];
    assert_eq!(
        (second["provider"].clone(), second["origin"].clone()),
        (json!("sim-faulty"), json!("policy")),
        "{job:#}"
    );
}

async fn a_reset_after_the_request_was_read_leaves_the_attempt_unknown(backend: Backend) {
    let app = app_with(backend, "fault = \"reset_after_request\"\nstatus_lookup = false", 0).await;
    let id = create_on_faulty(&app).await;
    let attempt = first_attempt_ends(&app, &id, "unknown", "connection-lost").await;
    assert!(ran_for_ms(&attempt) < DEADLINE_MS, "the reset is seen at once, not at the deadline: {attempt:#}");
    let log = app.simulator_log().await;
    assert_eq!(log[attempt["id"].as_str().unwrap()]["received"], 1, "the provider took the request");
    // Unknown blocks new attempts until reconciled (I4).
    let refused = app.post_attempt(&app.alice, &id, "retry", &json!({})).await;
    assert_eq!(refused.status(), StatusCode::CONFLICT);
}

async fn a_reset_after_the_request_was_read_is_reconciled_to_the_work_the_provider_did(backend: Backend) {
    let app = app_with(backend, "fault = \"reset_after_request\"", 0).await;
    let id = create_on_faulty(&app).await;
    let job = app.wait_for(&id, "succeeded", |j| j["state"] == "succeeded").await;
    assert_eq!(job["result"], json!({"summary": "under faults", "word_count": 2}));
    assert_eq!(app.simulator_log().await.len(), 1, "the provider was asked once, then only looked up");
}

/// A fault after which nothing more comes settles as `unknown` when the
/// attempt's deadline passes: not before, and not much later.
async fn unknown_at_the_deadline(backend: Backend, fault: &str) {
    let app = app_with(backend, &format!("fault = \"{fault}\"\nstatus_lookup = false"), 0).await;
    let id = create_on_faulty(&app).await;
    let attempt = first_attempt_ends(&app, &id, "unknown", "timeout").await;
    let ran = ran_for_ms(&attempt);
    // The error names the provider's timeout and, when the claim took some
    // of it (much of it on a loaded machine), what the call itself had.
    let message = attempt["error"]["message"].as_str().unwrap_or_default();
    let millis = |after: &str| -> Option<i64> { message.split(after).nth(1)?.split(' ').next()?.parse().ok() };
    assert_eq!(millis("timeout of "), Some(DEADLINE_MS), "{fault}: the error names the timeout: {attempt:#}");
    let given = millis("the call itself had ").unwrap_or(DEADLINE_MS);
    assert!(given <= DEADLINE_MS && given > DEADLINE_MS / 2, "{fault}: a deadline of {given} ms: {attempt:#}");
    assert!((given - 50..DEADLINE_MS + 2_000).contains(&ran), "{fault}: settled after {ran} ms: {attempt:#}");
}

async fn response_headers_that_never_come_leave_the_attempt_unknown_at_its_deadline(backend: Backend) {
    unknown_at_the_deadline(backend, "no_headers").await;
}

async fn a_body_that_stalls_halfway_leaves_the_attempt_unknown_at_its_deadline(backend: Backend) {
    unknown_at_the_deadline(backend, "stalled_body").await;
}

/// A fault that makes the answer unusable fails the attempt for good (not
/// retryable on the same provider), with `error_type` and a message that
/// says why.
async fn failed_for_good(backend: Backend, fault: &str, error_type: &str, says: &str) -> Value {
    let app = app_with(backend, &format!("fault = \"{fault}\""), 0).await;
    let id = create_on_faulty(&app).await;
    let attempt = first_attempt_ends(&app, &id, "failed", error_type).await;
    assert_eq!(attempt["error"]["detail"]["retryable"], false, "{attempt:#}");
    assert!(attempt["error"]["message"].as_str().unwrap().contains(says), "{attempt:#}");
    assert_eq!(attempt["output"], Value::Null, "an unusable answer is never an output");
    attempt
}

/// The server in a process of its own, whose peak memory is measured
/// around the attempt: reading at most the 4 MiB it keeps, it never holds
/// the 10 MiB the provider sends.
async fn a_10_mib_answer_is_not_buffered_and_fails_the_attempt_as_too_large(backend: Backend) {
    use crate::common::processes::{database, job, peak_memory, reset_peak_memory, resident_memory, set};
    let (_simulator, config) = crate::common::processes::simulator_and_config_with(200, |t| {
        let faulty: toml::Table = "kind = \"sim\"\ntimeout_ms = 5000\nfault = \"huge_body\"".parse().unwrap();
        set(t, &["providers", "sim-faulty"], toml::Value::Table(faulty));
        set(t, &["tasks", "summarize", "failover"], toml::Value::Array(vec![]));
        set(t, &["tasks", "summarize", "retries_per_provider"], 0.into());
    })
    .await;
    let (database_url, _pool, token) = database(backend).await;
    let (server, address, _log) = crate::common::spawn_server_logged(&database_url, Some(&config), &[], &[]).await;
    let pid = server.id().unwrap();
    let client = reqwest::Client::new();
    let create = |key: &'static str, provider: &'static str| {
        let (client, address, token) = (&client, &address, &token);
        async move {
            let body = json!({"task": "summarize", "input": {"text": "under faults"}, "provider": provider});
            let response = client
                .post(format!("http://{address}/jobs"))
                .bearer_auth(token)
                .header("idempotency-key", key)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
        }
    };
    let ended = |id: String| {
        let (client, address, token) = (&client, &address, &token);
        async move {
            crate::common::processes::eventually("the attempt ended", std::time::Duration::from_secs(20), || async {
                let now = job(client, address, token, &id).await;
                !matches!(first_attempt(&now)["state"].as_str(), Some("pending" | "running"))
            })
            .await;
            job(client, address, token, &id).await
        }
    };
    // A first job warms the server's paths up.
    let warm = ended(create("warm", "sim-fast").await).await;
    assert_eq!(first_attempt(&warm)["state"], "succeeded", "{warm:#}");

    reset_peak_memory(pid);
    let before = resident_memory(pid);
    let settled = ended(create("fault", "sim-faulty").await).await;
    let grew = peak_memory(pid).saturating_sub(before);

    let attempt = first_attempt(&settled);
    assert_eq!((&attempt["state"], &attempt["error"]["type"]), (&json!("failed"), &json!("response-too-large")));
    assert_eq!(attempt["error"]["detail"]["retryable"], false, "{attempt:#}");
    assert!(attempt["error"]["message"].as_str().unwrap().contains("larger than 4194304 bytes"), "{attempt:#}");
    assert_eq!(attempt["output"], Value::Null, "an unusable answer is never an output");
    // Measured: about 9 MB reading at most 4 MiB (the body, its growth, the
    // connection's buffers); about 21 MB when the whole 10 MiB is read first.
    assert!(grew < 14 << 20, "the server's peak memory grew by {grew} bytes reading a 10 MiB answer");
    let _ = std::fs::remove_file(config);
}

async fn invalid_utf8_in_an_answer_fails_the_attempt_as_a_bad_response(backend: Backend) {
    failed_for_good(backend, "invalid_utf8", "bad-response", "not a chat completion").await;
}

async fn an_error_object_in_a_200_answer_fails_the_attempt_as_a_provider_error(backend: Backend) {
    let attempt = failed_for_good(backend, "error_in_200", "provider-error", "server had an error").await;
    assert_eq!(attempt["error"]["detail"]["status"], 200, "{attempt:#}");
}

async fn a_429_with_retry_after_requeues_the_attempt_max_requeues_times_then_fails_it_retryable_and_the_retry_waits_as_asked(
    backend: Backend,
) {
    let app = TestApp::spawn_live(backend, |s| {
        let text = format!(
            "kind = \"sim\"\ntimeout_ms = {DEADLINE_MS}\nerror_rate = 1.0\nerror_status = 429\nretry_after_secs = 1"
        );
        s.providers.insert("sim-faulty".into(), provider(&text));
        let summarize = s.tasks.get_mut("summarize").unwrap();
        summarize.failover.clear();
        summarize.retries_per_provider = 1;
        s.worker.max_requeues = 1;
    })
    .await;
    let id = create_on_faulty(&app).await;
    let job = app
        .wait_for(&id, "both attempts failed", |j| {
            j["state"] == "failed" && j["attempts"].as_array().unwrap().len() == 2
        })
        .await;
    let (first, second) = (&job["attempts"][0], &job["attempts"][1]);
    assert_eq!(first["error"]["type"], "provider-error");
    assert_eq!(first["error"]["detail"]["status"], 429);
    assert_eq!(first["error"]["detail"]["retryable"], true);
    assert_eq!(first["error"]["detail"]["retry_after_ms"], 1000, "{first:#}");
    // Each attempt was put back once (max_requeues), a second later sent
    // again as itself, refused again, and failed.
    let events = app
        .store()
        .list_events(
            &onejob::domain::OwnerId::parse("alice").unwrap(),
            id.parse::<uuid::Uuid>().map(onejob::domain::JobId).unwrap(),
        )
        .await
        .unwrap();
    let requeued: Vec<_> = events.iter().filter(|e| e.kind == onejob::domain::EventKind::AttemptRequeued).collect();
    assert_eq!(requeued.iter().map(|e| e.attempt_number).collect::<Vec<_>>(), [Some(1), Some(2)], "{events:#?}");
    let log = app.simulator_log().await;
    for attempt in [first, second] {
        assert_eq!(log[attempt["id"].as_str().unwrap()]["received"], 2, "sent twice as the same attempt: {log:#?}");
    }
    // The task's backoff is 50 ms; the provider asked for a second.
    let waited = (time(&second["not_before"]) - time(&first["finished_at"])).num_milliseconds();
    assert!(waited >= 950, "the retry waited {waited} ms: {job:#}");
    assert!(time(&second["started_at"]) >= time(&second["not_before"]));
}

on_both_backends!(
    a_reset_before_the_request_was_read_fails_the_attempt_as_never_received_retryable_and_free,
    a_reset_before_the_request_was_read_is_retried_on_the_same_provider,
    a_reset_after_the_request_was_read_leaves_the_attempt_unknown,
    a_reset_after_the_request_was_read_is_reconciled_to_the_work_the_provider_did,
    response_headers_that_never_come_leave_the_attempt_unknown_at_its_deadline,
    a_body_that_stalls_halfway_leaves_the_attempt_unknown_at_its_deadline,
    a_10_mib_answer_is_not_buffered_and_fails_the_attempt_as_too_large,
    invalid_utf8_in_an_answer_fails_the_attempt_as_a_bad_response,
    an_error_object_in_a_200_answer_fails_the_attempt_as_a_provider_error,
    a_429_with_retry_after_requeues_the_attempt_max_requeues_times_then_fails_it_retryable_and_the_retry_waits_as_asked,
);

/// A server on loopback answering each request with `answer(its port, the
/// request's target)`, and the targets asked, in order.
async fn scripted(
    answer: impl Fn(u16, &str) -> String + Send + Sync + 'static,
) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (answer, seen) = (std::sync::Arc::new(answer), asked.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (answer, seen) = (answer.clone(), seen.clone());
            tokio::spawn(async move {
                let mut head = vec![0; 64 * 1024];
                let read = stream.read(&mut head).await.unwrap_or(0);
                let text = String::from_utf8_lossy(&head[..read]).into_owned();
                let target = text.split_whitespace().nth(1).unwrap_or("").to_owned();
                let reply = answer(port, &target);
                seen.lock().unwrap().push(target);
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, asked)
}

fn redirect_to(location: &str) -> String {
    format!("HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

/// A provider answering with a redirect: its call follows none to another
/// origin (where the prompt and its keys would go), even where redirects
/// are allowed (`same-origin`), and fails, not retryable; the proxies of
/// the environment (`HTTP_PROXY`) are never used, a configured one is.
async fn provider_calls_follow_no_redirect_off_their_origin_and_no_proxy_of_the_environment() {
    let refuse = |_: u16, _: &str| "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n".to_owned();
    let (elsewhere, elsewhere_asked) = scripted(refuse).await;
    let (environment_proxy, environment_proxy_asked) = scripted(refuse).await;
    let (configured_proxy, configured_proxy_asked) = scripted(refuse).await;
    let away = format!("http://127.0.0.1:{elsewhere}/v1/chat/completions");
    let (cross, cross_asked) = scripted({
        let away = away.clone();
        move |_, _| redirect_to(&away)
    })
    .await;
    // `/v1/…` → `/v2/…` on the same origin, which redirects away.
    let (same, same_asked) = scripted(move |own, target| match target.starts_with("/v1/") {
        true => redirect_to(&format!("http://127.0.0.1:{own}/v2/chat/completions")),
        false => redirect_to(&away),
    })
    .await;
    let hop = |port: u16, more: &str| {
        let text = format!(
            "kind = \"openai\"\nmodel = \"gpt-4o-mini\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\
             api_key_env = \"ONEJOB_TEST_HOP_KEY\"\n{more}"
        );
        toml::Value::Table(text.parse().unwrap())
    };
    let proxied = format!("proxy = \"http://127.0.0.1:{configured_proxy}\"");
    let (_simulator, config) = crate::common::processes::simulator_and_config_with(200, |t| {
        crate::common::processes::set(t, &["providers", "hop-cross"], hop(cross, ""));
        crate::common::processes::set(t, &["providers", "hop-same"], hop(same, "redirects = \"same-origin\""));
        crate::common::processes::set(t, &["providers", "hop-proxied"], hop(cross, &proxied));
    })
    .await;
    let url = crate::common::postgres::fresh_database().await;
    let proxy = format!("http://127.0.0.1:{environment_proxy}");
    let env = [("ONEJOB_TEST_HOP_KEY", "k"), ("HTTP_PROXY", &proxy), ("http_proxy", &proxy), ("ALL_PROXY", &proxy)];
    let (_server, address, _log) = crate::common::spawn_server_logged(&url, Some(&config), &[], &env).await;
    let store = crate::common::open_store(&url);
    let (_, token) = onejob::keys::create_key(&store, &onejob::domain::OwnerId::parse("alice").unwrap()).await.unwrap();
    let http = reqwest::Client::new();
    for provider in ["hop-cross", "hop-same", "hop-proxied"] {
        let body = json!({"task": "summarize", "input": {"text": "redirected"}, "provider": provider});
        let created = http
            .post(format!("http://{address}/jobs"))
            .bearer_auth(&token)
            .header("idempotency-key", provider)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), StatusCode::CREATED);
        let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
        let url = format!("http://{address}/jobs/{id}?wait=5");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let job = loop {
            let job: Value = http.get(&url).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
            if first_attempt(&job)["state"] == "failed" || std::time::Instant::now() > deadline {
                break job;
            }
        };
        let attempt = first_attempt(&job);
        assert_eq!(attempt["state"], "failed", "{provider}: {job:#}");
        if provider != "hop-proxied" {
            assert_eq!(attempt["error"]["detail"]["retryable"], false, "{provider}: {attempt:#}");
            assert_eq!(attempt["error"]["detail"]["status"], 307, "{provider}: {attempt:#}");
            assert!(
                attempt["error"]["message"].as_str().unwrap().contains("redirect, which is not followed"),
                "{attempt:#}"
            );
        }
    }
    assert_eq!(*cross_asked.lock().unwrap(), ["/v1/chat/completions"], "asked once, never again");
    assert_eq!(*same_asked.lock().unwrap(), ["/v1/chat/completions", "/v2/chat/completions"], "same origin followed");
    assert!(elsewhere_asked.lock().unwrap().is_empty(), "nothing reached another origin");
    assert!(environment_proxy_asked.lock().unwrap().is_empty(), "the environment's proxy was never used");
    let through_proxy = configured_proxy_asked.lock().unwrap().clone();
    assert!(
        !through_proxy.is_empty()
            && through_proxy.iter().all(|t| t == &format!("http://127.0.0.1:{cross}/v1/chat/completions")),
        "the configured proxy carried the call: {through_proxy:?}"
    );
}

/// Creates a summarize job with key `key` on the server at `address`,
/// answered within 2 s; its id.
async fn create_quickly(http: &reqwest::Client, address: &str, token: &str, key: &str) -> String {
    let started = std::time::Instant::now();
    let body = json!({"task": "summarize", "input": {"text": key}});
    let request = http.post(format!("http://{address}/jobs")).bearer_auth(token).header("idempotency-key", key);
    let created = request.json(&body).send().await.unwrap();
    assert_eq!(created.status(), StatusCode::CREATED, "{key}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "{key} answered in {:?}", started.elapsed());
    created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// The network between onejob and its provider goes silent (packets
/// dropped, no reset) under load: creates and reads still answer at once;
/// an attempt in flight becomes `unknown` at its deadline, never `failed`
/// or `succeeded` on a guess; once traffic flows again, every attempt is
/// settled without a restart, every job succeeds, none has two winners,
/// and no attempt id reached the provider twice.
async fn a_provider_cut_off_silently_leaves_attempts_unknown_until_it_answers_again() {
    let (simulator, config) = crate::common::processes::simulator_and_config_with(200, |t| {
        crate::common::processes::set(t, &["providers", "sim-fast", "timeout_ms"], 1000.into());
    })
    .await;
    let cut = crate::common::blackhole::Blackhole::start(simulator.addr).await;
    let mut table: toml::Table = std::fs::read_to_string(&config).unwrap().parse().unwrap();
    crate::common::processes::set(&mut table, &["simulator", "url"], format!("http://{}", cut.addr).into());
    std::fs::write(&config, toml::to_string(&table).unwrap()).unwrap();
    let url = crate::common::postgres::fresh_database().await;
    let (_server, address, _log) = crate::common::spawn_server_logged(&url, Some(&config), &[], &[]).await;
    let store = crate::common::open_store(&url);
    let (_, token) = onejob::keys::create_key(&store, &onejob::domain::OwnerId::parse("alice").unwrap()).await.unwrap();
    let pool = crate::common::any_pool(&url).await;
    let http = reqwest::Client::builder().timeout(std::time::Duration::from_secs(10)).build().unwrap();
    for i in 0..10 {
        create_quickly(&http, &address, &token, &format!("before-{i}")).await;
    }
    cut.silence(true);
    let mut silent = Vec::new();
    for i in 0..10 {
        silent.push(create_quickly(&http, &address, &token, &format!("silent-{i}")).await);
    }
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move { sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await.unwrap() }
    };
    crate::common::processes::eventually("attempts unknown past their deadline", Duration::from_secs(15), || async {
        count("select count(*) from attempts where state = 'unknown'").await >= 1
    })
    .await;
    for id in &silent {
        let job = crate::common::processes::job(&http, &address, &token, id).await;
        assert!(
            ["queued", "running", "unknown"].contains(&job["state"].as_str().unwrap()),
            "nothing settled on a guess: {job:#}"
        );
    }
    cut.silence(false);
    crate::common::processes::every_attempt_settles(&pool, Duration::from_secs(60)).await;
    for id in &silent {
        let job = crate::common::processes::job(&http, &address, &token, id).await;
        assert_eq!(job["state"], "succeeded", "{job:#}");
    }
    let two_winners = "select count(*) from (select job_id from attempts where state = 'succeeded' group by job_id having count(*) > 1) t";
    assert_eq!(count(two_winners).await, 0, "no job has two winners");
    let log = crate::common::processes::simulator_log(&http, &simulator).await;
    let twice: Vec<&Value> = log.iter().filter(|r| r["received"].as_i64() != Some(1)).collect();
    assert!(twice.is_empty(), "attempts that reached the provider other than once: {twice:?}");
}

on_postgres!(direct: provider_calls_follow_no_redirect_off_their_origin_and_no_proxy_of_the_environment);
on_postgres!(a_provider_cut_off_silently_leaves_attempts_unknown_until_it_answers_again);
