//! Planning ahead: while one batch's change rows stream over the stream's connection, the next
//! batch's commits are planned on a second connection, so the change-row reads follow one
//! another without waiting for the per-batch metadata queries (`cdc.ddl_history` and the
//! `cdc.lsn_time_mapping` plan of up to `max_commits_per_batch` commits, after a state query).
//!
//! - A plan is made ahead when a batch is cut by `max_commits_per_batch` (more commits wait on
//!   the server), no capture-instance switch is due and no snapshot is open. The second
//!   connection is opened for it, kept while it is used, and closed after [`IDLE`] unused,
//!   after a fault of the stream's connection, while a snapshot reads, and when planning
//!   ahead fails (which also turns it off for [`PAUSE`], with a warning).
//! - A plan made ahead is used only by the batch that starts at the LSN it was planned from,
//!   and only when nothing else bounds that batch: no capture-instance switch, no open
//!   snapshot, and no DDL or purged changes up to the maximum LSN the plan read (with any, the
//!   plan is refused). Otherwise, and whenever planning ahead failed or overran [`WAIT`], the
//!   batch plans on the stream's connection as before.
//! - A batch planned ahead ends no later than the maximum LSN read on the second connection,
//!   which may be older than the one the stream's connection read last: the next batch goes on
//!   from there. The data-loss check after the rows still reads the state on the stream's
//!   connection.

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::connection::{Connector, TdsClient};
use crate::error::SourceError;
use crate::reader::{self, Commit, ServerState};
use mssql_cdc_types::lsn::Lsn;

/// A batch planned ahead: the commits after `from`, up to `state.max_lsn`, at most the limit
/// plus one (like [`reader::plan`]).
pub(super) struct Ahead {
    /// The server state read on the second connection before the plan.
    pub state: ServerState,
    pub commits: Vec<Commit>,
}

/// What a planning task hands back: the connection, unless it failed, and the plan.
type Planned = (Option<TdsClient>, Result<Option<Ahead>, SourceError>);

/// How long a batch waits for its plan made ahead before it plans on the stream's connection
/// instead.
const WAIT: Duration = Duration::from_secs(2);
/// How long planning ahead stays off after it failed or overran [`WAIT`].
const PAUSE: Duration = Duration::from_secs(60);
/// How long the second connection stays open unused (a stream near the server's newest commit
/// cuts a batch now and then; it does not log in again each time).
const IDLE: Duration = Duration::from_secs(60);

/// The second connection and the plan being made on it.
#[derive(Default)]
pub(super) struct Lookahead {
    /// Kept between plans; `None` while a plan runs, before the first and after a failure.
    conn: Option<TdsClient>,
    /// The plan being made, with the LSN it starts after.
    running: Option<(Lsn, JoinHandle<Planned>)>,
    /// When a plan was last started.
    last_used: Option<Instant>,
    /// Planning ahead is off until then (after a failure).
    paused_until: Option<Instant>,
}

impl Lookahead {
    /// Starts planning the batch after `from` (at most `limit` commits, plus one to learn
    /// whether more wait) on the second connection, opening it first when needed; not while
    /// planning ahead is paused. A plan still being made is dropped.
    pub fn start(&mut self, connector: &Connector, instance: &str, from: Lsn, limit: u64) {
        self.discard();
        if self.paused_until.is_some_and(|until| Instant::now() < until) {
            return;
        }
        self.last_used = Some(Instant::now());
        let (conn, connector, instance) = (self.conn.take(), connector.clone(), instance.to_owned());
        let task = tokio::spawn(async move {
            let mut conn = match conn {
                Some(conn) => conn,
                None => match connector.connect().await {
                    Ok(conn) => conn,
                    Err(error) => return (None, Err(error)),
                },
            };
            let result = plan_after(&mut conn, &connector, &instance, from, limit).await;
            (result.is_ok().then_some(conn), result)
        });
        self.running = Some((from, task));
    }

    /// The plan made ahead for the batch after `from`: `None` when none was started there, when
    /// something bounds the range (DDL, purged changes) or there was nothing to plan, or when
    /// planning failed or took longer than [`WAIT`] (planning ahead then pauses for
    /// [`PAUSE`], with a warning; the batch plans on the stream's connection, which reports
    /// any fault of the server itself).
    pub async fn take(&mut self, from: Lsn) -> Option<Ahead> {
        let (planned_from, mut task) = self.running.take()?;
        let outcome = tokio::time::timeout(WAIT, &mut task).await;
        let (conn, result) = match outcome {
            Ok(Ok(done)) => done,
            Ok(Err(ended)) => {
                self.pause(&format!("the planning task ended: {ended}"));
                return None;
            }
            Err(_) => {
                task.abort();
                self.pause(&format!("took longer than {} s", WAIT.as_secs()));
                return None;
            }
        };
        self.conn = conn;
        match result {
            Ok(ahead) => ahead.filter(|_| planned_from == from),
            Err(error) => {
                self.pause(&error.to_string());
                None
            }
        }
    }

    /// Turns planning ahead off for [`PAUSE`] and closes the second connection.
    fn pause(&mut self, why: &str) {
        self.close();
        self.paused_until = Some(Instant::now() + PAUSE);
        tracing::warn!(error = %why, pause_seconds = PAUSE.as_secs(), "planning the next batch on a second connection failed; batches are planned on the stream's connection meanwhile");
    }

    /// A batch that starts no plan: drops any plan being made, and closes the second
    /// connection once it has gone unused for [`IDLE`].
    pub fn idle(&mut self) {
        self.discard();
        if self.last_used.is_none_or(|used| used.elapsed() >= IDLE) {
            self.conn = None;
        }
    }

    /// Drops the plan being made, if any (its task is aborted, with the connection it holds).
    pub fn discard(&mut self) {
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
    }

    /// Drops the plan being made and closes the second connection (a fault of the stream's
    /// connection, a snapshot).
    pub fn close(&mut self) {
        self.discard();
        self.conn = None;
    }
}

impl Drop for Lookahead {
    fn drop(&mut self) {
        self.discard();
    }
}

/// The batch after `from`, planned like [`super::Stream::batch`] plans one whose range nothing
/// bounds: the server state, then the DDL up to its maximum LSN (any: `None`, the batch plans
/// itself), then the commits up to that LSN.
async fn plan_after(conn: &mut TdsClient, connector: &Connector, instance: &str, from: Lsn, limit: u64) -> Result<Option<Ahead>, SourceError> {
    let state = reader::server_state(conn, connector, instance).await?;
    if state.max_lsn <= from || state.min_lsn > from.increment() {
        return Ok(None);
    }
    if !reader::ddl_history(conn, connector, instance, from, state.max_lsn).await?.is_empty() {
        return Ok(None);
    }
    let commits = reader::plan(conn, connector, from, state.max_lsn, Some(limit)).await?;
    Ok(Some(Ahead { state, commits }))
}
