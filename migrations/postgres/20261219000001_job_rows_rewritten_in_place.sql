-- A job's row is rewritten twice in its life (claimed, then settled), each
-- time changing `state` and `updated_at`. While an index of jobs held
-- either, in its columns or in its condition, each rewrite added an entry
-- to every index of the table; now none does, so Postgres can rewrite the
-- row in place on its page (a HOT update) and leave the indexes alone.
-- Pages are left three tenths free for those rewrites: at 64 callers a
-- tenth kept 78 % of them HOT, three tenths 92 % (bench/builds.sh).
--
-- What the three indexes served is served otherwise:
-- * a page of an owner's jobs in one state reads the owner's jobs newest
--   first by the primary key, keeping those in the state;
-- * the purge finds finished jobs past their retention among the jobs
--   created before the cutoff (`jobs_created`: a job is created before it
--   finishes);
-- * the count of jobs unknown for long starts from the unknown attempts
--   (`attempts_unknown`): a job is unknown only while one of its attempts is.
--
-- On Citus, which passes a change of a distributed table on to its shards
-- with the text of the statement that made it, a change sent among others
-- in one string is refused ("cannot insert multiple commands into a
-- prepared statement"): each is made by a statement of its own, in a block.
do $$
begin
    drop index jobs_owner_state;
    drop index jobs_finished;
    drop index jobs_unknown;
    create index jobs_created on jobs (created_at);
    alter table jobs set (fillfactor = 70);
end
$$;
