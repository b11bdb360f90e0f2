//! The integration tests, one binary (each test binary links the whole
//! library, so fewer binaries build much faster), one module per concern.
//! The fault suite (`tests/faults`) and the browser test (`tests/browser.rs`)
//! are binaries of their own.
//! The helpers in `tests/common` are shared with `tests/faults`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod anthropic;
mod api;
mod batches;
mod bench;
mod blobs;
mod breakers;
mod cancellation;
mod citus;
mod cli;
mod cog;
mod contract;
mod deploys;
mod docs;
mod events;
mod fairness;
mod hedging;
mod jobs;
mod lifecycle;
mod lint;
mod memory;
mod names;
mod openai;
mod openapi;
mod ops;
mod otel;
mod output;
mod pgbouncer;
mod process;
mod prose;
mod replicate;
mod responses;
mod retention;
mod schema;
mod stalls;
mod store;
mod structure;
mod trace_context;
mod ui;
mod usage;
mod webhooks;
