//! Isolation levels through TDS, as SQL Server keeps them: READ COMMITTED never sees another
//! transaction's uncommitted rows (it waits for them, or reads versions with
//! READ_COMMITTED_SNAPSHOT), SNAPSHOT sees the database as of its first read and refuses to
//! overwrite a later change (3960), READ UNCOMMITTED and NOLOCK read dirty, and waits end in
//! 1222 at LOCK_TIMEOUT or 1205 for a deadlock's victim.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use mssql_cdc_sim::client::{connect, TdsClient};
use support::SimServer;

async fn exec(client: &mut TdsClient, sql: &str) {
    client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).into_results().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// The SQL Server error number a batch fails with.
async fn fails(client: &mut TdsClient, sql: &str) -> u32 {
    let result = match client.simple_query(sql).await {
        Ok(stream) => stream.into_results().await.map(|_| ()),
        Err(error) => Err(error),
    };
    match result {
        Err(tiberius::error::Error::Server(token)) => token.code(),
        other => panic!("{sql}: expected a server error, got {other:?}"),
    }
}

/// `(id, status)` rows of a query, in order.
async fn rows(client: &mut TdsClient, sql: &str) -> Vec<(i32, String)> {
    let rows = client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).into_first_result().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.iter().map(|row| (row.get::<i32, _>(0).unwrap(), row.get::<&str, _>(1).unwrap_or("").to_owned())).collect()
}

fn seen(pairs: &[(i32, &str)]) -> Vec<(i32, String)> {
    pairs.iter().map(|(id, status)| (*id, (*status).to_owned())).collect()
}

/// A served simulator with `dbo.t` holding (1, a), (2, b), (3, c), and two sessions.
async fn two_sessions() -> (SimServer, TdsClient, TdsClient) {
    let server = SimServer::start();
    let mut writer = connect(&server.client_config()).await.unwrap();
    let reader = connect(&server.client_config()).await.unwrap();
    exec(&mut writer, "CREATE TABLE dbo.t (id int NOT NULL PRIMARY KEY, status varchar(10) NOT NULL)").await;
    exec(&mut writer, "INSERT INTO dbo.t VALUES (1, 'a'), (2, 'b'), (3, 'c')").await;
    (server, writer, reader)
}

/// READ COMMITTED (the default) waits for a writer's locked rows and then sees only what it
/// committed; LOCK_TIMEOUT ends the wait with 1222. READ UNCOMMITTED and NOLOCK read dirty.
#[tokio::test(flavor = "multi_thread")]
async fn read_committed_waits_for_the_writer_and_never_reads_dirty() {
    let (server, mut writer, mut reader) = two_sessions().await;
    exec(&mut writer, "BEGIN TRANSACTION; UPDATE dbo.t SET status = 'dirty' WHERE id = 2; INSERT INTO dbo.t VALUES (4, 'new')").await;

    assert_eq!(fails(&mut reader, "SET LOCK_TIMEOUT 200; SELECT id, status FROM dbo.t").await, 1222);
    // A seek that stops before the locked rows does not wait.
    assert_eq!(rows(&mut reader, "SELECT TOP (1) id, status FROM dbo.t WHERE id >= 1 ORDER BY id").await, seen(&[(1, "a")]));
    let dirty = seen(&[(1, "a"), (2, "dirty"), (3, "c"), (4, "new")]);
    assert_eq!(rows(&mut reader, "SELECT id, status FROM dbo.t WITH (NOLOCK) ORDER BY id").await, dirty);
    assert_eq!(rows(&mut reader, "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED; SELECT id, status FROM dbo.t").await, dirty);

    // Without a timeout the reader waits until the writer rolls back, then reads the rows as
    // they were.
    let mut waiting = connect(&server.client_config()).await.unwrap();
    let started = Instant::now();
    let read = tokio::spawn(async move { rows(&mut waiting, "SELECT id, status FROM dbo.t ORDER BY id").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!read.is_finished(), "the reader waits while the rows are locked");
    exec(&mut writer, "ROLLBACK").await;
    assert_eq!(read.await.unwrap(), seen(&[(1, "a"), (2, "b"), (3, "c")]));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// SNAPSHOT isolation needs ALLOW_SNAPSHOT_ISOLATION (3952 without it). A SNAPSHOT transaction
/// sees the database as of its first read: not a concurrent transaction's uncommitted rows,
/// nor rows committed after that read, nor deletes committed after it.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_transaction_sees_the_database_as_of_its_first_read() {
    let (_server, mut writer, mut reader) = two_sessions().await;
    assert_eq!(fails(&mut reader, "SET TRANSACTION ISOLATION LEVEL SNAPSHOT; SELECT id, status FROM dbo.t").await, 3952);
    exec(&mut writer, "ALTER DATABASE CURRENT SET ALLOW_SNAPSHOT_ISOLATION ON").await;

    // The snapshot starts at the first read, not at BEGIN TRANSACTION.
    exec(&mut reader, "SET TRANSACTION ISOLATION LEVEL SNAPSHOT; BEGIN TRANSACTION").await;
    exec(&mut writer, "INSERT INTO dbo.t VALUES (5, 'before')").await;
    let original = seen(&[(1, "a"), (2, "b"), (3, "c"), (5, "before")]);
    assert_eq!(rows(&mut reader, "SELECT id, status FROM dbo.t ORDER BY id").await, original);

    // Uncommitted, then committed, changes stay invisible to the open snapshot; so does a
    // later delete.
    exec(&mut writer, "BEGIN TRANSACTION; UPDATE dbo.t SET status = 'later' WHERE id = 1; INSERT INTO dbo.t VALUES (4, 'later')").await;
    assert_eq!(rows(&mut reader, "SELECT id, status FROM dbo.t ORDER BY id").await, original, "no wait, no dirty row");
    exec(&mut writer, "COMMIT").await;
    exec(&mut writer, "DELETE FROM dbo.t WHERE id = 2").await;
    assert_eq!(rows(&mut reader, "SELECT id, status FROM dbo.t ORDER BY id").await, original, "later commits are invisible");
    assert_eq!(rows(&mut reader, "SELECT TOP (2) id, status FROM dbo.t WHERE id > 1 ORDER BY id").await, seen(&[(2, "b"), (3, "c")]));
    exec(&mut reader, "COMMIT").await;

    // A new transaction sees the newest committed state.
    exec(&mut reader, "BEGIN TRANSACTION").await;
    assert_eq!(rows(&mut reader, "SELECT id, status FROM dbo.t ORDER BY id").await, seen(&[(1, "later"), (3, "c"), (4, "later"), (5, "before")]));
    exec(&mut reader, "COMMIT").await;
}

/// A SNAPSHOT transaction that writes a row changed after its snapshot fails with 3960 and
/// loses its transaction, as SQL Server's update-conflict detection does.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_writer_cannot_overwrite_a_later_change() {
    let (_server, mut writer, mut reader) = two_sessions().await;
    exec(&mut writer, "ALTER DATABASE sales SET ALLOW_SNAPSHOT_ISOLATION ON").await;
    exec(&mut reader, "SET TRANSACTION ISOLATION LEVEL SNAPSHOT; BEGIN TRANSACTION").await;
    assert_eq!(rows(&mut reader, "SELECT id, status FROM dbo.t WHERE id = 1").await, seen(&[(1, "a")]));
    exec(&mut writer, "UPDATE dbo.t SET status = 'other' WHERE id = 1").await;
    // Row 3 was not changed since the snapshot: writing it is fine.
    exec(&mut reader, "UPDATE dbo.t SET status = 'mine' WHERE id = 3").await;
    assert_eq!(fails(&mut reader, "UPDATE dbo.t SET status = 'mine' WHERE id = 1").await, 3960);
    let open = reader.simple_query("SELECT @@TRANCOUNT").await.unwrap().into_row().await.unwrap().unwrap().get::<i32, _>(0);
    assert_eq!(open, Some(0), "the conflicting transaction is rolled back");
    assert_eq!(rows(&mut writer, "SELECT id, status FROM dbo.t ORDER BY id").await, seen(&[(1, "other"), (2, "b"), (3, "c")]));
}

/// Two transactions each waiting for the other's row: one is chosen as the deadlock victim
/// (1205, its transaction rolled back) and the other goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_cycle_of_waits_ends_with_one_deadlock_victim() {
    let (_server, mut first, mut second) = two_sessions().await;
    exec(&mut first, "BEGIN TRANSACTION; UPDATE dbo.t SET status = 'first' WHERE id = 1").await;
    exec(&mut second, "BEGIN TRANSACTION; UPDATE dbo.t SET status = 'second' WHERE id = 2").await;
    let waiting = tokio::spawn(async move {
        let result = first.simple_query("UPDATE dbo.t SET status = 'first' WHERE id = 2").await.map(|_| ());
        (first, result)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fails(&mut second, "UPDATE dbo.t SET status = 'second' WHERE id = 1").await, 1205);
    let (mut first, result) = waiting.await.unwrap();
    result.expect("the survivor's update goes on once the victim's locks are released");
    exec(&mut first, "COMMIT").await;
    assert_eq!(rows(&mut second, "SELECT id, status FROM dbo.t ORDER BY id").await, seen(&[(1, "first"), (2, "first"), (3, "c")]));
}

/// With READ_COMMITTED_SNAPSHOT ON, READ COMMITTED reads the last committed version instead
/// of waiting (Azure SQL Database's default).
#[tokio::test(flavor = "multi_thread")]
async fn read_committed_snapshot_reads_versions_without_waiting() {
    let (_server, mut writer, mut reader) = two_sessions().await;
    exec(&mut writer, "ALTER DATABASE CURRENT SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE").await;
    exec(&mut writer, "BEGIN TRANSACTION; DELETE FROM dbo.t WHERE id = 1; UPDATE dbo.t SET status = 'dirty' WHERE id = 3").await;
    assert_eq!(rows(&mut reader, "SET LOCK_TIMEOUT 0; SELECT id, status FROM dbo.t ORDER BY id").await, seen(&[(1, "a"), (2, "b"), (3, "c")]));
    exec(&mut writer, "COMMIT").await;
    assert_eq!(rows(&mut reader, "SELECT id, status FROM dbo.t ORDER BY id").await, seen(&[(2, "b"), (3, "dirty")]));
}
