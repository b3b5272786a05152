//! Connector kinds and the registry that maps a file's `kind` to them.
//!
//! A kind is a folder (`src/source/<kind>/`, `src/sink/<kind>/`) whose options type implements
//! [`ConnectorKind`] (validate, then build a [`Stage`]), one line in [`registry`], and a page in
//! `docs/connectors/`. `mssql-cdc run` loads connector files, builds their stages and runs them
//! side by side until SIGINT/SIGTERM or the first stage error.

pub mod registry;

use std::fmt::Debug;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::config::problem::Problems;
use crate::config::WorkerConfig;

/// The options of one connector kind.
///
/// Implementors must:
/// - derive `Deserialize` with `#[serde(default, deny_unknown_fields)]` and implement
///   `Default`, with required options as `Option`s, so the loader can report every problem in
///   one pass (a removed bad key must never cause a second error);
/// - document every field with its unit and default;
/// - check everything else in [`ConnectorKind::validate`], which is pure: no network, no
///   files, no clock.
pub trait ConnectorKind: DeserializeOwned + Debug + Default {
    /// The `kind` value that selects this type in a connector file.
    const KIND: &'static str;
    /// One line describing the kind.
    const SUMMARY: &'static str;

    /// Pushes every problem found, with keys relative to the file's root.
    fn validate(&self, problems: &mut Problems);

    /// Builds the runnable stage from validated options. It may read secrets; it must not
    /// touch the network (connections are the stage's, at run time, with its retries).
    fn build(self, context: &StageContext) -> Result<Box<dyn Stage>, StageError>;
}

/// What every stage is built with.
#[derive(Clone, Debug)]
pub struct StageContext {
    /// The connector's name (logs, metrics, client ids).
    pub name: String,
    /// The worker's shared settings (Kafka cluster, telemetry, data directory).
    pub worker: WorkerConfig,
}

/// A running connector.
///
/// Implementors must:
/// - return `Ok(())` promptly once `cancel` fires, leaving nothing half-published that a
///   restart would not repair (the log and the Delta `txn` actions are the checkpoints);
/// - retry what is transient themselves and return an error only when the stage cannot go
///   on, naming what the operator must look at.
pub trait Stage: Send {
    /// Runs until cancelled or failed.
    fn run(self: Box<Self>, cancel: CancellationToken) -> BoxFuture<'static, Result<(), StageError>>;
}

/// Why a stage stopped (or could not be built).
#[derive(Debug, thiserror::Error)]
#[error("connector `{connector}`: {source}")]
pub struct StageError {
    /// The connector's name.
    pub connector: String,
    /// The cause.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl StageError {
    /// Wraps a cause.
    pub fn new(connector: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self { connector: connector.to_owned(), source: source.into() }
    }
}
