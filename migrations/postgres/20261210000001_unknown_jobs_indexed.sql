-- The purger counts the jobs unknown for longer than the shortest
-- retention every `retention.purge_interval`: an index of the unknown jobs
-- alone (few at any time) keeps that count from reading every job.
create index jobs_unknown on jobs (updated_at) where state = 'unknown';
