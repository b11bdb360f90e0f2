//! What the running process needs around the product: its [`metrics`] (and
//! their [`labels`]), its [`listener`]s, the in-process [`signals`]
//! (wake-ups), its [`telemetry`] (logs and traces), and the [`failpoints`] a
//! test build can park it at.

pub mod failpoints;
pub mod labels;
pub mod listener;
pub mod metrics;
pub mod signals;
pub mod telemetry;
