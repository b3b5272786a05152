//! Appends too large to hold in memory: [`FileAppend`] writes batches into Parquet files of a
//! table as they come (no commit), and commits every file at the end in one commit carrying
//! `txn(app_id, version)`, exactly as [`Appender::append`] would have with all the rows.
//!
//! Files written before a crash and never committed are not part of the table (readers see
//! only committed files); `VACUUM` removes them.

use arrow::array::RecordBatch;
use deltalake::kernel::Add;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::DeltaTable;

use super::appender::{AppendPath, Appender};
use super::table::DeltaError;

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

    /// Commits every file written through `appender` ([`Appender::commit`]) in one commit
    /// with `txn(app_id, version)` and `metadata`: nothing twice when `version` is already in.
    pub async fn commit(self, appender: &mut Appender, app_id: &str, version: i64, metadata: impl IntoIterator<Item = (String, serde_json::Value)>) -> Result<AppendPath, DeltaError> {
        appender.commit(self.adds, app_id, version, metadata).await
    }
}
