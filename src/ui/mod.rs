//! The dashboard (`/ui`) and the demo (`/demo`): server-rendered pages
//! from templates embedded in the binary, a little script of the server's
//! own (no build step, no CDN). They are for people, not programs, so they
//! are not in the OpenAPI description; [`ROUTES`] lists them instead, and
//! every one of them answers only to a signed-in session (see
//! [`session`]).
//!
//! What a session sees: a client key's session, its owner's jobs; an admin
//! key's session, every owner's (the job list, job pages and unknown
//! attempts), and the providers; a job's event stream (see `events`) is,
//! as in the API, its owner's alone. Changes go through the same use cases
//! (`crate::jobs`) as the JSON API, never through its handlers, so the
//! dashboard keeps every invariant the API keeps.

pub(crate) mod demo;
pub(crate) mod events;
pub(crate) mod pages;
pub mod session;
pub(crate) mod timeline;

use std::sync::LazyLock;

use axum::Router;
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use minijinja::Environment;
use serde::Serialize;

use crate::http::auth::check_rate;
use crate::http::error::{ApiError, Problem};
use crate::keys::AuthError;
use crate::state::AppState;
use session::Session;

/// Every route of the dashboard and the demo, as (method, path).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/ui"),
    ("get", "/ui/signin"),
    ("post", "/ui/signin"),
    ("post", "/ui/signout"),
    ("get", "/ui/jobs/{id}"),
    ("get", "/ui/jobs/{id}/timeline"),
    ("get", "/ui/unknown"),
    ("post", "/ui/unknown/resolve"),
    ("get", "/ui/providers"),
    ("get", "/ui/static/{file}"),
    ("post", "/ui/api/jobs"),
    ("post", "/ui/api/jobs/{id}/attempts"),
    ("get", "/ui/api/jobs/{id}/events"),
    ("get", "/ui/api/jobs/{id}/output"),
    ("get", "/ui/api/jobs/{id}/files/{name}"),
    ("get", "/demo"),
];

/// A route's path, checked against [`ROUTES`].
fn listed(path: &'static str) -> &'static str {
    assert!(ROUTES.iter().any(|(_, listed)| *listed == path), "route {path} is missing from ui::ROUTES");
    path
}

/// The dashboard's and the demo's routes (their sessions are in the store).
/// The demo's changes, its reading of a job's output and the files the
/// pages show are the API's own handlers, acting for the session's owner
/// (`as_session_owner`).
pub fn router(state: AppState) -> Router<AppState> {
    let as_the_api = Router::new()
        .route(listed("/ui/api/jobs"), post(crate::http::jobs::create_job))
        .route(listed("/ui/api/jobs/{id}/attempts"), post(crate::http::attempts::create_attempt))
        .route(listed("/ui/api/jobs/{id}/output"), get(crate::http::output::job_output))
        .route(listed("/ui/api/jobs/{id}/files/{name}"), get(crate::http::files::job_file))
        .route_layer(axum::middleware::from_fn_with_state(state, as_session_owner));
    Router::new()
        .route(listed("/ui"), get(pages::jobs))
        .route(listed("/ui/signin"), get(pages::signin_form).post(pages::signin))
        .route(listed("/ui/signout"), post(pages::signout))
        .route(listed("/ui/jobs/{id}"), get(pages::job))
        .route(listed("/ui/jobs/{id}/timeline"), get(pages::timeline))
        .route(listed("/ui/unknown"), get(pages::unknown))
        .route(listed("/ui/unknown/resolve"), post(pages::resolve))
        .route(listed("/ui/providers"), get(pages::providers))
        .route(listed("/ui/static/{file}"), get(static_file))
        .route(listed("/ui/api/jobs/{id}/events"), get(events::job_events))
        .route(listed("/demo"), get(demo::show))
        .merge(as_the_api)
}

/// Lets a script route run the API's handler for the session's owner: the
/// request needs a live session and, for a change, the session's CSRF
/// token from this origin ([`ScriptSession`]).
async fn as_session_owner(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let session = match ScriptSession::from_request_parts(&mut parts, &state).await {
        Ok(ScriptSession(session)) => session,
        Err(refused) => return refused.into_response(),
    };
    parts.extensions.insert(crate::http::auth::SessionOwner(session.identity));
    next.run(axum::extract::Request::from_parts(parts, body)).await
}

static TEMPLATES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    for (name, source) in [
        ("layout.html", include_str!("templates/layout.html")),
        ("signin.html", include_str!("templates/signin.html")),
        ("jobs.html", include_str!("templates/jobs.html")),
        ("job.html", include_str!("templates/job.html")),
        ("timeline.html", include_str!("templates/timeline.html")),
        ("unknown.html", include_str!("templates/unknown.html")),
        ("providers.html", include_str!("templates/providers.html")),
        ("demo.html", include_str!("templates/demo.html")),
        ("error.html", include_str!("templates/error.html")),
    ] {
        env.add_template(name, source).expect("the embedded templates parse");
    }
    env
});

/// A serializable value for a template.
fn ser(value: &impl Serialize) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(value))
}

/// Renders one embedded template (HTML-escaped by its `.html` name).
fn render_template(name: &str, context: minijinja::Value) -> Result<String, ApiError> {
    TEMPLATES.get_template(name).and_then(|template| template.render(context)).map_err(|error| {
        tracing::error!(%error, template = name, "a dashboard template failed");
        ApiError::from(Problem::internal())
    })
}

/// Headers every page gets: no caching, no framing, scripts and styles of
/// this server only.
fn page_headers(response: &mut Response) {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
}

/// What the layout shows of the viewer.
#[derive(Serialize)]
struct Viewer<'a> {
    owner: &'a str,
    role: &'static str,
    admin: bool,
    csrf: &'a str,
}

/// A whole page: `template` rendered with `context`, inside the layout.
fn page(
    status: StatusCode,
    session: Option<&Session>,
    title: &str,
    nav: &str,
    template: &str,
    context: minijinja::Value,
) -> Response {
    let body = match render_template(template, context) {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    let viewer = session.map(|s| Viewer {
        owner: s.identity.owner.as_str(),
        role: s.identity.role.as_str(),
        admin: s.identity.role.spans_owners(),
        csrf: &s.csrf,
    });
    let layout = minijinja::context! {
        title => title,
        nav => nav,
        viewer => ser(&viewer),
        content => minijinja::Value::from_safe_string(body),
    };
    match render_template("layout.html", layout) {
        Ok(html) => {
            let mut response = (status, html).into_response();
            page_headers(&mut response);
            response
        }
        Err(error) => error.into_response(),
    }
}

/// A fragment of a page (no layout), for scripts that refresh part of one.
fn fragment(template: &str, context: minijinja::Value) -> Response {
    match render_template(template, context) {
        Ok(html) => {
            let mut response = html.into_response();
            page_headers(&mut response);
            response
        }
        Err(error) => error.into_response(),
    }
}

/// Why a page cannot be shown, as a page.
pub enum PageError {
    /// No live session: sign in, then come back to this path.
    SignIn(String),
    /// Not found (another owner's job looks the same).
    NotFound,
    /// Signed in, but this needs an admin key.
    Forbidden,
    /// A problem or a store failure, shown as the API would word it.
    Api(ApiError),
}

impl From<ApiError> for PageError {
    fn from(error: ApiError) -> Self {
        PageError::Api(error)
    }
}

impl From<crate::keys::AuthError> for PageError {
    fn from(error: crate::keys::AuthError) -> Self {
        PageError::Api(error.into())
    }
}

impl From<crate::jobs::JobError> for PageError {
    fn from(error: crate::jobs::JobError) -> Self {
        PageError::Api(error.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            PageError::SignIn(next) => {
                let location = format!("/ui/signin?next={}", encode_next(&next));
                return (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
            }
            PageError::NotFound => {
                (StatusCode::NOT_FOUND, "Nothing here: no such page, or nothing of yours.".to_owned())
            }
            PageError::Forbidden => (StatusCode::FORBIDDEN, "This page needs an admin key's session.".to_owned()),
            PageError::Api(error) => {
                let response = error.into_response();
                let status = response.status();
                (status, format!("The server could not answer ({status}); try again shortly."))
            }
        };
        let context = minijinja::context! { status => status.as_u16(), message => message };
        page(status, None, "Error", "", "error.html", context)
    }
}

/// A `next` path to come back to after signing in: only this server's own
/// dashboard and demo paths, so that the sign-in page redirects nowhere else.
pub fn safe_next(next: &str) -> &str {
    let ours = (next == "/ui" || next.starts_with("/ui/") || next == "/demo")
        && !next.starts_with("/ui/api/")
        && next.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    if ours { next } else { "/ui" }
}

fn encode_next(next: &str) -> String {
    serde_urlencoded::to_string([("", next)]).map(|s| s.trim_start_matches('=').to_owned()).unwrap_or_default()
}

/// Finds the request's live session: its cookie names a live session in
/// the database, and that session's key is still live (checked as a bearer
/// token would be, so a revoked key ends its sessions). Applies the owner's
/// rate limit.
async fn find_session(parts: &Parts, state: &AppState) -> Result<Option<Session>, ApiError> {
    let Some(token) = session::cookie_session(&parts.headers) else { return Ok(None) };
    let Some(found) = state.sessions.find(&token).await? else { return Ok(None) };
    let identity = match state.auth.authenticate_hash(&found.key_token_hash).await {
        Ok(identity) if identity.key == found.key_id => identity,
        Err(AuthError::Store(error)) => return Err(error.into()),
        _ => {
            state.sessions.end(&token).await?;
            return Ok(None);
        }
    };
    check_rate(state, &identity)?;
    Ok(Some(Session { identity, csrf: found.csrf }))
}

/// The session of a page request; without one, the sign-in page.
pub struct PageSession(pub Session);

impl FromRequestParts<AppState> for PageSession {
    type Rejection = PageError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, PageError> {
        match find_session(parts, state).await? {
            Some(session) => Ok(PageSession(session)),
            None => {
                let next = parts.uri.path_and_query().map_or("/ui", |p| p.as_str()).to_owned();
                Err(PageError::SignIn(next))
            }
        }
    }
}

/// The session of a script's request; without one, 401 `unauthorized`.
/// A request that changes something must carry the session's CSRF token
/// in `X-CSRF-Token` and come from this origin, else 403 `forbidden`.
pub struct ScriptSession(pub Session);

impl FromRequestParts<AppState> for ScriptSession {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let session = find_session(parts, state)
            .await?
            .ok_or_else(|| Problem::unauthorized("sign in at /ui/signin; this route takes the dashboard's session"))?;
        if !parts.method.is_safe() {
            let presented = parts.headers.get(session::CSRF_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
            if !session::same_origin(&parts.headers) || !session::csrf_matches(&session, presented) {
                return Err(Problem::forbidden("send the page's CSRF token in X-CSRF-Token, from this origin").into());
            }
        }
        Ok(ScriptSession(session))
    }
}

/// The embedded script and style files.
async fn static_file(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let (body, content_type) = match file.as_str() {
        "ui.css" => (include_str!("static/ui.css"), "text/css; charset=utf-8"),
        "ui.js" => (include_str!("static/ui.js"), "text/javascript; charset=utf-8"),
        "demo.js" => (include_str!("static/demo.js"), "text/javascript; charset=utf-8"),
        // The TypeScript client's build (clients/typescript/dist), which the demo uses.
        "onejob-client.js" => {
            (include_str!("../../clients/typescript/dist/index.js"), "text/javascript; charset=utf-8")
        }
        _ => return PageError::NotFound.into_response(),
    };
    // The files change only with the binary: a tag of the version and the
    // file's length lets browsers revalidate cheaply.
    let etag = format!("\"{}-{}\"", env!("CARGO_PKG_VERSION"), body.len());
    if headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()) == Some(etag.as_str()) {
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    if let Ok(etag) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, etag);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_template_parses() {
        for name in [
            "layout.html",
            "signin.html",
            "jobs.html",
            "job.html",
            "timeline.html",
            "unknown.html",
            "providers.html",
            "demo.html",
            "error.html",
        ] {
            assert!(TEMPLATES.get_template(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn sign_in_comes_back_only_to_this_servers_pages() {
        assert_eq!(safe_next("/ui/jobs/x?state=failed"), "/ui/jobs/x?state=failed");
        assert_eq!(safe_next("/demo"), "/demo");
        for hostile in
            ["https://evil.example/", "//evil.example/ui", "/ui\\..\\x", "/uix", "/ui/api/jobs", "", "/ui/ x"]
        {
            assert_eq!(safe_next(hostile), "/ui", "{hostile}");
        }
        assert_eq!(encode_next("/ui/jobs?a=1&b=2"), "%2Fui%2Fjobs%3Fa%3D1%26b%3D2");
    }
}
