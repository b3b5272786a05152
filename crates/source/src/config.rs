//! [`MssqlSourceOptions`]: the options of an `mssql-source` connector file.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;
use mssql_cdc_core::config::secret::{Secret, REDACTED};
use mssql_cdc_core::kafka::config::Properties;
use mssql_cdc_core::log::format::{validate_format, RecordFormat, SchemaRegistryConfig};
use mssql_cdc_core::log::topic::{is_valid_topic, TOPIC_FORM};
use mssql_cdc_core::stage::ConnectorKind;

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
    /// Login timeout, seconds. Default 30.
    pub connect_timeout: u64,
    /// TLS to SQL Server: `required` (default), `on`, `off` (login packet only) or
    /// `not_supported`.
    pub encrypt: Encrypt,
    /// Accept any server certificate (testing only). Default `false`.
    pub trust_server_certificate: bool,
    /// PEM file of the CA that signs the server's certificate. Default: system trust store.
    pub trust_server_certificate_ca: Option<PathBuf>,
    /// Capture instances to read, e.g. `["dbo_orders"]`. Required, at least one. Matched
    /// ignoring case, an exact match winning.
    pub capture_instances: Vec<String>,
    /// Prefix of the topics: `<topic_prefix>.<database>.<schema>.<table>`. Required.
    pub topic_prefix: Option<String>,
    /// Encoding of data records: `json` (default) or `avro`.
    pub format: RecordFormat,
    /// Schema registry, required with `format = "avro"`.
    pub schema_registry: Option<SchemaRegistryConfig>,
    /// At most this many commits per batch (counted in `cdc.lsn_time_mapping`). Default:
    /// unlimited. Must be positive.
    pub max_commits_per_batch: Option<u64>,
    /// Where a new stream starts: `earliest` (default), `latest`, or an LSN such as
    /// `0x0000002A000001F00003` (`0x` optional, padded on the left to 20 hex digits), taken
    /// as already processed. Ignored once the control topic has records.
    pub starting_lsn: String,
    /// Stop with a data-loss error when cleanup purged changes not yet read (default `true`);
    /// `false` skips ahead and publishes a `data_skipped` event.
    pub fail_on_data_loss: bool,
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
            connect_timeout: 30,
            encrypt: Encrypt::Required,
            trust_server_certificate: false,
            trust_server_certificate_ca: None,
            capture_instances: Vec::new(),
            topic_prefix: None,
            format: RecordFormat::Json,
            schema_registry: None,
            max_commits_per_batch: None,
            starting_lsn: "earliest".to_owned(),
            fail_on_data_loss: true,
            source_time_zone: "auto".to_owned(),
            columns: Vec::new(),
            include_command_id: true,
            poll_interval_ms: 500,
            heartbeat_interval_ms: 10_000,
            fetch_rows: 10_000,
            retry_timeout_ms: 300_000,
            topic_partitions: 3,
            producer_properties: Properties::default(),
        }
    }
}

/// TLS mode of the SQL Server connection.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Encrypt {
    /// Encrypt everything; fail if the server cannot.
    #[default]
    Required,
    /// Encrypt everything if the server can.
    On,
    /// Encrypt the login packet only.
    Off,
    /// No TLS at all (the simulator, local testing).
    NotSupported,
}

/// A connection string. Its `Debug` form hides any `Password=`/`PWD=` part.
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct ConnectionString(pub String);

impl ConnectionString {
    /// The `key=value` pairs, keys lower-cased and trimmed.
    pub fn pairs(&self) -> impl Iterator<Item = (String, &str)> {
        self.0.split(';').filter_map(|part| {
            let (key, value) = part.split_once('=')?;
            Some((key.trim().to_ascii_lowercase(), value.trim()))
        })
    }

    fn has_any(&self, keys: &[&str]) -> bool {
        self.pairs().any(|(key, _)| keys.contains(&key.as_str()))
    }
}

impl fmt::Debug for ConnectionString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<String> = self
            .0
            .split(';')
            .map(|part| match part.split_once('=') {
                Some((key, _)) if matches!(key.trim().to_ascii_lowercase().as_str(), "password" | "pwd") => {
                    format!("{key}={REDACTED}")
                }
                _ => part.to_owned(),
            })
            .collect();
        write!(f, "{:?}", shown.join(";"))
    }
}

const SERVER_KEYS: &[&str] = &["server", "data source", "address", "addr", "network address"];
const PASSWORD_KEYS: &[&str] = &["password", "pwd"];
const USER_KEYS: &[&str] = &["user id", "uid", "user"];
/// Producer settings the source owns or that would weaken its guarantees.
const RESERVED_PRODUCER_PROPERTIES: &[&str] =
    &["bootstrap.servers", "security.protocol", "sasl.password", "enable.idempotence", "acks", "transactional.id"];

impl ConnectorKind for MssqlSourceOptions {
    const KIND: &'static str = "mssql-source";
    const SUMMARY: &'static str = "SQL Server CDC to Kafka: commit-aligned batches, resumable from the log";

    fn build(self, context: &mssql_cdc_core::stage::StageContext) -> Result<Box<dyn mssql_cdc_core::stage::Stage>, mssql_cdc_core::stage::StageError> {
        let source = super::MssqlSource::build(self, context).map_err(|e| mssql_cdc_core::stage::StageError::new(&context.name, e))?;
        Ok(Box::new(source))
    }

    fn validate(&self, problems: &mut Problems) {
        match &self.connection_string {
            None => problems.missing("connection_string", "\"Server=host,1433;Database=db\""),
            Some(connection) => {
                if !connection.has_any(SERVER_KEYS) {
                    problems.invalid("connection_string", "names no server", "a Server=host[,port] part");
                }
                if connection.has_any(PASSWORD_KEYS) {
                    problems.invalid("connection_string", "holds a password", "the password in `password`, not in the connection string");
                }
                if connection.has_any(USER_KEYS) && self.user.is_some() {
                    problems.invalid("connection_string", "names a user and so does `user`", "the login given once, in `user`");
                }
            }
        }
        if self.password.is_some() && self.user.is_none() {
            problems.missing("user", "the login name that goes with password");
        }
        if self.trust_server_certificate && self.trust_server_certificate_ca.is_some() {
            problems.invalid("trust_server_certificate", "set together with trust_server_certificate_ca", "one of the two");
        }
        if self.capture_instances.is_empty() {
            problems.missing("capture_instances", "a list of capture instance names such as [\"dbo_orders\"]");
        }
        for (index, name) in self.capture_instances.iter().enumerate() {
            if name.is_empty() || name.chars().count() > 100 || name.chars().any(|c| c == ']' || c.is_control()) {
                problems.invalid(
                    &format!("capture_instances.{index}"),
                    "not a capture instance name",
                    "1 to 100 characters, without ']' or control characters",
                );
            }
            let duplicate = self.capture_instances[..index].iter().any(|earlier| earlier == name);
            if duplicate {
                problems.invalid(&format!("capture_instances.{index}"), "listed twice", "each capture instance once");
            }
        }
        match &self.topic_prefix {
            None => problems.missing("topic_prefix", TOPIC_FORM),
            Some(prefix) if !is_valid_topic(prefix) => problems.invalid("topic_prefix", "not a topic name prefix", TOPIC_FORM),
            Some(_) => {}
        }
        validate_format(self.format, self.schema_registry.as_ref(), problems);
        if self.max_commits_per_batch == Some(0) {
            problems.invalid("max_commits_per_batch", "zero", "a positive integer, or omit it for unlimited");
        }
        if !is_starting_lsn(&self.starting_lsn) {
            problems.invalid(
                "starting_lsn",
                "not a starting position",
                "earliest, latest, or an LSN of up to 20 hex digits such as 0x0000002A000001F00003",
            );
        }
        if self.source_time_zone != "auto" && mssql_cdc_types::timezone::ServerZone::parse(&self.source_time_zone).is_none() {
            problems.invalid("source_time_zone", "not a known time zone", "auto, UTC or a Windows time zone name such as \"W. Europe Standard Time\"");
        }
        for (index, column) in self.columns.iter().enumerate() {
            if parse_column(column).is_none() {
                problems.invalid(
                    &format!("columns.{index}"),
                    "not a column",
                    "a column name, or a name and a T-SQL type to cast to, such as \"amount decimal(18,2)\"",
                );
            }
        }
        if self.fetch_rows == 0 {
            problems.invalid("fetch_rows", "zero", "a positive number of rows");
        }
        if self.retry_timeout_ms == 0 {
            problems.invalid("retry_timeout_ms", "zero", "a positive number of milliseconds");
        }
        if self.connect_timeout == 0 {
            problems.invalid("connect_timeout", "zero", "a positive number of seconds");
        }
        if self.poll_interval_ms == 0 {
            problems.invalid("poll_interval_ms", "zero", "a positive number of milliseconds");
        }
        if self.heartbeat_interval_ms < self.poll_interval_ms {
            problems.invalid("heartbeat_interval_ms", "shorter than poll_interval_ms", "at least poll_interval_ms");
        }
        if self.topic_partitions == 0 {
            problems.invalid("topic_partitions", "zero", "a positive number of partitions");
        }
        for key in self.producer_properties.keys() {
            if RESERVED_PRODUCER_PROPERTIES.contains(&key.as_str()) {
                problems.invalid(
                    &format!("producer_properties.{key}"),
                    "owned by the worker or required by the source's guarantees",
                    "the worker's [kafka] settings",
                );
            }
        }
    }
}

/// A `columns` entry: the column name and, when it casts, the cast's type text and log type.
pub fn parse_column(text: &str) -> Option<(String, Option<(String, mssql_cdc_core::log::ColumnType)>)> {
    let text = text.trim();
    let (name, cast) = match text.split_once(char::is_whitespace) {
        Some((name, cast)) => (name, Some(cast.trim())),
        None => (text, None),
    };
    if name.is_empty() || name.len() > 128 || name.chars().any(|c| c == ']' || c.is_control()) {
        return None;
    }
    match cast {
        None => Some((name.to_owned(), None)),
        Some(cast) => {
            let ty = mssql_cdc_core::log::ColumnType::parse_sql(cast)?;
            Some((name.to_owned(), Some((cast.to_owned(), ty))))
        }
    }
}

/// Whether `text` is `earliest`, `latest` or an LSN of 1 to 20 hex digits (`0x` optional).
pub fn is_starting_lsn(text: &str) -> bool {
    if matches!(text, "earliest" | "latest") {
        return true;
    }
    let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text);
    (1..=20).contains(&digits.len()) && digits.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid() -> MssqlSourceOptions {
        MssqlSourceOptions {
            connection_string: Some(ConnectionString("Server=sql,1433;Database=sales".into())),
            capture_instances: vec!["dbo_orders".into()],
            topic_prefix: Some("cdc".into()),
            ..MssqlSourceOptions::default()
        }
    }

    fn problem_keys(options: &MssqlSourceOptions) -> Vec<String> {
        let mut problems = Problems::under("");
        options.validate(&mut problems);
        problems.into_vec().into_iter().map(|problem| problem.key).collect()
    }

    #[test]
    fn a_minimal_source_is_valid() {
        assert!(problem_keys(&valid()).is_empty());
    }

    #[test]
    fn columns_and_zones_are_checked_without_io() {
        let options = MssqlSourceOptions {
            columns: vec!["order_id".into(), "amount decimal(18,2)".into(), "note geography".into()],
            source_time_zone: "Mars Standard Time".into(),
            ..valid()
        };
        assert_eq!(problem_keys(&options), vec!["source_time_zone", "columns.2"]);
        assert_eq!(parse_column("amount  decimal(18,2)").unwrap().1.unwrap().0, "decimal(18,2)");
        let zoned = MssqlSourceOptions { source_time_zone: "W. Europe Standard Time".into(), ..valid() };
        assert!(problem_keys(&zoned).is_empty());
    }

    #[test]
    fn starting_lsn_forms() {
        assert!(is_starting_lsn("earliest"));
        assert!(is_starting_lsn("0x0000002A000001F00003"));
        assert!(is_starting_lsn("2A"));
        assert!(!is_starting_lsn("0x"));
        assert!(!is_starting_lsn("0x0000002A000001F000031"));
        assert!(!is_starting_lsn("newest"));
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
}
