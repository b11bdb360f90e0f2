//! Reading requests strictly: the `Idempotency-Key` header, JSON bodies
//! with their content type and size checked and their content parsed
//! strictly (no duplicate member names, no NUL: see `json.rs`), and the
//! members of body objects. Every refusal is a problem answer, never a 500
//! and never a dropped connection.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde::de::DeserializeOwned;
use serde_json::Value;
use utoipa::ToSchema;

use super::error::{ApiError, Problem, ProblemType};
use crate::domain::{IdempotencyKey, JobId};
use crate::state::AppState;
use crate::task::catalog::Violation;

/// How much of an over-long body is read and thrown away before answering
/// 413, so that the client reads the answer instead of a reset connection.
const DRAIN_LIMIT: usize = 16 * 1024 * 1024;

/// The request's `Idempotency-Key`, or 400.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, Problem> {
    let mut values = headers.get_all("idempotency-key").iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        let missing = headers.get("idempotency-key").is_none();
        return Err(if missing {
            Problem::new(ProblemType::IdempotencyKeyMissing)
                .detail("send an Idempotency-Key header: 1 to 255 visible ASCII characters naming this intent")
        } else {
            invalid_key("send exactly one Idempotency-Key header")
        });
    };
    IdempotencyKey::parse(value.as_bytes()).map_err(|error| invalid_key(&error.to_string()))
}

fn invalid_key(detail: &str) -> Problem {
    Problem::new(ProblemType::IdempotencyKeyInvalid).detail(detail)
}

fn is_json(headers: &HeaderMap) -> bool {
    let Some(content_type) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    // JSON is UTF-8 (RFC 8259): a body said to be in another charset is not
    // read as if it were.
    let utf8 = parts.filter_map(|parameter| parameter.split_once('=')).all(|(name, value)| {
        !name.trim().eq_ignore_ascii_case("charset") || value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
    });
    utf8 && (essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json")))
}

fn too_large(limit: usize) -> Problem {
    Problem::new(ProblemType::PayloadTooLarge)
        .detail(format!("the body is larger than {limit} bytes"))
        .with("limit", limit)
}

/// Reads a JSON body of at most `limit` bytes. An empty body is `{}` when
/// `empty_is_object`, whatever its content type.
pub(crate) async fn read_json(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    empty_is_object: bool,
) -> Result<Value, ApiError> {
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
        return Err(Problem::new(ProblemType::UnsupportedMediaType)
            .detail("send the body as Content-Type: application/json, in UTF-8")
            .into());
    }
    Ok(parse_json_text(&bytes, limit)?)
}

/// JSON text of at most `limit` bytes, parsed strictly: how a body already
/// read (or made, by the dashboard, from a form) is read.
pub(crate) fn parse_json_text(bytes: &[u8], limit: usize) -> Result<Value, Problem> {
    if bytes.len() > limit {
        return Err(too_large(limit));
    }
    super::json::parse(bytes).map_err(|error| Problem::invalid_field(&error.pointer, error.detail))
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

/// Escapes a member name for use in a JSON Pointer (RFC 6901).
pub(crate) fn pointer_to(name: &str) -> String {
    format!("/{}", name.replace('~', "~0").replace('/', "~1"))
}

/// The request's `Idempotency-Key`; a request without a valid one is
/// answered 400.
pub(crate) struct Key(pub IdempotencyKey);

impl<S: Send + Sync> FromRequestParts<S> for Key {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Ok(Key(idempotency_key(&parts.headers)?))
    }
}

/// The request's W3C trace context (`traceparent`, `tracestate`), when its
/// `traceparent` is valid; never refuses a request.
pub(crate) struct Trace(pub Option<crate::domain::TraceContext>);

impl<S: Send + Sync> FromRequestParts<S> for Trace {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        Ok(Trace(crate::domain::TraceContext::from_headers(header("traceparent"), header("tracestate"))))
    }
}

/// The job a path's `{id}` names; an id that cannot exist is answered 404,
/// as absent as one that does not.
pub(crate) struct JobPath(pub JobId);

impl<S: Send + Sync> FromRequestParts<S> for JobPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        // A path that does not decode is axum's own 400, as for any route.
        let Path(id) = Path::<String>::from_request_parts(parts, state).await.map_err(IntoResponse::into_response)?;
        let id = JobId::parse(&id).ok_or_else(|| Problem::not_found().into_response())?;
        tracing::Span::current().record("job.id", tracing::field::display(id));
        Ok(JobPath(id))
    }
}

/// The attempt a path's `{id}` and `{number}` name, or 404.
pub(crate) struct AttemptPath(pub JobId, pub i32);

impl<S: Send + Sync> FromRequestParts<S> for AttemptPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        let Path((id, number)) =
            Path::<(String, String)>::from_request_parts(parts, state).await.map_err(IntoResponse::into_response)?;
        let id = JobId::parse(&id).ok_or_else(|| Problem::not_found().into_response())?;
        let number: i32 = number.parse().map_err(|_| Problem::not_found().into_response())?;
        tracing::Span::current().record("job.id", tracing::field::display(id));
        Ok(AttemptPath(id, number))
    }
}

/// A request body of a declared shape: a serde type that also derives its
/// schema. [`StrictJson`] reads it.
pub(crate) trait JsonBody: DeserializeOwned + ToSchema + 'static {
    /// Whether an empty body (no bytes at all) means `{}`, whatever its
    /// content type.
    const EMPTY_IS_OBJECT: bool = false;

    /// What to say of any violation at `pointer`, where the schema's own
    /// words would not help (a pattern, say).
    fn explain(_pointer: &str) -> Option<&'static str> {
        None
    }

    /// The type's schema, compiled once: each type keeps it in a static of
    /// its own and hands it to [`compiled`], so that no lock is shared by
    /// the requests of every route.
    fn validator() -> &'static jsonschema::Validator;
}

/// `T`'s schema compiled into `cell` on first use.
pub(crate) fn compiled<T: JsonBody>(cell: &'static OnceLock<jsonschema::Validator>) -> &'static jsonschema::Validator {
    cell.get_or_init(|| jsonschema::draft202012::new(&schema_of::<T>()).expect("a body type's own schema compiles"))
}

/// A JSON body read strictly into `T`: its size and content type checked,
/// its text parsed strictly (no duplicate member names, no NUL, no integer a
/// double cannot hold: `json.rs`), and its value checked against `T`'s own
/// schema, so that every violation (unknown members, missing or mistyped
/// fields) is answered at once, each with its JSON pointer, before serde
/// reads it.
pub(crate) struct StrictJson<T>(pub T);

impl<T: JsonBody> FromRequest<AppState> for StrictJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        let value = read_json(&parts.headers, body, state.settings.max_body_bytes, T::EMPTY_IS_OBJECT).await?;
        Ok(StrictJson(parse_body(value)?))
    }
}

/// Reads `value` as a `T`, or every way it breaks `T`'s schema.
pub(crate) fn parse_body<T: JsonBody>(value: Value) -> Result<T, Problem> {
    if !value.is_object() {
        return Err(Problem::invalid_field("", "the body must be a JSON object"));
    }
    let validator = T::validator();
    if !validator.is_valid(&value) {
        let mut violations = violations(validator, &value);
        for violation in &mut violations {
            if let Some(words) = T::explain(&violation.pointer) {
                violation.detail = words.to_owned();
            }
        }
        return Err(Problem::invalid(violations));
    }
    serde_json::from_value(value).map_err(|error| Problem::invalid_field("", error.to_string()))
}

/// Every way `value` breaks the schema, by JSON pointer.
fn violations(validator: &jsonschema::Validator, value: &Value) -> Vec<Violation> {
    let mut violations = Vec::new();
    for error in validator.iter_errors(value) {
        let at = error.instance_path().to_string();
        match error.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                violations.extend(unexpected.iter().map(|name| Violation {
                    pointer: format!("{at}{}", pointer_to(name)),
                    detail: "unknown field".into(),
                }))
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                violations
                    .push(Violation { pointer: format!("{at}{}", pointer_to(name)), detail: "is required".into() });
            }
            ValidationErrorKind::Type { kind } => {
                let types: Vec<String> = match kind {
                    TypeKind::Single(one) => vec![one.to_string()],
                    TypeKind::Multiple(set) => set.iter().map(|t| t.to_string()).filter(|t| t != "null").collect(),
                };
                let types: Vec<String> = types.iter().map(|t| with_article(t)).collect();
                violations.push(Violation { pointer: at, detail: format!("must be {}", types.join(" or ")) });
            }
            _ => violations.push(Violation { pointer: at, detail: error.to_string() }),
        }
    }
    // One violation per member, as a reader would list them: the first
    // word said of each (a `null` outcome breaks both its type and its enum).
    let mut named = std::collections::HashSet::new();
    violations.retain(|violation| named.insert(violation.pointer.clone()));
    violations
}

fn with_article(json_type: &str) -> String {
    match json_type {
        "object" | "array" | "integer" => format!("an {json_type}"),
        "null" => "null".to_owned(),
        other => format!("a {other}"),
    }
}

/// `T`'s schema as JSON Schema, with the schemas it refers to written in
/// place of their references.
fn schema_of<T: JsonBody>() -> Value {
    let mut referred = Vec::new();
    T::schemas(&mut referred);
    let referred: HashMap<String, Value> =
        referred.into_iter().map(|(name, schema)| (name, serde_json::to_value(schema).unwrap_or_default())).collect();
    let mut schema = serde_json::to_value(T::schema()).unwrap_or_default();
    inline_refs(&mut schema, &referred);
    schema
}

fn inline_refs(schema: &mut Value, referred: &HashMap<String, Value>) {
    match schema {
        Value::Object(members) => {
            let target =
                members.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/components/schemas/"));
            if let Some(found) = target.and_then(|name| referred.get(name)) {
                *schema = found.clone();
                inline_refs(schema, referred);
            } else {
                members.values_mut().for_each(|member| inline_refs(member, referred));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| inline_refs(item, referred)),
        _ => {}
    }
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
        assert!(with("application/json; charset=\"UTF-8\""));
        assert!(!with("application/json; charset=utf-16"));
        assert!(!with("application/json;charset=iso-8859-1"));
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
