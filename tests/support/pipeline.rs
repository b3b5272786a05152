//! A pipeline for the sink suites: a workload in the simulator, a feed published by the real
//! source, and connector files for the sinks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mssql_cdc_core::log::ControlRecord;
use mssql_cdc_sim::client::BlockingClient;
use mssql_cdc_sim::workload::{create_orders, Workload, WorkloadOptions};
pub use mssql_cdc_testkit::files::Lake;
use mssql_cdc_testkit::files::{bronze_toml, silver_toml, worker_toml};

use super::source::{controls, query_rows, source_files, wait_caught_up};
use super::{spawn_stage, unique, write_file, SimServer, TestBroker};

/// A worker file for sink processes on `broker`.
pub fn sink_worker(dir: &Path, broker: &TestBroker) -> PathBuf {
    write_file(dir, "sink-worker.toml", &worker_toml(&broker.bootstrap, ""))
}

/// Runs a workload of `changes`; seed 1 creates `dbo.orders` first, other seeds continue on
/// the rows already there.
pub fn setup_and_load(sim: &SimServer, changes: u64, seed: u64) {
    let config = sim.client_config();
    let existing = if seed == 1 {
        Vec::new()
    } else {
        let config = config.clone();
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let rows = query_rows(&config, "SELECT order_id FROM dbo.orders").await;
                rows.iter().map(|row| row.get::<i64, _>(0).unwrap()).collect::<Vec<i64>>()
            })
        })
        .join()
        .unwrap()
    };
    std::thread::spawn(move || {
        let mut client = BlockingClient::connect(&config).expect("login");
        if seed == 1 {
            create_orders(&mut client).expect("set up dbo.orders");
        }
        let options = WorkloadOptions { changes, rate: 0, max_transaction_size: 20, seed, ..WorkloadOptions::default() };
        Workload::new(options, existing).run(&mut client).expect("workload");
    })
    .join()
    .unwrap();
}

/// A bronze connector file named `name`, its tables (`<name>-bronze`, `facts`) in `dir`.
pub fn bronze_file(dir: &Path, name: &str, topic: &str, app_id: &str, extra: &str) -> PathBuf {
    bronze_file_in(dir, &Lake::local(dir), name, topic, app_id, extra)
}

/// A bronze connector file written to `dir`, its tables in `lake`.
pub fn bronze_file_in(dir: &Path, lake: &Lake, name: &str, topic: &str, app_id: &str, extra: &str) -> PathBuf {
    write_file(dir, &format!("{name}.toml"), &bronze_toml(name, topic, app_id, lake, extra))
}

/// A silver connector file over `bronze_file(dir, "orders", ..)`'s tables, with its control
/// table in `dir/control` and silver in `dir/silver`.
pub fn silver_file(dir: &Path, max_batches_per_apply: u64, extra: &str) -> PathBuf {
    silver_file_in(dir, &Lake::local(dir), max_batches_per_apply, extra)
}

/// The silver connector file of [`silver_file`], its tables in `lake`, with `extra` lines.
pub fn silver_file_in(dir: &Path, lake: &Lake, max_batches_per_apply: u64, extra: &str) -> PathBuf {
    let extra = format!("max_batches_per_apply = {max_batches_per_apply}\n{extra}");
    write_file(dir, "silver.toml", &silver_toml("orders-silver", "orders-bronze", "orders-silver-v1", lake, &extra))
}

/// A feed published by the real source: returns (data topic, control records).
pub async fn feed(broker: &TestBroker, sim: &SimServer, dir: &Path, changes: u64) -> (String, Vec<ControlRecord>) {
    setup_and_load(sim, changes, 1);
    let prefix = unique("bronze");
    let topic = format!("{prefix}.sales.dbo.orders");
    let (worker, connector) = source_files(dir, &broker.bootstrap, sim, &prefix, "max_commits_per_batch = 10");
    let mut source = spawn_stage(&worker, &connector, &[]);
    wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(120)).await;
    source.stop();
    // Read after the stop: a heartbeat may have followed.
    (topic.clone(), controls(&broker.bootstrap, &topic))
}
