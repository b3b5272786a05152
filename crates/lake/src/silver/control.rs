//! The control (finalization) table: one row per silver table with its verdict
//! `finalized_until` and its applied position. Several silver tables may share it.
//!
//! `finalized_until` is the end commit time of the last applied batch truncated to the
//! granularity: every period that ends at or before it is complete in silver. It is written
//! after the data, only ever moves forward, and `updated_at` records when it last moved.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use deltalake::datafusion::prelude::SessionContext;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::Transaction;
use deltalake::DeltaTable;

use super::config::Granularity;
use crate::delta::query::{literal, query, text_column};
use crate::delta::storage::Storage;
use crate::delta::table::{self, DeltaError};

/// The control table's columns.
pub fn control_schema() -> SchemaRef {
    let ts = || DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    Arc::new(Schema::new(vec![
        Field::new("table_name", DataType::Utf8, false),
        Field::new("finalized_until", ts(), true),
        Field::new("end_lsn", DataType::Utf8, true),
        Field::new("end_commit_ts", ts(), true),
        Field::new("updated_at", ts(), true),
        Field::new("applied_lsn", DataType::Utf8, true),
        Field::new("applied_batch", DataType::Int64, false),
        Field::new("silver_version", DataType::Int64, true),
        Field::new("written_at", ts(), false),
        Field::new(OPEN_SNAPSHOT_LSN, DataType::Utf8, true),
    ]))
}

/// The column added after the first release: tables created before it gain it on open.
const OPEN_SNAPSHOT_LSN: &str = "open_snapshot_lsn";

/// Column comments of the control table.
pub fn control_comments() -> HashMap<&'static str, &'static str> {
    HashMap::from([
        ("table_name", "The silver table's URL"),
        ("finalized_until", "Every period ending at or before this instant (UTC) is complete in silver"),
        ("end_lsn", "Commit LSN that ends the last applied batch"),
        ("end_commit_ts", "Commit time (UTC) of the last commit of the applied batches"),
        ("updated_at", "When finalized_until last moved"),
        ("applied_lsn", "Highest LSN applied to silver"),
        ("applied_batch", "Last bronze batch id applied (heartbeats included)"),
        ("silver_version", "Silver table version after the last apply"),
        ("written_at", "When this row was last written"),
        (OPEN_SNAPSHOT_LSN, "LSN S of a chunked snapshot still open: finalized_until holds until it completes"),
    ])
}

/// One silver table's row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ControlRow {
    /// The silver table's URL.
    pub table_name: String,
    /// The verdict.
    pub finalized_until: Option<DateTime<Utc>>,
    /// End LSN of the last applied batch.
    pub end_lsn: Option<String>,
    /// End commit time of the applied batches.
    pub end_commit_ts: Option<DateTime<Utc>>,
    /// When the verdict last moved.
    pub updated_at: Option<DateTime<Utc>>,
    /// Highest LSN applied.
    pub applied_lsn: Option<String>,
    /// Last bronze batch applied.
    pub applied_batch: i64,
    /// Silver's version after the last apply.
    pub silver_version: Option<i64>,
    /// When the row was written.
    pub written_at: DateTime<Utc>,
    /// S of a chunked snapshot still open (the verdict holds meanwhile).
    pub open_snapshot_lsn: Option<String>,
}

impl Granularity {
    /// `at` truncated down to the start of its period.
    #[allow(clippy::expect_used)] // invariant: truncation to minutes, hours or days, and a row built from the control schema
    pub fn truncate(self, at: DateTime<Utc>) -> DateTime<Utc> {
        let unit = match self {
            Granularity::Minute => TimeDelta::minutes(1),
            Granularity::Hour => TimeDelta::hours(1),
            Granularity::Day => TimeDelta::days(1),
        };
        at.duration_trunc(unit).expect("a timestamp truncates to whole minutes, hours or days")
    }
}

impl ControlRow {
    /// The row after batches ending at `end_lsn` / `end_commit_ts` are applied: the verdict
    /// moves to the truncated end commit time when that is later, never back.
    pub fn advance(&self, granularity: Granularity, end_lsn: Option<&str>, end_commit_ts: Option<DateTime<Utc>>, applied_batch: i64, now: DateTime<Utc>) -> ControlRow {
        let mut next = self.clone();
        if let Some(end) = end_commit_ts {
            if next.end_commit_ts.is_none_or(|previous| end > previous) {
                next.end_commit_ts = Some(end);
            }
            let candidate = granularity.truncate(end);
            if next.finalized_until.is_none_or(|previous| candidate > previous) {
                next.finalized_until = Some(candidate);
                next.updated_at = Some(now);
            }
        }
        if let Some(lsn) = end_lsn
            && next.end_lsn.as_deref().is_none_or(|previous| lsn > previous) {
                next.end_lsn = Some(lsn.to_owned());
            }
        next.applied_batch = next.applied_batch.max(applied_batch);
        next.written_at = now;
        next
    }

    #[allow(clippy::expect_used)] // invariant: truncation to minutes, hours or days, and a row built from the control schema
    fn to_batch(&self) -> RecordBatch {
        let ts = |v: Option<DateTime<Utc>>| Arc::new(TimestampMicrosecondArray::from(vec![v.map(|t| t.timestamp_micros())]).with_timezone("UTC")) as ArrayRef;
        RecordBatch::try_new(
            control_schema(),
            vec![
                Arc::new(StringArray::from(vec![self.table_name.clone()])),
                ts(self.finalized_until),
                Arc::new(StringArray::from(vec![self.end_lsn.clone()])),
                ts(self.end_commit_ts),
                ts(self.updated_at),
                Arc::new(StringArray::from(vec![self.applied_lsn.clone()])),
                Arc::new(Int64Array::from(vec![self.applied_batch])),
                Arc::new(Int64Array::from(vec![self.silver_version])),
                ts(Some(self.written_at)),
                Arc::new(StringArray::from(vec![self.open_snapshot_lsn.clone()])),
            ],
        )
        .expect("control row matches its schema")
    }
}

/// Opens the control table, creating it when missing.
pub async fn open_or_create(location: &str, storage: &Storage) -> Result<DeltaTable, DeltaError> {
    match table::open(location, storage).await? {
        Some(table) if has_column(&table, OPEN_SNAPSHOT_LSN) => Ok(table),
        Some(table) => {
            // A table of an earlier release: add the column (NULL in its rows).
            let field = deltalake::kernel::StructField::nullable(OPEN_SNAPSHOT_LSN, deltalake::kernel::DataType::STRING);
            let url = table.table_url().to_string();
            table.add_columns().with_fields([field]).await.map_err(|e| DeltaError::new(&url, e))
        }
        None => table::create(location, storage, &control_schema(), &control_comments(), "mssql-cdc finalization: one row per silver table").await,
    }
}

fn has_column(table: &DeltaTable, name: &str) -> bool {
    table.snapshot().is_ok_and(|s| s.schema().fields().any(|f| f.name() == name))
}

/// The row of `table_name`, if any.
pub async fn read_row(control: &DeltaTable, table_name: &str) -> Result<Option<ControlRow>, DeltaError> {
    let sql = format!("SELECT * FROM control WHERE table_name = {} ORDER BY applied_batch DESC LIMIT 1", literal(table_name));
    let batches = query(&[("control", control)], &sql).await?;
    let Some(batch) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(None) };
    let text = |name: &str| {
        let index = batch.schema().index_of(name).ok()?;
        let column = text_column(batch, index).ok()?;
        (!column.is_null(0)).then(|| column.value(0).to_owned())
    };
    let ts = |name: &str| {
        batch
            .column_by_name(name)
            .and_then(|c| c.as_any().downcast_ref::<TimestampMicrosecondArray>())
            .filter(|c| !c.is_null(0))
            .and_then(|c| DateTime::from_timestamp_micros(c.value(0)))
    };
    let int = |name: &str| batch.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<Int64Array>()).filter(|c| !c.is_null(0)).map(|c| c.value(0));
    Ok(Some(ControlRow {
        table_name: table_name.to_owned(),
        finalized_until: ts("finalized_until"),
        end_lsn: text("end_lsn"),
        end_commit_ts: ts("end_commit_ts"),
        updated_at: ts("updated_at"),
        applied_lsn: text("applied_lsn"),
        applied_batch: int("applied_batch").unwrap_or(-1),
        silver_version: int("silver_version"),
        written_at: ts("written_at").unwrap_or_default(),
        open_snapshot_lsn: text(OPEN_SNAPSHOT_LSN),
    }))
}

/// Writes `row` (insert or replace by `table_name`) in one commit with `txn(app_id, version)`.
pub async fn write_row(control: DeltaTable, row: &ControlRow, app_id: &str, version: i64) -> Result<DeltaTable, DeltaError> {
    let location = control.table_url().to_string();
    let source = SessionContext::new().read_batch(row.to_batch()).map_err(|e| DeltaError::new(&location, e))?;
    let columns: Vec<String> = control_schema().fields().iter().map(|f| f.name().clone()).collect();
    // A conflict here means another silver table's row was written at the same time (MERGE
    // rewrites the file holding both rows): read again and retry, with a growing pause.
    table::commit_with_retries(control, app_id, version, CONTROL_ATTEMPTS, std::time::Duration::from_millis(50), |control| {
        let (source, columns) = (source.clone(), columns.clone());
        let properties = CommitProperties::default().with_application_transaction(Transaction::new(app_id, version));
        async move {
            let (table, _) = control
                .merge(source, "target.table_name = source.table_name")
                .with_source_alias("source")
                .with_target_alias("target")
                .with_commit_properties(properties)
                .when_matched_update(|update| columns.iter().fold(update, |u, c| u.update(c.as_str(), format!("source.{c}"))))?
                .when_not_matched_insert(|insert| columns.iter().fold(insert, |i, c| i.set(c.as_str(), format!("source.{c}"))))?
                .await?;
            Ok(table)
        }
    })
    .await
}

/// Attempts at a control write before a conflict is an error.
const CONTROL_ATTEMPTS: u32 = 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().with_timezone(&Utc)
    }

    /// The verdict is the truncated end commit time, moves only forward, and `updated_at`
    /// changes only when it moves.
    #[test]
    fn the_verdict_is_truncated_and_monotonic() {
        let now = at("2026-11-30T12:00:00Z");
        let row = ControlRow::default().advance(Granularity::Hour, Some("0x01"), Some(at("2026-11-30T10:59:59Z")), 3, now);
        assert_eq!(row.finalized_until, Some(at("2026-11-30T10:00:00Z")));
        assert_eq!(row.updated_at, Some(now));
        let later = at("2026-11-30T12:05:00Z");
        let same = row.advance(Granularity::Hour, Some("0x02"), Some(at("2026-11-30T10:30:00Z")), 4, later);
        assert_eq!(same.finalized_until, row.finalized_until, "an older end never moves it back");
        assert_eq!(same.updated_at, Some(now), "updated_at marks when it moved, not when it was written");
        assert_eq!(same.end_commit_ts, Some(at("2026-11-30T10:59:59Z")));
        assert_eq!(same.applied_batch, 4);
        let moved = same.advance(Granularity::Minute, None, Some(at("2026-11-30T11:00:30Z")), 5, later);
        assert_eq!(moved.finalized_until, Some(at("2026-11-30T11:00:00Z")));
        assert_eq!(moved.updated_at, Some(later));
        assert_eq!(Granularity::Day.truncate(at("2026-11-30T23:59:59Z")), at("2026-11-30T00:00:00Z"));
        let heartbeat = moved.advance(Granularity::Hour, Some("0x03"), None, 6, later);
        assert_eq!((heartbeat.finalized_until, heartbeat.applied_batch), (moved.finalized_until, 6), "a batch without commits keeps the verdict");
    }
}
