//! Kafka Connect schemas of Debezium's keys and values, as the JSON converter writes them
//! with `schemas.enable=true`.

use serde_json::{json, Map, Value as Json};

use super::TableNames;
use crate::log::schema::{ColumnType, TableSchema};

/// The snapshot markers Debezium's `source.snapshot` enum allows.
pub const SNAPSHOT_ALLOWED: &str = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental";

/// The Connect schema of one column's value.
pub fn column(name: &str, ty: ColumnType, optional: bool) -> Json {
    let mut field = match ty {
        ColumnType::Boolean => json!({"type": "boolean"}),
        ColumnType::Int16 => json!({"type": "int16"}),
        ColumnType::Int32 => json!({"type": "int32"}),
        ColumnType::Int64 => json!({"type": "int64"}),
        ColumnType::Float32 => json!({"type": "float"}),
        ColumnType::Float64 => json!({"type": "double"}),
        ColumnType::Decimal { precision, scale } => json!({
            "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
            "parameters": {"scale": scale.to_string(), "connect.decimal.precision": precision.to_string()}
        }),
        ColumnType::String | ColumnType::Uuid => json!({"type": "string"}),
        ColumnType::Binary => json!({"type": "bytes"}),
        ColumnType::Date => json!({"type": "int32", "name": "io.debezium.time.Date", "version": 1}),
        ColumnType::Time => json!({"type": "int64", "name": "io.debezium.time.MicroTime", "version": 1}),
        ColumnType::LocalTimestamp => json!({"type": "int64", "name": "io.debezium.time.MicroTimestamp", "version": 1}),
        ColumnType::Timestamp => json!({"type": "string", "name": "io.debezium.time.ZonedTimestamp", "version": 1}),
    };
    if let Some(object) = field.as_object_mut() {
        object.insert("optional".into(), Json::Bool(optional));
        object.insert("field".into(), Json::String(name.to_owned()));
    }
    field
}

fn plain(ty: &str, optional: bool, field: &str) -> Json {
    json!({"type": ty, "optional": optional, "field": field})
}

fn with_field(mut schema: Json, field: &str) -> Json {
    if let Some(object) = schema.as_object_mut() {
        object.insert("field".into(), Json::String(field.to_owned()));
    }
    schema
}

/// The key's schema: the key columns, named `<topic>.Key`; `None` for a table without a key
/// (its records carry no key).
pub fn key(schema: &TableSchema, names: &TableNames) -> Option<Json> {
    if schema.key.is_empty() {
        return None;
    }
    let fields: Vec<Json> = schema.key_indexes().into_iter().map(|i| column(&schema.columns[i].name, schema.columns[i].ty, false)).collect();
    Some(json!({"type": "struct", "fields": fields, "optional": false, "name": format!("{}.Key", names.topic)}))
}

/// The row image's schema (`before` and `after`), named `<topic>.Value`: the key columns
/// required, the others optional.
pub fn row(schema: &TableSchema, names: &TableNames) -> Json {
    let fields: Vec<Json> = schema.columns.iter().map(|c| column(&c.name, c.ty, !schema.key.contains(&c.name))).collect();
    json!({"type": "struct", "fields": fields, "optional": true, "name": format!("{}.Value", names.topic)})
}

/// The `source` struct's schema: Debezium's SQL Server fields, then ours.
pub fn source() -> Json {
    let snapshot = json!({
        "type": "string", "optional": true, "name": "io.debezium.data.Enum", "version": 1,
        "parameters": {"allowed": SNAPSHOT_ALLOWED}, "default": "false", "field": "snapshot"
    });
    let fields = vec![
        plain("string", false, "version"),
        plain("string", false, "connector"),
        plain("string", false, "name"),
        plain("int64", false, "ts_ms"),
        snapshot,
        plain("string", false, "db"),
        plain("string", true, "sequence"),
        plain("int64", true, "ts_us"),
        plain("int64", true, "ts_ns"),
        plain("string", false, "schema"),
        plain("string", false, "table"),
        plain("string", true, "change_lsn"),
        plain("string", true, "commit_lsn"),
        plain("int64", true, "event_serial_no"),
        plain("string", true, "capture_instance"),
        plain("int64", true, "generation"),
        plain("int32", true, "command_id"),
        plain("string", true, "snapshot_lsn"),
    ];
    json!({"type": "struct", "fields": fields, "optional": false, "name": "io.debezium.connector.sqlserver.Source", "version": 1})
}

/// The value's schema: the envelope `<topic>.Envelope` (version 2, as Debezium 2.6 and later).
pub fn envelope(schema: &TableSchema, names: &TableNames) -> Json {
    let row = row(schema, names);
    let transaction = json!({
        "type": "struct", "optional": true, "name": "event.block", "version": 1, "field": "transaction",
        "fields": [plain("string", false, "id"), plain("int64", false, "total_order"), plain("int64", false, "data_collection_order")]
    });
    let fields = vec![
        with_field(row.clone(), "before"),
        with_field(row, "after"),
        with_field(source(), "source"),
        transaction,
        plain("string", false, "op"),
        plain("int64", true, "ts_ms"),
        plain("int64", true, "ts_us"),
        plain("int64", true, "ts_ns"),
    ];
    json!({"type": "struct", "fields": fields, "optional": false, "name": format!("{}.Envelope", names.topic), "version": 2})
}

/// `{"schema": schema, "payload": payload}`.
pub fn wrapped(schema: &Json, payload: Json) -> Json {
    let mut object = Map::with_capacity(2);
    object.insert("schema".into(), schema.clone());
    object.insert("payload".into(), payload);
    Json::Object(object)
}
