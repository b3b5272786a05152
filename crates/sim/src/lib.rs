//! The SQL Server stand-in: a simulator of SQL Server with change data capture that executes
//! T-SQL.
//!
//! No SQL Server runs on our machines, so the source stage is tested — and `demo` runs —
//! against this simulator. It parses the T-SQL it receives with sqlparser's MS SQL dialect and
//! executes the tree against tables, a transaction log with 10-byte LSNs, CDC capture
//! instances and their change tables, and catalog views that carry SQL Server's documented
//! names and columns, so a query naming a wrong column fails as it would on SQL Server (207).
//!
//! ```
//! use mssql_cdc_sim::{SimConfig, Simulator};
//!
//! let sim = Simulator::new(SimConfig::default());
//! let mut session = sim.session();
//! for sql in [
//!     "CREATE TABLE dbo.t (id int PRIMARY KEY, name nvarchar(20))",
//!     "EXEC sys.sp_cdc_enable_db",
//!     "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N't', @role_name = NULL",
//!     "INSERT INTO dbo.t VALUES (1, N'one')",
//! ] {
//!     assert!(sim.execute(&mut session, sql, &[]).error.is_none());
//! }
//! let changes = sim.changes("dbo_t");
//! assert_eq!(changes.len(), 1);
//! assert_eq!(changes[0].operation, 2); // insert
//! ```

pub mod cdc;
pub mod client;
pub mod clock;
pub mod db;
pub mod error;
pub mod fault;

pub mod sql;
pub mod table;
pub mod tds;
pub mod types;
pub mod value;
pub mod versions;
pub mod workload;

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use clock::{ServerZone, SimClock};
pub use db::{Database, SimConfig};
pub use error::SqlError;
pub use mssql_cdc_types::lsn::Lsn;
pub use sql::{BatchOutcome, Engine, Output, ResultSet, Session};
pub use value::Value;

/// Locks a mutex, carrying on after a panic elsewhere poisoned it: the simulator's state is
/// only ever changed in whole steps, and one client's panic must not stop the server.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A change row as the ground truth reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct TruthChange {
    /// `__$start_lsn`.
    pub start_lsn: Lsn,
    /// `__$seqval`.
    pub seqval: Lsn,
    /// `__$operation`.
    pub operation: u8,
    /// `__$command_id`.
    pub command_id: i32,
    /// Captured column values in ordinal order.
    pub values: Vec<Value>,
}

/// A simulated server: the engine plus session ids.
#[derive(Clone)]
pub struct Simulator {
    engine: Arc<Engine>,
    next_spid: Arc<AtomicU16>,
}

impl Simulator {
    /// A fresh server with an empty database.
    pub fn new(config: SimConfig) -> Self {
        let clock = Arc::new(SimClock::default());
        Self { engine: Arc::new(Engine::new(Database::new(config, clock))), next_spid: Arc::new(AtomicU16::new(51)) }
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// A new session (connection).
    pub fn session(&self) -> Session {
        Session::new(self.next_spid.fetch_add(1, Ordering::Relaxed))
    }

    /// Executes a batch in a session.
    pub fn execute(&self, session: &mut Session, sql: &str, params: &[(String, Value)]) -> BatchOutcome {
        self.engine.execute(session, sql, params)
    }

    /// Runs `sql` in a new session and returns its result sets in order, or the error that
    /// ended the batch (the in-process counterpart of a query over TDS).
    pub fn query(&self, sql: &str) -> Result<Vec<ResultSet>, SqlError> {
        let mut session = self.session();
        let outcome = self.execute(&mut session, sql, &[]);
        if let Some(error) = outcome.error {
            return Err(error);
        }
        Ok(outcome.outputs.into_iter().filter_map(|output| if let Output::Rows(set) = output { Some(set) } else { None }).collect())
    }

    /// Runs the capture job once (it also runs before every statement).
    pub fn run_capture(&self) {
        self.engine.with_db(Database::run_capture);
    }

    /// Ground truth: a table's current rows in key order.
    pub fn table_rows(&self, schema: &str, table: &str) -> Option<Vec<Vec<Value>>> {
        self.engine.with_db(|db| db.table(Some(schema), table).map(|t| t.rows.values().cloned().collect()))
    }

    /// Ground truth: every change row a capture instance holds, in (start_lsn, seqval,
    /// operation) order.
    pub fn changes(&self, capture_instance: &str) -> Vec<TruthChange> {
        self.engine.with_db(|db| {
            db.run_capture();
            db.cdc
                .instance(capture_instance)
                .map(|ci| {
                    ci.rows
                        .iter()
                        .map(|((start_lsn, seqval, operation), row)| TruthChange {
                            start_lsn: *start_lsn,
                            seqval: *seqval,
                            operation: *operation,
                            command_id: row.command_id,
                            values: row.values.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// How many change rows a capture instance holds (0 when there is no such instance),
    /// after a capture run: [`Simulator::changes`]' length without copying them.
    pub fn change_count(&self, capture_instance: &str) -> usize {
        self.engine.with_db(|db| {
            db.run_capture();
            db.cdc.instance(capture_instance).map_or(0, |ci| ci.rows.len())
        })
    }

    /// Runs the capture job every `interval` on a background thread (for a served simulator,
    /// whose quiet periods still need idle entries and lagged harvests).
    pub fn spawn_jobs(&self, interval: Duration) -> std::thread::JoinHandle<()> {
        let engine = Arc::downgrade(&self.engine);
        std::thread::spawn(move || {
            while let Some(engine) = engine.upgrade() {
                engine.with_db(Database::run_capture);
                drop(engine);
                std::thread::sleep(interval);
            }
        })
    }
}

/// The in-process [`workload::SqlClient`]: a session on a simulator.
pub struct LocalClient {
    sim: Simulator,
    session: Session,
}

impl LocalClient {
    /// A client with a new session.
    pub fn new(sim: &Simulator) -> Self {
        Self { sim: sim.clone(), session: sim.session() }
    }
}

impl workload::SqlClient for LocalClient {
    fn execute(&mut self, sql: &str, params: &[(String, Value)]) -> Result<u64, SqlError> {
        let outcome = self.sim.execute(&mut self.session, sql, params);
        if let Some(error) = outcome.error {
            return Err(error);
        }
        if outcome.disconnect {
            return Err(SqlError::new(10054, 20, "The connection was dropped."));
        }
        Ok(outcome.outputs.iter().map(|o| if let Output::Count(n) = o { *n } else { 0 }).sum())
    }
}
