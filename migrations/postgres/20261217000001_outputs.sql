-- The files an attempt's output held (images, clips), which a price may
-- cost per output (null where the attempt recorded no usage).
alter table attempts
    add column outputs bigint check (outputs >= 0);

alter table usage_rollup
    add column outputs bigint not null default 0 check (outputs >= 0);
