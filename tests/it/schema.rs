//! What Postgres's schema enforces by itself, beside the store's code.

use onejob::store::{Finish, Transition};
use serde_json::json;
use sqlx::Executor;
use sqlx::postgres::PgPoolOptions;

use crate::store::{at, job_with_running, prepare};

/// An attempt's idempotency key is unique within its job by the database
/// (the store checks it first, under the job's lock; the index is what
/// holds whatever code runs), and the unique index holds only the attempts
/// that have a key: the first attempt of a job, made by its creation with
/// no key, costs it no entry at its insert, claim or settlement.
async fn an_attempts_key_is_unique_within_its_job_and_only_attempts_with_a_key_are_in_its_index() {
    // A fresh database is migrated already.
    let url = crate::common::postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(2).connect(&url).await.unwrap();
    let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
    prepare(&store).await;
    // Attempt 1 has no key; attempt 2 was admitted with "keyed-2".
    let job = job_with_running(&store, "keyed", 2).await;
    let keys: Vec<Option<String>> =
        sqlx::query_scalar("select idempotency_key from attempts where job_id = $1 order by number")
            .bind(job.0)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(keys, vec![None, Some("keyed-2".to_owned())]);

    let copy = sqlx::query(
        "insert into attempts (owner_id, job_id, number, id, provider, state, origin, idempotency_key, not_before, created_at)
         select owner_id, job_id, 3, gen_random_uuid(), provider, 'failed', origin, idempotency_key, not_before, created_at
         from attempts where job_id = $1 and number = 2",
    )
    .bind(job.0)
    .execute(&pool)
    .await;
    let violated =
        copy.expect_err("a second attempt with the same key in one job is refused").into_database_error().unwrap();
    assert!(violated.is_unique_violation(), "{violated}");
    // (On Citus the shard's constraint is named, with its shard's number.)
    assert!(violated.message().contains("\"attempts_job_idempotency_key"), "{violated}");

    // A partial index holds exactly the rows its predicate admits. (Its
    // entry count after a VACUUM is no measure: VACUUM may skip the index
    // and leave its count as it was.)
    let predicate: Option<String> =
        sqlx::query_scalar("select pg_get_expr(indpred, indrelid) from pg_index where indexrelid = 'attempts_job_idempotency_key'::regclass")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        predicate.as_deref(),
        Some("(idempotency_key IS NOT NULL)"),
        "only the attempts with a key are in the index of attempts' keys"
    );
}

/// A statement that reads an attempt by its primary key keeps to it in a
/// generic plan made while the table was empty, as a new deployment's
/// connections make theirs: settling an attempt reads a few pages whether
/// its owner has one other attempt or thousands. (A unique key led by the
/// owner matched such a statement on its first column, was the narrower
/// index, and could be planned instead: every settlement then read all of
/// the owner's attempts, for as long as the connection lived.)
async fn a_generic_plan_made_on_an_empty_table_settles_an_attempt_by_its_primary_key() {
    let url = crate::common::postgres::fresh_database().await;
    // One connection, every plan generic from its first execution; no
    // autovacuum, whose ANALYZE would have the plans made again.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .after_connect(|connection, _| {
            Box::pin(async move {
                connection.execute("set plan_cache_mode = force_generic_plan").await?;
                Ok(())
            })
        })
        .connect(&url)
        .await
        .unwrap();
    for table in ["jobs", "attempts"] {
        sqlx::query(&format!("alter table {table} set (autovacuum_enabled = false)")).execute(&pool).await.unwrap();
    }
    let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
    prepare(&store).await;
    let output = json!({"ok": true});
    let settle = |job| {
        let (store, output) = (&store, &output);
        async move {
            let attempt = at(job, 1);
            let finish = Finish { attempt: &attempt, output, holder: Some("test-worker"), usage: None };
            store.finish_attempts(&[finish]).await.pop().unwrap().unwrap()
        }
    };
    // The settlement's plan is made now, on a table with one attempt.
    let first = job_with_running(&store, "first", 1).await;
    assert_eq!(settle(first).await, Transition::Won { canceled: vec![] });

    // The owner's other attempts, 5,000 of them, finished long ago.
    old_failed_jobs_of_alice(&pool, 5000).await;

    let job = job_with_running(&store, "second", 1).await;
    crate::common::postgres::reset_statement_counts(&pool).await;
    assert_eq!(settle(job).await, Transition::Won { canceled: vec![] });
    let (calls, pages): (i64, i64) = sqlx::query_as(
        "select s.calls, s.shared_blks_hit + s.shared_blks_read from pg_stat_statements s join pg_database d on d.oid = s.dbid
         where d.datname = current_database() and s.query like '%with won as%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(calls, 1);
    assert!(pages < 100, "settling one attempt read {pages} pages: it read the owner's attempts to find it");
}

/// A group of reads of jobs by id keeps to their primary keys in a generic
/// plan made while the tables were nearly empty: reading eight jobs reads
/// a few pages each whether their owner has twenty jobs or twenty
/// thousand. (Selected by `j.id = any($2)`, such a plan took the owner's
/// rows for a few and read them all, filtering by id.)
async fn a_generic_plan_made_on_an_empty_table_reads_a_group_of_jobs_by_their_primary_keys() {
    let url = crate::common::postgres::fresh_database().await;
    // Every plan generic from its first execution, on every connection
    // (the reads' own too); one connection, so that reads queue behind one
    // another and are made in groups; no autovacuum, whose ANALYZE would
    // have the plans made again.
    let pool = PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
    let database: String = sqlx::query_scalar("select current_database()").fetch_one(&pool).await.unwrap();
    sqlx::query(&format!("alter database {database} set plan_cache_mode = force_generic_plan"))
        .execute(&pool)
        .await
        .unwrap();
    // The pool's connection was opened before: a new one has the setting.
    pool.close().await;
    let pool = PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
    for table in ["jobs", "attempts"] {
        sqlx::query(&format!("alter table {table} set (autovacuum_enabled = false)")).execute(&pool).await.unwrap();
    }
    let store = onejob::store::Store::new(onejob::store::PostgresStore::from_pool(pool.clone()));
    let mut jobs = Vec::new();
    for n in 0..8 {
        jobs.push(crate::store::create(&store, &format!("read-{n}")).await);
    }
    let alice = crate::store::owner("alice");
    // The reads are asked for at once: the first is made alone, the others
    // queue behind it and are made by one statement, planned now.
    let read_all = || futures_util::future::join_all(jobs.iter().map(|&id| store.get_job(&alice, id)));
    for read in read_all().await {
        assert!(read.unwrap().is_some());
    }

    // The owner's other jobs, 20,000 of them, finished long ago.
    old_failed_jobs_of_alice(&pool, 20_000).await;

    crate::common::postgres::reset_statement_counts(&pool).await;
    let found: Vec<_> = read_all().await.into_iter().map(|read| read.unwrap().map(|job| job.id)).collect();
    assert_eq!(found, jobs.iter().map(|&id| Some(id)).collect::<Vec<_>>());
    let (calls, pages): (i64, i64) = sqlx::query_as(
        "select s.calls, s.shared_blks_hit + s.shared_blks_read from pg_stat_statements s join pg_database d on d.oid = s.dbid
         where d.datname = current_database() and s.query like 'select j.owner_id%' and s.query like '%$2::uuid[]%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(calls, 1, "the reads queued behind the first are made together");
    assert!(pages < 150, "reading seven jobs read {pages} pages: it read the owner's jobs to find them");
}

/// Inserts `count` failed jobs of alice's, an attempt each.
async fn old_failed_jobs_of_alice(pool: &sqlx::PgPool, count: i32) {
    sqlx::query(
        "insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider, state, created_at, updated_at)
         select 'alice', gen_random_uuid(), 'old-' || n, sha256(n::text::bytea), 'summarize', '{}', 'sim-fast', 'failed', now(), now()
         from generate_series(1, $1) as n",
    )
    .bind(count)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into attempts (owner_id, job_id, number, id, provider, state, origin, not_before, created_at)
         select owner_id, id, 1, gen_random_uuid(), provider, 'failed', 'client', now(), now()
         from jobs where idempotency_key like 'old-%'",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// A job's row is rewritten when its attempt is claimed and when it is
/// settled. Postgres rewrites a row in place on its page (a HOT update,
/// which adds no index entry) only if no index holds a column the rewrite
/// changes, in its columns, its expressions or its condition: so no index
/// of jobs holds one. `bench/cost.sh` measures the share of HOT updates.
async fn no_index_of_jobs_holds_a_column_that_its_rewrites_change() {
    let url = crate::common::postgres::fresh_database().await;
    let pool = PgPoolOptions::new().max_connections(1).connect(&url).await.unwrap();
    // Every column the store's updates of jobs set.
    let rewritten = ["state", "updated_at", "winning_attempt", "result", "output_attempt"];
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "select indexrelid::regclass::text, pg_get_indexdef(indexrelid) from pg_index where indrelid = 'jobs'::regclass",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(indexes.len() >= 2, "{indexes:?}");
    let words = |definition: &str| -> Vec<String> {
        definition.split(|c: char| !(c.is_alphanumeric() || c == '_')).map(str::to_owned).collect()
    };
    let holding: Vec<(&String, &str)> = indexes
        .iter()
        .flat_map(|(name, definition)| {
            let words = words(definition);
            rewritten.into_iter().filter(move |column| words.iter().any(|w| w == column)).map(move |c| (name, c))
        })
        .collect();
    assert_eq!(holding, Vec::<(&String, &str)>::new(), "indexes of jobs holding a rewritten column: {indexes:#?}");
}

on_postgres!(
    an_attempts_key_is_unique_within_its_job_and_only_attempts_with_a_key_are_in_its_index,
    no_index_of_jobs_holds_a_column_that_its_rewrites_change
);
// Plain Postgres's planner: they force generic plans (`plan_cache_mode`),
// and Citus plans a distributed statement with parameters only as a
// custom plan.
on_postgres!(
    direct: a_generic_plan_made_on_an_empty_table_settles_an_attempt_by_its_primary_key,
    a_generic_plan_made_on_an_empty_table_reads_a_group_of_jobs_by_their_primary_keys
);
