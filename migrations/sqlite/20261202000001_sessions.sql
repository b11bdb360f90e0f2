-- Dashboard sessions, in the database so that a session outlives a restart
-- and every process on the file honours it. A row holds the SHA-256 of the
-- session's token (the browser's cookie holds the token), never the token;
-- the CSRF token is derived from the session's token and not stored. A
-- session acts as one API key: the key is checked on every request, so a
-- revoked key's sessions are refused (and deleted when presented), and
-- deleting the key deletes them. Times are microseconds since the epoch.
create table dashboard_sessions (
    owner_id      text not null,
    key_id        blob not null,
    token_hash    blob not null check (length(token_hash) = 32),
    created_at    integer not null,
    -- Marked at most once a minute, not on every request.
    last_seen_at  integer not null,
    -- created_at plus the lifetime the session was made with.
    expires_at    integer not null,
    primary key (owner_id, key_id, token_hash),
    foreign key (owner_id, key_id) references api_keys (owner_id, id) on delete cascade
);
-- Every dashboard request finds its session by hash alone.
create index dashboard_sessions_token_hash on dashboard_sessions (token_hash);

-- The first run: `serve` on a database without keys makes one admin key and
-- prints it. Processes starting together on an empty file would each make
-- one; this table's one row decides instead, inserted in the same
-- transaction as the key, so that the key is made and shown at most once.
create table bootstrap (
    id            integer primary key check (id = 1),
    -- The key the first run made; null when keys existed already.
    first_key_id  blob,
    created_at    integer not null
);
-- A database with keys was set up before this table existed.
insert into bootstrap (id, first_key_id, created_at)
    select 1, null, cast(strftime('%s', 'now') as integer) * 1000000 where exists (select 1 from api_keys);
