//! What the running process needs around the product: its [`metrics`] (and
//! their `labels`), its `listener`s, the in-process `signals`
//! (wake-ups) and its [`telemetry`] (logs and traces).

pub(crate) mod labels;
pub(crate) mod listener;
pub mod metrics;
pub(crate) mod signals;
pub mod telemetry;
