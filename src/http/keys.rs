//! `/keys`: revoking an API key (admin keys only). The key stops working on
//! this server before the answer is sent, and on every other server when the
//! store's change notification reaches it (see `auth`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use uuid::Uuid;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::Admin;
use super::error::{ApiError, Problem};
use crate::keys::Revocation;

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(revoke_key))
}

#[utoipa::path(post, path = "/keys/{id}/revoke", tag = "keys",
    params(("id" = uuid::Uuid, Path, description = "the key's id, as `onejob keys create` and `onejob keys list` print it")),
    responses(
        (status = 204, description = "revoked: no server accepts the key's token any more"),
        (status = 403, description = "forbidden: an admin route called with a client key, or an owner's admin revoking its owner's operator key", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 404, description = "not-found: no live key with this id (never made, or revoked already)", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn revoke_key(
    State(app): State<AppState>,
    Admin(admin): Admin,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = Uuid::try_parse(&id).map_err(|_| Problem::not_found())?;
    // An admin revokes its own owner's keys of its role or below; another
    // owner's id is as missing as an unknown one. An operator revokes any.
    let scope = (!admin.role.spans_owners()).then_some(&admin.owner);
    let revoked = app.keys.revoke(id, scope, admin.role).await?;
    // Forgotten here whether or not it was live: the cache never outlives the
    // store.
    app.auth.forget_key(id);
    match revoked {
        Revocation::Revoked => {}
        Revocation::NotFound => return Err(Problem::not_found().detail("no live API key has this id").into()),
        Revocation::Outranked => {
            return Err(
                Problem::forbidden("a key revokes keys of its own role or below: this one is an operator's").into()
            );
        }
    }
    // What it holds open here ends (every other replica hears of it through
    // the key-change follower); a refused revocation ends nothing.
    app.jobs.end_long_polls_of(id);
    tracing::info!(key = %id, by = %admin.key, owner = %admin.owner, "API key revoked");
    Ok(StatusCode::NO_CONTENT.into_response())
}
