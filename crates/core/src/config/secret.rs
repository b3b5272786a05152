//! Secrets in configuration: passwords and credentials that must never reach a log or an error.
//!
//! A [`Secret`] is written in a file in one of three forms:
//!
//! ```toml
//! password = "inline value"              # discouraged outside local testing
//! password = { env = "MSSQL_PASSWORD" }  # read from an environment variable at start
//! password = { file = "/run/secrets/mssql_password" }  # read from a file at start (trailing newline trimmed)
//! ```
//!
//! Every `Debug`/`Display`/`Serialize` form of a secret is redacted; only
//! [`SecretString::expose`] hands the value out, at the one place it is passed to a client.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// What every redacted value prints as.
pub const REDACTED: &str = "***";

/// Errors resolving a secret reference.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The referenced environment variable is not set (or not UTF-8).
    #[error("environment variable `{name}` named by a secret is not set")]
    MissingEnv {
        /// The variable's name.
        name: String,
    },
    /// The referenced file could not be read.
    #[error("cannot read secret file `{path}`: {source}")]
    File {
        /// The file's path.
        path: PathBuf,
        /// The I/O error (it never contains the file's content).
        source: std::io::Error,
    },
}

/// A secret as configured: the value itself or where to find it.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// The value, written in the file or set through an environment override.
    Inline(SecretString),
    /// The name of an environment variable holding the value.
    Env(String),
    /// A file holding the value (one trailing newline is trimmed).
    File(PathBuf),
}

impl Secret {
    /// Reads the value. This is the only I/O a secret does, and it happens when a stage is
    /// built, never during validation.
    pub fn resolve(&self) -> Result<SecretString, SecretError> {
        match self {
            Secret::Inline(value) => Ok(value.clone()),
            Secret::Env(name) => std::env::var(name)
                .map(SecretString::new)
                .map_err(|_| SecretError::MissingEnv { name: name.clone() }),
            Secret::File(path) => std::fs::read_to_string(path)
                .map(|text| {
                    let trimmed = text.strip_suffix('\n').unwrap_or(&text);
                    SecretString::new(trimmed.strip_suffix('\r').unwrap_or(trimmed).to_owned())
                })
                .map_err(|source| SecretError::File { path: path.clone(), source }),
        }
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Secret::Inline(_) => f.write_str(REDACTED),
            Secret::Env(name) => write!(f, "{{ env = {name:?} }}"),
            Secret::File(path) => write!(f, "{{ file = {:?} }}", path.display().to_string()),
        }
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SecretVisitor;

        impl<'de> Visitor<'de> for SecretVisitor {
            type Value = Secret;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, { env = \"VAR\" } or { file = \"/path\" }")
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Secret, E> {
                Ok(Secret::Inline(SecretString::new(value.to_owned())))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Secret, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::invalid_length(0, &self));
                };
                let secret = match key.as_str() {
                    "env" => Secret::Env(map.next_value()?),
                    "file" => Secret::File(map.next_value()?),
                    other => return Err(de::Error::unknown_field(other, &["env", "file"])),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::unknown_field(&extra, &["env", "file"]));
                }
                Ok(secret)
            }
        }

        deserializer.deserialize_any(SecretVisitor)
    }
}

/// A resolved secret value. Prints as `***`; [`SecretString::expose`] is the only way out.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a value.
    pub fn new(value: String) -> Self {
        Self(value)
    }

    /// The value, for the one call that hands it to a client library.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Whether a configuration key names something secret (passwords, keys, tokens), judged by
/// its name. Used to redact passthrough client properties and never to echo such values.
pub fn is_sensitive_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "token", "credential", "sasl.jaas", "key.pem", "private", "sasl.oauthbearer.config"]
        .iter()
        .any(|needle| key.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug)]
    struct Holder {
        password: Secret,
    }

    fn parse(text: &str) -> Holder {
        toml::from_str(text).expect("valid secret form")
    }

    #[test]
    fn inline_secret_is_redacted_in_debug_and_display() {
        let holder = parse(r#"password = "hunter2-XYZ""#);
        let shown = format!("{holder:?} {}", holder.password);
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains(REDACTED));
        assert_eq!(holder.password.resolve().unwrap().expose(), "hunter2-XYZ");
    }

    #[test]
    fn env_and_file_references_resolve() {
        // PATH is set in every test process; reading it needs no (unsafe) `set_var`.
        let holder = parse(r#"password = { env = "PATH" }"#);
        assert_eq!(holder.password.resolve().unwrap().expose(), std::env::var("PATH").unwrap());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "from-file\n").unwrap();
        let holder = parse(&format!("password = {{ file = {:?} }}", path.display().to_string()));
        assert_eq!(holder.password.resolve().unwrap().expose(), "from-file");
    }

    #[test]
    fn missing_env_names_the_variable_not_a_value() {
        let holder = parse(r#"password = { env = "MSSQL_CDC_TEST_UNSET_VAR_8" }"#);
        let error = holder.password.resolve().unwrap_err().to_string();
        assert!(error.contains("MSSQL_CDC_TEST_UNSET_VAR_8"), "{error}");
    }

    #[test]
    fn unknown_reference_form_is_rejected() {
        let result: Result<Holder, _> = toml::from_str(r#"password = { vault = "x" }"#);
        assert!(result.is_err());
    }

    #[test]
    fn sensitive_keys_are_recognised() {
        assert!(is_sensitive_key("sasl.password"));
        assert!(is_sensitive_key("ssl.key.password"));
        assert!(is_sensitive_key("ssl.key.pem"));
        assert!(!is_sensitive_key("linger.ms"));
    }
}
