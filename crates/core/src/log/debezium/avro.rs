//! Debezium events in Avro (`format = "avro"` with `envelope = "debezium"`): the Avro schemas
//! Confluent's Avro converter derives from the events' Kafka Connect schemas, and the events'
//! payloads written as Avro datums of them (Confluent wire format: magic byte 0, the schema
//! id, the datum).
//!
//! The schemas follow the converter's rules: a Connect struct is an Avro record (its name the
//! Connect name, with characters Avro refuses replaced by `_`, as Debezium's
//! `schema.name.adjustment.mode = avro` does), an optional field a union `["null", T]` with
//! default `null`, `int16` an `int` marked `connect.type`, a named Connect type its primitive
//! with `connect.name` (and `Decimal` the `decimal` logical type, so Avro readers get
//! decimals). A record named twice (`before` and `after`) is defined once, then referred to by
//! name.

use std::collections::BTreeSet;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Map, Value as Json};

use crate::log::encode::{avro_long, confluent_header};

/// The Avro schema of a Connect schema (see the module's rules).
pub fn schema(connect: &Json) -> Json {
    let mut defined = BTreeSet::new();
    convert(connect, &mut defined)
}

fn convert(connect: &Json, defined: &mut BTreeSet<String>) -> Json {
    let inner = convert_required(connect, defined);
    if connect["optional"].as_bool().unwrap_or(false) { json!(["null", inner]) } else { inner }
}

fn convert_required(connect: &Json, defined: &mut BTreeSet<String>) -> Json {
    let ty = connect["type"].as_str().unwrap_or("string");
    let name = connect["name"].as_str();
    if ty == "struct" {
        let full = avro_name(name.unwrap_or("ConnectDefault"));
        if !defined.insert(full.clone()) {
            return Json::String(full);
        }
        let fields: Vec<Json> = connect["fields"]
            .as_array()
            .map(|fields| {
                fields
                    .iter()
                    .map(|field| {
                        let mut avro = json!({"name": avro_segment(field["field"].as_str().unwrap_or_default()), "type": convert(field, defined)});
                        if field["optional"].as_bool().unwrap_or(false) {
                            avro["default"] = Json::Null;
                        }
                        avro
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut record = json!({"type": "record", "name": full, "fields": fields});
        annotate(&mut record, connect);
        return record;
    }
    let primitive = match ty {
        "int8" | "int16" | "int32" => "int",
        "int64" => "long",
        "float" | "float32" => "float",
        "double" | "float64" => "double",
        "boolean" => "boolean",
        "bytes" => "bytes",
        _ => "string",
    };
    if name.is_none() && matches!(ty, "int32" | "int64" | "float" | "double" | "boolean" | "bytes" | "string") {
        return Json::String(primitive.to_owned());
    }
    let mut avro = json!({"type": primitive});
    if matches!(ty, "int8" | "int16") {
        avro["connect.type"] = json!(ty);
    }
    annotate(&mut avro, connect);
    if name == Some("org.apache.kafka.connect.data.Decimal") {
        let parameter = |key: &str| connect["parameters"][key].as_str().and_then(|v| v.parse::<u32>().ok());
        avro["logicalType"] = json!("decimal");
        avro["scale"] = json!(parameter("scale").unwrap_or(0));
        avro["precision"] = json!(parameter("connect.decimal.precision").unwrap_or(38));
    }
    avro
}

/// Copies the Connect name, version and parameters as the converter does.
fn annotate(avro: &mut Json, connect: &Json) {
    if let Some(name) = connect["name"].as_str() {
        avro["connect.name"] = json!(name);
    }
    if let Some(version) = connect["version"].as_i64() {
        avro["connect.version"] = json!(version);
    }
    if let Some(parameters) = connect["parameters"].as_object() {
        avro["connect.parameters"] = Json::Object(parameters.clone());
    }
}

/// A dotted Connect name as an Avro full name: each part an Avro name.
fn avro_name(name: &str) -> String {
    name.split('.').map(avro_segment).collect::<Vec<_>>().join(".")
}

/// One part of a name (a field's, or one between dots): letters, digits and `_`, not starting
/// with a digit; other characters become `_`.
pub fn avro_segment(part: &str) -> String {
    let mut out: String = part.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

/// `payload` (as the JSON converter writes it: bytes and decimals in base64) as a record in
/// the Confluent wire format under schema id `id`, by the Avro `schema` [`schema`] made.
pub fn encode(schema: &Json, id: u32, payload: &Json, out: &mut Vec<u8>) -> Result<(), String> {
    confluent_header(id, out);
    let mut named = Map::new();
    collect_named(schema, &mut named);
    write(schema, payload, &named, out)
}

/// Every record `schema` defines, by name (a later field may refer to one by name only).
fn collect_named(schema: &Json, named: &mut Map<String, Json>) {
    match schema {
        Json::Array(branches) => branches.iter().for_each(|branch| collect_named(branch, named)),
        Json::Object(object) if object.get("type") == Some(&json!("record")) => {
            if let Some(name) = object.get("name").and_then(Json::as_str) {
                named.insert(name.to_owned(), schema.clone());
            }
            for field in object.get("fields").and_then(Json::as_array).into_iter().flatten() {
                collect_named(&field["type"], named);
            }
        }
        _ => {}
    }
}

fn write(schema: &Json, value: &Json, named: &Map<String, Json>, out: &mut Vec<u8>) -> Result<(), String> {
    match schema {
        Json::Array(branches) => {
            let null_at = branches.iter().position(|b| b == "null");
            match (value.is_null(), null_at) {
                (true, Some(at)) => avro_long(at as i64, out),
                (true, None) => return Err("a null where the schema has no null".into()),
                (false, _) => {
                    let (at, branch) = branches.iter().enumerate().find(|(_, b)| *b != "null").ok_or("a union of null alone")?;
                    avro_long(at as i64, out);
                    write(branch, value, named, out)?;
                }
            }
        }
        Json::String(name) => match named.get(name) {
            Some(record) => write(record, value, named, out)?,
            None => primitive(name, value, out)?,
        },
        Json::Object(object) if object.get("type") == Some(&json!("record")) => {
            let fields = object.get("fields").and_then(Json::as_array).ok_or("a record without fields")?;
            for field in fields {
                let name = field["name"].as_str().unwrap_or_default();
                // A column whose name Avro refuses has its adjusted name in the schema.
                let given = value.get(name).or_else(|| value.as_object()?.iter().find(|(key, _)| avro_segment(key) == name).map(|(_, v)| v));
                write(&field["type"], given.unwrap_or(&Json::Null), named, out).map_err(|e| format!("{name}: {e}"))?;
            }
        }
        Json::Object(object) => primitive(object.get("type").and_then(Json::as_str).unwrap_or_default(), value, out)?,
        _ => return Err(format!("not a schema: {schema}")),
    }
    Ok(())
}

fn primitive(ty: &str, value: &Json, out: &mut Vec<u8>) -> Result<(), String> {
    let wrong = || format!("`{value}` is not an Avro {ty}");
    match ty {
        "null" => {}
        "boolean" => out.push(u8::from(value.as_bool().ok_or_else(wrong)?)),
        "int" | "long" => avro_long(value.as_i64().ok_or_else(wrong)?, out),
        "float" => out.extend_from_slice(&(value.as_f64().ok_or_else(wrong)? as f32).to_le_bytes()),
        "double" => out.extend_from_slice(&value.as_f64().ok_or_else(wrong)?.to_le_bytes()),
        "string" => {
            let text = value.as_str().ok_or_else(wrong)?;
            avro_long(text.len() as i64, out);
            out.extend_from_slice(text.as_bytes());
        }
        "bytes" => {
            let bytes = STANDARD.decode(value.as_str().ok_or_else(wrong)?).map_err(|_| wrong())?;
            avro_long(bytes.len() as i64, out);
            out.extend_from_slice(&bytes);
        }
        other => return Err(format!("the Avro type `{other}` is not one Debezium events use")),
    }
    Ok(())
}

/// An Avro value read by its writer schema as the JSON converter's payload: records as
/// objects, unions as their branch, bytes and decimals as base64.
pub fn payload(value: apache_avro::types::Value) -> Result<Json, String> {
    use apache_avro::types::Value as A;
    Ok(match value {
        A::Null => Json::Null,
        A::Boolean(b) => Json::Bool(b),
        A::Int(i) => json!(i),
        A::Long(l) => json!(l),
        A::Float(f) => json!(f),
        A::Double(d) => json!(d),
        A::String(s) | A::Enum(_, s) => Json::String(s),
        A::Bytes(bytes) | A::Fixed(_, bytes) => Json::String(STANDARD.encode(bytes)),
        A::Decimal(decimal) => Json::String(STANDARD.encode(<Vec<u8>>::try_from(&decimal).map_err(|e| e.to_string())?)),
        A::Union(_, inner) => payload(*inner)?,
        A::Record(fields) => Json::Object(fields.into_iter().map(|(name, value)| Ok((name, payload(value)?))).collect::<Result<Map<_, _>, String>>()?),
        other => return Err(format!("an Avro value Debezium events do not hold: {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::debezium::{connect, TableNames};
    use crate::log::schema::{Column, ColumnType, TableSchema};

    fn names() -> TableNames {
        TableNames { server: "srv-1".into(), database: "shop".into(), schema: "dbo".into(), table: "orders".into(), topic: "srv-1.shop.dbo.orders".into() }
    }

    fn table() -> TableSchema {
        TableSchema {
            columns: vec![
                Column { name: "id".into(), ty: ColumnType::Int32 },
                Column { name: "qty".into(), ty: ColumnType::Int16 },
                Column { name: "amount".into(), ty: ColumnType::Decimal { precision: 10, scale: 2 } },
                Column { name: "day".into(), ty: ColumnType::Date },
            ],
            key: vec!["id".into()],
            include_command_id: true,
        }
    }

    /// The envelope's Avro schema parses (Apache Avro's own parser), names its value record
    /// once for both images, and keeps what Avro readers need: decimals as the `decimal`
    /// logical type, Connect's names and types as annotations.
    #[test]
    fn the_envelope_schema_is_valid_avro_with_connects_annotations() {
        let avro = schema(&connect::envelope(&table(), &names()));
        apache_avro::Schema::parse(&avro).unwrap();
        let text = avro.to_string();
        assert_eq!(text.matches("\"type\":\"record\",\"name\":\"srv_1.shop.dbo.orders.Value\"").count() + text.matches("\"name\":\"srv_1.shop.dbo.orders.Value\",\"type\":\"record\"").count(), 1, "{text}");
        let after = avro["fields"].as_array().unwrap().iter().find(|f| f["name"] == "after").unwrap();
        assert_eq!(after["type"], json!(["null", "srv_1.shop.dbo.orders.Value"]));
        assert_eq!(after["default"], Json::Null);
        let key = schema(&connect::key(&table(), &names()).unwrap());
        assert_eq!(key["name"], "srv_1.shop.dbo.orders.Key");
        assert!(text.contains("\"logicalType\":\"decimal\""), "{text}");
        assert!(text.contains("\"connect.type\":\"int16\""), "{text}");
    }

    /// Invariant: a payload written as Avro reads back (by Apache Avro's reader) as the same
    /// payload, nulls, unions, decimals and nested records included.
    #[test]
    fn payloads_round_trip_through_avro() {
        let connect_schema = connect::envelope(&table(), &names());
        let avro = schema(&connect_schema);
        let image = json!({"id": 7, "qty": -3, "amount": "BNI=", "day": 19000});
        let payload = json!({
            "before": null, "after": image, "op": "c", "ts_ms": 1, "ts_us": 1000, "ts_ns": null, "transaction": null,
            "source": {"version": "v", "connector": "sqlserver", "name": "srv-1", "ts_ms": 5, "snapshot": "false", "db": "shop", "sequence": null,
                "ts_us": 5000, "ts_ns": 5_000_000, "schema": "dbo", "table": "orders", "change_lsn": "00000027:00000758:0003",
                "commit_lsn": "00000027:00000758:0005", "event_serial_no": 1, "capture_instance": "dbo_orders", "generation": 0, "command_id": 1, "snapshot_lsn": null}
        });
        let mut out = Vec::new();
        encode(&avro, 42, &payload, &mut out).unwrap();
        assert_eq!(&out[..5], &[0, 0, 0, 0, 42]);
        let parsed = apache_avro::Schema::parse(&avro).unwrap();
        let read = apache_avro::from_avro_datum(&parsed, &mut &out[5..], None).unwrap();
        assert_eq!(super::payload(read).unwrap(), payload);
        let mut bad = Vec::new();
        assert!(encode(&avro, 42, &json!({"op": "c"}), &mut bad).is_err(), "a required field missing is an error");
    }
}
