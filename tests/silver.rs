//! The `delta-silver` stage end to end: the simulator over TDS, the source, the bronze sink and
//! the silver stage as `mssql-cdc run` processes on the broker process; silver SIGKILLed at
//! random points and aborted between its data commit and its control commit; silver checked
//! against the simulator's table by an independent reader (Python `deltalake`).
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::Rng;
use support::pipeline::{bronze_file, feed, setup_and_load, silver_file, sink_worker};
use support::source::{controls, query_rows, wait_caught_up};
use support::{run_python, spawn_stage, SimServer, TestBroker};

/// Silver's rows (order_id, customer_id, status) and the control row, as JSON.
const READ: &str = r#"
import sys, json
from deltalake import DeltaTable
silver, control = sys.argv[1:3]
out = {}
try:
    c = DeltaTable(control).to_pyarrow_table().to_pylist()
    out["control"] = [{k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in r.items()} for r in c]
except Exception as e:
    out["control"] = []
# Silver after control: the stage commits silver before the control row, so the position read
# first is in the silver read that follows.
try:
    table = DeltaTable(silver)
    if "deletionVectors" in (table.protocol().reader_features or []):
        from deltalake import QueryBuilder
        out["deletion_vectors"] = True
        import pyarrow
        rows = pyarrow.table(QueryBuilder().register("silver", table).execute("SELECT order_id, customer_id, status FROM silver").read_all()).to_pylist()
    else:
        rows = table.to_pyarrow_table(columns=["order_id", "customer_id", "status"]).to_pylist()
    out["rows"] = sorted([r["order_id"], r["customer_id"], r["status"]] for r in rows)
except Exception as e:
    out["rows"] = None
print(json.dumps(out))
"#;

struct Read {
    rows: Option<Vec<(i64, i64, String)>>,
    /// Whether silver has the `deletionVectors` feature (read by deltalake's engine then).
    deletion_vectors: bool,
    applied_batch: i64,
    finalized_until: Option<DateTime<Utc>>,
    end_commit_ts: Option<DateTime<Utc>>,
}

fn read(dir: &Path) -> Read {
    let output = run_python(READ, &[dir.join("silver").to_str().unwrap(), dir.join("control").to_str().unwrap()]);
    let value: serde_json::Value = serde_json::from_str(output.trim()).unwrap();
    let rows = value["rows"].as_array().map(|rows| rows.iter().map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap(), r[2].as_str().unwrap().to_owned())).collect());
    let control = value["control"].as_array().unwrap();
    assert!(control.len() <= 1, "one control row per silver table: {control:?}");
    let ts = |k: &str| control.first().and_then(|c| c[k].as_str()).map(|t| DateTime::parse_from_rfc3339(t).unwrap().with_timezone(&Utc));
    Read {
        rows,
        deletion_vectors: value["deletion_vectors"].as_bool().unwrap_or(false),
        applied_batch: control.first().and_then(|c| c["applied_batch"].as_i64()).unwrap_or(-1),
        finalized_until: ts("finalized_until"),
        end_commit_ts: ts("end_commit_ts"),
    }
}

/// The simulator's `dbo.orders`: (order_id, customer_id, status), sorted.
async fn orders(sim: &SimServer) -> Vec<(i64, i64, String)> {
    let rows = query_rows(&sim.client_config(), "SELECT order_id, customer_id, status FROM dbo.orders").await;
    let mut rows: Vec<_> = rows.iter().map(|r| (r.get::<i64, _>(0).unwrap(), i64::from(r.get::<i32, _>(1).unwrap()), r.get::<&str, _>(2).unwrap().to_owned())).collect();
    rows.sort();
    rows
}

/// Invariants 3, 4 and 5 for silver: under SIGKILLs at random points (while bronze is still
/// being written) and an abort between the silver commit and the control commit, silver ends
/// equal to the simulator's table; after every restart `finalized_until` has not decreased
/// and is not past the data applied.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "fault-injection"), ignore = "its fault point needs a build with --features fault-injection (scripts/test.sh)")]
async fn silver_equals_the_source_table_under_kills() {
    silver_under_kills("", "MSSQL_CDC_FAULT_ABORT_AFTER_SILVER_COMMIT").await;
}

/// The same with `deletion_vectors = true`: the abort between the silver commit and the
/// control commit, and the kills, land on MERGEs by deletion vectors.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "fault-injection"), ignore = "its fault point needs a build with --features fault-injection (scripts/test.sh)")]
async fn silver_by_deletion_vectors_equals_the_source_table_under_kills() {
    silver_under_kills("deletion_vectors = true", "MSSQL_CDC_FAULT_ABORT_AFTER_SILVER_COMMIT").await;
}

/// The same for batches larger than `max_rows_per_apply`, applied in slices of keys: an abort
/// after one slice's commit, before the next, and the kills, land between slices; silver
/// still ends equal to the source table, its verdict never moving back or past the data.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "fault-injection"), ignore = "its fault point needs a build with --features fault-injection (scripts/test.sh)")]
async fn silver_applied_in_slices_equals_the_source_table_under_kills() {
    silver_under_kills("max_rows_per_apply = 32", "MSSQL_CDC_FAULT_ABORT_AFTER_SILVER_SLICE").await;
}

/// `extra`: silver's extra settings; `fault`: the fault point's variable, armed for batch 5.
async fn silver_under_kills(extra: &str, fault: &str) {
    let broker = TestBroker::start().unwrap();
    let sim = SimServer::start(&[]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (topic, _) = feed(&broker, &sim, dir.path(), 1500).await;
    // The source again (it resumes from its control topic), for the changes made later.
    let mut source = spawn_stage(&dir.path().join("worker.toml"), &dir.path().join("source.toml"), &[]);
    let worker = sink_worker(dir.path(), &broker);
    let bronze = spawn_stage(&worker, &bronze_file(dir.path(), "orders", &topic, "orders-bronze-v1", ""), &[]);
    let connector = silver_file(dir.path(), 4, extra);

    // A deterministic crash between a silver commit and its control commit (or the next slice).
    let mut crashing = spawn_stage(&worker, &connector, &[(fault, "5")]);
    let status = crashing.process().wait(Duration::from_secs(120)).unwrap_or_else(|| panic!("silver did not abort at the fault point; stderr:\n{}", crashing.log()));
    assert!(!status.success() && crashing.log().contains("fault injection: aborting"), "silver stops at its fault point:\n{}", crashing.log());
    let mut previous = read(dir.path());
    let mut rng = rand::rng();
    for kill in 0..8 {
        if kill == 3 {
            // More changes while silver is being killed.
            setup_and_load(&sim, 400, 2);
        }
        let mut silver = spawn_stage(&worker, &connector, &[]);
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1500)));
        silver.kill();
        let now = read(dir.path());
        assert!(now.finalized_until >= previous.finalized_until, "kill {kill}: finalized_until moved back");
        assert!(now.applied_batch >= previous.applied_batch, "kill {kill}: the position moved back");
        if let Some(verdict) = now.finalized_until {
            assert!(now.end_commit_ts.is_some_and(|end| verdict <= end), "kill {kill}: verdict {verdict} past the data ({:?})", now.end_commit_ts);
        }
        previous = now;
    }

    // Let everything catch up, then silver equals the source table.
    wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(120)).await;
    source.stop();
    let last = controls(&broker.bootstrap, &topic).last().unwrap().batch_id as i64;
    let silver = spawn_stage(&worker, &connector, &[]);
    let deadline = Instant::now() + Duration::from_secs(180);
    let found = loop {
        let found = read(dir.path());
        if found.applied_batch >= last {
            break found;
        }
        assert!(Instant::now() < deadline, "silver did not reach batch {last} (at {}); silver:\n{}\nbronze:\n{}", found.applied_batch, silver.log(), bronze.log());
        std::thread::sleep(Duration::from_millis(1000));
    };
    let expected = orders(&sim).await;
    assert!(!expected.is_empty());
    assert_eq!(found.rows.as_deref(), Some(&expected[..]), "silver equals dbo.orders");
    assert_eq!(found.deletion_vectors, extra.contains("deletion_vectors = true"), "silver's deletionVectors feature as configured");
    assert!(found.finalized_until >= previous.finalized_until);
    drop(silver);

    // The verdict from the command line: is-final answers by exit code at the boundary.
    let verdict = found.finalized_until.expect("a verdict after the catch-up");
    let table = dir.path().join("silver");
    let control = dir.path().join("control");
    let is_final = |at: DateTime<Utc>| {
        let output = std::process::Command::new(support::bin())
            .args(["is-final", table.to_str().unwrap(), &at.to_rfc3339(), "--control-table", control.to_str().unwrap()])
            .output()
            .unwrap();
        output.status.code()
    };
    assert_eq!(is_final(verdict), Some(0), "a period ending at finalized_until is final");
    assert_eq!(is_final(verdict + chrono::Duration::seconds(1)), Some(1), "a period ending after it is not");
    let freshness = std::process::Command::new(support::bin()).args(["freshness", table.to_str().unwrap(), "--control-table", control.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&freshness.stdout);
    assert!(freshness.status.success() && text.contains(&verdict.to_rfc3339()), "{text}");
    // One more pass has nothing to apply.
    let apply = std::process::Command::new(support::bin()).args(["apply", connector.to_str().unwrap()]).output().unwrap();
    let text = String::from_utf8_lossy(&apply.stdout);
    assert!(apply.status.success() && text.starts_with("applied 0 batches"), "{text}{}", String::from_utf8_lossy(&apply.stderr));
}
