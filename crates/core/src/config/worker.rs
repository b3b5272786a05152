//! [`WorkerConfig`]: what every connector of a process shares (the worker file).
//!
//! ```toml
//! data_dir = "./data"
//!
//! [kafka]
//! bootstrap_servers = "localhost:9092"
//! security_protocol = "sasl_ssl"
//! sasl = { mechanism = "scram_sha_512", username = "cdc", password = { env = "KAFKA_PASSWORD" } }
//! properties = { "linger.ms" = 5 }
//!
//! [telemetry]
//! listen = "0.0.0.0:9464"
//!
//! [retry]
//! budget_ms = 600000
//!
//! [api]
//! basic_auth = { user = "ops", password = { env = "MSSQL_CDC_API_PASSWORD" } }
//! ```

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::api::ApiConfig;
use super::load::{Document, LoadError, WORKER_ENV_PREFIX};
use super::problem::{Problem, Problems};
use crate::kafka::KafkaConfig;
use crate::stage::retry::RetryConfig;
use crate::telemetry::TelemetryConfig;

/// The worker file. Every key has a default, so no file at all is a valid worker.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// The Kafka cluster every connector of this worker uses.
    pub kafka: KafkaConfig,
    /// The `/metrics` and `/health` listener and the log format.
    pub telemetry: TelemetryConfig,
    /// How every stage's transient failures (broker, object store, SQL Server unreachable,
    /// timeouts, commit conflicts) are retried: backoff and budget.
    pub retry: RetryConfig,
    /// Directory for local state that is not a checkpoint (scratch files, the demo's data).
    /// Default `./data`.
    pub data_dir: DataDir,
    /// The management API on the telemetry listener (`/connectors`).
    pub api: ApiConfig,
}

/// A data directory path (a newtype so its default is documented in one place).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct DataDir(pub PathBuf);

impl Default for DataDir {
    fn default() -> Self {
        Self(PathBuf::from("./data"))
    }
}

impl WorkerConfig {
    /// Loads a worker file (or only the defaults when `path` is `None`) with its
    /// `MSSQL_CDC_WORKER__*` overrides, reporting every problem.
    pub fn load(path: Option<&std::path::Path>) -> Result<Result<Self, Vec<Problem>>, LoadError> {
        let document = match path {
            Some(path) => Document::read(path)?,
            None => Document::empty(),
        };
        Ok(Self::from_document(&document.with_env(WORKER_ENV_PREFIX)))
    }

    /// Extracts and validates a worker from a parsed document.
    pub fn from_document(document: &Document) -> Result<Self, Vec<Problem>> {
        let mut problems = Problems::under("");
        let worker: Option<WorkerConfig> = document.extract(&mut problems);
        if let Some(worker) = &worker {
            worker.validate(&mut problems);
        }
        match worker {
            Some(worker) if problems.is_empty() => Ok(worker),
            _ => Err(problems.into_vec()),
        }
    }

    /// Checks every section without I/O.
    pub fn validate(&self, problems: &mut Problems) {
        let mut kafka = Problems::under("kafka");
        self.kafka.validate(&mut kafka);
        problems.extend(kafka);
        let mut telemetry = Problems::under("telemetry");
        self.telemetry.validate(&mut telemetry);
        problems.extend(telemetry);
        let mut retry = Problems::under("retry");
        self.retry.validate(&mut retry);
        problems.extend(retry);
        let mut api = Problems::under("api");
        self.api.validate(&mut api);
        problems.extend(api);
        if self.data_dir.0.as_os_str().is_empty() {
            problems.invalid("data_dir", "empty", "a directory path");
        }
    }
}
