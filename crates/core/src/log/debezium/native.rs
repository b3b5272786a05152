//! Native rows from Debezium events: what bronze stores of a Debezium feed is what it stores
//! of a native one. A `c` is an insert row (2), a `d` a delete row (1), a `u` the
//! before-image (3) and after-image (4) rows of one update, an `r` a snapshot row (0); a
//! tombstone is no row.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value as Json};

use super::native_lsn;
use crate::log::encode::{date_text, decimal_text, time_text, timestamp_text};
use crate::log::schema::{self as log, ColumnType, TableSchema};

/// The native rows (JSON objects in the log's layout) of one record value; none for a
/// tombstone (an empty value).
pub fn native_rows(schema: &TableSchema, value: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let mut event: Json = serde_json::from_slice(value).map_err(|e| format!("not a Debezium event: {e}"))?;
    if event.get("schema").is_some() && event.get("payload").is_some() {
        event = event["payload"].take();
    }
    event_rows(schema, &event)
}

/// The native rows of one record value in Avro (the Confluent wire format), read by its
/// writer schema (`writer` gives the schema of an id); none for a tombstone.
pub fn native_rows_avro(schema: &TableSchema, value: &[u8], writer: impl Fn(u32) -> Option<apache_avro::Schema>) -> Result<Vec<Vec<u8>>, String> {
    if value.is_empty() {
        return Ok(Vec::new());
    }
    let id = crate::log::decode::confluent_schema_id(value).ok_or("not in the Confluent wire format (magic byte 0, schema id)")?;
    let avro = writer(id).ok_or_else(|| format!("schema id {id} is not in the registry"))?;
    let decoded = apache_avro::from_avro_datum(&avro, &mut &value[5..], None).map_err(|e| format!("Avro datum does not match schema {id}: {e}"))?;
    let mut event = super::avro::payload(decoded)?;
    // Columns whose names Avro refuses travel under their adjusted names.
    for image in ["before", "after"] {
        if let Some(object) = event.get_mut(image).and_then(Json::as_object_mut) {
            for column in &schema.columns {
                let adjusted = super::avro::avro_segment(&column.name);
                if adjusted != column.name
                    && let Some(value) = object.remove(&adjusted)
                {
                    object.insert(column.name.clone(), value);
                }
            }
        }
    }
    event_rows(schema, &event)
}

/// The native rows of one event's payload.
fn event_rows(schema: &TableSchema, event: &Json) -> Result<Vec<Vec<u8>>, String> {
    let source = event.get("source").and_then(Json::as_object).ok_or("a Debezium event without `source`")?;
    let text = |name: &str| source.get(name).and_then(Json::as_str);
    let lsn = |name: &str| text(name).and_then(native_lsn).ok_or_else(|| format!("source.{name} is not an LSN"));
    let commit_lsn = lsn("commit_lsn")?;
    let op = event.get("op").and_then(Json::as_str).ok_or("a Debezium event without `op`")?;
    let micros = source.get("ts_us").and_then(Json::as_i64).or_else(|| source.get("ts_ms").and_then(Json::as_i64).and_then(|ms| ms.checked_mul(1000))).ok_or("source.ts_ms is missing or out of range")?;
    in_range(micros, "source.ts_us")?;
    let mut meta = Map::new();
    meta.insert(log::START_LSN.into(), json!(commit_lsn));
    meta.insert(log::SEQVAL.into(), json!(if op == "r" { commit_lsn.clone() } else { lsn("change_lsn")? }));
    if schema.include_command_id {
        meta.insert(log::COMMAND_ID.into(), source.get("command_id").cloned().unwrap_or(Json::Null));
    }
    meta.insert(log::COMMIT_TS.into(), json!(format!("{}Z", timestamp_text(micros))));
    meta.insert(log::CAPTURE_INSTANCE.into(), json!(text("capture_instance").ok_or("source.capture_instance is missing (not written by mssql-cdc)")?));
    meta.insert(log::GENERATION.into(), source.get("generation").cloned().unwrap_or(json!(0)));
    // A chunked snapshot's rows are stamped with their wave's LSN; the snapshot's own is ours.
    let snapshot_lsn = match text("snapshot_lsn") {
        Some(lsn) => native_lsn(lsn).ok_or("source.snapshot_lsn is not an LSN")?,
        None => commit_lsn.clone(),
    };
    meta.insert(log::SNAPSHOT.into(), if op == "r" { json!(snapshot_lsn) } else { Json::Null });
    let images: &[(&str, i64)] = match op {
        "c" => &[("after", 2)],
        "d" => &[("before", 1)],
        "u" => &[("before", 3), ("after", 4)],
        "r" => &[("after", 0)],
        other => return Err(format!("op `{other}` is not a change mssql-cdc writes")),
    };
    let mut rows = Vec::with_capacity(images.len());
    for (image, operation) in images {
        let row = event.get(*image).and_then(Json::as_object).ok_or_else(|| format!("an `{op}` event without `{image}`"))?;
        let mut native = Map::with_capacity(schema.columns.len() + meta.len() + 1);
        for column in &schema.columns {
            let value = row.get(&column.name).unwrap_or(&Json::Null);
            native.insert(column.name.clone(), native_value(column.ty, value).map_err(|e| format!("{image}.{}: {e}", column.name))?);
        }
        native.extend(meta.clone());
        native.insert(log::OPERATION.into(), json!(operation));
        rows.push(serde_json::to_vec(&native).map_err(|e| e.to_string())?);
    }
    Ok(rows)
}

/// A value in Debezium's representation as the log's JSON writes it.
pub fn native_value(ty: ColumnType, value: &Json) -> Result<Json, String> {
    if value.is_null() {
        return Ok(Json::Null);
    }
    let number = || value.as_i64().ok_or_else(|| format!("{value} is not a number"));
    Ok(match ty {
        ColumnType::Decimal { scale, .. } => {
            let text = value.as_str().ok_or_else(|| format!("{value} is not base64 text"))?;
            let bytes = STANDARD.decode(text).map_err(|e| format!("`{text}` is not base64: {e}"))?;
            if bytes.is_empty() || bytes.len() > 16 {
                return Err(format!("`{text}` is not a decimal's unscaled bytes"));
            }
            let fill = if bytes[0] & 0x80 != 0 { 0xFF } else { 0x00 };
            let mut full = [fill; 16];
            full[16 - bytes.len()..].copy_from_slice(&bytes);
            json!(decimal_text(i128::from_be_bytes(full), scale))
        }
        ColumnType::Date => {
            let days = number()?;
            // 0001-01-01 to 9999-12-31, SQL Server's range.
            if !(-719_162..=2_932_896).contains(&days) {
                return Err(format!("{days} days is outside SQL Server's dates"));
            }
            json!(date_text(i32::try_from(days).map_err(|e| e.to_string())?))
        }
        ColumnType::Time => {
            let micros = number()?;
            if !(0..86_400_000_000).contains(&micros) {
                return Err(format!("{micros} µs is not a time of day"));
            }
            json!(time_text(micros))
        }
        ColumnType::LocalTimestamp => json!(timestamp_text(in_range(number()?, "the timestamp")?)),
        ColumnType::Timestamp => {
            let text = value.as_str().ok_or_else(|| format!("{value} is not text"))?;
            let at = chrono::DateTime::parse_from_rfc3339(text).map_err(|e| format!("`{text}`: {e}"))?;
            json!(format!("{}Z", timestamp_text(at.timestamp_micros())))
        }
        _ => value.clone(),
    })
}

/// `micros` when it lies within SQL Server's years 1 to 9999.
fn in_range(micros: i64, what: &str) -> Result<i64, String> {
    const FIRST: i64 = -62_135_596_800_000_000;
    const LAST: i64 = 253_402_300_799_999_999;
    if (FIRST..=LAST).contains(&micros) { Ok(micros) } else { Err(format!("{what} {micros} µs is outside SQL Server's years 1 to 9999")) }
}

#[cfg(test)]
mod tests {
    use super::super::event::{EventSettings, EventWriter};
    use super::super::TableNames;
    use super::*;
    use crate::log::schema::Column;

    fn schema() -> TableSchema {
        let column = |name: &str, ty| Column { name: name.into(), ty };
        TableSchema {
            columns: vec![
                column("id", ColumnType::Int64),
                column("amount", ColumnType::Decimal { precision: 18, scale: 4 }),
                column("day", ColumnType::Date),
                column("at", ColumnType::Time),
                column("local", ColumnType::LocalTimestamp),
                column("instant", ColumnType::Timestamp),
                column("blob", ColumnType::Binary),
                column("name", ColumnType::String),
            ],
            key: vec!["id".into()],
            include_command_id: true,
        }
    }

    fn row(op: i64, seqval: &str, amount: &str) -> Json {
        json!({"id": 7, "amount": amount, "day": "2026-02-28", "at": "23:59:59.999999", "local": "1969-12-31T23:59:59.500000",
            "instant": "2026-03-01T10:00:00.000001Z", "blob": "AAH/", "name": null,
            "_start_lsn": "0x00000027000007580005", "_seqval": seqval, "_operation": op, "_command_id": 3,
            "_commit_ts": "2026-01-01T09:00:00.123456Z", "_capture_instance": "dbo_orders", "_generation": 2, "_snapshot": null})
    }

    /// Invariant: a native row through the Debezium envelope and back is the same row, for
    /// every type and every kind of change.
    #[test]
    fn native_rows_round_trip_through_debezium_events() {
        let names = TableNames { server: "srv".into(), database: "shop".into(), schema: "dbo".into(), table: "orders".into(), topic: "srv.shop.dbo.orders".into() };
        for schemas in [true, false] {
            let mut writer = EventWriter::new(&schema(), names.clone(), EventSettings { schemas, tombstones: true });
            // A chunked snapshot's row: stamped with its wave's LSN, naming the snapshot's.
            let mut snapshot = row(0, "0x00000027000007580005", "1.0000");
            snapshot["_snapshot"] = json!("0x00000027000007580001");
            let rows = [snapshot, row(2, "0x00000027000007580001", "-12.3400"), row(3, "0x00000027000007580002", "0.0001"), row(4, "0x00000027000007580002", "99999999999999.9999"), row(1, "0x00000027000007580003", "5.0000")];
            let mut back = Vec::new();
            for native in &rows {
                for record in writer.push(native.as_object().cloned().unwrap(), chrono::Utc::now()).unwrap() {
                    for bytes in native_rows(&schema(), record.value.as_deref().unwrap_or_default()).unwrap() {
                        back.push(serde_json::from_slice::<Json>(&bytes).unwrap());
                    }
                }
            }
            assert_eq!(back, rows, "schemas: {schemas}");
        }
    }

    #[test]
    fn values_outside_sql_servers_ranges_are_refused_not_wrapped() {
        assert!(native_value(ColumnType::Date, &json!(i64::MAX)).is_err());
        assert!(native_value(ColumnType::Date, &json!(-719_163)).is_err());
        assert_eq!(native_value(ColumnType::Date, &json!(-1)).unwrap(), json!("1969-12-31"));
        assert!(native_value(ColumnType::Time, &json!(86_400_000_000i64)).is_err());
        assert!(native_value(ColumnType::LocalTimestamp, &json!(i64::MIN)).is_err());
        assert_eq!(native_value(ColumnType::Decimal { precision: 5, scale: 0 }, &json!("/w==")).unwrap(), json!("-1"));
    }

    #[test]
    fn a_tombstone_is_no_row_and_a_foreign_event_is_refused() {
        assert!(native_rows(&schema(), b"").unwrap().is_empty());
        assert!(native_rows(&schema(), br#"{"op":"c","after":{"id":1},"source":{"commit_lsn":"00000027:00000758:0005","change_lsn":"00000027:00000758:0005","ts_ms":1}}"#)
            .unwrap_err()
            .contains("capture_instance"));
        assert!(native_rows(&schema(), b"{}").is_err());
    }
}
