//! The reads of jobs that are not one job's long-poll: an owner's list,
//! a job's audit log, the dashboard's browsing across owners and its
//! unknown attempts, the usage report, and whether the database is ready.
//! Each job read here has its `expires_at` and `canceling`, as the API's.

use super::{JobError, Jobs};
use crate::domain::{Job, JobEvent, JobId, JobSummary, OwnerId};
use crate::store::{JobFilter, OpenUnknown, OwnedJobSummary, UsageFilter, UsageRow};

impl Jobs {
    /// `owner`'s jobs, newest first, as `filter` narrows them.
    pub async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>, JobError> {
        Ok(self.store.list_jobs(owner, filter).await?)
    }

    /// One of `owner`'s jobs; with `any_owner` (an admin's dashboard), the
    /// job of that id whoever owns it.
    pub async fn find_job(&self, owner: &OwnerId, id: JobId, any_owner: bool) -> Result<Option<Job>, JobError> {
        if let Some(job) = self.read_job(owner, id).await? {
            return Ok(Some(job));
        }
        if any_owner && let Some(owner) = self.store.find_job_owner(id).await? {
            return Ok(self.read_job(&owner, id).await?);
        }
        Ok(None)
    }

    /// A kept file of one of `owner`'s jobs (`None`: no such job for this
    /// owner, or no such file of it).
    pub(crate) async fn job_file(
        &self,
        owner: &OwnerId,
        id: JobId,
        name: &str,
    ) -> Result<Option<crate::files::KeptFile>, JobError> {
        let Some(files) = &self.files else { return Ok(None) };
        if self.store.get_job(owner, id).await?.is_none() {
            return Ok(None);
        }
        Ok(files.find(id, name).await)
    }

    /// One of `owner`'s jobs with its audit log, oldest first. The job is
    /// read after the log, so that it is at least as new as the last event
    /// (a page that follows the job's events from there misses no change).
    /// When none of its attempts can change any more, the log is read once
    /// more: a page stops following such a job, and the events of its last
    /// changes (a loser canceled after the winner's settlement) may have
    /// been committed between the two reads.
    pub async fn job_with_events(&self, owner: &OwnerId, id: JobId) -> Result<Option<(Job, Vec<JobEvent>)>, JobError> {
        let events = self.store.list_events(owner, id).await?;
        crate::failpoints::reached("job-with-events-between-reads");
        let Some(job) = self.read_job(owner, id).await? else { return Ok(None) };
        if job.attempts.iter().all(|attempt| attempt.state.is_final()) {
            return Ok(Some((job, self.store.list_events(owner, id).await?)));
        }
        Ok(Some((job, events)))
    }

    /// Jobs of one owner or (`None`) of every owner, newest first, found by
    /// idempotency key when one is given.
    pub async fn browse_jobs(
        &self,
        owner: Option<&OwnerId>,
        key: Option<&str>,
        filter: &JobFilter,
    ) -> Result<Vec<OwnedJobSummary>, JobError> {
        Ok(self.store.browse_jobs(owner, key, filter).await?)
    }

    /// The attempts whose outcome is unknown, of one owner or (`None`) of
    /// every owner, the longest unknown first, at most `limit`.
    pub async fn list_unknown_attempts(
        &self,
        owner: Option<&OwnerId>,
        limit: u32,
    ) -> Result<Vec<OpenUnknown>, JobError> {
        Ok(self.store.list_unknown_attempts(owner, limit).await?)
    }

    /// `owner`'s attempts with recorded usage, for the usage report.
    pub async fn list_usage(&self, owner: &OwnerId, filter: &UsageFilter) -> Result<Vec<UsageRow>, JobError> {
        Ok(self.store.list_usage(owner, filter).await?)
    }

    /// Whether the database answers and has every migration.
    pub async fn check_ready(&self) -> Result<(), JobError> {
        Ok(self.store.check_ready().await?)
    }
}
