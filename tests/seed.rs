//! Seeding from a copy (`mssql-cdc seed`): a copy of `dbo.orders` read while the workload runs,
//! written by Python (`deltalake`, `pyarrow`) as a Delta table or a Parquet directory, is
//! published as the stream's snapshot at `as_of`; the stream then goes on from there. The
//! pipeline's end-to-end equalities hold ([`crate::pipeline`]), and `mssql-cdc reconcile`
//! finds silver equal to the table row by row, every column hashed.
//!
//! 5,000 rows and 3,000 changes here; `MSSQL_CDC_SEED_ROWS` and `MSSQL_CDC_SEED_CHANGES` for
//! more.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, NaiveDateTime};
use tiberius::numeric::Numeric;
use mssql_cdc_sim::client::ClientConfig;
use tiberius::Uuid;

use crate::pipeline::{env_u64, Pipeline, Setup, Start};
use crate::support;
use crate::support::source::{controls, exec, max_lsn, purge_up_to_max_lsn, query_rows};

/// Writes the copy: `rows` (JSON, one array per row) as a Delta table or a directory of two
/// Parquet files, with column names in other cases than the table's, GUIDs in lower case, and
/// one column the table does not have. `drop` leaves one captured column out.
const WRITE_COPY: &str = r#"
import sys, json, os, decimal, datetime
import pyarrow as pa
rows_file, kind, out, drop = sys.argv[1:5]
fields = [("ORDER_ID", pa.int64()), ("Customer_Id", pa.int32()), ("status", pa.string()), ("amount", pa.decimal128(18, 2)),
          ("currency", pa.string()), ("note", pa.string()), ("created_at", pa.timestamp("us")), ("updated_at", pa.timestamp("us", tz="UTC")),
          ("is_priority", pa.bool_()), ("ref", pa.string()), ("weight", pa.float32()), ("payload", pa.binary())]
def value(name, v):
    if v is None: return None
    if name == "amount": return decimal.Decimal(v)
    if name in ("created_at", "updated_at"): return datetime.datetime.fromisoformat(v)
    if name == "payload": return bytes.fromhex(v)
    return v
records = []
for row in json.load(open(rows_file)):
    record = {name: value(name, v) for (name, _), v in zip(fields, row)}
    record["exported_at"] = "nightly"
    records.append(record)
schema = pa.schema([f for f in fields if f[0] != drop] + [("exported_at", pa.string())])
for r in records: r.pop(drop, None)
table = pa.Table.from_pylist(records, schema=schema)
if kind == "delta":
    from deltalake import write_deltalake
    write_deltalake(out, table)
else:
    import pyarrow.parquet as pq
    os.makedirs(out)
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), os.path.join(out, "part-0.parquet"))
    pq.write_table(table.slice(half), os.path.join(out, "part-1.parquet"))
print(table.num_rows)
"#;

/// `dbo.orders` over TDS now, every column, as JSON rows for [`WRITE_COPY`].
async fn read_copy(config: &ClientConfig) -> Vec<serde_json::Value> {
    let sql = "SELECT order_id, customer_id, status, amount, currency, note, created_at, updated_at, is_priority, ref, weight, payload FROM dbo.orders";
    query_rows(config, sql)
        .await
        .iter()
        .map(|r| {
            serde_json::json!([
                r.get::<i64, _>(0).unwrap(),
                r.get::<i32, _>(1).unwrap(),
                r.get::<&str, _>(2).unwrap(),
                r.get::<Numeric, _>(3).unwrap().to_string(),
                r.get::<&str, _>(4).unwrap(),
                r.get::<&str, _>(5),
                r.get::<NaiveDateTime, _>(6).unwrap().format("%Y-%m-%dT%H:%M:%S%.6f").to_string(),
                r.get::<DateTime<FixedOffset>, _>(7).map(|t| t.to_rfc3339()),
                r.get::<bool, _>(8).unwrap(),
                r.get::<Uuid, _>(9).map(|u| u.to_string().to_lowercase()),
                r.get::<f32, _>(10),
                r.get::<&[u8], _>(11).map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
            ])
        })
        .collect()
}

/// Writes `rows` as a copy of `kind` (`delta` or `parquet`) at `out`, without column `drop`.
fn write_copy(dir: &Path, rows: &[serde_json::Value], kind: &str, out: &Path, drop: &str) {
    let file = support::write_file(dir, &format!("copy-{kind}-{}.json", rows.len()), &serde_json::to_string(rows).unwrap());
    let written = support::run_python(WRITE_COPY, &[file.to_str().unwrap(), kind, out.to_str().unwrap(), drop]);
    assert_eq!(written.trim(), rows.len().to_string());
}

/// The server's clock in UTC, as `--as-of` takes it.
async fn server_utc(config: &ClientConfig) -> String {
    let rows = query_rows(config, "SELECT SYSUTCDATETIME()").await;
    rows[0].get::<NaiveDateTime, _>(0).unwrap().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// Runs `mssql-cdc seed` and parses the offset it prints (panics unless it exits 0).
fn seed(pipeline: &Pipeline, from: &Path, as_of: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["seed", "--from", from.to_str().unwrap(), "--as-of", as_of];
    args.extend_from_slice(extra);
    let (code, out, err) = pipeline.source_command_output(&args);
    assert_eq!(code, Some(0), "seed failed:\n{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("seed prints its offset as JSON ({e}): {out}"))
}

/// Runs `mssql-cdc seed` expecting it to fail with exit `code`; its standard error.
fn seed_fails(pipeline: &Pipeline, from: &Path, as_of: &str, code: i32) -> String {
    let (found, out, err) = pipeline.source_command_output(&["seed", "--from", from.to_str().unwrap(), "--as-of", as_of]);
    assert_eq!(found, Some(code), "seed should fail with {code}; stdout {out}\nstderr:\n{err}");
    err
}

/// `mssql-cdc reconcile` of the pipeline's silver with every bucket hashed row by row.
fn reconcile_equal(pipeline: &Pipeline) {
    let (silver, source) = (pipeline.silver_file.to_str().unwrap(), pipeline.source_files.1.to_str().unwrap());
    let output = std::process::Command::new(support::bin())
        .args(["reconcile", silver, "--source", source, "--json", "--sample", "1", "--bucket-rows", "500", "--settle-ms", "200"])
        .env(mssql_cdc_sim::client::PASSWORD_ENV, mssql_cdc_sim::client::password_from_env())
        .envs(pipeline.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "reconcile finds silver equal to the table, every column:\n{out}\n{}", String::from_utf8_lossy(&output.stderr));
}

/// A copy taken at `as_of` while the workload runs (so it holds some changes after `as_of`
/// too), seeded, plus the stream from `as_of`, gives silver equal to the table: the pipeline's
/// equalities, and reconcile's row hashes over every column (GUIDs, times, binary, floats read
/// from the copy's own types). A rerun with the same `as_of` changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_seed_from_a_copy_taken_under_the_workload_gives_silver_equal_to_the_table() {
    let rows = env_u64("MSSQL_CDC_SEED_ROWS", 5_000);
    let changes = env_u64("MSSQL_CDC_SEED_CHANGES", 3_000);
    let mut pipeline = Pipeline::start(Setup { start: Start::SinksOnly, preloaded: rows, ..Setup::default() });
    let workload = pipeline.workload(changes, 500, 53);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let config = pipeline.sim.client_config();
    let as_of = server_utc(&config).await;
    // Read after as_of, while the workload goes on.
    let copy_rows = read_copy(&config).await;
    let copy = pipeline.dir.path().join("orders-copy");
    write_copy(pipeline.dir.path(), &copy_rows, "delta", &copy, "");

    let offset = seed(&pipeline, &copy, &as_of, &[]);
    let snapshot = &offset["snapshot"];
    let lsn = snapshot["lsn"].as_str().unwrap().to_owned();
    assert_eq!(offset["position"], snapshot["lsn"], "the stream goes on from as_of: {offset}");
    assert_eq!(snapshot["complete"], true, "{offset}");
    assert_eq!(snapshot["rows_done"], copy_rows.len() as u64, "every row of the copy published: {offset}");
    assert_eq!(snapshot["seed"]["copy"], "delta version 0", "{offset}");
    assert_eq!(snapshot["seed"]["as_of"], as_of.as_str(), "{offset}");
    let published = controls(&pipeline.broker.bootstrap, &pipeline.topic);

    // A rerun with the same as_of publishes nothing.
    let again = seed(&pipeline, &copy, &as_of, &[]);
    assert_eq!((&again["batch_id"], &again["snapshot"]["lsn"]), (&offset["batch_id"], &offset["snapshot"]["lsn"]), "{again}");
    assert_eq!(controls(&pipeline.broker.bootstrap, &pipeline.topic).len(), published.len(), "the rerun published nothing");

    // The stream starts at as_of: the changes up to it reach the log only as the copy's rows.
    assert_eq!(published.first().map(|c| c.from_lsn.to_string()), Some(lsn), "the stream starts at as_of");
    pipeline.start_source();
    let (found, _) = pipeline.catch_up_and_check(workload, Duration::from_secs(changes / 250 + 180)).await;
    let mut events: Vec<&str> = found.events.iter().map(|e| e.1.as_str()).collect();
    events.sort_unstable();
    assert_eq!(events, vec!["bootstrap", "snapshot_open"]);
    reconcile_equal(&pipeline);
}

/// A seed refuses what it cannot do, clearly, before publishing anything: an `as_of` CDC
/// cleanup has passed (as an LSN and as a time), a copy without a captured column, and a
/// second seed of a started stream without `--reseed`. A Parquet copy newer than the stream
/// then reseeds it as a new generation, and silver ends equal to the table.
#[tokio::test(flavor = "multi_thread")]
async fn a_seed_refuses_an_as_of_past_cleanup_and_reseeds_only_with_a_newer_copy() {
    let mut pipeline = Pipeline::start(Setup { start: Start::SinksOnly, preloaded: 600, ..Setup::default() });
    let config = pipeline.sim.client_config();
    exec(&config, "UPDATE dbo.orders SET status = N'early' WHERE order_id <= 20").await;
    let (old_lsn, old_time) = (max_lsn(&config).await, server_utc(&config).await);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    exec(&config, "UPDATE dbo.orders SET status = N'later' WHERE order_id BETWEEN 21 AND 40").await;
    purge_up_to_max_lsn(&config).await;
    let dir = pipeline.dir.path().to_owned();
    let copy = dir.join("copy-1");
    write_copy(&dir, &read_copy(&config).await, "parquet", &copy, "");
    for as_of in [&old_lsn, &old_time] {
        let err = seed_fails(&pipeline, &copy, as_of, 1);
        assert!(err.contains("CDC cleanup has passed as_of") && err.contains("`dbo_orders`"), "{err}");
    }
    let without_note = dir.join("copy-without-note");
    write_copy(&dir, &read_copy(&config).await, "parquet", &without_note, "note");
    let now = max_lsn(&config).await;
    let err = seed_fails(&pipeline, &without_note, &now, 1);
    assert!(err.contains("`note` is not in the copy") && err.contains("--allow-missing-columns"), "{err}");
    assert!(!support::topic_exists(&pipeline.broker.bootstrap, &format!("{}.control", pipeline.topic)) || controls(&pipeline.broker.bootstrap, &pipeline.topic).is_empty(), "nothing published");

    let first = seed(&pipeline, &copy, &now, &[]);
    assert!(first["snapshot"]["seed"]["copy"].as_str().unwrap().starts_with("parquet 2 files"), "{first}");
    let workload = pipeline.workload(400, 200, 59);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let newer_copy = dir.join("copy-2");
    let newer = max_lsn(&config).await;
    write_copy(&dir, &read_copy(&config).await, "parquet", &newer_copy, "");
    let err = seed_fails(&pipeline, &newer_copy, &newer, 1);
    assert!(err.contains("the stream has started") && err.contains("--reseed"), "{err}");
    let reseeded = seed(&pipeline, &newer_copy, &newer, &["--reseed"]);
    assert_eq!(reseeded["generation"], 1, "a reseed starts a new generation: {reseeded}");
    assert_eq!(reseeded["snapshot"]["kind"], "resnapshot", "{reseeded}");
    assert_eq!(reseeded["position"].as_str(), Some(newer.as_str()), "{reseeded}");
    // The changes between the two seeds reach the log only as the second copy's rows.
    pipeline.start_source();
    let (found, _) = pipeline.catch_up_and_check(workload, Duration::from_secs(180)).await;
    assert!(found.events.iter().any(|e| e.1 == "resnapshot"), "silver saw the reseed");
    reconcile_equal(&pipeline);
}
