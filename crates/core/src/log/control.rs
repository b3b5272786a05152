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

use super::format::RecordFormat;
use super::schema::TableSchema;
use mssql_cdc_types::lsn::Lsn;

/// The version of this layout; readers refuse records of a newer major version.
pub const CONTROL_VERSION: u32 = 1;

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
    /// Data records in the batch.
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
    /// Where the batch's records are: one entry per data partition that received any.
    pub partitions: Vec<PartitionRange>,
    /// Record encoding of the data records.
    pub format: RecordFormat,
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
}

impl ControlRecord {
    /// Decodes a control record's bytes (JSON in every format), refusing a layout newer
    /// than [`CONTROL_VERSION`]: what every reader of a control topic calls.
    pub fn decode(bytes: &[u8]) -> Result<Self, ControlDecodeError> {
        let record: Self = serde_json::from_slice(bytes).map_err(ControlDecodeError::NotAControlRecord)?;
        if record.version > CONTROL_VERSION {
            return Err(ControlDecodeError::NewerLayout { version: record.version });
        }
        Ok(record)
    }

    /// Whether the batch holds no rows and no events.
    pub fn is_heartbeat(&self) -> bool {
        self.rows == 0 && self.events.is_empty()
    }
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
            partitions: vec![PartitionRange { partition: 1, first_offset: 10, last_offset: 14, records: 5 }],
            format: RecordFormat::Json,
            schema_version: 42,
            schema: TableSchema {
                columns: vec![crate::log::schema::Column { name: "order_id".into(), ty: crate::log::ColumnType::Decimal { precision: 18, scale: 2 } }],
                key: vec!["order_id".into()],
                include_command_id: true,
            },
            schema_id: None,
            events: vec![Event::DataSkipped { from_lsn: Lsn::parse_hex("1").unwrap(), to_lsn: Lsn::parse_hex("2").unwrap(), certain: true }],
            warnings: vec![],
            metrics: SourceMetrics { max_lsn: Lsn::parse_hex("2A0000000300"), capture_lag_seconds: Some(1.5), ..Default::default() },
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
        let metrics = &declared["metrics"]["properties"];
        for key in value["metrics"].as_object().unwrap().keys() {
            assert!(metrics.get(key).is_some(), "metrics field `{key}` is missing from the schema");
        }
    }
}
