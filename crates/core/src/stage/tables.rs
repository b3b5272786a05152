//! [`run_tables`]: one stage, many tables, each table run and retried on its own, so that one
//! table's fatal error stops that table only.
//!
//! A multi-table stage (a source file with table patterns, a sink file with templates) says
//! which tables it runs through [`Tables`]; the runner starts each under
//! [`retry_until_stopped`] with its own progress and retry budget, shows each in the
//! connector's [`TableBoard`], starts one again when the board asks, and looks for new tables
//! every [`Tables::interval`]. The stage itself stops with an error only when every table it
//! runs has stopped with one (so a one-table stage stops as it always did).

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::board::TableBoard;
use super::retry::RetryConfig;
use super::supervisor::retry_until_stopped;
use super::{Progress, Stage, StageError};
use crate::telemetry::events::{TableFailed, TableStarted, TablesDiscoveryFailed};

/// Builds a fresh run of one table, reporting to the given progress.
pub type BuildTable = Arc<dyn Fn(&Progress) -> Result<Box<dyn Stage>, StageError> + Send + Sync>;

/// One table a stage runs.
pub struct TableRun {
    /// Its name on the board: `schema.table`, or the capture instance a file lists.
    pub table: String,
    /// How a run of it is built (again for every retry and restart).
    pub build: BuildTable,
}

/// The tables of a multi-table stage.
///
/// Implementors must:
/// - return from [`Tables::discover`] every table to run now, built from settings alone (the
///   runner starts those it does not run yet and leaves the others as they are: a table that
///   disappears is not stopped by discovery);
/// - return a transient error when the tables cannot be listed for now (a broker or server
///   unreachable): before any table runs it fails the stage, which is retried; later it is
///   logged and the next interval tries again.
pub trait Tables: Send {
    /// The tables to run now.
    fn discover(&mut self) -> BoxFuture<'_, Result<Vec<TableRun>, StageError>>;

    /// How often to discover again; `None`: the tables are those of the first discovery.
    fn interval(&self) -> Option<Duration>;
}

/// A fixed list of tables (no discovery).
pub struct Fixed(pub Vec<TableRun>);

impl Tables for Fixed {
    fn discover(&mut self) -> BoxFuture<'_, Result<Vec<TableRun>, StageError>> {
        Box::pin(async move { Ok(std::mem::take(&mut self.0)) })
    }

    fn interval(&self) -> Option<Duration> {
        None
    }
}

struct Member {
    build: BuildTable,
    cancel: CancellationToken,
    /// Bumped by every start: a run that ends after a restart reports nothing.
    epoch: u64,
    running: bool,
    /// Start again once the current run has ended (a restart of a running table).
    restart: bool,
    failed: bool,
}

type Ended = (String, u64, Result<(), StageError>);

/// Runs the tables `tables` names until `cancel` fires (then `Ok`), or every table has stopped
/// with an error (then the last one's error).
pub async fn run_tables(connector: &str, retry: &RetryConfig, board: &TableBoard, mut tables: impl Tables, cancel: CancellationToken) -> Result<(), StageError> {
    let mut restarts = board.open();
    let mut runner = Runner { connector, retry, board, cancel: &cancel, members: BTreeMap::new(), tasks: JoinSet::new(), last_error: None };
    let outcome = async {
        runner.add(tables.discover().await?);
        if runner.members.is_empty() {
            tracing::warn!(connector, "no table to run yet");
        }
        let interval = tables.interval();
        let mut next_look = interval.map(|every| tokio::time::Instant::now() + every);
        loop {
            if let Some(error) = runner.all_failed() {
                return Err(error);
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                Some(ended) = runner.tasks.join_next(), if !runner.tasks.is_empty() => {
                    if let Ok(ended) = ended {
                        runner.ended(ended);
                    }
                }
                Some(table) = restarts.recv() => runner.restart(&table),
                _ = sleep_until(next_look) => {
                    match tables.discover().await {
                        Ok(found) => runner.add(found),
                        Err(error) => TablesDiscoveryFailed { connector, error: &error }.emit(),
                    }
                    next_look = interval.map(|every| tokio::time::Instant::now() + every);
                }
            }
        }
    }
    .await;
    board.close();
    cancel.cancel();
    while runner.tasks.join_next().await.is_some() {}
    outcome
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

struct Runner<'a> {
    connector: &'a str,
    retry: &'a RetryConfig,
    board: &'a TableBoard,
    cancel: &'a CancellationToken,
    members: BTreeMap<String, Member>,
    tasks: JoinSet<Ended>,
    last_error: Option<StageError>,
}

impl Runner<'_> {
    /// Starts the tables not run yet.
    fn add(&mut self, found: Vec<TableRun>) {
        for TableRun { table, build } in found {
            if self.members.contains_key(&table) {
                continue;
            }
            let member = Member { build, cancel: CancellationToken::new(), epoch: 0, running: false, restart: false, failed: false };
            self.members.insert(table.clone(), member);
            self.start(&table);
        }
    }

    fn start(&mut self, table: &str) {
        let Some(member) = self.members.get_mut(table) else { return };
        member.epoch += 1;
        member.running = true;
        member.restart = false;
        member.failed = false;
        member.cancel = self.cancel.child_token();
        let (build, cancel, epoch) = (member.build.clone(), member.cancel.clone(), member.epoch);
        let (connector, retry, name) = (self.connector.to_owned(), self.retry.clone(), table.to_owned());
        self.board.running(table);
        TableStarted { connector: self.connector, table }.emit();
        self.tasks.spawn(async move {
            let progress = Progress::default();
            let run = retry_until_stopped(&connector, &retry, &progress, || build(&progress), &cancel);
            // A panic in one table's run is that table's failure.
            let result = match AssertUnwindSafe(run).catch_unwind().await {
                Ok(result) => result,
                Err(_) => Err(StageError::new(&connector, format!("table `{name}`: its run panicked"))),
            };
            (name, epoch, result)
        });
    }

    fn ended(&mut self, (table, epoch, result): Ended) {
        let Some(member) = self.members.get_mut(&table).filter(|m| m.epoch == epoch) else { return };
        member.running = false;
        if member.restart {
            self.start(&table);
            return;
        }
        match result {
            Err(error) if !self.cancel.is_cancelled() => {
                member.failed = true;
                self.board.failed(&table, &error);
                TableFailed { connector: self.connector, table: &table, error: &error }.emit();
                self.last_error = Some(error);
            }
            _ => {}
        }
    }

    fn restart(&mut self, table: &str) {
        let Some(member) = self.members.get_mut(table) else { return };
        tracing::info!(connector = %self.connector, table, running = member.running, "table restart asked for");
        if member.running {
            member.restart = true;
            member.cancel.cancel();
        } else {
            self.start(table);
        }
    }

    /// The last error, once every table has stopped with one.
    fn all_failed(&mut self) -> Option<StageError> {
        let all = !self.members.is_empty() && self.members.values().all(|m| m.failed && !m.running);
        if all { self.last_error.take() } else { None }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::stage::board::TableState;

    /// A table that fails fatally on its first `failures` runs, then runs until cancelled.
    struct Table {
        runs: Arc<AtomicU32>,
        failures: u32,
    }

    impl Stage for Table {
        fn run(self: Box<Self>, cancel: CancellationToken) -> BoxFuture<'static, Result<(), StageError>> {
            Box::pin(async move {
                if self.runs.fetch_add(1, Ordering::SeqCst) < self.failures {
                    return Err(StageError::new("c", "planted: bad key"));
                }
                cancel.cancelled().await;
                Ok(())
            })
        }
    }

    fn table(name: &str, failures: u32) -> (TableRun, Arc<AtomicU32>) {
        let runs = Arc::new(AtomicU32::new(0));
        let counter = runs.clone();
        let build: BuildTable = Arc::new(move |_| Ok(Box::new(Table { runs: counter.clone(), failures }) as Box<dyn Stage>));
        (TableRun { table: name.to_owned(), build }, runs)
    }

    async fn until(board: &TableBoard, what: impl Fn(&[crate::stage::board::TableStatus]) -> bool) {
        for _ in 0..500 {
            if what(&board.statuses()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never reached: {:?}", board.statuses());
    }

    fn retry() -> RetryConfig {
        RetryConfig { initial_backoff_ms: 1, max_backoff_ms: 2, budget_ms: 50 }
    }

    /// Invariant: one table's fatal error stops that table only; a restart of it runs it again
    /// and leaves the others' runs alone.
    #[tokio::test]
    async fn a_failed_table_stops_alone_and_restarts_alone() {
        let (good, good_runs) = table("dbo.good", 0);
        let (bad, bad_runs) = table("dbo.bad", 1);
        let (board, cancel) = (TableBoard::default(), CancellationToken::new());
        let stage = tokio::spawn({
            let (board, cancel) = (board.clone(), cancel.clone());
            async move { run_tables("c", &retry(), &board, Fixed(vec![good, bad]), cancel).await }
        });
        until(&board, |s| s.iter().any(|t| t.table == "dbo.bad" && t.state == TableState::Failed)).await;
        let failed = board.statuses().into_iter().find(|t| t.table == "dbo.bad").unwrap();
        assert!(failed.trace.unwrap().contains("planted: bad key"));
        assert!(board.statuses().iter().any(|t| t.table == "dbo.good" && t.state == TableState::Running));
        assert!(!stage.is_finished(), "the stage runs on with one table failed");
        board.restart("DBO.BAD").unwrap();
        until(&board, |s| s.iter().all(|t| t.state == TableState::Running)).await;
        assert_eq!(bad_runs.load(Ordering::SeqCst), 2);
        assert_eq!(good_runs.load(Ordering::SeqCst), 1, "the good table was not started again");
        assert_eq!(board.restart("dbo.other"), Err(crate::stage::board::TableRestartError::UnknownTable("dbo.other".into())));
        cancel.cancel();
        assert!(stage.await.unwrap().is_ok());
        assert_eq!(board.restart("dbo.bad"), Err(crate::stage::board::TableRestartError::NotRunning));
    }

    /// Invariant: a stage whose every table failed stops with the error, as a one-table stage
    /// always did.
    #[tokio::test]
    async fn a_stage_stops_once_every_table_failed() {
        let (only, _) = table("dbo.only", u32::MAX);
        let board = TableBoard::default();
        let result = run_tables("c", &retry(), &board, Fixed(vec![only]), CancellationToken::new()).await;
        assert!(result.unwrap_err().to_string().contains("planted: bad key"));
    }
}
