//! apply_changes: bronze batches into silver, then the verdict into the control table.
//!
//! Silver follows the batches the bronze sink recorded in the facts table (heartbeats
//! included, so a quiet table's verdict moves). A step takes the next run of consecutive
//! batches after the position, reads their bronze rows (`_batch_id` in the run; file
//! statistics prune the rest), folds them to one row per key ([`super::fold`]) and MERGEs the
//! fold into silver in one commit with `txn(app_id, last batch)`. Then it writes the control
//! row with `txn(<app_id>#control, last batch)`. A crash between the two is repaired on
//! restart: silver's txn version says its data is in, the control row is written again.
//!
//! Cost: the MERGE's join key ranges prune silver's files by their statistics (delta-rs builds
//! that filter from the batch's key bounds), and silver is clustered by key, so a batch
//! rewrites the files its keys fall in, not the table. See ADR 0004.

use std::time::Instant;

use arrow::array::{Array, Int64Array, RecordBatch};
use chrono::{DateTime, Utc};
use deltalake::datafusion::prelude::SessionContext;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::Transaction;
use deltalake::operations::write::SchemaMode;
use deltalake::parquet::basic::Compression;
use deltalake::parquet::file::properties::WriterProperties;
use deltalake::protocol::SaveMode;
use deltalake::DeltaTable;

use super::config::{Granularity, SilverSettings};
use super::control::{self, ControlRow};
use super::error::SilverError;
use super::fold::{fold, silver_schema, FoldCounts, DELETE};
use super::key_cache::KeyCache;
use crate::delta::query::{ident, query_rows};
use crate::delta::tail::{Tail, TailFile};
use crate::delta::storage::Storage;
use crate::delta::table::{self as delta, table_url};
use crate::delta::evolve;
use mssql_cdc_core::log::schema::{COMMIT_TS, START_LSN};
use crate::bronze::records::BATCH_ID;
use crate::facts::{batch_facts_sql, read_batch_facts, BatchFact};
use crate::fault;
use mssql_cdc_core::telemetry::events::SilverApplied;

/// The app id suffix of the control table's `txn`.
pub const CONTROL_SUFFIX: &str = "#control";

/// What one step did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// Batches applied (heartbeats included); 0 when there was nothing new.
    pub batches: u64,
    /// The last batch applied.
    pub last_batch: i64,
    /// Bronze rows read and what they folded to.
    pub fold: FoldCounts,
    /// Silver rows inserted, updated and deleted by the MERGE.
    pub inserted: u64,
    /// See `inserted`.
    pub updated: u64,
    /// See `inserted`.
    pub deleted: u64,
    /// Silver files the MERGE rewrote or added.
    pub files_added: u64,
    /// Silver files it removed.
    pub files_removed: u64,
    /// The verdict after the step.
    pub finalized_until: Option<DateTime<Utc>>,
}

/// The apply loop's state.
pub struct Applier {
    bronze_location: String,
    /// Bronze's URL, as the facts table's `target` names it.
    bronze_url: String,
    /// The same, normalized once ([`crate::delta::location::normalized`]) for the per-file
    /// checks of the facts table's `target` statistics.
    bronze_normalized: String,
    silver_location: String,
    app_id: String,
    keys: Option<Vec<String>>,
    granularity: Granularity,
    storage: Storage,
    /// The facts table, followed by its log ([`Tail`]): the files of batches not applied yet.
    facts: Tail,
    control: DeltaTable,
    silver: Option<DeltaTable>,
    /// Bronze, followed by its log from the first apply: the files of batches not applied yet.
    bronze: Option<Tail>,
    /// Another bronze table the facts table records batches for (for a warning).
    other_target: Option<String>,
    /// Last batch whose rows are in silver (silver's txn version), -1: none.
    silver_batch: i64,
    /// The control row as last written.
    row: ControlRow,
    /// Most batches one step takes.
    max_batches: i64,
    /// Most bronze rows one step takes (a larger single batch is applied in slices).
    max_rows: i64,
    /// Replace and delete rows by deletion vectors ([`super::mark`]).
    deletion_vectors: bool,
    /// Silver's `delta.targetFileSize`, bytes ([`super::layout`]).
    target_file_size: u64,
    /// Silver's key columns kept between those MERGEs ([`KeyCache`]).
    key_cache: KeyCache,
    /// Whether the "facts name another bronze table" warning was given.
    warned_other_target: std::sync::atomic::AtomicBool,
    /// The connector applying (metrics and logs); `apply` for the one-shot command.
    connector: String,
    /// The facts version and position of the last step that found nothing: while both stay,
    /// the next step would find nothing again, and skips the facts query.
    idle_at: Option<(i64, i64)>,
}

impl Applier {
    /// Opens the tables and reads the position back from silver's and the control table's
    /// `txn` versions.
    pub async fn open(options: &SilverSettings, storage: Storage) -> Result<Self, SilverError> {
        let bronze_location = options.bronze.clone();
        let silver_location = options.target.clone();
        let app_id = options.app_id.clone();
        let facts_location = options.facts_table.clone();
        let facts = delta::open(&facts_location, &storage).await?.ok_or_else(|| SilverError::NoFacts { facts: facts_location.clone() })?;
        let mut facts = Tail::new(facts, "batch_id")?;
        let control = control::open_or_create(&options.control_table, &storage).await?;
        let silver = delta::open(&silver_location, &storage).await?;
        let silver_batch = match &silver {
            Some(table) => delta::txn_version(table, &app_id).await?.unwrap_or(-1),
            None => -1,
        };
        let bronze_url = table_url(&bronze_location)?.to_string();
        let silver_url = table_url(&silver_location)?.to_string();
        let control_batch = delta::txn_version(&control, &format!("{app_id}{CONTROL_SUFFIX}")).await?.unwrap_or(-1);
        let mut row = control::read_row(&control, &silver_url).await?.unwrap_or_else(|| ControlRow { table_name: silver_url.clone(), applied_batch: -1, ..ControlRow::default() });
        // The row's own position is authoritative only when its txn agrees.
        row.applied_batch = row.applied_batch.min(control_batch).max(-1);
        tracing::info!(app_id = %app_id, silver_batch, control_batch = row.applied_batch, "silver resuming");
        let mut other_target = None;
        let bronze_normalized = crate::delta::location::normalized(&bronze_url);
        facts.release(|file| fact_file_needed(file, row.applied_batch, &bronze_normalized, &mut other_target));
        Ok(Self {
            bronze_location,
            bronze_url,
            bronze_normalized,
            silver_location,

            app_id,
            keys: options.keys.clone(),
            granularity: options.granularity,
            storage,
            facts,
            control,
            silver,
            bronze: None,
            other_target,
            silver_batch,
            row,
            max_batches: options.max_batches_per_apply,
            max_rows: options.max_rows_per_apply,
            deletion_vectors: options.deletion_vectors,
            target_file_size: options.target_file_size,
            key_cache: KeyCache::default(),
            warned_other_target: std::sync::atomic::AtomicBool::new(false),
            connector: "apply".to_owned(),
            idle_at: None,
        })
    }

    /// Names the connector applying, for metrics and logs.
    pub fn with_connector(mut self, connector: &str) -> Self {
        SilverApplied::register(connector, &self.silver_location);
        self.connector = connector.to_owned();
        self
    }

    /// The control row as last written (the verdict and the position).
    pub fn row(&self) -> &ControlRow {
        &self.row
    }

    /// Applies the next run of batches, if any.
    pub async fn step(&mut self) -> Result<StepReport, SilverError> {
        let started = Instant::now();
        let from = self.row.applied_batch;
        self.facts.refresh().await?;
        let seen = (self.facts.version(), from);
        let idle = StepReport { last_batch: from, finalized_until: self.row.finalized_until, ..StepReport::default() };
        if self.idle_at == Some(seen) {
            return Ok(idle);
        }
        let run = self.next_batches(from).await?;
        let Some(last) = run.last().map(|b| b.batch_id) else {
            self.idle_at = Some(seen);
            return Ok(idle);
        };
        let mut report = StepReport { batches: run.len() as u64, last_batch: last, ..StepReport::default() };
        // Rows of batches silver does not hold yet.
        let data_from = from.max(self.silver_batch);
        if last > data_from && run.iter().any(|b| b.batch_id > data_from && b.rows > 0) {
            let rows = run.iter().filter(|b| b.batch_id > data_from).map(|b| b.rows).sum();
            self.apply_rows(data_from, last, rows, &mut report).await?;
        }
        // A completed snapshot: silver is its rows plus the changes after it. Idempotent, so
        // it runs again after a crash between the MERGE and the control row.
        if let Some(lsn) = run.iter().filter(|b| b.completes_snapshot).filter_map(|b| b.snapshot_lsn.clone()).max() {
            self.rebuild(&lsn, last, &mut report).await?;
        }
        // While a chunked snapshot is open, silver holds rows the table may no longer have
        // (keys the completion removes): the verdict holds where it was at the opening.
        let mut open = self.row.open_snapshot_lsn.clone();
        for fact in &run {
            if fact.completes_snapshot {
                open = None;
            }
            if let Some(lsn) = &fact.opens_chunked {
                open = Some(lsn.clone());
            }
        }
        let end = run.iter().rev().find_map(|b| b.max_commit_ts);
        let end_lsn = run.last().and_then(|b| b.end_lsn.clone());
        let now = Utc::now();
        let mut next = self.row.advance(self.granularity, end_lsn.as_deref(), end, last, now);
        if open.is_some() {
            next.finalized_until = self.row.finalized_until;
            next.updated_at = self.row.updated_at;
        } else if self.row.open_snapshot_lsn.is_some() || run.iter().any(|b| b.opens_chunked.is_some()) {
            // Completed in this run: the verdict catches up with what was applied meanwhile.
            next = next.advance(self.granularity, None, next.end_commit_ts, last, now);
        }
        if report.fold.changes > 0 {
            next.applied_lsn = end_lsn.clone().or(next.applied_lsn);
        }
        next.silver_version = self.silver.as_ref().and_then(|t| t.version()).map(|v| v as i64);
        next.open_snapshot_lsn = open;
        let control = self.control.clone();
        self.control = control::write_row(control, &next, &format!("{}{CONTROL_SUFFIX}", self.app_id), last).await?;
        self.row = next;
        let mut other = None;
        self.facts.release(|file| fact_file_needed(file, last, &self.bronze_normalized, &mut other));
        self.other_target = other.or(self.other_target.take());
        report.finalized_until = self.row.finalized_until;
        SilverApplied {
            connector: &self.connector,
            table: &self.silver_location,
            batches: report.batches,
            last_batch: last,
            changes: report.fold.changes as u64,
            inserted: report.inserted,
            updated: report.updated,
            deleted: report.deleted,
            duration: started.elapsed(),
            verdict_age_seconds: self.row.finalized_until.map(|verdict| (Utc::now() - verdict).num_milliseconds() as f64 / 1000.0),
        }
        .emit();
        Ok(report)
    }

    /// The consecutive batches after `from` the facts table records for bronze, at most
    /// `max_batches` of them and `max_rows` rows between them ([`consecutive_run`]).
    async fn next_batches(&mut self, from: i64) -> Result<Vec<BatchFact>, SilverError> {
        let up_to = from + self.max_batches;
        let rows = self.facts.rows(from, up_to).await?;
        let results = query_rows("facts", self.facts.schema(), rows, &batch_facts_sql(from, up_to)).await?;
        let (run, other) = consecutive_run(read_batch_facts(&results)?, from, self.max_rows, |target| same_table(target, &self.bronze_url));
        let other = other.or_else(|| self.other_target.clone());
        if let Some(other) = other.filter(|_| run.is_empty() && !self.warned_other_target.swap(true, std::sync::atomic::Ordering::Relaxed)) {
            tracing::warn!(bronze = %self.bronze_location, facts_target = %other, "the facts table has batches for another bronze table but none for this one yet: is `bronze` the bronze sink's `target`?");
        }
        Ok(run)
    }

    /// Folds the bronze rows of batches `(from, to]` (`rows` of them, as the facts table
    /// counts them) and merges them into silver; in slices when they are one batch larger
    /// than a step holds.
    async fn apply_rows(&mut self, from: i64, to: i64, rows: i64, report: &mut StepReport) -> Result<(), SilverError> {
        let bronze = match &mut self.bronze {
            Some(tail) => {
                tail.refresh().await?;
                tail
            }
            None => {
                let table = delta::open(&self.bronze_location, &self.storage).await?.ok_or_else(|| SilverError::NoBronze { bronze: self.bronze_location.clone(), batch: to })?;
                let mut tail = Tail::new(table, BATCH_ID)?;
                tail.release(|file| bronze_file_needed(file, from));
                self.bronze.insert(tail)
            }
        };
        // The key comes from the configuration or, once, from bronze's commit metadata.
        let keys = match &self.keys {
            Some(keys) => keys.clone(),
            None => {
                let keys = match bronze_keys(bronze.table()).await {
                    // The tail's table is as bronze was when it was read: read it again for its newest commit.
                    Err(SilverError::NoKeys { .. }) => {
                        bronze.read_again().await?;
                        bronze.release(|file| bronze_file_needed(file, from));
                        bronze_keys(bronze.table()).await?
                    }
                    keys => keys?,
                };
                self.keys = Some(keys.clone());
                keys
            }
        };
        let slices = super::slice::slice_count(rows, self.max_rows);
        let committed = if slices <= 1 {
            let rows: Vec<RecordBatch> = bronze.rows(from, to).await?.iter().map(without_field_metadata).collect();
            self.apply_fold(&rows, &keys, to, None, report).await?
        } else {
            self.apply_slices(from, to, rows, slices, &keys, report).await?
        };
        if committed {
            self.silver_batch = to;
        }
        // With nothing to change (only before-images), the position still moves with the control row.
        self.release_bronze(to);
        if committed {
            fault::crash_point(fault::Point::AfterSilverCommit, to);
        }
        Ok(())
    }

    /// Applies the one batch `to` (`rows` bronze rows, more than a step holds) in `slices`
    /// ranges of keys ([`super::slice`]). Returns whether the last slice committed (with the
    /// batch's `txn`).
    async fn apply_slices(&mut self, from: i64, to: i64, rows: i64, slices: usize, keys: &[String], report: &mut StepReport) -> Result<bool, SilverError> {
        let mut sampler = super::slice::Sampler::new(keys, rows);
        self.bronze_tail()?.visit(from, to, |batch| sampler.add(&batch)).await?;
        let slicer = sampler.cut(slices);
        let count = slicer.count();
        tracing::info!(connector = %self.connector, table = %self.silver_location, batch = to, rows, slices = count, "silver: a batch larger than max_rows_per_apply, applied in ranges of keys");
        let mut committed = false;
        for slice in 0..count {
            let mut kept = Vec::new();
            self.bronze_tail()?
                .visit(from, to, |batch| {
                    let rows = slicer.rows_in(&batch, slice)?;
                    if rows.num_rows() > 0 {
                        kept.push(without_field_metadata(&rows));
                    }
                    Ok(())
                })
                .await?;
            committed = self.apply_fold(&kept, keys, to, Some((slice, count)), report).await?;
            if committed && slice + 1 < count {
                fault::crash_point(fault::Point::AfterSilverSlice, to);
            }
        }
        Ok(committed)
    }

    /// The bronze tail, opened by [`Applier::apply_rows`].
    fn bronze_tail(&mut self) -> Result<&mut Tail, SilverError> {
        self.bronze.as_mut().ok_or_else(|| SilverError::NoBronze { bronze: self.bronze_location.clone(), batch: self.silver_batch })
    }

    /// Folds `rows` and merges them into silver, with `txn(app_id, to)` unless `slice` (its
    /// index and the slice count) names a slice before the last. Returns whether it committed
    /// (a fold of before-images alone changes nothing).
    async fn apply_fold(&mut self, rows: &[RecordBatch], keys: &[String], to: i64, slice: Option<(usize, usize)>, report: &mut StepReport) -> Result<bool, SilverError> {
        let (folded, counts) = fold(rows, keys).map_err(|e| SilverError::Fold(e.to_string()))?;
        report.fold.changes += counts.changes;
        report.fold.upserts += counts.upserts;
        report.fold.deletes += counts.deletes;
        let mut metadata = vec![
            ("mssql_cdc.batch_id".to_owned(), serde_json::json!(to)),
            ("mssql_cdc.changes".to_owned(), serde_json::json!(counts.changes)),
        ];
        let last = slice.is_none_or(|(index, count)| index + 1 == count);
        if let Some((index, count)) = slice {
            metadata.push(("mssql_cdc.slice".to_owned(), serde_json::json!(format!("{} of {count}", index + 1))));
        }
        let mut properties = CommitProperties::default().with_metadata(metadata.clone());
        if last {
            properties = properties.with_application_transaction(Transaction::new(&self.app_id, to));
        }
        let Some(folded) = folded else { return Ok(false) };
        let table = match self.silver.take() {
            Some(table) => {
                let table = super::layout::with_target_file_size(table, self.target_file_size, &self.silver_location).await?;
                match self.deletion_vectors {
                    true => self.mark(table, folded, keys, properties, metadata.into_iter().collect(), report).await?,
                    false => self.merge(table, folded, keys, properties, report).await?,
                }
            }
            None => self.create(folded, keys, properties, report).await?,
        };
        self.silver = Some(table);
        Ok(true)
    }

    /// Forgets the bronze files of batches up to `to`, now in silver.
    fn release_bronze(&mut self, to: i64) {
        if let Some(tail) = &mut self.bronze {
            tail.release(|file| bronze_file_needed(file, to));
        }
    }

    /// After a snapshot at `lsn` completed (its rows and every change before `batch` merged):
    /// removes the rows whose newest image is older than the snapshot, the keys it did not
    /// hold. One pass over silver per snapshot; repeating it removes nothing more.
    async fn rebuild(&mut self, lsn: &str, batch: i64, report: &mut StepReport) -> Result<(), SilverError> {
        let Some(table) = self.silver.clone() else { return Ok(()) };
        let properties = CommitProperties::default()
            .with_application_transaction(Transaction::new(&self.app_id, batch))
            .with_metadata([("mssql_cdc.rebuilt_from_snapshot".to_owned(), serde_json::json!(lsn))]);
        let predicate = format!("{} < '{}'", ident(START_LSN), lsn.replace('\'', ""));
        // The delete reads silver through delta-rs's scan: room for its vector reads.
        let (vectors, location) = (crate::delta::vector_reads::files_with_vectors(&table), self.silver_location.clone());
        let (table, metrics) = crate::delta::vector_reads::with_room_for_vectors(vectors, move || async move {
            table
                .delete()
                .with_predicate(predicate)
                .with_writer_properties(writer_properties())
                .with_commit_properties(properties)
                .await
                .map_err(|e| crate::delta::table::DeltaError::new(&location, e))
        })
        .await?;
        let removed = metrics.num_deleted_rows.unwrap_or(0) as u64;
        report.deleted += removed;
        report.files_added += metrics.num_added_files as u64;
        report.files_removed += metrics.num_removed_files as u64;
        self.silver = Some(table);
        tracing::info!(connector = %self.connector, table = %self.silver_location, snapshot_lsn = %lsn, removed, "silver rebuilt from a completed snapshot: rows it did not hold removed");
        Ok(())
    }

    /// The first apply: silver is the fold's upserts, sorted by key.
    async fn create(&self, folded: RecordBatch, keys: &[String], properties: CommitProperties, report: &mut StepReport) -> Result<DeltaTable, SilverError> {
        let schema = silver_schema(&folded.schema());
        let table = delta::create(&self.silver_location, &self.storage, &schema, &silver_comments(), &format!("mssql-cdc silver of {}", self.bronze_url)).await?;
        let table = super::layout::with_target_file_size(table, self.target_file_size, &self.silver_location).await?;
        let upserts = upserts_sorted(&folded, keys)?;
        report.inserted += upserts.num_rows() as u64;
        let table = table
            .write(vec![upserts])
            .with_save_mode(SaveMode::Append)
            .with_schema_mode(SchemaMode::Merge)
            .with_writer_properties(writer_properties())
            .with_commit_properties(properties)
            .await
            .map_err(|e| SilverError::delta_at(&self.silver_location, e))?;
        report.files_added += 1;
        Ok(table)
    }

    /// The MERGE by deletion vectors ([`super::mark`]), the table feature turned on first.
    /// `metadata` goes in the commit info, as `properties`' own does for the other writes.
    async fn mark(&mut self, table: DeltaTable, folded: RecordBatch, keys: &[String], properties: CommitProperties, metadata: std::collections::HashMap<String, serde_json::Value>, report: &mut StepReport) -> Result<DeltaTable, SilverError> {
        let table = evolve::evolve_for(table, &silver_schema(&folded.schema()), []).await?;
        let table = super::mark::enable(table, &self.silver_location).await?;
        let folded = sorted(&folded, keys)?;
        let (table, marked) = super::mark::merge(table, &mut self.key_cache, &folded, keys, project_to_silver, properties, metadata, &self.silver_location).await?;
        report.inserted += marked.inserted;
        report.updated += marked.updated;
        report.deleted += marked.deleted;
        report.files_added += marked.files_added;
        Ok(table)
    }

    /// MERGE of the fold into silver: a newer delete removes the key, a newer image replaces
    /// the row, a new key is inserted. "Newer" compares `_start_lsn`, so a replay changes nothing.
    async fn merge(&self, table: DeltaTable, folded: RecordBatch, keys: &[String], properties: CommitProperties, report: &mut StepReport) -> Result<DeltaTable, SilverError> {
        // A DDL widened a captured column: silver takes the wider type first.
        let table = evolve::evolve_for(table, &silver_schema(&folded.schema()), []).await?;
        let folded = sorted(&folded, keys)?;
        let columns: Vec<String> = silver_schema(&folded.schema()).fields().iter().map(|f| f.name().clone()).collect();
        let mut on = keys.iter().map(|k| format!("target.{c} = source.{c}", c = ident(k))).collect::<Vec<_>>().join(" AND ");
        if let Some(ranges) = key_ranges(&folded, keys, MAX_KEY_RANGES) {
            on = format!("{on} AND ({ranges})");
        }
        let newer = format!("source.{l} > target.{l}", l = ident(START_LSN));
        let source = SessionContext::new().read_batch(folded).map_err(|e| SilverError::Fold(e.to_string()))?;
        let (table, metrics) = table
            .merge(source, on)
            .with_source_alias("source")
            .with_target_alias("target")
            .with_writer_properties(writer_properties())
            .with_commit_properties(properties)
            .with_session_state(merge_session(&self.silver_location)?)
            .when_matched_delete(|delete| delete.predicate(format!("source.{} AND {newer}", ident(DELETE))))
            .and_then(|b| b.when_matched_update(|update| columns.iter().fold(update.predicate(format!("NOT source.{} AND {newer}", ident(DELETE))), |u, c| u.update(ident(c), format!("source.{}", ident(c))))))
            .and_then(|b| b.when_not_matched_insert(|insert| columns.iter().fold(insert.predicate(format!("NOT source.{}", ident(DELETE))), |i, c| i.set(ident(c), format!("source.{}", ident(c))))))
            .map_err(|e| SilverError::delta_at(&self.silver_location, e))?
            .await
            .map_err(|e| SilverError::delta_at(&self.silver_location, e))?;
        report.inserted += metrics.num_target_rows_inserted as u64;
        report.updated += metrics.num_target_rows_updated as u64;
        report.deleted += metrics.num_target_rows_deleted as u64;
        report.files_added += metrics.num_target_files_added as u64;
        report.files_removed += metrics.num_target_files_removed as u64;
        Ok(table)
    }
}

/// From facts in batch order: this bronze table's batches `from + 1, from + 2, ...` without a
/// gap (a batch whose facts row is not written yet ends the run), stopping before the batch
/// that would take the rows past `max_rows` (the first batch is taken whatever its size).
/// Also returns a target of another table's facts seen on the way, for a warning.
fn consecutive_run(facts: Vec<BatchFact>, from: i64, max_rows: i64, ours: impl Fn(&str) -> bool) -> (Vec<BatchFact>, Option<String>) {
    let mut run: Vec<BatchFact> = Vec::new();
    let (mut rows, mut other) = (0i64, None);
    for fact in facts {
        if !ours(&fact.target) {
            other = Some(fact.target);
            continue;
        }
        let expected = run.last().map_or(from + 1, |b| b.batch_id + 1);
        if fact.batch_id < expected {
            continue; // the same batch twice (shared facts tables never repeat, but be safe)
        }
        if fact.batch_id > expected || (!run.is_empty() && rows.saturating_add(fact.rows) > max_rows) {
            break;
        }
        rows = rows.saturating_add(fact.rows);
        run.push(fact);
    }
    (run, other)
}

/// The DataFusion session a copy-on-write MERGE plans and runs in: delta-rs's defaults with
/// one target partition. With more, the MERGE repartitions the joined rows by the file they
/// came from, and DataFusion's repartition keeps queueing rows for one file's writer while
/// another partition's queue is empty: the scan outran the Parquet writer and silver's memory
/// grew with the table (a 10M-change backlog took it past 750 MB; one MERGE into a 573k-row
/// table peaked at 372–413 MB, 265 MB with one partition, in about the same time; ADR 0017).
pub fn merge_session(location: &str) -> Result<std::sync::Arc<dyn deltalake::datafusion::catalog::Session>, SilverError> {
    let overrides = [("datafusion.execution.target_partitions".to_owned(), "1".to_owned())].into_iter().collect();
    let context = deltalake::delta_datafusion::DeltaSessionContext::new_with_session_overrides(&overrides).map_err(|e| SilverError::delta_at(location, e))?;
    Ok(std::sync::Arc::new(context.state()))
}

/// Rows per Parquet row group in the files silver writes.
pub const ROW_GROUP_ROWS: usize = 65_536;

/// How silver's files are written: Snappy, as delta-rs writes by default, in row groups of
/// [`ROW_GROUP_ROWS`]. A copy-on-write MERGE reads and rewrites whole files, one row group
/// at a time: with Parquet's default of a million rows per group, one group held a whole
/// table of up to a million rows in memory, decoded, and its rewrite buffered as much again.
pub fn writer_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_created_by(format!("mssql-cdc {}", env!("CARGO_PKG_VERSION")))
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build()
}

/// Most key ranges a MERGE's file filter names.
pub const MAX_KEY_RANGES: usize = 32;

/// For a single integer key: a filter on silver's key naming at most `max` ranges that cover
/// the fold's keys, split at the largest gaps between them. delta-rs keeps this static part of
/// the MERGE predicate as a file filter, so only files whose key statistics meet a range are
/// read and rewritten; its own filter covers only the batch's min..max, which one stray old
/// key stretches over the whole table. `None` for other keys (the MERGE then uses delta-rs's
/// min..max filter alone).
pub fn key_ranges(folded: &RecordBatch, keys: &[String], max: usize) -> Option<String> {
    let [key] = keys else { return None };
    let column = folded.column_by_name(key)?;
    let column = arrow::compute::cast(column, &arrow::datatypes::DataType::Int64).ok()?;
    let values = column.as_any().downcast_ref::<Int64Array>()?;
    let mut sorted: Vec<i64> = values.iter().flatten().collect();
    if sorted.is_empty() || sorted.len() != values.len() {
        return None;
    }
    sorted.sort_unstable();
    sorted.dedup();
    // Split at the (max - 1) widest gaps.
    let mut gaps: Vec<(u64, usize)> = sorted.windows(2).enumerate().map(|(i, w)| (w[1].abs_diff(w[0]), i + 1)).collect();
    gaps.sort_unstable_by_key(|gap| std::cmp::Reverse(gap.0));
    let mut cuts: Vec<usize> = gaps.iter().take(max.saturating_sub(1)).filter(|g| g.0 > 1).map(|g| g.1).collect();
    cuts.sort_unstable();
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for cut in cuts.into_iter().chain(std::iter::once(sorted.len())) {
        let (lo, hi) = (sorted[start], sorted[cut - 1]);
        ranges.push(if lo == hi { format!("target.{k} = {lo}", k = ident(key)) } else { format!("target.{k} BETWEEN {lo} AND {hi}", k = ident(key)) });
        start = cut;
    }
    Some(ranges.join(" OR "))
}

/// Whether a bronze file may hold rows of a batch after `applied`.
fn bronze_file_needed(file: &TailFile, applied: i64) -> bool {
    file.range.is_none_or(|(_, max)| max > applied)
}

/// Whether a facts file may hold rows silver still needs: rows of a batch after `applied`,
/// unless all its rows are another bronze table's (then recorded in `other`, for a warning).
/// A `target` statistic that may be cut short (a prefix of this table's) counts as this table's.
/// `bronze` is bronze's location as [`crate::delta::location::normalized`] gives it.
fn fact_file_needed(file: &TailFile, applied: i64, bronze: &str, other: &mut Option<String>) -> bool {
    if file.range.is_some_and(|(_, max)| max <= applied) {
        return false;
    }
    match file.only_text("target") {
        Some(target) if !bronze.starts_with(&crate::delta::location::normalized(target)) => {
            *other = Some(target.to_owned());
            false
        }
        _ => true,
    }
}

/// Whether two table locations name the same table: URLs compared without a trailing `/`,
/// local paths made absolute first (no I/O).
fn same_table(a: &str, b: &str) -> bool {
    crate::delta::location::normalized(a) == crate::delta::location::normalized(b)
}

/// The key columns the bronze sink recorded in its last commit's metadata.
async fn bronze_keys(bronze: &DeltaTable) -> Result<Vec<String>, SilverError> {
    use futures::TryStreamExt;
    let history: Vec<_> = bronze.history(Some(1)).try_collect().await.map_err(|e| SilverError::delta(bronze, e))?;
    history
        .into_iter()
        .find_map(|commit| commit.info.get("mssql_cdc.key").and_then(|v| serde_json::from_value::<Vec<String>>(v.clone()).ok()))
        .filter(|keys| !keys.is_empty())
        .ok_or_else(|| SilverError::NoKeys { bronze: bronze.table_url().to_string() })
}

/// The fold's rows sorted by key (silver's files stay clustered by key).
#[allow(clippy::expect_used)] // invariant: the fold's output carries the key, `_delete` and every silver column
fn sorted(folded: &RecordBatch, keys: &[String]) -> Result<RecordBatch, SilverError> {
    let columns: Vec<arrow::compute::SortColumn> = keys
        .iter()
        .map(|k| arrow::compute::SortColumn { values: folded.column_by_name(k).cloned().expect("key column present after the fold"), options: None })
        .collect();
    let indices = arrow::compute::lexsort_to_indices(&columns, None).map_err(|e| SilverError::Fold(e.to_string()))?;
    arrow::compute::take_record_batch(folded, &indices).map_err(|e| SilverError::Fold(e.to_string()))
}

/// The fold's upserts in silver's layout, sorted by key.
#[allow(clippy::expect_used)] // invariant: the fold's output carries the key, `_delete` and every silver column
fn upserts_sorted(folded: &RecordBatch, keys: &[String]) -> Result<RecordBatch, SilverError> {
    let folded = sorted(folded, keys)?;
    let deletes = folded.column_by_name(DELETE).expect("fold has _delete").as_any().downcast_ref::<arrow::array::BooleanArray>().expect("_delete is boolean").clone();
    let keep = arrow::compute::not(&deletes).map_err(|e| SilverError::Fold(e.to_string()))?;
    let kept = arrow::compute::filter_record_batch(&folded, &keep).map_err(|e| SilverError::Fold(e.to_string()))?;
    project_to_silver(&kept)
}

/// Fold rows (upserts) with silver's columns only.
#[allow(clippy::expect_used)] // invariant: the fold's output carries every silver column
fn project_to_silver(rows: &RecordBatch) -> Result<RecordBatch, SilverError> {
    let schema = silver_schema(&rows.schema());
    let indices: Vec<usize> = schema.fields().iter().map(|f| rows.schema().index_of(f.name()).expect("silver column in fold")).collect();
    rows.project(&indices).map_err(|e| SilverError::Fold(e.to_string()))
}

/// `batch` without its fields' metadata: bronze's column comments come along with a read, and
/// silver's own comments on the same columns differ, which a write would refuse to merge.
#[allow(clippy::expect_used)] // invariant: the fold's output carries the key, `_delete` and every silver column
fn without_field_metadata(batch: &RecordBatch) -> RecordBatch {
    let fields: Vec<arrow::datatypes::Field> = batch.schema().fields().iter().map(|f| f.as_ref().clone().with_metadata(Default::default())).collect();
    let schema = std::sync::Arc::new(arrow::datatypes::Schema::new_with_metadata(fields, batch.schema().metadata().clone()));
    RecordBatch::try_new(schema, batch.columns().to_vec()).expect("the same columns under the same types")
}

/// Comments on silver's metadata columns.
fn silver_comments() -> std::collections::HashMap<&'static str, &'static str> {
    std::collections::HashMap::from([
        (START_LSN, "Commit LSN of the change that wrote this row's current image"),
        (COMMIT_TS, "Commit time (UTC) of that change"),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A facts row of this bronze table.
    fn fact(batch_id: i64, rows: i64) -> BatchFact {
        BatchFact { target: "file:///bronze/".into(), batch_id, rows, ..BatchFact::default() }
    }

    /// A step takes consecutive batches only, and stops before the batch that would pass
    /// `max_rows_per_apply`, but always takes one: silver's memory follows the limit, and no
    /// batch is skipped or waits forever.
    #[test]
    fn a_run_is_consecutive_and_stops_before_the_row_limit() {
        let ours = |t: &str| t == "file:///bronze/";
        let ids = |run: &[BatchFact]| run.iter().map(|b| b.batch_id).collect::<Vec<_>>();
        let facts = vec![fact(3, 40), fact(4, 50), fact(5, 20), fact(6, 1)];
        assert_eq!(ids(&consecutive_run(facts.clone(), 2, 1000, ours).0), vec![3, 4, 5, 6]);
        assert_eq!(ids(&consecutive_run(facts.clone(), 2, 90, ours).0), vec![3, 4]);
        assert_eq!(ids(&consecutive_run(facts.clone(), 2, 10, ours).0), vec![3], "a batch over the limit goes alone");
        assert_eq!(ids(&consecutive_run(facts.clone(), 3, 70, ours).0), vec![4, 5]);
        let gap = vec![fact(3, 1), fact(5, 1)];
        assert_eq!(ids(&consecutive_run(gap, 2, 1000, ours).0), vec![3], "a missing facts row ends the run");
        let mut other = fact(3, 1);
        other.target = "file:///elsewhere/".into();
        let (run, seen) = consecutive_run(vec![other, fact(3, 1)], 2, 1000, ours);
        assert_eq!((ids(&run), seen.as_deref()), (vec![3], Some("file:///elsewhere/")));
    }

    /// The ranges cover every key, split where the keys are furthest apart.
    #[test]
    fn key_ranges_split_at_the_widest_gaps() {
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::new(vec![arrow::datatypes::Field::new("id", arrow::datatypes::DataType::Int64, false)]));
        let batch = RecordBatch::try_new(schema, vec![std::sync::Arc::new(Int64Array::from(vec![1000, 5, 1001, 7, 1_000_000, 6]))]).unwrap();
        let keys = vec!["id".to_owned()];
        assert_eq!(key_ranges(&batch, &keys, 3).unwrap(), "target.\"id\" BETWEEN 5 AND 7 OR target.\"id\" BETWEEN 1000 AND 1001 OR target.\"id\" = 1000000");
        assert_eq!(key_ranges(&batch, &keys, 1).unwrap(), "target.\"id\" BETWEEN 5 AND 1000000");
        assert!(key_ranges(&batch, &["id".to_owned(), "other".to_owned()], 3).is_none());
    }

    #[test]
    fn table_locations_compare_as_urls() {
        assert!(same_table("s3://lake/bronze/", "s3://lake/bronze"));
        assert!(!same_table("s3://lake/bronze", "s3://lake/bronze2"));
        assert!(same_table("./lake/bronze", &format!("file://{}/lake/bronze/", std::env::current_dir().unwrap().display())));
    }
}
