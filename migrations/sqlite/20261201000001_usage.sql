-- Usage and cost per attempt, and a job's optional budget. Amounts are
-- exact decimal strings of their currency (18 decimals at most): never
-- floats, which SQLite's numeric affinity would make them.
alter table attempts add column prompt_tokens integer check (prompt_tokens >= 0);
alter table attempts add column completion_tokens integer check (completion_tokens >= 0);
alter table attempts add column usage_estimated integer check (usage_estimated in (0, 1));
alter table attempts add column cost text check (typeof(cost) in ('text', 'null'));
alter table attempts add column currency text;
alter table attempts add column price_version text;

create index attempts_owner_counted on attempts (owner_id, created_at) where prompt_tokens is not null;

alter table jobs add column max_cost text check (typeof(max_cost) in ('text', 'null'));
