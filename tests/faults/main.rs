//! Reliability and security under faults: providers that misbehave on the
//! wire, clients that send hostile input, keys and owners kept apart, many
//! nodes on one database, and a database that stops or runs out of
//! connections. One module per concern.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod database;
mod hostile;
mod nodes;
mod provider;
mod schemathesis;
mod security;
