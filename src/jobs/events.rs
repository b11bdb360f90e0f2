//! Following a job's event log live (`GET /jobs/{id}/events`): every event
//! after a cursor, then each one as it is committed, until the job can
//! change no more ([`can_change_no_more`]: the losers' cancellations after a
//! win or a cancel are in the log by then), the job is erased, its follower's
//! key changes, or the server stops. Nothing is made up for the stream: each item is
//! one row of the log, with the job's state after it (see
//! [`EventKind::job_state_after`](crate::domain::EventKind::job_state_after)) and the facts of the attempt it
//! concerns.
//!
//! A follower holds one of its owner's places for long-polls while it
//! lives. It is woken by the job's change notices in this process, and
//! rereads the log every `server.event_stream_interval_ms` for events
//! committed by other processes.
//!
//! One item is not a row: while the job waits for someone (see
//! [`crate::domain::awaiting()`]), a `waiting` says so, with the id of the
//! event before it, once each time it starts waiting.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{JobError, Jobs, LongPoll};
use crate::domain::job::can_change_no_more;
use crate::domain::{AttemptState, Job, JobEvent, JobId, JobState, TaskRules};

/// One event of a job's log as a follower shows it.
#[derive(Clone, Debug)]
pub struct ShownEvent {
    /// The event's place in its job's log (1 for the first): the cursor to
    /// resume after. Numbered per job, so that it says nothing of other
    /// owners' activity, and stable, since a job's events are appended under
    /// its row's lock and never removed but with the job.
    pub id: i64,
    /// What happened: an [`EventKind`](crate::domain::EventKind)'s name, or `waiting`.
    pub kind: &'static str,
    /// The event as JSON: its id, kind, time, the job's state after it, the
    /// attempt it concerns and its detail.
    pub data: Value,
}

/// How many shown events wait for a slow reader before the follower waits too.
const BUFFER: usize = 64;

impl Jobs {
    /// Follows the log of job `id` of `place`'s owner from after event
    /// `after` (0: from the start): the events come on the receiver, and it
    /// closes once the job can change no more and every event of its log
    /// was sent (at once when that was so already), when the job is erased,
    /// and when `place` ends. [`JobError::NotFound`] for another owner's
    /// job. The follower stops when the receiver is dropped.
    pub async fn follow_events(
        self: &Arc<Self>,
        place: LongPoll,
        id: JobId,
        after: i64,
    ) -> Result<mpsc::Receiver<ShownEvent>, JobError> {
        self.get_job(place.owner(), id).await?;
        let (sender, receiver) = mpsc::channel(BUFFER);
        tokio::spawn(self.clone().follow(place, id, after, sender));
        Ok(receiver)
    }

    async fn follow(self: Arc<Self>, place: LongPoll, id: JobId, mut cursor: i64, sender: mpsc::Sender<ShownEvent>) {
        let owner = place.owner().clone();
        let watch = self.signals.watch_job(id);
        // Set once the job was seen unable to change: the log read after
        // that has every event, and is the last one read.
        let mut finished = false;
        // What the job was last said to wait for, to say it once.
        let mut said = None;
        loop {
            // Listening from before the read, so that no change slips in between.
            let change = watch.next_change();
            let events = match self.store.list_events(&owner, id).await {
                // Every job's log starts with its creation: none, it was erased.
                Ok(events) if events.is_empty() => return,
                Ok(events) => events,
                Err(error) => {
                    // The client resumes from its last event.
                    tracing::warn!(job.id = %id, %error, "reading a followed job's events failed; its stream ends");
                    return;
                }
            };
            // The job is read only for new events, after its log: it has
            // every attempt the log names.
            let mut job = None;
            let mut state = None;
            for (place_in_log, event) in (1..).zip(events) {
                state = event.kind.job_state_after(&event.detail, state);
                if place_in_log > cursor {
                    let read = match &job {
                        Some(read) => Arc::clone(read),
                        None => match self.get_job(&owner, id).await {
                            Ok(read) => Arc::clone(job.insert(read)),
                            Err(error) => {
                                tracing::warn!(job.id = %id, %error, "reading a followed job failed; its stream ends");
                                return;
                            }
                        },
                    };
                    cursor = place_in_log;
                    let shown = show(&read, place_in_log, event, state);
                    if sender.send(shown).await.is_err() {
                        return;
                    }
                }
            }
            if finished {
                return;
            }
            // A job that may have finished is read, for its attempts; when it
            // can change no more, its log is read once more, for the events
            // committed since the read above.
            // A job that may wait for someone is read too, to say so.
            let mut waiting = None;
            if state.is_some_and(|state| state.is_terminal() || matches!(state, JobState::Failed | JobState::Unknown)) {
                let Ok(read) = self.get_job(&owner, id).await else { return };
                let attempts: Vec<AttemptState> = read.attempts.iter().map(|attempt| attempt.state).collect();
                if can_change_no_more(read.state, &attempts, self.catalog.limits(&read.task)) {
                    finished = true;
                    continue;
                }
                waiting = self.awaiting(&read);
            }
            if let Some(now) = waiting.as_ref().filter(|now| said.as_ref() != Some(*now)) {
                let data = serde_json::to_value(now).expect("a wait is JSON");
                if sender.send(ShownEvent { id: cursor, kind: "waiting", data }).await.is_err() {
                    return;
                }
            }
            said = waiting;
            tokio::select! {
                _ = change => {}
                _ = tokio::time::sleep(self.intervals.event_stream) => {}
                _ = sender.closed() => return,
                // The server is stopping, or the key changed: the client
                // resumes from its last event (a revoked key gets 401).
                _ = place.ended() => return,
            }
        }
    }
}

/// `event`, the `place`th of `job`'s log, after which the job was in `state`.
fn show(job: &Job, place: i64, event: JobEvent, state: Option<JobState>) -> ShownEvent {
    let attempt = event.attempt_number.map(|number| {
        let known = job.attempts.iter().find(|attempt| attempt.number == number);
        json!({
            "number": number,
            "id": known.map(|attempt| attempt.id),
            "provider": known.map(|attempt| attempt.provider.as_str()),
        })
    });
    let data = json!({
        "id": place,
        "job_id": job.id,
        "kind": event.kind,
        "at": event.at,
        "job_state": state.map(JobState::as_str),
        "attempt": attempt,
        "detail": event.detail,
    });
    ShownEvent { id: place, kind: event.kind.as_str(), data }
}
