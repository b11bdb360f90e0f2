//! Group commit of new jobs: whoever gets the write turn writes every
//! creation queued while the previous transaction was committing, in one
//! transaction, so one log sync covers them all; each request is answered
//! only after that commit.

use serde_json::json;
use sqlx::types::Json;

use super::{MAX_GROUP, NewEvent, PendingCreate, SqliteStore, insert_event, now};
use crate::domain::{AttemptOrigin, AttemptState, EventKind, JobState};
use crate::store::{NewJob, Result, StoreError};

/// Why a request queued for a group commit got no answer: the task writing
/// its group ended without one (nothing of it is acknowledged).
fn interrupted() -> StoreError {
    StoreError::Interrupted("the write of this request was interrupted")
}

impl SqliteStore {
    /// Waits for the answer to a queued creation. Whoever gets the write turn
    /// first with its creation still queued takes every queued creation
    /// (its own among them) and writes them in one transaction; the others
    /// find their answer while they wait. The group is written by a task of
    /// its own, so a client that hangs up cannot abandon the others.
    pub(super) async fn group_commit(
        &self,
        mut answered: tokio::sync::oneshot::Receiver<Result<Option<i64>>>,
    ) -> Result<Option<i64>> {
        loop {
            let turn = tokio::select! {
                biased;
                answer = &mut answered => return answer.map_err(|_| interrupted())?,
                turn = self.writer.clone().lock_owned() => turn,
            };
            // Whoever wrote before us answered everything it took before
            // giving up the turn; no answer yet means ours is still queued.
            match answered.try_recv() {
                Ok(answer) => return answer,
                Err(tokio::sync::oneshot::error::TryRecvError::Closed) => return Err(interrupted()),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
            }
            let group: Vec<PendingCreate> = {
                let mut queued = self.creates.lock().unwrap_or_else(|p| p.into_inner());
                let take = queued.len().min(MAX_GROUP);
                queued.drain(..take).collect()
            };
            let store = self.clone();
            tokio::spawn(async move {
                let _turn = turn;
                store.write_group(group).await;
            });
            // Ours was in that group, or (past MAX_GROUP) is in a later one:
            // wait for the answer or the next turn.
        }
    }

    /// Writes a group of creations in one transaction and answers each. If
    /// the group fails, each creation is written alone, so that one bad
    /// request cannot fail the others.
    async fn write_group(&self, group: Vec<PendingCreate>) {
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
