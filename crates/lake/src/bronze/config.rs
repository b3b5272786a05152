//! [`BronzeOptions`]: the options of a `delta-bronze` connector file, and the
//! [`BronzeSettings`] validation makes of them.

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;
use crate::delta::location::check_location;
use crate::delta::storage::StorageOptions;
use mssql_cdc_core::kafka::config::Properties;
use mssql_cdc_core::log::format::{validate_format, Encoding, RecordFormat, SchemaRegistryConfig};
use mssql_cdc_core::log::topic::{check_topic, control_topic_for};
use mssql_cdc_core::stage::{ConnectorKind, Stage, StageContext, StageError};

/// Options of `delta-bronze`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BronzeOptions {
    /// The data topic to follow, `<topic_prefix>.<database>.<schema>.<table>`. Required.
    pub topic: Option<String>,
    /// Its control topic. Default `<topic>.control`.
    pub control_topic: Option<String>,
    /// The bronze table: a local path or an `s3://`, `gs://`, `az://` URL. Required.
    pub target: Option<String>,
    /// The writer's identity in the Delta `txn` actions; one per feed and table. Required.
    pub app_id: Option<String>,
    /// The facts table (one row per batch and event). Default: no facts.
    pub facts_table: Option<String>,
    /// Object-store settings for `target` and `facts_table` (the `[storage_options]` table):
    /// delta-rs option names such as `AWS_REGION`, values a string, `{ env = "VAR" }` or
    /// `{ file = "/path" }`. Default: none (delta-rs reads `AWS_*`, `AZURE_*`, `GOOGLE_*` from
    /// the environment).
    pub storage_options: StorageOptions,
    /// Encoding of data records: `json` (default) or `avro`.
    pub format: RecordFormat,
    /// Schema registry, required with `format = "avro"`.
    pub schema_registry: Option<SchemaRegistryConfig>,
    /// librdkafka consumer properties passed through.
    pub consumer_properties: Properties,
    /// What to do with a record that cannot be decoded (the `[errors]` table).
    pub errors: ErrorsConfig,
    /// Milliseconds one batch (its reads and its bronze, plans and facts commits) may take
    /// before the sink gives it up as stalled and starts again from the tables (a transient
    /// failure, retried like an outage; nothing is written twice). Default 120000; at least
    /// 1000.
    pub batch_timeout_ms: Option<u64>,
    /// The most batches one bronze commit (and one facts commit) carries when several are
    /// already fetched from the control topic (a sink that is behind); each batch stays exactly
    /// once through the commit's `txn` version, the group's last batch id. `1` commits every
    /// batch on its own. Default 20; at least 1.
    pub max_batches_per_commit: Option<u64>,
    /// The most change rows one coalesced commit carries (its records and rows are held in
    /// memory until it commits); a larger batch is committed on its own. Default 100000; at
    /// least 1.
    pub max_rows_per_commit: Option<u64>,
}

/// Handling of undecodable records, as Kafka Connect's `errors.*` settings.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ErrorsConfig {
    /// `none` (default): stop, naming topic, partition and offset. `all`: send the record to
    /// `dead_letter_topic` and go on.
    pub tolerance: Tolerance,
    /// Where undecodable records go with `tolerance = "all"` (required then).
    pub dead_letter_topic: Option<String>,
}

/// Kafka Connect's `errors.tolerance`.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Tolerance {
    /// Stop at the first bad record.
    #[default]
    None,
    /// Dead-letter bad records and continue.
    All,
}

/// The validated settings of a `delta-bronze` connector: what the sink is built from.
#[derive(Clone, Debug)]
pub struct BronzeSettings {
    /// The data topic.
    pub topic: String,
    /// Its control topic (defaulted to `<topic>.control`).
    pub control_topic: String,
    /// The bronze table's location.
    pub target: String,
    /// The writer's identity in the Delta `txn` actions.
    pub app_id: String,
    /// The facts table's location, if facts are written.
    pub facts_table: Option<String>,
    /// Object-store settings of both tables.
    pub storage_options: StorageOptions,
    /// Encoding of data records, with the registry for Avro.
    pub encoding: Encoding,
    /// librdkafka consumer properties passed through.
    pub consumer_properties: Properties,
    /// What happens to a record that cannot be decoded.
    pub bad_records: BadRecords,
    /// How long one batch (or one coalesced group) may take before it is given up as stalled.
    pub batch_timeout: std::time::Duration,
    /// How many batches and rows one commit may carry.
    pub coalesce: super::group::Coalesce,
}

/// What happens to a record that cannot be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadRecords {
    /// The sink stops, naming topic, partition and offset.
    Stop,
    /// The record goes to this dead-letter topic and the sink goes on.
    DeadLetter(String),
}

impl ConnectorKind for BronzeOptions {
    const KIND: &'static str = "delta-bronze";
    const SUMMARY: &'static str = "Kafka to a bronze Delta table and the facts table, exactly once";
    type Settings = BronzeSettings;

    fn build(settings: BronzeSettings, context: &StageContext) -> Result<Box<dyn Stage>, StageError> {
        Ok(Box::new(super::BronzeSink::new(settings, context)))
    }

    fn validate(self, problems: &mut Problems) -> Option<BronzeSettings> {
        let topic = check_topic(problems, "topic", self.topic.as_deref(), true);
        let control_topic = check_topic(problems, "control_topic", self.control_topic.as_deref(), false);
        let dead_letter_topic = check_topic(problems, "errors.dead_letter_topic", self.errors.dead_letter_topic.as_deref(), false);
        let target = check_location(problems, "target", self.target.as_deref(), true);
        let facts_table = check_location(problems, "facts_table", self.facts_table.as_deref(), false);
        self.storage_options.validate(problems, "storage_options");
        let app_id = match self.app_id {
            None => {
                problems.missing("app_id", "a stable writer id such as \"orders-bronze-v1\"");
                None
            }
            Some(app_id) if app_id.trim().is_empty() || app_id.contains('#') => {
                problems.invalid("app_id", "not an app id", "a non-empty string without '#'");
                None
            }
            Some(app_id) => Some(app_id),
        };
        let encoding = validate_format(self.format, self.schema_registry.as_ref(), problems);
        let bad_records = match (self.errors.tolerance, dead_letter_topic) {
            (Tolerance::None, _) => Some(BadRecords::Stop),
            (Tolerance::All, Some(topic)) => Some(BadRecords::DeadLetter(topic)),
            (Tolerance::All, None) => {
                if self.errors.dead_letter_topic.is_none() {
                    problems.missing("errors.dead_letter_topic", "a topic for undecodable records, since errors.tolerance = \"all\"");
                }
                None
            }
        };
        let batch_timeout = match self.batch_timeout_ms {
            None => Some(std::time::Duration::from_millis(DEFAULT_BATCH_TIMEOUT_MS)),
            Some(ms) if ms >= 1000 => Some(std::time::Duration::from_millis(ms)),
            Some(_) => {
                problems.invalid("batch_timeout_ms", "under a second", "milliseconds, at least 1000");
                None
            }
        };
        let positive = |problems: &mut Problems, key: &str, value: Option<u64>, default: u64| match value {
            None => Some(default),
            Some(0) => {
                problems.invalid(key, "0", "a whole number, at least 1");
                None
            }
            Some(n) => Some(n),
        };
        let batches = positive(problems, "max_batches_per_commit", self.max_batches_per_commit, DEFAULT_MAX_BATCHES_PER_COMMIT);
        let rows = positive(problems, "max_rows_per_commit", self.max_rows_per_commit, DEFAULT_MAX_ROWS_PER_COMMIT);
        let topic = topic?;
        Some(BronzeSettings {
            control_topic: control_topic.unwrap_or_else(|| control_topic_for(&topic)),
            topic,
            target: target?,
            app_id: app_id?,
            facts_table,
            storage_options: self.storage_options,
            encoding: encoding?,
            consumer_properties: self.consumer_properties,
            bad_records: bad_records?,
            batch_timeout: batch_timeout?,
            coalesce: super::group::Coalesce { batches: usize::try_from(batches?).unwrap_or(usize::MAX), rows: rows? },
        })
    }
}

/// `batch_timeout_ms` when unset.
pub const DEFAULT_BATCH_TIMEOUT_MS: u64 = 120_000;
/// `max_batches_per_commit` when unset.
pub const DEFAULT_MAX_BATCHES_PER_COMMIT: u64 = 20;
/// `max_rows_per_commit` when unset.
pub const DEFAULT_MAX_ROWS_PER_COMMIT: u64 = 100_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_all_needs_a_dead_letter_topic() {
        let options = BronzeOptions {
            topic: Some("cdc.db.dbo.orders".into()),
            target: Some("./bronze".into()),
            app_id: Some("orders".into()),
            errors: ErrorsConfig { tolerance: Tolerance::All, dead_letter_topic: None },
            ..BronzeOptions::default()
        };
        let mut problems = Problems::under("");
        assert!(options.clone().validate(&mut problems).is_none());
        let keys: Vec<String> = problems.into_vec().into_iter().map(|problem| problem.key).collect();
        assert_eq!(keys, vec!["errors.dead_letter_topic"]);
        let tolerant = BronzeOptions { errors: ErrorsConfig { tolerance: Tolerance::All, dead_letter_topic: Some("dlq".into()) }, ..options };
        let settings = tolerant.validate(&mut Problems::under("")).unwrap();
        assert_eq!(settings.bad_records, BadRecords::DeadLetter("dlq".into()));
        assert_eq!(settings.control_topic, "cdc.db.dbo.orders.control", "the control topic defaults to <topic>.control");
        assert_eq!(settings.batch_timeout, std::time::Duration::from_millis(DEFAULT_BATCH_TIMEOUT_MS));
    }

    /// A batch timeout under a second is refused, naming the key.
    #[test]
    fn batch_timeout_is_at_least_a_second() {
        let options = BronzeOptions { topic: Some("t".into()), target: Some("./bronze".into()), app_id: Some("a".into()), batch_timeout_ms: Some(999), ..BronzeOptions::default() };
        let mut problems = Problems::under("");
        assert!(options.clone().validate(&mut problems).is_none());
        assert_eq!(problems.into_vec().into_iter().map(|p| p.key).collect::<Vec<_>>(), vec!["batch_timeout_ms"]);
        let settings = BronzeOptions { batch_timeout_ms: Some(5000), ..options }.validate(&mut Problems::under("")).unwrap();
        assert_eq!(settings.batch_timeout, std::time::Duration::from_secs(5));
    }

    /// Coalescing limits default to 20 batches and 100,000 rows a commit; 0 is refused for
    /// both, each problem named with its key.
    #[test]
    fn coalescing_limits_default_and_refuse_zero() {
        let options = BronzeOptions { topic: Some("t".into()), target: Some("./bronze".into()), app_id: Some("a".into()), ..BronzeOptions::default() };
        let settings = options.clone().validate(&mut Problems::under("")).unwrap();
        assert_eq!(settings.coalesce, super::super::group::Coalesce { batches: 20, rows: 100_000 });
        let zero = BronzeOptions { max_batches_per_commit: Some(0), max_rows_per_commit: Some(0), ..options.clone() };
        let mut problems = Problems::under("");
        assert!(zero.validate(&mut problems).is_none());
        assert_eq!(problems.into_vec().into_iter().map(|p| p.key).collect::<Vec<_>>(), vec!["max_batches_per_commit", "max_rows_per_commit"]);
        let one = BronzeOptions { max_batches_per_commit: Some(1), ..options }.validate(&mut Problems::under("")).unwrap();
        assert_eq!(one.coalesce.batches, 1);
    }
}
