//! The facts table: one row per batch a sink wrote (empty batches and heartbeats included),
//! plus one row per event of the batch. Shared by every stream that writes into it; a stream's
//! rows of one batch are appended in one commit with `txn(<app_id>#facts, batch_id)`, so a
//! replayed batch adds nothing. Columns are documented in `docs/tables.md`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use chrono::{DateTime, Utc};

use mssql_cdc_core::log::control::{ControlRecord, Event};

/// The `txn` app id of a stream's facts rows.
pub fn facts_app_id(app_id: &str) -> String {
    format!("{app_id}#facts")
}

fn ts() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// A facts row could not be read as the table's contract says.
#[derive(Debug, thiserror::Error)]
#[error("facts table column `{column}`: expected {expected}, found {found} (was the table written by another tool or release?)")]
pub struct FactsError {
    /// The column.
    pub column: &'static str,
    /// Its type in the contract.
    pub expected: &'static str,
    /// What the table holds.
    pub found: String,
}

/// A batch-type facts row (`batch` or `heartbeat`): what silver follows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchFact {
    /// The table the batch went to (bronze's location).
    pub target: String,
    /// The batch id.
    pub batch_id: i64,
    /// Rows the batch carried.
    pub rows: i64,
    /// The batch's end LSN.
    pub end_lsn: Option<String>,
    /// The commit time of its last commit.
    pub max_commit_ts: Option<DateTime<Utc>>,
    /// Whether the batch completes a snapshot (its `bootstrap` or `resnapshot` event): silver
    /// then drops what the snapshot did not hold.
    pub completes_snapshot: bool,
    /// The LSN S of the snapshot it completes (the event's; a full snapshot's batch also ends
    /// at S, a chunked one's where the stream stands).
    pub snapshot_lsn: Option<String>,
    /// The LSN S of a chunked snapshot the batch opens (`snapshot_open` with mode `chunked`):
    /// the verdict holds until its completion.
    pub opens_chunked: Option<String>,
}

/// The facts events that complete a snapshot.
pub const SNAPSHOT_COMPLETIONS: [&str; 2] = ["bootstrap", "resnapshot"];

/// The facts event that opens a snapshot.
pub const SNAPSHOT_OPEN: &str = "snapshot_open";

/// SQL over the facts table (registered as `facts`) selecting the batch-type rows with a
/// batch id in `(after, up_to]`, in batch order, with the snapshot events that concern silver;
/// [`read_batch_facts`] reads its result.
pub fn batch_facts_sql(after: i64, up_to: i64) -> String {
    format!(
        "SELECT target, batch_id, event, rows, end_lsn, max_commit_ts, detail FROM facts WHERE batch_id > {after} AND batch_id <= {up_to} \
         AND event IN ('batch', 'heartbeat', '{}', '{}', '{SNAPSHOT_OPEN}') ORDER BY batch_id",
        SNAPSHOT_COMPLETIONS[0], SNAPSHOT_COMPLETIONS[1]
    )
}

/// The snapshot LSN and mode an event row's `detail` names (`lsn`, `mode`).
fn snapshot_detail(detail: Option<&str>) -> (Option<String>, bool) {
    let value: Option<serde_json::Value> = detail.and_then(|d| serde_json::from_str(d).ok());
    let lsn = value.as_ref().and_then(|v| v.get("lsn")).and_then(|l| l.as_str()).map(str::to_owned);
    let chunked = value.as_ref().and_then(|v| v.get("mode")).and_then(|m| m.as_str()) == Some("chunked");
    (lsn, chunked)
}

/// The rows of a [`batch_facts_sql`] result: one per batch, in the order read, each marked
/// when an event row of the same target and batch completes a snapshot. A column that is
/// missing or of another type is an error naming it, never a panic.
pub fn read_batch_facts(batches: &[RecordBatch]) -> Result<Vec<BatchFact>, FactsError> {
    let mut facts = Vec::new();
    let mut completions = Vec::new();
    let mut openings = Vec::new();
    for batch in batches {
        let targets = text(batch, "target")?;
        let ids = int64(batch, "batch_id")?;
        let events = text(batch, "event")?;
        let rows = int64(batch, "rows")?;
        let lsns = text(batch, "end_lsn")?;
        let times = timestamp(batch, "max_commit_ts")?;
        let details = match batch.column_by_name("detail") {
            Some(_) => Some(text(batch, "detail")?),
            None => None,
        };
        for i in 0..batch.num_rows() {
            let detail = details.as_ref().filter(|d| !d.is_null(i)).map(|d| d.value(i));
            if SNAPSHOT_COMPLETIONS.contains(&events.value(i)) {
                completions.push((targets.value(i).to_owned(), ids.value(i), snapshot_detail(detail).0));
                continue;
            }
            if events.value(i) == SNAPSHOT_OPEN {
                if let (Some(lsn), true) = snapshot_detail(detail) {
                    openings.push((targets.value(i).to_owned(), ids.value(i), lsn));
                }
                continue;
            }
            facts.push(BatchFact {
                target: targets.value(i).to_owned(),
                batch_id: ids.value(i),
                rows: rows.value(i),
                end_lsn: (!lsns.is_null(i)).then(|| lsns.value(i).to_owned()),
                max_commit_ts: (!times.is_null(i)).then(|| DateTime::from_timestamp_micros(times.value(i))).flatten(),
                completes_snapshot: false,
                snapshot_lsn: None,
                opens_chunked: None,
            });
        }
    }
    for fact in &mut facts {
        if let Some((_, _, lsn)) = completions.iter().find(|(target, id, _)| *id == fact.batch_id && *target == fact.target) {
            fact.completes_snapshot = true;
            fact.snapshot_lsn = lsn.clone().or_else(|| fact.end_lsn.clone());
        }
        fact.opens_chunked = openings.iter().find(|(target, id, _)| *id == fact.batch_id && *target == fact.target).map(|(_, _, lsn)| lsn.clone());
    }
    Ok(facts)
}

fn column<'a>(batch: &'a RecordBatch, name: &'static str, expected: &'static str) -> Result<&'a arrow::array::ArrayRef, FactsError> {
    batch.column_by_name(name).ok_or_else(|| FactsError { column: name, expected, found: "no such column".into() })
}

fn int64<'a>(batch: &'a RecordBatch, name: &'static str) -> Result<&'a Int64Array, FactsError> {
    let array = column(batch, name, "bigint")?;
    array.as_any().downcast_ref::<Int64Array>().ok_or_else(|| FactsError { column: name, expected: "bigint", found: array.data_type().to_string() })
}

fn text(batch: &RecordBatch, name: &'static str) -> Result<StringArray, FactsError> {
    let array = column(batch, name, "string")?;
    let drift = || FactsError { column: name, expected: "string", found: array.data_type().to_string() };
    if !matches!(array.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) {
        return Err(drift());
    }
    // DataFusion may return string views; the contract's type is text either way.
    let cast = arrow::compute::cast(array, &DataType::Utf8).map_err(|_| drift())?;
    cast.as_any().downcast_ref::<StringArray>().cloned().ok_or_else(drift)
}

fn timestamp<'a>(batch: &'a RecordBatch, name: &'static str) -> Result<&'a TimestampMicrosecondArray, FactsError> {
    let array = column(batch, name, "timestamp (microseconds, UTC)")?;
    array
        .as_any()
        .downcast_ref::<TimestampMicrosecondArray>()
        .ok_or_else(|| FactsError { column: name, expected: "timestamp (microseconds, UTC)", found: array.data_type().to_string() })
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
#[allow(clippy::expect_used)] // invariant: the rows are built column by column from the facts schema
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
        let rows = match event {
            Event::Bootstrap { rows, .. } | Event::Resnapshot { rows, .. } => *rows,
            Event::SnapshotChunk(chunk) => chunk.rows,
            _ => 0,
        };
        events.push((event.name().to_owned(), rows, serde_json::to_string(event).unwrap_or_default()));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(columns: Vec<(&str, arrow::array::ArrayRef)>) -> RecordBatch {
        RecordBatch::try_from_iter(columns).unwrap()
    }

    /// Invariant: batch facts are read by column name and type, as written.
    #[test]
    fn batch_facts_are_read_by_name() {
        let read = read_batch_facts(&[batch(vec![
            ("target", Arc::new(StringArray::from(vec!["/b", "/b", "/b", "/other"])) as _),
            ("batch_id", Arc::new(Int64Array::from(vec![7, 8, 8, 7])) as _),
            ("event", Arc::new(StringArray::from(vec!["batch", "bootstrap", "heartbeat", "resnapshot"])) as _),
            ("rows", Arc::new(Int64Array::from(vec![3, 10, 0, 4])) as _),
            ("end_lsn", Arc::new(StringArray::from(vec![None, Some("0x0A"), Some("0x0A"), None])) as _),
            ("max_commit_ts", Arc::new(TimestampMicrosecondArray::from(vec![Some(1_000_000), None, None, None]).with_timezone("UTC")) as _),
        ])])
        .unwrap();
        assert_eq!(read.len(), 2, "one fact per batch; event rows mark their batch");
        assert_eq!((read[0].batch_id, read[0].rows, read[0].end_lsn.clone()), (7, 3, None));
        assert_eq!(read[0].max_commit_ts.map(|t| t.timestamp()), Some(1));
        assert!(!read[0].completes_snapshot, "another table's completion does not mark this one's batch 7");
        assert!(read[1].completes_snapshot && read[1].batch_id == 8);
        assert_eq!(read[1].snapshot_lsn.as_deref(), Some("0x0A"), "without a detail, the batch's end is S (a full snapshot)");
    }

    /// Invariant: a chunked snapshot's completion names S in its event, not the batch's end
    /// (the stream has gone on past S), and its opening is marked for the verdict's hold.
    #[test]
    fn chunked_snapshot_events_name_their_lsn() {
        let read = read_batch_facts(&[batch(vec![
            ("target", Arc::new(StringArray::from(vec!["/b", "/b", "/b", "/b"])) as _),
            ("batch_id", Arc::new(Int64Array::from(vec![0, 0, 9, 9])) as _),
            ("event", Arc::new(StringArray::from(vec!["batch", "snapshot_open", "batch", "bootstrap"])) as _),
            ("rows", Arc::new(Int64Array::from(vec![0, 0, 0, 10])) as _),
            ("end_lsn", Arc::new(StringArray::from(vec![Some("0x05"), Some("0x05"), Some("0x0F"), Some("0x0F")])) as _),
            ("max_commit_ts", Arc::new(TimestampMicrosecondArray::from(vec![None::<i64>, None, None, None]).with_timezone("UTC")) as _),
            (
                "detail",
                Arc::new(StringArray::from(vec![None, Some(r#"{"event":"snapshot_open","lsn":"0x05","mode":"chunked"}"#), None, Some(r#"{"event":"bootstrap","lsn":"0x05","rows":10}"#)])) as _,
            ),
        ])])
        .unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].opens_chunked.as_deref(), Some("0x05"));
        assert!(read[1].completes_snapshot);
        assert_eq!(read[1].snapshot_lsn.as_deref(), Some("0x05"), "S, not the batch's end 0x0F");
    }

    /// Invariant: a type drift in the facts table is an error naming the column, not a panic.
    #[test]
    fn a_type_drift_is_an_error_naming_the_column() {
        let error = read_batch_facts(&[batch(vec![
            ("target", Arc::new(StringArray::from(vec!["/b"])) as _),
            ("batch_id", Arc::new(StringArray::from(vec!["7"])) as _),
            ("event", Arc::new(StringArray::from(vec!["batch"])) as _),
            ("rows", Arc::new(Int64Array::from(vec![3])) as _),
            ("end_lsn", Arc::new(StringArray::from(vec!["0x00"])) as _),
            ("max_commit_ts", Arc::new(TimestampMicrosecondArray::from(vec![1])) as _),
        ])])
        .unwrap_err();
        assert_eq!(error.column, "batch_id");
        assert!(error.to_string().contains("expected bigint"), "{error}");
    }
}
