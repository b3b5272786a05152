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
use mssql_cdc_core::tables::{Bindings, Template};

use crate::tables::{build_table, check_bound, check_interval, check_location_template, check_topic_template, ManyTables, TopicTables, TopicTemplate};

/// Options of `delta-bronze`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BronzeOptions {
    /// The data topic to follow, `<topic_prefix>.<database>.<schema>.<table>`, or a template
    /// naming many, such as `cdc.sales.{schema}.{table}` (placeholders `{database}`,
    /// `{schema}`, `{table}`, each one or more characters other than `.`): every topic on the
    /// broker it matches is a table of this file (docs/many-tables.md). Required.
    pub topic: Option<String>,
    /// Its control topic. Default `<topic>.control` (always, with a topic template).
    pub control_topic: Option<String>,
    /// The bronze table: a local path or an `s3://`, `gs://`, `az://` URL; with a topic
    /// template, a template naming the table, e.g. `s3://lake/bronze/{schema}/{table}`
    /// (`{capture_instance}` is `<schema>_<table>`). Required.
    pub target: Option<String>,
    /// The writer's identity in the Delta `txn` actions; one per feed and table (placeholders
    /// allowed). Required.
    pub app_id: Option<String>,
    /// The facts table (one row per batch and event); with a topic template, a template
    /// naming the table. Default: no facts.
    pub facts_table: Option<String>,
    /// With a topic template: how often the broker's topics are listed again for new tables,
    /// milliseconds. Default 60000.
    pub discovery_interval_ms: Option<u64>,
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
    /// batch on its own. Default 100, silver's `max_batches_per_apply`, so that a silver step
    /// spans about one bronze file (`max_rows_per_commit` bounds a group's memory); at least 1.
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
    /// With a topic template: the tables' templates; `None`: one table, as above.
    pub templates: Option<BronzeTemplates>,
}

/// The templates of a bronze file that follows many topics.
#[derive(Clone, Debug)]
pub struct BronzeTemplates {
    /// The topics, and how often they are looked for.
    pub topics: TopicTemplate,
    /// `target`.
    pub target: Template,
    /// `app_id`.
    pub app_id: Template,
    /// `facts_table`.
    pub facts_table: Option<Template>,
}

impl BronzeSettings {
    /// The settings of the table behind `topic` (bound as `bindings`).
    pub fn for_topic(&self, topic: &str, bindings: &Bindings) -> BronzeSettings {
        let mut settings = self.clone();
        if let Some(templates) = self.templates.as_ref() {
            settings.topic = topic.to_owned();
            settings.control_topic = control_topic_for(topic);
            settings.target = templates.target.render(bindings);
            settings.app_id = templates.app_id.render(bindings);
            settings.facts_table = templates.facts_table.as_ref().map(|t| t.render(bindings));
            settings.templates = None;
        }
        settings
    }
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
        match settings.templates.clone() {
            None => Ok(Box::new(super::BronzeSink::new(settings, context))),
            Some(templates) => {
                let build = move |topic: &str, bound: &Bindings, context: &StageContext| {
                    build_table(settings.for_topic(topic, bound), context, |settings, context| Ok(Box::new(super::BronzeSink::new(settings, context)) as Box<dyn Stage>))
                };
                Ok(Box::new(ManyTables::new(context, TopicTables { template: templates.topics, context: context.clone(), build })))
            }
        }
    }

    fn validate(self, problems: &mut Problems) -> Option<BronzeSettings> {
        let templated = self.topic.as_deref().is_some_and(Template::is_template);
        let interval = check_interval(problems, templated, self.discovery_interval_ms);
        let templates = if templated { self.templates(problems, interval) } else { None };
        let topic = match templated {
            true => self.topic.clone(),
            false => check_topic(problems, "topic", self.topic.as_deref(), true),
        };
        if templated && self.control_topic.is_some() {
            problems.invalid("control_topic", "set with a topic template", "leave it out: each table's control topic is <topic>.control");
        }
        let control_topic = if templated { None } else { check_topic(problems, "control_topic", self.control_topic.as_deref(), false) };
        let dead_letter_topic = check_topic(problems, "errors.dead_letter_topic", self.errors.dead_letter_topic.as_deref(), false);
        let target = match templated {
            true => self.target.clone(),
            false => check_location(problems, "target", self.target.as_deref(), true),
        };
        let facts_table = match templated {
            true => self.facts_table.clone(),
            false => check_location(problems, "facts_table", self.facts_table.as_deref(), false),
        };
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
            templates: if templated { Some(templates?) } else { None },
        })
    }
}

impl BronzeOptions {
    /// The templates of a file whose `topic` is one.
    fn templates(&self, problems: &mut Problems, interval: std::time::Duration) -> Option<BronzeTemplates> {
        let topic = check_topic_template(problems, "topic", self.topic.as_deref().unwrap_or_default());
        let topic = topic?;
        let target = check_location_template(problems, "target", self.target.as_deref(), &topic, true);
        if self.target.is_none() {
            problems.missing("target", "a location with {schema} and {table} in it, e.g. \"s3://lake/bronze/{schema}/{table}\"");
        }
        let facts_table = match self.facts_table.as_deref() {
            None => Some(None),
            Some(text) => check_location_template(problems, "facts_table", Some(text), &topic, false).map(Some),
        };
        let app_id = check_bound(problems, "app_id", self.app_id.as_deref().unwrap_or("x"), &topic);
        Some(BronzeTemplates { topics: TopicTemplate { topic, interval }, target: target?, app_id: app_id?, facts_table: facts_table? })
    }
}

/// `batch_timeout_ms` when unset.
pub const DEFAULT_BATCH_TIMEOUT_MS: u64 = 120_000;
/// `max_batches_per_commit` when unset.
pub const DEFAULT_MAX_BATCHES_PER_COMMIT: u64 = 100;
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

    /// Coalescing limits default to 100 batches and 100,000 rows a commit; 0 is refused for
    /// both, each problem named with its key.
    #[test]
    fn coalescing_limits_default_and_refuse_zero() {
        let options = BronzeOptions { topic: Some("t".into()), target: Some("./bronze".into()), app_id: Some("a".into()), ..BronzeOptions::default() };
        let settings = options.clone().validate(&mut Problems::under("")).unwrap();
        assert_eq!(settings.coalesce, super::super::group::Coalesce { batches: 100, rows: 100_000 });
        let zero = BronzeOptions { max_batches_per_commit: Some(0), max_rows_per_commit: Some(0), ..options.clone() };
        let mut problems = Problems::under("");
        assert!(zero.validate(&mut problems).is_none());
        assert_eq!(problems.into_vec().into_iter().map(|p| p.key).collect::<Vec<_>>(), vec!["max_batches_per_commit", "max_rows_per_commit"]);
        let one = BronzeOptions { max_batches_per_commit: Some(1), ..options }.validate(&mut Problems::under("")).unwrap();
        assert_eq!(one.coalesce.batches, 1);
    }

    /// With a topic template, each table's settings are rendered from its topic: its own
    /// target, facts table, app id and control topic; a fixed target or a control topic is
    /// refused, naming the key.
    #[test]
    fn a_topic_template_renders_each_table() {
        let options = BronzeOptions {
            topic: Some("cdc.sales.{schema}.{table}".into()),
            target: Some("./lake/bronze/{schema}/{table}".into()),
            facts_table: Some("./lake/facts/{capture_instance}".into()),
            app_id: Some("bronze-{table}".into()),
            ..BronzeOptions::default()
        };
        let settings = options.clone().validate(&mut Problems::under("")).unwrap();
        let topic = "cdc.sales.dbo.orders";
        let bound = settings.templates.as_ref().unwrap().topics.topic.match_topic(topic).unwrap();
        let table = settings.for_topic(topic, &bound);
        assert_eq!((table.target.as_str(), table.app_id.as_str(), table.control_topic.as_str()), ("./lake/bronze/dbo/orders", "bronze-orders", "cdc.sales.dbo.orders.control"));
        assert_eq!(table.facts_table.as_deref(), Some("./lake/facts/dbo_orders"));
        assert!(table.templates.is_none());
        let shared = BronzeOptions { target: Some("./lake/bronze".into()), control_topic: Some("c".into()), ..options };
        let mut problems = Problems::under("");
        assert!(shared.validate(&mut problems).is_none());
        assert_eq!(problems.into_vec().into_iter().map(|p| p.key).collect::<Vec<_>>(), ["target", "control_topic"]);
    }
}
