//! Reliability and security under faults: providers that misbehave on the
//! wire, and clients that send hostile input. One module per concern.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod hostile;
mod provider;
mod schemathesis;
