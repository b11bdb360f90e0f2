//! The SQL of the Postgres store, statement by statement. State names are
//! written into the statements from the enums when each is first built, so
//! that the ones that must match a partial index (`where state =
//! 'pending'`) can; elsewhere they are bound as parameters.

use std::sync::LazyLock;

use crate::domain::{AttemptOrigin, AttemptState, EventKind, JobState};

pub(super) const JOB_COLUMNS: &str = r#"j.owner_id, j.id, j.idempotency_key, j.fingerprint, j.task, j.input, j.provider,
    j.state, j.winning_attempt, j.result, j.created_at, j.updated_at, j.max_cost::text as max_cost"#;

pub(super) const ATTEMPT_COLUMNS: &str = r#"a.number as a_number, a.id as a_id, a.provider as a_provider, a.state as a_state,
    a.origin as a_origin, a.idempotency_key as a_idempotency_key, a.worker as a_worker,
    a.lease_until as a_lease_until, a.output as a_output, a.error as a_error,
    a.created_at as a_created_at, a.not_before as a_not_before, a.started_at as a_started_at,
    a.finished_at as a_finished_at, a.prompt_tokens as a_prompt_tokens,
    a.completion_tokens as a_completion_tokens, a.usage_estimated as a_usage_estimated,
    a.cost::text as a_cost, a.currency as a_currency, a.price_version as a_price_version"#;

/// The statements of the hot path, public so that `bench/ceiling.sh` runs
/// exactly these under pgbench (`onejob bench-sql`).
///
/// Creating a job: one statement inserts the job, its first attempt and its
/// event; a taken key inserts nothing (I1). Binds: owner, job id, key,
/// fingerprint, task, input, provider, first attempt id, budget (text or null).
pub static CREATE_JOB: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with new_job as (
        insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider,
                          state, created_at, updated_at, max_cost)
        values ($1, $2, $3, $4, $5, $6, $7, '{queued}', now(), now(), $9::numeric)
        on conflict (owner_id, idempotency_key) do nothing
        returning owner_id, id, created_at
    ), first_attempt as (
        insert into attempts (owner_id, job_id, number, id, provider, state, origin, created_at, not_before)
        select owner_id, id, 1, $8, $7, '{pending}', '{client}', created_at, created_at from new_job
    ), created_event as (
        insert into job_events (owner_id, job_id, at, kind, attempt_number, detail)
        select owner_id, id, created_at, '{created}', 1,
               jsonb_build_object('attempt_id', $8::uuid, 'provider', $7::text)
        from new_job
    )
    select created_at from new_job"#,
        queued = JobState::Queued,
        pending = AttemptState::Pending,
        client = AttemptOrigin::Client.as_str(),
        created = EventKind::JobCreated,
    )
});

/// A job with its attempts, in one statement (one snapshot).
pub(super) fn select_job_where(condition: &str) -> String {
    format!(
        r#"select {JOB_COLUMNS}, {ATTEMPT_COLUMNS}
           from jobs j
           left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id
           where {condition}
           order by a.number"#
    )
}

/// Reading a job by id. Binds: owner, job id.
pub static GET_JOB: LazyLock<String> = LazyLock::new(|| select_job_where("j.owner_id = $1 and j.id = $2"));

/// Reading the job that holds a key. Binds: owner, key.
pub(super) static FIND_JOB_BY_KEY: LazyLock<String> =
    LazyLock::new(|| select_job_where("j.owner_id = $1 and j.idempotency_key = $2"));

/// Settling an attempt with an output, once its job is locked and the
/// attempt's state checked: the compare-and-swap on the job, the attempt
/// settled, the winner's pending siblings canceled, the event. Binds: owner,
/// job id, attempt number, output, the states it may settle from, the
/// `attempt-succeeded` detail (without `canceled`), the `race-lost` detail.
pub(super) static SETTLE_WITH_OUTPUT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
    with won as (
        update jobs set state = '{succeeded}', winning_attempt = $3, result = $4, updated_at = now()
        where owner_id = $1 and id = $2 and state not in ('{succeeded}', '{job_canceled}')
        returning id
    ), settled as (
        update attempts
        set state = case when exists (select from won) then '{succeeded}' else '{superseded}' end,
            output = $4, finished_at = now(), lease_until = null, reconcile_after = null
        where owner_id = $1 and job_id = $2 and number = $3 and state = any($5)
        returning number
    ), canceled as (
        update attempts set state = '{canceled}', finished_at = now()
        where owner_id = $1 and job_id = $2 and number <> $3 and state = '{pending}' and exists (select from won)
        returning number
    ), event as (
        insert into job_events (owner_id, job_id, kind, attempt_number, detail)
        select $1, $2, '{won_event}', $3,
               $6::jsonb || jsonb_build_object('canceled',
                   coalesce((select jsonb_agg(number order by number) from canceled), '[]'))
        where exists (select from won) and exists (select from settled)
        union all
        select $1, $2, '{lost_event}', $3, $7::jsonb
        where not exists (select from won) and exists (select from settled)
    )
    select exists (select from won) as won,
           (select count(*) from settled) as settled,
           coalesce((select array_agg(number order by number) from canceled), '{{}}') as canceled"#,
        succeeded = AttemptState::Succeeded,
        job_canceled = JobState::Canceled,
        superseded = AttemptState::Superseded,
        canceled = AttemptState::Canceled,
        pending = AttemptState::Pending,
        won_event = EventKind::AttemptSucceeded,
        lost_event = EventKind::RaceLost,
    )
});

/// Running attempts past their lease (the `attempts_leased` partial index).
pub(super) static EXPIRED_LEASES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id, job_id, number from attempts
           where state = '{running}' and lease_until < now()
           order by lease_until
           limit $1"#,
        running = AttemptState::Running,
    )
});

/// Claiming due pending attempts (the `attempts_claimable` partial index):
/// they become running under their provider's lease, their jobs running,
/// each with its event. Rows another claimer or a transition holds are
/// skipped, not waited for: claims never block and never take one attempt
/// twice. Binds: how many, worker, default lease (s), provider names, their
/// leases (s).
pub(super) static CLAIM_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with picked as (
               select a.owner_id, a.job_id, a.number
               from attempts a
               join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
               where a.state = '{pending}' and a.not_before <= now()
                 and a.provider = any($4::text[])
                 and j.state not in ('{succeeded}', '{canceled}')
               order by a.not_before
               limit $1
               for update of a, j skip locked
           ), claimed as (
               update attempts a
               set state = '{running}', worker = $2, started_at = now(),
                   lease_until = now() + make_interval(secs => coalesce(
                       (select l.seconds from unnest($4::text[], $5::float8[]) as l(provider, seconds)
                        where l.provider = a.provider),
                       $3))
               from picked p
               where a.owner_id = p.owner_id and a.job_id = p.job_id and a.number = p.number
               returning a.owner_id, a.job_id, a.number, a.id, a.provider, a.lease_until
           ), running_jobs as (
               update jobs j set state = '{job_running}', updated_at = now()
               from claimed c
               where j.owner_id = c.owner_id and j.id = c.job_id
           ), claimed_events as (
               insert into job_events (owner_id, job_id, kind, attempt_number, detail)
               select owner_id, job_id, '{claimed_event}', number,
                      jsonb_build_object('worker', $2::text, 'attempt_id', id, 'lease_until', lease_until)
               from claimed
           )
           select c.owner_id, c.job_id, c.number, c.id, c.provider, c.lease_until, j.task, j.input
           from claimed c
           join jobs j on j.owner_id = c.owner_id and j.id = c.job_id
           order by c.number"#,
        pending = AttemptState::Pending,
        succeeded = JobState::Succeeded,
        canceled = JobState::Canceled,
        running = AttemptState::Running,
        job_running = JobState::Running,
        claimed_event = EventKind::AttemptClaimed,
    )
});

/// Claiming unknown attempts due for a status lookup (the
/// `attempts_unknown` partial index) and holding them. Binds: providers,
/// how many, hold (s).
pub(super) static CLAIM_RECONCILIATIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with due as (
               select owner_id, job_id, number from attempts
               where state = '{unknown}' and provider = any($1) and reconcile_after <= now()
               order by reconcile_after
               limit $2
               for update skip locked
           ), held as (
               update attempts a
               set reconcile_after = now() + make_interval(secs => $3), reconcile_count = a.reconcile_count + 1
               from due d
               where a.owner_id = d.owner_id and a.job_id = d.job_id and a.number = d.number
               returning a.owner_id, a.job_id, a.number, a.id, a.provider, a.reconcile_count,
                         extract(epoch from now() - a.finished_at)::float8 as unknown_for
           )
           select h.*, j.task from held h join jobs j on j.owner_id = h.owner_id and j.id = h.job_id"#,
        unknown = AttemptState::Unknown,
    )
});

/// The metrics gauges (the partial indexes of pending and unknown attempts).
pub(super) static SAMPLE_GAUGES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select
               (select count(*) from attempts where state = '{pending}' and not_before <= now()) as pending_due,
               (select count(*) from attempts where state = '{unknown}') as unknown_open,
               coalesce(extract(epoch from now() - (select min(finished_at) from attempts where state = '{unknown}')),
                        0)::float8 as oldest"#,
        pending = AttemptState::Pending,
        unknown = AttemptState::Unknown,
    )
});

/// The owner of an unknown attempt (the `attempts_unknown_by_job` index).
pub(super) static FIND_UNKNOWN_ATTEMPT_OWNER: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id from attempts where job_id = $1 and number = $2 and state = '{unknown}'"#,
        unknown = AttemptState::Unknown,
    )
});

/// Unknown attempts of one owner or all, the longest unknown first.
pub(super) static LIST_UNKNOWN_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.provider, j.task, a.finished_at, a.error, a.reconcile_count
           from attempts a join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where ($1::text is null or a.owner_id = $1) and a.state = '{unknown}'
           order by a.finished_at, a.job_id, a.number
           limit $2"#,
        unknown = AttemptState::Unknown,
    )
});

/// Where a provider stands for a task's contract with a hash.
pub(super) const QUALIFICATION_STATE: &str = r#"select contract_hash = $3 as current, passed, created_at, report ->> 'summary' as summary
    from qualifications
    where provider = $1 and task = $2
    order by contract_hash = $3 desc, created_at desc
    limit 1"#;

