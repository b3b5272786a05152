//! The plans table next to bronze, `<target>_snapshot_plans`: one row per chunk of every
//! chunked snapshot's plan, written when the plan's batch reaches bronze (before any chunk's,
//! which the source publishes after it), in one commit with `txn(<app_id>#plans, batch_id)`, so
//! a replayed batch adds nothing. Columns are documented in `docs/tables.md`.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use chrono::{DateTime, Utc};

use mssql_cdc_core::log::control::{ControlRecord, Event};

/// The plans table of a bronze table.
pub fn plans_location(target: &str) -> String {
    format!("{}_snapshot_plans", target.trim_end_matches('/'))
}

/// The `txn` app id of a stream's plan rows.
pub fn plans_app_id(app_id: &str) -> String {
    format!("{app_id}#plans")
}

/// The plans table's columns.
pub fn plans_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("target", DataType::Utf8, false),
        Field::new("app_id", DataType::Utf8, false),
        Field::new("snapshot_lsn", DataType::Utf8, false),
        Field::new("generation", DataType::Int64, false),
        Field::new("batch_id", DataType::Int64, false),
        Field::new("method", DataType::Utf8, false),
        Field::new("keys", DataType::Utf8, false),
        Field::new("chunk_rows", DataType::Int64, false),
        Field::new("chunk", DataType::Int64, false),
        Field::new("after", DataType::Utf8, true),
        Field::new("through", DataType::Utf8, true),
        Field::new("written_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
    ]))
}

/// Column comments of the plans table.
pub fn plans_comments() -> HashMap<&'static str, &'static str> {
    HashMap::from([
        ("snapshot_lsn", "S, the chunked snapshot's LSN"),
        ("batch_id", "The source batch that published the plan"),
        ("method", "range (an integer key's values, counted on the server) or keyset (keys read in order)"),
        ("keys", "JSON list of the columns the chunks are cut on"),
        ("chunk", "The chunk's place in the plan, from 0"),
        ("after", "JSON key values the chunk starts after (exclusive); NULL: from the first key"),
        ("through", "JSON key values the chunk ends with (inclusive); NULL: to the last key"),
    ])
}

/// The plan rows of a batch whose control record carries a `snapshot_plan` event, if any.
#[allow(clippy::expect_used)] // invariant: the rows are built column by column from the plans schema
pub fn plan_rows(target: &str, app_id: &str, control: &ControlRecord, written_at: DateTime<Utc>) -> Option<RecordBatch> {
    let (lsn, keys, method, chunk_rows, chunks) = control.events.iter().find_map(|event| match event {
        Event::SnapshotPlan { lsn, keys, method, chunk_rows, chunks } => Some((lsn, keys, method, chunk_rows, chunks)),
        _ => None,
    })?;
    let n = chunks.len();
    let json = |v: &Option<Vec<serde_json::Value>>| v.as_ref().map(|v| serde_json::Value::from(v.clone()).to_string());
    let keys = serde_json::Value::from(keys.clone()).to_string();
    let batch = RecordBatch::try_new(
        plans_schema(),
        vec![
            Arc::new(StringArray::from(vec![target; n])),
            Arc::new(StringArray::from(vec![app_id; n])),
            Arc::new(StringArray::from(vec![lsn.to_string(); n])),
            Arc::new(Int64Array::from(vec![control.generation as i64; n])),
            Arc::new(Int64Array::from(vec![control.batch_id as i64; n])),
            Arc::new(StringArray::from(vec![method.as_str(); n])),
            Arc::new(StringArray::from(vec![keys.as_str(); n])),
            Arc::new(Int64Array::from(vec![*chunk_rows as i64; n])),
            Arc::new(Int64Array::from((0..n as i64).collect::<Vec<_>>())),
            Arc::new(StringArray::from(chunks.iter().map(|c| json(&c.after)).collect::<Vec<_>>())),
            Arc::new(StringArray::from(chunks.iter().map(|c| json(&c.through)).collect::<Vec<_>>())),
            Arc::new(TimestampMicrosecondArray::from(vec![written_at.timestamp_micros(); n]).with_timezone("UTC")),
        ],
    )
    .expect("plan rows follow the plans schema");
    Some(batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Array;
    use mssql_cdc_core::log::control::ChunkBounds;
    use mssql_cdc_types::lsn::Lsn;

    /// Invariant: one row per chunk, in plan order, the bounds as the plan has them.
    #[test]
    fn a_plan_is_one_row_per_chunk() {
        let text = r#"{"version":1,"batch_id":4,"generation":0,"capture_instance":"dbo_t","data_topic":"t","from_lsn":"0x00000000000000000001","to_lsn":"0x00000000000000000001",
            "commits":0,"rows":0,"partitions":[],"format":"json","schema_version":1,"schema":{"columns":[],"key":[],"include_command_id":false},"events":[],"warnings":[],"metrics":{"read_ms":0,"bytes":0,"published_at":null}}"#;
        let mut control: ControlRecord = serde_json::from_str(text).unwrap();
        assert!(plan_rows("/b", "app", &control, Utc::now()).is_none(), "no plan, no rows");
        let bound = |v: i64| Some(vec![serde_json::json!(v)]);
        control.events = vec![Event::SnapshotPlan {
            lsn: Lsn::parse_hex("2A").unwrap(),
            keys: vec!["id".into()],
            method: "range".into(),
            chunk_rows: 10,
            chunks: vec![ChunkBounds { after: None, through: bound(9) }, ChunkBounds { after: bound(9), through: None }],
        }];
        let rows = plan_rows("/b", "app", &control, Utc::now()).unwrap();
        assert_eq!(rows.num_rows(), 2);
        let through = rows.column_by_name("through").unwrap().as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!((through.value(0), through.is_null(1)), ("[9]", true));
        assert_eq!(plans_location("s3://lake/bronze/orders/"), "s3://lake/bronze/orders_snapshot_plans");
    }
}
