//! [`Tail`]: following a table that grows by appends, from its log entries alone.
//!
//! Silver follows two tables that only grow: the facts table (which batches are in) and bronze
//! (their rows). Each step needs the rows of a few new batches. Reading them through delta-rs
//! means bringing the table's file list up to date first, and delta-rs does that by replaying
//! every file of the table, statistics included: measured in the `bench` report's steady
//! phase, that replay was a third of silver's CPU, and its cost grows with the table.
//!
//! A [`Tail`] keeps only the files that may still hold rows its follower needs, each with the
//! range of one integer column (the batch id) from its statistics. It learns of new files by
//! reading the log entries after the last one it read (`_delta_log/<n>.json`, one object-store
//! GET each) until one is missing, and reads rows straight from the Parquet files whose range
//! meets the range asked for. Entries are followed as Delta defines them: an `add` brings a
//! file (a compaction's rewrite included), a `remove` takes one away.
//!
//! What a tail does not follow sends it back to the table, which is read again through
//! delta-rs and the kept files taken from its file list:
//!
//! - a `metaData` or `protocol` action (a new column, a new table feature);
//! - a log entry missing while newer ones exist (log cleanup ran past the tail);
//! - a table whose files cannot be read as plain Parquet: column mapping, partition columns,
//!   or a file with a deletion vector. Such a table is read through delta-rs's scan instead.
//!
//! # Example
//!
//! ```no_run
//! # async fn example(table: deltalake::DeltaTable) -> Result<(), mssql_cdc_lake::delta::error::DeltaError> {
//! use mssql_cdc_lake::delta::tail::Tail;
//! let mut tail = Tail::new(table, "_batch_id")?;
//! tail.refresh().await?;
//! let rows = tail.rows(10, 20).await?; // rows with 10 < _batch_id <= 20
//! tail.release(|file| file.range.is_none_or(|(_, max)| max > 20));
//! # Ok(()) }
//! ```

use std::sync::Arc;

use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::compute::kernels::cmp::{gt, lt_eq};
use arrow::datatypes::{DataType, SchemaRef};
#[allow(deprecated)] // the object-store reader delta-rs itself builds on
use deltalake::parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStream, ParquetRecordBatchStreamBuilder};
use deltalake::parquet::errors::ParquetError;
use deltalake::{DeltaTable, ObjectStore, Path};
use futures::{StreamExt, TryStreamExt};

use super::error::DeltaError;
use super::query::{ident, query};

/// Reader features whose tables' files are plain Parquet (a file's deletion vector, if any,
/// is checked file by file).
const PLAIN_READ_FEATURES: &[&str] = &["deletionVectors", "timestampNtz", "typeWidening", "typeWidening-preview", "vacuumProtocolCheck", "v2Checkpoint"];

/// Files read at once.
const READ_CONCURRENCY: usize = 4;

/// A file that may hold rows the follower still needs.
#[derive(Clone, Debug, PartialEq)]
pub struct TailFile {
    /// Its path under the table's root.
    pub path: Path,
    /// Its size in bytes.
    pub size: u64,
    /// The least and greatest value of the tail's column in it: from its statistics, else
    /// from its rows once read; `None` until known.
    pub range: Option<(i64, i64)>,
    /// Its statistics (`numRecords`, `minValues`, `maxValues`, `nullCount`), when the log has them.
    pub stats: Option<serde_json::Value>,
}

impl TailFile {
    /// The file's only value of text column `column`, when its statistics say every row has
    /// the same one.
    pub fn only_text(&self, column: &str) -> Option<&str> {
        let stats = self.stats.as_ref()?;
        let (min, max) = (stats["minValues"][column].as_str()?, stats["maxValues"][column].as_str()?);
        let no_nulls = stats["nullCount"][column].as_i64() == Some(0);
        (min == max && no_nulls).then_some(min)
    }

    fn new(path: Path, size: u64, stats: Option<serde_json::Value>, column: &str) -> Self {
        let range = stats.as_ref().and_then(|stats| Some((stats["minValues"][column].as_i64()?, stats["maxValues"][column].as_i64()?)));
        Self { path, size, range, stats }
    }

    fn meets(&self, after: i64, up_to: i64) -> bool {
        self.range.is_none_or(|(min, max)| max > after && min <= up_to)
    }
}

/// What one log entry asks of the tail.
enum Entry {
    /// Files added and removed.
    Files { added: Vec<TailFile>, removed: Vec<Path>, plain: bool },
    /// Something only a fresh read of the table follows.
    Reload(&'static str),
}

/// An append-only table followed by its log ([module docs](self)).
pub struct Tail {
    table: DeltaTable,
    column: String,
    /// The last log entry read.
    version: i64,
    schema: SchemaRef,
    files: Vec<TailFile>,
    /// Whether every kept file can be read as plain Parquet.
    plain: bool,
}

impl Tail {
    /// Follows `table` (as loaded) by integer column `column`, keeping every file it holds
    /// (narrow them with [`Tail::release`]).
    pub fn new(table: DeltaTable, column: &str) -> Result<Self, DeltaError> {
        let mut tail = Self { table, column: column.to_owned(), version: -1, schema: Arc::new(arrow::datatypes::Schema::empty()), files: Vec::new(), plain: false };
        tail.seed()?;
        Ok(tail)
    }

    /// The table as last read through delta-rs (its file list may be behind the tail).
    pub fn table(&self) -> &DeltaTable {
        &self.table
    }

    /// The last log entry read.
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The table's schema as of the last entry read: the rows' schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The files kept.
    pub fn files(&self) -> &[TailFile] {
        &self.files
    }

    /// Reads the log entries committed since the last one read.
    pub async fn refresh(&mut self) -> Result<(), DeltaError> {
        let log_store = self.table.log_store();
        let mut looked_for_newer = false;
        loop {
            let next = self.version + 1;
            let entry = log_store.read_commit_entry(next as u64).await.map_err(|e| self.error(e))?;
            let Some(entry) = entry else {
                if looked_for_newer {
                    return self.reload("a log entry is missing while newer ones exist").await;
                }
                // The newest, unless log cleanup removed entries the tail had not read.
                match log_store.get_latest_version(self.version as u64).await {
                    Ok(latest) if latest as i64 <= self.version => return Ok(()),
                    Ok(_) => {
                        looked_for_newer = true;
                        continue;
                    }
                    Err(_) => return self.reload("the last log entry read is gone").await,
                }
            };
            looked_for_newer = false;
            match self.parse(&entry, next)? {
                Entry::Files { added, removed, plain } => {
                    // An `add` of a path the table holds replaces its entry (new statistics, say).
                    self.files.retain(|file| !removed.contains(&file.path) && !added.iter().any(|new| new.path == file.path));
                    self.files.extend(added);
                    self.plain &= plain;
                    self.version = next;
                }
                Entry::Reload(reason) => return self.reload(reason).await,
            }
        }
    }

    /// The rows whose column lies in `(after, up_to]`, in the table's current schema (columns
    /// a file lacks are null). Reads only the kept files whose range meets it, straight from
    /// Parquet, several at once; a table that is not plain Parquet is read through delta-rs's scan.
    pub async fn rows(&mut self, after: i64, up_to: i64) -> Result<Vec<RecordBatch>, DeltaError> {
        if let Some(rows) = self.scanned(after, up_to).await? {
            return Ok(rows);
        }
        let store = self.table.log_store().object_store(None);
        let wanted: Vec<usize> = (0..self.files.len()).filter(|&i| self.files[i].meets(after, up_to)).collect();
        // Futures collected first: a closure inside the stream would make it less general than `Send` needs.
        let jobs: Vec<_> = wanted.iter().map(|&i| read_file(store.clone(), self.files[i].path.clone(), self.files[i].size, self.schema.clone(), self.column.clone())).collect();
        let reads = futures::stream::iter(jobs).buffered(READ_CONCURRENCY).try_collect::<Vec<_>>().await.map_err(|e| self.error(e))?;
        let mut rows = Vec::new();
        for (&i, (batches, range)) in wanted.iter().zip(reads) {
            self.files[i].range = self.files[i].range.or(range);
            for batch in batches {
                let within = within(&batch, &self.column, after, up_to).map_err(|e| self.error(e))?;
                if within.num_rows() > 0 {
                    rows.push(within);
                }
            }
        }
        Ok(rows)
    }

    /// The same rows as [`Tail::rows`], handed to `each` as they are decoded instead of
    /// collected: one file at a time, a Parquet reader's batch at a time, so a caller that
    /// keeps only some of them holds one row group's encoded pages and what it keeps (a table
    /// that is not plain Parquet is still read whole first, through delta-rs's scan). `each`
    /// never sees an empty batch; its error stops the read.
    pub async fn visit(&mut self, after: i64, up_to: i64, mut each: impl FnMut(RecordBatch) -> Result<(), arrow::error::ArrowError>) -> Result<(), DeltaError> {
        if let Some(rows) = self.scanned(after, up_to).await? {
            return rows.into_iter().try_for_each(|batch| each(batch).map_err(|e| self.error(e)));
        }
        let store = self.table.log_store().object_store(None);
        let wanted: Vec<usize> = (0..self.files.len()).filter(|&i| self.files[i].meets(after, up_to)).collect();
        for i in wanted {
            let mut stream = open_file(store.clone(), self.files[i].path.clone(), self.files[i].size).await.map_err(|e| self.error(e))?;
            let mut range = None;
            while let Some(batch) = stream.try_next().await.map_err(|e| self.error(e))? {
                let batch = conform(&batch, &self.schema).map_err(|e| self.error(e))?;
                range = widened(range, column_range(&batch, &self.column));
                let within = within(&batch, &self.column, after, up_to).map_err(|e| self.error(e))?;
                if within.num_rows() > 0 {
                    each(within).map_err(|e| self.error(e))?;
                }
            }
            self.files[i].range = self.files[i].range.or(range);
        }
        Ok(())
    }

    /// For a table that is not plain Parquet: its rows in `(after, up_to]` through delta-rs's
    /// scan, in the table's schema. `None` for a plain table (read file by file instead).
    async fn scanned(&mut self, after: i64, up_to: i64) -> Result<Option<Vec<RecordBatch>>, DeltaError> {
        if !self.plain {
            self.reload("files that are not plain Parquet").await?;
        }
        if self.plain {
            return Ok(None);
        }
        let sql = format!("SELECT * FROM t WHERE {c} > {after} AND {c} <= {up_to}", c = ident(&self.column));
        // delta-rs's scan may return string views and partition columns last: the table's schema, as promised.
        let rows = query(&[("t", &self.table)], &sql).await?;
        let rows: Vec<RecordBatch> = rows.iter().map(|batch| conform(batch, &self.schema)).collect::<Result<_, _>>().map_err(|e| self.error(e))?;
        Ok(Some(rows.into_iter().filter(|batch| batch.num_rows() > 0).collect()))
    }

    /// Reads the table again through delta-rs (its newest commit, say), keeping every file it
    /// holds again (narrow them with [`Tail::release`]).
    pub async fn read_again(&mut self) -> Result<(), DeltaError> {
        self.reload("asked for").await
    }

    /// Keeps only the files `keep` says may still be needed.
    pub fn release(&mut self, keep: impl FnMut(&TailFile) -> bool) {
        self.files.retain(keep);
    }

    /// Reads the table again through delta-rs and takes the kept files from its file list.
    async fn reload(&mut self, reason: &'static str) -> Result<(), DeltaError> {
        tracing::debug!(table = %self.table.table_url(), version = self.version, reason, "reading the table again");
        if let Err(error) = self.table.update_state().await {
            // A log the incremental update cannot bridge (entries removed after a checkpoint
            // it would start from): the table loaded afresh from its latest checkpoint.
            tracing::debug!(table = %self.table.table_url(), error = %error, "loading the table afresh");
            let mut fresh = DeltaTable::new(self.table.log_store());
            fresh.load().await.map_err(|e| self.error(e))?;
            self.table = fresh;
        }
        self.seed()
    }

    /// Takes the version, schema and files from the table as loaded.
    fn seed(&mut self) -> Result<(), DeltaError> {
        let snapshot = self.table.snapshot().map_err(|e| self.error(e))?;
        self.version = snapshot.version() as i64;
        self.schema = Arc::new(super::evolve::arrow_schema(&self.table)?);
        self.plain = plain_table(&self.table);
        let mut files = Vec::new();
        for file in snapshot.log_data().iter() {
            self.plain &= file.deletion_vector_descriptor().is_none();
            let stats = file.stats().and_then(|s| serde_json::from_str(&s).ok());
            files.push(TailFile::new(file.object_store_path(), file.size().max(0) as u64, stats, &self.column));
        }
        self.files = files;
        Ok(())
    }

    /// What log entry `version` holds for the tail.
    fn parse(&self, entry: &[u8], version: i64) -> Result<Entry, DeltaError> {
        let (mut added, mut removed, mut plain) = (Vec::new(), Vec::new(), true);
        for line in entry.split(|b| *b == b'\n').filter(|line| !line.iter().all(u8::is_ascii_whitespace)) {
            let action: serde_json::Value = serde_json::from_slice(line).map_err(|e| self.error(format!("log entry {version}: {e}")))?;
            if action.get("metaData").is_some() || action.get("protocol").is_some() {
                return Ok(Entry::Reload("a schema or protocol change"));
            }
            if let Some(add) = action.get("add") {
                let raw = add["path"].as_str().ok_or_else(|| self.error(format!("log entry {version}: an add without a path")))?;
                plain &= add["deletionVector"].is_null() && add["partitionValues"].as_object().is_none_or(|values| values.is_empty());
                let stats = add["stats"].as_str().and_then(|s| serde_json::from_str(s).ok());
                let size = add["size"].as_u64().ok_or_else(|| self.error(format!("log entry {version}: the add of {raw} has no size")))?;
                added.push(TailFile::new(store_path(raw), size, stats, &self.column));
            } else if let Some(raw) = action.get("remove").and_then(|remove| remove["path"].as_str()) {
                removed.push(store_path(raw));
            }
        }
        Ok(Entry::Files { added, removed, plain })
    }

    fn error(&self, cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> DeltaError {
        DeltaError::new(self.table.table_url().as_str(), cause)
    }
}

/// A log path (URL-encoded) as an object-store path.
fn store_path(raw: &str) -> Path {
    Path::from_url_path(raw).unwrap_or_else(|_| Path::from(raw))
}

/// Whether the table's files are plain Parquet to a reader: no column mapping, no partition
/// columns, no reader feature beyond [`PLAIN_READ_FEATURES`].
fn plain_table(table: &DeltaTable) -> bool {
    let Some((protocol, metadata)) = super::table::log_form(table) else { return false };
    let features = match protocol["minReaderVersion"].as_i64() {
        Some(1) => true,
        Some(3) => protocol["readerFeatures"].as_array().is_none_or(|features| features.iter().all(|f| f.as_str().is_some_and(|f| PLAIN_READ_FEATURES.contains(&f)))),
        _ => false,
    };
    let mapping = metadata["configuration"]["delta.columnMapping.mode"].as_str().is_some_and(|mode| mode != "none");
    let partitioned = metadata["partitionColumns"].as_array().is_some_and(|columns| !columns.is_empty());
    features && !mapping && !partitioned
}

/// The rows of the file at `path` (`size` bytes) in `schema`, and the range of `column` among them.
async fn read_file(store: Arc<dyn ObjectStore>, path: Path, size: u64, schema: SchemaRef, column: String) -> Result<(Vec<RecordBatch>, Option<(i64, i64)>), Box<dyn std::error::Error + Send + Sync>> {
    let batches: Vec<RecordBatch> = open_file(store, path, size).await?.try_collect().await?;
    let mut range: Option<(i64, i64)> = None;
    let mut conformed = Vec::with_capacity(batches.len());
    for batch in batches {
        let batch = conform(&batch, &schema)?;
        range = widened(range, column_range(&batch, &column));
        conformed.push(batch);
    }
    Ok((conformed, range))
}

/// A reader of the Parquet file at `path` (`size` bytes) that decodes it a batch at a time.
#[allow(deprecated)] // the reader delta-rs itself builds on
async fn open_file(store: Arc<dyn ObjectStore>, path: Path, size: u64) -> Result<ParquetRecordBatchStream<ParquetObjectReader>, ParquetError> {
    let reader = ParquetObjectReader::new(store, path).with_file_size(size);
    ParquetRecordBatchStreamBuilder::new(reader).await?.build()
}

/// The least and greatest value of the integer `column` in `batch`, if any.
fn column_range(batch: &RecordBatch, column: &str) -> Option<(i64, i64)> {
    let values = arrow::compute::cast(batch.column_by_name(column)?, &DataType::Int64).ok()?;
    let values = values.as_any().downcast_ref::<Int64Array>()?;
    Some((arrow::compute::min(values)?, arrow::compute::max(values)?))
}

/// `range` widened to hold `more`.
fn widened(range: Option<(i64, i64)>, more: Option<(i64, i64)>) -> Option<(i64, i64)> {
    match (range, more) {
        (Some((a, b)), Some((min, max))) => Some((a.min(min), b.max(max))),
        (range, more) => range.or(more),
    }
}

/// `batch` with `schema`'s columns: each cast to its type, or null where the file lacks it (a
/// column added after the file was written).
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, arrow::error::ArrowError> {
    let columns = schema
        .fields()
        .iter()
        .map(|field| match batch.column_by_name(field.name()) {
            Some(column) if column.data_type() == field.data_type() => Ok(column.clone()),
            Some(column) => arrow::compute::cast(column, field.data_type()),
            None => Ok(arrow::array::new_null_array(field.data_type(), batch.num_rows())),
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema.clone(), columns)
}

/// The rows of `batch` whose `column` lies in `(after, up_to]`.
fn within(batch: &RecordBatch, column: &str, after: i64, up_to: i64) -> Result<RecordBatch, arrow::error::ArrowError> {
    let Some(values) = batch.column_by_name(column) else { return Ok(batch.slice(0, 0)) };
    let values = arrow::compute::cast(values, &DataType::Int64)?;
    let mask = arrow::compute::and(&gt(&values, &Int64Array::new_scalar(after))?, &lt_eq(&values, &Int64Array::new_scalar(up_to))?)?;
    arrow::compute::filter_record_batch(batch, &mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::appender::Appender;
    use crate::delta::storage::Storage;
    use crate::delta::table::{create, open};
    use arrow::array::StringArray;
    use arrow::datatypes::{Field, Schema};
    use std::collections::HashMap;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("batch", DataType::Int64, false), Field::new("note", DataType::Utf8, true)]))
    }

    /// Rows of batch `batch`, `n` of them.
    fn rows(batch: i64, n: usize) -> RecordBatch {
        let notes: Vec<String> = (0..n).map(|i| format!("b{batch} r{i}")).collect();
        RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(vec![batch; n])), Arc::new(StringArray::from(notes))]).unwrap()
    }

    fn notes(batches: &[RecordBatch]) -> Vec<String> {
        let mut notes: Vec<String> = batches.iter().flat_map(|b| b.column_by_name("note").unwrap().as_any().downcast_ref::<StringArray>().unwrap().iter().map(|v| v.unwrap_or("-").to_owned()).collect::<Vec<_>>()).collect();
        notes.sort();
        notes
    }

    async fn table_with(dir: &tempfile::TempDir, batches: std::ops::RangeInclusive<i64>) -> (String, Appender) {
        let location = dir.path().join("t").to_str().unwrap().to_owned();
        let table = create(&location, &Storage::new(), &schema(), &HashMap::new(), "tail").await.unwrap();
        let mut appender = Appender::new(table);
        for batch in batches {
            appender.append(vec![rows(batch, 2)], "app", batch, []).await.unwrap();
        }
        (location, appender)
    }

    /// Invariant: a tail returns exactly the rows of the range asked for, from the files the
    /// log added since it was opened as well as those it started with, and released files
    /// are not read again.
    #[tokio::test]
    async fn a_tail_sees_new_appends_and_reads_only_the_range() {
        let dir = tempfile::tempdir().unwrap();
        let (location, mut appender) = table_with(&dir, 1..=3).await;
        let mut tail = Tail::new(open(&location, &Storage::new()).await.unwrap().unwrap(), "batch").unwrap();
        assert_eq!(tail.files().len(), 3);
        assert!(tail.files().iter().all(|f| f.range.is_some()), "ranges from statistics");
        for batch in 4..=6 {
            appender.append(vec![rows(batch, 2)], "app", batch, []).await.unwrap();
        }
        tail.refresh().await.unwrap();
        assert_eq!(tail.version(), 6);
        assert_eq!(notes(&tail.rows(2, 5).await.unwrap()), ["b3 r0", "b3 r1", "b4 r0", "b4 r1", "b5 r0", "b5 r1"]);
        tail.release(|file| file.range.is_none_or(|(_, max)| max > 5));
        assert_eq!(tail.files().len(), 1);
        assert!(tail.rows(2, 5).await.unwrap().is_empty(), "released files are not read");
        assert_eq!(notes(&tail.rows(5, 6).await.unwrap()), ["b6 r0", "b6 r1"]);
        tail.refresh().await.unwrap();
        assert_eq!(tail.version(), 6, "no new entry: nothing changes");
    }

    /// Invariant: a compaction (files removed and their rows added again in one commit) leaves
    /// every row exactly once: the tail follows `remove` as well as `add`.
    #[tokio::test]
    async fn a_compaction_leaves_each_row_once() {
        let dir = tempfile::tempdir().unwrap();
        let (location, _appender) = table_with(&dir, 1..=4).await;
        let mut tail = Tail::new(open(&location, &Storage::new()).await.unwrap().unwrap(), "batch").unwrap();
        let report = crate::delta::table::optimize(&location, &Storage::new(), &[], None).await.unwrap();
        assert!(report.files_removed >= 4, "{report:?}");
        tail.refresh().await.unwrap();
        assert_eq!(notes(&tail.rows(0, 4).await.unwrap()).len(), 8, "each of the 8 rows once");
        assert_eq!(tail.files().len(), 1);
    }

    /// Invariant: an `add` of a path the table already holds (new statistics for the same
    /// file) replaces the kept file: its rows are read once.
    #[tokio::test]
    async fn an_add_of_a_kept_path_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let (location, _appender) = table_with(&dir, 1..=2).await;
        let mut tail = Tail::new(open(&location, &Storage::new()).await.unwrap().unwrap(), "batch").unwrap();
        let entry = std::fs::read_to_string(dir.path().join("t/_delta_log/00000000000000000002.json")).unwrap();
        let add = entry.lines().find(|line| line.starts_with(r#"{"add""#)).unwrap();
        std::fs::write(dir.path().join("t/_delta_log/00000000000000000003.json"), format!("{add}\n")).unwrap();
        tail.refresh().await.unwrap();
        assert_eq!(tail.version(), 3);
        assert_eq!(tail.files().len(), 2);
        assert_eq!(notes(&tail.rows(0, 2).await.unwrap()), ["b1 r0", "b1 r1", "b2 r0", "b2 r1"]);
    }

    /// Invariant: a table whose files are not plain Parquet (here: partitioned, so a file
    /// lacks its partition column) is read through delta-rs's scan, in the table's schema.
    #[tokio::test]
    async fn a_partitioned_table_is_read_through_the_scan_in_its_schema() {
        use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("p").to_str().unwrap().to_owned();
        let columns: Vec<deltalake::kernel::StructField> = schema().fields().iter().map(|f| f.as_ref().try_into_kernel().unwrap()).collect();
        let table = DeltaTable::try_from_url(crate::delta::table::table_url(&location).unwrap()).await.unwrap().create().with_columns(columns).with_partition_columns(["note"]).await.unwrap();
        let table = table.write(vec![rows(1, 2), rows(2, 1)]).await.unwrap();
        let mut tail = Tail::new(table, "batch").unwrap();
        assert!(!tail.plain);
        let read = tail.rows(1, 2).await.unwrap();
        assert!(read.iter().all(|batch| batch.schema() == tail.schema()), "{:?}", read.first().map(|b| b.schema()));
        assert_eq!(notes(&read), ["b2 r0"]);
    }

    /// Invariant: a schema change sends the tail back to the table: rows written before a
    /// column was added read as null in it, rows after it carry their values.
    #[tokio::test]
    async fn a_new_column_is_followed_with_nulls_in_older_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (location, mut appender) = table_with(&dir, 1..=2).await;
        let mut tail = Tail::new(open(&location, &Storage::new()).await.unwrap().unwrap(), "batch").unwrap();
        let wider = Arc::new(Schema::new(vec![Field::new("batch", DataType::Int64, false), Field::new("note", DataType::Utf8, true), Field::new("extra", DataType::Int64, true)]));
        let batch = RecordBatch::try_new(wider, vec![Arc::new(Int64Array::from(vec![3])), Arc::new(StringArray::from(vec!["b3 r0"])), Arc::new(Int64Array::from(vec![7]))]).unwrap();
        appender.append(vec![batch], "app", 3, []).await.unwrap();
        tail.refresh().await.unwrap();
        let rows = tail.rows(0, 3).await.unwrap();
        let extra: Vec<Option<i64>> = rows.iter().flat_map(|b| b.column_by_name("extra").unwrap().as_any().downcast_ref::<Int64Array>().unwrap().iter().collect::<Vec<_>>()).collect();
        assert_eq!(extra.iter().filter(|v| v.is_none()).count(), 4, "{extra:?}");
        assert!(extra.contains(&Some(7)), "{extra:?}");
    }

    /// Invariant: a gap in the log the tail has not read (log cleanup after a checkpoint)
    /// never hides files: the tail reads the table again.
    #[tokio::test]
    async fn a_gap_in_the_log_sends_the_tail_back_to_the_table() {
        let dir = tempfile::tempdir().unwrap();
        let (location, mut appender) = table_with(&dir, 1..=1).await;
        let mut tail = Tail::new(open(&location, &Storage::new()).await.unwrap().unwrap(), "batch").unwrap();
        for batch in 2..=4 {
            appender.append(vec![rows(batch, 2)], "app", batch, []).await.unwrap();
        }
        let table = open(&location, &Storage::new()).await.unwrap().unwrap();
        deltalake::checkpoints::create_checkpoint(&table, None).await.unwrap();
        for version in 1..=3 {
            std::fs::remove_file(dir.path().join(format!("t/_delta_log/{version:020}.json"))).unwrap();
        }
        tail.refresh().await.unwrap();
        assert_eq!(tail.version(), 4);
        assert_eq!(notes(&tail.rows(0, 4).await.unwrap()).len(), 8, "every row, through the checkpoint");
    }
}
