//! `POST /jobs/{id}/attempts`: a retry or a fallback under the same job. The
//! Idempotency-Key is scoped to the job, so a double-clicked fallback button
//! makes one attempt; every admission rule is checked in one transaction.
//! `POST /jobs/{id}/attempts/{number}/resolve`: an operator settles an
//! unknown attempt. Both call the use cases of [`crate::jobs`].

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{Caller, Owner};
use super::bodies::{CreateAttemptBody, ResolveBody};
use super::error::ApiError;
use super::extract::{AttemptPath, JobPath, Key, StrictJson, Trace};
use super::respond::{REPLAYED, json_response};
use crate::domain::{Attempt, JobId};
use crate::jobs::MadeOrFound;

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(create_attempt)).routes(routes!(resolve_attempt))
}

/// An attempt as the API shows it on its own (`AttemptWithJob` in the
/// specification).
#[derive(Serialize)]
struct AttemptView<'a> {
    job_id: JobId,
    #[serde(flatten)]
    attempt: &'a Attempt,
}

#[utoipa::path(post, path = "/jobs/{id}/attempts", tag = "attempts",
    params(("id" = uuid::Uuid, Path, description = "the job's id"), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters naming this intent; the structured-field form \"abc\" is the same key as abc", pattern = r#"^([!#-~][!-~]{0,254}|"([!#-\[\]-~]|\\["\\]){1,255}")$"#)),
    request_body(content = crate::http::bodies::CreateAttemptBody, description = "optional: an empty body retries the job's own provider"),
    responses(
        (status = 201, description = "admitted: a pending attempt", body = crate::http::openapi::AttemptWithJob,
         headers(("Location" = String, description = "/jobs/{id}"))),
        (status = 200, description = "a replay: the attempt this key made on this job", body = crate::http::openapi::AttemptWithJob,
         headers(("Idempotent-Replayed" = String, description = "true"))),
        (status = 400, description = "idempotency-key-missing or idempotency-key-invalid", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "job-finished, attempt-pending, attempt-outcome-unknown (with Retry-After), too-many-attempts-in-flight, attempt-limit-reached, budget-exceeded (its worst-case cost exceeds what is left of the budget), output-streaming (a running attempt's answer streams to the job's output; with Retry-After), or idempotency-key-reused",
         body = crate::http::openapi::Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "for attempt-outcome-unknown"))),
        (status = 422, description = "validation-failed, provider-unknown, or provider-not-qualified (the detail says why)", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::BodyErrors
    ))]
pub(crate) async fn create_attempt(
    State(app): State<AppState>,
    Owner(owner): Owner,
    JobPath(job_id): JobPath,
    Key(key): Key,
    Trace(trace): Trace,
    StrictJson(body): StrictJson<CreateAttemptBody>,
) -> Result<Response, ApiError> {
    let answer = app.jobs.add_attempt(&owner, job_id, key, body.provider, trace).await?;
    Ok(attempt_added(job_id, &answer))
}

/// 201 with a new attempt, or 200 with the attempt an earlier request with
/// the same key added to this job (a replay).
pub(crate) fn attempt_added(job_id: JobId, answer: &MadeOrFound<Attempt>) -> Response {
    let view = AttemptView { job_id, attempt: &answer.value };
    let location = ("location", format!("/jobs/{job_id}"));
    if answer.replayed {
        json_response(StatusCode::OK, &view, &[(REPLAYED, "true".into()), location])
    } else {
        json_response(StatusCode::CREATED, &view, &[location])
    }
}

/// Any key may resolve its own owner's unknown attempts; an operator key,
/// any owner's (found by job id and number among unknown attempts), and is
/// answered with where another owner's job stands, not with the job.
#[utoipa::path(post, path = "/jobs/{id}/attempts/{number}/resolve", tag = "attempts",
    params(("id" = uuid::Uuid, Path, description = "the job's id"), ("number" = i32, Path, description = "the attempt's number")),
    request_body = crate::http::bodies::ResolveBody,
    responses(
        (status = 200, description = "settled: a succeeded output went through the job's compare-and-swap; the job, or to an operator of another owner where it stands", body = crate::jobs::ResolveAnswer),
        (status = 404, description = "not-found: no such job and attempt for this key's owner (or, for an operator key, no such unknown attempt of any owner)", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "attempt-not-unknown", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed or contract-violation", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::BodyErrors
    ))]
pub(crate) async fn resolve_attempt(
    State(app): State<AppState>,
    Caller(caller): Caller,
    AttemptPath(job_id, number): AttemptPath,
    StrictJson(body): StrictJson<ResolveBody>,
) -> Result<Response, ApiError> {
    let (resolution, reason) = body.into_resolution()?;
    let answer = app.jobs.resolve_attempt(&caller, job_id, number, resolution, &reason).await?;
    Ok(json_response(StatusCode::OK, &answer, &[]))
}
