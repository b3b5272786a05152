//! The MERGE by deletion vectors (`deletion_vectors = true`): a batch marks the silver rows it
//! replaces or deletes, and appends the new images, instead of rewriting the files that hold
//! them. Its cost follows the batch: the key (and `_start_lsn`) columns of the files whose key
//! statistics meet the batch's keys are read, the other columns never.
//!
//! One step, for a fold sorted by key:
//! 1. **Candidates**: the files whose min..max of the first key column holds one of the fold's
//!    keys (integer keys; any other key type makes every file a candidate).
//! 2. **Match**: each candidate's key columns are read (two files at a time), and its
//!    `_start_lsn` too unless its statistics show every row older than the fold. A live row
//!    (not marked already) whose key is in the fold is *replaced* when the fold's change is
//!    newer (`_start_lsn` greater) and *supersedes* the fold's row otherwise (a replay, or a
//!    snapshot image older than the row). Replaced rows are added to the file's deletion vector.
//! 3. **Write**: the fold's rows that are not deletes and not superseded go to a new file;
//!    every file with new marks gets a new vector (its old one plus the marks), all of them in
//!    one DV file.
//! 4. **Commit**: one commit holds, per marked file, the `remove` of its old entry and the
//!    `add` of it with the new vector, the new file's `add`, and `txn(app_id, batch)`.
//!
//! The same outcome as the copy-on-write MERGE in [`super::apply`], row for row: a newer
//! delete removes the key, a newer image replaces the row, a new key is inserted, a replay
//! changes nothing. Readers must support deletion vectors (reader version 3); `optimize`
//! compacts small marked files together with their vectors applied.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow::datatypes::DataType;
use arrow::row::{RowConverter, SortField};
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::kernel::{Action, Add, DeletionVectorDescriptor, Remove, TableFeatures};
#[allow(deprecated)] // the object-store reader delta-rs itself builds on; its replacement is not in parquet 59's API yet
use deltalake::parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
use deltalake::parquet::arrow::ProjectionMask;
use deltalake::protocol::DeltaOperation;
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::logstore::object_store::ObjectStoreExt;
use deltalake::{DeltaTable, ObjectStore};
use futures::TryStreamExt;
use roaring::RoaringTreemap;

use super::error::SilverError;
use super::fold::DELETE;
use super::key_cache::{FileKeys, KeyCache};
use crate::delta::deletion_vector::{self as dv, DvFile};
use mssql_cdc_core::log::schema::START_LSN;

/// What a marking MERGE did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Marked {
    /// Keys new to silver.
    pub inserted: u64,
    /// Rows replaced by a newer image.
    pub updated: u64,
    /// Rows removed by a newer delete.
    pub deleted: u64,
    /// Files read to match keys.
    pub files_scanned: u64,
    /// Files given a new deletion vector.
    pub files_marked: u64,
    /// Data files written.
    pub files_added: u64,
}

/// Turns on the `deletionVectors` table feature when silver does not have it yet (reader
/// version 3, writer version 7): one metadata commit, once per table.
pub async fn enable(table: DeltaTable, location: &str) -> Result<DeltaTable, SilverError> {
    let snapshot = table.snapshot().map_err(|e| SilverError::delta_at(location, e))?;
    let has = snapshot.protocol().writer_features().is_some_and(|features| features.iter().any(|f| f.as_ref() == "deletionVectors"));
    if has {
        return Ok(table);
    }
    tracing::info!(table = location, "silver: enabling the deletionVectors table feature (readers need Delta reader version 3)");
    table
        .add_feature()
        .with_feature(TableFeatures::DeletionVectors)
        .with_allow_protocol_versions_increase(true)
        .await
        .map_err(|e| SilverError::delta_at(location, e))
}

/// A hasher for integer keys: one multiply (keys are not attacker-chosen here, and SipHash
/// would cost more than the rest of the match on a 10M-row scan).
#[derive(Default)]
struct IntHasher(u64);

impl std::hash::Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_i64(&mut self, i: i64) {
        self.0 = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

/// Fold row by key: one integer key looked up as `i64`, any other key by its row encoding.
enum KeyIndex {
    Int(HashMap<i64, usize, std::hash::BuildHasherDefault<IntHasher>>),
    Rows(RowConverter, HashMap<Vec<u8>, usize>),
}

/// The fold's keys, indexed for lookups, and what decides whether a file is read.
struct FoldKeys {
    types: Vec<DataType>,
    index: KeyIndex,
    lsn: StringArray,
    /// The fold's smallest `_start_lsn`: a file whose largest is below it holds only older rows.
    min_lsn: Option<String>,
    /// The first key column as sorted integers, for pruning files by their statistics.
    first: Option<Vec<i64>>,
}

impl FoldKeys {
    fn new(folded: &RecordBatch, keys: &[String]) -> Result<Self, SilverError> {
        let columns = key_columns(folded, keys)?;
        let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
        let first = columns[0].data_type().is_integer().then(|| int_values(&columns[0])).flatten();
        let index = match (&first, columns.len()) {
            (Some(values), 1) => KeyIndex::Int(values.iter().enumerate().map(|(i, k)| (*k, i)).collect()),
            _ => {
                let converter = RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect()).map_err(fold_error)?;
                let rows = converter.convert_columns(&columns).map_err(fold_error)?;
                let index = rows.iter().enumerate().map(|(i, row)| (row.as_ref().to_vec(), i)).collect();
                KeyIndex::Rows(converter, index)
            }
        };
        let lsn = string_column(folded, START_LSN)?;
        let min_lsn = lsn.iter().flatten().min().map(str::to_owned);
        let first = first.map(|mut sorted| {
            sorted.sort_unstable();
            sorted
        });
        Ok(Self { types, index, lsn, min_lsn, first })
    }

    /// Whether the file's statistics allow one of the fold's keys in it.
    fn may_hold(&self, stats: Option<&serde_json::Value>, key: &str) -> bool {
        let Some(sorted) = &self.first else { return true };
        let bound = |stats: &serde_json::Value, side: &str| stats.get(side).and_then(|v| v.get(key)).and_then(serde_json::Value::as_i64);
        let Some(stats) = stats else { return true };
        let (Some(min), Some(max)) = (bound(stats, "minValues"), bound(stats, "maxValues")) else { return true };
        let at = sorted.partition_point(|k| *k < min);
        sorted.get(at).is_some_and(|k| *k <= max)
    }

    /// Whether the file's statistics prove every row in it older than every fold row, so its
    /// `_start_lsn` need not be read. Only a full-length bound counts (a truncated maximum
    /// is not an upper bound).
    fn all_older(&self, stats: Option<&serde_json::Value>) -> bool {
        let Some(min) = &self.min_lsn else { return false };
        let max = stats.and_then(|s| s.get("maxValues")).and_then(|v| v.get(START_LSN)).and_then(serde_json::Value::as_str);
        max.is_some_and(|max| max.len() == min.len() && max < min.as_str())
    }

    /// The fold row of each row of `columns` (a file's key columns), if any.
    fn lookup(&self, columns: &[arrow::array::ArrayRef]) -> Result<Vec<Option<usize>>, SilverError> {
        Ok(match &self.index {
            KeyIndex::Int(index) => {
                let values = arrow::compute::cast(&columns[0], &DataType::Int64).map_err(fold_error)?;
                let values = values.as_any().downcast_ref::<arrow::array::Int64Array>().ok_or_else(|| SilverError::Fold("integer key expected".into()))?;
                values.iter().map(|k| k.and_then(|k| index.get(&k).copied())).collect()
            }
            KeyIndex::Rows(converter, index) => {
                let columns: Vec<_> = columns.iter().zip(&self.types).map(|(c, t)| arrow::compute::cast(c, t)).collect::<Result<_, _>>().map_err(fold_error)?;
                let rows = converter.convert_columns(&columns).map_err(fold_error)?;
                rows.iter().map(|row| index.get(row.as_ref()).copied()).collect()
            }
        })
    }
}

/// An integer column as `i64`s (`None` if it holds a null or cannot be cast).
fn int_values(column: &arrow::array::ArrayRef) -> Option<Vec<i64>> {
    let values = arrow::compute::cast(column, &DataType::Int64).ok()?;
    let values = values.as_any().downcast_ref::<arrow::array::Int64Array>()?;
    (values.null_count() == 0).then(|| values.values().to_vec())
}

/// A file to match: what the reads need, owned (they run as tasks).
struct Candidate {
    path: deltalake::Path,
    size: u64,
    descriptor: Option<DeletionVectorDescriptor>,
    /// Its `_start_lsn` need not be read ([`FoldKeys::all_older`]).
    all_older: bool,
}

/// What matching one file found.
struct FileMatch {
    /// The rows its current deletion vector marks.
    old: RoaringTreemap,
    /// Live rows the fold replaces.
    marks: RoaringTreemap,
    /// (fold row, replaced): `true` a live row was replaced, `false` a live row supersedes it.
    found: Vec<(usize, bool)>,
}

/// Files matched at once (the reads decode on the runtime's workers).
const PARALLEL_FILES: usize = 2;

/// MERGEs `folded` (one row per key, sorted by key, `_delete` set for deletes) into `table`
/// by deletion vectors, in one commit with `properties` (its `txn`) and `metadata` in its
/// commit info (beside the operation's metrics). `upserts` projects the rows to write onto
/// silver's columns.
#[allow(clippy::too_many_arguments)] // each is one input of the MERGE; a struct would only rename them
pub async fn merge(
    table: DeltaTable,
    cache: &mut KeyCache,
    folded: &RecordBatch,
    keys: &[String],
    upserts: impl Fn(&RecordBatch) -> Result<RecordBatch, SilverError>,
    properties: CommitProperties,
    metadata: HashMap<String, serde_json::Value>,
    location: &str,
) -> Result<(DeltaTable, Marked), SilverError> {
    let fold = Arc::new(FoldKeys::new(folded, keys)?);
    let store = table.log_store().object_store(None);
    let snapshot = table.snapshot().map_err(|e| SilverError::delta_at(location, e))?.clone();
    let (candidates, entries) = candidates(&snapshot, &fold, &keys[0]);
    cache.retain(&snapshot.log_data().iter().map(|file| file.object_store_path()).collect());
    let mut marked = Marked { files_scanned: candidates.len() as u64, ..Marked::default() };
    let matches = match_files(candidates, cache, &fold, &store, table.table_url(), keys, location).await?;
    let (mut actions, outcome) = mark(matches, entries, folded.num_rows(), &store, location, &mut marked).await?;
    let kept = keep(folded, &outcome, &mut marked)?;
    if kept.num_rows() > 0 {
        let mut writer = RecordBatchWriter::for_table(&table).map_err(|e| SilverError::delta_at(location, e))?.with_writer_properties(super::apply::writer_properties());
        let rows = crate::delta::tail::conform(&upserts(&kept)?, &writer.arrow_schema()).map_err(fold_error)?;
        writer.write(rows).await.map_err(|e| SilverError::delta_at(location, e))?;
        for add in writer.flush().await.map_err(|e| SilverError::delta_at(location, e))? {
            marked.files_added += 1;
            actions.push(Action::Add(add));
        }
    }
    let operation = DeltaOperation::Merge {
        predicate: None,
        merge_predicate: Some(format!("deletion vectors on {}", keys.join(", "))),
        matched_predicates: vec![],
        not_matched_predicates: vec![],
        not_matched_by_source_predicates: vec![],
    };
    let metrics = serde_json::json!({
        "num_target_rows_inserted": marked.inserted, "num_target_rows_updated": marked.updated, "num_target_rows_deleted": marked.deleted,
        "num_target_files_scanned": marked.files_scanned, "num_deletion_vectors_added": marked.files_marked, "num_target_files_added": marked.files_added,
    });
    // The builder's metadata replaces the properties' own: both go in here.
    let mut metadata = metadata;
    metadata.insert("operationMetrics".to_owned(), metrics);
    CommitBuilder::from(properties)
        .with_app_metadata(metadata)
        .with_actions(actions)
        .build(Some(&snapshot), table.log_store(), operation)
        .await
        .map_err(|e| SilverError::delta_at(location, e))?;
    let mut table = table;
    table.update_state().await.map_err(|e| SilverError::delta_at(location, e))?;
    Ok((table, marked))
}

/// The files whose statistics allow one of the fold's keys, in the log's order, each with its
/// `remove` and `add` for when it is marked.
fn candidates(snapshot: &deltalake::table::state::DeltaTableState, fold: &FoldKeys, key: &str) -> (Vec<Candidate>, Vec<(Remove, Add)>) {
    let mut candidates = Vec::new();
    let mut entries = Vec::new();
    for file in snapshot.log_data().iter() {
        let stats = file.stats().and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok());
        if !fold.may_hold(stats.as_ref(), key) {
            continue;
        }
        candidates.push(Candidate { path: file.object_store_path(), size: file.size() as u64, descriptor: file.deletion_vector_descriptor(), all_older: fold.all_older(stats.as_ref()) });
        #[allow(deprecated)] // the only public way to an `add` of a file already in the table
        let add = file.add_action();
        entries.push((file.remove_action(true), add));
    }
    (candidates, entries)
}

/// Per fold row, what the live silver rows said: one was replaced (the change is newer), or
/// one supersedes the change.
struct Outcome {
    replaced: Vec<bool>,
    superseded: Vec<bool>,
}

/// The new deletion vectors (old marks plus new, all in one DV file, written here) and their
/// `remove`/`add` pairs, and per fold row what the matches found.
async fn mark(matches: Vec<FileMatch>, entries: Vec<(Remove, Add)>, rows: usize, store: &Arc<dyn ObjectStore>, location: &str, marked: &mut Marked) -> Result<(Vec<Action>, Outcome), SilverError> {
    let mut outcome = Outcome { replaced: vec![false; rows], superseded: vec![false; rows] };
    let mut dv_file = DvFile::new();
    let mut actions: Vec<Action> = Vec::new();
    for (found, (remove, add)) in matches.into_iter().zip(entries) {
        for (j, was_replaced) in &found.found {
            if *was_replaced {
                outcome.replaced[*j] = true;
            } else {
                outcome.superseded[*j] = true;
            }
        }
        if found.marks.is_empty() {
            continue;
        }
        let mut all = found.old;
        all |= found.marks;
        let descriptor = dv_file.push(all).map_err(|e| SilverError::DeletionVector { table: location.to_owned(), source: e })?;
        actions.push(Action::Remove(remove));
        actions.push(Action::Add(marked_add(add, descriptor)));
        marked.files_marked += 1;
    }
    if marked.files_marked > 0 {
        let path = deltalake::Path::from(dv_file.relative_path());
        store.put(&path, dv_file.bytes().to_vec().into()).await.map_err(|e| SilverError::delta_at(location, e))?;
    }
    Ok((actions, outcome))
}

/// The fold rows to write (neither deletes nor superseded), counting what the MERGE does.
fn keep(folded: &RecordBatch, outcome: &Outcome, marked: &mut Marked) -> Result<RecordBatch, SilverError> {
    let deletes = folded.column_by_name(DELETE).and_then(|c| c.as_any().downcast_ref::<BooleanArray>()).ok_or_else(|| SilverError::Fold("the fold has no _delete".into()))?;
    let mut keep = Vec::with_capacity(folded.num_rows());
    for i in 0..folded.num_rows() {
        let delete = deletes.value(i);
        keep.push(!delete && !outcome.superseded[i]);
        match (delete, outcome.replaced[i], outcome.superseded[i]) {
            (false, true, _) => marked.updated += 1,
            (false, false, false) => marked.inserted += 1,
            (true, true, _) => marked.deleted += 1,
            _ => {}
        }
    }
    arrow::compute::filter_record_batch(folded, &BooleanArray::from(keep)).map_err(fold_error)
}

/// Matches the candidates, [`PARALLEL_FILES`] at a time; results in the candidates' order.
/// Key columns come from `cache` where it has them, and what is read is kept there. `root` is
/// the table's, which deletion vectors' paths are relative to.
async fn match_files(candidates: Vec<Candidate>, cache: &mut KeyCache, fold: &Arc<FoldKeys>, store: &Arc<dyn ObjectStore>, root: &url::Url, keys: &[String], location: &str) -> Result<Vec<FileMatch>, SilverError> {
    let mut results: Vec<Option<FileMatch>> = (0..candidates.len()).map(|_| None).collect();
    let mut running = tokio::task::JoinSet::new();
    let mut queue = candidates.into_iter().enumerate();
    loop {
        while running.len() < PARALLEL_FILES {
            let Some((i, candidate)) = queue.next() else { break };
            let cached = cache.get(&candidate.path, candidate.size, !candidate.all_older);
            let (fold, store, root, keys, location) = (fold.clone(), store.clone(), root.clone(), keys.to_vec(), location.to_owned());
            running.spawn(async move {
                let read = match cached {
                    Some(columns) => Ok((columns, false)),
                    None => read_keys(&store, &candidate, &keys, &location).await.map(|columns| (Arc::new(columns), true)),
                };
                let matched = match read {
                    Ok((columns, fresh)) => match_file(&store, &root, &candidate, &columns, &fold, &location).await.map(|found| (found, fresh.then_some((candidate.path, candidate.size, columns)))),
                    Err(error) => Err(error),
                };
                (i, matched)
            });
        }
        let Some(done) = running.join_next().await else { break };
        let (i, result) = done.map_err(|e| SilverError::Fold(format!("a file match task failed: {e}")))?;
        let (found, read) = result?;
        if let Some((path, size, columns)) = read {
            cache.put(path, size, columns);
        }
        results[i] = Some(found);
    }
    Ok(results.into_iter().flatten().collect())
}

/// The rows a file's current deletion vector marks (none without one).
async fn existing_marks(store: &Arc<dyn ObjectStore>, root: &url::Url, file: &Candidate, location: &str) -> Result<RoaringTreemap, SilverError> {
    let Some(descriptor) = &file.descriptor else { return Ok(RoaringTreemap::new()) };
    let dv_error = |e: dv::DvError| SilverError::DeletionVector { table: location.to_owned(), source: e };
    let bytes = match dv::relative_path(descriptor, root).map_err(dv_error)? {
        Some(path) => Some(store.get(&deltalake::Path::from(path)).await.map_err(|e| SilverError::delta_at(location, e))?.bytes().await.map_err(|e| SilverError::delta_at(location, e))?),
        None => None,
    };
    dv::parse_inline_or_file(descriptor, bytes.as_deref()).map_err(dv_error)
}

/// Reads a file's key columns, and its `_start_lsn` unless every row is older.
async fn read_keys(store: &Arc<dyn ObjectStore>, file: &Candidate, keys: &[String], location: &str) -> Result<FileKeys, SilverError> {
    #[allow(deprecated)] // see the import
    let reader = ParquetObjectReader::new(store.clone(), file.path.clone()).with_file_size(file.size);
    let builder = ParquetRecordBatchStreamBuilder::new(reader).await.map_err(|e| SilverError::delta_at(location, e))?;
    let mut names: Vec<&str> = keys.iter().map(String::as_str).collect();
    if !file.all_older {
        names.push(START_LSN);
    }
    let roots: Vec<usize> = builder.schema().fields().iter().enumerate().filter(|(_, f)| names.contains(&f.name().as_str())).map(|(i, _)| i).collect();
    if roots.len() != names.len() {
        return Err(SilverError::Fold(format!("silver file {} lacks one of the columns {names:?}", file.path)));
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let mut stream = builder.with_projection(mask).build().map_err(|e| SilverError::delta_at(location, e))?;
    let mut read = FileKeys { keys: Vec::new(), lsn: (!file.all_older).then(Vec::new) };
    while let Some(batch) = stream.try_next().await.map_err(|e| SilverError::delta_at(location, e))? {
        read.keys.push(key_columns(&batch, keys)?);
        if let Some(lsn) = &mut read.lsn {
            lsn.push(string_column(&batch, START_LSN)?);
        }
    }
    Ok(read)
}

/// Finds, among a file's rows (`columns`: its key columns and `_start_lsn`, read or kept),
/// the live rows the fold replaces, and the fold rows a live row supersedes.
async fn match_file(store: &Arc<dyn ObjectStore>, root: &url::Url, file: &Candidate, columns: &FileKeys, fold: &FoldKeys, location: &str) -> Result<FileMatch, SilverError> {
    let old = existing_marks(store, root, file, location).await?;
    let mut found = FileMatch { old, marks: RoaringTreemap::new(), found: Vec::new() };
    let mut position: u64 = 0;
    for (at_batch, keys) in columns.keys.iter().enumerate() {
        let rows = fold.lookup(keys)?;
        // Unless every row is older, the fold's change must be compared with the row's.
        let lsn = match (&columns.lsn, file.all_older) {
            (_, true) => None,
            (Some(lsn), false) => Some(lsn.get(at_batch).ok_or_else(|| SilverError::Fold(format!("silver file {}: `_start_lsn` missing for a batch", file.path)))?),
            (None, false) => return Err(SilverError::Fold(format!("silver file {}: `_start_lsn` was not read", file.path))),
        };
        for (i, j) in rows.iter().enumerate() {
            let Some(j) = *j else { continue };
            let at = position + i as u64;
            if found.old.contains(at) {
                continue;
            }
            // Newer: the fold's change has the greater `_start_lsn` (always, when every row is older).
            if lsn.is_none_or(|lsn| fold.lsn.value(j) > lsn.value(i)) {
                found.marks.insert(at);
                found.found.push((j, true));
            } else {
                found.found.push((j, false));
            }
        }
        position += rows.len() as u64;
    }
    Ok(found)
}

/// The file's `add` again, now with `descriptor`; its statistics no longer bound the live
/// rows tightly.
fn marked_add(mut add: Add, descriptor: DeletionVectorDescriptor) -> Add {
    add.deletion_vector = Some(descriptor);
    add.data_change = true;
    add.stats = add.stats.and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok()).map(|mut stats| {
        if let Some(object) = stats.as_object_mut() {
            object.insert("tightBounds".into(), serde_json::Value::Bool(false));
        }
        stats.to_string()
    });
    add
}

fn key_columns(batch: &RecordBatch, keys: &[String]) -> Result<Vec<arrow::array::ArrayRef>, SilverError> {
    keys.iter().map(|k| batch.column_by_name(k).cloned().ok_or_else(|| SilverError::Fold(format!("key column `{k}` missing")))).collect()
}

fn string_column(batch: &RecordBatch, name: &str) -> Result<StringArray, SilverError> {
    let column = batch.column_by_name(name).ok_or_else(|| SilverError::Fold(format!("column `{name}` missing")))?;
    let column = arrow::compute::cast(column, &DataType::Utf8).map_err(fold_error)?;
    column.as_any().downcast_ref::<StringArray>().cloned().ok_or_else(|| SilverError::Fold(format!("column `{name}` is not text")))
}

fn fold_error(e: arrow::error::ArrowError) -> SilverError {
    SilverError::Fold(e.to_string())
}
