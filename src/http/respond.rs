//! Writing answers: JSON with a status and headers, and the header that
//! marks a replay.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The header that marks an answer as a replay of an earlier request.
pub(crate) const REPLAYED: &str = "idempotent-replayed";

/// A JSON answer with a status and extra headers.
pub(crate) fn json_response(
    status: StatusCode,
    body: &impl serde::Serialize,
    headers: &[(&'static str, String)],
) -> Response {
    let mut response = (status, axum::Json(body)).into_response();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(*name, value);
        }
    }
    response
}
