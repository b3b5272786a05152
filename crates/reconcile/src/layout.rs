//! What is compared: the captured columns silver also holds, in capture order, each with its
//! log type and the expression the source reads it with (casts applied), and the key among them.

use mssql_cdc_core::log::ColumnType;

use crate::canonical;

/// One compared column.
#[derive(Clone, Debug, PartialEq)]
pub struct Compared {
    /// Its name, as SQL Server spells it.
    pub name: String,
    /// Its type in the log (and so in silver).
    pub ty: ColumnType,
    /// The select-list item that reads it on SQL Server (a `CAST` when `columns` casts it).
    pub select: String,
}

/// The compared columns and the key's positions among them.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    /// Compared columns, in capture order.
    pub columns: Vec<Compared>,
    /// Positions of the key columns in `columns`, in key order.
    pub key: Vec<usize>,
    /// Captured columns silver does not hold (not compared).
    pub skipped: Vec<String>,
}

impl Layout {
    /// The key's column names.
    pub fn key_names(&self) -> Vec<String> {
        self.key.iter().map(|&i| self.columns[i].name.clone()).collect()
    }

    /// The one integer key column that tier 1 cuts into ranges, when the key is one column of
    /// an integer type (SQL Server and silver order it alike).
    pub fn range_key(&self) -> Option<&Compared> {
        match self.key.as_slice() {
            [only] if matches!(self.columns[*only].ty, ColumnType::Int16 | ColumnType::Int32 | ColumnType::Int64) => Some(&self.columns[*only]),
            _ => None,
        }
    }

    /// The key's log types, in key order.
    pub fn key_types(&self) -> impl Iterator<Item = ColumnType> + '_ {
        self.key.iter().map(|&i| self.columns[i].ty)
    }

    /// A key as the report shows it, from the key columns' canonical texts in key order.
    pub fn key_json<'v>(&self, key_values: impl IntoIterator<Item = Option<&'v str>>) -> String {
        canonical::key_json(self.key.iter().map(|&i| (self.columns[i].name.as_str(), self.columns[i].ty)).zip(key_values).map(|((name, ty), value)| (name, ty, value)))
    }

    /// A row's key (as the report shows it) and hash, from its values' canonical texts in
    /// column order.
    pub fn identify(&self, values: &[Option<String>]) -> (String, String) {
        let key = self.key_json(self.key.iter().map(|&i| values[i].as_deref()));
        (key, canonical::row_hash(values.iter().map(Option::as_deref)))
    }
}
