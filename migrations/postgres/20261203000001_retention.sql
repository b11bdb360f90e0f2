-- Retention: finished jobs are purged once past their retention; what
-- their attempts used and cost stays here, summed by owner, day (the
-- attempts' creation, UTC), task, provider, state and currency ('' when not
-- priced), for the usage report.
create table usage_rollup (
    owner_id           text not null,
    day                timestamptz not null,
    task               text not null,
    provider           text not null,
    state              text not null,
    currency           text not null,
    attempts           bigint not null check (attempts >= 0),
    estimated_attempts bigint not null check (estimated_attempts >= 0),
    prompt_tokens      bigint not null check (prompt_tokens >= 0),
    completion_tokens  bigint not null check (completion_tokens >= 0),
    cost               numeric(38, 18) not null,
    primary key (owner_id, day, task, provider, state, currency)
);

-- What the purger looks at: finished jobs, oldest change first.
create index jobs_finished on jobs (updated_at) where state in ('succeeded', 'failed', 'canceled');

-- Deleting a job's deliveries finds them by job.
create index webhook_deliveries_job on webhook_deliveries (owner_id, job_id);

-- The audit log stays append-only, except for the purge of finished jobs
-- (retention, erasure), which deletes their events in a transaction that
-- says so (`set local onejob.purging = 'on'`).
create or replace function job_events_append_only() returns trigger
language plpgsql as $$
begin
    if tg_op = 'DELETE' and current_setting('onejob.purging', true) = 'on' then
        return null;
    end if;
    raise exception 'job_events is append-only';
end
$$;
