//! The HTTP API: one file per resource, each exporting `router()`, whose
//! routes and OpenAPI description come from one list ([`api`]). Handlers
//! are thin: they extract and parse, call a use case (the jobs of
//! `crate::jobs`, keys, webhook endpoints, qualifications; never the
//! store), and map its typed outcome to a response.

pub(crate) mod attempts;
pub(crate) mod auth;
pub(crate) mod bodies;
pub(crate) mod callbacks;
pub mod error;
pub(crate) mod events;
pub(crate) mod extract;
pub(crate) mod files;
pub(crate) mod in_flight;
pub(crate) mod jobs;
pub mod json;
pub(crate) mod keys;
pub mod openapi;
pub(crate) mod output;
pub(crate) mod providers;
pub(crate) mod respond;
pub(crate) mod serve;
pub(crate) mod usage;
pub(crate) mod webhooks;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::Router;
use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use crate::state::AppState;
use crate::sync::LockAnyway;
use error::{Problem, ProblemType};
use openapi::{Access, with_access};

/// Every route of the JSON API with its description, from one list: each
/// resource's `router()` registers its handlers with their `#[utoipa::path]`
/// annotations, and the access each group needs (`x-onejob-role`).
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(with_access(Access::Client, jobs::router()))
        .merge(with_access(Access::Client, events::router()))
        .merge(with_access(Access::Client, output::router()))
        .merge(with_access(Access::Client, files::router()))
        .merge(with_access(Access::Client, attempts::router()))
        .merge(with_access(Access::Client, usage::router()))
        .merge(with_access(Access::Operator, providers::router()))
        .merge(with_access(Access::Admin, keys::router()))
        .merge(with_access(Access::Admin, webhooks::router()))
        .merge(with_access(Access::Public, operations()))
        .merge(with_access(Access::Public, callbacks::router()))
}

/// The routes for operators and tools, which need no key.
fn operations() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(render_metrics))
        .routes(routes!(openapi::openapi_json))
        .routes(routes!(openapi::docs))
}

/// Serves `routes` (the API's and the dashboard's) with what every request
/// gets: problem answers for unknown routes and methods, per-route metrics,
/// the request deadline, the limit of requests in flight (one budget for
/// every route, see `in_flight`), panics caught, and a span per request.
pub fn serve_routes(routes: Router<AppState>, state: AppState) -> Router {
    let slots = in_flight::Slots::new(state.settings.max_concurrent_requests);
    routes
        .route_layer(middleware::from_fn(record_request))
        .fallback(|| async { Problem::not_found().detail("no such route") })
        .method_not_allowed_fallback(|| async { Problem::new(ProblemType::MethodNotAllowed) })
        .layer(middleware::from_fn_with_state(state.clone(), deadline))
        .layer(middleware::from_fn_with_state(slots, in_flight::limit))
        .layer(CatchPanicLayer::custom(|_| {
            tracing::error!("a request handler panicked");
            Problem::internal().into_response()
        }))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request| {
                    let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok());
                    let trace = crate::domain::TraceContext::from_headers(header("traceparent"), header("tracestate"));
                    // OpenTelemetry's HTTP server span: named by the route.
                    let route = request
                        .extensions()
                        .get::<axum::extract::MatchedPath>()
                        .map(axum::extract::MatchedPath::as_str);
                    let path = logged_path(request.uri().path());
                    let span = tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %path,
                        owner = tracing::field::Empty,
                        job.id = tracing::field::Empty,
                        trace_id = trace.as_ref().map(|t| t.trace_id()),
                        otel.name = %crate::process::telemetry::SpanName(request.method().as_str(), route.unwrap_or("")),
                        otel.kind = "server",
                        http.request.method = %request.method(),
                        url.path = %path,
                        http.route = route,
                        http.response.status_code = tracing::field::Empty,
                    );
                    crate::process::telemetry::adopt(&span, trace.as_ref());
                    span
                })
                .on_response(|response: &Response, latency: std::time::Duration, span: &tracing::Span| {
                    span.record("http.response.status_code", i64::from(response.status().as_u16()));
                    tracing::debug!(
                        status = response.status().as_u16(),
                        latency_ms = latency.as_millis() as u64,
                        "finished processing request"
                    );
                }),
        )
        .with_state(state)
}

/// A request's path as logs and traces show it: a callback's token (its
/// last segment, which settles an attempt) left out.
fn logged_path(path: &str) -> std::borrow::Cow<'_, str> {
    let Some(rest) = path.strip_prefix("/callbacks/") else { return path.into() };
    let mut segments = rest.splitn(3, '/');
    let (job, number) = (segments.next().unwrap_or_default(), segments.next().unwrap_or_default());
    format!("/callbacks/{job}/{number}/…").into()
}

/// Answers a request that outlives the configured timeout instead of
/// leaving the client hanging: 408 `request-timeout` when it was still
/// waiting for the client's body (a client trickling bytes, slowloris), 503
/// `unavailable` otherwise.
async fn deadline(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let mut limit = state.settings.request_timeout;
    // A long-poll, or a creation with `Prefer: wait`, may wait its full
    // time on top.
    if jobs::asks_to_wait(request.headers(), request.uri().query()) {
        limit += std::time::Duration::from_secs(jobs::MAX_WAIT_SECS);
    }
    let body_waited = Arc::new(AtomicBool::new(false));
    let request = if request.body().is_end_stream() {
        request
    } else {
        let waiting = body_waited.clone();
        request.map(|body| axum::body::Body::new(WatchedBody { body, waiting }))
    };
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => {
            if response.extensions().get::<error::StorageFull>().is_some() {
                state.storage_full_at.store(chrono::Utc::now().timestamp(), Ordering::Relaxed);
            }
            response
        }
        Err(_) if body_waited.load(Ordering::Relaxed) => {
            tracing::info!("the request body did not arrive in time");
            let mut response = Problem::new(ProblemType::RequestTimeout)
                .detail(format!("the request body did not arrive within {} ms", limit.as_millis()))
                .into_response();
            // The rest of the body may still be on its way: do not read it as the next request.
            response
                .headers_mut()
                .insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
            response
        }
        Err(_) => {
            tracing::warn!("request timed out");
            Problem::unavailable()
                .detail("the request took too long; retry with the same Idempotency-Key")
                .into_response()
        }
    }
}

/// A request body that records whether its reader is waiting for the
/// client's next bytes.
struct WatchedBody {
    body: axum::body::Body,
    waiting: Arc<AtomicBool>,
}

impl HttpBody for WatchedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        self.waiting.store(polled.is_pending(), Ordering::Relaxed);
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[utoipa::path(get, path = "/healthz", tag = "operations", security(()), responses((status = 200, description = "the process is alive")))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// How long after a request was refused for a full storage `/readyz` says so.
const STORAGE_FULL_NOT_READY_SECS: i64 = 10;

/// A ready server's answer.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct Readiness {
    /// Always `ready`: a server that is not answers 503 with a problem.
    status: &'static str,
    /// What the database last said of its replication (read at start and
    /// every minute); absent on SQLite, which has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    database: Option<DatabaseReplication>,
}

/// Whether the database's commits wait for a standby, and what says so.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct DatabaseReplication {
    /// Whether a commit returns only once a synchronous standby has it, so
    /// that a failover to that standby loses no acknowledged job. Also the
    /// gauge `onejob_database_commit_waits_for_standby`.
    commit_waits_for_standby: bool,
    /// The server's `synchronous_commit`.
    synchronous_commit: String,
    /// The server's `synchronous_standby_names` (empty: none).
    synchronous_standby_names: String,
    /// Standbys streaming from the server when last read.
    standbys: i64,
}

#[utoipa::path(get, path = "/readyz", tag = "operations", security(()), responses(
    (status = 200, description = "the database answers and takes writes, migrations are applied, the worker (where one runs) is alive", body = Readiness),
    (status = 503, description = "unavailable", body = openapi::Problem, content_type = "application/problem+json")))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    if let Err(error) = state.jobs.check_ready().await {
        tracing::warn!(%error, "not ready");
        return Problem::unavailable().detail("the database is not ready").into_response();
    }
    let full_at = state.storage_full_at.load(std::sync::atomic::Ordering::Relaxed);
    let since = chrono::Utc::now().timestamp().saturating_sub(full_at);
    if full_at > 0 && since < STORAGE_FULL_NOT_READY_SECS {
        return Problem::storage_full()
            .detail(format!("a write found the database's storage full {since} s ago"))
            .into_response();
    }
    if let Some(heartbeat) = &state.worker_heartbeat {
        let beat = heartbeat.load(std::sync::atomic::Ordering::Relaxed);
        let age = chrono::Utc::now().timestamp().saturating_sub(beat);
        if age > state.worker_heartbeat_limit.as_secs() as i64 {
            tracing::warn!(age, "not ready: the worker has not run its loop recently");
            return Problem::unavailable().detail("the worker is not running").into_response();
        }
    }
    let replication = state.replication.lock_anyway().clone();
    let database = replication.map(|replication| DatabaseReplication {
        commit_waits_for_standby: replication.commit_waits_for_standby,
        synchronous_commit: replication.synchronous_commit,
        synchronous_standby_names: replication.standby_names,
        standbys: replication.standbys,
    });
    axum::Json(Readiness { status: "ready", database }).into_response()
}

#[utoipa::path(get, path = "/metrics", tag = "operations", security(()), responses(
    (status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub(crate) async fn render_metrics(State(state): State<AppState>) -> Response {
    crate::process::metrics::held(&state.held_entries());
    crate::process::metrics::breakers(&state.catalog.breakers().states());
    let mut response = crate::process::metrics::render(&state.metrics).into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// Counts and times every request by its route template.
async fn record_request(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let method = request.method().clone();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    crate::process::metrics::http_request(&route, method.as_str(), response.status().as_u16(), started.elapsed());
    response
}

#[cfg(test)]
mod tests {
    use super::logged_path;

    #[test]
    fn a_callbacks_token_is_never_logged() {
        let token = "ab".repeat(32);
        let path = format!("/callbacks/0199aa00-0000-7000-8000-000000000000/1/{token}");
        let logged = logged_path(&path);
        assert!(!logged.contains(&token) && logged.ends_with("/1/…"), "{logged}");
        let slashed = format!("{path}/");
        assert!(!logged_path(&slashed).contains(&token), "a trailing slash too");
        assert_eq!(logged_path("/jobs/x/output"), "/jobs/x/output");
    }
}
