//! Object-store settings: what delta-rs needs to reach a table at an `s3://`, `gs://` or
//! `az://` URL (endpoint, region, credentials, locking).
//!
//! A connector file carries them in a `[storage_options]` table; every value may be a
//! [`Secret`] reference, so credentials need not be written in the file:
//!
//! ```toml
//! [storage_options]
//! AWS_REGION = "eu-west-1"
//! AWS_ACCESS_KEY_ID = { env = "LAKE_KEY_ID" }
//! AWS_SECRET_ACCESS_KEY = { file = "/run/secrets/lake_secret" }
//! ```
//!
//! Keys are delta-rs's (the same as its Python `storage_options`). Settings not given here are
//! read from the process environment by delta-rs (`AWS_*`, `AZURE_*`, `GOOGLE_*`). Every value
//! prints as `***`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Once;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;
use mssql_cdc_core::config::secret::{Secret, SecretError};

/// Object-store options of a table location, values possibly indirect.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(transparent)]
pub struct StorageOptions(pub BTreeMap<String, Secret>);

/// Resolved object-store options, as delta-rs takes them.
pub type Storage = HashMap<String, String>;

impl StorageOptions {
    /// Checks the keys (no I/O): non-empty, the upper-case form delta-rs documents.
    pub fn validate(&self, problems: &mut Problems, key: &str) {
        for name in self.0.keys() {
            let well_formed = !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            if !well_formed {
                problems.invalid(&format!("{key}.{name}"), "not an object-store option name", "an upper-case delta-rs option such as AWS_REGION");
            }
        }
    }

    /// Reads every value (environment variables and files named by secrets).
    pub fn resolve(&self) -> Result<Storage, SecretError> {
        self.0.iter().map(|(key, value)| Ok((key.clone(), value.resolve()?.expose().to_owned()))).collect()
    }
}

/// Makes the `s3://` (and `s3a://`) schemes known to delta-rs, and `gs://` and
/// `az://`/`abfs(s)://` in builds with the `gcs` and `azure` features; done once per process,
/// before the first table is opened.
pub fn register_object_stores() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        deltalake::aws::register_handlers(None);
        #[cfg(feature = "azure")]
        deltalake::azure::register_handlers(None);
        #[cfg(feature = "gcs")]
        deltalake::gcp::register_handlers(None);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Credentials given inline never show in Debug output or serialized config.
    #[test]
    fn values_are_redacted_and_keys_checked() {
        let options: StorageOptions = toml::from_str("AWS_SECRET_ACCESS_KEY = \"very-secret\"\nAWS_REGION = { env = \"REGION_VAR\" }\nbad-key = \"x\"").unwrap();
        let shown = format!("{options:?} {}", serde_json::to_string(&options).unwrap());
        assert!(!shown.contains("very-secret"), "{shown}");
        let mut problems = Problems::under("storage");
        options.validate(&mut problems, "storage_options");
        let list = problems.into_vec();
        assert_eq!(list.len(), 1);
        assert!(list[0].key.ends_with("storage_options.bad-key"), "{}", list[0].key);
    }
}
