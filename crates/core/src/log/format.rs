//! How records are encoded on the log, and where Avro schemas are registered.

use serde::{Deserialize, Serialize};

use crate::config::problem::Problems;
use crate::config::secret::Secret;

/// The encoding of data records.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RecordFormat {
    /// One JSON object per record (default).
    #[default]
    Json,
    /// Avro in the Confluent wire format (magic byte 0, 4-byte schema id), with a schema
    /// registry.
    Avro,
}

/// The shape of data records (`envelope`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    /// The changed row with the log's `_`-prefixed metadata columns.
    #[default]
    Native,
    /// Debezium's SQL Server change event ([`super::debezium`]).
    Debezium,
}

impl Envelope {
    /// Whether this is the native shape (left out of control records, which then read as
    /// they always did).
    pub fn is_native(&self) -> bool {
        *self == Self::Native
    }
}

/// A Confluent-compatible schema registry (the `schema_registry` table).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SchemaRegistryConfig {
    /// Base URL, e.g. `http://schema-registry:8081`. Required.
    pub url: Option<String>,
    /// Basic-auth user, if the registry needs one.
    pub user: Option<String>,
    /// Basic-auth password: a string, `{ env = "VAR" }` or `{ file = "/path" }`. Redacted.
    pub password: Option<Secret>,
}

impl SchemaRegistryConfig {
    /// Checks the table; keys are relative to `schema_registry`.
    pub fn validate(&self, problems: &mut Problems) {
        match self.url.as_deref().map(url::Url::parse) {
            None => problems.missing("url", "an http(s) URL such as \"http://schema-registry:8081\""),
            Some(Ok(url)) if matches!(url.scheme(), "http" | "https") => {}
            Some(_) => problems.invalid("url", "not an http(s) URL", "an http(s) URL such as \"http://schema-registry:8081\""),
        }
        if self.password.is_some() && self.user.is_none() {
            problems.missing("user", "a user name to go with password");
        }
    }
}

/// A validated registry: its base URL (no trailing `/`) and login.
#[derive(Clone, Debug, PartialEq)]
pub struct RegistrySettings {
    /// Base URL, without a trailing `/`.
    pub url: String,
    /// Basic-auth user.
    pub user: Option<String>,
    /// Basic-auth password (only with `user`).
    pub password: Option<Secret>,
}

/// The validated encoding of data records: what `format` and `schema_registry` say together.
#[derive(Clone, Debug, PartialEq)]
pub enum Encoding {
    /// One JSON object per record.
    Json,
    /// Avro in the Confluent wire format, schemas registered in (or read from) the registry.
    Avro(RegistrySettings),
}

impl Encoding {
    /// The format it encodes.
    pub fn format(&self) -> RecordFormat {
        match self {
            Self::Json => RecordFormat::Json,
            Self::Avro(_) => RecordFormat::Avro,
        }
    }
}

/// Checks `format` and `schema_registry` together (Avro needs a registry) and yields the
/// encoding, or `None` after reporting why not.
pub fn validate_format(format: RecordFormat, registry: Option<&SchemaRegistryConfig>, problems: &mut Problems) -> Option<Encoding> {
    let registry = match registry {
        Some(registry) => {
            let mut nested = Problems::under("schema_registry");
            registry.validate(&mut nested);
            let valid = nested.is_empty();
            problems.extend(nested);
            let url = registry.url.as_deref().filter(|_| valid)?.trim_end_matches('/').to_owned();
            Some(RegistrySettings { url, user: registry.user.clone(), password: registry.password.clone() })
        }
        None => None,
    };
    match (format, registry) {
        (RecordFormat::Avro, None) => {
            problems.missing("schema_registry", "a [schema_registry] table with url, since format = \"avro\"");
            None
        }
        (RecordFormat::Avro, Some(registry)) => Some(Encoding::Avro(registry)),
        (RecordFormat::Json, _) => Some(Encoding::Json),
    }
}
