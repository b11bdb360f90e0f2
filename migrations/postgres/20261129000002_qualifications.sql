-- Qualification runs: proof that a provider meets a task's contract, tied to
-- the contract's hash. Not owned by any tenant: a reference table.
create table qualifications (
    id             uuid primary key,
    provider       text not null,
    task           text not null,
    contract_hash  bytea not null check (length(contract_hash) = 32),
    passed         boolean not null,
    report         jsonb not null,
    created_at     timestamptz not null default now()
);
create index qualifications_latest on qualifications (provider, task, contract_hash, created_at desc);
create index qualifications_by_time on qualifications (provider, task, created_at desc);
