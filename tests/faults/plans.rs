//! Plans that stay on their key whatever the statistics say: a worker's
//! batch of settlements reads the rows of its own jobs and attempts, not
//! every row of their owner, on tables never analyzed and with every plan
//! generic (`plan_cache_mode = force_generic_plan` on the database,
//! autovacuum off for the tables). Plans made while the tables were nearly
//! empty, before any ANALYZE, see every owner as one row: the batch's
//! updates may then read the owner's rows, once (never once per row),
//! until an ANALYZE has the plans made again. Rows read are counted by
//! Postgres (`pg_stat_user_tables`: tuples read by sequential scans and
//! fetched by index scans), flushed by `pg_stat_force_next_flush()`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use onejob::store::{AttemptRef, ClaimRules, CreateJob, Finish, PostgresStore, Store, Transition};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};

use crate::common::new_job;
use crate::common::postgres::fresh_database;

const BATCH: usize = 50;
const LEASE: Duration = Duration::from_secs(600);
const TABLES: [&str; 5] = ["jobs", "attempts", "job_events", "job_output", "webhook_subscriptions"];

/// A pool of one connection, so that the plans it makes are the ones used.
async fn one_connection(url: &str) -> PgPool {
    PgPoolOptions::new().max_connections(1).connect(url).await.unwrap()
}

/// `count` new jobs of alice's, their first attempts claimed and running.
async fn running(store: &Store, prefix: &str, count: usize) -> Vec<AttemptRef> {
    for n in 0..count {
        let key = format!("{prefix}-{n}");
        let created = store.create_job(&new_job("alice", &key, json!({"text": key}))).await.unwrap();
        assert!(matches!(created, CreateJob::Created(_)), "key {key} was new");
    }
    let rules = ClaimRules::new(LEASE, vec![("sim-fast".into(), LEASE)]);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut claimed = Vec::new();
    while claimed.len() < count {
        assert!(Instant::now() < deadline, "{} of {count} attempts claimed", claimed.len());
        let left = u32::try_from(count - claimed.len()).unwrap();
        let more = store.claim_attempts("test-worker", left, &rules).await.unwrap().attempts;
        claimed.extend(more.into_iter().map(|a| a.attempt));
    }
    claimed
}

/// Settles `attempts` in one batch, as the worker does; each wins.
async fn settle(store: &Store, attempts: &[AttemptRef]) {
    let output = json!({"summary": "done"});
    let finishes: Vec<Finish<'_>> = attempts
        .iter()
        .map(|attempt| Finish { attempt, output: &output, holder: Some("test-worker"), usage: None })
        .collect();
    for (attempt, answer) in attempts.iter().zip(store.finish_attempts(&finishes).await) {
        assert_eq!(answer.unwrap(), Transition::Won { canceled: vec![] }, "{attempt:?}");
    }
}

/// Rows read so far from each table, everything `pool`'s connection did
/// flushed first.
async fn rows_read(pool: &PgPool, admin: &mut PgConnection) -> HashMap<String, i64> {
    // Flushed when the connection goes idle after this statement, before it answers.
    sqlx::query("select pg_stat_force_next_flush()").execute(pool).await.unwrap();
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "select relname::text, seq_tup_read + coalesce(idx_tup_fetch, 0) from pg_stat_user_tables \
         where relname = any($1)",
    )
    .bind(TABLES)
    .fetch_all(admin)
    .await
    .unwrap();
    rows.into_iter().collect()
}

/// Settles `attempts` in one batch on `store` (whose only connection is
/// `pool`'s), and answers the rows it read, by table, and the statements it
/// sent.
async fn settle_counting(
    store: &Store,
    pool: &PgPool,
    admin: &mut PgConnection,
    attempts: &[AttemptRef],
) -> (i64, String, i64) {
    crate::common::postgres::reset_statement_counts(pool).await;
    let before = rows_read(pool, admin).await;
    settle(store, attempts).await;
    let after = rows_read(pool, admin).await;
    let statements: i64 = sqlx::query_scalar(
        "select coalesce(sum(calls), 0)::int8 from pg_stat_statements s join pg_database d on d.oid = s.dbid \
         where d.datname = current_database() and query not ilike '%pg_stat%'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let mut by_table: Vec<(&str, i64)> = TABLES.iter().map(|t| (*t, after[*t] - before[*t])).collect();
    by_table.retain(|(_, read)| *read > 0);
    let total = by_table.iter().map(|(_, read)| read).sum();
    (total, format!("{by_table:?}"), statements)
}

async fn a_batch_of_settlements_reads_its_own_rows_on_tables_never_analyzed() {
    let url = fresh_database().await;
    let mut admin = PgConnection::connect(&url).await.unwrap();
    // Every plan generic, on every connection to the database made from now
    // on; and no ANALYZE, which would have them made again.
    let database: String = sqlx::query_scalar("select current_database()").fetch_one(&mut admin).await.unwrap();
    sqlx::query(&format!(r#"alter database "{database}" set plan_cache_mode = force_generic_plan"#))
        .execute(&mut admin)
        .await
        .unwrap();
    for table in TABLES {
        sqlx::query(&format!("alter table {table} set (autovacuum_enabled = false)"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let pool = one_connection(&url).await;
    let mode: String = sqlx::query_scalar("show plan_cache_mode").fetch_one(&pool).await.unwrap();
    assert_eq!(mode, "force_generic_plan");
    let store = Store::new(PostgresStore::from_pool(pool.clone()));

    // The plans are made now, on nearly empty tables: a batch of two settled.
    let first = running(&store, "first", 2).await;
    settle(&store, &first).await;
    // The owner's history: 5,000 jobs finished long ago, two attempts each,
    // their ids (time-ordered, as onejob's are) before the new jobs' ids.
    sqlx::query(
        "insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider, state, \
                           winning_attempt, created_at, updated_at) \
         select 'alice', ('00000000-0000-7000-8000-' || lpad(to_hex(n), 12, '0'))::uuid, 'old-' || n, sha256(n::text::bytea), 'summarize', '{}', 'sim-fast', \
                'succeeded', 2, now(), now() \
         from generate_series(1, 5000) as n",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    sqlx::query(
        "insert into attempts (owner_id, job_id, number, id, provider, state, origin, not_before, created_at) \
         select owner_id, id, number, gen_random_uuid(), provider, \
                case number when 1 then 'failed' else 'succeeded' end, 'client', now(), now() \
         from jobs, generate_series(1, 2) as number where idempotency_key like 'old-%'",
    )
    .execute(&mut admin)
    .await
    .unwrap();

    let batch = running(&store, "batch", BATCH).await;
    let (read, by_table, statements) = settle_counting(&store, &pool, &mut admin, &batch).await;
    eprintln!(
        "plans made on nearly empty tables: {read} rows read settling {BATCH} ({by_table}), {statements} statements"
    );
    assert!(statements <= 10, "the batch was settled in {statements} statements: not as one batch");
    let owners_rows: i64 = sqlx::query_scalar("select (select count(*) from jobs) + (select count(*) from attempts)")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(
        read <= owners_rows + 10 * BATCH as i64,
        "settling {BATCH} read {read} rows ({by_table}): the owner's {owners_rows} rows more than once"
    );

    // A new connection plans on the large tables, still never analyzed.
    pool.close().await;
    let pool = one_connection(&url).await;
    let store = Store::new(PostgresStore::from_pool(pool.clone()));
    let batch = running(&store, "later", BATCH).await;
    let (read, by_table, statements) = settle_counting(&store, &pool, &mut admin, &batch).await;
    eprintln!("plans made on large tables: {read} rows read settling {BATCH} ({by_table}), {statements} statements");
    assert!(statements <= 10, "the batch was settled in {statements} statements: not as one batch");
    assert!(read <= 10 * BATCH as i64, "settling {BATCH} read {read} rows ({by_table}): the owner's rows");
}

on_postgres!(a_batch_of_settlements_reads_its_own_rows_on_tables_never_analyzed);
