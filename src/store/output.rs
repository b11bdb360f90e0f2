//! A job's streamed output, stored as it comes: pieces numbered per job
//! from 1 (the cursors of `GET /jobs/{id}/output`), each a `delta` of one
//! attempt's answer or a `restart`, the word that the pieces before it are
//! void. The job's `output_attempt` is the attempt whose pieces the output
//! shows: the first attempt to write a piece takes it by a compare-and-swap
//! on the job's row (its lock), and keeps it while it runs; once it runs no
//! more, the next attempt to write takes it, after a `restart`. Nothing is
//! written to a job that succeeded or was canceled. An attempt whose piece
//! is refused has lost the race for the output: its worker aborts it.

use super::{AttemptRef, Result, Store};
use crate::domain::{AttemptState, JobId, JobState, OwnerId};

/// One stored piece of a job's output.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct OutputPiece {
    /// Its place in the job's output, from 1.
    pub seq: i64,
    /// The attempt it comes from (for a `restart`: the attempt that follows).
    pub attempt_number: i32,
    /// `delta` or `restart`.
    pub kind: String,
    /// A delta's text (empty for a `restart`).
    pub text: String,
}

/// What became of a piece offered to a job's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Written: the output is this attempt's.
    Shown {
        /// The piece's number.
        seq: i64,
        /// Whether a `restart` (numbered `seq - 1`) was written before it,
        /// this attempt taking the output from another's.
        restarted: bool,
    },
    /// Not written: another attempt holds the output and runs, or the job
    /// succeeded or was canceled (or is gone). This attempt's answer will
    /// not be shown.
    Refused,
}

/// A job as a piece of its output finds it, under the job's lock.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct OutputLock {
    /// The job's state.
    pub state: JobState,
    /// The attempt whose pieces the output shows, if one wrote any.
    pub output_attempt: Option<i32>,
    /// That attempt's state.
    pub holder_state: Option<AttemptState>,
    /// The last piece's number (0: none yet).
    pub last_seq: i64,
}

impl Store {
    /// Adds `text`, the next piece of attempt `attempt`'s streamed answer,
    /// to its job's output, in one transaction: when the output is this
    /// attempt's, or no running attempt holds it (then this one takes it,
    /// after a `restart` if another's pieces came before); else
    /// [`Appended::Refused`].
    pub async fn append_output(&self, attempt: &AttemptRef, text: &str) -> Result<Appended> {
        self.append_outputs(&[(attempt, text)]).await.pop().expect("one answer for one piece")
    }

    /// [`Store::append_output`] for several pieces of several attempts;
    /// the answers are in the order of `appends`. The pieces of attempts
    /// that hold their jobs' outputs are written first, one write an owner
    /// (`Store::append_to_held_outputs`); the others in one transaction
    /// (`Store::append_in_one_transaction`).
    pub async fn append_outputs(&self, appends: &[(&AttemptRef, &str)]) -> Vec<Result<Appended>> {
        let held = self.append_to_held_outputs(appends).await;
        let rest: Vec<(&AttemptRef, &str)> =
            (appends.iter().zip(&held)).filter(|(_, held)| held.is_none()).map(|(append, _)| *append).collect();
        let mut rest_answers =
            if rest.is_empty() { Vec::new() } else { self.append_in_one_transaction(&rest).await }.into_iter();
        held.into_iter()
            .map(|held| match held {
                Some(seq) => Ok(Appended::Shown { seq, restarted: false }),
                None => rest_answers.next().expect("an answer for each piece not written"),
            })
            .collect()
    }

    /// Writes each piece of `appends` whose attempt holds its job's output,
    /// and whose job neither succeeded nor was canceled, by one write an
    /// owner: the number of each written. A piece of a job that comes
    /// twice in `appends` is written this way once at most, and none at
    /// all when a write fails (the transaction writes them then).
    async fn append_to_held_outputs(&self, appends: &[(&AttemptRef, &str)]) -> Vec<Option<i64>> {
        let mut written = vec![None; appends.len()];
        let mut order: Vec<usize> = (0..appends.len()).collect();
        order.sort_by_key(|&i| (appends[i].0.owner.as_str(), appends[i].0.job_id.0));
        for same_owner in order.chunk_by(|&a, &b| appends[a].0.owner == appends[b].0.owner) {
            let mut which: Vec<usize> = same_owner.to_vec();
            which.dedup_by_key(|i| appends[*i].0.job_id);
            let pieces: Vec<(JobId, i32, &str)> =
                which.iter().map(|&i| (appends[i].0.job_id, appends[i].0.number, appends[i].1)).collect();
            match self.driver().append_to_held_outputs(&appends[which[0]].0.owner, &pieces).await {
                Ok(answers) => {
                    for (i, answer) in which.into_iter().zip(answers) {
                        written[i] = answer;
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, size = pieces.len(), "writing pieces to held outputs failed; each goes by the transaction");
                }
            }
        }
        written
    }

    /// [`Store::append_output`] for several pieces of several attempts, in
    /// one transaction (one commit), the jobs locked in the order of their
    /// ids; the answers are in the order of `appends`. Should a batch of
    /// several fail, each piece is appended alone.
    async fn append_in_one_transaction(&self, appends: &[(&AttemptRef, &str)]) -> Vec<Result<Appended>> {
        let mut order: Vec<usize> = (0..appends.len()).collect();
        // A stable sort: two pieces for one job keep their order.
        order.sort_by_key(|&i| (appends[i].0.owner.as_str(), appends[i].0.job_id.0));
        let together = async {
            let mut tx = self.begin().await?;
            let mut appended = vec![Appended::Refused; appends.len()];
            for &i in &order {
                let (attempt, text) = appends[i];
                let (owner, job) = (&attempt.owner, attempt.job_id);
                let Some(lock) = tx.lock_output(owner, job).await? else { continue };
                if matches!(lock.state, JobState::Succeeded | JobState::Canceled) {
                    continue;
                }
                let mut seq = lock.last_seq;
                match lock.output_attempt {
                    Some(holder) if holder == attempt.number => {}
                    Some(_) if lock.holder_state == Some(AttemptState::Running) => continue,
                    holder => {
                        tx.set_output_attempt(owner, job, attempt.number).await?;
                        if holder.is_some() && seq > 0 {
                            seq += 1;
                            let restart = OutputPiece {
                                seq,
                                attempt_number: attempt.number,
                                kind: "restart".into(),
                                text: "".into(),
                            };
                            tx.insert_output(owner, job, &restart).await?;
                        }
                    }
                }
                let delta = OutputPiece {
                    seq: seq + 1,
                    attempt_number: attempt.number,
                    kind: "delta".into(),
                    text: text.into(),
                };
                tx.insert_output(owner, job, &delta).await?;
                appended[i] = Appended::Shown { seq: delta.seq, restarted: seq > lock.last_seq };
            }
            tx.commit().await?;
            Ok::<_, super::StoreError>(appended)
        };
        match together.await {
            Ok(appended) => appended.into_iter().map(Ok).collect(),
            Err(error) if appends.len() == 1 => vec![Err(error)],
            Err(error) => {
                tracing::debug!(%error, size = appends.len(), "a batch of output pieces failed; appending each alone");
                let mut answers = Vec::with_capacity(appends.len());
                for (attempt, text) in appends {
                    answers.push(Box::pin(self.append_output(attempt, text)).await);
                }
                answers
            }
        }
    }

    /// Job `job_id`'s output after piece `after` (0: all of it), in order.
    pub async fn list_output(&self, owner: &OwnerId, job_id: JobId, after: i64) -> Result<Vec<OutputPiece>> {
        self.driver().list_output(owner, job_id, after).await
    }
}
