//! [`TableBoard`]: where a multi-table stage shows each table's state, and where a restart of
//! one table is asked for (the management API's task endpoints).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use tokio::sync::mpsc;

use super::{error_trace, StageError, StopReason};

/// A table's state, as Kafka Connect names a task's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TableState {
    /// Its stream runs (retrying transient faults within the worker's budget).
    Running,
    /// Its stream stopped with an error; the stage's other tables go on.
    Failed,
}

/// One table's status.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TableStatus {
    /// The table, `schema.table` (or the capture instance a source file lists by name).
    pub table: String,
    /// Its state.
    pub state: TableState,
    /// The error that stopped it (`FAILED`), with its causes, one per line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Why it stopped (`FAILED`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<StopReason>,
}

/// Why a table restart was not asked for.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableRestartError {
    /// The stage runs no table of that name.
    #[error("table `{0}` is not one this connector runs")]
    UnknownTable(String),
    /// The stage is not running (stopped, failed or paused as a whole).
    #[error("the connector is not running; restart the connector instead")]
    NotRunning,
}

#[derive(Debug, Default)]
struct Board {
    tables: BTreeMap<String, TableStatus>,
    /// The running stage's restart requests; `None` while no stage runs.
    restarts: Option<mpsc::UnboundedSender<String>>,
}

/// The tables of one connector's stage. Cloned into the stage's context; it outlives each run
/// of the stage, and each run starts it afresh.
#[derive(Clone, Debug, Default)]
pub struct TableBoard(Arc<Mutex<Board>>);

impl TableBoard {
    /// Every table's status, by name.
    pub fn statuses(&self) -> Vec<TableStatus> {
        self.lock().tables.values().cloned().collect()
    }

    /// Asks the running stage to start `table` again (named ignoring case): a failed table
    /// resumes from its checkpoints, a running one is stopped first. The other tables are left
    /// alone.
    pub fn restart(&self, table: &str) -> Result<(), TableRestartError> {
        let board = self.lock();
        let name = board.tables.keys().find(|name| name.as_str() == table).or_else(|| board.tables.keys().find(|name| name.eq_ignore_ascii_case(table)));
        let name = name.cloned().ok_or_else(|| TableRestartError::UnknownTable(table.to_owned()))?;
        let sender = board.restarts.as_ref().ok_or(TableRestartError::NotRunning)?;
        sender.send(name).map_err(|_| TableRestartError::NotRunning)
    }

    /// A run of the stage begins: no table yet, restart requests to the returned receiver.
    pub(super) fn open(&self) -> mpsc::UnboundedReceiver<String> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let mut board = self.lock();
        board.tables.clear();
        board.restarts = Some(sender);
        receiver
    }

    /// The run ended: no more restart requests (the statuses stay, for the operator).
    pub(super) fn close(&self) {
        self.lock().restarts = None;
    }

    pub(super) fn running(&self, table: &str) {
        self.lock().tables.insert(table.to_owned(), TableStatus { table: table.to_owned(), state: TableState::Running, trace: None, reason: None });
    }

    pub(super) fn failed(&self, table: &str, error: &StageError) {
        let status = TableStatus { table: table.to_owned(), state: TableState::Failed, trace: Some(error_trace(error)), reason: Some(error.reason()) };
        self.lock().tables.insert(table.to_owned(), status);
    }

    fn lock(&self) -> MutexGuard<'_, Board> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
