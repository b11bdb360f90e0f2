//! Jobs, attempts and audit events as the rest of the program sees them. A
//! job is one intent and never changes its identity; attempts pile up under it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::money::{Cost, Money, Usage};
use super::{AttemptId, AttemptLimits, AttemptState, Fingerprint, JobId, JobState, OwnerId};

/// One intent: what the owner asked for and how it ended.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Job {
    /// The job's id.
    #[schema(value_type = uuid::Uuid)]
    pub id: JobId,
    /// The tenant; not shown to clients, who know it already.
    #[serde(skip)]
    pub owner: OwnerId,
    /// The key the job was created with.
    pub idempotency_key: String,
    /// What the intent was, for replay checks: `sha256:<hex>`.
    #[schema(value_type = String, example = "sha256:7e6ae513…")]
    pub fingerprint: Fingerprint,
    /// The task's name.
    pub task: String,
    /// The task's input, as sent.
    #[schema(value_type = Object)]
    pub input: Value,
    /// The primary provider.
    pub provider: String,
    /// The derived, stored state.
    pub state: JobState,
    /// The number of the attempt that won, once one has.
    pub winning_attempt: Option<i32>,
    /// The winner's output: an object, or for a task whose output schema
    /// is a string schema (prose), a string.
    pub result: Option<Value>,
    /// When the job was accepted.
    pub created_at: DateTime<Utc>,
    /// When its state last changed.
    pub updated_at: DateTime<Utc>,
    /// When this job, finished and with no attempt open, will be purged and
    /// its idempotency key freed (its last change plus its task's
    /// retention); `null` while it is not finished, since such a job is
    /// never purged.
    pub expires_at: Option<DateTime<Utc>>,
    /// The most its attempts may cost together, as the create request set
    /// it (the task's `max_cost` may be lower): a decimal string.
    #[schema(value_type = Option<String>, example = "0.05")]
    pub max_cost: Option<Money>,
    /// What its attempts cost so far: `null` until one has a cost.
    pub cost: Option<JobCost>,
    /// Every attempt, by number.
    pub attempts: Vec<Attempt>,
    /// Why a `queued` job's pending attempt is not running yet (`GET
    /// /jobs/{id}` says; `null` otherwise, and in other answers).
    pub waiting: Option<Waiting>,
    /// The numbers of a canceled job's attempts that are still `running`
    /// and being canceled: their calls are aborted (the task's
    /// `cancel_losers`) and each ends `canceled` as soon as its worker
    /// hears. Empty otherwise.
    pub canceling: Vec<i32>,
}

/// Which attempts of a job in `state` are being canceled: when it is
/// canceled and its task aborts the calls of attempts that can no longer
/// win (`cancel_losers`), those still running; none otherwise.
pub fn attempts_being_canceled(
    state: JobState,
    attempts: impl IntoIterator<Item = (i32, AttemptState)>,
    cancels_losers: bool,
) -> Vec<i32> {
    if state != JobState::Canceled || !cancels_losers {
        return Vec::new();
    }
    attempts.into_iter().filter(|(_, state)| *state == AttemptState::Running).map(|(number, _)| number).collect()
}

/// Whether a job in `state` whose attempts are in `attempts` can change no
/// more under its task's `limits`: it succeeded or was canceled, or failed
/// with no new attempt admissible, and none of its attempts is still open
/// (so its log has every event it will have, the losers' cancellations
/// included). A failed job that may still take a fallback can change.
pub fn can_change_no_more(state: JobState, attempts: &[AttemptState], limits: AttemptLimits) -> bool {
    if attempts.iter().any(|state| super::retention::OPEN.contains(state)) {
        return false;
    }
    match state {
        JobState::Succeeded | JobState::Canceled => true,
        JobState::Failed => super::state::check_states(JobState::Failed, attempts, limits).is_err(),
        JobState::Queued | JobState::Running | JobState::Unknown => false,
    }
}

/// Why a queued job's pending attempt is not running yet, the first that
/// applies, for `GET /jobs/{id}`.
#[derive(Clone, Debug, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct Waiting {
    /// `retry-backoff` (the attempt is not due yet), `provider-paused`
    /// (its provider asked for a pause, or its tokens per minute are
    /// spent), `owner-max-in-flight`, `provider-max-concurrent`,
    /// `provider-requests-per-minute`, or `worker` (due, waiting for a
    /// worker to claim it).
    pub reason: String,
    /// The limit reached, for the `max` and `per-minute` reasons.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Milliseconds until the wait ends, when that is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub for_ms: Option<u64>,
}

/// What a job's attempts cost: the total is the winner's cost plus the
/// waste (attempts that were charged, or may have been, without producing
/// the result: superseded, failed after the provider answered, unknown).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct JobCost {
    /// The currency of every amount.
    pub currency: String,
    /// Every attempt's cost: `winner + waste`. A decimal string.
    #[schema(value_type = String, example = "0.000131")]
    pub total: Money,
    /// The winning attempt's cost (`0` until one wins).
    #[schema(value_type = String, example = "0.000065")]
    pub winner: Money,
    /// The cost of the attempts that did not produce the result.
    #[schema(value_type = String, example = "0.000066")]
    pub waste: Money,
    /// Whether any part is an estimate (an attempt whose usage the provider
    /// never reported).
    pub estimated: bool,
}

impl JobCost {
    /// The cost of these attempts; `None` when none has a cost.
    pub fn of(attempts: &[Attempt]) -> Option<JobCost> {
        let mut cost: Option<JobCost> = None;
        for attempt in attempts {
            let Some(attempt_cost) = &attempt.cost else { continue };
            let sum = cost.get_or_insert_with(|| JobCost {
                currency: attempt_cost.currency.clone(),
                total: Money::ZERO,
                winner: Money::ZERO,
                waste: Money::ZERO,
                estimated: false,
            });
            sum.total += attempt_cost.amount;
            if attempt.state == AttemptState::Succeeded {
                sum.winner += attempt_cost.amount;
            } else {
                sum.waste += attempt_cost.amount;
            }
            sum.estimated |= attempt.usage.is_some_and(|u| u.estimated);
        }
        cost
    }
}

/// A job without its attempts, for listings.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct JobSummary {
    /// The job's id.
    #[schema(value_type = uuid::Uuid)]
    pub id: JobId,
    /// The key the job was created with.
    pub idempotency_key: String,
    /// The task's name.
    pub task: String,
    /// The primary provider.
    pub provider: String,
    /// The derived, stored state.
    pub state: JobState,
    /// The number of the attempt that won, once one has.
    pub winning_attempt: Option<i32>,
    /// When the job was accepted.
    pub created_at: DateTime<Utc>,
    /// When its state last changed.
    pub updated_at: DateTime<Utc>,
}

/// Who started an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttemptOrigin {
    /// The client, by creating the job or posting to its attempts.
    Client,
    /// The task's retry and failover policy.
    Policy,
    /// The task's hedge policy: a second try raced against a running
    /// attempt that has not answered in time.
    Hedge,
}

impl AttemptOrigin {
    /// The name stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            AttemptOrigin::Client => "client",
            AttemptOrigin::Policy => "policy",
            AttemptOrigin::Hedge => "hedge",
        }
    }
}

impl std::str::FromStr for AttemptOrigin {
    type Err = super::state::UnknownState;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "client" => Ok(AttemptOrigin::Client),
            "policy" => Ok(AttemptOrigin::Policy),
            "hedge" => Ok(AttemptOrigin::Hedge),
            _ => Err(super::state::UnknownState(text.to_owned())),
        }
    }
}

/// One try at a job.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Attempt {
    /// 1 for the first attempt, then 2, 3, …
    pub number: i32,
    /// The id sent to the provider as its request and idempotency id (I6).
    #[schema(value_type = uuid::Uuid)]
    pub id: AttemptId,
    /// The provider it runs on.
    pub provider: String,
    /// Where it is in its state machine.
    pub state: AttemptState,
    /// Who started it.
    pub origin: AttemptOrigin,
    /// The key of the request that added it; none for a job's first attempt.
    pub idempotency_key: Option<String>,
    /// The worker holding it while running.
    pub worker: Option<String>,
    /// Until when that worker's claim holds.
    pub lease_until: Option<DateTime<Utc>>,
    /// The output, for succeeded and superseded attempts: an object, or
    /// for a prose task a string.
    pub output: Option<Value>,
    /// What went wrong, for failed and unknown attempts: `{type, message, detail}`.
    #[schema(value_type = Option<Object>)]
    pub error: Option<Value>,
    /// When it was admitted.
    pub created_at: DateTime<Utc>,
    /// Not claimed before this (retry backoff).
    pub not_before: DateTime<Utc>,
    /// When a worker claimed it.
    pub started_at: Option<DateTime<Utc>>,
    /// When it reached a final or unknown state.
    pub finished_at: Option<DateTime<Utc>>,
    /// The tokens it used, as the provider reported them or estimated.
    pub usage: Option<Usage>,
    /// What those tokens cost at the provider's configured price.
    pub cost: Option<Cost>,
    /// An output the provider gave that did not become this attempt's
    /// output, kept for audit and never validated: one that broke the
    /// task's contract, or one that came after the attempt was settled.
    /// `{why, received_at, output}`, or past 64 KiB `{why, received_at,
    /// truncated: true, text}` with the output's first 64 KiB of JSON text.
    #[schema(value_type = Option<Object>)]
    pub unapplied_output: Option<Value>,
    /// The provider's own id of this attempt's request, when it gave one:
    /// a background response's id (`resp_…`), by which it is asked about
    /// and canceled. Kept as soon as the provider answers with it.
    pub provider_request_id: Option<String>,
    /// The W3C trace context (`traceparent`, `tracestate`) of the request
    /// that asked for it (a retry's is its failed attempt's): its work and
    /// its provider call are in that trace.
    pub trace: Option<crate::TraceContext>,
}

/// The error type of an attempt the provider says it never received: it
/// used and cost nothing, and is safe to retry.
pub const NOT_RECEIVED: &str = "not-received";

/// The most of an unapplied output kept on its attempt, in bytes of JSON.
pub const MAX_UNAPPLIED_OUTPUT: usize = 64 * 1024;

/// An output the provider gave that did not become its attempt's output,
/// as kept on the attempt for audit (never validated): `why` it was not
/// applied (`contract-violation`, `late`), when it arrived, and the output
/// itself, or past [`MAX_UNAPPLIED_OUTPUT`] its first bytes of JSON text.
pub fn unapplied_output(why: &str, output: &Value, received_at: DateTime<Utc>) -> Value {
    let text = output.to_string();
    if text.len() <= MAX_UNAPPLIED_OUTPUT {
        return serde_json::json!({ "why": why, "received_at": received_at, "output": output });
    }
    let mut end = MAX_UNAPPLIED_OUTPUT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    serde_json::json!({ "why": why, "received_at": received_at, "truncated": true, "text": &text[..end] })
}

/// What went wrong with an attempt: a stable type and a human message, plus
/// whatever detail the failure carries (a provider's status, a validator's path).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptError {
    /// A stable name, such as `provider-error` or `timeout`.
    #[serde(rename = "type")]
    pub kind: String,
    /// For people.
    pub message: String,
    /// Anything else worth keeping.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

impl AttemptError {
    /// An error with no detail.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self { kind: kind.into(), message: message.into(), detail: Value::Null }
    }
}

/// One row of a job's append-only audit log.
#[derive(Clone, Debug, Serialize)]
pub struct JobEvent {
    /// The event's position in the job's log, increasing.
    pub id: i64,
    /// When it was written.
    pub at: DateTime<Utc>,
    /// What happened: `job-created`, `attempt-admitted`, `race-lost`, …
    pub kind: super::EventKind,
    /// The attempt it concerns, if any.
    pub attempt_number: Option<i32>,
    /// The ids and facts that explain it.
    pub detail: Value,
}

/// A page request over an owner's jobs, newest first.
#[derive(Clone, Debug, Default)]
pub struct JobFilter {
    /// Only jobs in this state.
    pub state: Option<JobState>,
    /// Only jobs of this task.
    pub task: Option<String>,
    /// Only jobs older than this one (the cursor).
    pub before: Option<JobId>,
    /// At most this many.
    pub limit: u32,
}

/// How an operator settles an unknown attempt.
#[derive(Clone, Debug)]
pub enum Resolution {
    /// The provider did the work; this is its output.
    Succeeded(serde_json::Value),
    /// The provider did not do the work.
    Failed,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_job_can_change_no_more_once_finished_with_no_attempt_open_and_none_admissible() {
        use AttemptState::*;
        let limits = AttemptLimits { max_attempts: 3, max_in_flight: 2 };
        let done = |state, attempts: &[AttemptState]| can_change_no_more(state, attempts, limits);
        assert!(done(JobState::Succeeded, &[Succeeded, Canceled]));
        assert!(!done(JobState::Succeeded, &[Succeeded, Running]), "a loser's cancellation is still to come");
        assert!(done(JobState::Canceled, &[Canceled]));
        assert!(!done(JobState::Canceled, &[Running]), "its running attempt is being canceled");
        assert!(!done(JobState::Failed, &[Failed]), "a failed job may still take a fallback");
        assert!(done(JobState::Failed, &[Failed, Failed, Failed]), "its attempts are used up");
        assert!(!done(JobState::Unknown, &[Unknown]));
        assert!(!done(JobState::Running, &[Running]));
    }

    #[test]
    fn only_the_running_attempts_of_a_canceled_job_that_cancels_losers_are_being_canceled() {
        let attempts = [(1, AttemptState::Running), (2, AttemptState::Canceled), (3, AttemptState::Running)];
        assert_eq!(attempts_being_canceled(JobState::Canceled, attempts, true), vec![1, 3]);
        assert!(attempts_being_canceled(JobState::Canceled, attempts, false).is_empty());
        assert!(attempts_being_canceled(JobState::Running, attempts, true).is_empty());
    }

    /// A first attempt on `p` in `state`, with no usage or cost.
    pub(crate) fn attempt(state: AttemptState) -> Attempt {
        Attempt {
            number: 1,
            id: AttemptId::new(),
            provider: "p".into(),
            state,
            origin: AttemptOrigin::Client,
            idempotency_key: None,
            worker: None,
            lease_until: None,
            output: None,
            error: None,
            created_at: Utc::now(),
            not_before: Utc::now(),
            started_at: None,
            finished_at: None,
            usage: None,
            cost: None,
            unapplied_output: None,
            provider_request_id: None,
            trace: None,
        }
    }

    /// A job of owner `demo` in `state` whose attempts, numbered from 1,
    /// are in `attempts`.
    pub(crate) fn job_in(state: JobState, attempts: &[AttemptState]) -> Job {
        let now = Utc::now();
        Job {
            id: JobId::new(),
            owner: OwnerId::from_trusted("demo".into()),
            idempotency_key: "k".into(),
            fingerprint: Fingerprint([0; 32]),
            task: "t".into(),
            input: Value::Null,
            provider: "p".into(),
            state,
            winning_attempt: None,
            result: None,
            created_at: now,
            updated_at: now,
            expires_at: None,
            max_cost: None,
            cost: None,
            attempts: (1..).zip(attempts).map(|(number, &state)| Attempt { number, ..attempt(state) }).collect(),
            waiting: None,
            canceling: Vec::new(),
        }
    }

    fn costed(state: AttemptState, amount: Option<&str>, estimated: bool) -> Attempt {
        let cost =
            |amount: &str| Cost { amount: amount.parse().unwrap(), currency: "USD".into(), price_version: "v1".into() };
        Attempt {
            usage: Some(Usage { prompt_tokens: 1, completion_tokens: 1, estimated, ..Usage::default() }),
            cost: amount.map(cost),
            ..attempt(state)
        }
    }

    #[test]
    fn a_jobs_cost_is_the_winners_plus_the_waste_and_estimated_if_any_part_is() {
        use AttemptState::*;
        let money = |text: &str| text.parse::<Money>().unwrap();
        assert_eq!(JobCost::of(&[costed(Pending, None, false)]), None, "no attempt has a cost yet");
        let cost = JobCost::of(&[
            costed(Superseded, Some("0.25"), false),
            costed(Succeeded, Some("0.5"), false),
            costed(Failed, Some("0.125"), true),
            costed(Canceled, None, true),
        ])
        .unwrap();
        let expected = JobCost {
            currency: "USD".into(),
            total: money("0.875"),
            winner: money("0.5"),
            waste: money("0.375"),
            estimated: true,
        };
        assert_eq!(cost, expected);
        let exact = JobCost::of(&[costed(Succeeded, Some("0.5"), false)]).unwrap();
        assert_eq!((exact.winner, exact.waste, exact.estimated), (money("0.5"), Money::ZERO, false));
    }

    #[test]
    fn attempt_origins_are_stored_by_the_names_the_schema_allows() {
        for (origin, name) in
            [(AttemptOrigin::Client, "client"), (AttemptOrigin::Policy, "policy"), (AttemptOrigin::Hedge, "hedge")]
        {
            assert_eq!(origin.as_str(), name);
            assert_eq!(name.parse::<AttemptOrigin>().unwrap(), origin);
            assert_eq!(serde_json::to_value(origin).unwrap(), name);
        }
        assert!("Client".parse::<AttemptOrigin>().is_err());
    }

    #[test]
    fn an_unapplied_output_is_kept_whole_up_to_64_kib_of_json_and_cut_at_a_character_beyond() {
        let at = Utc::now();
        // A JSON string whose text is its two quotes, `letters` letters and `tail`.
        let string = |letters: usize, tail: &str| Value::String("a".repeat(letters) + tail);
        let whole = string(64 * 1024 - 2, "");
        assert_eq!(
            unapplied_output("late", &whole, at),
            serde_json::json!({"why": "late", "received_at": at, "output": whole})
        );
        let kept = |output: &Value| unapplied_output("contract-violation", output, at);
        let over = kept(&string(64 * 1024 - 1, ""));
        assert_eq!(over["truncated"], true);
        assert_eq!(over["text"].as_str().unwrap().len(), 64 * 1024);
        assert!(over.get("output").is_none());
        // A two-byte character across the limit is left out whole.
        let split = kept(&string(64 * 1024 - 2, "é"));
        let text = split["text"].as_str().unwrap();
        assert_eq!((text.len(), text.ends_with('a')), (64 * 1024 - 1, true));
    }
}
