//! The SQL of the Postgres store, statement by statement. State names are
//! written into the statements from the enums when each is first built, so
//! that the ones that must match a partial index (`where state =
//! 'pending'`) can; elsewhere they are bound as parameters.

use std::sync::LazyLock;

use crate::store::rows::names::*;
use crate::store::rows::{ATTEMPT_COLUMNS, JOB_COLUMNS, select_job_where};
use crate::store::usage::usage_assignments;

/// The statements of the hot path, public so that `bench/ceiling.sh` runs
/// exactly these under pgbench (`onejob bench-sql`).
///
/// Creating jobs of one owner: one statement inserts each job, its first
/// attempt and its event; a taken key inserts nothing for its job (I1).
/// Every row's owner is the bound `$1` itself, so that a sharded database
/// routes the whole statement by its value (docs/scaling.md). Binds: owner,
/// then one array each, a job an element: job ids, keys, fingerprints,
/// tasks, inputs, providers, first attempt ids, budgets (text or null),
/// traceparents, tracestates, the first attempts' providers. Answers the id
/// and creation time of each job it inserted.
pub(super) static CREATE_JOBS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with input as (
        select * from unnest($2::uuid[], $3::text[], $4::bytea[], $5::text[], $6::jsonb[], $7::text[], $8::uuid[],
                             $9::text[], $10::text[], $11::text[], $12::text[])
            as i(id, idempotency_key, fingerprint, task, input, provider, attempt_id, max_cost, traceparent,
                 tracestate, first_provider)
    ), new_job as (
        insert into jobs (owner_id, id, idempotency_key, fingerprint, task, input, provider,
                          state, created_at, updated_at, max_cost)
        select $1, id, idempotency_key, fingerprint, task, input, provider, '{JOB_QUEUED}', now(), now(),
               max_cost::numeric
        from input
        on conflict (owner_id, idempotency_key) where idempotency_key is not null do nothing
        returning id, created_at
    ), first_attempt as (
        insert into attempts (owner_id, job_id, number, id, provider, state, origin, created_at, not_before,
                              traceparent, tracestate)
        select $1, n.id, 1, i.attempt_id, i.first_provider, '{PENDING}', '{ORIGIN_CLIENT}', n.created_at,
               n.created_at, i.traceparent, i.tracestate
        from new_job n join input i on i.id = n.id
    ), created_event as (
        insert into job_events (owner_id, job_id, at, kind, attempt_number, detail)
        select $1, n.id, n.created_at, '{EVENT_JOB_CREATED}', 1,
               jsonb_build_object('attempt_id', i.attempt_id, 'provider', i.first_provider)
        from new_job n join input i on i.id = n.id
    )
    select id, created_at from new_job"#
    )
});

/// Reading a job by id. Binds: owner, job id.
pub(super) static GET_JOB: LazyLock<String> = LazyLock::new(|| select_job_where("j.owner_id = $1 and j.id = $2"));

/// Reading several of one owner's jobs by id, in one snapshot (a group of
/// reads: `reads`), each job and its attempts by their primary keys, as
/// [`LOCK_ATTEMPT_JOBS`] reads them: a subquery run once an id (`offset 0`
/// keeps the planner from merging it into a join). (With `j.id = any($2)`,
/// a plan made before the tables' first ANALYZE took the owner's rows for
/// a few and read them all, filtering by id: 4 ms a group in a run of a
/// thousand jobs.) Binds: owner, job ids (distinct: an id given twice
/// answers its rows twice).
pub(super) static GET_JOBS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select {JOB_COLUMNS}, {ATTEMPT_COLUMNS}
           from unnest($2::uuid[]) as wanted(id)
           cross join lateral (select * from jobs j where j.owner_id = $1 and j.id = wanted.id offset 0) j
           left join lateral (
               select * from attempts a where a.owner_id = $1 and a.job_id = wanted.id offset 0
           ) a on true
           order by j.id, a.number"#
    )
});

/// Reading the job that holds a key. Binds: owner, key.
pub(super) static FIND_JOB_BY_KEY: LazyLock<String> =
    LazyLock::new(|| select_job_where("j.owner_id = $1 and j.idempotency_key = $2"));

/// Settling an attempt with an output, once its job is locked and the
/// attempt's state checked: the compare-and-swap on the job, the attempt
/// settled (with its usage), the winner's pending siblings canceled, the
/// event. Binds: owner, job id, attempt number, output, the states it may
/// settle from, the `attempt-succeeded` detail (without `canceled`), the
/// `race-lost` detail, then the usage (`bind_usage`).
pub(super) static SETTLE_WITH_OUTPUT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
    with won as (
        update jobs set state = '{JOB_SUCCEEDED}', winning_attempt = $3, result = $4, updated_at = now()
        where owner_id = $1 and id = $2 and state not in ({terminal})
        returning id
    ), settled as (
        update attempts
        set state = case when exists (select from won) then '{SUCCEEDED}' else '{SUPERSEDED}' end,
            output = $4, finished_at = now(), lease_until = null, reconcile_after = null, {usage}
        where owner_id = $1 and job_id = $2 and number = $3 and state = any($5)
        returning number
    ), canceled as (
        update attempts set state = '{CANCELED}', finished_at = now()
        where owner_id = $1 and job_id = $2 and number <> $3 and state = '{PENDING}' and exists (select from won)
        returning number
    ), event as (
        insert into job_events (owner_id, job_id, kind, attempt_number, detail)
        select $1, $2, '{EVENT_ATTEMPT_SUCCEEDED}', $3,
               $6::jsonb || jsonb_build_object('canceled',
                   coalesce((select jsonb_agg(number order by number) from canceled), '[]'))
        where exists (select from won) and exists (select from settled)
        union all
        select $1, $2, '{EVENT_RACE_LOST}', $3, $7::jsonb
        where not exists (select from won) and exists (select from settled)
    )
    select exists (select from won) as won,
           (select count(*) from settled) as settled,
           coalesce((select array_agg(number order by number) from canceled), '{{}}') as canceled"#,
        terminal = JOB_TERMINAL.as_str(),
        usage = usage_assignments('$', 8, "::numeric"),
    )
});

/// [`SETTLE_WITH_OUTPUT`] for the outputs of one owner's distinct jobs, each
/// job locked and its attempt's state checked: for each, the
/// compare-and-swap on its job, its attempt settled (with its usage), a
/// winner's pending siblings canceled, its event; the answers in the order
/// given (`n`). The outputs end in `limit cardinality($2)`: every one, and
/// a row count the planner reads as one (a limit it cannot read from a
/// generic plan counts for a tenth of its input, an array bound to one for
/// ten elements), so that they drive a nested loop that updates each row
/// found by its primary key. Without it, a generic plan made on tables
/// never analyzed reads all of the owner's jobs and attempts once and joins
/// them to the batch: thousands of rows to settle fifty. (A plan made while
/// a table was nearly empty, before its first ANALYZE, sees any owner's
/// rows as one, as cheap as one lookup, and may read them all, once, until
/// an ANALYZE has it made again: an UPDATE cannot take its rows from a
/// subquery run once a row, as [`LOCK_ATTEMPT_JOBS`] does.) Binds: owner,
/// then one array each, an output an element:
/// job ids, attempt numbers, outputs; the states they may settle from (one
/// list for all); then arrays of the `attempt-succeeded` details (without
/// `canceled`), the `race-lost` details, whether there is a usage, and the
/// usage's columns.
pub(super) static SETTLE_OUTPUTS: LazyLock<String> = LazyLock::new(|| {
    let usage =
        crate::store::usage::assignments_of("i.has_usage", |_, column| format!("i.{column}"), "a.", "::numeric");
    format!(
        r#"
    with input as (
        select * from unnest($2::uuid[], $3::int[], $4::jsonb[], $6::jsonb[], $7::jsonb[], $8::bool[], $9::int8[],
                             $10::int8[], $11::bool[], $12::text[], $13::text[], $14::text[], $15::int8[], $16::int8[],
                             $17::int8[], $18::int8[])
            with ordinality as i(job_id, number, output, won_detail, lost_detail, has_usage, prompt_tokens,
                                 completion_tokens, usage_estimated, cost, currency, price_version,
                                 cache_write_tokens, cache_read_tokens, predict_ms, outputs, n)
        limit cardinality($2)
    ), won as (
        update jobs j set state = '{JOB_SUCCEEDED}', winning_attempt = i.number, result = i.output, updated_at = now()
        from input i
        where j.owner_id = $1 and j.id = i.job_id and j.state not in ({terminal})
        returning j.id
    ), settled as (
        update attempts a
        set state = case when a.job_id in (select id from won) then '{SUCCEEDED}' else '{SUPERSEDED}' end,
            output = i.output, finished_at = now(), lease_until = null, reconcile_after = null, {usage}
        from input i
        where a.owner_id = $1 and a.job_id = i.job_id and a.number = i.number
          and a.state = any($5)
        returning a.job_id
    ), canceled as (
        update attempts a set state = '{CANCELED}', finished_at = now()
        from input i
        where a.owner_id = $1 and a.job_id = i.job_id and a.number <> i.number
          and a.state = '{PENDING}' and a.job_id in (select id from won)
        returning a.job_id, a.number
    ), event as (
        insert into job_events (owner_id, job_id, kind, attempt_number, detail)
        select $1, i.job_id, '{EVENT_ATTEMPT_SUCCEEDED}', i.number,
               i.won_detail || jsonb_build_object('canceled',
                   coalesce((select jsonb_agg(c.number order by c.number) from canceled c where c.job_id = i.job_id), '[]'))
        from input i
        where i.job_id in (select id from won) and i.job_id in (select job_id from settled)
        union all
        select $1, i.job_id, '{EVENT_RACE_LOST}', i.number, i.lost_detail
        from input i
        where i.job_id not in (select id from won) and i.job_id in (select job_id from settled)
    )
    select i.n,
           i.job_id in (select id from won) as won,
           (select count(*) from settled s where s.job_id = i.job_id) as settled,
           coalesce((select array_agg(c.number order by c.number) from canceled c where c.job_id = i.job_id), '{{}}')
               as canceled
    from input i
    order by i.n"#,
        terminal = JOB_TERMINAL.as_str(),
    )
});

/// The jobs that finished (won, or were canceled) while attempts of theirs
/// run under worker $1's leases (the `attempts_leased` partial index).
pub(super) static FINISHED_JOBS_RUNNING_ON: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select distinct a.job_id from attempts a
           join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where a.state = '{RUNNING}' and a.worker = $1
             and j.state in ({terminal})"#,
        terminal = JOB_TERMINAL.as_str()
    )
});

/// Running attempts past their lease (the `attempts_leased` partial index).
pub(super) static EXPIRED_LEASES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select owner_id, job_id, number from attempts
           where state = '{RUNNING}' and lease_until < now()
           order by lease_until
           limit $1"#
    )
});

/// Whether any unknown attempt of the providers is due for a status
/// lookup. Binds: providers.
pub(super) static ANY_DUE_UNKNOWN: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select exists (select 1 from attempts
           where state = '{UNKNOWN}' and provider = any($1) and reconcile_after <= now())"#
    )
});

/// Claiming unknown attempts due for a status lookup (the
/// `attempts_unknown` partial index) and holding them. Binds: providers,
/// how many, hold (s).
pub(super) static CLAIM_RECONCILIATIONS: LazyLock<String> = LazyLock::new(|| claim_reconciliations(None));

/// [`CLAIM_RECONCILIATIONS`] of every owner, or, with `owner` (a
/// parameter such as `$4`), of that owner only, each table pinned to it.
pub(super) fn claim_reconciliations(owner: Option<&str>) -> String {
    let (only, due_owner, held_owner) = match owner {
        Some(owner) => (format!("owner_id = {owner} and "), owner, owner),
        None => (String::new(), "d.owner_id", "h.owner_id"),
    };
    format!(
        r#"with due as (
               select owner_id, job_id, number from attempts
               where {only}state = '{UNKNOWN}' and provider = any($1) and reconcile_after <= now()
               order by reconcile_after
               limit $2
               for update skip locked
           ), held as (
               update attempts a
               set reconcile_after = now() + make_interval(secs => $3), reconcile_count = a.reconcile_count + 1
               from due d
               where a.owner_id = {due_owner} and a.job_id = d.job_id and a.number = d.number
               returning a.owner_id, a.job_id, a.number, a.id, a.provider, a.reconcile_count, a.provider_request_id,
                         a.traceparent, a.tracestate, a.finished_at
           )
           select h.*, extract(epoch from now() - h.finished_at)::float8 as unknown_for, j.task
           from held h join jobs j on j.owner_id = {held_owner} and j.id = h.job_id"#
    )
}

/// The metrics gauges (the partial indexes of pending and unknown attempts).
pub(super) static SAMPLE_GAUGES: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select
               (select count(*) from attempts where state = '{PENDING}' and not_before <= now()) as pending_due,
               (select count(*) from attempts where state = '{UNKNOWN}') as unknown_open,
               coalesce(extract(epoch from now() - (select min(finished_at) from attempts where state = '{UNKNOWN}')),
                        0)::float8 as oldest"#
    )
});

/// The owner of an unknown attempt (the `attempts_unknown_by_job` index).
pub(super) static FIND_UNKNOWN_ATTEMPT_OWNER: LazyLock<String> = LazyLock::new(|| {
    format!(r#"select owner_id from attempts where job_id = $1 and number = $2 and state = '{UNKNOWN}'"#)
});

/// Unknown attempts of one owner or all, the longest unknown first.
pub(super) static LIST_UNKNOWN_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select a.owner_id, a.job_id, a.number, a.provider, j.task, a.finished_at, a.error, a.reconcile_count
           from attempts a join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
           where ($1::text is null or a.owner_id = $1) and a.state = '{UNKNOWN}'
           order by a.finished_at, a.job_id, a.number
           limit $2"#
    )
});

/// Where a provider stands for a task's contract with a hash.
pub(super) const QUALIFICATION_STATE: &str = r#"select contract_hash = $3 as current, passed, created_at, report ->> 'summary' as summary
    from qualifications
    where provider = $1 and task = $2
    order by contract_hash = $3 desc, created_at desc
    limit 1"#;

/// A live key by its token's hash (an operator is stored as an admin
/// marked `operator`). Binds: hash.
pub(super) const FIND_API_KEY: &str = r#"select owner_id, id, case when operator then 'operator' else role end as role, token_hash 
    from api_keys where token_hash = $1 and revoked_at is null"#;

/// A new key. Binds: owner, id, role, hash.
pub(super) const INSERT_API_KEY: &str = r#"insert into api_keys (owner_id, id, role, operator, token_hash)
    values ($1, $2, case when $3::text = 'operator' then 'admin' else $3::text end, $3::text = 'operator', $4)"#;

/// Sets a live key's own `max_in_flight` for its owner (null: none).
/// Binds: key id, limit.
pub(super) const SET_KEY_MAX_IN_FLIGHT: &str =
    r#"update api_keys set max_in_flight = $2 where id = $1 and revoked_at is null"#;

/// Every key, or one owner's. Binds: owner or null.
pub(super) const LIST_API_KEYS: &str = r#"select owner_id, id, created_at, revoked_at, case when operator then 'operator' else role end as role, max_in_flight from api_keys
           where $1::text is null or owner_id = $1
           order by created_at, id"#;

/// A job's audit log, oldest first. Binds: owner, job.
pub(super) const LIST_EVENTS: &str =
    r#"select id, at, kind, attempt_number, detail from job_events where owner_id = $1 and job_id = $2 order by id"#;

/// Locks a job for a piece of its output: its state, the attempt whose
/// output it shows and that attempt's state, and the last piece's number.
/// Binds: owner, job.
pub(super) const LOCK_OUTPUT: &str = r#"select j.state, j.output_attempt, a.state as holder_state,
           (select coalesce(max(o.seq), 0) from job_output o where o.owner_id = $1 and o.job_id = $2) as last_seq
    from jobs j
    left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id and a.number = j.output_attempt
    where j.owner_id = $1 and j.id = $2
    for no key update of j"#;

/// Makes an attempt the one a job's output shows. Binds: owner, job, number.
pub(super) const SET_OUTPUT_ATTEMPT: &str = r#"update jobs set output_attempt = $3 where owner_id = $1 and id = $2"#;

/// A piece of a job's output. Binds: owner, job, seq, attempt number, kind, text.
pub(super) const INSERT_OUTPUT: &str = r#"insert into job_output (owner_id, job_id, seq, attempt_number, kind, text)
    values ($1, $2, $3, $4, $5, $6)"#;

/// A job's output after a piece, in order. Binds: owner, job, after.
pub(super) const LIST_OUTPUT: &str = r#"select seq, attempt_number, kind, text from job_output
    where owner_id = $1 and job_id = $2 and seq > $3 order by seq"#;

/// Every (provider, task) pair with a qualification run, in order.
pub(super) const LIST_QUALIFIED_PAIRS: &str =
    r#"select distinct provider, task from qualifications order by provider, task"#;

/// The latest qualification of a provider for a task. Binds: provider, task.
pub(super) const LATEST_QUALIFICATION: &str = r#"select id, provider, task, contract_hash, passed, report, created_at
    from qualifications
    where provider = $1 and task = $2
    order by created_at desc
    limit 1"#;

/// An owner's attempts with usage created in a range. Binds: owner, from, to.
/// With them, the rollup of purged attempts, a row per day (its start in range).
pub(super) const LIST_USAGE: &str = r#"select j.task, a.provider, a.state, a.created_at, a.prompt_tokens,
           a.completion_tokens, a.usage_estimated, a.cache_write_tokens, a.cache_read_tokens, a.predict_ms, a.outputs,
           a.cost::text as cost, a.currency, a.price_version,
           1::bigint as attempts, (case when a.usage_estimated then 1 else 0 end)::bigint as estimated_attempts
    from attempts a
    join jobs j on j.owner_id = a.owner_id and j.id = a.job_id
    where a.owner_id = $1 and a.created_at >= $2 and a.created_at < $3 and a.prompt_tokens is not null
    union all
    select r.task, r.provider, r.state, r.day, r.prompt_tokens, r.completion_tokens, r.estimated_attempts > 0,
           r.cache_write_tokens, r.cache_read_tokens, r.predict_ms, r.outputs,
           case when r.currency = '' then null else r.cost::text end, nullif(r.currency, ''),
           case when r.currency = '' then null else 'rollup' end, r.attempts, r.estimated_attempts
    from usage_rollup r
    where r.owner_id = $1 and r.day >= $2 and r.day < $3
    order by 4"#;

/// A page of jobs, of one owner or every owner. Binds: owner or null, key
/// or null, state or null, task or null, before or null, limit.
pub(super) const BROWSE_JOBS: &str = r#"select owner_id, id, idempotency_key, task, provider, state, winning_attempt,
           created_at, updated_at
    from jobs
    where ($1::text is null or owner_id = $1)
      and ($2::text is null or idempotency_key = $2)
      and ($3::text is null or state = $3)
      and ($4::text is null or task = $4)
      and ($5::uuid is null or id < $5)
    order by id desc
    limit $6"#;

/// The owner of a job, of any owner. Binds: job.
pub(super) const FIND_JOB_OWNER: &str = r#"select owner_id from jobs where id = $1"#;

/// A job's new state. Binds: owner, job, state.
pub(super) const SET_JOB_STATE: &str =
    r#"update jobs set state = $3, updated_at = now() where owner_id = $1 and id = $2"#;

/// A new attempt of a job. Binds: owner, job, number, id, provider, origin,
/// key or null, delay (s), the pending state, traceparent, tracestate.
pub(super) static INSERT_ATTEMPT: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"insert into attempts as a (owner_id, job_id, number, id, provider, state, origin, idempotency_key,
                                      created_at, not_before, traceparent, tracestate)
           values ($1, $2, $3, $4, $5, $9, $6, $7, now(), now() + make_interval(secs => $8), $10, $11)
           returning {ATTEMPT_COLUMNS}"#
    )
});

/// An event of a job's audit log. Binds: owner, job, kind, attempt number, detail.
pub(super) const APPEND_EVENT: &str =
    r#"insert into job_events (owner_id, job_id, kind, attempt_number, detail) values ($1, $2, $3, $4, $5)"#;

/// A delivery to each live endpoint of the owner subscribed to the event.
/// Binds: owner, job, event type, payload, a new id (a version 7 UUID,
/// random past its time) that each delivery's id is hashed from with its
/// endpoint's. The owner and event are the subscription's own columns and
/// no function is volatile, so that Citus sends the whole statement to the
/// owner's shard.
pub(super) const ENQUEUE_WEBHOOK: &str = r#"insert into webhook_deliveries (id, owner_id, endpoint_id, job_id, event_type, payload)
    select md5($5::text || e.id::text)::uuid, s.owner_id, e.id, $2, s.event_type, $4
    from webhook_subscriptions s
    join webhook_endpoints e on e.owner_id = s.owner_id and e.id = s.endpoint_id and e.disabled_at is null
    where s.owner_id = $1 and s.event_type = $3"#;

/// Locks an attempt's job for a transition, reading whether its owner has
/// any webhook subscription, who holds the attempt and whether its lease
/// is live. Binds: owner, job, number.
pub(super) const LOCK_ATTEMPT_JOB: &str = r#"select j.state, j.task, j.provider, j.winning_attempt,
           exists (select from webhook_subscriptions s where s.owner_id = $1) as hooked,
           a.state as attempt_state, a.worker, coalesce(a.lease_until > now(), false) as lease_live
    from jobs j
    left join attempts a on a.owner_id = j.owner_id and a.job_id = j.id and a.number = $3
    where j.owner_id = $1 and j.id = $2
    for no key update of j"#;

/// [`LOCK_ATTEMPT_JOB`] for several attempts of one owner's distinct
/// jobs, skipping a job locked by another transaction; the jobs are locked
/// in the order given (`n`: each is read and locked by a subquery run once
/// a row of the batch, in its order). Each table is read by its primary
/// key whatever the plan or the statistics: in a subquery run once a row,
/// the key is a condition of the scan itself, which every index path on
/// the key uses whole, where a join to the batch could be planned as one
/// read of all of the owner's rows. The batch ends in `limit
/// cardinality($2)`, so that its generic plan is kept (as
/// [`super::pieces::APPEND_TO_HELD_OUTPUTS`]'s). Binds: owner, job ids,
/// numbers.
pub(super) const LOCK_ATTEMPT_JOBS: &str = r#"select s.n, j.state, j.task, j.provider, j.winning_attempt,
           exists (select from webhook_subscriptions w where w.owner_id = $1) as hooked,
           a.state as attempt_state, a.worker, coalesce(a.lease_until > now(), false) as lease_live
    from (select * from unnest($2::uuid[], $3::int[]) with ordinality as s(job_id, number, n) limit cardinality($2)) s
    cross join lateral (
        select j.state, j.task, j.provider, j.winning_attempt from jobs j
        where j.owner_id = $1 and j.id = s.job_id
        offset 0
    ) j
    left join lateral (
        select a.state, a.worker, a.lease_until from attempts a
        where a.owner_id = $1 and a.job_id = s.job_id and a.number = s.number
        offset 0
    ) a on true
    order by s.n
    for no key update of j skip locked"#;

/// [`LOCK_ATTEMPT_JOB`], skipping a job locked by another transaction.
pub(super) static LOCK_ATTEMPT_JOB_SKIP_LOCKED: LazyLock<String> =
    LazyLock::new(|| format!("{LOCK_ATTEMPT_JOB} skip locked"));

/// An attempt's outcome, from one of the states it may leave; an unknown
/// one is due for a status lookup at once. Binds: owner, job, number, state,
/// error, the states it may leave, whether it becomes unknown, then the
/// usage (`bind_usage`). (`now() + case … end`, not `case when … then
/// now() end`: Citus refuses a function that is not immutable inside a
/// `case` of an update.)
pub(super) static SET_ATTEMPT_OUTCOME: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"update attempts
    set state = $4, error = $5, finished_at = now(), lease_until = null,
        reconcile_after = now() + case when $7 then interval '0 s' end, {usage}
    where owner_id = $1 and job_id = $2 and number = $3 and state = any($6)"#,
        usage = usage_assignments('$', 8, "::numeric"),
    )
});

/// A canceled job's pending attempts, canceled. Binds: owner, job, the
/// pending state, the canceled state.
pub(super) const CANCEL_PENDING_ATTEMPTS: &str = r#"update attempts set state = $4, finished_at = now()
    where owner_id = $1 and job_id = $2 and state = $3
    returning number"#;

/// A page of an owner's jobs. Binds: owner, state or null, task or null,
/// before or null, limit.
pub(super) const LIST_JOBS: &str = r#"select owner_id, id, idempotency_key, task, provider, state, winning_attempt,
           created_at, updated_at
    from jobs
    where owner_id = $1
      and ($2::text is null or state = $2)
      and ($3::text is null or task = $3)
      and ($4::uuid is null or id < $4)
    order by id desc
    limit $5"#;

/// An unknown attempt's next status lookup, later. Binds: owner, job,
/// number, delay (s), the unknown state.
pub(super) const POSTPONE_RECONCILIATION: &str = r#"update attempts set reconcile_after = now() + make_interval(secs => $4)
    where owner_id = $1 and job_id = $2 and number = $3 and state = $5"#;

/// A qualification run's record. Binds: id, provider, task, contract hash,
/// passed, report.
pub(super) const INSERT_QUALIFICATION: &str = r#"insert into qualifications (id, provider, task, contract_hash, passed, report)
    values ($1, $2, $3, $4, $5, $6)
    returning id, provider, task, contract_hash, passed, report, created_at"#;

/// A settled attempt's usage and cost. Binds: owner, job, number, prompt
/// and completion tokens, estimated, cost or null, currency, price version,
/// cache-write and cache-read tokens, compute time, outputs.
pub(super) const RECORD_USAGE: &str = r#"update attempts
    set prompt_tokens = $4, completion_tokens = $5, usage_estimated = $6,
        cost = $7::numeric, currency = $8, price_version = $9, cache_write_tokens = $10, cache_read_tokens = $11,
        predict_ms = $12, outputs = $13
    where owner_id = $1 and job_id = $2 and number = $3"#;

/// Locks a job's row for a transition, reading whether its owner has any
/// webhook subscription. Binds: owner, job.
pub(super) const LOCK_JOB: &str = r#"select state, task, provider, winning_attempt,
           exists (select from webhook_subscriptions s where s.owner_id = $1) as hooked
    from jobs
    where owner_id = $1 and id = $2
    for no key update"#;

/// A job's budget and input. Binds: owner, job.
pub(super) const JOB_BUDGET: &str = r#"select max_cost::text, input from jobs where owner_id = $1 and id = $2"#;

/// One attempt's state. Binds: owner, job, number.
/// An attempt that used and cost nothing (never received): zero usage as
/// counted, zero cost if it was priced. Binds: owner, job, number.
pub(super) const FORGET_USAGE: &str = r#"update attempts
    set prompt_tokens = 0, completion_tokens = 0, usage_estimated = false, cache_write_tokens = 0,
        cache_read_tokens = 0, predict_ms = 0, outputs = 0, cost = case when cost is null then null else 0 end
    where owner_id = $1 and job_id = $2 and number = $3 and prompt_tokens is not null"#;

/// Keeps an unapplied output on its attempt. Binds: owner, job, number, the output's record.
pub(super) const RECORD_UNAPPLIED_OUTPUT: &str =
    r#"update attempts set unapplied_output = $4 where owner_id = $1 and job_id = $2 and number = $3"#;

/// Keeps the provider's id of an attempt's request, unless one is kept.
/// Binds: owner, job, number, the id.
pub(super) const RECORD_PROVIDER_REQUEST: &str = r#"update attempts set provider_request_id = $4
    where owner_id = $1 and job_id = $2 and number = $3 and provider_request_id is null"#;

pub(super) const ATTEMPT_STATE: &str =
    r#"select state from attempts where owner_id = $1 and job_id = $2 and number = $3"#;

/// The states of a job's attempts. Binds: owner, job.
pub(super) const ATTEMPT_STATES: &str = r#"select state from attempts where owner_id = $1 and job_id = $2"#;

/// A job's attempts, by number. Binds: owner, job.
pub(super) static READ_ATTEMPTS: LazyLock<String> = LazyLock::new(|| {
    format!(r#"select {ATTEMPT_COLUMNS} from attempts a where a.owner_id = $1 and a.job_id = $2 order by a.number"#)
});

/// Jobs `unknown` and unchanged since a time, of every owner. A job is
/// unknown only while one of its attempts is: the count starts from the
/// unknown attempts (`attempts_unknown`, few at any time), as no index of
/// jobs holds its state (their rewrites stay HOT). Binds: the time.
pub(super) static COUNT_UNKNOWN_SINCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"select count(*) from jobs j
           where (j.owner_id, j.id) in (select owner_id, job_id from attempts where state = '{UNKNOWN}')
             and j.state = '{JOB_UNKNOWN}' and j.updated_at < $1"#
    )
});

/// Adds to a row of the usage rollup, making it if missing: the sums are
/// added by the statement, so concurrent purges and erasures add up.
/// Binds: owner, day, task, provider, state, currency, attempts, estimated
/// attempts, prompt and completion tokens, cost, cache-write and cache-read
/// tokens, compute time, outputs.
pub(super) const ADD_TO_ROLLUP: &str = r#"insert into usage_rollup (owner_id, day, task, provider, state, currency,
        attempts, estimated_attempts, prompt_tokens, completion_tokens, cost, cache_write_tokens,
        cache_read_tokens, predict_ms, outputs)
    values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::numeric, $12, $13, $14, $15)
    on conflict (owner_id, day, task, provider, state, currency) do update
    set attempts = usage_rollup.attempts + excluded.attempts,
        estimated_attempts = usage_rollup.estimated_attempts + excluded.estimated_attempts,
        prompt_tokens = usage_rollup.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = usage_rollup.completion_tokens + excluded.completion_tokens,
        cache_write_tokens = usage_rollup.cache_write_tokens + excluded.cache_write_tokens,
        cache_read_tokens = usage_rollup.cache_read_tokens + excluded.cache_read_tokens,
        predict_ms = usage_rollup.predict_ms + excluded.predict_ms,
        outputs = usage_rollup.outputs + excluded.outputs,
        cost = usage_rollup.cost + excluded.cost"#;
