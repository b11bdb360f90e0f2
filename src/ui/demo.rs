//! The demo (`/demo`): the article's story for a person. "Generate" makes a
//! job on the slow provider with one idempotency key per intent (made in
//! the browser, reused by every click and retry of that intent); while it
//! stalls, "Use fallback" adds an attempt on the fast provider with a key of
//! its own; the live timeline shows the race and its one winner.
//!
//! The page's script calls the two routes below with the session's cookie
//! and CSRF token; they read the same bodies as `POST /jobs` and
//! `POST /jobs/{id}/attempts`, call the same use cases ([`crate::jobs`]) and
//! answer the same way, so a double click is settled by the same unique
//! constraint and admission rules as any API client's.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::{PageError, PageSession, ScriptSession, page};
use crate::http::attempts::attempt_added;
use crate::http::bodies::{CreateAttemptBody, CreateJobBody};
use crate::http::error::ApiError;
use crate::http::extract::{JobPath, Key, StrictJson, Trace};
use crate::http::jobs::created_or_replayed;
use crate::http::respond::job_error;
use crate::state::AppState;

/// The provider the demo's job starts on: it answers after a visible stall.
pub const SLOW: &str = "sim-slow";
/// The provider of the fallback attempt.
pub const FAST: &str = "sim-fast";

/// `GET /demo`.
pub(crate) async fn show(
    State(app): State<AppState>,
    PageSession(session): PageSession,
) -> Result<Response, PageError> {
    let configured = |name: &str| app.catalog.provider(name).is_some();
    let context = minijinja::context! {
        slow => SLOW,
        fast => FAST,
        ready => configured(SLOW) && configured(FAST) && app.catalog.task("summarize").is_some(),
        csrf => &session.csrf,
        event_kinds => super::pages::event_kinds(),
    };
    Ok(page(StatusCode::OK, Some(&session), "Demo: one job per intent", "demo", "demo.html", context))
}

/// `POST /ui/api/jobs`: `POST /jobs` for the session's owner.
pub(crate) async fn create_job(
    State(app): State<AppState>,
    ScriptSession(session): ScriptSession,
    Key(key): Key,
    Trace(trace): Trace,
    StrictJson(body): StrictJson<CreateJobBody>,
) -> Result<Response, ApiError> {
    let request = crate::jobs::JobRequest { trace, ..body.try_into()? };
    let answer = app.jobs.create_job(session.identity.owner, key, request).await.map_err(|e| job_error(&app, e))?;
    Ok(created_or_replayed(&answer))
}

/// `POST /ui/api/jobs/{id}/attempts`: `POST /jobs/{id}/attempts` for the
/// session's owner.
pub(crate) async fn create_attempt(
    State(app): State<AppState>,
    ScriptSession(session): ScriptSession,
    JobPath(job_id): JobPath,
    Key(key): Key,
    Trace(trace): Trace,
    StrictJson(body): StrictJson<CreateAttemptBody>,
) -> Result<Response, ApiError> {
    let answer = app
        .jobs
        .add_attempt(&session.identity.owner, job_id, key, body.provider, trace)
        .await
        .map_err(|e| job_error(&app, e))?;
    Ok(attempt_added(job_id, &answer))
}
