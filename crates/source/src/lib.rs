//! `mssql-source`: SQL Server CDC to Kafka, in commit-aligned batches, resumable from the log.
//!
//! One [`stream::Stream`] per capture instance, each with its own SQL Server connection and
//! producer:
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
pub mod zone;

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use config::{MssqlSourceOptions, MssqlSourceSettings};
pub use error::SourceError;

use mssql_cdc_core::log::registry::SchemaRegistry;
use mssql_cdc_core::stage::{Stage, StageContext, StageError};

/// The `mssql-source` stage: one stream per configured capture instance.
pub struct MssqlSource {
    name: String,
    streams: Vec<stream::Stream>,
}

impl MssqlSource {
    /// Builds the streams (no network).
    pub fn build(settings: MssqlSourceSettings, context: &StageContext) -> Result<Self, SourceError> {
        let registry = match &settings.encoding {
            mssql_cdc_core::log::Encoding::Avro(registry) => Some(Arc::new(SchemaRegistry::new(registry)?)),
            mssql_cdc_core::log::Encoding::Json => None,
        };
        let options = Arc::new(settings);
        let streams = options
            .capture_instances
            .iter()
            .map(|ci| stream::Stream::new(&context.name, ci, options.clone(), &context.worker.kafka, registry.clone()).map(|stream| stream.reporting(context.progress.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { name: context.name.clone(), streams })
    }

    /// The streams, one per capture instance, for commands that drive them one at a time
    /// (`mssql-cdc snapshot`, `mssql-cdc status`).
    pub fn into_streams(self) -> Vec<stream::Stream> {
        self.streams
    }
}

impl Stage for MssqlSource {
    fn run(self: Box<Self>, cancel: CancellationToken) -> BoxFuture<'static, Result<(), StageError>> {
        Box::pin(async move {
            let name = self.name.clone();
            let mut tasks = tokio::task::JoinSet::new();
            for stream in self.streams {
                let cancel = cancel.clone();
                tasks.spawn(stream.run(cancel));
            }
            // The first stream to fail stops the others: the stage fails as a whole.
            while let Some(joined) = tasks.join_next().await {
                let result = joined.map_err(|e| StageError::new(&name, e.to_string()))?;
                if let Err(error) = result {
                    cancel.cancel();
                    while tasks.join_next().await.is_some() {}
                    return Err(StageError::from_cause(&name, error));
                }
            }
            Ok(())
        })
    }
}
