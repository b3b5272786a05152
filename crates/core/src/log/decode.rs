//! Decoding data records into Arrow: the inverse of [`super::encode`], for JSON objects and for
//! Avro datums in the Confluent wire format.
//!
//! A decoded batch has the [`record_fields`] layout: the captured columns in their log types
//! (binary as bytes; `time` as its text, `HH:MM:SS.ffffff`, since Delta has no time type),
//! then the metadata columns with LSNs as `0x` + 20 hex digits. A record that does not decode
//! is returned apart with the reason, by its index, and never takes the good ones with it.
//!
//! ```
//! use mssql_cdc_core::log::decode::decode_json;
//! use mssql_cdc_core::log::schema::{Column, ColumnType, TableSchema};
//!
//! let schema = TableSchema { columns: vec![Column { name: "id".into(), ty: ColumnType::Int64 }], key: vec!["id".into()], include_command_id: false };
//! let good = br#"{"id":7,"_start_lsn":"0x0000002A000000010005","_seqval":"0x0000002A000000010004","_operation":2,"_commit_ts":"2026-01-01T09:00:00.000000Z","_capture_instance":"dbo_t","_generation":0}"#;
//! let decoded = decode_json(&schema, &[good.as_slice(), b"not json".as_slice()]);
//! assert_eq!(decoded.kept, vec![0]);
//! assert_eq!(decoded.bad[0].0, 1);
//! ```

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, BooleanArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::json::reader::Decoder;
use base64::Engine;

use super::encode::{date_text, decimal_text, time_text, timestamp_text};
use super::schema::{self as log, ColumnType, TableSchema};

/// The outcome of decoding a set of records.
#[derive(Debug, Default)]
pub struct Decoded {
    /// The decoded rows in the [`record_fields`] layout (`None` when no record decoded).
    pub batch: Option<RecordBatch>,
    /// The index of the record behind each row of `batch`, in order.
    pub kept: Vec<usize>,
    /// The records that did not decode: index and reason.
    pub bad: Vec<(usize, String)>,
}

/// The Arrow type a column of `ty` decodes to.
pub fn decoded_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::Time => DataType::Utf8,
        other => other.arrow(),
    }
}

/// The fields of a decoded record: the captured columns (nullable), then the metadata.
pub fn record_fields(schema: &TableSchema) -> Vec<Field> {
    fields(schema, false)
}

/// `binary_as_text`: the layout as JSON carries it (binary columns as base64 text).
fn fields(schema: &TableSchema, binary_as_text: bool) -> Vec<Field> {
    let mut fields: Vec<Field> = schema
        .columns
        .iter()
        .map(|c| {
            let ty = match (c.ty, binary_as_text) {
                (ColumnType::Binary, true) => DataType::Utf8,
                (ty, _) => decoded_type(ty),
            };
            Field::new(&c.name, ty, true)
        })
        .collect();
    fields.extend([
        Field::new(log::START_LSN, DataType::Utf8, false),
        Field::new(log::SEQVAL, DataType::Utf8, false),
        Field::new(log::OPERATION, DataType::Int32, false),
    ]);
    if schema.include_command_id {
        fields.push(Field::new(log::COMMAND_ID, DataType::Int32, true));
    }
    fields.extend([
        Field::new(log::COMMIT_TS, DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
        Field::new(log::CAPTURE_INSTANCE, DataType::Utf8, false),
        Field::new(log::GENERATION, DataType::Int64, false),
        Field::new(log::SNAPSHOT, DataType::Utf8, true),
    ]);
    fields
}

/// The schema id of a record in the Confluent wire format (magic byte 0, 4 big-endian bytes).
pub fn confluent_schema_id(value: &[u8]) -> Option<u32> {
    match value {
        [0, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Decodes JSON data records (one object each).
pub fn decode_json(schema: &TableSchema, values: &[&[u8]]) -> Decoded {
    decode_rows(schema, values.len(), |decoder, index| {
        let value = values[index];
        let consumed = decoder.decode(value).map_err(|e| format!("not a record of the batch's layout: {e}"))?;
        if consumed != value.len() {
            return Err("trailing bytes after the JSON object".into());
        }
        Ok(())
    })
}

/// Decodes Avro data records in the Confluent wire format; `writer` gives the writer schema of
/// a schema id. Fields are matched by position (Avro names may differ from column names).
pub fn decode_avro(schema: &TableSchema, values: &[&[u8]], writer: impl Fn(u32) -> Option<apache_avro::Schema>) -> Decoded {
    let names = fields(schema, true);
    let mut objects = Vec::with_capacity(values.len());
    let mut origin = Vec::with_capacity(values.len());
    let mut bad = Vec::new();
    for (index, value) in values.iter().enumerate() {
        match avro_object(schema, &names, value, &writer) {
            Ok(object) => {
                objects.push(object);
                origin.push(index);
            }
            Err(reason) => bad.push((index, reason)),
        }
    }
    let mut decoded = decode_rows(schema, objects.len(), |decoder, index| {
        decoder.serialize(std::slice::from_ref(&objects[index])).map_err(|e| format!("not a record of the batch's layout: {e}"))
    });
    decoded.kept = decoded.kept.iter().map(|i| origin[*i]).collect();
    bad.extend(decoded.bad.iter().map(|(i, reason)| (origin[*i], reason.clone())));
    bad.sort_by_key(|(index, _)| *index);
    decoded.bad = bad;
    decoded
}

/// Feeds `count` records to a JSON decoder with `feed` (which must add exactly one row): all
/// at once first; one at a time when any fails, so that each bad one is named.
fn decode_rows(schema: &TableSchema, count: usize, mut feed: impl FnMut(&mut Decoder, usize) -> Result<(), String>) -> Decoded {
    let wire = Arc::new(Schema::new(fields(schema, true)));
    let decoder = |rows: usize| arrow::json::ReaderBuilder::new(wire.clone()).with_strict_mode(true).with_batch_size(rows.max(1)).build_decoder();
    let all = decoder(count).ok().and_then(|mut decoder| {
        for index in 0..count {
            feed(&mut decoder, index).ok()?;
            // A record must be exactly one object: the decoder's pending rows count them.
            if decoder.len() != index + 1 || decoder.has_partial_record() {
                return None;
            }
        }
        decoder.flush().ok()
    });
    if let Some(batch) = all {
        return binary_from_base64(schema, batch, (0..count).collect(), Vec::new());
    }
    let mut good = Vec::new();
    let mut kept = Vec::new();
    let mut bad = Vec::new();
    for index in 0..count {
        let one = decoder(1).map_err(|e| e.to_string()).and_then(|mut decoder| {
            feed(&mut decoder, index)?;
            decoder.flush().map_err(|e| format!("not a record of the batch's layout: {e}"))
        });
        match one {
            Ok(Some(batch)) if batch.num_rows() == 1 => {
                good.push(batch);
                kept.push(index);
            }
            Ok(other) => bad.push((index, format!("expected one JSON object, found {} rows", other.map_or(0, |b| b.num_rows())))),
            Err(reason) => bad.push((index, reason)),
        }
    }
    match arrow::compute::concat_batches(&wire, &good) {
        Ok(batch) if !kept.is_empty() => binary_from_base64(schema, Some(batch), kept, bad),
        Ok(_) => Decoded { batch: None, kept: Vec::new(), bad },
        Err(error) => {
            bad.extend(kept.into_iter().map(|index| (index, error.to_string())));
            bad.sort_by_key(|(index, _)| *index);
            Decoded { batch: None, kept: Vec::new(), bad }
        }
    }
}

/// Turns the base64 text of binary columns into bytes; a row whose text is not base64 is bad.
fn binary_from_base64(schema: &TableSchema, batch: Option<RecordBatch>, mut kept: Vec<usize>, mut bad: Vec<(usize, String)>) -> Decoded {
    let Some(batch) = batch.filter(|b| b.num_rows() > 0) else { return Decoded { batch: None, kept: Vec::new(), bad } };
    let target: SchemaRef = Arc::new(Schema::new(record_fields(schema)));
    let rows = batch.num_rows();
    let mut valid = vec![true; rows];
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for (index, column) in batch.columns().iter().enumerate() {
        let Some(binary_column) = schema.columns.get(index).filter(|c| c.ty == ColumnType::Binary) else {
            columns.push(column.clone());
            continue;
        };
        let text = column.as_string::<i32>();
        let mut binary = BinaryBuilder::with_capacity(rows, rows * 16);
        for row in 0..rows {
            if text.is_null(row) {
                binary.append_null();
                continue;
            }
            match base64::engine::general_purpose::STANDARD.decode(text.value(row)) {
                Ok(bytes) => binary.append_value(bytes),
                Err(error) => {
                    if valid[row] {
                        bad.push((kept[row], format!("column `{}` is not base64: {error}", binary_column.name)));
                    }
                    valid[row] = false;
                    binary.append_null();
                }
            }
        }
        columns.push(Arc::new(binary.finish()));
    }
    let batch = match RecordBatch::try_new(target, columns) {
        Ok(batch) => batch,
        Err(error) => {
            bad.extend(kept.into_iter().map(|index| (index, error.to_string())));
            bad.sort_by_key(|(index, _)| *index);
            return Decoded { batch: None, kept: Vec::new(), bad };
        }
    };
    bad.sort_by_key(|(index, _)| *index);
    if valid.iter().all(|v| *v) {
        return Decoded { batch: Some(batch), kept, bad };
    }
    kept = kept.into_iter().zip(&valid).filter(|(_, v)| **v).map(|(index, _)| index).collect();
    match arrow::compute::filter_record_batch(&batch, &BooleanArray::from(valid)) {
        Ok(batch) if batch.num_rows() > 0 => Decoded { batch: Some(batch), kept, bad },
        Ok(_) => Decoded { batch: None, kept: Vec::new(), bad },
        Err(error) => {
            bad.extend(kept.into_iter().map(|index| (index, error.to_string())));
            bad.sort_by_key(|(index, _)| *index);
            Decoded { batch: None, kept: Vec::new(), bad }
        }
    }
}

/// One Avro record as the JSON object the JSON encoding would carry for it.
fn avro_object(schema: &TableSchema, names: &[Field], value: &[u8], writer: &impl Fn(u32) -> Option<apache_avro::Schema>) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let id = confluent_schema_id(value).ok_or("not in the Confluent wire format (magic byte 0, schema id)")?;
    let avro = writer(id).ok_or_else(|| format!("schema id {id} is not in the registry"))?;
    let mut datum = &value[5..];
    let decoded = apache_avro::from_avro_datum(&avro, &mut datum, None).map_err(|e| format!("Avro datum does not match schema {id}: {e}"))?;
    let apache_avro::types::Value::Record(fields) = decoded else { return Err("the Avro value is not a record".into()) };
    if fields.len() != names.len() {
        return Err(format!("the record has {} fields, the layout {}", fields.len(), names.len()));
    }
    let mut object = serde_json::Map::with_capacity(fields.len());
    for (index, ((_, field), name)) in fields.into_iter().zip(names.iter()).enumerate() {
        let scale = match schema.columns.get(index).map(|c| c.ty) {
            Some(ColumnType::Decimal { scale, .. }) => scale,
            _ => 0,
        };
        object.insert(name.name().clone(), avro_json(field, scale)?);
    }
    Ok(object)
}

/// An Avro value as the JSON encoding writes the same value.
fn avro_json(value: apache_avro::types::Value, scale: i8) -> Result<serde_json::Value, String> {
    use apache_avro::types::Value as A;
    use serde_json::Value as J;
    Ok(match value {
        A::Null => J::Null,
        A::Boolean(b) => J::Bool(b),
        A::Int(i) => J::from(i),
        A::Long(i) => J::from(i),
        A::Float(f) => serde_json::Number::from_f64(f64::from(f)).map_or(J::Null, J::Number),
        A::Double(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        A::String(s) => J::String(s),
        A::Bytes(b) => J::String(base64::engine::general_purpose::STANDARD.encode(b)),
        A::Fixed(_, b) => J::String(format!("0x{}", b.iter().map(|x| format!("{x:02X}")).collect::<String>())),
        A::Decimal(d) => {
            let bytes: Vec<u8> = Vec::try_from(d).map_err(|e| e.to_string())?;
            if bytes.len() > 16 {
                return Err("decimal wider than 128 bits".into());
            }
            let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) { 0xFF } else { 0 };
            let mut full = [fill; 16];
            full[16 - bytes.len()..].copy_from_slice(&bytes);
            J::String(decimal_text(i128::from_be_bytes(full), scale))
        }
        A::Date(days) => J::String(date_text(days)),
        A::TimeMicros(micros) => J::String(time_text(micros)),
        A::TimestampMicros(micros) => J::String(format!("{}Z", timestamp_text(micros))),
        A::LocalTimestampMicros(micros) => J::String(timestamp_text(micros)),
        A::Uuid(u) => J::String(u.to_string().to_uppercase()),
        A::Union(_, inner) => avro_json(*inner, scale)?,
        other => return Err(format!("unexpected Avro value {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::encode::RowEncoder;
    use crate::log::schema::Column;

    fn schema() -> TableSchema {
        crate::log::schema::sample(Column { name: "blob".into(), ty: ColumnType::Binary })
    }

    const GOOD: &str = r#"{"id":7,"amount":"-12.50","blob":"AAH/","at":"2026-01-01T10:00:00.123456","_start_lsn":"0x0000002A000000010005","_seqval":"0x0000002A000000010004","_operation":2,"_command_id":1,"_commit_ts":"2026-01-01T09:00:00.000000Z","_capture_instance":"dbo_t","_generation":0}"#;

    #[test]
    fn json_records_decode_into_the_record_layout() {
        let decoded = decode_json(&schema(), &[GOOD.as_bytes()]);
        assert!(decoded.bad.is_empty(), "{:?}", decoded.bad);
        let batch = decoded.batch.unwrap();
        assert_eq!(batch.schema().fields().len(), record_fields(&schema()).len());
        assert_eq!(batch.column(1).as_primitive::<arrow::datatypes::Decimal128Type>().value(0), -1250);
        assert_eq!(batch.column(2).as_binary::<i32>().value(0), &[0u8, 1, 255]);
    }

    /// Invariant 7: a bad record is named, never dropped silently, and does not take the good
    /// ones with it.
    #[test]
    fn bad_records_are_named_and_the_good_ones_kept() {
        let not_base64 = GOOD.replace("AAH/", "*not base64*");
        let values: Vec<&[u8]> = vec![b"not json", GOOD.as_bytes(), br#"{"id":"x"}"#, not_base64.as_bytes(), GOOD.as_bytes()];
        let decoded = decode_json(&schema(), &values);
        assert_eq!(decoded.kept, vec![1, 4]);
        assert_eq!(decoded.bad.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 2, 3]);
        assert!(decoded.bad[2].1.contains("not base64"), "{:?}", decoded.bad);
        assert_eq!(decoded.batch.unwrap().num_rows(), 2);
    }

    /// Invariant: what the source encodes as Avro decodes to what it encodes as JSON.
    #[test]
    fn avro_and_json_decode_alike() {
        let schema = schema();
        let json = decode_json(&schema, &[GOOD.as_bytes()]).batch.unwrap();
        // Re-encode the decoded row through the source's encoder, both ways.
        let source = source_batch(&schema);
        let encoder = RowEncoder::new(&schema, &source).unwrap();
        let mut avro = Vec::new();
        crate::log::encode::confluent_header(9, &mut avro);
        encoder.value_avro(0, &mut avro).unwrap();
        let writer = apache_avro::Schema::parse(&schema.avro_value("t")).unwrap();
        let decoded = decode_avro(&schema, &[avro.as_slice(), b"\x01junk"], |id| (id == 9).then(|| writer.clone()));
        assert_eq!(decoded.kept, vec![0]);
        assert_eq!(decoded.bad.len(), 1);
        let mut text = Vec::new();
        encoder.value_json(0, &mut text);
        let from_json = decode_json(&schema, &[text.as_slice()]).batch.unwrap();
        assert_eq!(decoded.batch.unwrap(), from_json);
        assert_eq!(json.schema(), from_json.schema());
    }

    /// The row of GOOD as the source holds it before encoding.
    fn source_batch(schema: &TableSchema) -> RecordBatch {
        use arrow::array::{BinaryArray, Decimal128Array, FixedSizeBinaryArray, Int32Array, Int64Array, StringArray, TimestampMicrosecondArray};
        let lsn = |hex: &str| FixedSizeBinaryArray::try_from_iter(std::iter::once(mssql_cdc_types::lsn::Lsn::parse_hex(hex).unwrap().0)).unwrap();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![7])),
            Arc::new(Decimal128Array::from(vec![-1250]).with_precision_and_scale(18, 2).unwrap()),
            Arc::new(BinaryArray::from(vec![&[0u8, 1, 255][..]])),
            Arc::new(TimestampMicrosecondArray::from(vec![1_767_261_600_123_456])),
            Arc::new(lsn("0x0000002A000000010005")),
            Arc::new(lsn("0x0000002A000000010004")),
            Arc::new(Int32Array::from(vec![2])),
            Arc::new(Int32Array::from(vec![1])),
            Arc::new(TimestampMicrosecondArray::from(vec![1_767_258_000_000_000]).with_timezone("UTC")),
            Arc::new(StringArray::from(vec!["dbo_t"])),
            Arc::new(Int64Array::from(vec![0])),
            Arc::new(FixedSizeBinaryArray::new_null(10, 1)),
        ];
        RecordBatch::try_new(schema.arrow(), columns).unwrap()
    }
}
