//! The shape of a data record: the captured columns with their log types, then the metadata
//! columns every change row carries.
//!
//! One [`TableSchema`] gives three views of the same record: the Arrow schema the source builds
//! batches in (and the sinks decode into), the Avro schemas registered for the topic's keys and
//! values, and the JSON encoding documented in `docs/connectors/mssql-source.md`.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value as Json};

/// `_start_lsn`: the commit LSN of the change's transaction (10 bytes).
pub const START_LSN: &str = "_start_lsn";
/// `_seqval`: the order of the change within its transaction (10 bytes).
pub const SEQVAL: &str = "_seqval";
/// `_operation`: 1 delete, 2 insert, 3 update before-image, 4 update after-image, 0 snapshot.
pub const OPERATION: &str = "_operation";
/// `_command_id`: the statement's order within its transaction (SQL Server 2012+).
pub const COMMAND_ID: &str = "_command_id";
/// `_commit_ts`: the commit time, UTC, microseconds.
pub const COMMIT_TS: &str = "_commit_ts";
/// `_capture_instance`: the capture instance the row was read from.
pub const CAPTURE_INSTANCE: &str = "_capture_instance";
/// `_generation`: the stream's generation (0 until a re-snapshot).
pub const GENERATION: &str = "_generation";
/// `_snapshot`: on a snapshot row (operation 0), the snapshot's LSN S (10 bytes); NULL on a
/// change row.
pub const SNAPSHOT: &str = "_snapshot";

/// Bytes in an LSN or a seqval.
pub const LSN_BYTES: i32 = 10;

/// The type of a captured column on the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ColumnType {
    /// `bit`.
    Boolean,
    /// `tinyint` and `smallint` (16-bit: Delta has no unsigned byte).
    Int16,
    /// `int`.
    Int32,
    /// `bigint`.
    Int64,
    /// `real`.
    Float32,
    /// `float`.
    Float64,
    /// `decimal`, `numeric`, `money` (19,4), `smallmoney` (10,4).
    Decimal {
        /// Digits in all.
        precision: u8,
        /// Digits after the point.
        scale: i8,
    },
    /// `char`, `varchar`, `nchar`, `nvarchar`, `text`, `ntext`, `xml`.
    String,
    /// `binary`, `varbinary`, `image`, `rowversion`.
    Binary,
    /// `date`.
    Date,
    /// `time(n)`, microseconds since midnight.
    Time,
    /// `datetime`, `datetime2(n)`, `smalldatetime`: server-local wall-clock time, no zone,
    /// microseconds.
    LocalTimestamp,
    /// `datetimeoffset(n)`: the instant, in UTC, microseconds (the offset is not kept).
    Timestamp,
    /// `uniqueidentifier`, as its canonical upper-case text.
    Uuid,
}

impl ColumnType {
    /// The log type of a SQL Server type, given its catalog facts (`sys.types.name`,
    /// `precision`, `scale`); `None` for a type the log cannot carry.
    pub fn from_sql(type_name: &str, precision: u8, scale: u8) -> Option<Self> {
        Some(match type_name.to_ascii_lowercase().as_str() {
            "bit" => Self::Boolean,
            "tinyint" | "smallint" => Self::Int16,
            "int" => Self::Int32,
            "bigint" => Self::Int64,
            "real" => Self::Float32,
            "float" => Self::Float64,
            "decimal" | "numeric" => Self::Decimal { precision: precision.clamp(1, 38), scale: scale.min(precision) as i8 },
            "money" => Self::Decimal { precision: 19, scale: 4 },
            "smallmoney" => Self::Decimal { precision: 10, scale: 4 },
            "char" | "varchar" | "nchar" | "nvarchar" | "text" | "ntext" | "xml" | "sysname" => Self::String,
            "binary" | "varbinary" | "image" | "rowversion" | "timestamp" => Self::Binary,
            "date" => Self::Date,
            "time" => Self::Time,
            "datetime" | "datetime2" | "smalldatetime" => Self::LocalTimestamp,
            "datetimeoffset" => Self::Timestamp,
            "uniqueidentifier" => Self::Uuid,
            _ => return None,
        })
    }

    /// A T-SQL type whose values read as this log type (`CAST(... AS <it>)`): the widest of
    /// its SQL Server types where several map to it.
    pub fn sql_type(self) -> String {
        match self {
            Self::Boolean => "bit".into(),
            Self::Int16 => "smallint".into(),
            Self::Int32 => "int".into(),
            Self::Int64 => "bigint".into(),
            Self::Float32 => "real".into(),
            Self::Float64 => "float".into(),
            Self::Decimal { precision, scale } => format!("decimal({precision},{scale})"),
            Self::String => "nvarchar(max)".into(),
            Self::Binary => "varbinary(max)".into(),
            Self::Date => "date".into(),
            Self::Time => "time(6)".into(),
            Self::LocalTimestamp => "datetime2(6)".into(),
            Self::Timestamp => "datetimeoffset(6)".into(),
            Self::Uuid => "uniqueidentifier".into(),
        }
    }

    /// Parses a cast target as the `columns` option writes it: `int`, `decimal(18,2)`,
    /// `nvarchar(100)`, `datetime2(3)`, ... The text is the T-SQL type; `None` if unknown.
    pub fn parse_sql(text: &str) -> Option<Self> {
        let text = text.trim();
        let (name, args) = match text.split_once('(') {
            Some((name, rest)) => (name.trim(), rest.strip_suffix(')')?.trim()),
            None => (text, ""),
        };
        let numbers: Vec<&str> = if args.is_empty() { Vec::new() } else { args.split(',').map(str::trim).collect() };
        let lower = name.to_ascii_lowercase();
        match lower.as_str() {
            "decimal" | "numeric" => {
                let precision: u8 = numbers.first().map_or(Some(18), |p| p.parse().ok())?;
                let scale: u8 = numbers.get(1).map_or(Some(0), |s| s.parse().ok())?;
                if !(1..=38).contains(&precision) || scale > precision || numbers.len() > 2 {
                    return None;
                }
                Self::from_sql(&lower, precision, scale)
            }
            "char" | "varchar" | "nchar" | "nvarchar" | "binary" | "varbinary" => {
                let ok = numbers.is_empty() || (numbers.len() == 1 && (numbers[0].eq_ignore_ascii_case("max") || numbers[0].parse::<u32>().is_ok_and(|n| (1..=8000).contains(&n))));
                ok.then(|| Self::from_sql(&lower, 0, 0)).flatten()
            }
            "time" | "datetime2" | "datetimeoffset" => {
                let ok = numbers.is_empty() || (numbers.len() == 1 && numbers[0].parse::<u8>().is_ok_and(|n| n <= 7));
                ok.then(|| Self::from_sql(&lower, 0, 0)).flatten()
            }
            _ if numbers.is_empty() && !matches!(lower.as_str(), "rowversion" | "timestamp" | "sysname") => Self::from_sql(&lower, 0, 0),
            _ => None,
        }
    }

    /// Whether a column of this log type may become `to` with every value kept exactly and
    /// every reader of the old type still reading it: a wider integer, `real` to `float`, a
    /// decimal with more digits and the same scale. The log's schema evolves only along these (`schemas/README.md`); every
    /// other type change is refused by the source.
    pub fn widens_to(self, to: Self) -> bool {
        use ColumnType::*;
        match (self, to) {
            (Int16, Int32 | Int64) | (Int32, Int64) | (Float32, Float64) => true,
            // The same scale: an Avro reader of the old schema decodes the same unscaled
            // value (a new scale would multiply every old reader's values).
            (Decimal { precision: p, scale: s }, Decimal { precision: p2, scale: s2 }) => s2 == s && p2 > p,
            _ => false,
        }
    }

    /// The Arrow type batches carry.
    pub fn arrow(self) -> DataType {
        match self {
            Self::Boolean => DataType::Boolean,
            Self::Int16 => DataType::Int16,
            Self::Int32 => DataType::Int32,
            Self::Int64 => DataType::Int64,
            Self::Float32 => DataType::Float32,
            Self::Float64 => DataType::Float64,
            Self::Decimal { precision, scale } => DataType::Decimal128(precision, scale),
            Self::String | Self::Uuid => DataType::Utf8,
            Self::Binary => DataType::Binary,
            Self::Date => DataType::Date32,
            Self::Time => DataType::Time64(TimeUnit::Microsecond),
            Self::LocalTimestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Self::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        }
    }

    /// The Avro type (without the null branch).
    pub fn avro(self) -> Json {
        match self {
            Self::Boolean => json!("boolean"),
            Self::Int16 | Self::Int32 => json!("int"),
            Self::Int64 => json!("long"),
            Self::Float32 => json!("float"),
            Self::Float64 => json!("double"),
            Self::Decimal { precision, scale } => {
                json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale})
            }
            Self::String => json!("string"),
            Self::Uuid => json!({"type": "string", "logicalType": "uuid"}),
            Self::Binary => json!("bytes"),
            Self::Date => json!({"type": "int", "logicalType": "date"}),
            Self::Time => json!({"type": "long", "logicalType": "time-micros"}),
            Self::LocalTimestamp => json!({"type": "long", "logicalType": "local-timestamp-micros"}),
            Self::Timestamp => json!({"type": "long", "logicalType": "timestamp-micros"}),
        }
    }
}

/// [`ColumnType::widens_to`] on the Arrow types the sinks' tables hold: whether a column of
/// type `from` must be widened to take `to`.
pub fn arrow_widens(from: &DataType, to: &DataType) -> bool {
    match (from, to) {
        (DataType::Int16, DataType::Int32 | DataType::Int64) | (DataType::Int32, DataType::Int64) | (DataType::Float32, DataType::Float64) => true,
        (DataType::Decimal128(p, s), DataType::Decimal128(p2, s2)) => {
            ColumnType::Decimal { precision: *p, scale: *s }.widens_to(ColumnType::Decimal { precision: *p2, scale: *s2 })
        }
        _ => false,
    }
}

/// A captured column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    /// Its name, as the capture instance spells it.
    pub name: String,
    /// Its log type.
    #[serde(flatten)]
    pub ty: ColumnType,
}

/// The record layout of one data topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    /// The captured columns, in capture order.
    pub columns: Vec<Column>,
    /// The key columns (the unique index CDC tracks), a subset of `columns`.
    pub key: Vec<String>,
    /// Whether `_command_id` is carried.
    pub include_command_id: bool,
}

impl TableSchema {
    /// The metadata fields after the captured columns, with their Arrow types.
    pub fn metadata_fields(&self) -> Vec<Field> {
        let mut fields = vec![
            Field::new(START_LSN, DataType::FixedSizeBinary(LSN_BYTES), false),
            Field::new(SEQVAL, DataType::FixedSizeBinary(LSN_BYTES), false),
            Field::new(OPERATION, DataType::Int32, false),
        ];
        if self.include_command_id {
            fields.push(Field::new(COMMAND_ID, DataType::Int32, true));
        }
        fields.extend([
            Field::new(COMMIT_TS, DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
            Field::new(CAPTURE_INSTANCE, DataType::Utf8, false),
            Field::new(GENERATION, DataType::Int64, false),
            Field::new(SNAPSHOT, DataType::FixedSizeBinary(LSN_BYTES), true),
        ]);
        fields
    }

    /// The Arrow schema of a batch: captured columns (nullable: a change row may hold NULL in
    /// any non-key column), then the metadata.
    pub fn arrow(&self) -> SchemaRef {
        let mut fields: Vec<Field> = self
            .columns
            .iter()
            .map(|c| Field::new(&c.name, c.ty.arrow(), !self.key.iter().any(|k| k == &c.name)))
            .collect();
        fields.extend(self.metadata_fields());
        Arc::new(Schema::new(fields))
    }

    /// The indexes (in `columns`) of the key columns, in key order.
    pub fn key_indexes(&self) -> Vec<usize> {
        self.key.iter().filter_map(|k| self.columns.iter().position(|c| &c.name == k)).collect()
    }

    /// The Avro schema of the record value, named after the topic.
    pub fn avro_value(&self, topic: &str) -> Json {
        let lsn = json!({"type": "fixed", "name": "lsn", "namespace": "mssql_cdc", "size": LSN_BYTES});
        let mut fields: Vec<Json> = self
            .columns
            .iter()
            .map(|c| {
                if self.key.contains(&c.name) {
                    json!({"name": avro_name(&c.name), "type": c.ty.avro()})
                } else {
                    json!({"name": avro_name(&c.name), "type": ["null", c.ty.avro()], "default": null})
                }
            })
            .collect();
        fields.push(json!({"name": START_LSN, "type": lsn}));
        fields.push(json!({"name": SEQVAL, "type": "mssql_cdc.lsn"}));
        fields.push(json!({"name": OPERATION, "type": "int"}));
        if self.include_command_id {
            fields.push(json!({"name": COMMAND_ID, "type": ["null", "int"], "default": null}));
        }
        fields.push(json!({"name": COMMIT_TS, "type": {"type": "long", "logicalType": "timestamp-micros"}}));
        fields.push(json!({"name": CAPTURE_INSTANCE, "type": "string"}));
        fields.push(json!({"name": GENERATION, "type": "long"}));
        fields.push(json!({"name": SNAPSHOT, "type": ["null", "mssql_cdc.lsn"], "default": null}));
        json!({"type": "record", "name": "Value", "namespace": avro_namespace(topic), "fields": fields})
    }

    /// The Avro schema of the record key: the key columns.
    pub fn avro_key(&self, topic: &str) -> Json {
        let fields: Vec<Json> = self
            .key_indexes()
            .into_iter()
            .map(|i| json!({"name": avro_name(&self.columns[i].name), "type": self.columns[i].ty.avro()}))
            .collect();
        json!({"type": "record", "name": "Key", "namespace": avro_namespace(topic), "fields": fields})
    }

    /// A stable fingerprint of the layout (FNV-1a of its JSON), the control record's
    /// `schema_version`: equal layouts have equal versions.
    pub fn fingerprint(&self) -> u64 {
        let text = serde_json::to_string(self).unwrap_or_default();
        text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
    }
}

/// An Avro name for a column: Avro names are `[A-Za-z_][A-Za-z0-9_]*`, so anything else
/// becomes `_` (documented; SQL Server names with spaces or Unicode letters are renamed).
pub fn avro_name(name: &str) -> String {
    let mut out: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    if out.chars().next().is_none_or(|c| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

fn avro_namespace(topic: &str) -> String {
    topic.split('.').map(avro_name).collect::<Vec<_>>().join(".")
}

/// The layout the log's unit tests encode and decode: `id` (the key), `amount decimal(18,2)`,
/// `third`, `at datetime2`, with `_command_id`.
#[cfg(test)]
pub(crate) fn sample(third: Column) -> TableSchema {
    TableSchema {
        columns: vec![
            Column { name: "id".into(), ty: ColumnType::Int64 },
            Column { name: "amount".into(), ty: ColumnType::Decimal { precision: 18, scale: 2 } },
            third,
            Column { name: "at".into(), ty: ColumnType::LocalTimestamp },
        ],
        key: vec!["id".into()],
        include_command_id: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orders() -> TableSchema {
        TableSchema {
            columns: vec![
                Column { name: "order_id".into(), ty: ColumnType::Int32 },
                Column { name: "amount".into(), ty: ColumnType::Decimal { precision: 18, scale: 2 } },
                Column { name: "placed at".into(), ty: ColumnType::LocalTimestamp },
            ],
            key: vec!["order_id".into()],
            include_command_id: true,
        }
    }

    /// Invariant: the log's types evolve only where every value is kept exactly.
    #[test]
    fn only_lossless_type_changes_widen() {
        use ColumnType::*;
        let dec = |precision, scale| Decimal { precision, scale };
        assert!(Int32.widens_to(Int64) && Int16.widens_to(Int32) && Int16.widens_to(Int64) && Float32.widens_to(Float64));
        assert!(dec(10, 2).widens_to(dec(12, 2)));
        assert!(!Int64.widens_to(Int32), "narrowing");
        assert!(!dec(10, 2).widens_to(dec(12, 4)), "a new scale changes what old readers decode");
        assert!(!dec(12, 2).widens_to(dec(10, 2)), "fewer digits");
        assert!(!Int32.widens_to(Int32) && !dec(10, 2).widens_to(dec(10, 2)), "no change is no widening");
        assert!(!Int32.widens_to(String) && !Int32.widens_to(Float64) && !Date.widens_to(LocalTimestamp));
    }

    /// Invariant: the sinks widen exactly what the log widens.
    #[test]
    fn arrow_widening_agrees_with_the_log() {
        use ColumnType::*;
        let all = [Boolean, Int16, Int32, Int64, Float32, Float64, Decimal { precision: 10, scale: 2 }, Decimal { precision: 12, scale: 2 }, String, Binary, Date, Time, LocalTimestamp, Timestamp, Uuid];
        for from in all {
            for to in all {
                let same_arrow = from.arrow() == to.arrow();
                assert_eq!(arrow_widens(&from.arrow(), &to.arrow()), from.widens_to(to) && !same_arrow, "{from:?} -> {to:?}");
            }
        }
    }

    #[test]
    fn sql_types_map_faithfully_and_unknown_ones_are_refused() {
        assert_eq!(ColumnType::parse_sql("decimal(18, 2)"), Some(ColumnType::Decimal { precision: 18, scale: 2 }));
        assert_eq!(ColumnType::parse_sql("money"), Some(ColumnType::Decimal { precision: 19, scale: 4 }));
        assert_eq!(ColumnType::parse_sql("NVARCHAR(max)"), Some(ColumnType::String));
        assert_eq!(ColumnType::parse_sql("datetime2(3)"), Some(ColumnType::LocalTimestamp));
        assert_eq!(ColumnType::parse_sql("decimal(2,5)"), None);
        assert_eq!(ColumnType::parse_sql("datetime2(9)"), None);
        assert_eq!(ColumnType::parse_sql("geography"), None);
        assert_eq!(ColumnType::parse_sql("int(4)"), None);
    }

    #[test]
    fn avro_schemas_parse_and_keep_types() {
        let schema = orders();
        let value = schema.avro_value("cdc.sales.dbo.orders");
        let parsed = apache_avro::Schema::parse(&value).expect("value schema parses");
        let text = serde_json::to_string(&value).unwrap();
        assert!(text.contains(r#""precision":18"#) && text.contains(r#""size":10"#), "{text}");
        assert!(matches!(parsed, apache_avro::Schema::Record(_)));
        apache_avro::Schema::parse(&schema.avro_key("cdc.sales.dbo.orders")).expect("key schema parses");
        assert_eq!(avro_name("placed at"), "placed_at");
        assert_eq!(avro_name("1st"), "_1st");
    }

    #[test]
    fn key_columns_are_not_null_and_metadata_follows_the_columns() {
        let arrow = orders().arrow();
        assert!(!arrow.field(0).is_nullable());
        assert!(arrow.field(1).is_nullable());
        assert_eq!(arrow.field(3).name(), START_LSN);
        assert_eq!(arrow.fields().len(), 3 + 8);
        assert!(arrow.field_with_name(SNAPSHOT).unwrap().is_nullable(), "`_snapshot` is NULL on change rows");
    }

    #[test]
    fn fingerprint_changes_with_the_layout() {
        let mut other = orders();
        assert_eq!(orders().fingerprint(), other.fingerprint());
        other.columns[1].ty = ColumnType::Float64;
        assert_ne!(orders().fingerprint(), other.fingerprint());
    }
}
