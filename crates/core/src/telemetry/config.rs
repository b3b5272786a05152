//! [`TelemetryConfig`]: where a process serves `/metrics` and `/health`, and how it logs.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::config::problem::Problems;

/// The `[telemetry]` table of the worker file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Address of the HTTP listener serving `/metrics` (Prometheus text) and `/health`.
    /// Default `127.0.0.1:9464`; port `0` picks a free port (printed at start).
    pub listen: SocketAddr,
    /// `text` (default) or `json` log lines on standard error.
    pub log_format: LogFormat,
    /// A tracing filter, e.g. `info` (default) or `mssql_cdc=debug,rdkafka=warn`. `RUST_LOG`
    /// overrides it.
    pub log_level: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self { listen: SocketAddr::from(([127, 0, 0, 1], 9464)), log_format: LogFormat::Text, log_level: "info".to_owned() }
    }
}

/// The form of log lines.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines with key=value fields.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl TelemetryConfig {
    /// Checks the settings without binding anything.
    pub fn validate(&self, problems: &mut Problems) {
        if tracing_subscriber::EnvFilter::try_new(&self.log_level).is_err() {
            problems.invalid("log_level", "not a tracing filter", "a level (error, warn, info, debug, trace) or target=level list");
        }
    }
}
