-- A key's role: `client` reaches its owner's jobs only; `admin` also reaches
-- providers, qualifications, keys, and any owner's unknown attempts.
alter table api_keys
    add column role text not null default 'client' check (role in ('client', 'admin'));

-- An admin resolves another owner's unknown attempt by job id and number.
-- Partial: a row enters it only while unknown.
create index attempts_unknown_by_job on attempts (job_id, number) where state = 'unknown';
