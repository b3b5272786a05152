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
//! See `docs/connectors/delta-bronze.md` and `docs/tables.md`.

pub mod config;
pub mod error;
pub mod feed;
pub mod plans;
pub mod records;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use chrono::Utc;
use deltalake::DeltaTable;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use config::{BronzeOptions, BronzeSettings};
pub use error::BronzeError;

use self::config::BadRecords;
use self::feed::Feed;
use crate::fault;
use crate::delta::storage::Storage;
use crate::delta::table as delta;
use crate::delta::evolve;
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

/// The running sink.
struct Writer {
    name: String,
    settings: BronzeSettings,
    feed: Feed,
    registry: Option<SchemaRegistry>,
    /// Object-store options of both tables, resolved.
    storage: Storage,
    bronze: Option<DeltaTable>,
    facts: Option<DeltaTable>,
    /// `txn` versions read back from the tables (-1: none).
    bronze_version: i64,
    facts_version: i64,
    progress: Progress,
}

impl Writer {
    async fn start(sink: BronzeSink) -> Result<Self, BronzeError> {
        let settings = sink.settings;
        let registry = match &settings.encoding {
            Encoding::Avro(registry) => Some(SchemaRegistry::new(registry).map_err(|e| BronzeError::Kafka(e.to_string()))?),
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
                (Some(table), version)
            }
            None => (None, -1),
        };
        Ok(Self { name: sink.name, settings, feed, registry, storage, bronze, facts, bronze_version, facts_version, progress: sink.progress })
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
        let mut first = true;
        let mut last_seen: Option<u64> = None;
        BronzeBatchWritten::register(&self.name, &self.settings.app_id);
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let Some((offset, control)) = self.feed.next_control(Duration::from_millis(500)).await? else {
                continue;
            };
            if first {
                first = false;
                if hint > 0 && (control.batch_id as i64) > needed {
                    // The committed offset is past what the tables hold (it is only a hint).
                    self.feed.assign_control(0)?;
                    continue;
                }
            }
            if let Some(previous) = last_seen
                && control.batch_id > previous + 1 {
                    return Err(BronzeError::Gap { control_topic: self.settings.control_topic.clone(), previous, next: control.batch_id });
                }
            last_seen = Some(last_seen.map_or(control.batch_id, |p| p.max(control.batch_id)));
            let started = Instant::now();
            // A call that never returns (an object store or broker connection left hanging)
            // must not stall the sink for good: the batch is given up and the sink starts
            // again from what the tables hold.
            let timeout = self.settings.batch_timeout;
            let written = match tokio::time::timeout(timeout, self.batch(&control)).await {
                Ok(written) => written?,
                Err(_) => return Err(BronzeError::Stalled { batch_id: control.batch_id, timeout_ms: timeout.as_millis() }),
            };
            self.feed.commit(offset + 1);
            self.progress.advance();
            if let Some(sink) = written {
                BronzeBatchWritten {
                    connector: &self.name,
                    app_id: &self.settings.app_id,
                    batch_id: control.batch_id,
                    rows: sink.rows,
                    dead_lettered: sink.dead_lettered,
                    duration: started.elapsed(),
                    behind: self.feed.behind(offset + 1).await,
                }
                .emit();
            }
        }
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
        let facts = if facts_pending { self.facts.take() } else { None };
        if let Some(table) = facts {
            let rows = facts_rows(&self.settings.target, &self.settings.app_id, control, &sink, Utc::now());
            let metadata = [("mssql_cdc.batch_id".to_owned(), serde_json::json!(control.batch_id))];
            let table = delta::append(table, vec![rows], &facts_app_id(&self.settings.app_id), id, metadata).await?;
            self.facts = Some(table);
            self.facts_version = id;
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

    /// With Avro, the writer schema of every schema id among `records` that the registry
    /// knows (a record naming an unknown id is bad, not a failure); `None` with JSON.
    async fn writer_schemas(&self, records: &[records::DataRecord]) -> Result<Option<HashMap<u32, apache_avro::Schema>>, BronzeError> {
        let Some(registry) = &self.registry else { return Ok(None) };
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

    /// Reads, decodes and appends a batch's rows; returns what was measured.
    async fn append_data(&mut self, control: &ControlRecord) -> Result<SinkMetrics, BronzeError> {
        let id = control.batch_id as i64;
        let started = Instant::now();
        let records = self.feed.read_ranges(&control.partitions).await?;
        let mut sink = SinkMetrics { read_ms: started.elapsed().as_millis() as u64, bytes: records.iter().map(|r| r.value.len() as u64).sum(), ..Default::default() };
        let writers = self.writer_schemas(&records).await?;
        // Rows lie in the batch's range; a snapshot's all carry its LSN.
        let (low, high) = control.row_lsn_range();
        let decoded = records::decode(&control.schema, &records, writers.as_ref(), control.batch_id, &low.to_string(), &high.to_string());
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
        let Some(batch) = decoded.batch else {
            return Ok(sink);
        };
        sink.rows = batch.num_rows() as u64;
        let table = match self.bronze.take() {
            Some(table) => table,
            None => delta::create(&self.settings.target, &self.storage, &batch.schema(), &records::comments(), &format!("mssql-cdc bronze of {}", self.settings.topic)).await?,
        };
        // A DDL widened a captured column: the table takes the wider type first.
        let table = evolve::evolve_for(table, &batch.schema(), [("mssql_cdc.batch_id".to_owned(), serde_json::json!(control.batch_id))]).await?;
        let metadata = [
            ("mssql_cdc.batch_id".to_owned(), serde_json::json!(control.batch_id)),
            ("mssql_cdc.from_lsn".to_owned(), serde_json::json!(control.from_lsn.to_string())),
            ("mssql_cdc.to_lsn".to_owned(), serde_json::json!(control.to_lsn.to_string())),
            ("mssql_cdc.data_topic".to_owned(), serde_json::json!(self.settings.topic)),
            ("mssql_cdc.rows".to_owned(), serde_json::json!(sink.rows)),
            ("mssql_cdc.key".to_owned(), serde_json::json!(control.schema.key)),
        ];
        let table = delta::append(table, vec![batch], &self.settings.app_id, id, metadata).await?;
        self.bronze = Some(table);
        self.bronze_version = id;
        Ok(sink)
    }
}
