//! Base tables: columns, the clustered key, and rows ordered by it.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::error::SqlError;
use super::types::SqlType;
use super::versions::RowVersions;
use super::value::{sort_order, Value};

/// A column of a base table.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// The name as declared.
    pub name: String,
    /// The type.
    pub ty: SqlType,
    /// Whether NULL is allowed.
    pub nullable: bool,
    /// `sys.columns.column_id`: ids are never reused after a column is dropped.
    pub column_id: i32,
    /// A computed column's expression (`name AS (expression)`): its value is recomputed on
    /// every write, and no statement writes it.
    pub computed: Option<Box<sqlparser::ast::Expr>>,
}

/// A key of the clustered index; `Ord` is SQL Server's index order (NULL first).
#[derive(Clone, Debug)]
pub struct RowKey(pub Vec<Value>);

impl PartialEq for RowKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for RowKey {}

impl PartialOrd for RowKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RowKey {
    fn cmp(&self, other: &Self) -> Ordering {
        for (a, b) in self.0.iter().zip(&other.0) {
            let ordering = sort_order(a, b);
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
        self.0.len().cmp(&other.0.len())
    }
}

/// A base table.
#[derive(Clone, Debug)]
pub struct Table {
    /// `sys.tables.object_id`.
    pub object_id: i32,
    /// Schema name.
    pub schema: String,
    /// Table name.
    pub name: String,
    /// Columns in order.
    pub columns: Vec<Column>,
    /// Indexes into `columns` of the primary key (or unique index) columns; empty for a heap,
    /// which is keyed by a hidden row id.
    pub key: Vec<usize>,
    /// Name of the key's constraint/index (`PK_<table>` unless named).
    pub key_name: Option<String>,
    /// Rows by key.
    pub rows: BTreeMap<RowKey, Vec<Value>>,
    /// The next column id.
    pub next_column_id: i32,
    /// The next hidden row id of a heap.
    pub next_row_id: i64,
    /// Row locks of open transactions and older row images for snapshots.
    pub versions: RowVersions,
}

impl Table {
    /// The position of a column by name (case-insensitive, as SQL Server's default).
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|column| column.name.eq_ignore_ascii_case(name))
    }

    /// The key of a row.
    pub fn key_of(&mut self, row: &[Value]) -> RowKey {
        if self.key.is_empty() {
            self.next_row_id += 1;
            RowKey(vec![Value::Int(self.next_row_id)])
        } else {
            RowKey(self.key.iter().map(|index| row[*index].clone()).collect())
        }
    }

    /// Error 2627 for a key that is already present.
    pub fn duplicate_key(&self, key: &RowKey) -> SqlError {
        let shown: Vec<String> = key.0.iter().map(|v| v.to_text().unwrap_or_else(|| "<NULL>".into())).collect();
        let constraint = self.key_name.clone().unwrap_or_else(|| format!("PK_{}", self.name));
        SqlError::duplicate_key(&constraint, &self.qualified(), &shown.join(", "))
    }

    /// `schema.table`, as error messages name it.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }

    /// Names of the key columns.
    pub fn key_columns(&self) -> Vec<String> {
        self.key.iter().map(|index| self.columns[*index].name.clone()).collect()
    }
}
