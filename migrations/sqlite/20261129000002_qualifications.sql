-- Qualification runs: proof that a provider meets a task's contract, tied to
-- the contract's hash.
create table qualifications (
    id             blob primary key,
    provider       text not null,
    task           text not null,
    contract_hash  blob not null check (length(contract_hash) = 32),
    passed         integer not null,
    report         text not null,
    created_at     integer not null
);
create index qualifications_latest on qualifications (provider, task, contract_hash, created_at desc);
create index qualifications_by_time on qualifications (provider, task, created_at desc);
