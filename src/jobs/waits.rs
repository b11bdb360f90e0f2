//! Waiting on one job: a long-poll (`GET /jobs/{id}?wait=`) until the job
//! differs from what its client saw, and a creation that waits for its
//! job's end (`POST /jobs` with `Prefer: wait=`). Each waits in one of its
//! owner's places for long-polls.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use uuid::Uuid;

use super::{CLAIM_GRACE, JobError, Jobs, LongPoll};
use crate::domain::{Job, JobId, OwnerId};
use crate::process::metrics;
use crate::process::signals::JobWatch;

impl Jobs {
    /// A place for one of `owner`'s long-polls, waiting up to `wait`, or
    /// [`JobError::TooManyLongPolls`] when the owner holds as many as it
    /// may in this process. The place is given back when the [`LongPoll`]
    /// is dropped.
    pub fn open_long_poll(&self, owner: &OwnerId, key: Option<Uuid>, wait: Duration) -> Result<LongPoll, JobError> {
        self.long_polls.open(owner, key, wait).ok_or_else(|| {
            metrics::long_poll_refused();
            JobError::TooManyLongPolls { per_owner: self.long_polls.per_owner() }
        })
    }

    /// The job `id` of `poll`'s owner once `changed` says it differs from
    /// what the caller saw, or it is finished, or the poll's wait has
    /// passed: a long-poll. The job's change notices wake it early; it
    /// rereads the job every `long_poll_interval` anyway, for changes made
    /// by other processes. Woken by a claim alone, it waits up to
    /// [`CLAIM_GRACE`] for the attempt's outcome before it rereads, so that
    /// a fast attempt is answered once, with its outcome.
    pub async fn watch_job(
        &self,
        poll: &LongPoll,
        id: JobId,
        changed: impl Fn(&Job) -> bool,
    ) -> Result<Arc<Job>, JobError> {
        let watch = self.signals.watch_job(id);
        self.watch_from(poll, &watch, id, None, changed).await
    }

    /// `job`, which this request just created, once it is finished or
    /// `poll`'s wait has passed (a long-poll that waits for the end only).
    /// `watch`, taken before the job was inserted, tells whether `job` is
    /// still as created: then it is not read again until a notice comes or
    /// the reread interval passes. Without a watch (the job was not created
    /// by this request), the job is read first. A failed read answers `job`
    /// as it was: the creation stands, and the client can poll.
    pub async fn wait_for_end(&self, poll: &LongPoll, watch: Option<JobWatch<'_>>, job: Arc<Job>) -> Arc<Job> {
        let id = job.id;
        let waited = match &watch {
            Some(watch) => self.watch_from(poll, watch, id, Some(job.clone()), |_| false).await,
            None => self.watch_job(poll, id, |_| false).await,
        };
        waited.unwrap_or_else(|error| {
            tracing::warn!(%error, job.id = %id, "waiting for a new job's end failed; answered with the job as created");
            job
        })
    }

    /// The loop of [`Self::watch_job`] on `watch`, starting from `seen` when
    /// the job has not changed since the watch was taken, from a read of
    /// the job otherwise.
    async fn watch_from(
        &self,
        poll: &LongPoll,
        watch: &JobWatch<'_>,
        id: JobId,
        seen: Option<Arc<Job>>,
        changed: impl Fn(&Job) -> bool,
    ) -> Result<Arc<Job>, JobError> {
        let owner = poll.owner();
        // The notices listen from before each read (or, for `seen`, before
        // the check that nothing changed since the watch was taken), so that
        // no change slips in between.
        let (mut change, mut settling) = (watch.next_change(), watch.next_change_but_a_claim());
        let mut job = match seen {
            Some(job) if !watch.changed_since_taken() => job,
            _ => self.get_job(owner, id).await?,
        };
        let deadline = tokio::time::Instant::now() + poll.wait();
        loop {
            let now = tokio::time::Instant::now();
            if job.state.is_terminal() || changed(&job) || now >= deadline {
                return Ok(job);
            }
            let noticed = tokio::select! {
                _ = change => true,
                _ = tokio::time::sleep(self.intervals.long_poll.min(deadline - now)) => false,
                // The server is stopping, or the key changed: answered now.
                _ = poll.ended() => return Ok(job),
            };
            if noticed && (&mut settling).now_or_never().is_none() {
                let grace = CLAIM_GRACE.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                let _ = tokio::time::timeout(grace, settling).await;
            }
            (change, settling) = (watch.next_change(), watch.next_change_but_a_claim());
            job = self.get_job(owner, id).await?;
        }
    }
}
