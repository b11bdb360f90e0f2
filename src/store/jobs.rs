//! What the store's job and attempt transitions take and answer: new jobs
//! and attempts, the typed outcomes of every guarded transition (a lost
//! race or a stale guard is a value, never an error), and job listings.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Result, Store, TaskRules, transitions};
use crate::domain::JobEvent;

use crate::domain::{
    Attempt, AttemptId, AttemptOrigin, AttemptState, Fingerprint, IdempotencyKey, Job, JobId, JobState, JobSummary,
    OwnerId,
};

/// A job to create with its first attempt.
#[derive(Clone, Debug)]
pub struct NewJob {
    /// The authenticated owner.
    pub owner: OwnerId,
    /// The new job's id (used only if the key is new).
    pub id: JobId,
    /// The client's key for this intent.
    pub idempotency_key: IdempotencyKey,
    /// The intent's fingerprint.
    pub fingerprint: Fingerprint,
    /// The task's name.
    pub task: String,
    /// The validated input.
    pub input: Value,
    /// The resolved primary provider.
    pub provider: String,
    /// The id of the first attempt.
    pub first_attempt_id: AttemptId,
    /// Where the first attempt goes when not to `provider`: a provider of
    /// the task's chain taken while `provider`'s breaker is open.
    pub first_provider: Option<String>,
    /// The job's budget, from the create request.
    pub max_cost: Option<crate::domain::Money>,
    /// The create request's trace context, kept with the first attempt.
    pub trace: Option<crate::domain::TraceContext>,
}

impl NewJob {
    /// The provider of the first attempt.
    pub fn first_attempt_provider(&self) -> &str {
        self.first_provider.as_deref().unwrap_or(&self.provider)
    }

    /// The job as just inserted at `created_at`: queued, its first attempt pending.
    pub(crate) fn created(&self, created_at: DateTime<Utc>) -> Job {
        Job {
            id: self.id,
            owner: self.owner.clone(),
            idempotency_key: self.idempotency_key.as_str().to_owned(),
            fingerprint: self.fingerprint,
            task: self.task.clone(),
            input: self.input.clone(),
            provider: self.provider.clone(),
            state: JobState::Queued,
            winning_attempt: None,
            result: None,
            created_at,
            updated_at: created_at,
            expires_at: None,
            max_cost: self.max_cost,
            cost: None,
            waiting: None,
            canceling: Vec::new(),
            attempts: vec![Attempt {
                number: 1,
                id: self.first_attempt_id,
                provider: self.first_attempt_provider().to_owned(),
                state: AttemptState::Pending,
                origin: AttemptOrigin::Client,
                idempotency_key: None,
                worker: None,
                lease_until: None,
                output: None,
                error: None,
                created_at,
                not_before: created_at,
                started_at: None,
                finished_at: None,
                usage: None,
                cost: None,
                unapplied_output: None,
                provider_request_id: None,
                trace: self.trace.clone(),
            }],
        }
    }
}

/// The answer to [`Store::create_job`].
#[derive(Clone, Debug)]
pub enum CreateJob {
    /// The key was new: this job was inserted, with its first attempt pending.
    Created(Job),
    /// The key was taken: this is the job that holds it, as it is now. The
    /// caller compares fingerprints to tell a replay from a reused key.
    Existing(Job),
}

/// The answer to [`Store::cancel_job`].
#[derive(Clone, Debug)]
pub enum Cancel {
    /// The job is now canceled; pending attempts were canceled with it.
    Canceled(Job),
    /// It was canceled before: nothing changed.
    AlreadyCanceled(Job),
    /// It succeeded: a finished job cannot be canceled.
    Succeeded(Job),
    /// No such job for this owner.
    NotFound,
}

pub use crate::domain::JobFilter;

/// A job of a listing that may span owners (the dashboard's).
#[derive(Clone, Debug)]
pub struct OwnedJobSummary {
    /// Whose job it is.
    pub owner: OwnerId,
    /// The job.
    pub job: JobSummary,
}

impl Store {
    /// Creates a job with its first attempt, or finds the job that holds the
    /// key already (I1: the unique constraint decides).
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %new.id))]
    pub async fn create_job(&self, new: &NewJob) -> Result<CreateJob> {
        transitions::create_job(self, new).await
    }

    /// One of the owner's jobs with its attempts.
    pub async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Option<Job>> {
        self.driver().get_job(owner, id).await
    }

    /// One of the owner's jobs by its idempotency key.
    pub async fn find_job_by_key(&self, owner: &OwnerId, key: &IdempotencyKey) -> Result<Option<Job>> {
        self.driver().find_job_by_key(owner, key).await
    }

    /// A page of the owner's jobs, newest first.
    pub async fn list_jobs(&self, owner: &OwnerId, filter: &JobFilter) -> Result<Vec<JobSummary>> {
        self.driver().list_jobs(owner, filter).await
    }

    /// A job's audit log, oldest first.
    pub async fn list_events(&self, owner: &OwnerId, job_id: JobId) -> Result<Vec<JobEvent>> {
        self.driver().list_events(owner, job_id).await
    }

    /// Cancels a job unless it succeeded: pending attempts are canceled;
    /// running ones are left to their workers, which abort their calls
    /// (the task's `cancel_losers`) or record their answers, never applied.
    #[tracing::instrument(level = "debug", skip_all, fields(job.id = %id))]
    pub async fn cancel_job(&self, owner: &OwnerId, id: JobId, rules: &dyn TaskRules) -> Result<Cancel> {
        transitions::cancel_job(self, owner, id, rules).await
    }

    /// A page of jobs, newest first, of one owner or (`None`) of every
    /// owner, only the one holding idempotency key `key` when given: the
    /// dashboard's listing. Across owners it reads every owner's rows.
    pub async fn browse_jobs(
        &self,
        owner: Option<&OwnerId>,
        key: Option<&str>,
        filter: &JobFilter,
    ) -> Result<Vec<OwnedJobSummary>> {
        self.driver().browse_jobs(owner, key, filter).await
    }

    /// The owner of job `id`, of any owner: how an admin's dashboard finds a
    /// job it was given the id of.
    pub async fn find_job_owner(&self, id: JobId) -> Result<Option<OwnerId>> {
        self.driver().find_job_owner(id).await
    }

    /// The key of the callbacks' tokens, which the migrations made.
    pub async fn callback_secret(&self) -> Result<Option<String>> {
        self.driver().callback_secret().await
    }
}
