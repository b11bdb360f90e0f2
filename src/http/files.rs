//! `GET /jobs/{id}/files/{name}`: a file that a job's output held, kept by
//! onejob ([`crate::files`]), named by the job's result (`url`). The owner
//! rule as for the job: another owner's, or one that does not exist, is 404.
//! A single byte range (`Range: bytes=…`) is answered 206; the file is
//! streamed from the blob store, never read whole.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, Problem};
use crate::domain::JobId;

/// The routes of this resource.
pub(crate) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(job_file))
}

#[utoipa::path(get, path = "/jobs/{id}/files/{name}", tag = "jobs",
    params(("id" = uuid::Uuid, Path, description = "the job's id"),
           ("name" = String, Path, description = "the file's name, as the job's result gives it (`file`)"),
           ("Range" = Option<String>, Header, description = "one byte range (`bytes=0-1023`, `bytes=1024-`, `bytes=-512`)")),
    responses(
        (status = 200, description = "the file, as its provider made it (its `sha256` in the result); its media type in Content-Type", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 206, description = "the range asked for, with Content-Range", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 404, description = "not-found: no such job for this owner, or no such file of it", body = crate::http::openapi::Problem, content_type = "application/problem+json"),
        (status = 416, description = "range-not-satisfiable: the range is past the file's end", headers(("Content-Range" = String, description = "`bytes */{size}`"))),
        crate::http::openapi::CommonErrors
    ))]
pub(crate) async fn job_file(
    State(app): State<AppState>,
    Caller(caller): Caller,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let id = JobId::parse(&id).ok_or_else(Problem::not_found)?;
    tracing::Span::current().record("job.id", tracing::field::display(id));
    let kept = app.jobs.job_file(&caller.owner, id, &name).await?.ok_or_else(Problem::not_found)?;
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok()).map(|v| byte_range(v, kept.size));
    let (status, start, end) = match range {
        None | Some(Range::Ignored) => (StatusCode::OK, 0, kept.size),
        Some(Range::Bytes(start, end)) => (StatusCode::PARTIAL_CONTENT, start, end),
        Some(Range::Unsatisfiable) => {
            let mut answer = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            let whole = HeaderValue::from_str(&format!("bytes */{}", kept.size)).expect("a number is a header value");
            answer.headers_mut().insert(header::CONTENT_RANGE, whole);
            return Ok(answer);
        }
    };
    let chunks = kept.read(start, end).await.map_err(|error| match error.kind() {
        // Removed since it was found: the job was purged or erased.
        std::io::ErrorKind::NotFound => Problem::not_found().into(),
        _ => internal(&error),
    })?;
    let mut answer = Response::new(Body::from_stream(chunks));
    *answer.status_mut() = status;
    let set = answer.headers_mut();
    let value = |text: String| HeaderValue::from_str(&text).expect("ASCII is a header value");
    set.insert(header::CONTENT_TYPE, value(kept.content_type.clone()));
    set.insert(header::CONTENT_LENGTH, value((end - start).to_string()));
    set.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    // A provider's bytes are never run as a page of this origin.
    set.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    set.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox; default-src 'none'"));
    if status == StatusCode::PARTIAL_CONTENT {
        set.insert(header::CONTENT_RANGE, value(format!("bytes {start}-{}/{}", end - 1, kept.size)));
    }
    Ok(answer)
}

fn internal(error: &std::io::Error) -> ApiError {
    tracing::error!(%error, "a kept file could not be read");
    Problem::internal().into()
}

/// What a `Range` header asks of a file of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
enum Range {
    /// Bytes `start` up to `end` (excluded).
    Bytes(u64, u64),
    /// Past the file's end.
    Unsatisfiable,
    /// Not one byte range: the whole file is answered.
    Ignored,
}

fn byte_range(header: &str, size: u64) -> Range {
    let Some(spec) = header.trim().strip_prefix("bytes=") else { return Range::Ignored };
    if spec.contains(',') {
        return Range::Ignored;
    }
    let Some((first, last)) = spec.split_once('-') else { return Range::Ignored };
    let number = |text: &str| text.trim().parse::<u64>().ok();
    match (first.trim().is_empty(), number(first), number(last)) {
        // The last `n` bytes.
        (true, _, Some(n)) if n > 0 && size > 0 => Range::Bytes(size.saturating_sub(n), size),
        (true, _, _) => Range::Unsatisfiable,
        (false, Some(start), _) if start >= size => Range::Unsatisfiable,
        (false, Some(start), None) if last.trim().is_empty() => Range::Bytes(start, size),
        (false, Some(start), Some(end)) if end >= start => Range::Bytes(start, end.saturating_add(1).min(size)),
        _ => Range::Ignored,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_byte_range_is_read_as_rfc_9110_says() {
        assert_eq!(byte_range("bytes=0-3", 10), Range::Bytes(0, 4));
        assert_eq!(byte_range("bytes=4-", 10), Range::Bytes(4, 10));
        assert_eq!(byte_range("bytes=-3", 10), Range::Bytes(7, 10));
        assert_eq!(byte_range("bytes=5-99", 10), Range::Bytes(5, 10));
        assert_eq!(byte_range("bytes=10-", 10), Range::Unsatisfiable);
        assert_eq!(byte_range("bytes=-0", 10), Range::Unsatisfiable);
        for ignored in ["bytes=0-1,4-5", "items=0-1", "bytes=3-1", "bytes=a-b"] {
            assert_eq!(byte_range(ignored, 10), Range::Ignored, "{ignored}");
        }
    }
}
