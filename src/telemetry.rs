//! Logging: one `tracing` subscriber writing to standard error (standard
//! output is kept for what commands print, such as a new API token), as
//! human-readable lines or as JSON objects, one per line. `RUST_LOG`
//! filters, as usual; colours only on a terminal. Secrets are never given
//! to it: tokens and provider keys are not fields of any span or event, and
//! no request header is logged.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Pretty,
    /// One JSON object per line, with the fields of the enclosing spans.
    Json,
}

/// Installs the subscriber; call once, first thing.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Pretty => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(false).try_init(),
    };
}
