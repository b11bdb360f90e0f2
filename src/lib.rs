//! onejob: one job per intent. An HTTP service that turns a user's intent
//! into exactly one durable job and every try at it into an attempt under
//! that job, so that double clicks, retries, fallbacks and lost responses
//! never become two charges, two side effects or two answers.
//!
//! The invariants I1–I8 are listed in docs/design.md; each module says which it
//! keeps.

#![warn(missing_docs)]

pub mod app;
pub mod config;
pub use onejob_domain as domain;
pub mod failpoints;
pub mod http;
pub mod jobs;
pub mod keys;
pub mod process;
pub mod provider;
pub mod state;
pub mod store;
pub mod sync;
pub mod task;
pub mod ui;
pub mod webhooks;
pub mod worker;
