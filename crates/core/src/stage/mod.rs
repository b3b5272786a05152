//! The stage contract: what a connector kind's options and its running stage must do.
//!
//! A kind is a folder in a stage crate (`crates/source/`, `crates/lake/src/bronze/`, ...) whose
//! options type implements [`ConnectorKind`] (validate into settings, then build a [`Stage`]
//! from them), one line in
//! the registry (`src/connectors/registry.rs` in the binary's crate), and a page in
//! `docs/connectors/`. `mssql-cdc run` loads connector files, builds their stages and runs them
//! side by side until SIGINT/SIGTERM or the first stage error.

pub mod board;
pub mod retry;
pub mod supervisor;
pub mod tables;

use std::fmt::Debug;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use crate::config::problem::Problems;
use crate::config::WorkerConfig;

/// The options of one connector kind, as written in its file, and the settings validation
/// makes of them.
///
/// Implementors must:
/// - derive `Deserialize` with `#[serde(default, deny_unknown_fields)]` and implement
///   `Default`, with required options as `Option`s, so the loader can report every problem in
///   one pass (a removed bad key must never cause a second error);
/// - document every field with its unit and default;
/// - turn the options into [`ConnectorKind::Settings`] in [`ConnectorKind::validate`], which is
///   pure (no network, no files, no clock): required values present, parsed values as enums
///   and typed values, defaults applied; the stage is built from the settings alone.
pub trait ConnectorKind: DeserializeOwned + Debug + Default {
    /// The `kind` value that selects this type in a connector file.
    const KIND: &'static str;
    /// One line describing the kind.
    const SUMMARY: &'static str;
    /// What validation yields: every value the stage needs, checked and typed.
    type Settings: Clone + Debug + Send + Sync + 'static;

    /// Pushes every problem found, with keys relative to the file's root, and returns the
    /// settings when the options make them. `Some` does not mean no problem was pushed (a
    /// value may be usable yet out of bounds): the loader accepts a file only without problems.
    fn validate(self, problems: &mut Problems) -> Option<Self::Settings>;

    /// Builds the runnable stage from validated settings. It may read secrets; it must not
    /// touch the network (connections are the stage's, at run time, with its retries).
    fn build(settings: Self::Settings, context: &StageContext) -> Result<Box<dyn Stage>, StageError>;
}

/// What every stage is built with.
#[derive(Clone, Debug)]
pub struct StageContext {
    /// The connector's name (logs, metrics, client ids).
    pub name: String,
    /// The worker's shared settings (Kafka cluster, telemetry, data directory).
    pub worker: WorkerConfig,
    /// Where the stage reports progress (the supervisor reads it).
    pub progress: Progress,
    /// Where a multi-table stage shows each table's state and takes restarts of one table.
    pub tables: board::TableBoard,
}

impl StageContext {
    /// A context with a fresh progress counter.
    pub fn new(name: &str, worker: WorkerConfig) -> Self {
        Self { name: name.to_owned(), worker, progress: Progress::default(), tables: board::TableBoard::default() }
    }
}

/// A stage's progress: a counter the stage advances after each unit of work it completed
/// (a batch published, written or applied). A failure after progress is a new incident for
/// the [`supervisor`], with the whole retry budget; without progress it continues the last.
#[derive(Clone, Debug, Default)]
pub struct Progress(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Progress {
    /// One more unit of work done.
    pub fn advance(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Units of work done so far.
    pub fn count(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A running connector.
///
/// Implementors must:
/// - return `Ok(())` promptly once `cancel` fires, leaving nothing half-published that a
///   restart would not repair (the log and the Delta `txn` actions are the checkpoints);
/// - be restartable: running a freshly built stage after a failure at any point must lose and
///   duplicate nothing, because the [`supervisor`] restarts a stage after a transient failure;
/// - say which failures are transient ([`StageError::transient`]): those the supervisor
///   retries with backoff; any other error stops the stage and names what the operator must
///   look at;
/// - advance [`StageContext::progress`] after each unit of work it completes.
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
    /// Whether waiting and starting the stage again may cure it.
    retriable: bool,
    /// What the operator must do about it.
    reason: StopReason,
}

/// Why a stage stopped, for the operator (the process's exit code tells them apart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// An error: look at its message.
    #[default]
    Failed,
    /// The source table's schema changed in a way the stream may not go past on its own: a
    /// decision is needed (`docs/schema-changes.md`).
    SchemaChanged,
}

/// An error that knows whether waiting may cure it. Each stage's error enum implements it, so
/// that [`StageError::from_cause`] keeps the cause and its verdict together.
pub trait Retriable: std::error::Error + Send + Sync + 'static {
    /// Whether a retry after a wait may succeed: a broker or server unreachable or
    /// restarting, a timeout, throttling, a 5xx answer, a commit conflict. Bad
    /// configuration, undecodable data and broken invariants are not.
    fn is_retriable(&self) -> bool;

    /// What the operator must do about it when it stops the stage. Default: look at it.
    fn stop_reason(&self) -> StopReason {
        StopReason::Failed
    }
}

impl StageError {
    /// A fatal cause: the stage stops.
    pub fn new(connector: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self { connector: connector.to_owned(), source: source.into(), retriable: false, reason: StopReason::Failed }
    }

    /// A transient cause: the supervisor starts the stage again after a wait.
    pub fn transient(connector: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self { connector: connector.to_owned(), source: source.into(), retriable: true, reason: StopReason::Failed }
    }

    /// Wraps a cause that says itself whether it is transient.
    pub fn from_cause<E: Retriable>(connector: &str, cause: E) -> Self {
        let (retriable, reason) = (cause.is_retriable(), cause.stop_reason());
        Self { connector: connector.to_owned(), source: Box::new(cause), retriable, reason }
    }

    /// Whether the supervisor retries it.
    pub fn is_retriable(&self) -> bool {
        self.retriable
    }

    /// What the operator must do about it.
    pub fn reason(&self) -> StopReason {
        self.reason
    }
}

/// An error and its causes, one per line (a cause its parent's message already holds is left
/// out).
pub fn error_trace(error: &(dyn std::error::Error + 'static)) -> String {
    let mut lines = vec![error.to_string()];
    let mut cause = error.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !lines.last().is_some_and(|last| last.contains(&text)) {
            lines.push(format!("caused by: {text}"));
        }
        cause = next.source();
    }
    lines.join("\n")
}
