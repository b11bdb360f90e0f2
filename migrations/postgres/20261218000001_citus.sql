-- On Citus (docs/scaling.md), `onejob migrate` distributes the tables,
-- which copies each table's rows to its shards and leaves them behind,
-- unseen, in the coordinator's own table; it then truncates that table, in
-- a transaction that says so as the purge does (`set local onejob.purging
-- = 'on'`). The event log's guard lets that transaction truncate as it
-- lets the purge delete.
create or replace function job_events_append_only() returns trigger
language plpgsql as $$
begin
    if tg_op in ('DELETE', 'TRUNCATE') and current_setting('onejob.purging', true) = 'on' then
        return null;
    end if;
    raise exception 'job_events is append-only';
end
$$;

-- On Citus, api_keys is a reference table: a change runs this trigger on
-- every node's copy. Only the coordinator's sessions listen, and a
-- worker's part of a change, prepared for a two-phase commit, may not
-- NOTIFY: the coordinator (group 0) alone tells.
create or replace function api_keys_notify_change() returns trigger language plpgsql as $$
begin
    if to_regclass('pg_catalog.pg_dist_local_group') is not null then
        if (select groupid from pg_catalog.pg_dist_local_group) <> 0 then
            return null;
        end if;
    end if;
    perform pg_notify('onejob_api_keys', old.id::text);
    return null;
end
$$;
