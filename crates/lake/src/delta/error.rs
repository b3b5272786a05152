//! [`DeltaError`]: a Delta operation failed, with its cause kept and classified: transient
//! (an object store or file system that may come back, a lost commit race) or not.

use std::error::Error;

use deltalake::{DeltaTableError, ObjectStoreError};

/// A Delta operation on a table failed.
#[derive(Debug, thiserror::Error)]
#[error("Delta table {location}: {cause}")]
pub struct DeltaError {
    /// The table (or tables, for a query over several).
    pub location: String,
    /// What failed.
    #[source]
    pub cause: Box<dyn Error + Send + Sync>,
    /// Whether retrying after a wait may succeed ([`is_transient`] of the cause).
    pub transient: bool,
}

impl DeltaError {
    /// Wraps `cause`, classifying it by walking its chain of causes.
    pub fn new(location: &str, cause: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        let cause = cause.into();
        let transient = is_transient(cause.as_ref());
        Self { location: location.to_owned(), cause, transient }
    }
}

/// Whether an error, or any error in its chain of causes, is one that may pass on its own: an
/// object store that is unreachable, throttling or answering 5xx; a file system I/O failure
/// other than a missing file or a refused permission; a commit that lost a race. A missing
/// table, bad credentials, a schema mismatch or bad data are not.
pub fn is_transient(error: &(dyn Error + 'static)) -> bool {
    let mut next = Some(error);
    let mut innermost = error;
    while let Some(error) = next {
        innermost = error;
        if let Some(store) = error.downcast_ref::<ObjectStoreError>() {
            return object_store_is_transient(store);
        }
        // The Delta kernel keeps an object-store failure as a plain field, not as a source.
        if let Some(kernel) = error.downcast_ref::<delta_kernel::Error>() {
            match kernel {
                delta_kernel::Error::ObjectStore(store) => return object_store_is_transient(store),
                delta_kernel::Error::Reqwest(_) => return true,
                delta_kernel::Error::IOError(io) => return io_is_transient(io),
                delta_kernel::Error::Generic(message) => return stringified_store_failure(message),
                _ => {}
            }
        }
        if let Some(delta) = error.downcast_ref::<DeltaTableError>() {
            match delta {
                DeltaTableError::Transaction { .. } | DeltaTableError::VersionAlreadyExists(_) => return true,
                DeltaTableError::Generic(message) => return stringified_store_failure(message),
                DeltaTableError::SchemaMismatch { .. } | DeltaTableError::InvalidData { .. } | DeltaTableError::NotATable(_) | DeltaTableError::MissingFeature { .. } => return false,
                _ => {}
            }
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return io_is_transient(io);
        }
        next = error.source();
    }
    // No typed cause decided it. DataFusion and Parquet keep some object-store failures only
    // as the text of their innermost error (`ParquetError::General("Failed to fetch metadata
    // ...: Object Store error: ...")`), so that text is classified last.
    stringified_store_failure(&innermost.to_string())
}

/// Some delta-rs paths (listing the log, for one) turn an object-store error into text before
/// returning it, so its type is lost: the text is all there is to classify.
fn stringified_store_failure(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    // "Error interacting with object store: ..." (log listing), "Object Store error: ..." and
    // "Parquet error: External: Generic S3 error: ... error sending request" (files read
    // through DataFusion): each seen during an outage.
    let store = ["object store", "s3 error", "gcs error", "azure error", "error sending request", "connection refused"].iter().any(|marker| message.contains(marker));
    store && !message.contains("not found") && !message.contains("permission") && !message.contains("unauthenticated")
}

fn io_is_transient(error: &std::io::Error) -> bool {
    !matches!(error.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData)
}

fn object_store_is_transient(error: &ObjectStoreError) -> bool {
    !matches!(
        error,
        ObjectStoreError::NotFound { .. }
            | ObjectStoreError::InvalidPath { .. }
            | ObjectStoreError::NotSupported { .. }
            | ObjectStoreError::NotImplemented { .. }
            | ObjectStoreError::PermissionDenied { .. }
            | ObjectStoreError::Unauthenticated { .. }
            | ObjectStoreError::UnknownConfigurationKey { .. }
    )
}

#[cfg(test)]
mod tests {
    use deltalake::datafusion::error::DataFusionError;
    use deltalake::parquet;

    use super::*;

    /// Invariant: a store that cannot be reached is transient wherever it sits in the chain;
    /// refused credentials and missing objects are not.
    #[test]
    fn object_store_failures_are_classified_through_the_chain() {
        let unreachable = ObjectStoreError::Generic { store: "S3", source: "connection refused".into() };
        let wrapped = DeltaTableError::ObjectStore { source: unreachable };
        assert!(DeltaError::new("s3://b/t", wrapped).transient);
        let denied = ObjectStoreError::PermissionDenied { path: "t/_delta_log".into(), source: "403".into() };
        assert!(!DeltaError::new("s3://b/t", DeltaTableError::ObjectStore { source: denied }).transient);
    }

    /// Invariant: an object-store failure inside a Delta kernel error (kept there as a field,
    /// not a source) is found and classified.
    #[test]
    fn object_store_failures_inside_kernel_errors_are_transient() {
        let unreachable = ObjectStoreError::Generic { store: "S3", source: "connection refused".into() };
        let kernel = delta_kernel::Error::ObjectStore(unreachable);
        assert!(DeltaError::new("s3://b/t", DeltaTableError::KernelError(kernel)).transient);
        let plain = delta_kernel::Error::Generic("No files in log segment".into());
        assert!(!DeltaError::new("s3://b/t", DeltaTableError::KernelError(plain)).transient);
    }

    /// Invariant: an object-store failure delta-rs turned into text is still transient; a
    /// missing object is not.
    #[test]
    fn stringified_object_store_failures_are_transient() {
        let listed = DeltaTableError::Generic("Error interacting with object store: Generic S3 error: Error performing list request: HTTP error: error sending request".into());
        assert!(DeltaError::new("s3://b/t", listed).transient);
        let footer = DeltaTableError::Generic("Parquet error: Failed to fetch metadata for file t/x.parquet: Object Store error: Generic S3 error: HTTP error: error sending request".into());
        assert!(DeltaError::new("s3://b/t", footer).transient);
        let external = DeltaTableError::Generic("Parquet error: External: Generic S3 error: Error performing GET http://h/x.parquet - HTTP error: error sending request".into());
        assert!(DeltaError::new("s3://b/t", external).transient);
        let metadata = parquet::errors::ParquetError::General("Failed to fetch metadata for file t/x.parquet: Object Store error: Generic S3 error: Error performing GET http://h/t/x.parquet in 21s, after 10 retries - HTTP error: error sending request".into());
        let query = super::super::query::QueryFailed { sql: "SELECT 1".into(), cause: DataFusionError::ParquetError(Box::new(metadata)) };
        assert!(DeltaError::new("s3://b/t", query).transient, "a footer read through DataFusion during an outage");
        let plan = super::super::query::QueryFailed { sql: "SELECT nope".into(), cause: DataFusionError::Plan("no column nope".into()) };
        assert!(!DeltaError::new("s3://b/t", plan).transient);
        let missing = DeltaTableError::Generic("Error interacting with object store: Object at location t/x not found".into());
        assert!(!DeltaError::new("s3://b/t", missing).transient);
    }

    /// Invariant: I/O failures are transient except those no wait can cure.
    #[test]
    fn io_failures_are_transient_unless_permanent() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(DeltaError::new("/t", reset).transient);
        let missing = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        assert!(!DeltaError::new("/t", missing).transient);
    }

    /// Invariant: a schema mismatch and plain messages are not retried.
    #[test]
    fn schema_mismatch_and_messages_are_not_transient() {
        assert!(!DeltaError::new("/t", DeltaTableError::SchemaMismatch { msg: "column x".into() }).transient);
        assert!(!DeltaError::new("/t", "no Delta table there").transient);
    }
}
