//! Logging and tracing. Logs: one `tracing` subscriber writing to standard
//! error (standard output is kept for what commands print, such as a new API
//! token), as human-readable lines or as JSON objects, one per line.
//! `RUST_LOG` filters, as usual; colours only on a terminal. Secrets are
//! never given to it: tokens and provider keys are not fields of any span or
//! event, and no request header is logged.
//!
//! Traces: off unless an OTLP endpoint is named by the standard variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! and not `OTEL_SDK_DISABLED=true`). Then the spans are also exported with
//! the OpenTelemetry SDK over OTLP/HTTP (protobuf), batched; the SDK reads
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`
//! (and its argument), `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_BSP_*` itself.
//! Off, no OpenTelemetry layer is installed: the hot path pays nothing.

use std::io::IsTerminal;

use clap::ValueEnum;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::{Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Registry};

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Pretty,
    /// One JSON object per line, with the fields of the enclosing spans.
    Json,
}

/// Holds the trace exporter while the process runs; dropping it exports
/// what is left.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("exporting the last spans failed: {error}");
        }
    }
}

/// Whether the environment asks for traces to be exported.
fn exporting_asked() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// What is logged: `RUST_LOG`, or `info` and sqlx's warnings. Unless
/// `RUST_LOG` names it, the pool's own line for each connection refused by
/// onejob's first check (an ERROR per try, many a second against a standby)
/// is left out: the store logs those, counted, every 10 seconds.
fn log_filter() -> EnvFilter {
    const REFUSED_BY_POOL: &str = "sqlx_core::pool::inner=off";
    let asked = std::env::var("RUST_LOG").ok().filter(|asked| !asked.trim().is_empty());
    let named = asked.as_deref().is_some_and(|asked| asked.contains("sqlx_core::pool"));
    let filter =
        asked.and_then(|asked| EnvFilter::try_new(asked).ok()).unwrap_or_else(|| EnvFilter::new("info,sqlx=warn"));
    if named { filter } else { filter.add_directive(REFUSED_BY_POOL.parse().expect("a valid directive")) }
}

/// Installs the subscriber, and the trace exporter when the environment
/// names an endpoint; call once, first thing, inside the runtime.
pub fn init(format: LogFormat) -> Telemetry {
    let filter = log_filter();
    let provider = if exporting_asked() {
        match tracer_provider() {
            Ok(provider) => Some(provider),
            Err(error) => {
                eprintln!("traces are not exported: {error}");
                None
            }
        }
    } else {
        None
    };
    // `RUST_LOG` filters the logs only: the spans exported are onejob's own,
    // at `info`, whatever the logs show.
    let traces = provider.as_ref().map(|p| {
        let only_ours = tracing_subscriber::filter::Targets::new().with_target("onejob", tracing::Level::INFO);
        tracing_opentelemetry::layer().with_tracer(p.tracer("onejob")).with_filter(only_ours)
    });
    let logs: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Pretty => Box::new(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .fmt_fields(escaped_fields()),
        ),
        LogFormat::Json => Box::new(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .json()
                .with_current_span(true)
                .with_span_list(false),
        ),
    };
    let _ = tracing_subscriber::registry().with(logs.with_filter(filter)).with(traces).try_init();
    if provider.is_some() {
        opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
    }
    Telemetry { provider }
}

/// Fields as the pretty format writes them (`name=value`, the message
/// bare), their control characters escaped: a value a caller sent (a
/// resolve's reason) can neither start a line of its own nor colour a
/// terminal. The JSON format escapes them as JSON does.
fn escaped_fields() -> impl for<'writer> tracing_subscriber::fmt::FormatFields<'writer> + Send + Sync + 'static {
    use tracing_subscriber::field::MakeExt as _;
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = escape_controls(&format!("{value:?}"));
        match field.name() {
            "message" => write!(writer, "{text}"),
            name => write!(writer, "{name}={text}"),
        }
    })
    .delimited(" ")
}

/// `text` with its control characters (a newline, ESC) written as escapes.
fn escape_controls(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            escaped.extend(c.escape_default());
        } else {
            escaped.push(c);
        }
    }
    escaped
}

fn tracer_provider() -> Result<SdkTracerProvider, String> {
    let client = ExportClient {
        client: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?,
        runtime: tokio::runtime::Handle::try_current().map_err(|_| "no runtime to export from".to_owned())?,
    };
    let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http().with_http_client(client);
    // The endpoint and protocol come from the environment; protobuf is the default.
    if let Ok(endpoint) = std::env::var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        && !endpoint.trim().is_empty()
    {
        builder = builder.with_endpoint(endpoint);
    }
    let exporter = builder.build().map_err(|e| e.to_string())?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(service_name()).build();
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build())
}

/// `OTEL_SERVICE_NAME`, else `onejob` (a resource attribute
/// `service.name` in `OTEL_RESOURCE_ATTRIBUTES` is read by the SDK too).
fn service_name() -> String {
    std::env::var("OTEL_SERVICE_NAME").ok().filter(|v| !v.trim().is_empty()).unwrap_or_else(|| "onejob".to_owned())
}

/// The exporter's HTTP client: the process's own `reqwest`, run on the
/// process's runtime (the SDK exports from a thread of its own).
#[derive(Debug)]
struct ExportClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for ExportClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let answered = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let mut answer = http::Response::builder().status(response.status().as_u16());
            for (name, value) in response.headers() {
                answer = answer.header(name.as_str(), value.as_bytes());
            }
            let body = response.bytes().await?;
            Ok::<_, opentelemetry_http::HttpError>(answer.body(body)?)
        });
        answered.await?
    }
}

/// The OpenTelemetry context a stored trace context names.
fn context_of(trace: &crate::domain::TraceContext) -> opentelemetry::Context {
    let mut carrier = std::collections::HashMap::from([("traceparent".to_owned(), trace.traceparent.clone())]);
    if let Some(state) = &trace.tracestate {
        carrier.insert("tracestate".to_owned(), state.clone());
    }
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&carrier))
}

/// Makes `span` a child of the caller's `trace`, so that work done later,
/// anywhere, joins the caller's trace (a no-op when traces are not exported).
pub fn adopt(span: &tracing::Span, trace: Option<&crate::domain::TraceContext>) {
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    if let Some(trace) = trace {
        let _ = span.set_parent(context_of(trace));
    }
}

/// The trace context an outgoing call made in `span` carries: the span's
/// own when traces are exported (the callee's parent is that span), else a
/// child of the caller's `trace`, else none.
pub fn outgoing(
    span: &tracing::Span,
    trace: Option<&crate::domain::TraceContext>,
) -> Option<crate::domain::TraceContext> {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    let context = span.context();
    let own = context.span().span_context().clone();
    if own.is_valid() {
        let traceparent = format!("00-{}-{}-{:02x}", own.trace_id(), own.span_id(), own.trace_flags().to_u8());
        let tracestate = trace.and_then(|t| t.tracestate.clone());
        return Some(crate::domain::TraceContext { traceparent, tracestate });
    }
    trace.map(|t| crate::domain::TraceContext { traceparent: t.child(), tracestate: t.tracestate.clone() })
}

/// A span's name of two words (`POST /jobs`, `chat gpt-4o`), formatted only
/// when something records it; the second may be empty.
pub struct SpanName<'a>(pub &'a str, pub &'a str);

impl std::fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.1.is_empty() { f.write_str(self.0) } else { write!(f, "{} {}", self.0, self.1) }
    }
}

#[cfg(test)]
mod log_tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt as _;

    /// Where a test's log lines go.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_value_a_caller_sent_cannot_forge_a_line_or_colour_the_pretty_format() {
        let lines = Lines::default();
        let written = lines.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || written.clone())
            .fmt_fields(super::escaped_fields());
        let forged = "given up\n2026-12-07T00:00:00.000000Z  INFO onejob: operator resolved \x1b[31mall\x1b[0m";
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            tracing::info!(reason = %forged, role = "client", "an unknown attempt was resolved by hand");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "one record, one line: {text}");
        assert!(!text.contains('\x1b'), "no escape byte reaches the terminal: {text:?}");
        assert!(text.contains(r"given up\n2026") && text.contains(r"\u{1b}[31m"), "{text}");
        assert!(text.contains("an unknown attempt was resolved by hand") && text.contains("role=\"client\""), "{text}");
    }
}
