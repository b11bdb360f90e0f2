-- A job's output as it streams: each row a piece of one attempt's answer
-- (`delta`) or the word that the pieces so far are void (`restart`),
-- numbered per job from 1; the numbers are the cursors of
-- GET /jobs/{id}/output. `jobs.output_attempt` is the attempt whose pieces
-- the output shows now: the first to write one takes it, while no other
-- attempt holding it is still running.
alter table jobs add column output_attempt integer;

create table job_output (
    owner_id        text not null,
    job_id          uuid not null,
    seq             bigint not null check (seq >= 1),
    attempt_number  integer not null,
    kind            text not null check (kind in ('delta', 'restart')),
    text            text not null,
    primary key (owner_id, job_id, seq),
    foreign key (owner_id, job_id) references jobs (owner_id, id)
);
