//! The SQL of the SQLite store, statement by statement, under the same
//! names as Postgres's. State names are written into the statements from
//! the enums when each is first built where they must match a partial index;
//! elsewhere they are bound as parameters.

use std::sync::LazyLock;

use crate::domain::{AttemptState, JobState};

pub(super) const JOB_COLUMNS: &str = r#"j.owner_id, j.id, j.idempotency_key, j.fingerprint, j.task, j.input, j.provider,
    j.state, j.winning_attempt, j.result, j.created_at, j.updated_at, j.max_cost as max_cost"#;

pub(super) const ATTEMPT_COLUMNS: &str = r#"a.number as a_number, a.id as a_id, a.provider as a_provider, a.state as a_state,
    a.origin as a_origin, a.idempotency_key as a_idempotency_key, a.worker as a_worker,
    a.lease_until as a_lease_until, a.output as a_output, a.error as a_error,
    a.created_at as a_created_at, a.not_before as a_not_before, a.started_at as a_started_at,
    a.finished_at as a_finished_at, a.prompt_tokens as a_prompt_tokens,
    a.completion_tokens as a_completion_tokens, a.usage_estimated as a_usage_estimated,
    a.cost as a_cost, a.currency as a_currency, a.price_version as a_price_version"#;

/// A job with its attempts, in one statement (one snapshot).
fn select_job_where(condition: &str) -> String {
    format!(
        r#"select {JOB_COLUMNS}, {ATTEMPT_COLUMNS}
           from jobs j
           left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
           where {condition}
           order by a.number"#
    )
}

pub(super) static GET_JOB: LazyLock<String> = LazyLock::new(|| select_job_where("j.owner_id = ?1 and j.id = ?2"));
pub(super) static FIND_JOB_BY_KEY: LazyLock<String> = LazyLock::new(|| select_job_where("j.owner_id = ?1 and j.idempotency_key = ?2"));

/// Running attempts past their lease (the `attempts_leased` partial index).
pub(super) static EXPIRED_LEASES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id, job_id, number from attempts
           where state = '{running}' and lease_until < ?1
           order by lease_until
           limit ?2"#,
        running = AttemptState::Running,
    )
});

/// Due pending attempts of the given providers (the `attempts_claimable`
/// partial index), whose jobs have not finished.
pub(super) static CLAIMABLE: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.id, a.provider, j.task, j.input
           from attempts a
           join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where a.state = '{pending}' and a.not_before <= ?1
             and a.provider in (select value from json_each(?2))
             and j.state not in ('{succeeded}', '{canceled}')
           order by a.not_before
           limit ?3"#,
        pending = AttemptState::Pending,
        succeeded = JobState::Succeeded,
        canceled = JobState::Canceled,
    )
});

/// Unknown attempts of the given providers due for a status lookup (the
/// `attempts_unknown` partial index).
pub(super) static RECONCILABLE: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.id, a.provider, a.reconcile_count, a.finished_at, j.task
           from attempts a
           join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where a.state = '{unknown}' and a.provider in (select value from json_each(?1)) and a.reconcile_after <= ?2
           order by a.reconcile_after
           limit ?3"#,
        unknown = AttemptState::Unknown,
    )
});

/// The metrics gauges (the partial indexes of pending and unknown attempts).
pub(super) static SAMPLE_GAUGES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select
               (select count(*) from attempts where state = '{pending}' and not_before <= ?1) as pending_due,
               (select count(*) from attempts where state = '{unknown}') as unknown_open,
               (select min(finished_at) from attempts where state = '{unknown}') as oldest"#,
        pending = AttemptState::Pending,
        unknown = AttemptState::Unknown,
    )
});

/// The owner of an unknown attempt (the `attempts_unknown_by_job` index).
pub(super) static FIND_UNKNOWN_ATTEMPT_OWNER: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id from attempts where job_id = ?1 and number = ?2 and state = '{unknown}'"#,
        unknown = AttemptState::Unknown,
    )
});

/// Unknown attempts of one owner or all, the longest unknown first.
pub(super) static LIST_UNKNOWN_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.provider, j.task, a.finished_at, a.error, a.reconcile_count
           from attempts a join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where (?1 is null or a.owner_id = ?1) and a.state = '{unknown}'
           order by a.finished_at, a.job_id, a.number
           limit ?2"#,
        unknown = AttemptState::Unknown,
    )
});

/// Where a provider stands for a task's contract with a hash.
pub(super) const QUALIFICATION_STATE: &str = r#"select contract_hash = ?3 as current, passed, created_at,
           json_extract(report, '$.summary') as summary
    from qualifications
    where provider = ?1 and task = ?2
    order by contract_hash = ?3 desc, created_at desc
    limit 1"#;
