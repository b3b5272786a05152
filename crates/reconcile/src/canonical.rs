//! The canonical encoding: one text per value, computed the same way from what SQL Server
//! returns over TDS and from what silver holds in Arrow, so a row hashes equally on both sides
//! exactly when its values are equal at the log's precision (`docs/validation.md`).
//!
//! | log type | canonical text |
//! |---|---|
//! | bit | `0` or `1` |
//! | integers | the decimal number |
//! | real, float | the 64-bit IEEE pattern in hex (a `real` widened exactly): bit-exact |
//! | decimal, numeric, money | the value, trailing fractional zeros dropped (`1.50` → `1.5`, `-0.00` → `0`) |
//! | text types | the text as stored, trailing spaces of `char(n)` included |
//! | binary types | lower-case hex |
//! | date | days since 1970-01-01 |
//! | time | microseconds since midnight (the log's precision; finer digits truncated; silver's `HH:MM:SS.ffffff` text read back) |
//! | datetime, datetime2, smalldatetime | microseconds since 1970-01-01 of the wall-clock time |
//! | datetimeoffset | microseconds since 1970-01-01 UTC: the instant (the offset is not kept) |
//! | uniqueidentifier | lower-case `8-4-4-4-12` |
//!
//! A row's encoding is each compared column's value in column order, NULL as `N;` and a value
//! as `<length>:<text>;`, so NULL never equals the empty string; its hash is the first 16 bytes
//! of the SHA-256 of that encoding, in hex.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, Time64MicrosecondType, Time64NanosecondType, TimeUnit,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType, TimestampSecondType, UInt8Type,
};
use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use mssql_cdc_core::log::ColumnType;
use mssql_cdc_source::rows::rescale;
use sha2::{Digest, Sha256};
use tiberius::{ColumnData, FromSql};

/// The canonical text of a SQL Server value read over TDS, under its log type; `None` for NULL.
pub fn sql_value(data: &ColumnData<'static>, ty: ColumnType) -> Result<Option<String>, String> {
    let bad = |what: &str| format!("a {what} column read {}", data_kind(data));
    Ok(match ty {
        ColumnType::Boolean => match data {
            ColumnData::Bit(v) => v.map(|b| if b { "1" } else { "0" }.to_owned()),
            _ => return Err(bad("bit")),
        },
        ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64 => match data {
            ColumnData::U8(v) => v.map(|v| v.to_string()),
            ColumnData::I16(v) => v.map(|v| v.to_string()),
            ColumnData::I32(v) => v.map(|v| v.to_string()),
            ColumnData::I64(v) => v.map(|v| v.to_string()),
            _ => return Err(bad("integer")),
        },
        ColumnType::Float32 | ColumnType::Float64 => match data {
            ColumnData::F32(v) => v.map(|v| float(f64::from(v))),
            ColumnData::F64(v) => v.map(float),
            _ => return Err(bad("float")),
        },
        ColumnType::Decimal { scale, .. } => match data {
            ColumnData::Numeric(n) => n.map(|n| decimal(rescale(n.value(), i32::from(n.scale()), i32::from(scale)), scale)),
            // money and smallmoney arrive as floats; the log rounds them to the column's scale.
            ColumnData::F64(v) => v.map(|f| decimal((f * 10f64.powi(i32::from(scale))).round() as i128, scale)),
            ColumnData::I32(v) => v.map(|v| decimal(rescale(i128::from(v), 0, i32::from(scale)), scale)),
            ColumnData::I64(v) => v.map(|v| decimal(rescale(i128::from(v), 0, i32::from(scale)), scale)),
            _ => return Err(bad("decimal")),
        },
        ColumnType::String => match data {
            ColumnData::String(v) => v.as_deref().map(str::to_owned),
            ColumnData::Guid(v) => v.map(|g| g.to_string().to_uppercase()),
            ColumnData::Xml(v) => v.as_ref().map(|x| x.to_string()),
            _ => return Err(bad("text")),
        },
        ColumnType::Uuid => match data {
            ColumnData::Guid(v) => v.map(|g| g.to_string().to_lowercase()),
            ColumnData::String(v) => v.as_deref().map(str::to_lowercase),
            _ => return Err(bad("uniqueidentifier")),
        },
        ColumnType::Binary => match data {
            ColumnData::Binary(v) => v.as_deref().map(hex),
            _ => return Err(bad("binary")),
        },
        ColumnType::Date => NaiveDate::from_sql(data).map_err(|e| e.to_string())?.map(|d| days(d).to_string()),
        ColumnType::Time => NaiveTime::from_sql(data).map_err(|e| e.to_string())?.map(|t| micros_of_day(t).to_string()),
        ColumnType::LocalTimestamp => NaiveDateTime::from_sql(data).map_err(|e| e.to_string())?.map(|t| t.and_utc().timestamp_micros().to_string()),
        ColumnType::Timestamp => DateTime::<FixedOffset>::from_sql(data).map_err(|e| e.to_string())?.map(|t| t.timestamp_micros().to_string()),
    })
}

/// The canonical text of silver's value at `row` of `array`, for a column of log type `ty`;
/// `None` for NULL.
pub fn arrow_value(array: &ArrayRef, row: usize, ty: ColumnType) -> Result<Option<String>, String> {
    if array.is_null(row) {
        return Ok(None);
    }
    let bad = || format!("silver holds {} for a {ty:?} column", array.data_type());
    let text = match array.data_type() {
        DataType::Boolean => if array.as_boolean().value(row) { "1" } else { "0" }.to_owned(),
        DataType::Int8 => array.as_primitive::<Int8Type>().value(row).to_string(),
        DataType::UInt8 => array.as_primitive::<UInt8Type>().value(row).to_string(),
        DataType::Int16 => array.as_primitive::<Int16Type>().value(row).to_string(),
        DataType::Int32 => array.as_primitive::<Int32Type>().value(row).to_string(),
        DataType::Int64 if ty == ColumnType::Time => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::Int64 => array.as_primitive::<Int64Type>().value(row).to_string(),
        DataType::Float32 => float(f64::from(array.as_primitive::<Float32Type>().value(row))),
        DataType::Float64 => float(array.as_primitive::<Float64Type>().value(row)),
        DataType::Decimal128(_, scale) => decimal(array.as_primitive::<Decimal128Type>().value(row), *scale),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let text = match array.data_type() {
                DataType::Utf8 => array.as_string::<i32>().value(row),
                DataType::LargeUtf8 => array.as_string::<i64>().value(row),
                _ => array.as_string_view().value(row),
            };
            match ty {
                ColumnType::Uuid => text.to_lowercase(),
                // Delta has no time type: the lake keeps `time` as its text (`HH:MM:SS.ffffff`).
                ColumnType::Time => micros_of_day(NaiveTime::parse_from_str(text, "%H:%M:%S%.f").map_err(|e| format!("silver's time `{text}`: {e}"))?).to_string(),
                _ => text.to_owned(),
            }
        }
        DataType::Binary => hex(array.as_binary::<i32>().value(row)),
        DataType::LargeBinary => hex(array.as_binary::<i64>().value(row)),
        DataType::BinaryView => hex(array.as_binary_view().value(row)),
        DataType::Date32 => array.as_primitive::<Date32Type>().value(row).to_string(),
        DataType::Time64(TimeUnit::Microsecond) => array.as_primitive::<Time64MicrosecondType>().value(row).to_string(),
        DataType::Time64(TimeUnit::Nanosecond) => (array.as_primitive::<Time64NanosecondType>().value(row) / 1_000).to_string(),
        DataType::Timestamp(unit, _) => {
            let micros = match unit {
                TimeUnit::Second => array.as_primitive::<TimestampSecondType>().value(row).saturating_mul(1_000_000),
                TimeUnit::Millisecond => array.as_primitive::<TimestampMillisecondType>().value(row).saturating_mul(1_000),
                TimeUnit::Microsecond => array.as_primitive::<TimestampMicrosecondType>().value(row),
                TimeUnit::Nanosecond => array.as_primitive::<TimestampNanosecondType>().value(row).div_euclid(1_000),
            };
            micros.to_string()
        }
        _ => return Err(bad()),
    };
    Ok(Some(text))
}

/// A row's hash from its values' canonical texts, in column order.
pub fn row_hash<'a>(values: impl IntoIterator<Item = Option<&'a str>>) -> String {
    let mut hasher = Sha256::new();
    for value in values {
        match value {
            None => hasher.update(b"N;"),
            Some(text) => {
                hasher.update(text.len().to_string().as_bytes());
                hasher.update(b":");
                hasher.update(text.as_bytes());
                hasher.update(b";");
            }
        }
    }
    hex(&hasher.finalize()[..16])
}

/// A key as the report shows it: a JSON object of the key columns' canonical texts (integers
/// as numbers), from (name, type, value) in key order.
pub fn key_json<'n, 'v>(fields: impl IntoIterator<Item = (&'n str, ColumnType, Option<&'v str>)>) -> String {
    // Written by hand to keep the key's column order (a JSON map may sort its keys).
    let fields: Vec<String> = fields
        .into_iter()
        .map(|(name, ty, value)| {
            let json = match (value, ty) {
                (None, _) => serde_json::Value::Null,
                (Some(text), ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64) => {
                    text.parse::<i64>().map_or_else(|_| serde_json::Value::String(text.to_owned()), serde_json::Value::from)
                }
                (Some(text), _) => serde_json::Value::String(text.to_owned()),
            };
            format!("{}:{json}", serde_json::Value::String(name.to_owned()))
        })
        .collect();
    format!("{{{}}}", fields.join(","))
}

fn float(value: f64) -> String {
    format!("{:016x}", value.to_bits())
}

/// `value / 10^scale` as text, trailing fractional zeros dropped.
pub fn decimal(value: i128, scale: i8) -> String {
    if value == 0 {
        return "0".to_owned();
    }
    let (mut value, mut scale) = (value, i32::from(scale));
    while scale > 0 && value % 10 == 0 {
        value /= 10;
        scale -= 1;
    }
    if scale <= 0 {
        let zeros = "0".repeat(scale.unsigned_abs() as usize);
        return format!("{value}{zeros}");
    }
    let digits = value.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale - digits.len() + 1)) } else { digits };
    let (whole, fraction) = padded.split_at(padded.len() - scale);
    format!("{}{whole}.{fraction}", if value < 0 { "-" } else { "" })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn days(date: NaiveDate) -> i64 {
    (date - NaiveDate::default()).num_days()
}

fn micros_of_day(time: NaiveTime) -> i64 {
    i64::from(time.num_seconds_from_midnight()) * 1_000_000 + i64::from(time.nanosecond() / 1_000)
}

fn data_kind(data: &ColumnData<'static>) -> &'static str {
    match data {
        ColumnData::U8(_) => "tinyint",
        ColumnData::I16(_) => "smallint",
        ColumnData::I32(_) => "int",
        ColumnData::I64(_) => "bigint",
        ColumnData::F32(_) => "real",
        ColumnData::F64(_) => "float",
        ColumnData::Bit(_) => "bit",
        ColumnData::String(_) => "text",
        ColumnData::Guid(_) => "uniqueidentifier",
        ColumnData::Binary(_) => "binary",
        ColumnData::Numeric(_) => "numeric",
        ColumnData::Xml(_) => "xml",
        _ => "a date or time",
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;

    use arrow::array::{Decimal128Array, Float32Array, StringArray, TimestampMicrosecondArray};
    use tiberius::numeric::Numeric;

    use super::*;

    /// Decimals compare by value: scale and trailing zeros do not matter, the sign does.
    #[test]
    fn decimals_are_canonical_by_value() {
        assert_eq!(decimal(150, 2), "1.5");
        assert_eq!(decimal(-5, 3), "-0.005");
        assert_eq!(decimal(0, 4), "0");
        assert_eq!(decimal(1200, 0), "1200");
        assert_eq!(decimal(12, -2), "1200");
        let sql = sql_value(&ColumnData::Numeric(Some(Numeric::new_with_scale(1500, 3))), ColumnType::Decimal { precision: 10, scale: 2 }).unwrap();
        let array: ArrayRef = Arc::new(Decimal128Array::from(vec![150]).with_precision_and_scale(10, 2).unwrap());
        assert_eq!(sql, arrow_value(&array, 0, ColumnType::Decimal { precision: 10, scale: 2 }).unwrap());
    }

    /// A `real` hashes by its bits widened to 64; NULL is not the empty string; a GUID's case
    /// does not matter; a datetimeoffset is its instant.
    #[test]
    fn both_sides_agree_and_null_differs_from_empty() {
        let real: ArrayRef = Arc::new(Float32Array::from(vec![0.1f32]));
        assert_eq!(sql_value(&ColumnData::F32(Some(0.1)), ColumnType::Float32).unwrap(), arrow_value(&real, 0, ColumnType::Float32).unwrap());
        assert_ne!(row_hash([None]), row_hash([Some("")]));
        assert_ne!(row_hash([Some("a"), Some("bc")]), row_hash([Some("ab"), Some("c")]));
        let guid = uuid_text();
        let text: ArrayRef = Arc::new(StringArray::from(vec![guid.to_uppercase()]));
        let sql = sql_value(&ColumnData::String(Some(Cow::Owned(guid.clone()))), ColumnType::Uuid).unwrap();
        assert_eq!(sql, arrow_value(&text, 0, ColumnType::Uuid).unwrap());
        let at = DateTime::parse_from_rfc3339("2026-01-01T10:00:00.123456+02:00").unwrap();
        let utc: ArrayRef = Arc::new(TimestampMicrosecondArray::from(vec![at.timestamp_micros()]).with_timezone("UTC"));
        assert_eq!(arrow_value(&utc, 0, ColumnType::Timestamp).unwrap().unwrap(), "1767254400123456");
    }

    /// Silver keeps `time` as text; it reads back to the same microseconds as the TDS value.
    #[test]
    fn a_time_kept_as_text_equals_its_tds_value() {
        let text: ArrayRef = Arc::new(StringArray::from(vec!["12:34:56.123456", "00:00:00"]));
        assert_eq!(arrow_value(&text, 0, ColumnType::Time).unwrap().unwrap(), (45_296_123_456i64).to_string());
        assert_eq!(arrow_value(&text, 1, ColumnType::Time).unwrap().unwrap(), "0");
        let time = NaiveTime::from_hms_nano_opt(12, 34, 56, 123_456_700).unwrap();
        assert_eq!(micros_of_day(time), 45_296_123_456);
    }

    fn uuid_text() -> String {
        "6f9619ff-8b86-d011-b42d-00c04fc964ff".to_owned()
    }

    /// Keys show as JSON with integers as numbers.
    #[test]
    fn keys_show_as_json() {
        let json = key_json([("id", ColumnType::Int32, Some("7")), ("code", ColumnType::String, Some("x"))]);
        assert_eq!(json, r#"{"id":7,"code":"x"}"#);
    }
}
