//! The control record: one per published batch, on the data topic's control topic (one
//! partition), written only after every data record of the batch is acknowledged.
//!
//! It is JSON in every format (so that `kcat` and any sink read it without a registry); its
//! schema is `schemas/control-record.schema.json`. Batches tile the LSN range: a batch covers
//! the commits in `(from_lsn, to_lsn]`, and each batch's `from_lsn` is the previous batch's
//! `to_lsn`. A heartbeat is a batch with no rows; it may still move `to_lsn` over commits that
//! changed other tables.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::format::{Envelope, RecordFormat};
use super::schema::{ColumnType, TableSchema};
use mssql_cdc_types::lsn::Lsn;

/// The version of this layout; readers refuse records of a newer major version.
pub const CONTROL_VERSION: u32 = 1;

/// The version of a control record whose data records use the Debezium envelope: a reader
/// from before the envelope refuses it (it would decode events as native rows), this build
/// reads it.
pub const CONTROL_VERSION_DEBEZIUM: u32 = 2;

/// A control topic record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ControlDecodeError {
    /// The bytes are not a control record.
    #[error("not a control record: {0}")]
    NotAControlRecord(#[source] serde_json::Error),
    /// A newer release wrote it.
    #[error("layout version {version} is newer than this release reads")]
    NewerLayout {
        /// The record's version.
        version: u32,
    },
    /// A partition range that no delivered batch can have (a negative offset, an end before
    /// its start, or more records than offsets).
    #[error("partition {partition}: offsets {first_offset}..={last_offset} cannot hold {records} records")]
    ImpossibleRange {
        /// The range's partition.
        partition: i32,
        /// Its first offset.
        first_offset: i64,
        /// Its last offset.
        last_offset: i64,
        /// The records it claims.
        records: u64,
    },
}

/// One batch, as the source published it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ControlRecord {
    /// Layout version ([`CONTROL_VERSION`]).
    pub version: u32,
    /// The batch id: 0 for the stream's first batch, then +1 per batch.
    pub batch_id: u64,
    /// The stream's generation (0 until a re-snapshot starts a new one).
    pub generation: u64,
    /// The capture instance read.
    pub capture_instance: String,
    /// The data topic the batch's records are in.
    pub data_topic: String,
    /// The position before the batch (exclusive): the previous batch's `to_lsn`.
    #[serde(with = "lsn_hex")]
    pub from_lsn: Lsn,
    /// The position after the batch (inclusive): the last commit it covers.
    #[serde(with = "lsn_hex")]
    pub to_lsn: Lsn,
    /// Commits covered (entries of `cdc.lsn_time_mapping` in the range, idle ones included).
    pub commits: u64,
    /// Change rows in the batch (the data records, with the native envelope).
    pub rows: u64,
    /// The smallest and largest `_start_lsn` of the batch's rows.
    #[serde(default, with = "lsn_hex_opt", skip_serializing_if = "Option::is_none")]
    pub min_row_lsn: Option<Lsn>,
    /// See `min_row_lsn`.
    #[serde(default, with = "lsn_hex_opt", skip_serializing_if = "Option::is_none")]
    pub max_row_lsn: Option<Lsn>,
    /// Commit time (UTC) of the first and last commit covered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_commit_ts: Option<DateTime<Utc>>,
    /// See `min_commit_ts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_commit_ts: Option<DateTime<Utc>>,
    /// Commit time (UTC) of the newest commit the stream has covered up to this batch,
    /// carried over batches that cover none (the time a data-loss range starts at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_commit_ts: Option<DateTime<Utc>>,
    /// Where the batch's records are: one entry per data partition that received any.
    pub partitions: Vec<PartitionRange>,
    /// Record encoding of the data records.
    pub format: RecordFormat,
    /// Their shape: absent for the native one, `debezium` for Debezium's change events.
    #[serde(default, skip_serializing_if = "Envelope::is_native")]
    pub envelope: Envelope,
    /// Fingerprint of the record layout ([`super::schema::TableSchema::fingerprint`]).
    pub schema_version: u64,
    /// The record layout itself (captured columns with their log types, key, whether
    /// `_command_id` is carried), so a sink decodes any batch without other state.
    pub schema: TableSchema,
    /// With Avro, the registry id of the value schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<u32>,
    /// Events of the batch.
    #[serde(default)]
    pub events: Vec<Event>,
    /// Warnings (a zone fallback, a capture instance renamed, ...).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Where the source stood when it published the batch.
    pub metrics: SourceMetrics,
    /// The stream's newest snapshot, carried on every batch from its opening on: while it is
    /// open, the batch's rows are its rows (operation 0, `_start_lsn` = its LSN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotState>,
}

impl ControlRecord {
    /// Decodes a control record's bytes (JSON in every format), refusing a layout newer
    /// than [`CONTROL_VERSION`]: what every reader of a control topic calls.
    pub fn decode(bytes: &[u8]) -> Result<Self, ControlDecodeError> {
        let record: Self = serde_json::from_slice(bytes).map_err(ControlDecodeError::NotAControlRecord)?;
        if record.version > CONTROL_VERSION_DEBEZIUM {
            return Err(ControlDecodeError::NewerLayout { version: record.version });
        }
        if let Some(range) = record.partitions.iter().find(|range| !range.is_possible()) {
            return Err(ControlDecodeError::ImpossibleRange { partition: range.partition, first_offset: range.first_offset, last_offset: range.last_offset, records: range.records });
        }
        Ok(record)
    }

    /// Whether the batch holds no rows and no events.
    pub fn is_heartbeat(&self) -> bool {
        self.rows == 0 && self.events.is_empty()
    }

    /// The open snapshot whose rows this batch carries, if any: a full snapshot's batches
    /// carry only its rows until it completes. A chunked snapshot's batches are either change
    /// batches or one chunk's ([`ControlRecord::chunk`]).
    pub fn open_snapshot(&self) -> Option<&SnapshotState> {
        self.snapshot.as_ref().filter(|snapshot| !snapshot.complete && snapshot.mode == SnapshotMode::Full)
    }

    /// The open snapshot of the stream, whatever its mode.
    pub fn open_snapshot_any(&self) -> Option<&SnapshotState> {
        self.snapshot.as_ref().filter(|snapshot| !snapshot.complete)
    }

    /// The chunk this batch carries, for a batch of a chunked snapshot's chunk.
    pub fn chunk(&self) -> Option<&ChunkRead> {
        self.events.iter().find_map(|event| match event {
            Event::SnapshotChunk(chunk) => Some(chunk),
            _ => None,
        })
    }

    /// The range every row's `_start_lsn` lies in, `(low, high]`: the batch's LSN range, for a
    /// batch of an open full snapshot exactly the snapshot's LSN, for a chunk's batch exactly
    /// its wave's stamp.
    pub fn row_lsn_range(&self) -> (Lsn, Lsn) {
        if let Some(chunk) = self.chunk() {
            return (chunk.stamp.decrement(), chunk.stamp);
        }
        match self.open_snapshot() {
            Some(snapshot) => (snapshot.lsn.decrement(), snapshot.lsn),
            None => (self.from_lsn, self.to_lsn),
        }
    }
}

/// Why a snapshot was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotKind {
    /// The stream's first: the table's rows before its changes (`bootstrap = true`, or the
    /// `snapshot` command).
    Bootstrap,
    /// After CDC cleanup purged changes not yet read (`on_data_loss = "resnapshot"`), or asked
    /// for (`snapshot --resnapshot`): starts a new generation.
    Resnapshot,
}

impl std::fmt::Display for SnapshotKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Bootstrap => "bootstrap",
            Self::Resnapshot => "resnapshot",
        })
    }
}

/// How a snapshot reads the table (`snapshot` on the source).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// Read in key order before the stream goes on: the position moves to S at completion.
    #[default]
    Full,
    /// The stream starts at S at once; the table is read beside it in planned chunks, in
    /// waves, each wave stamped with the server's maximum LSN before it is read.
    Chunked,
}

impl std::fmt::Display for SnapshotMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Full => "full",
            Self::Chunked => "chunked",
        })
    }
}

/// One chunk of a chunked snapshot's plan: the rows whose key comes after `after` and not after
/// `through`, in the order the keys are read in (NULL first), key values as the data records
/// carry them, one JSON value per key column. Consecutive chunks share a bound (one's
/// `through` is the next one's `after`), so the plan tiles the key space and one key value is
/// never split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkBounds {
    /// Exclusive lower bound; `None` for the first chunk (from the first key, NULL included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<serde_json::Value>>,
    /// Inclusive upper bound; `None` for the last chunk (to the last key, rows inserted above
    /// the planned extent included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<Vec<serde_json::Value>>,
}

/// A chunk as read: published as one batch whose rows are stamped with `stamp`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkRead {
    /// S, the snapshot the chunk belongs to.
    #[serde(with = "lsn_hex")]
    pub snapshot: Lsn,
    /// The chunk's place in the plan, from 0.
    pub chunk: u64,
    /// The wave it was read in, from 0.
    pub wave: u64,
    /// The wave's stamp: the server's maximum LSN read before the wave (at or after S). Every
    /// row's `_start_lsn` and `_seqval`: a change after it wins over the row, one at or before
    /// it is already in it.
    #[serde(with = "lsn_hex")]
    pub stamp: Lsn,
    /// Rows read.
    pub rows: u64,
    /// Its bounds, as planned.
    #[serde(flatten)]
    pub bounds: ChunkBounds,
}

/// A stream's newest snapshot and how far it got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotState {
    /// S: `sys.fn_cdc_get_max_lsn()` read before the table. Every row is stamped with it; the
    /// stream goes on with the changes after it.
    #[serde(with = "lsn_hex")]
    pub lsn: Lsn,
    /// Commit time (UTC) of S.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_ts: Option<DateTime<Utc>>,
    /// Why it was taken.
    pub kind: SnapshotKind,
    /// The generation it starts (a re-snapshot's is the previous one + 1).
    pub generation: u64,
    /// When it was opened.
    pub opened_at: DateTime<Utc>,
    /// The columns the table is read in order of (the key, or `snapshot_keys`).
    pub keys: Vec<String>,
    /// The table's rows when it was opened (an estimate, for progress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_expected: Option<u64>,
    /// Rows published so far (this batch's included).
    pub rows_done: u64,
    /// The key values of the last row published, in `keys` order (JSON as the data records
    /// carry them): the next read starts after it. `None` before the first row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_key: Option<Vec<serde_json::Value>>,
    /// Whether its completion (`bootstrap` / `resnapshot` event) is published.
    pub complete: bool,
    /// The changes lost, for a re-snapshot after data loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<LostRange>,
    /// How it reads the table (`full` when absent: records of earlier releases).
    #[serde(default, skip_serializing_if = "is_full")]
    pub mode: SnapshotMode,
    /// A chunked snapshot's plan: where its `snapshot_plan` record is on the control topic
    /// (its offset) and how many chunks it has. `None` until planned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanRef>,
    /// A chunked snapshot's chunks published, in plan order (chunk `chunks_done` is next).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub chunks_done: u64,
    /// A chunked snapshot's waves read.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waves_done: u64,
    /// A seeded snapshot's copy (`mssql-cdc seed`): its rows came from it, not from the table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<SeedSource>,
}

/// The copy a seeded snapshot was published from (`mssql-cdc seed`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeedSource {
    /// Where the copy is: a Delta table or a directory of Parquet files.
    pub from: String,
    /// What was read of it: `delta version <n>`, or `parquet <files> files, <bytes> bytes,
    /// digest <hex>`. A resumed seed reads the same, or stops.
    pub copy: String,
    /// `--as-of` as given (a UTC time or an LSN); the snapshot's LSN is what it maps to.
    pub as_of: String,
}

/// Where a chunked snapshot's plan is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanRef {
    /// Offset of the `snapshot_plan` batch's control record on the control topic.
    pub offset: i64,
    /// Chunks in the plan.
    pub chunks: u64,
}

fn is_full(mode: &SnapshotMode) -> bool {
    *mode == SnapshotMode::Full
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Changes CDC cleanup purged before they were read, as a re-snapshot records them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LostRange {
    /// The first LSN not read.
    #[serde(with = "lsn_hex")]
    pub from_lsn: Lsn,
    /// The last LSN purged (the capture instance's low water mark, decremented).
    #[serde(with = "lsn_hex")]
    pub to_lsn: Lsn,
    /// Commit time (UTC) of the last change read before the loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_ts: Option<DateTime<Utc>>,
    /// Commit time (UTC) of the first change cleanup kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_ts: Option<DateTime<Utc>>,
}

/// The offsets of a batch's records in one data partition.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionRange {
    /// The partition.
    pub partition: i32,
    /// Offset of the batch's first record there.
    pub first_offset: i64,
    /// Offset of its last record there (inclusive).
    pub last_offset: i64,
    /// Records of the batch there. Equal to `last_offset - first_offset + 1` when the source is
    /// the topic's only writer.
    pub records: u64,
}

impl PartitionRange {
    /// Whether a delivered batch can have this range: no records, or offsets from 0 on with
    /// at least as many offsets as records.
    pub fn is_possible(&self) -> bool {
        self.records == 0 || (self.first_offset >= 0 && self.first_offset <= self.last_offset && self.records <= (self.last_offset - self.first_offset + 1) as u64)
    }
}

/// Something that happened in a batch, besides its rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// Changes CDC cleanup purged before they were read, skipped because
    /// `fail_on_data_loss = false`.
    DataSkipped {
        /// First LSN skipped.
        #[serde(with = "lsn_hex")]
        from_lsn: Lsn,
        /// Last LSN skipped.
        #[serde(with = "lsn_hex")]
        to_lsn: Lsn,
        /// Whether changes certainly existed there (`false`: cleanup ran during the read, so the
        /// batch may lack some).
        certain: bool,
    },
    /// A snapshot opened at `lsn`: the batches until its completion carry its rows, and no
    /// verdict moves meanwhile.
    SnapshotOpen {
        /// S.
        #[serde(with = "lsn_hex")]
        lsn: Lsn,
        /// Why.
        kind: SnapshotKind,
        /// The generation it starts.
        generation: u64,
        /// The table's rows (an estimate).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rows_expected: Option<u64>,
        /// The changes lost, for a re-snapshot after data loss.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lost: Option<LostRange>,
        /// How it reads the table.
        #[serde(default, skip_serializing_if = "is_full")]
        mode: SnapshotMode,
        /// A seeded snapshot's copy: its rows come from it, not from the table.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed: Option<SeedSource>,
    },
    /// A chunked snapshot's plan, fixed until it completes: chunks tiling the key space in key
    /// order, published before any chunk is read.
    SnapshotPlan {
        /// S.
        #[serde(with = "lsn_hex")]
        lsn: Lsn,
        /// The columns the chunks are cut on.
        keys: Vec<String>,
        /// How the bounds were found: `range` (an integer key's values) or `keyset` (keys read
        /// in order).
        method: String,
        /// Rows per chunk asked for (`backfill.chunk_rows`).
        chunk_rows: u64,
        /// The chunks, in key order.
        chunks: Vec<ChunkBounds>,
    },
    /// One chunk of a chunked snapshot, read: the batch's rows are the chunk's.
    SnapshotChunk(ChunkRead),
    /// The stream's first snapshot is complete: downstream rebuilds from it.
    Bootstrap {
        /// S.
        #[serde(with = "lsn_hex")]
        lsn: Lsn,
        /// Rows it published.
        rows: u64,
    },
    /// DDL on the source table, committed in the batch (its last commit): what it did to the
    /// log's schema.
    SchemaChange(SchemaChange),
    /// The stream moved to a newer capture instance of its table at `start_lsn`: the batch
    /// reads the new instance from there on.
    CaptureInstanceSwitched {
        /// The instance read before.
        from: String,
        /// The instance read from now on.
        to: String,
        /// The new instance's low water mark S when the stream switched: it holds every change
        /// after S; the old instance was read up to S.
        #[serde(with = "lsn_hex")]
        start_lsn: Lsn,
        /// Columns the new instance captures and the old did not (NULL before the switch).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        gained: Vec<String>,
        /// Columns the old instance captured and the new does not (NULL from the switch on).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        lost: Vec<String>,
    },
    /// Columns the stream leaves out or reads as NULL, recorded on the first record it
    /// publishes after building its schema (at start and at a capture-instance switch).
    ColumnWarnings(ColumnWarnings),
    /// A re-snapshot is complete: downstream rebuilds from it; `lost` is the gap it repairs.
    Resnapshot {
        /// S.
        #[serde(with = "lsn_hex")]
        lsn: Lsn,
        /// Rows it published.
        rows: u64,
        /// The changes lost, when data loss caused it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lost: Option<LostRange>,
    },
}

impl Event {
    /// The event's name, as the facts table's `event` column holds it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::DataSkipped { .. } => "data_skipped",
            Self::SnapshotOpen { .. } => "snapshot_open",
            Self::SnapshotPlan { .. } => "snapshot_plan",
            Self::SnapshotChunk(_) => "snapshot_chunk",
            Self::Bootstrap { .. } => "bootstrap",
            Self::Resnapshot { .. } => "resnapshot",
            Self::SchemaChange(_) => "schema_change",
            Self::CaptureInstanceSwitched { .. } => "capture_instance_switched",
            Self::ColumnWarnings(_) => "column_warnings",
        }
    }
}

/// A `schema_change` event: one statement of `cdc.ddl_history` and what the source made of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SchemaChange {
    /// The DDL's commit LSN: the batch's last position.
    #[serde(with = "lsn_hex")]
    pub ddl_lsn: Lsn,
    /// When it was committed, server-local (`ddl_time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddl_time: Option<chrono::NaiveDateTime>,
    /// The statement (`ddl_command`).
    pub command: String,
    /// Whether SQL Server changed a captured column's type (`required_column_update`).
    pub required_column_update: bool,
    /// Captured columns whose log type widened with it; the batch's schema has the new types.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub widened: Vec<TypeChange>,
    /// Columns of the table the capture instance does not capture (added since it was
    /// enabled): absent from the log until a new capture instance captures them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_captured: Vec<String>,
    /// Captured columns the table no longer has: NULL on the log from here on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// The schema version of the batch (and of the batches after it).
    pub schema_version: u64,
}

/// A `column_warnings` event: what of the table's captured columns the log does not carry
/// as values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnWarnings {
    /// The capture instance the schema was built for.
    pub capture_instance: String,
    /// Computed columns left out of the log (`columns` omitted): CDC stores NULL for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub computed_left_out: Vec<String>,
    /// Computed columns `columns` lists: NULL in every row, snapshot rows too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub computed_null: Vec<String>,
    /// Columns `columns` lists that only another capture instance of the table captures: NULL
    /// until the stream reads an instance that captures them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_instance: Vec<String>,
}

/// A captured column's log type before and after a DDL.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeChange {
    /// The column.
    pub column: String,
    /// Its log type before.
    pub from: ColumnType,
    /// Its log type after.
    pub to: ColumnType,
}

/// The source's view of where it stands, at publication time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceMetrics {
    /// `sys.fn_cdc_get_max_lsn()` when the batch was planned.
    #[serde(default, with = "lsn_hex_opt", skip_serializing_if = "Option::is_none")]
    pub max_lsn: Option<Lsn>,
    /// Seconds between the server's clock and the newest commit the capture job harvested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capture_lag_seconds: Option<f64>,
    /// Hours until cleanup may purge the oldest change not yet published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_headroom_hours: Option<f64>,
    /// Time spent reading from SQL Server, milliseconds.
    pub read_ms: u64,
    /// Bytes of data records published (keys and values).
    pub bytes: u64,
    /// When the control record was written.
    pub published_at: Option<DateTime<Utc>>,
}

mod lsn_hex {
    use serde::{Deserialize, Deserializer, Serializer};

    use mssql_cdc_types::lsn::Lsn;

    pub fn serialize<S: Serializer>(lsn: &Lsn, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(lsn)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Lsn, D::Error> {
        let text = String::deserialize(deserializer)?;
        Lsn::parse_hex(&text).ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not an LSN (0x and 20 hex digits)")))
    }
}

mod lsn_hex_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    use mssql_cdc_types::lsn::Lsn;

    pub fn serialize<S: Serializer>(lsn: &Option<Lsn>, serializer: S) -> Result<S::Ok, S::Error> {
        match lsn {
            Some(lsn) => serializer.collect_str(lsn),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Lsn>, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            None => Ok(None),
            Some(text) => Lsn::parse_hex(&text).map(Some).ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not an LSN"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> ControlRecord {
        ControlRecord {
            version: CONTROL_VERSION,
            batch_id: 3,
            generation: 0,
            capture_instance: "dbo_orders".into(),
            data_topic: "cdc.sales.dbo.orders".into(),
            from_lsn: Lsn::parse_hex("2A0000000100").unwrap(),
            to_lsn: Lsn::parse_hex("2A0000000200").unwrap(),
            commits: 2,
            rows: 5,
            min_row_lsn: Lsn::parse_hex("2A0000000150"),
            max_row_lsn: Lsn::parse_hex("2A0000000200"),
            min_commit_ts: Some(DateTime::from_timestamp(1_700_000_000, 0).unwrap()),
            max_commit_ts: Some(DateTime::from_timestamp(1_700_000_001, 0).unwrap()),
            last_commit_ts: Some(DateTime::from_timestamp(1_700_000_001, 0).unwrap()),
            partitions: vec![PartitionRange { partition: 1, first_offset: 10, last_offset: 14, records: 5 }],
            format: RecordFormat::Json,
            schema_version: 42,
            schema: TableSchema {
                columns: vec![crate::log::schema::Column { name: "order_id".into(), ty: crate::log::ColumnType::Decimal { precision: 18, scale: 2 } }],
                key: vec!["order_id".into()],
                include_command_id: true,
            },
            envelope: Envelope::Native,
            schema_id: None,
            events: vec![Event::DataSkipped { from_lsn: Lsn::parse_hex("1").unwrap(), to_lsn: Lsn::parse_hex("2").unwrap(), certain: true }],
            warnings: vec![],
            metrics: SourceMetrics { max_lsn: Lsn::parse_hex("2A0000000300"), capture_lag_seconds: Some(1.5), ..Default::default() },
            snapshot: Some(SnapshotState {
                lsn: Lsn::parse_hex("2A0000000100").unwrap(),
                commit_ts: Some(DateTime::from_timestamp(1_699_999_000, 0).unwrap()),
                kind: SnapshotKind::Resnapshot,
                generation: 1,
                opened_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
                keys: vec!["order_id".into()],
                rows_expected: Some(10),
                rows_done: 5,
                last_key: Some(vec![serde_json::json!("12.50")]),
                complete: false,
                lost: Some(LostRange { from_lsn: Lsn::parse_hex("2A00000000F0").unwrap(), to_lsn: Lsn::parse_hex("2A00000000FF").unwrap(), from_ts: None, to_ts: None }),
                mode: SnapshotMode::Full,
                plan: None,
                chunks_done: 0,
                waves_done: 0,
                seed: Some(SeedSource { from: "s3://lake/orders-copy".into(), copy: "delta version 7".into(), as_of: "2026-12-01T08:00:00Z".into() }),
            }),
        }
    }

    /// A batch of an open snapshot carries rows stamped with S only; once complete, the batch
    /// range applies again.
    #[test]
    fn an_open_snapshot_narrows_the_row_range_to_its_lsn() {
        let mut record = sample();
        let s = Lsn::parse_hex("2A0000000100").unwrap();
        assert_eq!(record.row_lsn_range(), (s.decrement(), s));
        record.snapshot.as_mut().unwrap().complete = true;
        assert_eq!(record.row_lsn_range(), (record.from_lsn, record.to_lsn));
    }

    fn chunk() -> ChunkRead {
        ChunkRead {
            snapshot: Lsn::parse_hex("2A0000000100").unwrap(),
            chunk: 2,
            wave: 1,
            stamp: Lsn::parse_hex("2A0000000180").unwrap(),
            rows: 5,
            bounds: ChunkBounds { after: Some(vec![serde_json::json!(10)]), through: None },
        }
    }

    /// A chunked snapshot's change batches carry changes in their range; a chunk's batch only
    /// rows stamped with its wave's LSN.
    #[test]
    fn a_chunk_narrows_the_row_range_to_its_stamp_and_change_batches_keep_theirs() {
        let mut record = sample();
        record.snapshot.as_mut().unwrap().mode = SnapshotMode::Chunked;
        assert!(record.open_snapshot().is_none() && record.open_snapshot_any().is_some());
        assert_eq!(record.row_lsn_range(), (record.from_lsn, record.to_lsn));
        record.events = vec![Event::SnapshotChunk(chunk())];
        let stamp = Lsn::parse_hex("2A0000000180").unwrap();
        assert_eq!(record.row_lsn_range(), (stamp.decrement(), stamp));
        let text = serde_json::to_string(&record).unwrap();
        assert!(text.contains(r#""event":"snapshot_chunk","snapshot":"0x000000002A0000000100","chunk":2"#), "{text}");
        assert!(text.contains(r#""after":[10]"#) && !text.contains(r#""through""#), "{text}");
        assert_eq!(serde_json::from_str::<ControlRecord>(&text).unwrap(), record);
    }

    /// A control record names only offsets a delivery can have: an unknown offset (-1) in a
    /// range would make every reader seek to an invalid position, retrying forever.
    #[test]
    fn a_range_no_delivery_can_have_is_refused_by_name() {
        let decode = |range: PartitionRange| {
            let mut record = sample();
            record.partitions = vec![range];
            ControlRecord::decode(&serde_json::to_vec(&record).unwrap())
        };
        assert!(decode(PartitionRange { partition: 1, first_offset: 10, last_offset: 14, records: 5 }).is_ok());
        assert!(decode(PartitionRange { partition: 1, first_offset: -1, last_offset: -1, records: 0 }).is_ok());
        for (first_offset, last_offset, records) in [(-1, 14, 5), (-1, -1, 1), (14, 10, 1), (10, 11, 3)] {
            let error = decode(PartitionRange { partition: 1, first_offset, last_offset, records }).unwrap_err();
            assert!(matches!(error, ControlDecodeError::ImpossibleRange { .. }), "{error}");
            assert!(error.to_string().contains(&format!("partition 1: offsets {first_offset}..={last_offset}")), "{error}");
        }
    }

    #[test]
    fn control_records_round_trip_with_hex_lsns() {
        let record = sample();
        let text = serde_json::to_string(&record).unwrap();
        assert!(text.contains(r#""from_lsn":"0x000000002A0000000100""#), "{text}");
        assert!(text.contains(r#""event":"data_skipped""#), "{text}");
        assert_eq!(serde_json::from_str::<ControlRecord>(&text).unwrap(), record);
    }

    /// The published schema file declares every field we write, so third-party readers that
    /// validate against it accept our records.
    #[test]
    fn the_schema_file_declares_every_written_field() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../../../schemas/control-record.schema.json")).unwrap();
        let value = serde_json::to_value(sample()).unwrap();
        let declared = &schema["properties"];
        for key in value.as_object().unwrap().keys() {
            assert!(declared.get(key).is_some(), "field `{key}` is missing from schemas/control-record.schema.json");
        }
        for key in schema["required"].as_array().unwrap() {
            assert!(value.get(key.as_str().unwrap()).is_some(), "required `{key}` not written");
        }
        for nested in ["metrics", "snapshot"] {
            let properties = &declared[nested]["properties"];
            for key in value[nested].as_object().unwrap().keys() {
                assert!(properties.get(key).is_some(), "{nested} field `{key}` is missing from the schema");
            }
        }
        let events = [
            Event::SnapshotOpen { lsn: Lsn::ZERO, kind: SnapshotKind::Bootstrap, generation: 0, rows_expected: Some(1), lost: None, mode: SnapshotMode::Chunked, seed: Some(SeedSource { from: "copy".into(), copy: "delta version 3".into(), as_of: "0x00".into() }) },
            Event::SnapshotPlan { lsn: Lsn::ZERO, keys: vec!["id".into()], method: "range".into(), chunk_rows: 10, chunks: vec![ChunkBounds { after: None, through: Some(vec![serde_json::json!(10)]) }] },
            Event::SnapshotChunk(chunk()),
            Event::Resnapshot { lsn: Lsn::ZERO, rows: 1, lost: Some(LostRange { from_lsn: Lsn::ZERO, to_lsn: Lsn::ZERO, from_ts: None, to_ts: None }) },
            Event::Bootstrap { lsn: Lsn::ZERO, rows: 1 },
            Event::SchemaChange(SchemaChange {
                ddl_lsn: Lsn::ZERO,
                ddl_time: chrono::NaiveDate::from_ymd_opt(2026, 1, 2).and_then(|d| d.and_hms_opt(3, 4, 5)),
                command: "ALTER TABLE t ALTER COLUMN q bigint".into(),
                required_column_update: true,
                widened: vec![TypeChange { column: "q".into(), from: ColumnType::Int32, to: ColumnType::Int64 }],
                not_captured: vec!["region".into()],
                dropped: vec!["note".into()],
                schema_version: 7,
            }),
            Event::CaptureInstanceSwitched { from: "dbo_t".into(), to: "dbo_t_v2".into(), start_lsn: Lsn::ZERO, gained: vec!["region".into()], lost: vec!["note".into()] },
        ];
        let event_schema = &declared["events"]["items"]["properties"];
        for event in events {
            let value = serde_json::to_value(&event).unwrap();
            assert!(event_schema["event"]["enum"].as_array().unwrap().contains(&serde_json::json!(event.name())), "{}", event.name());
            for key in value.as_object().unwrap().keys() {
                assert!(event_schema.get(key).is_some(), "event field `{key}` is missing from the schema");
            }
        }
    }
}
