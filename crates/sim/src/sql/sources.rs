//! Row sources for `FROM`: base tables, change tables, catalog views and the CDC
//! table-valued functions. Each describes its columns first (so names resolve before any row
//! is read) and then scans, seeking its clustered key when the query bounds it.

use std::ops::Bound;

use super::expr::ScopeColumn;
use crate::cdc::{op, CaptureInstance};
use crate::db::Database;
use crate::error::{SqlError, SqlResult};
use mssql_cdc_types::lsn::Lsn;
use crate::table::{RowKey, Table};
use crate::types::{Len, SqlType, SYSNAME};
use crate::value::{sort_order, Value};
use crate::versions::ReadView;

/// A range on a source's leading key column.
pub type KeyRange = (Bound<Value>, Bound<Value>);

enum Kind<'a> {
    Table(&'a Table),
    ChangeTable(&'a CaptureInstance),
    AllChanges { instance: &'a CaptureInstance, from: Lsn, to: Lsn, update_old: bool },
    Mapping,
    Rows(Vec<Vec<Value>>),
}

/// A described source, ready to scan.
pub struct Source<'a> {
    /// Its columns, qualified by alias or name.
    pub columns: Vec<ScopeColumn>,
    /// Index of the leading clustered-key column, when a range on it can seek.
    pub key_column: Option<usize>,
    kind: Kind<'a>,
    db: &'a Database,
    /// How a base table's rows are read.
    view: ReadView,
}

fn col(name: &str, ty: SqlType, nullable: bool) -> (String, SqlType, bool) {
    (name.to_owned(), ty, nullable)
}

const BINARY10: SqlType = SqlType::Binary(10);

/// `sys.types.system_type_id` of a type.
pub fn system_type_id(ty: SqlType) -> i64 {
    match ty {
        SqlType::Bit => 104,
        SqlType::TinyInt => 48,
        SqlType::SmallInt => 52,
        SqlType::Int => 56,
        SqlType::BigInt => 127,
        SqlType::Decimal { .. } => 106,
        SqlType::Money => 60,
        SqlType::SmallMoney => 122,
        SqlType::Real => 59,
        SqlType::Float => 62,
        SqlType::Char(_) => 175,
        SqlType::VarChar(_) => 167,
        SqlType::NChar(_) => 239,
        SqlType::NVarChar(_) => 231,
        SqlType::Binary(_) => 173,
        SqlType::VarBinary(_) => 165,
        SqlType::Date => 40,
        SqlType::Time(_) => 41,
        SqlType::DateTime => 61,
        SqlType::DateTime2(_) => 42,
        SqlType::SmallDateTime => 58,
        SqlType::DateTimeOffset(_) => 43,
        SqlType::UniqueIdentifier => 36,
    }
}

/// The change table's columns: metadata, captured columns, `__$command_id`.
pub fn change_table_columns(instance: &CaptureInstance) -> Vec<(String, SqlType, bool)> {
    let mut columns = vec![
        col("__$start_lsn", BINARY10, false),
        col("__$end_lsn", BINARY10, true),
        col("__$seqval", BINARY10, false),
        col("__$operation", SqlType::Int, false),
        col("__$update_mask", SqlType::VarBinary(Len::N(128)), true),
    ];
    columns.extend(instance.captured.iter().map(|c| (c.name.clone(), c.ty, true)));
    columns.push(col("__$command_id", SqlType::Int, true));
    columns
}

fn bool_value(flag: bool) -> Value {
    Value::Bit(flag)
}

fn text(value: &str) -> Value {
    Value::Text(value.to_owned())
}

fn lsn(value: Lsn) -> Value {
    Value::Binary(value.0.to_vec())
}

impl<'a> Source<'a> {
    /// Describes the source named `parts` (`[schema.]name`), with table-valued function
    /// arguments when called as one.
    pub fn open(db: &'a Database, parts: &[String], args: Option<Vec<Value>>, alias: Option<&str>, view: ReadView) -> SqlResult<Self> {
        let display = parts.join(".");
        let lower: Vec<String> = parts.iter().map(|p| p.to_ascii_lowercase()).collect();
        let (schema, name) = match lower.as_slice() {
            [name] => ("dbo".to_owned(), name.clone()),
            [schema, name] => (schema.clone(), name.clone()),
            [database, schema, name] if database.eq_ignore_ascii_case(&db.config.database) => (schema.clone(), name.clone()),
            _ => return Err(SqlError::invalid_object(&display)),
        };
        let qualifiers = |default: &str| -> Vec<String> {
            match alias {
                Some(alias) => vec![alias.to_ascii_lowercase()],
                None => vec![default.to_ascii_lowercase(), format!("{schema}.{default}").to_ascii_lowercase()],
            }
        };
        let make = |columns: Vec<(String, SqlType, bool)>, key_column: Option<usize>, kind: Kind<'a>, default: &str| Source {
            columns: columns
                .into_iter()
                .map(|(name, ty, nullable)| ScopeColumn { qualifiers: qualifiers(default), name, ty, nullable })
                .collect(),
            key_column,
            kind,
            db,
            view,
        };
        if let Some(args) = args {
            let function = name.strip_prefix("fn_cdc_get_all_changes_").filter(|_| schema == "cdc");
            let Some(ci_name) = function else {
                return Err(SqlError::invalid_object(&display));
            };
            let instance = db.cdc.instances.iter().find(|ci| ci.name.eq_ignore_ascii_case(ci_name)).ok_or_else(|| SqlError::invalid_object(&display))?;
            if args.len() != 3 {
                return Err(SqlError::new(216, 16, format!("Parameters were not supplied for the function '{display}'.")));
            }
            let bound = |value: &Value| match value {
                Value::Binary(bytes) if bytes.len() == 10 => Lsn::from_bytes(bytes),
                _ => None,
            };
            let option = args[2].to_text().map(|t| t.trim().to_ascii_lowercase());
            let update_old = match option.as_deref() {
                Some("all") => false,
                Some("all update old") => true,
                _ => return Err(SqlError::cdc_invalid_range(ci_name)),
            };
            let (from, to) = match (bound(&args[0]), bound(&args[1])) {
                (Some(from), Some(to)) => (from, to),
                _ => return Err(SqlError::cdc_invalid_range(ci_name)),
            };
            let max = db.cdc.max_lsn().unwrap_or(Lsn::ZERO);
            if from < instance.start_lsn || to > max || from > to {
                return Err(SqlError::cdc_invalid_range(&format!("fn_cdc_get_all_changes_{}", instance.name)));
            }
            let mut columns = change_table_columns(instance);
            columns.remove(1); // __$end_lsn
            columns.pop(); // __$command_id
            return Ok(make(columns, Some(0), Kind::AllChanges { instance, from, to, update_old }, &name));
        }
        match schema.as_str() {
            "cdc" => {
                if let Some(instance) = name.strip_suffix("_ct").and_then(|ci| db.cdc.instances.iter().find(|i| i.name.eq_ignore_ascii_case(ci))) {
                    return Ok(make(change_table_columns(instance), Some(0), Kind::ChangeTable(instance), &name));
                }
                let (columns, rows, key) = match name.as_str() {
                    "lsn_time_mapping" => {
                        let columns = vec![
                            col("start_lsn", BINARY10, false),
                            col("tran_begin_time", SqlType::DateTime, true),
                            col("tran_end_time", SqlType::DateTime, true),
                            col("tran_id", SqlType::VarBinary(Len::N(10)), true),
                            col("tran_begin_lsn", BINARY10, true),
                        ];
                        return Ok(make(columns, Some(0), Kind::Mapping, &name));
                    }
                    "change_tables" => (
                        vec![
                            col("object_id", SqlType::Int, false),
                            col("version", SqlType::Int, true),
                            col("source_object_id", SqlType::Int, true),
                            col("capture_instance", SYSNAME, false),
                            col("start_lsn", BINARY10, true),
                            col("end_lsn", BINARY10, true),
                            col("supports_net_changes", SqlType::Bit, true),
                            col("has_drop_pending", SqlType::Bit, true),
                            col("role_name", SYSNAME, true),
                            col("index_name", SYSNAME, true),
                            col("filegroup_name", SYSNAME, true),
                            col("create_date", SqlType::DateTime, true),
                            col("partition_switch", SqlType::Bit, false),
                        ],
                        db.cdc
                            .instances
                            .iter()
                            .map(|ci| {
                                vec![
                                    Value::Int(i64::from(ci.object_id)),
                                    Value::Int(0),
                                    Value::Int(i64::from(ci.source_object_id)),
                                    text(&ci.name),
                                    lsn(ci.start_lsn),
                                    Value::Null,
                                    bool_value(ci.supports_net_changes),
                                    Value::Null,
                                    ci.role_name.as_deref().map_or(Value::Null, text),
                                    ci.index_name.as_deref().map_or(Value::Null, text),
                                    Value::Null,
                                    Value::DateTime(ci.create_date).cast(SqlType::DateTime).unwrap_or(Value::Null),
                                    bool_value(true),
                                ]
                            })
                            .collect(),
                        None,
                    ),
                    "captured_columns" => (
                        vec![
                            col("object_id", SqlType::Int, false),
                            col("column_name", SYSNAME, false),
                            col("column_id", SqlType::Int, true),
                            col("column_type", SYSNAME, false),
                            col("column_ordinal", SqlType::Int, false),
                            col("is_computed", SqlType::Bit, true),
                        ],
                        db.cdc
                            .instances
                            .iter()
                            .flat_map(|ci| {
                                ci.captured.iter().map(move |c| {
                                    vec![
                                        Value::Int(i64::from(ci.object_id)),
                                        text(&c.name),
                                        Value::Int(i64::from(c.column_id)),
                                        text(c.ty.name()),
                                        Value::Int(i64::from(c.ordinal)),
                                        bool_value(c.computed),
                                    ]
                                })
                            })
                            .collect(),
                        None,
                    ),
                    "index_columns" => (
                        vec![
                            col("object_id", SqlType::Int, false),
                            col("column_name", SYSNAME, false),
                            col("index_ordinal", SqlType::TinyInt, false),
                            col("column_id", SqlType::Int, false),
                        ],
                        db.cdc
                            .instances
                            .iter()
                            .flat_map(|ci| {
                                let table = db.table_by_id(ci.source_object_id);
                                ci.index_columns.iter().enumerate().map(move |(i, name)| {
                                    let column_id = table.and_then(|t| t.columns.iter().find(|c| c.name.eq_ignore_ascii_case(name))).map_or(0, |c| c.column_id);
                                    vec![Value::Int(i64::from(ci.object_id)), text(name), Value::Int(i as i64 + 1), Value::Int(i64::from(column_id))]
                                })
                            })
                            .collect(),
                        None,
                    ),
                    "ddl_history" => (
                        vec![
                            col("source_object_id", SqlType::Int, true),
                            col("object_id", SqlType::Int, false),
                            col("required_column_update", SqlType::Bit, true),
                            col("ddl_command", SqlType::NVarChar(Len::Max), true),
                            col("ddl_lsn", BINARY10, false),
                            col("ddl_time", SqlType::DateTime, true),
                        ],
                        db.cdc
                            .ddl_history
                            .iter()
                            .map(|row| {
                                vec![
                                    Value::Int(i64::from(row.source_object_id)),
                                    Value::Int(i64::from(row.object_id)),
                                    bool_value(row.required_column_update),
                                    text(&row.ddl_command),
                                    lsn(row.ddl_lsn),
                                    Value::DateTime(row.ddl_time).cast(SqlType::DateTime).unwrap_or(Value::Null),
                                ]
                            })
                            .collect(),
                        None,
                    ),
                    _ => return Err(SqlError::invalid_object(&display)),
                };
                Ok(make(columns, key, Kind::Rows(rows), &name))
            }
            "sys" | "information_schema" => {
                let (columns, rows) = catalog_view(db, &schema, &name).ok_or_else(|| SqlError::invalid_object(&display))?;
                Ok(make(columns, None, Kind::Rows(rows), &name))
            }
            _ => {
                let table = db.table(Some(&schema), &name).ok_or_else(|| SqlError::invalid_object(&display))?;
                if let ReadView::AsOf { seq, .. } = view
                    && seq < table.versions.defined_at
                {
                    return Err(SqlError::snapshot_ddl_changed(&db.config.database));
                }
                let columns = table.columns.iter().map(|c| (c.name.clone(), c.ty, c.nullable)).collect();
                let key_column = table.key.first().copied();
                Ok(make(columns, key_column, Kind::Table(table), &name))
            }
        }
    }

    /// The positions of the columns whose order the rows come in: a base table's clustered
    /// key; a change table's `(__$start_lsn, __$seqval, __$operation)` (its clustered index,
    /// also the order `fn_cdc_get_all_changes_` returns); `lsn_time_mapping`'s `start_lsn`.
    pub fn key_columns(&self) -> Vec<usize> {
        match &self.kind {
            Kind::Table(table) => table.key.clone(),
            Kind::ChangeTable(_) => vec![0, 2, 3],
            Kind::AllChanges { .. } => vec![0, 1, 2],
            Kind::Mapping => vec![0],
            Kind::Rows(_) => Vec::new(),
        }
    }

    /// Reads the rows, seeking `range` on the key column when one is given.
    pub fn scan(&self, range: Option<&KeyRange>) -> SqlResult<Vec<Vec<Value>>> {
        self.scan_until(range, &mut |_| Ok(true), usize::MAX)
    }

    /// Reads the rows `keep` accepts, seeking `range` on the key column when one is given, and
    /// stops once `limit` rows are kept (rows come in [`Source::key_columns`] order).
    pub fn scan_until(&self, range: Option<&KeyRange>, keep: &mut dyn FnMut(&[Value]) -> SqlResult<bool>, limit: usize) -> SqlResult<Vec<Vec<Value>>> {
        if let Kind::Table(table) = &self.kind {
            return self.scan_table(table, range, keep, limit);
        }
        let mut kept = Vec::new();
        for row in self.scan_other(range) {
            if kept.len() >= limit {
                break;
            }
            if keep(&row)? {
                kept.push(row);
            }
        }
        Ok(kept)
    }

    fn scan_table(&self, table: &Table, range: Option<&KeyRange>, keep: &mut dyn FnMut(&[Value]) -> SqlResult<bool>, limit: usize) -> SqlResult<Vec<Vec<Value>>> {
        let (low, high) = match range {
            Some((low, high)) => (Some(low), Some(high)),
            None => (None, None),
        };
        let start = match low {
            Some(Bound::Included(low) | Bound::Excluded(low)) if table.key.len() == 1 => Bound::Included(RowKey(vec![low.clone()])),
            _ => Bound::Unbounded,
        };
        let key_index = self.key_column;
        let width = table.columns.len();
        let mut kept = Vec::new();
        for row in table.versions.scan(&table.rows, start, self.view) {
            let row = row.map_err(SqlError::blocked)?;
            if let (Some(k), Some(low)) = (key_index, low)
                && !above(&row[k], low)
            {
                continue;
            }
            if let (Some(k), Some(high)) = (key_index, high)
                && !below(&row[k], high)
            {
                break;
            }
            // An image kept from before an ALTER TABLE has the old width.
            let mut row = row.clone();
            row.resize(width, Value::Null);
            if keep(&row)? {
                kept.push(row);
                if kept.len() >= limit {
                    break;
                }
            }
        }
        Ok(kept)
    }

    /// The rows of a source other than a base table, made as they are read.
    fn scan_other<'s>(&'s self, range: Option<&'s KeyRange>) -> Box<dyn Iterator<Item = Vec<Value>> + 's> {
        let within_high = move |value: &Value| range.is_none_or(|(_, high)| below(value, high));
        let above_low = move |value: &Value| range.is_none_or(|(low, _)| above(value, low));
        let lsn_low = |range: Option<&KeyRange>| -> Lsn {
            match range.map(|r| &r.0) {
                Some(Bound::Included(Value::Binary(b)) | Bound::Excluded(Value::Binary(b))) if b.len() == 10 => Lsn::from_bytes(b).unwrap_or(Lsn::ZERO),
                _ => Lsn::ZERO,
            }
        };
        match &self.kind {
            Kind::Table(_) => Box::new(std::iter::empty()),
            Kind::ChangeTable(instance) => Box::new(
                instance
                .rows
                .range((lsn_low(range), Lsn::ZERO, 0)..)
                .map(|((start, seqval, operation), row)| {
                    let mut values = vec![lsn(*start), Value::Null, lsn(*seqval), Value::Int(i64::from(*operation)), Value::Binary(row.update_mask.clone())];
                    values.extend(row.values.iter().cloned());
                    values.push(Value::Int(i64::from(row.command_id)));
                    values
                })
                .skip_while(move |row| !above_low(&row[0]))
                .take_while(move |row| within_high(&row[0]))
            ),
            Kind::AllChanges { instance, from, to, update_old } => Box::new(
                instance
                .rows
                .range((*from, Lsn::ZERO, 0)..)
                .take_while(move |((start, _, _), _)| start <= to)
                .filter(move |((_, _, operation), _)| *update_old || *operation != op::UPDATE_BEFORE)
                .map(|((start, seqval, operation), row)| {
                    let mut values = vec![lsn(*start), lsn(*seqval), Value::Int(i64::from(*operation)), Value::Binary(row.update_mask.clone())];
                    values.extend(row.values.iter().cloned());
                    values
                })
                .filter(move |row| above_low(&row[0]) && within_high(&row[0]))
            ),
            Kind::Mapping => Box::new(
                self
                .db
                .cdc
                .mapping
                .range(lsn_low(range)..)
                .map(|(start, row)| {
                    vec![
                        lsn(*start),
                        Value::DateTime(row.tran_begin_time).cast(SqlType::DateTime).unwrap_or(Value::Null),
                        Value::DateTime(row.tran_end_time).cast(SqlType::DateTime).unwrap_or(Value::Null),
                        Value::Binary(row.tran_id.clone()),
                        row.tran_begin_lsn.map_or(Value::Null, lsn),
                    ]
                })
                .skip_while(move |row| !above_low(&row[0]))
                .take_while(move |row| within_high(&row[0]))
            ),
            Kind::Rows(rows) => Box::new(rows.iter().cloned()),
        }
    }
}

/// Whether `value` is within a range's low bound.
fn above(value: &Value, low: &Bound<Value>) -> bool {
    match low {
        Bound::Included(low) => sort_order(value, low) != std::cmp::Ordering::Less,
        Bound::Excluded(low) => sort_order(value, low) == std::cmp::Ordering::Greater,
        Bound::Unbounded => true,
    }
}

/// Whether `value` is within a range's high bound.
fn below(value: &Value, high: &Bound<Value>) -> bool {
    match high {
        Bound::Included(high) => sort_order(value, high) != std::cmp::Ordering::Greater,
        Bound::Excluded(high) => sort_order(value, high) == std::cmp::Ordering::Less,
        Bound::Unbounded => true,
    }
}

type ViewData = (Vec<(String, SqlType, bool)>, Vec<Vec<Value>>);

fn catalog_view(db: &Database, schema: &str, name: &str) -> Option<ViewData> {
    // (object id, schema id, name, columns as (name, type, nullable, column id)).
    #[allow(clippy::type_complexity)]
    let mut objects: Vec<(i32, i32, String, Vec<(String, SqlType, bool, i32)>)> = Vec::new();
    for table in db.tables.values() {
        let schema_id = db.schemas.get(&table.schema.to_ascii_lowercase()).map_or(1, |(id, _)| *id);
        objects.push((table.object_id, schema_id, table.name.clone(), table.columns.iter().map(|c| (c.name.clone(), c.ty, c.nullable, c.column_id)).collect()));
    }
    for ci in &db.cdc.instances {
        let columns = change_table_columns(ci).into_iter().enumerate().map(|(i, (n, t, nl))| (n, t, nl, i as i32 + 1)).collect();
        objects.push((ci.object_id, 5, format!("{}_CT", ci.name), columns));
    }
    let schema_name = |id: i32| db.schemas.values().find(|(sid, _)| *sid == id).map_or("dbo".to_owned(), |(_, n)| n.clone());
    Some(match (schema, name) {
        ("sys", "tables") => (
            vec![
                col("name", SYSNAME, false),
                col("object_id", SqlType::Int, false),
                col("schema_id", SqlType::Int, false),
                col("type", SqlType::Char(2), true),
                col("type_desc", SqlType::NVarChar(Len::N(60)), true),
                col("is_tracked_by_cdc", SqlType::Bit, true),
            ],
            objects
                .iter()
                .map(|(id, schema_id, name, _)| {
                    let tracked = db.cdc.instances.iter().any(|ci| ci.source_object_id == *id);
                    vec![text(name), Value::Int(i64::from(*id)), Value::Int(i64::from(*schema_id)), text("U "), text("USER_TABLE"), bool_value(tracked)]
                })
                .collect(),
        ),
        ("sys", "schemas") => (
            vec![col("name", SYSNAME, false), col("schema_id", SqlType::Int, false)],
            db.schemas.values().map(|(id, name)| vec![text(name), Value::Int(i64::from(*id))]).collect(),
        ),
        ("sys", "columns") => (
            vec![
                col("object_id", SqlType::Int, false),
                col("name", SYSNAME, true),
                col("column_id", SqlType::Int, false),
                col("system_type_id", SqlType::TinyInt, false),
                col("user_type_id", SqlType::Int, false),
                col("max_length", SqlType::SmallInt, false),
                col("precision", SqlType::TinyInt, false),
                col("scale", SqlType::TinyInt, false),
                col("is_nullable", SqlType::Bit, true),
            ],
            objects
                .iter()
                .flat_map(|(id, _, _, columns)| {
                    columns.iter().map(move |(name, ty, nullable, column_id)| {
                        vec![
                            Value::Int(i64::from(*id)),
                            text(name),
                            Value::Int(i64::from(*column_id)),
                            Value::Int(system_type_id(*ty)),
                            Value::Int(system_type_id(*ty)),
                            Value::Int(i64::from(ty.max_length())),
                            Value::Int(i64::from(ty.precision())),
                            Value::Int(i64::from(ty.scale())),
                            bool_value(*nullable),
                        ]
                    })
                })
                .collect(),
        ),
        ("sys", "types") => {
            let types = [
                "bit", "tinyint", "smallint", "int", "bigint", "decimal(18,0)", "money", "smallmoney", "real", "float", "char(1)", "varchar(1)", "nchar(1)", "nvarchar(1)", "binary(1)", "varbinary(1)", "date", "time", "datetime", "datetime2", "smalldatetime", "datetimeoffset", "uniqueidentifier",
            ];
            (
                vec![col("name", SYSNAME, false), col("system_type_id", SqlType::TinyInt, false), col("user_type_id", SqlType::Int, false)],
                types
                    .iter()
                    .filter_map(|t| SqlType::parse(t).ok())
                    .map(|ty| vec![text(ty.name()), Value::Int(system_type_id(ty)), Value::Int(system_type_id(ty))])
                    .collect(),
            )
        }
        ("sys", "databases") => (
            vec![col("name", SYSNAME, false), col("database_id", SqlType::Int, false), col("is_cdc_enabled", SqlType::Bit, true)],
            vec![
                vec![text("master"), Value::Int(1), bool_value(false)],
                vec![text(&db.config.database), Value::Int(5), bool_value(db.cdc_enabled)],
            ],
        ),
        ("sys", "time_zone_info") => {
            let now = db.clock.now();
            (
                vec![col("name", SYSNAME, false), col("current_utc_offset", SqlType::NVarChar(Len::N(12)), false), col("is_currently_dst", SqlType::Bit, false)],
                crate::clock::windows_zone_names()
                    .iter()
                    .filter_map(|name| crate::clock::ServerZone::parse(name))
                    .map(|zone| {
                        let offset = zone.with_offset(now).offset().local_minus_utc();
                        let in_dst = {
                            use chrono::TimeZone;
                            use chrono_tz::OffsetComponents;
                            zone.tz.offset_from_utc_datetime(&now.naive_utc()).dst_offset().num_seconds() != 0
                        };
                        vec![
                            text(&zone.windows_id),
                            text(&format!("{}{:02}:{:02}", if offset < 0 { '-' } else { '+' }, offset.abs() / 3600, offset.abs() % 3600 / 60)),
                            bool_value(in_dst),
                        ]
                    })
                    .collect(),
            )
        }
        ("information_schema", "tables") => (
            vec![col("TABLE_CATALOG", SYSNAME, true), col("TABLE_SCHEMA", SYSNAME, true), col("TABLE_NAME", SYSNAME, false), col("TABLE_TYPE", SqlType::VarChar(Len::N(10)), true)],
            objects.iter().map(|(_, schema_id, name, _)| vec![text(&db.config.database), text(&schema_name(*schema_id)), text(name), text("BASE TABLE")]).collect(),
        ),
        ("information_schema", "columns") => (
            vec![
                col("TABLE_CATALOG", SYSNAME, true),
                col("TABLE_SCHEMA", SYSNAME, true),
                col("TABLE_NAME", SYSNAME, false),
                col("COLUMN_NAME", SYSNAME, true),
                col("ORDINAL_POSITION", SqlType::Int, true),
                col("IS_NULLABLE", SqlType::VarChar(Len::N(3)), true),
                col("DATA_TYPE", SqlType::NVarChar(Len::N(128)), true),
                col("CHARACTER_MAXIMUM_LENGTH", SqlType::Int, true),
                col("NUMERIC_PRECISION", SqlType::TinyInt, true),
                col("NUMERIC_SCALE", SqlType::Int, true),
                col("DATETIME_PRECISION", SqlType::SmallInt, true),
            ],
            objects
                .iter()
                .flat_map(|(_, schema_id, table, columns)| {
                    let schema = schema_name(*schema_id);
                    columns.iter().enumerate().map(move |(i, (name, ty, nullable, _))| {
                        let char_len = match ty {
                            SqlType::Char(n) | SqlType::NChar(n) | SqlType::Binary(n) => Value::Int(i64::from(*n)),
                            SqlType::VarChar(l) | SqlType::NVarChar(l) | SqlType::VarBinary(l) => match l {
                                Len::N(n) => Value::Int(i64::from(*n)),
                                Len::Max => Value::Int(-1),
                            },
                            _ => Value::Null,
                        };
                        let numeric = ty.is_numeric() && !matches!(ty, SqlType::Bit);
                        let temporal = matches!(ty, SqlType::Time(_) | SqlType::DateTime2(_) | SqlType::DateTimeOffset(_) | SqlType::DateTime | SqlType::SmallDateTime | SqlType::Date);
                        vec![
                            text(&db.config.database),
                            text(&schema),
                            text(table),
                            text(name),
                            Value::Int(i as i64 + 1),
                            text(if *nullable { "YES" } else { "NO" }),
                            text(ty.name()),
                            char_len,
                            if numeric { Value::Int(i64::from(ty.precision())) } else { Value::Null },
                            if numeric { Value::Int(i64::from(ty.scale())) } else { Value::Null },
                            if temporal { Value::Int(i64::from(ty.scale())) } else { Value::Null },
                        ]
                    })
                })
                .collect(),
        ),
        _ => return None,
    })
}
