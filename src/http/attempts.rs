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
use super::auth::Owner;
use super::error::{ApiError, Problem};
use super::extract::{idempotency_key, read_json};
use super::jobs::{REPLAYED, json_response, key_reused, unknown_members};
use crate::catalog::Violation;
use crate::domain::{Attempt, AttemptId, AttemptOrigin, JobId};
use crate::store::{Admission, NewAttempt};

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new().route("/jobs/{id}/attempts", post(create_attempt))
}

/// An attempt as the API shows it on its own.
#[derive(Serialize)]
struct AttemptView<'a> {
    job_id: JobId,
    #[serde(flatten)]
    attempt: &'a Attempt,
}

fn parse_provider(body: Value) -> Result<Option<String>, Problem> {
    let Value::Object(mut body) = body else {
        return Err(Problem::invalid_field("", "the body must be a JSON object"));
    };
    let mut violations = unknown_members(&body, &["provider"]);
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

async fn create_attempt(
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
    let new = NewAttempt { id: AttemptId::new(), provider: requested, idempotency_key: Some(key), origin: AttemptOrigin::Client };
    let location = format!("/jobs/{job_id}");
    match app.store.admit_attempt(&owner, job_id, &new, app.catalog.as_ref()).await? {
        Admission::Admitted(attempt) => Ok(json_response(
            StatusCode::CREATED,
            &AttemptView { job_id, attempt: &attempt },
            &[("location", location)],
        )),
        Admission::Replayed(attempt) => Ok(json_response(
            StatusCode::OK,
            &AttemptView { job_id, attempt: &attempt },
            &[(REPLAYED, "true".into()), ("location", location)],
        )),
        Admission::KeyReused(attempt) => Err(key_reused("this Idempotency-Key added an attempt on another provider")
            .with("attempt", attempt.number)
            .into()),
        Admission::Refused(refusal) => Err(Problem::refused(refusal, app.settings.unknown_retry_after_secs).into()),
        Admission::JobNotFound => Err(Problem::not_found().into()),
    }
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
}
