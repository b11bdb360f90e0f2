//! The attempt timeline of a job, drawn as SVG on the server: one row per
//! attempt, from its admission through its start to its finish, coloured by
//! its state, the winner marked, the span during which its outcome was
//! unknown hatched, and the job's events marked where they happened. Pure:
//! a job, its events and the time now in, markup out.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use crate::domain::{Attempt, AttemptState, EventKind, Job, JobEvent};

const WIDTH: f64 = 860.0;
const LABELS: f64 = 150.0;
const RIGHT: f64 = 190.0;
const PLOT: f64 = WIDTH - LABELS - RIGHT;
const AXIS: f64 = 30.0;
const ROW: f64 = 38.0;
const BAR: f64 = 18.0;
/// A bar is never drawn narrower than this, so that a 5 ms attempt shows.
const MIN_BAR: f64 = 3.0;

/// Escapes text for an SVG (XML) element or attribute.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The time at which attempt `number` became unknown, if it ever did.
fn unknown_since(attempt: &Attempt, events: &[JobEvent]) -> Option<DateTime<Utc>> {
    let from_events = events
        .iter()
        .find(|e| e.kind == EventKind::AttemptUnknown && e.attempt_number == Some(attempt.number))
        .map(|e| e.at);
    match (from_events, attempt.state) {
        (Some(at), _) => Some(at),
        // Unknown without its event (an older log): it has been since it stopped.
        (None, AttemptState::Unknown) => attempt.finished_at,
        (None, _) => None,
    }
}

fn is_open(state: AttemptState) -> bool {
    matches!(state, AttemptState::Pending | AttemptState::Running | AttemptState::Unknown)
}

/// Where the time axis starts and ends: the job's creation to the last
/// thing that happened (now, while anything is still open).
fn span(job: &Job, events: &[JobEvent], now: DateTime<Utc>) -> (DateTime<Utc>, f64) {
    let start = job.created_at;
    let mut end = job.updated_at;
    for attempt in &job.attempts {
        for at in [Some(attempt.created_at), attempt.started_at, attempt.finished_at].into_iter().flatten() {
            end = end.max(at);
        }
        if is_open(attempt.state) {
            end = end.max(now);
        }
    }
    for event in events {
        end = end.max(event.at);
    }
    let seconds = (end - start).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
    (start, seconds.max(0.01))
}

/// A tick step (in seconds) of 1, 2 or 5 times a power of ten giving at most
/// six ticks over `seconds`.
fn tick_step(seconds: f64) -> f64 {
    let mut step = 0.001;
    loop {
        for factor in [1.0, 2.0, 5.0] {
            if seconds / (step * factor) <= 6.0 {
                return step * factor;
            }
        }
        step *= 10.0;
    }
}

fn seconds_label(seconds: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else if step >= 0.1 {
        1
    } else if step >= 0.01 {
        2
    } else {
        3
    };
    format!("{seconds:.decimals$} s")
}

/// The state's colour class (`s-succeeded`, …), shared with the legend.
fn state_class(state: AttemptState) -> String {
    format!("s-{}", state.as_str())
}

/// Where on the plot a moment falls: the axis from `start`, `seconds` long.
struct Scale {
    start: DateTime<Utc>,
    seconds: f64,
}

impl Scale {
    /// The x coordinate of `at`, clamped to the plot.
    fn x(&self, at: DateTime<Utc>) -> f64 {
        let offset = (at - self.start).num_microseconds().unwrap_or(0) as f64 / 1e6;
        LABELS + (offset / self.seconds).clamp(0.0, 1.0) * PLOT
    }
}

/// Draws the timeline of `job`. Each attempt's row is a `<g class="attempt">`
/// with `data-attempt`, `data-state`, `data-provider` and, for the winner,
/// `data-winner="true"`; its bars are `rect.wait` (admitted, not yet
/// started), `rect.run` (running, coloured by the attempt's state) and
/// `rect.unknown-span` (its outcome unknown).
pub(crate) fn render(job: &Job, events: &[JobEvent], now: DateTime<Utc>) -> String {
    let (start, seconds) = span(job, events, now);
    let scale = Scale { start, seconds };
    let height = AXIS + ROW * job.attempts.len().max(1) as f64 + 8.0;
    let mut svg = String::new();
    open_svg(&mut svg, job, height);
    draw_axis(&mut svg, seconds, height);
    draw_decided(&mut svg, job, &scale, height);
    for (row, attempt) in job.attempts.iter().enumerate() {
        let y = AXIS + ROW * row as f64 + (ROW - BAR) / 2.0;
        let winner = job.winning_attempt == Some(attempt.number);
        open_row(&mut svg, attempt, winner, y);
        draw_bars(&mut svg, attempt, events, &scale, y, now);
        mark_events(&mut svg, attempt, events, &scale, y);
        close_row(&mut svg, attempt, winner, y);
    }
    svg.push_str("</svg>");
    svg
}

/// Writes the `<svg>` element's opening and the hatching's pattern.
fn open_svg(svg: &mut String, job: &Job, height: f64) {
    let _ = write!(
        svg,
        r#"<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="Attempt timeline of job {id}" data-attempts="{count}">"#,
        id = job.id,
        count = job.attempts.len(),
    );
    svg.push_str(r#"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" class="hatch-bg"/><line x1="0" y1="0" x2="0" y2="6" class="hatch-line"/></pattern></defs>"#);
}

/// Draws the axis: seconds since the job was created, in round ticks.
fn draw_axis(svg: &mut String, seconds: f64, height: f64) {
    let step = tick_step(seconds);
    let mut tick = 0.0;
    while tick <= seconds + step * 1e-9 {
        let tx = LABELS + tick / seconds * PLOT;
        let _ = write!(
            svg,
            r#"<line class="tick" x1="{tx:.1}" y1="{top}" x2="{tx:.1}" y2="{height}"/><text class="tick-label" x="{tx:.1}" y="{label_y}">{label}</text>"#,
            top = AXIS - 6.0,
            label_y = AXIS - 10.0,
            label = seconds_label(tick, step),
        );
        tick += step;
    }
}

/// Marks when the compare-and-swap decided the winner: every later answer
/// loses.
fn draw_decided(svg: &mut String, job: &Job, scale: &Scale, height: f64) {
    if let Some(decided) =
        job.attempts.iter().find(|a| job.winning_attempt == Some(a.number)).and_then(|a| a.finished_at)
    {
        let dx = scale.x(decided);
        let _ = write!(
            svg,
            r#"<line class="decided" x1="{dx:.1}" y1="{top}" x2="{dx:.1}" y2="{height}"><title>the winner was decided here, {at:.3} s after the job was created</title></line>"#,
            top = AXIS - 6.0,
            at = (decided - scale.start).num_milliseconds() as f64 / 1000.0,
        );
    }
}

/// Opens an attempt's row (`<g class="attempt">` and its data) and writes
/// its label; its bars are drawn at `y`.
fn open_row(svg: &mut String, attempt: &Attempt, winner: bool, y: f64) {
    let provider = escape(&attempt.provider);
    let state = attempt.state.as_str();
    let _ = write!(
        svg,
        r#"<g class="attempt{won}" data-attempt="{n}" data-state="{state}" data-provider="{provider}"{winner_attr}>"#,
        won = if winner { " winner" } else { "" },
        n = attempt.number,
        winner_attr = if winner { r#" data-winner="true""# } else { "" },
    );
    let _ = write!(
        svg,
        r#"<text class="row-label" x="8" y="{ty:.1}">#{n} {provider}</text>"#,
        ty = y + BAR - 4.0,
        n = attempt.number,
    );
}

/// Draws an attempt's bars: waiting for a worker, running, and its outcome
/// unknown.
fn draw_bars(svg: &mut String, attempt: &Attempt, events: &[JobEvent], scale: &Scale, y: f64, now: DateTime<Utc>) {
    let x = |at| scale.x(at);
    let state = attempt.state.as_str();
    let end_now = attempt.finished_at.unwrap_or(now);
    let started = attempt.started_at;
    // Admitted, waiting to be claimed.
    let wait_end = started.unwrap_or(end_now);
    bar(
        svg,
        "wait",
        x(attempt.created_at),
        x(wait_end),
        y + BAR / 2.0 - 2.0,
        4.0,
        &format!("#{} admitted, waiting for a worker", attempt.number),
    );
    let unknown = unknown_since(attempt, events);
    if let Some(started) = started {
        let run_end = unknown.unwrap_or(end_now);
        // Up to its deadline an attempt that went unknown was running.
        let class =
            format!("run {}", state_class(if unknown.is_some() { AttemptState::Running } else { attempt.state }));
        let title = format!(
            "#{} on {}: {} ({:.3} s)",
            attempt.number,
            attempt.provider,
            state,
            (run_end - started).num_milliseconds() as f64 / 1000.0
        );
        bar(svg, &class, x(started), x(run_end), y, BAR, &title);
    }
    if let Some(since) = unknown {
        let until = if attempt.state == AttemptState::Unknown { now } else { end_now };
        let title = format!(
            "#{} outcome unknown for {:.3} s{}",
            attempt.number,
            (until - since).num_milliseconds() as f64 / 1000.0,
            if attempt.state == AttemptState::Unknown { ", still open" } else { "" }
        );
        bar(svg, "unknown-span", x(since), x(until), y, BAR, &title);
    }
}

/// Marks the events of an attempt that decided its fate, where they
/// happened, below its bars.
fn mark_events(svg: &mut String, attempt: &Attempt, events: &[JobEvent], scale: &Scale, y: f64) {
    for event in events.iter().filter(|e| e.attempt_number == Some(attempt.number)) {
        if matches!(
            event.kind,
            EventKind::RaceLost
                | EventKind::AttemptResolved
                | EventKind::AdmissionRefused
                | EventKind::AttemptSucceeded
        ) {
            let _ = write!(
                svg,
                r#"<circle class="event-mark k-{kind}" cx="{cx:.1}" cy="{cy:.1}" r="4"><title>{kind}</title></circle>"#,
                kind = event.kind,
                cx = scale.x(event.at),
                cy = y + BAR + 3.0,
            );
        }
    }
}

/// Writes an attempt's state at the right of its row, and closes the row.
fn close_row(svg: &mut String, attempt: &Attempt, winner: bool, y: f64) {
    let _ = write!(
        svg,
        r#"<text class="row-state {class}" x="{sx}" y="{ty:.1}">{mark}{state}</text></g>"#,
        class = state_class(attempt.state),
        state = attempt.state.as_str(),
        sx = WIDTH - RIGHT + 10.0,
        ty = y + BAR - 4.0,
        mark = if winner { "★ winner · " } else { "" },
    );
}

fn bar(svg: &mut String, class: &str, from: f64, to: f64, y: f64, height: f64, title: &str) {
    let width = (to - from).max(MIN_BAR);
    // The hatching is named here, not in the style sheet, where the
    // fragment would be looked up in the sheet's own document.
    let fill = if class == "unknown-span" { r#" fill="url(#hatch)""# } else { "" };
    let _ = write!(
        svg,
        r#"<rect class="{class}"{fill} x="{from:.1}" y="{y:.1}" width="{width:.1}" height="{height}" rx="2"><title>{title}</title></rect>"#,
        title = escape(title),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AttemptId, AttemptOrigin, Fingerprint, JobId, JobState, OwnerId};
    use chrono::Duration;
    use serde_json::json;

    fn at(base: DateTime<Utc>, ms: i64) -> DateTime<Utc> {
        base + Duration::milliseconds(ms)
    }

    fn attempt(
        number: i32,
        provider: &str,
        state: AttemptState,
        times: (DateTime<Utc>, Option<DateTime<Utc>>, Option<DateTime<Utc>>),
    ) -> Attempt {
        Attempt {
            number,
            id: AttemptId::new(),
            provider: provider.into(),
            state,
            origin: AttemptOrigin::Client,
            idempotency_key: None,
            worker: None,
            lease_until: None,
            output: None,
            error: None,
            created_at: times.0,
            not_before: times.0,
            started_at: times.1,
            finished_at: times.2,
            usage: None,
            cost: None,
            unapplied_output: None,
            provider_request_id: None,
            trace: None,
        }
    }

    fn job(base: DateTime<Utc>, attempts: Vec<Attempt>, winner: Option<i32>) -> Job {
        Job {
            id: JobId::new(),
            owner: OwnerId::parse("alice").unwrap(),
            idempotency_key: "k".into(),
            fingerprint: Fingerprint::of_job("summarize", &json!({}), "sim-slow"),
            task: "summarize".into(),
            input: json!({}),
            provider: "sim-slow".into(),
            state: if winner.is_some() { JobState::Succeeded } else { JobState::Unknown },
            winning_attempt: winner,
            result: None,
            max_cost: None,
            cost: None,
            created_at: base,
            updated_at: base,
            expires_at: None,
            attempts,
            waiting: None,
            canceling: Vec::new(),
        }
    }

    fn event(kind: &str, number: i32, when: DateTime<Utc>) -> JobEvent {
        JobEvent {
            id: 1,
            at: when,
            kind: kind.parse().expect("a known event kind"),
            attempt_number: Some(number),
            detail: json!({}),
        }
    }

    #[test]
    fn a_raced_job_draws_one_bar_per_attempt_marks_the_winner_and_shows_the_superseded_loser() {
        let base = Utc::now();
        let slow = attempt(1, "sim-slow", AttemptState::Superseded, (base, Some(at(base, 10)), Some(at(base, 3010))));
        let fast = attempt(
            2,
            "sim-fast",
            AttemptState::Succeeded,
            (at(base, 1000), Some(at(base, 1010)), Some(at(base, 1015))),
        );
        let events = [event("attempt-succeeded", 2, at(base, 1015)), event("race-lost", 1, at(base, 3010))];
        let svg = render(&job(base, vec![slow, fast], Some(2)), &events, at(base, 4000));
        assert_eq!(svg.matches("<g class=\"attempt").count(), 2);
        assert_eq!(svg.matches("class=\"run ").count(), 2, "{svg}");
        assert!(
            svg.contains(r#"data-attempt="2" data-state="succeeded" data-provider="sim-fast" data-winner="true""#),
            "{svg}"
        );
        assert!(svg.contains(r#"data-attempt="1" data-state="superseded""#));
        assert_eq!(svg.matches("data-winner").count(), 1, "one winner");
        assert!(svg.contains("k-race-lost"));
        assert!(svg.contains("class=\"decided\""), "the moment the winner was decided");
        assert!(!svg.contains("unknown-span"));
    }

    #[test]
    fn an_unknown_span_runs_from_the_deadline_to_now_while_open_and_to_the_resolution_after() {
        let base = Utc::now();
        let hung = attempt(1, "sim-hang", AttemptState::Unknown, (base, Some(at(base, 5)), Some(at(base, 2005))));
        let events = [event("attempt-unknown", 1, at(base, 2005))];
        let svg = render(&job(base, vec![hung.clone()], None), &events, at(base, 8000));
        assert!(svg.contains("class=\"unknown-span\" fill=\"url(#hatch)\""), "{svg}");
        assert!(svg.contains("still open"));
        // The run bar ends where the unknown span begins: a quarter of the axis.
        let run_end = LABELS + 2005.0 / 8000.0 * PLOT;
        assert!(svg.contains(&format!("x=\"{run_end:.1}\"")), "{svg}");

        let resolved = Attempt { state: AttemptState::Failed, finished_at: Some(at(base, 6000)), ..hung };
        let svg = render(
            &job(base, vec![resolved], None),
            &[events[0].clone(), event("attempt-resolved", 1, at(base, 6000))],
            at(base, 9000),
        );
        assert!(svg.contains("class=\"unknown-span\" fill"));
        assert!(!svg.contains("still open"));
        assert!(svg.contains("k-attempt-resolved"));
    }

    #[test]
    fn provider_names_are_escaped_and_ticks_are_round() {
        let base = Utc::now();
        let odd = attempt(1, "<b>&\"", AttemptState::Running, (base, Some(at(base, 1)), None));
        let svg = render(&job(base, vec![odd], None), &[], at(base, 1500));
        assert!(svg.contains("&lt;b&gt;&amp;&quot;"));
        assert!(!svg.contains("<b>"));
        assert_eq!(tick_step(1.5), 0.5);
        assert_eq!(tick_step(30.0), 5.0);
        assert_eq!(tick_step(0.005), 0.001);
    }
}
