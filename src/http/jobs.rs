//! `/jobs`: create a job (I1, I2), read one, list them. Every query is scoped
//! by the authenticated owner; another owner's job is a 404 (I7).

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::AppState;
use super::openapi::listed;
use super::auth::Owner;
use super::error::{ApiError, Problem};
use super::extract::{idempotency_key, read_json};
use crate::catalog::Violation;
use crate::metrics;
use crate::domain::{AdmissionRefusal, AttemptId, Fingerprint, Job, JobId, JobState, Money};
use super::replay::{Flight, Trip};
use crate::store::{Cancel, CreateJob, JobFilter, NewJob};

/// Listings hold at most this many jobs a page.
const MAX_PAGE: u32 = 100;
const DEFAULT_PAGE: u32 = 20;

/// The longest a long-poll may wait, in seconds.
pub const MAX_WAIT_SECS: u64 = 30;

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(listed("/jobs"), get(list_jobs).post(create_job))
        .route(listed("/jobs/{id}"), get(get_job))
        .route(listed("/jobs/{id}/cancel"), post(cancel_job))
}

/// The header that marks an answer as a replay of an earlier request.
pub(crate) const REPLAYED: &str = "idempotent-replayed";

/// A JSON answer with a status and extra headers.
pub(crate) fn json_response(status: StatusCode, body: &impl serde::Serialize, headers: &[(&'static str, String)]) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, value);
        }
    }
    response
}

/// Escapes a member name for use in a JSON Pointer (RFC 6901).
pub(crate) fn pointer_to(name: &str) -> String {
    format!("/{}", name.replace('~', "~0").replace('/', "~1"))
}

/// Refuses members of a body object that are not in `allowed`.
pub(crate) fn unknown_members(body: &Map<String, Value>, allowed: &[&str]) -> Vec<Violation> {
    body.keys()
        .filter(|name| !allowed.contains(&name.as_str()))
        .map(|name| Violation { pointer: pointer_to(name), detail: "unknown field".into() })
        .collect()
}

/// A request body that must be a JSON object with only `allowed` members:
/// the object, and a violation for each member it should not have.
pub(crate) fn object_body(body: Value, allowed: &[&str]) -> Result<(Map<String, Value>, Vec<Violation>), Problem> {
    let Value::Object(body) = body else {
        return Err(Problem::invalid_field("", "the body must be a JSON object"));
    };
    let violations = unknown_members(&body, allowed);
    Ok((body, violations))
}

#[derive(Debug)]
struct CreateJobRequest {
    task: String,
    input: Value,
    provider: Option<String>,
    max_cost: Option<Money>,
}

fn parse_create_request(body: Value) -> Result<CreateJobRequest, Problem> {
    let (mut body, mut violations) = object_body(body, &["task", "input", "provider", "max_cost"])?;
    let task = match body.remove("task") {
        Some(Value::String(task)) => Some(task),
        Some(_) => {
            violations.push(Violation { pointer: "/task".into(), detail: "must be a string".into() });
            None
        }
        None => {
            violations.push(Violation { pointer: "/task".into(), detail: "is required".into() });
            None
        }
    };
    let input = body.remove("input");
    if input.is_none() {
        violations.push(Violation { pointer: "/input".into(), detail: "is required".into() });
    }
    let provider = match body.remove("provider") {
        None | Some(Value::Null) => None,
        Some(Value::String(provider)) => Some(provider),
        Some(_) => {
            violations.push(Violation { pointer: "/provider".into(), detail: "must be a string".into() });
            None
        }
    };
    let max_cost = super::usage::parse_max_cost(body.remove("max_cost"), &mut violations);
    match (task, input) {
        (Some(task), Some(input)) if violations.is_empty() => Ok(CreateJobRequest { task, input, provider, max_cost }),
        _ => Err(Problem::invalid(violations)),
    }
}

fn created(job: &Job) -> Response {
    json_response(StatusCode::CREATED, job, &[("location", format!("/jobs/{}", job.id))])
}

#[utoipa::path(post, path = "/jobs", tag = "jobs",
    params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters naming this intent; the structured-field form \"abc\" is the same key as abc", pattern = r#"^([!#-~][!-~]{0,254}|"([!#-\[\]-~]|\\["\\]){1,255}")$"#)),
    request_body = crate::http::openapi::CreateJobBody,
    responses(
        (status = 201, description = "created: the job and its pending first attempt", body = Job,
         headers(("Location" = String, description = "/jobs/{id}"))),
        (status = 200, description = "a replay: the job this key made, as it is now", body = Job,
         headers(("Idempotent-Replayed" = String, description = "true"), ("Location" = String, description = "/jobs/{id}"))),
        (status = 400, description = "idempotency-key-missing or idempotency-key-invalid", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "idempotency-key-reused: the key made a job with another task, input, provider or max_cost; or budget-exceeded: the first attempt could cost more than max_cost", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload-too-large", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type: the body is not JSON", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed (malformed JSON, unknown field or task, input breaking the schema, a prompt that cannot be rendered) or provider-unknown", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn create_job(State(app): State<AppState>, Owner(owner): Owner, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let key = idempotency_key(&headers)?;
    let body = read_json(&headers, body, app.settings.max_body_bytes, false).await?;
    let request = parse_create_request(body)?;
    let task = app
        .catalog
        .task(&request.task)
        .ok_or_else(|| Problem::invalid_field("/task", format!("no task named '{}'", request.task)))?;
    let provider = request.provider.unwrap_or_else(|| task.settings.default_provider.clone());
    if app.catalog.provider(&provider).is_none() {
        return Err(Problem::provider_unknown(&provider).into());
    }
    let violations = task.check_input(&request.input);
    if !violations.is_empty() {
        return Err(Problem::invalid(violations).into());
    }
    // A prompt that cannot be rendered is the request's fault, found now
    // rather than by a worker.
    if let Err(message) = task.contract.render(&request.input) {
        return Err(Problem::invalid_field("/input", message).into());
    }

    super::usage::refuse_over_budget(&app.catalog, &task.name, &provider, &request.input, request.max_cost)?;
    let fingerprint = Fingerprint::of_job_with_budget(&task.name, &request.input, &provider, request.max_cost.map(|m| m.to_string()));
    let new = NewJob {
        owner,
        id: JobId::new(),
        idempotency_key: key,
        fingerprint,
        task: task.name.clone(),
        input: request.input,
        provider,
        first_attempt_id: AttemptId::new(),
        max_cost: request.max_cost,
    };
    // A key this process has seen taken: its holder never changes, so read
    // that job by id (one cheap statement) instead of trying the insert.
    if let Some(holder) = app.taken_keys.get(&new.owner, &new.idempotency_key) {
        if holder.fingerprint != fingerprint {
            return Err(key_reused_counted(&holder.task, KEY_REUSED).with("job_id", holder.job_id.to_string()).into());
        }
        let (store, owner) = (&app.store, &new.owner);
        if let Some(job) = app.reads.read(owner, holder.job_id, || store.get_job(owner, holder.job_id)).await? {
            return Ok(replayed(&job));
        }
        app.taken_keys.forget(&new.owner, &new.idempotency_key);
    }
    let store = &app.store;
    let flight = app
        .flights
        .join(&new.owner, &new.idempotency_key, || async {
            match store.create_job(&new).await {
                Ok(CreateJob::Created(job)) => Trip::Created(job),
                Ok(CreateJob::Existing(job)) => Trip::Existing(job),
                Err(error) => Trip::Failed(error),
            }
        })
        .await;
    match flight {
        Flight::Created(job) => {
            app.taken_keys.remember(&new.idempotency_key, &job);
            tracing::Span::current().record("job.id", tracing::field::display(job.id));
            app.signals.work_available();
            metrics::job_request(metrics::JOBS_CREATED, &job.task);
            Ok(created(&job))
        }
        Flight::Taken(job) => {
            app.taken_keys.remember(&new.idempotency_key, &job);
            if job.fingerprint == fingerprint {
                Ok(replayed(&job))
            } else {
                Err(key_reused_counted(&job.task, KEY_REUSED).with("job_id", job.id.to_string()).into())
            }
        }
        Flight::Failed(error) => Err(error.into()),
    }
}

const KEY_REUSED: &str = "this Idempotency-Key was used for a job with another task, input or provider";

/// 200: the job an earlier request with this key made, as it is now.
fn replayed(job: &Job) -> Response {
    tracing::Span::current().record("job.id", tracing::field::display(job.id));
    metrics::job_request(metrics::JOBS_REPLAYED, &job.task);
    json_response(StatusCode::OK, job, &[(REPLAYED, "true".into()), ("location", format!("/jobs/{}", job.id))])
}

fn key_reused_counted(task: &str, detail: &str) -> Problem {
    metrics::job_request(metrics::JOBS_CONFLICTED, task);
    key_reused(detail)
}

/// 409: the same key with another payload.
pub(crate) fn key_reused(detail: &str) -> Problem {
    Problem::new(StatusCode::CONFLICT, "idempotency-key-reused", "Idempotency-Key reused").detail(detail)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetQuery {
    wait: Option<String>,
}

fn parse_wait(query: Option<&str>) -> Result<Duration, Problem> {
    let query: GetQuery = serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|error| Problem::invalid_parameter("", &error.to_string()))?;
    match query.wait {
        None => Ok(Duration::ZERO),
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|s| *s <= MAX_WAIT_SECS)
            .map(Duration::from_secs)
            .ok_or_else(|| Problem::invalid_parameter("wait", "must be a whole number of seconds from 0 to 30")),
    }
}

/// A job as the API shows it, with its entity tag.
struct Shown {
    body: Vec<u8>,
    etag: String,
    terminal: bool,
}

fn show(job: &Job) -> Shown {
    let body = serde_json::to_vec(job).expect("a job serialises");
    let digest = Sha256::digest(&body);
    Shown { etag: format!("\"{}\"", hex::encode(&digest[..16])), body, terminal: job.state.is_terminal() }
}

/// Whether an `If-None-Match` header value names this tag.
fn matches_tag(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').map(|tag| tag.trim().trim_start_matches("W/")).any(|tag| tag == "*" || tag == etag)
}

#[utoipa::path(get, path = "/jobs/{id}", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "the job's id"),
           ("wait" = Option<u64>, Query, description = "long-poll up to this many seconds (0 to 30) until the job differs from what the client saw, or is finished"),
           ("If-None-Match" = Option<String>, Header, description = "the ETag the client has")),
    responses(
        (status = 200, description = "the job with all its attempts", body = Job, headers(("ETag" = String, description = "this representation's tag"))),
        (status = 304, description = "not modified: the client's ETag is current", headers(("ETag" = String))),
        (status = 404, description = "not-found: no such job for this owner", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed: a bad `wait`", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn get_job(
    State(app): State<AppState>,
    Owner(owner): Owner,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // An id that cannot exist is as absent as one that does not.
    let id = JobId::parse(&id).ok_or_else(Problem::not_found)?;
    tracing::Span::current().record("job.id", tracing::field::display(id));
    let wait = parse_wait(query.as_deref())?;
    let if_none_match = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).map(str::to_owned);
    // A long-poll listens for the job's changes from before each read, so
    // that no change slips in between.
    let watch = (!wait.is_zero()).then(|| app.signals.watch_job(id));
    let mut change = watch.as_ref().map(|watch| watch.next_change());
    // Many readers of one job at once (a change wakes every long-poll on it)
    // share reads.
    let read = || async {
        app.reads.read(&owner, id, || app.store.get_job(&owner, id)).await?.ok_or_else(|| ApiError::from(Problem::not_found()))
    };
    let mut shown = show(&*read().await?);
    let seen = |shown: &Shown| match &if_none_match {
        Some(tags) => matches_tag(tags, &shown.etag),
        None => false,
    };
    // Long-poll: wait until the job differs from what the client last saw
    // (its If-None-Match, or what it was when the request came), or ends.
    let baseline = shown.etag.clone();
    let deadline = tokio::time::Instant::now() + wait;
    while !wait.is_zero() && !shown.terminal && (seen(&shown) || (if_none_match.is_none() && shown.etag == baseline)) {
        let now = tokio::time::Instant::now();
        if now >= deadline {
            break;
        }
        let nap = app.long_poll_interval.min(deadline - now);
        let notice = change.take().expect("a long-poll watches its job");
        tokio::select! {
            _ = notice => {}
            _ = tokio::time::sleep(nap) => {}
        }
        change = watch.as_ref().map(|watch| watch.next_change());
        shown = show(&*read().await?);
    }
    let mut response = if seen(&shown) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut response = (StatusCode::OK, shown.body).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    };
    if let Ok(etag) = HeaderValue::from_str(&shown.etag) {
        response.headers_mut().insert(header::ETAG, etag);
    }
    Ok(response)
}

/// Returns when this process reports a change to job `id` (or may have
/// missed one).
#[utoipa::path(post, path = "/jobs/{id}/cancel", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "the job's id")),
    responses(
        (status = 200, description = "canceled (or it was already): pending attempts canceled; running ones finish and are never applied", body = Job),
        (status = 404, description = "not-found", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "job-finished: it succeeded", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn cancel_job(State(app): State<AppState>, Owner(owner): Owner, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = JobId::parse(&id).ok_or_else(Problem::not_found)?;
    tracing::Span::current().record("job.id", tracing::field::display(id));
    match app.store.cancel_job(&owner, id).await? {
        Cancel::Canceled(job) => {
            tracing::info!(owner = %owner, job.id = %id, "job canceled");
            metrics::attempts_canceled(job.attempts.iter().filter(|a| a.state == crate::domain::AttemptState::Canceled).count());
            app.signals.job_changed(id);
            Ok(json_response(StatusCode::OK, &job, &[]))
        }
        Cancel::AlreadyCanceled(job) => Ok(json_response(StatusCode::OK, &job, &[])),
        Cancel::Succeeded(_) => Err(Problem::refused(AdmissionRefusal::JobFinished, 0)
            .detail("the job succeeded; a finished job cannot be canceled")
            .into()),
        Cancel::NotFound => Err(Problem::not_found().into()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    task: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

fn parse_list_query(query: Option<&str>) -> Result<JobFilter, Problem> {
    let query: ListQuery = serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|error| Problem::invalid_parameter("", &error.to_string()))?;
    let state = query
        .state
        .map(|s| s.parse::<JobState>().map_err(|_| Problem::invalid_parameter("state", "not a job state")))
        .transpose()?;
    let before = query
        .cursor
        .map(|c| JobId::parse(&c).ok_or_else(|| Problem::invalid_parameter("cursor", "not a cursor from an earlier page")))
        .transpose()?;
    let limit = match query.limit {
        None => DEFAULT_PAGE,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| Problem::invalid_parameter("limit", "must be a whole number from 1 to 100"))?,
    };
    Ok(JobFilter { state, task: query.task, before, limit })
}

#[utoipa::path(get, path = "/jobs", tag = "jobs",
    params(("state" = Option<JobState>, Query, description = "only jobs in this state"),
           ("task" = Option<String>, Query, description = "only jobs of this task"),
           ("limit" = Option<u32>, Query, description = "1 to 100, default 20"),
           ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page")),
    responses(
        (status = 200, description = "the owner's jobs, newest first", body = crate::http::openapi::JobPage),
        (status = 422, description = "validation-failed: a bad parameter", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn list_jobs(State(app): State<AppState>, Owner(owner): Owner, RawQuery(query): RawQuery) -> Result<Response, ApiError> {
    let mut filter = parse_list_query(query.as_deref())?;
    let page = filter.limit;
    // One more than asked tells whether another page follows.
    filter.limit = page + 1;
    let mut jobs = app.store.list_jobs(&owner, &filter).await?;
    let next_cursor = if jobs.len() > page as usize {
        jobs.truncate(page as usize);
        jobs.last().map(|job| job.id.to_string())
    } else {
        None
    };
    Ok(json_response(StatusCode::OK, &json!({ "jobs": jobs, "next_cursor": next_cursor }), &[]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_requests_name_every_offending_field() {
        let problem = parse_create_request(json!({"task": 1, "extra/field": true})).unwrap_err();
        let response = problem.into_response();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let problem = parse_create_request(json!(["not", "an", "object"])).unwrap_err();
        assert_eq!(problem.kind(), "validation-failed");
        assert!(parse_create_request(json!({"task": "t", "input": {}})).is_ok());
        assert!(parse_create_request(json!({"task": "t", "input": {}, "provider": null})).is_ok());
    }

    #[test]
    fn list_queries_are_checked() {
        assert!(parse_list_query(Some("state=queued&limit=5")).is_ok());
        assert!(parse_list_query(None).is_ok());
        assert_eq!(parse_list_query(Some("state=done")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_list_query(Some("limit=0")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_list_query(Some("limit=101")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_list_query(Some("cursor=abc")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_list_query(Some("colour=red")).unwrap_err().kind(), "validation-failed");
        assert_eq!(pointer_to("a/b~c"), "/a~1b~0c");
        assert_eq!(parse_wait(Some("wait=30")).unwrap(), Duration::from_secs(30));
        assert_eq!(parse_wait(Some("wait=31")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_wait(None).unwrap(), Duration::ZERO);
    }

    #[test]
    fn if_none_match_lists_and_weak_tags_are_understood() {
        assert!(matches_tag("\"a\"", "\"a\""));
        assert!(matches_tag("\"x\", W/\"a\"", "\"a\""));
        assert!(matches_tag("*", "\"a\""));
        assert!(!matches_tag("\"b\"", "\"a\""));
    }
}
