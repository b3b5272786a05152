//! [`Database`]: the simulated database — tables, the transaction log, CDC and its jobs.
//!
//! Writes are applied to tables at once and undone on rollback; every row change is a log
//! record with its own LSN, and a commit gets the next LSN. Committed transactions wait in the
//! log until the capture job harvests them (after the configured lag) into the change tables
//! of the capture instances tracking their tables, writing one `cdc.lsn_time_mapping` row per
//! transaction, as SQL Server's log reader does.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::cdc::{op, CdcState, ChangeRow, DdlHistoryRow, MappingRow};
use super::clock::{ServerZone, SimClock};
use super::error::{SqlError, SqlResult};
use mssql_cdc_types::lsn::Lsn;
use super::table::{RowKey, Table};
use super::versions::{Conflict, ReadView};
use super::value::Value;

/// How a simulated server behaves. `Debug` shows login names, never passwords.
#[derive(Clone)]
pub struct SimConfig {
    /// The database name (`DB_NAME()`).
    pub database: String,
    /// The server's time zone.
    pub zone: ServerZone,
    /// How long after its commit the capture job harvests a transaction.
    pub capture_lag: Duration,
    /// On a quiet database, the capture job writes an idle mapping entry this often.
    pub idle_entry_interval: Duration,
    /// SQL logins: (user, password).
    pub logins: Vec<(String, String)>,
}

impl std::fmt::Debug for SimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimConfig")
            .field("database", &self.database)
            .field("zone", &self.zone.windows_id)
            .field("capture_lag", &self.capture_lag)
            .field("idle_entry_interval", &self.idle_entry_interval)
            .field("logins", &self.logins.iter().map(|(user, _)| user.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            database: "sales".to_owned(),
            zone: ServerZone::utc(),
            capture_lag: Duration::from_millis(0),
            idle_entry_interval: Duration::from_secs(5),
            logins: vec![("sa".to_owned(), crate::client::DEFAULT_PASSWORD.to_owned())],
        }
    }
}

/// What a row change did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    /// A new row.
    Insert,
    /// A removed row.
    Delete,
    /// A changed row; `key_changed` when a key column changed (captured as delete + insert).
    Update {
        /// Whether the row-identifier changed.
        key_changed: bool,
    },
}

/// One row change in the log.
#[derive(Clone, Debug)]
pub struct RowChange {
    /// The table.
    pub table_id: i32,
    /// The table's column names when the change happened.
    pub columns: Arc<Vec<String>>,
    /// What happened.
    pub kind: ChangeKind,
    /// The row before (delete, update).
    pub before: Option<Vec<Value>>,
    /// The row after (insert, update).
    pub after: Option<Vec<Value>>,
    /// The change's log record LSN (`__$seqval`).
    pub seqval: Lsn,
    /// Order of the change within its transaction (`__$command_id`).
    pub command_id: i32,
}

/// A DDL statement on a table, logged in its transaction.
#[derive(Clone, Debug)]
pub struct DdlChange {
    /// The table.
    pub table_id: i32,
    /// The statement text.
    pub text: String,
    /// Columns whose type changed.
    pub altered_columns: Vec<(String, super::types::SqlType)>,
}

/// Undo information for rollback.
#[derive(Clone, Debug)]
enum Undo {
    /// Remove the row with this key.
    Remove { table_id: i32, key: RowKey },
    /// Put this row back.
    Restore { table_id: i32, key: RowKey, row: Vec<Value> },
    /// Put a whole table definition back (DDL).
    Table { table: Box<Table> },
    /// Drop a table created in the transaction.
    Drop { table_id: i32 },
    /// Put back a table dropped in the transaction.
    Recreate { table: Box<Table> },
}

/// An open transaction of a session.
#[derive(Clone, Debug)]
pub struct OpenTxn {
    /// Transaction id.
    pub tran_id: u64,
    /// LSN of its begin record.
    pub begin_lsn: Lsn,
    /// When it began.
    pub begin_time: DateTime<Utc>,
    changes: Vec<RowChange>,
    ddl: Vec<DdlChange>,
    undo: Vec<Undo>,
    next_command: i32,
    /// Row keys this transaction holds locks on, by table.
    locked: Vec<(i32, RowKey)>,
    /// Under SNAPSHOT isolation, the commit sequence its reads see (set at its first read).
    pub snapshot: Option<u64>,
}

impl OpenTxn {
    /// The `__$command_id` of the transaction's next DML statement (from 1): every row one
    /// statement changes shares it.
    pub fn next_statement(&mut self) -> i32 {
        let command_id = self.next_command;
        self.next_command += 1;
        command_id
    }
}

/// A committed transaction waiting for the capture job.
#[derive(Clone, Debug)]
struct CommittedTxn {
    tran_id: u64,
    begin_lsn: Lsn,
    begin_time: DateTime<Utc>,
    commit_lsn: Lsn,
    commit_time: DateTime<Utc>,
    changes: Vec<RowChange>,
    ddl: Vec<DdlChange>,
}

/// The simulated database.
#[derive(Debug)]
pub struct Database {
    /// Configuration.
    pub config: SimConfig,
    /// The clock.
    pub clock: Arc<SimClock>,
    /// Schemas by lower-case name: (schema_id, name).
    pub schemas: BTreeMap<String, (i32, String)>,
    /// Tables by lower-case (schema, name).
    pub tables: BTreeMap<(String, String), Table>,
    /// Whether `sys.sp_cdc_enable_db` ran.
    pub cdc_enabled: bool,
    /// CDC state.
    pub cdc: CdcState,
    next_record: u64,
    next_tran_id: u64,
    next_object_id: i32,
    pending: VecDeque<CommittedTxn>,
    /// `ALTER DATABASE ... SET ALLOW_SNAPSHOT_ISOLATION`.
    pub allow_snapshot_isolation: bool,
    /// `ALTER DATABASE ... SET READ_COMMITTED_SNAPSHOT`: READ COMMITTED reads row versions.
    pub read_committed_snapshot: bool,
    /// The sequence number of the newest commit that wrote.
    commit_seq: u64,
    /// Open SNAPSHOT transactions: transaction id → the commit sequence they see.
    snapshots: BTreeMap<u64, u64>,
    /// Blocked transactions: waiter → the transaction holding the lock it waits for.
    waits: HashMap<u64, u64>,
}

impl Database {
    /// A new empty database with schemas `dbo`, `cdc`, `sys` and `sim`.
    pub fn new(config: SimConfig, clock: Arc<SimClock>) -> Self {
        let mut schemas = BTreeMap::new();
        for (id, name) in [(1, "dbo"), (4, "sys"), (5, "cdc"), (6, "sim")] {
            schemas.insert(name.to_owned(), (id, name.to_owned()));
        }
        Self {
            config,
            clock,
            schemas,
            tables: BTreeMap::new(),
            cdc_enabled: false,
            cdc: CdcState::default(),
            next_record: 0,
            next_tran_id: 0x1000,
            next_object_id: 245_575_913,
            pending: VecDeque::new(),
            allow_snapshot_isolation: false,
            read_committed_snapshot: false,
            commit_seq: 0,
            snapshots: BTreeMap::new(),
            waits: HashMap::new(),
        }
    }

    /// Allocates the next log record's LSN.
    pub fn next_lsn(&mut self) -> Lsn {
        let lsn = Lsn::from_record(self.next_record);
        self.next_record += 1;
        lsn
    }

    /// Allocates an object id.
    pub fn next_object_id(&mut self) -> i32 {
        self.next_object_id += 16_001;
        self.next_object_id
    }

    /// Looks a table up by optional schema and name (case-insensitive; default `dbo`).
    pub fn table(&self, schema: Option<&str>, name: &str) -> Option<&Table> {
        self.tables.get(&(schema.unwrap_or("dbo").to_ascii_lowercase(), name.to_ascii_lowercase()))
    }

    /// A table by object id.
    pub fn table_by_id(&self, id: i32) -> Option<&Table> {
        self.tables.values().find(|table| table.object_id == id)
    }

    fn table_by_id_mut(&mut self, id: i32) -> Option<&mut Table> {
        self.tables.values_mut().find(|table| table.object_id == id)
    }

    /// Begins a transaction.
    pub fn begin(&mut self) -> OpenTxn {
        self.next_tran_id += 1;
        OpenTxn {
            tran_id: self.next_tran_id,
            begin_lsn: self.next_lsn(),
            begin_time: self.clock.now(),
            changes: Vec::new(),
            ddl: Vec::new(),
            undo: Vec::new(),
            next_command: 1,
            locked: Vec::new(),
            snapshot: None,
        }
    }

    /// The view a statement of a transaction (or an autocommit statement) reads under
    /// `isolation`; a SNAPSHOT transaction's snapshot starts at its first read.
    pub fn read_view(&mut self, txn: Option<&mut OpenTxn>, isolation: Isolation) -> SqlResult<ReadView> {
        let own = txn.as_ref().map(|txn| txn.tran_id);
        Ok(match isolation {
            Isolation::ReadUncommitted => ReadView::Dirty,
            Isolation::Snapshot => {
                if !self.allow_snapshot_isolation {
                    return Err(SqlError::snapshot_not_allowed(&self.config.database));
                }
                let seq = match txn {
                    Some(txn) => *txn.snapshot.get_or_insert_with(|| {
                        self.snapshots.insert(txn.tran_id, self.commit_seq);
                        self.commit_seq
                    }),
                    None => self.commit_seq,
                };
                ReadView::AsOf { seq, own }
            }
            Isolation::ReadCommitted if self.read_committed_snapshot => ReadView::AsOf { seq: self.commit_seq, own },
            Isolation::ReadCommitted => ReadView::Locking { own },
        })
    }

    /// Records that `waiter` waits for `holder`'s lock; `true` when that closes a cycle (a
    /// deadlock: the waiter is the victim).
    pub fn wait_for(&mut self, waiter: u64, holder: u64) -> bool {
        let mut next = Some(holder);
        let mut steps = 0;
        while let Some(tran) = next {
            if tran == waiter {
                self.waits.remove(&waiter);
                return true;
            }
            steps += 1;
            if steps > self.waits.len() + 1 {
                break;
            }
            next = self.waits.get(&tran).copied();
        }
        self.waits.insert(waiter, holder);
        false
    }

    /// `waiter` no longer waits.
    pub fn stop_waiting(&mut self, waiter: u64) {
        self.waits.remove(&waiter);
    }

    /// Inserts a row (already converted to the column types and checked for NULLs) for the
    /// statement `command_id` ([`OpenTxn::next_statement`]).
    pub fn insert_row(&mut self, txn: &mut OpenTxn, table_id: i32, row: Vec<Value>, command_id: i32) -> SqlResult<()> {
        let seqval = self.next_lsn();
        let table = self.table_by_id_mut(table_id).ok_or_else(|| SqlError::invalid_object("table"))?;
        let key = table.key_of(&row);
        lock_row(table, txn, &key)?;
        if table.rows.contains_key(&key) {
            return Err(table.duplicate_key(&key));
        }
        let columns = Arc::new(table.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>());
        table.rows.insert(key.clone(), row.clone());
        txn.undo.push(Undo::Remove { table_id, key });
        txn.changes.push(RowChange { table_id, columns, kind: ChangeKind::Insert, before: None, after: Some(row), seqval, command_id });
        Ok(())
    }

    /// Deletes the row with `key` for the statement `command_id`.
    pub fn delete_row(&mut self, txn: &mut OpenTxn, table_id: i32, key: &RowKey, command_id: i32) -> SqlResult<()> {
        let seqval = self.next_lsn();
        let table = self.table_by_id_mut(table_id).ok_or_else(|| SqlError::invalid_object("table"))?;
        if !table.rows.contains_key(key) {
            return Ok(());
        }
        lock_row(table, txn, key)?;
        let Some(row) = table.rows.remove(key) else { return Ok(()) };
        let columns = Arc::new(table.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>());
        txn.undo.push(Undo::Restore { table_id, key: key.clone(), row: row.clone() });
        txn.changes.push(RowChange { table_id, columns, kind: ChangeKind::Delete, before: Some(row), after: None, seqval, command_id });
        Ok(())
    }

    /// Replaces rows as one UPDATE statement does: every old row leaves first, then the new
    /// rows arrive, so key uniqueness is checked as the statement ends (`SET id = id + 1`
    /// over adjacent keys succeeds, as on SQL Server).
    pub fn update_rows(&mut self, txn: &mut OpenTxn, table_id: i32, changes: Vec<(RowKey, Vec<Value>)>) -> SqlResult<()> {
        let seqvals: Vec<Lsn> = changes.iter().map(|_| self.next_lsn()).collect();
        // One statement: every row it changes shares its `__$command_id`.
        let command_id = txn.next_statement();
        let table = self.table_by_id_mut(table_id).ok_or_else(|| SqlError::invalid_object("table"))?;
        let columns = Arc::new(table.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>());
        for (key, _) in &changes {
            if table.rows.contains_key(key) {
                lock_row(table, txn, key)?;
            }
        }
        let mut olds = Vec::with_capacity(changes.len());
        for (key, _) in &changes {
            let old = table.rows.remove(key);
            if let Some(old) = &old {
                txn.undo.push(Undo::Restore { table_id, key: key.clone(), row: old.clone() });
            }
            olds.push(old);
        }
        for (((key, new_row), old), seqval) in changes.into_iter().zip(olds).zip(seqvals) {
            let Some(old_row) = old else { continue };
            let new_key = if table.key.is_empty() { key.clone() } else { table.key_of(&new_row) };
            lock_row(table, txn, &new_key)?;
            if table.rows.contains_key(&new_key) {
                return Err(table.duplicate_key(&new_key));
            }
            table.rows.insert(new_key.clone(), new_row.clone());
            txn.undo.push(Undo::Remove { table_id, key: new_key.clone() });
            txn.changes.push(RowChange {
                table_id,
                columns: columns.clone(),
                kind: ChangeKind::Update { key_changed: new_key != key },
                before: Some(old_row),
                after: Some(new_row),
                seqval,
                command_id,
            });
        }
        Ok(())
    }

    /// Records a DDL change (the caller has already changed the table) with the definition
    /// to restore on rollback.
    pub fn log_ddl(&mut self, txn: &mut OpenTxn, before: Table, change: DdlChange) {
        self.next_lsn();
        txn.undo.push(Undo::Table { table: Box::new(before) });
        txn.ddl.push(change);
    }

    /// Records the creation of a table (rollback drops it).
    pub fn log_create(&mut self, txn: &mut OpenTxn, table_id: i32) {
        self.next_lsn();
        txn.undo.push(Undo::Drop { table_id });
    }

    /// A statement savepoint: where to roll back to if the statement fails.
    pub fn savepoint(txn: &OpenTxn) -> (usize, usize, usize) {
        (txn.changes.len(), txn.ddl.len(), txn.undo.len())
    }

    /// Undoes a failed statement's work, keeping the rest of its transaction.
    pub fn rollback_to(&mut self, txn: &mut OpenTxn, savepoint: (usize, usize, usize)) {
        let (changes, ddl, undo) = savepoint;
        txn.changes.truncate(changes);
        txn.ddl.truncate(ddl);
        let tail = txn.undo.split_off(undo);
        self.undo(tail);
    }

    /// Drops a table, keeping it for rollback.
    pub fn drop_table(&mut self, txn: &mut OpenTxn, key: &(String, String)) {
        if let Some(table) = self.tables.remove(key) {
            self.next_lsn();
            txn.undo.push(Undo::Recreate { table: Box::new(table) });
        }
    }

    /// Commits: returns the commit LSN, or `None` for a transaction that wrote nothing.
    pub fn commit(&mut self, mut txn: OpenTxn) -> Option<Lsn> {
        self.end(&mut txn);
        if txn.changes.is_empty() && txn.ddl.is_empty() {
            self.release(&txn, None);
            return None;
        }
        self.commit_seq += 1;
        let seq = self.commit_seq;
        self.release(&txn, Some(seq));
        for ddl in &txn.ddl {
            if let Some(table) = self.table_by_id_mut(ddl.table_id) {
                table.versions.defined_at = seq;
            }
        }
        let commit_lsn = self.next_lsn();
        self.pending.push_back(CommittedTxn {
            tran_id: txn.tran_id,
            begin_lsn: txn.begin_lsn,
            begin_time: txn.begin_time,
            commit_lsn,
            commit_time: self.clock.now(),
            changes: txn.changes,
            ddl: txn.ddl,
        });
        Some(commit_lsn)
    }

    /// Rolls a transaction back, undoing its writes in reverse order.
    pub fn rollback(&mut self, mut txn: OpenTxn) {
        self.end(&mut txn);
        let undo = std::mem::take(&mut txn.undo);
        self.undo(undo);
        self.release(&txn, None);
    }

    /// The end of a transaction: it waits no more, and its snapshot closes (dropping the row
    /// versions only it could see).
    fn end(&mut self, txn: &mut OpenTxn) {
        self.waits.remove(&txn.tran_id);
        if txn.snapshot.take().is_some() {
            self.snapshots.remove(&txn.tran_id);
            let oldest = self.snapshots.values().min().copied();
            for table in self.tables.values_mut() {
                if table.versions.has_versions() {
                    table.versions.prune(oldest);
                }
            }
        }
    }

    /// Releases a transaction's row locks; at a commit with sequence `committed_at`, the
    /// images they kept become versions while a SNAPSHOT transaction is open.
    fn release(&mut self, txn: &OpenTxn, committed_at: Option<u64>) {
        let keep = !self.snapshots.is_empty();
        for (table_id, key) in &txn.locked {
            if let Some(table) = self.table_by_id_mut(*table_id) {
                table.versions.release(key, txn.tran_id, committed_at, keep);
            }
        }
    }

    /// Applies undo records, newest first.
    fn undo(&mut self, undo: Vec<Undo>) {
        for undo in undo.into_iter().rev() {
            match undo {
                Undo::Remove { table_id, key } => {
                    if let Some(table) = self.table_by_id_mut(table_id) {
                        table.rows.remove(&key);
                    }
                }
                Undo::Drop { table_id } => self.tables.retain(|_, table| table.object_id != table_id),
                Undo::Restore { table_id, key, row } => {
                    if let Some(table) = self.table_by_id_mut(table_id) {
                        table.rows.insert(key, row);
                    }
                }
                Undo::Table { table } => {
                    // Undo runs newest first: row writes after the DDL are already undone, so
                    // the saved definition with its rows is the state before the DDL.
                    if let Some(current) = self.table_by_id_mut(table.object_id) {
                        *current = *table;
                    }
                }
                Undo::Recreate { table } => {
                    self.tables.insert((table.schema.to_ascii_lowercase(), table.name.to_ascii_lowercase()), *table);
                }
            }
        }
    }

    /// Runs the capture job: harvests committed transactions older than the lag into the
    /// change tables and writes an idle mapping entry on a quiet database.
    pub fn run_capture(&mut self) {
        if !self.cdc.jobs.capture_running {
            return;
        }
        let now = self.clock.now();
        let lag = chrono::Duration::from_std(self.config.capture_lag).unwrap_or_default();
        while self.pending.front().is_some_and(|txn| txn.commit_time + lag <= now) {
            if let Some(txn) = self.pending.pop_front() {
                self.harvest(txn);
            }
        }
        if !self.cdc.instances.is_empty() {
            let idle = chrono::Duration::from_std(self.config.idle_entry_interval).unwrap_or_default();
            // The quiet period starts when the capture job first sees an instance.
            let quiet_since = *self.cdc.last_entry_at.get_or_insert(now);
            if self.pending.is_empty() && now - quiet_since >= idle {
                let lsn = self.next_lsn();
                let local = self.config.zone.local(now);
                self.cdc.mapping.insert(
                    lsn,
                    MappingRow { tran_begin_time: local, tran_end_time: local, end_utc: now, tran_id: vec![0], tran_begin_lsn: None },
                );
                self.cdc.last_entry_at = Some(now);
            }
        }
    }

    fn harvest(&mut self, txn: CommittedTxn) {
        let mut captured_any = false;
        let zone = self.config.zone.clone();
        for change in &txn.changes {
            for instance in self.cdc.instances.iter_mut() {
                if instance.source_object_id != change.table_id || txn.commit_lsn <= instance.enabled_at {
                    continue;
                }
                captured_any = true;
                let pick = |row: &Option<Vec<Value>>| -> Vec<Value> {
                    instance
                        .captured
                        .iter()
                        .map(|column| {
                            let position = change.columns.iter().position(|name| name.eq_ignore_ascii_case(&column.name));
                            match (row, position) {
                                // CDC keeps no value of a computed column, persisted or not.
                                _ if column.computed => Value::Null,
                                (Some(values), Some(index)) => values[index].cast(column.ty).unwrap_or(Value::Null),
                                _ => Value::Null,
                            }
                        })
                        .collect()
                };
                let all = instance.mask(|_| true);
                let rows: Vec<(u8, Vec<Value>, Vec<u8>)> = match change.kind {
                    ChangeKind::Insert => vec![(op::INSERT, pick(&change.after), all)],
                    ChangeKind::Delete => vec![(op::DELETE, pick(&change.before), all)],
                    ChangeKind::Update { key_changed: true } => {
                        vec![(op::DELETE, pick(&change.before), all.clone()), (op::INSERT, pick(&change.after), all)]
                    }
                    ChangeKind::Update { key_changed: false } => {
                        let (before, after) = (pick(&change.before), pick(&change.after));
                        let differs: Vec<bool> = before.iter().zip(&after).map(|(a, b)| a != b).collect();
                        let mask = instance.mask(|column| differs[(column.ordinal - 1) as usize]);
                        vec![(op::UPDATE_BEFORE, before, mask.clone()), (op::UPDATE_AFTER, after, mask)]
                    }
                };
                for (operation, values, update_mask) in rows {
                    instance.rows.insert((txn.commit_lsn, change.seqval, operation), ChangeRow { update_mask, command_id: change.command_id, values });
                }
            }
        }
        for ddl in &txn.ddl {
            for instance in self.cdc.instances.iter_mut().filter(|ci| ci.source_object_id == ddl.table_id) {
                let mut required_column_update = false;
                for (name, ty) in &ddl.altered_columns {
                    if let Some(column) = instance.captured.iter_mut().find(|c| c.name.eq_ignore_ascii_case(name)) {
                        column.ty = *ty;
                        required_column_update = true;
                    }
                }
                self.cdc.ddl_history.push(DdlHistoryRow {
                    source_object_id: ddl.table_id,
                    object_id: instance.object_id,
                    required_column_update,
                    ddl_command: ddl.text.clone(),
                    ddl_lsn: txn.commit_lsn,
                    ddl_time: zone.local(txn.commit_time),
                });
                captured_any = true;
            }
        }
        if captured_any {
            self.cdc.mapping.insert(
                txn.commit_lsn,
                MappingRow {
                    tran_begin_time: zone.local(txn.begin_time),
                    tran_end_time: zone.local(txn.commit_time),
                    end_utc: txn.commit_time,
                    tran_id: txn.tran_id.to_be_bytes()[2..].to_vec(),
                    tran_begin_lsn: Some(txn.begin_lsn),
                },
            );
            self.cdc.last_entry_at = Some(txn.commit_time.max(self.cdc.last_entry_at.unwrap_or(txn.commit_time)));
        }
    }

    /// Runs the cleanup job: moves every instance's low water mark to the first commit within
    /// the retention (counted back from the newest mapping row's commit time) and deletes the
    /// change rows and mapping rows below it. Returns the new low water mark, if any.
    pub fn run_cleanup(&mut self) -> Option<Lsn> {
        let newest = self.cdc.mapping.values().map(|row| row.end_utc).max()?;
        let cutoff = newest - chrono::Duration::minutes(self.cdc.jobs.retention_minutes);
        let low = self.cdc.mapping.iter().find(|(_, row)| row.end_utc >= cutoff).map(|(lsn, _)| *lsn)?;
        self.cleanup_to(None, low);
        Some(low)
    }

    /// Moves the low water mark of one instance (or all) up to `low` and deletes below it.
    pub fn cleanup_to(&mut self, instance: Option<&str>, low: Lsn) {
        for ci in self.cdc.instances.iter_mut() {
            if instance.is_some_and(|name| !ci.name.eq_ignore_ascii_case(name)) {
                continue;
            }
            if ci.start_lsn < low {
                ci.start_lsn = low;
            }
            let mark = ci.start_lsn;
            ci.rows.retain(|(start, _, _), _| *start >= mark);
        }
        if let Some(lowest) = self.cdc.instances.iter().map(|ci| ci.start_lsn).min() {
            self.cdc.mapping.retain(|lsn, _| *lsn >= lowest);
        }
    }

    /// The sequence number of the newest commit that wrote.
    pub fn commit_seq(&self) -> u64 {
        self.commit_seq
    }

    /// Whether committed transactions are still waiting for the capture job.
    pub fn capture_backlog(&self) -> usize {
        self.pending.len()
    }
}

/// The isolation level of a session (`SET TRANSACTION ISOLATION LEVEL`). `REPEATABLE READ`
/// and `SERIALIZABLE` read as `READ COMMITTED` here: the simulator holds no read locks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Isolation {
    /// Dirty reads.
    ReadUncommitted,
    /// Committed rows only (the default).
    #[default]
    ReadCommitted,
    /// The database as of the transaction's first read.
    Snapshot,
}

/// Takes the lock on `key` for `txn` before a write (see [`crate::versions`]).
fn lock_row(table: &mut Table, txn: &mut OpenTxn, key: &RowKey) -> SqlResult<()> {
    match table.versions.lock(key, txn.tran_id, txn.snapshot, table.rows.get(key)) {
        Ok(true) => {
            txn.locked.push((table.object_id, key.clone()));
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(Conflict::Blocked { holder }) => Err(SqlError::blocked(holder)),
        Err(Conflict::UpdateConflict) => Err(SqlError::update_conflict(&table.qualified())),
    }
}
