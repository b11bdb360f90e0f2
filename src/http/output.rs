//! `GET /jobs/{id}/output`: a job's output as Server-Sent Events, resumable
//! from any replica by the `id` of the last event read (`Last-Event-ID`,
//! else `?after=`): a streaming task's pieces (`delta`, with `partial`, and `restart`), then
//! the job's end (`result` or `error`). The stream is followed
//! by [`crate::jobs::Jobs::follow_output`] and holds one of the owner's
//! places for long-polls.

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::events::followed;
use super::extract::JobPath;
use super::in_flight::Slot;

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(job_output))
}

#[utoipa::path(get, path = "/jobs/{id}/output", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "the job's id"),
           ("after" = Option<i64>, Query, description = "resume after this event id (the Last-Event-ID header, when sent, takes precedence)"),
           ("Last-Event-ID" = Option<i64>, Header, description = "resume after this event id, as a reconnecting EventSource sends it")),
    responses(
        (status = 200, description = "the job's output (`text/event-stream`), each event with `id:` its place in the job's output (1 for the first), a durable cursor that any replica honours. For a streaming task, first the pieces as they are stored: `delta` (data: `attempt`, `text`; a text task's deltas put together are its answer), for a JSON task each followed, when it changed the answer so far, by `partial` (the same `id`; data: `attempt`, `value`, the answer so far parsed as JSON with what is open closed, a key, number or literal not yet whole left out), and `restart` (data: `attempt`: discard the text so far, that attempt's answer follows). While the job waits for someone (failed with a new attempt still admissible, or an attempt unknown), `waiting` (the `id` of the item before it; data: the job's `state`, `waiting_for`: `client`, `operator` or `reconciliation`, the `attempt` it is about, and `next`, what may be done), once each time it comes to that; the stream goes on. Then the end: `result` (data: `attempt`, the winning attempt's number, and `result`, as `GET /jobs/{id}` shows it) when the job succeeded, or `error` (data: the job's `state`, its last `attempt`'s number and that attempt's `error`) when it can change no more without a result (canceled, or failed with its attempts used up); the stream then ends. It also ends when the job is erased, when the server stops and when the key is revoked; a comment every 15 s", body = String, content_type = "text/event-stream"),
        (status = 422, description = "validation-failed: a bad `after` or `Last-Event-ID`", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::WaitingErrors
    ))]
pub(crate) async fn job_output(
    State(app): State<AppState>,
    Caller(caller): Caller,
    JobPath(id): JobPath,
    RawQuery(query): RawQuery,
    slot: Slot,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let follow = |place, after| app.jobs.follow_output(place, id, after);
    followed(&app, &caller, &headers, query.as_deref(), slot, follow, |shown| {
        (shown.id, shown.kind, shown.data.to_string())
    })
    .await
}
