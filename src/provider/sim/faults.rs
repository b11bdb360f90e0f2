//! What a simulated provider with a `fault` does instead of a well-formed
//! answer, after it took the request and did the work (or, resetting
//! before the request, instead of taking it).

use std::io;

use axum::Extension;
use axum::body::{Body, Bytes};
use axum::extract::connect_info::ConnectInfo;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;

use super::HUGE_BODY_BYTES;
use super::answers::{completion, openai_error};
use super::connection::Connection;
use crate::config::SimFault;

/// Resets the connection the request came on instead of answering.
pub(super) fn reset(connection: Option<Extension<ConnectInfo<Connection>>>) -> Response {
    match connection {
        Some(Extension(ConnectInfo(connection))) => {
            connection.reset();
            // Never sent: writing it fails and resets the connection.
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        None => openai_error(500, "this simulator is not served by its own listener and cannot reset connections"),
    }
}

/// The answer of a provider with a `fault`, after it did the work.
pub(super) async fn misbehave(
    fault: SimFault,
    connection: Option<Extension<ConnectInfo<Connection>>>,
    id: &str,
    model: &str,
) -> Response {
    let json_200 = |body: Body| {
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .expect("a well-formed response")
    };
    match fault {
        SimFault::ResetBeforeRequest | SimFault::ResetAfterRequest => reset(connection),
        // Nothing is sent until the handler returns.
        SimFault::NoHeaders => std::future::pending().await,
        SimFault::StalledBody => {
            let whole = completion(id, model, r#"{"summary": "", "word_count": 0}"#, (0, 0)).to_string().into_bytes();
            let half = Bytes::copy_from_slice(&whole[..whole.len() / 2]);
            let stream = futures_util::stream::iter([Ok::<_, io::Error>(half)]).chain(futures_util::stream::pending());
            let mut response = json_200(Body::from_stream(stream));
            response.headers_mut().insert(header::CONTENT_LENGTH, whole.len().into());
            response
        }
        SimFault::HugeBody => {
            // A chat completion whose content is 10 MiB of one letter, sent
            // in chunks without a Content-Length: only counting bounds it.
            let chunk = Bytes::from(vec![b'a'; 64 * 1024]);
            let prefix = Bytes::from(format!(r#"{{"id": "chatcmpl-{id}", "object": "chat.completion", "choices": [{{"index": 0, "message": {{"role": "assistant", "content": ""#));
            let suffix = Bytes::from_static(br#""}, "finish_reason": "stop"}]}"#);
            let chunks = std::iter::once(prefix)
                .chain(std::iter::repeat_n(chunk, HUGE_BODY_BYTES / (64 * 1024)))
                .chain(std::iter::once(suffix))
                .map(Ok::<_, io::Error>);
            json_200(Body::from_stream(futures_util::stream::iter(chunks)))
        }
        SimFault::InvalidUtf8 => {
            // Raw bytes that are not UTF-8 where the content's text goes.
            let text = completion(id, model, "MARK", (0, 0)).to_string();
            let (before, after) = text.split_once("MARK").expect("the mark is in the completion");
            json_200(Body::from([before.as_bytes(), b"\xff\xfe\x80", after.as_bytes()].concat()))
        }
        SimFault::ErrorIn200 => json_200(Body::from(
            json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error", "param": null, "code": null}})
                .to_string(),
        )),
    }
}
