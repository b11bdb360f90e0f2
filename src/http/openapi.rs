//! The OpenAPI 3.1 description of the API, generated from the handlers'
//! annotations and the types they answer with, as the routers register
//! them (so a route cannot be served and not described, or the other way
//! round); served at `/openapi.json`, rendered at `/docs` (a page of this
//! server's own, no CDN).

use std::sync::LazyLock;

use axum::Json;
use axum::response::Html;
use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;

use super::bodies::{CreateAttemptBody, CreateJobBody, Outcome, QualifyBody, ResolveBody};
use super::error::ProblemType;

use crate::domain::{Attempt, AttemptOrigin, AttemptState, Job, JobState, JobSummary};

/// Who may call a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone, without a key.
    Public,
    /// Any key, for its own owner's resources (an admin key is a client
    /// key too).
    Client,
    /// Admin and operator keys, for their own owner (an operator's reach
    /// beyond it is the route's to say); a client key gets 403 `forbidden`.
    Admin,
    /// Operator keys only: the installation's routes.
    Operator,
}

impl Access {
    /// As the specification shows it (`x-onejob-role`).
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Public => "public",
            Access::Client => "client",
            Access::Admin => "admin",
            Access::Operator => "operator",
        }
    }
}

/// Marks every operation of `router` with the least role that may call it
/// (`x-onejob-role`): how a group of routes declares its access in the
/// specification. The handlers enforce it with their extractors (`Owner`,
/// `Caller`, `Admin`, none for public ones).
pub fn with_access<S: Clone + Send + Sync + 'static>(access: Access, mut router: OpenApiRouter<S>) -> OpenApiRouter<S> {
    for item in router.get_openapi_mut().paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            operation
                .extensions
                .get_or_insert_with(Default::default)
                .insert("x-onejob-role".into(), access.as_str().into());
        }
    }
    router
}

/// Every route [`super::api`] serves, as (method, path), in the order of
/// the specification's paths.
pub fn routes() -> Vec<(String, String)> {
    let mut routes = Vec::new();
    for (path, item) in &spec().paths.paths {
        let operations = [
            ("get", &item.get),
            ("put", &item.put),
            ("post", &item.post),
            ("delete", &item.delete),
            ("patch", &item.patch),
        ];
        for (method, operation) in operations {
            if operation.is_some() {
                routes.push((method.to_owned(), path.clone()));
            }
        }
    }
    routes
}

/// The specification of every route [`super::api`] serves, built once.
pub fn spec() -> &'static utoipa::openapi::OpenApi {
    static SPEC: LazyLock<utoipa::openapi::OpenApi> = LazyLock::new(|| super::api().into_openapi());
    &SPEC
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
/// idempotency-key-invalid, header-repeated, unauthorized, forbidden, not-found,
/// method-not-allowed, idempotency-key-reused, job-finished, attempt-pending,
/// attempt-outcome-unknown, too-many-attempts-in-flight, attempt-limit-reached,
/// attempt-not-unknown, job-not-finished, too-many-endpoints, payload-too-large,
/// request-timeout, unsupported-media-type, validation-failed, provider-unknown,
/// provider-not-qualified, budget-exceeded, output-streaming, contract-violation, rate-limited,
/// too-many-long-polls, unavailable, storage-full, internal.
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
#[allow(dead_code)] // never built: the derive reads its variants into the specification
pub enum CommonErrors {
    /// Two `Authorization` headers.
    #[response(
        status = 400,
        description = "header-repeated: two Authorization headers",
        content_type = "application/problem+json"
    )]
    HeaderRepeated(Problem),
    /// No bearer token, or not a live API key.
    #[response(
        status = 401,
        description = "unauthorized: no bearer token, or not a live API key",
        content_type = "application/problem+json"
    )]
    Unauthorized(Problem),
    /// Over the owner's request rate on this server.
    #[response(status = 429, description = "rate-limited: over the owner's request rate on this server (each replica has its own)",
               content_type = "application/problem+json",
               headers(("Retry-After" = u64, description = "seconds to wait")))]
    RateLimited(Problem),
    /// The request's body did not arrive within the request timeout.
    #[response(
        status = 408,
        description = "request-timeout: the request's body did not arrive within the request timeout",
        content_type = "application/problem+json"
    )]
    RequestTimeout(Problem),
    /// The database cannot be reached, or the server is at capacity.
    #[response(status = 503, description = "unavailable: the database cannot be reached, or the server is at capacity; storage-full: the database's storage is full, nothing was written",
               content_type = "application/problem+json",
               headers(("Retry-After" = u64, description = "seconds to wait")))]
    Unavailable(Problem),
}

/// The answers of the routes that wait on one job (a long-poll, an event
/// stream). Listed after [`CommonErrors`], so that its 429 says both.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // never built: the derive reads its variants into the specification
pub enum WaitingErrors {
    /// No such job for this owner.
    #[response(
        status = 404,
        description = "not-found: no such job for this owner",
        content_type = "application/problem+json"
    )]
    NotFound(Problem),
    /// Over the rate, or at the owner's places for waiting.
    #[response(status = 429, description = "rate-limited: over the owner's request rate on this server; or too-many-long-polls: the owner holds `server.max_long_polls_per_owner` long-polls and event streams open on this server (a read without `wait` is never refused for it)",
               content_type = "application/problem+json",
               headers(("Retry-After" = u64, description = "seconds to wait")))]
    TooManyLongPolls(Problem),
}

/// The answers of every route that reads a JSON body.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // never built: the derive reads its variants into the specification
pub enum BodyErrors {
    /// Over `server.max_body_bytes`.
    #[response(status = 413, description = "payload-too-large", content_type = "application/problem+json")]
    PayloadTooLarge(Problem),
    /// Not `application/json`.
    #[response(
        status = 415,
        description = "unsupported-media-type: the body is not JSON",
        content_type = "application/problem+json"
    )]
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
        Each operation's x-onejob-role names the least API-key role that may call it: public (no key), client, admin (its own owner's) or operator (the installation's)."),
    components(schemas(
        Job, JobSummary, Attempt, AttemptState, JobState, AttemptOrigin, CreateJobBody, CreateAttemptBody,
        ResolveBody, Outcome, QualifyBody, JobPage, AttemptWithJob, Problem, crate::jobs::ResolvedElsewhere,
        crate::domain::job::JobCost, crate::domain::Usage, crate::domain::Cost, crate::domain::TraceContext
    )),
    modifiers(&BearerAuth),
    security(("api_key" = []))
)]
pub struct ApiDoc;

/// The specification.
#[utoipa::path(get, path = "/openapi.json", security(()), responses((status = 200, description = "OpenAPI 3.1")))]
pub async fn openapi_json() -> Json<&'static utoipa::openapi::OpenApi> {
    Json(spec())
}

/// A readable page of the specification, rendered here.
#[utoipa::path(get, path = "/docs", security(()), responses((status = 200, description = "HTML", content_type = "text/html")))]
pub async fn docs() -> Html<String> {
    let spec = serde_json::to_value(spec()).unwrap_or_default();
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
    for kind in ProblemType::ALL {
        page.push_str(&format!("<li><code>{}</code></li>", kind.as_str()));
    }
    page.push_str("</ul></body></html>");
    Html(page)
}
