//! The simulator on the wire: tiberius, python-tds and pymssql (FreeTDS) talk TDS to
//! `mssql-cdc sim serve`, round-trip every type, run a CDC scenario, and see faults as SQL
//! Server sends them.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use chrono::{NaiveDate, NaiveDateTime, NaiveTime};
use mssql_cdc_sim::client::{self, connect};
use support::{run_python, SimServer, SIM_PASSWORD};
use tiberius::{numeric::Numeric, Query};

async fn exec(client: &mut client::TdsClient, sql: &str) {
    client.simple_query(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).into_results().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Invariant: every type written with a parameterised INSERT through tiberius reads back
/// equal, including NULLs, extremes, maximum lengths and Unicode outside the BMP.
#[tokio::test]
async fn every_type_round_trips_through_tiberius() {
    let server = SimServer::start();
    let mut client = connect(&server.client_config()).await.expect("login");
    exec(
        &mut client,
        "CREATE TABLE dbo.t (id int PRIMARY KEY, b bit, ti tinyint, si smallint, bi bigint, d decimal(38,6), r real, f float,
         vc varchar(20), vmax varchar(max), nv nvarchar(40), nvmax nvarchar(max), vb varbinary(16), vbmax varbinary(max),
         dt date, t time(7), dt2 datetime2(7), dto datetimeoffset(7), u uniqueidentifier, dtm datetime, m money)",
    )
    .await;
    let big_text: String = "𝄞a".repeat(5000);
    let big_bytes: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let date = NaiveDate::from_ymd_opt(9999, 12, 31).unwrap();
    let time = NaiveTime::from_hms_nano_opt(23, 59, 59, 999_999_900).unwrap();
    let dt2 = NaiveDateTime::new(NaiveDate::from_ymd_opt(1, 1, 1).unwrap(), NaiveTime::from_hms_nano_opt(0, 0, 0, 100).unwrap());
    let dto = chrono::DateTime::parse_from_rfc3339("2026-03-29T02:30:00.1234567-03:00").unwrap();
    let guid = uuid::Uuid::parse_str("6F9619FF-8B86-D011-B42D-00C04FC964FF").unwrap();
    let mut insert = Query::new("INSERT INTO dbo.t (id, b, ti, si, bi, d, r, f, vc, vmax, nv, nvmax, vb, vbmax, dt, t, dt2, dto, u) VALUES (@P1, @P2, @P3, @P4, @P5, @P6, @P7, @P8, @P9, @P10, @P11, @P12, @P13, @P14, @P15, @P16, @P17, @P18, @P19)");
    insert.bind(1i32);
    insert.bind(true);
    insert.bind(255u8);
    insert.bind(i16::MIN);
    insert.bind(i64::MAX);
    insert.bind(Numeric::new_with_scale(-12_345_678_901_234_567_890_123_456_789_012i128, 6));
    insert.bind(f32::MAX);
    insert.bind(f64::MIN_POSITIVE);
    insert.bind("café 20 chars ......".to_owned());
    insert.bind("v".repeat(9000));
    insert.bind("emoji 🚚 and 注文".to_owned());
    insert.bind(big_text.clone());
    insert.bind(vec![0u8, 1, 255]);
    insert.bind(big_bytes.clone());
    insert.bind(date);
    insert.bind(time);
    insert.bind(dt2);
    insert.bind(dto);
    insert.bind(guid);
    let inserted = insert.execute(&mut client).await.expect("insert");
    assert_eq!(inserted.total(), 1);
    let mut nulls = Query::new("INSERT INTO dbo.t (id, nv, vb, d, dt2) VALUES (@P1, @P2, @P3, @P4, @P5)");
    nulls.bind(2i32);
    nulls.bind(Option::<String>::None);
    nulls.bind(Option::<Vec<u8>>::None);
    nulls.bind(Option::<Numeric>::None);
    nulls.bind(Option::<NaiveDateTime>::None);
    nulls.execute(&mut client).await.expect("insert nulls");

    let row = client.query("SELECT * FROM dbo.t WHERE id = @P1", &[&1i32]).await.unwrap().into_row().await.unwrap().unwrap();
    assert_eq!(row.get::<bool, _>("b"), Some(true));
    assert_eq!(row.get::<u8, _>("ti"), Some(255));
    assert_eq!(row.get::<i16, _>("si"), Some(i16::MIN));
    assert_eq!(row.get::<i64, _>("bi"), Some(i64::MAX));
    assert_eq!(row.get::<Numeric, _>("d").map(|n| (n.value(), n.scale())), Some((-12_345_678_901_234_567_890_123_456_789_012i128, 6)));
    assert_eq!(row.get::<f32, _>("r"), Some(f32::MAX));
    assert_eq!(row.get::<f64, _>("f"), Some(f64::MIN_POSITIVE));
    assert_eq!(row.get::<&str, _>("vc"), Some("café 20 chars ......"));
    assert_eq!(row.get::<&str, _>("vmax").map(str::len), Some(9000));
    assert_eq!(row.get::<&str, _>("nv"), Some("emoji 🚚 and 注文"));
    assert_eq!(row.get::<&str, _>("nvmax"), Some(big_text.as_str()));
    assert_eq!(row.get::<&[u8], _>("vb"), Some(&[0u8, 1, 255][..]));
    assert_eq!(row.get::<&[u8], _>("vbmax"), Some(big_bytes.as_slice()));
    assert_eq!(row.get::<NaiveDate, _>("dt"), Some(date));
    assert_eq!(row.get::<NaiveTime, _>("t"), Some(time));
    assert_eq!(row.get::<NaiveDateTime, _>("dt2"), Some(dt2));
    assert_eq!(row.get::<chrono::DateTime<chrono::FixedOffset>, _>("dto"), Some(dto));
    assert_eq!(row.get::<uuid::Uuid, _>("u"), Some(guid));
    assert_eq!(row.get::<NaiveDateTime, _>("dtm"), None);

    let row = client.query("SELECT nv, vb, d, dt2 FROM dbo.t WHERE id = 2", &[]).await.unwrap().into_row().await.unwrap().unwrap();
    assert_eq!(row.get::<&str, _>(0), None);
    assert_eq!(row.get::<&[u8], _>(1), None);
    assert_eq!(row.get::<Numeric, _>(2), None);
    assert_eq!(row.get::<NaiveDateTime, _>(3), None);
}

/// Invariant: SQL errors and injected faults reach tiberius as SQL Server sends them: 208 as
/// a server error, 1205 as a deadlock, 1222, a wrong password as 18456, and a dropped
/// connection as an I/O error mid-result.
#[tokio::test]
async fn errors_and_faults_surface_to_tiberius() {
    let server = SimServer::start();
    let mut client = connect(&server.client_config()).await.expect("login");
    let error = client.simple_query("SELECT * FROM dbo.nope").await.expect_err("208");
    assert_eq!(error.code(), Some(208));

    exec(&mut client, "EXEC sim.inject_fault @kind = N'deadlock', @count = 1").await;
    let error = client.simple_query("SELECT 1").await.expect_err("1205");
    assert!(error.is_deadlock(), "{error}");
    exec(&mut client, "EXEC sim.inject_fault @kind = N'lock_timeout', @count = 1").await;
    let error = client.execute("SELECT @P1", &[&1i32]).await.expect_err("1222");
    assert_eq!(error.code(), Some(1222));
    // The connection is still usable after SQL errors.
    let one = client.query("SELECT 1", &[]).await.unwrap().into_row().await.unwrap().unwrap();
    assert_eq!(one.get::<i32, _>(0), Some(1));

    exec(&mut client, "EXEC sim.inject_fault @kind = N'disconnect'").await;
    let error = match client.simple_query("SELECT 1").await {
        Err(error) => error,
        Ok(stream) => stream.into_results().await.expect_err("the connection drops"),
    };
    assert!(matches!(error, tiberius::error::Error::Io { .. }), "{error:?}");

    let mut wrong = server.client_config();
    wrong.password = "not-the-password".into();
    let error = connect(&wrong).await.expect_err("login fails");
    assert_eq!(error.code(), Some(18456), "{error}");
    assert!(!error.to_string().contains("not-the-password"));
}

/// Invariant: a CDC scenario over TDS — enable CDC, change rows, read the change table and
/// `fn_cdc_get_all_changes_*` with binary(10) LSN parameters.
#[tokio::test]
async fn cdc_scenario_over_tiberius() {
    let server = SimServer::start();
    let mut client = connect(&server.client_config()).await.expect("login");
    exec(&mut client, "CREATE TABLE dbo.orders (id int PRIMARY KEY, status nvarchar(20))").await;
    exec(&mut client, "EXEC sys.sp_cdc_enable_db").await;
    exec(&mut client, "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL").await;
    exec(&mut client, "BEGIN TRAN; INSERT INTO dbo.orders VALUES (1, N'new'), (2, N'new'); UPDATE dbo.orders SET status = N'paid' WHERE id = 1; COMMIT").await;
    let bounds = client
        .query("SELECT sys.fn_cdc_get_min_lsn('dbo_orders'), sys.fn_cdc_get_max_lsn()", &[])
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap();
    let from = bounds.get::<&[u8], _>(0).unwrap().to_vec();
    let to = bounds.get::<&[u8], _>(1).unwrap().to_vec();
    assert_eq!((from.len(), to.len()), (10, 10));
    let rows = client
        .query("SELECT __$operation, id, status FROM cdc.fn_cdc_get_all_changes_dbo_orders(@P1, @P2, N'all update old') ORDER BY __$start_lsn, __$seqval, __$operation", &[&from, &to])
        .await
        .unwrap()
        .into_first_result()
        .await
        .unwrap();
    let seen: Vec<(i32, i32, String)> = rows.iter().map(|r| (r.get::<i32, _>(0).unwrap(), r.get::<i32, _>(1).unwrap(), r.get::<&str, _>(2).unwrap().to_owned())).collect();
    assert_eq!(seen, vec![(2, 1, "new".into()), (2, 2, "new".into()), (3, 1, "new".into()), (4, 1, "paid".into())]);
}

/// Invariant: independent clients no one here wrote — python-tds and pymssql (FreeTDS) —
/// round-trip values and read CDC changes from the served simulator.
#[test]
fn python_tds_and_pymssql_talk_to_the_simulator() {
    let server = SimServer::start();
    let port = server.address.port().to_string();
    let script = r#"
import sys, datetime, decimal, uuid
port = int(sys.argv[1]); password = sys.argv[2]; driver = sys.argv[3]
if driver == "pytds":
    import pytds
    conn = pytds.connect(server="127.0.0.1", port=port, user="sa", password=password, database="sales", autocommit=True)
    p = "%s"
    blob = pytds.Binary(b"\x00\x01\xff")  # python-tds sends plain bytes as text
else:
    import pymssql
    conn = pymssql.connect(server="127.0.0.1", port=port, user="sa", password=password, database="sales", autocommit=True, tds_version="7.4")
    p = "%s"
    blob = b"\x00\x01\xff"
cur = conn.cursor()
table = "dbo.py_" + driver
cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name nvarchar(50), amount decimal(18,4), at datetime2(3), flag bit, data varbinary(20))")
cur.execute("EXEC sys.sp_cdc_enable_db")
cur.execute(f"EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'py_{driver}', @role_name = NULL")
values = (1, "grüße 🚚", decimal.Decimal("-1234.5678"), datetime.datetime(2026, 3, 29, 2, 30, 0, 123000), True, blob)
cur.execute(f"INSERT INTO {table} VALUES ({p}, {p}, {p}, {p}, {p}, {p})", values)
cur.execute(f"INSERT INTO {table} VALUES ({p}, NULL, NULL, NULL, NULL, NULL)", (2,))
cur.execute(f"UPDATE {table} SET name = {p} WHERE id = 1", ("neu",))
cur.execute(f"SELECT id, name, amount, at, flag, data FROM {table} ORDER BY id")
rows = cur.fetchall()
assert rows[0][0] == 1 and rows[0][1] == "neu", rows
assert rows[0][2] == decimal.Decimal("-1234.5678"), rows[0][2]
assert rows[0][3] == datetime.datetime(2026, 3, 29, 2, 30, 0, 123000), rows[0][3]
assert bool(rows[0][4]) is True and bytes(rows[0][5]) == b"\x00\x01\xff", rows[0]
assert rows[1][1:] == (None, None, None, None, None), rows[1]
cur.execute(f"SELECT __$operation, id FROM cdc.dbo_py_{driver}_CT ORDER BY __$start_lsn, __$seqval, __$operation")
ops = [tuple(r) for r in cur.fetchall()]
assert ops == [(2, 1), (2, 2), (3, 1), (4, 1)], ops
cur.execute("SELECT sys.fn_cdc_get_max_lsn()")
assert len(cur.fetchone()[0]) == 10
try:
    cur.execute("SELECT nope FROM " + table)
    raise SystemExit("expected error 207")
except Exception as error:
    assert "207" in str(error) or "Invalid column name" in str(error), error
print("ok", driver)
"#;
    for driver in ["pytds", "pymssql"] {
        let output = run_python(script, &[&port, SIM_PASSWORD, driver]);
        assert_eq!(output.trim(), format!("ok {driver}"));
    }
}

/// Invariant: a client that goes away with an open transaction loses it, as on SQL Server;
/// nothing of it stays in the table or reaches CDC.
#[tokio::test]
async fn a_dropped_client_rolls_back_its_transaction() {
    let server = SimServer::start();
    let mut setup = connect(&server.client_config()).await.expect("login");
    exec(&mut setup, "CREATE TABLE dbo.t (id int PRIMARY KEY)").await;
    {
        let mut client = connect(&server.client_config()).await.expect("login");
        exec(&mut client, "BEGIN TRAN; INSERT INTO dbo.t VALUES (1)").await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let row = setup.query("SELECT COUNT(*) FROM dbo.t", &[]).await.unwrap().into_row().await.unwrap().unwrap();
        if row.get::<i32, _>(0) == Some(0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the dropped client's row is still there");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
