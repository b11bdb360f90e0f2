//! The integration tests, one binary (each test binary links the whole
//! library, so fewer binaries build much faster), one module per concern.
//! The fault suite (`tests/faults`), the browser test (`tests/browser.rs`)
//! and, for now, the README reference tests (`tests/docs.rs`) are binaries
//! of their own.
//! The helpers in `tests/common` are shared with `tests/faults`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod api;
mod bench;
mod cli;
mod contract;
mod lifecycle;
mod openai;
mod openapi;
mod ops;
mod process;
mod store;
mod ui;
mod usage;
