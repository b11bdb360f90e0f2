//! onejob behind a real PgBouncer (Debian's 1.18), configured as a new
//! operator would: stock settings, no `ignore_startup_parameters`. Session
//! mode works, from `onejob migrate` to the statement timeout; transaction
//! and statement modes are refused at start with the setting named. (The
//! API, lifecycle and fault suites also run whole through a PgBouncer in
//! session mode: `.ci/run`, with `ONEJOB_TEST_PGBOUNCER=session`.)

use std::str::FromStr;
use std::time::Duration;

use onejob::store::Store;
use onejob::store::postgres::{PostgresOptions, PostgresStore};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::common::BIN;
use crate::common::postgres::{Bouncer, empty_database, fresh_database_direct};

fn options(statement_timeout: Duration) -> PostgresOptions {
    PostgresOptions { max_connections: 4, acquire_timeout: Duration::from_secs(10), statement_timeout }
}

async fn migrate_through(url: &str) -> std::process::Output {
    tokio::process::Command::new(BIN)
        .arg("migrate")
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "info")
        .output()
        .await
        .expect("run onejob migrate")
}

async fn onejob_migrates_through_a_stock_pgbouncer_in_session_mode_that_refuses_unknown_startup_parameters() {
    let bouncer = Bouncer::start_private("session").await;
    let url = bouncer.url(&empty_database().await);
    // This PgBouncer is as strict as a new operator's: a statement timeout
    // in the startup packet, as onejob used to send it, is refused.
    let refused = PgConnectOptions::from_str(&url).unwrap().options([("statement_timeout", "5000ms")]).connect().await;
    let error = refused.expect_err("a startup parameter PgBouncer does not know is refused");
    assert!(error.to_string().contains("unsupported startup parameter"), "{error}");

    let out = migrate_through(&url).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "onejob migrate through PgBouncer: {stderr}\n{}", bouncer.log());
    let store = Store::new(PostgresStore::connect_lazy(&url, &options(Duration::from_secs(5))).unwrap());
    store.check_ready().await.expect("the migrations are applied and the store answers through PgBouncer");
}

async fn the_statement_timeout_holds_through_pgbouncer_as_it_does_directly() {
    let bouncer = Bouncer::start_private("session").await;
    let direct = fresh_database_direct().await;
    for url in [bouncer.url(&direct), direct.clone()] {
        let store = PostgresStore::connect_lazy(&url, &options(Duration::from_millis(300))).unwrap();
        let started = std::time::Instant::now();
        let error = sqlx::query("select pg_sleep(3)").execute(store.pool()).await.expect_err("canceled at 300 ms");
        let code = error.as_database_error().and_then(|e| e.code()).map(|c| c.to_string());
        assert_eq!(code.as_deref(), Some("57014"), "canceled by the statement timeout ({url}): {error}");
        assert!(started.elapsed() < Duration::from_secs(2), "the timeout, not the sleep, ended it");
        let shown: String = sqlx::query_scalar("show statement_timeout").fetch_one(store.pool()).await.unwrap();
        assert_eq!(shown, "300ms");
    }
}

async fn a_pgbouncer_in_transaction_or_statement_mode_is_refused_at_start_naming_the_setting() {
    for mode in ["transaction", "statement"] {
        let bouncer = Bouncer::start_private(mode).await;
        let direct = empty_database().await;
        let url = bouncer.url(&direct);
        let out = migrate_through(&url).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "onejob migrate through PgBouncer in {mode} mode must refuse to run: {stderr}");
        assert!(stderr.contains("pool_mode = session"), "the error names the setting ({mode}): {stderr}");
        // Nothing was applied through it.
        let mut direct = sqlx::PgConnection::connect(&direct).await.unwrap();
        let tables: i64 = sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'public'")
            .fetch_one(&mut direct)
            .await
            .unwrap();
        assert_eq!(tables, 0, "no migration ran behind a {mode}-mode pooler");
    }
}

on_postgres!(direct: onejob_migrates_through_a_stock_pgbouncer_in_session_mode_that_refuses_unknown_startup_parameters, the_statement_timeout_holds_through_pgbouncer_as_it_does_directly, a_pgbouncer_in_transaction_or_statement_mode_is_refused_at_start_naming_the_setting);
