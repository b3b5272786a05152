//! The bronze table's layout and the decoding of data records into it.
//!
//! Bronze holds every change row: the captured columns, the log's metadata columns, and where
//! the row came from (`_batch_id`, `_kafka_partition`, `_kafka_offset`). Types follow the log
//! ([`mssql_cdc_core::log::schema`]) where Delta has them; LSNs and `time` values are text (LSNs as
//! `0x` + 20 hex digits, which sort as the LSNs do).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int32Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use mssql_cdc_core::log::debezium::native::{native_rows, native_rows_avro};
use mssql_cdc_core::log::decode::{decode_avro, decode_json, record_fields};
use mssql_cdc_core::log::Envelope;
use mssql_cdc_core::log::schema::{self as log, TableSchema};

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
        (log::SNAPSHOT, "On a snapshot row (operation 0): the snapshot's LSN S; NULL on a change row"),
        (BATCH_ID, "Source batch (control record) the row was published in"),
        (KAFKA_PARTITION, "Data topic partition the record was read from"),
        (KAFKA_OFFSET, "Offset of the record in that partition"),
    ])
}

/// The bronze table's Arrow schema for a feed layout: a decoded record
/// ([`mssql_cdc_core::log::decode::record_fields`]), then where it came from.
pub fn bronze_schema(schema: &TableSchema) -> SchemaRef {
    let mut fields = record_fields(schema);
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

/// Decodes a batch's data records (JSON, or Avro with `writers` giving the writer schema of
/// each schema id; Debezium events with `envelope`) into bronze rows of batch `batch_id`. A
/// record that does not decode, or whose `_start_lsn` lies outside `(from_lsn, to_lsn]`, is
/// bad. A Debezium update is two rows, both from its record; a tombstone is none.
pub fn decode(schema: &TableSchema, records: &[DataRecord], writers: Option<&HashMap<u32, apache_avro::Schema>>, envelope: Envelope, batch_id: u64, from_lsn: &str, to_lsn: &str) -> Decoded {
    let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_slice()).collect();
    let decoded = match (envelope, writers) {
        (Envelope::Debezium, writers) => decode_debezium(schema, &values, writers),
        (Envelope::Native, None) => decode_json(schema, &values),
        (Envelope::Native, Some(writers)) => decode_avro(schema, &values, |id| writers.get(&id).cloned()),
    };
    let mut bad: Vec<(DataRecord, String)> = decoded.bad.into_iter().map(|(index, reason)| (records[index].clone(), reason)).collect();
    let Some(batch) = decoded.batch else { return Decoded { batch: None, bad } };
    let Some(lsns) = batch.column_by_name(log::START_LSN).map(|c| c.as_string::<i32>().clone()) else {
        bad.extend(decoded.kept.iter().map(|i| (records[*i].clone(), format!("no {} column", log::START_LSN))));
        return Decoded { batch: None, bad };
    };
    let inside: Vec<bool> = (0..lsns.len()).map(|i| lsns.value(i) > from_lsn && lsns.value(i) <= to_lsn).collect();
    let mut kept = Vec::with_capacity(decoded.kept.len());
    for (row, index) in decoded.kept.iter().enumerate() {
        if inside[row] {
            kept.push(&records[*index]);
        } else {
            bad.push((records[*index].clone(), format!("_start_lsn {} is outside the batch's range ({from_lsn}, {to_lsn}]", lsns.value(row))));
        }
    }
    bad.sort_by_key(|(record, _)| (record.partition, record.offset));
    if kept.is_empty() {
        return Decoded { batch: None, bad };
    }
    let filtered = if kept.len() == inside.len() { Ok(batch) } else { arrow::compute::filter_record_batch(&batch, &BooleanArray::from(inside)) };
    match filtered.and_then(|batch| with_provenance(schema, batch, &kept, batch_id)) {
        Ok(batch) => Decoded { batch: Some(batch), bad },
        Err(error) => {
            bad.extend(kept.into_iter().map(|r| (r.clone(), error.to_string())));
            Decoded { batch: None, bad }
        }
    }
}

/// Debezium events as the native rows they stand for, decoded; `kept` names each row's record.
fn decode_debezium(schema: &TableSchema, values: &[&[u8]], writers: Option<&HashMap<u32, apache_avro::Schema>>) -> mssql_cdc_core::log::decode::Decoded {
    let mut rows = Vec::with_capacity(values.len());
    let mut origin = Vec::with_capacity(values.len());
    let mut bad = Vec::new();
    for (index, value) in values.iter().enumerate() {
        let native = match writers {
            Some(writers) => native_rows_avro(schema, value, |id| writers.get(&id).cloned()),
            None => native_rows(schema, value),
        };
        match native {
            Ok(native) => {
                origin.extend(std::iter::repeat_n(index, native.len()));
                rows.extend(native);
            }
            Err(reason) => bad.push((index, reason)),
        }
    }
    let slices: Vec<&[u8]> = rows.iter().map(Vec::as_slice).collect();
    let mut decoded = decode_json(schema, &slices);
    // A record is kept whole or not at all: an update whose one row fails is bad, both rows.
    bad.extend(decoded.bad.iter().map(|(row, reason)| (origin[*row], reason.clone())));
    bad.sort_by_key(|(index, _)| *index);
    bad.dedup_by_key(|(index, _)| *index);
    let records: Vec<usize> = decoded.kept.iter().map(|row| origin[*row]).collect();
    let keep: Vec<bool> = records.iter().map(|index| bad.binary_search_by_key(index, |(bad, _)| *bad).is_err()).collect();
    if keep.iter().all(|k| *k) {
        decoded.kept = records;
    } else {
        decoded.batch = decoded.batch.and_then(|batch| arrow::compute::filter_record_batch(&batch, &BooleanArray::from(keep.clone())).ok()).filter(|batch| batch.num_rows() > 0);
        decoded.kept = records.into_iter().zip(keep).filter_map(|(index, keep)| keep.then_some(index)).collect();
    }
    decoded.bad = bad;
    decoded
}

/// Adds the provenance columns (`_batch_id`, `_kafka_partition`, `_kafka_offset`).
fn with_provenance(schema: &TableSchema, batch: RecordBatch, records: &[&DataRecord], batch_id: u64) -> Result<RecordBatch, arrow::error::ArrowError> {
    let rows = batch.num_rows();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns.push(Arc::new(Int64Array::from(vec![batch_id as i64; rows])));
    columns.push(Arc::new(Int32Array::from(records.iter().map(|r| r.partition).collect::<Vec<_>>())));
    columns.push(Arc::new(Int64Array::from(records.iter().map(|r| r.offset).collect::<Vec<_>>())));
    RecordBatch::try_new(bronze_schema(schema), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mssql_cdc_core::log::schema::{Column, ColumnType};

    /// A one-column feed: the decoding of each type is the log contract's, tested in
    /// `mssql_cdc_core::log::decode`; bronze adds the range check and the provenance.
    fn schema() -> TableSchema {
        TableSchema { columns: vec![Column { name: "id".into(), ty: ColumnType::Int64 }], key: vec!["id".into()], include_command_id: false }
    }

    fn record(offset: i64, text: &str) -> DataRecord {
        DataRecord { partition: 1, offset, value: text.as_bytes().to_vec() }
    }

    const GOOD: &str = r#"{"id":7,"_start_lsn":"0x0000002A000000010005","_seqval":"0x0000002A000000010004","_operation":2,"_commit_ts":"2026-01-01T09:00:00.000000Z","_capture_instance":"dbo_t","_generation":0}"#;

    #[test]
    fn json_records_decode_into_the_bronze_layout() {
        let decoded = decode(&schema(), &[record(5, GOOD)], None, Envelope::Native, 3, "0x0000002A000000010000", "0x0000002A000000010009");
        assert!(decoded.bad.is_empty(), "{:?}", decoded.bad);
        let batch = decoded.batch.unwrap();
        assert_eq!(batch.schema(), bronze_schema(&schema()));
        assert_eq!(batch.column_by_name(BATCH_ID).unwrap().as_primitive::<arrow::datatypes::Int64Type>().value(0), 3);
        assert_eq!(batch.column_by_name(KAFKA_OFFSET).unwrap().as_primitive::<arrow::datatypes::Int64Type>().value(0), 5);
    }

    /// Invariant 7: a bad record is named, never dropped silently, and does not take the good
    /// ones with it.
    #[test]
    fn bad_records_are_named_and_the_good_ones_kept() {
        let outside = GOOD.replace("0x0000002A000000010005", "0x0000002A000000020000");
        let records = [record(1, "not json"), record(2, GOOD), record(3, r#"{"id":"x"}"#), record(4, &outside), record(5, GOOD)];
        let decoded = decode(&schema(), &records, None, Envelope::Native, 0, "0x0000002A000000010000", "0x0000002A000000010009");
        let bad: Vec<i64> = decoded.bad.iter().map(|(r, _)| r.offset).collect();
        assert_eq!(bad, vec![1, 3, 4]);
        assert!(decoded.bad[2].1.contains("outside the batch's range"));
        assert_eq!(decoded.batch.unwrap().num_rows(), 2);
    }

    /// A Debezium feed lands as the native one would: an update's event is its two rows, both
    /// from the event's record; a tombstone is no row and not bad; a foreign event is bad.
    #[test]
    fn debezium_events_decode_into_the_rows_they_stand_for() {
        use mssql_cdc_core::log::debezium::event::{EventSettings, EventWriter};
        use mssql_cdc_core::log::debezium::TableNames;
        let names = TableNames { server: "p".into(), database: "d".into(), schema: "dbo".into(), table: "t".into(), topic: "p.d.dbo.t".into() };
        let mut writer = EventWriter::new(&schema(), names, EventSettings { schemas: true, tombstones: true });
        let native = |op: i64, seqval: &str| -> serde_json::Map<String, serde_json::Value> {
            let text = GOOD.replace("\"_operation\":2", &format!("\"_operation\":{op}")).replace("0x0000002A000000010004", seqval);
            serde_json::from_str(&text).unwrap()
        };
        let now = chrono::Utc::now();
        let mut events = writer.push(native(3, "0x0000002A000000010001"), now).unwrap();
        events.extend(writer.push(native(4, "0x0000002A000000010001"), now).unwrap());
        events.extend(writer.push(native(1, "0x0000002A000000010002"), now).unwrap());
        assert_eq!(events.len(), 3, "an update event, a delete event, its tombstone");
        let mut records: Vec<DataRecord> = events.iter().enumerate().map(|(i, e)| DataRecord { partition: 0, offset: i as i64, value: e.value.clone().unwrap_or_default() }).collect();
        records.push(record(9, r#"{"op":"c"}"#));
        let decoded = decode(&schema(), &records, None, Envelope::Debezium, 4, "0x0000002A000000010000", "0x0000002A000000010009");
        assert_eq!(decoded.bad.iter().map(|(r, _)| r.offset).collect::<Vec<_>>(), vec![9]);
        let batch = decoded.batch.unwrap();
        let operations = batch.column_by_name(log::OPERATION).unwrap().as_primitive::<arrow::datatypes::Int32Type>().values().to_vec();
        let offsets = batch.column_by_name(KAFKA_OFFSET).unwrap().as_primitive::<arrow::datatypes::Int64Type>().values().to_vec();
        assert_eq!((operations, offsets), (vec![3, 4, 1], vec![0, 0, 1]));
    }
}
