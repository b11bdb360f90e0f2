//! How a group of new jobs is written on Postgres (the queue and the turn:
//! [`crate::store::groups`]): one statement and one commit for each
//! owner's creations, the owners' statements at once, so that one round
//! trip and one log flush cover them all.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::PostgresStore;
use super::hot::HotConnections;
use super::sql::CREATE_JOBS;
use crate::store::groups::{Creations, Pending, interrupted};
use crate::store::{NewJob, Result, StoreError};

/// An answer to a creation: when its job was inserted, or `None` when its
/// key was taken.
type Answer = Option<DateTime<Utc>>;

/// The creations waiting for the next group, and the turn to write one.
#[derive(Debug, Default)]
pub(super) struct Creates {
    queue: Creations<Answer>,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl PostgresStore {
    /// Inserts `new` in the next group ([`crate::store::groups`]) and waits
    /// for its answer. A creation still queued when the pool's acquire
    /// timeout has passed is refused as unavailable (503, retryable), as a
    /// request that found no free connection is.
    pub(super) async fn create_in_group(&self, new: &NewJob) -> Result<Answer> {
        let deadline = tokio::time::Instant::now() + self.hot.acquire_timeout();
        let hot = self.hot.clone();
        let write = move |group| {
            let hot = hot.clone();
            async move { write_group(&hot, group).await }
        };
        self.creates.queue.create(new, &self.creates.turn, Some(deadline), write).await
    }
}

/// Writes a group: each owner's creations by one statement, the owners'
/// statements at once, and answers each creation.
async fn write_group(hot: &HotConnections, group: Vec<Pending<Answer>>) {
    let mut owners: Vec<Vec<Pending<Answer>>> = Vec::new();
    for pending in group {
        match owners.iter_mut().find(|same| same[0].new.owner == pending.new.owner) {
            Some(same) => same.push(pending),
            None => owners.push(vec![pending]),
        }
    }
    futures_util::future::join_all(owners.into_iter().map(|same| write_owners(hot, same))).await;
}

/// Writes one owner's creations by one statement and answers each. If it
/// fails, each is written alone, so that one bad request cannot fail the
/// others.
async fn write_owners(hot: &HotConnections, same: Vec<Pending<Answer>>) {
    let news: Vec<&NewJob> = same.iter().map(|pending| &pending.new).collect();
    match insert_jobs(hot, &news).await {
        Ok(inserted) => {
            for pending in same {
                let _ = pending.answer.send(Ok(inserted.get(&pending.new.id.0).copied()));
            }
        }
        // Alone, or the database unavailable: one by one would fail alike.
        // The first gets the error; the others are as retryable (503).
        Err(error) if same.len() == 1 || error.is_unavailable() => {
            let mut errors = std::iter::once(error).chain(std::iter::repeat_with(|| {
                StoreError::Interrupted("the database was unavailable for this request's group of creations")
            }));
            for pending in same {
                let _ = pending.answer.send(Err(errors.next().unwrap_or_else(interrupted)));
            }
        }
        Err(error) => {
            tracing::debug!(%error, size = same.len(), "a group of creations failed; writing them one by one");
            for pending in same {
                let alone = insert_jobs(hot, &[&pending.new]).await;
                let _ = pending.answer.send(alone.map(|inserted| inserted.get(&pending.new.id.0).copied()));
            }
        }
    }
}

/// Inserts one owner's jobs, each with its first attempt and its event,
/// unless its key is taken (the unique constraint decides, I1), in one
/// statement and one commit: the creation times of those inserted, by id.
async fn insert_jobs(hot: &HotConnections, news: &[&NewJob]) -> Result<HashMap<Uuid, DateTime<Utc>>> {
    let Some(first) = news.first() else { return Ok(HashMap::new()) };
    let column = |f: &dyn Fn(&NewJob) -> Option<String>| news.iter().map(|new| f(new)).collect::<Vec<_>>();
    let trace = |new: &NewJob| new.trace.as_ref().map(|t| t.traceparent.clone());
    let state = |new: &NewJob| new.trace.as_ref().and_then(|t| t.tracestate.clone());
    let mut lease = hot.acquire().await?;
    let rows: std::result::Result<Vec<(Uuid, DateTime<Utc>)>, _> = sqlx::query_as(CREATE_JOBS.as_str())
        .bind(first.owner.as_str())
        .bind(news.iter().map(|new| new.id.0).collect::<Vec<_>>())
        .bind(news.iter().map(|new| new.idempotency_key.as_str()).collect::<Vec<_>>())
        .bind(news.iter().map(|new| &new.fingerprint.as_bytes()[..]).collect::<Vec<_>>())
        .bind(news.iter().map(|new| new.task.as_str()).collect::<Vec<_>>())
        .bind(news.iter().map(|new| &new.input).collect::<Vec<_>>())
        .bind(news.iter().map(|new| new.provider.as_str()).collect::<Vec<_>>())
        .bind(news.iter().map(|new| new.first_attempt_id.0).collect::<Vec<_>>())
        .bind(column(&|new| new.max_cost.map(|m| m.to_string())))
        .bind(column(&trace))
        .bind(column(&state))
        .bind(news.iter().map(|new| new.first_attempt_provider()).collect::<Vec<_>>())
        .fetch_all(lease.connection())
        .await;
    lease.keep_after(&rows);
    Ok(rows?.into_iter().collect())
}
