//! `POST /callbacks/{job}/{number}/{token}`: a provider's callback with the
//! outcome of an attempt it runs in the background (a Cog server's
//! webhook), at the URL onejob gave it with the request. No API key: the
//! token in the URL is the attempt's own ([`crate::callbacks`]), checked
//! before the body is read. The outcome is recorded before the answer, so
//! that a sender that got a 2xx may forget it; a callback for an attempt
//! already settled is answered 200 and changes nothing but a missing usage.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::error::{ApiError, Problem, ProblemType};
use crate::callbacks::CallbackError;
use crate::domain::JobId;

/// The largest callback body read: a prediction whose files come inline.
const MAX_CALLBACK_BYTES: usize = crate::provider::cog::MAX_PREDICTION_BYTES;

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(provider_callback))
}

#[utoipa::path(post, path = "/callbacks/{job}/{number}/{token}", tag = "callbacks", security(()),
    params(("job" = uuid::Uuid, Path, description = "the job"),
           ("number" = i32, Path, description = "the attempt's number"),
           ("token" = String, Path, description = "the attempt's callback token, as onejob gave it")),
    request_body(content = Object, description = "what the provider says of the request: a Cog or Replicate prediction (`id`, `status`, `output`, `error`, `metrics`)"),
    responses(
        (status = 200, description = "received: `received` says what became of it (`settled`, `already-settled`, `not-final`, `job-gone`)", body = Object),
        (status = 422, description = "validation-failed: the body is not JSON", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized: the token is not this attempt's, or the callback is not signed by the attempt's provider (Replicate's Standard Webhooks signature)", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: the job has no such attempt, or its provider does not call back", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload-too-large", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 503, description = "unavailable: the database cannot be reached, or the provider's signing secret cannot be had; the sender should send it again", body = crate::http::openapi::Problem, content_type = "application/problem+json")
    ))]
pub(crate) async fn provider_callback(
    State(app): State<AppState>,
    Path((job, number, token)): Path<(String, String, String)>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let (Some(job), Ok(number)) = (JobId::parse(&job), number.parse::<i32>()) else {
        return Err(Problem::not_found().into());
    };
    tracing::Span::current().record("job.id", tracing::field::display(job));
    if !app.callbacks.check(job, number, &token).await? {
        return Err(Problem::new(ProblemType::Unauthorized).detail("the token is not this attempt's").into());
    }
    let _place = app.callbacks.body_place().await;
    let bytes = axum::body::to_bytes(body, MAX_CALLBACK_BYTES)
        .await
        .map_err(|_| Problem::new(ProblemType::PayloadTooLarge).detail(format!("over {MAX_CALLBACK_BYTES} bytes")))?;
    match app.callbacks.receive(job, number, &headers, bytes).await {
        Ok(received) => Ok(Json(json!({ "received": received })).into_response()),
        Err(CallbackError::NotFound(why)) => Err(Problem::not_found().detail(why).into()),
        Err(CallbackError::NotSigned(why)) => Err(Problem::new(ProblemType::Unauthorized)
            .detail(format!("the callback is not signed by the attempt's provider: {why}"))
            .into()),
        Err(error @ CallbackError::CannotVerify(_)) => Err(Problem::unavailable().detail(error.to_string()).into()),
        Err(error @ CallbackError::NotJson(_)) => {
            Err(Problem::new(ProblemType::ValidationFailed).detail(error.to_string()).into())
        }
        Err(CallbackError::Store(error)) => Err(error.into()),
        Err(CallbackError::NotRecorded) => {
            Err(Problem::unavailable().detail("the outcome could not be recorded yet").into())
        }
    }
}
