//! The SQL of the SQLite store, statement by statement, under the same
//! names as Postgres's. State names are written into the statements from
//! the enums when each is first built wherever a statement filters attempts
//! by state: so that a partial index can match, and because the bundled
//! SQLite (3.46.0) crashes on an `update … returning` whose `where state = ?`
//! is a bound parameter on this table (seen in [`CANCEL_PENDING_ATTEMPTS`]). Elsewhere
//! (states a row is set to) they are bound as parameters.

use std::sync::LazyLock;

use crate::store::rows::names::*;
use crate::store::rows::{ATTEMPT_COLUMNS, select_job_where};
use crate::store::usage::usage_assignments;

pub(super) static GET_JOB: LazyLock<String> = LazyLock::new(|| select_job_where("j.owner_id = ?1 and j.id = ?2"));
pub(super) static FIND_JOB_BY_KEY: LazyLock<String> =
    LazyLock::new(|| select_job_where("j.owner_id = ?1 and j.idempotency_key = ?2"));

/// The jobs that finished (won, or were canceled) while attempts of theirs
/// run under worker ?1's leases (the `attempts_leased` partial index).
pub(super) static FINISHED_JOBS_RUNNING_ON: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select distinct a.job_id from attempts a
           join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where a.state = '{RUNNING}' and a.worker = ?1
             and j.state in ({terminal})"#,
        terminal = JOB_TERMINAL.as_str()
    )
});

/// The compare-and-swap of a settlement: only a job that has not finished
/// takes a winner. Binds: state, winning attempt, result, now, owner, job.
pub(super) static SETTLE_JOB: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update jobs set state = ?1, winning_attempt = ?2, result = ?3, updated_at = ?4
           where owner_id = ?5 and id = ?6 and state not in ({terminal})"#,
        terminal = JOB_TERMINAL.as_str()
    )
});

/// Running attempts past their lease (the `attempts_leased` partial index).
pub(super) static EXPIRED_LEASES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id, job_id, number from attempts
           where state = '{RUNNING}' and lease_until < ?1
           order by lease_until
           limit ?2"#
    )
});

/// Whether any unknown attempt of the providers is due for a status
/// lookup. Binds: providers (a JSON array), now.
pub(super) static ANY_DUE_UNKNOWN: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select exists (select 1 from attempts
           where state = '{UNKNOWN}' and provider in (select value from json_each(?1)) and reconcile_after <= ?2)"#
    )
});

/// Unknown attempts of the given providers due for a status lookup (the
/// `attempts_unknown` partial index).
pub(super) static CLAIM_RECONCILIATIONS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.id, a.provider, a.reconcile_count, a.finished_at, a.provider_request_id,
                  a.traceparent, a.tracestate, j.task
           from attempts a
           join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where a.state = '{UNKNOWN}' and a.provider in (select value from json_each(?1)) and a.reconcile_after <= ?2
           order by a.reconcile_after
           limit ?3"#
    )
});

/// The metrics gauges (the partial indexes of pending and unknown attempts).
pub(super) static SAMPLE_GAUGES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select
               (select count(*) from attempts where state = '{PENDING}' and not_before <= ?1) as pending_due,
               (select count(*) from attempts where state = '{UNKNOWN}') as unknown_open,
               (select min(finished_at) from attempts where state = '{UNKNOWN}') as oldest"#
    )
});

/// An attempt's outcome, from one of the states it may leave; an unknown
/// one is due for a status lookup at once. Binds: state, error, time,
/// owner, job, number, the states it may leave (a JSON list), whether it
/// becomes unknown, then the usage (`bind_usage`).
pub(super) static SET_ATTEMPT_OUTCOME: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update attempts
           set state = ?1, error = ?2, finished_at = ?3, lease_until = null,
               reconcile_after = case when ?8 then ?3 end, {usage}
           where owner_id = ?4 and job_id = ?5 and number = ?6 and state in (select value from json_each(?7))"#,
        usage = usage_assignments('?', 9, ""),
    )
});

/// An attempt settled with an output, won or superseded. Binds: state,
/// output, time, owner, job, number, the states it may leave (a JSON
/// list), then the usage (`bind_usage`).
pub(super) static SETTLE_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update attempts
           set state = ?1, output = ?2, finished_at = ?3, lease_until = null, reconcile_after = null, {usage}
           where owner_id = ?4 and job_id = ?5 and number = ?6 and state in (select value from json_each(?7))"#,
        usage = usage_assignments('?', 8, ""),
    )
});

/// The owner of an unknown attempt (the `attempts_unknown_by_job` index).
pub(super) static FIND_UNKNOWN_ATTEMPT_OWNER: LazyLock<String> = LazyLock::new(|| {
    format!(r#"select owner_id from attempts where job_id = ?1 and number = ?2 and state = '{UNKNOWN}'"#)
});

/// Unknown attempts of one owner or all, the longest unknown first.
pub(super) static LIST_UNKNOWN_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.provider, j.task, a.finished_at, a.error, a.reconcile_count
           from attempts a join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where (?1 is null or a.owner_id = ?1) and a.state = '{UNKNOWN}'
           order by a.finished_at, a.job_id, a.number
           limit ?2"#
    )
});

/// Where a provider stands for a task's contract with a hash.
pub(super) const QUALIFICATION_STATE: &str = r#"select contract_hash = ?3 as current, passed, created_at,
           json_extract(report, '$.summary') as summary
    from qualifications
    where provider = ?1 and task = ?2
    order by contract_hash = ?3 desc, created_at desc
    limit 1"#;

/// A live key by its token's hash (an operator is stored as an admin
/// marked `operator`). Binds: hash.
pub(super) const FIND_API_KEY: &str = r#"select owner_id, id, case when operator = 1 then 'operator' else role end as role, token_hash 
    from api_keys where token_hash = ?1 and revoked_at is null"#;

/// A new key. Binds: owner, id, role, hash, time.
pub(super) const INSERT_API_KEY: &str = r#"insert into api_keys (owner_id, id, role, operator, token_hash, created_at)
    values (?1, ?2, case when ?3 = 'operator' then 'admin' else ?3 end, ?3 = 'operator', ?4, ?5)"#;

/// Sets a live key's own `max_in_flight` for its owner (null: none).
/// Binds: key id, limit.
pub(super) const SET_KEY_MAX_IN_FLIGHT: &str =
    r#"update api_keys set max_in_flight = ?2 where id = ?1 and revoked_at is null"#;

/// Every key, or one owner's. Binds: owner or null.
pub(super) const LIST_API_KEYS: &str = r#"select owner_id, id, created_at, revoked_at, case when operator = 1 then 'operator' else role end as role, max_in_flight from api_keys
           where ?1 is null or owner_id = ?1
           order by created_at, id"#;

/// A job's audit log, oldest first. Binds: owner, job.
pub(super) const LIST_EVENTS: &str =
    r#"select id, at, kind, attempt_number, detail from job_events where owner_id = ?1 and job_id = ?2 order by id"#;

/// Reads a job for a piece of its output (the write transaction holds the
/// lock): its state, the attempt whose output it shows and that attempt's
/// state, and the last piece's number. Binds: owner, job.
pub(super) const LOCK_OUTPUT: &str = r#"select j.state, j.output_attempt, a.state as holder_state,
           (select coalesce(max(o.seq), 0) from job_output o where o.owner_id = ?1 and o.job_id = ?2) as last_seq
    from jobs j
    left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id and a.number = j.output_attempt
    where j.owner_id = ?1 and j.id = ?2"#;

/// Makes an attempt the one a job's output shows. Binds: owner, job, number.
pub(super) const SET_OUTPUT_ATTEMPT: &str = r#"update jobs set output_attempt = ?3 where owner_id = ?1 and id = ?2"#;

/// A piece of a job's output. Binds: owner, job, seq, attempt number, kind, text.
pub(super) const INSERT_OUTPUT: &str = r#"insert into job_output (owner_id, job_id, seq, attempt_number, kind, text)
    values (?1, ?2, ?3, ?4, ?5, ?6)"#;

/// A job's output after a piece, in order. Binds: owner, job, after.
pub(super) const LIST_OUTPUT: &str = r#"select seq, attempt_number, kind, text from job_output
    where owner_id = ?1 and job_id = ?2 and seq > ?3 order by seq"#;

/// Every (provider, task) pair with a qualification run, in order.
pub(super) const LIST_QUALIFIED_PAIRS: &str =
    r#"select distinct provider, task from qualifications order by provider, task"#;

/// The latest qualification of a provider for a task. Binds: provider, task.
pub(super) const LATEST_QUALIFICATION: &str = r#"select id, provider, task, contract_hash, passed, report, created_at
    from qualifications
    where provider = ?1 and task = ?2
    order by created_at desc
    limit 1"#;

/// An owner's attempts with usage created in a range. Binds: owner, from, to.
pub(super) const LIST_USAGE: &str = r#"select j.task, a.provider, a.state, a.created_at, a.prompt_tokens,
           a.completion_tokens, a.usage_estimated, a.cache_write_tokens, a.cache_read_tokens, a.predict_ms, a.outputs,
           a.cost as cost, a.currency, a.price_version,
           1 as attempts, coalesce(a.usage_estimated, 0) as estimated_attempts
    from attempts a
    join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
    where a.owner_id = ?1 and a.created_at >= ?2 and a.created_at < ?3 and a.prompt_tokens is not null
    union all
    select r.task, r.provider, r.state, r.day, r.prompt_tokens, r.completion_tokens, r.estimated_attempts > 0,
           r.cache_write_tokens, r.cache_read_tokens, r.predict_ms, r.outputs,
           case when r.currency = '' then null else r.cost end, nullif(r.currency, ''),
           case when r.currency = '' then null else 'rollup' end, r.attempts, r.estimated_attempts
    from usage_rollup r
    where r.owner_id = ?1 and r.day >= ?2 and r.day < ?3
    order by 4"#;

/// A page of jobs, of one owner or every owner. Binds: owner or null, key
/// or null, state or null, task or null, before or null, limit.
pub(super) const BROWSE_JOBS: &str = r#"select owner_id, id, idempotency_key, task, provider, state, winning_attempt,
           created_at, updated_at
    from jobs
    where (?1 is null or owner_id = ?1)
      and (?2 is null or idempotency_key = ?2)
      and (?3 is null or state = ?3)
      and (?4 is null or task = ?4)
      and (?5 is null or id < ?5)
    order by id desc
    limit ?6"#;

/// The owner of a job, of any owner. Binds: job.
pub(super) const FIND_JOB_OWNER: &str = r#"select owner_id from jobs where id = ?1"#;

/// Reads a job for a transition (the write lock the transaction holds
/// keeps it as read until commit), and whether its owner has any webhook
/// subscription. Binds: owner, job.
pub(super) const LOCK_JOB: &str = r#"select state, task, provider, winning_attempt,
           exists (select 1 from webhook_subscriptions s where s.owner_id = ?1) as hooked
    from jobs
    where owner_id = ?1 and id = ?2"#;

/// An attempt's job for a transition (the transaction holds the write
/// lock), with whether its owner has any webhook subscription, who holds
/// the attempt and whether its lease is live. Binds: owner, job, number, time.
pub(super) const LOCK_ATTEMPT_JOB: &str = r#"select j.state, j.task, j.provider, j.winning_attempt,
           exists (select 1 from webhook_subscriptions s where s.owner_id = ?1) as hooked,
           a.state as attempt_state, a.worker, coalesce(a.lease_until > ?4, 0) as lease_live
    from jobs j
    left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id and a.number = ?3
    where j.owner_id = ?1 and j.id = ?2"#;

/// A job's budget and input. Binds: owner, job.
pub(super) const JOB_BUDGET: &str = r#"select max_cost, input from jobs where owner_id = ?1 and id = ?2"#;

/// One attempt's state. Binds: owner, job, number.
/// An attempt that used and cost nothing (never received): zero usage as
/// counted, zero cost if it was priced. Binds: owner, job, number.
pub(super) const FORGET_USAGE: &str = r#"update attempts
    set prompt_tokens = 0, completion_tokens = 0, usage_estimated = 0, cache_write_tokens = 0, cache_read_tokens = 0,
        predict_ms = 0, outputs = 0, cost = case when cost is null then null else '0' end
    where owner_id = ?1 and job_id = ?2 and number = ?3 and prompt_tokens is not null"#;

/// Keeps an unapplied output on its attempt. Binds: owner, job, number, the output's record.
pub(super) const RECORD_UNAPPLIED_OUTPUT: &str =
    r#"update attempts set unapplied_output = ?4 where owner_id = ?1 and job_id = ?2 and number = ?3"#;

pub(super) const ATTEMPT_STATE: &str =
    r#"select state from attempts where owner_id = ?1 and job_id = ?2 and number = ?3"#;

/// The states of a job's attempts. Binds: owner, job.
pub(super) const ATTEMPT_STATES: &str = r#"select state from attempts where owner_id = ?1 and job_id = ?2"#;

/// A job's attempts, by number. Binds: owner, job.
/// Keeps the provider's id of an attempt's request, unless one is kept.
/// Binds: owner, job, number, the id.
pub(super) const RECORD_PROVIDER_REQUEST: &str = r#"update attempts set provider_request_id = ?4
    where owner_id = ?1 and job_id = ?2 and number = ?3 and provider_request_id is null"#;

pub(super) static READ_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(r#"select {ATTEMPT_COLUMNS} from attempts a where a.owner_id = ?1 and a.job_id = ?2 order by a.number"#)
});

/// Cancels a job's pending attempts, with their numbers. Binds: time,
/// owner, job.
pub(super) static CANCEL_PENDING_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update attempts set state = '{CANCELED}', finished_at = ?1
           where owner_id = ?2 and job_id = ?3 and state = '{PENDING}'
           returning number"#
    )
});

/// Claims one pending attempt. Binds: worker, time, lease end, owner, job,
/// number.
pub(super) static START_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update attempts set state = '{RUNNING}', worker = ?1, started_at = ?2, lease_until = ?3
           where owner_id = ?4 and job_id = ?5 and number = ?6 and state = '{PENDING}'"#
    )
});

/// Puts off an unknown attempt's next status lookup. Binds: when, owner,
/// job, number.
pub(super) static POSTPONE_RECONCILIATION: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update attempts set reconcile_after = ?1
           where owner_id = ?2 and job_id = ?3 and number = ?4 and state = '{UNKNOWN}'"#
    )
});

/// Jobs `unknown` and unchanged since a time (the `jobs_owner_state` index
/// is per owner; this scans the unknown ones). Binds: the time.
pub(super) static COUNT_UNKNOWN_SINCE: LazyLock<String> =
    LazyLock::new(|| format!("select count(*) from jobs where state = '{JOB_UNKNOWN}' and updated_at < ?1"));

/// A row of the usage rollup. Binds: owner, day, task, provider, state, currency.
pub(super) const ROLLUP_ROW: &str = r#"select attempts, estimated_attempts, prompt_tokens, completion_tokens,
        cache_write_tokens, cache_read_tokens, predict_ms, outputs, cost from usage_rollup
    where owner_id = ?1 and day = ?2 and task = ?3 and provider = ?4 and state = ?5 and currency = ?6"#;

/// Writes a row of the usage rollup. Binds: its key (as [`ROLLUP_ROW`]),
/// attempts, estimated attempts, prompt and completion tokens, cost,
/// cache-write and cache-read tokens, compute time, outputs.
pub(super) const ADD_TO_ROLLUP: &str = r#"insert into usage_rollup (owner_id, day, task, provider, state, currency,
        attempts, estimated_attempts, prompt_tokens, completion_tokens, cost, cache_write_tokens, cache_read_tokens,
        predict_ms, outputs)
    values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
    on conflict (owner_id, day, task, provider, state, currency) do update
    set attempts = excluded.attempts, estimated_attempts = excluded.estimated_attempts,
        prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens, cost = excluded.cost,
        cache_write_tokens = excluded.cache_write_tokens, cache_read_tokens = excluded.cache_read_tokens,
        predict_ms = excluded.predict_ms, outputs = excluded.outputs"#;

/// Stores a job's state. Binds: state, time, owner, job.
pub(super) const SET_JOB_STATE: &str = r#"update jobs set state = ?, updated_at = ? where owner_id = ? and id = ?"#;

/// Inserts a pending attempt. Binds: owner, job, number, id, provider,
/// state, origin, idempotency key, time, not before, traceparent,
/// tracestate.
pub(super) const INSERT_ATTEMPT: &str = r#"insert into attempts (owner_id, job_id, number, id, provider, state, origin,
        idempotency_key, created_at, not_before, traceparent, tracestate)
    values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"#;

/// One attempt, as [`INSERT_ATTEMPT`] made it: SQLite's `returning` cannot
/// name columns through an alias. Binds: owner, job, number.
pub(super) static READ_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(r#"select {ATTEMPT_COLUMNS} from attempts a where a.owner_id = ? and a.job_id = ? and a.number = ?"#)
});

/// Appends a row to a job's audit log. Binds: owner, job, time, kind,
/// attempt number, detail.
pub(super) const APPEND_EVENT: &str =
    r#"insert into job_events (owner_id, job_id, at, kind, attempt_number, detail) values (?, ?, ?, ?, ?, ?)"#;

/// A delivery of a message to each of its owner's live endpoints subscribed
/// to its type. Binds: owner, job, event type, payload, time.
pub(super) const ENQUEUE_WEBHOOK: &str = r#"insert into webhook_deliveries
        (id, owner_id, endpoint_id, job_id, event_type, payload, next_at, created_at)
    select randomblob(16), e.owner_id, e.id, ?2, ?3, ?4, ?5, ?5
    from webhook_subscriptions s
    join webhook_endpoints e on e.owner_id = s.owner_id and e.id = s.endpoint_id and e.disabled_at is null
    where s.owner_id = ?1 and s.event_type = ?3"#;

/// Holds a claimed unknown attempt until its next status lookup, counting
/// the lookup. Binds: when, owner, job, number.
pub(super) const HOLD_RECONCILIATION: &str = r#"update attempts
    set reconcile_after = ?, reconcile_count = reconcile_count + 1
    where owner_id = ? and job_id = ? and number = ?"#;

/// Stores a qualification run. Binds: id, provider, task, contract hash,
/// passed, report, time.
pub(super) const INSERT_QUALIFICATION: &str = r#"insert into qualifications
        (id, provider, task, contract_hash, passed, report, created_at)
    values (?, ?, ?, ?, ?, ?, ?)
    returning id, provider, task, contract_hash, passed, report, created_at"#;

/// Records an attempt's usage and cost. Binds: owner, job, number, then
/// the counts of [`crate::store::usage::bind_counts`].
pub(super) const RECORD_USAGE: &str = r#"update attempts
    set prompt_tokens = ?4, completion_tokens = ?5, usage_estimated = ?6, cost = ?7, currency = ?8,
        price_version = ?9, cache_write_tokens = ?10, cache_read_tokens = ?11, predict_ms = ?12, outputs = ?13
    where owner_id = ?1 and job_id = ?2 and number = ?3"#;
