-- Of an attempt's prompt tokens, those written to and read from the
-- provider's prompt cache, which a price may cost at rates of their own
-- (null where the provider said nothing of its cache: none).
alter table attempts
    add column cache_write_tokens bigint check (cache_write_tokens >= 0),
    add column cache_read_tokens  bigint check (cache_read_tokens >= 0);

alter table usage_rollup
    add column cache_write_tokens bigint not null default 0 check (cache_write_tokens >= 0),
    add column cache_read_tokens  bigint not null default 0 check (cache_read_tokens >= 0);
