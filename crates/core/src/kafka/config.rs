//! [`KafkaConfig`]: how every stage of a worker reaches the Kafka cluster.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::problem::Problems;
use crate::config::secret::{is_sensitive_key, Secret, REDACTED};

/// Connection and security settings shared by every connector of a worker (the `[kafka]`
/// table of the worker file).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// Brokers to bootstrap from, `host:port[,host:port...]`. Default `localhost:9092`.
    pub bootstrap_servers: String,
    /// Client id reported to the brokers. Default `mssql-cdc`.
    pub client_id: String,
    /// `plaintext` (default), `ssl`, `sasl_plaintext` or `sasl_ssl`.
    pub security_protocol: SecurityProtocol,
    /// SASL login, required with the `sasl_*` protocols.
    pub sasl: Option<SaslConfig>,
    /// TLS trust and client certificates, used with the `ssl` and `sasl_ssl` protocols.
    pub tls: TlsConfig,
    /// librdkafka properties passed through unchanged (`"linger.ms" = "5"`), applied before
    /// the typed settings above. Keys that the typed settings own are rejected. Values whose
    /// key looks secret (`*password*`, `*secret*`, ...) are redacted in every output.
    pub properties: Properties,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: "localhost:9092".to_owned(),
            client_id: "mssql-cdc".to_owned(),
            security_protocol: SecurityProtocol::Plaintext,
            sasl: None,
            tls: TlsConfig::default(),
            properties: Properties::default(),
        }
    }
}

/// The Kafka security protocol (`security.protocol`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    /// No encryption, no authentication.
    #[default]
    Plaintext,
    /// TLS, authenticated by client certificate if one is configured.
    Ssl,
    /// SASL authentication over plain TCP.
    SaslPlaintext,
    /// SASL authentication over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// The librdkafka spelling.
    pub fn as_librdkafka(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }

    /// Whether the protocol authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// A SASL login (the `[kafka.sasl]` table). All three keys are required.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SaslConfig {
    /// `plain`, `scram_sha_256` or `scram_sha_512`.
    pub mechanism: Option<SaslMechanism>,
    /// The login name.
    pub username: Option<String>,
    /// The password: a string, `{ env = "VAR" }` or `{ file = "/path" }`. Always redacted.
    pub password: Option<Secret>,
}

/// SASL mechanisms supported without extra system libraries.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SaslMechanism {
    /// `PLAIN`: the password travels as is (use with `sasl_ssl`).
    Plain,
    /// `SCRAM-SHA-256`.
    #[serde(rename = "scram_sha_256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "scram_sha_512")]
    ScramSha512,
}

impl SaslMechanism {
    /// The librdkafka spelling.
    pub fn as_librdkafka(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// TLS settings (the `[kafka.tls]` table); all optional.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM file of the CA certificates that sign the brokers' certificates. Default: the
    /// system's trust store.
    pub ca_location: Option<PathBuf>,
    /// PEM file of this client's certificate, for mutual TLS.
    pub certificate_location: Option<PathBuf>,
    /// PEM file of this client's private key, for mutual TLS.
    pub key_location: Option<PathBuf>,
    /// Password of the private key, if it is encrypted. Always redacted.
    pub key_password: Option<Secret>,
    /// Check that the broker's certificate names the host connected to. Default `true`.
    pub verify_hostname: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self { ca_location: None, certificate_location: None, key_location: None, key_password: None, verify_hostname: true }
    }
}

/// A passthrough property value: TOML strings, integers and booleans are all accepted.
#[derive(Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum PropertyValue {
    /// A string value.
    Text(String),
    /// An integer value.
    Integer(i64),
    /// A boolean value.
    Flag(bool),
}

impl fmt::Display for PropertyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Text(text) => f.write_str(text),
            Self::Integer(value) => write!(f, "{value}"),
            Self::Flag(value) => write!(f, "{value}"),
        }
    }
}

/// librdkafka properties that the typed settings own.
const TYPED_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "kafka.bootstrap_servers"),
    ("metadata.broker.list", "kafka.bootstrap_servers"),
    ("client.id", "kafka.client_id"),
    ("security.protocol", "kafka.security_protocol"),
    ("sasl.mechanism", "kafka.sasl.mechanism"),
    ("sasl.mechanisms", "kafka.sasl.mechanism"),
    ("sasl.username", "kafka.sasl.username"),
    ("sasl.password", "kafka.sasl.password"),
    ("ssl.ca.location", "kafka.tls.ca_location"),
    ("ssl.certificate.location", "kafka.tls.certificate_location"),
    ("ssl.key.location", "kafka.tls.key_location"),
    ("ssl.key.password", "kafka.tls.key_password"),
    ("ssl.endpoint.identification.algorithm", "kafka.tls.verify_hostname"),
];

impl KafkaConfig {
    /// Checks the settings without connecting anywhere.
    pub fn validate(&self, problems: &mut Problems) {
        if self.bootstrap_servers.split(',').any(|server| !is_host_port(server.trim())) {
            problems.invalid("bootstrap_servers", "not a list of host:port", "host:port[,host:port...]");
        }
        if self.client_id.trim().is_empty() {
            problems.invalid("client_id", "empty", "a non-empty string");
        }
        match (&self.sasl, self.security_protocol.uses_sasl()) {
            (None, true) => problems.missing("sasl", "a [kafka.sasl] table with mechanism, username and password"),
            (Some(_), false) => problems.invalid(
                "sasl",
                "set, but security_protocol does not use SASL",
                "security_protocol = sasl_plaintext or sasl_ssl",
            ),
            (Some(sasl), true) => {
                problems.require("sasl.mechanism", &sasl.mechanism, "plain, scram_sha_256 or scram_sha_512");
                problems.require("sasl.username", &sasl.username, "the SASL login name");
                problems.require("sasl.password", &sasl.password, "a string, { env = \"VAR\" } or { file = \"/path\" }");
            }
            _ => {}
        }
        if self.tls.certificate_location.is_some() != self.tls.key_location.is_some() {
            problems.invalid("tls", "certificate_location and key_location go together", "both or neither");
        }
        for key in self.properties.keys() {
            if let Some((_, owner)) = TYPED_PROPERTIES.iter().find(|(name, _)| name == key) {
                problems.invalid(&format!("properties.{key}"), "owned by a typed setting", format!("`{owner}` instead"));
            }
        }
    }
}

fn is_host_port(server: &str) -> bool {
    match server.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0),
        None => false,
    }
}

/// librdkafka properties passed through. `Debug` and `Serialize` redact values whose key
/// looks secret.
#[derive(Clone, Default, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Properties(pub BTreeMap<String, PropertyValue>);

impl Serialize for Properties {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            if is_sensitive_key(key) {
                map.serialize_entry(key, REDACTED)?;
            } else {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

impl std::ops::Deref for Properties {
    type Target = BTreeMap<String, PropertyValue>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(key, value)| {
                let shown = if is_sensitive_key(key) { REDACTED.to_owned() } else { value.to_string() };
                (key, shown)
            }))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_lists_are_checked() {
        assert!(is_host_port("localhost:9092"));
        assert!(is_host_port("[::1]:9092"));
        assert!(!is_host_port("localhost"));
        assert!(!is_host_port("localhost:0"));
    }

    #[test]
    fn sasl_protocol_without_login_is_a_problem() {
        let config = KafkaConfig { security_protocol: SecurityProtocol::SaslSsl, ..KafkaConfig::default() };
        let mut problems = Problems::under("kafka");
        config.validate(&mut problems);
        let list = problems.into_vec();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].key, "kafka.sasl");
    }

    #[test]
    fn typed_properties_cannot_be_passed_through() {
        let mut config = KafkaConfig::default();
        config.properties.0.insert("bootstrap.servers".into(), PropertyValue::Text("x:1".into()));
        let mut problems = Problems::under("kafka");
        config.validate(&mut problems);
        assert_eq!(problems.into_vec()[0].key, "kafka.properties.bootstrap.servers");
    }

    #[test]
    fn sensitive_passthrough_values_are_redacted_in_debug() {
        let mut config = KafkaConfig::default();
        config.properties.0.insert("sasl.oauthbearer.client.secret".into(), PropertyValue::Text("s3cr3t-value".into()));
        config.properties.0.insert("linger.ms".into(), PropertyValue::Integer(5));
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
        assert!(shown.contains("\"linger.ms\": \"5\""), "{shown}");
    }
}
