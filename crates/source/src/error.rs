//! [`SourceError`]: why the source stage stopped or retries.

use mssql_cdc_core::stage::Retriable;
use mssql_cdc_types::lsn::Lsn;

/// An error of the `mssql-source` stage. Messages never hold the password.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// SQL Server could not be reached or failed a query; retried while it is transient.
    #[error("SQL Server: {message}")]
    Sql {
        /// The server's (or driver's) message, secrets removed.
        message: String,
        /// SQL Server's error number, when the server sent one.
        code: Option<u32>,
        /// Whether a new connection may succeed (deadlock, lock timeout, dropped connection,
        /// failover).
        transient: bool,
    },
    /// SQL Server stayed unreachable for longer than `retry_timeout_ms`.
    #[error("SQL Server unavailable for {seconds} s (retry_timeout_ms), last error: {last}")]
    Outage {
        /// How long the retries went on.
        seconds: u64,
        /// The last error.
        last: Box<SourceError>,
    },
    /// A configured capture instance does not exist, or matches two ignoring case.
    #[error("capture_instances: {0}")]
    CaptureInstance(String),
    /// The captured columns cannot be published as configured.
    #[error("capture instance `{capture_instance}`: {message}")]
    Schema {
        /// The capture instance.
        capture_instance: String,
        /// What is wrong.
        message: String,
    },
    /// CDC cleanup purged changes the stream had not read.
    #[error(
        "data loss on capture instance `{capture_instance}`: changes from {from_lsn} to {to_lsn} were purged by CDC cleanup before they were read (its minimum LSN is now {min_lsn}); set on_data_loss = \"resnapshot\" to take the table again as a new generation, or \"skip\" to skip them with a data_skipped event"
    )]
    DataLoss {
        /// The capture instance.
        capture_instance: String,
        /// First LSN lost.
        from_lsn: Lsn,
        /// Last LSN lost.
        to_lsn: Lsn,
        /// `sys.fn_cdc_get_min_lsn` now.
        min_lsn: Lsn,
    },
    /// DDL on the source table the stream may not go past on its own
    /// (`schema_change_policy`): the stage stops before reading the batch's rows.
    #[error("schema change on capture instance `{capture_instance}` by the DDL committed at {ddl_lsn} (`{command}`): {message}")]
    SchemaChanged {
        /// The capture instance.
        capture_instance: String,
        /// The DDL's commit LSN.
        ddl_lsn: Lsn,
        /// The statement.
        command: String,
        /// What changed and what to do.
        message: String,
    },
    /// Changes were lost again within `resnapshot_interval_days` of the last re-snapshot: the
    /// stream does not keep up with the retention, and another snapshot would not fix that.
    #[error(
        "data loss on capture instance `{capture_instance}` again: changes from {from_lsn} to {to_lsn} were purged by CDC cleanup, {hours_since:.1} h after the re-snapshot at {previous_lsn} (generation {previous_generation}, opened {previous_at}); at most one re-snapshot per resnapshot_interval_days = {interval_days}. Raise the CDC retention or the source's throughput, then take one with `mssql-cdc snapshot --resnapshot`"
    )]
    RepeatedDataLoss {
        /// The capture instance.
        capture_instance: String,
        /// First LSN lost.
        from_lsn: Lsn,
        /// Last LSN lost.
        to_lsn: Lsn,
        /// The previous re-snapshot's LSN.
        previous_lsn: Lsn,
        /// The generation it started.
        previous_generation: u64,
        /// When it was opened.
        previous_at: chrono::DateTime<chrono::Utc>,
        /// Hours since.
        hours_since: f64,
        /// The configured interval.
        interval_days: f64,
    },
    /// A snapshot cannot read the table as configured (no key to read it in order of, a key
    /// value that does not read back).
    #[error("snapshot of capture instance `{capture_instance}`: {message}")]
    Snapshot {
        /// The capture instance.
        capture_instance: String,
        /// What is wrong.
        message: String,
    },
    /// The control topic records a position the server has not reached (a restored or
    /// different database).
    #[error(
        "capture instance `{capture_instance}`: the control topic `{control_topic}` is at {position}, past the server's maximum LSN {max_lsn}; was the database restored or replaced? Use a new topic_prefix (a new stream) or restore the server"
    )]
    AheadOfServer {
        /// The capture instance.
        capture_instance: String,
        /// The control topic.
        control_topic: String,
        /// The position it records.
        position: Lsn,
        /// `sys.fn_cdc_get_max_lsn()`.
        max_lsn: Lsn,
    },
    /// `mssql-cdc seed` cannot publish the copy as asked.
    #[error("seed of capture instance `{capture_instance}`: {message}")]
    Seed {
        /// The capture instance.
        capture_instance: String,
        /// What is wrong.
        message: String,
    },
    /// The copy a seed reads failed.
    #[error("seed of capture instance `{capture_instance}`: reading the copy {from}: {cause}")]
    Copy {
        /// The capture instance.
        capture_instance: String,
        /// The copy's location.
        from: String,
        /// Why.
        #[source]
        cause: crate::seed::CopyError,
    },
    /// CDC cleanup has passed a seed's `as_of`: changes after the copy are gone.
    #[error(
        "seed of capture instance `{capture_instance}`: CDC cleanup has passed as_of {as_of}{}: the oldest change kept is at {min_lsn}, so changes made after the copy was read are gone (or were made before CDC tracked the table); take a newer copy, with as_of at or after that LSN's commit time",
        lsn.map_or(" (cdc.lsn_time_mapping has no commit at or before it)".to_owned(), |l| format!(" (LSN {l})"))
    )]
    SeedPastCleanup {
        /// The capture instance.
        capture_instance: String,
        /// `--as-of` as given.
        as_of: String,
        /// The LSN it maps to, when it maps to one.
        lsn: Option<Lsn>,
        /// `sys.fn_cdc_get_min_lsn` now.
        min_lsn: Lsn,
    },
    /// Kafka refused or lost something.
    #[error("Kafka: {0}")]
    Kafka(String),
    /// A record could not be encoded.
    #[error(transparent)]
    Encode(#[from] mssql_cdc_core::log::encode::EncodeError),
    /// The schema registry failed.
    #[error(transparent)]
    Registry(#[from] mssql_cdc_core::log::registry::RegistryError),
    /// No access token could be had for token sign-in (`authentication`); the message never
    /// holds a token or a client secret.
    #[error("sign-in token: {message}")]
    Token {
        /// What failed.
        message: String,
        /// Whether asking again may succeed (an endpoint or command that failed, a file being
        /// rotated).
        transient: bool,
    },
    /// A secret could not be read.
    #[error("password: {0}")]
    Secret(#[from] mssql_cdc_core::config::secret::SecretError),
    /// The control topic holds a record this version cannot read.
    #[error("control topic `{topic}` offset {offset}: {message}")]
    BadControlRecord {
        /// The control topic.
        topic: String,
        /// The record's offset.
        offset: i64,
        /// What is wrong.
        message: String,
    },
}

impl SourceError {
    /// Whether retrying on a new connection may help.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Sql { transient: true, .. } | Self::Token { transient: true, .. })
    }

    /// From a tiberius error, with `secrets` replaced by `***` in the message.
    pub fn from_tiberius(error: tiberius::error::Error, secrets: &[&str]) -> Self {
        use tiberius::error::Error as E;
        let (code, transient) = match &error {
            E::Server(token) => {
                let code = token.code();
                // 1205 deadlock victim, 1222 lock timeout, 3961 a SNAPSHOT transaction
                // overtaken by DDL (a new transaction reads the new definition),
                // 40613/40197/40501/49918/4060 are the unavailable/failover family,
                // 233/10053/10054 transport-level.
                (Some(code), matches!(code, 1205 | 1222 | 3961 | 233 | 4060 | 10053 | 10054 | 10928 | 10929 | 40197 | 40501 | 40613 | 49918 | 49919 | 49920))
            }
            E::Tls(message) if message.contains("certificate") => {
                return Self::Sql { message: redact(&certificate_refused(message), secrets), code: None, transient: false };
            }
            E::Protocol(message) if message.contains("encryption level") => {
                let message = "the server does not offer the encryption `encrypt` asks for: install a certificate on the server (SQL Server Configuration Manager), or, with a SQL login on a trusted network only, set encrypt = \"not_supported\"";
                return Self::Sql { message: message.to_owned(), code: None, transient: false };
            }
            E::Io { .. } | E::Tls(_) | E::Routing { .. } => (None, true),
            E::Protocol(_) => (None, true),
            _ => (None, false),
        };
        Self::Sql { message: redact(&error.to_string(), secrets), code, transient }
    }

    /// A dropped connection or a timeout talking to the server.
    pub fn io(error: std::io::Error) -> Self {
        Self::Sql { message: error.to_string(), code: None, transient: true }
    }
}

impl From<mssql_cdc_core::kafka::blocking::Interrupted> for SourceError {
    fn from(error: mssql_cdc_core::kafka::blocking::Interrupted) -> Self {
        Self::Kafka(error.to_string())
    }
}

impl Retriable for SourceError {
    /// Kafka failures and an unreachable schema registry are retried. SQL Server's transient
    /// errors are retried by the stream itself on a new connection for up to
    /// `retry_timeout_ms`, the operator's budget for SQL Server outages: an [`Self::Outage`]
    /// past it stops the stage. Data loss, a position ahead of the server, schema and
    /// configuration problems are not retried.
    fn is_retriable(&self) -> bool {
        match self {
            Self::Sql { transient, .. } | Self::Token { transient, .. } => *transient,
            Self::Kafka(_) => true,
            Self::Registry(error) => error.is_transient(),
            Self::Outage { .. } => false,
            Self::CaptureInstance(_)
            | Self::Schema { .. }
            | Self::DataLoss { .. }
            | Self::SchemaChanged { .. }
            | Self::RepeatedDataLoss { .. }
            | Self::Snapshot { .. }
            | Self::Seed { .. }
            | Self::Copy { .. }
            | Self::SeedPastCleanup { .. }
            | Self::AheadOfServer { .. }
            | Self::Encode(_)
            | Self::Secret(_)
            | Self::BadControlRecord { .. } => false,
        }
    }

    fn stop_reason(&self) -> mssql_cdc_core::stage::StopReason {
        match self {
            Self::SchemaChanged { .. } => mssql_cdc_core::stage::StopReason::SchemaChanged,
            _ => mssql_cdc_core::stage::StopReason::Failed,
        }
    }
}

/// A refused server certificate, said in the connector's own terms: why, and which setting
/// to change (the driver's message names its own API instead).
fn certificate_refused(driver: &str) -> String {
    let reason = driver.split(" To connect anyway").next().unwrap_or(driver);
    let reason = reason.split_once("handshake: ").map_or(reason, |(_, rest)| rest);
    let reason = reason.split(" The SQL Server presented").next().unwrap_or(reason).trim().trim_end_matches('.');
    format!(
        "TLS: the server's certificate was refused ({reason}): set trust_server_certificate_ca to the PEM file of the CA that signed it, and check that the host in connection_string is a name the certificate holds (trust_server_certificate = true skips both checks: testing only)"
    )
}

/// `text` with every non-empty secret replaced by `***`.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    secrets.iter().filter(|s| !s.is_empty()).fold(text.to_owned(), |text, secret| text.replace(secret, mssql_cdc_core::config::secret::REDACTED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_loss_names_instance_and_range() {
        let error = SourceError::DataLoss {
            capture_instance: "dbo_orders".into(),
            from_lsn: Lsn::parse_hex("10").unwrap(),
            to_lsn: Lsn::parse_hex("1F").unwrap(),
            min_lsn: Lsn::parse_hex("20").unwrap(),
        };
        let text = error.to_string();
        assert!(text.contains("dbo_orders") && text.contains("0x00000000000000000010") && text.contains("0x0000000000000000001F"), "{text}");
    }

    #[test]
    fn a_refused_certificate_names_the_setting_to_change_and_stops() {
        let driver = "the server's certificate was rejected during the TLS handshake: invalid peer certificate: UnknownIssuer. To connect anyway you can: (1) trust a specific CA certificate with `Config::trust_cert_ca(path)`";
        let error = SourceError::from_tiberius(tiberius::error::Error::Tls(driver.to_owned()), &[]);
        let text = error.to_string();
        assert!(text.contains("(invalid peer certificate: UnknownIssuer)") && text.contains("trust_server_certificate_ca"), "{text}");
        assert!(!text.contains("Config::"), "{text}");
        assert!(!error.is_transient());
    }

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(redact("login failed for pw S3cret!", &["S3cret!", ""]), "login failed for pw ***");
    }
}
