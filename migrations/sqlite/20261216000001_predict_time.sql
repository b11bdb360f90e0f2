-- A GPU provider's compute time for an attempt, in milliseconds (Cog's and
-- Replicate's metrics.predict_time), which a price may cost per second
-- (null where the provider said nothing of it).
alter table attempts add column predict_ms integer check (predict_ms >= 0);

alter table usage_rollup add column predict_ms integer not null default 0 check (predict_ms >= 0);
