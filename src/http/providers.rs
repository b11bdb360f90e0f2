//! `/providers`: every provider with where it stands for each task's
//! current contract, and running a qualification on demand (I5). Admin
//! keys only: providers are the service's, not a tenant's.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::Operator;
use super::bodies::{BreakerBody, BreakerBodyState, QualifyBody};
use super::error::{ApiError, Problem};
use super::extract::StrictJson;
use super::respond::json_response;
use crate::domain::QualificationState;
use crate::task::qualify::QualifyError;

/// The provider a path's `{name}` names: 404 when none is configured.
pub(crate) struct ProviderPath(String);

impl FromRequestParts<AppState> for ProviderPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, Response> {
        // A path that does not decode is axum's own 400, as for any route.
        let Path(name) = Path::<String>::from_request_parts(parts, app).await.map_err(IntoResponse::into_response)?;
        if !app.providers.contains_key(&name) {
            return Err(Problem::not_found().detail(format!("no provider named '{name}'")).into_response());
        }
        Ok(ProviderPath(name))
    }
}

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_providers)).routes(routes!(run_qualification)).routes(routes!(set_breaker))
}

#[utoipa::path(get, path = "/providers", tag = "providers",
    responses(
        (status = 200, description = "every provider with, per task, its qualification state (qualified, failed, stale, never), whether it is the task's default provider (whose jobs run on it whatever its qualification, which guards only failover, fallbacks and hedges), whether a qualification of it is running in the answering process (qualifying), the current contract hash, why it may not be used, and the last report's summary", body = Object),
        (status = 403, description = "forbidden: an operator route called with a client or admin key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn list_providers(State(app): State<AppState>, _: Operator) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &providers_report(&app).await?, &[]))
}

/// Every provider with, per task, where it stands and its last report: what
/// `GET /providers` answers and the dashboard shows.
pub(crate) async fn providers_report(app: &AppState) -> Result<Value, ApiError> {
    let mut names: Vec<&String> = app.providers.keys().collect();
    names.sort();
    let mut providers = Vec::with_capacity(names.len());
    for name in names {
        let settings = app.providers[name].settings();
        let mut tasks = Map::new();
        for task in app.catalog.tasks() {
            let Some(hash) = app.catalog.contract_hash(&task.name, name) else { continue };
            let state = app.qualifications.state(name, &task.name, &hash).await?;
            let last = app.qualifications.latest(name, &task.name).await?;
            let qualified_at = match &state {
                QualificationState::Qualified { at } => Some(*at),
                _ => None,
            };
            // A task's jobs run on its default provider (and on a provider a
            // job names) whatever its qualification, which guards only
            // failover, fallbacks and hedges.
            let default_provider = task.settings.default_provider == *name;
            let reason = state.refusal(name, &task.name).map(|why| match default_provider {
                true => format!("{why}: it is the task's default provider, so its jobs run on it all the same; only failover, fallbacks and hedges to it wait for a passing qualification"),
                false => format!("{why}: no failover, fallback or hedge goes to it until it passes one"),
            });
            tasks.insert(
                task.name.clone(),
                json!({
                    "state": state.name(),
                    "default_provider": default_provider,
                    "contract_hash": format!("sha256:{}", hex::encode(hash)),
                    "qualified_at": qualified_at,
                    "qualifying": app.catalog.qualifications().is_running(name, &task.name),
                    "reason": reason,
                    "last_report": last.map(|q| json!({
                        "passed": q.passed,
                        "at": q.created_at,
                        "contract_hash": format!("sha256:{}", hex::encode(q.contract_hash)),
                        "summary": q.report["summary"],
                    })),
                }),
            );
        }
        providers.push(json!({
            "name": name,
            "kind": settings.kind,
            "model": settings.model,
            "timeout_ms": crate::config::duration::saturating_millis(settings.timeout),
            "tokenizer": settings.tokenizer(),
            "context_tokens": settings.context_tokens,
            "max_output_tokens": settings.max_output_tokens,
            "status_lookup": settings.has_status_lookup(),
            "breaker": breaker_of(app, name),
            "tasks": tasks,
        }));
    }
    Ok(json!({ "providers": providers }))
}

/// A provider's breaker as this process sees it (refreshed every second),
/// or `null` for a provider without one that no operator opened.
fn breaker_of(app: &AppState, provider: &str) -> Value {
    let breakers = app.catalog.breakers();
    let view = breakers.view(provider);
    if app.providers[provider].settings().breaker.is_none() && view.since.is_none() {
        return Value::Null;
    }
    let cool_down_ms =
        view.cools_at.map(|at| at.saturating_duration_since(tokio::time::Instant::now()).as_millis() as u64);
    json!({
        "state": view.state.as_str(),
        "since": view.since,
        "cool_down_left_ms": cool_down_ms,
        "by": if view.by_operator { "operator" } else { "worker" },
        "reason": view.reason,
    })
}

#[utoipa::path(post, path = "/providers/{name}/breaker", tag = "providers",
    params(("name" = String, Path, description = "the provider")),
    request_body = crate::http::bodies::BreakerBody,
    responses(
        (status = 200, description = "the breaker after the change: `open` (until an operator closes it) or `closed`", body = Object),
        (status = 403, description = "forbidden: an operator route called with a client or admin key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such provider", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed: the provider has no breaker, or the body is wrong", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::BodyErrors
    ))]
pub(crate) async fn set_breaker(
    State(app): State<AppState>,
    _: Operator,
    ProviderPath(name): ProviderPath,
    StrictJson(body): StrictJson<BreakerBody>,
) -> Result<Response, ApiError> {
    if app.providers[&name].settings().breaker.is_none() {
        let detail = format!("provider '{name}' has no breaker: give it [providers.{name}.breaker] settings");
        return Err(Problem::invalid_field("/state", detail).into());
    }
    let open = body.state == BreakerBodyState::Open;
    app.qualifications.set_breaker(&name, open, body.reason.trim()).await?;
    tracing::warn!(provider = %name, open, reason = %body.reason, "an operator changed the provider's breaker");
    Ok(json_response(StatusCode::OK, &breaker_of(&app, &name), &[]))
}

#[utoipa::path(post, path = "/providers/{name}/qualifications", tag = "providers",
    params(("name" = String, Path, description = "the provider")),
    request_body = crate::http::bodies::QualifyBody,
    responses(
        (status = 201, description = "the stored qualification with its report, per example", body = Object),
        (status = 403, description = "forbidden: an operator route called with a client or admin key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such provider", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed: no such task", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::BodyErrors
    ))]
pub(crate) async fn run_qualification(
    State(app): State<AppState>,
    _: Operator,
    ProviderPath(name): ProviderPath,
    StrictJson(body): StrictJson<QualifyBody>,
) -> Result<Response, ApiError> {
    match app.qualifications.run(&name, &body.task).await {
        Ok(record) => Ok(json_response(
            StatusCode::CREATED,
            &json!({
                "id": record.id,
                "provider": record.provider,
                "task": record.task,
                "contract_hash": format!("sha256:{}", hex::encode(record.contract_hash)),
                "passed": record.passed,
                "report": record.report,
                "created_at": record.created_at,
            }),
            &[],
        )),
        Err(QualifyError::UnknownTask(task)) => {
            Err(Problem::invalid_field("/task", format!("no task named '{task}'")).into())
        }
        Err(QualifyError::UnknownProvider(_)) => Err(Problem::not_found().into()),
        Err(QualifyError::Store(error)) => Err(error.into()),
    }
}
