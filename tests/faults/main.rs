//! Reliability and security under faults: providers that misbehave on the
//! wire, clients that send hostile input, keys and owners kept apart. One
//! module per concern.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod hostile;
mod provider;
mod schemathesis;
mod security;
