//! Why a reconcile run could not conclude.

use mssql_cdc_core::config::secret::SecretError;
use mssql_cdc_lake::delta::table::DeltaError;
use mssql_cdc_source::SourceError;

/// Errors of a reconcile run; none is a verdict (a difference is a finding, not an error).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// SQL Server could not be reached or a query failed.
    #[error("SQL Server: {0}")]
    Source(#[from] SourceError),
    /// A Delta table could not be read or written.
    #[error(transparent)]
    Delta(#[from] DeltaError),
    /// A storage option's secret could not be read.
    #[error("storage_options: {0}")]
    Secret(#[from] SecretError),
    /// The silver table does not exist.
    #[error("no Delta table at `{location}` (has the silver stage run?)")]
    NoTable {
        /// Where it was looked for.
        location: String,
    },
    /// The key is not a captured column silver holds.
    #[error("key column `{column}`: {message}")]
    Key {
        /// The column.
        column: String,
        /// What is wrong.
        message: String,
    },
    /// Silver's range key column has a type the source's does not map to.
    #[error("key column `{column}`: silver holds {found}, not an integer")]
    KeyType {
        /// The column.
        column: String,
        /// Silver's type.
        found: String,
    },
    /// A value without a canonical form.
    #[error("{side}: column `{column}`: {message}")]
    Value {
        /// Which side read it.
        side: &'static str,
        /// The column.
        column: String,
        /// What did not fit.
        message: String,
    },
}

impl ReconcileError {
    /// Whether running again after a wait may succeed (an unreachable server or store).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Source(error) => error.is_transient(),
            Self::Delta(error) => error.transient,
            _ => false,
        }
    }
}
