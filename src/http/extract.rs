//! Reading requests strictly: the `Idempotency-Key` header, and JSON bodies
//! with their content type and size checked and their content parsed
//! strictly (no duplicate member names, no NUL: see `json.rs`). Every refusal is a problem
//! answer, never a 500 and never a dropped connection.

use axum::body::Body;
use axum::http::{HeaderMap, header};
use http_body_util::BodyExt;
use serde_json::Value;

use super::error::{ApiError, Problem};
use crate::domain::IdempotencyKey;

/// How much of an over-long body is read and thrown away before answering
/// 413, so that the client reads the answer instead of a reset connection.
const DRAIN_LIMIT: usize = 16 * 1024 * 1024;

/// The request's `Idempotency-Key`, or 400.
pub fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, Problem> {
    let mut values = headers.get_all("idempotency-key").iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        let missing = headers.get("idempotency-key").is_none();
        return Err(if missing {
            Problem::new(axum::http::StatusCode::BAD_REQUEST, "idempotency-key-missing", "Idempotency-Key required")
                .detail("send an Idempotency-Key header: 1 to 255 visible ASCII characters naming this intent")
        } else {
            invalid_key("send exactly one Idempotency-Key header")
        });
    };
    IdempotencyKey::parse(value.as_bytes()).map_err(|error| invalid_key(&error.to_string()))
}

fn invalid_key(detail: &str) -> Problem {
    Problem::new(axum::http::StatusCode::BAD_REQUEST, "idempotency-key-invalid", "Invalid Idempotency-Key").detail(detail)
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(content_type) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn too_large(limit: usize) -> Problem {
    Problem::new(axum::http::StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large", "Payload too large")
        .detail(format!("the body is larger than {limit} bytes"))
        .with("limit", limit)
}

/// Reads a JSON body of at most `limit` bytes. An empty body is `{}` when
/// `empty_is_object`, whatever its content type.
pub async fn read_json(headers: &HeaderMap, body: Body, limit: usize, empty_is_object: bool) -> Result<Value, ApiError> {
    let declared: Option<usize> =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    if empty_is_object && declared == Some(0) {
        return Ok(Value::Object(Default::default()));
    }
    // Too large to be worth reading, even to throw away.
    if declared.is_some_and(|length| length > DRAIN_LIMIT) {
        return Err(too_large(limit).into());
    }
    let bytes = read_limited(body, limit).await?;
    if bytes.is_empty() && empty_is_object {
        return Ok(Value::Object(Default::default()));
    }
    if !is_json(headers) {
        return Err(Problem::new(
            axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
        )
        .detail("send the body as Content-Type: application/json")
        .into());
    }
    super::json::parse(&bytes).map_err(|error| Problem::invalid_field(&error.pointer, error.detail).into())
}

async fn read_limited(mut body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut bytes = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            // The client went away mid-body; nobody will read the answer.
            return Err(Problem::invalid_field("", "the body could not be read").into());
        };
        let Ok(data) = frame.into_data() else { continue };
        seen = seen.saturating_add(data.len());
        if seen > limit {
            if seen > DRAIN_LIMIT {
                break;
            }
            continue;
        }
        bytes.extend_from_slice(&data);
    }
    if seen > limit {
        return Err(too_large(limit).into());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn json_content_types_are_recognised_with_parameters_and_suffixes() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            is_json(&headers)
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/merge-patch+json"));
        assert!(!with("text/plain"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn two_idempotency_keys_are_refused() {
        let mut headers = HeaderMap::new();
        headers.append("idempotency-key", HeaderValue::from_static("a"));
        headers.append("idempotency-key", HeaderValue::from_static("b"));
        assert_eq!(idempotency_key(&headers).unwrap_err().kind(), "idempotency-key-invalid");
        assert_eq!(idempotency_key(&HeaderMap::new()).unwrap_err().kind(), "idempotency-key-missing");
    }
}
