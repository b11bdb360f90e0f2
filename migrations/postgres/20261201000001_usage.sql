-- Usage and cost per attempt, and a job's optional budget. Amounts are
-- exact decimals of their currency (numeric, 18 decimals): never floats.
alter table attempts
    add column prompt_tokens     bigint check (prompt_tokens >= 0),
    add column completion_tokens bigint check (completion_tokens >= 0),
    -- true: not reported by the provider, the most it could have charged.
    add column usage_estimated   boolean,
    add column cost              numeric(38, 18),
    add column currency          text,
    add column price_version     text,
    add constraint attempts_cost_priced
        check ((cost is null) = (currency is null) and (cost is null) = (price_version is null)),
    add constraint attempts_usage_complete
        check ((prompt_tokens is null) = (completion_tokens is null)
               and (prompt_tokens is null) = (usage_estimated is null));

-- The usage report reads an owner's counted attempts by time.
create index attempts_owner_counted on attempts (owner_id, created_at) where prompt_tokens is not null;

-- The job's budget, from the create request; null: none.
alter table jobs add column max_cost numeric(38, 18) check (max_cost >= 0);
