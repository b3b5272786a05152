//! `CREATE TABLE`, `ALTER TABLE` (ADD / DROP COLUMN / ALTER COLUMN) and `DROP TABLE`.
//!
//! DDL on a table tracked by CDC is logged so the capture job records it in
//! `cdc.ddl_history`; existing capture instances keep their columns (Microsoft: "Change data
//! capture and other SQL Server features", DDL on source tables).

use std::collections::BTreeMap;

use sqlparser::ast::{AlterTable, AlterTableOperation, ColumnDef, ColumnOption, CreateTable, DataType, Ident, ObjectName, TableConstraint};

use super::computed;
use super::expr::{data_type_of, object_name};
use crate::db::{Database, DdlChange, OpenTxn};
use crate::error::{SqlError, SqlResult};
use crate::table::{Column, Table};
use crate::types::SqlType;
use crate::value::Value;

fn split_name(db: &Database, name: &ObjectName) -> SqlResult<(String, String)> {
    let parts = object_name(name);
    match parts.as_slice() {
        [table] => Ok(("dbo".to_owned(), table.clone())),
        [schema, table] => Ok((schema.clone(), table.clone())),
        [database, schema, table] if database.eq_ignore_ascii_case(&db.config.database) => Ok((schema.clone(), table.clone())),
        _ => Err(SqlError::invalid_object(&parts.join("."))),
    }
}

fn column_of(def: &ColumnDef, column_id: i32) -> SqlResult<(Column, bool)> {
    // A computed column's type comes from its expression, once the table's columns are known.
    let marked = computed::is_marker(&def.data_type);
    let ty = if marked { SqlType::Int } else { data_type_of(&def.data_type)? };
    let mut nullable = true;
    let mut primary = false;
    let mut expression = None;
    for option in &def.options {
        match &option.option {
            ColumnOption::Generated { generation_expr: Some(expr), .. } if marked => expression = Some(Box::new(expr.clone())),
            ColumnOption::NotNull => nullable = false,
            ColumnOption::Null => nullable = true,
            ColumnOption::PrimaryKey(_) => {
                primary = true;
                nullable = false;
            }
            ColumnOption::Unique(_) | ColumnOption::Default(_) | ColumnOption::Collation(_) => {}
            other => return Err(SqlError::unsupported(&format!("the column option `{other}`"))),
        }
    }
    if marked && expression.is_none() {
        return Err(SqlError::syntax("a computed column needs AS (expression)"));
    }
    Ok((Column { name: def.name.value.clone(), ty, nullable, column_id, computed: expression }, primary))
}

/// `CREATE TABLE` with a primary key (column or table constraint) or unique constraint.
pub fn create_table(db: &mut Database, txn: &mut OpenTxn, create: &CreateTable) -> SqlResult<()> {
    let (schema, name) = split_name(db, &create.name)?;
    if !db.schemas.contains_key(&schema.to_ascii_lowercase()) {
        return Err(SqlError::new(2760, 16, format!("The specified schema name \"{schema}\" either does not exist or you do not have permission to use it.")));
    }
    if db.table(Some(&schema), &name).is_some() {
        return Err(SqlError::new(2714, 16, format!("There is already an object named '{name}' in the database.")));
    }
    let mut columns = Vec::new();
    let mut key_names: Vec<String> = Vec::new();
    let mut key_name = None;
    for (index, def) in create.columns.iter().enumerate() {
        let (column, primary) = column_of(def, index as i32 + 1)?;
        if primary {
            key_names.push(column.name.clone());
        }
        if columns.iter().any(|c: &Column| c.name.eq_ignore_ascii_case(&column.name)) {
            return Err(SqlError::new(2705, 16, format!("Column names in each table must be unique. Column name '{}' in table '{name}' is specified more than once.", column.name)));
        }
        columns.push(column);
    }
    computed::infer_types(db, &name, &mut columns)?;
    let mut unique: Option<(Option<String>, Vec<String>)> = None;
    for constraint in &create.constraints {
        match constraint {
            TableConstraint::PrimaryKey(pk) => {
                key_name = pk.name.as_ref().map(|n| n.value.clone());
                key_names = pk.columns.iter().map(|c| c.column.expr.to_string()).collect();
            }
            TableConstraint::Unique(u) => {
                if unique.is_none() {
                    unique = Some((u.name.as_ref().map(|n| n.value.clone()), u.columns.iter().map(|c| c.column.expr.to_string()).collect()));
                }
            }
            other => return Err(SqlError::unsupported(&format!("the constraint `{other}`"))),
        }
    }
    if key_names.is_empty()
        && let Some((name, columns)) = unique {
            key_name = name;
            key_names = columns;
        }
    let key = key_names
        .iter()
        .map(|k| {
            let k = k.trim_matches(|c| c == '[' || c == ']');
            columns.iter().position(|c| c.name.eq_ignore_ascii_case(k)).ok_or_else(|| SqlError::new(1911, 16, format!("Column name '{k}' does not exist in the target table or view.")))
        })
        .collect::<SqlResult<Vec<usize>>>()?;
    for index in &key {
        columns[*index].nullable = false;
    }
    let object_id = db.next_object_id();
    let key_name = key_name.or_else(|| (!key.is_empty()).then(|| format!("PK_{name}")));
    let next_column_id = columns.len() as i32 + 1;
    db.tables.insert(
        (schema.to_ascii_lowercase(), name.to_ascii_lowercase()),
        Table { object_id, schema, name, columns, key, key_name, rows: BTreeMap::new(), next_column_id, next_row_id: 0, versions: Default::default() },
    );
    db.log_create(txn, object_id);
    Ok(())
}

/// Computes a new computed column on the rows a table already has.
fn refill(db: &mut Database, name: &ObjectName) -> SqlResult<()> {
    let table = table_mut(db, name)?.clone();
    let mut rows = table.rows.clone();
    for row in rows.values_mut() {
        computed::fill(db, &table, row)?;
    }
    table_mut(db, name)?.rows = rows;
    Ok(())
}

fn table_mut<'d>(db: &'d mut Database, name: &ObjectName) -> SqlResult<&'d mut Table> {
    let (schema, table) = split_name(db, name)?;
    db.tables
        .get_mut(&(schema.to_ascii_lowercase(), table.to_ascii_lowercase()))
        .ok_or_else(|| SqlError::new(4902, 16, format!("Cannot find the object \"{}\" because it does not exist or you do not have permissions.", object_name(name).join("."))))
}

/// `ALTER TABLE ... ADD <column>` / `DROP COLUMN <name>`.
pub fn alter_table(db: &mut Database, txn: &mut OpenTxn, alter: &AlterTable, text: &str) -> SqlResult<()> {
    let tracked_key: Vec<String>;
    {
        let table = table_mut(db, &alter.name)?;
        tracked_key = table.key_columns();
    }
    let before = table_mut(db, &alter.name)?.clone();
    if let Err(error) = apply_operations(db, alter, &tracked_key) {
        // A failed operation leaves nothing of the statement behind.
        *table_mut(db, &alter.name)? = before;
        return Err(error);
    }
    let table_id = before.object_id;
    db.log_ddl(txn, before, DdlChange { table_id, text: text.to_owned(), altered_columns: Vec::new() });
    Ok(())
}

fn apply_operations(db: &mut Database, alter: &AlterTable, tracked_key: &[String]) -> SqlResult<()> {
    for operation in &alter.operations {
        let table = table_mut(db, &alter.name)?;
        match operation {
            AlterTableOperation::AddColumn { column_def, .. } => {
                let (column, primary) = column_of(column_def, table.next_column_id)?;
                let column = if column.computed.is_some() {
                    let mut columns = table.columns.clone();
                    columns.push(column);
                    let name = table.name.clone();
                    computed::infer_types(db, &name, &mut columns)?;
                    columns.pop().ok_or_else(|| SqlError::syntax("ADD without a column"))?
                } else {
                    column
                };
                let table = table_mut(db, &alter.name)?;
                if primary {
                    return Err(SqlError::unsupported("adding a primary key column"));
                }
                if table.column_index(&column.name).is_some() {
                    return Err(SqlError::new(2705, 16, format!("Column names in each table must be unique. Column name '{}' in table '{}' is specified more than once.", column.name, table.name)));
                }
                if !column.nullable && !table.rows.is_empty() {
                    return Err(SqlError::new(4901, 16, format!("ALTER TABLE only allows columns to be added that can contain nulls, or have a DEFAULT definition specified, or the column being added is an identity or timestamp column, or alternatively if none of the previous conditions are satisfied the table must be empty to allow addition of this column. Column '{}' cannot be added to non-empty table '{}' because it does not satisfy these conditions.", column.name, table.name)));
                }
                table.next_column_id += 1;
                let is_computed = column.computed.is_some();
                table.columns.push(column);
                for row in table.rows.values_mut() {
                    row.push(Value::Null);
                }
                if is_computed {
                    refill(db, &alter.name)?;
                }
            }
            AlterTableOperation::DropColumn { column_names, .. } => {
                for name in column_names {
                    let index = table.column_index(&name.value).ok_or_else(|| {
                        SqlError::new(4924, 16, format!("ALTER TABLE DROP COLUMN failed because column '{}' does not exist in table '{}'.", name.value, table.name))
                    })?;
                    if tracked_key.iter().any(|k| k.eq_ignore_ascii_case(&name.value)) {
                        return Err(SqlError::new(5074, 16, format!("The object '{}' is dependent on column '{}'.", table.key_name.clone().unwrap_or_default(), name.value)));
                    }
                    table.columns.remove(index);
                    table.key = table.key.iter().map(|k| if *k > index { k - 1 } else { *k }).collect();
                    for row in table.rows.values_mut() {
                        row.remove(index);
                    }
                }
            }
            other => return Err(SqlError::unsupported(&format!("ALTER TABLE {other}"))),
        }
    }
    Ok(())
}

/// `ALTER TABLE t ALTER COLUMN c type [NULL | NOT NULL]`: existing values must convert.
pub fn alter_column(db: &mut Database, txn: &mut OpenTxn, table_name: &ObjectName, column: &Ident, data_type: &DataType, nullable: Option<bool>, text: &str) -> SqlResult<()> {
    let ty = data_type_of(data_type)?;
    let table = table_mut(db, table_name)?;
    let before = table.clone();
    let index = table.column_index(&column.value).ok_or_else(|| SqlError::invalid_column(&column.value))?;
    if table.key.contains(&index) {
        return Err(SqlError::new(5074, 16, format!("The object '{}' is dependent on column '{}'.", table.key_name.clone().unwrap_or_default(), column.value)));
    }
    let mut converted = Vec::with_capacity(table.rows.len());
    for (key, row) in &table.rows {
        converted.push((key.clone(), row[index].assign(ty)?));
    }
    if nullable == Some(false) && converted.iter().any(|(_, v)| v.is_null()) {
        return Err(SqlError::null_not_allowed(&column.value, &table.qualified(), "ALTER TABLE"));
    }
    for (key, value) in converted {
        if let Some(row) = table.rows.get_mut(&key) {
            row[index] = value;
        }
    }
    table.columns[index].ty = ty;
    table.columns[index].nullable = nullable.unwrap_or(true);
    let change = DdlChange { table_id: table.object_id, text: text.to_owned(), altered_columns: vec![(table.columns[index].name.clone(), ty)] };
    db.log_ddl(txn, before, change);
    Ok(())
}

/// `DROP TABLE`. A table tracked by CDC is refused (SQL Server would mark its instances
/// `has_drop_pending`; the simulator asks for them to be disabled first).
pub fn drop_tables(db: &mut Database, txn: &mut OpenTxn, names: &[ObjectName], if_exists: bool) -> SqlResult<()> {
    for name in names {
        let (schema, table) = split_name(db, name)?;
        let key = (schema.to_ascii_lowercase(), table.to_ascii_lowercase());
        let Some(existing) = db.tables.get(&key) else {
            if if_exists {
                continue;
            }
            return Err(SqlError::new(3701, 11, format!("Cannot drop the table '{}', because it does not exist or you do not have permission.", object_name(name).join("."))));
        };
        if db.cdc.instances.iter().any(|ci| ci.source_object_id == existing.object_id) {
            return Err(SqlError::unsupported("dropping a table tracked by CDC (disable its capture instances first)"));
        }
        db.drop_table(txn, &key);
    }
    Ok(())
}
