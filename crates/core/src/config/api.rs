//! [`ApiConfig`]: the worker's management API (`/connectors`, Kafka Connect's REST
//! conventions), served on the telemetry listener.
//!
//! ```toml
//! [api]
//! enabled = true
//! basic_auth = { user = "ops", password = { env = "MSSQL_CDC_API_PASSWORD" } }
//! ```

use serde::{Deserialize, Serialize};

use super::problem::Problems;
use super::secret::Secret;

/// The `[api]` table of the worker file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Whether the telemetry listener serves the management API (`/connectors...`). Default
    /// `true`; the listener itself defaults to `127.0.0.1`, so only local clients reach it.
    pub enabled: bool,
    /// HTTP basic authentication for the API: a request without these credentials is
    /// answered 401. Default: none. `/metrics` and `/health` stay open (probes and scrapers).
    pub basic_auth: Option<BasicAuth>,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self { enabled: true, basic_auth: None }
    }
}

/// A user and its password (a secret: inline, `{ env = "VAR" }` or `{ file = "/path" }`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// The user name.
    pub user: String,
    /// The password.
    pub password: Secret,
}

impl ApiConfig {
    /// Checks the settings without reading secrets.
    pub fn validate(&self, problems: &mut Problems) {
        if let Some(auth) = &self.basic_auth
            && (auth.user.is_empty() || auth.user.contains(':'))
        {
            problems.invalid("basic_auth.user", "empty or with a ':'", "a user name without ':'");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_with_a_colon_is_refused() {
        let mut problems = Problems::under("api");
        ApiConfig { enabled: true, basic_auth: Some(BasicAuth { user: "a:b".into(), password: Secret::Env("X".into()) }) }.validate(&mut problems);
        assert_eq!(problems.into_vec()[0].key, "api.basic_auth.user");
        let mut problems = Problems::under("api");
        ApiConfig::default().validate(&mut problems);
        assert!(problems.is_empty());
    }
}
