//! Delta table plumbing the sinks share: open or create a table, read an application's `txn`
//! version, and append batches in one commit that carries a `txn` action and commit metadata.
//!
//! The `txn` action is what makes appends idempotent (kafka-delta-ingest's pattern): a writer
//! records `(app_id, version)` in the same commit as its data, and on restart reads the version
//! back to know which of its batches are already in the table.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::{StructField, Transaction};
use deltalake::protocol::SaveMode;
use deltalake::operations::write::SchemaMode;
use deltalake::{DeltaTable, DeltaTableError};
use url::Url;

/// A Delta operation failed.
#[derive(Debug, thiserror::Error)]
#[error("Delta table {location}: {message}")]
pub struct DeltaError {
    /// The table.
    pub location: String,
    /// What failed.
    pub message: String,
}

fn error(location: &str, e: impl std::fmt::Display) -> DeltaError {
    DeltaError { location: location.to_owned(), message: e.to_string() }
}

/// The URL of a table location: a local path (made absolute, created if missing) or a URL.
pub fn table_url(location: &str) -> Result<Url, DeltaError> {
    if !location.contains("://") {
        std::fs::create_dir_all(location).map_err(|e| error(location, e))?;
    }
    deltalake::ensure_table_uri(location).map_err(|e| error(location, e))
}

/// Opens the table, or `None` when there is no table there yet.
pub async fn open(location: &str) -> Result<Option<DeltaTable>, DeltaError> {
    let url = table_url(location)?;
    match deltalake::open_table(url).await {
        Ok(table) => Ok(Some(table)),
        Err(DeltaTableError::NotATable(_)) => Ok(None),
        Err(e) => Err(error(location, e)),
    }
}

/// Creates a table with `schema`; `comments` are stored as column comments.
pub async fn create(location: &str, schema: &SchemaRef, comments: &HashMap<&str, &str>, description: &str) -> Result<DeltaTable, DeltaError> {
    let url = table_url(location)?;
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column: StructField = field.as_ref().try_into_kernel().map_err(|e| error(location, e))?;
        let column = match comments.get(field.name().as_str()) {
            Some(comment) => column.with_metadata([("comment", *comment)]),
            None => column,
        };
        columns.push(column);
    }
    DeltaTable::try_from_url(url)
        .await
        .map_err(|e| error(location, e))?
        .create()
        .with_columns(columns)
        .with_comment(description)
        .with_save_mode(SaveMode::Ignore)
        .await
        .map_err(|e| error(location, e))
}

/// The last version `app_id` recorded in the table's `txn` actions.
pub async fn txn_version(table: &DeltaTable, app_id: &str) -> Result<Option<i64>, DeltaError> {
    let location = table.table_url().to_string();
    let snapshot = table.snapshot().map_err(|e| error(&location, e))?;
    snapshot.transaction_version(table.log_store().as_ref(), app_id).await.map_err(|e| error(&location, e))
}

/// Appends `batches` in one commit with `txn(app_id, version)` and `metadata`; columns the
/// table lacks are added (schema evolution by merge).
pub async fn append(
    table: DeltaTable,
    batches: Vec<RecordBatch>,
    app_id: &str,
    version: i64,
    metadata: impl IntoIterator<Item = (String, serde_json::Value)>,
) -> Result<DeltaTable, DeltaError> {
    let location = table.table_url().to_string();
    let properties = CommitProperties::default().with_application_transaction(Transaction::new(app_id, version)).with_metadata(metadata);
    table
        .write(batches)
        .with_save_mode(SaveMode::Append)
        .with_schema_mode(SchemaMode::Merge)
        .with_commit_properties(properties)
        .await
        .map_err(|e| error(&location, e))
}

/// What `optimize` did.
#[derive(Debug)]
pub struct OptimizeReport {
    /// Files written.
    pub files_added: u64,
    /// Files replaced.
    pub files_removed: u64,
}

/// Compacts small files into files of about `target_size` bytes (default: the table's
/// `delta.targetFileSize`, else 100 MiB), ordered by `zorder` columns when given. Concurrent appends are not disturbed.
pub async fn optimize(location: &str, zorder: &[String], target_size: Option<u64>) -> Result<OptimizeReport, DeltaError> {
    let table = open(location).await?.ok_or_else(|| error(location, "no Delta table there"))?;
    let kind = if zorder.is_empty() {
        deltalake::operations::optimize::OptimizeType::Compact
    } else {
        deltalake::operations::optimize::OptimizeType::ZOrder(zorder.to_vec())
    };
    let mut builder = table.optimize().with_type(kind);
    if let Some(size) = target_size.and_then(std::num::NonZeroU64::new) {
        builder = builder.with_target_size(size);
    }
    let (_, metrics) = builder.await.map_err(|e| error(location, e))?;
    Ok(OptimizeReport { files_added: metrics.num_files_added, files_removed: metrics.num_files_removed })
}

/// Deletes files no version newer than `retention_hours` needs; returns how many.
pub async fn vacuum(location: &str, retention_hours: u64, dry_run: bool) -> Result<usize, DeltaError> {
    let table = open(location).await?.ok_or_else(|| error(location, "no Delta table there"))?;
    let (_, metrics) = table
        .vacuum()
        .with_retention_period(chrono::Duration::hours(retention_hours as i64))
        .with_enforce_retention_duration(false)
        .with_dry_run(dry_run)
        .await
        .map_err(|e| error(location, e))?;
    Ok(metrics.files_deleted.len())
}
