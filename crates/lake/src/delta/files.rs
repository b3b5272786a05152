//! Appends too large to hold in memory: [`FileAppend`] writes batches into Parquet files of a
//! table as they come (no commit), and commits every file at the end in one commit carrying
//! `txn(app_id, version)`, exactly as [`super::table::append`] would have with all the rows.
//!
//! Files written before a crash and never committed are not part of the table (readers see
//! only committed files); `VACUUM` removes them.

use arrow::array::RecordBatch;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, Transaction};
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::DeltaTable;

use super::table::{commit_with_retries, DeltaError, APPEND_ATTEMPTS};

/// An append written file by file, committed once.
pub struct FileAppend {
    writer: RecordBatchWriter,
    adds: Vec<Add>,
    rows: u64,
}

impl FileAppend {
    /// An append to `table`, whose schema the batches must have (columns are matched by name).
    pub fn new(table: &DeltaTable) -> Result<Self, DeltaError> {
        let writer = RecordBatchWriter::for_table(table).map_err(|e| DeltaError::new(table.table_url().as_ref(), e))?;
        Ok(Self { writer, adds: Vec::new(), rows: 0 })
    }

    /// Writes `batch` into a file of its own (finished now, so that no more than one batch is
    /// buffered).
    pub async fn write(&mut self, table: &DeltaTable, batch: RecordBatch) -> Result<(), DeltaError> {
        let location = table.table_url().to_string();
        self.rows += batch.num_rows() as u64;
        self.writer.write(batch).await.map_err(|e| DeltaError::new(&location, e))?;
        self.adds.extend(self.writer.flush().await.map_err(|e| DeltaError::new(&location, e))?);
        Ok(())
    }

    /// Files written so far.
    pub fn files(&self) -> usize {
        self.adds.len()
    }

    /// Commits every file written in one commit with `txn(app_id, version)` and `metadata`
    /// (retried on a lost commit race; nothing twice when `version` is already in).
    pub async fn commit(self, table: DeltaTable, app_id: &str, version: i64, metadata: impl IntoIterator<Item = (String, serde_json::Value)>) -> Result<DeltaTable, DeltaError> {
        let metadata: Vec<(String, serde_json::Value)> = metadata.into_iter().collect();
        let actions: Vec<Action> = self.adds.into_iter().map(Action::Add).collect();
        commit_with_retries(table, app_id, version, APPEND_ATTEMPTS, std::time::Duration::ZERO, |mut table| {
            let properties = CommitProperties::default().with_application_transaction(Transaction::new(app_id, version)).with_metadata(metadata.clone());
            let actions = actions.clone();
            async move {
                let operation = DeltaOperation::Write { mode: SaveMode::Append, partition_by: None, predicate: None };
                let log_store = table.log_store();
                CommitBuilder::from(properties).with_actions(actions).build(Some(table.snapshot()?), log_store, operation).await?;
                table.update_state().await?;
                Ok(table)
            }
        })
        .await
    }
}
