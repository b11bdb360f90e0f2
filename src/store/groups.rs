//! Group commit, for the writes many callers make at once (new jobs, a
//! worker's outputs, pieces of streamed answers): each item waits in a
//! queue, and whoever gets one of the writers' turns with items queued
//! takes them all (its own among them, at most a group's most) and writes
//! them together, so that one commit and one log flush cover the group;
//! the others find their answer while they wait, and the items that arrive
//! meanwhile queue for the next turn. An item that arrives with a turn free
//! is written at once, alone; under load, groups grow with the time a
//! commit takes. Each item is answered only after its group's commit. A
//! group is written by a task of its own, so that a caller that goes away
//! while it waits cannot abandon the others.
//!
//! The turns are a semaphore: one for the creations of new jobs on
//! Postgres, SQLite's one writer's (shared with every other write), a few
//! for a worker's outputs. New jobs are queued by [`create_job`], which
//! hands each group to the backend's [`super::Driver::insert_jobs`], which
//! answers each.

use std::future::Future;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::{NewJob, Result, Store, StoreError};
use crate::sync::LockAnyway;

/// Why a queued item got no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// The task writing its group ended without answering it: nothing of
    /// it is acknowledged.
    Interrupted,
    /// Its deadline passed while it was still queued: it was taken out of
    /// the queue, unwritten.
    Expired,
}

/// The queue of items waiting to be written, and the turns to write a group.
pub struct GroupCommit<T> {
    queued: Mutex<Queue<T>>,
    turns: Arc<Semaphore>,
    most: usize,
}

/// The items queued, each with its ticket (how a caller whose deadline
/// passed finds its own).
struct Queue<T> {
    items: Vec<(u64, T)>,
    next_ticket: u64,
}

impl<T> std::fmt::Debug for GroupCommit<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queued = self.queued.lock_anyway().items.len();
        f.debug_struct("GroupCommit").field("queued", &queued).field("most", &self.most).finish_non_exhaustive()
    }
}

impl<T: Send + 'static> GroupCommit<T> {
    /// Groups of at most `most` items, each written in one of `turns`.
    pub fn new(turns: Arc<Semaphore>, most: usize) -> Self {
        Self { queued: Mutex::new(Queue { items: Vec::new(), next_ticket: 0 }), turns, most }
    }

    /// Queues `item`, whose answer comes on `answered`, and waits for that
    /// answer. Whoever takes a turn with items queued takes them (at most a
    /// group's most) and hands them to `write`, which answers each item of
    /// the group it is given.
    ///
    /// With a `deadline`, an item still queued then (the group ahead is
    /// held up: a lock, a database that stopped answering) is taken out of
    /// the queue: [`Unanswered::Expired`]. One whose group is being written
    /// waits for its answer.
    pub async fn submit<R, W, F>(
        &self,
        item: T,
        mut answered: oneshot::Receiver<R>,
        deadline: Option<tokio::time::Instant>,
        write: W,
    ) -> std::result::Result<R, Unanswered>
    where
        W: Fn(Vec<T>) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        let ticket = self.push(item);
        let expired = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expired);
        loop {
            let turn: OwnedSemaphorePermit = tokio::select! {
                biased;
                answer = &mut answered => return answer.map_err(|_| Unanswered::Interrupted),
                turn = self.turns.clone().acquire_owned() => turn.map_err(|_| Unanswered::Interrupted)?,
                () = &mut expired => {
                    if self.withdraw(ticket) {
                        return Err(Unanswered::Expired);
                    }
                    return answered.await.map_err(|_| Unanswered::Interrupted);
                }
            };
            let group = self.take();
            if group.is_empty() {
                // Ours was taken by a group being written: its answer comes.
                drop(turn);
                return answered.await.map_err(|_| Unanswered::Interrupted);
            }
            let written = write(group);
            tokio::spawn(async move {
                let _turn = turn;
                written.await;
            });
            // Ours was in that group, or (past the most) is in a later one:
            // wait for the answer or the next turn.
        }
    }

    /// The queue, whatever a panicking holder left in it.
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue<T>> {
        self.queued.lock_anyway()
    }

    /// Queues `item`: its ticket.
    fn push(&self, item: T) -> u64 {
        let mut queue = self.queue();
        let ticket = queue.next_ticket;
        queue.next_ticket += 1;
        queue.items.push((ticket, item));
        ticket
    }

    /// Takes the next group: the oldest items, at most the most.
    fn take(&self) -> Vec<T> {
        let mut queue = self.queue();
        let take = queue.items.len().min(self.most);
        queue.items.drain(..take).map(|(_, item)| item).collect()
    }

    /// Takes the item with `ticket` out of the queue: whether it was still
    /// there (no group has taken it).
    fn withdraw(&self, ticket: u64) -> bool {
        let mut queue = self.queue();
        let before = queue.items.len();
        queue.items.retain(|(queued, _)| *queued != ticket);
        queue.items.len() < before
    }
}

/// The most new jobs one group writes.
const MAX_CREATIONS: usize = 256;

/// A new job waiting for its group, and where its answer goes: when it was
/// inserted, or `None` when its key was taken.
pub struct Creation {
    /// The job.
    pub(super) new: NewJob,
    answer: oneshot::Sender<Result<Option<DateTime<Utc>>>>,
}

impl Creation {
    /// Answers the creation (its caller may have gone: nobody hears it).
    pub(super) fn answer(self, answer: Result<Option<DateTime<Utc>>>) {
        let _ = self.answer.send(answer);
    }
}

/// The queue of new jobs, in the turns the backend gives their groups.
pub(super) fn creations(turns: Arc<Semaphore>) -> GroupCommit<Creation> {
    GroupCommit::new(turns, MAX_CREATIONS)
}

/// Inserts `new` (its first attempt and its event) in the next group of new
/// jobs, unless its key is taken: when it was inserted, or `None`. A
/// creation still queued when the backend's wait for a connection has
/// passed is refused as unavailable (503, retryable), as a request that
/// found no free connection is.
pub(super) async fn create_job(store: &Store, new: &NewJob) -> Result<Option<DateTime<Utc>>> {
    let (answer, answered) = oneshot::channel();
    let deadline = store.driver().creation_deadline().map(|wait| tokio::time::Instant::now() + wait);
    let driver = store.driver_arc();
    let write = move |group: Vec<Creation>| {
        let driver = driver.clone();
        async move { driver.insert_jobs(group).await }
    };
    let creation = Creation { new: new.clone(), answer };
    match store.creations().submit(creation, answered, deadline, write).await {
        Ok(answer) => answer,
        Err(Unanswered::Interrupted) => Err(interrupted()),
        Err(Unanswered::Expired) => Err(StoreError::from(sqlx::Error::PoolTimedOut)),
    }
}

/// Why a new job got no answer: the task writing its group ended without
/// one (nothing of it is acknowledged).
pub(super) fn interrupted() -> StoreError {
    StoreError::Interrupted("the write of this request was interrupted")
}
