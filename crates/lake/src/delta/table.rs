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
use deltalake::kernel::transaction::{CommitProperties, TransactionError};
use deltalake::kernel::{StructField, Transaction};
use deltalake::protocol::SaveMode;
use deltalake::operations::write::SchemaMode;
use deltalake::{DeltaTable, DeltaTableError};
use url::Url;

use super::storage::{register_object_stores, Storage};

pub use super::error::DeltaError;

fn error(location: &str, cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> DeltaError {
    DeltaError::new(location, cause)
}

/// The URL of a table location: a local path (made absolute, created if missing) or a URL.
pub fn table_url(location: &str) -> Result<Url, DeltaError> {
    register_object_stores();
    if !location.contains("://") {
        std::fs::create_dir_all(location).map_err(|e| error(location, e))?;
    }
    deltalake::ensure_table_uri(location).map_err(|e| error(location, e))
}

/// Opens the table, or `None` when there is no table there yet.
pub async fn open(location: &str, storage: &Storage) -> Result<Option<DeltaTable>, DeltaError> {
    let url = table_url(location)?;
    match deltalake::open_table_with_storage_options(url, storage.clone()).await {
        Ok(table) => Ok(Some(table)),
        Err(DeltaTableError::NotATable(_)) => Ok(None),
        Err(e) => Err(error(location, e)),
    }
}

/// Creates a table with `schema`; `comments` are stored as column comments.
pub async fn create(location: &str, storage: &Storage, schema: &SchemaRef, comments: &HashMap<&str, &str>, description: &str) -> Result<DeltaTable, DeltaError> {
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
    // No retries: a writer that loses the race for version 0 would otherwise commit its
    // metadata again as version 1, and every writer holding version 0 would then fail its
    // next append with "metadata changed". The loser opens the winner's table instead.
    let created = DeltaTable::try_from_url_with_storage_options(url, storage.clone())
        .await
        .map_err(|e| error(location, e))?
        .create()
        .with_columns(columns)
        .with_comment(description)
        .with_save_mode(SaveMode::Ignore)
        .with_commit_properties(CommitProperties::default().with_max_retries(0))
        .await;
    match created {
        Ok(table) => Ok(table),
        Err(e) => match open(location, storage).await? {
            Some(table) => {
                tracing::debug!(table = location, error = %e, "another writer created the table first");
                Ok(table)
            }
            None => Err(error(location, e)),
        },
    }
}

/// The table's protocol and metadata in their log form (the `protocol` and `metaData`
/// actions' JSON), for the checks that read fields delta-rs's kernel keeps to itself
/// (features, configuration, partition columns). `None` when the table has no snapshot.
pub fn log_form(table: &DeltaTable) -> Option<(serde_json::Value, serde_json::Value)> {
    let snapshot = table.snapshot().ok()?;
    Some((serde_json::to_value(snapshot.protocol()).ok()?, serde_json::to_value(snapshot.metadata()).ok()?))
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
    let metadata: Vec<(String, serde_json::Value)> = metadata.into_iter().collect();
    // A conflict here means another writer changed the table's metadata (a schema merge, say)
    // since this writer's snapshot; appends do not conflict with that, so a retry succeeds.
    commit_with_retries(table, app_id, version, APPEND_ATTEMPTS, std::time::Duration::ZERO, |table| {
        let properties = CommitProperties::default().with_application_transaction(Transaction::new(app_id, version)).with_metadata(metadata.clone());
        let batches = batches.clone();
        async move { table.write(batches).with_save_mode(SaveMode::Append).with_schema_mode(SchemaMode::Merge).with_commit_properties(properties).await }
    })
    .await
}

/// Runs `commit` (a write carrying `txn(app_id, version)`) and retries it, up to `attempts`
/// in all, when another writer won the commit race. Before each retry the table is read again,
/// and if `version` is recorded by then (an earlier attempt did land) nothing is written twice;
/// retry `n` waits `backoff * n` first. Any other error is returned at once.
pub async fn commit_with_retries<F, Fut>(table: DeltaTable, app_id: &str, version: i64, attempts: u32, backoff: std::time::Duration, mut commit: F) -> Result<DeltaTable, DeltaError>
where
    F: FnMut(DeltaTable) -> Fut,
    Fut: std::future::Future<Output = Result<DeltaTable, DeltaTableError>>,
{
    let location = table.table_url().to_string();
    let mut table = table;
    let mut attempt = 1;
    loop {
        match commit(table.clone()).await {
            Ok(table) => return Ok(table),
            Err(conflict) if attempt < attempts && is_conflict(&conflict) => {
                tracing::debug!(table = %location, app_id, version, attempt, error = %conflict, "commit conflicted; reloading the table");
                table.update_state().await.map_err(|e| error(&location, e))?;
                if txn_version(&table, app_id).await?.is_some_and(|v| v >= version) {
                    return Ok(table);
                }
                tokio::time::sleep(backoff * attempt).await;
                attempt += 1;
            }
            Err(e) => return Err(error(&location, e)),
        }
    }
}

/// Whether `error` is a lost commit race (another writer committed first and the conflict
/// checker refused this commit), which a retry on a fresh snapshot may resolve.
pub fn is_conflict(error: &DeltaTableError) -> bool {
    matches!(error, DeltaTableError::Transaction { source: TransactionError::CommitConflict(_) | TransactionError::MaxCommitAttempts(_) })
}

/// Appends tried before a commit conflict is an error.
pub(crate) const APPEND_ATTEMPTS: u32 = 3;

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
pub async fn optimize(location: &str, storage: &Storage, zorder: &[String], target_size: Option<u64>) -> Result<OptimizeReport, DeltaError> {
    let table = open(location, storage).await?.ok_or_else(|| error(location, "no Delta table there"))?;
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

/// Attempts of a vacuum whose start or end marker loses a commit race.
const VACUUM_ATTEMPTS: u32 = 10;

/// Deletes files no version newer than `retention_hours` needs; returns how many.
///
/// delta-rs records a vacuum as two commits around the deletes (`VACUUM START`, `VACUUM END`).
/// On a table its sink keeps writing, a copy-on-write MERGE that lands in between makes the
/// conflict checker refuse the marker ("a concurrent transaction deleted data this operation
/// read"; about every other run while silver applied a backlog). The vacuum then runs again on
/// the new version, up to [`VACUUM_ATTEMPTS`] times, 0.5 s × attempt apart (a sink commits every
/// few seconds at most): files an earlier attempt deleted are counted again as gone, nothing is
/// deleted twice.
pub async fn vacuum(location: &str, storage: &Storage, retention_hours: u64, dry_run: bool) -> Result<usize, DeltaError> {
    let mut attempt = 1;
    loop {
        let table = open(location, storage).await?.ok_or_else(|| error(location, "no Delta table there"))?;
        let run = table.vacuum().with_retention_period(chrono::Duration::hours(retention_hours as i64)).with_enforce_retention_duration(false).with_dry_run(dry_run).await;
        match run {
            Ok((_, metrics)) => return Ok(metrics.files_deleted.len()),
            Err(conflict) if attempt < VACUUM_ATTEMPTS && is_conflict(&conflict) => {
                tracing::info!(table = %location, attempt, error = %conflict, "a concurrent commit refused the vacuum's marker; vacuuming again on the new version");
                tokio::time::sleep(std::time::Duration::from_millis(500) * attempt).await;
                attempt += 1;
            }
            Err(e) => return Err(error(location, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    /// `vacuum` on a table another writer keeps rewriting (a scheduled vacuum of silver while
    /// its copy-on-write MERGE runs; here two commits every ~0.1 s) succeeds every time: a
    /// start or end marker the conflict checker refuses is run again on the new version.
    /// Without the retry, about every other vacuum of a live silver table failed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn vacuum_succeeds_while_another_writer_replaces_files() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("busy").to_str().unwrap().to_owned();
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        let mut table = create(&location, &Storage::new(), &schema, &HashMap::new(), "busy").await.unwrap();
        let row = move |k: i64| RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![k])) as _]).unwrap();
        for k in 0..4 {
            table = append(table, vec![row(k)], "w", k, []).await.unwrap();
        }
        // Each round removes one key's file and writes it again: every commit replaces files.
        let writer = tokio::spawn(async move {
            for round in 0..40i64 {
                let (kept, _) = table.delete().with_predicate(format!("k = {}", round % 4)).await.unwrap();
                table = append(kept, vec![row(round % 4)], "w", round + 4, []).await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            table
        });
        let mut deleted = 0;
        for _ in 0..10 {
            deleted += vacuum(&location, &Storage::new(), 0, false).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        }
        let table = writer.await.unwrap();
        assert!(deleted > 0, "the vacuums deleted replaced files");
        let keys: usize = table.snapshot().unwrap().log_data().num_files();
        assert_eq!(keys, 4, "one live file per key");
    }

    /// Writers that share a table (several sinks on one facts table) may all find it missing
    /// and create it at once: every one of them must then append without a conflict, each
    /// batch exactly once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writers_racing_to_create_a_table_all_append() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("shared").to_str().unwrap().to_owned();
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("writer", DataType::Int64, false)]));
        let writers: Vec<_> = (0..6i64)
            .map(|writer| {
                let (location, schema) = (location.clone(), schema.clone());
                tokio::spawn(async move {
                    let mut table = create(&location, &Storage::new(), &schema, &HashMap::new(), "race").await.unwrap();
                    for version in 0..3 {
                        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![writer]))]).unwrap();
                        table = append(table, vec![batch], &format!("w{writer}"), version, []).await.unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        let table = open(&location, &Storage::new()).await.unwrap().unwrap();
        assert_eq!(table.version(), Some(18), "one create and 6 × 3 appends, no metadata commit twice");
        for writer in 0..6 {
            assert_eq!(txn_version(&table, &format!("w{writer}")).await.unwrap(), Some(2));
        }
    }
}
