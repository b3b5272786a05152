//! Telemetry: Prometheus metrics (names declared in [`metrics`]), the `/metrics` and
//! `/health` listener, structured logs, and the instrumentation events that log and count
//! together.

pub mod config;
pub mod events;
pub mod http;
pub mod logging;
pub mod metrics;

pub use config::{LogFormat, TelemetryConfig};
pub use http::Health;
