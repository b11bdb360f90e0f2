//! The `streams` scenario: `--jobs` jobs on `--provider`, each followed on
//! its own Server-Sent Events stream (`GET /jobs/{id}/events`), opened as
//! soon as its job is created and read until the server ends it after the
//! event that makes the job terminal. Every stream is open at once while
//! the provider's latency lasts.
//!
//! What is timed is each event's delay from its commit to its arrival on
//! the stream: the event's `at`, stamped by the database's clock (Postgres:
//! `now()`, the start of the transaction that wrote it; SQLite: the
//! application's clock when that transaction began), against this
//! process's clock on arrival, the same machine's clock. Only the events
//! committed after their stream opened are timed, overall and by kind; the
//! ones the stream first sends from the log are counted apart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Options, Sample, Target, create_jobs, percentile};

/// Follows one stream per job of `options.jobs` until each has ended or
/// `options.timeout` has passed; the delays, and the facts of the run.
pub(super) async fn streams(
    target: &Arc<Target>,
    options: &Arc<Options>,
    run: &str,
) -> Result<(Vec<Sample>, Value), String> {
    let client = reqwest::Client::builder().build().map_err(|e| format!("the HTTP client: {e}"))?;
    let deadline = Instant::now() + options.timeout;
    let open = Arc::new(OpenStreams::default());
    let stream = Stream {
        client,
        url: options.url.clone(),
        authorization: target.authorizations[0].clone(),
        deadline,
        open: open.clone(),
    };
    let created = create_jobs(target, options, run, move |_, id| tokio::spawn(stream.clone().follow(id))).await;

    let mut sample = Sample { micros: Vec::new(), errors: 0 };
    let (mut ended, mut events, mut from_the_log) = (0u64, 0u64, 0u64);
    let mut first_error = None;
    let mut by_kind: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (_, following, errors) in created {
        sample.errors += errors;
        for followed in following {
            match followed.await.map_err(|e| format!("a stream's task: {e}")).and_then(|followed| followed) {
                Ok(followed) => {
                    ended += 1;
                    events += followed.events;
                    from_the_log += followed.from_the_log;
                    for (kind, micros) in followed.delays {
                        sample.micros.push(micros);
                        by_kind.entry(kind).or_default().push(micros);
                    }
                }
                Err(error) => {
                    sample.errors += 1;
                    first_error.get_or_insert(error);
                }
            }
        }
    }
    let extra = json!({
        "jobs": options.jobs,
        "provider": options.provider,
        "streams_open_at_once": open.most.load(Ordering::Relaxed),
        "streams_ended": ended,
        "events": events,
        "events_from_the_log": from_the_log,
        "first_error": first_error,
        "by_kind": by_kind.into_iter().map(|(kind, micros)| (kind, figures(micros))).collect::<serde_json::Map<_, _>>(),
    });
    Ok((vec![sample], extra))
}

/// How many of one kind's events were timed, and their p50, p99 and max.
fn figures(mut micros: Vec<u64>) -> Value {
    micros.sort_unstable();
    json!({
        "events": micros.len(),
        "p50_ms": percentile(&micros, 0.50),
        "p99_ms": percentile(&micros, 0.99),
        "max_ms": percentile(&micros, 1.0),
    })
}

/// How many streams are open now, and the most that were at once.
#[derive(Default)]
struct OpenStreams {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl OpenStreams {
    /// Counts one more stream open until the guard is dropped.
    fn open(self: &Arc<Self>) -> OpenStream {
        let now = self.now.fetch_add(1, Ordering::Relaxed) + 1;
        self.most.fetch_max(now, Ordering::Relaxed);
        OpenStream(self.clone())
    }
}

/// One stream counted open.
struct OpenStream(Arc<OpenStreams>);

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What every stream of a run shares.
#[derive(Clone)]
struct Stream {
    client: reqwest::Client,
    url: String,
    authorization: String,
    deadline: Instant,
    open: Arc<OpenStreams>,
}

/// What one stream received, when it ended as it should.
struct Followed {
    /// The kinds and delays from commit to arrival, microseconds, of the
    /// events committed after the stream opened.
    delays: Vec<(String, u64)>,
    /// Every event received.
    events: u64,
    /// Of those, the ones committed before the stream opened.
    from_the_log: u64,
}

impl Stream {
    /// Reads job `id`'s stream from its start to its end. An error unless
    /// it starts with the job's creation, every event is the job's and comes
    /// after the one before, the last makes the job succeeded or canceled,
    /// and the stream ends after it by `deadline`.
    async fn follow(self, id: String) -> Result<Followed, String> {
        let request = self
            .client
            .get(format!("{}/jobs/{id}/events", self.url))
            .header("authorization", &self.authorization)
            .header("accept", "text/event-stream");
        let timed_out = || format!("job {id}: its stream was still open at the timeout");
        let mut response = tokio::time::timeout_at(self.deadline, request.send())
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| format!("job {id}: GET events: {e}"))?;
        let opened = Utc::now();
        let _open = self.open.open();
        if response.status() != reqwest::StatusCode::OK {
            return Err(format!("job {id}: GET events answered {}", response.status()));
        }
        let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
        if content_type != "text/event-stream" {
            return Err(format!("job {id}: GET events answered {content_type}"));
        }
        let mut lines = EventLines::default();
        let mut followed = Followed { delays: Vec::new(), events: 0, from_the_log: 0 };
        let mut last: Option<i64> = None;
        let mut terminal = false;
        loop {
            let chunk = tokio::time::timeout_at(self.deadline, response.chunk())
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| format!("job {id}: reading its stream: {e}"))?;
            let Some(chunk) = chunk else { break };
            let arrived = Utc::now();
            for event in lines.feed(&chunk) {
                if terminal {
                    return Err(format!("job {id}: an event after the one that made it terminal"));
                }
                let data: Value = serde_json::from_str(&event.data)
                    .map_err(|e| format!("job {id}: an event's data is not JSON: {e}"))?;
                let event_id =
                    data["id"].as_i64().ok_or_else(|| format!("job {id}: an event without an id: {data}"))?;
                if data["job_id"] != id.as_str()
                    || event.id != event_id.to_string()
                    || data["kind"] != event.kind.as_str()
                {
                    return Err(format!("job {id}: an event that is not its own or not as named: {data}"));
                }
                if last.is_none() && event.kind != "job-created" {
                    return Err(format!("job {id}: its stream did not start with its creation: {data}"));
                }
                if last.is_some_and(|last| event_id <= last) {
                    return Err(format!("job {id}: event {event_id} came after {last:?}"));
                }
                last = Some(event_id);
                let at = data["at"]
                    .as_str()
                    .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
                    .ok_or_else(|| format!("job {id}: an event without its time: {data}"))?
                    .with_timezone(&Utc);
                followed.events += 1;
                if at < opened {
                    followed.from_the_log += 1;
                } else {
                    let delay = (arrived - at).num_microseconds().unwrap_or(i64::MAX);
                    followed.delays.push((event.kind, u64::try_from(delay).unwrap_or(0)));
                }
                terminal = matches!(data["job_state"].as_str(), Some("succeeded" | "canceled"));
            }
        }
        if !terminal {
            return Err(format!("job {id}: its stream ended before the event that makes the job terminal"));
        }
        Ok(followed)
    }
}

/// One event of a stream: its `id:`, `event:` and `data:` lines.
#[derive(Debug, Default, PartialEq)]
pub(super) struct StreamEvent {
    pub(super) id: String,
    pub(super) kind: String,
    pub(super) data: String,
}

/// Reads Server-Sent Events out of a stream's bytes as they come: lines
/// end with LF (a CR before it is dropped), a blank line ends an event,
/// lines starting with `:` are comments, and several `data:` lines are
/// joined with LF.
#[derive(Default)]
pub(super) struct EventLines {
    line: Vec<u8>,
    event: StreamEvent,
    has_data: bool,
}

impl EventLines {
    /// The events `bytes` complete.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Vec<StreamEvent> {
        let mut complete = Vec::new();
        for &byte in bytes {
            if byte != b'\n' {
                self.line.push(byte);
                continue;
            }
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
            let line = String::from_utf8_lossy(&self.line).into_owned();
            self.line.clear();
            if line.is_empty() {
                if std::mem::take(&mut self.has_data) {
                    complete.push(std::mem::take(&mut self.event));
                }
                self.event = StreamEvent::default();
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((&line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => self.event.id = value.to_owned(),
                "event" => self.event.kind = value.to_owned(),
                "data" => {
                    if self.has_data {
                        self.event.data.push('\n');
                    }
                    self.event.data.push_str(value);
                    self.has_data = true;
                }
                // A comment (empty field) or a field this reader does not use.
                _ => {}
            }
        }
        complete
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, kind: &str, data: &str) -> StreamEvent {
        StreamEvent { id: id.into(), kind: kind.into(), data: data.into() }
    }

    #[test]
    fn events_are_read_across_chunks_with_comments_and_crlf_skipped() {
        let mut lines = EventLines::default();
        assert_eq!(lines.feed(b":\n\nid: 1\nevent: job-cre"), []);
        assert_eq!(
            lines.feed(b"ated\ndata: {\"a\":1}\n\nid: 2\r\nevent: x\r\ndata: a\r\ndata:b\r\n"),
            [event("1", "job-created", r#"{"a":1}"#)]
        );
        assert_eq!(lines.feed(b"\r\n"), [event("2", "x", "a\nb")]);
        // An event without data is not dispatched.
        assert_eq!(lines.feed(b"id: 3\nevent: y\n\n"), []);
    }
}
