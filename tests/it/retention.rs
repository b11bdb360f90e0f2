//! Retention: finished jobs past their retention are purged with their
//! attempts, events and deliveries, their keys then make new jobs, and
//! what they cost stays in the usage report; jobs with an open attempt
//! are kept whatever their age; an owner erases a finished job at once
//! (`DELETE /jobs/{id}`), never one still open; one purger at a time.
//! Over HTTP against the running application and the store, on both
//! backends. Ages are made by the store's clock: the tests run the purge
//! with a cutoff in the future instead of waiting for one to pass.

use std::time::Duration;

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Connection;

use crate::common::{Backend, TestApp, expect_problem};
use onejob::domain::{JobId, OwnerId};
use onejob::store::retention::{PurgeBatch, PurgeRule};

fn alice() -> OwnerId {
    OwnerId::parse("alice").unwrap()
}

/// A rule purging every finished job of every task changed before `ahead` from now.
fn everything_changed_before(ahead: Duration) -> PurgeRule {
    PurgeRule { task: None, others: Vec::new(), before: Utc::now() + chrono::Duration::from_std(ahead).unwrap() }
}

async fn create(app: &TestApp, key: &str, body: &Value) -> (StatusCode, String) {
    let response = app.post_job(key, body).await;
    let status = response.status();
    let job: Value = response.json().await.unwrap();
    (status, job["id"].as_str().unwrap().to_owned())
}

async fn purge_all(app: &TestApp, rule: &PurgeRule) -> u64 {
    let mut purged = 0;
    loop {
        match app.store().purge_batch(rule, 2).await.unwrap() {
            PurgeBatch::Purged(jobs) if jobs.is_empty() => return purged,
            PurgeBatch::Purged(jobs) => purged += jobs.len() as u64,
            PurgeBatch::Busy => panic!("nobody else purges in this test"),
        }
    }
}

async fn usage_total(app: &TestApp) -> Value {
    let response = app.get(&app.alice, "/usage?group_by=provider").await;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let report: Value = response.json().await.unwrap();
    assert!(report["total"].is_object(), "a report has its total: {report}");
    report["total"].clone()
}

async fn a_finished_job_past_its_retention_is_purged_and_its_key_makes_a_new_job(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.tasks.get_mut("summarize").unwrap().failover.clear();
        // A won job whose loser still runs, for as long as the test needs.
        let mut racing = s.tasks["summarize"].clone();
        racing.cancel_losers = false;
        s.tasks.insert("summarize-racing".into(), racing);
        let slow = s.providers.get_mut("sim-slow").unwrap();
        (slow.latency, slow.timeout) = (Duration::from_millis(20_000), Duration::from_millis(40_000));
        // Cache tokens too go through the rollup.
        s.providers.get_mut("sim-fast").unwrap().cache_read_tokens = 2;
    })
    .await;
    let body = json!({"task": "summarize", "input": {"text": "kept for a while"}});
    let (created, first) = create(&app, "kept-then-free", &body).await;
    assert_eq!(created, StatusCode::CREATED);
    let job = app.wait_for(&first, "succeeded", |j| j["state"] == "succeeded").await;
    let last_change =
        chrono::DateTime::parse_from_rfc3339(job["attempts"][0]["finished_at"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(job["expires_at"].as_str().expect("a finished job says when it expires"))
            .unwrap();
    assert_eq!(
        expires - last_change,
        chrono::Duration::days(30),
        "the default retention after the last change: {job:#}"
    );
    // Open jobs of the same age: unknown (sim-hang past its deadline, not
    // yet reconciled) and running (sim-slow).
    let (_, unknown) =
        create(&app, "unknown", &json!({"task": "summarize", "input": {"text": "hangs"}, "provider": "sim-hang"}))
            .await;
    let unknown_job = app.wait_for(&unknown, "unknown", |j| j["state"] == "unknown").await;
    assert!(unknown_job["expires_at"].is_null(), "an open job never expires: {unknown_job:#}");
    let (_, running) =
        create(&app, "running", &json!({"task": "summarize", "input": {"text": "slow"}, "provider": "sim-slow"})).await;
    app.wait_for(&running, "running", |j| j["state"] == "running").await;
    let (_, won) =
        create(&app, "won", &json!({"task": "summarize-racing", "input": {"text": "raced"}, "provider": "sim-slow"}))
            .await;
    app.wait_for(&won, "running", |j| j["state"] == "running").await;
    let fallback = app.post_attempt(&app.alice, &won, "fallback", &json!({"provider": "sim-fast"})).await;
    assert_eq!(fallback.status(), StatusCode::CREATED);
    let won_job = app.wait_for(&won, "won, its loser running", |j| j["state"] == "succeeded").await;
    assert_eq!(won_job["attempts"][0]["state"], "running", "{won_job:#}");
    assert!(won_job["expires_at"].is_null(), "a job with an attempt running never expires: {won_job:#}");
    let before = usage_total(&app).await;
    assert!(before["cache_read_tokens"].as_i64().unwrap() >= 2, "{before:#}");

    let rule = everything_changed_before(Duration::from_secs(3600));
    assert_eq!(app.store().count_purgeable(&rule).await.unwrap(), 1, "only the finished job is due");
    assert_eq!(purge_all(&app, &rule).await, 1);

    assert_eq!(app.get(&app.alice, &format!("/jobs/{first}")).await.status(), StatusCode::NOT_FOUND, "purged");
    let events = app.store().list_events(&alice(), JobId::parse(&first).unwrap()).await.unwrap();
    assert!(events.is_empty(), "its events went with it: {events:?}");
    for kept in [&unknown, &running, &won] {
        assert_eq!(app.get(&app.alice, &format!("/jobs/{kept}")).await.status(), StatusCode::OK, "an open job is kept");
    }
    assert_eq!(usage_total(&app).await, before, "the usage report counts the purged job's attempts from the rollup");
    // The key is free: the same request makes a new job.
    let (again, second) = create(&app, "kept-then-free", &body).await;
    assert_eq!(again, StatusCode::CREATED);
    assert_ne!(second, first);
}

async fn deleting_a_job_erases_it_if_finished_and_refuses_while_it_runs(backend: Backend) {
    let app = TestApp::spawn_live(backend, |_| {}).await;
    let (_, running) =
        create(&app, "slow", &json!({"task": "summarize", "input": {"text": "slow"}, "provider": "sim-slow"})).await;
    app.wait_for(&running, "running", |j| j["state"] == "running").await;
    let delete =
        |token: String, id: String| app.client.delete(app.url(&format!("/jobs/{id}"))).bearer_auth(token).send();
    let refused = delete(app.alice.clone(), running.clone()).await.unwrap();
    let problem = expect_problem(refused, StatusCode::CONFLICT, "job-not-finished").await;
    assert_eq!(problem["state"], "running", "{problem}");

    let (_, done) = create(&app, "quick", &json!({"task": "summarize", "input": {"text": "quick"}})).await;
    app.wait_for(&done, "succeeded", |j| j["state"] == "succeeded").await;
    let before = usage_total(&app).await;
    let bobs = delete(app.bob.clone(), done.clone()).await.unwrap();
    expect_problem(bobs, StatusCode::NOT_FOUND, "not-found").await;
    assert_eq!(delete(app.alice.clone(), done.clone()).await.unwrap().status(), StatusCode::NO_CONTENT);
    assert_eq!(app.get(&app.alice, &format!("/jobs/{done}")).await.status(), StatusCode::NOT_FOUND);
    expect_problem(delete(app.alice.clone(), done.clone()).await.unwrap(), StatusCode::NOT_FOUND, "not-found").await;
    // The job's cost is still in the report (the running job's too, as it was).
    let after = usage_total(&app).await;
    assert_eq!(after["attempts"], before["attempts"], "{before} {after}");
    assert_eq!(after["cost"], before["cost"], "{before} {after}");
}

on_both_backends!(
    a_finished_job_past_its_retention_is_purged_and_its_key_makes_a_new_job,
    deleting_a_job_erases_it_if_finished_and_refuses_while_it_runs,
    the_worker_purges_by_itself_once_a_retention_passes_and_a_tasks_own_retention_wins,
    onejob_purge_counts_with_dry_run_then_purges,
    concurrent_erasures_keep_every_jobs_usage_in_the_report,
);

#[test]
fn a_retention_under_a_day_needs_allow_short() {
    let mut settings = onejob::config::Settings::builtin();
    settings.retention.finished_jobs = "2s".parse().unwrap();
    let refused = settings.validate().unwrap_err().to_string();
    assert!(refused.contains("retention.finished_jobs = \"2s\"") && refused.contains("24 h"), "{refused}");
    settings.retention.allow_short = true;
    settings.validate().unwrap();
    settings.retention.allow_short = false;
    settings.retention.finished_jobs = "24h".parse().unwrap();
    settings.tasks.get_mut("summarize").unwrap().retain_finished = Some("1h".parse().unwrap());
    assert!(settings.validate().unwrap_err().to_string().contains("tasks.summarize.retain_finished"));
}

/// Postgres: a purge while another process holds the purge lock (here a
/// plain session standing in for a purger on another server) purges
/// nothing and says so; once the lock is free, it purges. (SQLite's purges
/// run in write transactions, of which the database allows one at a time.)
async fn a_purge_while_another_server_purges_finds_it_busy_and_purges_nothing() {
    let app = TestApp::spawn_live(Backend::Postgres, |_| {}).await;
    let (_, done) = create(&app, "quick", &json!({"task": "summarize", "input": {"text": "quick"}})).await;
    app.wait_for(&done, "succeeded", |j| j["state"] == "succeeded").await;
    let rule = everything_changed_before(Duration::from_secs(3600));
    let mut other = sqlx::PgConnection::connect(&app.database_url).await.unwrap();
    let held: bool = sqlx::query_scalar("select pg_try_advisory_lock($1)")
        .bind(onejob::store::retention::PURGE_LOCK)
        .fetch_one(&mut other)
        .await
        .unwrap();
    assert!(held, "the other purger holds the lock");
    assert_eq!(app.store().purge_batch(&rule, 10).await.unwrap(), PurgeBatch::Busy);
    assert_eq!(app.get(&app.alice, &format!("/jobs/{done}")).await.status(), StatusCode::OK, "nothing purged");
    sqlx::query("select pg_advisory_unlock($1)")
        .bind(onejob::store::retention::PURGE_LOCK)
        .execute(&mut other)
        .await
        .unwrap();
    assert!(matches!(app.store().purge_batch(&rule, 10).await.unwrap(), PurgeBatch::Purged(jobs) if jobs.len() == 1));
}

/// The worker purges by itself once a (short, for the test) retention has
/// passed; a task with a longer retention of its own keeps its job.
async fn the_worker_purges_by_itself_once_a_retention_passes_and_a_tasks_own_retention_wins(backend: Backend) {
    let app = TestApp::spawn_live(backend, |s| {
        s.retention.allow_short = true;
        s.retention.finished_jobs = "1s".parse().unwrap();
        s.retention.purge_interval = "100ms".parse().unwrap();
        let mut kept = s.tasks["summarize"].clone();
        kept.retain_finished = Some("1h".parse().unwrap());
        s.tasks.insert("summarize-kept".into(), kept);
    })
    .await;
    let (_, short) = create(&app, "short", &json!({"task": "summarize", "input": {"text": "gone soon"}})).await;
    let (_, long) = create(&app, "long", &json!({"task": "summarize-kept", "input": {"text": "kept an hour"}})).await;
    for id in [&short, &long] {
        app.wait_for(id, "succeeded", |j| j["state"] == "succeeded").await;
    }
    crate::common::processes::eventually("the short-lived job purged", Duration::from_secs(20), || async {
        app.get(&app.alice, &format!("/jobs/{short}")).await.status() == StatusCode::NOT_FOUND
    })
    .await;
    let kept: Value = app.get(&app.alice, &format!("/jobs/{long}")).await.json().await.unwrap();
    assert_eq!(kept["state"], "succeeded", "the task's own retention keeps it: {kept:#}");
}

/// `onejob purge --dry-run` counts what would go and changes nothing;
/// `onejob purge` then purges it.
async fn onejob_purge_counts_with_dry_run_then_purges(backend: Backend) {
    // The app's own purger waits an hour between turns: the command does the work.
    let app = TestApp::spawn_live(backend, |s| s.retention.purge_interval = "1h".parse().unwrap()).await;
    let (_, done) = create(&app, "quick", &json!({"task": "summarize", "input": {"text": "quick"}})).await;
    app.wait_for(&done, "succeeded", |j| j["state"] == "succeeded").await;
    let mut table: toml::Table = onejob::config::DEFAULT_CONFIG.parse().unwrap();
    crate::common::processes::set(&mut table, &["retention", "allow_short"], true.into());
    crate::common::processes::set(&mut table, &["retention", "finished_jobs"], "1s".into());
    let config = std::env::temp_dir().join(format!("onejob-purge-{}.toml", uuid::Uuid::now_v7().simple()));
    std::fs::write(&config, toml::to_string(&table).unwrap()).unwrap();
    // The job is due once a second has passed since its last change.
    let rule = everything_changed_before(Duration::ZERO);
    let due = || async {
        app.store()
            .count_purgeable(&PurgeRule { before: Utc::now() - chrono::Duration::seconds(1), ..rule.clone() })
            .await
            .unwrap()
            == 1
    };
    crate::common::processes::eventually("the job a second old", Duration::from_secs(10), due).await;
    let run = |dry: bool| {
        let mut command = tokio::process::Command::new(crate::common::BIN);
        command.arg("purge").arg("--config").arg(&config).env("DATABASE_URL", &app.database_url);
        if dry {
            command.arg("--dry-run");
        }
        command.output()
    };
    let dry = run(true).await.unwrap();
    let said = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert!(
        dry.status.success() && said.contains("every task: 1 finished jobs"),
        "{said}{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert_eq!(
        app.get(&app.alice, &format!("/jobs/{done}")).await.status(),
        StatusCode::OK,
        "a dry run changes nothing"
    );
    let purged = run(false).await.unwrap();
    let said = String::from_utf8_lossy(&purged.stdout).into_owned();
    assert!(purged.status.success() && said.contains("every task: 1 finished jobs purged"), "{said}");
    assert_eq!(app.get(&app.alice, &format!("/jobs/{done}")).await.status(), StatusCode::NOT_FOUND);
    let _ = std::fs::remove_file(config);
}

/// SQLite: a database file made by onejob gives back the pages a purge
/// freed (incremental vacuum), instead of keeping them for reuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_space_freed_by_a_purge_goes_back_to_the_disk() {
    use sqlx::sqlite::SqliteConnectOptions;
    use std::str::FromStr;
    let app = TestApp::spawn_live(Backend::Sqlite, |s| s.retention.purge_interval = "1h".parse().unwrap()).await;
    let file = SqliteConnectOptions::from_str(&app.database_url).unwrap();
    let mut raw = sqlx::SqliteConnection::connect_with(&file).await.unwrap();
    let pragma = |name: &'static str| format!("pragma {name}");
    let mode: i64 = sqlx::query_scalar(&pragma("auto_vacuum")).fetch_one(&mut raw).await.unwrap();
    assert_eq!(mode, 2, "the file is made with incremental vacuum");
    let text = "a text long enough to fill pages ".repeat(20);
    for n in 0..60 {
        create(&app, &format!("fill-{n}"), &json!({"task": "summarize", "input": {"text": text}})).await;
    }
    let rule = everything_changed_before(Duration::from_secs(3600));
    crate::common::processes::eventually("every job finished", Duration::from_secs(30), || async {
        app.store().count_purgeable(&rule).await.unwrap() == 60
    })
    .await;
    assert_eq!(purge_all(&app, &rule).await, 60);
    let free: i64 = sqlx::query_scalar(&pragma("freelist_count")).fetch_one(&mut raw).await.unwrap();
    assert!(free > 0, "the purge freed pages");
    app.store().reclaim_space().await.unwrap();
    let after: i64 = sqlx::query_scalar(&pragma("freelist_count")).fetch_one(&mut raw).await.unwrap();
    assert_eq!(after, 0, "{free} free pages were given back");
}

/// SQLite: the vacuum mode is chosen once, when the file is made, not by
/// every connection (setting it takes the write lock): a connection opened
/// while another process holds the write lock reads at once, where it used
/// to wait out the busy timeout and fail.
#[tokio::test]
async fn sqlite_a_connection_opened_while_another_process_writes_reads_without_waiting_for_the_write_lock() {
    use onejob::store::Store;
    use onejob::store::sqlite::{SqliteOptions, SqliteStore};
    use sqlx::sqlite::SqliteConnectOptions;
    use std::str::FromStr;
    let url = crate::common::sqlite::fresh_database();
    let options = SqliteOptions {
        max_connections: 2,
        busy_timeout: Duration::from_millis(50),
        acquire_timeout: Duration::from_secs(10),
    };
    Store::new(SqliteStore::connect_lazy(&url, &options).unwrap()).migrate().await.unwrap();
    let mut writer =
        sqlx::SqliteConnection::connect_with(&SqliteConnectOptions::from_str(&url).unwrap()).await.unwrap();
    sqlx::query("begin immediate").execute(&mut writer).await.unwrap();
    sqlx::query("delete from api_keys").execute(&mut writer).await.unwrap();
    // A store whose pool has no connection yet: the read opens one.
    let reader = Store::new(SqliteStore::connect_lazy(&url, &options).unwrap());
    reader.check_ready().await.expect("a read on a new connection while the write lock is held elsewhere");
    assert!(!reader.has_api_keys().await.unwrap());
    sqlx::query("commit").execute(&mut writer).await.unwrap();
}

/// Erasures at once of jobs whose usage falls in the same rollup row all
/// add to it: the usage report's totals stay what they were.
async fn concurrent_erasures_keep_every_jobs_usage_in_the_report(backend: Backend) {
    let app = std::sync::Arc::new(TestApp::spawn_live(backend, |_| {}).await);
    let mut ids = Vec::new();
    for n in 0..12 {
        ids.push(
            create(&app, &format!("erase-{n}"), &json!({"task": "summarize", "input": {"text": "erased together"}}))
                .await
                .1,
        );
    }
    for id in &ids {
        app.wait_for(id, "succeeded", |j| j["state"] == "succeeded").await;
    }
    let before = usage_total(&app).await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(ids.len()));
    let erasures: Vec<_> = ids
        .iter()
        .map(|id| {
            let (app, barrier, id) = (app.clone(), barrier.clone(), id.clone());
            tokio::spawn(async move {
                let request = app.client.delete(app.url(&format!("/jobs/{id}"))).bearer_auth(&app.alice);
                barrier.wait().await;
                request.send().await.unwrap().status()
            })
        })
        .collect();
    for erasure in erasures {
        assert_eq!(erasure.await.unwrap(), StatusCode::NO_CONTENT);
    }
    let after = usage_total(&app).await;
    assert_eq!(after, before, "every erased job's usage is in the rollup");
}

on_postgres!(a_purge_while_another_server_purges_finds_it_busy_and_purges_nothing);
