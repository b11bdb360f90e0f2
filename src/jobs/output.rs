//! Following a job's output (`GET /jobs/{id}/output`). A job's output is a
//! log of its own, numbered from 1, whose numbers are the readers' cursors:
//! a reader that resumes after one gets what follows it, from any replica,
//! after any restart, since every item is stored or derived from what the
//! database holds. First the stored pieces of a streaming task's attempts
//! (`delta`, `restart`: see [`crate::store::output`]); for a JSON task each
//! `delta` is followed by a `partial` (the answer so far parsed,
//! `super::partial`) when it changed it, with the delta's id. While the job
//! waits for someone (see [`crate::domain::awaiting()`]) a `waiting` says so,
//! with the id of the item before it, once each time it starts waiting: a
//! new attempt's pieces follow it, after a `restart`. Once the job
//! has ended, its end: `result` (the job succeeded: the winning attempt's
//! validated output, after a `restart` when the pieces shown were not the
//! winner's) or `error` (the job can change no more without a result:
//! canceled, or failed with nothing left to try). The follower then ends.
//!
//! A follower holds one of its owner's places for long-polls while it
//! lives. It is woken by the job's change notices in this process, and by
//! a worker's write of pieces here, which it is shown with the notice (the
//! pieces are read when they do not follow its cursor; the job, on a
//! change); and it rereads both every `server.event_stream_interval_ms`
//! for what other processes committed.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{JobError, Jobs, LongPoll};
use crate::domain::job::can_change_no_more;
use crate::domain::{AttemptLimits, AttemptState, Awaiting, Job, JobId, JobState, OutputKind, TaskRules};
use crate::store::output::OutputPiece;

/// One item of a job's output as a reader is shown it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShownOutput {
    /// Its place in the job's output (1 for the first): the cursor to resume after.
    pub id: i64,
    /// `delta`, `partial`, `restart`, `waiting`, `result` or `error`.
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
        let job = self.get_job(place.owner(), id).await?;
        let output = self.catalog.output_of(&job.task);
        let (sender, receiver) = mpsc::channel(1);
        tokio::spawn(self.clone().follow_output_of(place, id, after, output, sender));
        Ok(receiver)
    }

    async fn follow_output_of(
        self: Arc<Self>,
        place: LongPoll,
        id: JobId,
        mut cursor: i64,
        output: OutputKind,
        sender: mpsc::Sender<ShownOutput>,
    ) {
        let owner = place.owner().clone();
        let watch = self.signals.watch_job(id);
        let Some(mut partial) = self.partial_at(&owner, id, cursor, output).await else { return };
        // What the job was last said to wait for, to say it once.
        let mut said: Option<Awaiting> = None;
        let mut last: Option<LastRead> = None;
        let mut woken_by_output = false;
        loop {
            // Listening from before the reads, so that no change slips in between.
            let (change, grew) = (watch.next_change(), watch.next_output());
            let changes = watch.changes();
            // Woken by a write in this process: its pieces, if they follow the cursor.
            let written = woken_by_output.then(|| watch.output_after(cursor)).flatten();
            let pieces = match written {
                Some(pieces) => pieces,
                None => match self.pieces(&owner, id, cursor).await {
                    Some(pieces) => pieces,
                    None => return,
                },
            };
            if !send_pieces(&sender, pieces, &mut cursor, &mut partial).await {
                return;
            }
            let Some(job) = self.job_as_now(&owner, id, &mut last, changes).await else { return };
            if end_state(&job, self.catalog.limits(&job.task)) {
                // Every piece was written before the job ended: read after
                // its end, the output is whole.
                let Some(all) = self.pieces(&owner, id, 0).await else { return };
                let ends = end_of(&job, &all, output);
                let rest: Vec<OutputPiece> = all.into_iter().filter(|piece| piece.seq > cursor).collect();
                if !send_pieces(&sender, rest, &mut cursor, &mut partial).await {
                    return;
                }
                for end in ends.into_iter().filter(|end| end.id > cursor) {
                    if sender.send(end).await.is_err() {
                        return;
                    }
                }
                return;
            }
            let waiting = self.awaiting(&job);
            if let Some(now) = waiting.as_ref().filter(|now| said.as_ref() != Some(*now)) {
                let data = serde_json::to_value(now).expect("a wait is JSON");
                if sender.send(ShownOutput { id: cursor, kind: "waiting", data }).await.is_err() {
                    return;
                }
            }
            said = waiting;
            woken_by_output = false;
            tokio::select! {
                _ = change => {}
                _ = grew => woken_by_output = true,
                _ = tokio::time::sleep(self.intervals.event_stream) => {}
                _ = sender.closed() => return,
                // The server is stopping, or the key changed: the client
                // resumes from its cursor (a revoked key gets 401).
                _ = place.ended() => return,
            }
        }
    }

    /// The followed job as it is now: `last` read again when the job
    /// changed in this process since (its count of `changes` moved), or
    /// when the reread interval passed (a change made by another process);
    /// not for a piece of its output, which changes nothing of the job.
    /// `None` when the follower ends: the job was erased, or cannot be read.
    async fn job_as_now(
        &self,
        owner: &crate::domain::OwnerId,
        id: JobId,
        last: &mut Option<LastRead>,
        changes: u64,
    ) -> Option<Arc<Job>> {
        if let Some(last) =
            last.as_ref().filter(|last| last.changes == changes && last.at.elapsed() < self.intervals.event_stream)
        {
            return Some(last.job.clone());
        }
        let at = tokio::time::Instant::now();
        match self.get_job(owner, id).await {
            Ok(job) => {
                *last = Some(LastRead { job: job.clone(), changes, at });
                Some(job)
            }
            // Erased: there is nothing more to show.
            Err(JobError::NotFound) => None,
            Err(error) => {
                // The client resumes from its cursor.
                tracing::warn!(job.id = %id, %error, "reading a followed job failed; its output stream ends");
                None
            }
        }
    }

    /// The answer so far of the pieces up to `cursor`, which a reader
    /// resuming there had, for its next `partial`; `None` when the pieces
    /// cannot be read.
    async fn partial_at(
        &self,
        owner: &crate::domain::OwnerId,
        id: JobId,
        cursor: i64,
        output: OutputKind,
    ) -> Option<Partial> {
        let mut partial = Partial::new(output);
        if cursor > 0 {
            for piece in self.pieces(owner, id, 0).await?.iter().filter(|piece| piece.seq <= cursor) {
                partial.add(piece);
            }
        }
        Some(partial)
    }

    /// What `job` waits for, as both streams say it.
    pub(super) fn awaiting(&self, job: &Job) -> Option<Awaiting> {
        let reconcilable = |attempt: &crate::domain::Attempt| {
            let provider = self.catalog.provider(&attempt.provider);
            provider.is_some_and(|p| p.can_be_asked_about(attempt.provider_request_id.as_deref()))
        };
        crate::domain::awaiting(job, self.catalog.limits(&job.task), reconcilable)
    }

    /// The job's pieces after `after`; `None` when they cannot be read.
    async fn pieces(&self, owner: &crate::domain::OwnerId, id: JobId, after: i64) -> Option<Vec<OutputPiece>> {
        match self.store.list_output(owner, id, after).await {
            Ok(pieces) => Some(pieces),
            Err(error) => {
                // The client resumes from its cursor.
                tracing::warn!(job.id = %id, %error, "reading a followed job's output failed; its stream ends");
                None
            }
        }
    }
}

/// A follower's last read of its job: the job, its count of changes in
/// this process before the read, and when the read began.
struct LastRead {
    job: Arc<Job>,
    changes: u64,
    at: tokio::time::Instant,
}

/// Sends `pieces` in order, moving `cursor` past each, each `delta`
/// followed by a `partial` when it changed the answer so far; `false` once
/// the reader is gone.
async fn send_pieces(
    sender: &mpsc::Sender<ShownOutput>,
    pieces: Vec<OutputPiece>,
    cursor: &mut i64,
    partial: &mut Partial,
) -> bool {
    for piece in pieces {
        *cursor = piece.seq;
        let grown = partial.add(&piece);
        if sender.send(shown(piece)).await.is_err() {
            return false;
        }
        if let Some(grown) = grown
            && sender.send(grown).await.is_err()
        {
            return false;
        }
    }
    true
}

/// The answer of the current attempt so far, as its pieces come.
struct Partial {
    /// Whether the answer is JSON, and so has partial objects to show.
    json: bool,
    text: String,
    shown: Option<Value>,
}

impl Partial {
    fn new(output: OutputKind) -> Self {
        Self { json: output == OutputKind::Json, text: String::new(), shown: None }
    }

    /// Adds `piece`: a `partial` item (with the piece's id) when a `delta`
    /// made the answer so far another value; a `restart` starts over.
    fn add(&mut self, piece: &OutputPiece) -> Option<ShownOutput> {
        if piece.kind == "restart" {
            *self = Partial { json: self.json, text: String::new(), shown: None };
            return None;
        }
        if !self.json {
            return None;
        }
        self.text.push_str(&piece.text);
        let value = super::partial::parse_partial(&self.text)?;
        if self.shown.as_ref() == Some(&value) {
            return None;
        }
        self.shown = Some(value.clone());
        let data = json!({ "attempt": piece.attempt_number, "value": value });
        Some(ShownOutput { id: piece.seq, kind: "partial", data })
    }
}

/// A stored piece as a reader is shown it.
fn shown(piece: OutputPiece) -> ShownOutput {
    let (kind, data) = if piece.kind == "restart" {
        ("restart", json!({ "attempt": piece.attempt_number }))
    } else {
        ("delta", json!({ "attempt": piece.attempt_number, "text": piece.text }))
    };
    ShownOutput { id: piece.seq, kind, data }
}

/// Whether `job`'s output has its end: it succeeded, or it can change no
/// more without a result.
fn end_state(job: &Job, limits: AttemptLimits) -> bool {
    let states: Vec<AttemptState> = job.attempts.iter().map(|attempt| attempt.state).collect();
    job.state == JobState::Succeeded || can_change_no_more(job.state, &states, limits)
}

/// The last items of an ended `job`'s output, after its stored `pieces`:
/// its `result`, after a `restart` when the pieces since the last restart
/// do not put together the result (another attempt won, or the winner was
/// settled other than by its own stream: reconciled, resolved); or its
/// `error`.
pub(crate) fn end_of(job: &Job, pieces: &[OutputPiece], output: OutputKind) -> Vec<ShownOutput> {
    let mut id = pieces.last().map_or(0, |piece| piece.seq);
    let mut next = |kind: &'static str, data: Value| {
        id += 1;
        ShownOutput { id, kind, data }
    };
    if job.state == JobState::Succeeded {
        let mut ends = Vec::new();
        let since_restart = pieces.iter().rev().take_while(|piece| piece.kind != "restart").collect::<Vec<_>>();
        let shown: String = since_restart.iter().rev().map(|piece| piece.text.as_str()).collect();
        let by_winner = since_restart.iter().all(|piece| Some(piece.attempt_number) == job.winning_attempt);
        let put_together = match output {
            OutputKind::Text => Some(Value::String(shown)),
            OutputKind::Json => serde_json::from_str::<Value>(&shown).ok(),
        };
        let whole = by_winner && put_together.as_ref() == job.result.as_ref();
        if !pieces.is_empty() && !whole {
            ends.push(next("restart", json!({ "attempt": job.winning_attempt })));
        }
        ends.push(next("result", json!({ "attempt": job.winning_attempt, "result": job.result })));
        return ends;
    }
    let last_attempt = job.attempts.last();
    let data = json!({
        "state": job.state,
        "attempt": last_attempt.map(|attempt| attempt.number),
        "error": last_attempt.and_then(|attempt| attempt.error.as_ref()),
    });
    vec![next("error", data)]
}
