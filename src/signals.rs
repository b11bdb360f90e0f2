//! In-process signals: "there is work" for the worker, and "this job
//! changed" for long-polls. They only make things faster: every waiter also
//! polls the database, so changes made by other processes are seen too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::domain::JobId;

/// The signals one process shares between its API and its worker.
#[derive(Default)]
pub struct Signals {
    work: Notify,
    // The jobs someone waits on, each with its own notice: a change wakes
    // the waiters of that job only.
    jobs: Mutex<HashMap<JobId, Arc<Notify>>>,
}

/// A registration for the changes of one job; dropped, it is forgotten.
pub struct JobWatch<'a> {
    signals: &'a Signals,
    id: JobId,
    notify: Arc<Notify>,
}

impl JobWatch<'_> {
    /// A notice of the job's next change, listening from now on: take it
    /// before reading the job, await it after, and a change in between is
    /// not missed.
    pub fn next_change(&self) -> std::pin::Pin<Box<Notified<'_>>> {
        let mut notified = Box::pin(self.notify.notified());
        notified.as_mut().enable();
        notified
    }
}

impl Drop for JobWatch<'_> {
    fn drop(&mut self) {
        let mut jobs = self.signals.jobs.lock().unwrap_or_else(|p| p.into_inner());
        // The map's reference and ours: nobody else watches this job.
        if Arc::strong_count(&self.notify) == 2 {
            jobs.remove(&self.id);
        }
    }
}

impl Signals {
    /// A pending attempt was added: wake the worker now rather than at its
    /// next poll. A wake with no worker waiting is kept for the next wait.
    pub fn work_available(&self) {
        self.work.notify_one();
    }

    /// Wakes the worker once `delay` has passed (a retry's backoff).
    pub fn work_available_after(self: &std::sync::Arc<Self>, delay: std::time::Duration) {
        if delay.is_zero() {
            return self.work_available();
        }
        let signals = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            signals.work_available();
        });
    }

    /// Waits for [`Self::work_available`].
    pub async fn work(&self) {
        self.work.notified().await;
    }

    /// A job's stored state or attempts changed: wake its waiters, if any.
    pub fn job_changed(&self, id: JobId) {
        // Under the lock, without a clone: a watch being dropped meanwhile
        // still sees that nobody else holds the job's notice, and forgets it.
        if let Some(notify) = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            notify.notify_waiters();
        }
    }

    /// Watches one job's changes.
    pub fn watch_job(&self, id: JobId) -> JobWatch<'_> {
        let notify = self.jobs.lock().unwrap_or_else(|p| p.into_inner()).entry(id).or_default().clone();
        JobWatch { signals: self, id, notify }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_wakes_the_waiters_of_that_job_only() {
        let signals = Signals::default();
        let (one, other) = (JobId::new(), JobId::new());
        let watching_one = signals.watch_job(one);
        let watching_other = signals.watch_job(other);
        let one_changed = watching_one.next_change();
        let other_changed = watching_other.next_change();
        // A change between taking the notice and awaiting it is not missed.
        signals.job_changed(one);
        tokio::time::timeout(std::time::Duration::from_secs(5), one_changed).await.expect("the waiter of the changed job woke");
        let woke = tokio::time::timeout(std::time::Duration::from_millis(50), other_changed).await;
        assert!(woke.is_err(), "the waiter of another job slept on");
        drop((watching_one, watching_other));
        assert!(signals.jobs.lock().unwrap().is_empty(), "unwatched jobs are forgotten");
    }
}
