-- The core schema: jobs, their attempts, their audit log, and API keys.
-- Every primary and unique key leads with owner_id, so the schema can be
-- distributed by owner without change.

create table api_keys (
    owner_id    text not null,
    id          uuid not null,
    token_hash  bytea not null check (length(token_hash) = 32),
    created_at  timestamptz not null default now(),
    revoked_at  timestamptz,
    primary key (owner_id, id)
);
-- Authentication looks keys up by hash alone.
create index api_keys_token_hash on api_keys (token_hash) where revoked_at is null;
create index api_keys_id on api_keys (id);

create table jobs (
    owner_id         text not null,
    id               uuid not null,
    idempotency_key  text not null,
    fingerprint      bytea not null check (length(fingerprint) = 32),
    task             text not null,
    input            jsonb not null,
    provider         text not null,
    state            text not null
        check (state in ('queued', 'running', 'unknown', 'failed', 'succeeded', 'canceled')),
    winning_attempt  integer,
    result           jsonb,
    created_at       timestamptz not null,
    updated_at       timestamptz not null,
    primary key (owner_id, id),
    -- I1: this constraint, and nothing else, decides whether a key is new.
    constraint jobs_owner_idempotency_key unique (owner_id, idempotency_key),
    -- I3: a succeeded job has exactly one winner and a result; no other has.
    constraint jobs_winner_iff_succeeded
        check ((state = 'succeeded') = (winning_attempt is not null))
);
create index jobs_owner_state on jobs (owner_id, state, id);
create index jobs_owner_task on jobs (owner_id, task, id);

create table attempts (
    owner_id             text not null,
    job_id               uuid not null,
    number               integer not null check (number >= 1),
    id                   uuid not null,
    provider             text not null,
    state                text not null
        check (state in ('pending', 'running', 'succeeded', 'failed', 'unknown', 'superseded', 'canceled')),
    origin               text not null check (origin in ('client', 'policy')),
    idempotency_key      text,
    worker               text,
    lease_until          timestamptz,
    output               jsonb,
    error                jsonb,
    -- A pending attempt is not claimed before this (retry backoff).
    not_before           timestamptz not null,
    -- An unknown attempt is not asked about again before this.
    reconcile_after      timestamptz,
    reconcile_count      integer not null default 0,
    created_at           timestamptz not null,
    started_at           timestamptz,
    finished_at          timestamptz,
    primary key (owner_id, job_id, number),
    foreign key (owner_id, job_id) references jobs (owner_id, id),
    constraint attempts_owner_id unique (owner_id, id),
    -- The attempts POST scopes its idempotency key to the job.
    constraint attempts_job_idempotency_key unique (owner_id, job_id, idempotency_key)
);
-- At most one pending attempt per job. Several may be unknown at once: two
-- racing attempts can both time out.
create unique index attempts_one_pending_per_job on attempts (owner_id, job_id) where state = 'pending';
-- What workers claim, oldest due first.
create index attempts_claimable on attempts (not_before) where state = 'pending';
-- What the reaper looks at.
create index attempts_leased on attempts (lease_until) where state = 'running';
-- What the reconciler looks at.
create index attempts_unknown on attempts (reconcile_after) where state = 'unknown';

create table job_events (
    owner_id        text not null,
    job_id          uuid not null,
    id              bigint generated always as identity,
    at              timestamptz not null default now(),
    kind            text not null,
    attempt_number  integer,
    detail          jsonb not null default '{}',
    primary key (owner_id, job_id, id),
    foreign key (owner_id, job_id) references jobs (owner_id, id)
);

-- The audit log is append-only.
create function job_events_append_only() returns trigger
language plpgsql as $$
begin
    raise exception 'job_events is append-only';
end
$$;
create trigger job_events_append_only
    before update or delete or truncate on job_events
    for each statement execute function job_events_append_only();
