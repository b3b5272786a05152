//! [`BronzeError`]: why the bronze sink stopped.

use mssql_cdc_core::stage::Retriable;

use crate::delta::table::DeltaError;

/// An error of the `delta-bronze` stage.
#[derive(Debug, thiserror::Error)]
pub enum BronzeError {
    /// Kafka failed.
    #[error("Kafka: {0}")]
    Kafka(String),
    /// A batch took longer than `batch_timeout_ms`: a call that never returned.
    #[error("batch {batch_id} did not finish within batch_timeout_ms = {timeout_ms}; starting again from the tables")]
    Stalled {
        /// The batch.
        batch_id: u64,
        /// The limit.
        timeout_ms: u128,
    },
    /// A Delta table could not be read or written.
    #[error(transparent)]
    Delta(#[from] DeltaError),
    /// A data record could not be decoded and `errors.tolerance = "none"`.
    #[error("record {topic}/{partition} offset {offset} cannot be decoded: {reason} (errors.tolerance = \"none\"; set it to \"all\" with errors.dead_letter_topic to dead-letter such records)")]
    Undecodable {
        /// The data topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// Why.
        reason: String,
    },
    /// A control record could not be read.
    #[error("control topic `{topic}` offset {offset}: {reason}")]
    BadControl {
        /// The control topic.
        topic: String,
        /// The record's offset.
        offset: i64,
        /// Why.
        reason: String,
    },
    /// Records a control record names are not in the data topic.
    #[error("records named by a control record are missing from the data topic: {detail}")]
    MissingRecords {
        /// Which.
        detail: String,
    },
    /// The feed is behind what this app_id already wrote: reset, or the app_id is reused.
    #[error(
        "app_id `{app_id}` already wrote batch {written} to `{target}`, but the control topic `{control_topic}` {found}: the feed was reset or the app_id is reused by another feed. Use a new app_id (and table) for a new feed"
    )]
    RewoundFeed {
        /// The app id.
        app_id: String,
        /// The table.
        target: String,
        /// The highest batch id written.
        written: i64,
        /// The control topic.
        control_topic: String,
        /// What the control topic holds.
        found: String,
    },
    /// The control topic skipped batch ids.
    #[error("control topic `{control_topic}` jumps from batch {previous} to batch {next}: control records are missing")]
    Gap {
        /// The control topic.
        control_topic: String,
        /// The last batch seen.
        previous: u64,
        /// The batch that followed it.
        next: u64,
    },
    /// A `storage_options` value could not be read (its variable or file is missing).
    #[error("storage_options: {0}")]
    Storage(#[from] mssql_cdc_core::config::secret::SecretError),
}

impl From<mssql_cdc_core::kafka::blocking::Interrupted> for BronzeError {
    fn from(error: mssql_cdc_core::kafka::blocking::Interrupted) -> Self {
        Self::Kafka(error.to_string())
    }
}

impl Retriable for BronzeError {
    /// Kafka failures (a broker unreachable or restarting, a topic not created yet, a fetch
    /// timing out) and transient Delta failures are retried; bad data, a rewound or gapped
    /// feed and bad settings are not.
    fn is_retriable(&self) -> bool {
        match self {
            Self::Kafka(_) | Self::Stalled { .. } => true,
            Self::Delta(error) => error.transient,
            Self::Undecodable { .. } | Self::BadControl { .. } | Self::MissingRecords { .. } | Self::RewoundFeed { .. } | Self::Gap { .. } | Self::Storage(_) => false,
        }
    }
}
