//! The database at fault: Postgres stopped under load, and a pool exhausted
//! by statements that cannot finish. While the database cannot answer,
//! requests get 503 `unavailable` with `Retry-After` within their deadline,
//! never a 500 and never a hang; afterwards onejob recovers by itself, and
//! every key acknowledged with 2xx names exactly one job (I1, I8). Postgres
//! only: an embedded SQLite file does not stop apart from its process.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use onejob::app::Role;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgPool};

use crate::common::postgres::{self, PrivateCluster};
use crate::common::processes::eventually;
use crate::common::{Backend, TestApp, expect_problem};

/// What one load client saw.
#[derive(Default)]
struct Seen {
    /// Keys acknowledged with 2xx, and the job id each named.
    acknowledged: HashMap<String, String>,
    /// When each 503 came.
    unavailable: Vec<Instant>,
    /// Requests that failed at the transport (connection refused or reset).
    transport_errors: usize,
    /// The slowest answer.
    slowest: Duration,
}

/// Creates jobs with new keys until `running` turns false, retrying each key
/// on 503 and transport errors until it is acknowledged. Anything but 2xx or
/// 503 `unavailable` with `Retry-After` fails the test.
async fn load(app: Arc<TestApp>, client_number: usize, running: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    let client = reqwest::Client::builder().timeout(Duration::from_secs(15)).build().unwrap();
    let mut n = 0;
    while running.load(Ordering::Relaxed) {
        let key = format!("client-{client_number}-{n}");
        n += 1;
        let body = json!({"task": "summarize", "input": {"text": format!("outage {key}")}});
        let give_up = Instant::now() + Duration::from_secs(40);
        loop {
            assert!(Instant::now() < give_up, "key {key} was never acknowledged");
            let sent = Instant::now();
            let answer = client
                .post(app.url("/jobs"))
                .bearer_auth(&app.alice)
                .header("idempotency-key", &key)
                .json(&body)
                .send()
                .await;
            seen.slowest = seen.slowest.max(sent.elapsed());
            match answer {
                Ok(response) if response.status().is_success() => {
                    let job: Value = response.json().await.unwrap();
                    seen.acknowledged.insert(key.clone(), job["id"].as_str().unwrap().to_owned());
                    break;
                }
                Ok(response) => {
                    assert!(response.headers().contains_key("retry-after"), "a 503 says when to retry");
                    expect_problem(response, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
                    seen.unavailable.push(Instant::now());
                }
                Err(error) => {
                    assert!(!error.is_timeout(), "a request hung: {error}");
                    seen.transport_errors += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    seen
}

async fn readiness(app: &TestApp) -> StatusCode {
    app.client.get(app.url("/readyz")).send().await.unwrap().status()
}

/// The deadline of the loaded servers' requests.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Four clients creating jobs on a live server on `url` until stopped.
struct Loaded {
    app: Arc<TestApp>,
    running: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<Seen>>,
}

impl Loaded {
    /// A live server on `url` (requests bounded by [`REQUEST_TIMEOUT`], a
    /// pool of 8), loaded for 1.5 s before this returns.
    async fn start(url: &str) -> Self {
        let app = Arc::new(
            TestApp::spawn_on(Backend::Postgres, url, Role::All, |s| {
                s.server.request_timeout = REQUEST_TIMEOUT;
                s.database.acquire_timeout = Duration::from_millis(500);
                s.database.max_connections = 8;
                s.server.rate_limit_per_second = 0;
            })
            .await,
        );
        let running = Arc::new(AtomicBool::new(true));
        let clients = (0..4).map(|i| tokio::spawn(load(app.clone(), i, running.clone()))).collect();
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        Self { app, running, clients }
    }

    /// Stops the clients: what they saw, together.
    async fn finish(self) -> Seen {
        self.running.store(false, Ordering::Relaxed);
        let mut all = Seen::default();
        for client in self.clients {
            let seen = client.await.unwrap();
            all.acknowledged.extend(seen.acknowledged);
            all.unavailable.extend(seen.unavailable);
            all.slowest = all.slowest.max(seen.slowest);
        }
        all
    }
}

/// Asks for readiness every 250 ms for `span`: each answer a prompt 503.
async fn not_ready_for(app: &TestApp, span: Duration, why: &str) {
    let since = Instant::now();
    while since.elapsed() < span {
        let asked = Instant::now();
        assert_eq!(readiness(app).await, StatusCode::SERVICE_UNAVAILABLE, "{why}");
        assert!(asked.elapsed() < REQUEST_TIMEOUT + Duration::from_secs(1), "readiness answered within the deadline");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The jobs of the database at `pool` by key, each acknowledged key
/// holding the job it was told.
async fn acknowledged_jobs_stored(pool: &PgPool, acknowledged: &HashMap<String, String>) -> HashMap<String, String> {
    let jobs: Vec<(String, String)> =
        sqlx::query_as("select idempotency_key, id::text from jobs").fetch_all(pool).await.unwrap();
    let stored: HashMap<String, String> = jobs.iter().cloned().collect();
    assert_eq!(stored.len(), jobs.len(), "one job per key");
    assert!(acknowledged.len() > 20, "the load made progress ({} keys)", acknowledged.len());
    for (key, id) in acknowledged {
        assert_eq!(stored.get(key), Some(id), "acknowledged key {key} holds the job it was told");
    }
    stored
}

/// Waits until every job succeeded, each with one winner.
async fn every_job_succeeds_once(pool: &PgPool, jobs: usize) {
    eventually("every job succeeding", Duration::from_secs(30), || async {
        let open: i64 =
            sqlx::query_scalar("select count(*) from jobs where state <> 'succeeded'").fetch_one(pool).await.unwrap();
        open == 0
    })
    .await;
    let winners: i64 =
        sqlx::query_scalar("select count(*) from attempts where state = 'succeeded'").fetch_one(pool).await.unwrap();
    assert_eq!(winners, jobs as i64, "one winner per job");
}

async fn stopped_for_ten_seconds_under_load_answers_503_in_time_and_recovers_without_a_restart() {
    let cluster = PrivateCluster::start().await;
    let url = cluster.create_database("onejob").await;
    let loaded = Loaded::start(&url).await;
    let app = loaded.app.clone();

    cluster.stop().await;
    let stopped = Instant::now();
    // While it is down, readiness says so, promptly.
    not_ready_for(&app, Duration::from_secs(10), "not ready while Postgres is stopped").await;
    cluster.start_again().await;
    let started = Instant::now();
    // Back by itself: no restart of onejob.
    eventually("readiness back to 200", Duration::from_secs(15), || async { readiness(&app).await == StatusCode::OK })
        .await;
    let ready = Instant::now();
    let recovered_in = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let Seen { acknowledged, unavailable, slowest, .. } = loaded.finish().await;
    let after_start = unavailable.iter().filter(|at| **at > started).count();
    eprintln!(
        "{} keys acknowledged, {} answers 503 ({after_start} after Postgres started again), slowest {slowest:?}, ready {recovered_in:?} after Postgres",
        acknowledged.len(),
        unavailable.len()
    );
    assert!(
        unavailable.iter().any(|at| *at > stopped && *at < started),
        "requests were answered 503 while Postgres was down"
    );
    assert!(
        slowest < REQUEST_TIMEOUT + Duration::from_millis(1_500),
        "every answer came within the deadline: {slowest:?}"
    );
    let late: Vec<_> = unavailable.iter().filter(|at| **at > ready + Duration::from_secs(1)).collect();
    assert!(late.is_empty(), "{} requests still failed more than 1 s after readiness came back", late.len());
    assert!(recovered_in < Duration::from_secs(5), "ready {recovered_in:?} after Postgres was");

    // Every acknowledged key names exactly one job, the one it was told.
    let pool = PgPool::connect(&url).await.unwrap();
    let stored = acknowledged_jobs_stored(&pool, &acknowledged).await;
    assert_eq!(
        stored.len(),
        acknowledged.len(),
        "every key tried was acknowledged in the end, and nothing else was stored"
    );
    // The worker and the reconciler recover too: every job runs to one winner,
    // those whose outcome could not be recorded during the outage included.
    every_job_succeeds_once(&pool, stored.len()).await;
}

/// How a silent network loses what is sent (see `common::blackhole`).
#[derive(Clone, Copy)]
enum Silence {
    /// Held back, then delivered once the network carries again.
    Held,
    /// Dropped for good.
    Dropped,
}

/// The network between onejob and Postgres carries nothing for 8 s and
/// resets nothing (a proxy that stops reading: what was sent waits, as TCP
/// keeps it, and flows once the network carries again), under four clients
/// that retry each key: every answer is 2xx or 503 `unavailable` with
/// `Retry-After` within the request's deadline, never a hang; once traffic
/// flows, creates pass again without a restart, every acknowledged key holds
/// its job, and every job runs to one winner, no attempt sent twice.
async fn cut_off_silently_for_eight_seconds_under_load_answers_503_in_time_and_recovers_without_a_restart() {
    cut_off_silently_under_load(Silence::Held).await;
}

/// As above, but what each connection sent while cut off is lost for good,
/// as by a middlebox that dropped it: the answers those connections wait for
/// never come, and onejob's own deadlines must give them up (the pool's
/// places, the background tasks' statements, the session that listens for
/// key changes: a key revoked while cut off is refused afterwards).
async fn cut_off_by_a_network_that_drops_what_was_sent_answers_503_in_time_and_recovers_without_a_restart() {
    cut_off_silently_under_load(Silence::Dropped).await;
}

async fn cut_off_silently_under_load(silence: Silence) {
    let direct = postgres::fresh_database_direct().await;
    let (base, query) = direct.split_once('?').unwrap();
    let name = base.rsplit('/').next().unwrap().to_owned();
    let dir = query.split('&').find_map(|p| p.strip_prefix("host=")).unwrap();
    let cut = crate::common::blackhole::Blackhole::start_unix(format!("{dir}/.s.PGSQL.5432").into()).await;
    let loaded = Loaded::start(&format!("postgres://postgres@127.0.0.1:{}/{name}", cut.addr.port())).await;
    let app = loaded.app.clone();
    // A key the server has checked and cached, revoked while cut off: the
    // notification of it crosses the cut.
    let pool = PgPool::connect(&direct).await.unwrap();
    let owner = onejob::domain::OwnerId::parse("alice").unwrap();
    let (revoked, token) = onejob::keys::create_key(&crate::common::open_store(&direct), &owner).await.unwrap();
    let lists = || app.client.get(app.url("/jobs")).bearer_auth(&token).send();
    assert_eq!(lists().await.unwrap().status(), StatusCode::OK, "the key is checked and cached");

    let quiet = |on| match silence {
        Silence::Held => cut.pause(on),
        Silence::Dropped => cut.silence(on),
    };
    quiet(true);
    let silent = Instant::now();
    sqlx::query("update api_keys set revoked_at = now() where id = $1").bind(revoked).execute(&pool).await.unwrap();
    not_ready_for(&app, Duration::from_secs(8), "not ready while cut off").await;
    quiet(false);
    let flowing = Instant::now();
    eventually("readiness back to 200", Duration::from_secs(15), || async { readiness(&app).await == StatusCode::OK })
        .await;
    let back_in = flowing.elapsed();
    eventually("the key revoked while cut off refused", Duration::from_secs(20), || async {
        lists().await.is_ok_and(|r| r.status() == StatusCode::UNAUTHORIZED)
    })
    .await;
    let Seen { acknowledged, unavailable, slowest, .. } = loaded.finish().await;
    eprintln!(
        "{} keys acknowledged, {} answers 503, slowest {slowest:?}, ready {back_in:?} after",
        acknowledged.len(),
        unavailable.len()
    );
    assert!(unavailable.iter().any(|at| *at > silent && *at < flowing), "requests were answered 503 while cut off");
    assert!(
        slowest < REQUEST_TIMEOUT + Duration::from_millis(1_500),
        "every answer came within the deadline: {slowest:?}"
    );

    let stored = acknowledged_jobs_stored(&pool, &acknowledged).await;
    every_job_succeeds_once(&pool, stored.len()).await;
    let log = app.simulator_log().await;
    let twice: Vec<&Value> = log.values().filter(|r| r["received"].as_i64() != Some(1)).collect();
    assert!(twice.is_empty(), "attempts that reached the provider other than once: {twice:?}");
}

/// The session that listens for key changes, cut off alone and for good
/// (as by a NAT or a firewall that forgot it while it sat idle): no error
/// comes, but it is checked after a few seconds of quiet, found out, and
/// replaced; the store reports the changes lost meanwhile (so that the key
/// cache forgets what it holds) and then follows again.
async fn a_listening_session_cut_off_alone_is_found_out_and_replaced() {
    let direct = postgres::fresh_database_direct().await;
    let (base, query) = direct.split_once('?').unwrap();
    let name = base.rsplit('/').next().unwrap().to_owned();
    let dir = query.split('&').find_map(|p| p.strip_prefix("host=")).unwrap();
    let cut = crate::common::blackhole::Blackhole::start_unix(format!("{dir}/.s.PGSQL.5432").into()).await;
    let mut settings = onejob::config::Settings::builtin();
    settings.database.url = Some(format!("postgres://postgres@127.0.0.1:{}/{name}", cut.addr.port()));
    settings.database.statement_timeout = Duration::from_millis(1_000);
    let store = onejob::app::open_store(&settings).unwrap();
    let mut changes = store.follow_key_changes().expect("Postgres follows key changes");
    assert_eq!(next_change(&mut changes).await, onejob::store::KeyChange::Following);

    cut.silence_open();
    let silenced = Instant::now();
    assert_eq!(next_change(&mut changes).await, onejob::store::KeyChange::Lost, "the cut session found out");
    let found_in = silenced.elapsed();
    assert_eq!(next_change(&mut changes).await, onejob::store::KeyChange::Following, "following on a new session");
    eprintln!("the cut session found out in {found_in:?}");
    assert!(found_in < Duration::from_secs(5 + 2 + 1), "within the check's interval and patience: {found_in:?}");
}

/// The next key change a follower reports, within 20 s.
async fn next_change(changes: &mut tokio::sync::mpsc::Receiver<onejob::store::KeyChange>) -> onejob::store::KeyChange {
    let next = tokio::time::timeout(Duration::from_secs(20), changes.recv()).await;
    next.expect("a change reported in time").expect("the follower runs")
}

async fn a_pool_held_by_blocked_statements_answers_503_within_the_acquire_timeout() {
    const ACQUIRE_TIMEOUT: Duration = Duration::from_millis(300);
    // Nothing is stopped here: a fresh database on the shared cluster will do.
    let url = postgres::fresh_database().await;
    // Two connections for the one-statement requests (a group of new jobs,
    // a read of a job), and a pool of two beside them: one listens for key
    // revocations, one serves the other statements (listing jobs, readiness).
    let app = Arc::new(
        TestApp::spawn_on(Backend::Postgres, &url, Role::Api, |s| {
            s.database.max_connections = 2;
            s.database.acquire_timeout = ACQUIRE_TIMEOUT;
            s.server.request_timeout = Duration::from_millis(10_000);
        })
        .await,
    );
    assert_eq!(app.get(&app.alice, "/jobs").await.status(), StatusCode::OK, "the key is checked and cached");
    // Jobs to read: one by the read that waits, one by each read refused
    // (reads of one job share one read, and would wait for it).
    let mut paths = Vec::new();
    for i in 0..6 {
        paths.push(format!("/jobs/{}", app.create_job(&format!("before-{i}"), None).await["id"].as_str().unwrap()));
    }

    // A lock that onejob's statements wait for, taken by another session:
    // a group of new jobs and a read of a job hold both connections.
    let mut locker = PgConnection::connect(&url).await.unwrap();
    sqlx::query("begin").execute(&mut locker).await.unwrap();
    sqlx::query("lock table jobs in access exclusive mode").execute(&mut locker).await.unwrap();
    let blocked_create = tokio::spawn({
        let app = app.clone();
        async move { app.post_job("blocked", &json!({"task": "summarize", "input": {"text": "wait"}})).await.status() }
    });
    let blocked_read = tokio::spawn({
        let app = app.clone();
        let path = paths[0].clone();
        async move { app.get(&app.alice, &path).await.status() }
    });
    let pool = PgPool::connect(&url).await.unwrap();
    eventually("both connections waiting on the lock", Duration::from_secs(10), || async {
        let waiting: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity where application_name = 'onejob' and wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        waiting == 2
    })
    .await;

    // Every other request is refused quickly instead of queueing: new jobs
    // behind the group that waits, reads for a connection.
    let others: Vec<_> = (0..10)
        .map(|i| {
            let (app, path) = (app.clone(), paths[1 + i / 2].clone());
            tokio::spawn(async move {
                let sent = Instant::now();
                let response = if i % 2 == 0 {
                    app.post_job(&format!("other-{i}"), &json!({"task": "summarize", "input": {"text": "x"}})).await
                } else {
                    app.get(&app.alice, &path).await
                };
                let took = sent.elapsed();
                assert!(response.headers().contains_key("retry-after"));
                expect_problem(response, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
                took
            })
        })
        .collect();
    for other in others {
        let took = other.await.unwrap();
        assert!(took < ACQUIRE_TIMEOUT + Duration::from_secs(1), "answered 503 in {took:?}, not queued");
    }
    // The rest of the process is not held up: readiness uses the other
    // pool, which the blocked creations do not hold.
    let sent = Instant::now();
    assert_eq!(readiness(&app).await, StatusCode::OK);
    assert!(sent.elapsed() < ACQUIRE_TIMEOUT + Duration::from_secs(1));

    // The lock goes: the waiting requests finish, and the pool serves again.
    sqlx::query("rollback").execute(&mut locker).await.unwrap();
    assert_eq!(blocked_create.await.unwrap(), StatusCode::CREATED, "the group that waited finished");
    assert_eq!(blocked_read.await.unwrap(), StatusCode::OK, "the read that waited finished");
    let sent = Instant::now();
    assert_eq!(
        app.post_job("after", &json!({"task": "summarize", "input": {"text": "y"}})).await.status(),
        StatusCode::CREATED
    );
    assert!(sent.elapsed() < Duration::from_secs(1));
    let refused: i64 = sqlx::query_scalar("select count(*) from jobs where idempotency_key like 'other-%'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(refused, 0, "a request answered 503 stored nothing");
}

async fn pooled_connections_cut_while_idle_cost_at_most_one_503_each_and_the_pool_heals() {
    const POOL: usize = 4;
    // Nothing is stopped here: a fresh database on the shared cluster will do.
    let url = postgres::fresh_database().await;
    let app = Arc::new(
        TestApp::spawn_on(Backend::Postgres, &url, Role::Api, |s| {
            s.database.max_connections = POOL as u32;
            s.server.rate_limit_per_second = 0;
        })
        .await,
    );
    // Fill the pool: every connection opened and idle.
    let warm: Vec<_> = (0..4 * POOL)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { app.get(&app.alice, "/jobs").await.status() })
        })
        .collect();
    for request in warm {
        assert_eq!(request.await.unwrap(), StatusCode::OK);
    }
    // Cut them all from the server's side, as a restart or a failover would.
    let pool = PgPool::connect(&url).await.unwrap();
    let cut: i64 = sqlx::query_scalar(
        r#"select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity
           where datname = current_database() and application_name = 'onejob' and pid <> pg_backend_pid()) t"#,
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(cut >= POOL as i64, "the pool's connections were open ({cut})");

    let mut failed = 0;
    for i in 0..2 * POOL + 10 {
        let response =
            app.post_job(&format!("after-cut-{i}"), &json!({"task": "summarize", "input": {"text": "z"}})).await;
        if response.status() == StatusCode::CREATED {
            continue;
        }
        assert!(response.headers().contains_key("retry-after"));
        expect_problem(response, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;
        failed += 1;
        assert!(i < 2 * POOL, "request {i} still failed: the pool did not heal");
    }
    eprintln!("{failed} requests answered 503 after {cut} connections were cut");
    assert!(failed <= POOL, "at most one failure per dead pooled connection ({failed})");
}

/// Sets `default_transaction_read_only` for new sessions of the database of
/// `url`: its new connections find it read-only, as they would a standby.
async fn set_read_only(url: &str, on: bool) {
    let mut connection = PgConnection::connect(url).await.unwrap();
    sqlx::query("set default_transaction_read_only = off").execute(&mut connection).await.unwrap();
    let name: String = sqlx::query_scalar("select current_database()").fetch_one(&mut connection).await.unwrap();
    let setting = if on { "set default_transaction_read_only = on" } else { "reset default_transaction_read_only" };
    sqlx::query(&format!(r#"alter database "{name}" {setting}"#)).execute(&mut connection).await.unwrap();
    connection.close().await.ok();
}

/// A replica started without migrating (`serve --no-migrate`, as
/// production starts them) on a database that takes no writes: it answers
/// `/healthz` at once and everything else 503 with `Retry-After`, logs the
/// refused connections once per 10 seconds with a count (never the pool's
/// ERROR per try), and serves once the database takes writes, without a
/// restart.
async fn a_replica_started_without_migrating_on_a_read_only_database_listens_at_once_and_waits() {
    let url = postgres::fresh_database_direct().await;
    set_read_only(&url, true).await;
    let (_server, address, mut log) = crate::common::spawn_server_logged(&url, None, &["--no-worker"], &[]).await;
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let health = http.get(format!("http://{address}/healthz")).send().await.expect("an answer, not a hang");
    assert_eq!(health.status(), StatusCode::OK, "a waiting server is alive");
    let create = || {
        http.post(format!("http://{address}/jobs"))
            .bearer_auth("any-token")
            .header("idempotency-key", "k")
            .json(&json!({"task": "summarize", "input": {"text": "read-only"}}))
            .send()
    };
    let refused = create().await.expect("an answer, not a hang");
    assert!(refused.headers().contains_key("retry-after"), "{:?}", refused.text().await);
    expect_problem(refused, StatusCode::SERVICE_UNAVAILABLE, "unavailable").await;

    // Two lines about refused connections, 10 s apart, and nothing else
    // about them.
    let mut lines_at = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(40);
    while lines_at.len() < 2 {
        let line = tokio::time::timeout_at(deadline.into(), log.recv()).await.expect("two lines within 40 s").unwrap();
        assert!(!line.contains("after_connect"), "the pool's line for each try: {line}");
        if line.contains("new database connections refused") {
            let count: u64 =
                line.split("refused=").nth(1).and_then(|c| c.split_whitespace().next()?.parse().ok()).unwrap();
            assert!(count >= 1, "{line}");
            lines_at.push((Instant::now(), count));
        }
    }
    let apart = lines_at[1].0 - lines_at[0].0;
    assert!(apart >= Duration::from_millis(9500), "lines {apart:?} apart");
    assert!(lines_at[1].1 > 1, "the second line counts the tries since the first: {}", lines_at[1].1);

    set_read_only(&url, false).await;
    let store = crate::common::open_store(&url);
    let owner = onejob::domain::OwnerId::parse("alice").unwrap();
    let (_, token) = onejob::keys::create_key(&store, &owner).await.unwrap();
    eventually("the server serves once the database takes writes", Duration::from_secs(30), || async {
        let response = http
            .post(format!("http://{address}/jobs"))
            .bearer_auth(&token)
            .header("idempotency-key", "after")
            .json(&json!({"task": "summarize", "input": {"text": "writable"}}))
            .send()
            .await;
        response.is_ok_and(|r| r.status() == StatusCode::CREATED)
    })
    .await;
    let metrics = http.get(format!("http://{address}/metrics")).send().await.unwrap().text().await.unwrap();
    let samples = crate::common::prometheus::parse(&metrics);
    let counted = crate::common::prometheus::value(&samples, "onejob_database_connections_refused_total", &[])
        .expect("the counter is exported");
    assert!(counted >= lines_at[0].1 as f64 + lines_at[1].1 as f64, "counted {counted}");
}

on_postgres!(
    a_pool_held_by_blocked_statements_answers_503_within_the_acquire_timeout,
    pooled_connections_cut_while_idle_cost_at_most_one_503_each_and_the_pool_heals
);

on_postgres!(
    direct: stopped_for_ten_seconds_under_load_answers_503_in_time_and_recovers_without_a_restart,
    cut_off_silently_for_eight_seconds_under_load_answers_503_in_time_and_recovers_without_a_restart,
    cut_off_by_a_network_that_drops_what_was_sent_answers_503_in_time_and_recovers_without_a_restart,
    a_listening_session_cut_off_alone_is_found_out_and_replaced,
    a_replica_started_without_migrating_on_a_read_only_database_listens_at_once_and_waits
);
