//! `INSERT`, `UPDATE` and `DELETE`.

use std::collections::HashMap;

use sqlparser::ast::{AssignmentTarget, Delete, FromTable, Insert, SetExpr, TableFactor, TableObject, Update};

use super::expr::{object_name, truth, CExpr, Compiler, Ctx, SessionInfo};
use super::computed;
use super::query;
use super::sources::Source;
use crate::db::{Database, OpenTxn};
use crate::error::{SqlError, SqlResult};
use crate::table::{RowKey, Table};
use crate::value::Value;
use crate::versions::ReadView;

fn table_parts(name: &sqlparser::ast::ObjectName) -> Vec<String> {
    object_name(name)
}

fn find_table<'d>(db: &'d Database, parts: &[String]) -> SqlResult<&'d Table> {
    let (schema, name) = match parts {
        [name] => (None, name.as_str()),
        [schema, name] => (Some(schema.as_str()), name.as_str()),
        [database, schema, name] if database.eq_ignore_ascii_case(&db.config.database) => (Some(schema.as_str()), name.as_str()),
        _ => return Err(SqlError::invalid_object(&parts.join("."))),
    };
    db.table(schema, name).ok_or_else(|| SqlError::invalid_object(&parts.join(".")))
}

/// Converts a value for a column, with SQL Server's messages for NULLs and truncation.
fn assign(table: &Table, index: usize, value: &Value, statement: &str) -> SqlResult<Value> {
    let column = &table.columns[index];
    if value.is_null() {
        if !column.nullable {
            return Err(SqlError::null_not_allowed(&column.name, &table.qualified(), statement));
        }
        return Ok(Value::Null);
    }
    value.assign(column.ty).map_err(|error| {
        if error.number == 8152 {
            let shown: String = value.to_text().unwrap_or_default().chars().take(40).collect();
            SqlError::truncated(&table.qualified(), &column.name, &shown)
        } else {
            error
        }
    })
}

/// `INSERT INTO t [(columns)] VALUES (...), ...` or `INSERT ... SELECT`.
pub fn insert(db: &mut Database, txn: &mut OpenTxn, insert: &Insert, params: &HashMap<String, Value>, session: SessionInfo) -> SqlResult<u64> {
    let TableObject::TableName(name) = &insert.table else {
        return Err(SqlError::unsupported("INSERT into a table function"));
    };
    let parts = table_parts(name);
    let (table_id, rows) = {
        let table = find_table(db, &parts)?;
        // Without a column list the values go to the columns a statement can write.
        let targets: Vec<usize> = if insert.columns.is_empty() {
            (0..table.columns.len()).filter(|i| table.columns[*i].computed.is_none()).collect()
        } else {
            insert
                .columns
                .iter()
                .map(|c| {
                    let name = object_name(c).join(".");
                    let index = table.column_index(&name).ok_or_else(|| SqlError::invalid_column(&name))?;
                    computed::check_writable(table, index).map(|()| index)
                })
                .collect::<SqlResult<_>>()?
        };
        let source = insert.source.as_ref().ok_or_else(|| SqlError::unsupported("INSERT without VALUES or SELECT"))?;
        let ctx = Ctx { db, params, session, view: ReadView::Dirty };
        let values: Vec<Vec<Value>> = match source.body.as_ref() {
            SetExpr::Values(values) => {
                let mut out = Vec::with_capacity(values.rows.len());
                for row in &values.rows {
                    let mut evaluated = Vec::with_capacity(row.content.len());
                    for expr in &row.content {
                        let compiled = Compiler { scope: &[], params, session, aggs: None }.compile(expr)?;
                        evaluated.push(compiled.eval(&[], &[], &ctx)?);
                    }
                    out.push(evaluated);
                }
                out
            }
            _ => query::run(source, &ctx)?.rows,
        };
        let mut rows = Vec::with_capacity(values.len());
        for row in values {
            if row.len() != targets.len() {
                return Err(SqlError::new(
                    if row.len() > targets.len() { 110 } else { 109 },
                    15,
                    "There are fewer columns in the INSERT statement than values specified in the VALUES clause. The number of values in the VALUES clause must match the number of columns specified in the INSERT statement.",
                ));
            }
            let mut full = vec![Value::Null; table.columns.len()];
            for (target, value) in targets.iter().zip(&row) {
                full[*target] = value.clone();
            }
            let mut converted = (0..full.len()).map(|i| assign(table, i, &full[i], "INSERT")).collect::<SqlResult<Vec<_>>>()?;
            computed::fill(db, table, &mut converted)?;
            rows.push(converted);
        }
        (table.object_id, rows)
    };
    let count = rows.len() as u64;
    let command_id = txn.next_statement();
    for row in rows {
        db.insert_row(txn, table_id, row, command_id)?;
    }
    Ok(count)
}

/// The scope of a statement's target table and its matching rows (key, values).
type Matching = (Vec<super::expr::ScopeColumn>, Vec<(RowKey, Vec<Value>)>);

/// Rows of `parts` matching `selection`, with their keys; the compiled scope for more
/// expressions.
fn matching_rows(db: &Database, parts: &[String], alias: Option<&str>, selection: Option<&sqlparser::ast::Expr>, params: &HashMap<String, Value>, session: SessionInfo) -> SqlResult<Matching> {
    let table = find_table(db, parts)?;
    // A writer looks at the newest rows; taking each row's lock is what waits for others.
    let source = Source::open(db, parts, None, alias, ReadView::Dirty)?;
    let ctx = Ctx { db, params, session, view: ReadView::Dirty };
    let filter = selection.map(|e| Compiler { scope: &source.columns, params, session, aggs: None }.compile(e)).transpose()?;
    let range = match (&filter, source.key_column) {
        (Some(filter), Some(key)) => query::key_range(filter, key, &ctx)?,
        _ => None,
    };
    // A heap's rows are told apart by their hidden row ids, not by their values.
    let candidates: Vec<(RowKey, Vec<Value>)> = if table.key.is_empty() {
        table.rows.iter().map(|(key, row)| (key.clone(), row.clone())).collect()
    } else {
        source.scan(range.as_ref())?.into_iter().map(|row| (RowKey(table.key.iter().map(|i| row[*i].clone()).collect()), row)).collect()
    };
    let mut matched = Vec::new();
    for (key, row) in candidates {
        let keep = match &filter {
            Some(filter) => truth(&filter.eval(&row, &[], &ctx)?) == Some(true),
            None => true,
        };
        if keep {
            matched.push((key, row));
        }
    }
    Ok((source.columns, matched))
}

fn relation_name(factor: &TableFactor) -> SqlResult<(Vec<String>, Option<String>)> {
    match factor {
        TableFactor::Table { name, alias, .. } => Ok((table_parts(name), alias.as_ref().map(|a| a.name.value.clone()))),
        other => Err(SqlError::unsupported(&format!("the target `{other}`"))),
    }
}

/// `UPDATE t SET c = expr, ... [WHERE ...]`.
pub fn update(db: &mut Database, txn: &mut OpenTxn, update: &Update, params: &HashMap<String, Value>, session: SessionInfo) -> SqlResult<u64> {
    if update.from.is_some() {
        return Err(SqlError::unsupported("UPDATE ... FROM"));
    }
    let (parts, alias) = relation_name(&update.table.relation)?;
    let (table_id, changes) = {
        let (scope, matched) = matching_rows(db, &parts, alias.as_deref(), update.selection.as_ref(), params, session)?;
        let table = find_table(db, &parts)?;
        let mut assignments: Vec<(usize, CExpr)> = Vec::new();
        for assignment in &update.assignments {
            let AssignmentTarget::ColumnName(target) = &assignment.target else {
                return Err(SqlError::unsupported("tuple assignments"));
            };
            let names = object_name(target);
            let name = names.last().cloned().unwrap_or_default();
            let index = table.column_index(&name).ok_or_else(|| SqlError::invalid_column(&name))?;
            computed::check_writable(table, index)?;
            let compiled = Compiler { scope: &scope, params, session, aggs: None }.compile(&assignment.value)?;
            assignments.push((index, compiled));
        }
        let ctx = Ctx { db, params, session, view: ReadView::Dirty };
        let mut changes = Vec::with_capacity(matched.len());
        for (key, row) in matched {
            let mut new_row = row.clone();
            for (index, expr) in &assignments {
                new_row[*index] = assign(table, *index, &expr.eval(&row, &[], &ctx)?, "UPDATE")?;
            }
            computed::fill(db, table, &mut new_row)?;
            changes.push((key, new_row));
        }
        (table.object_id, changes)
    };
    let count = changes.len() as u64;
    db.update_rows(txn, table_id, changes)?;
    Ok(count)
}

/// `DELETE [FROM] t [WHERE ...]`.
pub fn delete(db: &mut Database, txn: &mut OpenTxn, delete: &Delete, params: &HashMap<String, Value>, session: SessionInfo) -> SqlResult<u64> {
    let from = match &delete.from {
        FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from) => from,
    };
    let relation = match (from.as_slice(), delete.tables.as_slice()) {
        ([single], []) if single.joins.is_empty() => &single.relation,
        _ => return Err(SqlError::unsupported("DELETE with joins or several tables")),
    };
    let (parts, alias) = relation_name(relation)?;
    let (table_id, keys) = {
        let (_, matched) = matching_rows(db, &parts, alias.as_deref(), delete.selection.as_ref(), params, session)?;
        (find_table(db, &parts)?.object_id, matched.into_iter().map(|(key, _)| key).collect::<Vec<_>>())
    };
    let count = keys.len() as u64;
    let command_id = txn.next_statement();
    for key in keys {
        db.delete_row(txn, table_id, &key, command_id)?;
    }
    Ok(count)
}
