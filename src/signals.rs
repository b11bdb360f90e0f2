//! In-process signals: "there is work" for the worker, and "this job
//! changed" for long-polls. They only make things faster: every waiter also
//! polls the database, so changes made by other processes are seen too.

use tokio::sync::{Notify, broadcast};

use crate::domain::JobId;

/// The signals one process shares between its API and its worker.
pub struct Signals {
    work: Notify,
    jobs: broadcast::Sender<JobId>,
}

impl Default for Signals {
    fn default() -> Self {
        Self { work: Notify::new(), jobs: broadcast::channel(1024).0 }
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

    /// A job's stored state or attempts changed.
    pub fn job_changed(&self, id: JobId) {
        // No receiver is fine: nobody is long-polling.
        let _ = self.jobs.send(id);
    }

    /// Subscribes to job changes.
    pub fn job_changes(&self) -> broadcast::Receiver<JobId> {
        self.jobs.subscribe()
    }
}
