//! Change data capture state: capture instances and their change tables,
//! `cdc.lsn_time_mapping`, `cdc.ddl_history`, and the capture and cleanup jobs' settings.

use std::collections::BTreeMap;

use chrono::{DateTime, NaiveDateTime, Utc};

use mssql_cdc_types::lsn::Lsn;
use super::types::SqlType;
use super::value::Value;

/// `__$operation` values.
pub mod op {
    /// Delete (or the delete half of a key update).
    pub const DELETE: u8 = 1;
    /// Insert (or the insert half of a key update).
    pub const INSERT: u8 = 2;
    /// Update, before image.
    pub const UPDATE_BEFORE: u8 = 3;
    /// Update, after image.
    pub const UPDATE_AFTER: u8 = 4;
}

/// A column a capture instance captures (fixed at enable time, as SQL Server's are).
#[derive(Clone, Debug, PartialEq)]
pub struct CapturedColumn {
    /// The source column's name.
    pub name: String,
    /// The source column's id at enable time.
    pub column_id: i32,
    /// The type (altered when the source column's type changes).
    pub ty: SqlType,
    /// 1-based position, the update mask's bit ordinal.
    pub ordinal: i32,
    /// A computed column: every change row holds NULL for it.
    pub computed: bool,
}

/// One row of a change table, keyed by (`__$start_lsn`, `__$seqval`, `__$operation`).
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeRow {
    /// `__$update_mask`.
    pub update_mask: Vec<u8>,
    /// `__$command_id`.
    pub command_id: i32,
    /// Captured column values, in ordinal order.
    pub values: Vec<Value>,
}

/// Key of a change row: commit LSN, seqval, operation.
pub type ChangeKey = (Lsn, Lsn, u8);

/// A capture instance and its change table `cdc.<name>_CT`.
#[derive(Clone, Debug)]
pub struct CaptureInstance {
    /// The instance name.
    pub name: String,
    /// Object id of its change table.
    pub object_id: i32,
    /// Object id of the source table.
    pub source_object_id: i32,
    /// Source schema.
    pub source_schema: String,
    /// Source table.
    pub source_table: String,
    /// Captured columns.
    pub captured: Vec<CapturedColumn>,
    /// The row-identifier index (`PK_...` or `@index_name`).
    pub index_name: Option<String>,
    /// Its columns, in index order.
    pub index_columns: Vec<String>,
    /// `cdc.change_tables.start_lsn`: the low water mark.
    pub start_lsn: Lsn,
    /// `@supports_net_changes`.
    pub supports_net_changes: bool,
    /// `@role_name`.
    pub role_name: Option<String>,
    /// When enabled (server local time).
    pub create_date: NaiveDateTime,
    /// Changes committed after this LSN are captured.
    pub enabled_at: Lsn,
    /// The change table's rows.
    pub rows: BTreeMap<ChangeKey, ChangeRow>,
}

impl CaptureInstance {
    /// The update mask with a bit for each captured column whose ordinal is given: the last
    /// byte holds ordinals 1-8, ordinal 1 in its least significant bit.
    pub fn mask(&self, changed: impl Fn(&CapturedColumn) -> bool) -> Vec<u8> {
        let bytes = self.captured.len().div_ceil(8).max(1);
        let mut mask = vec![0u8; bytes];
        for column in &self.captured {
            if changed(column) {
                let bit = (column.ordinal - 1) as usize;
                mask[bytes - 1 - bit / 8] |= 1 << (bit % 8);
            }
        }
        mask
    }
}

/// A row of `cdc.lsn_time_mapping`.
#[derive(Clone, Debug, PartialEq)]
pub struct MappingRow {
    /// Begin time, server local.
    pub tran_begin_time: NaiveDateTime,
    /// Commit time, server local.
    pub tran_end_time: NaiveDateTime,
    /// Commit time, UTC (kept for cleanup across DST changes).
    pub end_utc: DateTime<Utc>,
    /// Transaction id; `0x00` for the capture job's idle entries.
    pub tran_id: Vec<u8>,
    /// Begin LSN of the transaction.
    pub tran_begin_lsn: Option<Lsn>,
}

/// A row of `cdc.ddl_history`.
#[derive(Clone, Debug, PartialEq)]
pub struct DdlHistoryRow {
    /// Source table id.
    pub source_object_id: i32,
    /// Change table id of the capture instance.
    pub object_id: i32,
    /// Whether a captured column's type was altered.
    pub required_column_update: bool,
    /// The DDL text.
    pub ddl_command: String,
    /// Commit LSN of the DDL.
    pub ddl_lsn: Lsn,
    /// When, server local.
    pub ddl_time: NaiveDateTime,
}

/// Settings of the capture and cleanup jobs.
#[derive(Clone, Debug)]
pub struct Jobs {
    /// Whether the capture job runs (`sp_cdc_start_job` / `sp_cdc_stop_job`).
    pub capture_running: bool,
    /// Whether the cleanup job runs on its schedule.
    pub cleanup_running: bool,
    /// Retention of change rows, minutes (`sp_cdc_change_job @retention`, default 4320).
    pub retention_minutes: i64,
}

impl Default for Jobs {
    fn default() -> Self {
        Self { capture_running: true, cleanup_running: true, retention_minutes: 4320 }
    }
}

/// All CDC state of the database.
#[derive(Clone, Debug, Default)]
pub struct CdcState {
    /// Capture instances, in creation order.
    pub instances: Vec<CaptureInstance>,
    /// `cdc.lsn_time_mapping` by `start_lsn`.
    pub mapping: BTreeMap<Lsn, MappingRow>,
    /// `cdc.ddl_history`.
    pub ddl_history: Vec<DdlHistoryRow>,
    /// Job settings.
    pub jobs: Jobs,
    /// When the capture job last wrote a mapping row (for idle entries).
    pub last_entry_at: Option<DateTime<Utc>>,
}

impl CdcState {
    /// An instance by name: an exact match wins, else a unique case-insensitive one.
    pub fn instance(&self, name: &str) -> Option<&CaptureInstance> {
        self.instances.iter().find(|ci| ci.name == name).or_else(|| {
            let mut matches = self.instances.iter().filter(|ci| ci.name.eq_ignore_ascii_case(name));
            let first = matches.next()?;
            matches.next().is_none().then_some(first)
        })
    }

    /// Mutable access by name, same matching rule.
    pub fn instance_mut(&mut self, name: &str) -> Option<&mut CaptureInstance> {
        let index = self.instances.iter().position(|ci| ci.name == name).or_else(|| {
            let positions: Vec<usize> =
                self.instances.iter().enumerate().filter(|(_, ci)| ci.name.eq_ignore_ascii_case(name)).map(|(i, _)| i).collect();
            (positions.len() == 1).then(|| positions[0])
        })?;
        self.instances.get_mut(index)
    }

    /// `sys.fn_cdc_get_max_lsn()`: the newest mapping row, or NULL before the first.
    pub fn max_lsn(&self) -> Option<Lsn> {
        self.mapping.keys().next_back().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(columns: usize) -> CaptureInstance {
        CaptureInstance {
            name: "dbo_t".into(),
            object_id: 1,
            source_object_id: 2,
            source_schema: "dbo".into(),
            source_table: "t".into(),
            captured: (1..=columns as i32)
                .map(|ordinal| CapturedColumn { name: format!("c{ordinal}"), column_id: ordinal, ty: SqlType::Int, ordinal, computed: false })
                .collect(),
            index_name: None,
            index_columns: vec![],
            start_lsn: Lsn::ZERO,
            supports_net_changes: false,
            role_name: None,
            create_date: NaiveDateTime::default(),
            enabled_at: Lsn::ZERO,
            rows: BTreeMap::new(),
        }
    }

    #[test]
    fn update_mask_puts_ordinal_one_in_the_last_bytes_low_bit() {
        assert_eq!(instance(3).mask(|_| true), vec![0x07]);
        assert_eq!(instance(10).mask(|_| true), vec![0x03, 0xFF]);
        assert_eq!(instance(10).mask(|c| c.ordinal == 9), vec![0x01, 0x00]);
    }
}
