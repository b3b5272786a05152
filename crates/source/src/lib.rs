//! `mssql-source`: SQL Server CDC to Kafka, in commit-aligned batches, resumable from the log.
//!
//! One [`stream::Stream`] per table (the capture instances listed, the tables `tables`
//! patterns select), each with its own SQL Server connection and producer, each run apart
//! ([`tables`]):
//!
//! 1. resolve the capture instance ([`reader::resolve_instance`]) and its captured columns;
//! 2. read the control topic's last record: the position and the next batch id
//!    ([`publish::Publisher::last_control`]); `starting_lsn` only for a new stream;
//! 3. per batch: check for data loss against `sys.fn_cdc_get_min_lsn`, plan the commits after
//!    the position from `cdc.lsn_time_mapping` (at most `max_commits_per_batch`, never past
//!    `sys.fn_cdc_get_max_lsn()`), stream the change rows into Arrow batches
//!    ([`rows::BatchBuilder`]), publish them, wait for every acknowledgement, then publish
//!    the control record naming their offsets;
//! 4. retry deadlocks, lock timeouts and dropped connections on a new connection, with
//!    backoff, for up to `retry_timeout_ms`.
//!
//! See `docs/connectors/mssql-source.md`.

pub mod auth;
pub mod backfill;
pub mod config;
pub mod connection;
pub mod error;
pub mod keyset;
pub mod publish;
pub mod reader;
pub mod rows;
pub mod seed;
pub mod stream;
pub mod tables;
pub mod zone;

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use config::{MssqlSourceOptions, MssqlSourceSettings};
pub use error::SourceError;

use mssql_cdc_core::log::registry::SchemaRegistry;
use mssql_cdc_core::stage::board::TableBoard;
use mssql_cdc_core::stage::retry::RetryConfig;
use mssql_cdc_core::stage::tables::{run_tables, Fixed};
use mssql_cdc_core::stage::{Stage, StageContext, StageError};

/// The `mssql-source` stage: one stream per table, each run apart so that one table's fatal
/// error stops that table only ([`tables`]).
pub struct MssqlSource {
    name: String,
    parts: tables::StreamParts,
    retry: RetryConfig,
    board: TableBoard,
}

impl MssqlSource {
    /// Builds the stage (no network).
    pub fn build(settings: MssqlSourceSettings, context: &StageContext) -> Result<Self, SourceError> {
        let registry = match &settings.encoding {
            mssql_cdc_core::log::Encoding::Avro(registry) => Some(Arc::new(SchemaRegistry::new(registry)?)),
            mssql_cdc_core::log::Encoding::Json => None,
        };
        // Secrets and the login are checked now, before anything runs.
        connection::Connector::new(&settings.login)?;
        let parts = tables::StreamParts { connector: context.name.clone(), settings: Arc::new(settings), kafka: context.worker.kafka.clone(), registry };
        Ok(Self { name: context.name.clone(), parts, retry: context.worker.retry.clone(), board: context.tables.clone() })
    }

    /// The streams of the listed capture instances, for commands that drive them one at a
    /// time (`mssql-cdc snapshot`, `mssql-cdc status`).
    pub fn into_streams(self) -> Result<Vec<stream::Stream>, SourceError> {
        let parts = &self.parts;
        parts.settings.capture_instances.iter().map(|ci| stream::Stream::new(&parts.connector, ci, parts.settings.clone(), &parts.kafka, parts.registry.clone())).collect()
    }
}

impl Stage for MssqlSource {
    fn run(self: Box<Self>, cancel: CancellationToken) -> BoxFuture<'static, Result<(), StageError>> {
        Box::pin(async move {
            let Self { name, parts, retry, board } = *self;
            if parts.settings.tables.discovers() {
                let discovered = tables::Discovered::new(parts).map_err(|e| StageError::from_cause(&name, e))?;
                run_tables(&name, &retry, &board, discovered, cancel).await
            } else {
                run_tables(&name, &retry, &board, Fixed(parts.listed()), cancel).await
            }
        })
    }
}
