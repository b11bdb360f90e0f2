//! Group commit of new jobs, for both backends: each creation is queued,
//! and whoever gets the write turn with its creation still queued takes
//! every queued creation (its own among them, at most [`MAX_GROUP`]) and
//! writes them, so that one commit and one log flush cover the group; the
//! others find their answer while they wait. Each creation is answered
//! only after its group's commit; under no load a group is the one
//! creation, written at once. The group is written by a task of its own,
//! so a client that hangs up cannot abandon the others.
//!
//! The backends bring the turn (Postgres's own lock; SQLite's one writer
//! lock, shared with every other write) and how a group is written
//! (`postgres/creates.rs`, `sqlite/creates.rs`).

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::{NewJob, Result, StoreError};

/// The most creations one group writes.
const MAX_GROUP: usize = 256;

/// A creation waiting for its group, and where its answer goes.
pub(super) struct Pending<A> {
    pub new: NewJob,
    pub answer: oneshot::Sender<Result<A>>,
}

/// The creations waiting for the next group. `A` is a backend's answer to
/// one: when its job was inserted, or `None` when its key was taken.
pub(super) struct Creations<A> {
    queued: Mutex<Vec<Pending<A>>>,
}

impl<A> Default for Creations<A> {
    fn default() -> Self {
        Self { queued: Mutex::default() }
    }
}

impl<A> std::fmt::Debug for Creations<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queued = self.queued.lock().unwrap_or_else(|p| p.into_inner()).len();
        f.debug_struct("Creations").field("queued", &queued).finish_non_exhaustive()
    }
}

/// Why a queued creation got no answer: the task writing its group ended
/// without one (nothing of it is acknowledged).
pub(super) fn interrupted() -> StoreError {
    StoreError::Interrupted("the write of this request was interrupted")
}

impl<A: Send + 'static> Creations<A> {
    /// Queues `new` and waits for its answer. Whoever holds `turn` writes:
    /// `write` answers every creation of the group it is given.
    ///
    /// With a `deadline`, a creation still queued then (the group ahead is
    /// held up: a lock, a database that stopped answering) is taken out of
    /// the queue and refused as unavailable (503, retryable), as a request
    /// that found no free connection is; one whose group is being written
    /// waits for its answer.
    pub(super) async fn create<W, F>(
        &self,
        new: &NewJob,
        turn: &Arc<tokio::sync::Mutex<()>>,
        deadline: Option<tokio::time::Instant>,
        write: W,
    ) -> Result<A>
    where
        W: Fn(Vec<Pending<A>>) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        let (answer, mut answered) = oneshot::channel();
        self.queued.lock().unwrap_or_else(|p| p.into_inner()).push(Pending { new: new.clone(), answer });
        let expired = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expired);
        loop {
            let turn = tokio::select! {
                biased;
                answer = &mut answered => return answer.map_err(|_| interrupted())?,
                turn = turn.clone().lock_owned() => turn,
                () = &mut expired => {
                    if self.withdraw(new) {
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
            let group: Vec<Pending<A>> = {
                let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
                let take = queued.len().min(MAX_GROUP);
                queued.drain(..take).collect()
            };
            let written = write(group);
            tokio::spawn(async move {
                let _turn = turn;
                written.await;
            });
            // Ours was in that group, or (past MAX_GROUP) is in a later one:
            // wait for the answer or the next turn.
        }
    }

    /// Takes `new` out of the queue (its job's id is its own): whether it
    /// was still there (no group has taken it).
    fn withdraw(&self, new: &NewJob) -> bool {
        let mut queued = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        let before = queued.len();
        queued.retain(|pending| pending.new.id != new.id);
        queued.len() < before
    }
}
