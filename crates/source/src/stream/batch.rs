//! One batch, top-down: **plan** the commits after the position → **read** their change rows
//! → **encode** and **publish** them as they arrive → wait for every acknowledgement → the
//! **control record** naming them → advance the position.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::changes::{ChunkSpec, Chunker, Span};
use super::ddl::DdlAhead;
use super::parallel::{self, PartitionedRead};
use super::switch::Follow;
use super::{Position, Setup, Step, Stream};
use crate::config::{OnDataLoss, SchemaChangePolicy};
use crate::connection::TdsClient;
use crate::error::SourceError;
use crate::publish::{Producing, Queued};
use crate::reader::{self, Commit, ServerState};
use crate::zone::ZoneRule;
use mssql_cdc_core::log::control::{ControlRecord, Event, PartitionRange, SourceMetrics, CONTROL_VERSION, CONTROL_VERSION_DEBEZIUM};
use mssql_cdc_core::log::debezium::event::{AvroIds, EventSettings, EventWriter};
use mssql_cdc_core::log::debezium::TableNames;
use mssql_cdc_core::log::encode::{confluent_header, RowEncoder};
use mssql_cdc_core::log::Envelope;
use mssql_cdc_core::log::schema::TableSchema;
use mssql_cdc_core::telemetry::events::{SourceBatchPlannedAhead, SourceBatchPublished};
use mssql_cdc_types::lsn::Lsn;

/// A planned batch: the commits after the position, at most `max_commits_per_batch` and never
/// past the server's maximum LSN, with their UTC commit times.
struct Plan {
    /// Reading starts after this LSN (the position, or past changes skipped as lost).
    from: Lsn,
    /// The last commit of the batch (`from` when there is none).
    to: Lsn,
    commits: Vec<Commit>,
    /// The first commit left for the next batch, if the limit cut the plan.
    next_unread: Option<Commit>,
    /// Whether the batch reaches the server's maximum LSN.
    caught_up: bool,
    /// Whether a heartbeat is due when the batch has no rows.
    heartbeat_due: bool,
    zone: ZoneRule,
    /// Each commit's UTC time, in LSN order.
    utc: Arc<Vec<(Lsn, DateTime<Utc>)>>,
    events: Vec<Event>,
    warnings: Vec<String>,
}

/// What reading and publishing a batch's rows produced.
#[derive(Default)]
struct Rows {
    /// The rows read and the LSNs they span.
    span: Span,
    bytes: u64,
    /// The server state read after the rows (the next batch may start from it).
    state_after: Option<ServerState>,
    /// The last chunk's encoding, still running (its bytes are not in `bytes` yet).
    queued: Option<Queued<u64>>,
}

impl Stream {
    /// Plans, reads, publishes and records one batch; `Idle` when there was nothing worth a
    /// record.
    pub(super) async fn batch(&self, conn: &mut TdsClient, setup: &mut Setup, position: &mut Position, mut state: ServerState) -> Result<Step, SourceError> {
        let started = Instant::now();
        if self.options.on_data_loss == OnDataLoss::Resnapshot
            && state.max_lsn != Lsn::ZERO
            && position.lsn <= state.max_lsn
            && let Some(lost) = self.lost_range(conn, setup, position, &state).await?
        {
            self.settle(position).await?;
            position.lookahead.close();
            self.resnapshot_after_loss(setup, position, lost)?;
            return Ok(Step::Published);
        }
        let mut until = None;
        let mut switched = false;
        match self.follow(conn, setup, position).await? {
            Follow::Stay => {}
            Follow::Until(s) => until = Some(s),
            Follow::Switched(events) => {
                // Kept until published: a retried batch carries them too.
                setup.pending.extend(events);
                state = reader::server_state(conn, &self.connector, &setup.instance.name).await?;
                switched = true;
            }
        }
        // A chunked snapshot's waves write control records of their own after the batch.
        let snapshot_open = position.snapshot.as_ref().is_some_and(|s| !s.complete);
        // A plan made ahead (`lookahead`) stands where only the server's maximum LSN bounds
        // the batch, and the next one is planned ahead on the same terms; a plan brings the
        // state it was planned with (the newest minimum LSN kept).
        let plans_ahead = until.is_none() && !switched && !snapshot_open;
        let planned = if plans_ahead {
            position.lookahead.take(position.lsn).await
        } else {
            position.lookahead.discard();
            None
        };
        let newest_max = state.max_lsn;
        let (ahead, planned) = match planned {
            Some(planned) => {
                state = ServerState { min_lsn: state.min_lsn.max(planned.state.min_lsn), ..planned.state };
                (DdlAhead::none(), Some(planned.commits))
            }
            None => (self.ddl_ahead(conn, setup, position, state.max_lsn).await?, None),
        };
        let bound = [ahead.bound(), until].into_iter().flatten().min();
        let Some(mut plan) = self.plan(conn, setup, position, &state, bound, planned).await? else {
            return Ok(Step::Idle);
        };
        // Caught up only with the newest maximum LSN known (a plan made ahead read an older one).
        plan.caught_up = plan.to >= newest_max.max(state.max_lsn);
        let schema_changes = self.apply_ddl(conn, setup, position, &ahead, plan.to).await?;
        match self.options.max_commits_per_batch {
            // More commits wait past the limit: plan the next batch while this one is read (a
            // DDL in its range makes the plan refused, and the next batch plans itself).
            Some(limit) if plans_ahead && plan.next_unread.is_some() => {
                position.lookahead.start(&self.connector, &setup.instance.name, plan.to, limit);
            }
            _ => position.lookahead.idle(),
        }
        plan.events.splice(0..0, setup.pending.iter().cloned());
        plan.events.extend(schema_changes);
        self.publisher.begin();
        let read = self.read(conn, setup, position, &mut plan).await?;
        // The batch in flight goes first: control records keep the batches' order.
        self.settle(position).await?;
        let Some(mut rows) = read else {
            // Cleanup overtook the read: the next step re-snapshots.
            self.publisher.finish().await?;
            return Ok(Step::Published);
        };
        if rows.span.count == 0 && plan.events.is_empty() && plan.caught_up && !plan.heartbeat_due {
            // Nothing worth a record yet: the commits stay for the next batch.
            self.publisher.finish().await?;
            return Ok(Step::Idle);
        }
        if !plan.caught_up && plan.events.is_empty() && rows.span.count > 0 && !snapshot_open {
            // More commits wait on the server: read them while this batch is encoded and
            // acknowledged.
            let mut record = self.control_record(setup, position, &plan, &rows, Vec::new(), &state, started.elapsed());
            position.advance(&record);
            let records = setup.debezium.is_none().then_some(rows.span.count);
            let handle = self.publisher.settle_in_background(&setup.control_topic, rows.queued.take(), move |partitions, bytes| {
                record.partitions = all_acknowledged(records, partitions)?;
                record.metrics.bytes += bytes;
                record.metrics.published_at = Some(Utc::now());
                Ok(record)
            });
            position.pipeline.hand_off(handle, started, rows.state_after.take());
            return Ok(Step::Published);
        }
        if let Some(queued) = rows.queued.take() {
            rows.bytes += queued.wait().await?;
        }
        let partitions = all_acknowledged(setup.debezium.is_none().then_some(rows.span.count), self.publisher.finish().await?)?;
        let record = self.control_record(setup, position, &plan, &rows, partitions, &state, started.elapsed());
        self.publisher.send_control(&setup.control_topic, &record).await?;
        setup.pending.clear();
        self.published(&record, started.elapsed());
        position.advance(&record);
        self.snapshot_after_switch(setup, position, &record);
        Ok(if plan.caught_up { Step::Idle } else { Step::Published })
    }

    /// Plans the batch after `position`, ending at `ddl` (the first DDL ahead, or the LSN where
    /// the stream moves to a newer capture instance) when it reaches it (under
    /// `schema_change_policy = "fail"`, just before it when commits come first);
    /// `None` while CDC has captured nothing yet. `planned`: the commits after the position
    /// up to `state.max_lsn`, planned ahead (used unless purged changes move the start).
    async fn plan(&self, conn: &mut TdsClient, setup: &Setup, position: &Position, state: &ServerState, ddl: Option<Lsn>, planned: Option<Vec<Commit>>) -> Result<Option<Plan>, SourceError> {
        let ci = setup.instance.name.as_str();
        // An empty lsn_time_mapping (CDC enabled, nothing captured yet) reports a maximum of
        // zero while the capture instance already has its start LSN: nothing to read yet.
        if state.max_lsn == Lsn::ZERO {
            return Ok(None);
        }
        if position.lsn > state.max_lsn {
            return Err(SourceError::AheadOfServer {
                capture_instance: ci.to_owned(),
                control_topic: setup.control_topic.clone(),
                position: position.lsn,
                max_lsn: state.max_lsn,
            });
        }
        let mut events = Vec::new();
        let mut from = position.lsn;
        if let Some(skipped) = self.check_loss(ci, from, state.min_lsn, true)? {
            from = state.min_lsn.decrement();
            events.push(skipped);
        }
        let (zone, warnings) = zone_rule(setup, state);
        let upto = ddl.map_or(state.max_lsn, |lsn| lsn.min(state.max_lsn));
        let mut commits = match planned {
            Some(commits) if from == position.lsn && ddl.is_none() => {
                SourceBatchPlannedAhead { connector: &self.connector_name, capture_instance: ci, from_lsn: &from, commits: commits.len() }.emit();
                commits
            }
            _ if upto > from => reader::plan(conn, &self.connector, from, upto, self.options.max_commits_per_batch).await?,
            _ => Vec::new(),
        };
        let mut next_unread = match self.options.max_commits_per_batch {
            Some(limit) if commits.len() as u64 > limit => commits.pop(),
            _ => None,
        };
        let mut to = commits.last().map_or(from, |c| c.lsn);
        if let Some(ddl) = ddl.filter(|lsn| *lsn > from) {
            let fail = self.options.schema_change_policy == SchemaChangePolicy::Fail;
            if fail && commits.first().is_some_and(|c| c.lsn < ddl) {
                // Under `fail` the commits before the DDL are a batch of their own.
                if let Some(cut) = commits.iter().position(|c| c.lsn >= ddl) {
                    next_unread = Some(commits[cut]);
                    commits.truncate(cut);
                }
                to = commits.last().map_or(from, |c| c.lsn);
            } else if next_unread.is_none() && to < ddl && ddl <= state.max_lsn {
                // The batch carrying the DDL (or reaching a newer capture instance's start)
                // ends with it, also where cdc.lsn_time_mapping has no commit at its LSN; never
                // past what the capture job has harvested.
                to = ddl;
            }
        }
        let utc = commit_times(&zone, &commits, position.last_commit_ts);
        Ok(Some(Plan {
            from,
            to,
            commits,
            next_unread,
            caught_up: to >= state.max_lsn,
            heartbeat_due: position.last_published.elapsed() >= self.options.heartbeat_interval,
            zone,
            utc: Arc::new(utc),
            events,
            warnings,
        }))
    }

    /// Reads the planned change rows into Arrow batches of `fetch_rows`, encoding and
    /// publishing each as it fills (over `num_partitions` connections when above one:
    /// [`super::parallel`]); then checks for data loss again (cleanup may have run during the
    /// read) and adds any `data_skipped` event to the plan.
    /// `None` when cleanup ran during the read under `on_data_loss = "resnapshot"`: the batch
    /// is abandoned (its records are orphans no control record names).
    async fn read(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, plan: &mut Plan) -> Result<Option<Rows>, SourceError> {
        let mut rows = Rows::default();
        if plan.to <= plan.from {
            return Ok(Some(rows));
        }
        let ci = setup.instance.name.as_str();
        let spec = Arc::new(ChunkSpec {
            schema: setup.schema.clone(),
            capture_instance: ci.to_owned(),
            generation: position.generation,
            fetch_rows: self.options.fetch_rows,
            from: plan.from,
            to: plan.to,
            utc: Arc::clone(&plan.utc),
        });
        let readers = self.options.num_partitions;
        let commits: Vec<Lsn> = plan.commits.iter().map(|c| c.lsn).collect();
        let ranges = if readers > 1 {
            parallel::split(plan.from, plan.to, &commits, position.partitions.commits_per_range(commits.len(), readers, self.options.fetch_rows))
        } else {
            Vec::new()
        };
        let span = if ranges.len() > 1 {
            let connections = &mut position.partitions.connections;
            let mut read = PartitionedRead::start(&self.connector, &setup.change_sql, setup.schema.include_command_id, spec, ranges, connections, readers).await?;
            while let Some(chunk) = read.next().await? {
                self.encode_next(setup, &mut rows, chunk).await?;
            }
            read.finish(connections).await?
        } else {
            let mut chunker = Chunker::new(spec);
            let mut changes = reader::read_changes(conn, &self.connector, &setup.change_sql, plan.from, plan.to, setup.schema.include_command_id).await?;
            while let Some(row) = changes.next().await? {
                if let Some(chunk) = chunker.push(row)? {
                    self.encode_next(setup, &mut rows, chunk).await?;
                }
            }
            drop(changes);
            if let Some(chunk) = chunker.rest() {
                self.encode_next(setup, &mut rows, chunk).await?;
            }
            chunker.span
        };
        position.partitions.observe(span.count, commits.len());
        rows.span = span;
        let after = reader::server_state(conn, &self.connector, ci).await?;
        if self.options.on_data_loss == OnDataLoss::Resnapshot && after.min_lsn > plan.from.increment() {
            if let Some(queued) = rows.queued.take() {
                queued.wait().await?;
            }
            return Ok(None);
        }
        if let Some(skipped) = self.check_loss(ci, plan.from, after.min_lsn, false)? {
            plan.events.push(skipped);
        }
        rows.state_after = Some(after);
        Ok(Some(rows))
    }

    /// Encodes one Arrow batch (JSON, or Avro in the Confluent wire format) and queues its
    /// records, off the async workers; returns the bytes queued.
    pub(super) async fn publish_rows(&self, setup: &Setup, batch: arrow::array::RecordBatch) -> Result<u64, SourceError> {
        self.publish_rows_behind(setup, batch).await.wait().await
    }

    /// Starts encoding the next chunk of a batch's rows once the previous chunk's encoding is
    /// done: one chunk encodes while the next is read, at most two are held.
    async fn encode_next(&self, setup: &Setup, rows: &mut Rows, chunk: arrow::array::RecordBatch) -> Result<(), SourceError> {
        if let Some(queued) = rows.queued.take() {
            rows.bytes += queued.wait().await?;
        }
        rows.queued = Some(self.publish_rows_behind(setup, chunk).await);
        Ok(())
    }

    /// [`Stream::publish_rows`], returning once the encoding holds its place in line.
    async fn publish_rows_behind(&self, setup: &Setup, batch: arrow::array::RecordBatch) -> Queued<u64> {
        let (schema, topic, ids) = (setup.schema.clone(), setup.data_topic.clone(), setup.key_schema_id.zip(setup.value_schema_id));
        match setup.debezium.clone() {
            Some(debezium) => {
                let instance = setup.instance.name.clone();
                let avro = setup.value_schema_id.map(|value| AvroIds { key: setup.key_schema_id, value });
                self.publisher.queue_behind(move |producer, set| queue_debezium(producer, set, &schema, &debezium, avro, &instance, &batch)).await
            }
            None => self.publisher.queue_behind(move |producer, set| encode_and_queue(producer, set, &schema, &topic, ids, &batch)).await,
        }
    }

    /// The control record naming the batch's acknowledged records.
    #[allow(clippy::too_many_arguments)]
    fn control_record(&self, setup: &Setup, position: &Position, plan: &Plan, rows: &Rows, partitions: Vec<PartitionRange>, state: &ServerState, read: Duration) -> ControlRecord {
        let now_utc = state.now.with_timezone(&Utc);
        let capture_lag_seconds = state.max_lsn_time.map(|t| (now_utc - plan.zone.to_utc(t, None)).num_milliseconds() as f64 / 1000.0);
        let oldest_unread = plan.next_unread.map_or(now_utc, |c| plan.zone.to_utc(c.local_time, None));
        let retention_headroom_hours = setup.retention_minutes.map(|minutes| headroom_hours(minutes, oldest_unread, now_utc));
        let base = self.record_base(setup, position, state, read, rows.bytes);
        ControlRecord {
            to_lsn: plan.to,
            commits: plan.commits.len() as u64,
            rows: rows.span.count,
            min_row_lsn: rows.span.min_lsn,
            max_row_lsn: rows.span.max_lsn,
            min_commit_ts: plan.utc.first().map(|c| c.1),
            max_commit_ts: plan.utc.last().map(|c| c.1),
            last_commit_ts: plan.utc.last().map(|c| c.1).or(position.last_commit_ts),
            partitions,
            events: plan.events.clone(),
            warnings: plan.warnings.clone(),
            metrics: SourceMetrics { capture_lag_seconds, retention_headroom_hours, ..base.metrics },
            ..base
        }
    }

    /// A control record for the batch after `position` that covers nothing and carries nothing
    /// yet: the stream's identity, layout and snapshot state, and the server's maximum LSN.
    pub(super) fn record_base(&self, setup: &Setup, position: &Position, state: &ServerState, read: Duration, bytes: u64) -> ControlRecord {
        ControlRecord {
            version: if setup.debezium.is_some() { CONTROL_VERSION_DEBEZIUM } else { CONTROL_VERSION },
            batch_id: position.next_batch_id,
            generation: position.generation,
            capture_instance: setup.instance.name.clone(),
            data_topic: setup.data_topic.clone(),
            from_lsn: position.lsn,
            to_lsn: position.lsn,
            commits: 0,
            rows: 0,
            min_row_lsn: None,
            max_row_lsn: None,
            min_commit_ts: None,
            max_commit_ts: None,
            last_commit_ts: position.last_commit_ts,
            partitions: Vec::new(),
            format: self.options.encoding.format(),
            schema_version: setup.schema.fingerprint(),
            schema: setup.schema.clone(),
            envelope: if setup.debezium.is_some() { Envelope::Debezium } else { Envelope::Native },
            schema_id: setup.value_schema_id,
            events: Vec::new(),
            warnings: Vec::new(),
            metrics: SourceMetrics {
                max_lsn: Some(state.max_lsn),
                capture_lag_seconds: None,
                retention_headroom_hours: None,
                read_ms: read.as_millis() as u64,
                bytes,
                published_at: Some(Utc::now()),
            },
            snapshot: position.snapshot.clone(),
        }
    }

    /// Logs and counts a published batch and its events, and reports the stage's progress to
    /// the supervisor (snapshot batches included: a long snapshot is progress too).
    pub(super) fn published(&self, record: &ControlRecord, duration: Duration) {
        self.progress.advance();
        for event in &record.events {
            if let Event::DataSkipped { from_lsn, to_lsn, certain } = event {
                tracing::warn!(connector = %self.connector_name, capture_instance = %record.capture_instance, from_lsn = %from_lsn, to_lsn = %to_lsn, certain, "changes purged by CDC cleanup were skipped (on_data_loss = skip); data_skipped published");
            }
        }
        SourceBatchPublished {
            connector: &self.connector_name,
            capture_instance: &record.capture_instance,
            batch_id: record.batch_id,
            from_lsn: &record.from_lsn,
            to_lsn: &record.to_lsn,
            commits: record.commits,
            rows: record.rows,
            bytes: record.metrics.bytes,
            duration,
            capture_lag_seconds: record.metrics.capture_lag_seconds,
            retention_headroom_hours: record.metrics.retention_headroom_hours,
            position: lsn_gauge(record.to_lsn),
        }
        .emit();
    }

    /// The data-loss check: changes after `from` that cleanup purged. `Ok(Some(event))` when
    /// skipping them is allowed.
    pub(super) fn check_loss(&self, ci: &str, from: Lsn, min_lsn: Lsn, certain: bool) -> Result<Option<Event>, SourceError> {
        let next = from.increment();
        if min_lsn == Lsn::ZERO || min_lsn <= next {
            return Ok(None);
        }
        let (from_lsn, to_lsn) = (next, min_lsn.decrement());
        match self.options.on_data_loss {
            OnDataLoss::Skip => Ok(Some(Event::DataSkipped { from_lsn, to_lsn, certain })),
            OnDataLoss::Fail | OnDataLoss::Resnapshot => Err(SourceError::DataLoss { capture_instance: ci.to_owned(), from_lsn, to_lsn, min_lsn }),
        }
    }
}

/// How local commit times become UTC for a batch: the zone's rules, or without a zone name the
/// server's current offset (with a warning for the control record).
pub(super) fn zone_rule(setup: &Setup, state: &ServerState) -> (ZoneRule, Vec<String>) {
    match &setup.zone {
        Some(zone) => (ZoneRule::Named(zone.clone()), Vec::new()),
        None => (
            ZoneRule::CurrentOffset(*state.now.offset()),
            vec![format!("commit times converted with the server's current UTC offset {} (no zone name)", state.now.offset())],
        ),
    }
}

impl Position {
    /// Past a published batch.
    pub(super) fn advance(&mut self, record: &ControlRecord) {
        self.lsn = record.to_lsn;
        if self.log_schema.as_ref() != Some(&record.schema) {
            self.log_schema = Some(record.schema.clone());
        }
        self.next_batch_id += 1;
        self.last_published = Instant::now();
        if record.max_commit_ts.is_some() {
            self.last_commit_ts = record.max_commit_ts;
        }
    }
}

/// The stream's retention headroom, hours: how long until cleanup, keeping `retention_minutes`,
/// may purge the oldest change not yet published (committed at `oldest_unpublished`; `now`
/// when nothing is unpublished).
pub(super) fn headroom_hours(retention_minutes: i64, oldest_unpublished: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    ((oldest_unpublished - now).num_seconds() as f64 + retention_minutes as f64 * 60.0) / 3600.0
}

/// The batch's acknowledged ranges, if they hold all of its `records` (`None` with the
/// Debezium envelope, whose events per row depend on the rows: an update pair is one event,
/// or three when it moves the key; every record queued is still acknowledged, or the set
/// fails).
fn all_acknowledged(records: Option<u64>, partitions: Vec<PartitionRange>) -> Result<Vec<PartitionRange>, SourceError> {
    let acknowledged: u64 = partitions.iter().map(|p| p.records).sum();
    let Some(records) = records else { return Ok(partitions) };
    if acknowledged != records {
        return Err(SourceError::Kafka(format!("{records} records published but {acknowledged} acknowledged")));
    }
    Ok(partitions)
}

/// Encodes each row of `batch` (Avro with the `(key, value)` schema ids, JSON without) and
/// queues it to `topic`; returns the bytes queued.
fn encode_and_queue(producer: &Producing, set: usize, schema: &TableSchema, topic: &str, avro_ids: Option<(u32, u32)>, batch: &arrow::array::RecordBatch) -> Result<u64, SourceError> {
    let encoder = RowEncoder::new(schema, batch)?;
    let mut key = Vec::with_capacity(64);
    let mut value = Vec::with_capacity(512);
    let mut bytes = 0u64;
    for row in 0..encoder.rows() {
        key.clear();
        value.clear();
        match avro_ids {
            Some((key_id, value_id)) => {
                confluent_header(key_id, &mut key);
                encoder.key_avro(row, &mut key)?;
                confluent_header(value_id, &mut value);
                encoder.value_avro(row, &mut value)?;
            }
            None => {
                encoder.key_json(row, &mut key);
                encoder.value_json(row, &mut value);
            }
        }
        producer.send_in(set, topic, &key, Some(&value))?;
        bytes += (key.len() + value.len()) as u64;
    }
    Ok(bytes)
}

/// [`encode_and_queue`] for the Debezium envelope: each row's native JSON becomes its events
/// (an update's two rows one event, a delete its event and tombstone). A chunk never ends
/// between an update's two rows ([`Stream::read`]), so each chunk has a writer of its own.
fn queue_debezium(
    producer: &Producing,
    set: usize,
    schema: &TableSchema,
    debezium: &(TableNames, EventSettings),
    avro: Option<AvroIds>,
    capture_instance: &str,
    batch: &arrow::array::RecordBatch,
) -> Result<u64, SourceError> {
    let (names, settings) = debezium;
    let encoder = RowEncoder::new(schema, batch)?;
    let mut writer = match avro {
        Some(ids) => EventWriter::avro(schema, names.clone(), *settings, ids),
        None => EventWriter::new(schema, names.clone(), *settings),
    };
    let now = Utc::now();
    let mut native = Vec::with_capacity(512);
    let mut bytes = 0u64;
    for row in 0..encoder.rows() {
        native.clear();
        encoder.value_json(row, &mut native);
        let failed = |message: String| SourceError::Schema { capture_instance: capture_instance.to_owned(), message: format!("Debezium envelope: {message}") };
        let object: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&native).map_err(|e| failed(format!("a row of the log's JSON: {e}")))?;
        let records = writer.push(object, now).map_err(failed)?;
        for record in records {
            producer.send_in(set, &names.topic, &record.key, record.value.as_deref())?;
            bytes += (record.key.len() + record.value.as_ref().map_or(0, Vec::len)) as u64;
        }
    }
    writer.finish().map_err(|message| SourceError::Schema { capture_instance: capture_instance.to_owned(), message: format!("Debezium envelope: {message}") })?;
    Ok(bytes)
}

/// Each commit's UTC time, in LSN order, keeping fall-back hours in commit order.
fn commit_times(zone: &ZoneRule, commits: &[Commit], mut previous: Option<DateTime<Utc>>) -> Vec<(Lsn, DateTime<Utc>)> {
    commits
        .iter()
        .map(|c| {
            let utc = zone.to_utc(c.local_time, previous);
            previous = Some(utc);
            (c.lsn, utc)
        })
        .collect()
}

/// The LSN's VLF and block as one number (monotonic in the LSN; the slot is dropped so the
/// value fits a float exactly).
fn lsn_gauge(lsn: Lsn) -> f64 {
    let mut high = [0u8; 8];
    high.copy_from_slice(&lsn.0[0..8]);
    u64::from_be_bytes(high) as f64
}
