//! The facts table: one row per batch a sink wrote (empty batches and heartbeats included),
//! plus one row per event of the batch. Shared by every stream that writes into it; a stream's
//! rows of one batch are appended in one commit with `txn(<app_id>#facts, batch_id)`, so a
//! replayed batch adds nothing. Columns are documented in `docs/tables.md`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use chrono::{DateTime, Utc};

use crate::log::control::{ControlRecord, Event};

/// The `txn` app id of a stream's facts rows.
pub fn facts_app_id(app_id: &str) -> String {
    format!("{app_id}#facts")
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// The facts table's schema.
pub fn facts_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("target", DataType::Utf8, false),
        Field::new("app_id", DataType::Utf8, false),
        Field::new("batch_id", DataType::Int64, false),
        Field::new("generation", DataType::Int64, false),
        Field::new("event", DataType::Utf8, false),
        Field::new("capture_instance", DataType::Utf8, true),
        Field::new("rows", DataType::Int64, false),
        Field::new("commits", DataType::Int64, true),
        Field::new("start_lsn", DataType::Utf8, true),
        Field::new("end_lsn", DataType::Utf8, true),
        Field::new("min_commit_ts", ts(), true),
        Field::new("max_commit_ts", ts(), true),
        Field::new("capture_lag_seconds", DataType::Float64, true),
        Field::new("retention_headroom_hours", DataType::Float64, true),
        Field::new("source_read_ms", DataType::Int64, true),
        Field::new("source_bytes", DataType::Int64, true),
        Field::new("sink_read_ms", DataType::Int64, true),
        Field::new("sink_bytes", DataType::Int64, true),
        Field::new("dead_lettered", DataType::Int64, false),
        Field::new("published_at", ts(), true),
        Field::new("written_at", ts(), false),
        Field::new("detail", DataType::Utf8, true),
    ]))
}

/// Column comments of the facts table.
pub fn facts_comments() -> HashMap<&'static str, &'static str> {
    HashMap::from([
        ("target", "The table the stream writes (bronze location)"),
        ("app_id", "The writer's app_id (its Delta txn id)"),
        ("batch_id", "Source batch id (the control record's)"),
        ("generation", "Stream generation"),
        ("event", "batch, heartbeat, or an event of the batch (data_skipped, ...)"),
        ("rows", "Change rows written for the batch (0 for heartbeats and event rows)"),
        ("start_lsn", "Position before the batch (exclusive)"),
        ("end_lsn", "Position after the batch (inclusive)"),
        ("capture_lag_seconds", "Server clock minus the newest harvested commit, when the batch was published"),
        ("retention_headroom_hours", "Hours until CDC cleanup may purge the oldest unpublished change"),
        ("dead_lettered", "Records of the batch sent to the dead-letter topic"),
        ("written_at", "When the sink wrote this row, UTC"),
        ("detail", "JSON: warnings, the event's payload, partitions and offsets"),
    ])
}

/// What the sink measured for a batch.
#[derive(Clone, Debug, Default)]
pub struct SinkMetrics {
    /// Rows written.
    pub rows: u64,
    /// Time reading the batch's records, milliseconds.
    pub read_ms: u64,
    /// Bytes of the records read.
    pub bytes: u64,
    /// Records sent to the dead-letter topic.
    pub dead_lettered: u64,
    /// Warnings of the sink (dead-lettered records, ...).
    pub warnings: Vec<String>,
}

/// The facts rows of one batch: the batch row, then one row per event.
pub fn facts_rows(target: &str, app_id: &str, control: &ControlRecord, sink: &SinkMetrics, written_at: DateTime<Utc>) -> RecordBatch {
    let kind = if control.rows == 0 && control.events.is_empty() { "heartbeat" } else { "batch" };
    let mut events: Vec<(String, u64, String)> = vec![(
        kind.to_owned(),
        sink.rows,
        serde_json::json!({
            "warnings": control.warnings.iter().chain(sink.warnings.iter()).collect::<Vec<_>>(),
            "partitions": control.partitions,
            "schema_version": control.schema_version,
            "data_topic": control.data_topic,
        })
        .to_string(),
    )];
    for event in &control.events {
        let name = match event {
            Event::DataSkipped { .. } => "data_skipped",
        };
        events.push((name.to_owned(), 0, serde_json::to_string(event).unwrap_or_default()));
    }
    let n = events.len();
    let micros = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_micros());
    let repeat_i64 = |v: Option<i64>| Arc::new(Int64Array::from(vec![v; n]));
    let repeat_f64 = |v: Option<f64>| Arc::new(Float64Array::from(vec![v; n]));
    let repeat_str = |v: Option<String>| Arc::new(StringArray::from(vec![v; n]));
    let repeat_ts = |v: Option<i64>| Arc::new(TimestampMicrosecondArray::from(vec![v; n]).with_timezone("UTC"));
    RecordBatch::try_new(
        facts_schema(),
        vec![
            Arc::new(StringArray::from(vec![target; n])),
            Arc::new(StringArray::from(vec![app_id; n])),
            Arc::new(Int64Array::from(vec![control.batch_id as i64; n])),
            Arc::new(Int64Array::from(vec![control.generation as i64; n])),
            Arc::new(StringArray::from(events.iter().map(|e| e.0.as_str()).collect::<Vec<_>>())),
            repeat_str(Some(control.capture_instance.clone())),
            Arc::new(Int64Array::from(events.iter().map(|e| e.1 as i64).collect::<Vec<_>>())),
            repeat_i64(Some(control.commits as i64)),
            repeat_str(Some(control.from_lsn.to_string())),
            repeat_str(Some(control.to_lsn.to_string())),
            repeat_ts(micros(control.min_commit_ts)),
            repeat_ts(micros(control.max_commit_ts)),
            repeat_f64(control.metrics.capture_lag_seconds),
            repeat_f64(control.metrics.retention_headroom_hours),
            repeat_i64(Some(control.metrics.read_ms as i64)),
            repeat_i64(Some(control.metrics.bytes as i64)),
            repeat_i64(Some(sink.read_ms as i64)),
            repeat_i64(Some(sink.bytes as i64)),
            Arc::new(Int64Array::from(vec![sink.dead_lettered as i64; n])),
            repeat_ts(micros(control.metrics.published_at)),
            repeat_ts(Some(written_at.timestamp_micros())),
            Arc::new(StringArray::from(events.iter().map(|e| Some(e.2.as_str())).collect::<Vec<_>>())),
        ],
    )
    .expect("facts rows follow the facts schema")
}
