//! The read loop of one capture instance: set up (resolve the instance, its schema, the
//! topics), resume from the control topic, then one batch after another ([`batch`]); retry
//! transient SQL Server faults on a new connection, for up to `retry_timeout_ms`.

mod batch;
mod changes;
mod chunked;
mod ddl;
mod lookahead;
mod offset;
mod parallel;
mod pipeline;
mod seed;
mod snapshot;
mod switch;

pub use offset::{BackfillStatus, PublishedState, SnapshotRequest, StreamOffset, StreamStatus};

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::config::{MssqlSourceSettings, SourceZone, StartingLsn};
use crate::connection::{Connector, TdsClient};
use crate::error::SourceError;
use crate::publish::Publisher;
use crate::reader::{self, Instance, ServerState};
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::log::registry::SchemaRegistry;
use mssql_cdc_core::log::control::{ControlRecord, SnapshotKind};
use mssql_cdc_core::log::debezium::event::EventSettings;
use mssql_cdc_core::log::debezium::TableNames;
use mssql_cdc_core::log::schema::TableSchema;
use mssql_cdc_core::stage::retry::Decision;
use mssql_cdc_core::stage::supervisor::wait_or_cancel;
use mssql_cdc_core::stage::Progress;
use mssql_cdc_core::telemetry::events::{register_source, SourceSqlRetrying};
use mssql_cdc_types::lsn::Lsn;
use mssql_cdc_types::timezone::ServerZone;

/// How often the stream reads the cleanup job's retention again.
const RETENTION_REFRESH: Duration = Duration::from_secs(10);

/// What a step did.
enum Step {
    /// Published a batch; go on at once.
    Published,
    /// Nothing to publish; wait a poll interval.
    Idle,
    /// What a snapshot request asked for is done: stop before streaming changes.
    Done,
}

/// Everything fixed once the stream has started.
struct Setup {
    instance: Instance,
    schema: TableSchema,
    /// The select list of the captured columns (casts applied).
    select: Vec<String>,
    /// Each captured column's SQL Server type name, by name.
    sql_types: Vec<(String, String)>,
    /// Columns on the log that read NULL in every row of this instance (listed computed
    /// columns, and columns only another instance captures): a seed's copy gives them NULL too.
    null_columns: Vec<String>,
    /// The source table, quoted: `[schema].[table]`.
    table: String,
    change_sql: String,
    data_topic: String,
    control_topic: String,
    zone: Option<ServerZone>,
    retention_minutes: Option<i64>,
    /// When `retention_minutes` was read (it is read again every [`RETENTION_REFRESH`]).
    retention_read_at: Instant,
    key_schema_id: Option<u32>,
    value_schema_id: Option<u32>,
    /// With the Debezium envelope: the table's names and how events are written.
    debezium: Option<Arc<(TableNames, EventSettings)>>,
    /// When the table's capture instances were last looked at.
    instances_read_at: Instant,
    /// A newer capture instance of the table the stream moves to once it reaches its start.
    newer: Option<Instance>,
    /// Events for the next published batch (a switch found at start).
    pending: Vec<mssql_cdc_core::log::control::Event>,
    /// The control topic's last record (with its offset) as this setup read it, for the
    /// first start position to use rather than read the topic a second time; `None` once
    /// taken.
    resume: Option<Option<(i64, ControlRecord)>>,
}

/// A run of transient SQL Server failures.
struct Outage {
    since: Instant,
    attempts: u32,
    backoff: mssql_cdc_core::stage::retry::Backoff,
}

/// Where the stream stands.
struct Position {
    lsn: Lsn,
    next_batch_id: u64,
    generation: u64,
    last_published: Instant,
    /// UTC time of the last commit published (keeps fall-back hours in order across batches).
    last_commit_ts: Option<DateTime<Utc>>,
    /// The stream's newest snapshot (open or complete), as its last control record has it.
    snapshot: Option<mssql_cdc_core::log::control::SnapshotState>,
    /// A snapshot to open at the next step.
    open_next: Option<snapshot::Opening>,
    /// Whether the connection holds the open snapshot's SNAPSHOT transaction.
    snapshot_txn: bool,
    /// Rows/s of the snapshot this process reads.
    pace: Option<snapshot::Pace>,
    /// This process's side of a chunked snapshot.
    backfill: chunked::Backfill,
    /// The chunk readers' connections, kept between waves.
    readers: Vec<TdsClient>,
    /// The log's schema: the last control record's (`None` before the first). DDL ahead is
    /// judged against it.
    log_schema: Option<TableSchema>,
    /// The batch whose acknowledgements and control record are still being awaited.
    pipeline: pipeline::Pipeline,
    /// The partitioned readers' connections (`num_partitions` > 1), kept between batches.
    partitions: parallel::Partitions,
    /// The next batch's plan, made on a second connection while this batch's rows are read.
    lookahead: lookahead::Lookahead,
}

/// One capture instance's stream.
pub struct Stream {
    connector_name: String,
    wanted: String,
    options: Arc<MssqlSourceSettings>,
    connector: Connector,
    publisher: Publisher,
    registry: Option<Arc<SchemaRegistry>>,
    progress: Progress,
    /// Set by [`Stream::take_snapshot`]: the snapshot to take instead of streaming.
    request: Option<SnapshotRequest>,
}

impl Stream {
    /// A stream of `capture_instance` (as configured; resolved on start).
    pub fn new(
        connector_name: &str,
        capture_instance: &str,
        options: Arc<MssqlSourceSettings>,
        kafka: &KafkaConfig,
        registry: Option<Arc<SchemaRegistry>>,
    ) -> Result<Self, SourceError> {
        let connector = Connector::new(&options.login)?;
        let publisher = Publisher::new(kafka, &options.producer_properties, &format!("mssql-cdc-{connector_name}-{capture_instance}"))?;
        Ok(Self { connector_name: connector_name.to_owned(), wanted: capture_instance.to_owned(), options, connector, publisher, registry, progress: Progress::default(), request: None })
    }

    /// Reports each published batch to `progress` (the stage's, read by the supervisor).
    pub fn reporting(mut self, progress: Progress) -> Self {
        self.progress = progress;
        self
    }

    /// Runs until cancelled or a fatal error.
    pub async fn run(self, cancel: CancellationToken) -> Result<(), SourceError> {
        self.drive(&cancel).await.map(|_| ())
    }

    /// The read loop: one step after another, transient faults retried on a new connection,
    /// until cancelled (`None`), a fatal error, or a requested snapshot is done (its offset).
    async fn drive(&self, cancel: &CancellationToken) -> Result<Option<StreamOffset>, SourceError> {
        let mut outage: Option<Outage> = None;
        let mut client: Option<TdsClient> = None;
        let mut setup: Option<Setup> = None;
        let mut position: Option<Position> = None;
        let schedule = &self.options.sql_retry;
        loop {
            if cancel.is_cancelled() {
                self.settle_before_stop(&mut position).await;
                return Ok(None);
            }
            let result = self.step(&mut client, &mut setup, &mut position).await;
            match result {
                Ok(Step::Done) => {
                    self.settle_any(&mut position).await?;
                    return Ok(setup.as_ref().zip(position.as_ref()).map(|(setup, position)| self.offset(setup, position)));
                }
                Ok(step) => {
                    if let Some(Outage { since, attempts, .. }) = outage.take() {
                        tracing::info!(connector = %self.connector_name, capture_instance = %self.wanted, attempts, seconds = since.elapsed().as_secs(), "SQL Server reachable again");
                    }
                    if matches!(step, Step::Idle) {
                        self.settle_any(&mut position).await?;
                        if !wait_or_cancel(self.options.poll_interval, cancel).await {
                            return Ok(None);
                        }
                    }
                }
                Err(error) if error.is_transient() => {
                    client = None;
                    self.publisher.finish().await.ok();
                    // A batch handed off before the fault still completes (or fails the stream).
                    self.settle_any(&mut position).await?;
                    let outage = outage.get_or_insert_with(|| Outage { since: Instant::now(), attempts: 0, backoff: schedule.backoff() });
                    outage.attempts += 1;
                    let wait = match outage.backoff.on_failure(outage.since.elapsed(), false) {
                        Decision::Retry { wait, .. } => wait,
                        Decision::GiveUp { .. } => return Err(SourceError::Outage { seconds: outage.since.elapsed().as_secs(), last: Box::new(error) }),
                    };
                    SourceSqlRetrying { connector: &self.connector_name, capture_instance: &self.wanted, error: &error, attempt: outage.attempts, wait }.emit();
                    if !wait_or_cancel(wait, cancel).await {
                        return Ok(None);
                    }
                }
                Err(error) => {
                    self.settle_before_stop(&mut position).await;
                    return Err(error);
                }
            }
        }
    }

    /// Connects, sets up and positions the stream where not done yet (each kept across a
    /// reconnect), then runs one batch.
    async fn step(&self, client: &mut Option<TdsClient>, setup: &mut Option<Setup>, position: &mut Option<Position>) -> Result<Step, SourceError> {
        let fresh = client.is_none();
        let conn = match client.take() {
            Some(conn) => client.insert(conn),
            None => client.insert(self.connector.connect().await?),
        };
        let ready = match setup.take() {
            Some(ready) => ready,
            None => self.setup(conn).await?,
        };
        let ready = setup.insert(ready);
        // Read by this setup; a later start (after a failed one) reads the topic again.
        let resume = if position.is_none() { ready.resume.take() } else { None };
        if ready.retention_minutes.is_some() && ready.retention_read_at.elapsed() >= RETENTION_REFRESH {
            // A DBA may change the cleanup job's retention while the stream runs.
            ready.retention_read_at = Instant::now();
            ready.retention_minutes = reader::retention_minutes(conn, &self.connector).await?;
        }
        let setup = &*ready;
        // After a handed-off batch, the state read after its rows (unless on a new connection).
        let reused = position.as_mut().and_then(|p| p.pipeline.take_state()).filter(|_| !fresh);
        let state = match reused {
            Some(state) => state,
            None => reader::server_state(conn, &self.connector, &setup.instance.name).await?,
        };
        let start = match position.take() {
            Some(start) => start,
            None => {
                let mut start = self.start_position(setup, &state, resume).await?;
                if let Some(request) = self.request {
                    self.request_snapshot(conn, setup, &mut start, &state, request).await?;
                }
                start
            }
        };
        let position = position.insert(start);
        if fresh {
            // A new connection holds no transaction of an earlier one; after a fault, the
            // chunk readers connect again too.
            position.snapshot_txn = false;
            position.readers.clear();
            position.partitions.connections.clear();
            position.lookahead.close();
        }
        let streaming = position.open_next.is_none() && position.snapshot.as_ref().is_none_or(|s| s.complete) && self.request.is_none();
        if !streaming {
            // Snapshots, chunk waves and requests write control records of their own.
            self.settle(position).await?;
            position.lookahead.close();
        }
        if let Some(opening) = position.open_next.clone() {
            let step = self.open_snapshot(conn, setup, position, &state, &opening).await?;
            if matches!(step, Step::Published) {
                position.open_next = None;
                // The opening record carried the pending events.
                ready.pending.clear();
            }
            return Ok(step);
        }
        if Self::chunked_open(position) {
            if let Some(step) = self.chunked_prepare(conn, setup, position, &state).await? {
                return Ok(step);
            }
        } else if position.snapshot.as_ref().is_some_and(|s| !s.complete) {
            return self.snapshot_step(conn, setup, position, &state).await;
        } else if self.request.is_some() {
            return Ok(Step::Done);
        }
        // A chunked snapshot's waves run when the stream has caught up with the server.
        let max_lsn = state.max_lsn;
        // No batch is handed off while a snapshot is open (`batch`), so a wave's control
        // records follow the batch's.
        let step = self.batch(conn, ready, position, state).await?;
        let caught_up = position.lsn >= max_lsn || matches!(step, Step::Idle);
        match self.chunked_wave(conn, ready, position, caught_up).await? {
            chunked::Wave::Read => Ok(Step::Published),
            // `mssql-cdc backfill` stops where the stage would wait.
            chunked::Wave::Held if self.request.is_some() => Ok(Step::Done),
            chunked::Wave::Held | chunked::Wave::NotDue => Ok(step),
        }
    }

    async fn setup(&self, conn: &mut TdsClient) -> Result<Setup, SourceError> {
        let all = reader::instances(conn, &self.connector).await?;
        let mut instance = reader::choose_instance(all.clone(), &self.wanted)?;
        if instance.name != self.wanted {
            tracing::info!(connector = %self.connector_name, configured = %self.wanted, resolved = %instance.name, "capture instance resolved to another name (case, or the table's newer instance after the configured one was disabled)");
        }
        let database = reader::database_name(conn, &self.connector).await?;
        let (data_topic, control_topic) = offset::topics(&self.options.topic_prefix, &database, &instance.source_schema, &instance.source_table);
        self.publisher.ensure_topics(&data_topic, self.options.topic_partitions, &control_topic).await?;
        // The stream goes on with the instance its last batch read, where that is still there.
        let resume = self.publisher.last_control_at(&control_topic).await?;
        let last = resume.as_ref().map(|(_, record)| record);
        let mut pending = Vec::new();
        if let Some(record) = last.as_ref().filter(|r| r.capture_instance != instance.name) {
            match all.iter().find(|i| i.name == record.capture_instance && i.same_table(&instance)) {
                Some(current) => instance = current.clone(),
                None => pending.push(self.switched_while_stopped(record, &instance)?),
            }
        }
        let reader::CapturedTable { schema, select, sql_types, notes } = reader::table_schema(conn, &self.connector, &instance, &self.options).await?;
        if let Some(mssql_cdc_core::log::control::Event::CaptureInstanceSwitched { gained, lost, .. }) = pending.first_mut()
            && let Some(record) = &last
        {
            (*gained, *lost) = switch::gained_and_lost(&record.schema, &schema);
        }
        if let Some(warnings) = notes.event(&instance.name) {
            tracing::warn!(connector = %self.connector_name, capture_instance = %instance.name, computed_left_out = ?notes.computed_left_out, computed_null = ?notes.computed_null, other_instance = ?notes.other_instance, "columns left out of the log or read as NULL (CDC stores NULL for computed columns); recorded as column_warnings on the next record");
            pending.push(warnings);
        }
        let zone = match &self.options.source_time_zone {
            SourceZone::Auto => match reader::current_timezone_id(conn, &self.connector).await? {
                Some(id) => match ServerZone::parse(&id) {
                    Some(zone) => Some(zone),
                    None => {
                        tracing::warn!(connector = %self.connector_name, zone = %id, "CURRENT_TIMEZONE_ID() names a zone this build does not know; using the server's current offset per batch (set source_time_zone)");
                        None
                    }
                },
                None => {
                    tracing::warn!(connector = %self.connector_name, "CURRENT_TIMEZONE_ID() is not available (SQL Server before 2022); using the server's current offset per batch, exact only without daylight saving (set source_time_zone)");
                    None
                }
            },
            SourceZone::Fixed(zone) => Some(zone.clone()),
        };
        let retention_minutes = reader::retention_minutes(conn, &self.connector).await?;
        let change_sql = reader::change_query(&instance.name, &select, schema.include_command_id);
        let debezium = self.options.debezium.map(|settings| {
            let names = TableNames {
                server: self.options.topic_prefix.clone(),
                database: database.clone(),
                schema: instance.source_schema.clone(),
                table: instance.source_table.clone(),
                topic: data_topic.clone(),
            };
            Arc::new((names, settings))
        });
        let (key_schema_id, value_schema_id) = self.register_schemas(&schema, &data_topic, debezium.as_ref().map(|d| &d.0)).await?;
        let table = format!("{}.{}", reader::quote(&instance.source_schema), reader::quote(&instance.source_table));
        register_source(&self.connector_name, &instance.name);
        tracing::info!(connector = %self.connector_name, capture_instance = %instance.name, topic = %data_topic, columns = schema.columns.len(), "source stream ready");
        Ok(Setup {
            instance,
            schema,
            select,
            sql_types,
            null_columns: notes.null_columns(),
            table,
            change_sql,
            data_topic,
            control_topic,
            zone,
            retention_minutes,
            retention_read_at: Instant::now(),
            key_schema_id,
            value_schema_id,
            debezium,
            instances_read_at: Instant::now() - switch::INSTANCE_REFRESH,
            newer: None,
            pending,
            resume: Some(resume),
        })
    }

    /// With Avro, registers the key and value schemas of `schema`'s records on `topic` (the
    /// Debezium envelope's with `debezium` names, else the native layout's) under
    /// TopicNameStrategy subjects; their ids. `(None, None)` with JSON.
    pub(super) async fn register_schemas(&self, schema: &TableSchema, topic: &str, debezium: Option<&TableNames>) -> Result<(Option<u32>, Option<u32>), SourceError> {
        let Some(registry) = &self.registry else { return Ok((None, None)) };
        let (key, value) = match debezium {
            Some(names) => mssql_cdc_core::log::debezium::event::avro_schemas(schema, names),
            None => (Some(schema.avro_key(topic)), schema.avro_value(topic)),
        };
        let key_id = match key {
            Some(key) => Some(registry.register(&format!("{topic}-key"), &key).await?),
            None => None,
        };
        Ok((key_id, Some(registry.register(&format!("{topic}-value"), &value).await?)))
    }

    /// The instance the last batch read (`record`'s) is gone and `instance`, a newer one of the
    /// table, replaces it: the switch happened while the stream was stopped. The changes between
    /// the position and the new instance's start were held by the old one alone.
    fn switched_while_stopped(&self, record: &mssql_cdc_core::log::ControlRecord, instance: &Instance) -> Result<mssql_cdc_core::log::control::Event, SourceError> {
        if record.to_lsn < instance.start_lsn {
            self.check_loss(&record.capture_instance, record.to_lsn, instance.start_lsn.increment(), true)?;
        }
        tracing::warn!(connector = %self.connector_name, from = %record.capture_instance, to = %instance.name, start_lsn = %instance.start_lsn, "the capture instance the stream read was disabled; it goes on with the table's newer one");
        Ok(mssql_cdc_core::log::control::Event::CaptureInstanceSwitched { from: record.capture_instance.clone(), to: instance.name.clone(), start_lsn: instance.start_lsn, gained: Vec::new(), lost: Vec::new() })
    }

    /// Where the stream starts: after the control topic's last record (`resume`, when the
    /// setup just read it; read again otherwise), or at `starting_lsn` on a new stream.
    async fn start_position(&self, setup: &Setup, state: &ServerState, resume: Option<Option<(i64, ControlRecord)>>) -> Result<Position, SourceError> {
        let last = match resume {
            Some(read) => read,
            None => self.publisher.last_control_at(&setup.control_topic).await?,
        };
        let position = match last {
            Some((offset, mut record)) => {
                // The plan's own batch: the records after it name its offset.
                let planned = record.events.iter().find_map(|e| match e {
                    mssql_cdc_core::log::control::Event::SnapshotPlan { chunks, .. } => Some(chunks.len() as u64),
                    _ => None,
                });
                if let (Some(chunks), Some(snapshot)) = (planned, record.snapshot.as_mut()) {
                    snapshot.plan.get_or_insert(mssql_cdc_core::log::control::PlanRef { offset, chunks });
                }
                // A position past the server's max LSN is refused by the batch that follows,
                // with the same state.
                tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, position = %record.to_lsn, batch_id = record.batch_id + 1, "resuming from the control topic");
                if let Some(open) = record.open_snapshot() {
                    tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, lsn = %open.lsn, kind = %open.kind, rows_done = open.rows_done, "resuming the open snapshot after its last published rows");
                }
                // Killed between a switch and the snapshot it asks for: open it now.
                let switched = self.options.snapshot.on_switch && record.events.iter().any(|e| matches!(e, mssql_cdc_core::log::control::Event::CaptureInstanceSwitched { .. }));
                let reopen = switched && record.snapshot.as_ref().is_none_or(|s| s.complete);
                Position {
                    lsn: record.to_lsn,
                    next_batch_id: record.batch_id + 1,
                    generation: record.generation,
                    last_published: Instant::now(),
                    last_commit_ts: record.max_commit_ts.or(record.last_commit_ts),
                    log_schema: Some(record.schema),
                    snapshot: record.snapshot,
                    open_next: reopen.then_some(snapshot::Opening { kind: SnapshotKind::Bootstrap, lost: None, seed: None }),
                    snapshot_txn: false,
                    pace: None,
                    backfill: chunked::Backfill::default(),
                    readers: Vec::new(),
                    pipeline: pipeline::Pipeline::default(),
                    partitions: parallel::Partitions::default(),
                    lookahead: lookahead::Lookahead::default(),
                }
            }
            None => {
                let lsn = match self.options.starting_lsn {
                    StartingLsn::Earliest => state.min_lsn.decrement(),
                    StartingLsn::Latest => state.max_lsn,
                    StartingLsn::After(lsn) => lsn,
                };
                let bootstrap = self.options.snapshot.bootstrap;
                tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, position = %lsn, starting_lsn = %self.options.starting_lsn, bootstrap, "starting a new stream");
                Position {
                    lsn,
                    next_batch_id: 0,
                    generation: 0,
                    last_published: Instant::now() - Duration::from_secs(86_400),
                    last_commit_ts: None,
                    log_schema: None,
                    snapshot: None,
                    open_next: bootstrap.then_some(snapshot::Opening { kind: SnapshotKind::Bootstrap, lost: None, seed: None }),
                    snapshot_txn: false,
                    pace: None,
                    backfill: chunked::Backfill::default(),
                    readers: Vec::new(),
                    pipeline: pipeline::Pipeline::default(),
                    partitions: parallel::Partitions::default(),
                    lookahead: lookahead::Lookahead::default(),
                }
            }
        };
        Ok(position)
    }
}

/// A topic name from database object names: characters Kafka refuses become `_`.
fn sanitize_topic(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_replace_what_kafka_refuses() {
        assert_eq!(sanitize_topic("cdc.sales.dbo.Order Lines"), "cdc.sales.dbo.Order_Lines");
        assert_eq!(sanitize_topic("cdc.sales.dbo.Café"), "cdc.sales.dbo.Caf_");
    }
}
