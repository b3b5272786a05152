//! [`Problem`]: one thing wrong with a configuration file, located by its key path.
//!
//! Validation never stops at the first problem: loaders and `validate()` functions push every
//! problem they find into a [`Problems`] list, so `mssql-cdc validate` can report them all at once.

use std::fmt;

/// One problem in a configuration: where it is, what is wrong and what was expected.
///
/// Messages never contain the offending value, only its type, so a secret typed into the wrong
/// key cannot leak through an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path inside the file, e.g. `kafka.sasl.mechanism`; empty for the whole file.
    pub key: String,
    /// What is wrong, e.g. `unknown key` or `missing required key`.
    pub message: String,
    /// The expected form, e.g. `one of: plaintext, ssl, sasl_plaintext, sasl_ssl`.
    pub expected: Option<String>,
    /// Where the value came from when not the file itself (an environment variable).
    pub origin: Option<String>,
}

impl Problem {
    /// A problem at `key` with a message and the expected form.
    pub fn new(key: impl Into<String>, message: impl Into<String>, expected: impl Into<String>) -> Self {
        Self { key: key.into(), message: message.into(), expected: Some(expected.into()), origin: None }
    }

    /// A required key that is absent.
    pub fn missing(key: impl Into<String>, expected: impl Into<String>) -> Self {
        Self::new(key, "missing required key", expected)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.key.is_empty() { "<file>" } else { &self.key };
        write!(f, "`{key}`: {}", self.message)?;
        if let Some(expected) = &self.expected {
            write!(f, " (expected {expected})")?;
        }
        if let Some(origin) = &self.origin {
            write!(f, " [from {origin}]")?;
        }
        Ok(())
    }
}

/// An ordered list of problems under a key prefix.
#[derive(Debug, Default)]
pub struct Problems {
    prefix: String,
    list: Vec<Problem>,
}

impl Problems {
    /// An empty list whose keys are relative to `prefix` (empty for the file root).
    pub fn under(prefix: &str) -> Self {
        Self { prefix: prefix.to_owned(), list: Vec::new() }
    }

    /// Records a problem; its key is joined to this list's prefix.
    pub fn push(&mut self, mut problem: Problem) {
        problem.key = join_key(&self.prefix, &problem.key);
        self.list.push(problem);
    }

    /// Records that `key` holds a value outside its allowed form.
    pub fn invalid(&mut self, key: &str, message: impl Into<String>, expected: impl Into<String>) {
        self.push(Problem::new(key, message, expected));
    }

    /// Records that the required `key` is absent.
    pub fn missing(&mut self, key: &str, expected: impl Into<String>) {
        self.push(Problem::missing(key, expected));
    }

    /// Checks that a required option is present.
    pub fn require<T>(&mut self, key: &str, value: &Option<T>, expected: &str) {
        if value.is_none() {
            self.missing(key, expected);
        }
    }

    /// Moves every problem of `other` (already prefixed) into this list.
    pub fn extend(&mut self, other: Problems) {
        self.list.extend(other.list);
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// How many problems were recorded (compare before and after a check to see whether it
    /// found any).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The recorded problems, in the order found.
    pub fn into_vec(self) -> Vec<Problem> {
        self.list
    }
}

/// Joins a dotted prefix and a key.
pub fn join_key(prefix: &str, key: &str) -> String {
    match (prefix.is_empty(), key.is_empty()) {
        (true, _) => key.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) => format!("{prefix}.{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_are_prefixed_and_keep_order() {
        let mut problems = Problems::under("kafka");
        problems.missing("bootstrap_servers", "host:port[,host:port...]");
        problems.invalid("sasl.mechanism", "unknown value", "one of: plain");
        let list = problems.into_vec();
        assert_eq!(list[0].key, "kafka.bootstrap_servers");
        assert_eq!(list[1].key, "kafka.sasl.mechanism");
        assert_eq!(
            list[0].to_string(),
            "`kafka.bootstrap_servers`: missing required key (expected host:port[,host:port...])"
        );
    }
}
