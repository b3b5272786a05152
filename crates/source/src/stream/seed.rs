//! `mssql-cdc seed`: a copy of the table published as the stream's snapshot at `as_of`.
//!
//! **When.** A seed is a new stream's first snapshot (`bootstrap`), or, with `--reseed`, a
//! copy newer than where the stream stands, as a new generation (`resnapshot`, after data
//! loss). A rerun with the same `as_of` finds the seed in the control topic: a complete one
//! changes nothing, an open one is resumed. Any other snapshot, or an open one, stops it.
//!
//! **Where.** `as_of` (an LSN, or a UTC time mapped to the last commit at or before it through
//! `cdc.lsn_time_mapping`) must not be past the server's newest LSN, and CDC cleanup must not
//! have passed it: the stream replays every change after it.
//!
//! **How.** The same batches as a full snapshot: a `snapshot_open` event carrying the copy
//! ([`SeedSource`]), the copy's rows as operation-0 rows stamped `as_of` in batches of
//! `snapshot_fetch_rows`, then the completion, which moves the position to `as_of`. The copy
//! is read in a total order (key first), so a resumed seed skips the rows already published
//! and reads the rest; its identity (Delta version, Parquet digest) must not have changed.

use std::time::Instant;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::batch::zone_rule;
use super::snapshot::{Opening, Pace, SeedOpening};
use super::{Position, Setup, Stream, StreamOffset};
use crate::connection::TdsClient;
use crate::error::SourceError;
use crate::reader::{self, ServerState};
use crate::rows::{BatchBuilder, ChangeCoordinates};
use crate::seed::columns::CopyColumns;
use crate::seed::{AsOf, CopySource, SeedRequest};
use mssql_cdc_core::log::control::{SeedSource, SnapshotKind};
use mssql_cdc_types::lsn::Lsn;

/// What a seed does on a stream as its control topic has it.
#[derive(Clone, Debug, PartialEq)]
enum Action {
    /// The same seed is complete: nothing to do.
    Done,
    /// The same seed is open: publish the rest.
    Resume,
    /// Open a snapshot of this kind.
    Open(SnapshotKind),
}

/// Decides [`Action`] for a seed at `lsn` of a copy `identity`, or says why it cannot run.
fn decide(position: &Position, lsn: Lsn, identity: &str, reseed: bool) -> Result<Action, String> {
    let snapshot = position.snapshot.as_ref();
    if let Some(s) = snapshot.filter(|s| s.lsn == lsn && s.seed.is_some()) {
        if s.complete {
            return Ok(Action::Done);
        }
        let copy = s.seed.as_ref().map_or("", |seed| seed.copy.as_str());
        if copy != identity {
            return Err(format!("the seed at {lsn} is open from the copy as it was ({copy}); it is now {identity}: restore that copy to finish the seed"));
        }
        return Ok(Action::Resume);
    }
    if let Some(s) = snapshot.filter(|s| !s.complete) {
        return Err(format!("a {} snapshot at {} (generation {}) is open: finish it first (`mssql-cdc snapshot`, or `mssql-cdc backfill` for a chunked one)", s.kind, s.lsn, s.generation));
    }
    if position.next_batch_id == 0 {
        return Ok(Action::Open(SnapshotKind::Bootstrap));
    }
    let since = snapshot.map_or(String::new(), |s| format!(", snapshot at {}", s.lsn));
    if !reseed {
        return Err(format!(
            "the stream has started (batch {}, position {}{since}): a seed is a new stream's first snapshot; --reseed publishes a copy newer than the stream as a new generation",
            position.next_batch_id - 1,
            position.lsn
        ));
    }
    if lsn <= position.lsn {
        return Err(format!("--reseed takes a copy newer than the stream: as_of is {lsn}, the stream is at {}; take a newer copy", position.lsn));
    }
    Ok(Action::Open(SnapshotKind::Resnapshot))
}

impl Stream {
    /// Publishes `copy` as this (stopped) stream's snapshot at `request.as_of` and returns
    /// where the stream then stands (`None` when cancelled first; a rerun resumes).
    pub async fn seed(self, request: &SeedRequest, copy: &dyn CopySource, cancel: CancellationToken) -> Result<Option<StreamOffset>, SourceError> {
        let mut conn = self.connector.connect().await?;
        let mut setup = self.setup(&mut conn).await?;
        let state = reader::server_state(&mut conn, &self.connector, &setup.instance.name).await?;
        let resume = setup.resume.take();
        let mut position = self.start_position(&setup, &state, resume).await?;
        position.open_next = None;
        let lsn = self.seed_lsn(&mut conn, &setup, &state, request.as_of).await?;
        let action = decide(&position, lsn, copy.identity(), request.reseed).map_err(|message| seed_error(&setup, message))?;
        tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, from = %copy.location(), copy = %copy.identity(), as_of = %request.as_of, lsn = %lsn, action = ?action, "seed");
        let keys = match (&action, &position.snapshot) {
            (Action::Done, _) => return Ok(Some(self.offset(&setup, &position))),
            (Action::Resume, Some(snapshot)) => self.open_snapshot_keys(&setup, snapshot)?,
            _ => self.snapshot_keys(&setup)?,
        };
        // The columns are checked before anything is published.
        let keys: Vec<String> = keys.into_iter().map(|k| k.name).collect();
        let columns = CopyColumns::new(&setup.schema, &copy.schema(), &keys, &setup.null_columns, request.allow_missing_columns)
            .map_err(|problems| seed_error(&setup, format!("the copy {} does not match the captured columns: {}", copy.location(), problems.join("; "))))?;
        if !columns.dropped.is_empty() || !columns.missing.is_empty() {
            tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, dropped = ?columns.dropped, null = ?columns.missing, "copy columns left out, and captured columns read as NULL");
        }
        match action {
            Action::Done | Action::Resume => {}
            Action::Open(kind) => {
                let lost = match kind {
                    SnapshotKind::Resnapshot if position.lsn <= state.max_lsn => self.lost_range(&mut conn, &setup, &position, &state).await?,
                    _ => None,
                };
                let source = SeedSource { from: copy.location().to_owned(), copy: copy.identity().to_owned(), as_of: request.as_of_text.clone() };
                let opening = Opening { kind, lost, seed: Some(SeedOpening { lsn, source, rows: copy.rows() }) };
                self.open_snapshot(&mut conn, &setup, &mut position, &state, &opening).await?;
            }
        }
        if !self.publish_copy(&mut conn, &setup, &mut position, &columns, copy, &cancel).await? {
            return Ok(None);
        }
        Ok(Some(self.offset(&setup, &position)))
    }

    /// The snapshot's LSN for `as_of`, checked against the server's CDC window.
    async fn seed_lsn(&self, conn: &mut TdsClient, setup: &Setup, state: &ServerState, as_of: AsOf) -> Result<Lsn, SourceError> {
        let past_cleanup = |lsn: Option<Lsn>| SourceError::SeedPastCleanup { capture_instance: setup.instance.name.clone(), as_of: as_of.to_string(), lsn, min_lsn: state.min_lsn };
        let lsn = match as_of {
            AsOf::Lsn(lsn) => lsn,
            AsOf::Time(at) => {
                let (zone, _) = zone_rule(setup, state);
                match reader::lsn_at_or_before(conn, &self.connector, zone.to_local(at)).await? {
                    Some(lsn) => lsn,
                    // Cleanup removed the mapping rows up to it, or CDC has no commit before it.
                    None => return Err(past_cleanup(None)),
                }
            }
        };
        if lsn > state.max_lsn {
            return Err(seed_error(setup, format!("as_of {as_of} ({lsn}) is past the server's newest LSN {}: the copy cannot hold commits the server has not made", state.max_lsn)));
        }
        if state.min_lsn == Lsn::ZERO || state.min_lsn > lsn.increment() {
            return Err(past_cleanup(Some(lsn)));
        }
        Ok(lsn)
    }

    /// Publishes the open seed's rows after those already published, then its completion;
    /// `false` when cancelled first.
    async fn publish_copy(&self, conn: &mut TdsClient, setup: &Setup, position: &mut Position, columns: &CopyColumns, copy: &dyn CopySource, cancel: &CancellationToken) -> Result<bool, SourceError> {
        let Some(mut snapshot) = position.snapshot.clone().filter(|s| !s.complete) else { return Ok(true) };
        let copy_error = |cause| SourceError::Copy { capture_instance: setup.instance.name.clone(), from: copy.location().to_owned(), cause };
        let mut rows = copy.read(columns.select(), columns.order()).await.map_err(copy_error)?;
        position.pace = Some(Pace::starting_at(snapshot.rows_done));
        let mut skip = snapshot.rows_done;
        let step_rows = self.options.snapshot.fetch_rows;
        let commit_ts = snapshot.commit_ts.unwrap_or(snapshot.opened_at);
        let at = ChangeCoordinates { start_lsn: snapshot.lsn, seqval: snapshot.lsn, operation: 0 };
        let mut builder = BatchBuilder::new(&setup.schema, &setup.instance.name, snapshot.generation, 0).of_snapshot(snapshot.lsn);
        let (mut count, mut bytes, mut step_started, mut rows_per_second) = (0u64, 0u64, Instant::now(), 0.0);
        let mut more = true;
        while more {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            let next = rows.next().await.transpose().map_err(copy_error)?;
            more = next.is_some();
            if let Some(batch) = next {
                let batch = if skip >= batch.num_rows() as u64 {
                    skip -= batch.num_rows() as u64;
                    continue;
                } else {
                    let from = std::mem::take(&mut skip) as usize;
                    batch.slice(from, batch.num_rows() - from)
                };
                let converted = columns.convert(&batch).map_err(|message| seed_error(setup, format!("the copy {}: {message}", copy.location())))?;
                let log = builder.from_columns(converted, at, commit_ts).map_err(|e| seed_error(setup, format!("the copy {}: {e}", copy.location())))?;
                if count == 0 {
                    self.publisher.begin();
                    step_started = Instant::now();
                }
                count += log.num_rows() as u64;
                bytes += self.publish_rows(setup, log).await?;
            }
            if count >= step_rows || (!more && count > 0) {
                let partitions = self.acknowledged_rows(count).await?;
                snapshot.rows_done += count;
                let state = reader::server_state(conn, &self.connector, &setup.instance.name).await?;
                self.commit_snapshot_rows(setup, position, &state, &snapshot, (count, std::mem::take(&mut bytes), partitions), step_started).await?;
                rows_per_second = self.report_read(setup, position, &snapshot, count, !more);
                count = 0;
            }
        }
        let state = reader::server_state(conn, &self.connector, &setup.instance.name).await?;
        self.complete_snapshot(conn, setup, position, &state, snapshot, rows_per_second).await?;
        Ok(true)
    }
}

fn seed_error(setup: &Setup, message: String) -> SourceError {
    SourceError::Seed { capture_instance: setup.instance.name.clone(), message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use mssql_cdc_core::log::control::SnapshotState;

    /// The snapshot a seed opened, for tests of [`decide`].
    fn seeded(lsn: Lsn, copy: &str, complete: bool) -> SnapshotState {
        SnapshotState {
            lsn,
            commit_ts: None,
            kind: SnapshotKind::Bootstrap,
            generation: 0,
            opened_at: Utc::now(),
            keys: vec!["id".into()],
            rows_expected: None,
            rows_done: 0,
            last_key: None,
            complete,
            lost: None,
            mode: mssql_cdc_core::log::control::SnapshotMode::Full,
            plan: None,
            chunks_done: 0,
            waves_done: 0,
            seed: Some(SeedSource { from: "copy".into(), copy: copy.into(), as_of: lsn.to_string() }),
        }
    }

    fn position(next_batch_id: u64, lsn: &str, snapshot: Option<SnapshotState>) -> Position {
        Position {
            lsn: Lsn::parse_hex(lsn).unwrap(),
            next_batch_id,
            generation: 0,
            last_published: Instant::now(),
            last_commit_ts: None,
            snapshot,
            open_next: None,
            snapshot_txn: false,
            pace: None,
            backfill: super::super::chunked::Backfill::default(),
            readers: Vec::new(),
            log_schema: None,
            pipeline: Default::default(),
            partitions: Default::default(),
            lookahead: Default::default(),
        }
    }

    /// A seed opens a new stream's bootstrap; the same seed again is done (complete) or
    /// resumed (open, same copy); anything else on a started stream needs --reseed and a newer
    /// copy.
    #[test]
    fn a_seed_runs_once_per_stream_unless_reseeded_with_a_newer_copy() {
        let a = Lsn::parse_hex("50").unwrap();
        assert_eq!(decide(&position(0, "0", None), a, "delta version 1", false), Ok(Action::Open(SnapshotKind::Bootstrap)));
        let done = position(3, "90", Some(seeded(a, "delta version 1", true)));
        assert_eq!(decide(&done, a, "delta version 1", false), Ok(Action::Done));
        let open = position(2, "50", Some(seeded(a, "delta version 1", false)));
        assert_eq!(decide(&open, a, "delta version 1", false), Ok(Action::Resume));
        assert!(decide(&open, a, "delta version 2", false).unwrap_err().contains("restore that copy"));
        let newer = Lsn::parse_hex("60").unwrap();
        assert!(decide(&open, newer, "delta version 2", true).unwrap_err().contains("is open"));
        assert!(decide(&done, newer, "delta version 2", false).unwrap_err().contains("--reseed"));
        assert!(decide(&done, newer, "delta version 2", true).unwrap_err().contains("newer than the stream"));
        let later = Lsn::parse_hex("A0").unwrap();
        assert_eq!(decide(&done, later, "delta version 2", true), Ok(Action::Open(SnapshotKind::Resnapshot)));
    }
}
