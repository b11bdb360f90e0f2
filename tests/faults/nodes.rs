//! Many nodes, one identity: three `onejob serve` processes on one Postgres
//! database. A storm of one key spread over every node makes one job (I1);
//! fallback attempts posted to different nodes at once keep the admission
//! rules (never two pending, never more than `max_in_flight` running); a node
//! killed with attempts in flight loses nothing, and its attempts are reaped
//! by the survivors, reconciled, won once and sent to the provider once
//! (I3, I4, I6, I8). Postgres only: SQLite is one machine.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::process::Child;
use tokio::sync::Barrier;

use crate::common::processes::{alice_key, eventually, simulator_and_config_with, simulator_log};
use crate::common::{postgres, processes};

/// Three serving processes (API and worker each) sharing one fresh database.
struct Cluster {
    nodes: Vec<(Child, String)>,
    pool: PgPool,
    token: String,
    client: reqwest::Client,
    simulator: onejob::provider::sim::RunningSimulator,
    config: std::path::PathBuf,
}

impl Cluster {
    /// Three nodes whose sim-slow answers in `slow_latency_ms`.
    async fn start(slow_latency_ms: i64) -> Self {
        let (simulator, config) = simulator_and_config_with(slow_latency_ms, |table| {
            processes::set(table, &["database", "max_connections"], 8.into());
            // Qualifying sim-slow at every start would only slow the test.
            processes::set(table, &["providers", "sim-slow", "qualify_on_start"], false.into());
        })
        .await;
        let url = postgres::fresh_database().await;
        let token = alice_key(&url).await;
        let (a, b, c) = tokio::join!(
            crate::common::spawn_server(&url, Some(&config)),
            crate::common::spawn_server(&url, Some(&config)),
            crate::common::spawn_server(&url, Some(&config)),
        );
        let pool = PgPool::connect(&url).await.unwrap();
        Self { nodes: vec![a, b, c], pool, token, client: reqwest::Client::new(), simulator, config }
    }

    fn url(&self, node: usize, path: &str) -> String {
        format!("http://{}{path}", self.nodes[node % self.nodes.len()].1)
    }

    /// Creates `count` jobs on sim-slow, round-robin over the nodes; every
    /// one must be acknowledged with 201. Returns their ids.
    async fn create_slow_jobs(&self, count: usize) -> Vec<String> {
        let mut ids = vec![];
        for i in 0..count {
            let response = self
                .client
                .post(self.url(i, "/jobs"))
                .bearer_auth(&self.token)
                .header("idempotency-key", format!("slow-{i}"))
                .json(&json!({"task": "summarize", "input": {"text": format!("job {i}")}, "provider": "sim-slow"}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            ids.push(response.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned());
        }
        ids
    }

    async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

async fn a_storm_of_one_key_over_three_nodes_makes_one_job_and_every_caller_gets_its_id() {
    let cluster = Arc::new(Cluster::start(1_500).await);
    const CALLERS: usize = 300;
    let barrier = Arc::new(Barrier::new(CALLERS));
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (cluster, barrier) = (cluster.clone(), barrier.clone());
            tokio::spawn(async move {
                let request = cluster
                    .client
                    .post(cluster.url(i, "/jobs"))
                    .bearer_auth(&cluster.token)
                    .header("idempotency-key", "one-intent")
                    .json(&json!({"task": "summarize", "input": {"text": "storm over three nodes"}}));
                barrier.wait().await;
                let response = request.send().await.unwrap();
                let status = response.status();
                let replayed = response.headers().get("idempotent-replayed").is_some();
                let body: Value = response.json().await.unwrap();
                (status, replayed, body)
            })
        })
        .collect();
    let mut ids = HashSet::new();
    let mut created = 0;
    for caller in callers {
        let (status, replayed, body) = caller.await.unwrap();
        assert!(status.is_success(), "every caller gets 2xx, not {status}: {body}");
        if status == StatusCode::CREATED {
            created += 1;
        } else {
            assert_eq!(status, StatusCode::OK);
            assert!(replayed, "a 200 is a replay");
        }
        ids.insert(body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(created, 1, "one caller created the job");
    assert_eq!(ids.len(), 1, "every caller got the same job id: {ids:?}");
    assert_eq!(cluster.count("select count(*) from jobs").await, 1, "one job in the database");
    assert_eq!(cluster.count("select count(*) from attempts").await, 1, "with one first attempt");
}

async fn fallback_attempts_posted_to_three_nodes_at_once_keep_the_admission_rules() {
    // sim-slow runs far longer than the waves below, so that nothing
    // finishes while they are decided.
    let cluster = Arc::new(Cluster::start(6_000).await);
    const JOBS: usize = 4;
    const PER_JOB: usize = 30;
    let ids = cluster.create_slow_jobs(JOBS).await;
    eventually("every first attempt running", Duration::from_secs(15), || async {
        cluster.count("select count(*) from attempts where state = 'running'").await == JOBS as i64
    })
    .await;

    // Watches the attempts table while the waves are decided.
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (pool, watching) = (cluster.pool.clone(), watching.clone());
        tokio::spawn(async move {
            let mut worst = (0i64, 0i64);
            while watching.load(Ordering::Relaxed) {
                let (pending, open): (i64, i64) = sqlx::query_as(
                    r#"select coalesce(max(pending), 0)::int8, coalesce(max(open), 0)::int8 from (
                           select count(*) filter (where state = 'pending') as pending,
                                  count(*) filter (where state in ('pending', 'running')) as open
                           from attempts group by owner_id, job_id) per_job"#,
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                worst = (worst.0.max(pending), worst.1.max(open));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            worst
        })
    };

    // A wave: PER_JOB fallback posts per job, each with its own key,
    // round-robin over the nodes, released together.
    let wave = |name: &'static str| {
        let barrier = Arc::new(Barrier::new(JOBS * PER_JOB));
        let posts: Vec<_> = (0..JOBS * PER_JOB)
            .map(|i| {
                let (cluster, barrier, job) = (cluster.clone(), barrier.clone(), ids[i % JOBS].clone());
                tokio::spawn(async move {
                    let request = cluster
                        .client
                        .post(cluster.url(i / JOBS, &format!("/jobs/{job}/attempts")))
                        .bearer_auth(&cluster.token)
                        .header("idempotency-key", format!("{name}-{i}"))
                        .json(&json!({}));
                    barrier.wait().await;
                    let response = request.send().await.unwrap();
                    let status = response.status();
                    (job, status, response.json::<Value>().await.unwrap())
                })
            })
            .collect::<Vec<_>>();
        async move {
            let mut admitted: HashMap<String, usize> = HashMap::new();
            for post in posts {
                let (job, status, body) = post.await.unwrap();
                if status == StatusCode::CREATED {
                    *admitted.entry(job).or_default() += 1;
                } else {
                    assert_eq!(status, StatusCode::CONFLICT, "{body}");
                    let kind = body["type"].as_str().unwrap();
                    assert!(["attempt-pending", "too-many-attempts-in-flight"].contains(&kind), "{body}");
                }
            }
            admitted
        }
    };

    // With one attempt running and max_in_flight = 2, exactly one fallback
    // per job is admitted, whichever node it reached.
    let first = wave("first").await;
    for id in &ids {
        assert_eq!(first.get(id), Some(&1), "one fallback admitted for job {id}: {first:?}");
    }
    eventually("every fallback running", Duration::from_secs(15), || async {
        cluster.count("select count(*) from attempts where state = 'running'").await == 2 * JOBS as i64
    })
    .await;
    // Two running: nothing more is admitted anywhere.
    let second = wave("second").await;
    assert!(second.is_empty(), "no attempt beyond max_in_flight: {second:?}");
    watching.store(false, Ordering::Relaxed);
    let (pending, open) = watcher.await.unwrap();
    assert!(pending <= 1, "never two pending attempts of one job (saw {pending})");
    assert!(open <= 2, "never more than max_in_flight attempts pending or running (saw {open})");
    assert_eq!(cluster.count("select count(*) from attempts").await, 2 * JOBS as i64);
}

async fn a_node_killed_with_attempts_in_flight_is_reaped_and_reconciled_by_the_survivors() {
    let mut cluster = Cluster::start(2_000).await;
    const JOBS: usize = 60;
    let ids = cluster.create_slow_jobs(JOBS).await;
    eventually("every attempt at the provider", Duration::from_secs(15), || async {
        cluster.count("select count(*) from attempts where state = 'running'").await == JOBS as i64
    })
    .await;

    // Kill the node that runs the most of them: SIGKILL, no drain.
    let mut busiest = (0, 0i64);
    for (node, (child, _)) in cluster.nodes.iter().enumerate() {
        let pattern = format!("%-{}-%", child.id().unwrap());
        let running: i64 =
            sqlx::query_scalar("select count(*) from attempts where state = 'running' and worker like $1")
                .bind(&pattern)
                .fetch_one(&cluster.pool)
                .await
                .unwrap();
        if running > busiest.1 {
            busiest = (node, running);
        }
    }
    let (mut victim, _) = cluster.nodes.remove(busiest.0);
    let pattern = format!("%-{}-%", victim.id().unwrap());
    victim.kill().await.unwrap();
    victim.wait().await.unwrap();
    let orphans: Vec<(uuid::Uuid, i32)> =
        sqlx::query_as("select job_id, number from attempts where state = 'running' and worker like $1")
            .bind(&pattern)
            .fetch_all(&cluster.pool)
            .await
            .unwrap();
    assert!(!orphans.is_empty(), "the killed node had attempts in flight");

    eventually("every job settling on the survivors", Duration::from_secs(30), || async {
        cluster.count("select count(*) from attempts where state in ('pending', 'running', 'unknown')").await == 0
    })
    .await;

    // Nothing lost: every acknowledged job is there, and answers on a survivor.
    for (i, id) in ids.iter().enumerate() {
        let response = cluster
            .client
            .get(cluster.url(i, &format!("/jobs/{id}")))
            .bearer_auth(&cluster.token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "job {id} was acknowledged");
        let job: Value = response.json().await.unwrap();
        assert_eq!(job["state"], "succeeded", "{job:#}");
        assert_eq!(job["winning_attempt"], 1, "{job:#}");
    }
    assert_eq!(cluster.count("select count(*) from jobs").await, JOBS as i64);
    // Nothing doubled: one attempt per job, one winner per job.
    assert_eq!(cluster.count("select count(*) from attempts").await, JOBS as i64, "no attempt was added or retried");
    assert_eq!(cluster.count("select count(*) from attempts where state = 'succeeded'").await, JOBS as i64);
    // The orphans went through unknown, by a survivor's reaper.
    for (job, number) in &orphans {
        let reaped: i64 = sqlx::query_scalar(
            r#"select count(*) from job_events where job_id = $1 and attempt_number = $2
               and kind = 'attempt-unknown' and detail -> 'error' ->> 'type' = 'lease-expired'"#,
        )
        .bind(job)
        .bind(number)
        .fetch_one(&cluster.pool)
        .await
        .unwrap();
        assert_eq!(reaped, 1, "attempt {number} of job {job} was reaped into unknown once");
    }
    // One identity: the provider saw each attempt id once.
    let log = simulator_log(&cluster.client, &cluster.simulator).await;
    assert_eq!(log.len(), JOBS, "one request per attempt");
    assert!(log.iter().all(|r| r["received"] == 1), "no attempt id reached the provider twice: {log:?}");
}

on_postgres!(
    a_storm_of_one_key_over_three_nodes_makes_one_job_and_every_caller_gets_its_id,
    fallback_attempts_posted_to_three_nodes_at_once_keep_the_admission_rules,
    a_node_killed_with_attempts_in_flight_is_reaped_and_reconciled_by_the_survivors
);
