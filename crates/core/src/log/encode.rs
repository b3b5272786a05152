//! Encoding the rows of an Arrow batch as data records: JSON objects, or Avro datums in the
//! Confluent wire format (magic byte 0, the schema id as 4 big-endian bytes, the datum).
//!
//! The encodings of every type are listed in `docs/connectors/mssql-source.md`; the tests here
//! decode what we write with `apache-avro` and `serde_json`, and the end-to-end tests decode it
//! with Python's `confluent-kafka`.

use arrow::array::{
    Array, AsArray, BinaryArray, BooleanArray, Date32Array, Decimal128Array, FixedSizeBinaryArray, Float32Array,
    Float64Array, Int16Array, Int32Array, Int64Array, RecordBatch, StringArray, Time64MicrosecondArray,
    TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, TimeUnit};
use base64::Engine;

use super::schema::TableSchema;

/// Why a row could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The batch's columns do not match the schema it claims.
    #[error("column `{column}` has Arrow type {found}, which the log does not encode")]
    UnsupportedType {
        /// The column.
        column: String,
        /// Its Arrow type.
        found: String,
    },
    /// A key column or a metadata column held NULL.
    #[error("column `{column}` is NULL in row {row}, but the log requires a value there")]
    UnexpectedNull {
        /// The column.
        column: String,
        /// The row within the batch.
        row: usize,
    },
}

/// A typed view of one column.
enum Col<'a> {
    Bool(&'a BooleanArray),
    I16(&'a Int16Array),
    I32(&'a Int32Array),
    I64(&'a Int64Array),
    F32(&'a Float32Array),
    F64(&'a Float64Array),
    Dec(&'a Decimal128Array, i8),
    Str(&'a StringArray),
    Bin(&'a BinaryArray),
    Fixed(&'a FixedSizeBinaryArray),
    Date(&'a Date32Array),
    Time(&'a Time64MicrosecondArray),
    Ts(&'a TimestampMicrosecondArray, bool),
}

struct Field<'a> {
    name: String,
    json_key: Vec<u8>,
    col: Col<'a>,
    /// Avro union `["null", T]`.
    optional: bool,
}

/// Encodes the rows of one batch; build once per batch, call per row.
pub struct RowEncoder<'a> {
    value: Vec<Field<'a>>,
    key: Vec<usize>,
}

impl<'a> RowEncoder<'a> {
    /// Views `batch`, whose schema is `schema.arrow()`.
    pub fn new(schema: &TableSchema, batch: &'a RecordBatch) -> Result<Self, EncodeError> {
        let arrow = batch.schema();
        let mut value = Vec::with_capacity(arrow.fields().len());
        for (index, field) in arrow.fields().iter().enumerate() {
            let array = batch.column(index);
            let col = view(array.as_ref()).ok_or_else(|| EncodeError::UnsupportedType {
                column: field.name().clone(),
                found: field.data_type().to_string(),
            })?;
            let mut json_key = serde_json::to_vec(field.name()).unwrap_or_default();
            json_key.push(b':');
            value.push(Field { name: field.name().clone(), json_key, col, optional: field.is_nullable() });
        }
        Ok(Self { value, key: schema.key_indexes() })
    }

    /// The rows in the batch.
    pub fn rows(&self) -> usize {
        self.value.first().map_or(0, |f| len(&f.col))
    }

    /// Appends row `row`'s value as a JSON object.
    pub fn value_json(&self, row: usize, out: &mut Vec<u8>) {
        json_object(self.value.iter(), row, out);
    }

    /// Appends row `row`'s key (the key columns) as a JSON object.
    pub fn key_json(&self, row: usize, out: &mut Vec<u8>) {
        json_object(self.key.iter().map(|&i| &self.value[i]), row, out);
    }

    /// Appends row `row`'s value as an Avro datum (no wire header).
    pub fn value_avro(&self, row: usize, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.value.iter().try_for_each(|field| avro_field(field, row, out))
    }

    /// Appends row `row`'s key as an Avro datum (no wire header).
    pub fn key_avro(&self, row: usize, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.key.iter().try_for_each(|&i| {
            let field = &self.value[i];
            avro_field(&Field { name: field.name.clone(), json_key: Vec::new(), col: reborrow(&field.col), optional: false }, row, out)
        })
    }
}

/// Writes the Confluent wire-format header: magic byte 0 and the schema id.
pub fn confluent_header(schema_id: u32, out: &mut Vec<u8>) {
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
}

fn reborrow<'a>(col: &Col<'a>) -> Col<'a> {
    match col {
        Col::Bool(a) => Col::Bool(a),
        Col::I16(a) => Col::I16(a),
        Col::I32(a) => Col::I32(a),
        Col::I64(a) => Col::I64(a),
        Col::F32(a) => Col::F32(a),
        Col::F64(a) => Col::F64(a),
        Col::Dec(a, s) => Col::Dec(a, *s),
        Col::Str(a) => Col::Str(a),
        Col::Bin(a) => Col::Bin(a),
        Col::Fixed(a) => Col::Fixed(a),
        Col::Date(a) => Col::Date(a),
        Col::Time(a) => Col::Time(a),
        Col::Ts(a, utc) => Col::Ts(a, *utc),
    }
}

fn view(array: &dyn Array) -> Option<Col<'_>> {
    Some(match array.data_type() {
        DataType::Boolean => Col::Bool(array.as_boolean()),
        DataType::Int16 => Col::I16(array.as_primitive()),
        DataType::Int32 => Col::I32(array.as_primitive()),
        DataType::Int64 => Col::I64(array.as_primitive()),
        DataType::Float32 => Col::F32(array.as_primitive()),
        DataType::Float64 => Col::F64(array.as_primitive()),
        DataType::Decimal128(_, scale) => Col::Dec(array.as_primitive(), *scale),
        DataType::Utf8 => Col::Str(array.as_string()),
        DataType::Binary => Col::Bin(array.as_binary()),
        DataType::FixedSizeBinary(_) => Col::Fixed(array.as_fixed_size_binary()),
        DataType::Date32 => Col::Date(array.as_primitive()),
        DataType::Time64(TimeUnit::Microsecond) => Col::Time(array.as_primitive()),
        DataType::Timestamp(TimeUnit::Microsecond, zone) => Col::Ts(array.as_primitive(), zone.is_some()),
        _ => return None,
    })
}

fn len(col: &Col<'_>) -> usize {
    match col {
        Col::Bool(a) => a.len(),
        Col::I16(a) => a.len(),
        Col::I32(a) => a.len(),
        Col::I64(a) => a.len(),
        Col::F32(a) => a.len(),
        Col::F64(a) => a.len(),
        Col::Dec(a, _) => a.len(),
        Col::Str(a) => a.len(),
        Col::Bin(a) => a.len(),
        Col::Fixed(a) => a.len(),
        Col::Date(a) => a.len(),
        Col::Time(a) => a.len(),
        Col::Ts(a, _) => a.len(),
    }
}

fn is_null(col: &Col<'_>, row: usize) -> bool {
    match col {
        Col::Bool(a) => a.is_null(row),
        Col::I16(a) => a.is_null(row),
        Col::I32(a) => a.is_null(row),
        Col::I64(a) => a.is_null(row),
        Col::F32(a) => a.is_null(row),
        Col::F64(a) => a.is_null(row),
        Col::Dec(a, _) => a.is_null(row),
        Col::Str(a) => a.is_null(row),
        Col::Bin(a) => a.is_null(row),
        Col::Fixed(a) => a.is_null(row),
        Col::Date(a) => a.is_null(row),
        Col::Time(a) => a.is_null(row),
        Col::Ts(a, _) => a.is_null(row),
    }
}

fn json_object<'f, 'a: 'f>(fields: impl Iterator<Item = &'f Field<'a>>, row: usize, out: &mut Vec<u8>) {
    out.push(b'{');
    for (n, field) in fields.enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&field.json_key);
        json_value(&field.col, row, out);
    }
    out.push(b'}');
}

fn json_value(col: &Col<'_>, row: usize, out: &mut Vec<u8>) {
    use std::io::Write;
    if is_null(col, row) {
        out.extend_from_slice(b"null");
        return;
    }
    let _ = match col {
        Col::Bool(a) => write!(out, "{}", a.value(row)),
        Col::I16(a) => write!(out, "{}", a.value(row)),
        Col::I32(a) => write!(out, "{}", a.value(row)),
        Col::I64(a) => write!(out, "{}", a.value(row)),
        Col::F32(a) => json_float(f64::from(a.value(row)), out),
        Col::F64(a) => json_float(a.value(row), out),
        Col::Dec(a, scale) => write!(out, "\"{}\"", decimal_text(a.value(row), *scale)),
        Col::Str(a) => serde_json::to_writer(&mut *out, a.value(row)).map_err(std::io::Error::other),
        Col::Bin(a) => write!(out, "\"{}\"", base64::engine::general_purpose::STANDARD.encode(a.value(row))),
        Col::Fixed(a) => {
            out.extend_from_slice(b"\"0x");
            push_hex(a.value(row), out);
            out.push(b'"');
            Ok(())
        }
        Col::Date(a) => write!(out, "\"{}\"", date_text(a.value(row))),
        Col::Time(a) => write!(out, "\"{}\"", time_text(a.value(row))),
        Col::Ts(a, utc) => {
            out.push(b'"');
            push_timestamp_text(a.value(row), out);
            out.extend_from_slice(if *utc { b"Z\"" } else { b"\"" });
            Ok(())
        }
    };
}

fn json_float(value: f64, out: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Write;
    if value.is_finite() { write!(out, "{value}") } else { write!(out, "null") }
}

/// An unscaled decimal as text: `12345` at scale 2 is `123.45`.
pub fn decimal_text(unscaled: i128, scale: i8) -> String {
    if scale <= 0 {
        return (unscaled * 10i128.pow(u32::from(scale.unsigned_abs()))).to_string();
    }
    let digits = unscaled.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{}{int}.{frac}", if unscaled < 0 { "-" } else { "" })
}

/// A date (days since 1970-01-01) as the JSON format writes it: `YYYY-MM-DD`.
pub fn date_text(days: i32) -> String {
    let date = chrono::NaiveDate::from_num_days_from_ce_opt(days + 719_163).unwrap_or_default();
    date.format("%Y-%m-%d").to_string()
}

/// A time of day (microseconds since midnight) as the JSON format writes it: `HH:MM:SS.ffffff`.
pub fn time_text(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    format!("{:02}:{:02}:{:02}.{frac:06}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// A local timestamp (microseconds since 1970-01-01) as the JSON format writes it:
/// `YYYY-MM-DDTHH:MM:SS.ffffff`.
pub fn timestamp_text(micros: i64) -> String {
    let mut out = Vec::with_capacity(26);
    push_timestamp_text(micros, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

/// Appends [`timestamp_text`] to `out`. Years 0 to 9999 (all SQL Server can hold) are written
/// digit by digit: chrono's formatter walks its format string for every value, which was 39%
/// of the source's JSON encoding (docs/performance.md); other years go through chrono.
pub fn push_timestamp_text(micros: i64, out: &mut Vec<u8>) {
    use chrono::{Datelike, Timelike};
    let at = chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default().naive_utc();
    let Ok(year) = u32::try_from(at.year()) else { return push_timestamp_by_chrono(at, out) };
    if year > 9999 {
        return push_timestamp_by_chrono(at, out);
    }
    push_digits(year, 4, out);
    out.push(b'-');
    push_digits(at.month(), 2, out);
    out.push(b'-');
    push_digits(at.day(), 2, out);
    out.push(b'T');
    push_digits(at.hour(), 2, out);
    out.push(b':');
    push_digits(at.minute(), 2, out);
    out.push(b':');
    push_digits(at.second(), 2, out);
    out.push(b'.');
    push_digits(at.nanosecond() / 1_000, 6, out);
}

fn push_timestamp_by_chrono(at: chrono::NaiveDateTime, out: &mut Vec<u8>) {
    out.extend_from_slice(at.format("%Y-%m-%dT%H:%M:%S%.6f").to_string().as_bytes());
}

/// Appends `value` as exactly `width` decimal digits (zero-padded; `value` must fit).
fn push_digits(value: u32, width: u32, out: &mut Vec<u8>) {
    for place in (0..width).rev() {
        out.push(b'0' + (value / 10_u32.pow(place) % 10) as u8);
    }
}

/// Appends `bytes` as upper-case hex digits, two per byte.
pub fn push_hex(bytes: &[u8], out: &mut Vec<u8>) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    out.reserve(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)]);
        out.push(DIGITS[usize::from(byte & 0x0F)]);
    }
}

/// Appends an Avro `long` (zig-zag varint).
pub fn avro_long(value: i64, out: &mut Vec<u8>) {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn avro_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    avro_long(bytes.len() as i64, out);
    out.extend_from_slice(bytes);
}

/// The shortest big-endian two's-complement bytes of `value` (Avro's decimal encoding).
pub fn twos_complement(value: i128) -> Vec<u8> {
    let bytes = value.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (byte, next) = (bytes[start], bytes[start + 1]);
        let redundant = (byte == 0x00 && next & 0x80 == 0) || (byte == 0xFF && next & 0x80 != 0);
        if !redundant {
            break;
        }
        start += 1;
    }
    bytes[start..].to_vec()
}

fn avro_field(field: &Field<'_>, row: usize, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let col = &field.col;
    if is_null(col, row) {
        if !field.optional {
            return Err(EncodeError::UnexpectedNull { column: field.name.clone(), row });
        }
        avro_long(0, out);
        return Ok(());
    }
    if field.optional {
        avro_long(1, out);
    }
    match col {
        Col::Bool(a) => out.push(u8::from(a.value(row))),
        Col::I16(a) => avro_long(i64::from(a.value(row)), out),
        Col::I32(a) => avro_long(i64::from(a.value(row)), out),
        Col::I64(a) => avro_long(a.value(row), out),
        Col::F32(a) => out.extend_from_slice(&a.value(row).to_le_bytes()),
        Col::F64(a) => out.extend_from_slice(&a.value(row).to_le_bytes()),
        Col::Dec(a, _) => avro_bytes(&twos_complement(a.value(row)), out),
        Col::Str(a) => avro_bytes(a.value(row).as_bytes(), out),
        Col::Bin(a) => avro_bytes(a.value(row), out),
        Col::Fixed(a) => out.extend_from_slice(a.value(row)),
        Col::Date(a) => avro_long(i64::from(a.value(row)), out),
        Col::Time(a) => avro_long(a.value(row), out),
        Col::Ts(a, _) => avro_long(a.value(row), out),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, FixedSizeBinaryBuilder};

    use super::*;
    use crate::log::schema::{Column, ColumnType};

    fn schema() -> TableSchema {
        crate::log::schema::sample(Column { name: "note".into(), ty: ColumnType::String })
    }

    /// Invariant: the hand-written timestamp text is chrono's, character for character, for
    /// every SQL Server year (0001–9999), before 1970, on leap days, at every microsecond
    /// digit, and past the fast path's range.
    #[test]
    fn timestamp_text_is_chronos_for_every_year_and_microsecond() {
        let chrono_text = |micros: i64| chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default().naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string();
        let mut cases = vec![0, -1, 1, 999_999, -999_999, 951_782_400_000_000 /* 2000-02-29 */, 253_402_300_799_999_999 /* 9999-12-31T23:59:59.999999 */, -62_135_596_800_000_000 /* 0001-01-01 */, -62_167_219_200_000_000 /* year 0 */, -62_167_219_200_000_001 /* year -1 */, 253_402_300_800_000_000 /* year 10000 */, i64::MIN, i64::MAX];
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            cases.push((state % 316_000_000_000_000_000) as i64 - 62_200_000_000_000_000);
        }
        for micros in cases {
            assert_eq!(timestamp_text(micros), chrono_text(micros), "{micros} µs");
        }
    }

    #[test]
    fn hex_is_upper_case_two_digits_per_byte() {
        let mut out = Vec::new();
        push_hex(&[0x00, 0x0A, 0xF0, 0xFF, 0x5C], &mut out);
        assert_eq!(out, b"000AF0FF5C");
    }

    fn batch(schema: &TableSchema) -> RecordBatch {
        let lsn = |n: u8| {
            let mut b = FixedSizeBinaryBuilder::new(10);
            b.append_value([0, 0, 0, 0x2A, 0, 0, 0, 1, 0, n]).unwrap();
            b.append_value([0, 0, 0, 0x2A, 0, 0, 0, 1, 0, n + 1]).unwrap();
            Arc::new(b.finish()) as ArrayRef
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1, -7])),
            Arc::new(Decimal128Array::from(vec![Some(-5), Some(123_456)]).with_precision_and_scale(18, 2).unwrap()),
            Arc::new(StringArray::from(vec![Some("a \"q\""), None])),
            Arc::new(TimestampMicrosecondArray::from(vec![1_700_000_000_123_456, 0])),
            lsn(1),
            lsn(5),
            Arc::new(Int32Array::from(vec![2, 4])),
            Arc::new(Int32Array::from(vec![Some(1), None])),
            Arc::new(TimestampMicrosecondArray::from(vec![1_700_000_000_000_000, 1_700_000_001_000_000]).with_timezone("UTC")),
            Arc::new(StringArray::from(vec!["dbo_t", "dbo_t"])),
            Arc::new(Int64Array::from(vec![0, 0])),
            {
                // A snapshot row's `_snapshot`, then a change row's NULL.
                let mut b = FixedSizeBinaryBuilder::new(10);
                b.append_value([0, 0, 0, 0x2A, 0, 0, 0, 1, 0, 9]).unwrap();
                b.append_null();
                Arc::new(b.finish()) as ArrayRef
            },
        ];
        RecordBatch::try_new(schema.arrow(), columns).unwrap()
    }

    #[test]
    fn json_records_carry_exact_decimals_and_hex_lsns() {
        let schema = schema();
        let batch = batch(&schema);
        let encoder = RowEncoder::new(&schema, &batch).unwrap();
        let mut out = Vec::new();
        encoder.value_json(0, &mut out);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["amount"], "-0.05");
        assert_eq!(value["note"], "a \"q\"");
        assert_eq!(value["at"], "2023-11-14T22:13:20.123456");
        assert_eq!(value["_start_lsn"], "0x0000002A000000010001");
        assert_eq!(value["_commit_ts"], "2023-11-14T22:13:20.000000Z");
        assert_eq!(value["_snapshot"], "0x0000002A000000010009");
        let mut key = Vec::new();
        encoder.key_json(1, &mut key);
        assert_eq!(String::from_utf8(key).unwrap(), r#"{"id":-7}"#);
        out.clear();
        encoder.value_json(1, &mut out);
        let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(value["amount"], "1234.56");
        assert!(value["note"].is_null() && value["_command_id"].is_null() && value["_snapshot"].is_null());
    }

    #[test]
    fn avro_datums_decode_with_the_generated_schema() {
        let schema = schema();
        let batch = batch(&schema);
        let encoder = RowEncoder::new(&schema, &batch).unwrap();
        let avro = apache_avro::Schema::parse(&schema.avro_value("cdc.db.dbo.t")).unwrap();
        for row in 0..2 {
            let mut out = Vec::new();
            encoder.value_avro(row, &mut out).unwrap();
            let mut reader = &out[..];
            let value = apache_avro::from_avro_datum(&avro, &mut reader, None).unwrap();
            assert!(reader.is_empty(), "row {row} fully consumed");
            let apache_avro::types::Value::Record(fields) = value else { panic!("record") };
            assert_eq!(fields[0].1, apache_avro::types::Value::Long(if row == 0 { 1 } else { -7 }));
            let amount = match &fields[1].1 {
                apache_avro::types::Value::Union(1, inner) => inner.as_ref().clone(),
                other => panic!("{other:?}"),
            };
            let apache_avro::types::Value::Decimal(decimal) = amount else { panic!("decimal") };
            let bytes: Vec<u8> = decimal.try_into().unwrap();
            let expected: i128 = if row == 0 { -5 } else { 123_456 };
            assert_eq!(twos_complement(expected), bytes);
            let snapshot = &fields.last().unwrap().1;
            assert!(matches!(snapshot, apache_avro::types::Value::Union(branch, _) if *branch == if row == 0 { 1 } else { 0 }), "{snapshot:?}");
        }
        let key_schema = apache_avro::Schema::parse(&schema.avro_key("cdc.db.dbo.t")).unwrap();
        let mut out = Vec::new();
        encoder.key_avro(1, &mut out).unwrap();
        let key = apache_avro::from_avro_datum(&key_schema, &mut &out[..], None).unwrap();
        assert_eq!(key, apache_avro::types::Value::Record(vec![("id".into(), apache_avro::types::Value::Long(-7))]));
    }

    #[test]
    fn decimal_text_and_twos_complement_edges() {
        assert_eq!(decimal_text(5, 2), "0.05");
        assert_eq!(decimal_text(-12345, 2), "-123.45");
        assert_eq!(decimal_text(7, 0), "7");
        assert_eq!(twos_complement(0), vec![0]);
        assert_eq!(twos_complement(-1), vec![0xFF]);
        assert_eq!(twos_complement(128), vec![0x00, 0x80]);
        assert_eq!(twos_complement(-129), vec![0xFF, 0x7F]);
    }
}
