//! Reliability and security under faults: providers that misbehave on the
//! wire, clients that send hostile input, keys and owners kept apart, one
//! owner's crowd of long-polls, many nodes on one database, a database
//! that stops or runs out of connections, a highly available one that fails
//! over, one whose disk fills, and plans made without statistics. One
//! module per concern.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod database;
mod failover;
mod hostile;
mod long_polls;
mod nodes;
mod plans;
mod provider;
mod schemathesis;
mod security;
mod storage;
