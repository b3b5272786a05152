//! [`SilverOptions`]: the options of a `delta-silver` connector file.

use serde::{Deserialize, Serialize};

use crate::config::problem::Problems;
use crate::delta::location::check_location;
use crate::stage::ConnectorKind;

/// Options of `delta-silver`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
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
    /// The facts table. Default: no facts.
    pub facts_table: Option<String>,
    /// Granularity `finalized_until` is truncated to: `minute`, `hour` (default) or `day`.
    pub granularity: Granularity,
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

impl ConnectorKind for SilverOptions {
    const KIND: &'static str = "delta-silver";
    const SUMMARY: &'static str = "apply_changes from bronze into silver, and the finalized_until verdict";

    fn build(self, context: &crate::stage::StageContext) -> Result<Box<dyn crate::stage::Stage>, crate::stage::StageError> {
        Err(crate::stage::StageError::new(&context.name, "this release validates `delta-silver` connector files but cannot run them yet; see docs/connectors/delta-silver.md"))
    }

    fn validate(&self, problems: &mut Problems) {
        check_location(problems, "bronze", self.bronze.as_deref(), true);
        check_location(problems, "target", self.target.as_deref(), true);
        check_location(problems, "control_table", self.control_table.as_deref(), true);
        check_location(problems, "facts_table", self.facts_table.as_deref(), false);
        if self.app_id.as_deref().is_none_or(|app_id| app_id.trim().is_empty()) {
            problems.missing("app_id", "a stable writer id such as \"orders-silver-v1\"");
        }
        if let Some(keys) = &self.keys {
            if keys.is_empty() || keys.iter().any(|key| key.trim().is_empty()) {
                problems.invalid("keys", "empty", "a list of key column names, or omit it");
            }
        }
    }
}
