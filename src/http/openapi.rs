//! The OpenAPI 3.1 description of the API, generated from the handlers'
//! annotations and the types they answer with; served at `/openapi.json`,
//! rendered at `/docs` (a page of this server's own, no CDN).

use axum::Json;
use axum::response::Html;
use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::domain::{Attempt, AttemptOrigin, AttemptState, Job, JobState, JobSummary};

/// Every route the router serves, as (method, path): the router is checked
/// against this list, and the specification against it too.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/jobs"),
    ("get", "/jobs"),
    ("get", "/jobs/{id}"),
    ("post", "/jobs/{id}/cancel"),
    ("post", "/jobs/{id}/attempts"),
    ("post", "/jobs/{id}/attempts/{number}/resolve"),
    ("get", "/providers"),
    ("post", "/providers/{name}/qualifications"),
    ("post", "/keys/{id}/revoke"),
    ("get", "/usage"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
    ("get", "/openapi.json"),
    ("get", "/docs"),
];

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone, without a key.
    Public,
    /// Any key, for its own owner's resources (an admin key is a client
    /// key too).
    Client,
    /// Admin keys only; a client key gets 403 `forbidden`.
    Admin,
}

impl Access {
    /// As the specification shows it (`x-onejob-role`).
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Public => "public",
            Access::Client => "client",
            Access::Admin => "admin",
        }
    }
}

/// The routes only admin keys may call.
pub const ADMIN_ROUTES: &[(&str, &str)] =
    &[("get", "/providers"), ("post", "/providers/{name}/qualifications"), ("post", "/keys/{id}/revoke")];

/// The routes that need no key.
pub const PUBLIC_ROUTES: &[(&str, &str)] =
    &[("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"), ("get", "/openapi.json"), ("get", "/docs")];

/// Who may call `method path`: every route not listed as admin or public is
/// a client route.
pub fn access(method: &str, path: &str) -> Access {
    let is = |list: &[(&str, &str)]| list.iter().any(|(m, p)| m.eq_ignore_ascii_case(method) && *p == path);
    if is(ADMIN_ROUTES) {
        Access::Admin
    } else if is(PUBLIC_ROUTES) {
        Access::Public
    } else {
        Access::Client
    }
}

/// A route's path, checked against [`ROUTES`]: the router registers every
/// path through this, so a route missing from the list (and so from the
/// specification, which a test compares with the list) fails at start.
pub fn listed(path: &'static str) -> &'static str {
    assert!(ROUTES.iter().any(|(_, listed)| *listed == path), "route {path} is missing from openapi::ROUTES");
    path
}

/// Every problem `type` the API answers with.
pub const PROBLEM_TYPES: &[&str] = &[
    "idempotency-key-missing",
    "idempotency-key-invalid",
    "unauthorized",
    "forbidden",
    "not-found",
    "method-not-allowed",
    "idempotency-key-reused",
    "job-finished",
    "attempt-pending",
    "attempt-outcome-unknown",
    "too-many-attempts-in-flight",
    "attempt-limit-reached",
    "attempt-not-unknown",
    "payload-too-large",
    "request-timeout",
    "unsupported-media-type",
    "validation-failed",
    "provider-unknown",
    "provider-not-qualified",
    "budget-exceeded",
    "contract-violation",
    "rate-limited",
    "unavailable",
    "internal",
];

/// `POST /jobs` body.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJobBody {
    /// A configured task.
    pub task: String,
    /// The task's input; must meet its input schema.
    #[schema(value_type = Object)]
    pub input: Value,
    /// A configured provider; the task's default when left out.
    pub provider: Option<String>,
    /// The most the job's attempts may cost together, a decimal string in
    /// the providers' currency (at most 18 decimals). Part of the intent:
    /// the same key with another `max_cost` is a conflict.
    #[schema(pattern = r"^[0-9]{1,20}(\.[0-9]{1,18})?$", example = "0.05")]
    pub max_cost: Option<String>,
}

/// `POST /jobs/{id}/attempts` body (or no body at all).
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAttemptBody {
    /// A configured provider; the job's own when left out.
    pub provider: Option<String>,
}

/// How an operator settles an unknown attempt.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// The provider did the work.
    Succeeded,
    /// It did not.
    Failed,
}

/// `POST /jobs/{id}/attempts/{number}/resolve` body.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    /// What became of the attempt.
    pub outcome: Outcome,
    /// The output, for `succeeded`; it must meet the task's output schema.
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    /// Why (1 to 1000 characters); kept in the job's events.
    #[schema(min_length = 1, max_length = 1000)]
    pub reason: String,
}

/// `POST /providers/{name}/qualifications` body.
#[derive(Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QualifyBody {
    /// The task whose contract the provider must meet.
    pub task: String,
}

/// A page of jobs.
#[derive(Serialize, ToSchema)]
pub struct JobPage {
    /// Newest first.
    pub jobs: Vec<JobSummary>,
    /// Pass as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// An attempt with its job.
#[derive(Serialize, ToSchema)]
pub struct AttemptWithJob {
    /// The job.
    #[schema(value_type = uuid::Uuid)]
    pub job_id: crate::domain::JobId,
    /// The attempt's members.
    #[serde(flatten)]
    pub attempt: Attempt,
}

/// An RFC 9457 problem. `type` is one of: idempotency-key-missing,
/// idempotency-key-invalid, unauthorized, forbidden, not-found, method-not-allowed,
/// idempotency-key-reused, job-finished, attempt-pending,
/// attempt-outcome-unknown, too-many-attempts-in-flight,
/// attempt-limit-reached, attempt-not-unknown, payload-too-large,
/// request-timeout, unsupported-media-type, validation-failed, provider-unknown,
/// provider-not-qualified, budget-exceeded, contract-violation, rate-limited,
/// unavailable, internal.
#[derive(Serialize, ToSchema)]
pub struct Problem {
    /// The stable problem type.
    #[serde(rename = "type")]
    pub kind: String,
    /// For people, fixed per type.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What happened in this case.
    pub detail: Option<String>,
    /// For `validation-failed`: each offending field, by JSON Pointer
    /// (`pointer`) or query parameter (`parameter`), with `detail`.
    #[schema(value_type = Option<Vec<Object>>)]
    pub errors: Option<Value>,
    /// For `validation-failed`: how many violations were left out of
    /// `errors` (it lists at most 100).
    pub errors_omitted: Option<u64>,
}

/// The answers every authenticated route may give besides its own.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum CommonErrors {
    /// No bearer token, or not a live API key.
    #[response(status = 401, description = "unauthorized: no bearer token, or not a live API key",
               content_type = "application/problem+json")]
    Unauthorized(Problem),
    /// Over the owner's request rate.
    #[response(status = 429, description = "rate-limited: over the owner's request rate",
               content_type = "application/problem+json",
               headers(("Retry-After" = u64, description = "seconds to wait")))]
    RateLimited(Problem),
    /// The request's body did not arrive within the request timeout.
    #[response(status = 408, description = "request-timeout: the request's body did not arrive within the request timeout",
               content_type = "application/problem+json")]
    RequestTimeout(Problem),
    /// The database cannot be reached, or the server is at capacity.
    #[response(status = 503, description = "unavailable: the database cannot be reached, or the server is at capacity",
               content_type = "application/problem+json",
               headers(("Retry-After" = u64, description = "seconds to wait")))]
    Unavailable(Problem),
}

/// Marks every operation with the least role that may call it
/// (`x-onejob-role`: public, client or admin), from [`access`].
struct Roles;

impl Modify for Roles {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations = [
                ("get", item.get.as_mut()),
                ("put", item.put.as_mut()),
                ("post", item.post.as_mut()),
                ("delete", item.delete.as_mut()),
                ("patch", item.patch.as_mut()),
            ];
            for (method, operation) in operations {
                if let Some(operation) = operation {
                    let role = access(method, path).as_str();
                    operation.extensions.get_or_insert_with(Default::default).insert("x-onejob-role".into(), role.into());
                }
            }
        }
    }
}

/// The answers of every route that reads a JSON body.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum BodyErrors {
    /// Over `server.max_body_bytes`.
    #[response(status = 413, description = "payload-too-large", content_type = "application/problem+json")]
    PayloadTooLarge(Problem),
    /// Not `application/json`.
    #[response(status = 415, description = "unsupported-media-type: the body is not JSON", content_type = "application/problem+json")]
    UnsupportedMediaType(Problem),
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme("api_key", SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)));
    }
}

/// The API's description.
#[derive(OpenApi)]
#[openapi(
    info(title = "onejob", description = "One job per intent: idempotent jobs, guarded attempts, one winner. \
        Each operation's x-onejob-role names the least API-key role that may call it: public (no key), client, or admin."),
    paths(
        super::jobs::create_job,
        super::jobs::list_jobs,
        super::jobs::get_job,
        super::jobs::cancel_job,
        super::attempts::create_attempt,
        super::attempts::resolve_attempt,
        super::providers::list_providers,
        super::providers::run_qualification,
        super::keys::revoke_key,
        super::usage::usage_report,
        super::healthz,
        super::readyz,
        super::render_metrics,
        openapi_json,
        docs,
    ),
    components(schemas(
        Job, JobSummary, Attempt, AttemptState, JobState, AttemptOrigin, CreateJobBody, CreateAttemptBody,
        ResolveBody, Outcome, QualifyBody, JobPage, AttemptWithJob, Problem,
        crate::domain::job::JobCost, crate::domain::Usage, crate::domain::Cost,
        super::usage::UsageReport, super::usage::UsageTotals, super::usage::UsageGroup, super::usage::GroupBy
    )),
    modifiers(&BearerAuth, &Roles),
    security(("api_key" = []))
)]
pub struct ApiDoc;

/// The specification.
#[utoipa::path(get, path = "/openapi.json", security(()), responses((status = 200, description = "OpenAPI 3.1")))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

/// A readable page of the specification, rendered here.
#[utoipa::path(get, path = "/docs", security(()), responses((status = 200, description = "HTML", content_type = "text/html")))]
pub async fn docs() -> Html<String> {
    let spec = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    let mut page = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>onejob API</title>\
         <style>body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem}\
         code{background:#f3f3f3;padding:0 .2rem}h2{margin-top:2rem}.m{font-weight:bold;text-transform:uppercase}</style>\
         </head><body><h1>onejob API</h1><p>The machine-readable form is <a href=\"/openapi.json\">/openapi.json</a>.</p>",
    );
    let escape = |text: &str| text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    if let Some(paths) = spec["paths"].as_object() {
        for (path, operations) in paths {
            for (method, operation) in operations.as_object().into_iter().flatten() {
                page.push_str(&format!(
                    "<h2><span class=\"m\">{}</span> <code>{}</code></h2><p>{}</p><ul>",
                    escape(method),
                    escape(path),
                    escape(operation["summary"].as_str().unwrap_or_default())
                ));
                for (status, response) in operation["responses"].as_object().into_iter().flatten() {
                    page.push_str(&format!(
                        "<li><code>{}</code> {}</li>",
                        escape(status),
                        escape(response["description"].as_str().unwrap_or_default())
                    ));
                }
                page.push_str("</ul>");
            }
        }
    }
    page.push_str("<h2>Problem types</h2><ul>");
    for kind in PROBLEM_TYPES {
        page.push_str(&format!("<li><code>{kind}</code></li>"));
    }
    page.push_str("</ul></body></html>");
    Html(page)
}
