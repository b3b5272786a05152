//! [`Appender`]: appends whose cost does not grow with the table.
//!
//! delta-rs keeps a table's whole file list in memory and brings it up to date after every
//! commit; bringing it up to date re-reads the statistics of every file the table holds. A
//! sink that appends one commit per batch to a table that only grows (bronze, the facts) paid
//! that on each commit: measured on the `bench` report's steady phase, 41% of bronze's CPU went
//! to it, after only ~150 commits.
//!
//! An [`Appender`] writes the files with delta-rs's Parquet writer and commits their `add`
//! actions, with the `txn` and the commit metadata, as the next log entry (`_delta_log/<n>.json`,
//! put only if absent, through the table's log store) without reading the table again. It
//! knows the version it wrote last; the entry after it is free unless another writer took it:
//!
//! - **Another writer committed first** (the entry exists; several sinks share a facts table):
//!   the winning entries are read. Files and `txn`s only: the append commutes with them and
//!   takes the entry after the newest. This append's own `txn` (an earlier attempt landed):
//!   nothing is written twice. A schema or protocol change among them: the table is read
//!   again and the rows are written again through delta-rs's write path for the table as it
//!   now is (files already written for the old schema, as a large batch's are, are not
//!   committed: the append fails as transient and the stage writes them again).
//! - **Rows whose layout is not the table's** (a new column, a widened type), a table whose
//!   protocol asks writers for more than appending files (constraints, column mapping, generated
//!   or identity columns, row tracking, in-commit timestamps), or a log store that commits by
//!   renaming a temporary file (S3 with a locking table) rather than by a conditional put:
//!   delta-rs's write path, as before.
//! - **Every `delta.checkpointInterval` commits** (100 by default) the table is read once and
//!   a checkpoint written, as delta-rs's own commits do, with expired log entries removed where
//!   the table asks for it.
//!
//! So the file list is read once per checkpoint interval instead of once per commit.

use std::collections::HashMap;

use arrow::array::RecordBatch;
use deltalake::kernel::transaction::{CommitBuilder, CommitData, CommitProperties, TransactionError, PROTOCOL};
use deltalake::kernel::{Action, Add, Transaction};
use deltalake::logstore::CommitOrBytes;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::{DeltaTable, DeltaTableError};

use super::table::{self, DeltaError};

/// Writer features (protocol 3/7) that only ask a writer of new files what this module does.
const PLAIN_APPEND_FEATURES: &[&str] = &["appendOnly", "timestampNtz", "deletionVectors", "typeWidening", "typeWidening-preview", "domainMetadata", "vacuumProtocolCheck"];

/// Entries tried blindly before an append goes through delta-rs's commit (each one lost to
/// another writer's append).
const BLIND_ATTEMPTS: usize = 8;

/// What other writers committed since this writer's last commit ([`Appender::winners`]).
enum Winners {
    /// Only files and `txn`s; `latest` is the newest version.
    Appends { latest: i64 },
    /// This append's `txn` among them, already in, and no schema or protocol change.
    Ours { latest: i64 },
    /// A schema or protocol change at `version`.
    Changed { version: i64 },
}

/// How an append was committed (for tests and debug logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendPath {
    /// As the next log entry, without reading the table.
    Blind,
    /// Through delta-rs's write or commit path (the table was read).
    Library,
    /// Not at all: the `txn` was already in the table.
    AlreadyIn,
}

/// A table one writer appends to, committing without re-reading it ([module docs](self)).
pub struct Appender {
    table: DeltaTable,
    /// The last version this writer knows to be committed (its own, or read).
    version: i64,
    /// What the table as last read allows and holds, worked out once per read.
    read: TableRead,
}

/// What an [`Appender`] takes from the table each time it reads it.
struct TableRead {
    /// Whether blind appends are allowed ([`blind_appends_allowed`]).
    blind: bool,
    /// The table's Arrow schema (`None`: not convertible, so no batch has its layout).
    schema: Option<arrow::datatypes::Schema>,
    /// `delta.checkpointInterval` (default 100).
    checkpoint_interval: u64,
    /// `delta.enableExpiredLogCleanup` (default true).
    log_cleanup: bool,
}

impl TableRead {
    fn of(table: &DeltaTable) -> Self {
        let log_form = super::table::log_form(table);
        let configuration = log_form.as_ref().map(|(_, metadata)| metadata["configuration"].clone()).unwrap_or_default();
        Self {
            blind: log_form.as_ref().is_some_and(|(protocol, metadata)| blind_appends_allowed(table, protocol, metadata)),
            schema: super::evolve::arrow_schema(table).ok(),
            checkpoint_interval: configuration["delta.checkpointInterval"].as_str().and_then(|v| v.parse::<u64>().ok()).filter(|v| *v > 0).unwrap_or(100),
            log_cleanup: configuration["delta.enableExpiredLogCleanup"].as_str().is_none_or(|v| !v.eq_ignore_ascii_case("false")),
        }
    }
}

impl Appender {
    /// Appends to `table`, as loaded.
    pub fn new(table: DeltaTable) -> Self {
        Self::resume(table, -1)
    }

    /// The table as last read: its schema, protocol and configuration are current unless
    /// another writer changed them (which the next commit finds out); its file list may be
    /// behind.
    pub fn table(&self) -> &DeltaTable {
        &self.table
    }

    /// The version of this writer's last commit (or of the table as last read).
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The table, for an operation of its own; give it back with [`Appender::resume`].
    pub fn into_table(self) -> (DeltaTable, i64) {
        (self.table, self.version)
    }

    /// Appends to `table` again after an operation made outside (say a schema change), knowing
    /// that `version` was committed before it.
    pub fn resume(table: DeltaTable, version: i64) -> Self {
        let version = table.version().map_or(-1, |v| v as i64).max(version);
        Self { read: TableRead::of(&table), table, version }
    }

    /// Appends `batches` in one commit with `txn(app_id, txn_version)` and `metadata`; columns
    /// the table lacks are added (through delta-rs's write path, which merges the schema).
    pub async fn append(&mut self, batches: Vec<RecordBatch>, app_id: &str, txn_version: i64, metadata: impl IntoIterator<Item = (String, serde_json::Value)>) -> Result<AppendPath, DeltaError> {
        let metadata: Vec<(String, serde_json::Value)> = metadata.into_iter().collect();
        if self.read.blind && batches.iter().all(|batch| self.has_layout(batch)) {
            let location = self.table.table_url().to_string();
            let mut writer = RecordBatchWriter::for_table(&self.table).map_err(|e| DeltaError::new(&location, e))?;
            for batch in &batches {
                writer.write(batch.clone()).await.map_err(|e| DeltaError::new(&location, e))?;
            }
            let adds = writer.flush().await.map_err(|e| DeltaError::new(&location, e))?;
            if let Some(path) = self.try_blind(&adds, app_id, txn_version, &metadata.iter().cloned().collect()).await? {
                return Ok(path);
            }
            // Another writer changed the schema or protocol: the files written for the old
            // one are left uncommitted (VACUUM removes them), and the rows written again.
            if self.read_again_holds(app_id, txn_version).await? {
                return Ok(AppendPath::AlreadyIn);
            }
        }
        let table = table::append(self.table.clone(), batches, app_id, txn_version, metadata).await?;
        self.adopt(table);
        Ok(AppendPath::Library)
    }

    /// Commits `adds` (files already written for this table) in one commit with
    /// `txn(app_id, txn_version)` and `metadata`. If another writer changed the table's schema
    /// or protocol since the files were written, nothing is committed and the error is
    /// transient: a restart writes them again for the table as it is.
    pub async fn commit(&mut self, adds: Vec<Add>, app_id: &str, txn_version: i64, metadata: impl IntoIterator<Item = (String, serde_json::Value)>) -> Result<AppendPath, DeltaError> {
        let metadata: HashMap<String, serde_json::Value> = metadata.into_iter().collect();
        let location = self.table.table_url().to_string();
        let written_for = self.read.schema.clone().ok_or_else(|| DeltaError::new(&location, "the table's schema has no Arrow form: files cannot be checked against it"))?;
        if let Some(path) = self.try_blind(&adds, app_id, txn_version, &metadata).await? {
            return Ok(path);
        }
        self.commit_read(adds, written_for, app_id, txn_version, metadata).await
    }

    /// The blind commit ([module docs](self)); `None` when it cannot be made: the table's
    /// protocol or log store does not allow it, another writer changed the schema or protocol,
    /// or every attempt lost its entry to another writer.
    async fn try_blind(&mut self, adds: &[Add], app_id: &str, txn_version: i64, metadata: &HashMap<String, serde_json::Value>) -> Result<Option<AppendPath>, DeltaError> {
        if !self.read.blind {
            return Ok(None);
        }
        let location = self.table.table_url().to_string();
        let mut next = self.version + 1;
        for _ in 0..BLIND_ATTEMPTS {
            match self.put_entry(next, adds, app_id, txn_version, metadata).await {
                Ok(()) => {
                    self.version = next;
                    self.after_commit().await;
                    return Ok(Some(AppendPath::Blind));
                }
                Err(TransactionError::VersionAlreadyExists(_)) => {}
                Err(error) => return Err(DeltaError::new(&location, DeltaTableError::from(error))),
            }
            match self.winners(next, app_id, txn_version).await? {
                Winners::Appends { latest } => next = latest + 1,
                Winners::Ours { latest } => {
                    self.version = latest;
                    return Ok(Some(AppendPath::AlreadyIn));
                }
                Winners::Changed { version } => {
                    tracing::debug!(table = %location, version, "another writer changed the table's schema or protocol: reading it again");
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }

    /// What the commits from `from` to the latest hold (another writer's, made since this
    /// writer's last): a schema or protocol change anywhere among them (the files may no
    /// longer fit, and this writer's view of the table is out of date), else `app_id`'s `txn`
    /// at `txn_version` or later (the append is in already), else files and `txn`s only (a
    /// blind append commutes with them).
    async fn winners(&self, from: i64, app_id: &str, txn_version: i64) -> Result<Winners, DeltaError> {
        let location = self.table.table_url().to_string();
        let log_store = self.table.log_store();
        let latest = log_store.get_latest_version(from as u64).await.map_err(|e| DeltaError::new(&location, e))? as i64;
        let mut ours = false;
        for version in from..=latest {
            let Some(entry) = log_store.read_commit_entry(version as u64).await.map_err(|e| DeltaError::new(&location, e))? else { continue };
            for line in entry.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
                let action: serde_json::Value = serde_json::from_slice(line).map_err(|e| DeltaError::new(&location, e))?;
                if action.get("metaData").is_some() || action.get("protocol").is_some() {
                    return Ok(Winners::Changed { version });
                }
                if let Some(txn) = action.get("txn") {
                    ours |= txn["appId"].as_str() == Some(app_id) && txn["version"].as_i64().is_some_and(|v| v >= txn_version);
                }
            }
        }
        Ok(if ours { Winners::Ours { latest } } else { Winners::Appends { latest } })
    }

    /// The commit through delta-rs, on the table read again: the `txn` respected, lost races
    /// retried ([`table::commit_with_retries`]). Files written for a schema other than the
    /// table's current one (`written_for`) are not committed: a transient error.
    async fn commit_read(&mut self, adds: Vec<Add>, written_for: arrow::datatypes::Schema, app_id: &str, txn_version: i64, metadata: HashMap<String, serde_json::Value>) -> Result<AppendPath, DeltaError> {
        let location = self.table.table_url().to_string();
        if self.read_again_holds(app_id, txn_version).await? {
            return Ok(AppendPath::AlreadyIn);
        }
        if self.read.schema.as_ref().map(|s| s.fields()) != Some(written_for.fields()) {
            return Err(DeltaError { location, cause: "another writer changed the table's schema while files were written for it: they are left uncommitted and written again".into(), transient: true });
        }
        let actions: Vec<Action> = adds.into_iter().map(Action::Add).collect();
        let committed = table::commit_with_retries(self.table.clone(), app_id, txn_version, table::APPEND_ATTEMPTS, std::time::Duration::ZERO, |mut table| {
            let properties = CommitProperties::default().with_application_transaction(Transaction::new(app_id, txn_version)).with_metadata(metadata.clone());
            let actions = actions.clone();
            async move {
                let log_store = table.log_store();
                CommitBuilder::from(properties).with_actions(actions).build(Some(table.snapshot()?), log_store, append_operation()).await?;
                table.update_state().await?;
                Ok(table)
            }
        })
        .await?;
        self.adopt(committed);
        Ok(AppendPath::Library)
    }

    /// Reads the table again and takes it; whether `app_id`'s `txn` is in it at `txn_version`
    /// or later (an earlier attempt of this append landed).
    async fn read_again_holds(&mut self, app_id: &str, txn_version: i64) -> Result<bool, DeltaError> {
        self.table.update_state().await.map_err(|e| DeltaError::new(self.table.table_url().as_str(), e))?;
        let held = table::txn_version(&self.table, app_id).await?.is_some_and(|v| v >= txn_version);
        self.adopt(self.table.clone());
        Ok(held)
    }

    /// Puts the log entry `version`: the commit info, the files, the `txn`. Fails with
    /// [`TransactionError::VersionAlreadyExists`] when the entry is there already.
    async fn put_entry(&self, version: i64, adds: &[Add], app_id: &str, txn_version: i64, metadata: &HashMap<String, serde_json::Value>) -> Result<(), TransactionError> {
        let actions: Vec<Action> = adds.iter().cloned().map(Action::Add).collect();
        let data = CommitData::new(actions, append_operation(), metadata.clone(), vec![Transaction::new(app_id, txn_version)]);
        if let Ok(snapshot) = self.table.snapshot() {
            PROTOCOL.can_commit(snapshot, &data.actions, &data.operation)?;
        }
        let bytes = data.get_bytes()?;
        let log_store = self.table.log_store();
        let operation_id = uuid::Uuid::new_v4();
        // A conditional put of the entry's bytes (stores that rename a temporary file take
        // delta-rs's path: `blind_appends_allowed`).
        let entry = CommitOrBytes::LogBytes(bytes);
        let version = version as u64;
        match log_store.write_commit_entry(version, entry.clone(), operation_id).await {
            Ok(()) => Ok(()),
            Err(TransactionError::VersionAlreadyExists(v)) => {
                log_store.abort_commit_entry(version, entry, operation_id).await?;
                Err(TransactionError::VersionAlreadyExists(v))
            }
            Err(error) => {
                log_store.abort_commit_entry(version, entry, operation_id).await?;
                Err(error)
            }
        }
    }

    /// After a blind commit: every `delta.checkpointInterval` versions, the table is read and a
    /// checkpoint written (and expired log entries removed where the table asks for it). A
    /// failure is logged, not returned: the commit is in, and the next interval tries again.
    async fn after_commit(&mut self) {
        let (interval, cleanup) = (self.read.checkpoint_interval, self.read.log_cleanup);
        if !(self.version as u64 + 1).is_multiple_of(interval) {
            return;
        }
        let location = self.table.table_url().to_string();
        let result = async {
            self.table.update_incremental(Some(self.version as u64)).await?;
            self.read = TableRead::of(&self.table);
            deltalake::checkpoints::create_checkpoint(&self.table, None).await?;
            if cleanup {
                deltalake::checkpoints::cleanup_metadata(&self.table, None).await?;
            }
            Ok::<_, DeltaTableError>(())
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(table = %location, version = self.version, error = %error, "writing a checkpoint failed (the commit is in; the next interval tries again)");
        }
    }

    /// Takes `table` (just read or written through delta-rs) as the one appended to.
    fn adopt(&mut self, table: DeltaTable) {
        self.version = table.version().map_or(-1, |v| v as i64).max(self.version);
        self.read = TableRead::of(&table);
        self.table = table;
    }

    /// Whether `batch` has the table's columns, in order, with their types.
    fn has_layout(&self, batch: &RecordBatch) -> bool {
        let Some(table) = &self.read.schema else { return false };
        let batch = batch.schema();
        table.fields().len() == batch.fields().len() && table.fields().iter().zip(batch.fields()).all(|(t, b)| t.name() == b.name() && t.data_type() == b.data_type())
    }
}

/// Whether the table's protocol asks a writer of new files for nothing beyond the files:
/// no invariants, constraints, generated or identity columns, column mapping, row tracking
/// or in-commit timestamps. `protocol` and `metadata` are the table's log form
/// ([`super::table::log_form`]).
fn blind_appends_allowed(table: &DeltaTable, protocol: &serde_json::Value, metadata: &serde_json::Value) -> bool {
    let Ok(snapshot) = table.snapshot() else { return false };
    if PROTOCOL.can_write_to(snapshot).is_err() {
        return false;
    }
    let plain_features = match protocol["minWriterVersion"].as_i64() {
        Some(0..=2) => true,
        Some(7) => protocol["writerFeatures"].as_array().is_some_and(|features| features.iter().all(|f| f.as_str().is_some_and(|f| PLAIN_APPEND_FEATURES.contains(&f)))),
        _ => false,
    };
    let invariants = metadata["schemaString"].as_str().is_none_or(|schema| schema.contains("delta.invariants"));
    let constraints = metadata["configuration"].as_object().is_some_and(|config| config.keys().any(|key| key.starts_with("delta.constraints.")));
    plain_features && !invariants && !constraints && table.log_store().name() == "DefaultLogStore"
}

/// A blind append's operation in the log (what delta-rs's appends record).
fn append_operation() -> DeltaOperation {
    DeltaOperation::Write { mode: SaveMode::Append, partition_by: None, predicate: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::query::query;
    use crate::delta::storage::Storage;
    use crate::delta::table::{create, open, txn_version};
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("note", DataType::Utf8, true)]))
    }

    fn rows(ids: std::ops::Range<i64>) -> RecordBatch {
        let notes: Vec<String> = ids.clone().map(|id| format!("row {id}")).collect();
        RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(ids.collect::<Vec<_>>())), Arc::new(StringArray::from(notes))]).unwrap()
    }

    /// One row with a column the table lacks (`extra`).
    fn row_with_a_new_column() -> RecordBatch {
        let wider = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("note", DataType::Utf8, true), Field::new("extra", DataType::Int64, true)]));
        RecordBatch::try_new(wider, vec![Arc::new(Int64Array::from(vec![9])), Arc::new(StringArray::from(vec!["x"])), Arc::new(Int64Array::from(vec![1]))]).unwrap()
    }

    async fn count(location: &str) -> i64 {
        let table = open(location, &Storage::new()).await.unwrap().unwrap();
        let counted = query(&[("t", &table)], "SELECT COUNT(*) FROM t").await.unwrap();
        counted[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0)
    }

    async fn new_table(dir: &tempfile::TempDir) -> (String, DeltaTable) {
        let location = dir.path().join("t").to_str().unwrap().to_owned();
        let table = create(&location, &Storage::new(), &schema(), &HashMap::new(), "appender").await.unwrap();
        (location, table)
    }

    /// Invariant: a blind append is an ordinary Delta commit: a fresh reader sees its rows, its
    /// `txn`, its commit metadata and its files' statistics (which prune reads by value).
    #[tokio::test]
    async fn blind_appends_are_ordinary_commits_with_txn_metadata_and_stats() {
        let dir = tempfile::tempdir().unwrap();
        let (location, table) = new_table(&dir).await;
        let mut appender = Appender::new(table);
        for version in 1..=3 {
            let path = appender.append(vec![rows(version * 10..version * 10 + 5)], "app", version, [("mssql_cdc.batch_id".to_owned(), serde_json::json!(version))]).await.unwrap();
            assert_eq!(path, AppendPath::Blind, "version {version}");
        }
        assert_eq!(appender.version(), 3);
        let table = open(&location, &Storage::new()).await.unwrap().unwrap();
        assert_eq!(table.version(), Some(3));
        assert_eq!(txn_version(&table, "app").await.unwrap(), Some(3));
        assert_eq!(count(&location).await, 15);
        let entry = std::fs::read_to_string(dir.path().join("t/_delta_log/00000000000000000002.json")).unwrap();
        assert!(entry.contains(r#""mssql_cdc.batch_id":2"#), "commit metadata kept: {entry}");
        let add: serde_json::Value = entry.lines().filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok()).find_map(|action| action.get("add").cloned()).unwrap();
        let stats: serde_json::Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
        assert_eq!((stats["numRecords"].as_i64(), stats["minValues"]["id"].as_i64(), stats["maxValues"]["id"].as_i64()), (Some(5), Some(20), Some(24)), "file statistics kept: {entry}");
        assert!(entry.contains(r#""operation":"WRITE""#), "{entry}");
    }

    /// Invariant: when another writer took the next entry, the append neither overwrites it nor
    /// lands twice: after plain appends it takes the entry after them; when its own `txn` is in
    /// already, it writes nothing; after a schema change it goes through delta-rs's commit.
    #[tokio::test]
    async fn a_lost_entry_is_resolved_by_what_the_winners_hold() {
        let dir = tempfile::tempdir().unwrap();
        let (location, table) = new_table(&dir).await;
        let mut a = Appender::new(table.clone());
        let mut b = Appender::new(table.clone());
        assert_eq!(a.append(vec![rows(0..2)], "a", 1, []).await.unwrap(), AppendPath::Blind);
        // b still believes version 0 is the latest: it loses entry 1 to a's plain append.
        assert_eq!(b.append(vec![rows(2..5)], "b", 1, []).await.unwrap(), AppendPath::Blind);
        assert_eq!(b.version(), 2);
        assert_eq!(count(&location).await, 5);
        // A writer that retries an append that landed already (same app, same txn version).
        let mut again = Appender::new(table.clone());
        assert_eq!(again.append(vec![rows(0..2)], "a", 1, []).await.unwrap(), AppendPath::AlreadyIn);
        assert_eq!(count(&location).await, 5, "nothing written twice");
        // Another writer adds a column: a's next append reads the table and commits through delta-rs.
        let batch = row_with_a_new_column();
        assert_eq!(b.append(vec![batch], "b", 2, []).await.unwrap(), AppendPath::Library, "a new column goes through delta-rs's write");
        assert_eq!(a.append(vec![rows(5..6)], "a", 2, []).await.unwrap(), AppendPath::Library);
        let table = open(&location, &Storage::new()).await.unwrap().unwrap();
        assert_eq!((txn_version(&table, "a").await.unwrap(), txn_version(&table, "b").await.unwrap()), (Some(2), Some(2)));
        assert_eq!(count(&location).await, 7);
    }

    /// Invariant: files written for a schema another writer has since changed are never
    /// committed under the new one: the commit fails as transient (the stage writes them
    /// again), and the table is as the other writer left it.
    #[tokio::test]
    async fn files_written_for_an_old_schema_are_not_committed() {
        let dir = tempfile::tempdir().unwrap();
        let (location, table) = new_table(&dir).await;
        let mut appender = Appender::new(table.clone());
        let mut writer = RecordBatchWriter::for_table(appender.table()).unwrap();
        writer.write(rows(0..3)).await.unwrap();
        let adds = writer.flush().await.unwrap();
        let batch = row_with_a_new_column();
        crate::delta::table::append(table, vec![batch], "other", 1, []).await.unwrap();
        let error = appender.commit(adds, "app", 1, []).await.unwrap_err();
        assert!(error.transient, "{error}");
        assert_eq!(count(&location).await, 1, "only the other writer's row");
        let table = open(&location, &Storage::new()).await.unwrap().unwrap();
        assert_eq!(txn_version(&table, "app").await.unwrap(), None);
        // Written again for the table as it is, the rows go in.
        assert_eq!(appender.append(vec![rows(0..3)], "app", 1, []).await.unwrap(), AppendPath::Library);
        assert_eq!(count(&location).await, 4);
    }

    /// Invariant: blind appends keep the log readable in bounded time: a checkpoint is written
    /// every `delta.checkpointInterval` (100) versions, as delta-rs's own commits do.
    #[tokio::test]
    async fn a_checkpoint_is_written_every_interval() {
        let dir = tempfile::tempdir().unwrap();
        let (location, table) = new_table(&dir).await;
        let mut appender = Appender::new(table);
        for version in 1..=100 {
            assert_eq!(appender.append(vec![rows(version..version + 1)], "app", version, []).await.unwrap(), AppendPath::Blind);
        }
        assert!(dir.path().join("t/_delta_log/00000000000000000099.checkpoint.parquet").exists(), "checkpoint at version 99");
        assert_eq!(count(&location).await, 100);
        let table = open(&location, &Storage::new()).await.unwrap().unwrap();
        assert_eq!(txn_version(&table, "app").await.unwrap(), Some(100));
    }
}
