-- A statement sent with binds is planned once per connection and its plan
-- kept until the tables' statistics change. A connection that first runs
-- it on a new database, before any ANALYZE, sees every index that leads
-- with the owner as equally cheap for a lookup by (owner, id), and may
-- keep one that reads every index entry of the owner until autovacuum's
-- first ANALYZE replans it (a job read through `jobs_owner_task`; a queued
-- job's pending attempt through `attempts_claimable`). Only the index made
-- for such a lookup can serve it now: the others apply only to a query that
-- names their column (their added predicates hold for every row, since the
-- columns are not null). The key's uniqueness is unchanged: the same unique
-- index, owner first, that `insert … on conflict (owner_id,
-- idempotency_key) where idempotency_key is not null` names.
drop index jobs_owner_task;
create index jobs_owner_task on jobs (owner_id, task, id) where task is not null;
drop index jobs_owner_state;
create index jobs_owner_state on jobs (owner_id, state, id) where state is not null;
alter table jobs drop constraint jobs_owner_idempotency_key;
create unique index jobs_owner_idempotency_key on jobs (owner_id, idempotency_key) where idempotency_key is not null;
drop index attempts_claimable;
create index attempts_claimable on attempts (owner_id, not_before) where state = 'pending' and not_before is not null;
