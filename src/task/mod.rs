//! Tasks: what a job asks for and who may answer it. The [`catalog`] holds
//! each configured task with its [`contract`] (the output's schema, the
//! prompt, the examples a provider is proven on) and its rules (retry
//! policy, limits, budget); [`qualify`] runs a provider against a task's
//! contract and keeps the verdict, which failover requires (I5); `breakers`
//! take a provider out of service while its calls mostly fail.

pub(crate) mod breakers;
pub mod catalog;
pub mod contract;
pub mod qualify;
