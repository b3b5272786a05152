//! The read loop of one capture instance: plan a commit-aligned batch after the published
//! position, stream its change rows into Arrow batches, publish the data records, then the
//! control record; resume from the control topic; retry transient faults on a new connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::config::MssqlSourceOptions;
use super::connection::{Connector, TdsClient};
use super::error::SourceError;
use super::publish::Publisher;
use super::reader::{self, Commit, Instance, ServerState};
use super::rows::{BatchBuilder, ChangeCoordinates};
use super::zone::ZoneRule;
use crate::kafka::KafkaConfig;
use crate::log::control::{ControlRecord, Event, SourceMetrics, CONTROL_VERSION};
use crate::log::encode::{confluent_header, RowEncoder};
use crate::log::registry::SchemaRegistry;
use crate::log::schema::TableSchema;
use crate::log::topic::control_topic_for;
use crate::log::RecordFormat;
use crate::lsn::Lsn;
use crate::telemetry::metrics as m;
use crate::timezone::ServerZone;

/// What a step did.
enum Step {
    /// Published a batch; go on at once.
    Published,
    /// Nothing to publish; wait a poll interval.
    Idle,
}

/// Everything fixed once the stream has started.
struct Setup {
    instance: Instance,
    schema: TableSchema,
    change_sql: String,
    data_topic: String,
    control_topic: String,
    zone: Option<ServerZone>,
    retention_minutes: Option<i64>,
    key_schema_id: Option<u32>,
    value_schema_id: Option<u32>,
}

/// Where the stream stands.
struct Position {
    lsn: Lsn,
    next_batch_id: u64,
    generation: u64,
    last_published: Instant,
    /// UTC time of the last commit published (keeps fall-back hours in order across batches).
    last_commit_ts: Option<DateTime<Utc>>,
}

/// One capture instance's stream.
pub struct Stream {
    connector_name: String,
    wanted: String,
    options: Arc<MssqlSourceOptions>,
    connector: Connector,
    publisher: Publisher,
    registry: Option<Arc<SchemaRegistry>>,
}

impl Stream {
    /// A stream of `capture_instance` (as configured; resolved on start).
    pub fn new(
        connector_name: &str,
        capture_instance: &str,
        options: Arc<MssqlSourceOptions>,
        kafka: &KafkaConfig,
        registry: Option<Arc<SchemaRegistry>>,
    ) -> Result<Self, SourceError> {
        let connector = Connector::new(&options)?;
        let publisher = Publisher::new(kafka, &options.producer_properties, &format!("mssql-cdc-{connector_name}-{capture_instance}"))?;
        Ok(Self { connector_name: connector_name.to_owned(), wanted: capture_instance.to_owned(), options, connector, publisher, registry })
    }

    /// Runs until cancelled or a fatal error.
    pub async fn run(self, cancel: CancellationToken) -> Result<(), SourceError> {
        let mut outage: Option<(Instant, u32)> = None;
        let mut client: Option<TdsClient> = None;
        let mut setup: Option<Setup> = None;
        let mut position: Option<Position> = None;
        let retry_timeout = Duration::from_millis(self.options.retry_timeout_ms);
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let result = self.step(&mut client, &mut setup, &mut position).await;
            match result {
                Ok(step) => {
                    if let Some((since, attempts)) = outage.take() {
                        tracing::info!(connector = %self.connector_name, capture_instance = %self.wanted, attempts, seconds = since.elapsed().as_secs(), "SQL Server reachable again");
                    }
                    if matches!(step, Step::Idle) {
                        tokio::select! {
                            _ = cancel.cancelled() => return Ok(()),
                            _ = tokio::time::sleep(Duration::from_millis(self.options.poll_interval_ms)) => {}
                        }
                    }
                }
                Err(error) if error.is_transient() => {
                    client = None;
                    self.publisher.finish().ok();
                    let (since, attempts) = outage.get_or_insert((Instant::now(), 0));
                    *attempts += 1;
                    if since.elapsed() >= retry_timeout {
                        return Err(SourceError::Outage { seconds: since.elapsed().as_secs(), last: Box::new(error) });
                    }
                    let backoff = Duration::from_millis((250u64 << (*attempts).min(6)).min(10_000));
                    metrics::counter!(m::SOURCE_RETRIES_TOTAL, "capture_instance" => self.wanted.clone()).increment(1);
                    tracing::warn!(connector = %self.connector_name, capture_instance = %self.wanted, error = %error, attempt = *attempts, backoff_ms = backoff.as_millis() as u64, "transient SQL Server error; retrying the batch on a new connection");
                    tokio::select! {
                        _ = cancel.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(backoff) => {}
                    }
                }
                Err(error) => return Err(error),
            }
        }
    }

    async fn step(&self, client: &mut Option<TdsClient>, setup: &mut Option<Setup>, position: &mut Option<Position>) -> Result<Step, SourceError> {
        if client.is_none() {
            *client = Some(self.connector.connect().await?);
        }
        let conn = client.as_mut().expect("connected above");
        if setup.is_none() {
            *setup = Some(self.setup(conn).await?);
        }
        let setup = setup.as_ref().expect("set up above");
        let state = reader::server_state(conn, &self.connector, &setup.instance.name).await?;
        if position.is_none() {
            *position = Some(self.start_position(setup, &state).await?);
        }
        let position = position.as_mut().expect("positioned above");
        self.batch(conn, setup, position, state).await
    }

    async fn setup(&self, conn: &mut TdsClient) -> Result<Setup, SourceError> {
        let instance = reader::resolve_instance(conn, &self.connector, &self.wanted).await?;
        if instance.name != self.wanted {
            tracing::info!(connector = %self.connector_name, configured = %self.wanted, resolved = %instance.name, "capture instance matched ignoring case");
        }
        let database = reader::database_name(conn, &self.connector).await?;
        let (schema, select) = reader::table_schema(conn, &self.connector, &instance, &self.options).await?;
        let prefix = self.options.topic_prefix.as_deref().unwrap_or("cdc");
        let data_topic = sanitize_topic(&format!("{prefix}.{database}.{}.{}", instance.source_schema, instance.source_table));
        let control_topic = control_topic_for(&data_topic);
        let zone = match self.options.source_time_zone.as_str() {
            "auto" => match reader::current_timezone_id(conn, &self.connector).await? {
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
            name => ServerZone::parse(name),
        };
        let retention_minutes = reader::retention_minutes(conn, &self.connector).await;
        self.publisher.ensure_topics(&data_topic, self.options.topic_partitions as i32, &control_topic).await?;
        let (key_schema_id, value_schema_id) = match (&self.registry, self.options.format) {
            (Some(registry), RecordFormat::Avro) => (
                Some(registry.register(&format!("{data_topic}-key"), &schema.avro_key(&data_topic)).await?),
                Some(registry.register(&format!("{data_topic}-value"), &schema.avro_value(&data_topic)).await?),
            ),
            _ => (None, None),
        };
        let change_sql = reader::change_query(&instance.name, &select, schema.include_command_id);
        tracing::info!(connector = %self.connector_name, capture_instance = %instance.name, topic = %data_topic, columns = schema.columns.len(), "source stream ready");
        Ok(Setup { instance, schema, change_sql, data_topic, control_topic, zone, retention_minutes, key_schema_id, value_schema_id })
    }

    async fn start_position(&self, setup: &Setup, state: &ServerState) -> Result<Position, SourceError> {
        let publisher = &self.publisher;
        let control_topic = setup.control_topic.clone();
        let last = tokio::task::block_in_place(|| publisher.last_control(&control_topic))?;
        let position = match last {
            Some(record) => {
                // A position past the server's max LSN is refused by the batch that follows,
                // with the same state.
                tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, position = %record.to_lsn, batch_id = record.batch_id + 1, "resuming from the control topic");
                Position {
                    lsn: record.to_lsn,
                    next_batch_id: record.batch_id + 1,
                    generation: record.generation,
                    last_published: Instant::now(),
                    last_commit_ts: record.max_commit_ts,
                }
            }
            None => {
                let lsn = match self.options.starting_lsn.as_str() {
                    "earliest" => state.min_lsn.decrement(),
                    "latest" => state.max_lsn,
                    text => Lsn::parse_hex(text).unwrap_or(Lsn::ZERO),
                };
                tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, position = %lsn, starting_lsn = %self.options.starting_lsn, "starting a new stream");
                Position { lsn, next_batch_id: 0, generation: 0, last_published: Instant::now() - Duration::from_secs(86_400), last_commit_ts: None }
            }
        };
        Ok(position)
    }

    async fn batch(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, state: ServerState) -> Result<Step, SourceError> {
        let started = Instant::now();
        let ci = setup.instance.name.as_str();
        // An empty lsn_time_mapping (CDC enabled, nothing captured yet) reports a maximum of
        // zero while the capture instance already has its start LSN: nothing to read yet.
        if state.max_lsn == Lsn::ZERO {
            return Ok(Step::Idle);
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
        let zone = match &setup.zone {
            Some(zone) => ZoneRule::Named(zone.clone()),
            None => ZoneRule::CurrentOffset(*state.now.offset()),
        };
        let mut warnings = Vec::new();
        if setup.zone.is_none() {
            warnings.push(format!("commit times converted with the server's current UTC offset {} (no zone name)", state.now.offset()));
        }
        let heartbeat_due = position.last_published.elapsed() >= Duration::from_millis(self.options.heartbeat_interval_ms);
        let mut commits = if state.max_lsn > from {
            reader::plan(conn, &self.connector, from, state.max_lsn, self.options.max_commits_per_batch).await?
        } else {
            Vec::new()
        };
        let next_unread = match self.options.max_commits_per_batch {
            Some(limit) if commits.len() as u64 > limit => commits.pop(),
            _ => None,
        };
        let to = commits.last().map_or(from, |c| c.lsn);
        let caught_up = to >= state.max_lsn;

        // Stream the rows, publishing them as they arrive.
        self.publisher.begin();
        let mut rows = 0u64;
        let mut bytes = 0u64;
        let mut min_row: Option<Lsn> = None;
        let mut max_row: Option<Lsn> = None;
        let utc = commit_times(&zone, &commits, position.last_commit_ts);
        if to > from {
            let mut builder = BatchBuilder::new(&setup.schema, ci, position.generation, self.options.fetch_rows);
            let mut failure: Option<SourceError> = None;
            let read = reader::read_changes(conn, &self.connector, &setup.change_sql, from, to, setup.schema.include_command_id, |start_lsn, seqval, operation, command_id, values| {
                let commit_ts = match utc.binary_search_by(|(lsn, _)| lsn.cmp(&start_lsn)) {
                    Ok(i) => utc[i].1,
                    Err(_) => {
                        return Err(SourceError::Sql {
                            message: format!("change row at {start_lsn} has no commit in cdc.lsn_time_mapping between {from} and {to}"),
                            code: None,
                            transient: false,
                        })
                    }
                };
                builder
                    .append(ChangeCoordinates { start_lsn, seqval, operation }, command_id, commit_ts, values)
                    .map_err(|e| SourceError::Schema { capture_instance: ci.to_owned(), message: e.to_string() })?;
                min_row = Some(min_row.map_or(start_lsn, |m| m.min(start_lsn)));
                max_row = Some(max_row.map_or(start_lsn, |m| m.max(start_lsn)));
                if builder.len() >= self.options.fetch_rows {
                    let batch = builder.finish();
                    match self.publish_rows(setup, &batch) {
                        Ok(n) => bytes += n,
                        Err(error) => failure = Some(error),
                    }
                }
                match failure.take() {
                    Some(error) => Err(error),
                    None => Ok(()),
                }
            })
            .await?;
            rows = read;
            if !builder.is_empty() {
                let batch = builder.finish();
                bytes += self.publish_rows(setup, &batch)?;
            }
            // Cleanup may have run while we read: check again before naming the rows.
            let after = reader::server_state(conn, &self.connector, ci).await?;
            if let Some(skipped) = self.check_loss(ci, from, after.min_lsn, false)? {
                events.push(skipped);
            }
        }
        let read_ms = started.elapsed().as_millis() as u64;
        if rows == 0 && events.is_empty() && caught_up && !heartbeat_due {
            // Nothing worth a record yet: the commits stay for the next batch.
            self.publisher.finish()?;
            return Ok(Step::Idle);
        }
        let partitions = self.publisher.finish()?;
        let acknowledged: u64 = partitions.iter().map(|p| p.records).sum();
        if acknowledged != rows {
            return Err(SourceError::Kafka(format!("{rows} rows read but {acknowledged} acknowledged")));
        }
        let utc_first = utc.first().map(|c| c.1);
        let utc_last = utc.last().map(|c| c.1);
        let now_utc = state.now.with_timezone(&Utc);
        let capture_lag_seconds = state.max_lsn_time.map(|t| (now_utc - zone.to_utc(t, None)).num_milliseconds() as f64 / 1000.0);
        let retention_headroom_hours = setup.retention_minutes.map(|minutes| {
            let oldest_unread = next_unread.map_or(now_utc, |c| zone.to_utc(c.local_time, None));
            ((oldest_unread - now_utc).num_seconds() as f64 + minutes as f64 * 60.0) / 3600.0
        });
        let record = ControlRecord {
            version: CONTROL_VERSION,
            batch_id: position.next_batch_id,
            generation: position.generation,
            capture_instance: ci.to_owned(),
            data_topic: setup.data_topic.clone(),
            from_lsn: position.lsn,
            to_lsn: to,
            commits: commits.len() as u64,
            rows,
            min_row_lsn: min_row,
            max_row_lsn: max_row,
            min_commit_ts: utc_first,
            max_commit_ts: utc_last,
            partitions,
            format: self.options.format,
            schema_version: setup.schema.fingerprint(),
            schema: setup.schema.clone(),
            schema_id: setup.value_schema_id,
            events,
            warnings,
            metrics: SourceMetrics {
                max_lsn: Some(state.max_lsn),
                capture_lag_seconds,
                retention_headroom_hours,
                read_ms,
                bytes,
                published_at: Some(Utc::now()),
            },
        };
        let control_topic = setup.control_topic.clone();
        let publisher = &self.publisher;
        tokio::task::block_in_place(|| publisher.send_control(&control_topic, &record))?;
        for event in &record.events {
            let Event::DataSkipped { from_lsn, to_lsn, certain } = event;
            tracing::warn!(connector = %self.connector_name, capture_instance = %ci, from_lsn = %from_lsn, to_lsn = %to_lsn, certain, "changes purged by CDC cleanup were skipped (fail_on_data_loss = false); data_skipped published");
        }
        let labels = [("capture_instance", ci.to_owned())];
        metrics::counter!(m::SOURCE_ROWS_TOTAL, &labels).increment(rows);
        metrics::counter!(m::SOURCE_BYTES_TOTAL, &labels).increment(bytes);
        metrics::counter!(m::SOURCE_BATCHES_TOTAL, &labels).increment(1);
        metrics::histogram!(m::SOURCE_BATCH_DURATION_SECONDS, &labels).record(started.elapsed().as_secs_f64());
        if let Some(lag) = capture_lag_seconds {
            metrics::gauge!(m::SOURCE_CAPTURE_LAG_SECONDS, &labels).set(lag);
        }
        if let Some(headroom) = retention_headroom_hours {
            metrics::gauge!(m::SOURCE_RETENTION_HEADROOM_HOURS, &labels).set(headroom);
        }
        metrics::gauge!(m::SOURCE_POSITION_LSN, &labels).set(lsn_gauge(to));
        tracing::debug!(connector = %self.connector_name, capture_instance = %ci, batch_id = record.batch_id, from_lsn = %record.from_lsn, to_lsn = %to, rows, commits = record.commits, "batch published");
        position.lsn = to;
        position.next_batch_id += 1;
        position.last_published = Instant::now();
        if utc_last.is_some() {
            position.last_commit_ts = utc_last;
        }
        Ok(if caught_up { Step::Idle } else { Step::Published })
    }

    /// The data-loss check: changes after `from` that cleanup purged. `Ok(Some(event))` when
    /// skipping them is allowed.
    fn check_loss(&self, ci: &str, from: Lsn, min_lsn: Lsn, certain: bool) -> Result<Option<Event>, SourceError> {
        let next = from.increment();
        if min_lsn == Lsn::ZERO || min_lsn <= next {
            return Ok(None);
        }
        let (from_lsn, to_lsn) = (next, min_lsn.decrement());
        if self.options.fail_on_data_loss {
            return Err(SourceError::DataLoss { capture_instance: ci.to_owned(), from_lsn, to_lsn, min_lsn });
        }
        Ok(Some(Event::DataSkipped { from_lsn, to_lsn, certain }))
    }

    /// Encodes and queues one Arrow batch; returns the bytes queued.
    fn publish_rows(&self, setup: &Setup, batch: &arrow::array::RecordBatch) -> Result<u64, SourceError> {
        let encoder = RowEncoder::new(&setup.schema, batch)?;
        let mut key = Vec::with_capacity(64);
        let mut value = Vec::with_capacity(512);
        let mut bytes = 0u64;
        for row in 0..encoder.rows() {
            key.clear();
            value.clear();
            match (setup.key_schema_id, setup.value_schema_id) {
                (Some(key_id), Some(value_id)) => {
                    confluent_header(key_id, &mut key);
                    encoder.key_avro(row, &mut key)?;
                    confluent_header(value_id, &mut value);
                    encoder.value_avro(row, &mut value)?;
                }
                _ => {
                    encoder.key_json(row, &mut key);
                    encoder.value_json(row, &mut value);
                }
            }
            self.publisher.send(&setup.data_topic, &key, &value)?;
            bytes += (key.len() + value.len()) as u64;
        }
        Ok(bytes)
    }
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

/// A topic name from database object names: characters Kafka refuses become `_`.
fn sanitize_topic(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect()
}

/// The LSN's VLF and block as one number (monotonic in the LSN; the slot is dropped so the
/// value fits a float exactly).
fn lsn_gauge(lsn: Lsn) -> f64 {
    let high = u64::from_be_bytes(lsn.0[0..8].try_into().expect("8 bytes"));
    high as f64
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
