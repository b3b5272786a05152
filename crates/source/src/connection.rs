//! Connecting to SQL Server with tiberius, from the connector's options.

use std::sync::Arc;
use std::time::Duration;

use tiberius::{AuthMethod, Client, Config, EncryptionLevel};
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncWriteCompatExt};

use super::auth::TokenProvider;
use super::config::{Encrypt, Login, ServerTrust};
use super::error::SourceError;

/// A connected client.
pub type TdsClient = Client<Compat<TcpStream>>;

/// Opens connections with the connector's settings.
#[derive(Clone)]
pub struct Connector {
    config: Config,
    address: String,
    timeout: Duration,
    secrets: Arc<[String]>,
    tokens: Option<Arc<TokenProvider>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").field("address", &self.address).finish_non_exhaustive()
    }
}

impl Connector {
    /// Builds the tiberius configuration (no I/O besides reading the password's secret; a
    /// token is fetched per connection).
    pub fn new(options: &Login) -> Result<Self, SourceError> {
        let mut config = Config::from_ado_string(&options.connection_string.0).map_err(|error| SourceError::Sql {
            message: format!("connection_string: {error}"),
            code: None,
            transient: false,
        })?;
        let password = options.password.as_ref().map(|p| p.resolve()).transpose()?;
        if let Some(user) = &options.user {
            config.authentication(AuthMethod::sql_server(user, password.as_ref().map_or("", |p| p.expose())));
        }
        config.encryption(match options.encrypt {
            Encrypt::Required => EncryptionLevel::Required,
            Encrypt::On => EncryptionLevel::On,
            Encrypt::Off => EncryptionLevel::Off,
            Encrypt::NotSupported => EncryptionLevel::NotSupported,
        });
        match &options.trust {
            ServerTrust::System => {}
            ServerTrust::Any => config.trust_cert(),
            ServerTrust::Ca(ca) => config.trust_cert_ca(ca.display().to_string()),
        }
        config.application_name("mssql-cdc");
        let address = config.get_addr();
        let secrets: Vec<String> = password.iter().map(|p| p.expose().to_owned()).collect();
        let tokens = TokenProvider::new(&options.tokens).map(Arc::new);
        Ok(Self { config, address, timeout: options.connect_timeout, secrets: secrets.into(), tokens })
    }

    /// The values to remove from any message.
    pub fn secrets(&self) -> Vec<&str> {
        self.secrets.iter().map(String::as_str).collect()
    }

    /// Opens a new connection, within `connect_timeout`; with token sign-in, with a token
    /// fetched (or still fresh) for it first.
    pub async fn connect(&self) -> Result<TdsClient, SourceError> {
        // The token first, bounded by its own source's timeouts (token_command_timeout_s, the
        // identity endpoints' 30 s), so a slow token is named as such, not as a slow server.
        let token = match &self.tokens {
            Some(tokens) => Some(tokens.token().await?),
            None => None,
        };
        let attempt = async {
            let mut config = self.config.clone();
            if let Some(token) = &token {
                config.authentication(AuthMethod::aad_token(token.expose()));
            }
            let tcp = TcpStream::connect(&self.address).await.map_err(SourceError::io)?;
            tcp.set_nodelay(true).map_err(SourceError::io)?;
            Client::connect(config, tcp.compat_write()).await.map_err(|error| {
                let mut secrets = self.secrets();
                secrets.extend(token.as_ref().map(|token| token.expose()));
                SourceError::from_tiberius(error, &secrets)
            })
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(SourceError::Sql {
                message: format!("no connection to {} within connect_timeout ({} s)", self.address, self.timeout.as_secs()),
                code: None,
                transient: true,
            }),
        }
    }

    /// A tiberius error as a [`SourceError`], secrets removed.
    pub fn error(&self, error: tiberius::error::Error) -> SourceError {
        SourceError::from_tiberius(error, &self.secrets())
    }
}
