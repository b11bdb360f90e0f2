//! `/webhooks` (admin keys): an owner's endpoints, which hear of that
//! owner's jobs. Registering one answers its signing secret, shown once;
//! rotating answers a new one while the old one keeps signing for 24 h.
//! Deliveries, each with its tries, can be read per endpoint. How they are
//! sent is [`crate::webhooks`]'s.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::AppState;
use super::auth::Admin;
use super::bodies::CreateWebhookBody;
use super::error::{ApiError, Problem, ProblemType};
use super::extract::StrictJson;
use super::respond::json_response;
use crate::domain::webhook::{Endpoint, NewEndpoint};
use crate::domain::webhook::{WebhookEventType, new_secret};
use crate::jobs::JobError;
use crate::webhooks::{ROTATION_OVERLAP, address};

/// Deliveries a listing holds at most.
const MAX_DELIVERIES: u32 = 100;

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_webhook, list_webhooks))
        .routes(routes!(delete_webhook))
        .routes(routes!(rotate_secret))
        .routes(routes!(list_deliveries))
}

/// An endpoint id from the path; one that cannot exist is 404.
fn endpoint_id(text: &str) -> Result<Uuid, Problem> {
    Uuid::try_parse(text).map_err(|_| Problem::not_found().detail("no such webhook endpoint"))
}

/// An endpoint as shown the one time its secret is: on registration and rotation.
fn with_secret(endpoint: &Endpoint, secret: &str) -> serde_json::Value {
    let mut shown = serde_json::to_value(endpoint).expect("an endpoint serialises");
    shown["secret"] = json!(secret);
    shown
}

#[utoipa::path(post, path = "/webhooks", tag = "webhooks",
    request_body = crate::http::bodies::CreateWebhookBody,
    responses(
        (status = 201, description = "registered: the endpoint with its signing `secret` (`whsec_…`), shown this once", body = Object),
        (status = 403, description = "forbidden: an admin route called with a client key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "too-many-endpoints: the owner has `webhooks.max_endpoints_per_owner` endpoints already", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed: an unknown event type, or a URL that is not https:// on a public address", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors, crate::http::openapi::BodyErrors
    ))]
pub(crate) async fn create_webhook(
    State(app): State<AppState>,
    Admin(admin): Admin,
    StrictJson(body): StrictJson<CreateWebhookBody>,
) -> Result<Response, ApiError> {
    let mut events = Vec::with_capacity(body.events.len());
    for (index, name) in body.events.iter().enumerate() {
        let event: WebhookEventType =
            name.parse().map_err(|error: String| JobError::invalid(&format!("/events/{index}"), error))?;
        if !events.contains(&event) {
            events.push(event);
        }
    }
    let url =
        address::check(&body.url, &app.webhook_hosts).await.map_err(|refusal| JobError::invalid("/url", refusal))?;
    let secret = new_secret();
    let new = NewEndpoint {
        owner: admin.owner.clone(),
        id: Uuid::now_v7(),
        url: url.to_string(),
        description: body.description,
        secret,
        events,
    };
    let Some(endpoint) = app.endpoints.register(&new).await? else {
        let most = app.endpoints.max_per_owner();
        let detail = format!(
            "the owner has {most} webhook endpoints, as many as it may (webhooks.max_endpoints_per_owner): delete one first"
        );
        return Err(Problem::new(ProblemType::TooManyEndpoints).detail(detail).into());
    };
    tracing::info!(endpoint = %endpoint.id, owner = %admin.owner, by = %admin.key, "webhook endpoint registered");
    let location = ("location", format!("/webhooks/{}", endpoint.id));
    Ok(json_response(StatusCode::CREATED, &with_secret(&endpoint, &new.secret), &[location]))
}

#[utoipa::path(get, path = "/webhooks", tag = "webhooks",
    responses(
        (status = 200, description = "the owner's endpoints (never their secrets), the oldest first: `{\"webhooks\": [...]}`", body = Object),
        (status = 403, description = "forbidden: an admin route called with a client key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn list_webhooks(State(app): State<AppState>, Admin(admin): Admin) -> Result<Response, ApiError> {
    let endpoints = app.endpoints.list(&admin.owner).await?;
    Ok(json_response(StatusCode::OK, &json!({ "webhooks": endpoints }), &[]))
}

#[utoipa::path(delete, path = "/webhooks/{id}", tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "the endpoint's id")),
    responses(
        (status = 204, description = "deleted, with its deliveries: it hears of nothing more"),
        (status = 403, description = "forbidden: an admin route called with a client key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such endpoint of this owner", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn delete_webhook(
    State(app): State<AppState>,
    Admin(admin): Admin,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = endpoint_id(&id)?;
    if !app.endpoints.delete(&admin.owner, id).await? {
        return Err(Problem::not_found().detail("no such webhook endpoint").into());
    }
    tracing::info!(endpoint = %id, owner = %admin.owner, by = %admin.key, "webhook endpoint deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[utoipa::path(post, path = "/webhooks/{id}/rotate-secret", tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "the endpoint's id")),
    responses(
        (status = 200, description = "the endpoint with its new `secret`, shown this once; deliveries are signed with both until `previous_secret_until` (24 h)", body = Object),
        (status = 403, description = "forbidden: an admin route called with a client key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such endpoint of this owner", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn rotate_secret(
    State(app): State<AppState>,
    Admin(admin): Admin,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = endpoint_id(&id)?;
    let secret = new_secret();
    let Some(endpoint) = app.endpoints.rotate_secret(&admin.owner, id, &secret, ROTATION_OVERLAP).await? else {
        return Err(Problem::not_found().detail("no such webhook endpoint").into());
    };
    tracing::info!(endpoint = %id, owner = %admin.owner, by = %admin.key, "webhook secret rotated");
    Ok(json_response(StatusCode::OK, &with_secret(&endpoint, &secret), &[]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveriesQuery {
    limit: Option<String>,
}

#[utoipa::path(get, path = "/webhooks/{id}/deliveries", tag = "webhooks",
    params(("id" = uuid::Uuid, Path, description = "the endpoint's id"),
           ("limit" = Option<u32>, Query, description = "at most this many (1 to 100, default 20), the newest first")),
    responses(
        (status = 200, description = "`{\"deliveries\": [...]}`: each with its `id` (the `webhook-id`), job, type, state (pending, delivered, failed) and every try (time, HTTP status, latency, error)", body = Object),
        (status = 403, description = "forbidden: an admin route called with a client key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no such endpoint of this owner", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 422, description = "validation-failed: a bad `limit`", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn list_deliveries(
    State(app): State<AppState>,
    Admin(admin): Admin,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let id = endpoint_id(&id)?;
    let query: DeliveriesQuery = serde_urlencoded::from_str(query.as_deref().unwrap_or_default())
        .map_err(|error| Problem::invalid_parameter("", &error.to_string()))?;
    let limit = match query.limit {
        None => 20,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_DELIVERIES).contains(n))
            .ok_or_else(|| Problem::invalid_parameter("limit", "must be a whole number from 1 to 100"))?,
    };
    let Some(deliveries) = app.endpoints.deliveries(&admin.owner, id, limit).await? else {
        return Err(Problem::not_found().detail("no such webhook endpoint").into());
    };
    Ok(json_response(StatusCode::OK, &json!({ "deliveries": deliveries }), &[]))
}
