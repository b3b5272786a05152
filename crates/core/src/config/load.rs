//! Reading configuration files: TOML layered with environment variables through figment, and
//! extraction that reports every problem instead of stopping at the first.
//!
//! Environment naming (a double underscore separates key levels; keys are case-insensitive):
//!
//! | file | variable | example |
//! |---|---|---|
//! | worker | `MSSQL_CDC_WORKER__<KEY>` | `MSSQL_CDC_WORKER__KAFKA__BOOTSTRAP_SERVERS=broker:9092` |
//! | connector `<name>` | `MSSQL_CDC_CONNECTOR__<NAME>__<KEY>` | `MSSQL_CDC_CONNECTOR__ORDERS_SOURCE__MAX_COMMITS_PER_BATCH=500` |
//!
//! `<NAME>` is the connector's `name` in upper case with every character other than a letter or
//! digit replaced by `_`. Values are parsed as TOML-like literals (numbers, booleans, `[a, b]`,
//! `{k = v}`); wrap a value in double quotes to keep it a string.

use std::path::Path;

use figment::error::{Actual, Kind};
use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Value};
use figment::Figment;
use serde::de::DeserializeOwned;

use super::problem::{Problem, Problems};
use super::secret::is_sensitive_key;

/// Prefix of the worker's environment overrides.
pub const WORKER_ENV_PREFIX: &str = "MSSQL_CDC_WORKER__";
/// Prefix of connector environment overrides (followed by the normalised connector name).
pub const CONNECTOR_ENV_PREFIX: &str = "MSSQL_CDC_CONNECTOR__";

/// Errors reading a configuration file before any key can be checked.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("cannot read `{path}`: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("`{path}` is not valid TOML: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's message, with line and column.
        message: String,
    },
}

/// A configuration document: the file's keys with environment overrides merged on top.
pub struct Document {
    figment: Figment,
    dict: Dict,
    env_prefix: Option<String>,
}

impl Document {
    /// Reads `path` as TOML and layers the variables starting with `env_prefix` over it.
    pub fn read(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| LoadError::Read { path: path.display().to_string(), source })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses TOML text (named `origin` in errors).
    pub fn parse(origin: &str, text: &str) -> Result<Self, LoadError> {
        if let Err(error) = toml::from_str::<toml::Table>(text) {
            // The parser's own rendering quotes the offending line, which may hold a secret:
            // report its message and position only.
            let position = error.span().map(|span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!(" at line {line}, column {column}")
            });
            return Err(LoadError::Syntax { path: origin.to_owned(), message: format!("{}{}", error.message().trim(), position.unwrap_or_default()) });
        }
        let figment = Figment::from(Toml::string(text));
        let dict = figment.extract::<Dict>().map_err(|error| LoadError::Syntax {
            path: origin.to_owned(),
            message: error.to_string(),
        })?;
        Ok(Self { figment, dict, env_prefix: None })
    }

    /// An empty document (every key at its default), for a worker without a file.
    pub fn empty() -> Self {
        Self { figment: Figment::new(), dict: Dict::new(), env_prefix: None }
    }

    /// Layers the environment variables starting with `prefix` over the file.
    pub fn with_env(self, prefix: &str) -> Self {
        let figment = self.figment.merge(Env::prefixed(prefix).split("__"));
        let dict = figment.extract::<Dict>().unwrap_or(self.dict);
        Self { figment, dict, env_prefix: Some(prefix.to_owned()) }
    }

    /// A top-level string key, if present and a string.
    pub fn string(&self, key: &str) -> Option<String> {
        self.dict.get(key).and_then(Value::as_str).map(str::to_owned)
    }

    /// Whether a top-level key is present.
    pub fn has(&self, key: &str) -> bool {
        self.dict.contains_key(key)
    }

    /// The document without the given top-level keys.
    pub fn without(&self, keys: &[&str]) -> Self {
        let mut dict = self.dict.clone();
        for key in keys {
            dict.remove(*key);
        }
        Self { figment: self.figment.clone(), dict, env_prefix: self.env_prefix.clone() }
    }

    /// Deserialises the document into `T`, collecting every problem.
    ///
    /// `T` must default every key (`#[serde(default)]`) so that a removed key never causes a
    /// second, spurious error: required keys are `Option`s checked by the type's `validate()`.
    /// On an error the offending key is recorded and removed, and extraction runs again, until
    /// it succeeds or no key can be blamed.
    pub fn extract<T: DeserializeOwned>(&self, problems: &mut Problems) -> Option<T> {
        let mut dict = self.dict.clone();
        // Each round removes one key, so the loop is bounded by the number of keys.
        for _ in 0..=count_keys(&dict) {
            let error = match Figment::from(Serialized::defaults(&dict)).extract::<T>() {
                Ok(value) => return Some(value),
                Err(error) => error,
            };
            let mut blamed = false;
            for error in error {
                let (path, problem) = describe(&error);
                let mut problem = problem;
                problem.origin = self.origin_of(&problem.key);
                problems.push(problem);
                blamed |= remove_path(&mut dict, &path);
            }
            if !blamed {
                return None;
            }
        }
        None
    }

    /// Names the environment variable a key came from, when it did.
    fn origin_of(&self, key: &str) -> Option<String> {
        let metadata = self.figment.find_metadata(key)?;
        let prefix = self.env_prefix.as_deref()?;
        let variable = key.split('.').map(str::to_ascii_uppercase).collect::<Vec<_>>().join("__");
        metadata.name.contains("environment").then(|| format!("{prefix}{variable}"))
    }
}

fn count_keys(dict: &Dict) -> usize {
    dict.values()
        .map(|value| match value {
            Value::Dict(_, inner) => 1 + count_keys(inner),
            _ => 1,
        })
        .sum()
}

/// Removes the value at `path` (dotted segments); true when something was removed.
fn remove_path(dict: &mut Dict, path: &[String]) -> bool {
    match path {
        [] => false,
        [last] => dict.remove(last).is_some(),
        [first, rest @ ..] => match dict.get_mut(first) {
            Some(Value::Dict(_, inner)) => remove_path(inner, rest),
            _ => false,
        },
    }
}

/// Turns a figment error into the key path to blame and a [`Problem`] that never echoes the value.
fn describe(error: &figment::Error) -> (Vec<String>, Problem) {
    let mut path = error.path.clone();
    let problem = match &error.kind {
        Kind::UnknownField(field, expected) => {
            if path.last() != Some(field) {
                path.push(field.clone());
            }
            let expected = if expected.is_empty() {
                "no keys here".to_owned()
            } else {
                format!("one of: {}", expected.join(", "))
            };
            Problem::new(path.join("."), "unknown key", expected)
        }
        Kind::UnknownVariant(_, expected) => {
            Problem::new(path.join("."), "unknown value", format!("one of: {}", expected.join(", ")))
        }
        Kind::InvalidType(actual, expected) => {
            Problem::new(path.join("."), format!("wrong type: found {}", type_name(actual)), expected.clone())
        }
        Kind::InvalidValue(actual, expected) => {
            Problem::new(path.join("."), format!("invalid value ({})", type_name(actual)), expected.clone())
        }
        Kind::InvalidLength(length, expected) => {
            Problem::new(path.join("."), format!("wrong length {length}"), expected.clone())
        }
        Kind::MissingField(field) => {
            path.push(field.to_string());
            // Nothing to remove for a missing key: blame its parent so the loop can go on.
            let problem = Problem::missing(path.join("."), "a value");
            path.pop();
            problem
        }
        Kind::DuplicateField(field) => {
            path.push((*field).to_owned());
            Problem::new(path.join("."), "key given twice", "a single value")
        }
        Kind::Message(message) => {
            let key = path.join(".");
            // A custom message may quote the value: hide it for sensitive keys.
            let message = if is_sensitive_key(&key) { "invalid value".to_owned() } else { message.clone() };
            Problem { key, message, expected: None, origin: None }
        }
        _ => Problem { key: path.join("."), message: "unsupported value".to_owned(), expected: None, origin: None },
    };
    (path, problem)
}

/// The kind of a value, without the value itself.
fn type_name(actual: &Actual) -> &'static str {
    match actual {
        Actual::Bool(_) => "a boolean",
        Actual::Unsigned(_) | Actual::Signed(_) => "an integer",
        Actual::Float(_) => "a float",
        Actual::Char(_) | Actual::Str(_) => "a string",
        Actual::Bytes(_) => "bytes",
        Actual::Unit | Actual::Option => "nothing",
        Actual::Seq => "a list",
        Actual::Map => "a table",
        Actual::Enum => "an enum",
        _ => "another type",
    }
}

/// The normalised connector name used in environment variable names.
pub fn env_name(connector: &str) -> String {
    connector
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Default, Debug)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        port: u16,
        mode: Mode,
    }

    #[derive(Deserialize, Default, Debug, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        #[default]
        Fast,
        Safe,
    }

    #[derive(Deserialize, Default, Debug)]
    #[serde(default, deny_unknown_fields)]
    struct Outer {
        name: Option<String>,
        inner: Inner,
        count: u32,
    }

    #[test]
    fn every_problem_is_reported_with_its_key_path() {
        let doc = Document::parse(
            "t.toml",
            r#"
            nmae = "typo"
            count = "many"
            [inner]
            port = 70000
            mode = "slow"
            extra = 1
            "#,
        )
        .unwrap();
        let mut problems = Problems::under("");
        let outer: Option<Outer> = doc.extract(&mut problems);
        assert!(outer.is_some(), "extraction goes on once the bad keys are removed");
        let keys: Vec<String> = problems.into_vec().into_iter().map(|p| p.key).collect();
        for expected in ["nmae", "count", "inner.port", "inner.mode", "inner.extra"] {
            assert!(keys.contains(&expected.to_owned()), "{expected} missing from {keys:?}");
        }
    }

    #[test]
    fn a_valid_document_extracts_without_problems() {
        let doc = Document::parse("t.toml", "name = \"a\"\n[inner]\nport = 80\nmode = \"safe\"\n").unwrap();
        let mut problems = Problems::under("");
        let outer: Outer = doc.extract(&mut problems).unwrap();
        assert!(problems.is_empty());
        assert_eq!(outer.inner.mode, Mode::Safe);
        assert_eq!(outer.inner.port, 80);
    }

    #[test]
    fn syntax_errors_name_the_file() {
        let error = Document::parse("bad.toml", "name = ").err().unwrap().to_string();
        assert!(error.contains("bad.toml"), "{error}");
    }

    #[test]
    fn connector_names_normalise_for_env() {
        assert_eq!(env_name("orders-source.v2"), "ORDERS_SOURCE_V2");
    }
}
