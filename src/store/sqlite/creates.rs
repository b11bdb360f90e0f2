//! How a group of new jobs is written on SQLite (the queue:
//! [`crate::store::groups`]; the turn is the one writer's): one
//! transaction, so that one log sync covers them all.

use serde_json::json;
use sqlx::SqlitePool;
use sqlx::types::Json;

use super::{NewEvent, append_event, now, time};
use crate::domain::{AttemptOrigin, AttemptState, EventKind, JobState};
use crate::store::groups::Creation;
use crate::store::{NewJob, Result, StoreError};

/// Writes a group of creations in one transaction and answers each, in
/// the one writer's turn (the group's). If the group fails, each creation
/// is written alone, so that one bad request cannot fail the others.
pub(super) async fn insert_jobs(pool: &SqlitePool, group: Vec<Creation>) {
    let together = async {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut inserted = Vec::with_capacity(group.len());
        for creation in &group {
            inserted.push(insert_new_job(&mut tx, &creation.new).await?);
        }
        tx.commit().await?;
        Ok::<_, StoreError>(inserted)
    };
    match together.await {
        Ok(inserted) => {
            for (creation, inserted) in group.into_iter().zip(inserted) {
                creation.answer(inserted.map(time).transpose());
            }
        }
        Err(error) if group.len() == 1 => {
            if let Some(creation) = group.into_iter().next() {
                creation.answer(Err(error));
            }
        }
        Err(error) => {
            tracing::debug!(%error, size = group.len(), "a group commit failed; writing its creations one by one");
            for creation in group {
                let alone = async {
                    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                    let inserted = insert_new_job(&mut tx, &creation.new).await?;
                    tx.commit().await?;
                    Ok::<_, StoreError>(inserted)
                }
                .await;
                creation.answer(alone.and_then(|inserted| inserted.map(time).transpose()));
            }
        }
    }
}

/// Inserts a job, its first attempt and its event, unless its key is taken
/// (the unique constraint decides, I1): the time it was inserted at, or
/// `None`.
async fn insert_new_job(tx: &mut super::SqliteTransaction, new: &NewJob) -> Result<Option<i64>> {
    let created = now();
    let inserted = sqlx::query(
        r#"insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider,
                             state, created_at, updated_at, max_cost)
           values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10)
           on conflict (owner_id, idempotency_key) do nothing"#,
    )
    .bind(new.owner.as_str())
    .bind(new.id.0)
    .bind(new.idempotency_key.as_str())
    .bind(&new.fingerprint.as_bytes()[..])
    .bind(&new.task)
    .bind(Json(&new.input))
    .bind(&new.provider)
    .bind(JobState::Queued)
    .bind(created)
    .bind(new.max_cost.map(|m| m.to_string()))
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if !inserted {
        return Ok(None);
    }
    sqlx::query(
        r#"insert into attempts (owner_id, job_id, number, id, provider, state, origin, created_at, not_before,
                                 traceparent, tracestate)
           values (?1, ?2, 1, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9)"#,
    )
    .bind(new.owner.as_str())
    .bind(new.id.0)
    .bind(new.first_attempt_id.0)
    .bind(new.first_attempt_provider())
    .bind(AttemptState::Pending)
    .bind(AttemptOrigin::Client)
    .bind(created)
    .bind(new.trace.as_ref().map(|t| t.traceparent.as_str()))
    .bind(new.trace.as_ref().and_then(|t| t.tracestate.as_deref()))
    .execute(&mut **tx)
    .await?;
    let detail = json!({ "attempt_id": new.first_attempt_id, "provider": new.first_attempt_provider() });
    let event =
        NewEvent { attempt_number: Some(1), ..NewEvent::of_job(&new.owner, new.id, EventKind::JobCreated, detail) };
    append_event(tx, created, event).await?;
    Ok(Some(created))
}
