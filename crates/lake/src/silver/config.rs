//! [`SilverOptions`]: the options of a `delta-silver` connector file, and the
//! [`SilverSettings`] validation makes of them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;
use crate::delta::location::check_location;
use crate::delta::storage::StorageOptions;
use mssql_cdc_core::stage::{ConnectorKind, Stage, StageContext, StageError};
use mssql_cdc_core::tables::{check_override_keys, override_for, Bindings, Template};

use crate::tables::{build_table, check_bound, check_interval, check_location_template, check_topic_template, ManyTables, TopicTables, TopicTemplate};

/// Options of `delta-silver`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SilverOptions {
    /// With templates: the data topics whose tables this file serves, the bronze file's
    /// `topic` template (e.g. `cdc.sales.{schema}.{table}`), found on the broker. Then
    /// `bronze`, `target`, `control_table` and `facts_table` are templates naming the table,
    /// and `app_id` may hold placeholders (docs/many-tables.md). Default: one table.
    pub topic: Option<String>,
    /// With `topic`: how often the broker's topics are listed again for new tables,
    /// milliseconds. Default 60000.
    pub discovery_interval_ms: Option<u64>,
    /// Settings of one table (`[overrides."dbo.orders"]`): `keys` and `granularity` in place
    /// of the file's. Keys are `schema.table`, matched ignoring case; only with `topic`.
    pub overrides: BTreeMap<String, SilverOverride>,
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
    /// Most bronze rows one apply step folds, summed over its batches as the facts table
    /// records them: a step stops taking batches before the one that would pass it (a single
    /// batch larger than this, one large transaction, is applied in slices of keys of about
    /// this many rows, each its own silver commit). Bounds silver's memory, whatever the
    /// backlog or the transaction. Default 100000, 1–100000000.
    pub max_rows_per_apply: u64,
    /// How long to wait when bronze has nothing new, milliseconds. Default 1000.
    pub poll_interval_ms: u64,
    /// How a batch replaces and deletes silver rows: `false` (default) rewrites the files that
    /// hold them (copy-on-write: any Delta reader); `true` marks them in deletion vectors and
    /// appends the new images (cost follows the batch, not the files it touches; readers need
    /// Delta reader version 3 with `deletionVectors`). Turning it on upgrades silver's protocol.
    pub deletion_vectors: bool,
    /// Size of the files silver writes, MiB: kept as the silver table's `delta.targetFileSize`,
    /// which a copy-on-write MERGE, the rebuild after a snapshot and `optimize` write files up
    /// to. A rewrite holds the file it is writing in memory, so smaller files lower silver's
    /// peak; larger files mean fewer of them for readers. Default 32, 1–1024.
    pub target_file_size_mb: u64,
    /// Object-store settings for all four tables (as `delta-bronze`'s `[storage_options]`).
    pub storage_options: StorageOptions,
}

/// `[overrides."schema.table"]`: one table's settings in place of the file's.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SilverOverride {
    /// The table's key columns.
    pub keys: Option<Vec<String>>,
    /// The table's `granularity`.
    pub granularity: Option<Granularity>,
}

/// The templates of a silver file that serves many tables.
#[derive(Clone, Debug)]
pub struct SilverTemplates {
    /// The topics naming the tables, and how often they are looked for.
    pub topics: TopicTemplate,
    /// `bronze`, `target`, `control_table`, `facts_table`, `app_id`.
    pub bronze: Template,
    /// See `bronze`.
    pub target: Template,
    /// See `bronze`.
    pub control_table: Template,
    /// See `bronze`.
    pub facts_table: Template,
    /// See `bronze`.
    pub app_id: Template,
    /// Per-table settings by `schema.table`.
    pub overrides: BTreeMap<String, SilverOverride>,
}

impl SilverSettings {
    /// The settings of one table (bound as `bindings`), its override in place.
    pub fn for_table(&self, bindings: &Bindings) -> SilverSettings {
        let mut settings = self.clone();
        if let Some(templates) = self.templates.as_ref() {
            settings.bronze = templates.bronze.render(bindings);
            settings.target = templates.target.render(bindings);
            settings.control_table = templates.control_table.render(bindings);
            settings.facts_table = templates.facts_table.render(bindings);
            settings.app_id = templates.app_id.render(bindings);
            if let Some(given) = bindings.table_id().and_then(|id| override_for(&templates.overrides, &id).cloned()) {
                settings.keys = given.keys.or(settings.keys);
                settings.granularity = given.granularity.unwrap_or(settings.granularity);
            }
            settings.templates = None;
        }
        settings
    }
}

impl Default for SilverOptions {
    fn default() -> Self {
        Self {
            topic: None,
            discovery_interval_ms: None,
            overrides: BTreeMap::new(),
            bronze: None,
            target: None,
            app_id: None,
            keys: None,
            control_table: None,
            facts_table: None,
            granularity: Granularity::default(),
            max_batches_per_apply: 100,
            max_rows_per_apply: 100_000,
            poll_interval_ms: 1000,
            deletion_vectors: false,
            target_file_size_mb: 32,
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
    /// Most bronze rows one apply step folds (1 to 100000000; one larger batch is applied in
    /// slices of keys of about this many rows).
    pub max_rows_per_apply: i64,
    /// How long to wait when bronze has nothing new.
    pub poll_interval: Duration,
    /// Replace and delete silver rows by deletion vectors instead of rewriting their files.
    pub deletion_vectors: bool,
    /// Silver's `delta.targetFileSize`, bytes (1 MiB to 1 GiB).
    pub target_file_size: u64,
    /// Object-store settings of the four tables.
    pub storage_options: StorageOptions,
    /// With `topic`: the tables' templates and overrides; `None`: one table, as above.
    pub templates: Option<SilverTemplates>,
}

impl ConnectorKind for SilverOptions {
    const KIND: &'static str = "delta-silver";
    const SUMMARY: &'static str = "apply_changes from bronze into silver, and the finalized_until verdict";
    type Settings = SilverSettings;

    fn build(settings: SilverSettings, context: &StageContext) -> Result<Box<dyn Stage>, StageError> {
        match settings.templates.clone() {
            None => Ok(Box::new(super::SilverSink::new(settings, context))),
            Some(templates) => {
                let build = move |_topic: &str, bound: &Bindings, context: &StageContext| {
                    build_table(settings.for_table(bound), context, |settings, context| Ok(Box::new(super::SilverSink::new(settings, context)) as Box<dyn Stage>))
                };
                Ok(Box::new(ManyTables::new(context, TopicTables { template: templates.topics, context: context.clone(), build })))
            }
        }
    }

    fn validate(self, problems: &mut Problems) -> Option<SilverSettings> {
        let templated = self.topic.is_some();
        let interval = check_interval(problems, templated, self.discovery_interval_ms);
        let templates = if templated { self.templates(problems, interval) } else { None };
        if !templated && !self.overrides.is_empty() {
            problems.invalid("overrides", "set without a topic template", "`topic` naming the tables, or the settings in the file itself");
        }
        let location = |problems: &mut Problems, key: &str, value: Option<&str>| match templated {
            true => value.map(str::to_owned),
            false => check_location(problems, key, value, true),
        };
        let bronze = location(problems, "bronze", self.bronze.as_deref());
        let target = location(problems, "target", self.target.as_deref());
        let control_table = location(problems, "control_table", self.control_table.as_deref());
        let facts_table = location(problems, "facts_table", self.facts_table.as_deref());
        if !(1..=100_000).contains(&self.max_batches_per_apply) {
            problems.invalid("max_batches_per_apply", "out of range", "an integer from 1 to 100000");
        }
        if !(1..=100_000_000).contains(&self.max_rows_per_apply) {
            problems.invalid("max_rows_per_apply", "out of range", "a row count from 1 to 100000000");
        }
        if self.poll_interval_ms == 0 {
            problems.invalid("poll_interval_ms", "zero", "milliseconds, at least 1");
        }
        if !(1..=1024).contains(&self.target_file_size_mb) {
            problems.invalid("target_file_size_mb", "out of range", "MiB, an integer from 1 to 1024");
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
            max_rows_per_apply: i64::try_from(self.max_rows_per_apply).ok()?,
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            deletion_vectors: self.deletion_vectors,
            target_file_size: self.target_file_size_mb << 20,
            storage_options: self.storage_options,
            templates: if templated { Some(templates?) } else { None },
        })
    }
}

impl SilverOptions {
    /// The templates of a file with `topic`.
    fn templates(&self, problems: &mut Problems, interval: Duration) -> Option<SilverTemplates> {
        let topic = check_topic_template(problems, "topic", self.topic.as_deref().unwrap_or_default())?;
        let mut location = |key: &str, value: Option<&str>| {
            if value.is_none() {
                problems.missing(key, "a location with {schema} and {table} in it, e.g. \"s3://lake/silver/{schema}/{table}\"");
            }
            check_location_template(problems, key, value, &topic, true)
        };
        let bronze = location("bronze", self.bronze.as_deref());
        let target = location("target", self.target.as_deref());
        let control_table = location("control_table", self.control_table.as_deref());
        let facts_table = location("facts_table", self.facts_table.as_deref());
        let app_id = check_bound(problems, "app_id", self.app_id.as_deref().unwrap_or("x"), &topic);
        check_override_keys(problems, "overrides", &self.overrides);
        for (table, given) in &self.overrides {
            if given.keys.as_ref().is_some_and(|keys| keys.is_empty() || keys.iter().any(|key| key.trim().is_empty())) {
                problems.invalid(&format!("overrides.{table}.keys"), "empty", "a list of key column names, or omit it");
            }
        }
        Some(SilverTemplates {
            topics: TopicTemplate { topic, interval },
            bronze: bronze?,
            target: target?,
            control_table: control_table?,
            facts_table: facts_table?,
            app_id: app_id?,
            overrides: self.overrides.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `topic`, each table gets its own four locations, and its override (matched
    /// ignoring case) replaces the file's keys and granularity for that table only.
    #[test]
    fn templates_and_overrides_make_each_tables_settings() {
        let options = SilverOptions {
            topic: Some("cdc.sales.{schema}.{table}".into()),
            bronze: Some("./lake/bronze/{schema}/{table}".into()),
            target: Some("./lake/silver/{schema}/{table}".into()),
            control_table: Some("./lake/control/{schema}/{table}".into()),
            facts_table: Some("./lake/facts/{schema}/{table}".into()),
            app_id: Some("silver".into()),
            overrides: [("DBO.Orders".to_owned(), SilverOverride { keys: Some(vec!["order_id".into()]), granularity: Some(Granularity::Day) })].into(),
            ..SilverOptions::default()
        };
        let settings = options.clone().validate(&mut Problems::under("")).unwrap();
        let orders = settings.for_table(&Bindings::table(None, "dbo", "orders"));
        assert_eq!((orders.target.as_str(), orders.control_table.as_str()), ("./lake/silver/dbo/orders", "./lake/control/dbo/orders"));
        assert_eq!((orders.keys.clone(), orders.granularity), (Some(vec!["order_id".to_owned()]), Granularity::Day));
        let lines = settings.for_table(&Bindings::table(None, "dbo", "lines"));
        assert_eq!((lines.keys, lines.granularity), (None, Granularity::Hour));
        let mut problems = Problems::under("");
        let fixed = SilverOptions { topic: None, bronze: Some("./b".into()), target: Some("./s".into()), control_table: Some("./c".into()), facts_table: Some("./f".into()), ..options };
        fixed.validate(&mut problems);
        assert_eq!(problems.into_vec().into_iter().map(|p| p.key).collect::<Vec<_>>(), ["overrides"]);
    }
}
