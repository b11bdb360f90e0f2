-- The W3C trace context (traceparent, tracestate) of the request that
-- asked for an attempt, so that the work done for it later joins the
-- caller's trace and the provider call carries it onward.
alter table attempts add column traceparent text;
alter table attempts add column tracestate text;
