-- Claims go owner by owner, each owner's due attempts oldest first: the
-- claimable index leads with the owner (it also finds, one index probe per
-- owner, which owners have pending work).
drop index attempts_claimable;
create index attempts_claimable on attempts (owner_id, not_before) where state = 'pending';

-- How many times each attempt was put back to pending because its provider
-- refused it before doing any work (`[worker] max_requeues` bounds it).
alter table attempts add column requeues integer not null default 0;

-- A key may raise or lower its owner's limit of attempts running at once
-- (`[worker] max_in_flight_per_owner` otherwise); with several live keys
-- setting one, the largest holds.
alter table api_keys add column max_in_flight integer check (max_in_flight > 0);

-- What the workers share about each provider: a pause the provider asked
-- for (a 429 with Retry-After), and the token buckets of its requests and
-- tokens per minute (times in microseconds since the epoch).
create table provider_state (
    provider      text primary key,
    paused_until  integer,
    requests      real,
    requests_at   integer,
    tokens        real,
    tokens_at     integer
) without rowid;
