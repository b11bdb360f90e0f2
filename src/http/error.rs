//! The one HTTP error type. Client errors are RFC 9457 problems with a stable
//! `type`, one of [`ProblemType`]; a database that cannot be reached is 503
//! `unavailable` with `Retry-After`; anything else is a bare 500 whose cause
//! is logged once and never shown to the client.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::domain::AdmissionRefusal;
use crate::jobs::JobError;
use crate::keys::AuthError;
use crate::store::StoreError;
use crate::task::catalog::Violation;

macro_rules! problem_types {
    ($($(#[$doc:meta])* $variant:ident = $text:literal, $status:ident, $title:literal;)+) => {
        /// Every problem `type` the API answers with, its status and its title.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ProblemType {
            $($(#[$doc])* $variant),+
        }

        impl ProblemType {
            /// Every type, in declaration order.
            pub const ALL: &'static [ProblemType] = &[$(ProblemType::$variant),+];

            /// The stable `type` member.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => $text),+
                }
            }

            /// The HTTP status it is answered with.
            pub const fn status(self) -> StatusCode {
                match self {
                    $(ProblemType::$variant => StatusCode::$status),+
                }
            }

            /// Its title, fixed per type.
            pub const fn title(self) -> &'static str {
                match self {
                    $(ProblemType::$variant => $title),+
                }
            }
        }
    };
}

problem_types! {
    /// No `Idempotency-Key` header.
    IdempotencyKeyMissing = "idempotency-key-missing", BAD_REQUEST, "Idempotency-Key required";
    /// A malformed key, or more than one.
    IdempotencyKeyInvalid = "idempotency-key-invalid", BAD_REQUEST, "Invalid Idempotency-Key";
    /// A header given twice that must be given once (`Authorization`).
    HeaderRepeated = "header-repeated", BAD_REQUEST, "Header repeated";
    /// No bearer token, or not a live API key.
    Unauthorized = "unauthorized", UNAUTHORIZED, "Authentication required";
    /// The key's role may not do this.
    Forbidden = "forbidden", FORBIDDEN, "Forbidden";
    /// No such resource for this owner.
    NotFound = "not-found", NOT_FOUND, "Not found";
    /// The route does not take this method.
    MethodNotAllowed = "method-not-allowed", METHOD_NOT_ALLOWED, "Method not allowed";
    /// The same key with another intent (I2).
    IdempotencyKeyReused = "idempotency-key-reused", CONFLICT, "Idempotency-Key reused";
    /// The job succeeded or was canceled.
    JobFinished = "job-finished", CONFLICT, "Job finished";
    /// An attempt is still waiting for a worker.
    AttemptPending = "attempt-pending", CONFLICT, "Attempt pending";
    /// An attempt's outcome is unknown (I4).
    AttemptOutcomeUnknown = "attempt-outcome-unknown", CONFLICT, "Attempt outcome unknown";
    /// As many attempts are running as the task allows.
    TooManyAttemptsInFlight = "too-many-attempts-in-flight", CONFLICT, "Too many attempts in flight";
    /// The job has used every attempt its task allows.
    AttemptLimitReached = "attempt-limit-reached", CONFLICT, "Attempt limit reached";
    /// Only an unknown attempt can be resolved.
    AttemptNotUnknown = "attempt-not-unknown", CONFLICT, "Attempt not unknown";
    /// Only a finished job with no attempt open can be erased.
    JobNotFinished = "job-not-finished", CONFLICT, "Job not finished";
    /// The owner has as many webhook endpoints as it may.
    TooManyEndpoints = "too-many-endpoints", CONFLICT, "Too many webhook endpoints";
    /// Over `server.max_body_bytes`.
    PayloadTooLarge = "payload-too-large", PAYLOAD_TOO_LARGE, "Payload too large";
    /// The body did not arrive within the request timeout.
    RequestTimeout = "request-timeout", REQUEST_TIMEOUT, "Request timeout";
    /// The body is not JSON.
    UnsupportedMediaType = "unsupported-media-type", UNSUPPORTED_MEDIA_TYPE, "Unsupported media type";
    /// The request breaks a rule; `errors` names each.
    ValidationFailed = "validation-failed", UNPROCESSABLE_ENTITY, "The request is not valid";
    /// The named provider is not configured.
    ProviderUnknown = "provider-unknown", UNPROCESSABLE_ENTITY, "Unknown provider";
    /// The provider is not qualified for the task (I5).
    ProviderNotQualified = "provider-not-qualified", UNPROCESSABLE_ENTITY, "Provider not qualified";
    /// The attempt could cost more than is left of the budget.
    BudgetExceeded = "budget-exceeded", CONFLICT, "Budget exceeded";
    /// A running attempt's streamed answer holds the job's output.
    OutputStreaming = "output-streaming", CONFLICT, "Output streaming";
    /// An operator's output breaks the task's output contract.
    ContractViolation = "contract-violation", UNPROCESSABLE_ENTITY, "Output breaks the contract";
    /// Over the owner's request rate on this server.
    RateLimited = "rate-limited", TOO_MANY_REQUESTS, "Rate limited";
    /// The owner holds as many long-polls open on this server as it may.
    TooManyLongPolls = "too-many-long-polls", TOO_MANY_REQUESTS, "Too many long-polls";
    /// The database cannot be reached, or the server is at capacity.
    Unavailable = "unavailable", SERVICE_UNAVAILABLE, "Service unavailable";
    /// The database's storage is full: nothing more can be written until
    /// space is made.
    StorageFull = "storage-full", SERVICE_UNAVAILABLE, "Storage full";
    /// Anything else; the cause is logged, never shown.
    Internal = "internal", INTERNAL_SERVER_ERROR, "Internal error";
}

/// The header that tells a client's retry loop whether to try again
/// (SDKs generated by Stainless retry a 409 unless it says `false`).
pub const SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

impl ProblemType {
    /// Whether the same request can never pass, so that retrying it is
    /// useless: the key holds another intent's job, the job is over, its
    /// attempts are used up, the attempt is settled.
    pub fn never_passes(self) -> bool {
        matches!(
            self,
            ProblemType::IdempotencyKeyReused
                | ProblemType::JobFinished
                | ProblemType::AttemptLimitReached
                | ProblemType::AttemptNotUnknown
        )
    }
}

impl From<AdmissionRefusal> for ProblemType {
    fn from(refusal: AdmissionRefusal) -> Self {
        match refusal {
            AdmissionRefusal::JobFinished => ProblemType::JobFinished,
            AdmissionRefusal::AttemptPending => ProblemType::AttemptPending,
            AdmissionRefusal::AttemptOutcomeUnknown => ProblemType::AttemptOutcomeUnknown,
            AdmissionRefusal::TooManyAttemptsInFlight => ProblemType::TooManyAttemptsInFlight,
            AdmissionRefusal::AttemptLimitReached => ProblemType::AttemptLimitReached,
            AdmissionRefusal::ProviderNotQualified => ProblemType::ProviderNotQualified,
            AdmissionRefusal::BudgetExceeded => ProblemType::BudgetExceeded,
            AdmissionRefusal::OutputStreaming => ProblemType::OutputStreaming,
        }
    }
}

/// A client-facing problem (RFC 9457).
#[derive(Debug)]
pub struct Problem {
    kind: ProblemType,
    detail: Option<String>,
    extensions: Map<String, Value>,
    retry_after: Option<u64>,
    www_authenticate: bool,
}

impl Problem {
    /// A problem of a stable `type`, with its status and title.
    pub fn new(kind: ProblemType) -> Self {
        Self { kind, detail: None, extensions: Map::new(), retry_after: None, www_authenticate: false }
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
        self.kind.as_str()
    }

    /// 401: no token, or not a live one.
    pub fn unauthorized(detail: &str) -> Self {
        let mut problem = Self::new(ProblemType::Unauthorized).detail(detail);
        problem.www_authenticate = true;
        problem
    }

    /// 403: the key is valid but its role may not do this.
    pub fn forbidden(detail: &str) -> Self {
        Self::new(ProblemType::Forbidden).detail(detail)
    }

    /// 404: no such resource for this owner (another owner's looks the same).
    pub fn not_found() -> Self {
        Self::new(ProblemType::NotFound)
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
        let mut detail =
            violations.iter().map(|v| format!("{}: {}", display_pointer(&v.pointer), v.detail)).collect::<Vec<_>>();
        if omitted > 0 {
            detail.push(format!("and {omitted} more"));
        }
        let problem = Self::new(ProblemType::ValidationFailed)
            .detail(detail.join("; "))
            .with("errors", serde_json::to_value(violations).unwrap_or_default());
        if omitted > 0 { problem.with("errors_omitted", omitted) } else { problem }
    }

    /// 422: a query parameter is wrong.
    pub fn invalid_parameter(name: &str, detail: &str) -> Self {
        let shown = if name.is_empty() { "query" } else { name };
        Self::new(ProblemType::ValidationFailed)
            .detail(format!("{shown}: {detail}"))
            .with("errors", json!([{ "parameter": name, "detail": detail }]))
    }

    /// 422: the named provider is not configured.
    pub fn provider_unknown(name: &str) -> Self {
        Self::new(ProblemType::ProviderUnknown)
            .detail(format!("no provider named '{name}' is configured"))
            .with("errors", json!([{ "pointer": "/provider", "detail": "not a configured provider" }]))
    }

    /// 409 or 422: an admission rule refused a new attempt; `Retry-After`
    /// is `retry_after` where the use case gave one (1 while an answer
    /// streams).
    pub fn refused(refusal: AdmissionRefusal, retry_after: Option<u64>) -> Self {
        use AdmissionRefusal::*;
        let detail = match refusal {
            JobFinished => "the job succeeded or was canceled",
            AttemptPending => "an attempt is still waiting to be sent",
            AttemptOutcomeUnknown => "an attempt's outcome is unknown; no new attempt until it is reconciled",
            TooManyAttemptsInFlight => "as many attempts are running as the task allows",
            AttemptLimitReached => "the job has used every attempt its task allows",
            ProviderNotQualified => "the provider is not qualified for this task",
            BudgetExceeded => "the attempt's worst-case cost exceeds what is left of the job's budget",
            OutputStreaming => {
                "an attempt's answer is streaming to the job's output; a new attempt could only lose to it"
            }
        };
        let problem = Self::new(refusal.into()).detail(detail);
        match (refusal, retry_after) {
            // The stream may break, and then the next attempt may take it.
            (OutputStreaming, _) => problem.retry_after(1),
            (_, Some(seconds)) => problem.retry_after(seconds),
            (_, None) => problem,
        }
    }

    /// 503: try again later.
    pub fn unavailable() -> Self {
        Self::new(ProblemType::Unavailable)
            .detail("the service cannot answer right now; retry with the same Idempotency-Key")
            .retry_after(1)
    }

    /// 503: the database's storage is full; nothing was written.
    pub fn storage_full() -> Self {
        Self::new(ProblemType::StorageFull)
            .detail("the database's storage is full: nothing was written; retry with the same Idempotency-Key")
            .retry_after(5)
    }

    /// 500, with nothing about the cause.
    pub fn internal() -> Self {
        Self::new(ProblemType::Internal)
    }
}

/// `Retry-After` of 429 `too-many-long-polls`: an owner's long-polls end
/// within their wait, most of them sooner, each giving its place back.
pub const LONG_POLL_RETRY_AFTER_SECS: u64 = 1;

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
        let status = self.kind.status();
        let mut body = Map::new();
        body.insert("type".into(), self.kind.as_str().into());
        body.insert("title".into(), self.kind.title().into());
        body.insert("status".into(), status.as_u16().into());
        if let Some(detail) = self.detail {
            body.insert("detail".into(), detail.into());
        }
        body.extend(self.extensions);
        let mut response = (status, serde_json::to_vec(&body).unwrap_or_default()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.www_authenticate {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.kind.never_passes() {
            headers.insert(SHOULD_RETRY, HeaderValue::from_static("false"));
        }
        if self.kind == ProblemType::StorageFull {
            response.extensions_mut().insert(StorageFull);
        }
        response
    }
}

/// Marks an answer refused because the database's storage is full, for
/// `/readyz`, which the request deadline's middleware tells.
#[derive(Clone, Copy, Debug)]
pub struct StorageFull;

/// What a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The client's problem, answered as it is.
    #[error("{}", .0.kind())]
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
            ApiError::Store(cause @ StoreError::StorageFull(_)) => {
                tracing::warn!(error = %cause, "the database's storage is full");
                Problem::storage_full().into_response()
            }
            ApiError::Store(cause) if cause.is_unavailable() => {
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

impl From<AuthError> for ApiError {
    fn from(error: AuthError) -> Self {
        match error {
            AuthError::Store(error) => ApiError::Store(error),
            refused => Problem::unauthorized(&refused.to_string()).into(),
        }
    }
}

impl From<JobError> for ApiError {
    /// The answer to a use case's error.
    fn from(error: JobError) -> Self {
        let message = error.to_string();
        let problem = match error {
            JobError::Store(error) => return ApiError::Store(error),
            JobError::NotFound => Problem::not_found(),
            JobError::Invalid(violations) => Problem::invalid(violations),
            JobError::ProviderUnknown(name) => Problem::provider_unknown(&name),
            JobError::JobKeyReused { job_id } => {
                Problem::new(ProblemType::IdempotencyKeyReused).detail(message).with("job_id", job_id.to_string())
            }
            JobError::AttemptKeyReused { attempt } => {
                Problem::new(ProblemType::IdempotencyKeyReused).detail(message).with("attempt", attempt)
            }
            JobError::Refused { refusal, reason, retry_after } => {
                let problem = Problem::refused(refusal, retry_after);
                match reason {
                    Some(reason) => problem.detail(reason),
                    None => problem,
                }
            }
            JobError::ContractViolation(violations) => Problem::new(ProblemType::ContractViolation)
                .detail(violations.join("; "))
                .with("violations", violations),
            JobError::AttemptNotUnknown(state) => {
                Problem::new(ProblemType::AttemptNotUnknown).detail(message).with("state", state.as_str())
            }
            JobError::JobSucceeded => Problem::refused(AdmissionRefusal::JobFinished, None).detail(message),
            JobError::JobNotFinished(state) => {
                Problem::new(ProblemType::JobNotFinished).detail(message).with("state", state.as_str())
            }
            JobError::TooManyLongPolls { .. } => {
                Problem::new(ProblemType::TooManyLongPolls).detail(message).retry_after(LONG_POLL_RETRY_AFTER_SECS)
            }
        };
        ApiError::Problem(problem)
    }
}
