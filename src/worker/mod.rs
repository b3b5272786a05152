//! The worker: the connectors one `mssql-cdc run` process runs, each its own supervised stage,
//! that can be paused, resumed, restarted, replaced and removed while the others go on; one
//! connector's failure leaves it `FAILED` (with its error) and the others running.
//!
//! The management API ([`api`]) drives it over HTTP with Kafka Connect's conventions; a
//! config directory ([`store`]) keeps the connectors added or changed through it.
//!
//! A stage is never started while an earlier run of the same connector is still stopping:
//! every (re)start first cancels that run and waits for it to end, so one connector never has
//! two writers of its checkpoint.

pub mod api;
pub mod store;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use mssql_cdc_core::config::{Document, Problem, WorkerConfig};
use mssql_cdc_core::stage::board::{TableBoard, TableRestartError, TableStatus};
use mssql_cdc_core::stage::{error_trace as trace, StopReason};
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::connectors::{registry, ConnectorConfig};

/// A connector's state, as Kafka Connect names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// Its stage runs (retrying transient faults within the worker's budget).
    Running,
    /// Stopped by a pause; a resume starts it again from its checkpoints.
    Paused,
    /// Its stage stopped with an error; a restart starts it again.
    Failed,
    /// Its stage stopped without an error (it was cancelled), or it has not started.
    Unassigned,
}

/// What the status of one connector says.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// The connector's name.
    pub name: String,
    /// Its kind.
    pub kind: &'static str,
    /// Its state.
    pub state: State,
    /// The error that stopped it (`FAILED`), with its causes, one per line.
    pub trace: Option<String>,
    /// Why it stopped (`FAILED`).
    pub reason: Option<StopReason>,
}

/// Why a request on the worker could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// No connector of that name.
    #[error("connector `{0}` not found")]
    NotFound(String),
    /// A connector file (or request body) with problems, each with its key path.
    #[error("{} problem(s) in the connector configuration", .0.len())]
    Invalid(Vec<Problem>),
    /// Adding, changing or removing a connector needs the config directory.
    #[error("this worker has no config directory (start `mssql-cdc run` with --config-dir) to keep connector changes in")]
    NoConfigDir,
    /// The config directory could not be written.
    #[error("config directory: {0}")]
    Store(#[from] store::StoreError),
    /// A table restart that cannot be carried out.
    #[error(transparent)]
    Table(TableRestartError),
}

struct Slot {
    config: ConnectorConfig,
    /// The connector file's text (shown redacted; kept for restarts).
    text: String,
    state: State,
    trace: Option<String>,
    reason: Option<StopReason>,
    /// The current run: cancelled to stop it; its handle is awaited before the next run.
    cancel: Option<CancellationToken>,
    handle: Option<JoinHandle<()>>,
    /// Bumped by every start and stop, so a run that ends late reports nothing.
    epoch: u64,
    /// The stage's tables (a multi-table stage's; empty for a one-table sink).
    tables: TableBoard,
}

/// The connectors of this process.
pub struct Worker {
    config: WorkerConfig,
    slots: Mutex<BTreeMap<String, Slot>>,
    root: CancellationToken,
    store: Option<store::ConfigDir>,
    changed: watch::Sender<u64>,
}

impl Worker {
    /// A worker with no connector yet; `store` keeps API changes; `root` stops everything.
    pub fn new(config: WorkerConfig, store: Option<store::ConfigDir>, root: CancellationToken) -> Arc<Self> {
        Arc::new(Self { config, slots: Mutex::new(BTreeMap::new()), root, store, changed: watch::channel(0).0 })
    }

    /// The worker's settings.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Whether API changes are kept (a config directory was given).
    pub fn keeps_changes(&self) -> bool {
        self.store.is_some()
    }

    /// Adds a connector and starts it (replacing one of the same name).
    pub async fn add(self: &Arc<Self>, config: ConnectorConfig, text: String) {
        let name = config.name.clone();
        self.stop_run(&name).await;
        {
            let mut slots = self.lock();
            let epoch = slots.get(&name).map_or(0, |s| s.epoch + 1);
            slots.insert(name.clone(), Slot { config, text, state: State::Unassigned, trace: None, reason: None, cancel: None, handle: None, epoch, tables: TableBoard::default() });
        }
        self.start(&name);
    }

    /// The connectors' names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Every connector's status.
    pub fn statuses(&self) -> Vec<Status> {
        self.lock().iter().map(|(name, slot)| status(name, slot)).collect()
    }

    /// One connector's status.
    pub fn status(&self, name: &str) -> Result<Status, WorkerError> {
        self.lock().get(name).map(|slot| status(name, slot)).ok_or_else(|| WorkerError::NotFound(name.to_owned()))
    }

    /// One connector's configuration as its kind's options, secrets redacted (an inline secret
    /// shows as `***`, a reference as its variable or file name).
    pub fn redacted_config(&self, name: &str) -> Result<serde_json::Value, WorkerError> {
        let (kind, text) = self.lock().get(name).map(|s| (s.config.kind, s.text.clone())).ok_or_else(|| WorkerError::NotFound(name.to_owned()))?;
        let document = Document::parse(name, &text).map_err(|e| WorkerError::Invalid(vec![Problem::new("", e.to_string(), "a TOML connector file")]))?;
        let mut shown = registry::find(kind).and_then(|entry| (entry.redacted)(&document.without(&["name", "kind"]))).unwrap_or_default();
        if let Some(table) = shown.as_object_mut() {
            table.insert("name".into(), name.into());
            table.insert("kind".into(), kind.into());
        }
        Ok(shown)
    }

    /// Stops a running connector until [`Worker::resume`].
    pub fn pause(&self, name: &str) -> Result<(), WorkerError> {
        let mut slots = self.lock();
        let slot = slots.get_mut(name).ok_or_else(|| WorkerError::NotFound(name.to_owned()))?;
        if let Some(cancel) = slot.cancel.take() {
            cancel.cancel();
        }
        slot.epoch += 1;
        slot.state = State::Paused;
        drop(slots);
        self.notify();
        tracing::info!(connector = %name, "paused");
        Ok(())
    }

    /// Starts a paused connector again (a running one is left as it is).
    pub async fn resume(self: &Arc<Self>, name: &str) -> Result<(), WorkerError> {
        if self.status(name)?.state == State::Running {
            return Ok(());
        }
        self.restart(name).await
    }

    /// Stops the connector's current run, if any, and starts it again from its checkpoints.
    pub async fn restart(self: &Arc<Self>, name: &str) -> Result<(), WorkerError> {
        self.status(name)?;
        self.stop_run(name).await;
        self.start(name);
        Ok(())
    }

    /// The tables of a connector's stage, each with its state.
    pub fn tables(&self, name: &str) -> Result<Vec<TableStatus>, WorkerError> {
        self.lock().get(name).map(|slot| slot.tables.statuses()).ok_or_else(|| WorkerError::NotFound(name.to_owned()))
    }

    /// Starts one table of a running connector again (by `schema.table`, or its index in
    /// [`Worker::tables`]), leaving its other tables alone.
    pub fn restart_table(&self, name: &str, table: &str) -> Result<(), WorkerError> {
        let board = self.lock().get(name).map(|slot| slot.tables.clone()).ok_or_else(|| WorkerError::NotFound(name.to_owned()))?;
        let table = match table.parse::<usize>() {
            Ok(index) => board.statuses().get(index).map(|status| status.table.clone()).ok_or_else(|| WorkerError::Table(TableRestartError::UnknownTable(table.to_owned())))?,
            Err(_) => table.to_owned(),
        };
        board.restart(&table).map_err(WorkerError::Table)?;
        tracing::info!(connector = %name, table = %table, "table restart asked for");
        Ok(())
    }

    /// Validates a configuration (JSON, as a connector file's keys; `name` may be left out)
    /// and, when it has no problem, keeps it in the config directory and (re)starts the
    /// connector with it. `true` when the connector is new.
    pub async fn put_config(self: &Arc<Self>, name: &str, body: serde_json::Value) -> Result<bool, WorkerError> {
        let text = store::connector_text(name, body).map_err(|problem| WorkerError::Invalid(vec![problem]))?;
        let document = Document::parse(name, &text).map_err(|e| WorkerError::Invalid(vec![Problem::new("", e.to_string(), "a connector configuration")]))?;
        let config = ConnectorConfig::from_document(document).map_err(WorkerError::Invalid)?;
        if config.name != name {
            return Err(WorkerError::Invalid(vec![Problem::new("name", format!("`{}` differs from the connector in the path", config.name), format!("\"{name}\" or no name"))]));
        }
        let store = self.store.as_ref().ok_or(WorkerError::NoConfigDir)?;
        store.write(name, &text)?;
        let created = !self.lock().contains_key(name);
        tracing::info!(connector = %name, created, "configuration stored; (re)starting");
        self.add(config, text).await;
        Ok(created)
    }

    /// Stops a connector and forgets it (and its file in the config directory).
    pub async fn delete(self: &Arc<Self>, name: &str) -> Result<(), WorkerError> {
        self.status(name)?;
        let store = self.store.as_ref().ok_or(WorkerError::NoConfigDir)?;
        self.stop_run(name).await;
        self.lock().remove(name);
        store.remove(name)?;
        self.notify();
        tracing::info!(connector = %name, "deleted");
        Ok(())
    }

    /// Waits until no connector runs or is paused (all failed or stopped), or `root` fires.
    pub async fn idle(&self) {
        let mut changed = self.changed.subscribe();
        loop {
            let busy = self.lock().values().any(|s| matches!(s.state, State::Running | State::Paused));
            if !busy || self.root.is_cancelled() {
                return;
            }
            tokio::select! {
                _ = changed.changed() => {}
                _ = self.root.cancelled() => return,
            }
        }
    }

    /// Cancels every connector and waits for their runs to end.
    pub async fn shutdown(&self) {
        self.root.cancel();
        let handles: Vec<JoinHandle<()>> = self.lock().values_mut().filter_map(|slot| slot.handle.take()).collect();
        for handle in handles {
            let _ = handle.await;
        }
    }

    /// Starts a run of `name` (its earlier run already stopped).
    fn start(self: &Arc<Self>, name: &str) {
        let mut slots = self.lock();
        let Some(slot) = slots.get_mut(name) else { return };
        slot.epoch += 1;
        let epoch = slot.epoch;
        let cancel = self.root.child_token();
        match slot.config.clone().supervised_with(&self.config, cancel.clone(), slot.tables.clone()) {
            Ok(stage) => {
                slot.state = State::Running;
                slot.trace = None;
                slot.reason = None;
                slot.cancel = Some(cancel);
                let (worker, name) = (self.clone(), name.to_owned());
                slot.handle = Some(tokio::spawn(async move {
                    // A panic ends the stage's own task; it is reported as its failure.
                    let result = match tokio::spawn(stage).await {
                        Ok(result) => result.map_err(|error| (trace(&error), error.reason())),
                        Err(joined) => Err((format!("the stage panicked: {joined}"), StopReason::Failed)),
                    };
                    worker.finished(&name, epoch, result);
                }));
                tracing::info!(connector = %slot.config.name, "starting");
            }
            Err(error) => {
                slot.state = State::Failed;
                slot.trace = Some(trace(&error));
                slot.reason = Some(error.reason());
            }
        }
        drop(slots);
        self.notify();
    }

    /// Cancels the current run of `name` and waits for it to end.
    async fn stop_run(&self, name: &str) {
        let handle = {
            let mut slots = self.lock();
            let Some(slot) = slots.get_mut(name) else { return };
            slot.epoch += 1;
            if let Some(cancel) = slot.cancel.take() {
                cancel.cancel();
            }
            slot.handle.take()
        };
        if let Some(handle) = handle {
            let _ = handle.await;
        }
    }

    fn finished(&self, name: &str, epoch: u64, result: Result<(), (String, StopReason)>) {
        let mut slots = self.lock();
        let Some(slot) = slots.get_mut(name).filter(|slot| slot.epoch == epoch) else { return };
        slot.cancel = None;
        match result {
            Ok(()) => slot.state = State::Unassigned,
            Err((trace, reason)) => {
                slot.state = State::Failed;
                slot.trace = Some(trace);
                slot.reason = Some(reason);
            }
        }
        drop(slots);
        self.notify();
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn status(name: &str, slot: &Slot) -> Status {
    Status { name: name.to_owned(), kind: slot.config.kind, state: slot.state, trace: slot.trace.clone(), reason: slot.reason }
}

