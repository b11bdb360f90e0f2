//! Group commit of new jobs: whoever gets the turn writes every creation
//! queued while the previous group was being written, one statement and
//! one commit for each owner's creations, so that one round trip and one
//! log flush cover them all; each request is answered only after its
//! commit. Under no load a group is the one creation, written at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::PostgresStore;
use super::hot::HotConnections;
use super::sql::CREATE_JOBS;
use crate::store::{NewJob, Result, StoreError};

/// The most creations one group writes.
const MAX_GROUP: usize = 256;

/// An answer to a creation: when its job was inserted, or `None` when its
/// key was taken.
type Answer = Result<Option<DateTime<Utc>>>;

/// A creation waiting for its group, and where its answer goes.
struct Pending {
    new: NewJob,
    answer: oneshot::Sender<Answer>,
}

/// The creations waiting for the next group, and the turn to write one.
#[derive(Default)]
pub(super) struct Creates {
    queued: Mutex<Vec<Pending>>,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Creates {
    /// Takes `new` out of the queue: whether it was still there (no group
    /// has taken it).
    fn withdraw(&self, new: &NewJob) -> bool {
        let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        let before = queued.len();
        queued.retain(|pending| pending.new.id != new.id);
        queued.len() < before
    }
}

impl std::fmt::Debug for Creates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queued = self.queued.lock().unwrap_or_else(|p| p.into_inner()).len();
        f.debug_struct("Creates").field("queued", &queued).finish_non_exhaustive()
    }
}

/// Why a queued creation got no answer: the task writing its group ended
/// without one (nothing of it is acknowledged).
fn interrupted() -> StoreError {
    StoreError::Interrupted("the write of this request was interrupted")
}

impl PostgresStore {
    /// Inserts `new` in the next group and waits for its answer. Whoever
    /// gets the turn with its creation still queued takes every queued
    /// creation (its own among them) and writes them; the others find their
    /// answer while they wait. The group is written by a task of its own,
    /// so a client that hangs up cannot abandon the others.
    ///
    /// A creation still queued when the pool's acquire timeout has passed
    /// (the group ahead is held up: a lock, a database that stopped
    /// answering) is taken out of the queue and refused as unavailable (503,
    /// retryable), as a request that found no free connection is; one whose
    /// group is being written waits for its answer.
    pub(super) async fn create_in_group(&self, new: &NewJob) -> Answer {
        let (answer, mut answered) = oneshot::channel();
        self.creates.queued.lock().unwrap_or_else(|p| p.into_inner()).push(Pending { new: new.clone(), answer });
        let deadline = tokio::time::Instant::now() + self.hot.acquire_timeout();
        loop {
            let turn = tokio::select! {
                biased;
                answer = &mut answered => return answer.map_err(|_| interrupted())?,
                turn = self.creates.turn.clone().lock_owned() => turn,
                () = tokio::time::sleep_until(deadline) => {
                    if self.creates.withdraw(new) {
                        return Err(StoreError::from(sqlx::Error::PoolTimedOut));
                    }
                    return answered.await.map_err(|_| interrupted())?;
                }
            };
            // Whoever wrote before us answered everything it took before
            // giving up the turn; no answer yet means ours is still queued.
            match answered.try_recv() {
                Ok(answer) => return answer,
                Err(oneshot::error::TryRecvError::Closed) => return Err(interrupted()),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let group: Vec<Pending> = {
                let mut queued = self.creates.queued.lock().unwrap_or_else(|p| p.into_inner());
                let take = queued.len().min(MAX_GROUP);
                queued.drain(..take).collect()
            };
            let hot = self.hot.clone();
            tokio::spawn(async move {
                let _turn = turn;
                write_group(&hot, group).await;
            });
        }
    }
}

/// Writes a group: each owner's creations by one statement, the owners'
/// statements at once, and answers each creation.
async fn write_group(hot: &HotConnections, group: Vec<Pending>) {
    let mut owners: Vec<Vec<Pending>> = Vec::new();
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
async fn write_owners(hot: &HotConnections, same: Vec<Pending>) {
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
