//! The SQL Server side: every read reconcile makes there. Nothing is written and nothing is
//! read with NOLOCK: counts run under READ COMMITTED, row reads under the source connector's
//! `snapshot_isolation`, all under its `lock_timeout_ms`.

use std::collections::{BTreeMap, HashMap, HashSet};

use mssql_cdc_source::config::SnapshotIsolation;
use mssql_cdc_source::connection::{Connector, TdsClient};
use mssql_cdc_source::reader::{self, quote, Instance};
use mssql_cdc_source::MssqlSourceSettings;
use mssql_cdc_types::lsn::Lsn;
use tiberius::ColumnData;

use crate::buckets::{Cut, Tally};
use crate::canonical;
use crate::error::ReconcileError;
use crate::layout::Layout;

/// A connection to the source table's database, with the capture instance resolved.
pub struct SqlServer {
    client: TdsClient,
    connector: Connector,
    /// The capture instance.
    pub instance: Instance,
    isolation: SnapshotIsolation,
    lock_timeout_ms: u128,
}

impl SqlServer {
    /// Connects and resolves `capture_instance`.
    pub async fn open(settings: &MssqlSourceSettings, capture_instance: &str) -> Result<Self, ReconcileError> {
        let connector = Connector::new(&settings.login)?;
        let mut client = connector.connect().await?;
        let instance = reader::resolve_instance(&mut client, &connector, capture_instance).await?;
        Ok(Self { client, connector, instance, isolation: settings.snapshot.isolation, lock_timeout_ms: settings.snapshot.lock_timeout.as_millis() })
    }

    /// The captured columns with their log types and select items.
    pub async fn captured(&mut self, settings: &MssqlSourceSettings) -> Result<reader::CapturedTable, ReconcileError> {
        Ok(reader::table_schema(&mut self.client, &self.connector, &self.instance, settings).await?)
    }

    /// `schema.table`, quoted.
    pub fn table(&self) -> String {
        format!("{}.{}", quote(&self.instance.source_schema), quote(&self.instance.source_table))
    }

    /// `sys.fn_cdc_get_max_lsn()`.
    pub async fn max_lsn(&mut self) -> Result<Lsn, ReconcileError> {
        Ok(reader::server_state(&mut self.client, &self.connector, &self.instance.name).await?.max_lsn)
    }

    async fn session(&mut self, isolation: SnapshotIsolation) -> Result<(), ReconcileError> {
        let level = match isolation {
            SnapshotIsolation::ReadCommitted => "READ COMMITTED",
            SnapshotIsolation::Snapshot => "SNAPSHOT",
        };
        let sql = format!("SET LOCK_TIMEOUT {}; SET TRANSACTION ISOLATION LEVEL {level}", self.lock_timeout_ms);
        Ok(reader::execute(&mut self.client, &self.connector, &sql).await?)
    }

    async fn all(&mut self, sql: &str, params: &[ColumnData<'static>]) -> Result<Vec<Vec<ColumnData<'static>>>, ReconcileError> {
        let mut rows = reader::read_table(&mut self.client, &self.connector, sql, params).await?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().await? {
            out.push(row);
        }
        Ok(out)
    }

    /// `COUNT_BIG(*)` of the table (READ COMMITTED).
    pub async fn count(&mut self) -> Result<u64, ReconcileError> {
        self.session(SnapshotIsolation::ReadCommitted).await?;
        let sql = format!("SELECT COUNT_BIG(*) FROM {}", self.table());
        let rows = self.all(&sql, &[]).await?;
        Ok(rows.first().and_then(|r| r.first()).and_then(int).unwrap_or(0).max(0) as u64)
    }

    /// The lowest and highest key (`None`: the table is empty).
    pub async fn key_range(&mut self, key: &str) -> Result<Option<(i64, i64)>, ReconcileError> {
        self.session(SnapshotIsolation::ReadCommitted).await?;
        let k = format!("CAST({} AS bigint)", quote(key));
        let sql = format!("SELECT MIN({k}), MAX({k}) FROM {}", self.table());
        let rows = self.all(&sql, &[]).await?;
        Ok(rows.first().and_then(|r| Some((int(r.first()?)?, int(r.get(1)?)?))))
    }

    /// Tier 1: one scan counting rows and summing keys per fine bucket of `cut`.
    pub async fn tally(&mut self, key: &str, cut: Cut) -> Result<BTreeMap<i64, Tally>, ReconcileError> {
        self.session(SnapshotIsolation::ReadCommitted).await?;
        let k = quote(key);
        let bucket = format!("(CAST({k} AS bigint) - ({})) / {}", cut.lo, cut.width);
        let sql = format!("SELECT {bucket} AS b, COUNT_BIG(*) AS n, SUM(CAST({k} AS decimal(38,0))) AS s FROM {} GROUP BY {bucket}", self.table());
        let mut out = BTreeMap::new();
        for row in self.all(&sql, &[]).await? {
            let (Some(b), Some(n)) = (row.first().and_then(int), row.get(1).and_then(int)) else { continue };
            let key_sum = match row.get(2) {
                Some(ColumnData::Numeric(Some(n))) => n.value(),
                Some(other) => int(other).map_or(0, i128::from),
                None => 0,
            };
            out.insert(b, Tally { rows: n.max(0) as u64, key_sum });
        }
        Ok(out)
    }

    /// Tier 2: the rows of `[from, to)` of the range key (the whole table without a range),
    /// as key → row hash, read under the configured isolation level.
    pub async fn rows(&mut self, layout: &Layout, range: Option<(Option<i64>, Option<i64>)>) -> Result<HashMap<String, String>, ReconcileError> {
        self.session(self.isolation).await?;
        let select: Vec<&str> = layout.columns.iter().map(|c| c.select.as_str()).collect();
        let mut sql = format!("SELECT {} FROM {}", select.join(", "), self.table());
        if let (Some((from, to)), Some(key)) = (range, layout.range_key()) {
            // The bare column, so SQL Server seeks its index.
            let k = quote(&key.name);
            let conditions: Vec<String> = [from.map(|f| format!("{k} >= {f}")), to.map(|t| format!("{k} < {t}"))].into_iter().flatten().collect();
            if !conditions.is_empty() {
                sql.push_str(&format!(" WHERE {}", conditions.join(" AND ")));
            }
        }
        let mut out = HashMap::new();
        {
            let mut rows = reader::read_table(&mut self.client, &self.connector, &sql, &[]).await?;
            while let Some(row) = rows.next().await? {
                let mut values = Vec::with_capacity(layout.columns.len());
                for (data, column) in row.iter().zip(&layout.columns) {
                    values.push(canonical::sql_value(data, column.ty).map_err(|message| ReconcileError::Value { side: "SQL Server", column: column.name.clone(), message })?);
                }
                let (key, hash) = layout.identify(&values);
                out.insert(key, hash);
            }
        }
        self.session(SnapshotIsolation::ReadCommitted).await?;
        Ok(out)
    }

    /// Keys of the change table's rows after `after` (all rows when `None`): changes the
    /// stream has not brought to silver yet, or is bringing.
    pub async fn changed_keys(&mut self, layout: &Layout, after: Option<Lsn>) -> Result<HashSet<String>, ReconcileError> {
        self.session(SnapshotIsolation::ReadCommitted).await?;
        let select: Vec<String> = layout.key.iter().map(|&i| quote(&layout.columns[i].name)).collect();
        let change_table = format!("cdc.{}", quote(&format!("{}_CT", self.instance.name)));
        let after = after.unwrap_or(Lsn::ZERO);
        let sql = format!("SELECT {} FROM {change_table} WHERE __$start_lsn > @P1", select.join(", "));
        let rows = self.all(&sql, &[ColumnData::Binary(Some(after.0.to_vec().into()))]).await?;
        let types: Vec<_> = layout.key_types().collect();
        let mut out = HashSet::new();
        for row in rows {
            let mut values = Vec::with_capacity(row.len());
            for (data, ty) in row.iter().zip(&types) {
                values.push(canonical::sql_value(data, *ty).map_err(|message| ReconcileError::Value { side: "the change table", column: String::new(), message })?);
            }
            out.insert(layout.key_json(values.iter().map(Option::as_deref)));
        }
        Ok(out)
    }
}

fn int(data: &ColumnData<'static>) -> Option<i64> {
    match data {
        ColumnData::U8(v) => v.map(i64::from),
        ColumnData::I16(v) => v.map(i64::from),
        ColumnData::I32(v) => v.map(i64::from),
        ColumnData::I64(v) => *v,
        ColumnData::Numeric(v) => v.and_then(|n| i64::try_from(n.value()).ok()),
        _ => None,
    }
}
