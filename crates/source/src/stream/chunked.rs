//! The stream's side of a chunked snapshot ([`crate::backfill`]): the plan, the waves beside
//! the stream, the headroom pause and the completion.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::Value as Json;

use super::batch::{headroom_hours, zone_rule};
use super::{Position, Setup, Step, Stream};
use crate::backfill::plan::{self, Extent};
use crate::config::SnapshotIsolation;
use crate::connection::TdsClient;
use crate::error::SourceError;
use crate::keyset::{self, KeyColumn};
use crate::reader::{self, ServerState};
use crate::rows::{BatchBuilder, ChangeCoordinates};
use mssql_cdc_core::log::control::{ChunkBounds, ChunkRead, ControlRecord, Event, PlanRef, SnapshotKind, SnapshotMode, SnapshotState};
use mssql_cdc_core::log::schema::ColumnType;
use mssql_cdc_core::telemetry::events::SourceBackfillProgress;
use mssql_cdc_types::lsn::Lsn;

/// This process's side of a chunked snapshot: the plan as read back, the run's budget and
/// pace, the stream's last headroom.
#[derive(Clone, Debug, Default)]
pub(super) struct Backfill {
    /// The plan's chunks, once published or read back from the control topic.
    plan: Option<Arc<Vec<ChunkBounds>>>,
    /// When this run's first wave started.
    run_started: Option<Instant>,
    /// Waves this run read.
    waves: u64,
    /// How long the last wave's rounds took, each.
    round_time: Option<Duration>,
    /// Rows/s of the last wave.
    rows_per_second: f64,
    /// The retention headroom, hours, when the last wave was considered: the retention less
    /// the stream's lag.
    headroom_hours: Option<f64>,
    /// When the last wave ended, and how long it took: while the stream is behind, the next
    /// wave waits at least as long again (the stream's fair share).
    last_wave: Option<(Instant, Duration)>,
    /// The state last reported, and why.
    state: &'static str,
    reason: String,
}

impl Backfill {
    /// The state last reported (empty before any).
    pub(super) fn state(&self) -> &'static str {
        self.state
    }

    /// Why.
    pub(super) fn reason(&self) -> &str {
        &self.reason
    }

}

/// What a chunked snapshot's step after a change batch did.
pub(super) enum Wave {
    /// Read and published a wave (or the completion).
    Read,
    /// The stream is behind and has not had its share of time since the last wave, or no
    /// chunked snapshot is open.
    NotDue,
    /// A wave was due but may not start: the budget is spent, or the headroom short.
    Held,
}

/// Why no wave starts now.
struct Hold {
    state: &'static str,
    reason: String,
}

impl Stream {
    /// Whether the stream's open snapshot is a chunked one.
    pub(super) fn chunked_open(position: &Position) -> bool {
        open_chunked(position).is_some()
    }

    /// The snapshot mode of a snapshot opened now.
    pub(super) fn opening_mode(&self) -> SnapshotMode {
        self.options.snapshot.mode
    }

    /// A chunked snapshot's step before the stream's: publishes the plan when there is none,
    /// or reads it back after a restart. `None`: go on with the stream.
    pub(super) async fn chunked_prepare(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, state: &ServerState) -> Result<Option<Step>, SourceError> {
        let Some(snapshot) = open_chunked(position).cloned() else { return Ok(None) };
        let keys = self.open_snapshot_keys(setup, &snapshot)?;
        match snapshot.plan {
            None => {
                self.publish_plan(conn, setup, position, state, snapshot, &keys).await?;
                Ok(Some(Step::Published))
            }
            Some(plan) if position.backfill.plan.is_none() => {
                let record = self.publisher.control_at(&setup.control_topic, plan.offset).await?;
                let chunks = record.and_then(|r| r.events.into_iter().find_map(|e| match e {
                    Event::SnapshotPlan { lsn, chunks, .. } if lsn == snapshot.lsn => Some(chunks),
                    _ => None,
                }));
                let Some(chunks) = chunks.filter(|c| c.len() as u64 == plan.chunks) else {
                    return Err(self.snapshot_error(setup, format!("the plan of the snapshot at {} is not at offset {} of `{}` (deleted by the topic's retention?); the control topic must keep its records", snapshot.lsn, plan.offset, setup.control_topic)));
                };
                tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, lsn = %snapshot.lsn, chunks_done = snapshot.chunks_done, chunks_total = plan.chunks, "resuming the chunked snapshot from its plan");
                position.backfill.plan = Some(Arc::new(chunks));
                Ok(None)
            }
            Some(_) => Ok(None),
        }
    }

    /// Cuts the plan and publishes it as one batch (`snapshot_plan`), before any chunk is read.
    async fn publish_plan(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, state: &ServerState, mut snapshot: SnapshotState, keys: &[KeyColumn]) -> Result<(), SourceError> {
        let started = Instant::now();
        let chunk_rows = self.options.snapshot.backfill.chunk_rows;
        let isolation = isolation_sql(self.options.snapshot.isolation);
        let prefix = format!("SET LOCK_TIMEOUT {}; {isolation}", self.options.snapshot.lock_timeout.as_millis());
        let (method, chunks) = match self.range_plan(conn, setup, keys, chunk_rows, &prefix).await? {
            Some(chunks) => ("range", chunks),
            None => ("keyset", self.keyset_plan(conn, setup, keys, chunk_rows, &prefix).await?),
        };
        let event = Event::SnapshotPlan { lsn: snapshot.lsn, keys: keys.iter().map(|k| k.name.clone()).collect(), method: method.to_owned(), chunk_rows, chunks: chunks.clone() };
        let record = ControlRecord { events: vec![event], ..self.record_base(setup, position, state, started.elapsed(), 0) };
        let offset = self.publisher.send_control(&setup.control_topic, &record).await?;
        self.published(&record, started.elapsed());
        position.advance(&record);
        snapshot.plan = Some(PlanRef { offset, chunks: chunks.len() as u64 });
        position.snapshot = Some(snapshot.clone());
        position.backfill.plan = Some(Arc::new(chunks));
        tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, lsn = %snapshot.lsn, method, chunk_rows, chunks = snapshot.plan.map_or(0, |p| p.chunks), offset, "chunked snapshot planned");
        Ok(())
    }

    /// The range plan of a single integer key; `None` for other keys and ranges too wide.
    async fn range_plan(&self, conn: &mut TdsClient, setup: &Setup, keys: &[KeyColumn], chunk_rows: u64, prefix: &str) -> Result<Option<Vec<ChunkBounds>>, SourceError> {
        let [key] = keys else { return Ok(None) };
        if !matches!(key.ty, ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64) {
            return Ok(None);
        }
        let column = reader::quote(&key.name);
        let sql = format!("{prefix}{}", plan::extent_sql(&setup.table, &column));
        let row = self.first_row(conn, &sql).await?;
        let (min, max, rows) = (integer(row.first()), integer(row.get(1)), integer(row.get(2)).unwrap_or(0));
        let (Some(min), Some(max)) = (min, max) else { return Ok(Some(plan::chunks_between(Vec::new()))) };
        let extent = Extent { min, max, rows: rows.max(0) as u64 };
        if extent.rows <= chunk_rows {
            return Ok(Some(plan::chunks_between(Vec::new())));
        }
        let Some(width) = extent.slice_width(chunk_rows) else { return Ok(None) };
        let sql = format!("{prefix}{}", plan::slice_sql(&setup.table, &column, &extent, width));
        let mut slices = Vec::new();
        let mut rows = reader::read_table(conn, &self.connector, &sql, &[]).await?;
        while let Some(values) = rows.next().await? {
            if let (Some(slice), Some(count)) = (integer(values.first()), integer(values.get(1))) {
                slices.push((slice, count.max(0) as u64));
            }
        }
        Ok(Some(plan::pack_slices(&extent, width, &slices, chunk_rows)))
    }

    /// The keyset plan: the key columns read once in key order, a bound every `chunk_rows`.
    async fn keyset_plan(&self, conn: &mut TdsClient, setup: &Setup, keys: &[KeyColumn], chunk_rows: u64, prefix: &str) -> Result<Vec<ChunkBounds>, SourceError> {
        let select: Vec<String> = keys.iter().map(|k| reader::quote(&k.name)).collect();
        let unique = !setup.schema.key.is_empty();
        let mut bounds: Vec<Vec<Json>> = Vec::new();
        loop {
            let after = bounds.last().cloned();
            let query = keyset::chunk_query(&setup.table, &select, keys, unique, chunk_rows, after.as_deref()).map_err(|e| self.snapshot_error(setup, e.to_string()))?;
            let params = match &after {
                Some(values) => keyset::params(keys, values).map_err(|e| self.snapshot_error(setup, e.to_string()))?,
                None => Vec::new(),
            };
            let mut rows = reader::read_table(conn, &self.connector, &format!("{prefix}{query}"), &params).await?;
            let (mut count, mut last) = (0u64, None);
            while let Some(values) = rows.next().await? {
                count += 1;
                last = Some(values.iter().map(keyset::to_json).collect::<Vec<_>>());
            }
            match last {
                Some(last) if count >= chunk_rows => bounds.push(last),
                _ => break,
            }
        }
        Ok(plan::chunks_between(bounds))
    }

    async fn first_row(&self, conn: &mut TdsClient, sql: &str) -> Result<Vec<tiberius::ColumnData<'static>>, SourceError> {
        let mut rows = reader::read_table(conn, &self.connector, sql, &[]).await?;
        let row = rows.next().await?.unwrap_or_default();
        while rows.next().await?.is_some() {}
        Ok(row)
    }

    /// After a change batch: reads a wave when it is due ([`wave_due`]: the stream has caught
    /// up, or has had as much time since the last wave as that wave took), the run's budget
    /// allows, and the retention headroom does. Returns whether it published.
    pub(super) async fn chunked_wave(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, caught_up: bool) -> Result<Wave, SourceError> {
        let Some(mut snapshot) = open_chunked(position).cloned() else { return Ok(Wave::NotDue) };
        let Some(plan) = position.backfill.plan.clone() else { return Ok(Wave::NotDue) };
        let keys = self.open_snapshot_keys(setup, &snapshot)?;
        if !wave_due(caught_up, position.backfill.last_wave, Instant::now()) {
            return Ok(Wave::NotDue);
        }
        let settings = &self.options.snapshot.backfill;
        let total = plan.len() as u64;
        let remaining = total.saturating_sub(snapshot.chunks_done);
        let state = reader::server_state(conn, &self.connector, &setup.instance.name).await?;
        if remaining == 0 {
            self.complete_chunked(setup, position, &state, snapshot).await?;
            return Ok(Wave::Read);
        }
        // The stream's headroom as its batches report it, with the last commit published
        // standing for the oldest unpublished one (which is no older) while it is behind.
        let now = state.now.to_utc();
        let oldest_unpublished = if caught_up { Some(now) } else { position.last_commit_ts.or(snapshot.commit_ts) };
        let Some(oldest_unpublished) = oldest_unpublished else { return Ok(Wave::NotDue) };
        let per_round = settings.num_partitions as u64;
        let rounds = match (position.backfill.round_time, settings.target_wave.is_zero()) {
            (Some(round), false) if !round.is_zero() => (settings.target_wave.as_secs_f64() / round.as_secs_f64()).floor().max(1.0) as u64,
            _ => 1,
        };
        let mut rounds = rounds.min(remaining.div_ceil(per_round));
        let headroom_hours = setup.retention_minutes.map(|minutes| headroom_hours(minutes, oldest_unpublished, now));
        position.backfill.headroom_hours = headroom_hours;
        if let Some(hold) = self.hold(position, headroom_hours, &mut rounds) {
            self.report(setup, position, &snapshot, hold.state, &hold.reason);
            return Ok(Wave::Held);
        }
        position.backfill.run_started.get_or_insert_with(Instant::now);
        // The wave's stamp: every commit at or before it is in what the reads see.
        let stamp = if state.max_lsn > snapshot.lsn { state.max_lsn } else { snapshot.lsn };
        let (zone, _) = zone_rule(setup, &state);
        let stamp_ts = if stamp == state.max_lsn { state.max_lsn_time.map(|t| zone.to_utc(t, None)) } else { snapshot.commit_ts };
        let started = Instant::now();
        let wave = snapshot.waves_done;
        // Counted before its first chunk: a crash mid-wave never reuses the number.
        snapshot.waves_done += 1;
        let first = snapshot.chunks_done;
        let last = (first + rounds * per_round).min(total);
        let mut rows = 0u64;
        for round_start in (first..last).step_by(per_round as usize) {
            let round_end = (round_start + per_round).min(last);
            // One connection per chunk read at a time, kept from wave to wave.
            let mut connections = std::mem::take(&mut position.readers);
            while connections.len() < (round_end - round_start) as usize {
                connections.push(self.connector.connect().await?);
            }
            let reads = (round_start..round_end).zip(connections).map(|(index, conn)| self.read_chunk(conn, setup, &keys, &snapshot, &plan[index as usize], stamp, stamp_ts));
            let results = futures::future::try_join_all(reads).await?;
            let mut read = Vec::with_capacity(results.len());
            for (conn, batches, count) in results {
                position.readers.push(conn);
                read.push((batches, count));
            }
            for (offset, (batches, count)) in read.into_iter().enumerate() {
                let index = round_start + offset as u64;
                let chunk = ChunkRead { snapshot: snapshot.lsn, chunk: index, wave, stamp, rows: count, bounds: plan[index as usize].clone() };
                self.publish_chunk(setup, position, &state, &mut snapshot, chunk, batches).await?;
                rows += count;
            }
        }
        position.snapshot = Some(snapshot.clone());
        let elapsed = started.elapsed();
        let rounds_read = (last - first).div_ceil(per_round).max(1);
        position.backfill.round_time = Some(elapsed / rounds_read as u32);
        position.backfill.last_wave = Some((Instant::now(), elapsed));
        position.backfill.rows_per_second = rows as f64 / elapsed.as_secs_f64().max(0.001);
        position.backfill.waves += 1;
        self.report(setup, position, &snapshot, "running", &format!("wave {wave}: chunks {first}..{last} stamped {stamp}, {rows} rows in {:.1} s", elapsed.as_secs_f64()));
        if snapshot.chunks_done >= total {
            let state = reader::server_state(conn, &self.connector, &setup.instance.name).await?;
            self.complete_chunked(setup, position, &state, snapshot).await?;
        }
        Ok(Wave::Read)
    }

    /// Why no wave may start now, if so; may shorten the wave to what the headroom allows.
    fn hold(&self, position: &Position, headroom_hours: Option<f64>, rounds: &mut u64) -> Option<Hold> {
        let settings = &self.options.snapshot.backfill;
        if settings.max_waves.is_some_and(|max| position.backfill.waves >= max) {
            return Some(Hold { state: "budget_spent", reason: format!("this run read backfill.max_waves = {} waves; the next run goes on", position.backfill.waves) });
        }
        if let (Some(max), Some(started)) = (settings.max_duration, position.backfill.run_started)
            && started.elapsed() >= max
        {
            return Some(Hold { state: "budget_spent", reason: format!("this run spent backfill.max_seconds = {}; the next run goes on", max.as_secs_f64()) });
        }
        let min = settings.min_headroom_hours?;
        // The retention less the stream's lag (the whole retention when it has caught up).
        let Some(headroom) = headroom_hours else {
            return Some(Hold {
                state: "waiting_metrics",
                reason: "the cleanup job's retention is not readable (sys.sp_cdc_help_jobs needs db_owner): grant it, or unset backfill.min_headroom_hours".into(),
            });
        };
        // The stream publishes nothing while a wave is read: its headroom shrinks by the wave.
        let round_hours = position.backfill.round_time.map_or(0.0, |t| t.as_secs_f64() / 3600.0);
        let left = |rounds: u64| headroom - round_hours * (rounds as f64);
        while *rounds > 1 && left(*rounds) < min {
            *rounds -= 1;
        }
        if left(*rounds) < min {
            return Some(Hold {
                state: "waiting_headroom",
                reason: format!("retention headroom {headroom:.3} h, less the wave's {:.3} h, is under backfill.min_headroom_hours = {min}", round_hours * (*rounds as f64)),
            });
        }
        None
    }

    /// Reads one chunk on `conn`: the connection back, the rows as Arrow batches, their count.
    #[allow(clippy::too_many_arguments)]
    async fn read_chunk(&self, mut conn: TdsClient, setup: &Setup, keys: &[KeyColumn], snapshot: &SnapshotState, bounds: &ChunkBounds, stamp: Lsn, stamp_ts: Option<chrono::DateTime<Utc>>) -> Result<(TdsClient, Vec<arrow::array::RecordBatch>, u64), SourceError> {
        let (filter, params) = keyset::range_filter(keys, bounds).map_err(|e| self.snapshot_error(setup, e.to_string()))?;
        let filter = filter.map(|f| format!(" WHERE {f}")).unwrap_or_default();
        let isolation = isolation_sql(self.options.snapshot.isolation);
        let sql = format!("SET LOCK_TIMEOUT {}; {isolation}SELECT {} FROM {}{filter}", self.options.snapshot.lock_timeout.as_millis(), setup.select.join(", "), setup.table);
        let ci = setup.instance.name.as_str();
        let at = ChangeCoordinates { start_lsn: stamp, seqval: stamp, operation: 0 };
        let commit_ts = stamp_ts.or(snapshot.commit_ts).unwrap_or(snapshot.opened_at);
        let mut builder = BatchBuilder::new(&setup.schema, ci, snapshot.generation, self.options.fetch_rows).of_snapshot(snapshot.lsn);
        let mut batches = Vec::new();
        let mut count = 0u64;
        let mut rows = reader::read_table(&mut conn, &self.connector, &sql, &params).await?;
        while let Some(values) = rows.next().await? {
            builder.append(at, None, commit_ts, values.into_iter()).map_err(|e| SourceError::Schema { capture_instance: ci.to_owned(), message: e.to_string() })?;
            count += 1;
            if builder.len() >= self.options.fetch_rows {
                batches.push(builder.finish());
            }
        }
        drop(rows);
        if !builder.is_empty() {
            batches.push(builder.finish());
        }
        Ok((conn, batches, count))
    }

    /// Publishes one chunk as a batch: its rows, then its control record (`snapshot_chunk`).
    async fn publish_chunk(&self, setup: &Setup, position: &mut Position, state: &ServerState, snapshot: &mut SnapshotState, chunk: ChunkRead, batches: Vec<arrow::array::RecordBatch>) -> Result<(), SourceError> {
        let started = Instant::now();
        self.publisher.begin();
        let mut bytes = 0;
        for batch in batches {
            bytes += self.publish_rows(setup, batch).await?;
        }
        let partitions = self.publisher.finish().await?;
        let acknowledged: u64 = partitions.iter().map(|p| p.records).sum();
        if acknowledged != chunk.rows {
            return Err(SourceError::Kafka(format!("{} rows of chunk {} read but {acknowledged} acknowledged", chunk.rows, chunk.chunk)));
        }
        snapshot.chunks_done = chunk.chunk + 1;
        snapshot.rows_done += chunk.rows;
        position.snapshot = Some(snapshot.clone());
        let stamp = chunk.stamp;
        let rows = chunk.rows;
        let base = self.record_base(setup, position, state, started.elapsed(), bytes);
        let record = ControlRecord { rows, min_row_lsn: (rows > 0).then_some(stamp), max_row_lsn: (rows > 0).then_some(stamp), partitions, events: vec![Event::SnapshotChunk(chunk)], ..base };
        self.publisher.send_control(&setup.control_topic, &record).await?;
        self.published(&record, started.elapsed());
        position.advance(&record);
        mssql_cdc_core::telemetry::events::SourceSnapshotRead {
            connector: &self.connector_name,
            capture_instance: &setup.instance.name,
            rows,
            rows_done: snapshot.rows_done,
            rows_expected: snapshot.rows_expected,
            rows_per_second: position.backfill.rows_per_second,
            log: false,
        }
        .emit();
        Ok(())
    }

    /// Publishes the completion (`bootstrap` or `resnapshot` with S): downstream removes the
    /// keys no chunk held and no change after S wrote. The position does not move.
    async fn complete_chunked(&self, setup: &Setup, position: &mut Position, state: &ServerState, mut snapshot: SnapshotState) -> Result<(), SourceError> {
        let started = Instant::now();
        snapshot.complete = true;
        let event = match snapshot.kind {
            SnapshotKind::Bootstrap => Event::Bootstrap { lsn: snapshot.lsn, rows: snapshot.rows_done },
            SnapshotKind::Resnapshot => Event::Resnapshot { lsn: snapshot.lsn, rows: snapshot.rows_done, lost: snapshot.lost.clone() },
        };
        position.snapshot = Some(snapshot.clone());
        let record = ControlRecord { events: vec![event], ..self.record_base(setup, position, state, started.elapsed(), 0) };
        self.publisher.send_control(&setup.control_topic, &record).await?;
        self.published(&record, started.elapsed());
        position.advance(&record);
        self.report(setup, position, &snapshot, "done", "every chunk of the plan is published");
        tracing::info!(
            connector = %self.connector_name, capture_instance = %setup.instance.name, kind = %snapshot.kind, lsn = %snapshot.lsn, generation = snapshot.generation,
            rows = snapshot.rows_done, chunks = snapshot.chunks_done, waves = snapshot.waves_done, "chunked snapshot complete"
        );
        Ok(())
    }

    /// Reports the backfill's state (logged when it changes or a wave was read).
    fn report(&self, setup: &Setup, position: &mut Position, snapshot: &SnapshotState, state: &'static str, reason: &str) {
        if state == position.backfill.state && state != "running" {
            return;
        }
        position.backfill.state = state;
        position.backfill.reason = reason.to_owned();
        SourceBackfillProgress {
            connector: &self.connector_name,
            capture_instance: &setup.instance.name,
            state,
            reason,
            chunks_done: snapshot.chunks_done,
            chunks_total: snapshot.plan.map_or(0, |p| p.chunks),
            rows_per_second: position.backfill.rows_per_second,
            headroom_hours: position.backfill.headroom_hours,
        }
        .emit();
    }
}

/// Whether a wave may start after a change batch: when the stream has caught up with the
/// server, or, while it is behind, once it has had as much time since the last wave ended as
/// that wave took. So under a load the stream cannot catch up with, the backfill still moves,
/// taking at most half of the source's time; the headroom check bounds what that costs.
fn wave_due(caught_up: bool, last_wave: Option<(Instant, Duration)>, now: Instant) -> bool {
    caught_up || last_wave.is_none_or(|(ended, took)| now.saturating_duration_since(ended) >= took)
}

/// The stream's open snapshot, if it is a chunked one.
fn open_chunked(position: &Position) -> Option<&SnapshotState> {
    position.snapshot.as_ref().filter(|s| !s.complete && s.mode == SnapshotMode::Chunked)
}

/// The statement setting a read's isolation level (empty for the connection's default).
fn isolation_sql(isolation: SnapshotIsolation) -> &'static str {
    match isolation {
        SnapshotIsolation::ReadCommitted => "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; ",
        SnapshotIsolation::Snapshot => "SET TRANSACTION ISOLATION LEVEL SNAPSHOT; ",
    }
}

/// An integer result column (any width).
fn integer(value: Option<&tiberius::ColumnData<'static>>) -> Option<i64> {
    match value? {
        tiberius::ColumnData::U8(v) => v.map(i64::from),
        tiberius::ColumnData::I16(v) => v.map(i64::from),
        tiberius::ColumnData::I32(v) => v.map(i64::from),
        tiberius::ColumnData::I64(v) => *v,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caught-up stream always lets a wave start; one that is behind waits as long as the
    /// last wave took, so the stream keeps at least half the source's time.
    #[test]
    fn a_stream_behind_gets_as_much_time_as_the_last_wave_took() {
        let start = Instant::now();
        let wave = Some((start, Duration::from_secs(4)));
        assert!(wave_due(true, wave, start));
        assert!(wave_due(false, None, start), "the first wave of a run does not wait");
        assert!(!wave_due(false, wave, start + Duration::from_secs(3)));
        assert!(wave_due(false, wave, start + Duration::from_secs(4)));
    }

    /// The headroom is the retention less the age of the oldest unpublished change.
    #[test]
    fn the_headroom_is_the_retention_less_the_oldest_unpublished_change() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z").unwrap().to_utc();
        assert_eq!(headroom_hours(120, now - chrono::Duration::minutes(30), now), 1.5);
        assert_eq!(headroom_hours(120, now, now), 2.0, "nothing unpublished: the whole retention");
    }
}
