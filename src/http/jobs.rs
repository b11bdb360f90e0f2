//! `/jobs`: create a job (I1, I2), read one, list them, cancel one, erase
//! one. The
//! handlers parse, call the use cases of [`crate::jobs`] and answer; every
//! one is scoped by the authenticated owner, and another owner's job is a
//! 404 (I7).

use std::time::Duration;

use std::sync::{Arc, OnceLock};

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::{Caller, Owner};
use super::bodies::CreateJobBody;
use super::error::{ApiError, Problem};
use super::extract::{JobPath, Key, StrictJson, Trace};
use super::in_flight::Slot;
use super::respond::{REPLAYED, json_response};
use crate::domain::JobFilter;
use crate::domain::{Job, JobId, JobState};
use crate::jobs::MadeOrFound;

/// Listings hold at most this many jobs a page.
const MAX_PAGE: u32 = 100;
const DEFAULT_PAGE: u32 = 20;

/// The longest a long-poll may wait, in seconds.
pub(crate) const MAX_WAIT_SECS: u64 = 30;

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_job, list_jobs))
        .routes(routes!(get_job, erase_job))
        .routes(routes!(cancel_job))
}

/// 201 with a new job, or 200 with the job an earlier request with the
/// same key made (a replay).
pub(crate) fn created_or_replayed(answer: &MadeOrFound<Arc<Job>>) -> Response {
    let job = &answer.value;
    tracing::Span::current().record("job.id", tracing::field::display(job.id));
    let location = ("location", format!("/jobs/{}", job.id));
    if answer.replayed {
        json_response(StatusCode::OK, job.as_ref(), &[(REPLAYED, "true".into()), location])
    } else {
        json_response(StatusCode::CREATED, job.as_ref(), &[location])
    }
}

#[utoipa::path(post, path = "/jobs", tag = "jobs",
    params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters naming this intent; the structured-field form \"abc\" is the same key as abc. A key is held as long as its job: a finished job (and its key) is kept for its task's retention after its last change (`retention.finished_jobs`, 30 days by default, never under 24 h), then purged; the job's `expires_at` says when, and after it the same key makes a new job", pattern = r#"^([!#-~][!-~]{0,254}|"([!#-\[\]-~]|\\["\\]){1,255}")$"#),
           ("Prefer" = Option<String>, Header, description = "`wait=N` (RFC 7240), N from 0 to 30: answer when the job is finished or N seconds have passed, whichever comes first, with the job as it then is (`Preference-Applied: wait=N` says it waited). Declined, and the job answered at once, when the owner holds all its places for long-polls on this server. Other preferences are ignored")),
    request_body = crate::http::bodies::CreateJobBody,
    responses(
        (status = 201, description = "created: the job and its pending first attempt (with `Prefer: wait`, the job as it is when it finished or the wait passed)", body = Job,
         headers(("Location" = String, description = "/jobs/{id}"), ("Preference-Applied" = String, description = "wait=N, when the request waited"))),
        (status = 200, description = "a replay: the job this key made, as it is now", body = Job,
         headers(("Idempotent-Replayed" = String, description = "true"), ("Location" = String, description = "/jobs/{id}"), ("Preference-Applied" = String, description = "wait=N, when the request waited"))),
        (status = 400, description = "idempotency-key-missing or idempotency-key-invalid", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "idempotency-key-reused: the key made a job with another task, input, provider or max_cost; or budget-exceeded: the first attempt could cost more than max_cost", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 413, description = "payload-too-large", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 415, description = "unsupported-media-type: the body is not JSON", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed (malformed JSON, unknown field or task, input breaking the schema, a prompt that cannot be rendered, a bad `Prefer: wait`) or provider-unknown", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn create_job(
    State(app): State<AppState>,
    Caller(caller): Caller,
    Key(key): Key,
    Trace(trace): Trace,
    slot: Slot,
    headers: HeaderMap,
    StrictJson(body): StrictJson<CreateJobBody>,
) -> Result<Response, ApiError> {
    let wait = prefer_wait(&headers)?;
    let request = crate::jobs::JobRequest { trace, ..body.try_into()? };
    // A place to wait in, taken before the job is made. With none free, the
    // preference is declined: the job is answered at once, without
    // `Preference-Applied`.
    let poll = wait.and_then(|wait| app.jobs.open_long_poll(&caller.owner, Some(caller.key), wait).ok());
    let (mut answer, watch) = app.jobs.create_job(caller.owner, key, request, poll.is_some()).await?;
    let Some(poll) = poll else { return Ok(created_or_replayed(&answer)) };
    // Waiting, it holds one of its owner's places for long-polls, not a
    // slot of the requests in flight.
    if !answer.value.state.is_terminal() {
        slot.release();
        answer.value = app.jobs.wait_for_end(&poll, watch, answer.value).await;
    }
    let mut response = created_or_replayed(&answer);
    if let Ok(applied) = HeaderValue::from_str(&format!("wait={}", poll.wait().as_secs())) {
        response.headers_mut().insert(PREFERENCE_APPLIED, applied);
    }
    Ok(response)
}

/// The header that says a `Prefer` preference was honoured (RFC 7240).
const PREFERENCE_APPLIED: header::HeaderName = header::HeaderName::from_static("preference-applied");

/// The `wait` preference of a request's `Prefer` headers (RFC 7240): how
/// long a creation may wait for its job's end, 1 to 30 seconds; `None`
/// without one, or with `wait=0`. Other preferences are ignored; a `wait`
/// that is not a whole number of seconds up to 30 is refused, as `?wait=`
/// is, before anything is made.
fn prefer_wait(headers: &HeaderMap) -> Result<Option<Duration>, Problem> {
    let preferences = headers.get_all("prefer").iter().filter_map(|value| value.to_str().ok());
    let wait = preferences
        .flat_map(|value| value.split(','))
        .filter_map(|preference| {
            let token = preference.split(';').next().unwrap_or_default();
            let (name, value) = token.split_once('=').unwrap_or((token, ""));
            name.trim().eq_ignore_ascii_case("wait").then(|| value.trim().trim_matches('"').to_owned())
        })
        .next();
    let Some(value) = wait else { return Ok(None) };
    let seconds = wait_seconds(&value)
        .ok_or_else(|| Problem::invalid_parameter("Prefer", "wait must be a whole number of seconds from 0 to 30"))?;
    Ok((seconds > 0).then(|| Duration::from_secs(seconds)))
}

/// A wait as `?wait=` and `Prefer: wait=` give it: a whole number of
/// seconds from 0 to [`MAX_WAIT_SECS`].
fn wait_seconds(text: &str) -> Option<u64> {
    text.parse::<u64>().ok().filter(|seconds| *seconds <= MAX_WAIT_SECS)
}

/// Whether a request asks to wait for its job (a long-poll, or a creation
/// with `Prefer: wait`): its deadline then adds the longest wait. One whose
/// wait is refused is answered at once.
pub(super) fn asks_to_wait(headers: &HeaderMap, query: Option<&str>) -> bool {
    matches!(prefer_wait(headers), Ok(Some(_))) || parse_wait(query).is_ok_and(|wait| !wait.is_zero())
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
        Some(text) => wait_seconds(&text)
            .map(Duration::from_secs)
            .ok_or_else(|| Problem::invalid_parameter("wait", "must be a whole number of seconds from 0 to 30")),
    }
}

/// A job as the API shows it, with its entity tag.
struct JobAnswer {
    body: Vec<u8>,
    etag: String,
}

fn answer_body(job: &Job) -> JobAnswer {
    let body = serde_json::to_vec(job).expect("a job serialises");
    // The tag is the job's, without why it waits: a wait read anew for
    // each answer does not make a long-poll's job differ.
    let digest = match &job.waiting {
        None => Sha256::digest(&body),
        Some(_) => Sha256::digest(serde_json::to_vec(&Job { waiting: None, ..job.clone() }).expect("a job serialises")),
    };
    JobAnswer { etag: format!("\"{}\"", hex::encode(&digest[..16])), body }
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
        (status = 422, description = "validation-failed: a bad `wait`", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::WaitingErrors
    ))]
pub(crate) async fn get_job(
    State(app): State<AppState>,
    Caller(caller): Caller,
    JobPath(id): JobPath,
    RawQuery(query): RawQuery,
    slot: Slot,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let wait = parse_wait(query.as_deref())?;
    let if_none_match = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let seen = |shown: &JobAnswer| if_none_match.as_deref().is_some_and(|tags| matches_tag(tags, &shown.etag));
    // A long-poll waits until the job differs from what the client last saw
    // (its If-None-Match, or what it was when the request came), or ends.
    let baseline = OnceLock::new();
    let changed = |job: &Job| {
        let shown = answer_body(job);
        match &if_none_match {
            Some(_) => !seen(&shown),
            None => *baseline.get_or_init(|| shown.etag.clone()) != shown.etag,
        }
    };
    let job = if wait.is_zero() {
        app.jobs.get_job(&caller.owner, id).await
    } else {
        let poll = app.jobs.open_long_poll(&caller.owner, Some(caller.key), wait)?;
        // Waiting, it holds one of its owner's places for long-polls, not a
        // slot of the requests in flight.
        slot.release();
        app.jobs.watch_job(&poll, id, changed).await
    };
    let job = app.jobs.with_waiting(job?).await;
    let shown = answer_body(&job);
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

/// Cancels a job unless it succeeded: its pending attempts are canceled;
/// running ones finish and are recorded, never applied.
#[utoipa::path(post, path = "/jobs/{id}/cancel", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "the job's id")),
    responses(
        (status = 200, description = "canceled (or it was already): pending attempts canceled; running ones are being canceled (`canceling` lists them) or, with the task's `cancel_losers` off, finish and are never applied", body = Job),
        (status = 404, description = "not-found", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "job-finished: it succeeded", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn cancel_job(
    State(app): State<AppState>,
    Owner(owner): Owner,
    JobPath(id): JobPath,
) -> Result<Response, ApiError> {
    let job = app.jobs.cancel_job(&owner, id).await?;
    Ok(json_response(StatusCode::OK, &job, &[]))
}

/// Erases a finished job now, with its attempts and events; what it cost
/// stays in the usage report, and its key is free.
#[utoipa::path(delete, path = "/jobs/{id}", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "the job's id")),
    responses(
        (status = 204, description = "erased: the job, its attempts, events and webhook deliveries are gone; its usage stays in `GET /usage`, and its idempotency key makes a new job"),
        (status = 404, description = "not-found", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "job-not-finished: it is queued, running or unknown, or an attempt of it is still pending, running or unknown", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn erase_job(
    State(app): State<AppState>,
    Owner(owner): Owner,
    JobPath(id): JobPath,
) -> Result<Response, ApiError> {
    app.jobs.erase_job(&owner, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
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
        .map(|c| {
            JobId::parse(&c).ok_or_else(|| Problem::invalid_parameter("cursor", "not a cursor from an earlier page"))
        })
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
pub(crate) async fn list_jobs(
    State(app): State<AppState>,
    Owner(owner): Owner,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let mut filter = parse_list_query(query.as_deref())?;
    let page = filter.limit;
    // One more than asked tells whether another page follows.
    filter.limit = page + 1;
    let mut jobs = app.jobs.list_jobs(&owner, &filter).await?;
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
    fn list_queries_are_checked() {
        assert!(parse_list_query(Some("state=queued&limit=5")).is_ok());
        assert!(parse_list_query(None).is_ok());
        assert_eq!(parse_list_query(Some("state=done")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_list_query(Some("limit=0")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_list_query(Some("limit=101")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_list_query(Some("cursor=abc")).unwrap_err().kind(), "validation-failed");
        assert_eq!(parse_list_query(Some("colour=red")).unwrap_err().kind(), "validation-failed");
        assert_eq!(crate::http::extract::pointer_to("a/b~c"), "/a~1b~0c");
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
