//! The management API of `mssql-cdc run --config-dir`, driven by an independent HTTP client
//! (Python's `urllib`): listing, status, pause and resume, a failed connector beside running
//! ones, restart, configuration changes kept in the config directory, basic authentication,
//! and no secret in any answer.
// A test panics on what it did not expect: that is the failure, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use mssql_cdc_sim::client::BlockingClient;
use mssql_cdc_sim::workload::{create_orders, Workload, WorkloadOptions};
use mssql_cdc_testkit::files::{bronze_toml, source_toml, worker_toml, Lake};
use mssql_cdc_testkit::process::{Log, Process};
use serde_json::Value;
use support::source::{controls, exec};
use support::{run_python, unique, write_file, SimServer, TestBroker};

const API_USER: &str = "ops";
const API_PASSWORD: &str = "api-Passw0rd-never-shown";
const STORE_SECRET: &str = "inline-store-secret-never-shown";

const CLIENT: &str = r#"
import base64, sys, urllib.error, urllib.request
method, url, body, user, password = sys.argv[1:6]
request = urllib.request.Request(url, data=body.encode() if body else None, method=method)
if body:
    request.add_header("Content-Type", "application/json")
if user:
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
try:
    with urllib.request.urlopen(request, timeout=60) as answer:
        print(answer.status)
        sys.stdout.write(answer.read().decode())
except urllib.error.HTTPError as error:
    print(error.code)
    sys.stdout.write(error.read().decode())
"#;

/// The API of one worker process, with the credentials to use.
struct Client {
    base: String,
    auth: Option<(&'static str, &'static str)>,
    /// Every answer's body, checked for secrets at the end.
    seen: std::cell::RefCell<String>,
}

impl Client {
    fn new(address: SocketAddr) -> Self {
        Self { base: format!("http://{address}"), auth: Some((API_USER, API_PASSWORD)), seen: Default::default() }
    }

    /// One request: (status, body).
    fn call(&self, method: &str, path: &str, body: Option<&Value>, auth: Option<(&str, &str)>) -> (u16, String) {
        let body = body.map(Value::to_string).unwrap_or_default();
        let (user, password) = auth.unwrap_or(("", ""));
        let out = run_python(CLIENT, &[method, &format!("{}{path}", self.base), &body, user, password]);
        let (status, rest) = out.split_once('\n').unwrap_or((out.as_str(), ""));
        self.seen.borrow_mut().push_str(rest);
        (status.trim().parse().unwrap_or_else(|_| panic!("no status in {out:?}")), rest.to_owned())
    }

    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
        self.call(method, path, body, self.auth)
    }

    fn json(&self, path: &str) -> Value {
        let (status, body) = self.request("GET", path, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    fn state(&self, name: &str) -> String {
        self.json(&format!("/connectors/{name}/status"))["connector"]["state"].as_str().unwrap_or_default().to_owned()
    }

    fn wait_state(&self, name: &str, wanted: &str, worker: &Process) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.state(name) != wanted {
            assert!(Instant::now() < deadline, "{name} never {wanted}:\n{}", worker.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The last batch id on a data topic's control topic (-1 before any).
fn last_batch(bootstrap: &str, topic: &str) -> i64 {
    controls(bootstrap, topic).last().map_or(-1, |c| c.batch_id as i64)
}

/// Every endpoint, as an operator uses them: a worker with a running source and a planted
/// fatal one (a capture instance that does not exist): the broken one is FAILED with its
/// error while the other streams; pause holds the position over many poll intervals, resume
/// moves it again; after the fix, restart brings the broken one back; a bad key in a config
/// PUT is a 400 naming it; a new connector PUT starts at once and lands in the config
/// directory, a DELETE removes it; requests without the credentials get 401; no answer
/// holds a secret.
#[tokio::test(flavor = "multi_thread")]
async fn the_management_api_pauses_restarts_and_changes_connectors_without_a_worker_restart() {
    let sim = SimServer::start(&[]).unwrap();
    let broker = TestBroker::start().unwrap();
    let config = sim.client_config();
    let setup = config.clone();
    std::thread::spawn(move || create_orders(&mut BlockingClient::connect(&setup).unwrap()).unwrap()).join().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let configs = dir.path().join("connectors");
    std::fs::create_dir_all(&configs).unwrap();
    let prefix = unique("api");
    let topic = format!("{prefix}.sales.dbo.orders");
    let auth = format!("\n[api]\nbasic_auth = {{ user = \"{API_USER}\", password = {{ env = \"API_PASSWORD\" }} }}\n");
    let worker_file = write_file(dir.path(), "worker.toml", &worker_toml(&broker.bootstrap, &auth));
    write_file(&configs, "orders-source.toml", &source_toml("orders-source", sim.address.port(), &prefix, ""));
    let broken = source_toml("broken-source", sim.address.port(), &format!("{prefix}-broken"), "").replace("[\"dbo_orders\"]", "[\"dbo_missing\"]");
    write_file(&configs, "broken-source.toml", &broken);

    let mut command = Command::new(support::bin());
    command.args(["run", "--worker"]).arg(&worker_file).arg("--config-dir").arg(&configs);
    command.env(mssql_cdc_sim::client::PASSWORD_ENV, mssql_cdc_sim::client::password_from_env()).env("API_PASSWORD", API_PASSWORD);
    let mut worker = Process::spawn("worker", command, Log::Capture).unwrap();
    let address: SocketAddr = worker.wait_line("metrics on ", Duration::from_secs(60)).unwrap().parse().unwrap();
    let api = Client::new(address);

    // A workload all along, so a running source always has something to publish.
    let load = config.clone();
    let workload = std::thread::spawn(move || {
        let mut client = BlockingClient::connect(&load).unwrap();
        let options = WorkloadOptions { changes: 6000, rate: 150, seed: 41, ..WorkloadOptions::default() };
        Workload::new(options, Vec::new()).run(&mut client).unwrap();
    });

    assert_eq!(api.call("GET", "/connectors", None, None).0, 401, "no credentials");
    assert_eq!(api.call("GET", "/connectors", None, Some((API_USER, "wrong"))).0, 401, "a wrong password");
    assert_eq!(api.json("/connectors"), serde_json::json!(["broken-source", "orders-source"]));
    api.wait_state("orders-source", "RUNNING", &worker);
    api.wait_state("broken-source", "FAILED", &worker);
    let failed = api.json("/connectors/broken-source/status");
    assert!(failed["connector"]["trace"].as_str().unwrap().contains("dbo_missing"), "the trace names the cause: {failed}");
    assert_eq!(failed["type"], "source");
    let deadline = Instant::now() + Duration::from_secs(60);
    while last_batch(&broker.bootstrap, &topic) < 3 {
        assert!(Instant::now() < deadline, "the healthy source streams beside the failed one:\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(200));
    }

    // Pause: the position holds over 30 poll intervals (100 ms each) while the workload runs.
    assert_eq!(api.request("PUT", "/connectors/orders-source/pause", None).0, 202);
    assert_eq!(api.state("orders-source"), "PAUSED");
    std::thread::sleep(Duration::from_secs(1));
    let paused_at = last_batch(&broker.bootstrap, &topic);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(last_batch(&broker.bootstrap, &topic), paused_at, "no batch while paused");
    assert_eq!(api.request("PUT", "/connectors/orders-source/resume", None).0, 202);
    api.wait_state("orders-source", "RUNNING", &worker);
    let deadline = Instant::now() + Duration::from_secs(60);
    while last_batch(&broker.bootstrap, &topic) <= paused_at {
        assert!(Instant::now() < deadline, "no batch after resume:\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(200));
    }

    // The fix (the missing table, with CDC), then a restart.
    exec(&config, "CREATE TABLE dbo.missing (id int NOT NULL PRIMARY KEY, v int NULL)").await;
    exec(&config, "EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'missing', @role_name = NULL").await;
    assert_eq!(api.request("POST", "/connectors/broken-source/restart", None).0, 204);
    api.wait_state("broken-source", "RUNNING", &worker);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(api.state("broken-source"), "RUNNING", "it stays up after the fix");
    assert_eq!(api.state("orders-source"), "RUNNING");

    // Configuration: a bad key is a 400 naming it; a good one starts a new connector.
    let lake = Lake::local(dir.path());
    let text = bronze_toml("orders-bronze", &topic, "orders-bronze-v1", &lake, &format!("storage_options = {{ AWS_SECRET_ACCESS_KEY = \"{STORE_SECRET}\" }}"));
    let mut body: Value = serde_json::to_value(toml::from_str::<toml::Table>(&text).unwrap()).unwrap();
    body["colour"] = "blue".into();
    let (status, answer) = api.request("PUT", "/connectors/orders-bronze/config", Some(&body));
    assert_eq!(status, 400, "{answer}");
    let problems: Value = serde_json::from_str(&answer).unwrap();
    assert!(problems["problems"].as_array().unwrap().iter().any(|p| p["key"] == "colour"), "the 400 names the key: {answer}");
    assert!(!configs.join("orders-bronze.toml").exists(), "a refused configuration is not kept");
    body.as_object_mut().unwrap().remove("colour");
    let (status, answer) = api.request("PUT", "/connectors/orders-bronze/config", Some(&body));
    assert_eq!(status, 201, "{answer}");
    assert!(configs.join("orders-bronze.toml").exists(), "kept in the config directory");
    api.wait_state("orders-bronze", "RUNNING", &worker);
    let bronze_log = std::path::Path::new(&lake.table("orders-bronze-bronze")).join("_delta_log");
    let deadline = Instant::now() + Duration::from_secs(90);
    while !bronze_log.exists() {
        assert!(Instant::now() < deadline, "the new bronze connector wrote no table:\n{}", worker.log());
        std::thread::sleep(Duration::from_millis(300));
    }
    let shown = api.json("/connectors/orders-bronze");
    assert_eq!(shown["config"]["storage_options"]["AWS_SECRET_ACCESS_KEY"], "***", "{shown}");
    assert_eq!(shown["type"], "sink");
    body["consumer_properties"] = serde_json::json!({"fetch.wait.max.ms": 50});
    let (status, answer) = api.request("PUT", "/connectors/orders-bronze/config", Some(&body));
    assert_eq!(status, 200, "a changed connector: {answer}");
    assert!(std::fs::read_to_string(configs.join("orders-bronze.toml")).unwrap().contains("fetch.wait.max.ms"), "the change is kept");
    api.wait_state("orders-bronze", "RUNNING", &worker);
    assert_eq!(api.request("DELETE", "/connectors/orders-bronze", None).0, 204);
    assert_eq!(api.request("GET", "/connectors/orders-bronze", None).0, 404);
    assert!(!configs.join("orders-bronze.toml").exists(), "the file is removed");
    assert_eq!(api.json("/connectors"), serde_json::json!(["broken-source", "orders-source"]));

    workload.join().unwrap();
    worker.signal("-TERM").unwrap();
    let status = worker.wait(Duration::from_secs(60)).expect("the worker stops on SIGTERM");
    assert!(status.success(), "{status:?}:\n{}", worker.log());
    let seen = api.seen.borrow();
    assert!(!seen.contains(API_PASSWORD) && !seen.contains(STORE_SECRET) && !seen.contains(&mssql_cdc_sim::client::password_from_env()), "a secret in an answer:\n{seen}");
    assert!(!worker.log().contains(STORE_SECRET) && !worker.log().contains(API_PASSWORD), "a secret in the log");
}
