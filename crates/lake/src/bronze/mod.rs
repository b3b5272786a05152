//! `delta-bronze`: the feed (data and control topics) into a bronze Delta table and the facts
//! table, exactly once without Kafka transactions.
//!
//! The loop follows the control topic in order. For each batch it reads exactly the data
//! records the control record names (its offset ranges per partition), appends them to bronze
//! in one Delta commit carrying `txn(app_id, batch_id)` and the batch's LSN range in the commit
//! metadata, then appends the batch's facts rows with `txn(<app_id>#facts, batch_id)`. On start
//! it reads both `txn` versions back from the Delta logs: a batch at or below a version is not
//! written again there, so a crash at any point, a re-delivered control record or a duplicated
//! data record changes nothing. Consumer-group offsets are committed only for lag tools.
//!
//! Consecutive batches neither table holds are written as a group ([`group`]) in one commit
//! per table, and the next group's records are read while the current group is decoded and
//! committed (reads and commits each stay in order).
//!
//! See `docs/connectors/delta-bronze.md` and `docs/tables.md`.

mod arrivals;
pub mod config;
pub mod error;
pub mod feed;
pub mod group;
pub mod plans;
pub mod records;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use config::{BronzeOptions, BronzeSettings};
pub use error::BronzeError;

use self::config::BadRecords;
use self::feed::Feed;
use self::group::Written;
use crate::fault;
use crate::delta::storage::Storage;
use crate::delta::table as delta;
use crate::delta::evolve;
use crate::delta::appender::Appender;
use crate::delta::files::FileAppend;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::log::control::ControlRecord;
use mssql_cdc_core::log::decode::confluent_schema_id;
use mssql_cdc_core::log::registry::SchemaRegistry;
use mssql_cdc_core::log::Encoding;
use crate::facts::{facts_app_id, facts_comments, facts_rows, facts_schema, SinkMetrics};
use mssql_cdc_core::stage::{Progress, Stage, StageContext, StageError};
use mssql_cdc_core::telemetry::events::BronzeBatchWritten;

/// The `delta-bronze` stage.
pub struct BronzeSink {
    name: String,
    settings: BronzeSettings,
    kafka: KafkaConfig,
    progress: Progress,
}

impl BronzeSink {
    /// A sink from validated settings.
    pub fn new(settings: BronzeSettings, context: &StageContext) -> Self {
        Self { name: context.name.clone(), settings, kafka: context.worker.kafka.clone(), progress: context.progress.clone() }
    }
}

impl Stage for BronzeSink {
    fn run(self: Box<Self>, cancel: CancellationToken) -> BoxFuture<'static, Result<(), StageError>> {
        let name = self.name.clone();
        Box::pin(async move {
            let result = async { Writer::start(*self).await?.run(cancel).await }.await;
            result.map_err(|e| StageError::from_cause(&name, e))
        })
    }
}

/// A group of batches taken from the control topic, with the background read of its data
/// records when it is written as a group.
struct Ahead {
    /// The control offset of its last record.
    offset: i64,
    group: Vec<ControlRecord>,
    reading: Option<tokio::task::JoinHandle<Result<GroupRecords, BronzeError>>>,
}

/// A group's data records decoded, one per batch with rows, and the time their read took.
type GroupRecords = (Vec<Prepared>, Duration);

/// A batch's records decoded into bronze's layout (good rows and bad records), not yet
/// acted on: the bad ones are dead-lettered or stop the sink when the batch is written.
struct Prepared {
    decoded: records::Decoded,
    /// Bytes of the records read.
    bytes: u64,
}

/// The running sink.
struct Writer {
    name: String,
    settings: BronzeSettings,
    feed: Feed,
    registry: Option<Arc<SchemaRegistry>>,
    /// Object-store options of both tables, resolved.
    storage: Storage,
    /// The tables, appended to without re-reading them ([`Appender`]).
    bronze: Option<Appender>,
    facts: Option<Appender>,
    /// `txn` versions read back from the tables (-1: none).
    bronze_version: i64,
    facts_version: i64,
    progress: Progress,
    /// A control record fetched while a group was formed that did not join it: the next one.
    held: Option<(i64, ControlRecord)>,
    /// Where the control topic is followed from, until its first record is seen: the
    /// consumer group's offset (only a hint) and the first batch id the tables need.
    resume: Option<(i64, i64)>,
    /// The highest batch id seen on the control topic.
    last_seen: Option<u64>,
}

impl Writer {
    async fn start(sink: BronzeSink) -> Result<Self, BronzeError> {
        let settings = sink.settings;
        let registry = match &settings.encoding {
            Encoding::Avro(registry) => Some(Arc::new(SchemaRegistry::new(registry).map_err(|e| BronzeError::Kafka(e.to_string()))?)),
            Encoding::Json => None,
        };
        let app_id = &settings.app_id;
        let dead_letter = match &settings.bad_records {
            BadRecords::DeadLetter(topic) => Some(topic.as_str()),
            BadRecords::Stop => None,
        };
        let feed = Feed::new(&sink.kafka, &settings.consumer_properties, app_id, &settings.topic, &settings.control_topic, dead_letter)?;
        feed.ensure_dead_letter_topic(&sink.kafka).await?;
        let storage = settings.storage_options.resolve()?;
        let bronze = delta::open(&settings.target, &storage).await?;
        let bronze_version = match &bronze {
            Some(table) => delta::txn_version(table, app_id).await?.unwrap_or(-1),
            None => -1,
        };
        let (facts, facts_version) = match &settings.facts_table {
            Some(location) => {
                let table = match delta::open(location, &storage).await? {
                    Some(table) => table,
                    None => delta::create(location, &storage, &facts_schema(), &facts_comments(), "mssql-cdc facts: one row per batch and event").await?,
                };
                let version = delta::txn_version(&table, &facts_app_id(app_id)).await?.unwrap_or(-1);
                (Some(Appender::new(table)), version)
            }
            None => (None, -1),
        };
        let bronze = bronze.map(Appender::new);
        Ok(Self { name: sink.name, settings, feed, registry, storage, bronze, facts, bronze_version, facts_version, progress: sink.progress, held: None, resume: None, last_seen: None })
    }

    async fn run(mut self, cancel: CancellationToken) -> Result<(), BronzeError> {
        let written = self.bronze_version.max(self.facts_version);
        if !self.feed.wait_for_topics(&cancel).await? {
            return Ok(());
        }
        let last = self.feed.last_batch_id().await?;
        if written >= 0 && last.is_none_or(|last| (last as i64) < written) {
            return Err(BronzeError::RewoundFeed {
                app_id: self.settings.app_id.clone(),
                target: self.settings.target.clone(),
                written,
                control_topic: self.settings.control_topic.clone(),
                found: last.map_or("is empty".to_owned(), |b| format!("ends at batch {b}")),
            });
        }
        let needed = self.bronze_version.min(if self.facts.is_some() { self.facts_version } else { self.bronze_version }) + 1;
        let hint = self.feed.committed().await.unwrap_or(0);
        self.feed.assign_control(hint)?;
        tracing::info!(connector = %self.name, app_id = %self.settings.app_id, bronze_version = self.bronze_version, facts_version = self.facts_version, control_offset = hint, "bronze sink resuming");
        self.resume = Some((hint, needed));
        BronzeBatchWritten::register(&self.name, &self.settings.app_id);
        // The group whose records are read while the one before it is decoded and committed.
        let mut ahead: Option<Ahead> = None;
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let next = match ahead.take() {
                Some(next) => next,
                None => match self.next_group(Duration::from_millis(500)).await? {
                    Some((offset, group)) => self.read_ahead(offset, group),
                    None => continue,
                },
            };
            let (offset, group) = (next.offset, next.group.clone());
            let started = Instant::now();
            // What is left behind the group, asked while it is written (a broker round trip).
            let behind = {
                let feed = self.feed.clone();
                tokio::spawn(async move { feed.behind(offset + 1).await })
            };
            // A call that never returns (an object store or broker connection left hanging)
            // must not stall the sink for good: the batch is given up and the sink starts
            // again from what the tables hold.
            let timeout = self.settings.batch_timeout;
            let written = match tokio::time::timeout(timeout, self.write(next, &mut ahead)).await {
                Ok(written) => written?,
                Err(_) => return Err(BronzeError::Stalled { batch_id: group[0].batch_id, timeout_ms: timeout.as_millis() }),
            };
            self.feed.commit(offset + 1);
            self.progress.advance();
            if written.iter().any(Option::is_some) {
                // A coalesced commit's time is shared among its batches.
                let (duration, behind) = (started.elapsed() / group.len() as u32, behind.await.ok().flatten());
                for (control, sink) in group.iter().zip(written).filter_map(|(c, s)| Some((c, s?))) {
                    BronzeBatchWritten {
                        connector: &self.name,
                        app_id: &self.settings.app_id,
                        batch_id: control.batch_id,
                        rows: sink.rows,
                        dead_lettered: sink.dead_lettered,
                        duration,
                        behind,
                    }
                    .emit();
                }
            }
        }
    }

    /// The next group ([`group`]): a control record and, when it may be coalesced, the ones
    /// already fetched that join it (what is fetched joins while it may); with the control
    /// offset of its last record. `None` when no control record came within `timeout`.
    async fn next_group(&mut self, timeout: Duration) -> Result<Option<(i64, Vec<ControlRecord>)>, BronzeError> {
        let Some((mut offset, control)) = self.next_control(timeout).await? else { return Ok(None) };
        let mut group = vec![control];
        if group::groupable(&group[0], self.written()) {
            while group.len() < self.settings.coalesce.batches {
                let Some((next_offset, next)) = self.next_control(Duration::ZERO).await? else { break };
                if !group::joins(self.settings.coalesce, &group, &next, self.written()) {
                    self.held = Some((next_offset, next));
                    break;
                }
                group.push(next);
                offset = next_offset;
            }
        }
        Ok(Some((offset, group)))
    }

    /// A group with the read and decoding of its data records started in the background
    /// when it is written as a group (a batch written on its own reads its records itself).
    fn read_ahead(&self, offset: i64, group: Vec<ControlRecord>) -> Ahead {
        // A batch over `max_rows_per_commit` streams on its own ([`Writer::append_streaming`]).
        let streams = matches!(group.as_slice(), [one] if self.streams(one));
        let reading = (group::groupable(&group[0], self.written()) && !streams).then(|| {
            let batches: Vec<ControlRecord> = group.iter().filter(|c| c.rows > 0).cloned().collect();
            let (feed, registry, started) = (self.feed.clone(), self.registry.clone(), Instant::now());
            tokio::spawn(async move {
                let records = feed.read_group(batches.iter().map(|c| c.partitions.clone()).collect()).await?;
                let read = started.elapsed();
                let mut inputs = Vec::with_capacity(batches.len());
                for (control, records) in batches.into_iter().zip(records) {
                    let writers = writer_schemas(registry.as_deref(), &records).await?;
                    inputs.push((control, records, writers));
                }
                let decode = move || inputs.iter().map(|(control, records, writers)| prepare(control, records, writers.as_ref())).collect();
                let prepared = tokio::task::spawn_blocking(decode).await.map_err(|e| BronzeError::Kafka(format!("decoding a group's records failed: {e}")))?;
                Ok((prepared, read))
            })
        });
        Ahead { offset, group, reading }
    }

    /// The next control record (the one held back first), checked for gaps; `None` when none
    /// came within `timeout`, or when the first record showed the consumer group's offset to
    /// be past what the tables need (the topic is then followed from its start).
    async fn next_control(&mut self, timeout: Duration) -> Result<Option<(i64, ControlRecord)>, BronzeError> {
        if let Some(held) = self.held.take() {
            return Ok(Some(held));
        }
        let Some((offset, control)) = self.feed.next_control(timeout).await? else { return Ok(None) };
        if let Some((hint, needed)) = self.resume.take()
            && hint > 0
            && (control.batch_id as i64) > needed
        {
            // The committed offset is past what the tables hold (it is only a hint).
            self.feed.assign_control(0)?;
            return Ok(None);
        }
        if let Some(previous) = self.last_seen
            && control.batch_id > previous + 1
        {
            return Err(BronzeError::Gap { control_topic: self.settings.control_topic.clone(), previous, next: control.batch_id });
        }
        self.last_seen = Some(self.last_seen.map_or(control.batch_id, |p| p.max(control.batch_id)));
        Ok(Some((offset, control)))
    }

    fn written(&self) -> Written {
        Written { bronze: self.bronze_version, facts: self.facts.as_ref().map(|_| self.facts_version) }
    }

    /// Writes a group: one batch on its own, or as a group in one bronze and one facts commit.
    /// Once a group's records are in, the next group's read starts (`ahead`), so that it
    /// overlaps this group's decoding and commits.
    async fn write(&mut self, next: Ahead, ahead: &mut Option<Ahead>) -> Result<Vec<Option<SinkMetrics>>, BronzeError> {
        let Some(reading) = next.reading else {
            let [control] = next.group.as_slice() else { return Err(BronzeError::Kafka("a group of batches was formed without its read".into())) };
            return Ok(vec![self.batch(control).await?]);
        };
        let (prepared, read) = reading.await.map_err(|e| BronzeError::Kafka(format!("the read of a group's records failed: {e}")))??;
        if ahead.is_none()
            && let Some((offset, group)) = self.next_group(Duration::ZERO).await?
        {
            *ahead = Some(self.read_ahead(offset, group));
        }
        Ok(self.coalesced(&next.group, prepared, read).await?.into_iter().map(Some).collect())
    }

    /// Writes consecutive batches neither table holds yet ([`group`]), given their records
    /// decoded (one per batch with rows, read in one pass in `read`): bad records acted on
    /// batch by batch, the rows appended in one bronze commit with `txn(app_id, last id)`,
    /// then every batch's facts rows in one commit with `txn(<app_id>#facts, last id)`.
    async fn coalesced(&mut self, group: &[ControlRecord], prepared: Vec<Prepared>, read: Duration) -> Result<Vec<SinkMetrics>, BronzeError> {
        let (Some(first), Some(last)) = (group.first(), group.last()) else { return Ok(Vec::new()) };
        let read_ms = read.as_millis() as u64 / prepared.len().max(1) as u64;
        let mut prepared = prepared.into_iter();
        let (mut sinks, mut batches) = (Vec::with_capacity(group.len()), Vec::new());
        for control in group {
            if control.rows == 0 {
                sinks.push(SinkMetrics::default());
                continue;
            }
            let Some(batch) = prepared.next() else { return Err(BronzeError::Kafka(format!("batch {}: its records were not read", control.batch_id))) };
            let (mut sink, batch) = self.take_good(batch).await?;
            sink.read_ms = read_ms;
            batches.extend(batch);
            sinks.push(sink);
        }
        let rows = sinks.iter().map(|s| s.rows).sum();
        if !batches.is_empty() {
            self.commit_data(batches, first, last, rows).await?;
        }
        for control in group.iter().filter(|c| c.rows > 0) {
            fault::crash_point(fault::Point::AfterBronzeDataCommit, control.batch_id as i64);
        }
        self.commit_facts(group, &sinks).await?;
        Ok(sinks)
    }

    /// Appends the facts rows of `group` (consecutive batches, with what the sink measured of
    /// each) in one commit with `txn(<app_id>#facts, last id)`; nothing without a facts table.
    async fn commit_facts(&mut self, group: &[ControlRecord], sinks: &[SinkMetrics]) -> Result<(), BronzeError> {
        let (Some(first), Some(last)) = (group.first(), group.last()) else { return Ok(()) };
        let Some(facts) = self.facts.as_mut() else { return Ok(()) };
        let now = Utc::now();
        let rows = group.iter().zip(sinks).map(|(control, sink)| facts_rows(&self.settings.target, &self.settings.app_id, control, sink, now)).collect();
        let metadata = [
            ("mssql_cdc.batch_id".to_owned(), serde_json::json!(last.batch_id)),
            ("mssql_cdc.first_batch_id".to_owned(), serde_json::json!(first.batch_id)),
        ];
        let id = last.batch_id as i64;
        facts.append(rows, &facts_app_id(&self.settings.app_id), id, metadata).await?;
        self.facts_version = id;
        Ok(())
    }

    /// Writes one batch where it is not written yet; what this run wrote (`None` when both
    /// tables had it already). Rows count only when appended by this run.
    async fn batch(&mut self, control: &ControlRecord) -> Result<Option<SinkMetrics>, BronzeError> {
        let id = control.batch_id as i64;
        let data_done = id <= self.bronze_version || control.rows == 0;
        let facts_pending = self.facts.is_some() && id > self.facts_version;
        if data_done && !facts_pending {
            return Ok(None);
        }
        let mut sink = SinkMetrics::default();
        let mut appended = 0;
        if !data_done {
            sink = self.append_data(control).await?;
            appended = sink.rows;
            fault::crash_point(fault::Point::AfterBronzeDataCommit, id);
        } else if control.rows > 0 {
            sink.rows = control.rows;
            sink.warnings.push("facts written after a restart: the data commit was already in bronze, so the sink's read metrics are not known".into());
        }
        if facts_pending {
            self.record_plan(control).await?;
        }
        if facts_pending {
            self.commit_facts(std::slice::from_ref(control), std::slice::from_ref(&sink)).await?;
        }
        sink.rows = appended;
        Ok(Some(sink))
    }

    /// A chunked snapshot's plan, into the plans table next to bronze (created on the first
    /// plan), once per batch; before the batch's facts rows, which mark it written.
    async fn record_plan(&self, control: &ControlRecord) -> Result<(), BronzeError> {
        let Some(rows) = plans::plan_rows(&self.settings.target, &self.settings.app_id, control, Utc::now()) else { return Ok(()) };
        let location = plans::plans_location(&self.settings.target);
        let table = match delta::open(&location, &self.storage).await? {
            Some(table) => table,
            None => delta::create(&location, &self.storage, &plans::plans_schema(), &plans::plans_comments(), "mssql-cdc chunked snapshot plans: one row per chunk").await?,
        };
        let app = plans::plans_app_id(&self.settings.app_id);
        let id = control.batch_id as i64;
        if delta::txn_version(&table, &app).await?.is_some_and(|v| v >= id) {
            return Ok(());
        }
        delta::append(table, vec![rows], &app, id, [("mssql_cdc.batch_id".to_owned(), serde_json::json!(id))]).await?;
        Ok(())
    }

    /// Whether a batch is too large to hold: over `max_rows_per_commit` rows.
    fn streams(&self, control: &ControlRecord) -> bool {
        control.rows > self.settings.coalesce.rows
    }

    /// Reads, decodes and appends a batch's rows; returns what was measured.
    async fn append_data(&mut self, control: &ControlRecord) -> Result<SinkMetrics, BronzeError> {
        if self.streams(control) {
            return self.append_streaming(control).await;
        }
        let started = Instant::now();
        let records = self.feed.read_ranges(&control.partitions).await?;
        let read_ms = started.elapsed().as_millis() as u64;
        let (mut sink, batch) = self.decode(control, records).await?;
        sink.read_ms = read_ms;
        if let Some(batch) = batch {
            self.commit_data(vec![batch], control, control, sink.rows).await?;
        }
        Ok(sink)
    }

    /// Appends a batch too large to hold ([`Writer::streams`]) chunk by chunk: its records are
    /// read in chunks of `max_rows_per_commit`, each decoded and written to a Parquet file of
    /// its own while the next is read, and every file is committed at the end in one commit
    /// with `txn(app_id, batch id)`, as a batch held whole would be. At most about two chunks
    /// are in memory at once.
    async fn append_streaming(&mut self, control: &ControlRecord) -> Result<SinkMetrics, BronzeError> {
        let started = Instant::now();
        let chunk = usize::try_from(self.settings.coalesce.rows).unwrap_or(usize::MAX);
        let (sender, mut chunks) = tokio::sync::mpsc::channel(1);
        let (feed, ranges) = (self.feed.clone(), control.partitions.clone());
        let reading = tokio::spawn(async move { feed.stream_ranges(ranges, chunk, sender).await });
        let mut sink = SinkMetrics::default();
        let mut append: Option<(Appender, FileAppend)> = None;
        while let Some(records) = chunks.recv().await {
            let (part, batch) = self.decode(control, records).await?;
            sink.bytes += part.bytes;
            sink.dead_lettered += part.dead_lettered;
            sink.warnings.extend(part.warnings);
            let Some(batch) = batch else { continue };
            sink.rows += batch.num_rows() as u64;
            let (table, files) = match append.take() {
                Some(open) => open,
                None => {
                    let table = self.prepared_table(&batch.schema(), control).await?;
                    let files = FileAppend::new(table.table())?;
                    (table, files)
                }
            };
            let mut files = files;
            files.write(table.table(), batch).await?;
            append = Some((table, files));
        }
        reading.await.map_err(|e| BronzeError::Kafka(format!("the read of a batch's records failed: {e}")))??;
        sink.read_ms = started.elapsed().as_millis() as u64;
        if let Some((mut table, files)) = append {
            tracing::debug!(connector = %self.name, batch_id = control.batch_id, files = files.files(), rows = sink.rows, "a large batch written file by file");
            files.commit(&mut table, &self.settings.app_id, control.batch_id as i64, self.commit_metadata(control, control, sink.rows)).await?;
            self.bronze = Some(table);
            self.bronze_version = control.batch_id as i64;
        }
        Ok(sink)
    }

    /// Bronze, created with `schema` if it does not exist, and widened to it where a DDL
    /// widened a captured column (on the table read again: its file list is rewritten).
    async fn prepared_table(&mut self, schema: &arrow::datatypes::SchemaRef, first: &ControlRecord) -> Result<Appender, BronzeError> {
        let appender = match self.bronze.take() {
            Some(appender) => appender,
            None => Appender::new(delta::create(&self.settings.target, &self.storage, schema, &records::comments(), &format!("mssql-cdc bronze of {}", self.settings.topic)).await?),
        };
        if !evolve::needed(appender.table(), schema)? {
            return Ok(appender);
        }
        let (mut table, version) = appender.into_table();
        table.update_state().await.map_err(|e| delta::DeltaError::new(&self.settings.target, e))?;
        let table = evolve::evolve_for(table, schema, [("mssql_cdc.batch_id".to_owned(), serde_json::json!(first.batch_id))]).await?;
        Ok(Appender::resume(table, version))
    }

    /// The metadata of a bronze commit of the batches `first` to `last`.
    fn commit_metadata(&self, first: &ControlRecord, last: &ControlRecord, rows: u64) -> [(String, serde_json::Value); 7] {
        [
            ("mssql_cdc.batch_id".to_owned(), serde_json::json!(last.batch_id)),
            ("mssql_cdc.first_batch_id".to_owned(), serde_json::json!(first.batch_id)),
            ("mssql_cdc.from_lsn".to_owned(), serde_json::json!(first.from_lsn.to_string())),
            ("mssql_cdc.to_lsn".to_owned(), serde_json::json!(last.to_lsn.to_string())),
            ("mssql_cdc.data_topic".to_owned(), serde_json::json!(self.settings.topic)),
            ("mssql_cdc.rows".to_owned(), serde_json::json!(rows)),
            ("mssql_cdc.key".to_owned(), serde_json::json!(last.schema.key)),
        ]
    }

    /// Decodes a batch's records into bronze's layout ([`Writer::take_good`]).
    async fn decode(&mut self, control: &ControlRecord, records: Vec<records::DataRecord>) -> Result<(SinkMetrics, Option<arrow::array::RecordBatch>), BronzeError> {
        let writers = writer_schemas(self.registry.as_deref(), &records).await?;
        self.take_good(prepare(control, &records, writers.as_ref())).await
    }

    /// The good rows of a decoded batch; bad records stop the sink or go to the dead-letter
    /// topic (acknowledged before this returns). `None` when no row is good.
    async fn take_good(&mut self, prepared: Prepared) -> Result<(SinkMetrics, Option<arrow::array::RecordBatch>), BronzeError> {
        let Prepared { decoded, bytes } = prepared;
        let mut sink = SinkMetrics { bytes, ..Default::default() };
        for (record, reason) in &decoded.bad {
            match &self.settings.bad_records {
                BadRecords::Stop => {
                    return Err(BronzeError::Undecodable { topic: self.settings.topic.clone(), partition: record.partition, offset: record.offset, reason: reason.clone() });
                }
                BadRecords::DeadLetter(_) => {
                    self.feed.dead_letter(record, reason)?;
                    tracing::warn!(connector = %self.name, topic = %self.settings.topic, partition = record.partition, offset = record.offset, reason = %reason, "record dead-lettered");
                    sink.warnings.push(format!("{}/{} offset {}: dead-lettered: {reason}", self.settings.topic, record.partition, record.offset));
                    sink.dead_lettered += 1;
                }
            }
        }
        if !decoded.bad.is_empty() {
            self.feed.flush_dead_letters().await?;
        }
        sink.rows = decoded.batch.as_ref().map_or(0, |b| b.num_rows() as u64);
        Ok((sink, decoded.batch))
    }

    /// Appends the rows of the batches `first` to `last` (one layout) in one commit with
    /// `txn(app_id, last id)`, creating bronze with the first rows and widening its types
    /// first where a DDL widened a captured column.
    async fn commit_data(&mut self, batches: Vec<arrow::array::RecordBatch>, first: &ControlRecord, last: &ControlRecord, rows: u64) -> Result<(), BronzeError> {
        let Some(batch) = batches.first() else { return Ok(()) };
        // A DDL widened a captured column: the table takes the wider type first.
        let mut table = self.prepared_table(&batch.schema(), first).await?;
        let metadata = self.commit_metadata(first, last, rows);
        let id = last.batch_id as i64;
        let appended = table.append(batches, &self.settings.app_id, id, metadata).await;
        self.bronze = Some(table);
        let path = appended?;
        tracing::debug!(connector = %self.name, batch_id = id, path = ?path, "bronze commit");
        self.bronze_version = id;
        Ok(())
    }
}

/// Decodes a batch's records (JSON, or Avro with `writers`) into bronze's layout; rows must lie
/// in the batch's range (a snapshot's all carry its LSN).
fn prepare(control: &ControlRecord, records: &[records::DataRecord], writers: Option<&HashMap<u32, apache_avro::Schema>>) -> Prepared {
    let (low, high) = control.row_lsn_range();
    let decoded = records::decode(&control.schema, records, writers, control.envelope, control.batch_id, &low.to_string(), &high.to_string());
    Prepared { decoded, bytes: records.iter().map(|r| r.value.len() as u64).sum() }
}

/// With Avro, the writer schema of every schema id among `records` that the registry
/// knows (a record naming an unknown id is bad, not a failure); `None` with JSON.
async fn writer_schemas(registry: Option<&SchemaRegistry>, records: &[records::DataRecord]) -> Result<Option<HashMap<u32, apache_avro::Schema>>, BronzeError> {
    let Some(registry) = registry else { return Ok(None) };
    let ids: BTreeSet<u32> = records.iter().filter_map(|r| confluent_schema_id(&r.value)).collect();
    let mut schemas = HashMap::with_capacity(ids.len());
    for id in ids {
        match registry.schema_by_id(id).await {
            Ok(schema) => {
                schemas.insert(id, schema);
            }
            Err(mssql_cdc_core::log::registry::RegistryError::Refused { status: 404, .. }) => {}
            Err(error) => return Err(BronzeError::Kafka(format!("schema registry: {error}"))),
        }
    }
    Ok(Some(schemas))
}
