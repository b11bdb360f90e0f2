//! Logging: one `tracing` subscriber writing to standard error (standard
//! output is kept for what commands print, such as a new API token).
//! `RUST_LOG` filters, as usual; colours only on a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber; call once, first thing.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}
