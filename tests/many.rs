//! Many tables from one file per stage: a source file selecting tables by pattern (with an
//! exclusion, a per-table override and a table enabled while it runs), a bronze and a silver
//! file with templates, a workload spread over every table in transactions that span tables,
//! one table's stream stopped by a planted fatal error while the others go on, and that table
//! alone restarted through the management API after the fix. Independent readers (Python
//! `deltalake` for silver, `python-tds` for the source) compare every table.
//!
//! `MSSQL_CDC_MANY_TABLES` sets the number of tables (default 50) and `MSSQL_CDC_MANY_CHANGES`
//! the workload's changes (default 4000).
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use mssql_cdc_testkit::files::{sql_login_toml, worker_toml, Lake};
use mssql_cdc_testkit::metrics::request;
use mssql_cdc_testkit::process::tcp_connections_to;
use serde_json::Value;

use crate::support::source::exec;
use crate::support::{run_python, spawn_stage, unique, write_file, SimServer, StageProcess, TestBroker};

/// The table whose stream the test breaks.
const BROKEN: &str = "dbo.t07";
/// The table whose override leaves `amount` out.
const NARROWED: &str = "dbo.t03";

/// Python: compares silver tables (Delta, read with `deltalake`) with the source tables (read
/// over TDS with `python-tds`) by key, on the columns silver has of `v`, `note`, `amount`.
/// Prints one JSON object: the tables that are equal, and a summary of each that is not.
const PY_COMPARE: &str = r#"
import sys, json, decimal
import pytds
from deltalake import DeltaTable
port, password, root, tables = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(",")
out = {"equal": [], "differ": {}, "columns": {}, "applied": {}}
with pytds.connect(server="127.0.0.1", port=port, user="sa", password=password, database="sales", autocommit=True) as conn:
    cur = conn.cursor()
    for name in tables:
        schema, table = name.split(".")
        try:
            control = DeltaTable(f"{root}/control/{schema}/{table}").to_pyarrow_table(columns=["applied_batch"]).to_pylist()
            out["applied"][name] = max(r["applied_batch"] for r in control)
        except Exception:
            out["applied"][name] = -1
        try:
            silver = DeltaTable(f"{root}/silver/{schema}/{table}").to_pyarrow_table()
        except Exception as e:
            out["differ"][name] = f"no silver table: {e}"
            continue
        columns = [c for c in ("v", "note", "amount") if c in silver.column_names]
        out["columns"][name] = columns
        got = {r["id"]: tuple(r[c] for c in columns) for r in silver.to_pylist()}
        cur.execute(f"SELECT id, {', '.join(columns)} FROM [{schema}].[{table}]")
        want = {r[0]: tuple(r[1:]) for r in cur.fetchall()}
        if got == want:
            out["equal"].append(name)
        else:
            missing = sorted(set(want) - set(got))[:3]
            extra = sorted(set(got) - set(want))[:3]
            changed = [(k, str(got[k]), str(want[k])) for k in sorted(set(got) & set(want)) if got[k] != want[k]][:2]
            out["differ"][name] = f"{len(got)} rows vs {len(want)}; missing {missing}; extra {extra}; changed {changed}"
print(json.dumps(out))
"#;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `dbo.tNN` for `n` tables.
fn table_names(n: u64) -> Vec<String> {
    (0..n).map(|i| format!("dbo.t{i:02}")).collect()
}

fn create_sql(name: &str) -> String {
    let table = name.trim_start_matches("dbo.");
    format!(
        "CREATE TABLE dbo.{table} (id int NOT NULL PRIMARY KEY, v int NULL, note nvarchar(40) NULL, amount decimal(12,2) NULL);\n\
         EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'{table}', @role_name = NULL;"
    )
}

/// A deterministic workload over `tables`: transactions of 1 to 4 changes, each on a table
/// drawn at random (so a transaction often spans tables), inserts, updates and deletes.
struct Spread {
    state: u64,
    next_id: Vec<i64>,
    live: Vec<Vec<i64>>,
}

impl Spread {
    fn new(tables: usize, seed: u64) -> Self {
        Self { state: seed, next_id: vec![1; tables], live: vec![Vec::new(); tables] }
    }

    fn draw(&mut self, below: u64) -> u64 {
        self.state = self.state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.state >> 33) % below.max(1)
    }

    /// One transaction's statements over `tables` (indexes into the workload's tables).
    fn transaction(&mut self, names: &[String], among: &[usize]) -> (String, u64) {
        let size = 1 + self.draw(4);
        let mut sql = String::from("BEGIN TRANSACTION;\n");
        for _ in 0..size {
            let t = among[self.draw(among.len() as u64) as usize];
            let name = &names[t];
            let kind = self.draw(10);
            let value = self.draw(1_000_000) as i64;
            let amount = format!("{}.{:02}", value / 100, value % 100);
            if self.live[t].is_empty() || kind < 5 {
                let id = self.next_id[t];
                self.next_id[t] += 1;
                self.live[t].push(id);
                sql.push_str(&format!("INSERT INTO {name} (id, v, note, amount) VALUES ({id}, {value}, N'n{value}', {amount});\n"));
            } else if kind < 8 {
                let at = self.draw(self.live[t].len() as u64) as usize;
                let id = self.live[t][at];
                sql.push_str(&format!("UPDATE {name} SET v = {value}, note = N'u{value}', amount = {amount} WHERE id = {id};\n"));
            } else {
                let at = self.draw(self.live[t].len() as u64) as usize;
                let id = self.live[t].swap_remove(at);
                sql.push_str(&format!("DELETE FROM {name} WHERE id = {id};\n"));
            }
        }
        sql.push_str("COMMIT;");
        (sql, size)
    }
}

/// Runs `changes` changes of `spread` over the tables at `among`.
async fn load(sim: &SimServer, spread: &mut Spread, names: &[String], among: &[usize], changes: u64) {
    let config = sim.client_config();
    let mut done = 0;
    while done < changes {
        let (sql, size) = spread.transaction(names, among);
        exec(&config, &sql).await;
        done += size;
    }
}

/// `text` without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for next in chars.by_ref() {
                if next == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The management API's status of `connector` on `stage`.
fn status(stage: &StageProcess) -> Value {
    let (code, body) = request(stage.metrics.unwrap(), "GET", "/connectors/many-source/status").unwrap();
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn task<'a>(status: &'a Value, table: &str) -> Option<&'a Value> {
    status["tasks"].as_array()?.iter().find(|t| t["table"] == table)
}

/// Compares silver with the source for `tables`: (equal, the JSON answer).
fn compare(sim: &SimServer, root: &str, tables: &[String]) -> (bool, Value) {
    let password = mssql_cdc_sim::client::password_from_env();
    let out = run_python(PY_COMPARE, &[&sim.address.port().to_string(), &password, root, &tables.join(",")]);
    let answer: Value = serde_json::from_str(out.trim().lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {out}"));
    (answer["differ"].as_object().is_some_and(serde_json::Map::is_empty), answer)
}

/// Waits until silver equals the source for every table of `tables`.
fn wait_equal(sim: &SimServer, root: &str, tables: &[String], stages: &[&StageProcess], timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let (equal, answer) = compare(sim, root, tables);
        if equal {
            return answer;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = stages.iter().map(|s| s.logs()).collect();
            panic!("silver never equalled the source: {}\n{}", answer["differ"], logs.join("\n"));
        }
        std::thread::sleep(Duration::from_secs(3));
    }
}

fn connector_files(dir: &Path, sim: &SimServer, prefix: &str, root: &str) -> [std::path::PathBuf; 3] {
    let source = format!(
        "name = \"many-source\"\nkind = \"mssql-source\"\nconnection_string = \"Server=127.0.0.1,{port};Database=sales\"\n{login}\
         tables = [\"dbo.*\"]\nexclude_tables = [\"dbo.audit_*\"]\ndiscovery_interval_ms = 2000\ntopic_prefix = \"{prefix}\"\n\
         poll_interval_ms = 200\nheartbeat_interval_ms = 2000\ntopic_partitions = 1\n\n[overrides.\"{NARROWED}\"]\ncolumns = [\"id\", \"v\", \"note\"]\n",
        port = sim.address.port(),
        login = sql_login_toml(),
    );
    let topic = format!("{prefix}.sales.{{schema}}.{{table}}");
    let bronze = format!(
        "name = \"many-bronze\"\nkind = \"delta-bronze\"\ntopic = \"{topic}\"\ntarget = \"{root}/bronze/{{schema}}/{{table}}\"\n\
         facts_table = \"{root}/facts/{{schema}}/{{table}}\"\napp_id = \"bronze-{{capture_instance}}\"\ndiscovery_interval_ms = 2000\n"
    );
    let silver = format!(
        "name = \"many-silver\"\nkind = \"delta-silver\"\ntopic = \"{topic}\"\nbronze = \"{root}/bronze/{{schema}}/{{table}}\"\n\
         target = \"{root}/silver/{{schema}}/{{table}}\"\ncontrol_table = \"{root}/control/{{schema}}/{{table}}\"\n\
         facts_table = \"{root}/facts/{{schema}}/{{table}}\"\napp_id = \"silver\"\ngranularity = \"minute\"\npoll_interval_ms = 500\n\
         discovery_interval_ms = 2000\n\n[overrides.\"dbo.t05\"]\ngranularity = \"hour\"\n"
    );
    [write_file(dir, "source.toml", &source), write_file(dir, "bronze.toml", &bronze), write_file(dir, "silver.toml", &silver)]
}

/// Invariant: one source, one bronze and one silver file serve every table of a database
/// (patterns and templates, a table enabled later found by discovery, an excluded table never
/// published, an override's columns kept); one table's fatal error stops that table only
/// (FAILED in the API with its reason, its metric down) while the others' silver tables keep
/// following their source; restarting that table alone after the fix resumes it and leaves the
/// others' streams running; every silver table equals its source table.
#[tokio::test(flavor = "multi_thread")]
async fn one_file_per_stage_serves_many_tables_and_a_failed_table_stops_alone() {
    let count = env_u64("MSSQL_CDC_MANY_TABLES", 50).max(8);
    let changes = env_u64("MSSQL_CDC_MANY_CHANGES", 4000);
    let sim = SimServer::start(&[]).unwrap();
    let broker = TestBroker::start().unwrap();
    let config = sim.client_config();
    let mut names = table_names(count);
    let setup: Vec<String> = names.iter().map(|n| create_sql(n)).collect();
    exec(&config, &format!("EXEC sys.sp_cdc_enable_db;\n{}", setup.join("\n"))).await;
    exec(&config, &format!("{}\nINSERT INTO dbo.audit_log (id, v) VALUES (1, 1);", create_sql("dbo.audit_log"))).await;

    let dir = tempfile::tempdir().unwrap();
    let root = Lake::local(dir.path()).root;
    let prefix = unique("many");
    let worker = write_file(dir.path(), "worker.toml", &worker_toml(&broker.bootstrap, ""));
    let [source_file, bronze_file, silver_file] = connector_files(dir.path(), &sim, &prefix, &root);
    let started = Instant::now();
    let source = spawn_stage(&worker, &source_file, &[]);
    let bronze = spawn_stage(&worker, &bronze_file, &[]);
    let silver = spawn_stage(&worker, &silver_file, &[]);

    let mut spread = Spread::new(count as usize + 1, 19);
    let all: Vec<usize> = (0..count as usize).collect();
    load(&sim, &mut spread, &names, &all, changes / 2).await;

    // The planted fatal error: a narrowing type change the log cannot take.
    let broken = names.iter().position(|n| n == BROKEN).unwrap();
    exec(&config, "ALTER TABLE dbo.t07 ALTER COLUMN amount decimal(10,2) NULL").await;
    load(&sim, &mut spread, &names, &[broken], 10).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = status(&source);
        if task(&status, BROKEN).is_some_and(|t| t["state"] == "FAILED") {
            let failed = task(&status, BROKEN).unwrap();
            assert_eq!(failed["reason"], "schema_changed", "{failed}");
            assert!(failed["trace"].as_str().unwrap().contains("amount"), "the trace names the column: {failed}");
            assert_eq!(status["connector"]["state"], "RUNNING", "the connector runs on: {status}");
            let running = status["tasks"].as_array().unwrap().iter().filter(|t| t["state"] == "RUNNING").count();
            assert_eq!(running as u64, count - 1, "every other table runs: {status}");
            break;
        }
        assert!(Instant::now() < deadline, "{BROKEN} never failed: {status}\n{}", source.logs());
        std::thread::sleep(Duration::from_millis(500));
    }
    // Where each table's verdict stood when the broken one stopped.
    let healthy_then: Vec<String> = names.iter().filter(|n| *n != BROKEN).cloned().collect();
    let (_, then) = compare(&sim, &root, &healthy_then);
    let metrics = source.scrape().unwrap();
    assert!(metrics.contains(&format!("mssql_cdc_stage_table_up{{connector=\"many-source\",table=\"{BROKEN}\"}} 0")), "the table's metric is down");

    // A table enabled while the stages run is found and followed; the workload goes on over
    // every table, the broken one included (its changes wait in CDC).
    names.push("dbo.t_late".into());
    exec(&config, &create_sql("dbo.t_late")).await;
    let everyone: Vec<usize> = (0..names.len()).collect();
    load(&sim, &mut spread, &names, &everyone, changes / 2).await;
    let healthy: Vec<String> = names.iter().filter(|n| *n != BROKEN).cloned().collect();
    let answer = wait_equal(&sim, &root, &healthy, &[&source, &bronze, &silver], Duration::from_secs(600));
    assert_eq!(answer["columns"][NARROWED], serde_json::json!(["v", "note"]), "the override's columns: {answer}");
    for name in &healthy_then {
        let (before, after) = (then["applied"][name].as_i64().unwrap_or(-1), answer["applied"][name].as_i64().unwrap_or(-1));
        assert!(after > before, "{name}'s verdict moved on after {BROKEN} failed: applied batch {before} then {after}");
    }
    assert!(task(&status(&source), BROKEN).is_some_and(|t| t["state"] == "FAILED"), "still failed until restarted");

    // The fix, then a restart of that table alone.
    exec(&config, "ALTER TABLE dbo.t07 ALTER COLUMN amount decimal(12,2) NULL").await;
    let (code, body) = request(source.metrics.unwrap(), "POST", &format!("/connectors/many-source/tasks/{BROKEN}/restart")).unwrap();
    assert_eq!(code, 204, "{body}");
    assert_eq!(request(source.metrics.unwrap(), "POST", "/connectors/many-source/tasks/dbo.nowhere/restart").unwrap().0, 404);
    wait_equal(&sim, &root, &names, &[&source, &bronze, &silver], Duration::from_secs(300));
    let elapsed = started.elapsed();

    let log = strip_ansi(&source.log());
    for name in &names {
        let starts = log.lines().filter(|l| l.contains("table started") && l.contains(&format!("table={name}"))).count();
        let expected = if name == BROKEN { 2 } else { 1 };
        assert_eq!(starts, expected, "{name} started {starts} times: only the restarted table starts again");
    }
    assert!(!crate::support::topic_exists(&broker.bootstrap, &format!("{prefix}.sales.dbo.audit_log")), "an excluded table is not published");

    // Sizing: memory and connections per stage process.
    let sql_connections = tcp_connections_to(source.id(), sim.address.port());
    let broker_port: u16 = broker.bootstrap.rsplit(':').next().unwrap().parse().unwrap();
    let report: Vec<String> = [("source", &source), ("bronze", &bronze), ("silver", &silver)]
        .iter()
        .map(|(name, stage)| format!("{name}: peak RSS {:.0} MB, broker connections {}", stage.rss_mb("VmHWM"), tcp_connections_to(stage.id(), broker_port)))
        .collect();
    eprintln!("{} tables, {changes} changes, caught up in {:.0} s; source SQL connections {sql_connections}; {}", names.len(), elapsed.as_secs_f64(), report.join("; "));
    assert!(sql_connections <= names.len() + 1, "one SQL connection per table at most (and discovery's): {sql_connections}");
}
