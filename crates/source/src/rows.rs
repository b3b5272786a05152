//! Turning tiberius rows of a change table into Arrow record batches of the log's layout.

use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, FixedSizeBinaryBuilder,
    Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder, RecordBatch, StringBuilder,
    Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Timelike, Utc};
use tiberius::{ColumnData, FromSql};

use mssql_cdc_core::log::schema::{ColumnType, TableSchema, LSN_BYTES};
use mssql_cdc_types::lsn::Lsn;

/// Why a value could not be converted.
#[derive(Debug, thiserror::Error)]
#[error("column `{column}`: {message}")]
pub struct RowError {
    /// The column.
    pub column: String,
    /// What was wrong.
    pub message: String,
}

enum Builder {
    Bool(BooleanBuilder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Dec(Decimal128Builder, u8, i8),
    Str(StringBuilder),
    Bin(BinaryBuilder),
    Date(Date32Builder),
    Time(Time64MicrosecondBuilder),
    Ts(TimestampMicrosecondBuilder, bool),
}

impl Builder {
    fn new(ty: ColumnType, capacity: usize) -> Self {
        match ty {
            ColumnType::Boolean => Self::Bool(BooleanBuilder::with_capacity(capacity)),
            ColumnType::Int16 => Self::I16(Int16Builder::with_capacity(capacity)),
            ColumnType::Int32 => Self::I32(Int32Builder::with_capacity(capacity)),
            ColumnType::Int64 => Self::I64(Int64Builder::with_capacity(capacity)),
            ColumnType::Float32 => Self::F32(Float32Builder::with_capacity(capacity)),
            ColumnType::Float64 => Self::F64(Float64Builder::with_capacity(capacity)),
            ColumnType::Decimal { precision, scale } => Self::Dec(Decimal128Builder::with_capacity(capacity), precision, scale),
            ColumnType::String | ColumnType::Uuid => Self::Str(StringBuilder::with_capacity(capacity, capacity * 16)),
            ColumnType::Binary => Self::Bin(BinaryBuilder::with_capacity(capacity, capacity * 16)),
            ColumnType::Date => Self::Date(Date32Builder::with_capacity(capacity)),
            ColumnType::Time => Self::Time(Time64MicrosecondBuilder::with_capacity(capacity)),
            ColumnType::LocalTimestamp => Self::Ts(TimestampMicrosecondBuilder::with_capacity(capacity), false),
            ColumnType::Timestamp => Self::Ts(TimestampMicrosecondBuilder::with_capacity(capacity), true),
        }
    }

    fn append(&mut self, data: &ColumnData<'static>) -> Result<(), String> {
        let bad = |what: &str| format!("cannot read {data:?} as {what}");
        match self {
            Self::Bool(b) => b.append_option(match data {
                ColumnData::Bit(v) => *v,
                _ => return Err(bad("bit")),
            }),
            // A wider integer is a column widened by DDL the log has not reached yet: its older
            // values still fit (checked).
            Self::I16(b) => b.append_option(match data {
                ColumnData::U8(v) => v.map(i16::from),
                ColumnData::I16(v) => *v,
                ColumnData::I32(Some(v)) => Some(i16::try_from(*v).map_err(|_| bad("a 16-bit integer"))?),
                ColumnData::I64(Some(v)) => Some(i16::try_from(*v).map_err(|_| bad("a 16-bit integer"))?),
                ColumnData::I32(None) | ColumnData::I64(None) => None,
                _ => return Err(bad("a 16-bit integer")),
            }),
            Self::I32(b) => b.append_option(match data {
                ColumnData::U8(v) => v.map(i32::from),
                ColumnData::I16(v) => v.map(i32::from),
                ColumnData::I32(v) => *v,
                ColumnData::I64(Some(v)) => Some(i32::try_from(*v).map_err(|_| bad("int"))?),
                ColumnData::I64(None) => None,
                _ => return Err(bad("int")),
            }),
            Self::I64(b) => b.append_option(match data {
                ColumnData::U8(v) => v.map(i64::from),
                ColumnData::I16(v) => v.map(i64::from),
                ColumnData::I32(v) => v.map(i64::from),
                ColumnData::I64(v) => *v,
                _ => return Err(bad("bigint")),
            }),
            Self::F32(b) => b.append_option(match data {
                ColumnData::F32(v) => *v,
                // real widened to float: an older value reads back exactly.
                ColumnData::F64(Some(v)) if f64::from(*v as f32) == *v => Some(*v as f32),
                ColumnData::F64(None) => None,
                _ => return Err(bad("real")),
            }),
            Self::F64(b) => b.append_option(match data {
                ColumnData::F32(v) => v.map(f64::from),
                ColumnData::F64(v) => *v,
                _ => return Err(bad("float")),
            }),
            Self::Dec(b, _, scale) => {
                let value = match data {
                    ColumnData::Numeric(None) | ColumnData::F64(None) | ColumnData::F32(None) => None,
                    ColumnData::Numeric(Some(n)) => Some(rescale(n.value(), i32::from(n.scale()), i32::from(*scale))),
                    // tiberius reads money and smallmoney as f64; they have 4 decimals.
                    ColumnData::F64(Some(f)) => Some((f * 10f64.powi(i32::from(*scale))).round() as i128),
                    ColumnData::I32(Some(v)) => Some(rescale(i128::from(*v), 0, i32::from(*scale))),
                    ColumnData::I64(Some(v)) => Some(rescale(i128::from(*v), 0, i32::from(*scale))),
                    _ => return Err(bad("decimal")),
                };
                b.append_option(value)
            }
            Self::Str(b) => match data {
                ColumnData::String(v) => b.append_option(v.as_deref()),
                ColumnData::Guid(v) => b.append_option(v.map(|g| g.to_string().to_uppercase())),
                ColumnData::Xml(v) => b.append_option(v.as_ref().map(|x| x.to_string())),
                _ => return Err(bad("text")),
            },
            Self::Bin(b) => match data {
                ColumnData::Binary(v) => b.append_option(v.as_deref()),
                _ => return Err(bad("binary")),
            },
            Self::Date(b) => {
                let date = NaiveDate::from_sql(data).map_err(|e| e.to_string())?;
                b.append_option(date.map(|d| d.num_days_from_ce() - 719_163))
            }
            Self::Time(b) => {
                let time = NaiveTime::from_sql(data).map_err(|e| e.to_string())?;
                b.append_option(time.map(|t| i64::from(t.num_seconds_from_midnight()) * 1_000_000 + i64::from(t.nanosecond() / 1_000)))
            }
            Self::Ts(b, true) => {
                let at = DateTime::<FixedOffset>::from_sql(data).map_err(|e| e.to_string())?;
                b.append_option(at.map(|t| t.with_timezone(&Utc).timestamp_micros()))
            }
            Self::Ts(b, false) => {
                let at = NaiveDateTime::from_sql(data).map_err(|e| e.to_string())?;
                b.append_option(at.map(|t| t.and_utc().timestamp_micros()))
            }
        }
        Ok(())
    }

    #[allow(clippy::expect_used)] // invariant: precision and scale validated with the schema, 10-byte LSNs, builders made from the schema
    fn finish(&mut self) -> ArrayRef {
        match self {
            Self::Bool(b) => Arc::new(b.finish()),
            Self::I16(b) => Arc::new(b.finish()),
            Self::I32(b) => Arc::new(b.finish()),
            Self::I64(b) => Arc::new(b.finish()),
            Self::F32(b) => Arc::new(b.finish()),
            Self::F64(b) => Arc::new(b.finish()),
            Self::Dec(b, precision, scale) => {
                Arc::new(b.finish().with_precision_and_scale(*precision, *scale).expect("validated precision and scale"))
            }
            Self::Str(b) => Arc::new(b.finish()),
            Self::Bin(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::Time(b) => Arc::new(b.finish()),
            Self::Ts(b, true) => Arc::new(b.finish().with_timezone("UTC")),
            Self::Ts(b, false) => Arc::new(b.finish()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Bool(b) => b.len(),
            Self::I16(b) => b.len(),
            Self::I32(b) => b.len(),
            Self::I64(b) => b.len(),
            Self::F32(b) => b.len(),
            Self::F64(b) => b.len(),
            Self::Dec(b, ..) => b.len(),
            Self::Str(b) => b.len(),
            Self::Bin(b) => b.len(),
            Self::Date(b) => b.len(),
            Self::Time(b) => b.len(),
            Self::Ts(b, _) => b.len(),
        }
    }
}

/// `value` at scale `from` moved to scale `to`, rounding half away from zero as CAST does
/// (how a decimal lands at its column's scale in the log).
pub fn rescale(value: i128, from: i32, to: i32) -> i128 {
    match to - from {
        0 => value,
        up if up > 0 => value.saturating_mul(10i128.pow(up as u32)),
        down => {
            let divisor = 10i128.pow((-down) as u32);
            let (q, r) = (value / divisor, value % divisor);
            // Round half away from zero, as CAST does.
            if r.abs() * 2 >= divisor { q + value.signum() } else { q }
        }
    }
}

/// One change row's CDC columns, read before the captured ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeCoordinates {
    /// `__$start_lsn`.
    pub start_lsn: Lsn,
    /// `__$seqval`.
    pub seqval: Lsn,
    /// `__$operation`.
    pub operation: i32,
}

/// Accumulates change rows into a record batch of `schema.arrow()`.
pub struct BatchBuilder {
    schema: TableSchema,
    columns: Vec<Builder>,
    start_lsn: FixedSizeBinaryBuilder,
    seqval: FixedSizeBinaryBuilder,
    operation: Int32Builder,
    command_id: Int32Builder,
    commit_ts: TimestampMicrosecondBuilder,
    capture_instance: String,
    generation: i64,
    /// The snapshot's LSN, when the rows are a snapshot's.
    snapshot: Option<Lsn>,
}

impl BatchBuilder {
    /// An empty builder for rows of `schema`.
    pub fn new(schema: &TableSchema, capture_instance: &str, generation: u64, capacity: usize) -> Self {
        Self {
            schema: schema.clone(),
            columns: schema.columns.iter().map(|c| Builder::new(c.ty, capacity)).collect(),
            start_lsn: FixedSizeBinaryBuilder::with_capacity(capacity, LSN_BYTES),
            seqval: FixedSizeBinaryBuilder::with_capacity(capacity, LSN_BYTES),
            operation: Int32Builder::with_capacity(capacity),
            command_id: Int32Builder::with_capacity(capacity),
            commit_ts: TimestampMicrosecondBuilder::with_capacity(capacity),
            capture_instance: capture_instance.to_owned(),
            generation: generation as i64,
            snapshot: None,
        }
    }

    /// A builder of snapshot rows: `_snapshot` holds `lsn` (change rows leave it NULL).
    pub fn of_snapshot(mut self, lsn: Lsn) -> Self {
        self.snapshot = Some(lsn);
        self
    }

    /// Rows appended since the last [`Self::finish`].
    pub fn len(&self) -> usize {
        self.operation.len()
    }

    /// Whether no row is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a change row: its coordinates, `__$command_id`, its commit time, and the
    /// captured values in schema order. After an error the builder holds a partial row: drop
    /// it (the stage stops on such an error).
    #[allow(clippy::expect_used)] // invariant: precision and scale validated with the schema, 10-byte LSNs, builders made from the schema
    pub fn append(
        &mut self,
        at: ChangeCoordinates,
        command_id: Option<i32>,
        commit_ts: DateTime<Utc>,
        values: impl Iterator<Item = ColumnData<'static>>,
    ) -> Result<(), RowError> {
        let values: Vec<ColumnData<'static>> = values.collect();
        if values.len() != self.columns.len() {
            return Err(RowError { column: "*".into(), message: format!("row has {} captured values, expected {}", values.len(), self.columns.len()) });
        }
        for (index, data) in values.iter().enumerate() {
            self.columns[index].append(data).map_err(|message| RowError { column: self.schema.columns[index].name.clone(), message })?;
        }
        self.start_lsn.append_value(at.start_lsn.0).expect("10 bytes");
        self.seqval.append_value(at.seqval.0).expect("10 bytes");
        self.operation.append_value(at.operation);
        self.command_id.append_option(command_id);
        self.commit_ts.append_value(commit_ts.timestamp_micros());
        Ok(())
    }

    /// The pending rows as a record batch; the builder is empty afterwards.
    #[allow(clippy::expect_used)] // invariant: builders made from the schema
    pub fn finish(&mut self) -> RecordBatch {
        let arrays: Vec<ArrayRef> = self.columns.iter_mut().map(Builder::finish).collect();
        self.assemble(arrays).expect("builders follow the schema")
    }

    /// Rows whose captured values are built already (a seed's copy, converted to the log's
    /// types): `columns` in schema order, every row at `at` with `commit_ts`. Fails when a
    /// column's type or length is not the schema's, or a key column holds NULL.
    #[allow(clippy::expect_used)] // invariant: 10-byte LSNs
    pub fn from_columns(&mut self, columns: Vec<ArrayRef>, at: ChangeCoordinates, commit_ts: DateTime<Utc>) -> Result<RecordBatch, arrow::error::ArrowError> {
        let rows = columns.first().map_or(0, |c| c.len());
        for _ in 0..rows {
            self.start_lsn.append_value(at.start_lsn.0).expect("10 bytes");
            self.seqval.append_value(at.seqval.0).expect("10 bytes");
            self.operation.append_value(at.operation);
            self.command_id.append_null();
            self.commit_ts.append_value(commit_ts.timestamp_micros());
        }
        self.assemble(columns)
    }

    /// The captured `arrays` and the pending rows' CDC columns as one batch of the log's
    /// layout.
    #[allow(clippy::expect_used)] // invariant: 10-byte LSNs
    fn assemble(&mut self, mut arrays: Vec<ArrayRef>) -> Result<RecordBatch, arrow::error::ArrowError> {
        let rows = self.len();
        arrays.push(Arc::new(self.start_lsn.finish()));
        arrays.push(Arc::new(self.seqval.finish()));
        arrays.push(Arc::new(self.operation.finish()));
        let command_id = self.command_id.finish();
        if self.schema.include_command_id {
            arrays.push(Arc::new(command_id));
        }
        arrays.push(Arc::new(self.commit_ts.finish().with_timezone("UTC")));
        arrays.push(Arc::new(arrow::array::StringArray::from(vec![self.capture_instance.as_str(); rows])));
        arrays.push(Arc::new(arrow::array::Int64Array::from(vec![self.generation; rows])));
        let mut snapshot = FixedSizeBinaryBuilder::with_capacity(rows, LSN_BYTES);
        for _ in 0..rows {
            match self.snapshot {
                Some(lsn) => snapshot.append_value(lsn.0).expect("10 bytes"),
                None => snapshot.append_null(),
            }
        }
        arrays.push(Arc::new(snapshot.finish()));
        debug_assert!(self.columns.iter().all(|c| c.len() == 0));
        RecordBatch::try_new(self.schema.arrow(), arrays)
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use mssql_cdc_core::log::schema::Column;

    #[test]
    fn rows_become_a_batch_of_the_log_schema() {
        let schema = TableSchema {
            columns: vec![
                Column { name: "id".into(), ty: ColumnType::Int32 },
                Column { name: "price".into(), ty: ColumnType::Decimal { precision: 19, scale: 4 } },
                Column { name: "name".into(), ty: ColumnType::String },
            ],
            key: vec!["id".into()],
            include_command_id: false,
        };
        let mut builder = BatchBuilder::new(&schema, "dbo_t", 0, 4);
        let at = ChangeCoordinates { start_lsn: Lsn::parse_hex("2A").unwrap(), seqval: Lsn::parse_hex("2B").unwrap(), operation: 2 };
        let values = vec![ColumnData::I32(Some(7)), ColumnData::F64(Some(12.3456)), ColumnData::String(Some(Cow::Borrowed("x")))];
        builder.append(at, Some(1), Utc::now(), values.into_iter()).unwrap();
        let short = vec![ColumnData::I32(Some(8))];
        assert!(builder.append(at, None, Utc::now(), short.into_iter()).is_err());
        let batch = builder.finish();
        let mut other = BatchBuilder::new(&schema, "dbo_t", 0, 4);
        let wrong = vec![ColumnData::String(None), ColumnData::F64(None), ColumnData::String(None)];
        let error = other.append(at, None, Utc::now(), wrong.into_iter()).unwrap_err();
        assert_eq!(error.column, "id");
        assert_eq!(batch.num_rows(), 1);
        let price = batch.column(1).as_any().downcast_ref::<arrow::array::Decimal128Array>().unwrap();
        assert_eq!(price.value(0), 123_456);
    }

    #[test]
    fn rescale_rounds_half_away_from_zero() {
        assert_eq!(rescale(12345, 2, 4), 1_234_500);
        assert_eq!(rescale(125, 2, 1), 13);
        assert_eq!(rescale(-125, 2, 1), -13);
        assert_eq!(rescale(124, 2, 1), 12);
    }
}
