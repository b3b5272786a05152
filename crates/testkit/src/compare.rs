//! The demo's closing check (and any test's): silver, read back from Delta, against the simulator's table,
//! column by column under each column's type, keyed by the primary key.

use std::collections::BTreeMap;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Time64MicrosecondType, TimestampMicrosecondType, UInt8Type};
use chrono::{NaiveDate, NaiveTime};
use mssql_cdc_sim::{ResultSet, Value};

/// How silver compares with the source table.
#[derive(Debug, Default, PartialEq)]
pub struct Comparison {
    /// Rows in the source table.
    pub source_rows: usize,
    /// Rows in silver.
    pub silver_rows: usize,
    /// Columns compared (the source table's, found in silver).
    pub columns: usize,
    /// Source columns silver lacks.
    pub missing_columns: Vec<String>,
    /// Keys in the source table and not in silver.
    pub missing: usize,
    /// Keys in silver and not in the source table.
    pub extra: usize,
    /// Keys in both whose values differ.
    pub differing: usize,
    /// The first few differences, described.
    pub examples: Vec<String>,
}

impl Comparison {
    /// Whether silver equals the table.
    pub fn equal(&self) -> bool {
        self.missing_columns.is_empty() && self.missing == 0 && self.extra == 0 && self.differing == 0
    }
}

/// Compares `source` (a `SELECT *` of the table) with silver's batches, matching rows on the
/// source's column `key`.
pub fn compare(source: &ResultSet, silver: &[RecordBatch], key: &str) -> Result<Comparison, String> {
    let mut out = Comparison { source_rows: source.rows.len(), ..Comparison::default() };
    let key_index = source.columns.iter().position(|c| c.name == key).ok_or_else(|| format!("the source has no column `{key}`"))?;
    // Every silver row by key: (batch, row).
    let mut silver_rows: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut columns: Vec<Vec<Option<ArrayRef>>> = Vec::new();
    for (b, batch) in silver.iter().enumerate() {
        let mut arrays = Vec::new();
        for column in &source.columns {
            arrays.push(match batch.column_by_name(&column.name) {
                Some(array) => Some(comparable(array)?),
                None => None,
            });
        }
        let keys = arrays[key_index].clone().ok_or_else(|| format!("silver has no column `{key}`"))?;
        for row in 0..batch.num_rows() {
            let text = display(&keys, row);
            if silver_rows.insert(text.clone(), (b, row)).is_some() {
                out.examples.push(format!("{key} = {text} appears twice in silver"));
                out.differing += 1;
            }
        }
        columns.push(arrays);
        out.silver_rows += batch.num_rows();
    }
    if let Some(first) = columns.first() {
        for (column, array) in source.columns.iter().zip(first) {
            match array {
                Some(_) => out.columns += 1,
                None => out.missing_columns.push(column.name.clone()),
            }
        }
    }
    let mut seen = 0;
    for row in &source.rows {
        let text = sim_display(&row[key_index]);
        let Some(&(b, r)) = silver_rows.get(&text) else {
            out.missing += 1;
            if out.examples.len() < 5 {
                out.examples.push(format!("{key} = {text} is missing from silver"));
            }
            continue;
        };
        seen += 1;
        for (index, value) in row.iter().enumerate() {
            let Some(array) = &columns[b][index] else { continue };
            if !matches(value, array, r) {
                out.differing += 1;
                if out.examples.len() < 5 {
                    out.examples.push(format!("{key} = {text}: `{}` is {} in silver, {} in the source", source.columns[index].name, display(array, r), sim_display(value)));
                }
                break;
            }
        }
    }
    out.extra = silver_rows.len().saturating_sub(seen);
    Ok(out)
}

/// View types (what DataFusion returns for strings and binaries) cast to the plain ones.
fn comparable(array: &ArrayRef) -> Result<ArrayRef, String> {
    let target = match array.data_type() {
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        _ => return Ok(array.clone()),
    };
    cast(array, &target).map_err(|e| e.to_string())
}

/// Whether the source value equals silver's cell under the cell's type.
#[allow(clippy::expect_used)] // invariant: a constant date
fn matches(value: &Value, array: &ArrayRef, row: usize) -> bool {
    if array.is_null(row) || matches!(value, Value::Null) {
        return array.is_null(row) && matches!(value, Value::Null);
    }
    match (value, array.data_type()) {
        (Value::Bit(b), DataType::Boolean) => array.as_boolean().value(row) == *b,
        (Value::Int(i), DataType::Int64) => array.as_primitive::<Int64Type>().value(row) == *i,
        (Value::Int(i), DataType::Int32) => i64::from(array.as_primitive::<Int32Type>().value(row)) == *i,
        (Value::Int(i), DataType::Int16) => i64::from(array.as_primitive::<Int16Type>().value(row)) == *i,
        (Value::Int(i), DataType::UInt8) => i64::from(array.as_primitive::<UInt8Type>().value(row)) == *i,
        (Value::Numeric { value, scale }, DataType::Decimal128(_, s)) => {
            rescale(*value, *scale, *s as u8) == Some(array.as_primitive::<Decimal128Type>().value(row))
        }
        (Value::Float(f), DataType::Float32) => array.as_primitive::<Float32Type>().value(row) == *f as f32,
        (Value::Float(f), DataType::Float64) => array.as_primitive::<Float64Type>().value(row) == *f,
        (Value::Text(s), DataType::Utf8) => array.as_string::<i32>().value(row) == s,
        (Value::Guid(g), DataType::Utf8) => array.as_string::<i32>().value(row).eq_ignore_ascii_case(&g.to_string()),
        (Value::Binary(bytes), DataType::Binary) => array.as_binary::<i32>().value(row) == bytes.as_slice(),
        (Value::Date(d), DataType::Date32) => {
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("a date");
            i64::from(array.as_primitive::<Date32Type>().value(row)) == (*d - epoch).num_days()
        }
        (Value::Time(t), DataType::Time64(_)) => {
            let micros = (*t - NaiveTime::MIN).num_microseconds();
            micros == Some(array.as_primitive::<Time64MicrosecondType>().value(row))
        }
        (Value::DateTime(t), DataType::Timestamp(_, None)) => array.as_primitive::<TimestampMicrosecondType>().value(row) == t.and_utc().timestamp_micros(),
        (Value::DateTimeOffset(t), DataType::Timestamp(_, Some(_))) => array.as_primitive::<TimestampMicrosecondType>().value(row) == t.timestamp_micros(),
        _ => false,
    }
}

/// `value / 10^from` as an unscaled value of scale `to`, when exact.
fn rescale(value: i128, from: u8, to: u8) -> Option<i128> {
    if to >= from {
        value.checked_mul(10i128.checked_pow(u32::from(to - from))?)
    } else {
        let factor = 10i128.checked_pow(u32::from(from - to))?;
        (value % factor == 0).then(|| value / factor)
    }
}

fn display(array: &ArrayRef, row: usize) -> String {
    arrow::util::display::array_value_to_string(array, row).unwrap_or_else(|_| "?".to_owned())
}

fn sim_display(value: &Value) -> String {
    match value {
        Value::Null => "NULL".to_owned(),
        Value::Int(i) => i.to_string(),
        Value::Text(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Decimal128Array, Int64Array, StringArray};
    use arrow::datatypes::{Field, Schema};
    use mssql_cdc_sim::sql::ColumnMeta;
    use mssql_cdc_sim::types::SqlType;

    use super::*;

    fn source(rows: Vec<Vec<Value>>) -> ResultSet {
        let column = |name: &str| ColumnMeta { name: name.into(), ty: SqlType::BigInt, nullable: true };
        ResultSet { columns: vec![column("id"), column("status"), column("amount")], rows }
    }

    fn silver(ids: &[i64], statuses: &[Option<&str>], cents: &[i128]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("status", DataType::Utf8, true),
            Field::new("amount", DataType::Decimal128(18, 2), false),
            Field::new("_start_lsn", DataType::Utf8, true),
        ]);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(ids.to_vec())),
            Arc::new(StringArray::from(statuses.to_vec())),
            Arc::new(Decimal128Array::from(cents.to_vec()).with_precision_and_scale(18, 2).unwrap()),
            Arc::new(StringArray::from(vec![None::<&str>; ids.len()])),
        ];
        RecordBatch::try_new(Arc::new(schema), columns).unwrap()
    }

    fn row(id: i64, status: Option<&str>, cents: i128) -> Vec<Value> {
        vec![Value::Int(id), status.map_or(Value::Null, |s| Value::Text(s.into())), Value::Numeric { value: cents, scale: 2 }]
    }

    /// Equal tables compare equal, whatever the row order and silver's extra columns.
    #[test]
    fn equal_tables_are_equal() {
        let table = source(vec![row(2, None, 150), row(1, Some("paid"), 1000)]);
        let found = compare(&table, &[silver(&[1, 2], &[Some("paid"), None], &[1000, 150])], "id").unwrap();
        assert!(found.equal(), "{found:?}");
        assert_eq!((found.source_rows, found.silver_rows, found.columns), (2, 2, 3));
    }

    /// Each kind of difference is counted: a missing row, an extra row, a changed value, a
    /// NULL against a value, a scale-equal decimal that differs.
    #[test]
    fn differences_are_counted_by_kind() {
        let table = source(vec![row(1, Some("paid"), 1000), row(2, Some("new"), 150), row(3, None, 1)]);
        let found = compare(&table, &[silver(&[1, 2, 4], &[Some("paid"), None, Some("x")], &[1001, 150, 1])], "id").unwrap();
        assert!(!found.equal());
        assert_eq!((found.missing, found.extra, found.differing), (1, 1, 2), "{found:?}");
        assert!(found.examples.iter().any(|e| e.contains("id = 3 is missing")), "{:?}", found.examples);
    }

    /// Decimals compare by value across scales, and only exactly.
    #[test]
    fn decimals_are_rescaled_exactly() {
        assert_eq!(rescale(15, 1, 2), Some(150));
        assert_eq!(rescale(150, 2, 1), Some(15));
        assert_eq!(rescale(151, 2, 1), None);
    }
}
