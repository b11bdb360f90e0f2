//! `/providers`: every provider with where it stands for each task's
//! current contract, and running a qualification on demand (I5). Admin
//! keys only: providers are the service's, not a tenant's.

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use super::AppState;
use super::openapi::listed;
use super::auth::Admin;
use super::error::{ApiError, Problem};
use super::extract::read_json;
use super::jobs::{json_response, object_body};
use crate::qualify::{self, QualifyError};
use crate::store::QualificationState;

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(listed("/providers"), get(list_providers))
        .route(listed("/providers/{name}/qualifications"), post(run_qualification))
}

#[utoipa::path(get, path = "/providers", tag = "providers",
    responses(
        (status = 200, description = "every provider with, per task, its qualification state (qualified, failed, stale, never), the current contract hash, why it may not be used, and the last report's summary", body = Object),
        (status = 403, description = "forbidden: an admin route called with a client key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn list_providers(State(app): State<AppState>, Admin(_): Admin) -> Result<Response, ApiError> {
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
            let state = app.store.qualification_state(name, &task.name, &hash).await?;
            let last = app.store.latest_qualification(name, &task.name).await?;
            let qualified_at = match &state {
                QualificationState::Qualified { at } => Some(*at),
                _ => None,
            };
            tasks.insert(
                task.name.clone(),
                json!({
                    "state": state.name(),
                    "contract_hash": format!("sha256:{}", hex::encode(hash)),
                    "qualified_at": qualified_at,
                    "reason": state.refusal(name, &task.name),
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
            "timeout_ms": settings.timeout_ms,
            "tokenizer": settings.tokenizer,
            "context_tokens": settings.context_tokens,
            "max_output_tokens": settings.max_output_tokens,
            "status_lookup": settings.has_status_lookup(),
            "tasks": tasks,
        }));
    }
    Ok(json!({ "providers": providers }))
}

#[utoipa::path(post, path = "/providers/{name}/qualifications", tag = "providers",
    params(("name" = String, Path, description = "the provider")),
    request_body = crate::http::openapi::QualifyBody,
    responses(
        (status = 201, description = "the stored qualification with its report, per example", body = Object),
        (status = 403, description = "forbidden: an admin route called with a client key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such provider", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed: no such task", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::BodyErrors
    ))]
pub(crate) async fn run_qualification(
    State(app): State<AppState>,
    Admin(_): Admin,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    if !app.providers.contains_key(&name) {
        return Err(Problem::not_found().detail(format!("no provider named '{name}'")).into());
    }
    let body = read_json(&headers, body, app.settings.max_body_bytes, false).await?;
    let (body, violations) = object_body(body, &["task"])?;
    if !violations.is_empty() {
        return Err(Problem::invalid(violations).into());
    }
    let Some(task) = body.get("task").and_then(Value::as_str) else {
        return Err(Problem::invalid_field("/task", "a task name is required").into());
    };
    match qualify::qualify(app.store.as_ref(), &app.providers, &app.catalog, &name, task).await {
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
        Err(QualifyError::UnknownTask(task)) => Err(Problem::invalid_field("/task", format!("no task named '{task}'")).into()),
        Err(QualifyError::UnknownProvider(_)) => Err(Problem::not_found().into()),
        Err(QualifyError::Store(error)) => Err(error.into()),
    }
}
