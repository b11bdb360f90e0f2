//! `GET /ui/api/jobs/{id}/events`: a job's event stream for the dashboard's
//! and the demo's scripts. A browser's `EventSource` sends the session's
//! cookie but no `Authorization` header, so this route takes the session
//! where `GET /jobs/{id}/events` takes a key, and is otherwise that route:
//! the same stream ([`crate::http::events::stream_events`]), scoped by the
//! session's owner (another owner's job is 404, for an admin's session as
//! for an admin key), holding one of that owner's places for long-polls.

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::ScriptSession;
use crate::http::error::ApiError;
use crate::http::events::stream_events;
use crate::http::extract::JobPath;
use crate::http::in_flight::Slot;
use crate::state::AppState;

/// `GET /ui/api/jobs/{id}/events`: `GET /jobs/{id}/events` for the
/// session's owner.
pub(crate) async fn job_events(
    State(app): State<AppState>,
    ScriptSession(session): ScriptSession,
    JobPath(id): JobPath,
    RawQuery(query): RawQuery,
    slot: Slot,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    stream_events(&app, &session.identity, id, &headers, query.as_deref(), slot).await
}
