//! The use cases of jobs, written once for every caller: the JSON API's
//! handlers and the dashboard call these and never each other. Each takes
//! the authenticated owner (I7) and typed, already parsed input, and answers
//! with a typed outcome or a [`JobError`]; none knows about HTTP.
//!
//! - [`Jobs::create_job`]: one job per (owner, key) (I1), a reused key with
//!   another intent refused (I2), replays and same-key storms made cheap
//!   without deciding anything the database decides (`replay`).
//! - [`Jobs::add_attempt`]: a retry or a fallback, admitted or refused by
//!   the store's rules under the job's lock (I4, I5).
//! - [`Jobs::resolve_attempt`]: an operator settles an unknown attempt,
//!   through the same compare-and-swap as a worker (I3).
//! - [`Jobs::cancel_job`], [`Jobs::get_job`].
//! - [`Jobs::open_long_poll`], [`Jobs::watch_job`]: a long-poll, in one of
//!   the owner's places for long-polls (`long_polls`); [`Jobs::wait_for_end`]:
//!   a creation that waits for its job's end (`waits`).
//! - [`Jobs::follow_events`]: a job's event log followed live, in one of
//!   those places too (`events`).

mod error;
pub(crate) mod events;
pub(crate) mod long_polls;
pub(crate) mod output;
mod partial;
mod reads;
pub(crate) mod replay;
pub(crate) mod resolution;
mod waits;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub(crate) use error::JobError;
pub(crate) use long_polls::{LongPoll, LongPolls};
use replay::{InsertOutcome, SharedCreate, SharedCreates, SharedReads, TakenKeys};
pub(crate) use resolution::{ResolveAnswer, ResolvedElsewhere};

use crate::domain::{
    AdmissionRefusal, Attempt, AttemptId, AttemptOrigin, Fingerprint, IdempotencyKey, Job, JobId, JobIntent, Money,
    OwnerId,
};
use crate::keys::Identity;
use crate::process::metrics;
use crate::process::signals::{JobWatch, Signals};
use crate::store::retention::Erasure;
use crate::store::{
    Admission, AttemptRef, Cancel, CreateJob, NewAttempt, NewJob, Resolution, Resolved, Store, TaskRules, Transition,
};
use crate::task::catalog::Catalog;
use uuid::Uuid;

/// What a client asks a job to do: parsed, not yet checked against the
/// catalog.
#[derive(Clone, Debug)]
pub struct JobRequest {
    /// The task's name.
    pub task: String,
    /// Its input.
    pub input: Value,
    /// The provider; the task's default when `None`.
    pub provider: Option<String>,
    /// The job's budget.
    pub max_cost: Option<Money>,
    /// The request's trace context (not part of the intent).
    pub trace: Option<crate::domain::TraceContext>,
}

/// A job as a request with its key made or found it.
#[derive(Clone, Debug)]
pub struct MadeOrFound<T> {
    /// The job or attempt.
    pub value: T,
    /// Whether an earlier request with the same key made it (a replay).
    pub replayed: bool,
}

/// The job use cases, with what they share between requests.
pub struct Jobs {
    store: Store,
    catalog: Arc<Catalog>,
    signals: Arc<Signals>,
    taken_keys: TakenKeys,
    creates: SharedCreates,
    reads: SharedReads,
    long_polls: LongPolls,
    intervals: Intervals,
    limits: crate::store::claims::ClaimLimits,
    unknown_retry_after: Duration,
    /// Where the files of outputs are kept (none: no file is served).
    files: Option<Arc<crate::files::Files>>,
}

/// How long a long-poll woken by a claim waits for the attempt's outcome
/// before it answers with the attempt `running`: one answer instead of two
/// for an attempt that settles within it, and the claim told at most this
/// much later for one that does not.
pub(crate) const CLAIM_GRACE: Duration = Duration::from_millis(100);

/// How often waiters reread the database for changes made by other
/// processes (their own process's changes wake them at once).
#[derive(Clone, Copy, Debug)]
pub struct Intervals {
    /// A long-poll rereads its job.
    pub long_poll: Duration,
    /// An event stream rereads its job's log.
    pub event_stream: Duration,
}

impl Jobs {
    /// The use cases over `store`, for the tasks and providers of `catalog`;
    /// each owner may hold `long_polls_per_owner` long-polls at once, up to
    /// `taken_keys` taken idempotency keys are remembered,
    /// waiters reread the database at `intervals` when no notice came, and
    /// a queued job's wait is told under the claims' `limits`.
    pub fn new(
        store: Store,
        catalog: Arc<Catalog>,
        signals: Arc<Signals>,
        long_polls_per_owner: usize,
        taken_keys: usize,
        intervals: Intervals,
        limits: crate::store::claims::ClaimLimits,
    ) -> Self {
        Self {
            store,
            catalog,
            signals,
            taken_keys: TakenKeys::new(taken_keys),
            creates: SharedCreates::default(),
            reads: SharedReads::default(),
            long_polls: LongPolls::new(long_polls_per_owner),
            intervals,
            limits,
            unknown_retry_after: crate::config::ServerSettings::default().unknown_retry_after,
            files: None,
        }
    }

    /// These use cases, serving the files of outputs kept in `files`.
    pub(crate) fn with_files(mut self, files: Arc<crate::files::Files>) -> Self {
        self.files = Some(files);
        self
    }

    /// These use cases, with `wait` as the `Retry-After` of a refusal
    /// while an attempt's outcome is unknown (`server.unknown_retry_after_secs`;
    /// its default until this is called).
    pub fn with_unknown_retry_after(mut self, wait: Duration) -> Self {
        self.unknown_retry_after = wait;
        self
    }

    /// What the use cases hold in memory now, by structure: the taken keys
    /// (a bounded cache), and what requests in flight hold (keys at the
    /// database, shared reads, long-polls), empty when none is.
    pub fn held(&self) -> Vec<(&'static str, usize)> {
        let mut held = vec![
            ("taken_keys", self.taken_keys.len()),
            ("key_flights", self.creates.len()),
            ("shared_reads", self.reads.len()),
        ];
        held.extend(self.long_polls.held());
        held
    }

    /// Creates the job `request` describes under `key`, or answers with the
    /// job the key made before when the intent is the same (a replay), or
    /// refuses the key when it made a job of another intent.
    ///
    /// A replay is answered from what is stored, whatever the configuration
    /// says now: the intent is compared as the client sent it (see
    /// [`JobIntent::made`]), and the checks against the current tasks,
    /// providers and prices apply only to a job that does not exist yet. A
    /// request they refuse is looked up by its key before it is refused.
    ///
    /// With `watch`, a job this request created comes with a watch on its
    /// changes taken before it was inserted, for [`Jobs::wait_for_end`].
    pub async fn create_job(
        &self,
        owner: OwnerId,
        key: IdempotencyKey,
        request: JobRequest,
        watch: bool,
    ) -> Result<(MadeOrFound<Arc<Job>>, Option<JobWatch<'_>>), JobError> {
        let max_cost = request.max_cost.map(|m| m.to_string());
        let intent = |request| intent_of(request, max_cost.as_deref());
        if let Some(job) = self.replay_taken_key(&owner, &key, intent(&request)).await? {
            return Ok((job, None));
        }
        let (provider, fingerprint) = match self.check_new_job(&request, intent(&request)) {
            Ok(checked) => checked,
            Err(refused) => return self.answer_refused(&owner, &key, refused, intent(&request)).await.map(unwatched),
        };
        let JobRequest { task, input, provider: named, max_cost: budget, trace } = request;
        let first_provider = match named {
            Some(_) => None,
            None => self.route_around_open(&task, &provider, &input, budget).await?,
        };
        let new = NewJob {
            owner,
            id: JobId::new(),
            idempotency_key: key,
            fingerprint,
            task,
            input,
            provider,
            first_attempt_id: AttemptId::new(),
            first_provider,
            max_cost: budget,
            trace,
        };
        let watch = watch.then(|| self.signals.watch_job(new.id));
        let shared = self.insert_once(&new).await;
        self.answer_shared_create(shared, &new, named.as_deref(), max_cost.as_deref(), watch)
    }

    /// The replay of a key this process has seen taken: its holder never
    /// changes, so that job is read by id (one cheap statement) instead of
    /// trying the insert. `None` when the key is not known taken here, or
    /// its job is gone (the key is then forgotten).
    async fn replay_taken_key(
        &self,
        owner: &OwnerId,
        key: &IdempotencyKey,
        intent: JobIntent<'_>,
    ) -> Result<Option<MadeOrFound<Arc<Job>>>, JobError> {
        let Some(holder) = self.taken_keys.get(owner, key) else { return Ok(None) };
        if !intent.made(holder.fingerprint, &holder.provider) {
            return Err(key_reused(&holder.task, holder.job_id));
        }
        if let Some(job) = self.reads.read(owner, holder.job_id, || self.read_job(owner, holder.job_id)).await? {
            return Ok(Some(replayed(job)));
        }
        self.taken_keys.forget(owner, key);
        Ok(None)
    }

    /// The answer to a request `refused` as a new job: a job this key made
    /// under another configuration answers all the same.
    async fn answer_refused(
        &self,
        owner: &OwnerId,
        key: &IdempotencyKey,
        refused: JobError,
        intent: JobIntent<'_>,
    ) -> Result<MadeOrFound<Arc<Job>>, JobError> {
        let Some(job) = self.store.find_job_by_key(owner, key).await?.map(|job| self.with_task_rules(job)) else {
            return Err(refused);
        };
        let job = Arc::new(job);
        self.taken_keys.remember(key, &job);
        answer_taken(intent, job)
    }

    /// Inserts the `new` job, once for all the requests with its key in
    /// flight in this process (they share the answer).
    async fn insert_once(&self, new: &NewJob) -> SharedCreate<crate::store::StoreError> {
        let store = &self.store;
        self.creates
            .create_once(&new.owner, &new.idempotency_key, || async {
                match store.create_job(new).await {
                    Ok(CreateJob::Created(job)) => InsertOutcome::Created(job),
                    Ok(CreateJob::Existing(job)) => InsertOutcome::Existing(self.with_task_rules(job)),
                    Err(error) => InsertOutcome::Failed(error),
                }
            })
            .await
    }

    /// The answer to the insert of the `new` job (the request `named` its
    /// provider or not, its budget written `max_cost`): the job it created,
    /// with the `watch` on it, or the job its key holds.
    fn answer_shared_create<'a>(
        &self,
        shared: SharedCreate<crate::store::StoreError>,
        new: &NewJob,
        named: Option<&str>,
        max_cost: Option<&str>,
        watch: Option<JobWatch<'a>>,
    ) -> Result<(MadeOrFound<Arc<Job>>, Option<JobWatch<'a>>), JobError> {
        match shared {
            SharedCreate::Created(job) => {
                self.taken_keys.remember(&new.idempotency_key, &job);
                self.signals.work_available();
                metrics::job_request(metrics::JOBS_CREATED, &job.task);
                let watch = watch.filter(|_| job.id == new.id);
                Ok((MadeOrFound { value: job, replayed: false }, watch))
            }
            SharedCreate::Taken(job) => {
                self.taken_keys.remember(&new.idempotency_key, &job);
                let intent = JobIntent { task: &new.task, input: &new.input, provider: named, max_cost };
                answer_taken(intent, job).map(unwatched)
            }
            SharedCreate::Failed(error) => Err(error.into()),
        }
    }

    /// Checks a request for a new job against the current configuration:
    /// its task, its provider (the task's default when it names none), its
    /// input, its prompt and its budget. The provider and the fingerprint
    /// the job is stored with.
    fn check_new_job(&self, request: &JobRequest, intent: JobIntent<'_>) -> Result<(String, Fingerprint), JobError> {
        let task = self
            .catalog
            .task(&request.task)
            .ok_or_else(|| JobError::invalid("/task", format!("no task named '{}'", request.task)))?;
        let default = &task.settings.default_provider;
        let provider = request.provider.clone().unwrap_or_else(|| default.clone());
        if self.catalog.provider(&provider).is_none() {
            return Err(JobError::ProviderUnknown(provider));
        }
        let violations = task.check_input(&request.input);
        if !violations.is_empty() {
            return Err(JobError::Invalid(violations));
        }
        // A prompt that cannot be rendered is the request's fault, found now
        // rather than by a worker.
        if let Err(message) = task.contract.render(&request.input) {
            return Err(JobError::invalid("/input", message));
        }
        self.refuse_over_budget(&task.name, &provider, &request.input, request.max_cost)?;
        Ok((provider, intent.fingerprint(default)))
    }

    /// Where the first attempt of a new `task` job that named no provider
    /// goes while the breaker of `default`, its task's provider, is open:
    /// the first provider of the task's failover list whose breaker lets
    /// work through, qualified for the task's current contract (I5) and
    /// within the job's budget. `None`: to `default` (a breaker closed, or
    /// no way around it: the attempt will fail fast, as retryable).
    async fn route_around_open(
        &self,
        task: &str,
        default: &str,
        input: &Value,
        max_cost: Option<Money>,
    ) -> Result<Option<String>, JobError> {
        let breakers = self.catalog.breakers();
        if breakers.routable(default) {
            return Ok(None);
        }
        let Some(settings) = self.catalog.task(task).map(|t| &t.settings) else { return Ok(None) };
        for candidate in settings.failover.iter().filter(|p| *p != default && breakers.routable(p)) {
            let Some(hash) = self.catalog.contract_hash(task, candidate) else { continue };
            if !self.store.qualification_state(candidate, task, &hash).await?.passed()
                || self.refuse_over_budget(task, candidate, input, max_cost).is_err()
            {
                continue;
            }
            tracing::info!(task, provider = %default, to = %candidate,
                           "the provider's breaker is open: the new job's first attempt goes to the next of its chain");
            return Ok(Some(candidate.clone()));
        }
        Ok(None)
    }

    /// 409 `budget-exceeded` when a new job's first attempt could cost more
    /// than its budget (its `max_cost`, or its task's, the lower): nothing is
    /// created and nothing is sent.
    fn refuse_over_budget(
        &self,
        task: &str,
        provider: &str,
        input: &Value,
        max_cost: Option<Money>,
    ) -> Result<(), JobError> {
        let Some(budget) = crate::domain::budget_of(self.catalog.as_ref(), task, max_cost) else { return Ok(()) };
        let Some(worst_case) = self.catalog.worst_case_cost(task, provider, input) else { return Ok(()) };
        if worst_case <= budget {
            return Ok(());
        }
        let reason =
            format!("the first attempt on '{provider}' may cost up to {worst_case}, over the job's budget of {budget}");
        Err(self.refuse(AdmissionRefusal::BudgetExceeded, Some(reason)))
    }

    /// An admission rule's refusal, with when to ask again where that is
    /// known: an unknown outcome's wait.
    fn refuse(&self, refusal: AdmissionRefusal, reason: Option<String>) -> JobError {
        let retry_after =
            (refusal == AdmissionRefusal::AttemptOutcomeUnknown).then_some(self.unknown_retry_after.as_secs());
        JobError::Refused { refusal, reason, retry_after }
    }

    /// Adds an attempt on `provider` (the job's own when `None`) to one of
    /// `owner`'s jobs, if every admission rule allows it; the key is scoped
    /// to the job, so a double-clicked fallback makes one attempt.
    pub async fn add_attempt(
        &self,
        owner: &OwnerId,
        job_id: JobId,
        key: IdempotencyKey,
        provider: Option<String>,
        trace: Option<crate::domain::TraceContext>,
    ) -> Result<MadeOrFound<Attempt>, JobError> {
        if let Some(provider) = &provider
            && self.catalog.provider(provider).is_none()
        {
            return Err(JobError::ProviderUnknown(provider.clone()));
        }
        let new = NewAttempt {
            id: AttemptId::new(),
            provider,
            idempotency_key: Some(key),
            origin: AttemptOrigin::Client,
            delay: Duration::ZERO,
            trace,
        };
        match self.store.admit_attempt(owner, job_id, &new, self.catalog.as_ref()).await? {
            Admission::Admitted(attempt) => {
                self.signals.work_available();
                self.signals.job_changed(job_id);
                Ok(MadeOrFound { value: attempt, replayed: false })
            }
            Admission::Replayed(attempt) => Ok(MadeOrFound { value: attempt, replayed: true }),
            Admission::KeyReused(attempt) => Err(JobError::AttemptKeyReused { attempt: attempt.number }),
            Admission::Refused { refusal, reason } => Err(self.refuse(refusal, reason)),
            Admission::JobNotFound => Err(JobError::NotFound),
        }
    }

    /// Settles an unknown attempt by an operator's word: any key its own
    /// owner's, an operator key any owner's (found by job id and number
    /// among unknown attempts). A succeeded output must meet the task's contract
    /// and goes through the job's compare-and-swap. The job as it is after,
    /// or to an operator of another owner only where it stands.
    pub async fn resolve_attempt(
        &self,
        caller: &Identity,
        job_id: JobId,
        number: i32,
        resolution: Resolution,
        reason: &str,
    ) -> Result<ResolveAnswer, JobError> {
        let owner = if caller.role.spans_owners() {
            self.store.find_unknown_attempt_owner(job_id, number).await?.unwrap_or(caller.owner.clone())
        } else {
            caller.owner.clone()
        };
        if let Resolution::Succeeded(output) = &resolution {
            // The job's task is only known to the store; a missing job is a 404 either way.
            let job = self.read_job(&owner, job_id).await?.ok_or(JobError::NotFound)?;
            if let Some(task) = self.catalog.task(&job.task) {
                let violations = task.contract.check_output(output);
                if !violations.is_empty() {
                    return Err(JobError::ContractViolation(violations));
                }
            }
        }
        let attempt = AttemptRef { owner: owner.clone(), job_id, number };
        // Another owner's log names an operator by its role alone: its key's
        // id would give that owner a handle on it.
        let key = (owner == caller.owner).then_some(caller.key);
        let resolved = Resolved { reason, key, role: Some(caller.role) };
        let transition = self.store.resolve_unknown(&attempt, &resolution, &resolved, self.catalog.as_ref()).await?;
        tracing::info!(owner = %owner, by = %caller.owner, role = %caller.role, key = %caller.key, job.id = %job_id,
                       attempt.number = number, outcome = ?transition, %reason, "an unknown attempt was resolved by hand");
        match transition {
            Transition::NotFound => return Err(JobError::NotFound),
            Transition::Stale(state) | Transition::Fenced(state) => return Err(JobError::AttemptNotUnknown(state)),
            Transition::Failed { next: Some(next) } => self.signals.work_available_after(next.delay),
            // The job is won: its calls still in flight here stop.
            Transition::Won { .. } => self.signals.job_finished(job_id),
            Transition::Failed { next: None } | Transition::Applied | Transition::Lost { .. } => {}
        }
        self.signals.job_changed(job_id);
        let job = self.read_job(&owner, job_id).await?.ok_or(JobError::NotFound)?;
        ResolveAnswer::for_caller(job, number, &caller.owner).ok_or(JobError::NotFound)
    }

    /// Cancels one of `owner`'s jobs unless it succeeded: pending attempts
    /// are canceled; running ones have their calls aborted (the task's
    /// `cancel_losers`) or finish, and are never applied. Canceling a
    /// canceled job changes nothing and answers the same.
    pub async fn cancel_job(&self, owner: &OwnerId, id: JobId) -> Result<Job, JobError> {
        match self.store.cancel_job(owner, id, self.catalog.as_ref()).await? {
            Cancel::Canceled(job) => {
                tracing::info!(owner = %owner, job.id = %id, "job canceled");
                metrics::attempts_canceled(
                    job.attempts.iter().filter(|a| a.state == crate::domain::AttemptState::Canceled).count(),
                );
                self.signals.job_changed(id);
                self.signals.job_finished(id);
                Ok(self.with_task_rules(job))
            }
            Cancel::AlreadyCanceled(job) => Ok(self.with_task_rules(job)),
            Cancel::Succeeded(_) => Err(JobError::JobSucceeded),
            Cancel::NotFound => Err(JobError::NotFound),
        }
    }

    /// Erases one of `owner`'s finished jobs now, with its attempts, events
    /// and deliveries (`DELETE /jobs/{id}`); its usage stays in the rollup,
    /// and its key is free. [`JobError::JobNotFinished`] while it is not
    /// finished or an attempt of it is open.
    pub async fn erase_job(&self, owner: &OwnerId, id: JobId) -> Result<(), JobError> {
        match self.store.erase_job(owner, id).await? {
            Erasure::Erased => {
                tracing::info!(owner = %owner, job.id = %id, "job erased");
                if let Some(files) = &self.files {
                    files.remove(&[id]).await;
                }
                metrics::purged(1);
                self.signals.job_changed(id);
                Ok(())
            }
            Erasure::NotFinished(state) => Err(JobError::JobNotFinished(state)),
            Erasure::NotFound => Err(JobError::NotFound),
        }
    }

    /// A job as the store has it, with when it expires.
    async fn read_job(&self, owner: &OwnerId, id: JobId) -> crate::store::Result<Option<Job>> {
        Ok(self.store.get_job(owner, id).await?.map(|job| self.with_task_rules(job)))
    }

    /// The job with what its task's rules say of it now: when it expires
    /// (its retention) and which attempts are being canceled (its
    /// `cancel_losers`).
    fn with_task_rules(&self, mut job: Job) -> Job {
        job.expires_at = crate::domain::retention::expires_at(&job, self.catalog.retention_of(&job.task));
        let attempts = job.attempts.iter().map(|a| (a.number, a.state));
        job.canceling =
            crate::domain::attempts_being_canceled(job.state, attempts, self.catalog.cancels_losers(&job.task));
        job
    }

    /// One of `owner`'s jobs, read by a read that began after this call
    /// (concurrent readers of one job share it).
    pub async fn get_job(&self, owner: &OwnerId, id: JobId) -> Result<Arc<Job>, JobError> {
        self.reads.read(owner, id, || self.read_job(owner, id)).await?.ok_or(JobError::NotFound)
    }

    /// The job with why it waits, when it is `queued` (a read of its
    /// pending attempt and the limits it counts against); as it is
    /// otherwise, or when that read fails.
    pub async fn with_waiting(&self, job: Arc<Job>) -> Arc<Job> {
        if job.state != crate::domain::JobState::Queued {
            return job;
        }
        match self.store.waiting_facts(&job.owner, job.id).await {
            Ok(Some(facts)) => {
                let mut waiting = (*job).clone();
                waiting.waiting = Some(facts.reason(&self.limits));
                Arc::new(waiting)
            }
            Ok(None) => job,
            Err(error) => {
                tracing::warn!(%error, "reading why a queued job waits failed; answered without it");
                job
            }
        }
    }

    /// Ends every long-poll and event stream open in this process, and
    /// any opened from now on: the server is stopping (clients resume on
    /// another replica with their ETag or `Last-Event-ID`).
    pub fn stop_long_polls(&self) {
        self.long_polls.stop();
    }

    /// Ends the long-polls and event streams `key` holds: it was revoked or
    /// changed.
    pub fn end_long_polls_of(&self, key: Uuid) {
        self.long_polls.end_key(key);
    }
}

fn unwatched<'a>(keyed: MadeOrFound<Arc<Job>>) -> (MadeOrFound<Arc<Job>>, Option<JobWatch<'a>>) {
    (keyed, None)
}

fn replayed(job: Arc<Job>) -> MadeOrFound<Arc<Job>> {
    metrics::job_request(metrics::JOBS_REPLAYED, &job.task);
    MadeOrFound { value: job, replayed: true }
}

/// The intent of `request`, whose budget is written `max_cost`.
fn intent_of<'a>(request: &'a JobRequest, max_cost: Option<&'a str>) -> JobIntent<'a> {
    JobIntent { task: &request.task, input: &request.input, provider: request.provider.as_deref(), max_cost }
}

/// The answer to a request whose key a job holds: a replay when the job was
/// made for this intent, a reused key otherwise.
fn answer_taken(intent: JobIntent<'_>, job: Arc<Job>) -> Result<MadeOrFound<Arc<Job>>, JobError> {
    if intent.made(job.fingerprint, &job.provider) { Ok(replayed(job)) } else { Err(key_reused(&job.task, job.id)) }
}

fn key_reused(task: &str, job_id: JobId) -> JobError {
    metrics::job_request(metrics::JOBS_CONFLICTED, task);
    JobError::JobKeyReused { job_id }
}
