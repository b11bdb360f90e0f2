-- A key's role: `client` reaches its owner's jobs only; `admin` also reaches
-- providers, qualifications, keys, and any owner's unknown attempts.
alter table api_keys
    add column role text not null default 'client' check (role in ('client', 'admin'));

-- Every server caches the keys it has checked and LISTENs on this channel:
-- any change to a key (revocation, role, deletion), by onejob or by hand,
-- makes every server forget it when the change commits.
create function api_keys_notify_change() returns trigger language plpgsql as $$
begin
    perform pg_notify('onejob_api_keys', old.id::text);
    return null;
end
$$;
create trigger api_keys_changed after update or delete on api_keys
    for each row execute function api_keys_notify_change();

-- An admin resolves another owner's unknown attempt by job id and number.
-- Partial: a row enters it only while unknown, so inserting and claiming
-- attempts never touches it.
create index attempts_unknown_by_job on attempts (job_id, number) where state = 'unknown';
