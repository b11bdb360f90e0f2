//! onejob as processes that die: a server killed with SIGKILL mid-flight and
//! restarted (I8: nothing lost, one winner, no attempt sent twice), and a
//! server stopped with SIGTERM that drains its attempts first, and a
//! worker-only process that runs until it is told to stop.

use crate::common::Backend;

use std::sync::Arc;
use std::time::Duration;

use crate::common::processes::{
    database, eventually, set, simulator_and_config, simulator_and_config_with, simulator_log,
};
use serde_json::{Value, json};

async fn create_jobs(client: &reqwest::Client, address: &str, token: &str, count: usize) -> Vec<String> {
    let client = Arc::new(client.clone());
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let (client, address, token) = (client.clone(), address.to_owned(), token.to_owned());
            tokio::spawn(async move {
                let response = client
                    .post(format!("http://{address}/jobs"))
                    .bearer_auth(token)
                    .header("idempotency-key", format!("job-{i}"))
                    .json(&json!({"task": "summarize", "input": {"text": format!("job number {i}")}, "provider": "sim-slow"}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), reqwest::StatusCode::CREATED);
                let body: Value = response.json().await.unwrap();
                body["id"].as_str().unwrap().to_owned()
            })
        })
        .collect();
    let mut ids = vec![];
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    ids
}

/// `onejob worker` on `database_url` with the configuration file `config`.
fn spawn_worker(database_url: &str, config: &std::path::Path) -> tokio::process::Child {
    tokio::process::Command::new(crate::common::BIN)
        .args(["worker", "--config"])
        .arg(config)
        .env("DATABASE_URL", database_url)
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn a_server_killed_mid_flight_and_restarted_loses_nothing_and_sends_nothing_twice(backend: Backend) {
    let (simulator, config) = simulator_and_config(1_500).await;
    let (database_url, pool, token) = database(backend).await;
    let client = reqwest::Client::new();

    let (mut first, address) = crate::common::spawn_server(&database_url, Some(&config)).await;
    let ids = create_jobs(&client, &address, &token, 200).await;
    assert_eq!(ids.len(), 200);
    eventually("most jobs reaching the provider", Duration::from_secs(20), || async {
        simulator_log(&client, &simulator).await.len() >= 150
    })
    .await;
    first.kill().await.unwrap(); // SIGKILL: no drain, no goodbye
    first.wait().await.unwrap();
    let running: i64 =
        sqlx::query_scalar("select count(*) from attempts where state = 'running'").fetch_one(&pool).await.unwrap();
    assert!(running > 0, "the kill left attempts in flight");

    let (_second, _) = crate::common::spawn_server(&database_url, Some(&config)).await;
    crate::common::processes::every_attempt_settles(&pool, Duration::from_secs(60)).await;

    let jobs: Vec<(String, Option<i32>)> =
        sqlx::query_as("select state, winning_attempt from jobs").fetch_all(&pool).await.unwrap();
    assert_eq!(jobs.len(), 200, "no job lost");
    for (state, winner) in &jobs {
        assert_eq!(state, "succeeded", "reconciliation settles every interrupted attempt");
        assert!(winner.is_some());
    }
    let winners: Vec<(i64,)> =
        sqlx::query_as("select count(*) from attempts where state = 'succeeded' group by owner_id, job_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(winners.iter().all(|(n,)| *n == 1) && winners.len() == 200, "exactly one winner per job");
    let reaped: i64 = sqlx::query_scalar("select count(*) from job_events where kind = 'attempt-unknown'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(reaped > 0, "the survivor's reaper found the dead worker's leases");

    let log = simulator_log(&client, &simulator).await;
    assert!(log.iter().all(|r| r["received"] == 1), "no attempt id reached the provider twice");
    let hex_ids = match backend {
        Backend::Postgres => "select replace(id::text, '-', '') from attempts",
        Backend::Sqlite => "select lower(hex(id)) from attempts",
    };
    let sent: Vec<String> = sqlx::query_scalar(hex_ids).fetch_all(&pool).await.unwrap();
    assert!(
        log.iter().all(|r| sent.contains(&r["id"].as_str().unwrap().replace('-', ""))),
        "every request is an attempt"
    );
    let _ = std::fs::remove_file(config);
}

async fn sigterm_lets_attempts_in_flight_finish_before_the_server_exits(backend: Backend) {
    let (simulator, config) = simulator_and_config(1_000).await;
    let (database_url, pool, token) = database(backend).await;
    let client = reqwest::Client::new();

    let (mut server, address) = crate::common::spawn_server(&database_url, Some(&config)).await;
    create_jobs(&client, &address, &token, 5).await;
    eventually("the jobs reaching the provider", Duration::from_secs(20), || async {
        simulator_log(&client, &simulator).await.len() == 5
    })
    .await;
    let pid = server.id().unwrap().to_string();
    assert!(tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.unwrap().success());
    let status = tokio::time::timeout(Duration::from_secs(20), server.wait()).await.expect("the server exits").unwrap();
    assert!(status.success(), "a clean exit: {status}");
    let succeeded: i64 =
        sqlx::query_scalar("select count(*) from jobs where state = 'succeeded'").fetch_one(&pool).await.unwrap();
    assert_eq!(succeeded, 5, "every attempt in flight finished and was recorded before exit");
    let _ = std::fs::remove_file(config);
}

async fn an_api_only_server_and_a_separate_worker_process_share_the_work(backend: Backend) {
    let (simulator, config) = simulator_and_config(200).await;
    let (database_url, pool, token) = database(backend).await;
    let client = reqwest::Client::new();

    let (_api, address) = crate::common::spawn_server_with(&database_url, Some(&config), &["--no-worker"]).await;
    create_jobs(&client, &address, &token, 3).await;
    let queued: i64 =
        sqlx::query_scalar("select count(*) from jobs where state = 'queued'").fetch_one(&pool).await.unwrap();
    assert_eq!(queued, 3, "the API alone runs nothing");
    assert!(simulator_log(&client, &simulator).await.is_empty());

    let _worker = spawn_worker(&database_url, &config);
    eventually("the worker process running the jobs", Duration::from_secs(30), || async {
        let done: i64 =
            sqlx::query_scalar("select count(*) from jobs where state = 'succeeded'").fetch_one(&pool).await.unwrap();
        done == 3
    })
    .await;
    assert_eq!(simulator_log(&client, &simulator).await.len(), 3);
    let _ = std::fs::remove_file(config);
}

/// A worker-only process (`onejob worker`) runs until it is told to stop:
/// it is still running long after its shutdown backstop (grace + 5 s) would
/// have passed, runs a job created then, and SIGTERM still drains it.
async fn a_worker_only_process_runs_until_told_to_stop_then_drains(backend: Backend) {
    let grace_ms = 3_000;
    let (simulator, config) =
        simulator_and_config_with(1_000, |t| set(t, &["worker", "shutdown_grace_ms"], grace_ms.into())).await;
    let (database_url, pool, token) = database(backend).await;
    let client = reqwest::Client::new();
    let (_api, address) = crate::common::spawn_server_with(&database_url, Some(&config), &["--no-worker"]).await;
    let mut worker = spawn_worker(&database_url, &config);
    // Sixty seconds is twelve times the backstop a worker-only process used
    // to stop at by itself; any exit in between fails at once.
    let alive_until = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < alive_until {
        assert!(worker.try_wait().unwrap().is_none(), "the worker exited with no signal sent");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    create_jobs(&client, &address, &token, 3).await;
    eventually("the jobs created a minute later reaching the provider", Duration::from_secs(20), || async {
        simulator_log(&client, &simulator).await.len() == 3
    })
    .await;
    let pid = worker.id().unwrap().to_string();
    assert!(tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.unwrap().success());
    let grace = Duration::from_millis(grace_ms as u64);
    let status =
        tokio::time::timeout(grace, worker.wait()).await.expect("SIGTERM drains within the grace period").unwrap();
    assert!(status.success(), "a clean exit: {status}");
    let succeeded: i64 =
        sqlx::query_scalar("select count(*) from jobs where state = 'succeeded'").fetch_one(&pool).await.unwrap();
    assert_eq!(succeeded, 3, "the attempts in flight finished before the worker exited");
    let _ = std::fs::remove_file(config);
}

async fn every_acknowledged_job_survives_a_sigkill_right_after_its_201(backend: Backend) {
    let (_simulator, config) = simulator_and_config(1_000).await;
    let (database_url, pool, token) = database(backend).await;
    let client = reqwest::Client::new();
    let (mut server, address) = crate::common::spawn_server(&database_url, Some(&config)).await;
    // Every one of these returned 201; then the process dies at once.
    let ids = create_jobs(&client, &address, &token, 100).await;
    server.kill().await.unwrap();
    server.wait().await.unwrap();

    let (_restarted, address) = crate::common::spawn_server(&database_url, Some(&config)).await;
    let stored: i64 = sqlx::query_scalar("select count(*) from jobs").fetch_one(&pool).await.unwrap();
    assert_eq!(stored, 100);
    for id in &ids {
        let response = client.get(format!("http://{address}/jobs/{id}")).bearer_auth(&token).send().await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK, "job {id} was acknowledged, so it exists");
    }
    let _ = std::fs::remove_file(config);
}

/// A server holding an event stream and a long-poll open on a job that may
/// still change (failed, with a fallback allowed) exits within its grace
/// period after SIGTERM: both end at once, and the clients resume
/// elsewhere.
async fn sigterm_ends_open_streams_and_long_polls_and_the_server_exits_within_its_grace_period(backend: Backend) {
    let grace_ms: u64 = 3_000;
    let (_simulator, config) = simulator_and_config_with(200, |t| {
        set(t, &["worker", "shutdown_grace_ms"], (grace_ms as i64).into());
        set(t, &["tasks", "summarize", "failover"], toml::Value::Array(Vec::new()));
    })
    .await;
    let (database_url, _pool, token) = database(backend).await;
    let client = reqwest::Client::new();
    let (mut server, address) = crate::common::spawn_server(&database_url, Some(&config)).await;
    let created = client
        .post(format!("http://{address}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "held-open")
        .json(&json!({"task": "summarize", "input": {"text": "held open"}, "provider": "sim-bad-json"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), reqwest::StatusCode::CREATED);
    let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    let job_url = format!("http://{address}/jobs/{id}");
    eventually("the job failed", Duration::from_secs(20), || async {
        let response = client.get(&job_url).bearer_auth(&token).send().await.unwrap();
        response.json::<Value>().await.unwrap()["state"] == "failed"
    })
    .await;
    // Failed with no failover, it stays as it is: its tag is the current one.
    let read = client.get(&job_url).bearer_auth(&token).send().await.unwrap();
    let etag = read.headers()["etag"].to_str().unwrap().to_owned();
    let stream = client.get(format!("{job_url}/events")).bearer_auth(&token).send().await.unwrap();
    assert_eq!(stream.status(), reqwest::StatusCode::OK);
    let long_poll = tokio::spawn({
        let request = client.get(format!("{job_url}?wait=30")).bearer_auth(&token).header("if-none-match", &etag);
        async move { request.send().await.map(|response| response.status()) }
    });
    // Both are open: the stream sent the log and waits; the long-poll waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!long_poll.is_finished(), "the long-poll waits for a change");

    let signaled = tokio::time::Instant::now();
    let pid = server.id().unwrap().to_string();
    assert!(tokio::process::Command::new("kill").args(["-TERM", &pid]).status().await.unwrap().success());
    let status = tokio::time::timeout(Duration::from_millis(grace_ms), server.wait())
        .await
        .expect("the server exits within its grace period")
        .unwrap();
    assert!(status.success(), "a clean exit: {status}");
    assert!(signaled.elapsed() < Duration::from_millis(grace_ms));
    let body = tokio::time::timeout(Duration::from_secs(1), stream.text()).await.expect("the stream ended");
    assert!(body.unwrap().contains("event: attempt-failed"), "the stream had sent the log");
    let answered = tokio::time::timeout(Duration::from_secs(1), long_poll).await.expect("the long-poll answered");
    assert_eq!(answered.unwrap().unwrap(), reqwest::StatusCode::NOT_MODIFIED);
    let _ = std::fs::remove_file(config);
}

on_both_backends!(
    every_acknowledged_job_survives_a_sigkill_right_after_its_201,
    a_server_killed_mid_flight_and_restarted_loses_nothing_and_sends_nothing_twice,
    sigterm_lets_attempts_in_flight_finish_before_the_server_exits,
    sigterm_ends_open_streams_and_long_polls_and_the_server_exits_within_its_grace_period,
    an_api_only_server_and_a_separate_worker_process_share_the_work,
    a_worker_only_process_runs_until_told_to_stop_then_drains,
);
