//! [`BrokerStorage`]: where the embedded broker keeps its records.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use url::Url;

use super::BrokerError;

/// The `--storage` of `mssql-cdc broker`.
///
/// ```
/// use mssql_cdc_broker::BrokerStorage;
///
/// assert_eq!("memory".parse::<BrokerStorage>(), Ok(BrokerStorage::Memory));
/// assert_eq!("sqlite:/tmp/b.db".parse::<BrokerStorage>(), Ok(BrokerStorage::Sqlite("/tmp/b.db".into())));
/// assert!("postgres://x".parse::<BrokerStorage>().is_err());
/// assert!("sqlite:".parse::<BrokerStorage>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BrokerStorage {
    /// In memory: fast, lost when the process exits.
    Memory,
    /// A SQLite database file: records survive a restart.
    Sqlite(PathBuf),
}

impl FromStr for BrokerStorage {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "memory" {
            return Ok(Self::Memory);
        }
        match text.strip_prefix("sqlite:") {
            Some(path) if !path.is_empty() => Ok(Self::Sqlite(PathBuf::from(path))),
            _ => Err(format!("`{text}` is not a storage (expected `memory` or `sqlite:<file>`)")),
        }
    }
}

impl fmt::Display for BrokerStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory => f.write_str("memory"),
            Self::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
        }
    }
}

impl BrokerStorage {
    /// The storage URL tansu takes. tansu joins a SQLite path to its working directory after
    /// dropping one leading `/`, so an absolute path is written with two: the join then
    /// yields the absolute path itself.
    ///
    /// ```
    /// use mssql_cdc_broker::BrokerStorage;
    ///
    /// let file = std::env::temp_dir().join("mssql-cdc-doc").join("b.db");
    /// let url = BrokerStorage::Sqlite(file.clone()).tansu_url().unwrap();
    /// let rest = url.path().strip_prefix('/').unwrap();
    /// assert_eq!(url.domain(), None);
    /// assert_eq!(std::env::current_dir().unwrap().join(rest), file);
    /// ```
    pub fn tansu_url(&self) -> Result<Url, BrokerError> {
        let text = match self {
            Self::Memory => "memory://tansu/".to_owned(),
            Self::Sqlite(path) => {
                let absolute = std::path::absolute(path)
                    .map_err(|source| BrokerError::StorageDir { path: path.clone(), source })?;
                if let Some(parent) = absolute.parent() {
                    std::fs::create_dir_all(parent)
                        .map_err(|source| BrokerError::StorageDir { path: parent.to_owned(), source })?;
                }
                format!("sqlite:///{}", absolute.display())
            }
        };
        Url::parse(&text).map_err(|error| BrokerError::Start(format!("storage URL `{text}`: {error}")))
    }
}
