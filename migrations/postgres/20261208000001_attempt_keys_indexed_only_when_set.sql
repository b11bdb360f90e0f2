-- An attempt's idempotency key is unique within its job only where it is
-- set: most attempts have none (a job's first, the worker's retries and
-- failovers, client attempts posted without a key), and the unique
-- constraint gave each of their row versions an index entry all the same
-- (a new one at creation, at the claim and at the settlement, since none
-- of those updates is a HOT update). The partial unique index keeps the same
-- uniqueness, owner first, for every attempt that has a key.
alter table attempts drop constraint attempts_job_idempotency_key;
create unique index attempts_job_idempotency_key on attempts (owner_id, job_id, idempotency_key)
    where idempotency_key is not null;
