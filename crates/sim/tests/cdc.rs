//! The simulator behaves as SQL Server's CDC is documented. Each test names the Microsoft
//! Learn page (under learn.microsoft.com/en-us/sql/) it follows.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use chrono::{TimeZone, Utc};
use mssql_cdc_sim::workload::{Workload, WorkloadOptions, ORDERS_CDC, ORDERS_DDL};
use mssql_cdc_sim::{LocalClient, ServerZone, SimConfig, Value};
use support::{lsn_hex, Sim};

fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or_else(|| panic!("not an integer: {value:?}"))
}

/// relational-databases/system-tables/cdc-capture-instance-ct-transact-sql: an UPDATE is
/// captured as two rows, operation 3 (before) and 4 (after), at one `__$start_lsn`.
#[test]
fn an_update_yields_operations_3_and_4_at_one_start_lsn() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, 'new', 10.00)");
    s.exec("UPDATE dbo.orders SET status = 'paid' WHERE id = 1");
    let rows = s.query("SELECT __$start_lsn, __$seqval, __$operation, status, __$update_mask FROM cdc.dbo_orders_CT ORDER BY __$start_lsn, __$seqval, __$operation").rows;
    assert_eq!(rows.iter().map(|r| int(&r[2])).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(lsn_hex(&rows[1][0]), lsn_hex(&rows[2][0]), "3 and 4 share the commit LSN");
    assert_eq!(lsn_hex(&rows[1][1]), lsn_hex(&rows[2][1]), "3 and 4 share the seqval");
    assert_eq!((rows[1][3].clone(), rows[2][3].clone()), (Value::Text("new".into()), Value::Text("paid".into())));
    // Only `status` (ordinal 2) changed: the update mask has that bit alone.
    assert_eq!(rows[2][4], Value::Binary(vec![0b010]));
    assert_eq!(rows[0][4], Value::Binary(vec![0b111]));
}

/// relational-databases/system-tables/cdc-capture-instance-ct-transact-sql: all changes of a
/// transaction share its commit LSN; `__$command_id` orders its statements (one number for
/// every row a statement changes) and `__$seqval` the rows within one.
#[test]
fn a_multi_statement_transaction_shares_one_commit_lsn() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("BEGIN TRAN; INSERT INTO dbo.orders VALUES (1, 'a', 1), (2, 'b', 2); UPDATE dbo.orders SET amount = 5 WHERE id = 2; DELETE FROM dbo.orders WHERE id = 1; COMMIT");
    let rows = s.query("SELECT __$start_lsn, __$seqval, __$command_id, __$operation FROM cdc.dbo_orders_CT ORDER BY __$seqval, __$operation").rows;
    assert_eq!(rows.len(), 5);
    assert!(rows.iter().all(|r| lsn_hex(&r[0]) == lsn_hex(&rows[0][0])));
    let seqvals: Vec<String> = rows.iter().map(|r| lsn_hex(&r[1])).collect();
    assert!(seqvals.windows(2).all(|w| w[0] <= w[1]));
    let commands: Vec<i64> = rows.iter().map(|r| int(&r[2])).collect();
    assert_eq!(commands, vec![1, 1, 2, 2, 3], "the two-row INSERT is statement 1, the UPDATE 2, the DELETE 3");
    // One lsn_time_mapping row for the transaction.
    let mapped = s.query("SELECT COUNT(*) FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00").rows;
    assert_eq!(int(&mapped[0][0]), 1);
    // A rolled-back transaction leaves nothing.
    s.exec("BEGIN TRAN; INSERT INTO dbo.orders VALUES (9, 'x', 1); ROLLBACK");
    assert_eq!(int(&s.scalar("SELECT COUNT_BIG(*) FROM cdc.dbo_orders_CT")), 5);
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM dbo.orders WHERE id = 9")), 0);
}

/// Observed behaviour (Microsoft Q&A, "identify one update operation" thread): an update of
/// the row-identifier key is captured as a delete (1) and an insert (2).
#[test]
fn a_key_update_is_captured_as_delete_and_insert() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, 'a', 1)");
    s.exec("UPDATE dbo.orders SET id = 7 WHERE id = 1");
    let rows = s.query("SELECT __$operation, id FROM cdc.dbo_orders_CT ORDER BY __$start_lsn, __$seqval, __$operation").rows;
    assert_eq!(rows.iter().map(|r| (int(&r[0]), int(&r[1]))).collect::<Vec<_>>(), vec![(2, 1), (1, 1), (2, 7)]);
}

/// relational-databases/system-functions/cdc-fn-cdc-get-all-changes-capture-instance-transact-sql:
/// `N'all'` omits before-images, `N'all update old'` includes them; a range outside the
/// validity interval is error 313.
#[test]
fn all_changes_function_filters_and_validates_its_range() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, 'a', 1); UPDATE dbo.orders SET status = 'b' WHERE id = 1");
    let from = s.scalar("SELECT sys.fn_cdc_get_min_lsn('dbo_orders')");
    let to = s.scalar("SELECT sys.fn_cdc_get_max_lsn()");
    let params = [("@from", from.clone()), ("@to", to.clone())];
    let all = s.query_with("SELECT __$operation FROM cdc.fn_cdc_get_all_changes_dbo_orders(@from, @to, N'all') ORDER BY __$start_lsn, __$seqval, __$operation", &params);
    assert_eq!(all.rows.iter().map(|r| int(&r[0])).collect::<Vec<_>>(), vec![2, 4]);
    assert_eq!(all.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), vec!["__$operation"]);
    let old = s.query_with("SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(@from, @to, N'all update old')", &params);
    assert_eq!(old.rows.len(), 3);
    let names: Vec<&str> = old.columns.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["__$start_lsn", "__$seqval", "__$operation", "__$update_mask", "id", "status", "amount"]);

    let below = Value::Binary(vec![0; 10]);
    let outcome = s.sim.execute(&mut s.session, "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(@from, @to, N'all')", &[("@from".into(), below), ("@to".into(), to)]);
    let error = outcome.error.expect("a range below the low water mark fails");
    assert_eq!((error.number, error.state), (313, 3));
    assert!(error.message.ends_with("cdc.fn_cdc_get_all_changes_ ... ."), "{}", error.message);
}

/// relational-databases/system-functions/sys-fn-cdc-get-min-lsn-transact-sql and
/// relational-databases/track-changes/administer-and-monitor-change-data-capture-sql-server:
/// cleanup removes rows older than the retention and moves the instance's low water mark.
#[test]
fn min_lsn_moves_after_cleanup() {
    let mut s = Sim::new(SimConfig::default());
    let start = Utc.with_ymd_and_hms(2026, 5, 1, 8, 0, 0).unwrap();
    s.sim.engine().with_db(|db| db.clock.set(start, true));
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, 'old', 1)");
    let before = lsn_hex(&s.scalar("SELECT sys.fn_cdc_get_min_lsn('dbo_orders')"));
    s.exec("EXEC sim.advance_clock @seconds = 7200");
    s.exec("INSERT INTO dbo.orders VALUES (2, 'new', 2)");
    s.exec("EXEC sys.sp_cdc_change_job @job_type = N'cleanup', @retention = 60");
    s.exec("EXEC sim.run_cleanup_job");
    let after = lsn_hex(&s.scalar("SELECT sys.fn_cdc_get_min_lsn('dbo_orders')"));
    assert!(after > before, "{after} should be above {before}");
    let left = s.query("SELECT id FROM cdc.dbo_orders_CT").rows;
    assert_eq!(left, vec![vec![Value::Int(2)]]);
    // An unknown instance reads as the zero LSN.
    assert_eq!(lsn_hex(&s.scalar("SELECT sys.fn_cdc_get_min_lsn('nope')")), "00000000000000000000");
    // The retention must be positive.
    assert_eq!(s.fail("EXEC sys.sp_cdc_change_job @job_type = N'cleanup', @retention = 0").number, 22994);
}

/// relational-databases/track-changes/about-change-data-capture-sql-server ("Handling changes
/// to source table"): after ADD COLUMN the existing instance keeps its columns; a new instance
/// captures the new column. relational-databases/system-tables/cdc-ddl-history-transact-sql.
#[test]
fn after_ddl_only_a_new_capture_instance_captures_the_new_column() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("ALTER TABLE dbo.orders ADD region nvarchar(10) NULL");
    s.exec("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL, @capture_instance = N'dbo_orders_v2'");
    s.exec("INSERT INTO dbo.orders VALUES (1, 'a', 1, N'emea')");
    let old = s.query("SELECT * FROM cdc.dbo_orders_CT");
    assert!(old.columns.iter().all(|c| c.name != "region"));
    let new = s.query("SELECT region FROM cdc.dbo_orders_v2_CT");
    assert_eq!(new.rows, vec![vec![Value::Text("emea".into())]]);
    assert_eq!(s.fail("SELECT region FROM cdc.dbo_orders_CT").number, 207);
    let history = s.query("SELECT ddl_command, required_column_update FROM cdc.ddl_history").rows;
    assert_eq!(history.len(), 1);
    assert!(history[0][0].to_text().unwrap().contains("ADD region"), "{history:?}");
    // A third instance is refused.
    let third = s.fail("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL, @capture_instance = N'dbo_orders_v3'");
    assert_eq!(third.number, 22962);
}

/// relational-databases/track-changes/about-change-data-capture-sql-server ("Computed
/// columns"): a computed column's value is derived on every write and readable in the table,
/// but every change row holds NULL for it, persisted or not; no statement may write it (271);
/// `cdc.captured_columns.is_computed` names it. t-sql/statements/alter-table-computed-column-
/// definition-transact-sql: one added later is computed on the rows already there.
#[test]
fn computed_columns_read_in_the_table_and_null_in_change_rows() {
    let mut s = Sim::new(SimConfig::default());
    s.exec("EXEC sys.sp_cdc_enable_db");
    s.exec("CREATE TABLE dbo.lines (id int PRIMARY KEY, qty int NOT NULL, price decimal(10,2) NOT NULL, total AS (qty * price) PERSISTED, label AS (CONCAT(N'line ', id)))");
    s.exec("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'lines', @role_name = NULL");
    s.exec("INSERT INTO dbo.lines VALUES (1, 3, 2.50)");
    s.exec("INSERT INTO dbo.lines (id, qty, price) VALUES (2, 1, 10.00)");
    s.exec("UPDATE dbo.lines SET qty = 4 WHERE id = 1");
    let table = s.query("SELECT id, total, label FROM dbo.lines ORDER BY id").rows;
    assert_eq!(table[0][1], Value::Numeric { value: 1000, scale: 2 }, "4 x 2.50, recomputed by the UPDATE");
    assert_eq!(table[1][2], Value::Text("line 2".into()));
    let changes = s.query("SELECT __$operation, qty, total, label FROM cdc.dbo_lines_CT ORDER BY __$start_lsn, __$seqval, __$operation").rows;
    assert_eq!(changes.len(), 4);
    assert!(changes.iter().all(|row| row[2] == Value::Null && row[3] == Value::Null), "{changes:?}");
    assert_eq!(int(&changes[3][1]), 4);
    let flags = s.query("SELECT column_name, is_computed FROM cdc.captured_columns ORDER BY column_ordinal").rows;
    let computed: Vec<String> = flags.iter().filter(|r| r[1] == Value::Bit(true)).map(|r| r[0].to_text().unwrap()).collect();
    assert_eq!(computed, ["total", "label"]);
    assert_eq!(s.fail("UPDATE dbo.lines SET total = 1 WHERE id = 1").number, 271);
    assert_eq!(s.fail("INSERT INTO dbo.lines (id, qty, price, total) VALUES (3, 1, 1, 1)").number, 271);
    s.exec("ALTER TABLE dbo.lines ADD doubled AS (qty * 2)");
    assert_eq!(int(&s.scalar("SELECT doubled FROM dbo.lines WHERE id = 1")), 8);
    let history = s.query("SELECT ddl_command FROM cdc.ddl_history").rows;
    assert_eq!(history[0][0].to_text().unwrap(), "ALTER TABLE dbo.lines ADD doubled AS (qty * 2)");
}

/// relational-databases/track-changes/about-change-data-capture-sql-server: a dropped captured
/// column stays in the change table and reads NULL afterwards.
#[test]
fn a_dropped_captured_column_reads_null() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("ALTER TABLE dbo.orders DROP COLUMN status");
    s.exec("INSERT INTO dbo.orders VALUES (1, 3.50)");
    let rows = s.query("SELECT status, amount FROM cdc.dbo_orders_CT").rows;
    assert_eq!(rows, vec![vec![Value::Null, Value::Numeric { value: 350, scale: 2 }]]);
}

/// relational-databases/system-stored-procedures/sys-sp-cdc-stop-job-transact-sql and
/// sys-fn-cdc-get-max-lsn: while the capture job is stopped the maximum LSN stands still; on
/// restart the backlog is harvested and nothing is lost.
#[test]
fn max_lsn_stands_still_while_the_capture_job_is_stopped() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, 'a', 1)");
    let before = lsn_hex(&s.scalar("SELECT sys.fn_cdc_get_max_lsn()"));
    s.exec("EXEC sys.sp_cdc_stop_job @job_type = N'capture'");
    s.exec("INSERT INTO dbo.orders VALUES (2, 'b', 2)");
    s.exec("UPDATE dbo.orders SET status = 'c' WHERE id = 1");
    assert_eq!(lsn_hex(&s.scalar("SELECT sys.fn_cdc_get_max_lsn()")), before);
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM cdc.dbo_orders_CT")), 1);
    s.exec("EXEC sys.sp_cdc_start_job");
    assert!(lsn_hex(&s.scalar("SELECT sys.fn_cdc_get_max_lsn()")) > before);
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM cdc.dbo_orders_CT")), 4);
}

/// relational-databases/track-changes/work-with-change-data-sql-server: on a quiet database the
/// capture process writes dummy `cdc.lsn_time_mapping` entries (tran_id 0x00) so the maximum
/// LSN keeps moving.
#[test]
fn idle_entries_appear_on_a_quiet_database() {
    let mut s = Sim::new(SimConfig { idle_entry_interval: Duration::from_secs(5), ..SimConfig::default() });
    let start = Utc.with_ymd_and_hms(2026, 5, 1, 8, 0, 0).unwrap();
    s.sim.engine().with_db(|db| db.clock.set(start, true));
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, 'a', 1)");
    let before = lsn_hex(&s.scalar("SELECT sys.fn_cdc_get_max_lsn()"));
    s.exec("EXEC sim.advance_clock @seconds = 6");
    s.exec("EXEC sim.run_capture_job");
    let idle = s.query("SELECT start_lsn, tran_begin_lsn FROM cdc.lsn_time_mapping WHERE tran_id = 0x00").rows;
    assert_eq!(idle.len(), 1);
    assert_eq!(idle[0][1], Value::Null);
    assert!(lsn_hex(&s.scalar("SELECT sys.fn_cdc_get_max_lsn()")) > before);
}

/// relational-databases/system-tables/cdc-lsn-time-mapping-transact-sql and
/// t-sql/functions/current-timezone-id-transact-sql: commit times are the server's local time;
/// across a DST change they follow the configured zone.
#[test]
fn local_commit_times_follow_the_zone_across_a_dst_change() {
    let zone = ServerZone::parse("W. Europe Standard Time").unwrap();
    let mut s = Sim::new(SimConfig { zone, ..SimConfig::default() });
    // 00:30 UTC is 01:30 CET; at 01:00 UTC clocks jump from 02:00 CET to 03:00 CEST, so an
    // hour later (01:30 UTC) it is 03:30 local.
    s.sim.engine().with_db(|db| db.clock.set(Utc.with_ymd_and_hms(2026, 3, 29, 0, 30, 0).unwrap(), true));
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, 'before', 1)");
    s.exec("EXEC sim.advance_clock @seconds = 3600");
    s.exec("INSERT INTO dbo.orders VALUES (2, 'after', 2)");
    let times: Vec<String> = s
        .query("SELECT CONVERT(varchar(30), tran_end_time, 120) FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00 ORDER BY start_lsn")
        .rows
        .iter()
        .map(|r| r[0].to_text().unwrap())
        .collect();
    assert_eq!(times, vec!["2026-03-29 01:30:00", "2026-03-29 03:30:00"]);
    assert_eq!(s.scalar("SELECT CURRENT_TIMEZONE_ID()"), Value::Text("W. Europe Standard Time".into()));
    let converted = s.scalar("SELECT CONVERT(varchar(40), CAST('2026-03-29 03:30:00' AS datetime2) AT TIME ZONE 'W. Europe Standard Time', 121)");
    assert!(converted.to_text().unwrap().ends_with("+02:00"), "{converted:?}");
}

/// relational-databases/system-functions/sys-fn-cdc-map-time-to-lsn-transact-sql and
/// sys-fn-cdc-map-lsn-to-time-transact-sql.
#[test]
fn time_and_lsn_map_both_ways() {
    let mut s = Sim::new(SimConfig::default());
    s.sim.engine().with_db(|db| db.clock.set(Utc.with_ymd_and_hms(2026, 6, 1, 12, 0, 0).unwrap(), true));
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, 'a', 1)");
    s.exec("EXEC sim.advance_clock @seconds = 60");
    s.exec("INSERT INTO dbo.orders VALUES (2, 'b', 2)");
    let second = s.scalar("SELECT sys.fn_cdc_map_time_to_lsn('smallest greater than', '2026-06-01 12:00:30')");
    let time = s.query_with("SELECT CONVERT(varchar(30), sys.fn_cdc_map_lsn_to_time(@lsn), 120)", &[("@lsn", second.clone())]);
    assert_eq!(time.rows[0][0], Value::Text("2026-06-01 12:01:00".into()));
    assert_eq!(s.scalar("SELECT sys.fn_cdc_map_time_to_lsn('largest less than', '2026-06-01 11:00:00')"), Value::Null);
    let next = s.query_with("SELECT sys.fn_cdc_increment_lsn(@lsn), sys.fn_cdc_decrement_lsn(sys.fn_cdc_increment_lsn(@lsn))", &[("@lsn", second.clone())]);
    assert!(lsn_hex(&next.rows[0][0]) > lsn_hex(&second));
    assert_eq!(next.rows[0][1], second);
}

/// relational-databases/errors-events/database-engine-events-and-errors-0-to-999: unknown
/// objects are 208, unknown columns 207 — also on an empty table, before any row is read.
#[test]
fn wrong_names_fail_with_sql_server_errors() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    let object = s.fail("SELECT * FROM dbo.order_lines");
    assert_eq!((object.number, object.message.as_str()), (208, "Invalid object name 'dbo.order_lines'."));
    let column = s.fail("SELECT tran_end FROM cdc.lsn_time_mapping");
    assert_eq!((column.number, column.message.as_str()), (207, "Invalid column name 'tran_end'."));
    assert_eq!(s.fail("SELECT id FROM dbo.orders WHERE stauts = 'x'").number, 207);
    assert_eq!(s.fail("SELECT start_lsn FROM cdc.change_tables WHERE capture_instanc = 'x'").number, 207);
    assert_eq!(s.fail("INSERT INTO dbo.orders (id, colour) VALUES (1, 'red')").number, 207);
    assert_eq!(s.fail("SELECT fn_cdc_get_max_lsn()").number, 195);
    assert_eq!(s.fail("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders'").number, 201);
}

/// t-sql/queries/select-order-by-clause-transact-sql: NULLs sort first ascending, last
/// descending; plus the query shapes the pipeline uses (TOP, aggregates, BETWEEN, IN, LIKE).
#[test]
fn queries_follow_sql_server_semantics() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("INSERT INTO dbo.orders VALUES (1, NULL, 5), (2, 'paid', 7.5), (3, 'new', NULL), (4, 'paid', 1)");
    let ascending: Vec<Value> = s.query("SELECT status FROM dbo.orders ORDER BY status").rows.into_iter().map(|mut r| r.remove(0)).collect();
    assert_eq!(ascending[0], Value::Null);
    let descending: Vec<Value> = s.query("SELECT status FROM dbo.orders ORDER BY status DESC, id").rows.into_iter().map(|mut r| r.remove(0)).collect();
    assert_eq!(descending.last(), Some(&Value::Null));
    let grouped = s.query("SELECT status, COUNT_BIG(*) AS n, SUM(amount) AS total FROM dbo.orders WHERE status IS NOT NULL GROUP BY status ORDER BY status").rows;
    assert_eq!(grouped, vec![
        vec![Value::Text("new".into()), Value::Int(1), Value::Null],
        vec![Value::Text("paid".into()), Value::Int(2), Value::Numeric { value: 850, scale: 2 }],
    ]);
    assert_eq!(s.query("SELECT TOP (2) id FROM dbo.orders ORDER BY id DESC").rows, vec![vec![Value::Int(4)], vec![Value::Int(3)]]);
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM dbo.orders WHERE id BETWEEN 2 AND 3 AND status IN ('new', 'paid') AND status LIKE 'p%'")), 1);
    assert_eq!(s.fail("SELECT status, id FROM dbo.orders GROUP BY status").number, 8120);
    // Reconcile's bucket scan: GROUP BY an expression of the key, the same expression in the
    // select list, and a key sum as decimal(38,0) (select-group-by-transact-sql: a select
    // item may be a GROUP BY expression; sum-transact-sql: decimal(p,s) sums as decimal(38,s)).
    let buckets = s.query(
        "SELECT (CAST(id AS bigint) - 1) / 2 AS b, COUNT_BIG(*) AS n, SUM(CAST(id AS decimal(38,0))) AS s FROM dbo.orders \
         GROUP BY (CAST(id AS bigint) - 1) / 2 ORDER BY b",
    );
    assert_eq!(buckets.rows, vec![
        vec![Value::Int(0), Value::Int(2), Value::Numeric { value: 3, scale: 0 }],
        vec![Value::Int(1), Value::Int(2), Value::Numeric { value: 7, scale: 0 }],
    ]);
    assert_eq!(s.fail("SELECT (CAST(id AS bigint) - 1) / 3, COUNT_BIG(*) FROM dbo.orders GROUP BY (CAST(id AS bigint) - 1) / 2").number, 8120);
    // cast-and-convert-transact-sql, date and time styles: 121/126/127 keep a datetime2(n)'s
    // or time(n)'s n fractional digits; a datetime has 3, left out at zero in ISO 8601.
    let mut text = |sql: &str| match s.scalar(sql) {
        Value::Text(text) => text,
        other => panic!("{sql}: {other:?}"),
    };
    assert_eq!(text("SELECT CONVERT(varchar(40), CAST('2026-12-01 12:34:56.1234567' AS datetime2(7)), 121)"), "2026-12-01 12:34:56.1234567");
    assert_eq!(text("SELECT CONVERT(varchar(40), CAST('2026-12-01 12:34:56.1234567' AS datetime2(7)), 126)"), "2026-12-01T12:34:56.1234567");
    assert_eq!(text("SELECT CONVERT(varchar(40), CAST('2026-12-01 12:34:56' AS datetime2(0)), 121)"), "2026-12-01 12:34:56");
    assert_eq!(text("SELECT CONVERT(varchar(40), CAST('2026-12-01 12:34:56.5' AS datetime2(3)), 127)"), "2026-12-01T12:34:56.500Z");
    assert_eq!(text("SELECT CONVERT(varchar(40), CAST('2026-12-01 12:34:56' AS datetime), 126)"), "2026-12-01T12:34:56");
    assert_eq!(text("SELECT CONVERT(varchar(40), CAST('12:34:56.1234567' AS time(7)), 121)"), "12:34:56.1234567");
    assert_eq!(s.scalar("SELECT CAST(7.456 AS decimal(5,2))"), Value::Numeric { value: 746, scale: 2 });
    assert_eq!(s.fail("SELECT CAST('x' AS int)").number, 245);
    // Hints and session options are accepted.
    s.exec("SET LOCK_TIMEOUT 1000; SET TRANSACTION ISOLATION LEVEL READ COMMITTED");
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM dbo.orders WITH (NOLOCK)")), 4);
    let joined = s.query("SELECT ct.capture_instance, t.name FROM cdc.change_tables ct INNER JOIN sys.tables t ON t.object_id = ct.source_object_id").rows;
    assert_eq!(joined, vec![vec![Value::Text("dbo_orders".into()), Value::Text("orders".into())]]);
}

/// t-sql/queries/top-transact-sql: `TOP (n) WITH TIES` also returns the rows whose ORDER BY
/// values equal the last row's (so a keyset read over a non-unique column never splits a
/// value); without ORDER BY it is error 1062. A parameter cast to a column's type compares as
/// that type (`CAST(@P1 AS datetime)` rounds to the type's ticks).
#[test]
fn top_with_ties_keeps_every_row_tying_with_the_last() {
    let mut s = Sim::new(SimConfig::default());
    s.exec("CREATE TABLE dbo.heap (k int NOT NULL, v int NOT NULL)");
    s.exec("INSERT INTO dbo.heap VALUES (1, 1), (2, 1), (2, 2), (2, 3), (3, 1), (4, 1)");
    let keys = |sql: &str, s: &mut Sim| s.query(sql).rows.into_iter().map(|r| int(&r[0])).collect::<Vec<_>>();
    assert_eq!(keys("SELECT TOP (2) WITH TIES k FROM dbo.heap ORDER BY k", &mut s), vec![1, 2, 2, 2]);
    assert_eq!(keys("SELECT TOP (2) k FROM dbo.heap ORDER BY k", &mut s), vec![1, 2]);
    assert_eq!(keys("SELECT TOP (1) WITH TIES k FROM dbo.heap WHERE k > 2 ORDER BY k", &mut s), vec![3]);
    assert_eq!(keys("SELECT TOP (9) WITH TIES k FROM dbo.heap ORDER BY k", &mut s).len(), 6);
    assert_eq!(s.fail("SELECT TOP (2) WITH TIES k FROM dbo.heap").number, 1062);
    s.exec("CREATE TABLE dbo.times (t datetime NOT NULL PRIMARY KEY, name varchar(10) NOT NULL)");
    s.exec("INSERT INTO dbo.times VALUES ('2026-01-01T00:00:00.003', 'a'), ('2026-01-01T00:00:00.007', 'b')");
    let after = s.query("SELECT name FROM dbo.times WHERE t > CAST(CAST('2026-01-01T00:00:00.0033333' AS datetime2) AS datetime) ORDER BY t").rows;
    assert_eq!(after, vec![vec![Value::Text("b".into())]], "the boundary row is not read again");
}

/// t-sql/queries/top-transact-sql with select-order-by-clause-transact-sql: a `TOP (n)` read of
/// `cdc.lsn_time_mapping` or a change table in its key order returns the first n rows of the
/// fully sorted read from the lower bound on (the simulator stops such a scan early and skips
/// the sort; any other order is still sorted).
#[test]
fn top_in_key_order_returns_the_first_rows_of_the_sorted_read() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    for id in 1..=12 {
        s.exec(&format!("INSERT INTO dbo.orders VALUES ({id}, 'new', {id})"));
    }
    for id in 1..=12 {
        s.exec(&format!("UPDATE dbo.orders SET status = 'paid' WHERE id = {}", 13 - id));
    }
    let lsns = |sql: &str, s: &mut Sim| s.query(sql).rows.into_iter().map(|r| lsn_hex(&r[0])).collect::<Vec<_>>();
    let all = lsns("SELECT start_lsn FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00 ORDER BY start_lsn", &mut s);
    assert!(all.len() >= 24 && all.windows(2).all(|w| w[0] < w[1]), "mapping rows in LSN order: {all:?}");
    let from = &all[5];
    let top = lsns(&format!("SELECT TOP (4) start_lsn FROM cdc.lsn_time_mapping WHERE start_lsn > 0x{from} AND tran_id <> 0x00 ORDER BY start_lsn"), &mut s);
    assert_eq!(top, all[6..10].to_vec());
    let newest = lsns("SELECT TOP (2) start_lsn FROM cdc.lsn_time_mapping WHERE tran_id <> 0x00 ORDER BY start_lsn DESC", &mut s);
    assert_eq!(newest, vec![all[all.len() - 1].clone(), all[all.len() - 2].clone()], "a descending order is sorted, not read in key order");

    let key = |r: &Vec<Value>| (lsn_hex(&r[0]), lsn_hex(&r[1]), int(&r[2]));
    let ordered = "ORDER BY __$start_lsn, __$seqval, __$operation";
    let changes: Vec<_> = s.query(&format!("SELECT __$start_lsn, __$seqval, __$operation FROM cdc.dbo_orders_CT {ordered}")).rows.iter().map(key).collect();
    assert_eq!(changes.len(), 36, "12 inserts and 12 updates of two rows each");
    let mut sorted = changes.clone();
    sorted.sort();
    assert_eq!(changes, sorted, "change rows in clustered-index order");
    let from = &changes[7].0;
    let after: Vec<_> = s.query(&format!("SELECT TOP (5) __$start_lsn, __$seqval, __$operation FROM cdc.dbo_orders_CT WHERE __$start_lsn > 0x{from} {ordered}")).rows.iter().map(key).collect();
    let expected: Vec<_> = changes.iter().filter(|c| &c.0 > from).take(5).cloned().collect();
    assert_eq!(after, expected);
    let by_operation: Vec<i64> = s.query("SELECT __$operation FROM cdc.dbo_orders_CT ORDER BY __$operation DESC, __$start_lsn").rows.iter().map(|r| int(&r[0])).collect();
    assert!(by_operation.windows(2).all(|w| w[0] >= w[1]), "another order is sorted: {by_operation:?}");
}

/// Every type of part 1 stores and reads back its values (extremes, NULLs, Unicode beyond the
/// BMP), and values that do not fit fail as on SQL Server.
#[test]
fn every_type_round_trips_through_insert_and_select() {
    let mut s = Sim::new(SimConfig::default());
    s.exec(
        "CREATE TABLE dbo.types (id int PRIMARY KEY, b bit, ti tinyint, si smallint, bi bigint, d decimal(38,10), m money, sm smallmoney, r real, f float,
         c char(4), vc varchar(10), vmax varchar(max), nc nchar(3), nv nvarchar(20), nvmax nvarchar(max), bn binary(4), vb varbinary(8), vbmax varbinary(max),
         dt date, t time(3), dtm datetime, dt2 datetime2(7), sdt smalldatetime, dto datetimeoffset(4), u uniqueidentifier)",
    );
    let guid = uuid::Uuid::parse_str("6F9619FF-8B86-D011-B42D-00C04FC964FF").unwrap();
    let params: Vec<(&str, Value)> = vec![
        ("@b", Value::Bit(true)),
        ("@ti", Value::Int(255)),
        ("@si", Value::Int(-32768)),
        ("@bi", Value::Int(i64::MAX)),
        ("@d", Value::Numeric { value: 12_345_678_901_234_567_890_123_456_789_012_345_678, scale: 10 }),
        ("@m", Value::Numeric { value: -9_223_372_036_854_775_808, scale: 4 }), // -922,337,203,685,477.5808
        ("@sm", Value::Numeric { value: 2_147_483_647, scale: 4 }),
        ("@r", Value::Float(3.5)),
        ("@f", Value::Float(-1.79e308)),
        ("@c", Value::Text("ab".into())),
        ("@vc", Value::Text("0123456789".into())),
        ("@vmax", Value::Text("x".repeat(10_000))),
        ("@nc", Value::Text("日本".into())),
        ("@nv", Value::Text("emoji 🚚 ok".into())),
        ("@nvmax", Value::Text("𝄞".repeat(3000))),
        ("@bn", Value::Binary(vec![1, 2])),
        ("@vb", Value::Binary(vec![0xFF; 8])),
        ("@vbmax", Value::Binary(vec![7; 20_000])),
        ("@dt", Value::Text("9999-12-31".into())),
        ("@t", Value::Text("23:59:59.9994".into())),
        ("@dtm", Value::Text("1753-01-01 00:00:00".into())),
        ("@dt2", Value::Text("0001-01-01 00:00:00.0000001".into())),
        ("@sdt", Value::Text("2079-06-06 23:59:00".into())),
        ("@dto", Value::Text("2026-03-29 02:30:00.12345 -03:00".into())),
        ("@u", Value::Guid(guid)),
    ];
    let names: Vec<&str> = params.iter().map(|(n, _)| *n).collect();
    let insert = format!("INSERT INTO dbo.types VALUES (1, {})", names.join(", "));
    s.exec_with(&insert, &params);
    s.exec("INSERT INTO dbo.types (id) VALUES (2)");
    let rows = s.query("SELECT * FROM dbo.types ORDER BY id").rows;
    let row = &rows[0];
    assert_eq!(row[1], Value::Bit(true));
    assert_eq!(row[4], Value::Int(i64::MAX));
    assert_eq!(row[5], Value::Numeric { value: 12_345_678_901_234_567_890_123_456_789_012_345_678, scale: 10 });
    assert_eq!(row[10], Value::Text("ab  ".into()), "char pads with spaces");
    assert_eq!(row[12].to_text().unwrap().len(), 10_000);
    assert_eq!(row[13], Value::Text("日本 ".into()));
    assert_eq!(row[14], Value::Text("emoji 🚚 ok".into()));
    assert_eq!(row[15].to_text().unwrap().chars().count(), 3000);
    assert_eq!(row[16], Value::Binary(vec![1, 2, 0, 0]), "binary pads with zeros");
    assert_eq!(row[20].to_text().unwrap(), "23:59:59.9990000", "time(3) rounds");
    assert_eq!(row[25], Value::Guid(guid));
    assert!(rows[1][1..].iter().all(Value::is_null), "omitted columns are NULL");
    // Values that do not fit.
    assert_eq!(s.fail("INSERT INTO dbo.types (id, ti) VALUES (3, 256)").number, 8115);
    assert_eq!(s.fail("INSERT INTO dbo.types (id, vc) VALUES (3, '01234567890')").number, 2628);
    assert_eq!(s.fail("INSERT INTO dbo.types (id) VALUES (1)").number, 2627);
    assert_eq!(s.fail("INSERT INTO dbo.types (id) VALUES (NULL)").number, 515);
}

/// Faults of `sim.inject_fault` fail the next statements as SQL Server would: 1205 rolls the
/// victim's transaction back; 1222 fails the statement.
#[test]
fn injected_faults_fail_as_sql_server_fails() {
    let mut s = Sim::new(SimConfig::default());
    s.orders_with_cdc();
    s.exec("BEGIN TRAN; INSERT INTO dbo.orders VALUES (1, 'a', 1)");
    s.exec("EXEC sim.inject_fault @kind = N'deadlock', @count = 1");
    let deadlock = s.fail("INSERT INTO dbo.orders VALUES (2, 'b', 2)");
    assert_eq!((deadlock.number, deadlock.class), (1205, 13));
    assert_eq!(int(&s.scalar("SELECT @@TRANCOUNT")), 0);
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM dbo.orders")), 0, "the victim's transaction is rolled back");
    s.exec("EXEC sim.inject_fault @kind = N'lock_timeout', @count = 2");
    assert_eq!(s.fail("SELECT 1").number, 1222);
    assert_eq!(s.fail("SELECT 1").number, 1222);
    assert_eq!(int(&s.scalar("SELECT 1")), 1);
    s.exec("EXEC sim.inject_fault @kind = N'disconnect'");
    let outcome = s.sim.execute(&mut s.session, "SELECT 1", &[]);
    assert!(outcome.disconnect && outcome.outputs.is_empty());
}

/// Ground truth: after a workload with transactions, key updates and deletes, replaying the
/// captured changes in (start_lsn, seqval, operation) order rebuilds the table exactly.
#[test]
fn replaying_the_change_table_rebuilds_the_source_table() {
    let sim = mssql_cdc_sim::Simulator::new(SimConfig::default());
    let mut session = sim.session();
    for sql in std::iter::once(ORDERS_DDL).chain(ORDERS_CDC.iter().copied()) {
        assert!(sim.execute(&mut session, sql, &[]).error.is_none());
    }
    let options = WorkloadOptions { rate: 0, changes: 3000, max_transaction_size: 50, ..WorkloadOptions::default() };
    let report = Workload::new(options, Vec::new()).run(&mut LocalClient::new(&sim)).unwrap();
    assert_eq!(report.changes, 3000);
    let mut rebuilt: std::collections::BTreeMap<i64, Vec<Value>> = std::collections::BTreeMap::new();
    for change in sim.changes("dbo_orders") {
        let id = change.values[0].as_i64().unwrap();
        match change.operation {
            1 => assert!(rebuilt.remove(&id).is_some(), "delete of a missing row {id}"),
            2 | 4 => {
                rebuilt.insert(id, change.values);
            }
            3 => assert!(rebuilt.contains_key(&id)),
            other => panic!("operation {other}"),
        }
    }
    let table = sim.table_rows("dbo", "orders").unwrap();
    assert_eq!(rebuilt.into_values().collect::<Vec<_>>(), table);
}

/// Invariant: a rolled-back transaction undoes DDL with its rows (ALTER TABLE, DROP TABLE), and
/// a statement that fails half-way leaves nothing behind.
#[test]
fn rollback_undoes_ddl_and_failed_statements() {
    let mut s = Sim::new(SimConfig::default());
    s.exec("CREATE TABLE dbo.t (id int PRIMARY KEY, a int NULL, b nvarchar(10) NULL)");
    s.exec("INSERT INTO dbo.t VALUES (1, 10, N'x'), (2, 20, N'y')");
    s.exec("BEGIN TRAN; ALTER TABLE dbo.t DROP COLUMN a; INSERT INTO dbo.t VALUES (3, N'z'); ROLLBACK");
    assert_eq!(s.query("SELECT id, a, b FROM dbo.t ORDER BY id").rows, vec![
        vec![Value::Int(1), Value::Int(10), Value::Text("x".into())],
        vec![Value::Int(2), Value::Int(20), Value::Text("y".into())],
    ]);
    s.exec("BEGIN TRAN; DROP TABLE dbo.t; ROLLBACK");
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM dbo.t")), 2);
    // The second operation fails: the first is not kept.
    assert_eq!(s.fail("ALTER TABLE dbo.t ADD c int NULL, DROP COLUMN nope").number, 4924);
    assert_eq!(s.fail("SELECT c FROM dbo.t").number, 207);
    // Variables live for one batch.
    s.exec("DECLARE @x int = 5");
    assert_eq!(s.fail("SELECT @x").number, 137);
}

/// Invariant: key uniqueness is checked as an UPDATE statement ends, not row by row (so a
/// shift of adjacent keys succeeds, as on SQL Server), and heap rows with equal values are
/// told apart.
#[test]
fn updates_check_keys_per_statement_and_heaps_keep_duplicates_apart() {
    let mut s = Sim::new(SimConfig::default());
    s.exec("CREATE TABLE dbo.k (id int PRIMARY KEY, v int NULL)");
    s.exec("INSERT INTO dbo.k VALUES (1, 10), (2, 20), (3, 30)");
    s.exec("UPDATE dbo.k SET id = id + 1");
    assert_eq!(s.query("SELECT id, v FROM dbo.k ORDER BY id").rows, vec![
        vec![Value::Int(2), Value::Int(10)],
        vec![Value::Int(3), Value::Int(20)],
        vec![Value::Int(4), Value::Int(30)],
    ]);
    assert_eq!(s.fail("UPDATE dbo.k SET id = 9").number, 2627);
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM dbo.k WHERE id = 9")), 0, "the failed statement left nothing");
    s.exec("CREATE TABLE dbo.h (v int NULL)");
    s.exec("INSERT INTO dbo.h VALUES (1), (1), (2)");
    let deleted = s.exec("DELETE FROM dbo.h WHERE v = 1");
    assert_eq!(deleted, vec![mssql_cdc_sim::Output::Count(2)]);
    assert_eq!(int(&s.scalar("SELECT COUNT(*) FROM dbo.h")), 1);
}
