//! onejob as processes: a configuration file with test timings pointing at a
//! simulator that lives in the test (so that killing a server never kills
//! the provider), its request log, a database with a key, and polling with a
//! deadline.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use onejob::config::{DEFAULT_CONFIG, Settings};
use onejob::domain::OwnerId;
use onejob::provider::sim::RunningSimulator;
use serde_json::Value;

use super::Backend;

/// Sets `path` (tables made as needed) in a TOML table.
pub fn set(table: &mut toml::Table, path: &[&str], value: toml::Value) {
    let (last, parents) = path.split_last().unwrap();
    let mut at = table;
    for part in parents {
        at = at.entry(*part).or_insert_with(|| toml::Value::Table(Default::default())).as_table_mut().unwrap();
    }
    at.insert((*last).to_owned(), value);
}

/// The default configuration with test timings and the given sim-slow
/// latency; a simulator started with it; and the configuration, pointing at
/// that simulator, written to a file for `--config`.
pub async fn simulator_and_config(slow_latency_ms: i64) -> (RunningSimulator, PathBuf) {
    simulator_and_config_with(slow_latency_ms, |_| {}).await
}

/// [`simulator_and_config`] with more settings changed by `adjust`.
pub async fn simulator_and_config_with(
    slow_latency_ms: i64,
    adjust: impl FnOnce(&mut toml::Table),
) -> (RunningSimulator, PathBuf) {
    let mut table: toml::Table = DEFAULT_CONFIG.parse().unwrap();
    set(&mut table, &["worker", "poll_interval_ms"], 50.into());
    set(&mut table, &["worker", "lease_margin_ms"], 500.into());
    set(&mut table, &["worker", "reaper_interval_ms"], 100.into());
    set(&mut table, &["worker", "reconcile_interval_ms"], 50.into());
    set(&mut table, &["worker", "reconcile_backoff_ms"], 100.into());
    set(&mut table, &["worker", "reconcile_backoff_max_ms"], 400.into());
    let providers: Vec<String> = table["providers"].as_table().unwrap().keys().cloned().collect();
    for name in providers {
        set(&mut table, &["providers", &name, "absence_grace_ms"], 200.into());
    }
    set(&mut table, &["providers", "sim-slow", "latency_ms"], slow_latency_ms.into());
    set(&mut table, &["providers", "sim-slow", "timeout_ms"], (slow_latency_ms * 2).into());
    adjust(&mut table);
    let settings = Settings::parse(&toml::to_string(&table).unwrap()).unwrap();
    settings.validate().unwrap();
    // The simulator behaves as the providers' settings say: the same file.
    let simulator = onejob::provider::sim::spawn(&settings, "127.0.0.1:0".parse().unwrap()).await.unwrap();
    set(&mut table, &["simulator", "url"], simulator.url().into());
    let path = std::env::temp_dir().join(format!("onejob-test-{}.toml", uuid::Uuid::now_v7().simple()));
    std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
    (simulator, path)
}

/// The simulator's log of attempts (qualification calls left out).
pub async fn simulator_log(client: &reqwest::Client, simulator: &RunningSimulator) -> Vec<Value> {
    let log = super::ok_json(client.get(format!("{}/v1/requests", simulator.url())).send().await.unwrap()).await;
    let requests = log["requests"].as_array().unwrap().iter();
    requests.filter(|r| !r["id"].as_str().unwrap().starts_with("qualification-")).cloned().collect()
}

/// `GET /jobs/{id}` of the server at `address` as `token`.
pub async fn job(client: &reqwest::Client, address: &str, token: &str, id: &str) -> Value {
    super::ok_json(client.get(format!("http://{address}/jobs/{id}")).bearer_auth(token).send().await.unwrap()).await
}

/// A fresh, migrated database of `backend` with an API key for alice: its
/// URL, a pool for plain SQL, and the token.
pub async fn database(backend: Backend) -> (String, sqlx::AnyPool, String) {
    let url = backend.fresh_database().await;
    let token = alice_key(&url).await;
    (url.clone(), super::any_pool(&url).await, token)
}

/// Migrates the database at `url` and makes an API key for alice.
pub async fn alice_key(url: &str) -> String {
    let store = super::open_store(url);
    store.migrate().await.unwrap();
    onejob::keys::create_key(&store, &OwnerId::parse("alice").unwrap()).await.unwrap().1
}

/// Polls `check` every 50 ms until it holds; fails after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < limit, "{what} did not happen within {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until no attempt in the database of `pool` is pending, running
/// or unknown; fails after `limit`.
pub async fn every_attempt_settles(pool: &sqlx::AnyPool, limit: Duration) {
    eventually("every job settling", limit, || async {
        let open: i64 =
            sqlx::query_scalar("select count(*) from attempts where state in ('pending', 'running', 'unknown')")
                .fetch_one(pool)
                .await
                .unwrap();
        open == 0
    })
    .await;
}

/// A memory figure of process `pid` from `/proc/PID/status` (`VmRSS`,
/// `VmHWM`), in bytes.
fn memory_of(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find_map(|line| line.strip_prefix(field)).unwrap_or_else(|| panic!("{field}: {status}"));
    let kib: u64 = line.trim_start_matches(':').trim().trim_end_matches("kB").trim().parse().unwrap();
    kib * 1024
}

/// The most memory process `pid` (a server in a process of its own) has
/// held at once since it started or since [`reset_peak_memory`], in bytes.
pub fn peak_memory(pid: u32) -> u64 {
    memory_of(pid, "VmHWM")
}

/// The memory process `pid` holds now, in bytes.
pub fn resident_memory(pid: u32) -> u64 {
    memory_of(pid, "VmRSS")
}

/// Starts [`peak_memory`] of process `pid` again from what it holds now.
pub fn reset_peak_memory(pid: u32) {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak of a child's memory");
}

/// Whether the calling test runs alone in a process of its own. A test that
/// counts what is process-wide (metrics, SQL statements, the allocator's
/// statistics) cannot share its process with other tests, as it does under
/// `cargo test`: run first, this starts the test named `name` (its full
/// path, as `cargo test` lists it) again, alone, in a child process, checks
/// that it passed there, and answers `false`; in the child it answers
/// `true`, and the test goes on.
pub async fn in_a_process_of_its_own(name: &str) -> bool {
    const ALONE: &str = "ONEJOB_TEST_ALONE";
    if std::env::var_os(ALONE).is_some() {
        return true;
    }
    let out = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1"])
        .env(ALONE, "1")
        .output()
        .await
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("1 passed"), "{name} alone:\n{stdout}\n{stderr}");
    false
}
