//! A stream's offset as operators read it: what `mssql-cdc snapshot` takes and prints, and what
//! `mssql-cdc status` reports (the control topic's last record next to the server's LSNs).
//!
//! A snapshot taken by the command runs the stage's own read loop ([`Stream::take_snapshot`])
//! with one goal: open the requested snapshot (or resume the one already open), read it to its
//! completion event, and stop before the first change batch. The stream must be stopped while
//! it runs: two writers of one control topic would publish the same batch ids.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::snapshot::Opening;
use super::{sanitize_topic, Position, Setup, Stream};
use crate::error::SourceError;
use crate::reader::{self, ServerState};
use mssql_cdc_core::log::control::{ControlRecord, SnapshotKind, SnapshotState};
use mssql_cdc_core::log::topic::control_topic_for;

/// What `mssql-cdc snapshot` asks of a stopped stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotRequest {
    /// The stream's first snapshot, if it has none yet (a stream that has one is left as it
    /// is).
    Bootstrap,
    /// A new snapshot in the next generation, whatever the stream holds (a new stream takes
    /// its bootstrap instead).
    Resnapshot,
}

/// Where a stream stands after a snapshot taken by the command: its last control record's
/// batch id, position, generation and newest snapshot.
#[derive(Clone, Debug, Serialize)]
pub struct StreamOffset {
    /// The connector's name.
    pub connector: String,
    /// The capture instance.
    pub capture_instance: String,
    /// The data topic.
    pub data_topic: String,
    /// The control topic.
    pub control_topic: String,
    /// The last batch published (`None`: nothing published yet).
    pub batch_id: Option<u64>,
    /// The position: the last LSN the log covers (hex).
    pub position: String,
    /// The stream's generation.
    pub generation: u64,
    /// The newest snapshot, open or complete.
    pub snapshot: Option<SnapshotState>,
    /// A chunked snapshot's backfill, after `mssql-cdc backfill`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill: Option<BackfillStatus>,
}

/// Where a chunked snapshot's backfill stands (`mssql-cdc backfill` prints it).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BackfillStatus {
    /// S, the snapshot's LSN; `None` when the stream has no chunked snapshot.
    pub snapshot: Option<String>,
    /// Chunks published.
    pub chunks_done: u64,
    /// Chunks in the plan (`None` before it is planned).
    pub chunks_total: Option<u64>,
    /// Whether every chunk and the completion are published.
    pub done: bool,
    /// `done`, `running` (a budget ended the run: call again), `waiting_headroom`,
    /// `waiting_metrics`, or `no_snapshot`.
    pub state: String,
    /// Why, in words.
    pub reason: String,
}

impl BackfillStatus {
    /// The status of `snapshot` (the stream's newest) after a run that stopped in `state`.
    pub fn of(snapshot: Option<&SnapshotState>, state: &str, reason: &str) -> Self {
        let chunked = snapshot.filter(|s| s.mode == mssql_cdc_core::log::control::SnapshotMode::Chunked);
        match chunked {
            None => Self { snapshot: None, chunks_done: 0, chunks_total: None, done: false, state: "no_snapshot".into(), reason: "the stream has no chunked snapshot (snapshot = \"chunked\" with bootstrap, or a re-snapshot)".into() },
            Some(s) if s.complete => Self { snapshot: Some(s.lsn.to_string()), chunks_done: s.chunks_done, chunks_total: s.plan.map(|p| p.chunks), done: true, state: "done".into(), reason: "every chunk and the completion are published".into() },
            Some(s) => Self {
                snapshot: Some(s.lsn.to_string()),
                chunks_done: s.chunks_done,
                chunks_total: s.plan.map(|p| p.chunks),
                done: false,
                state: if state == "budget_spent" || state.is_empty() { "running".into() } else { state.to_owned() },
                reason: reason.to_owned(),
            },
        }
    }
}

/// `mssql-cdc status` for one capture instance: the stream's offset from the control topic
/// and the server's CDC window.
#[derive(Clone, Debug, Serialize)]
pub struct StreamStatus {
    /// The connector's name.
    pub connector: String,
    /// The capture instance.
    pub capture_instance: String,
    /// The data topic.
    pub data_topic: String,
    /// The control topic.
    pub control_topic: String,
    /// `sys.fn_cdc_get_min_lsn` of the instance (hex): changes before it are purged.
    pub server_min_lsn: String,
    /// `sys.fn_cdc_get_max_lsn()` (hex).
    pub server_max_lsn: String,
    /// The last control record, if the stream has published one.
    pub stream: Option<PublishedState>,
}

/// What the control topic's last record says.
#[derive(Clone, Debug, Serialize)]
pub struct PublishedState {
    /// Its batch id.
    pub batch_id: u64,
    /// The position (hex).
    pub position: String,
    /// The generation.
    pub generation: u64,
    /// When it was published.
    pub published_at: Option<DateTime<Utc>>,
    /// The last commit time the log covers.
    pub last_commit_ts: Option<DateTime<Utc>>,
    /// Whether the position lies before the server's minimum LSN: the changes after it are
    /// purged (data loss at the next batch).
    pub behind_retention: bool,
    /// The newest snapshot, open or complete.
    pub snapshot: Option<SnapshotState>,
}

impl PublishedState {
    fn of(record: &ControlRecord, state: &ServerState) -> Self {
        Self {
            batch_id: record.batch_id,
            position: record.to_lsn.to_string(),
            generation: record.generation,
            published_at: record.metrics.published_at,
            last_commit_ts: record.max_commit_ts.or(record.last_commit_ts),
            behind_retention: state.min_lsn != mssql_cdc_types::lsn::Lsn::ZERO && record.to_lsn.increment() < state.min_lsn,
            snapshot: record.snapshot.clone(),
        }
    }
}

/// The data topic and control topic of a capture instance's table.
pub(super) fn topics(prefix: &str, database: &str, schema: &str, table: &str) -> (String, String) {
    let data = sanitize_topic(&format!("{prefix}.{database}.{schema}.{table}"));
    let control = control_topic_for(&data);
    (data, control)
}

impl Stream {
    /// Takes the requested snapshot of this (stopped) stream, or finishes the one it has open,
    /// then stops before the first change batch; returns where the stream then stands
    /// (`None` when cancelled first). Transient faults are retried as by [`Stream::run`].
    pub async fn take_snapshot(mut self, request: SnapshotRequest, cancel: CancellationToken) -> Result<Option<StreamOffset>, SourceError> {
        self.request = Some(request);
        self.drive(&cancel).await
    }

    /// The stream's offset and the server's CDC window, read without publishing anything.
    pub async fn status(&self) -> Result<StreamStatus, SourceError> {
        let mut conn = self.connector.connect().await?;
        let instance = reader::resolve_instance(&mut conn, &self.connector, &self.wanted).await?;
        let database = reader::database_name(&mut conn, &self.connector).await?;
        let (data_topic, control_topic) = topics(&self.options.topic_prefix, &database, &instance.source_schema, &instance.source_table);
        let state = reader::server_state(&mut conn, &self.connector, &instance.name).await?;
        let last = if self.publisher.topic_exists(&control_topic).await? { self.publisher.last_control(&control_topic).await? } else { None };
        Ok(StreamStatus {
            connector: self.connector_name.clone(),
            capture_instance: instance.name.clone(),
            data_topic,
            control_topic,
            server_min_lsn: state.min_lsn.to_string(),
            server_max_lsn: state.max_lsn.to_string(),
            stream: last.as_ref().map(|record| PublishedState::of(record, &state)),
        })
    }

    /// Sets up what [`SnapshotRequest`] asks for on a stream just positioned from its control
    /// topic: nothing when a snapshot is open (it is finished first, as it was opened) or when
    /// a bootstrap is asked of a stream that has one.
    pub(super) async fn request_snapshot(&self, conn: &mut crate::connection::TdsClient, setup: &Setup, position: &mut Position, state: &ServerState, request: SnapshotRequest) -> Result<(), SourceError> {
        if position.open_next.is_some() || position.snapshot.as_ref().is_some_and(|s| !s.complete) {
            return Ok(());
        }
        let opening = match request {
            SnapshotRequest::Resnapshot if position.next_batch_id > 0 => {
                let lost = if position.lsn <= state.max_lsn { self.lost_range(conn, setup, position, state).await? } else { None };
                Opening { kind: SnapshotKind::Resnapshot, lost, seed: None }
            }
            _ if position.snapshot.is_some() => return Ok(()),
            _ => Opening { kind: SnapshotKind::Bootstrap, lost: None, seed: None },
        };
        tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, kind = %opening.kind, lost = ?opening.lost, "snapshot requested");
        position.open_next = Some(opening);
        Ok(())
    }

    /// The offset of a positioned stream.
    pub(super) fn offset(&self, setup: &Setup, position: &Position) -> StreamOffset {
        StreamOffset {
            connector: self.connector_name.clone(),
            capture_instance: setup.instance.name.clone(),
            data_topic: setup.data_topic.clone(),
            control_topic: setup.control_topic.clone(),
            batch_id: position.next_batch_id.checked_sub(1),
            position: position.lsn.to_string(),
            generation: position.generation,
            snapshot: position.snapshot.clone(),
            backfill: self.request.map(|_| BackfillStatus::of(position.snapshot.as_ref(), position.backfill.state(), position.backfill.reason())),
        }
    }
}
