-- The core schema for the embedded SQLite store: the same tables,
-- constraints and guards as Postgres, by SQLite's means. Ids are 16-byte
-- UUIDv7 blobs, times are microseconds since the Unix epoch (so that they
-- compare as numbers), JSON is text.

create table api_keys (
    owner_id    text not null,
    id          blob not null,
    token_hash  blob not null check (length(token_hash) = 32),
    created_at  integer not null,
    revoked_at  integer,
    primary key (owner_id, id)
);
create index api_keys_token_hash on api_keys (token_hash) where revoked_at is null;
create index api_keys_id on api_keys (id);

create table jobs (
    owner_id         text not null,
    id               blob not null,
    idempotency_key  text not null,
    fingerprint      blob not null check (length(fingerprint) = 32),
    task             text not null,
    input            text not null,
    provider         text not null,
    state            text not null
        check (state in ('queued', 'running', 'unknown', 'failed', 'succeeded', 'canceled')),
    winning_attempt  integer,
    result           text,
    created_at       integer not null,
    updated_at       integer not null,
    primary key (owner_id, id),
    -- I1: this constraint, and nothing else, decides whether a key is new.
    constraint jobs_owner_idempotency_key unique (owner_id, idempotency_key),
    -- I3: a succeeded job has exactly one winner and a result; no other has.
    constraint jobs_winner_iff_succeeded check ((state = 'succeeded') = (winning_attempt is not null))
) without rowid;
create index jobs_owner_state on jobs (owner_id, state, id);
create index jobs_owner_task on jobs (owner_id, task, id);

create table attempts (
    owner_id         text not null,
    job_id           blob not null,
    number           integer not null check (number >= 1),
    id               blob not null,
    provider         text not null,
    state            text not null
        check (state in ('pending', 'running', 'succeeded', 'failed', 'unknown', 'superseded', 'canceled')),
    origin           text not null check (origin in ('client', 'policy')),
    idempotency_key  text,
    worker           text,
    lease_until      integer,
    output           text,
    error            text,
    not_before       integer not null,
    reconcile_after  integer,
    reconcile_count  integer not null default 0,
    created_at       integer not null,
    started_at       integer,
    finished_at      integer,
    primary key (owner_id, job_id, number),
    foreign key (owner_id, job_id) references jobs (owner_id, id),
    constraint attempts_owner_id unique (owner_id, id),
    constraint attempts_job_idempotency_key unique (owner_id, job_id, idempotency_key)
) without rowid;
-- At most one pending attempt per job; several may be unknown at once.
create unique index attempts_one_pending_per_job on attempts (owner_id, job_id) where state = 'pending';
create index attempts_claimable on attempts (not_before) where state = 'pending';
create index attempts_leased on attempts (lease_until) where state = 'running';
create index attempts_unknown on attempts (reconcile_after) where state = 'unknown';

create table job_events (
    id              integer primary key autoincrement,
    owner_id        text not null,
    job_id          blob not null,
    at              integer not null,
    kind            text not null,
    attempt_number  integer,
    detail          text not null default '{}',
    foreign key (owner_id, job_id) references jobs (owner_id, id)
);
create index job_events_job on job_events (owner_id, job_id, id);

-- The audit log is append-only.
create trigger job_events_no_update before update on job_events
begin
    select raise(abort, 'job_events is append-only');
end;
create trigger job_events_no_delete before delete on job_events
begin
    select raise(abort, 'job_events is append-only');
end;
