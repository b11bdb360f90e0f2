//! What Postgres's schema enforces by itself, beside the store's code.

use sqlx::postgres::PgPoolOptions;

use crate::store::{job_with_running, prepare};

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
    assert_eq!(violated.constraint(), Some("attempts_job_idempotency_key"));

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

on_postgres!(an_attempts_key_is_unique_within_its_job_and_only_attempts_with_a_key_are_in_its_index);
