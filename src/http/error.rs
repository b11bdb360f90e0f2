//! The one HTTP error type. Client errors are RFC 9457 problems with a stable
//! `type`; a database that cannot be reached is 503 `unavailable` with
//! `Retry-After`; anything else is a bare 500 whose cause is logged once and
//! never shown to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::catalog::Violation;
use crate::domain::AdmissionRefusal;
use crate::store::StoreError;

/// A client-facing problem (RFC 9457).
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    kind: &'static str,
    title: &'static str,
    detail: Option<String>,
    extensions: Map<String, Value>,
    retry_after: Option<u64>,
    www_authenticate: bool,
}

impl Problem {
    /// A problem of a stable `type`, with its fixed title.
    pub fn new(status: StatusCode, kind: &'static str, title: &'static str) -> Self {
        Self { status, kind, title, detail: None, extensions: Map::new(), retry_after: None, www_authenticate: false }
    }

    /// Says what happened in this case.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Adds an extension member.
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extensions.insert(name.to_owned(), value.into());
        self
    }

    /// Adds `Retry-After` (seconds).
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The problem's type.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// 401: no token, or not a live one.
    pub fn unauthorized(detail: &str) -> Self {
        let mut problem = Self::new(StatusCode::UNAUTHORIZED, "unauthorized", "Authentication required").detail(detail);
        problem.www_authenticate = true;
        problem
    }

    /// 403: the key is valid but its role may not do this.
    pub fn forbidden(detail: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden").detail(detail)
    }

    /// 404: no such resource for this owner (another owner's looks the same).
    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found")
    }

    /// 422: one field is wrong.
    pub fn invalid_field(pointer: &str, detail: impl Into<String>) -> Self {
        Self::invalid(vec![Violation { pointer: pointer.to_owned(), detail: detail.into() }])
    }

    /// 422: the request breaks these rules. A hostile body can break
    /// thousands at once: the answer lists the first [`MAX_VIOLATIONS`],
    /// each cut to [`MAX_VIOLATION_DETAIL`] characters, and counts the rest
    /// in `errors_omitted`.
    pub fn invalid(mut violations: Vec<Violation>) -> Self {
        let omitted = violations.len().saturating_sub(MAX_VIOLATIONS);
        violations.truncate(MAX_VIOLATIONS);
        for violation in &mut violations {
            shorten(&mut violation.pointer);
            shorten(&mut violation.detail);
        }
        let mut detail = violations.iter().map(|v| format!("{}: {}", display_pointer(&v.pointer), v.detail)).collect::<Vec<_>>();
        if omitted > 0 {
            detail.push(format!("and {omitted} more"));
        }
        let problem = Self::new(StatusCode::UNPROCESSABLE_ENTITY, "validation-failed", "The request is not valid")
            .detail(detail.join("; "))
            .with("errors", serde_json::to_value(violations).unwrap_or_default());
        if omitted > 0 { problem.with("errors_omitted", omitted) } else { problem }
    }

    /// 422: a query parameter is wrong.
    pub fn invalid_parameter(name: &str, detail: &str) -> Self {
        let shown = if name.is_empty() { "query" } else { name };
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "validation-failed", "The request is not valid")
            .detail(format!("{shown}: {detail}"))
            .with("errors", json!([{ "parameter": name, "detail": detail }]))
    }

    /// 422: the named provider is not configured.
    pub fn provider_unknown(name: &str) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "provider-unknown", "Unknown provider")
            .detail(format!("no provider named '{name}' is configured"))
            .with("errors", json!([{ "pointer": "/provider", "detail": "not a configured provider" }]))
    }

    /// 409 or 422: an admission rule refused a new attempt.
    pub fn refused(refusal: AdmissionRefusal, unknown_retry_after: u64) -> Self {
        use AdmissionRefusal::*;
        let (status, title, detail) = match refusal {
            JobFinished => (StatusCode::CONFLICT, "Job finished", "the job succeeded or was canceled"),
            AttemptPending => (StatusCode::CONFLICT, "Attempt pending", "an attempt is still waiting to be sent"),
            AttemptOutcomeUnknown => (
                StatusCode::CONFLICT,
                "Attempt outcome unknown",
                "an attempt's outcome is unknown; no new attempt until it is reconciled",
            ),
            TooManyAttemptsInFlight => (
                StatusCode::CONFLICT,
                "Too many attempts in flight",
                "as many attempts are running as the task allows",
            ),
            AttemptLimitReached => {
                (StatusCode::CONFLICT, "Attempt limit reached", "the job has used every attempt its task allows")
            }
            ProviderNotQualified => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "Provider not qualified",
                "the provider is not qualified for this task",
            ),
            BudgetExceeded => (
                StatusCode::CONFLICT,
                "Budget exceeded",
                "the attempt's worst-case cost exceeds what is left of the job's budget",
            ),
        };
        let problem = Self::new(status, refusal.problem_type(), title).detail(detail);
        if refusal == AttemptOutcomeUnknown { problem.retry_after(unknown_retry_after) } else { problem }
    }

    /// 503: try again later.
    pub fn unavailable() -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "Service unavailable")
            .detail("the service cannot answer right now; retry with the same Idempotency-Key")
            .retry_after(1)
    }

    /// 500, with nothing about the cause.
    pub fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "Internal error")
    }
}

/// The most violations one answer lists.
pub const MAX_VIOLATIONS: usize = 100;

/// The longest pointer or detail of one violation, in characters.
pub const MAX_VIOLATION_DETAIL: usize = 300;

fn shorten(text: &mut String) {
    if let Some((cut, _)) = text.char_indices().nth(MAX_VIOLATION_DETAIL) {
        text.truncate(cut);
        text.push('…');
    }
}

fn display_pointer(pointer: &str) -> &str {
    if pointer.is_empty() { "body" } else { pointer }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let mut body = Map::new();
        body.insert("type".into(), self.kind.into());
        body.insert("title".into(), self.title.into());
        body.insert("status".into(), self.status.as_u16().into());
        if let Some(detail) = self.detail {
            body.insert("detail".into(), detail.into());
        }
        body.extend(self.extensions);
        let mut response = (self.status, serde_json::to_vec(&body).unwrap_or_default()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.www_authenticate {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// What a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The client's problem, answered as it is.
    #[error("{}", .0.kind)]
    Problem(Problem),
    /// The store failed: 503 when it is unreachable, 500 otherwise.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<Problem> for ApiError {
    fn from(problem: Problem) -> Self {
        ApiError::Problem(problem)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Problem(problem) => problem.into_response(),
            ApiError::Store(StoreError::Unavailable(cause)) => {
                tracing::warn!(error = %cause, "database unavailable");
                Problem::unavailable().into_response()
            }
            ApiError::Store(cause) => {
                tracing::error!(error = %cause, "request failed");
                Problem::internal().into_response()
            }
        }
    }
}
