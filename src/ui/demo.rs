//! The demo (`/demo`): the article's story for a person. "Generate" makes a
//! job on the slow provider with one idempotency key per intent (made in
//! the browser, reused by every click and retry of that intent); while it
//! stalls, "Use fallback" adds an attempt on the fast provider with a key of
//! its own; the live timeline shows the race and its one winner.
//!
//! The page's script calls the two routes below with the session's cookie
//! and CSRF token; they hand the request to the JSON API's own handlers
//! (`POST /jobs`, `POST /jobs/{id}/attempts`), so a double click is settled
//! by the same unique constraint and admission rules as any API client's.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::{PageError, PageSession, ScriptSession, page};
use crate::http::AppState;
use crate::http::auth::Owner;
use crate::http::error::ApiError;

/// The provider the demo's job starts on: it answers after a visible stall.
pub const SLOW: &str = "sim-slow";
/// The provider of the fallback attempt.
pub const FAST: &str = "sim-fast";

/// `GET /demo`.
pub(crate) async fn show(State(app): State<AppState>, PageSession(session): PageSession) -> Result<Response, PageError> {
    let configured = |name: &str| app.catalog.provider(name).is_some();
    let context = minijinja::context! {
        slow => SLOW,
        fast => FAST,
        ready => configured(SLOW) && configured(FAST) && app.catalog.task("summarize").is_some(),
        csrf => &session.csrf,
    };
    Ok(page(StatusCode::OK, Some(&session), "Demo: one job per intent", "demo", "demo.html", context))
}

/// `POST /ui/api/jobs`: `POST /jobs` for the session's owner.
pub(crate) async fn create_job(
    State(app): State<AppState>,
    ScriptSession(session): ScriptSession,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    crate::http::jobs::create_job(State(app), Owner(session.identity.owner), headers, body).await
}

/// `POST /ui/api/jobs/{id}/attempts`: `POST /jobs/{id}/attempts` for the
/// session's owner.
pub(crate) async fn create_attempt(
    State(app): State<AppState>,
    ScriptSession(session): ScriptSession,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    crate::http::attempts::create_attempt(State(app), Owner(session.identity.owner), Path(id), headers, body).await
}
