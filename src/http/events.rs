//! `GET /jobs/{id}/events`: a job's event log as Server-Sent Events. Every
//! event after the client's cursor (`Last-Event-ID`, else `?after=`, else
//! from the start), then each new one, until the job can change no more
//! (or is erased, or the server stops, or the key changes); a comment every
//! 15 s keeps idle connections open. The stream
//! is followed by [`crate::jobs::Jobs::follow_events`] and holds one of
//! the owner's places for long-polls.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, Problem};
use super::extract::JobPath;
use super::in_flight::Slot;
use crate::domain::JobId;
use crate::jobs::{JobError, LongPoll};
use crate::keys::Identity;

/// How often an idle stream sends a comment.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(job_events))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<String>,
}

/// The event id to resume after: the `Last-Event-ID` header (a reconnecting
/// `EventSource` sends it), else `?after=`, else 0 (from the start).
fn cursor(headers: &HeaderMap, query: Option<&str>) -> Result<i64, Problem> {
    let parse = |name: &str, text: &str| {
        text.trim()
            .parse::<i64>()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| Problem::invalid_parameter(name, "must be an event id: a whole number from 0"))
    };
    if let Some(header) = headers.get("last-event-id") {
        let text = header.to_str().map_err(|_| Problem::invalid_parameter("Last-Event-ID", "must be an event id"))?;
        return parse("Last-Event-ID", text);
    }
    let query: EventsQuery = serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|error| Problem::invalid_parameter("", &error.to_string()))?;
    query.after.as_deref().map_or(Ok(0), |after| parse("after", after))
}

#[utoipa::path(get, path = "/jobs/{id}/events", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "the job's id"),
           ("after" = Option<i64>, Query, description = "resume after this event id (the Last-Event-ID header, when sent, takes precedence)"),
           ("Last-Event-ID" = Option<i64>, Header, description = "resume after this event id, as a reconnecting EventSource sends it")),
    responses(
        (status = 200, description = "a stream of the job's events (`text/event-stream`): each with `id:` its place in the job's log (1 for the first), `event:` its kind and `data:` its JSON (id, job_id, kind, at, job_state after it, the attempt it concerns with its number, id and provider, and detail); every event after the cursor, then live ones; while the job waits for someone (failed with a new attempt still admissible, or an attempt unknown), `waiting` (the `id` of the item before it; data: the job's `state`, `waiting_for`: `client`, `operator` or `reconciliation`, the `attempt` it is about, and `next`, what may be done), once each time it comes to that; it ends once the job can change no more (succeeded, canceled, or failed with its attempts used up, and no attempt open), when the job is erased, when the server stops and when the key is revoked; a comment every 15 s", body = String, content_type = "text/event-stream"),
        (status = 422, description = "validation-failed: a bad `after` or `Last-Event-ID`", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::WaitingErrors
    ))]
pub(crate) async fn job_events(
    State(app): State<AppState>,
    Caller(caller): Caller,
    JobPath(id): JobPath,
    RawQuery(query): RawQuery,
    slot: Slot,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    stream_events(&app, &caller, id, &headers, query.as_deref(), slot).await
}

/// The event stream of `caller`'s owner's job `id` from the request's cursor (its
/// `Last-Event-ID`, else `?after=`): it takes one of the owner's places for
/// long-polls, follows the job with [`crate::jobs::Jobs::follow_events`]
/// and gives back the request's `slot`. Shared by `GET /jobs/{id}/events`
/// and the dashboard's `GET /ui/api/jobs/{id}/events`.
pub(crate) async fn stream_events(
    app: &AppState,
    caller: &Identity,
    id: JobId,
    headers: &HeaderMap,
    query: Option<&str>,
    slot: Slot,
) -> Result<Response, ApiError> {
    let follow = |place, after| app.jobs.follow_events(place, id, after);
    followed(app, caller, headers, query, slot, follow, |shown| (shown.id, shown.kind, shown.data.to_string())).await
}

/// A stream of what `follow` sends from the request's cursor (its
/// `Last-Event-ID`, else `?after=`), as Server-Sent Events shown by `show`:
/// it takes one of `caller`'s owner's places for long-polls and gives back
/// the request's `slot`.
pub(super) async fn followed<T, F, Following>(
    app: &AppState,
    caller: &Identity,
    headers: &HeaderMap,
    query: Option<&str>,
    slot: Slot,
    follow: F,
    show: fn(T) -> (i64, &'static str, String),
) -> Result<Response, ApiError>
where
    T: Send + 'static,
    F: FnOnce(LongPoll, i64) -> Following,
    Following: Future<Output = Result<tokio::sync::mpsc::Receiver<T>, JobError>>,
{
    let after = cursor(headers, query)?;
    let place = app.jobs.open_long_poll(&caller.owner, Some(caller.key), Duration::MAX)?;
    let items = follow(place, after).await?;
    // Streaming, it holds one of its owner's places, not a slot of the
    // requests in flight.
    slot.release();
    Ok(sse(items, show))
}

/// A Server-Sent Events answer of what comes on `items`, each shown as its
/// id, its event name and its data, with a comment every [`KEEP_ALIVE`];
/// it ends when `items` closes.
fn sse<T: Send + 'static>(
    items: tokio::sync::mpsc::Receiver<T>,
    show: fn(T) -> (i64, &'static str, String),
) -> Response {
    let events = stream::unfold(items, move |mut items| async move {
        let (id, name, data) = show(items.recv().await?);
        let event = Event::default().id(id.to_string()).event(name).data(data);
        Some((Ok::<_, Infallible>(event), items))
    });
    let mut response = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response();
    // A proxy (nginx) passes each event on as it comes.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
