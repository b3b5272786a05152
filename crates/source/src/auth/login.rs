//! How the source reaches and signs in to SQL Server: the connection string, TLS, and the
//! SQL login or token sign-in, validated from the connector's options into [`Login`].

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;
use mssql_cdc_core::config::secret::Secret;

use super::config::{SignInOptions, TokenSettings};
use crate::config::{ConnectionString, MssqlSourceOptions, PASSWORD_KEYS, SERVER_KEYS, USER_KEYS};

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

/// How to reach and log in to SQL Server.
#[derive(Clone, Debug)]
pub struct Login {
    /// The connection string (names a server; holds no password).
    pub connection_string: ConnectionString,
    /// SQL login name, unless the connection string names it (or none is used).
    pub user: Option<String>,
    /// Its password (only with `user`).
    pub password: Option<Secret>,
    /// Login timeout.
    pub connect_timeout: Duration,
    /// TLS mode.
    pub encrypt: Encrypt,
    /// Which server certificates are trusted.
    pub trust: ServerTrust,
    /// Token sign-in, when `authentication` asks for it.
    pub tokens: TokenSettings,
}

/// Which server certificates the source trusts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerTrust {
    /// Those the system's trust store vouches for.
    System,
    /// Any (testing only).
    Any,
    /// Those signed by the CA in this PEM file.
    Ca(PathBuf),
}

impl MssqlSourceOptions {
    /// The connection string, login and TLS options.
    pub(crate) fn login(&self, problems: &mut Problems) -> Option<Login> {
        let connection_string = match &self.connection_string {
            None => {
                problems.missing("connection_string", "\"Server=host,1433;Database=db\"");
                None
            }
            Some(connection) => {
                let before = problems.len();
                if !connection.has_any(SERVER_KEYS) {
                    problems.invalid("connection_string", "names no server", "a Server=host[,port] part");
                }
                if connection.has_any(PASSWORD_KEYS) {
                    problems.invalid("connection_string", "holds a password", "the password in `password`, not in the connection string");
                }
                if connection.has_any(USER_KEYS) && self.user.is_some() {
                    problems.invalid("connection_string", "names a user and so does `user`", "the login given once, in `user`");
                }
                (problems.len() == before).then(|| connection.clone())
            }
        };
        if self.password.is_some() && self.user.is_none() {
            problems.missing("user", "the login name that goes with password");
        }
        let trust = match (self.trust_server_certificate, &self.trust_server_certificate_ca) {
            (true, Some(_)) => {
                problems.invalid("trust_server_certificate", "set together with trust_server_certificate_ca", "one of the two");
                None
            }
            (true, None) => Some(ServerTrust::Any),
            (false, Some(ca)) => Some(ServerTrust::Ca(ca.clone())),
            (false, None) => Some(ServerTrust::System),
        };
        if self.connect_timeout == 0 {
            problems.invalid("connect_timeout", "zero", "a positive number of seconds");
        }
        let tokens = SignInOptions {
            kind: self.authentication,
            user: self.user.as_deref(),
            has_password: self.password.is_some(),
            access_token: self.access_token.as_ref(),
            token_command: &self.token_command,
            token_command_timeout_s: self.token_command_timeout_s,
            token_refresh_margin_s: self.token_refresh_margin_s,
            entra_id: &self.entra_id,
            encrypt: self.encrypt,
            trust_any_certificate: self.trust_server_certificate,
            connection_names_user: self.connection_string.as_ref().is_some_and(|c| c.has_any(USER_KEYS)),
        }
        .validate(problems);
        Some(Login {
            connection_string: connection_string?,
            user: self.user.clone(),
            password: self.password.clone(),
            connect_timeout: Duration::from_secs(self.connect_timeout),
            encrypt: self.encrypt,
            trust: trust?,
            tokens: tokens?,
        })
    }
}
