//! The sign-in options of an `mssql-source` connector file and the [`Authentication`] they
//! validate into.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;
use mssql_cdc_core::config::secret::Secret;

use crate::config::Encrypt;

/// How the source signs in (`authentication`).
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AuthenticationKind {
    /// A SQL login: `user` and `password` (the default).
    #[default]
    SqlPassword,
    /// An Entra ID access token read from `access_token` (a secret: env or file), read again
    /// for every new connection.
    AccessToken,
    /// An Entra ID access token printed by `token_command`, run again when the last one is
    /// within `token_refresh_margin_s` of its expiry.
    TokenCommand,
    /// The Azure managed identity of the host (system-assigned, or `[entra_id] client_id`).
    ManagedIdentity,
    /// An Entra ID application: `[entra_id] tenant_id`, `client_id`, `client_secret`.
    ServicePrincipal,
}

/// `[entra_id]`: where managed-identity and service-principal tokens come from.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct EntraIdOptions {
    /// Directory (tenant) id. Required for `service_principal`.
    pub tenant_id: Option<String>,
    /// Application (client) id: required for `service_principal`; for `managed_identity`, the
    /// user-assigned identity to use (default: the system-assigned one).
    pub client_id: Option<String>,
    /// The application's client secret: a string, `{ env = "VAR" }` or `{ file = "/path" }`.
    /// Required for `service_principal`. Redacted.
    pub client_secret: Option<Secret>,
    /// The sign-in authority, https (http only to localhost). Default
    /// `https://login.microsoftonline.com` (other clouds: e.g. `https://login.microsoftonline.us`).
    pub authority_host: Option<String>,
    /// The managed-identity token endpoint. Default: `IDENTITY_ENDPOINT` with
    /// `IDENTITY_HEADER` when the host sets them (App Service, Container Apps), else the
    /// instance metadata service `http://169.254.169.254/metadata/identity/oauth2/token`.
    pub identity_endpoint: Option<String>,
    /// The resource the token is for. Default `https://database.windows.net/` (Azure SQL and
    /// SQL Server with Entra ID).
    pub resource: Option<String>,
}

/// How the source signs in, validated.
#[derive(Clone, Debug, PartialEq)]
pub enum Authentication {
    /// A SQL login (or none, when neither `user` nor a token is given).
    SqlPassword,
    /// A token from a secret, read for every connection.
    AccessToken(Secret),
    /// A token printed by a command (program, then its arguments).
    TokenCommand {
        /// The program and its arguments.
        command: Vec<String>,
        /// How long the command may run.
        timeout: Duration,
    },
    /// The host's managed identity.
    ManagedIdentity {
        /// A user-assigned identity's client id.
        client_id: Option<String>,
        /// An explicit token endpoint.
        endpoint: Option<String>,
        /// The token's resource.
        resource: String,
    },
    /// An application with a client secret.
    ServicePrincipal {
        /// The authority, without a trailing slash.
        authority: String,
        /// The tenant.
        tenant_id: String,
        /// The application.
        client_id: String,
        /// Its secret.
        client_secret: Secret,
        /// The token's resource.
        resource: String,
    },
}

/// Everything sign-in needs besides the SQL login, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenSettings {
    /// Where tokens come from.
    pub authentication: Authentication,
    /// A cached token is fetched again when it expires within this long.
    pub refresh_margin: Duration,
}

/// The resource Entra ID tokens for SQL are issued for.
pub const SQL_RESOURCE: &str = "https://database.windows.net/";
/// Entra ID's public-cloud authority.
pub const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com";

/// The sign-in options as read from the file (fields of the connector's top level).
pub struct SignInOptions<'a> {
    /// `authentication`.
    pub kind: AuthenticationKind,
    /// `user`.
    pub user: Option<&'a str>,
    /// Whether `password` is set.
    pub has_password: bool,
    /// `access_token`.
    pub access_token: Option<&'a Secret>,
    /// `token_command`.
    pub token_command: &'a [String],
    /// `token_command_timeout_s`.
    pub token_command_timeout_s: u64,
    /// `token_refresh_margin_s`.
    pub token_refresh_margin_s: u64,
    /// `[entra_id]`.
    pub entra_id: &'a EntraIdOptions,
    /// `encrypt`.
    pub encrypt: Encrypt,
    /// `trust_server_certificate`.
    pub trust_any_certificate: bool,
    /// Whether the connection string names a user.
    pub connection_names_user: bool,
}

impl SignInOptions<'_> {
    /// Checks that the options fit the chosen `authentication`, recording every problem.
    pub fn validate(&self, problems: &mut Problems) -> Option<TokenSettings> {
        let before = problems.len();
        let token = self.kind != AuthenticationKind::SqlPassword;
        if token {
            for (set, key) in [(self.user.is_some(), "user"), (self.has_password, "password"), (self.connection_names_user, "connection_string")] {
                if set {
                    problems.invalid(key, format!("names a SQL login while authentication = {}", kind_name(self.kind)), "no SQL login with token sign-in: remove it, or set authentication = \"sql_password\"");
                }
            }
            if matches!(self.encrypt, Encrypt::Off | Encrypt::NotSupported) {
                problems.invalid("encrypt", "leaves the connection unencrypted, and an access token is a bearer credential", "encrypt = \"required\" (or \"on\") with token sign-in");
            }
            if self.trust_any_certificate {
                problems.invalid("trust_server_certificate", "would hand a bearer token to a server whose certificate is not checked", "trust_server_certificate_ca with the CA that signed the server's certificate");
            }
        }
        self.unused(problems);
        if self.token_refresh_margin_s == 0 {
            problems.invalid("token_refresh_margin_s", "zero", "a positive number of seconds");
        }
        if self.token_command_timeout_s == 0 {
            problems.invalid("token_command_timeout_s", "zero", "a positive number of seconds");
        }
        let resource = || self.entra_id.resource.clone().unwrap_or_else(|| SQL_RESOURCE.to_owned());
        let authentication = match self.kind {
            AuthenticationKind::SqlPassword => Authentication::SqlPassword,
            AuthenticationKind::AccessToken => match self.access_token {
                Some(secret) => Authentication::AccessToken(secret.clone()),
                None => {
                    problems.missing("access_token", "{ file = \"/run/secrets/sql-token\" } or { env = \"SQL_ACCESS_TOKEN\" }");
                    return None;
                }
            },
            AuthenticationKind::TokenCommand => {
                if self.token_command.first().is_none_or(|program| program.trim().is_empty()) {
                    problems.missing("token_command", "the program and its arguments, e.g. [\"az\", \"account\", \"get-access-token\", \"--resource\", \"https://database.windows.net/\"]");
                    return None;
                }
                Authentication::TokenCommand { command: self.token_command.to_vec(), timeout: Duration::from_secs(self.token_command_timeout_s) }
            }
            AuthenticationKind::ManagedIdentity => {
                if let Some(endpoint) = &self.entra_id.identity_endpoint {
                    check_url(problems, "entra_id.identity_endpoint", endpoint);
                }
                Authentication::ManagedIdentity { client_id: self.entra_id.client_id.clone(), endpoint: self.entra_id.identity_endpoint.clone(), resource: resource() }
            }
            AuthenticationKind::ServicePrincipal => {
                let entra = self.entra_id;
                problems.require("entra_id.tenant_id", &entra.tenant_id, "the directory (tenant) id");
                problems.require("entra_id.client_id", &entra.client_id, "the application (client) id");
                problems.require("entra_id.client_secret", &entra.client_secret, "{ env = \"AZURE_CLIENT_SECRET\" } or { file = \"/run/secrets/client-secret\" }");
                let authority = entra.authority_host.clone().unwrap_or_else(|| DEFAULT_AUTHORITY.to_owned());
                check_authority(problems, "entra_id.authority_host", &authority);
                match (&entra.tenant_id, &entra.client_id, &entra.client_secret) {
                    (Some(tenant_id), Some(client_id), Some(client_secret)) => Authentication::ServicePrincipal {
                        authority: authority.trim_end_matches('/').to_owned(),
                        tenant_id: tenant_id.clone(),
                        client_id: client_id.clone(),
                        client_secret: client_secret.clone(),
                        resource: resource(),
                    },
                    _ => return None,
                }
            }
        };
        (problems.len() == before).then(|| TokenSettings { authentication, refresh_margin: Duration::from_secs(self.token_refresh_margin_s) })
    }

    /// Options set for another `authentication` than the one chosen.
    fn unused(&self, problems: &mut Problems) {
        let kind = self.kind;
        let mut stray = |set: bool, key: &str, wanted: &str| {
            if set {
                problems.invalid(key, format!("is set but authentication = {}", kind_name(kind)), format!("authentication = \"{wanted}\", or remove {key}"));
            }
        };
        stray(self.access_token.is_some() && kind != AuthenticationKind::AccessToken, "access_token", "access_token");
        stray(!self.token_command.is_empty() && kind != AuthenticationKind::TokenCommand, "token_command", "token_command");
        let entra = self.entra_id;
        let identity = matches!(kind, AuthenticationKind::ManagedIdentity | AuthenticationKind::ServicePrincipal);
        stray(*entra != EntraIdOptions::default() && !identity, "entra_id", "managed_identity\" or \"service_principal");
        stray(entra.identity_endpoint.is_some() && kind == AuthenticationKind::ServicePrincipal, "entra_id.identity_endpoint", "managed_identity");
        stray((entra.tenant_id.is_some() || entra.client_secret.is_some() || entra.authority_host.is_some()) && kind == AuthenticationKind::ManagedIdentity, "entra_id", "service_principal");
    }
}

fn check_url(problems: &mut Problems, key: &str, value: &str) {
    if !(value.starts_with("https://") || value.starts_with("http://")) {
        problems.invalid(key, format!("`{value}` is not an http(s) URL"), "an URL such as https://login.microsoftonline.com");
    }
}

/// The authority receives the client secret: https, or http to this host only (tests).
fn check_authority(problems: &mut Problems, key: &str, value: &str) {
    let loopback = value.strip_prefix("http://").and_then(|rest| rest.split(['/', ':']).next()).is_some_and(|host| matches!(host, "localhost" | "127.0.0.1"));
    if !(value.starts_with("https://") || loopback) {
        problems.invalid(key, format!("`{value}` is not an https URL, and the client secret is sent there"), "an https URL such as https://login.microsoftonline.com (http only to localhost or 127.0.0.1)");
    }
}

fn kind_name(kind: AuthenticationKind) -> &'static str {
    match kind {
        AuthenticationKind::SqlPassword => "sql_password",
        AuthenticationKind::AccessToken => "access_token",
        AuthenticationKind::TokenCommand => "token_command",
        AuthenticationKind::ManagedIdentity => "managed_identity",
        AuthenticationKind::ServicePrincipal => "service_principal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(kind: AuthenticationKind) -> SignInOptions<'static> {
        static NONE: EntraIdOptions = EntraIdOptions { tenant_id: None, client_id: None, client_secret: None, authority_host: None, identity_endpoint: None, resource: None };
        SignInOptions {
            kind,
            user: None,
            has_password: false,
            access_token: None,
            token_command: &[],
            token_command_timeout_s: 30,
            token_refresh_margin_s: 300,
            entra_id: &NONE,
            encrypt: Encrypt::Required,
            trust_any_certificate: false,
            connection_names_user: false,
        }
    }

    fn keys(options: &SignInOptions<'_>) -> (Option<TokenSettings>, Vec<String>) {
        let mut problems = Problems::under("");
        let settings = options.validate(&mut problems);
        (settings, problems.into_vec().into_iter().map(|p| p.key).collect())
    }

    #[test]
    fn a_sql_login_needs_nothing_more() {
        let (settings, problems) = keys(&SignInOptions { user: Some("cdc"), has_password: true, ..options(AuthenticationKind::SqlPassword) });
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(settings.unwrap().authentication, Authentication::SqlPassword);
    }

    #[test]
    fn token_sign_in_refuses_a_sql_login_and_an_unencrypted_connection_naming_each_key() {
        let secret = Secret::Env("TOKEN".to_owned());
        let (settings, problems) = keys(&SignInOptions {
            user: Some("cdc"),
            has_password: true,
            access_token: Some(&secret),
            encrypt: Encrypt::NotSupported,
            trust_any_certificate: true,
            connection_names_user: true,
            ..options(AuthenticationKind::AccessToken)
        });
        assert!(settings.is_none());
        assert_eq!(problems, ["user", "password", "connection_string", "encrypt", "trust_server_certificate"]);
    }

    #[test]
    fn each_kind_names_what_it_misses_and_what_belongs_to_another() {
        assert_eq!(keys(&options(AuthenticationKind::AccessToken)).1, ["access_token"]);
        assert_eq!(keys(&options(AuthenticationKind::TokenCommand)).1, ["token_command"]);
        assert_eq!(keys(&options(AuthenticationKind::ServicePrincipal)).1, ["entra_id.tenant_id", "entra_id.client_id", "entra_id.client_secret"]);
        let command = ["az".to_owned()];
        assert_eq!(keys(&SignInOptions { token_command: &command, ..options(AuthenticationKind::SqlPassword) }).1, ["token_command"]);
        let entra = EntraIdOptions { tenant_id: Some("t".into()), ..EntraIdOptions::default() };
        assert_eq!(keys(&SignInOptions { entra_id: &entra, ..options(AuthenticationKind::ManagedIdentity) }).1, ["entra_id"]);
        let bad_url = EntraIdOptions { identity_endpoint: Some("169.254.169.254".into()), ..EntraIdOptions::default() };
        assert_eq!(keys(&SignInOptions { entra_id: &bad_url, ..options(AuthenticationKind::ManagedIdentity) }).1, ["entra_id.identity_endpoint"]);
    }

    #[test]
    fn a_service_principal_gets_the_default_authority_and_sql_resource() {
        let entra = EntraIdOptions {
            tenant_id: Some("tenant".into()),
            client_id: Some("app".into()),
            client_secret: Some(Secret::Env("SECRET".into())),
            authority_host: Some("https://login.example/".into()),
            ..EntraIdOptions::default()
        };
        let (settings, problems) = keys(&SignInOptions { entra_id: &entra, ..options(AuthenticationKind::ServicePrincipal) });
        assert!(problems.is_empty(), "{problems:?}");
        for (authority, ok) in [("http://login.example", false), ("http://127.0.0.1:8080", true), ("ftp://x", false)] {
            let entra = EntraIdOptions { authority_host: Some(authority.into()), ..entra.clone() };
            assert_eq!(keys(&SignInOptions { entra_id: &entra, ..options(AuthenticationKind::ServicePrincipal) }).1.is_empty(), ok, "{authority}");
        }
        let Authentication::ServicePrincipal { authority, resource, .. } = settings.unwrap().authentication else { panic!("a service principal") };
        assert_eq!((authority.as_str(), resource.as_str()), ("https://login.example", SQL_RESOURCE));
    }
}
