//! The promises through a stalled worker and a provider whose status lookup
//! cannot be believed: a worker paused between its claim and its send past
//! its lease never sends that attempt (the fence, driven by a failpoint),
//! and a "no such request" from a provider that is not final about absence
//! leaves the attempt `unknown` (I4), never `failed` and retried. A worker
//! paused after the answer may not settle it either: the answer is kept on
//! the attempt as a late output. On Postgres, a job locked by another
//! transaction holds up the settlement of its own output only.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::Backend;
use crate::common::processes::{database, eventually, job, set, simulator_and_config_with, simulator_log};

async fn create(client: &reqwest::Client, address: &str, token: &str, key: &str, body: &Value) -> String {
    let response = client
        .post(format!("http://{address}/jobs"))
        .bearer_auth(token)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::CREATED);
    response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned()
}

/// How long the failpoint parks the worker between its claim and its send:
/// past the attempt's lease (sim-fast's 500 ms deadline plus the 500 ms
/// margin), its reaping, and its reconciliation as never received.
const PARK_MS: u64 = 4_000;

async fn a_worker_paused_between_claim_and_send_past_its_lease_never_sends_that_attempt(backend: Backend) {
    let (simulator, config) = simulator_and_config_with(200, |t| {
        set(t, &["providers", "sim-fast", "timeout_ms"], 500.into());
        set(t, &["tasks", "summarize", "failover"], toml::Value::Array(vec![]));
        // The fence itself: the retry's win does not abort the paused call
        // first (which would not send it either).
        set(t, &["tasks", "summarize", "cancel_losers"], false.into());
    })
    .await;
    let (database_url, pool, token) = database(backend).await;
    let client = reqwest::Client::new();
    // The first attempt to reach the send parks there; later ones do not.
    let failpoint = format!("worker-before-send=1*return({PARK_MS})");
    let (_server, address, mut log) =
        crate::common::spawn_server_logged(&database_url, Some(&config), &[], &[("FAILPOINTS", &failpoint)]).await;
    let id = create(
        &client,
        &address,
        &token,
        "stalled",
        &json!({"task": "summarize", "input": {"text": "a stalled worker"}}),
    )
    .await;

    // Meanwhile the reaper finds the lease expired, the reconciler hears the
    // provider never received it, and the policy retries under a new id.
    eventually("the retry under a new attempt id succeeding", Duration::from_secs(20), || async {
        job(&client, &address, &token, &id).await["state"] == "succeeded"
    })
    .await;
    let settled = job(&client, &address, &token, &id).await;
    let first = &settled["attempts"][0];
    assert_eq!((&first["state"], &first["error"]["type"]), (&json!("failed"), &json!("not-received")), "{settled:#}");
    assert_eq!(settled["attempts"][1]["state"], "succeeded", "{settled:#}");
    let first_id = first["id"].as_str().unwrap().to_owned();

    // Then the paused worker wakes, finds its lease gone, and does not send.
    let woke = tokio::time::timeout(Duration::from_secs(PARK_MS / 1_000 + 10), async {
        while let Some(line) = log.recv().await {
            if line.contains("lease ran out before its request was sent") {
                return true;
            }
            if simulator_log(&client, &simulator).await.iter().any(|r| r["id"] == first_id.as_str()) {
                return false;
            }
        }
        false
    })
    .await
    .expect("the paused worker woke");
    let sent: Vec<Value> = simulator_log(&client, &simulator).await;
    assert!(
        woke && !sent.iter().any(|r| r["id"] == first_id.as_str()),
        "the provider never saw the attempt whose lease ran out: {sent:#?}"
    );
    let attempts: i64 = sqlx::query_scalar("select count(*) from attempts").fetch_one(&pool).await.unwrap();
    assert_eq!(attempts, 2, "one retry, no more");
    let _ = std::fs::remove_file(config);
}

async fn a_worker_paused_after_the_answer_past_its_lease_keeps_it_as_a_late_output(backend: Backend) {
    // A deadline the answer meets even on a loaded machine; the park
    // outlasts the lease (2 s) and the reconciliation after it.
    let (_simulator, config) = simulator_and_config_with(200, |t| {
        set(t, &["providers", "sim-fast", "timeout_ms"], 1_500.into());
    })
    .await;
    let (database_url, _pool, token) = database(backend).await;
    let client = reqwest::Client::new();
    let failpoint = format!("worker-before-record=1*return({})", PARK_MS + 2_000);
    let (_server, address, mut log) =
        crate::common::spawn_server_logged(&database_url, Some(&config), &[], &[("FAILPOINTS", &failpoint)]).await;
    let id = create(
        &client,
        &address,
        &token,
        "answered",
        &json!({"task": "summarize", "input": {"text": "a paused worker"}}),
    )
    .await;
    // The lease runs out while the worker holds the answer: the attempt is
    // reaped, and the reconciler settles it from the provider's own record.
    eventually("the attempt reconciled to succeeded", Duration::from_secs(20), || async {
        job(&client, &address, &token, &id).await["state"] == "succeeded"
    })
    .await;
    // The worker wakes, may no longer settle it, and keeps its answer as late.
    tokio::time::timeout(Duration::from_secs(PARK_MS / 1_000 + 12), async {
        while let Some(line) = log.recv().await {
            if line.contains("kept as unapplied") {
                return;
            }
        }
    })
    .await
    .expect("the paused worker woke");
    let settled = job(&client, &address, &token, &id).await;
    let attempt = &settled["attempts"][0];
    assert_eq!(settled["attempts"].as_array().unwrap().len(), 1, "{settled:#}");
    assert_eq!(attempt["state"], "succeeded", "{settled:#}");
    assert_eq!(attempt["unapplied_output"]["why"], "late", "{settled:#}");
    assert_eq!(attempt["unapplied_output"]["output"], settled["result"], "{settled:#}");
    let _ = std::fs::remove_file(config);
}

async fn a_status_lookup_that_cannot_find_an_attempt_leaves_it_unknown_unless_absence_is_final(backend: Backend) {
    // Two OpenAI-protocol providers (the simulator speaks it) that accept and
    // never answer, with a status URL that is wrong: every lookup is a 404.
    // `gpt` does not take a 404 as final about absence; `gpt-final` does.
    let (simulator, config) = simulator_and_config_with(200, |_| {}).await;
    let mut table: toml::Table = std::fs::read_to_string(&config).unwrap().parse().unwrap();
    let base = simulator.url();
    for (name, absence_is_final) in [("gpt", false), ("gpt-final", true)] {
        let provider: toml::Table = format!(
            r#"
            kind = "openai"
            api_key_env = "ONEJOB_TEST_PROVIDER_KEY"
            timeout_ms = 300
            status_lookup = true
            absence_grace_ms = 0
            absence_is_final = {absence_is_final}
            "#
        )
        .parse()
        .unwrap();
        set(&mut table, &["providers", name], toml::Value::Table(provider));
        set(&mut table, &["providers", name, "base_url"], format!("{base}/providers/sim-hang/v1").into());
        set(&mut table, &["providers", name, "status_url"], format!("{base}/v1/misconfigured/{{id}}").into());
    }
    std::fs::write(&config, toml::to_string(&table).unwrap()).unwrap();
    let (database_url, pool, token) = database(backend).await;
    let client = reqwest::Client::new();
    let env = [("ONEJOB_TEST_PROVIDER_KEY", "sk-test-lookup")];
    let (_server, address, _log) = crate::common::spawn_server_logged(&database_url, Some(&config), &[], &env).await;
    let create_on = |key: &'static str, provider: &'static str| {
        let (client, address, token) = (&client, &address, &token);
        async move {
            let body = json!({"task": "summarize", "input": {"text": "x"}, "provider": provider});
            create(client, address, token, key, &body).await
        }
    };
    let (lost, absent) = (create_on("lost", "gpt").await, create_on("absent", "gpt-final").await);

    // A provider final about absence: its 404 settles the attempt as never
    // received (failed, retryable).
    eventually("the absent attempt settled", Duration::from_secs(20), || async {
        let now = job(&client, &address, &token, &absent).await;
        !matches!(now["attempts"][0]["state"].as_str(), Some("pending" | "running" | "unknown"))
    })
    .await;
    let settled = job(&client, &address, &token, &absent).await;
    assert_eq!(
        (&settled["attempts"][0]["state"], &settled["attempts"][0]["error"]["type"]),
        (&json!("failed"), &json!("not-received")),
        "a 404 from a provider final about absence settles the attempt: {settled:#}"
    );

    // Asked again and again, the other provider never finds it: still unknown.
    eventually("five status lookups, or the attempt settled", Duration::from_secs(20), || async {
        let (count, state): (i64, String) = sqlx::query_as(
            "select cast(a.reconcile_count as bigint), a.state from attempts a \
             join jobs j on j.owner_id = a.owner_id and j.id = a.job_id \
             where a.number = 1 and j.idempotency_key = 'lost'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        count >= 5 || !["pending", "running", "unknown"].contains(&state.as_str())
    })
    .await;
    let now = job(&client, &address, &token, &lost).await;
    assert_eq!(
        now["attempts"][0]["state"], "unknown",
        "a 404 from a provider not final about absence settles nothing: {now:#}"
    );
    assert_eq!(now["attempts"].as_array().unwrap().len(), 1, "and starts no retry: {now:#}");
    let _ = std::fs::remove_file(config);
}

/// Postgres: an output whose job another transaction holds locked waits
/// for that lock alone. Another job's output, settled meanwhile by the same
/// worker, is not held up behind it; once the lock goes, the first job
/// succeeds too.
async fn a_job_locked_elsewhere_holds_up_no_other_output_of_the_worker() {
    let (_simulator, config) = simulator_and_config_with(1_000, |t| {
        // Neither lease runs out, nor a statement's time, while the lock
        // below is held: the second job is settled by its worker's output,
        // never reaped and reconciled.
        set(t, &["providers", "sim-slow", "timeout_ms"], 60_000.into());
        set(t, &["providers", "sim-fast", "timeout_ms"], 60_000.into());
        set(t, &["database", "statement_timeout_ms"], 60_000.into());
    })
    .await;
    let (database_url, _pool, token) = database(Backend::Postgres).await;
    let client = reqwest::Client::new();
    let (_server, address) = crate::common::spawn_server(&database_url, Some(&config)).await;
    let body = |provider: &str| json!({"task": "summarize", "input": {"text": provider}, "provider": provider});
    let locked = create(&client, &address, &token, "locked", &body("sim-slow")).await;
    eventually("the first job running", Duration::from_secs(10), || async {
        job(&client, &address, &token, &locked).await["state"] == "running"
    })
    .await;
    let pool = sqlx::PgPool::connect(&database_url).await.unwrap();
    let mut holder = pool.begin().await.unwrap();
    let lock = "select 1 from jobs where owner_id = 'alice' and id = $1::uuid for update";
    sqlx::query(lock).bind(&locked).execute(&mut *holder).await.unwrap();
    eventually("its settlement waiting for the job's lock", Duration::from_secs(10), || async {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database()",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        waiting == 1
    })
    .await;

    let other = create(&client, &address, &token, "other", &body("sim-fast")).await;
    eventually("the other job settled while the first is locked", Duration::from_secs(10), || async {
        job(&client, &address, &token, &other).await["state"] == "succeeded"
    })
    .await;
    assert_eq!(job(&client, &address, &token, &locked).await["state"], "running", "the first waits for its lock");
    holder.commit().await.unwrap();
    eventually("the first job settled once the lock went", Duration::from_secs(10), || async {
        job(&client, &address, &token, &locked).await["state"] == "succeeded"
    })
    .await;
    let _ = std::fs::remove_file(config);
}

// On one Postgres: the settlement's wait for the lock is seen in its
// pg_stat_activity (on Citus, it waits on a worker node).
on_postgres!(direct: a_job_locked_elsewhere_holds_up_no_other_output_of_the_worker);

on_both_backends!(
    a_worker_paused_between_claim_and_send_past_its_lease_never_sends_that_attempt,
    a_status_lookup_that_cannot_find_an_attempt_leaves_it_unknown_unless_absence_is_final,
    a_worker_paused_after_the_answer_past_its_lease_keeps_it_as_a_late_output,
);
