//! The Postgres store's write of the pieces whose attempts hold their
//! jobs' outputs: after an attempt's first piece, nearly every piece. One
//! statement an owner writes them all, with no transaction around it.

use std::sync::LazyLock;

use uuid::Uuid;

use crate::domain::{JobId, OwnerId};
use crate::store::Result;
use crate::store::rows::names::JOB_TERMINAL;

/// Appends each piece whose attempt holds its job's output (and whose job
/// has not succeeded or been canceled) after the job's last piece, under
/// the job's row lock; answers the pieces written, by their place in the
/// arrays (`n`, from 1), with their numbers. Each job is locked and read
/// by its primary key in a subquery run once a piece (`offset 0`), in the
/// order given: the jobs' ids in order, each once. The pieces end in `limit cardinality($2)`, all
/// of them, which a generic plan reads as one row, a custom plan as their
/// number: the generic plan, made once, is then the cheaper (without it,
/// the statement was planned again at nearly every run, which cost more
/// than running it). Binds: owner, job ids, attempt numbers, texts.
pub(super) static APPEND_TO_HELD_OUTPUTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"with held as (
               select p.n, p.job_id, p.number, p.text, j.last_seq
               from (
                   select * from unnest($2::uuid[], $3::int[], $4::text[]) with ordinality as p(job_id, number, text, n)
                   limit cardinality($2)
               ) p
               cross join lateral (
                   select (select coalesce(max(o.seq), 0) from job_output o
                           where o.owner_id = $1 and o.job_id = p.job_id) as last_seq
                   from jobs j
                   where j.owner_id = $1 and j.id = p.job_id and j.output_attempt = p.number
                     and j.state not in ({terminal})
                   offset 0
                   for no key update of j
               ) j
           ), written as (
               insert into job_output (owner_id, job_id, seq, attempt_number, kind, text)
               select $1, job_id, last_seq + 1, number, 'delta', text from held
           )
           select n, last_seq + 1 from held"#,
        terminal = JOB_TERMINAL.as_str()
    )
});

/// Runs [`APPEND_TO_HELD_OUTPUTS`] for `owner`'s `pieces` (job, attempt
/// number, text; each job once, in order): the number of each written.
pub(super) async fn append_to_held_outputs(
    pool: &super::bounded::Pool,
    owner: &OwnerId,
    pieces: &[(JobId, i32, &str)],
) -> Result<Vec<Option<i64>>> {
    let jobs: Vec<Uuid> = pieces.iter().map(|(job, _, _)| job.0).collect();
    let numbers: Vec<i32> = pieces.iter().map(|(_, number, _)| *number).collect();
    let texts: Vec<&str> = pieces.iter().map(|(_, _, text)| *text).collect();
    let written: Vec<(i64, i64)> = sqlx::query_as(APPEND_TO_HELD_OUTPUTS.as_str())
        .bind(owner.as_str())
        .bind(&jobs)
        .bind(&numbers)
        .bind(&texts)
        .fetch_all(pool)
        .await?;
    let mut answers = vec![None; pieces.len()];
    for (n, seq) in written {
        if let Some(answer) = usize::try_from(n - 1).ok().and_then(|i| answers.get_mut(i)) {
            *answer = Some(seq);
        }
    }
    Ok(answers)
}
