//! [`SilverOptions`]: the options of a `delta-silver` connector file, and the
//! [`SilverSettings`] validation makes of them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;
use crate::delta::location::check_location;
use crate::delta::storage::StorageOptions;
use mssql_cdc_core::stage::{ConnectorKind, Stage, StageContext, StageError};

/// Options of `delta-silver`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SilverOptions {
    /// The bronze table to follow. Required.
    pub bronze: Option<String>,
    /// The silver table (current state by key). Required.
    pub target: Option<String>,
    /// The writer's identity in the Delta `txn` actions. Required.
    pub app_id: Option<String>,
    /// Key columns. Default: the capture instance's key as recorded by the feed.
    pub keys: Option<Vec<String>>,
    /// The finalization table holding `finalized_until` and the applied position. Required.
    pub control_table: Option<String>,
    /// The facts table the bronze sink writes (its `facts_table`). Required: silver follows
    /// the batches recorded there, heartbeats included, which move the verdict on a quiet table.
    pub facts_table: Option<String>,
    /// Granularity `finalized_until` is truncated to: `minute`, `hour` (default) or `day`.
    pub granularity: Granularity,
    /// Most bronze batches one apply step folds into one silver commit. Default 100, 1–100000.
    pub max_batches_per_apply: u64,
    /// How long to wait when bronze has nothing new, milliseconds. Default 1000.
    pub poll_interval_ms: u64,
    /// How a batch replaces and deletes silver rows: `false` (default) rewrites the files that
    /// hold them (copy-on-write: any Delta reader); `true` marks them in deletion vectors and
    /// appends the new images (cost follows the batch, not the files it touches; readers need
    /// Delta reader version 3 with `deletionVectors`). Turning it on upgrades silver's protocol.
    pub deletion_vectors: bool,
    /// Object-store settings for all four tables (as `delta-bronze`'s `[storage_options]`).
    pub storage_options: StorageOptions,
}

impl Default for SilverOptions {
    fn default() -> Self {
        Self {
            bronze: None,
            target: None,
            app_id: None,
            keys: None,
            control_table: None,
            facts_table: None,
            granularity: Granularity::default(),
            max_batches_per_apply: 100,
            poll_interval_ms: 1000,
            deletion_vectors: false,
            storage_options: StorageOptions::default(),
        }
    }
}

/// The unit `finalized_until` moves in.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    /// Whole minutes.
    Minute,
    /// Whole hours.
    #[default]
    Hour,
    /// Whole days (UTC).
    Day,
}

/// The validated settings of a `delta-silver` connector: what the stage is built from.
#[derive(Clone, Debug)]
pub struct SilverSettings {
    /// The bronze table's location.
    pub bronze: String,
    /// The silver table's location.
    pub target: String,
    /// The writer's identity in the Delta `txn` actions.
    pub app_id: String,
    /// Key columns (non-empty); `None`: the capture instance's key as the feed records it.
    pub keys: Option<Vec<String>>,
    /// The finalization table's location.
    pub control_table: String,
    /// The facts table's location.
    pub facts_table: String,
    /// Granularity of `finalized_until`.
    pub granularity: Granularity,
    /// Most bronze batches one apply step folds into one silver commit (1 to 100000).
    pub max_batches_per_apply: i64,
    /// How long to wait when bronze has nothing new.
    pub poll_interval: Duration,
    /// Replace and delete silver rows by deletion vectors instead of rewriting their files.
    pub deletion_vectors: bool,
    /// Object-store settings of the four tables.
    pub storage_options: StorageOptions,
}

impl ConnectorKind for SilverOptions {
    const KIND: &'static str = "delta-silver";
    const SUMMARY: &'static str = "apply_changes from bronze into silver, and the finalized_until verdict";
    type Settings = SilverSettings;

    fn build(settings: SilverSettings, context: &StageContext) -> Result<Box<dyn Stage>, StageError> {
        Ok(Box::new(super::SilverSink::new(settings, context)))
    }

    fn validate(self, problems: &mut Problems) -> Option<SilverSettings> {
        let bronze = check_location(problems, "bronze", self.bronze.as_deref(), true);
        let target = check_location(problems, "target", self.target.as_deref(), true);
        let control_table = check_location(problems, "control_table", self.control_table.as_deref(), true);
        let facts_table = check_location(problems, "facts_table", self.facts_table.as_deref(), true);
        if !(1..=100_000).contains(&self.max_batches_per_apply) {
            problems.invalid("max_batches_per_apply", "out of range", "an integer from 1 to 100000");
        }
        if self.poll_interval_ms == 0 {
            problems.invalid("poll_interval_ms", "zero", "milliseconds, at least 1");
        }
        self.storage_options.validate(problems, "storage_options");
        let app_id = self.app_id.filter(|app_id| !app_id.trim().is_empty());
        if app_id.is_none() {
            problems.missing("app_id", "a stable writer id such as \"orders-silver-v1\"");
        }
        if let Some(keys) = &self.keys
            && (keys.is_empty() || keys.iter().any(|key| key.trim().is_empty()))
        {
            problems.invalid("keys", "empty", "a list of key column names, or omit it");
        }
        Some(SilverSettings {
            bronze: bronze?,
            target: target?,
            app_id: app_id?,
            keys: self.keys,
            control_table: control_table?,
            facts_table: facts_table?,
            granularity: self.granularity,
            max_batches_per_apply: i64::try_from(self.max_batches_per_apply).ok()?,
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            deletion_vectors: self.deletion_vectors,
            storage_options: self.storage_options,
        })
    }
}
