//! [`ConnectionString`]: an ADO-style connection string whose `Debug` form hides the password.

use std::fmt;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::secret::REDACTED;

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

    pub(crate) fn has_any(&self, keys: &[&str]) -> bool {
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

pub(crate) const SERVER_KEYS: &[&str] = &["server", "data source", "address", "addr", "network address"];
pub(crate) const PASSWORD_KEYS: &[&str] = &["password", "pwd"];
pub(crate) const USER_KEYS: &[&str] = &["user id", "uid", "user"];
