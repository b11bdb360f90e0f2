-- A hedge: an attempt the task's hedge policy races against a running
-- attempt that has not answered in time.
alter table attempts drop constraint attempts_origin_check;
alter table attempts add constraint attempts_origin_check check (origin in ('client', 'policy', 'hedge'));

-- Each provider's breaker, shared by every process: written only when it
-- changes (opened, a probe taken, closed), read by each process every
-- second. No row: closed. `until`: when an open breaker's cool-down ends
-- (null when an operator opened it: open until closed by hand);
-- `probe_until`: when a probing breaker's probe counts as lost.
create table provider_breakers (
    provider     text primary key,
    state        text not null check (state in ('closed', 'open', 'probing')),
    since        timestamptz not null,
    until        timestamptz,
    probe_until  timestamptz,
    changed_by   text not null check (changed_by in ('worker', 'operator')),
    reason       text not null default ''
);
