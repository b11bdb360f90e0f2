//! `POST /jobs/{id}/attempts`: a retry or a fallback under the same job. The
//! Idempotency-Key is scoped to the job, so a double-clicked fallback button
//! makes one attempt; every admission rule is checked in one transaction.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::post;
use serde::Serialize;
use serde_json::Value;

use super::AppState;
use super::openapi::listed;
use super::auth::{Caller, Owner};
use super::error::{ApiError, Problem};
use super::extract::{idempotency_key, read_json};
use super::jobs::{REPLAYED, json_response, key_reused, object_body};
use crate::catalog::Violation;
use crate::domain::{Attempt, AttemptId, AttemptOrigin, JobId, KeyRole};
use crate::store::{Admission, AttemptRef, NewAttempt, Resolution, Transition};

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(listed("/jobs/{id}/attempts"), post(create_attempt))
        .route(listed("/jobs/{id}/attempts/{number}/resolve"), post(resolve_attempt))
}

/// An attempt as the API shows it on its own (`AttemptWithJob` in the
/// specification).
#[derive(Serialize)]
struct AttemptView<'a> {
    job_id: JobId,
    #[serde(flatten)]
    attempt: &'a Attempt,
}

fn parse_provider(body: Value) -> Result<Option<String>, Problem> {
    let (mut body, mut violations) = object_body(body, &["provider"])?;
    let provider = match body.remove("provider") {
        None | Some(Value::Null) => None,
        Some(Value::String(provider)) => Some(provider),
        Some(_) => {
            violations.push(Violation { pointer: "/provider".into(), detail: "must be a string".into() });
            None
        }
    };
    if violations.is_empty() { Ok(provider) } else { Err(Problem::invalid(violations)) }
}

#[utoipa::path(post, path = "/jobs/{id}/attempts", tag = "attempts",
    params(("id" = uuid::Uuid, Path, description = "the job's id"), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters naming this intent; the structured-field form \"abc\" is the same key as abc", pattern = r#"^([!#-~][!-~]{0,254}|"([!#-\[\]-~]|\\["\\]){1,255}")$"#)),
    request_body(content = crate::http::openapi::CreateAttemptBody, description = "optional: an empty body retries the job's own provider"),
    responses(
        (status = 201, description = "admitted: a pending attempt", body = crate::http::openapi::AttemptWithJob,
         headers(("Location" = String, description = "/jobs/{id}"))),
        (status = 200, description = "a replay: the attempt this key made on this job", body = crate::http::openapi::AttemptWithJob,
         headers(("Idempotent-Replayed" = String, description = "true"))),
        (status = 400, description = "idempotency-key-missing or idempotency-key-invalid", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "job-finished, attempt-pending, attempt-outcome-unknown (with Retry-After), too-many-attempts-in-flight, attempt-limit-reached, budget-exceeded (its worst-case cost exceeds what is left of the budget), or idempotency-key-reused",
         body = crate::http::openapi::Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "for attempt-outcome-unknown"))),
        (status = 422, description = "validation-failed, provider-unknown, or provider-not-qualified (the detail says why)", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::BodyErrors
    ))]
pub(crate) async fn create_attempt(
    State(app): State<AppState>,
    Owner(owner): Owner,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let job_id = JobId::parse(&id).ok_or_else(Problem::not_found)?;
    tracing::Span::current().record("job.id", tracing::field::display(job_id));
    let key = idempotency_key(&headers)?;
    let body = read_json(&headers, body, app.settings.max_body_bytes, true).await?;
    let requested = parse_provider(body)?;
    if let Some(provider) = &requested
        && app.catalog.provider(provider).is_none()
    {
        return Err(Problem::provider_unknown(provider).into());
    }
    let new = NewAttempt {
        id: AttemptId::new(),
        provider: requested,
        idempotency_key: Some(key),
        origin: AttemptOrigin::Client,
        delay: std::time::Duration::ZERO,
    };
    let location = format!("/jobs/{job_id}");
    match app.store.admit_attempt(&owner, job_id, &new, app.catalog.as_ref()).await? {
        Admission::Admitted(attempt) => {
            app.signals.work_available();
            app.signals.job_changed(job_id);
            Ok(json_response(StatusCode::CREATED, &AttemptView { job_id, attempt: &attempt }, &[("location", location)]))
        }
        Admission::Replayed(attempt) => Ok(json_response(
            StatusCode::OK,
            &AttemptView { job_id, attempt: &attempt },
            &[(REPLAYED, "true".into()), ("location", location)],
        )),
        Admission::KeyReused(attempt) => Err(key_reused("this Idempotency-Key added an attempt on another provider")
            .with("attempt", attempt.number)
            .into()),
        Admission::Refused { refusal, reason } => {
            let problem = Problem::refused(refusal, app.settings.unknown_retry_after_secs);
            Err(match reason {
                Some(reason) => problem.detail(reason),
                None => problem,
            }
            .into())
        }
        Admission::JobNotFound => Err(Problem::not_found().into()),
    }
}

/// The longest reason an operator may give.
const MAX_REASON: usize = 1000;

fn parse_resolution(body: Value) -> Result<(Resolution, String), Problem> {
    let (mut body, mut violations) = object_body(body, &["outcome", "output", "reason"])?;
    let reason = match body.remove("reason") {
        Some(Value::String(reason)) if !reason.trim().is_empty() && reason.len() <= MAX_REASON => Some(reason),
        _ => {
            violations.push(Violation { pointer: "/reason".into(), detail: "a string of 1 to 1000 characters is required".into() });
            None
        }
    };
    let output = body.remove("output");
    let resolution = match (body.remove("outcome").as_ref().and_then(Value::as_str), output) {
        (Some("failed"), None) => Some(Resolution::Failed),
        (Some("failed"), Some(_)) => {
            violations.push(Violation { pointer: "/output".into(), detail: "a failed outcome has no output".into() });
            None
        }
        (Some("succeeded"), Some(output)) if output.is_object() => Some(Resolution::Succeeded(output)),
        (Some("succeeded"), _) => {
            violations.push(Violation { pointer: "/output".into(), detail: "a succeeded outcome needs the output, a JSON object".into() });
            None
        }
        _ => {
            violations.push(Violation { pointer: "/outcome".into(), detail: "must be \"failed\" or \"succeeded\"".into() });
            None
        }
    };
    match (resolution, reason) {
        (Some(resolution), Some(reason)) if violations.is_empty() => Ok((resolution, reason)),
        _ => Err(Problem::invalid(violations)),
    }
}

/// Any key may resolve its own owner's unknown attempts; an admin key, any
/// owner's (found by job id and number among unknown attempts).
#[utoipa::path(post, path = "/jobs/{id}/attempts/{number}/resolve", tag = "attempts",
    params(("id" = uuid::Uuid, Path, description = "the job's id"), ("number" = i32, Path, description = "the attempt's number")),
    request_body = crate::http::openapi::ResolveBody,
    responses(
        (status = 200, description = "settled: a succeeded output went through the job's compare-and-swap", body = crate::domain::Job),
        (status = 404, description = "not-found: no such job and attempt for this key's owner (or, for an admin key, no such unknown attempt of any owner)", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "attempt-not-unknown", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed or contract-violation", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::BodyErrors
    ))]
pub(crate) async fn resolve_attempt(
    State(app): State<AppState>,
    Caller(caller): Caller,
    Path((id, number)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let job_id = JobId::parse(&id).ok_or_else(Problem::not_found)?;
    let number: i32 = number.parse().map_err(|_| Problem::not_found())?;
    tracing::Span::current().record("job.id", tracing::field::display(job_id));
    let body = read_json(&headers, body, app.settings.max_body_bytes, false).await?;
    let (resolution, reason) = parse_resolution(body)?;
    // A client reaches its owner's jobs only. An admin reaches any owner's
    // unknown attempt by job id and number, else its own owner's jobs.
    let owner = match caller.role {
        KeyRole::Admin => app.store.find_unknown_attempt_owner(job_id, number).await?.unwrap_or(caller.owner.clone()),
        KeyRole::Client => caller.owner.clone(),
    };
    if let Resolution::Succeeded(output) = &resolution {
        // The job's task is only known to the store; a missing job is a 404 either way.
        let job = app.store.get_job(&owner, job_id).await?.ok_or_else(Problem::not_found)?;
        if let Some(task) = app.catalog.task(&job.task) {
            let violations = task.contract.check_output(output);
            if !violations.is_empty() {
                return Err(Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "contract-violation", "Output breaks the contract")
                    .detail(violations.join("; "))
                    .with("violations", violations)
                    .into());
            }
        }
    }
    let attempt = AttemptRef { owner: owner.clone(), job_id, number };
    let transition = app.store.resolve_unknown(&attempt, &resolution, &reason, app.catalog.as_ref()).await?;
    tracing::info!(owner = %owner, by = %caller.owner, role = %caller.role, key = %caller.key, job.id = %job_id, attempt.number = number, outcome = ?transition, %reason, "operator resolved an unknown attempt");
    match transition {
        Transition::NotFound => return Err(Problem::not_found().into()),
        Transition::Stale(state) => {
            return Err(Problem::new(StatusCode::CONFLICT, "attempt-not-unknown", "Attempt not unknown")
                .detail(format!("only an unknown attempt can be resolved; this one is {state}"))
                .with("state", state.as_str())
                .into());
        }
        Transition::Failed { next: Some(next) } => app.signals.work_available_after(next.delay),
        Transition::Failed { next: None } | Transition::Applied | Transition::Won { .. } | Transition::Lost { .. } => {}
    }
    app.signals.job_changed(job_id);
    let job = app.store.get_job(&owner, job_id).await?.ok_or_else(Problem::not_found)?;
    Ok(json_response(StatusCode::OK, &job, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn attempt_bodies_hold_at_most_a_provider() {
        assert_eq!(parse_provider(json!({})).unwrap(), None);
        assert_eq!(parse_provider(json!({"provider": "p"})).unwrap().as_deref(), Some("p"));
        assert_eq!(parse_provider(json!({"provider": 3})).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_provider(json!({"model": "x"})).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_provider(json!("p")).unwrap_err().kind(), "validation-failed");
    }

    #[test]
    fn resolutions_need_an_outcome_a_reason_and_for_success_an_output() {
        assert!(parse_resolution(json!({"outcome": "failed", "reason": "provider says no"})).is_ok());
        assert!(parse_resolution(json!({"outcome": "succeeded", "output": {"a": 1}, "reason": "checked"})).is_ok());
        for bad in [
            json!({"outcome": "failed"}),
            json!({"outcome": "succeeded", "reason": "r"}),
            json!({"outcome": "succeeded", "output": "text", "reason": "r"}),
            json!({"outcome": "failed", "output": {}, "reason": "r"}),
            json!({"outcome": "maybe", "reason": "r"}),
            json!({"outcome": "failed", "reason": "r", "extra": 1}),
        ] {
            assert_eq!(parse_resolution(bad.clone()).unwrap_err().kind(), "validation-failed", "{bad}");
        }
    }
}
