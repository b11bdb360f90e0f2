-- A hedge: an attempt the task's hedge policy races against a running
-- attempt that has not answered in time. SQLite cannot change a check
-- constraint in place: the table is built again with it, its rows copied
-- and its indexes made again. No table refers to attempts.
create table attempts_with_hedges (
    owner_id           text not null,
    job_id             blob not null,
    number             integer not null check (number >= 1),
    id                 blob not null,
    provider           text not null,
    state              text not null
        check (state in ('pending', 'running', 'succeeded', 'failed', 'unknown', 'superseded', 'canceled')),
    origin             text not null check (origin in ('client', 'policy', 'hedge')),
    idempotency_key    text,
    worker             text,
    lease_until        integer,
    output             text,
    error              text,
    not_before         integer not null,
    reconcile_after    integer,
    reconcile_count    integer not null default 0,
    created_at         integer not null,
    started_at         integer,
    finished_at        integer,
    prompt_tokens      integer check (prompt_tokens >= 0),
    completion_tokens  integer check (completion_tokens >= 0),
    usage_estimated    integer check (usage_estimated in (0, 1)),
    cost               text check (typeof(cost) in ('text', 'null')),
    currency           text,
    price_version      text,
    unapplied_output   text,
    provider_request_id text,
    traceparent        text,
    tracestate         text,
    requeues           integer not null default 0,
    primary key (owner_id, job_id, number),
    foreign key (owner_id, job_id) references jobs (owner_id, id),
    constraint attempts_owner_id unique (owner_id, id),
    constraint attempts_job_idempotency_key unique (owner_id, job_id, idempotency_key)
) without rowid;

insert into attempts_with_hedges (
    owner_id, job_id, number, id, provider, state, origin, idempotency_key, worker, lease_until, output, error,
    not_before, reconcile_after, reconcile_count, created_at, started_at, finished_at, prompt_tokens,
    completion_tokens, usage_estimated, cost, currency, price_version, unapplied_output, provider_request_id,
    traceparent, tracestate, requeues)
select owner_id, job_id, number, id, provider, state, origin, idempotency_key, worker, lease_until, output, error,
       not_before, reconcile_after, reconcile_count, created_at, started_at, finished_at, prompt_tokens,
       completion_tokens, usage_estimated, cost, currency, price_version, unapplied_output, provider_request_id,
       traceparent, tracestate, requeues
from attempts;

drop table attempts;
alter table attempts_with_hedges rename to attempts;

create unique index attempts_one_pending_per_job on attempts (owner_id, job_id) where state = 'pending';
create index attempts_claimable on attempts (owner_id, not_before) where state = 'pending';
create index attempts_leased on attempts (lease_until) where state = 'running';
create index attempts_unknown on attempts (reconcile_after) where state = 'unknown';
create index attempts_unknown_by_job on attempts (job_id, number) where state = 'unknown';
create index attempts_owner_counted on attempts (owner_id, created_at) where prompt_tokens is not null;

-- Each provider's breaker, shared by every process: written only when it
-- changes (opened, a probe taken, closed), read by each process every
-- second. No row: closed. `until`: when an open breaker's cool-down ends
-- (null when an operator opened it: open until closed by hand);
-- `probe_until`: when a probing breaker's probe counts as lost. Times in
-- microseconds since the epoch.
create table provider_breakers (
    provider     text primary key,
    state        text not null check (state in ('closed', 'open', 'probing')),
    since        integer not null,
    until        integer,
    probe_until  integer,
    changed_by   text not null check (changed_by in ('worker', 'operator')),
    reason       text not null default ''
) without rowid;
