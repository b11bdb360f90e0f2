//! The dashboard's pages: sign-in, the jobs list, a job with its attempt
//! timeline, the unknown attempts with a form to resolve each, and the
//! providers. Every read is scoped by the session's owner, or spans owners
//! for an admin key's session; every change goes through the API's own
//! handler.

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::session::{self, Session};
use super::{PageError, PageSession, fragment, page, safe_next, ser, timeline};
use crate::domain::JobFilter;
use crate::domain::{EventKind, Job, JobEvent, JobId, JobState};
use crate::http::bodies::parse_resolution;
use crate::http::error::{ApiError, Problem};
use crate::http::extract::parse_json_text;
use crate::keys::AuthError;
use crate::state::AppState;

/// Jobs a page of the list shows.
const PAGE_SIZE: u32 = 25;
/// Unknown attempts the unknown page shows at most.
const UNKNOWN_LIMIT: u32 = 200;
/// The largest form body read.
const FORM_LIMIT: usize = 64 * 1024;

fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string()
}

/// "4.2 s", "3 min 5 s", "2 h 10 min": an age for people.
pub(crate) fn age(seconds: f64) -> String {
    let seconds = seconds.max(0.0);
    if seconds < 60.0 {
        format!("{seconds:.1} s")
    } else if seconds < 3600.0 {
        format!("{} min {} s", (seconds / 60.0) as u64, (seconds % 60.0) as u64)
    } else {
        format!("{} h {} min", (seconds / 3600.0) as u64, ((seconds % 3600.0) / 60.0) as u64)
    }
}

async fn read_form<T: for<'de> Deserialize<'de>>(body: Body) -> Result<T, PageError> {
    let bytes = axum::body::to_bytes(body, FORM_LIMIT)
        .await
        .map_err(|_| ApiError::from(Problem::invalid_field("", "the form is too large")))?;
    serde_urlencoded::from_bytes(&bytes)
        .map_err(|error| ApiError::from(Problem::invalid_field("", error.to_string())).into())
}

// Sign-in and sign-out.

#[derive(Deserialize, Default)]
pub(crate) struct NextQuery {
    next: Option<String>,
}

#[derive(Serialize)]
struct SignInView<'a> {
    next: &'a str,
    message: Option<&'a str>,
    /// What each role's key reaches, as `KeyRole::reaches` says.
    roles: Vec<(&'static str, &'static str)>,
}

impl<'a> SignInView<'a> {
    fn new(next: &'a str, message: Option<&'a str>) -> Self {
        let roles = crate::domain::KeyRole::ALL.iter().map(|role| (role.as_str(), role.reaches())).collect();
        Self { next, message, roles }
    }
}

/// The sign-in form.
pub(crate) async fn signin_form(RawQuery(query): RawQuery) -> Response {
    let query: NextQuery = serde_urlencoded::from_str(query.as_deref().unwrap_or_default()).unwrap_or_default();
    let next = safe_next(query.next.as_deref().unwrap_or("/ui"));
    page(StatusCode::OK, None, "Sign in", "signin", "signin.html", ser(&SignInView::new(next, None)))
}

#[derive(Deserialize)]
pub(crate) struct SignInForm {
    token: String,
    #[serde(default)]
    next: String,
}

/// Checks the API key like a bearer token; a live one starts a session.
/// The key's token travels in the form's body only, and is neither logged
/// nor kept: the session names the key by its id. The session's own token
/// goes to the cookie only; the database keeps its SHA-256.
pub(crate) async fn signin(
    State(app): State<AppState>,
    peer: Option<axum::Extension<crate::http::serve::Peer>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, PageError> {
    if !session::same_origin(&headers) {
        return Err(PageError::Forbidden);
    }
    // Bad tokens count as they do on the API.
    let address = crate::http::auth::address_of(peer.as_deref(), &headers, &app);
    crate::http::auth::refuse_failing(address, &app)?;
    let form: SignInForm = read_form(body).await?;
    let next = safe_next(&form.next);
    let token = form.token.trim();
    match app.auth.authenticate(token).await {
        Ok(identity) => {
            let id = app.sessions.start(&identity).await?;
            tracing::info!(owner = %identity.owner, role = %identity.role, key = %identity.key, "dashboard sign-in");
            let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, next.to_owned())]).into_response();
            response.headers_mut().insert(header::SET_COOKIE, session::set_cookie(&id, session::over_https(&headers)));
            Ok(response)
        }
        Err(AuthError::Store(error)) => Err(ApiError::from(error).into()),
        Err(_) => {
            if let Some(address) = address {
                app.auth_failures.record(address);
            }
            let message = Some("That is not a live API key.");
            Ok(page(
                StatusCode::UNAUTHORIZED,
                None,
                "Sign in",
                "signin",
                "signin.html",
                ser(&SignInView::new(next, message)),
            ))
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// A form's CSRF token and origin, checked against the session.
fn check_form(session: &Session, headers: &HeaderMap, csrf: &str) -> Result<(), PageError> {
    if session::same_origin(headers) && session::csrf_matches(session, csrf) {
        Ok(())
    } else {
        Err(PageError::Forbidden)
    }
}

/// Ends the session, on every server, and forgets the cookie.
pub(crate) async fn signout(
    State(app): State<AppState>,
    PageSession(session): PageSession,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, PageError> {
    let form: CsrfForm = read_form(body).await?;
    check_form(&session, &headers, &form.csrf)?;
    if let Some(id) = session::cookie_session(&headers) {
        app.sessions.end(&id).await?;
    }
    let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/ui/signin")]).into_response();
    response.headers_mut().insert(header::SET_COOKIE, session::clear_cookie());
    Ok(response)
}

// The jobs list.

#[derive(Deserialize, Default)]
pub(crate) struct JobsQuery {
    #[serde(default)]
    state: String,
    #[serde(default)]
    task: String,
    #[serde(default)]
    q: String,
    #[serde(default)]
    cursor: String,
}

#[derive(Serialize)]
struct JobRow {
    id: String,
    owner: String,
    key: String,
    task: String,
    provider: String,
    state: &'static str,
    winner: Option<i32>,
    created: String,
    updated: String,
}

fn query_string(pairs: &[(&str, &str)]) -> String {
    let kept: Vec<(&str, &str)> = pairs.iter().copied().filter(|(_, v)| !v.is_empty()).collect();
    serde_urlencoded::to_string(kept).unwrap_or_default()
}

/// The job with this id that the session may see: its owner's, or any
/// owner's for an admin.
async fn visible_job(app: &AppState, session: &Session, id: &str) -> Result<Option<Job>, PageError> {
    let Some(id) = JobId::parse(id) else { return Ok(None) };
    let admin = session.identity.role.spans_owners();
    Ok(app.jobs.find_job(&session.identity.owner, id, admin).await?)
}

/// `GET /ui`: the jobs, newest first, with state and task filters and a
/// search by job id or idempotency key.
pub(crate) async fn jobs(
    State(app): State<AppState>,
    PageSession(session): PageSession,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    let query: JobsQuery = serde_urlencoded::from_str(query.as_deref().unwrap_or_default()).unwrap_or_default();
    let search = query.q.trim();
    // A job id goes straight to its page.
    if !search.is_empty()
        && let Some(job) = visible_job(&app, &session, search).await?
    {
        return Ok((StatusCode::SEE_OTHER, [(header::LOCATION, format!("/ui/jobs/{}", job.id))]).into_response());
    }
    let filter = JobFilter {
        state: query.state.parse::<JobState>().ok(),
        task: Some(query.task.clone()).filter(|t| !t.is_empty()),
        before: JobId::parse(&query.cursor),
        limit: PAGE_SIZE,
    };
    let admin = session.identity.role.spans_owners();
    let scope = if admin { None } else { Some(&session.identity.owner) };
    let key = Some(search).filter(|s| !s.is_empty() && JobId::parse(s).is_none());
    let found = app.jobs.browse_jobs(scope, key, &filter).await?;
    let next = (found.len() == PAGE_SIZE as usize).then(|| {
        let last = found.last().map(|j| j.job.id.to_string()).unwrap_or_default();
        query_string(&[("state", &query.state), ("task", &query.task), ("q", search), ("cursor", &last)])
    });
    let rows: Vec<JobRow> = found
        .into_iter()
        .map(|j| JobRow {
            id: j.job.id.to_string(),
            owner: j.owner.as_str().to_owned(),
            key: j.job.idempotency_key,
            task: j.job.task,
            provider: j.job.provider,
            state: j.job.state.as_str(),
            winner: j.job.winning_attempt,
            created: when(j.job.created_at),
            updated: when(j.job.updated_at),
        })
        .collect();
    let tasks: Vec<&str> = app.catalog.tasks().map(|t| t.name.as_str()).collect();
    let states: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
    let context = minijinja::context! {
        rows => ser(&rows), admin => admin, tasks => ser(&tasks), states => ser(&states),
        state => query.state, task => query.task, q => search, next => next,
        paged => !query.cursor.is_empty(),
    };
    Ok(page(StatusCode::OK, Some(&session), "Jobs", "jobs", "jobs.html", context))
}

// A job.

#[derive(Serialize)]
struct AttemptRow {
    number: i32,
    provider: String,
    state: &'static str,
    origin: &'static str,
    key: Option<String>,
    created: String,
    started: Option<String>,
    finished: Option<String>,
    error: Option<String>,
    winner: bool,
    /// `prompt + completion`, with "(estimate)" when the provider never said.
    tokens: Option<String>,
    /// The attempt's cost and currency.
    cost: Option<String>,
}

#[derive(Serialize)]
struct EventRow {
    offset: String,
    kind: String,
    attempt: Option<i32>,
    detail: String,
    notable: bool,
}

/// What the job page and its refreshed fragment show of a job's progress.
fn timeline_context(job: &Job, events: &[JobEvent], now: DateTime<Utc>) -> minijinja::Value {
    let attempts: Vec<AttemptRow> = job
        .attempts
        .iter()
        .map(|a| AttemptRow {
            number: a.number,
            provider: a.provider.clone(),
            state: a.state.as_str(),
            origin: a.origin.as_str(),
            key: a.idempotency_key.clone(),
            created: when(a.created_at),
            started: a.started_at.map(when),
            finished: a.finished_at.map(when),
            error: a.error.as_ref().map(|e| {
                let kind = e["type"].as_str().unwrap_or("error");
                let message = e["message"].as_str().unwrap_or_default();
                format!("{kind}: {message}")
            }),
            winner: job.winning_attempt == Some(a.number),
            tokens: a.usage.as_ref().map(|u| {
                let estimate = if u.estimated { " (estimate)" } else { "" };
                let cached = match (u.cache_write_tokens, u.cache_read_tokens) {
                    (0, 0) => String::new(),
                    (written, read) => format!(" (cache: {written} written, {read} read)"),
                };
                format!("{} + {}{cached}{estimate}", u.prompt_tokens, u.completion_tokens)
            }),
            cost: a.cost.as_ref().map(|c| format!("{} {}", c.amount, c.currency)),
        })
        .collect();
    let event_rows: Vec<EventRow> = events
        .iter()
        .map(|e| EventRow {
            offset: format!("+{:.3} s", (e.at - job.created_at).num_microseconds().unwrap_or(0) as f64 / 1e6),
            kind: e.kind.as_str().to_owned(),
            attempt: e.attempt_number,
            detail: if e.detail.is_null() { String::new() } else { e.detail.to_string() },
            notable: matches!(
                e.kind,
                EventKind::AdmissionRefused
                    | EventKind::RaceLost
                    | EventKind::AttemptUnknown
                    | EventKind::AttemptResolved
                    | EventKind::FailoverSkipped
                    | EventKind::JobCanceled
            ),
        })
        .collect();
    let open = job.attempts.iter().any(|a| {
        matches!(
            a.state,
            crate::domain::AttemptState::Pending
                | crate::domain::AttemptState::Running
                | crate::domain::AttemptState::Unknown
        )
    });
    let attempt_states: Vec<String> =
        job.attempts.iter().map(|a| format!("{}:{}:{}", a.number, a.provider, a.state.as_str())).collect();
    minijinja::context! {
        id => job.id.to_string(),
        state => job.state.as_str(),
        winner => job.winning_attempt,
        result => job.result.as_ref().map(|r| serde_json::to_string_pretty(r).unwrap_or_default()),
        files => job.result.as_ref().map(crate::files::images_named).unwrap_or_default(),
        svg => minijinja::Value::from_safe_string(timeline::render(job, events, now)),
        attempts => ser(&attempts),
        events => ser(&event_rows),
        open => if open { "true" } else { "false" },
        attempt_states => attempt_states.join(" "),
        // The stream's cursor: events are numbered by their place in the log.
        last_event => events.len(),
        cost => job.cost.as_ref().map(ser),
    }
}

/// `GET /ui/jobs/{id}`: the request, its fingerprint, the result, the
/// attempt timeline and the events. Another owner's job is a 404 (unless
/// the session is an admin's).
pub(crate) async fn job(
    State(app): State<AppState>,
    PageSession(session): PageSession,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let (job, live) = job_progress(&app, &session, &id).await?;
    let timeline = super::render_template("timeline.html", minijinja::context! { live => live })?;
    let context = minijinja::context! {
        id => job.id.to_string(),
        owner => job.owner.as_str(),
        key => &job.idempotency_key,
        fingerprint => job.fingerprint.to_string(),
        task => &job.task,
        provider => &job.provider,
        created => when(job.created_at),
        input => serde_json::to_string_pretty(&job.input).unwrap_or_default(),
        timeline => minijinja::Value::from_safe_string(timeline),
        admin => session.identity.role.spans_owners(),
        // The job's event stream is its owner's: an admin's page of another
        // owner's job refreshes by polling.
        event_kinds => (job.owner == session.identity.owner).then(event_kinds),
    };
    Ok(page(StatusCode::OK, Some(&session), &format!("Job {}", job.id), "jobs", "job.html", context))
}

/// `GET /ui/jobs/{id}/timeline`: the part of the job page that changes, for
/// the page's script to refresh.
pub(crate) async fn timeline(
    State(app): State<AppState>,
    PageSession(session): PageSession,
    Path(id): Path<String>,
) -> Result<Response, PageError> {
    let (_, live) = job_progress(&app, &session, &id).await?;
    Ok(fragment("timeline.html", minijinja::context! { live => live }))
}

/// Every kind of event, as the page's script listens for them on a job's
/// event stream.
pub(crate) fn event_kinds() -> String {
    EventKind::ALL.iter().map(|kind| kind.as_str()).collect::<Vec<_>>().join(" ")
}

/// A job the session may see, with what its progress fragment shows.
async fn job_progress(app: &AppState, session: &Session, id: &str) -> Result<(Job, minijinja::Value), PageError> {
    let seen = visible_job(app, session, id).await?.ok_or(PageError::NotFound)?;
    // The job is read again after its log, so that it is at least as new as
    // the last event shown: the page's script follows the event stream from
    // after that event, and misses no change.
    let (job, events) = app.jobs.job_with_events(&seen.owner, seen.id).await?.ok_or(PageError::NotFound)?;
    let live = timeline_context(&job, &events, Utc::now());
    Ok((job, live))
}

// Unknown attempts.

#[derive(Serialize)]
struct UnknownRow {
    job: String,
    owner: String,
    number: i32,
    provider: String,
    task: String,
    since: Option<String>,
    age: String,
    asked: i32,
    error: String,
    /// Its task's retention, when it has been unknown for longer: such a
    /// job is kept until it is settled, never purged.
    past_retention: Option<String>,
}

#[derive(Deserialize, Default)]
pub(crate) struct UnknownQuery {
    #[serde(default)]
    resolved: String,
}

async fn unknown_page(
    app: &AppState,
    session: &Session,
    status: StatusCode,
    resolved: &str,
    error: Option<String>,
) -> Result<Response, PageError> {
    let admin = session.identity.role.spans_owners();
    let scope = if admin { None } else { Some(&session.identity.owner) };
    let now = Utc::now();
    let rows: Vec<UnknownRow> = app
        .jobs
        .list_unknown_attempts(scope, UNKNOWN_LIMIT)
        .await?
        .into_iter()
        .map(|u| UnknownRow {
            past_retention: u.unknown_since.and_then(|at| {
                let retention = app.catalog.retention_of(&u.task);
                (now - at > retention.as_chrono()).then(|| retention.to_string())
            }),
            job: u.attempt.job_id.to_string(),
            owner: u.attempt.owner.as_str().to_owned(),
            number: u.attempt.number,
            provider: u.provider,
            task: u.task,
            since: u.unknown_since.map(when),
            age: u.unknown_since.map_or_else(String::new, |at| age((now - at).num_milliseconds() as f64 / 1000.0)),
            asked: u.reconcile_count,
            error: u.error.as_ref().map_or_else(String::new, |e| {
                format!("{}: {}", e["type"].as_str().unwrap_or("error"), e["message"].as_str().unwrap_or_default())
            }),
        })
        .collect();
    let context = minijinja::context! { rows => ser(&rows), admin => admin, resolved => resolved, error => error, csrf => &session.csrf };
    Ok(page(status, Some(session), "Unknown attempts", "unknown", "unknown.html", context))
}

/// `GET /ui/unknown`: every open unknown attempt (an admin's session: of
/// every owner), the longest unknown first.
pub(crate) async fn unknown(
    State(app): State<AppState>,
    PageSession(session): PageSession,
    RawQuery(query): RawQuery,
) -> Result<Response, PageError> {
    let query: UnknownQuery = serde_urlencoded::from_str(query.as_deref().unwrap_or_default()).unwrap_or_default();
    unknown_page(&app, &session, StatusCode::OK, &query.resolved, None).await
}

#[derive(Deserialize)]
pub(crate) struct ResolveForm {
    #[serde(default)]
    csrf: String,
    job: String,
    number: String,
    outcome: String,
    #[serde(default)]
    output: String,
    #[serde(default)]
    reason: String,
}

/// The words of a problem answer, for a page.
async fn problem_words(error: ApiError) -> (StatusCode, String) {
    let response = error.into_response();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024).await.unwrap_or_default();
    let problem: Value = serde_json::from_slice(&body).unwrap_or_default();
    let title = problem["title"].as_str().unwrap_or("Refused");
    let detail = problem["detail"].as_str().map(|d| format!(": {d}")).unwrap_or_default();
    (status, format!("{title}{detail}"))
}

/// `POST /ui/unknown/resolve`: settles an unknown attempt with a reason,
/// through the use case `POST /jobs/{id}/attempts/{number}/resolve` calls
/// (an admin's session reaches any owner's unknown attempt, as an admin key
/// does).
pub(crate) async fn resolve(
    State(app): State<AppState>,
    PageSession(session): PageSession,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, PageError> {
    let form: ResolveForm = read_form(body).await?;
    check_form(&session, &headers, &form.csrf)?;
    let mut request = json!({ "outcome": form.outcome, "reason": form.reason.trim() });
    if !form.output.trim().is_empty() {
        match serde_json::from_str::<Value>(&form.output) {
            Ok(output) => request["output"] = output,
            Err(error) => {
                let message = format!("The output is not JSON: {error}");
                return unknown_page(&app, &session, StatusCode::UNPROCESSABLE_ENTITY, "", Some(message)).await;
            }
        }
    }
    let answer = async {
        let job_id = JobId::parse(&form.job).ok_or_else(Problem::not_found)?;
        let number: i32 = form.number.parse().map_err(|_| Problem::not_found())?;
        // Read as the API reads a body: within its limit, strictly (no NUL,
        // no integer a double cannot hold), then as a resolve body.
        let request = parse_json_text(request.to_string().as_bytes(), app.settings.max_body_bytes)?;
        let (resolution, reason) = parse_resolution(request)?;
        app.jobs.resolve_attempt(&session.identity, job_id, number, resolution, &reason).await.map_err(ApiError::from)
    }
    .await;
    match answer {
        Ok(_) => {
            let done = query_string(&[("resolved", &format!("{} #{}", form.job, form.number))]);
            Ok((StatusCode::SEE_OTHER, [(header::LOCATION, format!("/ui/unknown?{done}"))]).into_response())
        }
        Err(error) => {
            let (status, message) = problem_words(error).await;
            unknown_page(&app, &session, status, "", Some(message)).await
        }
    }
}

// Providers.

/// `GET /ui/providers`: each provider's qualification per task with its
/// last report. Admin sessions only, as `GET /providers` is admin only.
pub(crate) async fn providers(
    State(app): State<AppState>,
    PageSession(session): PageSession,
) -> Result<Response, PageError> {
    if !session.identity.role.spans_owners() {
        return Err(PageError::Forbidden);
    }
    let report = crate::http::providers::providers_report(&app).await?;
    let context = minijinja::context! { providers => ser(&report["providers"]) };
    Ok(page(StatusCode::OK, Some(&session), "Providers", "providers", "providers.html", context))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_naturally() {
        assert_eq!(age(4.24), "4.2 s");
        assert_eq!(age(185.0), "3 min 5 s");
        assert_eq!(age(7800.0), "2 h 10 min");
        assert_eq!(age(-1.0), "0.0 s");
    }

    #[test]
    fn list_links_keep_only_the_filters_in_use() {
        assert_eq!(query_string(&[("state", ""), ("task", "summarize"), ("q", "a b&c")]), "task=summarize&q=a+b%26c");
    }
}
