//! The whole pipeline as separate processes: the simulator serving TDS (`mssql-cdc sim serve`),
//! the broker, a workload driving `dbo.orders` over TDS (`mssql-cdc sim workload`), and the
//! three stages as `mssql-cdc run` processes (the source, the bronze sink, the silver stage),
//! all running at once. Once everything has caught up, one independent reader (Python
//! `deltalake`) reads facts, bronze, the silver control table and silver, and the test checks
//! the end-to-end equalities ([`check_equalities`]):
//!
//! - silver equals `dbo.orders` as the simulator holds it (read over TDS);
//! - bronze equals the change table: every change exactly once, nothing else;
//! - the bronze sink's facts rows tile the LSN range of the control topic without gap or
//!   overlap, and count exactly the rows in bronze.
//!
//! The chaos suite does the same while SIGKILLing random stages over and over. For a soak:
//!
//! ```text
//! MSSQL_CDC_CHAOS_KILLS=200 MSSQL_CDC_CHAOS_CHANGES=60000 cargo test --release --test pipeline the_pipeline_survives
//! ```

mod support;

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mssql_cdc::log::ControlRecord;
use rand::seq::SliceRandom;
use rand::Rng;
use support::pipeline::{bronze_file, silver_file, sink_worker};
use support::source::{controls, query_rows, source_files, truth, wait_caught_up, Coordinates, SourceProcess};
use support::{bin, run_python, unique, SimServer, TestBroker, SIM_PASSWORD};
use tiberius::numeric::Numeric;

/// The bronze sink's `app_id` (its facts rows carry it).
const BRONZE_APP: &str = "orders-bronze-v1";

/// Indexes of the stages in [`Pipeline::stages`].
const SOURCE: usize = 0;
const BRONZE: usize = 1;
const SILVER: usize = 2;

/// How much of a process's stderr goes into a failure message (the tail).
const LOG_TAIL: usize = 12_000;

/// How long the stages get to catch up once the workload is done.
const CATCH_UP: Duration = Duration::from_secs(180);

/// Reads the tables in the order the sinks make them safe to read: facts first (bronze commits
/// a batch's data before its facts row), then bronze, then the silver control table (silver
/// commits its data before the control row), then silver. `mode` is `progress` (facts and
/// control only, for polling) or `full` (everything). Prints one JSON object.
const READ: &str = r#"
import sys, json, decimal
from deltalake import DeltaTable
facts, bronze, control, silver, app_id, mode = sys.argv[1:7]
out = {"errors": []}

def text(v):
    # LSNs as `0x` and upper-case hex, whether stored as text or as bytes.
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        return "0x" + bytes(v).hex().upper()
    return str(v)

def iso(v):
    return v.isoformat() if hasattr(v, "isoformat") else v

try:
    f = DeltaTable(facts).to_pyarrow_table(columns=["app_id", "batch_id", "event", "rows", "start_lsn", "end_lsn"]).to_pylist()
    # One batch-type row per batch: `batch` or `heartbeat`; event rows (data_skipped, ...) aside.
    out["batches"] = [[r["batch_id"], text(r["start_lsn"]), text(r["end_lsn"]), r["rows"]]
                      for r in f if r["app_id"] == app_id and r["event"] in ("batch", "heartbeat")]
except Exception as e:
    out["batches"] = []
    out["errors"].append("facts: %s" % e)

if mode == "full":
    try:
        t = DeltaTable(bronze).to_pyarrow_table(columns=["_start_lsn", "_seqval", "_operation"]).to_pylist()
        out["changes"] = [[text(r["_start_lsn"]), text(r["_seqval"]), r["_operation"]] for r in t]
    except Exception as e:
        out["changes"] = []
        out["errors"].append("bronze: %s" % e)

try:
    c = DeltaTable(control).to_pyarrow_table(columns=["applied_batch", "finalized_until"]).to_pylist()
    out["control"] = [{"applied_batch": r["applied_batch"], "finalized_until": iso(r["finalized_until"])} for r in c]
except Exception as e:
    # Not there before silver's first apply.
    out["control"] = []

if mode == "full":
    try:
        cols = ["order_id", "customer_id", "status", "amount", "currency", "note", "is_priority"]
        rows = DeltaTable(silver).to_pyarrow_table(columns=cols).to_pylist()
        # amount as integer cents: exact, whatever the Decimal's exponent.
        out["rows"] = [[r["order_id"], r["customer_id"], r["status"],
                        None if r["amount"] is None else int(decimal.Decimal(str(r["amount"])).scaleb(2)),
                        r["currency"], r["note"], r["is_priority"]] for r in rows]
    except Exception as e:
        out["rows"] = None
        out["errors"].append("silver: %s" % e)

print(json.dumps(out))
# deltalake's runtime threads can abort the interpreter's teardown; leave at once.
sys.stdout.flush()
import os
os._exit(0)
"#;

/// A row of `dbo.orders`: (order_id, customer_id, status, amount in cents, currency, note,
/// is_priority).
type Order = (i64, i64, String, i128, String, Option<String>, bool);

/// A batch-type facts row of the bronze sink: (batch_id, start_lsn, end_lsn, rows).
type FactsBatch = (i64, String, String, i64);

/// What the Python reader saw.
#[derive(Debug)]
struct Observed {
    /// Tables it could not read.
    errors: Vec<String>,
    /// The bronze sink's batch-type facts rows, in the order read.
    batches: Vec<FactsBatch>,
    /// Bronze's (start_lsn, seqval, operation) (`full` only).
    changes: Vec<Coordinates>,
    /// Silver's control row: the last bronze batch applied (-1 when there is none).
    applied_batch: i64,
    /// Silver's control row: its verdict.
    finalized_until: Option<DateTime<Utc>>,
    /// Silver's rows (`full` only; `None` when unreadable).
    rows: Option<Vec<Order>>,
}

/// Runs [`READ`] on the pipeline's tables in `dir`.
fn observe(dir: &Path, full: bool) -> Observed {
    let path = |name: &str| dir.join(name).display().to_string();
    let mode = if full { "full" } else { "progress" };
    let output = run_python(READ, &[&path("facts"), &path("orders-bronze"), &path("control"), &path("silver"), BRONZE_APP, mode]);
    let value: serde_json::Value = serde_json::from_str(output.trim()).unwrap_or_else(|e| panic!("reader output is JSON ({e}): {output}"));
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_else(|| panic!("text expected: {v}")).to_owned();
    let int = |v: &serde_json::Value| v.as_i64().unwrap_or_else(|| panic!("an integer expected: {v}"));
    let control = value["control"].as_array().unwrap();
    assert!(control.len() <= 1, "one control row for the one silver table: {control:?}");
    Observed {
        errors: value["errors"].as_array().unwrap().iter().map(text).collect(),
        batches: value["batches"].as_array().unwrap().iter().map(|b| (int(&b[0]), text(&b[1]), text(&b[2]), int(&b[3]))).collect(),
        changes: value["changes"].as_array().map(|c| c.iter().map(|c| (text(&c[0]), text(&c[1]), int(&c[2]))).collect()).unwrap_or_default(),
        applied_batch: control.first().and_then(|c| c["applied_batch"].as_i64()).unwrap_or(-1),
        finalized_until: control
            .first()
            .and_then(|c| c["finalized_until"].as_str())
            .map(|t| DateTime::parse_from_rfc3339(t).unwrap_or_else(|e| panic!("finalized_until {t}: {e}")).with_timezone(&Utc)),
        rows: value["rows"].as_array().map(|rows| {
            rows.iter()
                .map(|r| {
                    (
                        int(&r[0]),
                        int(&r[1]),
                        text(&r[2]),
                        i128::from(int(&r[3])),
                        text(&r[4]),
                        r[5].as_str().map(str::to_owned),
                        r[6].as_bool().unwrap_or_else(|| panic!("is_priority is a boolean: {}", r[6])),
                    )
                })
                .collect()
        }),
    }
}

/// An amount as integer cents.
fn cents(amount: Numeric) -> i128 {
    let scale = u32::from(amount.scale());
    if scale <= 2 {
        amount.value() * 10i128.pow(2 - scale)
    } else {
        let divisor = 10i128.pow(scale - 2);
        assert_eq!(amount.value() % divisor, 0, "amount {} has more than 2 decimals", amount.value());
        amount.value() / divisor
    }
}

/// The simulator's `dbo.orders` over TDS.
async fn orders(sim: &SimServer) -> Vec<Order> {
    let rows = query_rows(&sim.client_config(), "SELECT order_id, customer_id, status, amount, currency, note, is_priority FROM dbo.orders").await;
    rows.iter()
        .map(|r| {
            (
                r.get::<i64, _>(0).unwrap(),
                i64::from(r.get::<i32, _>(1).unwrap()),
                r.get::<&str, _>(2).unwrap().to_owned(),
                cents(r.get::<Numeric, _>(3).unwrap()),
                r.get::<&str, _>(4).unwrap().to_owned(),
                r.get::<&str, _>(5).map(str::to_owned),
                r.get::<bool, _>(6).unwrap(),
            )
        })
        .collect()
}

/// Asserts two multisets are equal; on failure names the counts and the first differences
/// rather than printing both in full.
fn assert_same_multiset<T: Ord + Clone + Debug>(what: &str, expected: &[T], found: &[T]) {
    let count = |items: &[T]| {
        let mut counts: BTreeMap<T, i64> = BTreeMap::new();
        for item in items {
            *counts.entry(item.clone()).or_default() += 1;
        }
        counts
    };
    let (want, got) = (count(expected), count(found));
    if want == got {
        return;
    }
    let missing: Vec<_> = want.iter().filter(|(k, n)| got.get(*k).copied().unwrap_or(0) < **n).map(|(k, _)| k).take(10).collect();
    let extra: Vec<_> = got.iter().filter(|(k, n)| want.get(*k).copied().unwrap_or(0) < **n).map(|(k, n)| (k, *n)).take(10).collect();
    panic!("{what}: expected {} items, found {}; first missing: {missing:#?}\nfirst extra or duplicated (with counts): {extra:#?}", expected.len(), found.len());
}

/// The end-to-end equalities, on one [`observe`] read taken after everything caught up:
///
/// - silver equals `orders` (the simulator's table) on every compared column;
/// - bronze holds exactly the changes of `truth` (the change table): nothing missing,
///   nothing extra, nothing twice;
/// - the bronze sink's facts rows tile the LSN range of `controls`: batch ids `0..n` without
///   gap or duplicate, each batch starting where the previous ended, the last ending at the
///   last control record's `to_lsn`, and their row counts summing to bronze's rows.
fn check_equalities(found: &Observed, controls: &[ControlRecord], truth: &[Coordinates], orders: &[Order]) {
    assert!(found.errors.is_empty(), "the reader could read every table: {:?}", found.errors);
    let last = controls.last().expect("the source published control records");

    // Silver = dbo.orders.
    let silver = found.rows.as_deref().expect("silver rows");
    let mut ids: Vec<i64> = silver.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!(ids.len(), before, "silver holds each order_id once");
    assert_same_multiset("silver vs dbo.orders", orders, silver);

    // Bronze = the change history.
    assert_same_multiset("bronze (_start_lsn, _seqval, _operation) vs cdc.dbo_orders_CT", truth, &found.changes);

    // Facts tile the LSN range.
    let mut batches = found.batches.clone();
    batches.sort();
    let ids: Vec<i64> = batches.iter().map(|b| b.0).collect();
    assert_eq!(ids, (0..controls.len() as i64).collect::<Vec<_>>(), "one facts row per batch, ids 0..n without gap or duplicate");
    assert_eq!(batches[0].1, controls[0].from_lsn.to_string(), "batch 0 starts where the stream starts");
    for pair in batches.windows(2) {
        assert_eq!(pair[1].1, pair[0].2, "batch {} starts where batch {} ended", pair[1].0, pair[0].0);
    }
    for (batch, control) in batches.iter().zip(controls) {
        let range = (control.from_lsn.to_string(), control.to_lsn.to_string());
        assert_eq!((batch.1.clone(), batch.2.clone()), range, "batch {} covers its control record's range", batch.0);
    }
    assert_eq!(batches.last().unwrap().2, last.to_lsn.to_string(), "the last batch ends at the last control record's to_lsn");
    let facts_rows: i64 = batches.iter().map(|b| b.3).sum();
    assert_eq!(facts_rows, found.changes.len() as i64, "the facts rows count bronze's rows");
    assert_eq!(facts_rows, controls.iter().map(|c| c.rows as i64).sum::<i64>(), "the facts rows count the control records' rows");

    // Silver applied everything.
    assert!(found.applied_batch >= last.batch_id as i64, "silver applied up to batch {} (at {})", last.batch_id, found.applied_batch);
}

/// The last `limit` bytes of `text` (on a character boundary).
fn tail(text: &str, limit: usize) -> &str {
    let mut start = text.len().saturating_sub(limit);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// One `mssql-cdc run` process of the pipeline, respawnable from its files.
struct Stage {
    name: &'static str,
    worker: PathBuf,
    connector: PathBuf,
    process: SourceProcess,
    /// The stderr tails of earlier incarnations, for failure messages.
    past: String,
    /// SIGKILLs so far.
    kills: u32,
}

impl Stage {
    fn spawn(name: &'static str, worker: PathBuf, connector: PathBuf) -> Self {
        let process = SourceProcess::spawn(&worker, &connector);
        Self { name, worker, connector, process, past: String::new(), kills: 0 }
    }

    /// SIGKILLs the process, keeping the tail of what it logged.
    fn kill(&mut self) {
        self.process.kill();
        self.kills += 1;
        let logged = self.process.stderr();
        self.past.push_str(&format!("[killed, run {}]\n{}\n", self.kills, tail(&logged, LOG_TAIL)));
        let keep = tail(&self.past, LOG_TAIL).to_owned();
        self.past = keep;
    }

    /// Starts it again from the same files.
    fn respawn(&mut self) {
        self.process = SourceProcess::spawn(&self.worker, &self.connector);
    }

    /// Panics if the process exited on its own (a stage must keep running).
    fn assert_alive(&mut self) {
        if let Some(status) = self.process.wait(Duration::from_millis(1)) {
            panic!("the {} stage exited on its own ({status}):\n{}", self.name, self.logs());
        }
    }

    /// Its logs for a failure message.
    fn logs(&self) -> String {
        format!(
            "===== {} (earlier runs, tail) =====\n{}\n===== {} (current run, tail) =====\n{}",
            self.name,
            self.past,
            self.name,
            tail(&self.process.stderr(), LOG_TAIL)
        )
    }
}

/// `mssql-cdc sim workload` against the served simulator, as a child process (killed on drop).
struct WorkloadProcess {
    child: Child,
    log: PathBuf,
}

impl WorkloadProcess {
    /// Starts it with `args` after `--server <addr>`; stdout and stderr go to `dir/<log>`.
    fn spawn(sim: &SimServer, dir: &Path, log: &str, args: &[&str]) -> Self {
        let log = dir.join(log);
        let file = File::create(&log).expect("workload log file");
        let child = Command::new(bin())
            .args(["sim", "workload", "--server", &sim.address.to_string()])
            .args(args)
            .env("MSSQL_CDC_SIM_PASSWORD", SIM_PASSWORD)
            .env("RUST_LOG", "warn")
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("spawn mssql-cdc sim workload");
        Self { child, log }
    }

    /// What it printed.
    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for it to exit successfully within `timeout`.
    fn wait_success(&mut self, timeout: Duration, logs: impl Fn() -> String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "the workload failed ({status}):\n{}\n{}", self.output(), logs());
                return;
            }
            assert!(Instant::now() < deadline, "the workload did not finish within {timeout:?}:\n{}\n{}", self.output(), logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for WorkloadProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The simulator, the broker and the three stages, with `dbo.orders` set up and CDC on.
struct Pipeline {
    // Declared first so the stage processes go before the broker and the simulator.
    stages: Vec<Stage>,
    broker: TestBroker,
    sim: SimServer,
    topic: String,
    dir: tempfile::TempDir,
}

impl Pipeline {
    /// Starts the simulator and the broker, creates `dbo.orders` with CDC (a workload process
    /// with `--setup` and no changes), then starts the source, and once its control topic
    /// exists the bronze sink and the silver stage.
    fn start() -> Self {
        let sim = SimServer::start(&[]);
        let broker = TestBroker::start();
        let dir = tempfile::tempdir().unwrap();
        WorkloadProcess::spawn(&sim, dir.path(), "setup.log", &["--setup", "--changes", "0", "--rate", "0"])
            .wait_success(Duration::from_secs(60), String::new);

        let prefix = unique("e2e");
        let topic = format!("{prefix}.sales.dbo.orders");
        let (worker, connector) = source_files(dir.path(), &broker.bootstrap, &sim, &prefix, "max_commits_per_batch = 50");
        let source = Stage::spawn("source", worker, connector);
        // The sinks follow the control topic: let the source create it first.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !support::topic_exists(&broker.bootstrap, &format!("{topic}.control")) {
            assert!(Instant::now() < deadline, "the source did not create {topic}.control within 60 s:\n{}", source.logs());
            std::thread::sleep(Duration::from_millis(300));
        }
        let sinks = sink_worker(dir.path(), &broker);
        let bronze = Stage::spawn("bronze", sinks.clone(), bronze_file(dir.path(), "orders", &topic, BRONZE_APP, ""));
        let silver = Stage::spawn("silver", sinks, silver_file(dir.path(), 20));
        Self { stages: vec![source, bronze, silver], broker, sim, topic, dir }
    }

    /// The main workload: `changes` changes at `rate` changes/s, concurrently with the stages.
    fn workload(&self, changes: u64, rate: u64, seed: u64) -> WorkloadProcess {
        let (changes, rate, seed) = (changes.to_string(), rate.to_string(), seed.to_string());
        WorkloadProcess::spawn(
            &self.sim,
            self.dir.path(),
            "workload.log",
            &["--changes", &changes, "--rate", &rate, "--seed", &seed, "--max-transaction-size", "10"],
        )
    }

    /// Every stage's logs, for failure messages.
    fn logs(&self) -> String {
        self.stages.iter().map(Stage::logs).collect::<Vec<_>>().join("\n")
    }

    /// Waits for the workload to finish, for the source to publish everything and stop, and
    /// for bronze and silver to reach the last control record; then runs [`check_equalities`]
    /// on one full read.
    async fn catch_up_and_check(&mut self, mut workload: WorkloadProcess, workload_timeout: Duration) {
        workload.wait_success(workload_timeout, || self.logs());
        // The capture job harvests every 100 ms: let it take the last commits into the change
        // table before the maximum LSN is read.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let config = self.sim.client_config();
        wait_caught_up(&self.broker.bootstrap, &self.topic, &config, &self.stages[SOURCE].process, CATCH_UP).await;
        // Stop the source so no heartbeat moves the end while the sinks catch up; SIGTERM is
        // a clean shutdown (exit 0).
        let status = self.stages[SOURCE].process.stop();
        assert!(status.success(), "the source did not exit cleanly on SIGTERM ({status}):\n{}", self.stages[SOURCE].logs());
        let controls = controls(&self.broker.bootstrap, &self.topic);
        let last = controls.last().expect("control records").batch_id as i64;

        let deadline = Instant::now() + CATCH_UP;
        loop {
            self.stages[BRONZE].assert_alive();
            self.stages[SILVER].assert_alive();
            let now = observe(self.dir.path(), false);
            let bronze_at = now.batches.iter().map(|b| b.0).max().unwrap_or(-1);
            if bronze_at >= last && now.applied_batch >= last {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the sinks did not reach batch {last} within {CATCH_UP:?} (bronze at {bronze_at}, silver at {}; {:?}):\n{}\n{}",
                now.applied_batch,
                now.errors,
                self.stages[BRONZE].logs(),
                self.stages[SILVER].logs()
            );
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }

        let truth = truth(&config).await;
        let orders = orders(&self.sim).await;
        assert!(!truth.is_empty() && !orders.is_empty(), "the workload made changes");
        let found = observe(self.dir.path(), true);
        check_equalities(&found, &controls, &truth, &orders);
        for index in [BRONZE, SILVER] {
            let status = self.stages[index].process.stop();
            assert!(status.success(), "the {} stage did not exit cleanly on SIGTERM ({status}):\n{}", self.stages[index].name, self.stages[index].logs());
        }
        eprintln!(
            "pipeline: {} changes in {} batches ({} with rows), {} rows in silver",
            truth.len(),
            controls.len(),
            controls.iter().filter(|c| c.rows > 0).count(),
            orders.len()
        );
    }
}

/// An unsigned number from the environment, else `default`.
fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// End to end: with the workload running concurrently against the served simulator, the
/// source, bronze and silver as separate processes end with silver equal to the source table,
/// bronze equal to the change history (exactly once), and the facts tiling the LSN range of
/// the control topic.
#[tokio::test(flavor = "multi_thread")]
async fn the_whole_pipeline_as_processes_matches_the_simulator() {
    let mut pipeline = Pipeline::start();
    let workload = pipeline.workload(3000, 300, 2);
    pipeline.catch_up_and_check(workload, Duration::from_secs(120)).await;
}

/// Chaos: the same equalities hold when every stage is SIGKILLed many times at random points
/// (each at least 5 times; `MSSQL_CDC_CHAOS_KILLS` in all, default 24) while the workload
/// (`MSSQL_CDC_CHAOS_CHANGES` changes, default 6000) runs, and silver's `finalized_until` and
/// applied position never move back across the kills. Soak with
/// `MSSQL_CDC_CHAOS_KILLS=200 MSSQL_CDC_CHAOS_CHANGES=60000 cargo test --release --test pipeline the_pipeline_survives`.
#[tokio::test(flavor = "multi_thread")]
async fn the_pipeline_survives_sigkills_of_every_stage() {
    const MIN_KILLS_PER_STAGE: u32 = 5;
    let kills = env_u64("MSSQL_CDC_CHAOS_KILLS", 24).max(3 * u64::from(MIN_KILLS_PER_STAGE));
    let changes = env_u64("MSSQL_CDC_CHAOS_CHANGES", 6000).max(1);
    // A kill takes about 0.8 s of downtime plus a 1.15 s pause on average (plus a read after a
    // silver kill): pace the workload to last about as long as the kills.
    let kill_seconds = kills as f64 * 2.2;
    let rate = ((changes as f64 / kill_seconds).ceil() as u64).max(1);
    let workload_timeout = Duration::from_secs_f64(kill_seconds * 3.0 + changes as f64 / rate as f64 * 2.0 + 120.0);

    let mut pipeline = Pipeline::start();
    let workload = pipeline.workload(changes, rate, 3);
    eprintln!("chaos: {kills} kills, {changes} changes at {rate}/s");

    let mut rng = rand::rng();
    let mut previous = observe(pipeline.dir.path(), false);
    let mut done = 0u64;
    let enough = |done: u64, stages: &[Stage]| done >= kills && stages.iter().all(|s| s.kills >= MIN_KILLS_PER_STAGE);
    // Rounds over the three stages in a fresh random order each: every stage is killed about
    // equally often, at random moments.
    while !enough(done, &pipeline.stages) {
        let mut order = [SOURCE, BRONZE, SILVER];
        order.shuffle(&mut rng);
        for index in order {
            if enough(done, &pipeline.stages) {
                break;
            }
            let stage = &mut pipeline.stages[index];
            stage.assert_alive();
            stage.kill();
            done += 1;
            if index == SILVER {
                let now = observe(pipeline.dir.path(), false);
                assert!(
                    now.finalized_until >= previous.finalized_until,
                    "kill {done}: finalized_until moved back from {:?} to {:?}",
                    previous.finalized_until,
                    now.finalized_until
                );
                assert!(now.applied_batch >= previous.applied_batch, "kill {done}: silver's position moved back from {} to {}", previous.applied_batch, now.applied_batch);
                previous = now;
            }
            std::thread::sleep(Duration::from_millis(rng.random_range(100..1500)));
            pipeline.stages[index].respawn();
            std::thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
        }
    }
    eprintln!(
        "chaos: {done} SIGKILLs: {}",
        pipeline.stages.iter().map(|s| format!("{} {}", s.name, s.kills)).collect::<Vec<_>>().join(", ")
    );

    // No more kills: everything catches up and the equalities hold.
    pipeline.catch_up_and_check(workload, workload_timeout).await;
    let last = observe(pipeline.dir.path(), false);
    assert!(last.finalized_until >= previous.finalized_until, "finalized_until moved back after the kills");
}
