-- Webhooks: an owner's endpoints, the event types each is subscribed to,
-- and the transactional outbox of deliveries. A delivery row is written in
-- the transaction of the transition that causes it (so a rolled-back
-- transition sends nothing and a committed one is never lost) and sent, at
-- least once, by a worker. Times are microseconds since the epoch; ids
-- are 16-byte blobs.
create table webhook_endpoints (
    owner_id         text not null,
    id               blob not null,
    url              text not null,
    description      text,
    -- The signing secret (`whsec_` and base64): needed to sign, so kept as
    -- it is; never shown after it is made, never logged.
    secret           text not null,
    -- The secret before the last rotation, still signing until then.
    previous_secret  text,
    previous_until   integer,
    created_at       integer not null,
    -- Set when a receiver answered 410 Gone, or the endpoint was deleted.
    disabled_at      integer,
    disabled_reason  text,
    primary key (owner_id, id)
);

create table webhook_subscriptions (
    owner_id     text not null,
    endpoint_id  blob not null,
    event_type   text not null,
    primary key (owner_id, endpoint_id, event_type),
    foreign key (owner_id, endpoint_id) references webhook_endpoints (owner_id, id) on delete cascade
);
-- The outbox's insert finds an owner's subscribers of one type.
create index webhook_subscriptions_type on webhook_subscriptions (owner_id, event_type);

create table webhook_deliveries (
    -- The message's id (`webhook-id`): one per event and endpoint, the same
    -- on every retry, so that receivers can drop duplicates.
    id            blob primary key,
    owner_id      text not null,
    endpoint_id   blob not null,
    job_id        blob not null,
    event_type    text not null,
    -- The body, as it is signed and sent on every try.
    payload       text not null,
    state         text not null default 'pending' check (state in ('pending', 'delivered', 'failed')),
    tries         integer not null default 0,
    -- When it is next due (while pending); a claim moves it past its lease.
    next_at       integer not null,
    created_at    integer not null,
    finished_at   integer,
    last_status   integer,
    last_error    text,
    foreign key (owner_id, endpoint_id) references webhook_endpoints (owner_id, id) on delete cascade,
    foreign key (owner_id, job_id) references jobs (owner_id, id)
);
create index webhook_deliveries_due on webhook_deliveries (next_at) where state = 'pending';
create index webhook_deliveries_endpoint on webhook_deliveries (owner_id, endpoint_id, created_at);

-- Each try of a delivery: when, the answer's status, how long, what failed.
create table webhook_tries (
    delivery_id  blob not null references webhook_deliveries (id) on delete cascade,
    number       integer not null,
    at           integer not null,
    status       integer,
    latency_ms   integer not null,
    error        text,
    primary key (delivery_id, number)
);
