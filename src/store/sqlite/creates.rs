//! How a group of new jobs is written on SQLite (the queue:
//! [`crate::store::groups`]; the turn is the one writer's): one
//! transaction, so that one log sync covers them all.

use serde_json::json;
use sqlx::types::Json;

use super::{NewEvent, SqliteStore, insert_event, now};
use crate::domain::{AttemptOrigin, AttemptState, EventKind, JobState};
use crate::store::groups::Pending;
use crate::store::{NewJob, Result, StoreError};

/// An answer to a creation: the time its job was inserted at, or `None`
/// when its key was taken.
type Answer = Option<i64>;

impl SqliteStore {
    /// Inserts `new` in the next group ([`crate::store::groups`]), written
    /// in the one writer's turn, and waits for its answer.
    pub(super) async fn create_in_group(&self, new: &NewJob) -> Result<Answer> {
        let store = self.clone();
        let write = move |group| {
            let store = store.clone();
            async move { store.write_group(group).await }
        };
        self.creates.create(new, &self.writer, None, write).await
    }

    /// Writes a group of creations in one transaction and answers each. If
    /// the group fails, each creation is written alone, so that one bad
    /// request cannot fail the others.
    async fn write_group(&self, group: Vec<Pending<Answer>>) {
        let together = async {
            let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
            let mut inserted = Vec::with_capacity(group.len());
            for pending in &group {
                inserted.push(insert_new_job(&mut tx, &pending.new).await?);
            }
            tx.commit().await?;
            Ok::<_, StoreError>(inserted)
        };
        match together.await {
            Ok(inserted) => {
                for (pending, inserted) in group.into_iter().zip(inserted) {
                    let _ = pending.answer.send(Ok(inserted));
                }
            }
            Err(error) if group.len() == 1 => {
                let _ = group.into_iter().next().map(|pending| pending.answer.send(Err(error)));
            }
            Err(error) => {
                tracing::debug!(%error, size = group.len(), "a group commit failed; writing its creations one by one");
                for pending in group {
                    let alone = async {
                        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
                        let inserted = insert_new_job(&mut tx, &pending.new).await?;
                        tx.commit().await?;
                        Ok::<_, StoreError>(inserted)
                    };
                    let _ = pending.answer.send(alone.await);
                }
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
    insert_event(tx, created, event).await?;
    Ok(Some(created))
}
