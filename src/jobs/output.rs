//! Following a job's output (`GET /jobs/{id}/output`). A job's output is a
//! log of its own, numbered from 1, whose numbers are the readers' cursors:
//! a reader that resumes after one gets what follows it, from any replica,
//! after any restart, since every item is derived from what the database
//! holds. For a task whose attempts do not stream, the log has one item,
//! the job's end, written once the job reaches it: `result` (the job
//! succeeded: the winning attempt's validated output) or `error` (the job
//! can change no more without a result: canceled, or failed with nothing
//! left to try). The follower then ends.
//!
//! A follower holds one of its owner's places for long-polls while it
//! lives. It is woken by the job's change notices in this process, and
//! rereads the job every `server.event_stream_interval_ms` for changes
//! committed by other processes.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{JobError, Jobs, LongPoll};
use crate::domain::job::can_change_no_more;
use crate::domain::{AttemptLimits, AttemptState, Job, JobId, JobState, TaskRules};

/// One item of a job's output as a reader is shown it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShownOutput {
    /// Its place in the job's output (1 for the first): the cursor to resume after.
    pub id: i64,
    /// `result` or `error`.
    pub kind: &'static str,
    /// The item as JSON.
    pub data: Value,
}

impl Jobs {
    /// Follows the output of job `id` of `place`'s owner from after item
    /// `after` (0: from the start): the items come on the receiver, which
    /// closes after the last one (at once when the reader has it already),
    /// when the job is erased, and when `place` ends. [`JobError::NotFound`]
    /// for another owner's job. The follower stops when the receiver is
    /// dropped.
    pub async fn follow_output(
        self: &Arc<Self>,
        place: LongPoll,
        id: JobId,
        after: i64,
    ) -> Result<mpsc::Receiver<ShownOutput>, JobError> {
        self.get_job(place.owner(), id).await?;
        let (sender, receiver) = mpsc::channel(1);
        tokio::spawn(self.clone().follow_output_of(place, id, after, sender));
        Ok(receiver)
    }

    async fn follow_output_of(
        self: Arc<Self>,
        place: LongPoll,
        id: JobId,
        after: i64,
        sender: mpsc::Sender<ShownOutput>,
    ) {
        let owner = place.owner().clone();
        let watch = self.signals.watch_job(id);
        loop {
            // Listening from before the read, so that no change slips in between.
            let change = watch.next_change();
            let job = match self.get_job(&owner, id).await {
                Ok(job) => job,
                // Erased: there is nothing more to show.
                Err(JobError::NotFound) => return,
                Err(error) => {
                    // The client resumes from its cursor.
                    tracing::warn!(job.id = %id, %error, "reading a followed job failed; its output stream ends");
                    return;
                }
            };
            if let Some(end) = end_of(&job, self.catalog.limits(&job.task)) {
                if end.id > after {
                    let _ = sender.send(end).await;
                }
                return;
            }
            tokio::select! {
                _ = change => {}
                _ = tokio::time::sleep(self.intervals.event_stream) => {}
                _ = sender.closed() => return,
                // The server is stopping, or the key changed: the client
                // resumes from its cursor (a revoked key gets 401).
                _ = place.ended() => return,
            }
        }
    }
}

/// The last item of `job`'s output, once it has one: `result` when it
/// succeeded, `error` when it can change no more without a result.
pub fn end_of(job: &Job, limits: AttemptLimits) -> Option<ShownOutput> {
    let id = 1;
    if job.state == JobState::Succeeded {
        let data = json!({ "attempt": job.winning_attempt, "result": job.result });
        return Some(ShownOutput { id, kind: "result", data });
    }
    let states: Vec<AttemptState> = job.attempts.iter().map(|attempt| attempt.state).collect();
    if !can_change_no_more(job.state, &states, limits) {
        return None;
    }
    let last = job.attempts.last();
    let data = json!({
        "state": job.state,
        "attempt": last.map(|attempt| attempt.number),
        "error": last.and_then(|attempt| attempt.error.as_ref()),
    });
    Some(ShownOutput { id, kind: "error", data })
}
