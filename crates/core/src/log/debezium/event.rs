//! Debezium events from the log's native rows.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Timelike, Utc};
use serde_json::{json, Map, Value as Json};

use super::{avro, connect, debezium_lsn, TableNames, VERSION};
use crate::log::encode::twos_complement;
use crate::log::schema::{self as log, ColumnType, TableSchema};

/// How events are written (`[debezium]` of the source).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventSettings {
    /// Wrap keys and values as Kafka Connect's JSON converter does with `schemas.enable`:
    /// `{"schema": ..., "payload": ...}`.
    pub schemas: bool,
    /// Follow each delete with a tombstone (same key, null value), for compacted topics.
    pub tombstones: bool,
}

/// One record to send.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRecord {
    /// The key (empty for a table without a key).
    pub key: Vec<u8>,
    /// The value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
}

/// The schema ids of a table's Avro key and value schemas ([`avro_schemas`]) in the registry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvroIds {
    /// The key schema's id (`None` for a table without a key).
    pub key: Option<u32>,
    /// The envelope schema's id.
    pub value: u32,
}

/// The Avro schemas of a table's keys (`None` without a key) and values, to register under
/// `<topic>-key` and `<topic>-value`.
pub fn avro_schemas(schema: &TableSchema, names: &TableNames) -> (Option<Json>, Json) {
    (connect::key(schema, names).map(|key| avro::schema(&key)), avro::schema(&connect::envelope(schema, names)))
}

/// How keys and values are serialized.
#[derive(Debug)]
enum Serialized {
    /// JSON, wrapped with the Connect schema when `schemas`.
    Json,
    /// Avro in the Confluent wire format: each schema with its id.
    Avro { key: Option<(Json, u32)>, value: (Json, u32) },
}

/// Writes one stream's events. It holds what spans rows: an update's before-image until its
/// after-image comes, and the last event's position for `event_serial_no`.
#[derive(Debug)]
pub struct EventWriter {
    schema: TableSchema,
    names: TableNames,
    settings: EventSettings,
    key_schema: Option<Json>,
    value_schema: Json,
    serialized: Serialized,
    before_image: Option<Map<String, Json>>,
    last: Option<(String, String, i64)>,
}

impl EventWriter {
    /// A writer of JSON events for `schema`'s rows of the table `names`.
    pub fn new(schema: &TableSchema, names: TableNames, settings: EventSettings) -> Self {
        let key_schema = connect::key(schema, &names);
        let value_schema = connect::envelope(schema, &names);
        Self { schema: schema.clone(), names, settings, key_schema, value_schema, serialized: Serialized::Json, before_image: None, last: None }
    }

    /// A writer of Avro events, under the ids its [`avro_schemas`] were registered with
    /// (`settings.schemas` does not apply: the registry holds the schemas).
    pub fn avro(schema: &TableSchema, names: TableNames, settings: EventSettings, ids: AvroIds) -> Self {
        let (key, value) = avro_schemas(schema, &names);
        let mut writer = Self::new(schema, names, settings);
        writer.serialized = Serialized::Avro { key: key.zip(ids.key), value: (value, ids.value) };
        writer
    }

    /// The events of one native row (a JSON object in the log's layout), at `now`: none for an
    /// update's before-image (it waits for its after-image), one, or a delete and its tombstone.
    pub fn push(&mut self, row: Map<String, Json>, now: DateTime<Utc>) -> Result<Vec<EventRecord>, String> {
        let operation = row.get(log::OPERATION).and_then(Json::as_i64).ok_or("a row without _operation")?;
        if let Some(before) = self.before_image.as_ref().filter(|before| operation != 4 || before.get(log::SEQVAL) != row.get(log::SEQVAL)) {
            return Err(format!("an update's before-image at seqval {} is not followed by its after-image", before.get(log::SEQVAL).unwrap_or(&Json::Null)));
        }
        let (op, before, after, count) = match operation {
            3 => {
                self.before_image = Some(row);
                return Ok(Vec::new());
            }
            4 => {
                let before = self.before_image.take().ok_or("an update's after-image without its before-image")?;
                let (old_key, new_key) = (self.key(&before)?, self.key(&row)?);
                if old_key != new_key {
                    return self.key_moved(before, old_key, row, new_key, now);
                }
                let serial = self.serial(&row, operation, 2);
                return self.event("u", Some(&before), Some(&row), &row, new_key, serial, now);
            }
            2 => ("c", None, Some(&row), 1),
            1 => ("d", Some(&row), None, 1),
            0 => ("r", None, Some(&row), 0),
            other => return Err(format!("operation {other} is not a change the log carries")),
        };
        let serial = self.serial(&row, operation, count);
        let key = self.key(&row)?;
        self.event(op, before, after, &row, key, serial, now)
    }

    /// One event under `key` (and a delete's tombstone); `row` gives `source`.
    #[allow(clippy::too_many_arguments)]
    fn event(&self, op: &str, before: Option<&Map<String, Json>>, after: Option<&Map<String, Json>>, row: &Map<String, Json>, key: Vec<u8>, serial: Option<i64>, now: DateTime<Utc>) -> Result<Vec<EventRecord>, String> {
        let operation = row.get(log::OPERATION).and_then(Json::as_i64).unwrap_or_default();
        let payload = json!({
            "before": before.map(|image| self.image(image)).transpose()?,
            "after": after.map(|image| self.image(image)).transpose()?,
            "source": self.source(row, operation, serial)?,
            "transaction": null,
            "op": op,
            "ts_ms": now.timestamp_millis(),
            "ts_us": now.timestamp_micros(),
            "ts_ns": now.timestamp_nanos_opt(),
        });
        let value = match &self.serialized {
            Serialized::Avro { value: (schema, id), .. } => {
                let mut out = Vec::with_capacity(256);
                avro::encode(schema, *id, &payload, &mut out)?;
                out
            }
            Serialized::Json if self.settings.schemas => serde_json::to_vec(&connect::wrapped(&self.value_schema, payload)).map_err(|e| e.to_string())?,
            Serialized::Json => serde_json::to_vec(&payload).map_err(|e| e.to_string())?,
        };
        let mut records = vec![EventRecord { key: key.clone(), value: Some(value) }];
        if op == "d" && self.settings.tombstones {
            records.push(EventRecord { key, value: None });
        }
        Ok(records)
    }

    /// An update pair whose key changed (the key is a unique index CDC logs as an update):
    /// as Debezium writes it, a delete under the old key (with its tombstone) and a create
    /// under the new one, both at the pair's serial number.
    fn key_moved(&mut self, before: Map<String, Json>, old_key: Vec<u8>, after: Map<String, Json>, new_key: Vec<u8>, now: DateTime<Utc>) -> Result<Vec<EventRecord>, String> {
        let serial = self.serial(&after, 4, 2);
        let mut records = self.event("d", Some(&before), None, &before, old_key, serial, now)?;
        records.extend(self.event("c", None, Some(&after), &after, new_key, serial, now)?);
        Ok(records)
    }

    /// Whether an update's before-image still waits for its after-image (at the end of a
    /// chunk: a row lost).
    pub fn finish(&self) -> Result<(), String> {
        match &self.before_image {
            Some(before) => Err(format!("an update's before-image at seqval {} has no after-image", before.get(log::SEQVAL).unwrap_or(&Json::Null))),
            None => Ok(()),
        }
    }

    /// `event_serial_no` as Debezium counts it: events at the same (commit, change) LSNs count
    /// on (a key update logged as a delete and an insert: 1, 2), an update counts 2.
    fn serial(&mut self, row: &Map<String, Json>, operation: i64, count: i64) -> Option<i64> {
        if operation == 0 {
            return None;
        }
        let text = |name: &str| row.get(name).and_then(Json::as_str).unwrap_or_default().to_owned();
        let (start, seqval) = (text(log::START_LSN), text(log::SEQVAL));
        let serial = match &self.last {
            Some((last_start, last_seqval, last)) if *last_start == start && *last_seqval == seqval => last + count,
            _ => count,
        };
        self.last = Some((start, seqval, serial));
        Some(serial)
    }

    fn key(&self, row: &Map<String, Json>) -> Result<Vec<u8>, String> {
        let Some(key_schema) = &self.key_schema else { return Ok(Vec::new()) };
        let mut payload = Map::new();
        for index in self.schema.key_indexes() {
            let column = &self.schema.columns[index];
            payload.insert(column.name.clone(), debezium_value(column.ty, row.get(&column.name).unwrap_or(&Json::Null))?);
        }
        match &self.serialized {
            Serialized::Avro { key: Some((schema, id)), .. } => {
                let mut out = Vec::with_capacity(32);
                avro::encode(schema, *id, &Json::Object(payload), &mut out)?;
                Ok(out)
            }
            Serialized::Avro { key: None, .. } => Err("a keyed table's key schema has no registry id".into()),
            Serialized::Json if self.settings.schemas => serde_json::to_vec(&connect::wrapped(key_schema, Json::Object(payload))).map_err(|e| e.to_string()),
            Serialized::Json => serde_json::to_vec(&Json::Object(payload)).map_err(|e| e.to_string()),
        }
    }

    /// A row image: the captured columns in Debezium's representation.
    fn image(&self, row: &Map<String, Json>) -> Result<Json, String> {
        let mut image = Map::with_capacity(self.schema.columns.len());
        for column in &self.schema.columns {
            let value = row.get(&column.name).unwrap_or(&Json::Null);
            image.insert(column.name.clone(), debezium_value(column.ty, value).map_err(|e| format!("column `{}`: {e}", column.name))?);
        }
        Ok(Json::Object(image))
    }

    fn source(&self, row: &Map<String, Json>, operation: i64, serial: Option<i64>) -> Result<Json, String> {
        let text = |name: &str| row.get(name).and_then(Json::as_str);
        let commit = text(log::COMMIT_TS).ok_or("a row without _commit_ts")?;
        let micros = DateTime::parse_from_rfc3339(commit).map_err(|e| format!("_commit_ts `{commit}`: {e}"))?.timestamp_micros();
        let lsn = |name: &str| text(name).and_then(debezium_lsn);
        let snapshot = operation == 0;
        Ok(json!({
            "version": VERSION,
            "connector": "sqlserver",
            "name": self.names.server,
            "ts_ms": micros.div_euclid(1000),
            "snapshot": if snapshot { "true" } else { "false" },
            "db": self.names.database,
            "sequence": null,
            "ts_us": micros,
            "ts_ns": micros.checked_mul(1000),
            "schema": self.names.schema,
            "table": self.names.table,
            "change_lsn": if snapshot { None } else { lsn(log::SEQVAL) },
            "commit_lsn": lsn(log::START_LSN),
            "event_serial_no": serial,
            "capture_instance": text(log::CAPTURE_INSTANCE),
            "generation": row.get(log::GENERATION),
            "command_id": row.get(log::COMMAND_ID),
            "snapshot_lsn": if snapshot { lsn(log::SNAPSHOT) } else { None },
        }))
    }
}

/// A value in the log's JSON as Debezium writes it: decimals as the base64 of their unscaled
/// two's-complement bytes, dates as days since 1970, times and local timestamps as
/// microseconds (`MicroTime`, `MicroTimestamp`), `datetimeoffset` as ISO text; the rest as is.
pub fn debezium_value(ty: ColumnType, value: &Json) -> Result<Json, String> {
    let Some(text) = value.as_str() else { return Ok(value.clone()) };
    let bad = |what: &str| format!("`{text}` is not a {what}");
    Ok(match ty {
        ColumnType::Decimal { scale, .. } => Json::String(STANDARD.encode(twos_complement(unscaled(text, scale).ok_or_else(|| bad("decimal"))?))),
        ColumnType::Date => {
            let date = NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|_| bad("date"))?;
            json!(date.signed_duration_since(NaiveDate::default()).num_days())
        }
        ColumnType::Time => {
            let time = NaiveTime::parse_from_str(text, "%H:%M:%S%.f").map_err(|_| bad("time"))?;
            json!(i64::from(time.num_seconds_from_midnight()) * 1_000_000 + i64::from(time.nanosecond() / 1000))
        }
        ColumnType::LocalTimestamp => json!(NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").map_err(|_| bad("timestamp"))?.and_utc().timestamp_micros()),
        _ => value.clone(),
    })
}

/// The unscaled value of a decimal's text at `scale` (`"-12.5"` at 2 is -1250).
fn unscaled(text: &str, scale: i8) -> Option<i128> {
    let (negative, digits) = text.strip_prefix('-').map_or((false, text), |rest| (true, rest));
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let scale = usize::try_from(scale).ok()?;
    if frac.len() > scale || !(int.bytes().chain(frac.bytes())).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let joined = format!("{int}{frac:0<scale$}");
    let value: i128 = joined.parse().ok()?;
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::schema::Column;

    fn schema() -> TableSchema {
        TableSchema {
            columns: vec![
                Column { name: "id".into(), ty: ColumnType::Int32 },
                Column { name: "amount".into(), ty: ColumnType::Decimal { precision: 10, scale: 2 } },
                Column { name: "day".into(), ty: ColumnType::Date },
            ],
            key: vec!["id".into()],
            include_command_id: true,
        }
    }

    fn names() -> TableNames {
        TableNames { server: "srv".into(), database: "shop".into(), schema: "dbo".into(), table: "orders".into(), topic: "srv.shop.dbo.orders".into() }
    }

    fn row(id: i64, op: i64, seqval: &str, amount: &str) -> Map<String, Json> {
        let value = json!({"id": id, "amount": amount, "day": "1970-01-03", "_start_lsn": "0x00000027000007580005", "_seqval": seqval, "_operation": op,
            "_command_id": 1, "_commit_ts": "2026-01-01T09:00:00.123456Z", "_capture_instance": "dbo_orders", "_generation": 0, "_snapshot": null});
        value.as_object().cloned().unwrap_or_default()
    }

    fn payload(record: &EventRecord) -> Json {
        serde_json::from_slice::<Json>(record.value.as_deref().unwrap_or_default()).map(|v| v["payload"].clone()).unwrap_or_default()
    }

    #[test]
    fn values_take_debeziums_representation() {
        assert_eq!(debezium_value(ColumnType::Decimal { precision: 10, scale: 2 }, &json!("12.34")).unwrap(), json!("BNI="));
        assert_eq!(debezium_value(ColumnType::Decimal { precision: 10, scale: 2 }, &json!("-0.5")).unwrap(), json!(STANDARD.encode(twos_complement(-50))));
        assert_eq!(debezium_value(ColumnType::Date, &json!("1970-01-03")).unwrap(), json!(2));
        assert_eq!(debezium_value(ColumnType::Time, &json!("00:00:01.000002")).unwrap(), json!(1_000_002));
        assert_eq!(debezium_value(ColumnType::LocalTimestamp, &json!("1970-01-01T00:00:01.5")).unwrap(), json!(1_500_000));
        assert_eq!(debezium_value(ColumnType::Int32, &json!(null)).unwrap(), json!(null));
        assert!(debezium_value(ColumnType::Date, &json!("yesterday")).is_err());
    }

    #[test]
    fn an_update_pair_is_one_u_event_and_a_delete_is_followed_by_its_tombstone() {
        let mut writer = EventWriter::new(&schema(), names(), EventSettings { schemas: true, tombstones: true });
        let now = DateTime::<Utc>::default();
        assert!(writer.push(row(1, 3, "0x00000027000007580003", "1.00"), now).unwrap().is_empty());
        let update = writer.push(row(1, 4, "0x00000027000007580003", "2.50"), now).unwrap();
        assert_eq!(update.len(), 1);
        let event = payload(&update[0]);
        assert_eq!((event["op"].as_str(), event["before"]["amount"].as_str(), event["after"]["amount"].as_str()), (Some("u"), Some("ZA=="), Some("APo=")));
        assert_eq!(event["source"]["change_lsn"], "00000027:00000758:0003");
        assert_eq!(event["source"]["commit_lsn"], "00000027:00000758:0005");
        assert_eq!((event["source"]["event_serial_no"].as_i64(), event["source"]["ts_us"].as_i64()), (Some(2), Some(1_767_258_000_123_456)));
        let key: Json = serde_json::from_slice(&update[0].key).unwrap();
        assert_eq!((key["payload"]["id"].as_i64(), key["schema"]["name"].as_str()), (Some(1), Some("srv.shop.dbo.orders.Key")));
        let delete = writer.push(row(1, 1, "0x00000027000007580004", "2.50"), now).unwrap();
        assert_eq!((delete.len(), delete[1].value.is_none(), delete[1].key == delete[0].key), (2, true, true));
        assert_eq!(payload(&delete[0])["op"], "d");
    }

    #[test]
    fn a_key_update_logged_as_delete_and_insert_counts_serials_1_and_2() {
        let mut writer = EventWriter::new(&schema(), names(), EventSettings { schemas: false, tombstones: false });
        let now = DateTime::<Utc>::default();
        let delete = writer.push(row(1, 1, "0x00000027000007580003", "1.00"), now).unwrap();
        let insert = writer.push(row(2, 2, "0x00000027000007580003", "1.00"), now).unwrap();
        let serial = |r: &EventRecord| serde_json::from_slice::<Json>(r.value.as_deref().unwrap()).unwrap()["source"]["event_serial_no"].as_i64();
        assert_eq!((delete.len(), serial(&delete[0]), serial(&insert[0])), (1, Some(1), Some(2)));
        // Without schemas the key is the bare key columns.
        assert_eq!(String::from_utf8(insert[0].key.clone()).unwrap(), r#"{"id":2}"#);
    }

    #[test]
    fn an_update_pair_that_moves_the_key_is_a_delete_its_tombstone_and_a_create() {
        let mut writer = EventWriter::new(&schema(), names(), EventSettings { schemas: false, tombstones: true });
        let now = DateTime::<Utc>::default();
        writer.push(row(1, 3, "0x00000027000007580003", "1.00"), now).unwrap();
        let moved = writer.push(row(2, 4, "0x00000027000007580003", "1.00"), now).unwrap();
        let ops: Vec<(String, Option<String>)> = moved
            .iter()
            .map(|r| (String::from_utf8(r.key.clone()).unwrap(), r.value.as_ref().map(|v| serde_json::from_slice::<Json>(v).unwrap()["op"].as_str().unwrap_or_default().to_owned())))
            .collect();
        assert_eq!(ops, [(r#"{"id":1}"#.to_owned(), Some("d".to_owned())), (r#"{"id":1}"#.to_owned(), None), (r#"{"id":2}"#.to_owned(), Some("c".to_owned()))]);
        assert!(writer.finish().is_ok());
        writer.push(row(3, 3, "0x00000027000007580004", "1.00"), now).unwrap();
        assert!(writer.finish().is_err(), "a before-image left at the end of a chunk is an error");
    }

    #[test]
    fn a_before_image_without_its_after_image_is_refused() {
        let mut writer = EventWriter::new(&schema(), names(), EventSettings { schemas: false, tombstones: false });
        writer.push(row(1, 3, "0x00000027000007580003", "1.00"), DateTime::<Utc>::default()).unwrap();
        assert!(writer.push(row(1, 2, "0x00000027000007580004", "1.00"), DateTime::<Utc>::default()).is_err());
    }
}
