-- Retention: finished jobs are purged once past their retention; what
-- their attempts used and cost stays here, summed by owner, day (the
-- attempts' creation, UTC, in microseconds), task, provider, state and
-- currency ('' when not priced), for the usage report. The cost is exact
-- decimal text, summed by the program.
create table usage_rollup (
    owner_id           text not null,
    day                integer not null,
    task               text not null,
    provider           text not null,
    state              text not null,
    currency           text not null,
    attempts           integer not null check (attempts >= 0),
    estimated_attempts integer not null check (estimated_attempts >= 0),
    prompt_tokens      integer not null check (prompt_tokens >= 0),
    completion_tokens  integer not null check (completion_tokens >= 0),
    cost               text not null check (typeof(cost) = 'text'),
    primary key (owner_id, day, task, provider, state, currency)
) without rowid;

-- What the purger looks at: finished jobs, oldest change first.
create index jobs_finished on jobs (updated_at) where state in ('succeeded', 'failed', 'canceled');

-- Deleting a job's deliveries finds them by job.
create index webhook_deliveries_job on webhook_deliveries (owner_id, job_id);

-- The audit log stays append-only, except for the purge of finished jobs
-- (retention, erasure), which deletes their events in a transaction that
-- holds this table's one row meanwhile (and deletes it before it commits).
create table purging (marker integer primary key check (marker = 1));
drop trigger job_events_no_delete;
create trigger job_events_no_delete before delete on job_events
when not exists (select 1 from purging)
begin
    select raise(abort, 'job_events is append-only');
end;
