-- Sharding onejob's Postgres by owner with Citus: the plan, as statements
-- to run once on the coordinator after `onejob migrate` (docs/scaling.md
-- says what else changes and what was checked). The routing and key tests
-- (tests/it/citus.rs) read this file: every table of the schema is named
-- here exactly once, as distributed by owner_id or as a reference table.

-- The api_keys trigger NOTIFYs key changes and job_events refuses deletes
-- outside a purge; Citus refuses triggers on its tables unless allowed.
set citus.enable_unsafe_triggers = on;

-- Looked up by something other than the owner (a token's hash, a provider),
-- small, and read far more often than written: a copy on every node.
select create_reference_table('api_keys');
select create_reference_table('dashboard_sessions');
select create_reference_table('qualifications');
select create_reference_table('bootstrap');
select create_reference_table('server_secrets');
-- One row per provider, shared by every worker (pauses, request and token
-- buckets): written by the claims of limited providers, so each write goes
-- to every node; with few providers and batched claims that stays small.
select create_reference_table('provider_state');
select create_reference_table('provider_breakers');

-- Everything an owner has, hash-distributed by owner_id and colocated with
-- jobs: one owner's rows of every table live on one shard, so each of the
-- store's per-owner statements is answered by one node.
select create_distributed_table('jobs', 'owner_id');
select create_distributed_table('attempts', 'owner_id', colocate_with => 'jobs');
select create_distributed_table('job_events', 'owner_id', colocate_with => 'jobs');
select create_distributed_table('job_output', 'owner_id', colocate_with => 'jobs');
select create_distributed_table('usage_rollup', 'owner_id', colocate_with => 'jobs');
select create_distributed_table('webhook_endpoints', 'owner_id', colocate_with => 'jobs');
select create_distributed_table('webhook_subscriptions', 'owner_id', colocate_with => 'jobs');
select create_distributed_table('webhook_deliveries', 'owner_id', colocate_with => 'jobs');
select create_distributed_table('webhook_tries', 'owner_id', colocate_with => 'jobs');
