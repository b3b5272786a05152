//! [`MssqlSourceOptions`]: the options of an `mssql-source` connector file, and the
//! [`MssqlSourceSettings`] validation makes of them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;
use mssql_cdc_core::config::secret::Secret;
use mssql_cdc_core::kafka::config::Properties;
use mssql_cdc_core::log::debezium::event::EventSettings;
use mssql_cdc_core::log::format::{validate_format, Envelope, RecordFormat, SchemaRegistryConfig};
use mssql_cdc_core::log::topic::{is_valid_topic, TOPIC_FORM};
use mssql_cdc_core::log::control::SnapshotMode;
use mssql_cdc_core::log::ColumnType;
use mssql_cdc_core::stage::retry::RetryConfig;
use mssql_cdc_core::stage::{ConnectorKind, Stage, StageContext, StageError};
use mssql_cdc_types::timezone::ServerZone;

use crate::auth::config::{AuthenticationKind, EntraIdOptions};
pub use crate::auth::login::{Encrypt, Login, ServerTrust};
use crate::backfill::config::BackfillOptions;
use mssql_cdc_core::tables::pattern::PATTERN_FORM;
use mssql_cdc_core::tables::{check_override_keys, TablePattern};

mod connection_string;
mod settings;

pub use connection_string::ConnectionString;
pub(crate) use connection_string::{PASSWORD_KEYS, SERVER_KEYS, USER_KEYS};
pub use settings::{Cast, ColumnChoice, MssqlSourceSettings, SnapshotSettings, SourceZone, StartingLsn};

/// Options of `mssql-source`. Names follow the reference library's, in snake_case.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MssqlSourceOptions {
    /// ADO.NET-style connection string, e.g. `Server=sql,1433;Database=sales`. Required. It must
    /// not hold the login: give `user` and `password` apart.
    pub connection_string: Option<ConnectionString>,
    /// SQL login name.
    pub user: Option<String>,
    /// SQL login password: a string, `{ env = "VAR" }` or `{ file = "/path" }`. Redacted.
    pub password: Option<Secret>,
    /// How the source signs in: `sql_password` (default: `user` and `password`),
    /// `access_token` (an Entra ID token from `access_token`), `token_command` (a token printed
    /// by `token_command`), `managed_identity` or `service_principal` (tokens from Entra ID,
    /// `[entra_id]`). Token sign-in needs `encrypt = "required"` or `"on"`.
    pub authentication: AuthenticationKind,
    /// With `authentication = "access_token"`: the token, `{ file = "/path" }` or
    /// `{ env = "VAR" }`, read again for every new connection (so a rotated file is picked up).
    /// Redacted.
    pub access_token: Option<Secret>,
    /// With `authentication = "token_command"`: the program and its arguments; it prints the
    /// token (alone, or as `az account get-access-token` JSON) on standard output.
    pub token_command: Vec<String>,
    /// How long `token_command` may run, seconds. Default 30.
    pub token_command_timeout_s: u64,
    /// A token from a command or from Entra ID is fetched again, for a new connection, once it
    /// expires within this many seconds. Default 300.
    pub token_refresh_margin_s: u64,
    /// Where `managed_identity` and `service_principal` tokens come from.
    pub entra_id: EntraIdOptions,
    /// Login timeout, seconds. Default 30.
    pub connect_timeout: u64,
    /// TLS to SQL Server: `required` (default), `on`, `off` (login packet only) or
    /// `not_supported`.
    pub encrypt: Encrypt,
    /// Accept any server certificate (testing only). Default `false`.
    pub trust_server_certificate: bool,
    /// PEM file of the CA that signs the server's certificate. Default: system trust store.
    pub trust_server_certificate_ca: Option<PathBuf>,
    /// Capture instances to read, e.g. `["dbo_orders"]`. Matched ignoring case, an exact
    /// match winning. This list, `tables`, or both: at least one table.
    pub capture_instances: Vec<String>,
    /// Tables to read by pattern, `schema.table` with `*` for any characters and `?` for one,
    /// e.g. `["dbo.*"]`: every table with a capture instance that matches (its oldest
    /// instance; the stream moves to newer ones). Looked for again every
    /// `discovery_interval_ms`, so a table enabled later is picked up. Default: none.
    pub tables: Vec<String>,
    /// Tables left out of `tables`, same form, e.g. `["dbo.audit_*"]`. Default: none.
    pub exclude_tables: Vec<String>,
    /// With `tables`: how often the capture instances are listed again for tables enabled
    /// since, milliseconds. Default 60000.
    pub discovery_interval_ms: u64,
    /// Settings of one table (`[overrides."dbo.orders"]`): `columns` and `snapshot_keys`,
    /// in place of the file's. Keys are `schema.table`, matched ignoring case.
    pub overrides: BTreeMap<String, SourceOverride>,
    /// Prefix of the topics: `<topic_prefix>.<database>.<schema>.<table>`. Required.
    pub topic_prefix: Option<String>,
    /// Encoding of data records: `json` (default) or `avro`.
    pub format: RecordFormat,
    /// Schema registry, required with `format = "avro"`.
    pub schema_registry: Option<SchemaRegistryConfig>,
    /// Shape of data records: `native` (default: the changed row with the log's
    /// `_`-prefixed metadata) or `debezium` (Debezium's SQL Server change events, JSON or Avro;
    /// `[debezium]`, docs/debezium.md).
    pub envelope: Envelope,
    /// With `envelope = "debezium"`: how events are written.
    pub debezium: DebeziumOptions,
    /// At most this many commits per batch (counted in `cdc.lsn_time_mapping`). Default:
    /// unlimited. Must be positive.
    pub max_commits_per_batch: Option<u64>,
    /// Where a new stream starts: `earliest` (default), `latest`, or an LSN such as
    /// `0x0000002A000001F00003` (`0x` optional, padded on the left to 20 hex digits), taken
    /// as already processed. Ignored once the control topic has records. Not with `bootstrap`.
    pub starting_lsn: Option<String>,
    /// The older spelling of `on_data_loss`: `true` is `fail`, `false` is `skip`.
    pub fail_on_data_loss: Option<bool>,
    /// When CDC cleanup purged changes not yet read: `fail` (default: stop with a data-loss
    /// error), `skip` (publish a `data_skipped` event and go on) or `resnapshot` (take the
    /// table again as a new generation, recording the lost range).
    pub on_data_loss: Option<OnDataLoss>,
    /// What DDL on the source table does (`cdc.ddl_history`, looked at when each batch is
    /// planned): `classify` (default: a type change the log can widen to, and DDL that leaves
    /// the captured types alone, go on with a warning and a `schema_change` event; any other
    /// type change of a captured column stops the stage before a row is read) or `fail` (any
    /// DDL stops the stage at its batch; restart with `classify` to go past it).
    pub schema_change_policy: SchemaChangePolicy,
    /// After the stream moves to a newer capture instance of its table, snapshot the table
    /// (as `snapshot` says: `full` or `chunked`), so that rows unchanged since carry the
    /// columns only the new instance captures. Default `false` (those rows read NULL there).
    pub snapshot_on_switch: bool,
    /// Snapshot the table before streaming, once per stream: when the stream starts with an
    /// empty control topic. Default `false`.
    pub bootstrap: bool,
    /// How a snapshot (bootstrap or re-snapshot) reads the table: `full` (default: in key order
    /// before the stream goes on) or `chunked` (the stream starts at the snapshot's LSN at once
    /// and the table is read beside it in planned chunks, paced by `[backfill]`).
    pub snapshot: SnapshotMode,
    /// How a chunked snapshot is planned, read and paced (`snapshot = "chunked"`).
    pub backfill: BackfillOptions,
    /// With `on_data_loss = "resnapshot"`: at most one re-snapshot per this many days; a second
    /// loss within it stops the stage instead. Default 7 (keep it above the CDC retention).
    pub resnapshot_interval_days: f64,
    /// The isolation level snapshots read under: `read_committed` (default) or `snapshot`
    /// (needs the database's `ALLOW_SNAPSHOT_ISOLATION ON`).
    pub snapshot_isolation: SnapshotIsolation,
    /// `SET LOCK_TIMEOUT` for a snapshot's reads, milliseconds (a read that times out is
    /// retried like any transient fault). Default 30000.
    pub lock_timeout_ms: u64,
    /// Columns to read a snapshot in order of, for a table without a unique index (unique or
    /// not: rows with equal values are never split across reads). Default: the key.
    pub snapshot_keys: Vec<String>,
    /// Rows per snapshot read: one keyset query, published as one batch. Default 50000.
    pub snapshot_fetch_rows: u64,
    /// Zone of the server clock: `auto` (default: `CURRENT_TIMEZONE_ID()`), `UTC`, or a
    /// Windows zone name such as `W. Europe Standard Time`.
    pub source_time_zone: String,
    /// The captured columns to publish, each `"name"` or `"name <T-SQL type>"` to cast it
    /// (read as `CAST([name] AS <type>)`), e.g. `["order_id", "amount decimal(18,2)"]`.
    /// Default: every captured column with its own type. The key columns must be listed.
    pub columns: Vec<String>,
    /// Publish `__$command_id` as `_command_id`. Default `true`.
    pub include_command_id: bool,
    /// Pause between polls of a caught-up capture instance, milliseconds. Default 500.
    pub poll_interval_ms: u64,
    /// An empty batch is published on a quiet table this often, milliseconds. Default 10000.
    pub heartbeat_interval_ms: u64,
    /// Rows per Arrow batch while reading (the unit in which rows are encoded and handed to
    /// the producer; a batch of many commits streams through in such chunks). Default 10000.
    pub fetch_rows: usize,
    /// Connections a batch's change rows are read over, each reading LSN ranges of about
    /// `fetch_rows` rows in turn; the rows are published in LSN order whatever the count.
    /// Default 1 (the stream's own connection); above 1, that many more connections per table,
    /// each holding at most three `fetch_rows` chunks ahead. At most 16.
    pub num_partitions: u32,
    /// How long SQL Server may stay unreachable (deadlocks, lock timeouts, dropped connections,
    /// failover) before the stage stops with an error, milliseconds. Default 300000 (5 min).
    pub retry_timeout_ms: u64,
    /// Partitions of the data topics the source creates. Default 3.
    pub topic_partitions: u32,
    /// librdkafka producer properties passed through (worker-owned keys are rejected).
    pub producer_properties: Properties,
}

impl Default for MssqlSourceOptions {
    fn default() -> Self {
        Self {
            connection_string: None,
            user: None,
            password: None,
            authentication: AuthenticationKind::SqlPassword,
            access_token: None,
            token_command: Vec::new(),
            token_command_timeout_s: 30,
            token_refresh_margin_s: 300,
            entra_id: EntraIdOptions::default(),
            connect_timeout: 30,
            encrypt: Encrypt::Required,
            trust_server_certificate: false,
            trust_server_certificate_ca: None,
            capture_instances: Vec::new(),
            tables: Vec::new(),
            exclude_tables: Vec::new(),
            discovery_interval_ms: 60_000,
            overrides: BTreeMap::new(),
            topic_prefix: None,
            format: RecordFormat::Json,
            schema_registry: None,
            envelope: Envelope::Native,
            debezium: DebeziumOptions::default(),
            max_commits_per_batch: None,
            starting_lsn: None,
            fail_on_data_loss: None,
            on_data_loss: None,
            schema_change_policy: SchemaChangePolicy::Classify,
            snapshot_on_switch: false,
            bootstrap: false,
            snapshot: SnapshotMode::Full,
            backfill: BackfillOptions::default(),
            resnapshot_interval_days: 7.0,
            snapshot_isolation: SnapshotIsolation::ReadCommitted,
            lock_timeout_ms: 30_000,
            snapshot_keys: Vec::new(),
            snapshot_fetch_rows: 50_000,
            source_time_zone: "auto".to_owned(),
            columns: Vec::new(),
            include_command_id: true,
            poll_interval_ms: 500,
            heartbeat_interval_ms: 10_000,
            fetch_rows: 10_000,
            num_partitions: 1,
            retry_timeout_ms: 300_000,
            topic_partitions: 3,
            producer_properties: Properties::default(),
        }
    }
}

/// `[debezium]`: how Debezium events are written.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct DebeziumOptions {
    /// Wrap keys and values as Kafka Connect's JSON converter does with `schemas.enable =
    /// true` (`{"schema": ..., "payload": ...}`); `false` writes the bare payload. Default
    /// `true`.
    pub schemas: bool,
    /// Follow every delete with a tombstone (its key, a null value), as Debezium's
    /// `tombstones.on.delete`, so a compacted topic forgets deleted keys. Default `true`.
    pub tombstones: bool,
}

impl Default for DebeziumOptions {
    fn default() -> Self {
        Self { schemas: true, tombstones: true }
    }
}

/// `[overrides."schema.table"]`: one table's settings in place of the file's.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct SourceOverride {
    /// The table's `columns` (same form as the file's).
    pub columns: Option<Vec<String>>,
    /// The table's `snapshot_keys`.
    pub snapshot_keys: Option<Vec<String>>,
}

/// One table's validated override.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableOverride {
    /// Its `columns`, when given.
    pub columns: Option<Vec<ColumnChoice>>,
    /// Its `snapshot_keys`, when given.
    pub snapshot_keys: Option<Vec<String>>,
}

/// Which tables a source file reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TableSelection {
    /// Capture instances listed by name.
    pub capture_instances: Vec<String>,
    /// Tables selected by pattern.
    pub include: Vec<TablePattern>,
    /// Tables left out of `include`.
    pub exclude: Vec<TablePattern>,
    /// How often the instances are listed again (with patterns).
    pub discovery_interval: Duration,
    /// Per-table settings by `schema.table`.
    pub overrides: BTreeMap<String, TableOverride>,
}

impl TableSelection {
    /// Whether the tables are found by listing the database's capture instances: with
    /// patterns, or overrides (which need each listed instance's table). Otherwise each listed
    /// instance is its own stream, resolved as it starts.
    pub fn discovers(&self) -> bool {
        !self.include.is_empty() || !self.overrides.is_empty()
    }
}

/// What the source does when CDC cleanup purged changes it has not read (`on_data_loss`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OnDataLoss {
    /// Stop with a data-loss error naming the capture instance and the range.
    #[default]
    Fail,
    /// Skip to what CDC still holds and publish a `data_skipped` event.
    Skip,
    /// Take the table again as a new generation, recording the lost range.
    Resnapshot,
}

/// What DDL on the source table does (`schema_change_policy`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SchemaChangePolicy {
    /// Go on past DDL the log can absorb; stop on a type change it cannot hold.
    #[default]
    Classify,
    /// Stop on any DDL.
    Fail,
}

/// The isolation level a snapshot reads under (`snapshot_isolation`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotIsolation {
    /// Each read sees committed rows only, and waits for writers' locks.
    #[default]
    ReadCommitted,
    /// One transaction for the whole snapshot: the table as of its first read, without waiting
    /// for writers (row versions in tempdb while it runs).
    Snapshot,
}

/// The most connections one table's batches are read over (`num_partitions`).
const MAX_PARTITIONS: u32 = 16;

/// Producer settings the source owns or that would weaken its guarantees.
const RESERVED_PRODUCER_PROPERTIES: &[&str] =
    &["bootstrap.servers", "security.protocol", "sasl.password", "enable.idempotence", "acks", "transactional.id", "allow.auto.create.topics"];

impl ConnectorKind for MssqlSourceOptions {
    const KIND: &'static str = "mssql-source";
    const SUMMARY: &'static str = "SQL Server CDC to Kafka: commit-aligned batches, resumable from the log";
    type Settings = MssqlSourceSettings;

    fn build(settings: MssqlSourceSettings, context: &StageContext) -> Result<Box<dyn Stage>, StageError> {
        let source = super::MssqlSource::build(settings, context).map_err(|e| StageError::new(&context.name, e))?;
        Ok(Box::new(source))
    }

    fn validate(self, problems: &mut Problems) -> Option<MssqlSourceSettings> {
        let login = self.login(problems);
        self.check_capture_instances(problems);
        let tables = self.table_selection(problems);
        let topic_prefix = match &self.topic_prefix {
            None => {
                problems.missing("topic_prefix", TOPIC_FORM);
                None
            }
            Some(prefix) if !is_valid_topic(prefix) => {
                problems.invalid("topic_prefix", "not a topic name prefix", TOPIC_FORM);
                None
            }
            Some(prefix) => Some(prefix.clone()),
        };
        let encoding = validate_format(self.format, self.schema_registry.as_ref(), problems);
        if self.max_commits_per_batch == Some(0) {
            problems.invalid("max_commits_per_batch", "zero", "a positive integer, or omit it for unlimited");
        }
        let starting_lsn = StartingLsn::parse(self.starting_lsn.as_deref().unwrap_or("earliest"));
        if starting_lsn.is_none() {
            problems.invalid("starting_lsn", "not a starting position", "earliest, latest, or an LSN of up to 20 hex digits such as 0x0000002A000001F00003");
        }
        if self.bootstrap && self.starting_lsn.is_some() {
            problems.invalid("starting_lsn", "set together with bootstrap", "one of the two: a bootstrapped stream starts at its snapshot's LSN");
        }
        let on_data_loss = self.data_loss_policy(problems);
        let snapshot = self.snapshot_settings(problems);
        let source_time_zone = match self.source_time_zone.as_str() {
            "auto" => Some(SourceZone::Auto),
            name => ServerZone::parse(name).map(SourceZone::Fixed),
        };
        if source_time_zone.is_none() {
            problems.invalid("source_time_zone", "not a known time zone", "auto, UTC or a Windows time zone name such as \"W. Europe Standard Time\"");
        }
        let columns = self.column_choices(problems);
        self.check_counts(problems);
        let debezium = self.debezium_settings(problems);
        Some(MssqlSourceSettings {
            login: login?,
            capture_instances: self.capture_instances,
            tables,
            topic_prefix: topic_prefix?,
            encoding: encoding?,
            debezium: debezium?,
            max_commits_per_batch: self.max_commits_per_batch,
            starting_lsn: starting_lsn?,
            on_data_loss: on_data_loss?,
            schema_change_policy: self.schema_change_policy,
            snapshot: snapshot?,
            source_time_zone: source_time_zone?,
            columns,
            include_command_id: self.include_command_id,
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms),
            fetch_rows: self.fetch_rows,
            num_partitions: self.num_partitions as usize,
            sql_retry: RetryConfig { initial_backoff_ms: 250, max_backoff_ms: 10_000, budget_ms: self.retry_timeout_ms },
            topic_partitions: i32::try_from(self.topic_partitions).ok()?,
            producer_properties: self.producer_properties,
        })
    }
}

impl MssqlSourceOptions {
    /// The Debezium envelope's settings: `Some(None)` for native records, `None` after a
    /// problem.
    fn debezium_settings(&self, problems: &mut Problems) -> Option<Option<EventSettings>> {
        match self.envelope {
            Envelope::Native => {
                if self.debezium != DebeziumOptions::default() {
                    problems.invalid("debezium", "is set but envelope = \"native\"", "envelope = \"debezium\", or remove [debezium]");
                    return None;
                }
                Some(None)
            }
            Envelope::Debezium if self.format == RecordFormat::Avro && !self.debezium.schemas => {
                problems.invalid("debezium.schemas", "false with format = \"avro\" (Avro records always have their schema in the registry)", "leave debezium.schemas out with Avro");
                None
            }
            Envelope::Debezium => Some(Some(EventSettings { schemas: self.debezium.schemas, tombstones: self.debezium.tombstones })),
        }
    }

    /// `on_data_loss`, or its older spelling `fail_on_data_loss`; both only when they agree.
    fn data_loss_policy(&self, problems: &mut Problems) -> Option<OnDataLoss> {
        let older = self.fail_on_data_loss.map(|fail| if fail { OnDataLoss::Fail } else { OnDataLoss::Skip });
        match (self.on_data_loss, older) {
            (Some(new), Some(old)) if new != old => {
                problems.invalid("fail_on_data_loss", "disagrees with on_data_loss", "on_data_loss alone (fail, skip or resnapshot)");
                None
            }
            (new, old) => Some(new.or(old).unwrap_or_default()),
        }
    }

    fn snapshot_settings(&self, problems: &mut Problems) -> Option<SnapshotSettings> {
        let before = problems.len();
        if !self.resnapshot_interval_days.is_finite() || self.resnapshot_interval_days < 0.0 || self.resnapshot_interval_days > 36_500.0 {
            problems.invalid("resnapshot_interval_days", "out of range", "a number of days from 0 to 36500, e.g. 7 (above the CDC retention)");
        }
        if self.snapshot_fetch_rows == 0 {
            problems.invalid("snapshot_fetch_rows", "zero", "a positive number of rows");
        }
        if self.lock_timeout_ms == 0 {
            problems.invalid("lock_timeout_ms", "zero", "a positive number of milliseconds");
        }
        check_snapshot_keys(problems, "snapshot_keys", &self.snapshot_keys);
        let backfill = self.backfill.validate(problems);
        (problems.len() == before).then_some(())?;
        Some(SnapshotSettings {
            mode: self.snapshot,
            backfill: backfill?,
            bootstrap: self.bootstrap,
            on_switch: self.snapshot_on_switch,
            isolation: self.snapshot_isolation,
            lock_timeout: Duration::from_millis(self.lock_timeout_ms),
            keys: self.snapshot_keys.clone(),
            fetch_rows: self.snapshot_fetch_rows,
            resnapshot_interval: Duration::from_secs_f64(self.resnapshot_interval_days * 86_400.0),
        })
    }

    fn check_capture_instances(&self, problems: &mut Problems) {
        if self.capture_instances.is_empty() && self.tables.is_empty() {
            problems.missing("capture_instances", "a list of capture instance names such as [\"dbo_orders\"], or table patterns in `tables` such as [\"dbo.*\"]");
        }
        for (index, name) in self.capture_instances.iter().enumerate() {
            if name.is_empty() || name.chars().count() > 100 || name.chars().any(|c| c == ']' || c.is_control()) {
                problems.invalid(&format!("capture_instances.{index}"), "not a capture instance name", "1 to 100 characters, without ']' or control characters");
            }
            if self.capture_instances[..index].iter().any(|earlier| earlier == name) {
                problems.invalid(&format!("capture_instances.{index}"), "listed twice", "each capture instance once");
            }
        }
    }

    /// Patterns, exclusions and overrides; the capture instance list is in the result too.
    fn table_selection(&self, problems: &mut Problems) -> TableSelection {
        let patterns = |problems: &mut Problems, key: &str, texts: &[String]| -> Vec<TablePattern> {
            texts
                .iter()
                .enumerate()
                .filter_map(|(index, text)| {
                    let pattern = TablePattern::parse(text);
                    if pattern.is_none() {
                        problems.invalid(&format!("{key}.{index}"), "not a table pattern", PATTERN_FORM);
                    }
                    pattern
                })
                .collect()
        };
        let include = patterns(problems, "tables", &self.tables);
        let exclude = patterns(problems, "exclude_tables", &self.exclude_tables);
        if !self.exclude_tables.is_empty() && self.tables.is_empty() {
            problems.invalid("exclude_tables", "set without tables", "table patterns in `tables` to exclude from");
        }
        if self.discovery_interval_ms < 1000 {
            problems.invalid("discovery_interval_ms", "under a second", "milliseconds, at least 1000");
        }
        check_override_keys(problems, "overrides", &self.overrides);
        let mut overrides = BTreeMap::new();
        for (table, given) in &self.overrides {
            let key = format!("overrides.{table}");
            let columns = given.columns.as_ref().map(|columns| column_choices(problems, &format!("{key}.columns"), columns));
            if let Some(keys) = &given.snapshot_keys {
                check_snapshot_keys(problems, &format!("{key}.snapshot_keys"), keys);
            }
            overrides.insert(table.clone(), TableOverride { columns, snapshot_keys: given.snapshot_keys.clone() });
        }
        TableSelection {
            capture_instances: self.capture_instances.clone(),
            include,
            exclude,
            discovery_interval: Duration::from_millis(self.discovery_interval_ms),
            overrides,
        }
    }

    fn column_choices(&self, problems: &mut Problems) -> Vec<ColumnChoice> {
        column_choices(problems, "columns", &self.columns)
    }
}

/// Checks `snapshot_keys` (or an override's) under `key`.
fn check_snapshot_keys(problems: &mut Problems, key: &str, keys: &[String]) {
    for (index, name) in keys.iter().enumerate() {
        if name.is_empty() || name.len() > 128 || name.chars().any(|c| c == ']' || c.is_control()) || keys[..index].contains(name) {
            problems.invalid(&format!("{key}.{index}"), "not a column name, or listed twice", "captured column names, each once");
        }
    }
}

/// Parses `columns` (or an override's) under `key`.
fn column_choices(problems: &mut Problems, key: &str, columns: &[String]) -> Vec<ColumnChoice> {
    let mut choices = Vec::with_capacity(columns.len());
    for (index, column) in columns.iter().enumerate() {
        match parse_column(column) {
            Some(choice) => choices.push(choice),
            None => problems.invalid(&format!("{key}.{index}"), "not a column", "a column name, or a name and a T-SQL type to cast to, such as \"amount decimal(18,2)\""),
        }
    }
    choices
}

impl MssqlSourceOptions {
    /// Sizes, intervals and pass-through properties.
    fn check_counts(&self, problems: &mut Problems) {
        if self.fetch_rows == 0 {
            problems.invalid("fetch_rows", "zero", "a positive number of rows");
        }
        if !(1..=MAX_PARTITIONS).contains(&self.num_partitions) {
            problems.invalid("num_partitions", format!("{} is out of range", self.num_partitions), format!("a number of connections from 1 to {MAX_PARTITIONS}"));
        }
        if self.retry_timeout_ms == 0 {
            problems.invalid("retry_timeout_ms", "zero", "a positive number of milliseconds");
        }
        if self.poll_interval_ms == 0 {
            problems.invalid("poll_interval_ms", "zero", "a positive number of milliseconds");
        }
        if self.heartbeat_interval_ms < self.poll_interval_ms {
            problems.invalid("heartbeat_interval_ms", "shorter than poll_interval_ms", "at least poll_interval_ms");
        }
        if self.topic_partitions == 0 || i32::try_from(self.topic_partitions).is_err() {
            problems.invalid("topic_partitions", "out of range", "a positive number of partitions, at most 2147483647");
        }
        for key in self.producer_properties.keys() {
            if RESERVED_PRODUCER_PROPERTIES.contains(&key.as_str()) {
                problems.invalid(&format!("producer_properties.{key}"), "owned by the worker or required by the source's guarantees", "the worker's [kafka] settings");
            }
        }
    }
}

/// A `columns` entry: `"name"` or `"name <T-SQL type>"`.
pub fn parse_column(text: &str) -> Option<ColumnChoice> {
    let text = text.trim();
    let (name, cast) = match text.split_once(char::is_whitespace) {
        Some((name, cast)) => (name, Some(cast.trim())),
        None => (text, None),
    };
    if name.is_empty() || name.len() > 128 || name.chars().any(|c| c == ']' || c.is_control()) {
        return None;
    }
    let cast = match cast {
        None => None,
        Some(cast) => Some(Cast { sql_type: cast.to_owned(), ty: ColumnType::parse_sql(cast)? }),
    };
    Some(ColumnChoice { name: name.to_owned(), cast })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mssql_cdc_core::log::format::Encoding;
    use mssql_cdc_types::lsn::Lsn;

    pub(crate) fn valid() -> MssqlSourceOptions {
        MssqlSourceOptions {
            connection_string: Some(ConnectionString("Server=sql,1433;Database=sales".into())),
            capture_instances: vec!["dbo_orders".into()],
            topic_prefix: Some("cdc".into()),
            ..MssqlSourceOptions::default()
        }
    }

    fn problem_keys(options: &MssqlSourceOptions) -> Vec<String> {
        let mut problems = Problems::under("");
        options.clone().validate(&mut problems);
        problems.into_vec().into_iter().map(|problem| problem.key).collect()
    }

    #[test]
    fn the_debezium_envelope_takes_json_or_avro_and_its_table_needs_it() {
        let debezium = MssqlSourceOptions { envelope: Envelope::Debezium, debezium: DebeziumOptions { schemas: false, tombstones: true }, ..valid() };
        let settings = debezium.clone().validate(&mut Problems::under("")).unwrap();
        assert_eq!(settings.debezium, Some(EventSettings { schemas: false, tombstones: true }));
        assert!(valid().validate(&mut Problems::under("")).unwrap().debezium.is_none());
        let avro = MssqlSourceOptions { format: RecordFormat::Avro, schema_registry: Some(SchemaRegistryConfig { url: Some("http://r:8081".into()), ..SchemaRegistryConfig::default() }), ..debezium };
        assert_eq!(problem_keys(&avro), ["debezium.schemas"], "bare payloads are a JSON choice");
        assert!(problem_keys(&MssqlSourceOptions { debezium: DebeziumOptions::default(), ..avro }).is_empty(), "Avro events are written");
        let stray = MssqlSourceOptions { debezium: DebeziumOptions { schemas: false, tombstones: true }, ..valid() };
        assert_eq!(problem_keys(&stray), ["debezium"]);
    }

    /// Invariant: validation yields settings with defaults applied and parsed values typed.
    #[test]
    fn a_minimal_source_is_valid() {
        assert!(problem_keys(&valid()).is_empty());
        let settings = valid().validate(&mut Problems::under("")).unwrap();
        assert_eq!(settings.starting_lsn, StartingLsn::Earliest);
        assert_eq!(settings.source_time_zone, SourceZone::Auto);
        assert_eq!(settings.encoding, Encoding::Json);
        assert_eq!(settings.login.trust, ServerTrust::System);
        assert_eq!(settings.poll_interval, Duration::from_millis(500));
        assert_eq!(settings.on_data_loss, OnDataLoss::Fail);
        assert!(!settings.snapshot.bootstrap);
        let at = MssqlSourceOptions { starting_lsn: Some("2A".into()), ..valid() }.validate(&mut Problems::under("")).unwrap();
        assert_eq!(at.starting_lsn, StartingLsn::After(Lsn::parse_hex("0x0000000000000000002A").unwrap()));
    }

    #[test]
    fn columns_and_zones_are_checked_without_io() {
        let options = MssqlSourceOptions {
            columns: vec!["order_id".into(), "amount decimal(18,2)".into(), "note geography".into()],
            source_time_zone: "Mars Standard Time".into(),
            ..valid()
        };
        assert_eq!(problem_keys(&options), vec!["source_time_zone", "columns.2"]);
        assert_eq!(parse_column("amount  decimal(18,2)").unwrap().cast.unwrap().sql_type, "decimal(18,2)");
        let zoned = MssqlSourceOptions { source_time_zone: "W. Europe Standard Time".into(), ..valid() };
        assert!(problem_keys(&zoned).is_empty());
    }

    #[test]
    fn starting_lsn_forms() {
        assert_eq!(StartingLsn::parse("earliest"), Some(StartingLsn::Earliest));
        assert!(StartingLsn::parse("0x0000002A000001F00003").is_some());
        assert!(StartingLsn::parse("2A").is_some());
        assert!(StartingLsn::parse("0x").is_none());
        assert!(StartingLsn::parse("0x0000002A000001F000031").is_none());
        assert!(StartingLsn::parse("newest").is_none());
    }

    /// `fail_on_data_loss` still works, and may not contradict `on_data_loss`; bootstrap sets
    /// the start itself.
    #[test]
    fn data_loss_and_snapshot_options_are_checked_together() {
        let skip = MssqlSourceOptions { fail_on_data_loss: Some(false), ..valid() }.validate(&mut Problems::under("")).unwrap();
        assert_eq!(skip.on_data_loss, OnDataLoss::Skip);
        let both = MssqlSourceOptions { fail_on_data_loss: Some(true), on_data_loss: Some(OnDataLoss::Resnapshot), ..valid() };
        assert_eq!(problem_keys(&both), vec!["fail_on_data_loss"]);
        let agreeing = MssqlSourceOptions { fail_on_data_loss: Some(false), on_data_loss: Some(OnDataLoss::Skip), ..valid() };
        assert!(problem_keys(&agreeing).is_empty());
        let bad = MssqlSourceOptions {
            bootstrap: true,
            starting_lsn: Some("latest".into()),
            resnapshot_interval_days: -1.0,
            snapshot_fetch_rows: 0,
            snapshot_keys: vec!["a".into(), "a".into()],
            ..valid()
        };
        assert_eq!(problem_keys(&bad), vec!["starting_lsn", "resnapshot_interval_days", "snapshot_fetch_rows", "snapshot_keys.1"]);
        let days = MssqlSourceOptions { resnapshot_interval_days: 0.5, bootstrap: true, ..valid() }.validate(&mut Problems::under("")).unwrap();
        assert_eq!(days.snapshot.resnapshot_interval, Duration::from_secs(43_200));
    }

    #[test]
    fn zero_commits_per_batch_and_avro_without_registry_are_problems() {
        let options = MssqlSourceOptions { max_commits_per_batch: Some(0), format: RecordFormat::Avro, ..valid() };
        assert_eq!(problem_keys(&options), vec!["schema_registry", "max_commits_per_batch"]);
    }

    #[test]
    fn a_password_in_the_connection_string_is_refused_and_hidden() {
        let options = MssqlSourceOptions {
            connection_string: Some(ConnectionString("Server=sql;PWD=Tr0ub4dor".into())),
            ..valid()
        };
        assert_eq!(problem_keys(&options), vec!["connection_string"]);
        let shown = format!("{options:?}");
        assert!(!shown.contains("Tr0ub4dor"), "{shown}");
    }

    /// Tables by pattern need no capture instance list; patterns, exclusions, the interval and
    /// each override are checked with their key paths; an override replaces the file's
    /// columns and snapshot keys for its table only.
    #[test]
    fn patterns_and_overrides_are_checked_and_applied_per_table() {
        let options = MssqlSourceOptions {
            capture_instances: vec![],
            tables: vec!["dbo.*".into()],
            exclude_tables: vec!["dbo.audit_*".into()],
            overrides: [("dbo.orders".to_owned(), SourceOverride { columns: Some(vec!["order_id".into(), "amount decimal(18,2)".into()]), snapshot_keys: Some(vec!["order_id".into()]) })].into(),
            ..valid()
        };
        let settings = options.clone().validate(&mut Problems::under("")).unwrap();
        assert!(settings.tables.discovers());
        let orders = settings.for_table("DBO", "Orders");
        assert_eq!(orders.columns.len(), 2);
        assert_eq!(orders.snapshot.keys, ["order_id"]);
        assert!(settings.for_table("dbo", "lines").columns.is_empty());
        let bad = MssqlSourceOptions {
            tables: vec!["orders".into()],
            discovery_interval_ms: 10,
            overrides: [("orders".to_owned(), SourceOverride::default()), ("dbo.x".to_owned(), SourceOverride { columns: Some(vec!["a geography".into()]), snapshot_keys: None })].into(),
            ..options
        };
        assert_eq!(problem_keys(&bad), ["tables.0", "discovery_interval_ms", "overrides.orders", "overrides.dbo.x.columns.0"]);
        let nothing = MssqlSourceOptions { capture_instances: vec![], ..valid() };
        assert_eq!(problem_keys(&nothing), ["capture_instances"]);
    }
}
