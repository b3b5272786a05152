//! Signing in to SQL Server with Entra ID: where access tokens come from, and when they are
//! fetched again.
//!
//! A SQL login is handed to tiberius once, when the [`Connector`](crate::connection::Connector)
//! is built. A token is asked of the [`TokenProvider`] for every new connection: a token from
//! a secret is read again each time (so a rotated file or variable is picked up), and one from
//! a command or an identity endpoint is kept until it comes within the refresh margin of its
//! expiry. A connection already open stays open when its token expires, as on SQL Server;
//! the next connection signs in with a fresh one.
//!
//! ```toml
//! authentication = "token_command"
//! token_command = ["az", "account", "get-access-token", "--resource", "https://database.windows.net/"]
//! ```

pub mod config;
mod command;
mod identity;
pub mod login;

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use mssql_cdc_core::config::secret::{Secret, SecretString};

use self::config::{Authentication, TokenSettings};
use crate::error::SourceError;

/// A token and when it expires (Unix seconds), if known.
#[derive(Clone, Debug)]
pub struct Fetched {
    /// The bearer token.
    pub token: SecretString,
    /// Its expiry: from the issuer's answer, else the JWT's `exp`.
    pub expires_at: Option<i64>,
}

impl Fetched {
    /// A token whose expiry is `expires_at`, or else its own `exp` claim.
    fn new(token: String, expires_at: Option<i64>) -> Self {
        let expires_at = expires_at.or_else(|| jwt_expiry(&token));
        Self { token: SecretString::new(token), expires_at }
    }
}

/// The `exp` claim of a JWT, read without checking its signature (only to know when to fetch
/// the next one); `None` for an opaque token.
pub fn jwt_expiry(token: &str) -> Option<i64> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes).ok()?.get("exp")?.as_i64()
}

/// Hands out access tokens for new connections.
pub struct TokenProvider {
    authentication: Authentication,
    margin: Duration,
    cache: tokio::sync::Mutex<Option<Fetched>>,
}

impl std::fmt::Debug for TokenProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the settings: a command's arguments may hold a secret.
        let kind = match &self.authentication {
            Authentication::SqlPassword => "sql_password",
            Authentication::AccessToken(_) => "access_token",
            Authentication::TokenCommand { .. } => "token_command",
            Authentication::ManagedIdentity { .. } => "managed_identity",
            Authentication::ServicePrincipal { .. } => "service_principal",
        };
        f.debug_struct("TokenProvider").field("authentication", &kind).finish_non_exhaustive()
    }
}

impl TokenProvider {
    /// A provider for token sign-in; `None` for a SQL login.
    pub fn new(settings: &TokenSettings) -> Option<Self> {
        (settings.authentication != Authentication::SqlPassword).then(|| Self { authentication: settings.authentication.clone(), margin: settings.refresh_margin, cache: tokio::sync::Mutex::new(None) })
    }

    /// A token for a new connection.
    pub async fn token(&self) -> Result<SecretString, SourceError> {
        if let Authentication::AccessToken(secret) = &self.authentication {
            // A file may be between two writes of its rotation: asked again later. A variable
            // cannot change in a running process: final.
            let rotating = matches!(secret, Secret::File(_));
            let token = secret.resolve().map_err(|error| SourceError::Token { message: format!("access_token: {error}"), transient: rotating })?;
            let token = token.expose().trim();
            if token.is_empty() {
                return Err(SourceError::Token { message: "access_token: the secret is empty".to_owned(), transient: rotating });
            }
            let now = chrono::Utc::now().timestamp();
            if let Some(expired) = jwt_expiry(token).filter(|at| *at <= now) {
                let message = format!("access_token: the token expired at {expired} (Unix seconds, now {now}); waiting for its rotation");
                return Err(SourceError::Token { message, transient: rotating });
            }
            return Ok(SecretString::new(token.to_owned()));
        }
        let mut cache = self.cache.lock().await;
        let now = chrono::Utc::now().timestamp();
        if let Some(fetched) = cache.as_ref().filter(|fetched| fresh(fetched, now, self.margin)) {
            return Ok(fetched.token.clone());
        }
        let fetched = match &self.authentication {
            Authentication::TokenCommand { command, timeout } => command::run(command, *timeout).await?,
            Authentication::ManagedIdentity { client_id, endpoint, resource } => identity::managed_identity(client_id.as_deref(), endpoint.as_deref(), resource).await?,
            Authentication::ServicePrincipal { authority, tenant_id, client_id, client_secret, resource } => identity::service_principal(authority, tenant_id, client_id, client_secret, resource).await?,
            Authentication::SqlPassword | Authentication::AccessToken(_) => return Err(SourceError::Token { message: "no token source configured".to_owned(), transient: false }),
        };
        if let Some(expires_at) = fetched.expires_at.filter(|at| *at <= now) {
            return Err(SourceError::Token { message: format!("the token fetched has already expired (exp {expires_at}, now {now})"), transient: true });
        }
        tracing::info!(expires_at = ?fetched.expires_at, "mssql-source: access token fetched");
        *cache = Some(fetched.clone());
        Ok(fetched.token)
    }
}

/// Whether a cached token may serve a new connection: its expiry is known and further away
/// than the margin.
fn fresh(fetched: &Fetched, now: i64, margin: Duration) -> bool {
    fetched.expires_at.is_some_and(|at| at.saturating_sub(now) > i64::try_from(margin.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(exp: i64) -> String {
        format!("e30.{}.sig", URL_SAFE_NO_PAD.encode(format!(r#"{{"exp":{exp}}}"#)))
    }

    #[test]
    fn expiry_comes_from_the_answer_else_the_jwt() {
        assert_eq!(Fetched::new(jwt(500), None).expires_at, Some(500));
        assert_eq!(Fetched::new(jwt(500), Some(900)).expires_at, Some(900));
        assert_eq!(Fetched::new("opaque".to_owned(), None).expires_at, None);
    }

    #[test]
    fn a_cached_token_serves_until_it_enters_the_margin() {
        let margin = Duration::from_secs(300);
        assert!(fresh(&Fetched::new(jwt(1_000), None), 600, margin));
        assert!(!fresh(&Fetched::new(jwt(1_000), None), 700, margin));
        // Unknown expiry: never reused.
        assert!(!fresh(&Fetched::new("opaque".to_owned(), None), 0, margin));
    }

    #[tokio::test]
    async fn a_token_from_a_file_is_read_again_for_every_connection() {
        let dir = std::env::temp_dir().join(format!("mssql-cdc-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "first\n").unwrap();
        let settings = TokenSettings { authentication: Authentication::AccessToken(mssql_cdc_core::config::secret::Secret::File(file.clone())), refresh_margin: Duration::from_secs(300) };
        let provider = TokenProvider::new(&settings).unwrap();
        assert_eq!(provider.token().await.unwrap().expose(), "first");
        std::fs::write(&file, "second\n").unwrap();
        assert_eq!(provider.token().await.unwrap().expose(), "second");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_command_runs_again_only_when_its_token_nears_expiry() {
        let dir = std::env::temp_dir().join(format!("mssql-cdc-command-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let counter = dir.join("runs");
        let now = chrono::Utc::now().timestamp();
        // Each run appends a line and prints a token that expires in an hour.
        let script = format!("echo run >> {}; echo {}", counter.display(), jwt(now + 3600));
        let command = vec!["sh".to_owned(), "-c".to_owned(), script];
        let settings = TokenSettings { authentication: Authentication::TokenCommand { command, timeout: Duration::from_secs(10) }, refresh_margin: Duration::from_secs(300) };
        let provider = TokenProvider::new(&settings).unwrap();
        let first = provider.token().await.unwrap();
        let second = provider.token().await.unwrap();
        assert_eq!(first.expose(), second.expose());
        assert_eq!(std::fs::read_to_string(&counter).unwrap().lines().count(), 1, "the fresh token was reused");
        // A margin longer than the token's life: every connection runs the command.
        let settings = TokenSettings { refresh_margin: Duration::from_secs(7200), ..settings };
        let provider = TokenProvider::new(&settings).unwrap();
        provider.token().await.unwrap();
        provider.token().await.unwrap();
        assert_eq!(std::fs::read_to_string(&counter).unwrap().lines().count(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
