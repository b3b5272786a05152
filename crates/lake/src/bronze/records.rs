//! The bronze table's layout and the decoding of data records into it.
//!
//! Bronze holds every change row: the captured columns, the log's metadata columns, and where
//! the row came from (`_batch_id`, `_kafka_partition`, `_kafka_offset`). Types follow the log
//! ([`mssql_cdc_core::log::schema`]) where Delta has them; LSNs and `time` values are text (LSNs as
//! `0x` + 20 hex digits, which sort as the LSNs do).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use base64::Engine;

use mssql_cdc_core::log::schema::{self as log, ColumnType, TableSchema};

/// The batch a row was appended in.
pub const BATCH_ID: &str = "_batch_id";
/// The data topic partition the row was read from.
pub const KAFKA_PARTITION: &str = "_kafka_partition";
/// Its offset there.
pub const KAFKA_OFFSET: &str = "_kafka_offset";

/// Column comments of the metadata columns.
pub fn comments() -> HashMap<&'static str, &'static str> {
    HashMap::from([
        (log::START_LSN, "Commit LSN of the change's transaction: 0x and 20 hex digits (sorts in log order)"),
        (log::SEQVAL, "Order of the change within its transaction: 0x and 20 hex digits"),
        (log::OPERATION, "1 delete, 2 insert, 3 update before-image, 4 update after-image, 0 snapshot row"),
        (log::COMMAND_ID, "Order of the statement within its transaction (__$command_id)"),
        (log::COMMIT_TS, "Commit time of the transaction, UTC"),
        (log::CAPTURE_INSTANCE, "SQL Server capture instance the change was read from"),
        (log::GENERATION, "Stream generation: 0 until a re-snapshot starts a new one"),
        (BATCH_ID, "Source batch (control record) the row was published in"),
        (KAFKA_PARTITION, "Data topic partition the record was read from"),
        (KAFKA_OFFSET, "Offset of the record in that partition"),
    ])
}

fn bronze_type(ty: ColumnType) -> DataType {
    match ty {
        ColumnType::Time => DataType::Utf8,
        other => other.arrow(),
    }
}

/// Fields of a decoded record (before the provenance columns); with `json`, binary columns
/// are text (base64) as the JSON carries them.
fn record_fields(schema: &TableSchema, json: bool) -> Vec<Field> {
    let mut fields: Vec<Field> = schema
        .columns
        .iter()
        .map(|c| {
            let ty = match (c.ty, json) {
                (ColumnType::Binary, true) => DataType::Utf8,
                (ty, _) => bronze_type(ty),
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
    ]);
    fields
}

/// The bronze table's Arrow schema for a feed layout.
pub fn bronze_schema(schema: &TableSchema) -> SchemaRef {
    let mut fields = record_fields(schema, false);
    fields.extend([
        Field::new(BATCH_ID, DataType::Int64, false),
        Field::new(KAFKA_PARTITION, DataType::Int32, false),
        Field::new(KAFKA_OFFSET, DataType::Int64, false),
    ]);
    Arc::new(Schema::new(fields))
}

/// A data record as read from Kafka.
#[derive(Clone, Debug)]
pub struct DataRecord {
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
    /// Its value.
    pub value: Vec<u8>,
}

/// The outcome of decoding a batch's records.
#[derive(Debug)]
pub struct Decoded {
    /// The good rows in bronze's layout (none when every record was bad or there were none).
    pub batch: Option<RecordBatch>,
    /// The records that could not be decoded, with the reason.
    pub bad: Vec<(DataRecord, String)>,
}

/// Decodes JSON data records into bronze rows of batch `batch_id`. A record that is not a
/// JSON object of the layout, or whose `_start_lsn` lies outside `(from_lsn, to_lsn]`, is bad.
pub fn decode_json(schema: &TableSchema, records: &[DataRecord], batch_id: u64, from_lsn: &str, to_lsn: &str) -> Decoded {
    let json_schema = Arc::new(Schema::new(record_fields(schema, true)));
    if let Some(decoded) = decode_all(schema, &json_schema, records, batch_id, from_lsn, to_lsn) {
        return decoded;
    }
    decode_one_by_one(schema, json_schema, records, batch_id, from_lsn, to_lsn)
}

/// The fast path: every record through one decoder. `None` when any record fails to decode
/// (the slow path then names it).
fn decode_all(schema: &TableSchema, json_schema: &SchemaRef, records: &[DataRecord], batch_id: u64, from_lsn: &str, to_lsn: &str) -> Option<Decoded> {
    let mut decoder = arrow::json::ReaderBuilder::new(json_schema.clone()).with_strict_mode(true).with_batch_size(records.len().max(1)).build_decoder().ok()?;
    for (index, record) in records.iter().enumerate() {
        if decoder.decode(&record.value).ok()? != record.value.len() {
            return None;
        }
        // A record must be exactly one object: the decoder's pending rows count them.
        if decoder.len() != index + 1 || decoder.has_partial_record() {
            return None;
        }
    }
    let batch = decoder.flush().ok()??;
    let lsns = batch.column_by_name(log::START_LSN)?.as_string::<i32>().clone();
    let inside: Vec<bool> = (0..lsns.len()).map(|i| lsns.value(i) > from_lsn && lsns.value(i) <= to_lsn).collect();
    let mut bad = Vec::new();
    let mut kept = Vec::new();
    for (i, ok) in inside.iter().enumerate() {
        if *ok {
            kept.push(&records[i]);
        } else {
            bad.push((records[i].clone(), format!("_start_lsn {} is outside the batch's range ({from_lsn}, {to_lsn}]", lsns.value(i))));
        }
    }
    let batch = if bad.is_empty() { batch } else { arrow::compute::filter_record_batch(&batch, &arrow::array::BooleanArray::from(inside)).ok()? };
    if kept.is_empty() {
        return Some(Decoded { batch: None, bad });
    }
    match finish(schema, batch, &kept, batch_id) {
        Ok(batch) => Some(Decoded { batch: Some(batch), bad }),
        Err(_) => None,
    }
}

/// The slow path: one record at a time, so that each bad one is named.
fn decode_one_by_one(schema: &TableSchema, json_schema: SchemaRef, records: &[DataRecord], batch_id: u64, from_lsn: &str, to_lsn: &str) -> Decoded {
    let mut good: Vec<RecordBatch> = Vec::new();
    let mut kept: Vec<&DataRecord> = Vec::new();
    let mut bad = Vec::new();
    // Records are decoded one by one so that a bad one names itself; the decoder is reused
    // while records decode.
    let mut decoder = match arrow::json::ReaderBuilder::new(json_schema.clone()).with_strict_mode(true).build_decoder() {
        Ok(decoder) => decoder,
        Err(error) => {
            return Decoded { batch: None, bad: records.iter().map(|r| (r.clone(), format!("no decoder for the layout: {error}"))).collect() };
        }
    };
    for record in records {
        let one = decoder.decode(&record.value).and_then(|consumed| {
            if consumed != record.value.len() {
                return Err(arrow::error::ArrowError::JsonError("trailing bytes after the JSON object".into()));
            }
            decoder.flush()
        });
        match one {
            Ok(Some(batch)) if batch.num_rows() == 1 => {
                let lsn = batch.column_by_name(log::START_LSN).map(|c| c.as_string::<i32>().value(0).to_owned()).unwrap_or_default();
                if lsn.as_str() > from_lsn && lsn.as_str() <= to_lsn {
                    good.push(batch);
                    kept.push(record);
                } else {
                    bad.push((record.clone(), format!("_start_lsn {lsn} is outside the batch's range ({from_lsn}, {to_lsn}]")));
                }
            }
            Ok(other) => bad.push((record.clone(), format!("expected one JSON object, found {} rows", other.map_or(0, |b| b.num_rows())))),
            Err(error) => {
                bad.push((record.clone(), format!("not a record of the batch's layout: {error}")));
                match arrow::json::ReaderBuilder::new(json_schema.clone()).with_strict_mode(true).build_decoder() {
                    Ok(fresh) => decoder = fresh,
                    Err(_) => break,
                }
            }
        }
    }
    if good.is_empty() {
        return Decoded { batch: None, bad };
    }
    let merged = match arrow::compute::concat_batches(&json_schema, &good) {
        Ok(batch) => batch,
        Err(error) => return Decoded { batch: None, bad: kept.into_iter().map(|r| (r.clone(), error.to_string())).collect() },
    };
    match finish(schema, merged, &kept, batch_id) {
        Ok(batch) => Decoded { batch: Some(batch), bad },
        Err((index, reason)) => {
            bad.push((kept[index].clone(), reason));
            Decoded { batch: None, bad }
        }
    }
}

/// Converts base64 text to binary and adds the provenance columns.
fn finish(schema: &TableSchema, batch: RecordBatch, records: &[&DataRecord], batch_id: u64) -> Result<RecordBatch, (usize, String)> {
    let target = bronze_schema(schema);
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(target.fields().len());
    for (index, column) in batch.columns().iter().enumerate() {
        let is_binary = schema.columns.get(index).is_some_and(|c| c.ty == ColumnType::Binary);
        if !is_binary {
            columns.push(column.clone());
            continue;
        }
        let text = column.as_string::<i32>();
        let mut binary = BinaryBuilder::with_capacity(text.len(), text.len() * 16);
        for row in 0..text.len() {
            if text.is_null(row) {
                binary.append_null();
            } else {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text.value(row))
                    .map_err(|e| (row, format!("column `{}` is not base64: {e}", schema.columns[index].name)))?;
                binary.append_value(bytes);
            }
        }
        columns.push(Arc::new(binary.finish()));
    }
    let rows = batch.num_rows();
    columns.push(Arc::new(Int64Array::from(vec![batch_id as i64; rows])));
    columns.push(Arc::new(Int32Array::from(records.iter().map(|r| r.partition).collect::<Vec<_>>())));
    columns.push(Arc::new(Int64Array::from(records.iter().map(|r| r.offset).collect::<Vec<_>>())));
    RecordBatch::try_new(target, columns).map_err(|e| (0, e.to_string()))
}

/// Rewrites an Avro record (Confluent wire format) as the JSON record the source would have
/// written for it, so both formats share one decoder. `schemas` gives the writer schema of a
/// schema id. Fields are matched by position (Avro names may differ from column names).
pub fn avro_to_json(
    schema: &TableSchema,
    value: &[u8],
    writer: impl Fn(u32) -> Option<apache_avro::Schema>,
) -> Result<Vec<u8>, String> {
    if value.len() < 5 || value[0] != 0 {
        return Err("not in the Confluent wire format (magic byte 0, schema id)".into());
    }
    let id = u32::from_be_bytes([value[1], value[2], value[3], value[4]]);
    let avro = writer(id).ok_or_else(|| format!("schema id {id} is not in the registry"))?;
    let mut datum = &value[5..];
    let decoded = apache_avro::from_avro_datum(&avro, &mut datum, None).map_err(|e| format!("Avro datum does not match schema {id}: {e}"))?;
    let apache_avro::types::Value::Record(fields) = decoded else { return Err("the Avro value is not a record".into()) };
    let names = record_fields(schema, true);
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
    serde_json::to_vec(&serde_json::Value::Object(object)).map_err(|e| e.to_string())
}

fn avro_json(value: apache_avro::types::Value, scale: i8) -> Result<serde_json::Value, String> {
    use apache_avro::types::Value as A;
    use serde_json::Value as J;
    use mssql_cdc_core::log::encode::{date_text, decimal_text, time_text, timestamp_text};
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
    use mssql_cdc_core::log::schema::Column;

    fn schema() -> TableSchema {
        TableSchema {
            columns: vec![
                Column { name: "id".into(), ty: ColumnType::Int64 },
                Column { name: "amount".into(), ty: ColumnType::Decimal { precision: 18, scale: 2 } },
                Column { name: "blob".into(), ty: ColumnType::Binary },
                Column { name: "at".into(), ty: ColumnType::LocalTimestamp },
            ],
            key: vec!["id".into()],
            include_command_id: true,
        }
    }

    fn record(offset: i64, text: &str) -> DataRecord {
        DataRecord { partition: 1, offset, value: text.as_bytes().to_vec() }
    }

    const GOOD: &str = r#"{"id":7,"amount":"-12.50","blob":"AAH/","at":"2026-01-01T10:00:00.123456","_start_lsn":"0x0000002A000000010005","_seqval":"0x0000002A000000010004","_operation":2,"_command_id":1,"_commit_ts":"2026-01-01T09:00:00.000000Z","_capture_instance":"dbo_t","_generation":0}"#;

    #[test]
    fn json_records_decode_into_the_bronze_layout() {
        let decoded = decode_json(&schema(), &[record(5, GOOD)], 3, "0x0000002A000000010000", "0x0000002A000000010009");
        assert!(decoded.bad.is_empty(), "{:?}", decoded.bad);
        let batch = decoded.batch.unwrap();
        assert_eq!(batch.schema(), bronze_schema(&schema()));
        let amount = batch.column(1).as_primitive::<arrow::datatypes::Decimal128Type>();
        assert_eq!(amount.value(0), -1250);
        assert_eq!(batch.column(2).as_binary::<i32>().value(0), &[0u8, 1, 255]);
        assert_eq!(batch.column_by_name(KAFKA_OFFSET).unwrap().as_primitive::<arrow::datatypes::Int64Type>().value(0), 5);
    }

    /// Invariant 7: a bad record is named, never dropped silently, and does not take the good
    /// ones with it.
    #[test]
    fn bad_records_are_named_and_the_good_ones_kept() {
        let outside = GOOD.replace("0x0000002A000000010005", "0x0000002A000000020000");
        let records = [record(1, "not json"), record(2, GOOD), record(3, r#"{"id":"x"}"#), record(4, &outside), record(5, GOOD)];
        let decoded = decode_json(&schema(), &records, 0, "0x0000002A000000010000", "0x0000002A000000010009");
        let bad: Vec<i64> = decoded.bad.iter().map(|(r, _)| r.offset).collect();
        assert_eq!(bad, vec![1, 3, 4]);
        assert!(decoded.bad[2].1.contains("outside the batch's range"));
        assert_eq!(decoded.batch.unwrap().num_rows(), 2);
    }
}
