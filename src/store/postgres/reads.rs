//! How the Postgres store reads jobs by id. A read asked for while another
//! is under way waits for the [`READ_TURN`], and whoever gets it reads
//! every job queued then, each owner's by one statement, the owners'
//! statements at once ([`crate::store::GroupCommit`], as new jobs are
//! written): a burst of readers (the waiters of a batch of settlements,
//! the pollers of many jobs) costs a few statements, not one each. A read
//! asked for with the turn free is made at once, alone, by [`GET_JOB`].
//! Each read begins after it was asked for.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::Row;
use sqlx::postgres::PgRow;
use tokio::sync::{Semaphore, oneshot};
use uuid::Uuid;

use super::bounded::answered;
use super::direct::DirectConnections;
use super::fetch_job;
use super::sql::{GET_JOB, GET_JOBS};
use crate::domain::{Job, JobId, OwnerId};
use crate::store::rows::job_from_rows;
use crate::store::{GroupCommit, Result, StoreError, Unanswered};

/// Groups of reads made at once: one, so that the reads asked for while a
/// group is read gather for the next. (With two, every other group was a
/// read alone.)
const READ_TURN: usize = 1;

/// The most jobs one group reads.
const MAX_READS: usize = 64;

/// A read of one job waiting for its group, and where its answer goes.
pub(super) struct JobRead {
    owner: OwnerId,
    id: JobId,
    answer: oneshot::Sender<Result<Option<Job>>>,
}

impl JobRead {
    /// Answers the read (its caller may have gone: nobody hears it).
    fn answer(self, answer: Result<Option<Job>>) {
        let _ = self.answer.send(answer);
    }
}

/// The queue of reads of jobs by id.
pub(super) fn job_reads() -> Arc<GroupCommit<JobRead>> {
    Arc::new(GroupCommit::new(Arc::new(Semaphore::new(READ_TURN)), MAX_READS))
}

/// `owner`'s job `id` with its attempts, read in the next group. A read
/// still queued when the wait for a connection has passed is refused as
/// unavailable (503, retryable), as a request that found no free
/// connection is.
pub(super) async fn get_job(
    reads: &GroupCommit<JobRead>,
    direct: &Arc<DirectConnections>,
    owner: &OwnerId,
    id: JobId,
) -> Result<Option<Job>> {
    let (answer, answered) = oneshot::channel();
    let deadline = tokio::time::Instant::now() + direct.acquire_timeout();
    let direct = direct.clone();
    let read = move |group: Vec<JobRead>| {
        let direct = direct.clone();
        async move { read_group(&direct, group).await }
    };
    let queued = JobRead { owner: owner.clone(), id, answer };
    match reads.submit(queued, answered, Some(deadline), read).await {
        Ok(answer) => answer,
        Err(Unanswered::Interrupted) => Err(StoreError::Interrupted("the read of this job was interrupted")),
        Err(Unanswered::Expired) => Err(StoreError::from(sqlx::Error::PoolTimedOut)),
    }
}

/// Reads a group: each owner's jobs by one statement, the owners'
/// statements at once, and answers each read.
async fn read_group(direct: &DirectConnections, group: Vec<JobRead>) {
    let mut owners: Vec<Vec<JobRead>> = Vec::new();
    for read in group {
        match owners.iter_mut().find(|same| same[0].owner == read.owner) {
            Some(same) => same.push(read),
            None => owners.push(vec![read]),
        }
    }
    futures_util::future::join_all(owners.into_iter().map(|same| read_owners_jobs(direct, same))).await;
}

/// Reads one owner's jobs and answers each read: one alone by [`GET_JOB`],
/// several by [`GET_JOBS`]. If that fails other than for the database
/// being unavailable, each is read alone, so that one job that cannot be
/// read cannot fail the others.
async fn read_owners_jobs(direct: &DirectConnections, mut same: Vec<JobRead>) {
    if same.len() == 1 {
        let read = same.remove(0);
        let answer = fetch_job(direct, GET_JOB.as_str(), &read.owner, read.id.0).await;
        return read.answer(answer);
    }
    let mut ids: Vec<Uuid> = same.iter().map(|read| read.id.0).collect();
    ids.sort_unstable();
    ids.dedup();
    match fetch_jobs_rows(direct, &same[0].owner, &ids).await {
        Ok(rows) => {
            for read in same {
                let answer = job_from_rows(rows.get(&read.id.0).map_or(&[][..], Vec::as_slice));
                read.answer(answer);
            }
        }
        // The first gets the error; the others are as retryable (503).
        Err(error) if error.is_unavailable() => {
            let mut errors = std::iter::once(error).chain(std::iter::repeat_with(|| {
                StoreError::Interrupted("the database was unavailable for this read's group")
            }));
            for read in same {
                read.answer(Err(errors.next().unwrap_or(StoreError::Interrupted("the read was interrupted"))));
            }
        }
        Err(error) => {
            tracing::debug!(%error, size = same.len(), "a group of reads failed; reading them one by one");
            for read in same {
                let answer = fetch_job(direct, GET_JOB.as_str(), &read.owner, read.id.0).await;
                read.answer(answer);
            }
        }
    }
}

/// The rows of [`GET_JOBS`] for `owner`'s jobs `ids`, by job id, each
/// job's in its attempts' order.
async fn fetch_jobs_rows(
    direct: &DirectConnections,
    owner: &OwnerId,
    ids: &[Uuid],
) -> Result<HashMap<Uuid, Vec<PgRow>>> {
    let mut lent = direct.acquire().await?;
    let reading = sqlx::query(GET_JOBS.as_str()).bind(owner.as_str()).bind(ids).fetch_all(lent.connection());
    let rows: std::result::Result<Vec<PgRow>, _> = answered(direct.patience(), reading).await;
    lent.keep_after(&rows);
    let mut jobs: HashMap<Uuid, Vec<PgRow>> = HashMap::with_capacity(ids.len());
    for row in rows? {
        jobs.entry(row.try_get("id")?).or_default().push(row);
    }
    Ok(jobs)
}
