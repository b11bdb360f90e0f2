//! One job per intent through a database failover: a real HA cluster
//! (`common::ha`: etcd, two Postgres nodes under Patroni, HAProxy), two
//! `onejob serve` processes, a simulator in the test, and keyed load whose
//! clients retry the same key on 503, 429 and transport errors against
//! either server, as the API asks. Then the leader is killed, switched over,
//! rejoins as a standby, or is reached without a proxy through a URL naming
//! both nodes; and, on one plain Postgres, every onejob backend is
//! terminated twice a second, or the database turns read-only. Each test checks the same things: every key
//! acknowledged 2xx names the job stored for it on the primary; no attempt
//! reached the provider twice; no job has two winners; no client saw a
//! 500; every server serves again without a restart; every job settles.
//!
//! The figures (the failover's timeline, the 503s, the keys) are printed
//! as one `figures:` line per test; `scripts/ha-failover.sh` runs the tests
//! and collects them for docs/guarantees.md.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::process::Child;
use tokio::sync::watch;

use crate::common::ha::HaCluster;
use crate::common::processes::{alice_key, eventually, simulator_and_config_with};
use crate::common::{postgres, processes, spawn_server};

/// Clients sending keyed creates at once.
const CLIENTS: usize = 8;

/// What the clients saw.
#[derive(Default)]
struct Ledger {
    /// Each key acknowledged 2xx, with the job id it was answered.
    acked: HashMap<String, String>,
    /// When each answer came (since the load started) and its status (0: a
    /// transport error, no answer).
    answers: Vec<(Duration, u16)>,
}

/// Keyed load on `servers` until `stop` says so; each client then finishes
/// its key in hand (acknowledged, or given up after 60 s).
struct Load {
    ledger: Arc<Mutex<Ledger>>,
    started: Instant,
    stop: watch::Sender<bool>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(servers: Vec<String>, token: String) -> Self {
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let started = Instant::now();
        let (stop, stopped) = watch::channel(false);
        let http = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
        let servers = Arc::new(servers);
        let clients = (0..CLIENTS)
            .map(|client| {
                let (ledger, stopped, http, servers, token) =
                    (ledger.clone(), stopped.clone(), http.clone(), servers.clone(), token.clone());
                tokio::spawn(async move {
                    let mut next = 0;
                    while !*stopped.borrow() {
                        let key = format!("c{client}-{next}");
                        next += 1;
                        let mut tries = 0;
                        let mut given_up_at = None;
                        loop {
                            let server = &servers[(client + tries) % servers.len()];
                            let sent = http
                                .post(format!("http://{server}/jobs"))
                                .bearer_auth(&token)
                                .header("idempotency-key", &key)
                                .json(&json!({"task": "summarize", "input": {"text": format!("intent {key}")}}))
                                .send()
                                .await;
                            let (status, id) = match sent {
                                Ok(response) if response.status().is_success() => {
                                    let status = response.status().as_u16();
                                    let body: Value = response.json().await.unwrap();
                                    (status, body["id"].as_str().map(str::to_owned))
                                }
                                Ok(response) => (response.status().as_u16(), None),
                                Err(_) => (0, None),
                            };
                            let acknowledged = {
                                let mut ledger = ledger.lock().unwrap();
                                ledger.answers.push((started.elapsed(), status));
                                id.map(|id| ledger.acked.insert(key.clone(), id)).is_some()
                            };
                            if acknowledged {
                                break;
                            }
                            assert!(
                                matches!(status, 0 | 429 | 500..=599),
                                "key {key}: {status} is not an answer to retry"
                            );
                            if *stopped.borrow() {
                                let since = *given_up_at.get_or_insert_with(Instant::now);
                                if since.elapsed() > Duration::from_secs(60) {
                                    break;
                                }
                            }
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                })
            })
            .collect();
        Self { ledger, started, stop, clients }
    }

    /// Stops the clients and gives what they saw.
    async fn finish(self) -> Ledger {
        let _ = self.stop.send(true);
        for client in self.clients {
            client.await.unwrap();
        }
        std::mem::take(&mut *self.ledger.lock().unwrap())
    }

    /// Acknowledged keys so far.
    fn acked(&self) -> usize {
        self.ledger.lock().unwrap().acked.len()
    }
}

/// How a fault went, from the clients' answers: the longest stretch without
/// a 2xx after `fault`, when 2xx came back, when throughput was back to half
/// and to 90 % of what it was in the `baseline` before the fault.
struct Timeline {
    per_s_before: f64,
    longest_without_2xx: Duration,
    first_2xx: Option<Duration>,
    half: Option<Duration>,
    ninety: Option<Duration>,
    unavailable: usize,
    server_errors: usize,
}

impl Timeline {
    fn of(ledger: &Ledger, fault: Duration, baseline: Duration) -> Self {
        let ok: Vec<Duration> =
            ledger.answers.iter().filter(|(_, status)| (200..300).contains(status)).map(|(at, _)| *at).collect();
        let before = ok.iter().filter(|at| **at < fault && **at >= fault.saturating_sub(baseline)).count();
        let rate = before as f64 / baseline.as_secs_f64();
        let after: Vec<Duration> = ok.iter().copied().filter(|at| *at >= fault).collect();
        // The longest stretch without a 2xx, and the 2xx that ended it.
        let (mut longest, mut resumed) = (Duration::ZERO, None);
        let mut last = fault;
        for at in &after {
            if at.saturating_sub(last) > longest {
                (longest, resumed) = (at.saturating_sub(last), Some(*at));
            }
            last = *at;
        }
        // The first one-second window, from the end of that stretch on,
        // whose 2xx reach the share of the baseline's rate.
        let back_to = |share: f64| {
            after.iter().filter(|at| Some(**at) >= resumed).find_map(|start| {
                let within = after.iter().filter(|at| **at >= *start && **at < *start + Duration::from_secs(1)).count();
                (within as f64 >= share * rate).then(|| start.saturating_sub(fault))
            })
        };
        Self {
            per_s_before: rate,
            longest_without_2xx: longest,
            first_2xx: resumed.map(|at| at.saturating_sub(fault)),
            half: back_to(0.5),
            ninety: back_to(0.9),
            unavailable: ledger.answers.iter().filter(|(at, status)| *at >= fault && *status == 503).count(),
            server_errors: ledger.answers.iter().filter(|(_, status)| *status >= 500 && *status != 503).count(),
        }
    }

    fn print(&self, test: &str, extra: &str, ledger: &Ledger) {
        let secs = |d: Option<Duration>| d.map_or("never".to_owned(), |d| format!("{:.1}", d.as_secs_f64()));
        eprintln!(
            "figures: {test}: {extra} per_s_before={:.0} first_2xx_s={} half_s={} ninety_s={} \
             longest_without_2xx_s={:.1} answers_503={} server_errors={} acknowledged={}",
            self.per_s_before,
            secs(self.first_2xx),
            secs(self.half),
            secs(self.ninety),
            self.longest_without_2xx.as_secs_f64(),
            self.unavailable,
            self.server_errors,
            ledger.acked.len()
        );
    }
}

/// Two servers (API and worker each) on `urls`, with a simulator in the
/// test whose sim-fast answers in 20 ms.
struct Servers {
    servers: Vec<(Child, String)>,
    simulator: onejob::provider::sim::RunningSimulator,
    config: std::path::PathBuf,
    token: String,
}

impl Servers {
    async fn start(migrate_url: &str, urls: &[String]) -> Self {
        let (simulator, config) = simulator_and_config_with(200, |table| {
            processes::set(table, &["database", "max_connections"], 8.into());
            // The per-owner rate limit would cap the load, and answer 429s
            // that say nothing of the database.
            processes::set(table, &["server", "rate_limit_per_second"], 0.into());
            processes::set(table, &["providers", "sim-fast", "latency_ms"], 20.into());
            processes::set(table, &["providers", "sim-slow", "qualify_on_start"], false.into());
        })
        .await;
        let token = alice_key(migrate_url).await;
        let mut servers = Vec::new();
        for url in urls {
            servers.push(spawn_server(url, Some(&config)).await);
        }
        Self { servers, simulator, config, token }
    }

    fn addresses(&self) -> Vec<String> {
        self.servers.iter().map(|(_, address)| address.clone()).collect()
    }
}

/// The checks every test ends with, on the primary at `url`: every
/// acknowledged key names its job, every job settles, none has two winners,
/// no attempt reached the provider twice, no client saw a 500.
async fn check_nothing_lost(url: &str, ledger: &Ledger, servers: &Servers) {
    let pool = PgPool::connect(url).await.unwrap();
    let stored: HashMap<String, String> =
        sqlx::query_as::<_, (String, String)>("select idempotency_key, id::text from jobs where owner_id = 'alice'")
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    let lost: Vec<&String> =
        ledger.acked.iter().filter(|(key, id)| stored.get(*key) != Some(id)).map(|(k, _)| k).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged keys name no stored job (of {}): {lost:?}",
        lost.len(),
        ledger.acked.len()
    );
    processes::every_attempt_settles(&crate::common::any_pool(url).await, Duration::from_secs(90)).await;
    let two_winners: i64 = sqlx::query_scalar(
        "select count(*) from (select job_id from attempts where state = 'succeeded' group by job_id having count(*) > 1) t",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(two_winners, 0, "no job has two winners");
    // `repeats`: second arrivals of any id of the run, also of ids its log (the latest 20,000) forgot.
    let sim = crate::common::ok_json(reqwest::get(format!("{}/v1/requests", servers.simulator.url())).await.unwrap());
    let sim = sim.await;
    assert_eq!(sim["ids_unremembered"], 0, "the simulator remembered every id of the run: {}", sim["most_ids_seen"]);
    assert_eq!(sim["repeats"], 0, "attempts sent to the provider twice (the latest): {}", sim["repeated_ids"]);
    let query = "select count(*) from attempts where state = 'succeeded'";
    let (seen, reached) = (sim["ids_seen"].as_i64().unwrap(), sqlx::query_scalar(query).fetch_one(&pool).await);
    assert!(seen >= reached.unwrap(), "the simulator saw {seen} ids, fewer than the attempts that succeeded");
    let server_errors: Vec<&(Duration, u16)> =
        ledger.answers.iter().filter(|(_, status)| *status >= 500 && *status != 503).collect();
    assert!(server_errors.is_empty(), "clients saw server errors: {server_errors:?}");
    let (keys, jobs) = (ledger.acked.len(), stored.len());
    eprintln!("checked: {keys} keys acknowledged, 0 lost, 0 sent twice of {seen} ids, {jobs} jobs stored");
}

/// Waits until `address` is ready and creates a job there: it serves.
async fn serves_again(address: &str, token: &str, within: Duration) {
    let http = reqwest::Client::new();
    eventually(&format!("{address} is ready"), within, || async {
        http.get(format!("http://{address}/readyz")).send().await.is_ok_and(|r| r.status() == StatusCode::OK)
    })
    .await;
    let response = http
        .post(format!("http://{address}/jobs"))
        .bearer_auth(token)
        .header("idempotency-key", format!("after-{address}"))
        .json(&json!({"task": "summarize", "input": {"text": "after the fault"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED, "{address} creates a job again");
}

/// Keyed load on `servers`: steady for 3 s, then `fault`; on until Patroni
/// names a leader other than the one before, 300 more keys are
/// acknowledged and 5 more seconds have passed; then every server must
/// serve. What the clients saw, the timeline from the fault, and how long
/// after it the new leader was named.
async fn through_a_fault(
    cluster: &HaCluster,
    servers: &Servers,
    fault: impl std::future::Future<Output = ()>,
) -> (Ledger, Timeline, Duration) {
    let load = Load::start(servers.addresses(), servers.token.clone());
    until_acknowledged(&load, 200).await;
    tokio::time::sleep(Duration::from_secs(3)).await; // a baseline of steady load
    let old = cluster.leader().await;
    let at = load.started.elapsed();
    fault.await;
    let promoted = cluster.wait_for_new_leader(&old, Duration::from_secs(60)).await;
    let promotion = promoted.duration_since(load.started).saturating_sub(at);
    let acked = load.acked();
    until_acknowledged(&load, acked + 300).await;
    tokio::time::sleep(Duration::from_secs(5)).await; // throughput back
    for address in servers.addresses() {
        serves_again(&address, &servers.token, Duration::from_secs(30)).await;
    }
    let ledger = load.finish().await;
    let timeline = Timeline::of(&ledger, at, Duration::from_secs(3));
    (ledger, timeline, promotion)
}

/// Runs load until `count` keys are acknowledged (at most 60 s).
async fn until_acknowledged(load: &Load, count: usize) {
    eventually(&format!("{count} keys acknowledged"), Duration::from_secs(60), || async { load.acked() >= count })
        .await;
}

/// Leader death: the leader's Patroni and Postgres are killed with SIGKILL
/// under load on two servers behind HAProxy.
async fn when_the_leader_dies_no_acknowledged_key_is_lost_and_no_attempt_is_sent_twice() {
    let asynchronous = std::env::var_os("ONEJOB_HA_ASYNC").is_some();
    let cluster = HaCluster::start(asynchronous).await;
    let url = cluster.proxied_url();
    let servers = Servers::start(&url, &[url.clone(), url.clone()]).await;
    let replication = replication_of(&servers.servers[0].1).await;
    assert_eq!(replication.0["commit_waits_for_standby"], !asynchronous, "{:?}", replication);
    assert_eq!(replication.1, if asynchronous { 0.0 } else { 1.0 }, "the gauge");
    let old = cluster.leader().await;
    let (ledger, timeline, promotion) = through_a_fault(&cluster, &servers, async {
        assert_eq!(cluster.kill_leader().await, old);
    })
    .await;
    let mode = if asynchronous { "asynchronous" } else { "synchronous" };
    timeline.print("leader-death", &format!("mode={mode} promotion_s={:.1}", promotion.as_secs_f64()), &ledger);
    // docs/guarantees.md: 503s until the promotion (Patroni's `ttl`, 10 s, and `loop_wait`, 1 s, here), then
    // served again within half a second of it; bounded with slack: 2 s after the proxy reached the new leader.
    let (served_again, without) = (timeline.first_2xx.expect("a 2xx after the kill"), timeline.longest_without_2xx);
    assert!(served_again <= promotion + Duration::from_secs(2), "served {served_again:?}, promoted {promotion:?}");
    assert!(without < Duration::from_secs(16), "a leader's death cost {without:?} without a 2xx");
    check_nothing_lost(&url, &ledger, &servers).await;
}

/// What `/readyz` on `address` says of the database's replication, once
/// read, and the gauge.
async fn replication_of(address: &str) -> (Value, f64) {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let database = loop {
        let ready = crate::common::ok_json(http.get(format!("http://{address}/readyz")).send().await.unwrap()).await;
        if !ready["database"].is_null() {
            break ready["database"].clone();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the replication settings are read: {ready}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let text = http.get(format!("http://{address}/metrics")).send().await.unwrap().text().await.unwrap();
    let samples = crate::common::prometheus::parse(&text);
    let gauge = crate::common::prometheus::value(&samples, "onejob_database_commit_waits_for_standby", &[]);
    (database, gauge.expect("the gauge is exported on Postgres"))
}

/// With asynchronous replication, a server says at start that a failover
/// may lose acknowledged jobs, and `/readyz` and the gauge say its commits
/// do not wait for the standby that streams.
async fn on_asynchronous_replication_a_server_warns_and_says_its_commits_do_not_wait() {
    let cluster = HaCluster::start(true).await;
    let url = cluster.proxied_url();
    alice_key(&url).await;
    let (_server, address, mut log) = crate::common::spawn_server_logged(&url, None, &[], &[]).await;
    let (database, gauge) = replication_of(&address).await;
    assert_eq!(database["commit_waits_for_standby"], false, "{database}");
    assert_eq!(database["synchronous_standby_names"], "", "{database}");
    assert_eq!(database["standbys"], 1, "{database}");
    assert_eq!(gauge, 0.0);
    let warning = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(line) = log.recv().await {
            if line.contains("commits do not wait for a standby") {
                return line;
            }
        }
        panic!("the server's log ended without the warning");
    })
    .await
    .expect("the warning within 10 s");
    assert!(warning.contains("WARN") && warning.contains("second job"), "{warning}");
}

/// A planned switchover (`patronictl switchover`) under the same load.
async fn a_planned_switchover_costs_seconds_of_503_and_loses_nothing() {
    let cluster = HaCluster::start(false).await;
    let url = cluster.proxied_url();
    let servers = Servers::start(&url, &[url.clone(), url.clone()]).await;
    let candidate = if cluster.leader().await == "node1" { "node2" } else { "node1" };
    // The command returns once the old leader is back as the standby.
    let (ledger, timeline, _) = through_a_fault(&cluster, &servers, cluster.switchover(candidate)).await;
    timeline.print("switchover", "", &ledger);
    assert!(
        timeline.longest_without_2xx < Duration::from_secs(20),
        "a switchover cost {:?} without a 2xx",
        timeline.longest_without_2xx
    );
    check_nothing_lost(&url, &ledger, &servers).await;
}

/// The old primary rejoins as a standby while a server's URL names it
/// directly: that server answers 503 (never 500), is not ready and does
/// not hang; a server started then waits for a writable database instead
/// of exiting; both serve once that node is the leader again.
async fn a_server_on_a_node_that_rejoined_as_a_standby_answers_503_until_it_is_writable_again() {
    let cluster = HaCluster::start(false).await;
    let url = cluster.proxied_url();
    let old = cluster.leader().await;
    let direct = cluster.node_url(&old);
    let servers = Servers::start(&url, &[url.clone(), direct.clone()]).await;
    let on_old = servers.servers[1].1.clone();
    let load = Load::start(servers.addresses(), servers.token.clone());
    until_acknowledged(&load, 200).await;
    cluster.kill_leader().await;
    cluster.wait_for_new_leader(&old, Duration::from_secs(60)).await;
    cluster.restart_node(&old).await;
    cluster.wait_for_standby(&old, Duration::from_secs(60)).await;

    // The server on the standby: 503 with Retry-After, quickly, not ready.
    let http = reqwest::Client::builder().timeout(Duration::from_secs(15)).build().unwrap();
    for i in 0..5 {
        let response = http
            .post(format!("http://{on_old}/jobs"))
            .bearer_auth(&servers.token)
            .header("idempotency-key", format!("on-the-standby-{i}"))
            .json(&json!({"task": "summarize", "input": {"text": "on the standby"}}))
            .send()
            .await
            .expect("an answer, not a hang");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "a create on a standby");
        assert!(response.headers().contains_key("retry-after"));
    }
    let ready = http.get(format!("http://{on_old}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE, "a server on a standby is not ready");

    // A server started now on the standby waits, and says so.
    let (mut waiting, waiting_address) =
        crate::common::spawn_server_with(&direct, Some(&servers.config), &["--migrate"]).await;
    let readiness = http.get(format!("http://{waiting_address}/readyz")).send().await.unwrap();
    assert_eq!(readiness.status(), StatusCode::SERVICE_UNAVAILABLE);
    let problem: Value = readiness.json().await.unwrap();
    assert!(problem["detail"].as_str().unwrap().contains("waiting for a database that takes writes"), "{problem}");
    let health = http.get(format!("http://{waiting_address}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK, "a waiting server is alive");

    // The old primary leads again: both serve.
    cluster.switchover(&old).await;
    assert!(waiting.try_wait().unwrap().is_none(), "the waiting server did not exit");
    serves_again(&on_old, &servers.token, Duration::from_secs(30)).await;
    serves_again(&waiting_address, &servers.token, Duration::from_secs(30)).await;
    let ledger = load.finish().await;
    check_nothing_lost(&url, &ledger, &servers).await;
}

/// Without a proxy: both servers on a URL naming both nodes
/// (`target_session_attrs=read-write`); the leader dies.
async fn a_url_naming_both_nodes_follows_the_leader_without_a_proxy() {
    let cluster = HaCluster::start(false).await;
    let several = cluster.several_hosts_url();
    let servers = Servers::start(&several, &[several.clone(), several.clone()]).await;
    let (ledger, timeline, promotion) = through_a_fault(&cluster, &servers, async {
        cluster.kill_leader().await;
    })
    .await;
    timeline.print("several-hosts", &format!("promotion_s={:.1}", promotion.as_secs_f64()), &ledger);
    check_nothing_lost(&cluster.proxied_url(), &ledger, &servers).await;
}

/// A database that turns read-only under open connections (as an operator's
/// `default_transaction_read_only`, or a server demoted behind a proxy,
/// makes it): every create answers 503 with `Retry-After`, never 500, the
/// server stops being ready, and both come back once it takes writes again,
/// without a restart.
async fn a_database_turned_read_only_under_open_connections_answers_503_then_recovers() {
    let cluster = postgres::PrivateCluster::start().await;
    let url = cluster.create_database("onejob").await;
    let admin = PgPool::connect(&cluster.url("postgres")).await.unwrap();
    let servers = Servers::start(&url, std::slice::from_ref(&url)).await;
    let address = servers.servers[0].1.clone();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(15)).build().unwrap();
    let create = |key: String| {
        http.post(format!("http://{address}/jobs"))
            .bearer_auth(&servers.token)
            .header("idempotency-key", key)
            .json(&json!({"task": "summarize", "input": {"text": "read-only"}}))
            .send()
    };
    let ready = || async { http.get(format!("http://{address}/readyz")).send().await.unwrap().status() };
    // Connections open and in use: the pool's and the hot path's.
    for i in 0..20 {
        assert_eq!(create(format!("before-{i}")).await.unwrap().status(), StatusCode::CREATED);
    }

    let set = |value: &'static str| {
        let admin = admin.clone();
        async move {
            sqlx::query(value).execute(&admin).await.unwrap();
            sqlx::query("select pg_reload_conf()").execute(&admin).await.unwrap();
        }
    };
    set("alter system set default_transaction_read_only = on").await;
    let started = Instant::now();
    let mut refused = 0;
    for i in 0.. {
        let response = create(format!("read-only-{i}")).await.expect("an answer, not a hang");
        let status = response.status();
        assert!(matches!(status, StatusCode::CREATED | StatusCode::SERVICE_UNAVAILABLE), "create {i}: {status}");
        if status == StatusCode::SERVICE_UNAVAILABLE {
            assert!(response.headers().contains_key("retry-after"));
            refused += 1;
        }
        if refused >= 5 && ready().await == StatusCode::SERVICE_UNAVAILABLE {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "5 creates refused and not ready within 30 s");
    }

    set("alter system reset default_transaction_read_only").await;
    serves_again(&address, &servers.token, Duration::from_secs(30)).await;
}

/// Every onejob backend terminated with `pg_terminate_backend` twice a
/// second for `ONEJOB_TERMINATE_S` seconds
/// (30 by default) under load, on one plain Postgres.
async fn backends_terminated_twice_a_second_cost_no_500_and_lose_nothing() {
    let seconds: u64 = std::env::var("ONEJOB_TERMINATE_S").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let url = postgres::fresh_database_direct().await;
    let servers = Servers::start(&url, &[url.clone(), url.clone()]).await;
    let admin = PgPool::connect(&url).await.unwrap();
    let load = Load::start(servers.addresses(), servers.token.clone());
    until_acknowledged(&load, 200).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let fault = load.started.elapsed();
    let mut terminated = 0_i64;
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut ticks = tokio::time::interval(Duration::from_millis(500));
    while Instant::now() < until {
        ticks.tick().await;
        terminated += sqlx::query_scalar::<_, i64>(
            "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity \
             where application_name = 'onejob' and datname = current_database()) t",
        )
        .fetch_one(&admin)
        .await
        .unwrap();
    }
    let stopped = load.started.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await; // the throughput after
    let ledger = load.finish().await;
    let rate = |from: Duration, to: Duration| {
        let ok = ledger.answers.iter().filter(|(at, s)| *at >= from && *at < to && (200..300).contains(s)).count();
        ok as f64 / (to - from).as_secs_f64()
    };
    let second = Duration::from_secs(1);
    let rates = format!(
        "per_s_during={:.0} per_s_after={:.0}",
        rate(fault, stopped),
        rate(stopped + second, stopped + 5 * second)
    );
    let first_after = ledger
        .answers
        .iter()
        .find(|(at, status)| *at >= stopped && (200..300).contains(status))
        .map(|(at, _)| at.saturating_sub(stopped));
    assert!(
        first_after.is_some_and(|after| after < Duration::from_secs(10)),
        "a 2xx within 10 s after the terminations stopped: {first_after:?}"
    );
    Timeline::of(&ledger, fault, Duration::from_secs(3)).print(
        "terminations",
        &format!("seconds={seconds} backends_terminated={terminated} {rates}"),
        &ledger,
    );
    assert!(terminated >= seconds as i64, "backends were terminated: {terminated}");
    check_nothing_lost(&url, &ledger, &servers).await;
}

on_postgres!(
    cluster: when_the_leader_dies_no_acknowledged_key_is_lost_and_no_attempt_is_sent_twice,
    a_planned_switchover_costs_seconds_of_503_and_loses_nothing,
    a_server_on_a_node_that_rejoined_as_a_standby_answers_503_until_it_is_writable_again,
    a_url_naming_both_nodes_follows_the_leader_without_a_proxy,
    on_asynchronous_replication_a_server_warns_and_says_its_commits_do_not_wait
);
on_postgres!(
    direct: backends_terminated_twice_a_second_cost_no_500_and_lose_nothing,
    a_database_turned_read_only_under_open_connections_answers_503_then_recovers
);
