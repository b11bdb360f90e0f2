//! `onejob bench`: a load generator that drives a running onejob over HTTP
//! with keep-alive connections and reports throughput and latency
//! percentiles, as a table or as JSON. Every scenario stops by itself.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde::Serialize;
use serde_json::{Value, json};

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// New keys, valid `summarize` jobs.
    Create,
    /// The same keys again: every answer a replay.
    Replay,
    /// 1,000 requests with one key, released together.
    Storm,
    /// `GET /jobs/{id}` over existing jobs.
    Poll,
    /// Create on `sim-fast` and long-poll until it succeeded.
    E2e,
    /// `--jobs` jobs at once on `--provider`, until all have finished.
    Inflight,
}

/// How to run a scenario.
#[derive(Clone, Debug)]
pub struct Options {
    /// The server, such as `http://127.0.0.1:8080`.
    pub url: String,
    /// An API token.
    pub token: String,
    /// What to measure.
    pub scenario: Scenario,
    /// Concurrent keep-alive connections.
    pub connections: usize,
    /// How long the timed scenarios run.
    pub duration: Duration,
    /// Jobs of the `inflight` scenario.
    pub jobs: usize,
    /// Provider of the `inflight` scenario.
    pub provider: String,
    /// The server's process id, to report its peak memory.
    pub server_pid: Option<u32>,
}

/// What a run measured.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The scenario.
    pub scenario: Scenario,
    /// Concurrent connections.
    pub connections: usize,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Operations that succeeded.
    pub ok: u64,
    /// Operations that failed (non-2xx, transport errors).
    pub errors: u64,
    /// Successful operations a second.
    pub throughput: f64,
    /// Latency percentiles, milliseconds.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Scenario-specific facts (distinct job ids of a storm, peak memory).
    pub extra: Value,
}

struct Sample {
    micros: Vec<u64>,
    errors: u64,
}

fn body(text: String, provider: Option<&str>) -> Value {
    let mut body = json!({"task": "summarize", "input": {"text": text}});
    if let Some(provider) = provider {
        body["provider"] = provider.into();
    }
    body
}

async fn post_job(client: &reqwest::Client, options: &Options, key: &str, body: &Value) -> Result<Value, String> {
    let response = client
        .post(format!("{}/jobs", options.url))
        .bearer_auth(&options.token)
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("POST /jobs answered {}", response.status()));
    }
    response.json().await.map_err(|e| e.to_string())
}

async fn get(client: &reqwest::Client, options: &Options, path: &str) -> Result<Value, String> {
    let response =
        client.get(format!("{}{path}", options.url)).bearer_auth(&options.token).send().await.map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("GET {path} answered {}", response.status()));
    }
    response.json().await.map_err(|e| e.to_string())
}

/// Creates `count` jobs for the replay and poll scenarios; their keys and ids.
async fn prepare(client: &reqwest::Client, options: &Options, run: &str, count: usize) -> Result<Vec<(String, String)>, String> {
    let mut made = Vec::with_capacity(count);
    for k in 0..count {
        let key = format!("bench-{run}-seed-{k}");
        let job = post_job(client, options, &key, &body(format!("seed {k}"), None)).await?;
        made.push((key, job["id"].as_str().unwrap_or_default().to_owned()));
    }
    Ok(made)
}

fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index] as f64 / 1000.0
}

/// Runs one scenario and reports on it.
pub async fn run(options: Options) -> Result<Report, String> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(options.connections.max(1))
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| e.to_string())?;
    let run = uuid::Uuid::now_v7().simple().to_string();
    let options = Arc::new(options);
    let started = Instant::now();
    let (samples, extra) = match options.scenario {
        Scenario::Storm => storm(&client, &options, &run).await?,
        Scenario::Inflight => inflight(&client, &options, &run).await?,
        _ => (timed(&client, &options, &run).await?, Value::Null),
    };
    let seconds = started.elapsed().as_secs_f64();
    let mut micros: Vec<u64> = samples.iter().flat_map(|s| s.micros.iter().copied()).collect();
    micros.sort_unstable();
    let errors = samples.iter().map(|s| s.errors).sum();
    let ok = micros.len() as u64;
    Ok(Report {
        scenario: options.scenario,
        connections: options.connections,
        seconds,
        ok,
        errors,
        throughput: ok as f64 / seconds.max(f64::EPSILON),
        p50_ms: percentile(&micros, 0.50),
        p90_ms: percentile(&micros, 0.90),
        p99_ms: percentile(&micros, 0.99),
        max_ms: micros.last().map_or(0.0, |m| *m as f64 / 1000.0),
        extra,
    })
}

/// The scenarios that run for `duration` on `connections` loops.
async fn timed(client: &reqwest::Client, options: &Arc<Options>, run: &str) -> Result<Vec<Sample>, String> {
    let seeds = match options.scenario {
        Scenario::Replay | Scenario::Poll => Arc::new(prepare(client, options, run, options.connections * 4).await?),
        _ => Arc::new(Vec::new()),
    };
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + options.duration;
    let progress = {
        let done = done.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let count = done.load(Ordering::Relaxed);
                eprint!("\r{count} done, {:.0}/s   ", count as f64 / started.elapsed().as_secs_f64());
            }
        })
    };
    let mut loops = tokio::task::JoinSet::new();
    for worker in 0..options.connections {
        let (client, options, seeds, done, run) = (client.clone(), options.clone(), seeds.clone(), done.clone(), run.to_owned());
        loops.spawn(async move {
            let mut sample = Sample { micros: Vec::new(), errors: 0 };
            let mut i = 0usize;
            while Instant::now() < deadline {
                let began = Instant::now();
                let result = match options.scenario {
                    Scenario::Create => {
                        let key = format!("bench-{run}-{worker}-{i}");
                        post_job(&client, &options, &key, &body(format!("job {worker} {i}"), None)).await.map(drop)
                    }
                    Scenario::Replay => {
                        let (key, _) = &seeds[(worker + i * options.connections) % seeds.len()];
                        let k = key.rsplit('-').next().unwrap_or_default();
                        post_job(&client, &options, key, &body(format!("seed {k}"), None)).await.map(drop)
                    }
                    Scenario::Poll => {
                        let (_, id) = &seeds[(worker + i * options.connections) % seeds.len()];
                        get(&client, &options, &format!("/jobs/{id}")).await.map(drop)
                    }
                    Scenario::E2e => e2e_one(&client, &options, &format!("bench-{run}-{worker}-{i}")).await,
                    Scenario::Storm | Scenario::Inflight => unreachable!("not timed"),
                };
                match result {
                    Ok(()) => sample.micros.push(began.elapsed().as_micros() as u64),
                    Err(_) => sample.errors += 1,
                }
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            sample
        });
    }
    let samples = loops.join_all().await;
    progress.abort();
    eprintln!();
    Ok(samples)
}

async fn e2e_one(client: &reqwest::Client, options: &Options, key: &str) -> Result<(), String> {
    let job = post_job(client, options, key, &body("end to end".into(), Some("sim-fast"))).await?;
    let id = job["id"].as_str().unwrap_or_default().to_owned();
    let mut state = job["state"].clone();
    let mut polls = 0;
    while state != "succeeded" {
        polls += 1;
        if polls > 20 || state == "failed" || state == "canceled" {
            return Err(format!("job {id} ended {state}"));
        }
        state = get(client, options, &format!("/jobs/{id}?wait=10")).await?["state"].clone();
    }
    Ok(())
}

async fn storm(client: &reqwest::Client, options: &Options, run: &str) -> Result<(Vec<Sample>, Value), String> {
    let key = format!("bench-{run}-storm");
    let barrier = Arc::new(tokio::sync::Barrier::new(1000));
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..1000 {
        let (client, options, key, barrier) = (client.clone(), options.clone(), key.clone(), barrier.clone());
        requests.spawn(async move {
            barrier.wait().await;
            let began = Instant::now();
            let result = post_job(&client, &options, &key, &body("one intent".into(), None)).await;
            (began.elapsed(), result.map(|job| job["id"].as_str().unwrap_or_default().to_owned()))
        });
    }
    let mut sample = Sample { micros: Vec::new(), errors: 0 };
    let mut ids = std::collections::HashSet::new();
    for (took, result) in requests.join_all().await {
        match result {
            Ok(id) => {
                sample.micros.push(took.as_micros() as u64);
                ids.insert(id);
            }
            Err(_) => sample.errors += 1,
        }
    }
    Ok((vec![sample], json!({ "distinct_job_ids": ids.len() })))
}

fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

async fn inflight(client: &reqwest::Client, options: &Arc<Options>, run: &str) -> Result<(Vec<Sample>, Value), String> {
    // Create every job (at `connections` at once), then wait for all to finish.
    let permits = Arc::new(tokio::sync::Semaphore::new(options.connections.max(1)));
    let mut creating = tokio::task::JoinSet::new();
    for j in 0..options.jobs {
        let (client, options, permits, key) = (client.clone(), options.clone(), permits.clone(), format!("bench-{run}-inflight-{j}"));
        creating.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("open semaphore");
            let began = Instant::now();
            let job = post_job(&client, &options, &key, &body(format!("inflight {j}"), Some(&options.provider))).await?;
            Ok::<_, String>((began, job["id"].as_str().unwrap_or_default().to_owned()))
        });
    }
    let mut pending = Vec::new();
    let mut sample = Sample { micros: Vec::new(), errors: 0 };
    for created in creating.join_all().await {
        match created {
            Ok(job) => pending.push(job),
            Err(_) => sample.errors += 1,
        }
    }
    let mut waiting = tokio::task::JoinSet::new();
    for (began, id) in pending {
        let (client, options, permits) = (client.clone(), options.clone(), permits.clone());
        waiting.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("open semaphore");
            for _ in 0..30 {
                let job = get(&client, &options, &format!("/jobs/{id}?wait=10")).await?;
                if job["state"] == "succeeded" {
                    return Ok(began.elapsed());
                }
                if job["state"] == "failed" || job["state"] == "canceled" {
                    return Err(format!("job {id} ended {}", job["state"]));
                }
            }
            Err(format!("job {id} did not finish"))
        });
    }
    for finished in waiting.join_all().await {
        match finished {
            Ok(took) => sample.micros.push(took.as_micros() as u64),
            Err(_) => sample.errors += 1,
        }
    }
    let rss = options.server_pid.and_then(peak_rss_mib);
    Ok((vec![sample], json!({ "jobs": options.jobs, "provider": options.provider, "server_peak_rss_mib": rss })))
}

/// The report as a table.
pub fn table(report: &Report) -> String {
    format!(
        "scenario     connections  seconds  ok        errors  ops/s     p50 ms  p90 ms  p99 ms  max ms\n\
         {:<12} {:>11}  {:>7.1}  {:<8}  {:>6}  {:>8.0}  {:>6.2}  {:>6.2}  {:>6.2}  {:>6.2}{}",
        format!("{:?}", report.scenario).to_lowercase(),
        report.connections,
        report.seconds,
        report.ok,
        report.errors,
        report.throughput,
        report.p50_ms,
        report.p90_ms,
        report.p99_ms,
        report.max_ms,
        if report.extra.is_null() { String::new() } else { format!("\n{}", report.extra) }
    )
}
