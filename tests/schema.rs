//! Schema changes (`docs/schema-changes.md`): DDL on a captured table while a workload runs,
//! through the three stages as processes, checked by independent readers (Python `deltalake`
//! for the tables, the change table over TDS for the truth).
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use mssql_cdc_core::log::control::Event;
use mssql_cdc_core::log::schema::ColumnType;
use mssql_cdc_core::log::ControlRecord;
use mssql_cdc_sim::client::BlockingClient;
use mssql_cdc_sim::workload::SqlClient;
use mssql_cdc_testkit::files::{bronze_toml, silver_toml, source_toml, worker_toml};

use crate::support::pipeline::Lake;
use crate::support::source::{controls, exec, query_rows, read_all, wait_caught_up};
use crate::support::{run_python, spawn_stage, unique, write_file, SimServer, StageProcess, TestBroker};

/// Exit code of `mssql-cdc run` when a stage stopped on a schema change.
const EXIT_SCHEMA_CHANGED: i32 = 3;

/// Reads silver's rows and column types, bronze's change coordinates and column types, and the
/// schema_change facts rows' details. Prints one JSON object.
const READ: &str = r#"
import sys, json
from deltalake import DeltaTable
silver, bronze, facts = sys.argv[1:4]
def text(v):
    # LSNs as `0x` and upper-case hex, whether stored as text or as bytes.
    if v is None or isinstance(v, str):
        return v
    return "0x" + bytes(v).hex().upper()
s = DeltaTable(silver).to_pyarrow_table()
b = DeltaTable(bronze).to_pyarrow_table()
f = DeltaTable(facts).to_pyarrow_table(columns=["app_id", "batch_id", "event", "detail"]).to_pylist()
out = {
    "silver_types": {field.name: str(field.type) for field in s.schema},
    "silver": [[r["id"], r["qty"], r["label"], r.get("note"), r.get("region")] for r in s.to_pylist()],
    "bronze_types": {field.name: str(field.type) for field in b.schema},
    "bronze": [[text(r["_start_lsn"]), text(r["_seqval"]), r["_operation"]] for r in b.select(["_start_lsn", "_seqval", "_operation"]).to_pylist()],
    "schema_changes": sorted([[r["batch_id"], json.loads(r["detail"])] for r in f if r["event"] == "schema_change" and r["app_id"] == "items-bronze"], key=lambda r: (r[0], r[1]["ddl_lsn"])),
}
print(json.dumps(out))
"#;

/// `dbo.items` with CDC on (capture instance `dbo_items`), the broker, and the stages' files.
struct Items {
    sim: SimServer,
    broker: TestBroker,
    dir: tempfile::TempDir,
    lake: Lake,
    topic: String,
    worker: PathBuf,
    prefix: String,
}

impl Items {
    async fn start(qty_type: &str) -> Self {
        let sim = SimServer::start(&[]).unwrap();
        let broker = TestBroker::start().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let lake = Lake::local(dir.path());
        let prefix = unique("schema");
        let topic = format!("{prefix}.sales.dbo.items");
        let worker = write_file(dir.path(), "worker.toml", &worker_toml(&broker.bootstrap, ""));
        exec(
            &sim.client_config(),
            &format!(
                "CREATE TABLE dbo.items (id int NOT NULL PRIMARY KEY, qty {qty_type} NOT NULL, label nvarchar(40) NULL, note nvarchar(100) NULL);
                 EXEC sys.sp_cdc_enable_db;
                 EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'items', @role_name = NULL, @capture_instance = N'dbo_items';"
            ),
        )
        .await;
        Self { sim, broker, dir, lake, topic, worker, prefix }
    }

    /// A source connector file for `dbo_items` with `extra` options, written as `name`.
    fn source_file(&self, name: &str, extra: &str) -> PathBuf {
        let text = source_toml("items-source", self.sim.address.port(), &self.prefix, &format!("max_commits_per_batch = 20\n{extra}")).replace("[\"dbo_orders\"]", "[\"dbo_items\"]");
        write_file(self.dir.path(), name, &text)
    }

    fn source(&self, file: &str, extra: &str) -> StageProcess {
        let connector = self.source_file(file, extra);
        spawn_stage(&self.worker, &connector, &[])
    }

    /// The source (with `extra` options) once it made its control topic, the sinks, and a
    /// workload that has run a while; then `ADD region`, the workload writing it (phase 1).
    async fn run(&self, extra: &str, seed: u64) -> (StageProcess, Vec<StageProcess>, Workload) {
        let source = self.source("source.toml", extra);
        mssql_cdc_testkit::kafka::wait_for_topic(&self.broker.kafka(), &format!("{}.control", self.topic), Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}:\n{}", source.logs()));
        let sinks = self.sinks();
        let workload = Workload::start(&self.sim, seed);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        exec(&self.sim.client_config(), "ALTER TABLE dbo.items ADD region nvarchar(20) NULL").await;
        workload.enter(1).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        (source, sinks, workload)
    }

    fn sinks(&self) -> Vec<StageProcess> {
        let bronze = write_file(self.dir.path(), "bronze.toml", &bronze_toml("items", &self.topic, "items-bronze", &self.lake, ""));
        let silver = write_file(self.dir.path(), "silver.toml", &silver_toml("items-silver", "items-bronze", "items-silver", &self.lake, ""));
        vec![spawn_stage(&self.worker, &bronze, &[]), spawn_stage(&self.worker, &silver, &[])]
    }

    /// The change table's coordinates over TDS.
    async fn truth(&self) -> Vec<(String, String, i64)> {
        let mut truth: Vec<_> = self.change_rows("dbo_items").await.into_iter().map(|(c, _)| c).collect();
        truth.sort();
        truth
    }

    /// The `ddl_lsn`s of `cdc.ddl_history` over TDS, in order.
    async fn ddl_lsns(&self) -> Vec<String> {
        let rows = query_rows(&self.sim.client_config(), "SELECT ddl_lsn FROM cdc.ddl_history ORDER BY ddl_lsn").await;
        rows.iter().map(|r| mssql_cdc_testkit::sql::hex(r.get::<&[u8], _>(0).unwrap())).collect()
    }

    /// `(start_lsn, seqval, operation, id)` of a change table over TDS.
    async fn change_rows(&self, instance: &str) -> Vec<((String, String, i64), i64)> {
        let rows = query_rows(&self.sim.client_config(), &format!("SELECT __$start_lsn, __$seqval, __$operation, id FROM cdc.{instance}_CT")).await;
        let hex = mssql_cdc_testkit::sql::hex;
        rows.iter().map(|r| ((hex(r.get::<&[u8], _>(0).unwrap()), hex(r.get::<&[u8], _>(1).unwrap()), i64::from(r.get::<i32, _>(2).unwrap())), i64::from(r.get::<i32, _>(3).unwrap()))).collect()
    }

    /// The control records once the source, still running, reached the server's maximum LSN.
    async fn caught_up(&self, source: &mut StageProcess) -> Vec<ControlRecord> {
        let records = wait_caught_up(&self.broker.bootstrap, &self.topic, &self.sim.client_config(), source, Duration::from_secs(120)).await;
        if let Err(error) = source.process().alive() {
            panic!("the source stopped: {error}\n{}", source.logs());
        }
        records
    }

    /// Waits until the control records hold `n` events named `event` (the source keeps up
    /// with the DDL, so that each DDL's event reports what that DDL did).
    async fn wait_events(&self, event: &str, n: usize, source: &StageProcess) -> Vec<ControlRecord> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let records = controls(&self.broker.bootstrap, &self.topic);
            if records.iter().flat_map(|c| &c.events).filter(|e| e.name() == event).count() >= n {
                return records;
            }
            assert!(Instant::now() < deadline, "no {n} `{event}` events in time:\n{}", source.logs());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits for silver to apply batch `last`, the sinks staying up; then reads the tables.
    async fn read_when_applied(&self, sinks: &mut [StageProcess], last: i64) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            for sink in sinks.iter_mut() {
                if let Err(error) = sink.process().alive() {
                    panic!("the {} stage stopped: {error}\n{}", sink.name(), sink.logs());
                }
            }
            let applied = run_python(
                "import sys\nfrom deltalake import DeltaTable\ntry:\n    print(max(r['applied_batch'] for r in DeltaTable(sys.argv[1]).to_pyarrow_table(columns=['applied_batch']).to_pylist()))\nexcept Exception:\n    print(-1)\n",
                &[&self.lake.table("control")],
            );
            if applied.trim().parse::<i64>().unwrap_or(-1) >= last {
                return self.read();
            }
            assert!(Instant::now() < deadline, "silver did not apply batch {last} in time:\n{}\n{}", sinks[0].logs(), sinks[1].logs());
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
    }

    /// `(id, qty, label)` of `dbo.items` over TDS, by id.
    async fn table(&self) -> Vec<(i64, i64, Option<String>)> {
        let rows = query_rows(&self.sim.client_config(), "SELECT id, CAST(qty AS bigint), label FROM dbo.items").await;
        let mut rows: Vec<_> = rows.iter().map(|r| (i64::from(r.get::<i32, _>(0).unwrap()), r.get::<i64, _>(1).unwrap(), r.get::<&str, _>(2).map(str::to_owned))).collect();
        rows.sort();
        rows
    }

    fn read(&self) -> serde_json::Value {
        let output = run_python(READ, &[&self.lake.table("silver"), &self.lake.table("items-bronze"), &self.lake.table("facts")]);
        serde_json::from_str(output.trim()).unwrap_or_else(|e| panic!("reader output is JSON ({e}): {output}"))
    }
}

/// DML on `dbo.items` from a thread of its own, shaped by the phase the test sets: inserts,
/// updates and deletes at about 100 statements/s; after phase 1 rows carry `region`, after
/// phase 2 quantities beyond `int`, after phase 3 labels beyond 40 characters, from phase 4 on
/// no `note` (phase 5: after it was dropped). `seen` acknowledges the phase each statement ran
/// in.
struct Workload {
    phase: Arc<AtomicU8>,
    seen: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    /// Ids written (inserted or updated) from phase 5 on.
    after_drop: Arc<Mutex<BTreeSet<i64>>>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl Workload {
    fn start(sim: &SimServer, seed: u64) -> Self {
        let (phase, seen, stop, after_drop) = (Arc::new(AtomicU8::new(0)), Arc::new(AtomicU8::new(0)), Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(BTreeSet::new())));
        let config = sim.client_config();
        let (p, s, halt, touched) = (phase.clone(), seen.clone(), stop.clone(), after_drop.clone());
        let handle = std::thread::spawn(move || {
            let mut client = BlockingClient::connect(&config).expect("login");
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let (mut next_id, mut statements) = (1i64, 0u64);
            while !halt.load(Ordering::SeqCst) {
                let phase = p.load(Ordering::SeqCst);
                let qty: i64 = if phase >= 2 && rng.random_bool(0.5) { rng.random_range(3_000_000_000..9_000_000_000) } else { rng.random_range(0..1000) };
                let label = if phase >= 3 && rng.random_bool(0.5) { "L".repeat(rng.random_range(41..180)) } else { format!("l{}", rng.random_range(0..100)) };
                let existing = (next_id > 1).then(|| rng.random_range(1..next_id));
                let choice = rng.random_range(0..10);
                let (sql, id) = match (choice, existing) {
                    (0..=5, _) | (_, None) => {
                        let id = next_id;
                        next_id += 1;
                        let mut columns = vec!["id", "qty", "label"];
                        let mut values = vec![id.to_string(), qty.to_string(), format!("N'{label}'")];
                        if phase < 4 {
                            columns.push("note");
                            values.push(format!("N'n{id}'"));
                        }
                        if phase >= 1 {
                            columns.push("region");
                            values.push(format!("N'r{}'", id % 5));
                        }
                        (format!("INSERT INTO dbo.items ({}) VALUES ({})", columns.join(", "), values.join(", ")), Some(id))
                    }
                    (6..=8, Some(id)) => (format!("UPDATE dbo.items SET qty = {qty}, label = N'{label}' WHERE id = {id}"), Some(id)),
                    (_, Some(id)) => (format!("DELETE FROM dbo.items WHERE id = {id}"), None),
                };
                client.execute(&sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}"));
                if phase >= 5
                    && let Some(id) = id
                {
                    touched.lock().unwrap().insert(id);
                }
                s.store(phase, Ordering::SeqCst);
                statements += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            statements
        });
        Self { phase, seen, stop, after_drop, handle: Some(handle) }
    }

    /// Moves to `phase` and waits until a statement ran in it.
    async fn enter(&self, phase: u8) {
        self.phase.store(phase, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.seen.load(Ordering::SeqCst) != phase {
            assert!(Instant::now() < deadline, "the workload did not reach phase {phase}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn finish(mut self) -> (u64, BTreeSet<i64>) {
        self.stop.store(true, Ordering::SeqCst);
        let statements = self.handle.take().unwrap().join().expect("the workload ran every statement");
        (statements, self.after_drop.lock().unwrap().clone())
    }
}

/// Bronze's `(start_lsn, seqval, operation)` as the reader saw them, sorted.
fn bronze_coordinates(found: &serde_json::Value) -> Vec<(String, String, i64)> {
    let mut rows: Vec<_> = found["bronze"].as_array().unwrap().iter().map(|r| (r[0].as_str().unwrap().to_owned(), r[1].as_str().unwrap().to_owned(), r[2].as_i64().unwrap())).collect();
    rows.sort();
    rows
}

/// The `schema_change` events of the control records, with their batches.
fn schema_changes(controls: &[ControlRecord]) -> Vec<(&ControlRecord, &mssql_cdc_core::log::control::SchemaChange)> {
    controls
        .iter()
        .flat_map(|c| {
            c.events.iter().filter_map(move |e| match e {
                Event::SchemaChange(change) => Some((c, change)),
                _ => None,
            })
        })
        .collect()
}

/// Under a running workload: a column added, `int → bigint` and `nvarchar(40) →
/// nvarchar(200)` widened, a column dropped. The stream goes on past each (classify): each DDL
/// ends its batch and is one `schema_change` event and facts row saying what it did; the log's
/// schema version changes once, at the widening, with the column's new type; bronze and silver
/// take the wider type and values only it holds; silver keeps the dropped column, NULL on rows
/// written after the drop; silver equals the table over TDS and bronze holds every change of
/// the change table once.
#[tokio::test(flavor = "multi_thread")]
async fn ddl_under_a_running_workload_flows_through_to_silver() {
    let items = Items::start("int").await;
    let (mut source, mut sinks, workload) = items.run("", 7).await;
    let config = items.sim.client_config();
    let pause = || tokio::time::sleep(Duration::from_millis(1500));
    items.wait_events("schema_change", 1, &source).await;
    exec(&config, "ALTER TABLE dbo.items ALTER COLUMN qty bigint NOT NULL").await;
    workload.enter(2).await;
    items.wait_events("schema_change", 2, &source).await;
    pause().await;
    exec(&config, "ALTER TABLE dbo.items ALTER COLUMN label nvarchar(200) NULL").await;
    workload.enter(3).await;
    items.wait_events("schema_change", 3, &source).await;
    pause().await;
    workload.enter(4).await;
    exec(&config, "ALTER TABLE dbo.items DROP COLUMN note").await;
    workload.enter(5).await;
    pause().await;
    let (statements, after_drop) = workload.finish();
    assert!(statements > 100, "the workload ran ({statements} statements)");

    let controls = items.caught_up(&mut source).await;
    let last = controls.last().unwrap().batch_id as i64;

    // The log: four schema_change events, each ending its batch, saying what the DDL did.
    let changes = schema_changes(&controls);
    let commands: Vec<&str> = changes.iter().map(|(_, c)| c.command.as_str()).collect();
    assert_eq!(changes.len(), 4, "one event per DDL: {commands:?}");
    for (control, change) in &changes {
        assert_eq!(control.to_lsn, change.ddl_lsn, "the batch carrying `{}` ends with it", change.command);
    }
    let (add, qty, label, drop) = (changes[0].1, changes[1].1, changes[2].1, changes[3].1);
    assert!(add.command.contains("ADD region") && add.widened.is_empty() && add.not_captured == ["region"], "{add:?}");
    assert!(qty.required_column_update && qty.widened.len() == 1 && qty.widened[0].column == "qty", "{qty:?}");
    assert_eq!((qty.widened[0].from, qty.widened[0].to), (ColumnType::Int32, ColumnType::Int64));
    assert!(label.required_column_update && label.widened.is_empty(), "nvarchar(40) -> nvarchar(200) is the same log type: {label:?}");
    assert!(drop.command.contains("DROP COLUMN note") && drop.dropped == ["note"], "{drop:?}");
    let versions: Vec<u64> = controls.iter().map(|c| c.schema_version).collect();
    let switches: Vec<usize> = (1..versions.len()).filter(|i| versions[*i] != versions[i - 1]).collect();
    assert_eq!(switches.len(), 1, "the schema version changes once, at the widening: {switches:?}");
    let widened_at = &controls[switches[0]];
    assert!(schema_changes(std::slice::from_ref(widened_at)).iter().any(|(_, c)| c.ddl_lsn == qty.ddl_lsn), "the new version starts with the widening's batch");
    assert_eq!(widened_at.schema.columns.iter().find(|c| c.name == "qty").unwrap().ty, ColumnType::Int64);

    // The sinks catch up.
    let found = items.read_when_applied(&mut sinks, last).await;

    // Bronze: every change once, `qty` widened.
    let bronze = bronze_coordinates(&found);
    assert_eq!(bronze, items.truth().await, "bronze holds every change of cdc.dbo_items_CT once");
    assert_eq!(found["bronze_types"]["qty"], "int64", "bronze widened qty");

    // Silver: equal to the table on the columns the log carries; the dropped column kept.
    assert_eq!(found["silver_types"]["qty"], "int64", "silver widened qty");
    assert!(found["silver_types"].get("region").is_none(), "region is not captured by dbo_items: {}", found["silver_types"]);
    assert!(found["silver_types"].get("note").is_some(), "silver keeps the dropped column");
    let silver = found["silver"].as_array().unwrap();
    let mut rows: Vec<(i64, i64, Option<String>)> = silver.iter().map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap(), r[2].as_str().map(str::to_owned))).collect();
    rows.sort();
    let table = items.table().await;
    assert!(table.iter().any(|r| r.1 > i64::from(i32::MAX)), "the workload wrote quantities beyond int");
    assert!(table.iter().any(|r| r.2.as_ref().is_some_and(|l| l.len() > 40)), "the workload wrote labels beyond 40 characters");
    assert_eq!(rows, table, "silver equals dbo.items over TDS on id, qty, label");
    let after: Vec<&serde_json::Value> = silver.iter().filter(|r| after_drop.contains(&r[0].as_i64().unwrap())).collect();
    assert!(!after.is_empty() && after.iter().all(|r| r[3].is_null()), "rows written after the drop read NULL in note");
    assert!(silver.iter().any(|r| !r[3].is_null()), "rows untouched since the drop keep their note");

    // Facts: one schema_change row per event, with its detail.
    let facts = found["schema_changes"].as_array().unwrap();
    let facts_lsns: Vec<&str> = facts.iter().map(|f| f[1]["ddl_lsn"].as_str().unwrap()).collect();
    let lsns: Vec<String> = changes.iter().map(|(_, c)| c.ddl_lsn.to_string()).collect();
    assert_eq!(facts_lsns, lsns, "one schema_change facts row of the bronze sink per event");
    assert!(facts.iter().any(|f| f[1]["widened"][0]["column"] == "qty"), "the facts detail names the widened column");

    stop_all(sinks.iter_mut().chain([&mut source]));
}

/// Stops every stage with SIGTERM: each exits cleanly.
fn stop_all<'a>(stages: impl Iterator<Item = &'a mut StageProcess>) {
    for stage in stages {
        assert!(stage.stop().is_some_and(|s| s.success()), "{} exits cleanly:\n{}", stage.name(), stage.logs());
    }
}

/// Runs `mssql-cdc run` with a source file until it exits on its own: its exit code and logs.
fn run_until_exit(items: &Items, file: &str, extra: &str) -> (Option<i32>, String) {
    let mut source = items.source(file, extra);
    let status = source.process().wait(Duration::from_secs(60));
    let logs = source.logs();
    assert!(status.is_some(), "the source kept running:\n{logs}");
    (status.and_then(|s| s.code()), logs)
}

/// `schema_change_policy = "fail"` publishes the changes before the first DDL, then stops with
/// the schema-changed exit code naming the DDL; a restart with `classify` goes past it, with
/// the `schema_change` event.
#[tokio::test(flavor = "multi_thread")]
async fn fail_stops_on_the_first_ddl_and_classify_goes_past_it() {
    let items = Items::start("int").await;
    let config = items.sim.client_config();
    exec(&config, "INSERT INTO dbo.items (id, qty, label) VALUES (1, 1, N'a'); INSERT INTO dbo.items (id, qty, label) VALUES (2, 2, N'b')").await;
    exec(&config, "ALTER TABLE dbo.items ADD region nvarchar(20) NULL").await;
    exec(&config, "INSERT INTO dbo.items (id, qty, label, region) VALUES (3, 3, N'c', N'x')").await;
    let ddl_lsn = items.ddl_lsns().await.remove(0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, logs) = run_until_exit(&items, "fail.toml", "schema_change_policy = \"fail\"");
    assert_eq!(code, Some(EXIT_SCHEMA_CHANGED), "the schema-changed exit code:\n{logs}");
    assert!(logs.contains("ADD region") && logs.contains(&ddl_lsn) && logs.contains("schema_change_policy"), "the stop names the DDL, its LSN and the policy:\n{logs}");
    let before = controls(&items.broker.bootstrap, &items.topic);
    assert!(before.iter().all(|c| c.to_lsn.to_string() < ddl_lsn), "nothing at or past the DDL was published");
    assert_eq!(before.iter().map(|c| c.rows).sum::<u64>(), 2, "the two inserts before the DDL were published");
    // Stopped again on a restart with `fail`: the batch holds the same DDL.
    let (again, _) = run_until_exit(&items, "fail.toml", "schema_change_policy = \"fail\"");
    assert_eq!(again, Some(EXIT_SCHEMA_CHANGED));

    let mut source = items.source("classify.toml", "");
    let controls = wait_caught_up(&items.broker.bootstrap, &items.topic, &config, &source, Duration::from_secs(60)).await;
    let changes = schema_changes(&controls);
    assert_eq!(changes.len(), 1, "classify publishes the DDL as one event");
    assert_eq!(changes[0].1.ddl_lsn.to_string(), ddl_lsn);
    assert_eq!(controls.iter().map(|c| c.rows).sum::<u64>(), 3, "every insert published once");
    assert!(source.stop().is_some_and(|s| s.success()), "{}", source.logs());
}

/// A DDL inside a backlog read in batches cut at 20 commits, each next batch planned ahead on
/// the stream's second connection: a plan that would reach the DDL is refused, so the batch
/// carrying the DDL still ends with it; the batches tile the range, and every insert is
/// published once.
#[tokio::test(flavor = "multi_thread")]
async fn a_ddl_inside_a_backlog_ends_its_batch_when_batches_are_planned_ahead() {
    let items = Items::start("int").await;
    let config = items.sim.client_config();
    let inserts = |ids: std::ops::Range<u32>| ids.map(|i| format!("INSERT INTO dbo.items (id, qty, label) VALUES ({i}, {i}, N'a');")).collect::<String>();
    exec(&config, &inserts(1..151)).await;
    exec(&config, "ALTER TABLE dbo.items ADD region nvarchar(20) NULL").await;
    exec(&config, &inserts(151..301)).await;
    let ddl_lsn = items.ddl_lsns().await.remove(0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut source = items.source("source.toml", "");
    let controls = wait_caught_up(&items.broker.bootstrap, &items.topic, &config, &source, Duration::from_secs(60)).await;
    let scraped = source.scrape().unwrap_or_default();
    let ahead = mssql_cdc_testkit::metrics::sum(&scraped, "mssql_cdc_source_batches_planned_ahead_total").unwrap_or(0.0);
    assert!(ahead >= 5.0, "batches were planned ahead ({ahead}):\n{scraped}");
    let changes = schema_changes(&controls);
    assert_eq!(changes.len(), 1, "one event for the DDL");
    assert_eq!(changes[0].0.to_lsn.to_string(), ddl_lsn, "the batch carrying the DDL ends with it");
    assert!(controls.windows(2).all(|w| w[1].from_lsn == w[0].to_lsn), "the batches tile the range");
    assert!(controls.iter().all(|c| c.commits <= 20), "no batch above max_commits_per_batch");
    assert_eq!(controls.iter().map(|c| c.rows).sum::<u64>(), 300, "every insert published once");
    assert!(source.stop().is_some_and(|s| s.success()), "{}", source.logs());
}

/// `classify` stops on a narrowing type change before a row of its batch is read, naming the
/// column and the cast that keeps the log's type; a restart stops again (the check is against
/// the log's schema); with the cast the stream goes past, the log's type unchanged.
#[tokio::test(flavor = "multi_thread")]
async fn classify_stops_on_a_narrowing_until_a_cast_keeps_the_log_type() {
    let items = Items::start("bigint").await;
    let config = items.sim.client_config();
    let mut source = items.source("source.toml", "");
    exec(&config, "INSERT INTO dbo.items (id, qty, label) VALUES (1, 5, N'a')").await;
    let first = wait_caught_up(&items.broker.bootstrap, &items.topic, &config, &source, Duration::from_secs(60)).await;
    assert_eq!(first.iter().map(|c| c.rows).sum::<u64>(), 1);
    exec(&config, "UPDATE dbo.items SET qty = 7 WHERE id = 1").await;
    exec(&config, "ALTER TABLE dbo.items ALTER COLUMN qty int NOT NULL").await;
    exec(&config, "INSERT INTO dbo.items (id, qty, label) VALUES (2, 2, N'b')").await;
    let status = source.process().wait(Duration::from_secs(60));
    let logs = source.logs();
    assert_eq!(status.and_then(|s| s.code()), Some(EXIT_SCHEMA_CHANGED), "the schema-changed exit code:\n{logs}");
    assert!(logs.contains("`qty`") && logs.contains("qty bigint"), "the stop names the column and the cast:\n{logs}");
    let stopped = controls(&items.broker.bootstrap, &items.topic);
    let ddl_lsn = items.ddl_lsns().await.remove(0);
    assert!(stopped.iter().all(|c| c.to_lsn.to_string() < ddl_lsn), "nothing at or past the narrowing was published");
    let (again, _) = run_until_exit(&items, "again.toml", "");
    assert_eq!(again, Some(EXIT_SCHEMA_CHANGED), "a restart stops again");

    let mut source = items.source("cast.toml", "columns = [\"id\", \"qty bigint\", \"label\", \"note\"]");
    let controls = wait_caught_up(&items.broker.bootstrap, &items.topic, &config, &source, Duration::from_secs(60)).await;
    assert_eq!(controls.iter().map(|c| c.rows).sum::<u64>(), 4, "insert, update (two images), insert: each once");
    let last = controls.last().unwrap();
    assert_eq!(last.schema.columns.iter().find(|c| c.name == "qty").unwrap().ty, ColumnType::Int64, "the log keeps bigint");
    let change = schema_changes(&controls);
    assert_eq!(change.len(), 1, "the DDL is one event");
    assert!(change[0].1.widened.is_empty(), "{:?}", change[0].1);
    assert!(source.stop().is_some_and(|s| s.success()), "{}", source.logs());
}

/// The switch event of the control records, with the batch carrying it.
fn switches(controls: &[ControlRecord]) -> Vec<(&ControlRecord, &Event)> {
    controls.iter().flat_map(|c| c.events.iter().filter(|e| e.name() == "capture_instance_switched").map(move |e| (c, e))).collect()
}

/// Rolling a table onto a new capture instance under a running workload, as the runbook does
/// it: a column added, a second instance enabled that captures it, the old one disabled; the
/// source SIGKILLed just after the switch and again after the disable. The stream moves to the
/// new instance on its own, once, without a data-loss stop; bronze holds every change once
/// (the old change table up to the switch, the new one after it); silver equals the table over
/// TDS, with the new column on rows changed since the switch and NULL on rows untouched since
/// (no `snapshot_on_switch`).
#[tokio::test(flavor = "multi_thread")]
async fn a_table_rolls_onto_a_new_capture_instance_under_a_workload_and_sigkills() {
    let items = Items::start("int").await;
    let (mut source, mut sinks, workload) = items.run("", 11).await;
    let config = items.sim.client_config();
    let pause = || tokio::time::sleep(Duration::from_millis(1500));
    exec(&config, "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'items', @role_name = NULL, @capture_instance = N'dbo_items_v2'").await;
    let switched_at = switches(&items.wait_events("capture_instance_switched", 1, &source).await)[0].0.from_lsn.to_string();
    source.kill();
    source.respawn().unwrap();
    pause().await;
    // Every change the old instance holds, kept before it is disabled.
    let old: Vec<(String, String, i64)> = items.change_rows("dbo_items").await.into_iter().map(|(c, _)| c).collect();
    exec(&config, "EXEC sys.sp_cdc_disable_table @source_schema = N'dbo', @source_name = N'items', @capture_instance = N'dbo_items'").await;
    pause().await;
    // Configured `dbo_items` is gone: the stage resolves the table's newer instance.
    source.kill();
    source.respawn().unwrap();
    pause().await;
    let (statements, _) = workload.finish();
    assert!(statements > 100, "the workload ran ({statements} statements)");

    let records = items.caught_up(&mut source).await;
    let found_switches = switches(&records);
    assert_eq!(found_switches.len(), 1, "the switch happens once, across the SIGKILLs");
    let (switch_batch, event) = found_switches[0];
    let Event::CaptureInstanceSwitched { from, to, start_lsn, gained, lost } = event else { unreachable!() };
    assert_eq!((from.as_str(), to.as_str()), ("dbo_items", "dbo_items_v2"));
    assert_eq!((gained.as_slice(), lost.as_slice()), (&["region".to_owned()][..], &[][..]), "the new instance adds region");
    assert!(switch_batch.from_lsn >= *start_lsn, "the new instance is read from its start LSN on");
    assert!(records.iter().filter(|c| c.batch_id >= switch_batch.batch_id).all(|c| c.capture_instance == "dbo_items_v2"));
    assert!(records.iter().filter(|c| c.batch_id < switch_batch.batch_id).all(|c| c.capture_instance == "dbo_items"));
    assert!(switch_batch.schema.columns.iter().any(|c| c.name == "region"), "the switch batch's schema has region");

    let found = items.read_when_applied(&mut sinks, records.last().unwrap().batch_id as i64).await;
    // Bronze: every change of either change table (both hold those after S), each once.
    let new = items.change_rows("dbo_items_v2").await;
    let mut truth: Vec<(String, String, i64)> = old.into_iter().chain(new.iter().map(|(c, _)| c.clone())).collect();
    truth.sort();
    truth.dedup();
    let bronze = bronze_coordinates(&found);
    assert_eq!(bronze, truth, "bronze holds every change once across the switch");
    // Silver: equal to the table; region where the row changed since the switch.
    let table = items.table().await;
    let silver = found["silver"].as_array().unwrap();
    let mut rows: Vec<(i64, i64, Option<String>)> = silver.iter().map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap(), r[2].as_str().map(str::to_owned))).collect();
    rows.sort();
    assert_eq!(rows, table, "silver equals dbo.items over TDS on id, qty, label");
    let regions = query_rows(&config, "SELECT id, region FROM dbo.items").await;
    let changed_since: BTreeSet<i64> = new.iter().filter(|(c, _)| c.0 > switched_at).map(|(_, id)| *id).collect();
    let mut checked = (0, 0);
    for row in &regions {
        let id = i64::from(row.get::<i32, _>(0).unwrap());
        let in_silver = silver.iter().find(|r| r[0].as_i64() == Some(id)).unwrap();
        if changed_since.contains(&id) {
            assert_eq!(in_silver[4].as_str(), row.get::<&str, _>(1), "row {id} changed since the switch carries region");
            checked.0 += 1;
        } else {
            assert!(in_silver[4].is_null(), "row {id}, untouched since the switch, reads NULL in region (no snapshot_on_switch)");
            checked.1 += 1;
        }
    }
    assert!(checked.0 > 0 && checked.1 > 0, "rows of both kinds: {checked:?}");
    stop_all(sinks.iter_mut().chain([&mut source]));
}

/// `snapshot_on_switch = true`: the batch after the switch opens a snapshot of the table, so
/// silver ends equal to the table over TDS including the new column on rows untouched since
/// the switch.
#[tokio::test(flavor = "multi_thread")]
async fn snapshot_on_switch_fills_the_new_column_on_rows_untouched_since() {
    let items = Items::start("int").await;
    let (mut source, mut sinks, workload) = items.run("snapshot_on_switch = true", 13).await;
    let config = items.sim.client_config();
    let pause = || tokio::time::sleep(Duration::from_millis(1500));
    exec(&config, "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'items', @role_name = NULL, @capture_instance = N'dbo_items_v2'").await;
    items.wait_events("capture_instance_switched", 1, &source).await;
    pause().await;
    let (statements, _) = workload.finish();
    assert!(statements > 100, "the workload ran ({statements} statements)");
    let records = items.caught_up(&mut source).await;
    let found_switches = switches(&records);
    assert_eq!(found_switches.len(), 1, "one switch");
    let switch_batch = found_switches[0].0.batch_id;
    let opened: Vec<u64> = records.iter().filter(|c| c.events.iter().any(|e| e.name() == "snapshot_open")).map(|c| c.batch_id).collect();
    assert_eq!(opened, vec![switch_batch + 1], "the batch after the switch opens the snapshot");
    assert!(records.iter().any(|c| c.events.iter().any(|e| e.name() == "bootstrap")), "the snapshot completed");

    let found = items.read_when_applied(&mut sinks, records.last().unwrap().batch_id as i64).await;
    let rows = query_rows(&config, "SELECT id, qty, label, region FROM dbo.items").await;
    let mut table: Vec<(i64, i64, Option<String>, Option<String>)> =
        rows.iter().map(|r| (i64::from(r.get::<i32, _>(0).unwrap()), i64::from(r.get::<i32, _>(1).unwrap()), r.get::<&str, _>(2).map(str::to_owned), r.get::<&str, _>(3).map(str::to_owned))).collect();
    table.sort();
    let mut silver: Vec<(i64, i64, Option<String>, Option<String>)> = found["silver"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_i64().unwrap(), r[1].as_i64().unwrap(), r[2].as_str().map(str::to_owned), r[4].as_str().map(str::to_owned)))
        .collect();
    silver.sort();
    assert_eq!(silver, table, "silver equals dbo.items over TDS, region included");
    let changed_since: BTreeSet<i64> = items.change_rows("dbo_items_v2").await.into_iter().map(|(_, id)| id).collect();
    assert!(table.iter().any(|r| r.3.is_some() && !changed_since.contains(&r.0)), "a row with a region, untouched since the switch, got it from the snapshot");
    stop_all(sinks.iter_mut().chain([&mut source]));
}

/// Avro feeds: a widening registers a second writer schema under the value subject, after the
/// first; every record decodes with confluent-kafka's AvroDeserializer by its writer schema,
/// and a consumer holding the new schema as its reader schema reads the records written with
/// the old one too (BACKWARD compatible: `int` promotes to `long`).
#[tokio::test(flavor = "multi_thread")]
async fn avro_feeds_evolve_with_backward_compatible_writer_schemas() {
    let items = Items::start("int").await;
    let registry = crate::support::registry::TestRegistry::start().await;
    let config = items.sim.client_config();
    let mut source = items.source("source.toml", &format!("format = \"avro\"\nschema_registry = {{ url = \"{}\" }}", registry.url));
    exec(&config, "INSERT INTO dbo.items (id, qty, label) VALUES (1, 1, N'a'); INSERT INTO dbo.items (id, qty, label) VALUES (2, 2, N'b')").await;
    items.caught_up(&mut source).await;
    exec(&config, "ALTER TABLE dbo.items ALTER COLUMN qty bigint NOT NULL").await;
    exec(&config, "INSERT INTO dbo.items (id, qty, label) VALUES (3, 5000000000, N'c'); UPDATE dbo.items SET qty = 6000000000 WHERE id = 1").await;
    let records = items.caught_up(&mut source).await;
    stop_all([&mut source].into_iter());
    let subject = format!("{}-value", items.topic);
    let versions = registry.versions(&subject);
    assert_eq!(versions.len(), 2, "two writer schemas under {subject}: {versions:?}");
    let ids: Vec<u32> = records.iter().filter(|c| c.rows > 0).map(|c| c.schema_id.unwrap()).collect();
    let first_new = ids.iter().position(|id| *id == versions[1]).expect("batches with the new schema");
    assert!(ids[..first_new].iter().all(|id| *id == versions[0]) && ids[first_new..].iter().all(|id| *id == versions[1]), "the old schema up to the widening, the new one after: {ids:?}");
    let script = crate::support::PY_MESSAGES.to_owned()
        + r#"
import sys, json
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import SerializationContext, MessageField
bootstrap, topic, url, new_id = sys.argv[1:5]
client = SchemaRegistryClient({"url": url})
newest = client.get_schema(int(new_id)).schema_str
by_writer, by_newest = AvroDeserializer(client), AvroDeserializer(client, schema_str=newest)
out = []
for m in messages(bootstrap, topic, "avro-evolution"):
    ctx = SerializationContext(topic, MessageField.VALUE)
    a, b = by_writer(m.value(), ctx), by_newest(m.value(), ctx)
    writer = int.from_bytes(m.value()[1:5], "big")
    out.append([writer, a["id"], a["qty"], b["qty"], a["_operation"]])
print(json.dumps(sorted(out)))
"#;
    let output = run_python(&script, &[&items.broker.bootstrap, &items.topic, &registry.url, &versions[1].to_string()]);
    let decoded: Vec<(u32, i64, i64, i64, i64)> = serde_json::from_str(output.trim()).expect("the checker's JSON");
    assert_eq!(decoded.len(), 5, "two inserts, then an insert and an update's two images: {decoded:?}");
    assert!(decoded.iter().all(|d| d.2 == d.3), "the new reader schema reads every record as its writer wrote it: {decoded:?}");
    assert_eq!(decoded.iter().filter(|d| d.0 == versions[0]).count(), 2, "the records before the widening carry the old writer schema");
    assert!(decoded.iter().any(|d| d.0 == versions[1] && d.2 == 6_000_000_000), "values only bigint holds, under the new one");
}

/// Reads the `column_warnings` facts rows' details of `app_id`. Prints a JSON list.
const READ_WARNINGS: &str = r#"
import sys, json
from deltalake import DeltaTable
facts, app_id = sys.argv[1:3]
try:
    rows = DeltaTable(facts).to_pyarrow_table(columns=["app_id", "event", "detail"]).to_pylist()
except Exception:
    rows = []
print(json.dumps([json.loads(r["detail"]) for r in rows if r["event"] == "column_warnings" and r["app_id"] == app_id]))
"#;

/// Computed columns, which CDC stores as NULL in every change row: without `columns` the log
/// leaves them out, and the stream's first batch carries a `column_warnings` event naming
/// them, which bronze keeps as a facts row; listed, one is published as NULL in change and
/// snapshot rows alike. `columns` may also name a column only the table's newer capture
/// instance captures: NULL while the stream reads the old instance, its values once the stream
/// has moved to the new one.
#[tokio::test(flavor = "multi_thread")]
async fn computed_columns_are_left_out_or_read_null_with_a_warning() {
    let sim = SimServer::start(&[]).unwrap();
    let broker = TestBroker::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lake = Lake::local(dir.path());
    let worker = write_file(dir.path(), "worker.toml", &worker_toml(&broker.bootstrap, ""));
    let config = sim.client_config();
    // Rows 1 and 2 predate CDC (a snapshot reads them); 3 and an update of 1 are in the first
    // instance only; `region` and the instance capturing it come next, then changes with it.
    exec(
        &config,
        "CREATE TABLE dbo.lines (id int NOT NULL PRIMARY KEY, qty int NOT NULL, price decimal(10,2) NOT NULL, total AS (qty * price) PERSISTED);
         EXEC sys.sp_cdc_enable_db;
         INSERT INTO dbo.lines VALUES (1, 2, 1.50), (2, 3, 2.00);
         EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'lines', @role_name = NULL, @capture_instance = N'dbo_lines';
         INSERT INTO dbo.lines VALUES (3, 1, 9.99);
         UPDATE dbo.lines SET qty = 5 WHERE id = 1;
         ALTER TABLE dbo.lines ADD region nvarchar(20) NULL;
         EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'lines', @role_name = NULL, @capture_instance = N'dbo_lines_v2';
         INSERT INTO dbo.lines (id, qty, price, region) VALUES (4, 2, 3.00, N'emea');
         UPDATE dbo.lines SET region = N'apac' WHERE id = 3;",
    )
    .await;
    let source = |file: &str, prefix: &str, extra: &str| {
        let text = source_toml(file, sim.address.port(), prefix, extra).replace("[\"dbo_orders\"]", "[\"dbo_lines\"]");
        spawn_stage(&worker, &write_file(dir.path(), &format!("{file}.toml"), &text), &[])
    };
    let (plain, listed) = (unique("computed"), unique("listed"));
    let (plain_topic, listed_topic) = (format!("{plain}.sales.dbo.lines"), format!("{listed}.sales.dbo.lines"));
    let mut plain_source = source("plain-source", &plain, "bootstrap = true");
    let mut listed_source = source("listed-source", &listed, "columns = [\"id\", \"qty\", \"total\", \"region\"]");
    let bronze = write_file(dir.path(), "bronze.toml", &bronze_toml("lines", &plain_topic, "lines-bronze", &lake, ""));
    let mut bronze = spawn_stage(&worker, &bronze, &[]);
    // Each stream builds two schemas (at start, and at the switch to the newer instance): it
    // is done once the second one's warning is published.
    let settled = |topic: &str, source: &StageProcess| {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let records = controls(&broker.bootstrap, topic);
            if records.iter().flat_map(|c| &c.events).filter(|e| e.name() == "column_warnings").count() >= 2 {
                return records;
            }
            assert!(Instant::now() < deadline, "no second column_warnings event on {topic}:\n{}", source.logs());
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    wait_caught_up(&broker.bootstrap, &plain_topic, &config, &plain_source, Duration::from_secs(60)).await;
    let plain_controls = settled(&plain_topic, &plain_source);
    wait_caught_up(&broker.bootstrap, &listed_topic, &config, &listed_source, Duration::from_secs(60)).await;
    let listed_controls = settled(&listed_topic, &listed_source);
    let warnings = |controls: &[ControlRecord]| -> Vec<(u64, mssql_cdc_core::log::control::ColumnWarnings)> {
        let found = controls.iter().flat_map(|c| c.events.iter().map(move |e| (c.batch_id, e)));
        found.filter_map(|(batch, e)| if let Event::ColumnWarnings(w) = e { Some((batch, w.clone())) } else { None }).collect()
    };

    // Without `columns`: no `total` on the log, before the switch or after; a warning per schema.
    assert!(plain_controls.iter().all(|c| c.schema.columns.iter().all(|col| col.name != "total")), "the computed column stays off the log");
    let plain_warnings = warnings(&plain_controls);
    let instances: Vec<&str> = plain_warnings.iter().map(|(_, w)| w.capture_instance.as_str()).collect();
    assert_eq!(instances, ["dbo_lines", "dbo_lines_v2"], "one warning per schema the stream built (at start, at the switch): {plain_warnings:?}");
    assert!(plain_warnings.iter().all(|(_, w)| w.computed_left_out == ["total"] && w.computed_null.is_empty()), "{plain_warnings:?}");
    let plain_values: Vec<serde_json::Value> = read_all(&broker.bootstrap, &plain_topic).iter().map(|r| serde_json::from_slice(&r.value).unwrap()).collect();
    assert!(plain_values.iter().any(|v| v["_operation"] == 0) && plain_values.iter().all(|v| v.get("total").is_none()), "snapshot and change rows alike: {plain_values:?}");
    // Bronze keeps the warning as a facts row.
    let deadline = Instant::now() + Duration::from_secs(90);
    let facts = loop {
        let found: Vec<serde_json::Value> = serde_json::from_str(run_python(READ_WARNINGS, &[&lake.table("facts"), "lines-bronze"]).trim()).unwrap();
        if found.len() >= 2 {
            break found;
        }
        assert!(Instant::now() < deadline, "no two column_warnings facts rows in time:\n{}", bronze.logs());
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut noted: Vec<&str> = facts.iter().map(|f| f["capture_instance"].as_str().unwrap()).collect();
    noted.sort();
    assert_eq!(noted, ["dbo_lines", "dbo_lines_v2"], "one facts row per warning: {facts:?}");
    assert!(facts.iter().all(|f| f["computed_left_out"] == serde_json::json!(["total"])), "{facts:?}");

    // Listed: `total` is NULL everywhere; `region` is NULL from the first instance, real from
    // the second; each schema's warning says so.
    let listed_warnings = warnings(&listed_controls);
    assert_eq!(listed_warnings.len(), 2, "one warning at start, one at the switch: {listed_warnings:?}");
    assert_eq!((listed_warnings[0].1.computed_null.clone(), listed_warnings[0].1.other_instance.clone()), (vec!["total".to_owned()], vec!["region".to_owned()]));
    assert_eq!((listed_warnings[1].1.capture_instance.as_str(), listed_warnings[1].1.other_instance.is_empty()), ("dbo_lines_v2", true));
    let listed_values: Vec<serde_json::Value> = read_all(&broker.bootstrap, &listed_topic).iter().map(|r| serde_json::from_slice(&r.value).unwrap()).collect();
    assert!(listed_values.iter().all(|v| v.get("total") == Some(&serde_json::Value::Null)), "{listed_values:?}");
    let old: Vec<&serde_json::Value> = listed_values.iter().filter(|v| v["_capture_instance"] == "dbo_lines").collect();
    let new: Vec<&serde_json::Value> = listed_values.iter().filter(|v| v["_capture_instance"] == "dbo_lines_v2").collect();
    assert_eq!(old.len(), 3, "the insert of 3 and the update of 1 (two images), from the first instance: {old:?}");
    assert!(old.iter().all(|v| v["region"].is_null()), "{old:?}");
    let regions: BTreeSet<String> = new.iter().filter_map(|v| v["region"].as_str().map(str::to_owned)).collect();
    assert_eq!(regions, BTreeSet::from(["emea".to_owned(), "apac".to_owned()]), "after the switch `region` carries values: {new:?}");
    stop_all([&mut plain_source, &mut listed_source, &mut bronze].into_iter());
}
