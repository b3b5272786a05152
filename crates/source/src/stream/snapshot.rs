//! Snapshots: the table's rows in the log, as batches of their own.
//!
//! **Open**: S is `sys.fn_cdc_get_max_lsn()`, read before any row; a batch with a
//! `snapshot_open` event (and no rows) announces it, in the generation it starts. **Read**:
//! each step reads the next `snapshot_fetch_rows` rows after the last key published
//! ([`crate::keyset`]) and publishes them as one batch of operation-0 rows stamped
//! `_start_lsn = _seqval = _snapshot = S`, its control record carrying the snapshot's progress
//! (rows done, last key). **Complete**: after a short read, a batch with the `bootstrap` or
//! `resnapshot` event moves the position from where it was to S; the stream goes on with the
//! changes after S.
//!
//! Every row a read returns was committed at or after S (S was read first), so the changes
//! after S, applied over the snapshot in LSN order, end at the table's state whatever the reads
//! saw: a row changed after S and read later carries the change already, and the change
//! applies again on top; a row moved to a key already read arrives as the move's delete and
//! insert. A crash resumes at the read after the last published one (its control record has
//! the key); under `snapshot_isolation = "snapshot"` the resumed reads see a newer state, which
//! the same argument covers.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::batch::zone_rule;
use super::{Position, Setup, Step, Stream};
use crate::config::SnapshotIsolation;
use crate::connection::TdsClient;
use crate::error::SourceError;
use crate::keyset::{self, KeyColumn};
use crate::reader::{self, ServerState};
use crate::rows::{BatchBuilder, ChangeCoordinates};
use mssql_cdc_core::log::control::{ControlRecord, Event, LostRange, PartitionRange, SeedSource, SnapshotKind, SnapshotMode, SnapshotState};
use mssql_cdc_core::telemetry::events::SourceSnapshotRead;
use mssql_cdc_types::lsn::Lsn;

/// How often the stage logs a snapshot's progress.
pub(super) const PROGRESS_LOG_EVERY: Duration = Duration::from_secs(5);

/// A snapshot to open at the next step.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Opening {
    /// Why.
    pub kind: SnapshotKind,
    /// The changes lost, for a re-snapshot after data loss.
    pub lost: Option<LostRange>,
    /// A seed: the copy's rows are the snapshot, at the LSN `as_of` maps to.
    pub seed: Option<SeedOpening>,
}

/// A seed's opening (`mssql-cdc seed`).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SeedOpening {
    /// The snapshot's LSN: what `as_of` maps to.
    pub lsn: Lsn,
    /// The copy.
    pub source: SeedSource,
    /// The copy's rows, when known.
    pub rows: Option<u64>,
}

/// This process's view of a snapshot it is reading: rows/s and when it last logged.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pace {
    started: Instant,
    rows_at_start: u64,
    logged: Instant,
}

impl Pace {
    /// From now, with `rows_done` rows published before this process took the snapshot up.
    pub(super) fn starting_at(rows_done: u64) -> Self {
        Self { started: Instant::now(), rows_at_start: rows_done, logged: Instant::now() }
    }
}

impl Stream {
    /// The changes cleanup purged after the position, if any: from the first LSN not read to
    /// the last purged, with their commit times where known.
    pub(super) async fn lost_range(&self, conn: &mut TdsClient, setup: &Setup, position: &Position, state: &ServerState) -> Result<Option<LostRange>, SourceError> {
        let next = position.lsn.increment();
        if state.min_lsn == Lsn::ZERO || state.min_lsn <= next {
            return Ok(None);
        }
        let (zone, _) = zone_rule(setup, state);
        let to_ts = reader::lsn_time(conn, &self.connector, state.min_lsn).await?.map(|local| zone.to_utc(local, None));
        Ok(Some(LostRange { from_lsn: next, to_lsn: state.min_lsn.decrement(), from_ts: position.last_commit_ts, to_ts }))
    }

    /// Asks for a re-snapshot after `lost`, unless the last one was opened within
    /// `resnapshot_interval_days` (then the stream does not keep up with the retention).
    pub(super) fn resnapshot_after_loss(&self, setup: &Setup, position: &mut Position, lost: LostRange) -> Result<(), SourceError> {
        let interval = self.options.snapshot.resnapshot_interval;
        if let Some(previous) = position.snapshot.as_ref().filter(|s| s.kind == SnapshotKind::Resnapshot) {
            let since = Utc::now() - previous.opened_at;
            if since.to_std().is_ok_and(|since| since < interval) || since < chrono::Duration::zero() {
                return Err(SourceError::RepeatedDataLoss {
                    capture_instance: setup.instance.name.clone(),
                    from_lsn: lost.from_lsn,
                    to_lsn: lost.to_lsn,
                    previous_lsn: previous.lsn,
                    previous_generation: previous.generation,
                    previous_at: previous.opened_at,
                    hours_since: since.num_seconds() as f64 / 3600.0,
                    interval_days: interval.as_secs_f64() / 86_400.0,
                });
            }
        }
        tracing::warn!(
            connector = %self.connector_name, capture_instance = %setup.instance.name, from_lsn = %lost.from_lsn, to_lsn = %lost.to_lsn,
            from_ts = ?lost.from_ts, to_ts = ?lost.to_ts, generation = position.generation + 1,
            "changes purged by CDC cleanup before they were read; re-snapshotting the table as a new generation (on_data_loss = resnapshot)"
        );
        position.open_next = Some(Opening { kind: SnapshotKind::Resnapshot, lost: Some(lost), seed: None });
        Ok(())
    }

    /// Opens a snapshot at S, the server's maximum LSN now, and publishes its `snapshot_open`
    /// batch. `Idle` while CDC has captured nothing for the instance yet.
    pub(super) async fn open_snapshot(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, state: &ServerState, opening: &Opening) -> Result<Step, SourceError> {
        let started = Instant::now();
        let keys = self.snapshot_keys(setup)?;
        // A just-enabled instance whose first commit is not harvested yet: S is just before its
        // start, and every change from the start on follows the snapshot.
        let lsn = if let Some(seed) = &opening.seed {
            seed.lsn
        } else if state.max_lsn != Lsn::ZERO && state.max_lsn >= state.min_lsn {
            state.max_lsn
        } else if state.min_lsn != Lsn::ZERO {
            state.min_lsn.decrement()
        } else {
            return Ok(Step::Idle);
        };
        let local = if lsn == state.max_lsn { state.max_lsn_time } else { reader::lsn_time(conn, &self.connector, lsn).await? };
        let (zone, _) = zone_rule(setup, state);
        let commit_ts = local.map(|local| zone.to_utc(local, None));
        let rows_expected = match &opening.seed {
            Some(seed) => seed.rows,
            None => reader::row_estimate(conn, &self.connector, &setup.table).await?,
        };
        let generation = match opening.kind {
            SnapshotKind::Bootstrap => position.generation,
            SnapshotKind::Resnapshot => position.generation + 1,
        };
        // A seed is one read of its copy.
        let mode = if opening.seed.is_some() { SnapshotMode::Full } else { self.opening_mode() };
        let seed = opening.seed.as_ref().map(|s| s.source.clone());
        if position.next_batch_id == 0 {
            // A new stream starts at S.
            position.lsn = lsn;
        }
        let snapshot = SnapshotState {
            lsn,
            commit_ts,
            kind: opening.kind,
            generation,
            opened_at: Utc::now(),
            keys: keys.iter().map(|k| k.name.clone()).collect(),
            rows_expected,
            rows_done: 0,
            last_key: None,
            complete: false,
            lost: opening.lost.clone(),
            mode,
            plan: None,
            chunks_done: 0,
            waves_done: 0,
            seed: seed.clone(),
        };
        position.generation = generation;
        position.snapshot = Some(snapshot.clone());
        // Events waiting for the next record (column warnings, a switch found at start) ride on
        // the opening one.
        let events: Vec<Event> = setup.pending.iter().cloned().chain([Event::SnapshotOpen { lsn, kind: opening.kind, generation, rows_expected, lost: opening.lost.clone(), mode, seed }]).collect();
        let base = self.record_base(setup, position, state, started.elapsed(), 0);
        // A chunked snapshot's stream goes on from S at once: the opening batch moves there.
        let record = match mode {
            SnapshotMode::Chunked => {
                let last_commit_ts = commit_ts.or(base.last_commit_ts);
                ControlRecord { events, to_lsn: lsn.max(base.from_lsn), max_commit_ts: commit_ts, last_commit_ts, ..base }
            }
            SnapshotMode::Full => ControlRecord { events, ..base },
        };
        self.publisher.send_control(&setup.control_topic, &record).await?;
        self.published(&record, started.elapsed());
        position.advance(&record);
        position.pace = Some(Pace::starting_at(0));
        tracing::info!(
            connector = %self.connector_name, capture_instance = %setup.instance.name, kind = %opening.kind, lsn = %lsn, generation, rows_expected = ?rows_expected,
            isolation = ?self.options.snapshot.isolation, keys = ?snapshot.keys, mode = %mode, "snapshot opened"
        );
        Ok(Step::Published)
    }

    /// Reads and publishes the open snapshot's next rows; after the last ones, its completion.
    pub(super) async fn snapshot_step(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, state: &ServerState) -> Result<Step, SourceError> {
        let started = Instant::now();
        let Some(mut snapshot) = position.snapshot.clone().filter(|s| !s.complete) else { return Ok(Step::Published) };
        let keys = self.open_snapshot_keys(setup, &snapshot)?;
        if self.options.snapshot.isolation == SnapshotIsolation::Snapshot && !position.snapshot_txn {
            reader::execute(conn, &self.connector, "SET TRANSACTION ISOLATION LEVEL SNAPSHOT; BEGIN TRANSACTION").await?;
            position.snapshot_txn = true;
        }
        position.pace.get_or_insert(Pace::starting_at(snapshot.rows_done));
        let fetch = self.options.snapshot.fetch_rows;
        let unique = !setup.schema.key.is_empty();
        let after = snapshot.last_key.clone();
        let query = keyset::chunk_query(&setup.table, &setup.select, &keys, unique, fetch, after.as_deref()).map_err(|e| self.snapshot_error(setup, e.to_string()))?;
        let params = match &after {
            Some(values) => keyset::params(&keys, values).map_err(|e| self.snapshot_error(setup, e.to_string()))?,
            None => Vec::new(),
        };
        let sql = format!("SET LOCK_TIMEOUT {}; {query}", self.options.snapshot.lock_timeout.as_millis());
        let positions: Vec<usize> = keys.iter().filter_map(|k| setup.schema.columns.iter().position(|c| c.name == k.name)).collect();
        let commit_ts = snapshot.commit_ts.unwrap_or(snapshot.opened_at);
        let at = ChangeCoordinates { start_lsn: snapshot.lsn, seqval: snapshot.lsn, operation: 0 };
        let ci = setup.instance.name.as_str();
        let mut builder = BatchBuilder::new(&setup.schema, ci, snapshot.generation, self.options.fetch_rows).of_snapshot(snapshot.lsn);
        let (mut count, mut bytes, mut last_key) = (0u64, 0u64, None);
        self.publisher.begin();
        let mut rows = reader::read_table(conn, &self.connector, &sql, &params).await?;
        while let Some(values) = rows.next().await? {
            last_key = Some(positions.iter().map(|&i| values.get(i).map_or(serde_json::Value::Null, keyset::to_json)).collect::<Vec<_>>());
            builder.append(at, None, commit_ts, values.into_iter()).map_err(|e| SourceError::Schema { capture_instance: ci.to_owned(), message: e.to_string() })?;
            count += 1;
            if builder.len() >= self.options.fetch_rows {
                bytes += self.publish_rows(setup, builder.finish()).await?;
            }
        }
        drop(rows);
        if !builder.is_empty() {
            bytes += self.publish_rows(setup, builder.finish()).await?;
        }
        let partitions = self.acknowledged_rows(count).await?;
        if count > 0 {
            snapshot.rows_done += count;
            snapshot.last_key = last_key;
            self.commit_snapshot_rows(setup, position, state, &snapshot, (count, bytes, partitions), started).await?;
        }
        let done = count < fetch;
        let rows_per_second = self.report_read(setup, position, &snapshot, count, done);
        if done {
            self.complete_snapshot(conn, setup, position, state, snapshot, rows_per_second).await?;
        }
        Ok(Step::Published)
    }

    /// Waits for the snapshot rows published since `begin` to be acknowledged; their offset
    /// ranges. Fewer or more than `count` acknowledged is a Kafka failure.
    pub(super) async fn acknowledged_rows(&self, count: u64) -> Result<Vec<PartitionRange>, SourceError> {
        let partitions = self.publisher.finish().await?;
        let acknowledged: u64 = partitions.iter().map(|p| p.records).sum();
        if acknowledged != count {
            return Err(SourceError::Kafka(format!("{count} snapshot rows read but {acknowledged} acknowledged")));
        }
        Ok(partitions)
    }

    /// Counts a snapshot read of `count` rows and logs the snapshot's progress every
    /// [`PROGRESS_LOG_EVERY`] and when `done`; its rows/s since this process took it up.
    pub(super) fn report_read(&self, setup: &Setup, position: &mut Position, snapshot: &SnapshotState, count: u64, done: bool) -> f64 {
        let pace = position.pace.get_or_insert(Pace::starting_at(snapshot.rows_done));
        let rows_per_second = snapshot.rows_done.saturating_sub(pace.rows_at_start) as f64 / pace.started.elapsed().as_secs_f64().max(0.001);
        let log = done || pace.logged.elapsed() >= PROGRESS_LOG_EVERY;
        if log {
            pace.logged = Instant::now();
        }
        SourceSnapshotRead { connector: &self.connector_name, capture_instance: &setup.instance.name, rows: count, rows_done: snapshot.rows_done, rows_expected: snapshot.rows_expected, rows_per_second, log }.emit();
        rows_per_second
    }

    /// The control record of a snapshot's rows just published (`rows`: their count, bytes and
    /// acknowledged offsets), with `snapshot`'s progress; the position moves past it.
    pub(super) async fn commit_snapshot_rows(&self, setup: &Setup, position: &mut Position, state: &ServerState, snapshot: &SnapshotState, rows: (u64, u64, Vec<PartitionRange>), started: Instant) -> Result<(), SourceError> {
        let (count, bytes, partitions) = rows;
        position.snapshot = Some(snapshot.clone());
        let base = self.record_base(setup, position, state, started.elapsed(), bytes);
        let record = ControlRecord { rows: count, min_row_lsn: Some(snapshot.lsn), max_row_lsn: Some(snapshot.lsn), partitions, ..base };
        self.publisher.send_control(&setup.control_topic, &record).await?;
        self.published(&record, started.elapsed());
        position.advance(&record);
        Ok(())
    }

    /// Publishes the completion: the `bootstrap` or `resnapshot` event, and the position moved
    /// to S.
    pub(super) async fn complete_snapshot(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, state: &ServerState, mut snapshot: SnapshotState, rows_per_second: f64) -> Result<(), SourceError> {
        let started = Instant::now();
        if position.snapshot_txn {
            reader::execute(conn, &self.connector, "COMMIT TRANSACTION; SET TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
            position.snapshot_txn = false;
        }
        snapshot.complete = true;
        let event = match snapshot.kind {
            SnapshotKind::Bootstrap => Event::Bootstrap { lsn: snapshot.lsn, rows: snapshot.rows_done },
            SnapshotKind::Resnapshot => Event::Resnapshot { lsn: snapshot.lsn, rows: snapshot.rows_done, lost: snapshot.lost.clone() },
        };
        position.snapshot = Some(snapshot.clone());
        let base = self.record_base(setup, position, state, started.elapsed(), 0);
        let record = ControlRecord { to_lsn: snapshot.lsn, max_commit_ts: snapshot.commit_ts, last_commit_ts: snapshot.commit_ts.or(base.last_commit_ts), events: vec![event], ..base };
        self.publisher.send_control(&setup.control_topic, &record).await?;
        self.published(&record, started.elapsed());
        position.advance(&record);
        position.pace = None;
        tracing::info!(
            connector = %self.connector_name, capture_instance = %setup.instance.name, kind = %snapshot.kind, lsn = %snapshot.lsn, generation = snapshot.generation,
            rows = snapshot.rows_done, rows_per_second = rows_per_second.round() as u64, "snapshot complete; streaming the changes after it"
        );
        Ok(())
    }

    /// The columns a snapshot reads in order of: the key, else `snapshot_keys` (which must be
    /// captured, published without a cast).
    pub(super) fn snapshot_keys(&self, setup: &Setup) -> Result<Vec<KeyColumn>, SourceError> {
        let names: &[String] = if setup.schema.key.is_empty() { &self.options.snapshot.keys } else { &setup.schema.key };
        if names.is_empty() {
            return Err(self.snapshot_error(setup, "the table has no unique index: set snapshot_keys to the columns to read it in order of".into()));
        }
        names
            .iter()
            .map(|name| {
                let column = setup.schema.columns.iter().find(|c| c.name.eq_ignore_ascii_case(name));
                let Some(column) = column else {
                    return Err(self.snapshot_error(setup, format!("snapshot_keys: `{name}` is not a published column")));
                };
                if self.options.columns.iter().any(|choice| choice.name.eq_ignore_ascii_case(name) && choice.cast.is_some()) {
                    return Err(self.snapshot_error(setup, format!("key column `{name}` is cast in `columns`; snapshots read in the column's own order, so publish it without a cast")));
                }
                let sql_type = setup.sql_types.iter().find(|(n, _)| n == &column.name).map_or("", |(_, t)| t.as_str());
                Ok(KeyColumn { name: column.name.clone(), ty: column.ty, param_cast: keyset::param_cast(sql_type) })
            })
            .collect()
    }

    /// The open snapshot's key columns, which the configuration must still name: a snapshot
    /// is finished in the order (or on the plan) it was opened with.
    pub(super) fn open_snapshot_keys(&self, setup: &Setup, snapshot: &SnapshotState) -> Result<Vec<KeyColumn>, SourceError> {
        let keys = self.snapshot_keys(setup)?;
        if keys.iter().map(|k| &k.name).ne(snapshot.keys.iter()) {
            return Err(self.snapshot_error(setup, format!("the open snapshot reads in order of {:?}, the configuration now names {:?}; finish it with the same snapshot_keys", snapshot.keys, keys.iter().map(|k| &k.name).collect::<Vec<_>>())));
        }
        Ok(keys)
    }

    pub(super) fn snapshot_error(&self, setup: &Setup, message: String) -> SourceError {
        SourceError::Snapshot { capture_instance: setup.instance.name.clone(), message }
    }
}
