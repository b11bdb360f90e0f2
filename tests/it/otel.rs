//! OpenTelemetry export, end to end: `onejob serve` as a process with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` naming a real OTLP/HTTP receiver on
//! loopback, whose protobuf requests are decoded with `opentelemetry-proto`.
//! A create with a `traceparent` makes a server span in that trace; the
//! attempt's spans, run later by the worker, join it; the provider call is a
//! client span with the GenAI attributes, whose id is the parent the
//! simulator received; an unknown outcome is an event of its trace.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{Value, json};

use crate::common::processes::{database, eventually, job, simulator_and_config_with, simulator_log};
use crate::common::{Backend, spawn_server_logged};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

type Received = Arc<Mutex<Vec<Span>>>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<Any> {
    span.attributes.iter().find(|a| a.key == key).and_then(|a| a.value.clone()?.value)
}

fn text(span: &Span, key: &str) -> Option<String> {
    match attribute(span, key)? {
        Any::StringValue(text) => Some(text),
        other => Some(format!("{other:?}")),
    }
}

/// A receiver of OTLP/HTTP trace exports: every span it was sent.
async fn receiver() -> (String, Received) {
    let received: Received = Arc::default();
    let store = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let store = store.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
                let spans = request.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans);
                store.lock().unwrap().extend(spans);
                Bytes::new()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

async fn spans_of(received: &Received, trace: &str, until: impl Fn(&[Span]) -> bool) -> Vec<Span> {
    let mut found = Vec::new();
    eventually("the spans were exported", Duration::from_secs(20), || {
        found = received.lock().unwrap().iter().filter(|s| hex(&s.trace_id) == trace).cloned().collect();
        let done = until(&found);
        async move { done }
    })
    .await;
    found
}

async fn a_traced_create_and_its_attempt_are_one_trace_down_to_the_provider_call(backend: Backend) {
    let (otlp, received) = receiver().await;
    let (simulator, config) = simulator_and_config_with(200, |_| {}).await;
    let (database_url, _pool, token) = database(backend).await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.as_str()),
        ("OTEL_SERVICE_NAME", "onejob-test"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let (_server, address, _log) = spawn_server_logged(&database_url, Some(&config), &[], &env).await;
    let client = reqwest::Client::new();
    let created = client
        .post(format!("http://{address}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "traced")
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .json(&json!({"task": "summarize", "input": {"text": "one trace from the click to the provider"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), reqwest::StatusCode::CREATED);
    let id = created.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_owned();
    eventually("succeeded", Duration::from_secs(20), || async {
        job(&client, &address, &token, &id).await["state"] == "succeeded"
    })
    .await;
    let done = job(&client, &address, &token, &id).await;

    let named = |spans: &[Span], name: &str| spans.iter().find(|s| s.name == name).cloned();
    let spans = spans_of(&received, CALLER_TRACE, |spans| {
        ["POST /jobs", "attempt", "settle", "chat sim-1"].iter().all(|name| spans.iter().any(|s| s.name == *name))
    })
    .await;
    // The server span of the create: the caller's span is its parent.
    let server = named(&spans, "POST /jobs").unwrap();
    assert_eq!(
        (server.kind, hex(&server.parent_span_id)),
        (2, CALLER_SPAN.to_owned()),
        "a server span under the caller's"
    );
    assert_eq!(text(&server, "http.request.method").as_deref(), Some("POST"));
    assert_eq!(text(&server, "http.route").as_deref(), Some("/jobs"));
    assert_eq!(attribute(&server, "http.response.status_code"), Some(Any::IntValue(201)));
    // The attempt, run later by the worker, joins the caller's trace.
    let attempt = named(&spans, "attempt").unwrap();
    assert_eq!(hex(&attempt.parent_span_id), CALLER_SPAN, "the attempt is done for the caller's request");
    assert_eq!(text(&attempt, "job.id").as_deref(), Some(id.as_str()));
    assert_eq!(attribute(&attempt, "attempt.number"), Some(Any::IntValue(1)));
    let settle = named(&spans, "settle").unwrap();
    assert_eq!(hex(&settle.parent_span_id), hex(&attempt.span_id));
    assert_eq!(text(&settle, "attempt.state").as_deref(), Some("succeeded"));
    // The provider call: a client span of the attempt, with GenAI attributes.
    let call = named(&spans, "chat sim-1").unwrap();
    assert_eq!((call.kind, hex(&call.parent_span_id)), (3, hex(&attempt.span_id)), "a client span of the attempt");
    assert_eq!(text(&call, "gen_ai.system").as_deref(), Some("openai"));
    assert_eq!(text(&call, "gen_ai.request.model").as_deref(), Some("sim-1"));
    let usage = &done["attempts"][0]["usage"];
    assert_eq!(
        attribute(&call, "gen_ai.usage.input_tokens"),
        Some(Any::IntValue(usage["prompt_tokens"].as_i64().unwrap()))
    );
    assert_eq!(
        attribute(&call, "gen_ai.usage.output_tokens"),
        Some(Any::IntValue(usage["completion_tokens"].as_i64().unwrap()))
    );
    // The provider was told the call's span is its parent.
    let attempt_id = done["attempts"][0]["id"].as_str().unwrap();
    let log = simulator_log(&client, &simulator).await;
    let record = log.iter().find(|r| r["id"] == attempt_id).unwrap();
    assert_eq!(record["traceparent"], format!("00-{CALLER_TRACE}-{}-01", hex(&call.span_id)), "{record:#}");

    // An unknown outcome is an event of the attempt's trace.
    let hung_trace = "0af7651916cd43dd8448eb211c80319c";
    let hung = client
        .post(format!("http://{address}/jobs"))
        .bearer_auth(&token)
        .header("idempotency-key", "traced-hang")
        .header("traceparent", format!("00-{hung_trace}-b7ad6b7169203331-01"))
        .json(&json!({"task": "summarize", "input": {"text": "never answered"}, "provider": "sim-hang"}))
        .send()
        .await
        .unwrap();
    assert_eq!(hung.status(), reqwest::StatusCode::CREATED);
    let spans = spans_of(&received, hung_trace, |spans| {
        spans.iter().any(|s| s.events.iter().any(|e| e.name.contains("outcome unknown")))
    })
    .await;
    let settled = spans.iter().find(|s| s.events.iter().any(|e| e.name.contains("outcome unknown"))).unwrap();
    assert_eq!(text(settled, "attempt.state").as_deref(), Some("unknown"), "{settled:?}");
}

on_both_backends!(a_traced_create_and_its_attempt_are_one_trace_down_to_the_provider_call);
