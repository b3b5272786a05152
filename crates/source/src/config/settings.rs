//! [`MssqlSourceSettings`]: what validation makes of an `mssql-source` file, and the typed
//! values it holds.

use std::fmt;
use std::time::Duration;

use mssql_cdc_core::kafka::config::Properties;
use mssql_cdc_core::log::debezium::event::EventSettings;
use mssql_cdc_core::log::format::Encoding;
use mssql_cdc_core::log::control::SnapshotMode;
use mssql_cdc_core::log::ColumnType;
use mssql_cdc_core::stage::retry::RetryConfig;
use mssql_cdc_core::tables::override_for;
use mssql_cdc_types::lsn::Lsn;
use mssql_cdc_types::timezone::ServerZone;

use super::{Login, OnDataLoss, SchemaChangePolicy, SnapshotIsolation, TableSelection};
use crate::backfill::config::BackfillSettings;

/// How snapshots are read.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotSettings {
    /// Snapshot before streaming, once per stream.
    pub bootstrap: bool,
    /// Snapshot after a move to a newer capture instance.
    pub on_switch: bool,
    /// The isolation level of the reads.
    pub isolation: SnapshotIsolation,
    /// `SET LOCK_TIMEOUT` for the reads.
    pub lock_timeout: Duration,
    /// Columns to read in order of, where the table has no unique index.
    pub keys: Vec<String>,
    /// Rows per read and per batch (positive).
    pub fetch_rows: u64,
    /// At most one re-snapshot per this long.
    pub resnapshot_interval: Duration,
    /// How snapshots read the table.
    pub mode: SnapshotMode,
    /// How a chunked snapshot is planned, read and paced.
    pub backfill: BackfillSettings,
}

/// The validated settings of an `mssql-source` connector: what the stage is built from.
#[derive(Clone, Debug)]
pub struct MssqlSourceSettings {
    /// How to reach and log in to SQL Server.
    pub login: Login,
    /// Capture instances to read, each once (a table's stream reads one at a time).
    pub capture_instances: Vec<String>,
    /// Which tables to read, and their overrides.
    pub tables: TableSelection,
    /// Prefix of the data topics.
    pub topic_prefix: String,
    /// Encoding of data records, with the registry for Avro.
    pub encoding: Encoding,
    /// With the Debezium envelope: how its events are written; `None`: native records.
    pub debezium: Option<EventSettings>,
    /// At most this many commits per batch (positive); `None`: unlimited.
    pub max_commits_per_batch: Option<u64>,
    /// Where a new stream starts.
    pub starting_lsn: StartingLsn,
    /// What to do about purged, unread changes.
    pub on_data_loss: OnDataLoss,
    /// What DDL on the source table does.
    pub schema_change_policy: SchemaChangePolicy,
    /// Bootstrap and re-snapshots.
    pub snapshot: SnapshotSettings,
    /// Zone of the server clock.
    pub source_time_zone: SourceZone,
    /// The captured columns to publish; empty: all, with their own types.
    pub columns: Vec<ColumnChoice>,
    /// Publish `__$command_id` as `_command_id`.
    pub include_command_id: bool,
    /// Pause between polls of a caught-up capture instance.
    pub poll_interval: Duration,
    /// An empty batch is published on a quiet table this often.
    pub heartbeat_interval: Duration,
    /// Rows per Arrow batch while reading (positive).
    pub fetch_rows: usize,
    /// Connections a batch's change rows are read over (1 to 16; 1: the stream's own).
    pub num_partitions: usize,
    /// The schedule of SQL reconnects within the stage: 250 ms doubling to 10 s, for at most
    /// `retry_timeout_ms` of one outage before the stage stops.
    pub sql_retry: RetryConfig,
    /// Partitions of the data topics the source creates (positive).
    pub topic_partitions: i32,
    /// librdkafka producer properties passed through (no worker-owned keys).
    pub producer_properties: Properties,
}

impl MssqlSourceSettings {
    /// The settings of one table: the file's, with the table's override (`schema.table`) in
    /// place.
    pub fn for_table(&self, schema: &str, table: &str) -> MssqlSourceSettings {
        let mut settings = self.clone();
        if let Some(given) = override_for(&self.tables.overrides, &mssql_cdc_core::tables::table_id(schema, table)) {
            if let Some(columns) = &given.columns {
                settings.columns = columns.clone();
            }
            if let Some(keys) = &given.snapshot_keys {
                settings.snapshot.keys = keys.clone();
            }
        }
        settings
    }
}

/// Where a new stream starts (`starting_lsn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartingLsn {
    /// At the oldest change the capture instance still holds.
    Earliest,
    /// After the newest change at start-up.
    Latest,
    /// After this LSN (taken as already processed).
    After(Lsn),
}

impl StartingLsn {
    /// `earliest`, `latest` or an LSN of 1 to 20 hex digits (`0x` optional).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "earliest" => Some(Self::Earliest),
            "latest" => Some(Self::Latest),
            text => Lsn::parse_hex(text).map(Self::After),
        }
    }
}

impl fmt::Display for StartingLsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Earliest => f.write_str("earliest"),
            Self::Latest => f.write_str("latest"),
            Self::After(lsn) => write!(f, "{lsn}"),
        }
    }
}

/// The zone of the server clock (`source_time_zone`).
#[derive(Clone, Debug, PartialEq)]
pub enum SourceZone {
    /// Asked of the server (`CURRENT_TIMEZONE_ID()`) when a stream starts.
    Auto,
    /// This zone.
    Fixed(ServerZone),
}

/// One `columns` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnChoice {
    /// The column's name as written (matched ignoring case, an exact match winning).
    pub name: String,
    /// The cast it is read through, if any.
    pub cast: Option<Cast>,
}

/// `CAST([column] AS <sql_type>)`, and the log type that type maps to.
#[derive(Clone, Debug, PartialEq)]
pub struct Cast {
    /// The T-SQL type text, e.g. `decimal(18,2)`.
    pub sql_type: String,
    /// Its type on the log.
    pub ty: ColumnType,
}
