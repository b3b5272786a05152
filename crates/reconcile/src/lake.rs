//! The lake side: silver's applied position and rows, and bronze's changes past that position.

use std::collections::{BTreeMap, HashMap, HashSet};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Int16Type, Int32Type, Int64Type};
use deltalake::DeltaTable;
use mssql_cdc_lake::delta::query::{ident, literal, query};
use mssql_cdc_lake::delta::storage::Storage;
use mssql_cdc_lake::delta::table::{self, table_url};
use mssql_cdc_lake::silver::{control, SilverSettings};
use mssql_cdc_types::lsn::Lsn;

use crate::buckets::{Cut, Tally};
use crate::canonical;
use crate::error::ReconcileError;
use crate::layout::Layout;

/// Silver at the version its control row names, with that row's position.
pub struct Silver {
    table: DeltaTable,
    /// The applied position `E`: the highest LSN applied (`None`: nothing yet).
    pub applied_lsn: Option<Lsn>,
    /// The version compared.
    pub version: i64,
    /// Its column names.
    pub columns: Vec<String>,
}

impl Silver {
    /// Reads the control row first, then opens silver's newest version: it holds every change
    /// up to the row's applied LSN, and any it holds past it is in bronze past that LSN too.
    pub async fn open(settings: &SilverSettings, storage: &Storage) -> Result<Self, ReconcileError> {
        let name = table_url(&settings.target)?.to_string();
        let row = match table::open(&settings.control_table, storage).await? {
            Some(control_table) => control::read_row(&control_table, &name).await?,
            None => None,
        };
        let table = table::open(&settings.target, storage).await?.ok_or_else(|| ReconcileError::NoTable { location: settings.target.clone() })?;
        let version = table.version().map_or(-1, |v| v as i64);
        let applied_lsn = row.and_then(|r| r.applied_lsn).and_then(|text| Lsn::parse_hex(&text));
        let columns = table.snapshot().map(|s| s.schema().fields().map(|f| f.name().clone()).collect()).unwrap_or_default();
        Ok(Self { table, applied_lsn, version, columns })
    }

    /// Every key of the range key column.
    pub async fn keys(&self, key: &str) -> Result<Vec<i64>, ReconcileError> {
        let batches = query(&[("silver", &self.table)], &format!("SELECT {} FROM silver", ident(key))).await?;
        let mut out = Vec::new();
        for batch in &batches {
            let column = batch.column(0);
            for row in 0..batch.num_rows() {
                if column.is_null(row) {
                    continue;
                }
                out.push(match column.data_type() {
                    DataType::Int16 => i64::from(column.as_primitive::<Int16Type>().value(row)),
                    DataType::Int32 => i64::from(column.as_primitive::<Int32Type>().value(row)),
                    DataType::Int64 => column.as_primitive::<Int64Type>().value(row),
                    other => return Err(ReconcileError::KeyType { column: key.to_owned(), found: other.to_string() }),
                });
            }
        }
        Ok(out)
    }

    /// Silver's rows.
    pub async fn count(&self) -> Result<u64, ReconcileError> {
        let batches = query(&[("silver", &self.table)], "SELECT COUNT(*) FROM silver").await?;
        Ok(batches.first().filter(|b| b.num_rows() > 0).map_or(0, |b| b.column(0).as_primitive::<Int64Type>().value(0).max(0) as u64))
    }

    /// Tier 2: silver's rows of `[from, to)` of the range key (all rows without a range), as
    /// key → row hash.
    pub async fn rows(&self, layout: &Layout, range: Option<(Option<i64>, Option<i64>)>) -> Result<HashMap<String, String>, ReconcileError> {
        let select: Vec<String> = layout.columns.iter().map(|c| ident(&c.name)).collect();
        let mut sql = format!("SELECT {} FROM silver", select.join(", "));
        if let (Some((from, to)), Some(key)) = (range, layout.range_key()) {
            let k = ident(&key.name);
            let conditions: Vec<String> = [from.map(|f| format!("{k} >= {f}")), to.map(|t| format!("{k} < {t}"))].into_iter().flatten().collect();
            if !conditions.is_empty() {
                sql.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
            }
        }
        let batches = query(&[("silver", &self.table)], &sql).await?;
        let mut out = HashMap::new();
        for batch in &batches {
            hash_rows(batch, layout, &mut out)?;
        }
        Ok(out)
    }
}

/// Tallies `keys` by the fine buckets of `cut`.
pub fn tally(keys: &[i64], cut: Cut) -> BTreeMap<i64, Tally> {
    let mut out: BTreeMap<i64, Tally> = BTreeMap::new();
    for &key in keys {
        out.entry(cut.bucket(key)).or_default().add(Tally { rows: 1, key_sum: i128::from(key) });
    }
    out
}

fn hash_rows(batch: &RecordBatch, layout: &Layout, out: &mut HashMap<String, String>) -> Result<(), ReconcileError> {
    let mut values = Vec::with_capacity(layout.columns.len());
    for row in 0..batch.num_rows() {
        values.clear();
        for (index, column) in layout.columns.iter().enumerate() {
            let value = canonical::arrow_value(batch.column(index), row, column.ty).map_err(|message| ReconcileError::Value { side: "silver", column: column.name.clone(), message })?;
            values.push(value);
        }
        let (key, hash) = layout.identify(&values);
        out.insert(key, hash);
    }
    Ok(())
}

/// Keys of bronze's rows after `after` (all when `None`): changes bronze holds that silver has
/// not applied at the compared version.
pub async fn bronze_changed_keys(location: &str, storage: &Storage, layout: &Layout, after: Option<Lsn>) -> Result<HashSet<String>, ReconcileError> {
    let Some(bronze) = table::open(location, storage).await? else { return Ok(HashSet::new()) };
    let keys: Vec<String> = layout.key.iter().map(|&i| ident(&layout.columns[i].name)).collect();
    let after = after.unwrap_or(Lsn::ZERO).to_string();
    let sql = format!("SELECT {} FROM bronze WHERE \"_start_lsn\" > {}", keys.join(", "), literal(&after));
    let batches = query(&[("bronze", &bronze)], &sql).await?;
    let names = layout.key_names();
    let types: Vec<_> = layout.key_types().collect();
    let mut out = HashSet::new();
    for batch in &batches {
        for row in 0..batch.num_rows() {
            let mut values = Vec::with_capacity(types.len());
            for (index, ty) in types.iter().enumerate() {
                values.push(canonical::arrow_value(batch.column(index), row, *ty).map_err(|message| ReconcileError::Value { side: "bronze", column: names[index].clone(), message })?);
            }
            out.insert(layout.key_json(values.iter().map(Option::as_deref)));
        }
    }
    Ok(out)
}
