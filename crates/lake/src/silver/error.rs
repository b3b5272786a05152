//! [`SilverError`]: why the silver stage stopped.

use mssql_cdc_core::stage::Retriable;

use crate::delta::table::DeltaError;

/// The silver stage failed.
#[derive(Debug, thiserror::Error)]
pub enum SilverError {
    /// A Delta table could not be read or written.
    #[error(transparent)]
    Delta(#[from] DeltaError),
    /// The facts table the bronze sink writes is not there yet.
    #[error("facts table `{facts}` does not exist yet: silver follows the batches the bronze sink records there (start the bronze sink first, with the same facts_table)")]
    NoFacts {
        /// The facts table.
        facts: String,
    },
    /// The facts table names a batch with rows, but there is no bronze table.
    #[error("bronze table `{bronze}` does not exist, but the facts table records batch {batch} with rows for it: is `bronze` the bronze sink's `target`?")]
    NoBronze {
        /// The bronze table.
        bronze: String,
        /// The batch.
        batch: i64,
    },
    /// `keys` is not set and bronze does not record the capture instance's key.
    #[error("bronze table `{bronze}` records no key columns (the source table has no unique index, or an older bronze sink wrote it): set `keys` in the silver connector to the columns that identify a row")]
    NoKeys {
        /// The bronze table.
        bronze: String,
    },
    /// Bronze rows could not be folded (a key column missing, say).
    #[error("cannot fold bronze rows: {0}")]
    Fold(String),
    /// A `storage_options` value could not be read.
    #[error("storage_options: {0}")]
    Storage(#[from] mssql_cdc_core::config::secret::SecretError),
    /// A deletion vector of silver could not be read or written.
    #[error("silver table `{table}`: {source}")]
    DeletionVector {
        /// The silver table.
        table: String,
        /// What was wrong with it.
        #[source]
        source: crate::delta::deletion_vector::DvError,
    },
    /// The facts table does not hold what its contract says.
    #[error(transparent)]
    Facts(#[from] crate::facts::FactsError),
}

impl SilverError {
    pub(crate) fn delta(table: &deltalake::DeltaTable, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::delta_at(table.table_url().as_str(), e)
    }

    pub(crate) fn delta_at(location: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        SilverError::Delta(DeltaError::new(location, e))
    }
}

impl Retriable for SilverError {
    /// Transient Delta failures (an object store unreachable or throttling, a lost commit race)
    /// and a facts table not created yet are retried; the rest needs the operator.
    fn is_retriable(&self) -> bool {
        match self {
            Self::Delta(error) => error.transient,
            Self::NoFacts { .. } => true,
            Self::NoBronze { .. } | Self::NoKeys { .. } | Self::Fold(_) | Self::DeletionVector { .. } | Self::Storage(_) | Self::Facts(_) => false,
        }
    }
}
