//! Planning ahead: while one batch's change rows stream over the stream's connection, the next
//! batch's commits are planned on a second connection, so the change-row reads follow one
//! another without waiting for the per-batch metadata queries (the server state,
//! `cdc.ddl_history` and the `cdc.lsn_time_mapping` plan of up to `max_commits_per_batch`
//! commits).
//!
//! - The second connection is opened when a batch is cut by `max_commits_per_batch` (more
//!   commits wait on the server) and closed once the stream catches up, after a fault of the
//!   stream's connection, or when planning ahead fails.
//! - A plan made ahead is used only by the batch that starts at the LSN it was planned from,
//!   and only when nothing else bounds that batch: no capture-instance switch, no DDL up to the
//!   maximum LSN the plan read, no purged changes. Otherwise, and whenever planning ahead
//!   failed, the batch plans on the stream's connection as before; the plan made ahead is
//!   dropped.
//! - The plan ends at the maximum LSN read on the second connection, which is never newer than
//!   the state read after the previous batch's rows: a batch planned ahead may stop a little
//!   short of the server's newest commit, and the next batch goes on from there. The data-loss
//!   check after the rows still reads the state on the stream's connection.

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

/// The second connection and the plan being made on it.
#[derive(Default)]
pub(super) struct Lookahead {
    /// Kept between plans; `None` while a plan runs, before the first and after a failure.
    conn: Option<TdsClient>,
    /// The plan being made, with the LSN it starts after.
    running: Option<(Lsn, JoinHandle<Planned>)>,
}

impl Lookahead {
    /// Starts planning the batch after `from` (at most `limit` commits, plus one to learn
    /// whether more wait) on the second connection, opening it first when needed. A plan
    /// still being made is dropped.
    pub fn start(&mut self, connector: &Connector, instance: &str, from: Lsn, limit: u64) {
        self.discard();
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
    /// something bounds the range (DDL) or there was nothing to plan, or when planning failed
    /// (the batch then plans on the stream's connection, which reports any fault itself).
    pub async fn take(&mut self, from: Lsn) -> Option<Ahead> {
        let (planned_from, task) = self.running.take()?;
        let (conn, result) = task.await.ok()?;
        self.conn = conn;
        match result {
            Ok(ahead) => ahead.filter(|_| planned_from == from),
            Err(error) => {
                tracing::debug!(error = %error, from = %planned_from, "planning the next batch ahead failed; it is planned on the stream's connection");
                None
            }
        }
    }

    /// Drops the plan being made, if any (its task is aborted, with the connection it holds).
    pub fn discard(&mut self) {
        if let Some((_, task)) = self.running.take() {
            task.abort();
        }
    }

    /// Drops the plan being made and closes the second connection.
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
