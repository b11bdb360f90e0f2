//! onejob: one job per intent. An HTTP service that turns a user's intent
//! into exactly one durable job and every try at it into an attempt under
//! that job, so that double clicks, retries, fallbacks and lost responses
//! never become two charges, two side effects or two answers.
//!
//! The invariants I1–I8 are listed in docs/design.md; each module says which it
//! keeps.
//!
//! The public surface is what the `onejob` binary, the tests and the
//! benchmarks use; everything else is `pub(crate)`, which the
//! `unreachable_pub` lint keeps so:
//! - [`app`]: the application built from settings, and its roles;
//! - [`config`]: the settings and their sections;
//! - [`domain`]: the pure types and rules;
//! - [`store`]: the store on Postgres or SQLite, its values, its
//!   retention and its output log;
//! - [`keys`]: API keys made and hashed, and the authenticator;
//! - [`provider`]: provider calls, the simulator ([`provider::sim`]) and
//!   the token counts;
//! - [`task`]: the catalog, contracts and qualification;
//! - [`http`]: the OpenAPI description, the problem types, the JSON bodies;
//! - [`ui`]: the pages' routes and their sessions' lifetimes;
//! - [`process`]: metrics and telemetry;
//! - [`worker`]: the worker and the purge;
//! - [`files`]: the blob store of outputs' files.
//!
//! Within the crate only: the job use cases (`jobs`), the webhooks'
//! endpoints and deliveries (`webhooks`), providers' callbacks
//! (`callbacks`), the handlers' shared state (`state`), `sync` and
//! `failpoints`.

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod app;
pub mod config;
pub use onejob_domain as domain;
mod callbacks;
mod failpoints;
pub mod files;
pub mod http;
mod jobs;
pub mod keys;
pub mod process;
pub mod provider;
mod state;
pub mod store;
mod sync;
pub mod task;
pub mod ui;
mod webhooks;
pub mod worker;
