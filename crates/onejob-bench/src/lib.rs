//! The load generator of `onejob bench`: it drives a running onejob over
//! HTTP with keep-alive connections and reports throughput and latency
//! percentiles, as a table or as JSON. Every scenario stops by itself. It
//! knows onejob only by its API, so it is a crate of its own: the product
//! library does not carry it.

mod streams;
mod tokens;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::net::SocketAddr;

use clap::ValueEnum;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    /// Create on `sim-fast` with `Prefer: wait=10` (answered when the job
    /// is finished), long-polling if it is not yet.
    E2e,
    /// Create on `sim-fast`, then long-poll until it succeeded.
    #[serde(rename = "e2e-poll")]
    E2ePoll,
    /// `--jobs` jobs at once on `--provider`, until all have finished.
    Inflight,
    /// `--jobs` jobs on `--provider`, each followed on its own stream of
    /// events until it is terminal: the delay from each event's commit to
    /// its arrival.
    Streams,
    /// Streamed answers: the time to first token through onejob against
    /// the simulator's own, and each piece's delay to the caller.
    Tokens,
}

/// How to run a scenario.
#[derive(Clone, Debug)]
pub struct Options {
    /// The server, such as `http://127.0.0.1:8080`.
    pub url: String,
    /// An API token, or several separated by commas: the connections of
    /// `create`, `e2e` and `e2e-poll` take them in turn (an owner each, to
    /// spread the load over owners); the other scenarios use the first.
    pub token: String,
    /// What to measure.
    pub scenario: Scenario,
    /// Concurrent keep-alive connections.
    pub connections: usize,
    /// How long the timed scenarios run.
    pub duration: Duration,
    /// Jobs of the `inflight` and `streams` scenarios.
    pub jobs: usize,
    /// Provider of the `inflight` and `streams` scenarios.
    pub provider: String,
    /// How long the `streams` scenario waits for its streams to end: each
    /// one still open then is an error.
    pub timeout: Duration,
    /// The server's process id, to report its peak memory.
    pub server_pid: Option<u32>,
    /// The simulator's address, for the `tokens` scenario's reference.
    pub sim_url: Option<String>,
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
    /// Operations that succeeded (`streams`: events timed).
    pub ok: u64,
    /// Operations that failed (non-2xx, transport errors; `streams`: also
    /// each stream that did not end after its job's terminal event in time).
    pub errors: u64,
    /// Successful operations a second.
    pub throughput: f64,
    /// Latency percentiles, milliseconds (`streams`: from an event's commit
    /// to its arrival on the stream).
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Slowest.
    pub max_ms: f64,
    /// Scenario-specific facts (distinct job ids of a storm, peak memory).
    pub extra: Value,
}

struct Sample {
    micros: Vec<u64>,
    errors: u64,
}

fn body(text: String, provider: Option<&str>) -> Vec<u8> {
    let mut body = json!({"task": "summarize", "input": {"text": text}});
    if let Some(provider) = provider {
        body["provider"] = provider.into();
    }
    body.to_string().into_bytes()
}

/// Where the server is: `http://host:port`.
#[derive(Clone, Debug)]
struct Target {
    addr: SocketAddr,
    host: String,
    /// `Bearer …` of each token given, the first for a single caller.
    authorizations: Vec<String>,
}

impl Target {
    async fn resolve(options: &Options) -> Result<Self, String> {
        let rest = options
            .url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{}: only http:// URLs can be benchmarked", options.url))?;
        let host = rest.split('/').next().unwrap_or_default().to_owned();
        let with_port = if host.contains(':') { host.clone() } else { format!("{host}:80") };
        let addr = tokio::net::lookup_host(&with_port)
            .await
            .map_err(|e| format!("{host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host}: no address"))?;
        let authorizations = options.token.split(',').map(|token| format!("Bearer {}", token.trim())).collect();
        Ok(Self { addr, host, authorizations })
    }
}

/// One keep-alive HTTP/1.1 connection. The requests are written and the
/// answers read by hand, so that the load generator costs little next to the
/// server it shares the machine with.
struct Connection {
    target: Arc<Target>,
    /// Which of the target's tokens this connection sends.
    caller: usize,
    stream: Option<TcpStream>,
    buffer: Vec<u8>,
    request: Vec<u8>,
}

/// An answer: its status and body.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("the answer is not JSON: {e}"))
    }
}

impl Connection {
    fn new(target: Arc<Target>) -> Self {
        Self::as_caller(target, 0)
    }

    /// A connection that sends the target's token number `caller` (in turn).
    fn as_caller(target: Arc<Target>, caller: usize) -> Self {
        let caller = caller % target.authorizations.len();
        Self { target, caller, stream: None, buffer: Vec::with_capacity(8192), request: Vec::with_capacity(1024) }
    }

    /// Opens the connection now rather than at the first request.
    async fn open(&mut self) -> Result<(), String> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.target.addr).await.map_err(|e| format!("connect: {e}"))?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            self.stream = Some(stream);
            self.buffer.clear();
        }
        Ok(())
    }

    /// Sends a request, with `headers` (whole lines, each ending in
    /// `\r\n`) besides its own, and reads its answer.
    async fn send(
        &mut self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&[u8]>,
        headers: &str,
    ) -> Result<Answer, String> {
        let result = self.exchange(method, path, key, body, headers).await;
        if result.is_err() {
            // Whatever state the connection is in, the next request gets a new one.
            self.stream = None;
        }
        result
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&[u8]>,
        headers: &str,
    ) -> Result<Answer, String> {
        use std::io::Write as _;
        self.open().await?;
        let request = &mut self.request;
        request.clear();
        let target = &self.target;
        let _ = write!(
            request,
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nauthorization: {}\r\n",
            target.host, target.authorizations[self.caller]
        );
        if let Some(key) = key {
            let _ = write!(request, "idempotency-key: {key}\r\n");
        }
        request.extend_from_slice(headers.as_bytes());
        if let Some(body) = body {
            let _ = write!(request, "content-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
            request.extend_from_slice(body);
        } else {
            request.extend_from_slice(b"\r\n");
        }
        let stream = self.stream.as_mut().expect("opened above");
        stream.write_all(request).await.map_err(|e| format!("write: {e}"))?;

        let buffer = &mut self.buffer;
        let head_end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if stream.read_buf(buffer).await.map_err(|e| format!("read: {e}"))? == 0 {
                return Err("the server closed the connection".into());
            }
        };
        let head = std::str::from_utf8(&buffer[..head_end]).map_err(|_| "the answer's head is not UTF-8".to_owned())?;
        let status: u16 = head.get(9..12).and_then(|s| s.parse().ok()).ok_or("no status line")?;
        let mut length = None;
        let mut close = false;
        for line in head.split("\r\n").skip(1) {
            let Some((name, value)) = line.split_once(':') else { continue };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return Err(format!("transfer-encoding {value} is not read by the load generator"));
            } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
                close = true;
            }
        }
        let length = length.ok_or("the answer has no content-length")?;
        while buffer.len() < head_end + length {
            if stream.read_buf(buffer).await.map_err(|e| format!("read: {e}"))? == 0 {
                return Err("the server closed the connection mid-answer".into());
            }
        }
        let body = buffer[head_end..head_end + length].to_vec();
        buffer.drain(..head_end + length);
        if close {
            self.stream = None;
        }
        Ok(Answer { status, body })
    }

    async fn post_job(&mut self, key: &str, body: &[u8]) -> Result<Answer, String> {
        self.post_job_with(key, body, "").await
    }

    async fn post_job_with(&mut self, key: &str, body: &[u8], headers: &str) -> Result<Answer, String> {
        let answer = self.send("POST", "/jobs", Some(key), Some(body), headers).await?;
        if !(200..300).contains(&answer.status) {
            return Err(format!("POST /jobs answered {}", answer.status));
        }
        Ok(answer)
    }

    async fn get(&mut self, path: &str) -> Result<Value, String> {
        let answer = self.send("GET", path, None, None, "").await?;
        if !(200..300).contains(&answer.status) {
            return Err(format!("GET {path} answered {}", answer.status));
        }
        answer.json()
    }
}

fn job_id(answer: &Answer) -> Result<String, String> {
    let job = answer.json()?;
    job["id"].as_str().map(str::to_owned).ok_or_else(|| "the answer has no job id".to_owned())
}

/// Creates `count` jobs for the replay and poll scenarios; their keys and ids.
async fn prepare(target: &Arc<Target>, run: &str, count: usize) -> Result<Vec<(String, String)>, String> {
    let mut connection = Connection::new(target.clone());
    let mut made = Vec::with_capacity(count);
    for k in 0..count {
        let key = format!("bench-{run}-seed-{k}");
        let answer = connection.post_job(&key, &body(format!("seed {k}"), None)).await?;
        made.push((key, job_id(&answer)?));
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
    let target = Arc::new(Target::resolve(&options).await?);
    let run = uuid::Uuid::now_v7().simple().to_string();
    let options = Arc::new(options);
    let started = Instant::now();
    let (samples, extra) = match options.scenario {
        Scenario::Storm => storm(&target, &run).await?,
        Scenario::Inflight => inflight(&target, &options, &run).await?,
        Scenario::Streams => streams::streams(&target, &options, &run).await?,
        Scenario::Tokens => tokens::tokens(&options, &run).await?,
        _ => (timed(&target, &options, &run).await?, Value::Null),
    };
    let seconds = started.elapsed().as_secs_f64();
    let mut micros: Vec<u64> = samples.iter().flat_map(|s| s.micros.iter().copied()).collect();
    micros.sort_unstable();
    let errors = samples.iter().map(|s| s.errors).sum();
    let ok = micros.len() as u64;
    Ok(Report {
        scenario: options.scenario,
        connections: if options.scenario == Scenario::Storm { STORM } else { options.connections },
        seconds,
        ok,
        errors,
        throughput: ok as f64 / seconds.max(f64::EPSILON),
        p50_ms: percentile(&micros, 0.50),
        p90_ms: percentile(&micros, 0.90),
        p99_ms: percentile(&micros, 0.99),
        p999_ms: percentile(&micros, 0.999),
        max_ms: micros.last().map_or(0.0, |m| *m as f64 / 1000.0),
        extra,
    })
}

/// The scenarios that run for `duration` on `connections` loops.
async fn timed(target: &Arc<Target>, options: &Arc<Options>, run: &str) -> Result<Vec<Sample>, String> {
    let seeds = match options.scenario {
        Scenario::Replay | Scenario::Poll => Arc::new(prepare(target, run, options.connections * 4).await?),
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
        let (target, options, seeds, done, run) =
            (target.clone(), options.clone(), seeds.clone(), done.clone(), run.to_owned());
        loops.spawn(async move {
            let spread = matches!(options.scenario, Scenario::Create | Scenario::E2e | Scenario::E2ePoll);
            let mut connection = Connection::as_caller(target, if spread { worker } else { 0 });
            let mut sample = Sample { micros: Vec::new(), errors: 0 };
            let mut i = 0usize;
            while Instant::now() < deadline {
                let began = Instant::now();
                let result = match options.scenario {
                    Scenario::Create => {
                        let key = format!("bench-{run}-{worker}-{i}");
                        connection.post_job(&key, &body(format!("job {worker} {i}"), None)).await.map(drop)
                    }
                    Scenario::Replay => {
                        let (key, _) = &seeds[(worker + i * options.connections) % seeds.len()];
                        let k = key.rsplit('-').next().unwrap_or_default();
                        connection.post_job(key, &body(format!("seed {k}"), None)).await.map(drop)
                    }
                    Scenario::Poll => {
                        let (_, id) = &seeds[(worker + i * options.connections) % seeds.len()];
                        connection.get(&format!("/jobs/{id}")).await.map(drop)
                    }
                    Scenario::E2e => e2e_one(&mut connection, &format!("bench-{run}-{worker}-{i}"), true).await,
                    Scenario::E2ePoll => e2e_one(&mut connection, &format!("bench-{run}-{worker}-{i}"), false).await,
                    Scenario::Storm | Scenario::Inflight | Scenario::Streams | Scenario::Tokens => {
                        unreachable!("not timed")
                    }
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

/// One job from its creation to its success: created with `Prefer: wait`
/// when `wait`, then long-polled until it succeeded.
async fn e2e_one(connection: &mut Connection, key: &str, wait: bool) -> Result<(), String> {
    let prefer = if wait { "prefer: wait=10\r\n" } else { "" };
    let job = connection.post_job_with(key, &body("end to end".into(), Some("sim-fast")), prefer).await?.json()?;
    let id = job["id"].as_str().unwrap_or_default().to_owned();
    let mut state = job["state"].clone();
    let mut polls = 0;
    while state != "succeeded" {
        polls += 1;
        if polls > 20 || state == "failed" || state == "canceled" {
            return Err(format!("job {id} ended {state}"));
        }
        state = connection.get(&format!("/jobs/{id}?wait=10")).await?["state"].clone();
    }
    Ok(())
}

/// Requests of the storm scenario.
const STORM: usize = 1000;

/// 1,000 requests with one key, each on its own connection opened
/// beforehand, released together: what is measured is how the server
/// answers a thousand clicks of one intent, not how fast it accepts
/// connections.
async fn storm(target: &Arc<Target>, run: &str) -> Result<(Vec<Sample>, Value), String> {
    let key = format!("bench-{run}-storm");
    let payload = body("one intent".into(), None);
    let barrier = Arc::new(tokio::sync::Barrier::new(STORM));
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..STORM {
        let (target, key, payload, barrier) = (target.clone(), key.clone(), payload.clone(), barrier.clone());
        requests.spawn(async move {
            let mut connection = Connection::new(target);
            let opened = connection.open().await;
            barrier.wait().await;
            opened?;
            let began = Instant::now();
            let answer = connection.post_job(&key, &payload).await?;
            let took = began.elapsed();
            Ok::<_, String>((took, job_id(&answer)?))
        });
    }
    let mut sample = Sample { micros: Vec::new(), errors: 0 };
    let mut ids = std::collections::HashSet::new();
    for result in requests.join_all().await {
        match result {
            Ok((took, id)) => {
                sample.micros.push(took.as_micros() as u64);
                ids.insert(id);
            }
            Err(_) => sample.errors += 1,
        }
    }
    Ok((vec![sample], json!({ "distinct_job_ids": ids.len() })))
}

pub(crate) fn peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

async fn inflight(target: &Arc<Target>, options: &Arc<Options>, run: &str) -> Result<(Vec<Sample>, Value), String> {
    // Create every job on `connections` connections, then wait for each on
    // the same connections.
    let mut sample = Sample { micros: Vec::new(), errors: 0 };
    let mut waiting = tokio::task::JoinSet::new();
    for (mut connection, made, errors) in create_jobs(target, options, run, |began, id| (began, id)).await {
        sample.errors += errors;
        waiting.spawn(async move {
            let mut finished = Vec::new();
            for (began, id) in made {
                finished.push(wait_until_done(&mut connection, &id).await.map(|()| began.elapsed()));
            }
            finished
        });
    }
    for finished in waiting.join_all().await.into_iter().flatten() {
        match finished {
            Ok(took) => sample.micros.push(took.as_micros() as u64),
            Err(_) => sample.errors += 1,
        }
    }
    let rss = options.server_pid.and_then(peak_rss_mib);
    Ok((vec![sample], json!({ "jobs": options.jobs, "provider": options.provider, "server_peak_rss_mib": rss })))
}

/// Creates `options.jobs` jobs on `options.provider` over
/// `options.connections` connections, handing each new job to `made` (when
/// its create was sent, its id) as soon as it is created. For each
/// connection: the connection, what `made` returned, and how many creates
/// failed.
async fn create_jobs<T, F>(
    target: &Arc<Target>,
    options: &Arc<Options>,
    run: &str,
    made: F,
) -> Vec<(Connection, Vec<T>, u64)>
where
    T: Send + 'static,
    F: Fn(Instant, String) -> T + Clone + Send + 'static,
{
    let scenario = format!("{:?}", options.scenario).to_lowercase();
    let numbers: Numbers = Arc::new(std::sync::Mutex::new(0..options.jobs));
    let mut creating = tokio::task::JoinSet::new();
    for _ in 0..options.connections.max(1) {
        let (target, options, numbers, made) = (target.clone(), options.clone(), numbers.clone(), made.clone());
        let run = run.to_owned();
        let scenario = scenario.clone();
        creating.spawn(async move {
            let mut connection = Connection::new(target);
            let mut created = Vec::new();
            let mut errors = 0;
            while let Some(j) = next(&numbers) {
                let began = Instant::now();
                let key = format!("bench-{run}-{scenario}-{j}");
                match connection
                    .post_job(&key, &body(format!("{scenario} {j}"), Some(&options.provider)))
                    .await
                    .and_then(|a| job_id(&a))
                {
                    Ok(id) => created.push(made(began, id)),
                    Err(_) => errors += 1,
                }
            }
            (connection, created, errors)
        });
    }
    creating.join_all().await
}

/// Job numbers handed out to the creating connections.
type Numbers = Arc<std::sync::Mutex<std::ops::Range<usize>>>;

fn next(numbers: &Numbers) -> Option<usize> {
    numbers.lock().unwrap_or_else(|p| p.into_inner()).next()
}

async fn wait_until_done(connection: &mut Connection, id: &str) -> Result<(), String> {
    for _ in 0..30 {
        let job = connection.get(&format!("/jobs/{id}?wait=10")).await?;
        if job["state"] == "succeeded" {
            return Ok(());
        }
        if job["state"] == "failed" || job["state"] == "canceled" {
            return Err(format!("job {id} ended {}", job["state"]));
        }
    }
    Err(format!("job {id} did not finish"))
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
