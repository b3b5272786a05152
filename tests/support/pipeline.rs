//! A pipeline for the sink suites: a workload in the simulator, a feed published by the real
//! source, and connector files for the sinks.

use std::path::Path;
use std::time::Duration;

use mssql_cdc::log::ControlRecord;
use mssql_cdc::sim::client::BlockingClient;
use mssql_cdc::sim::workload::{create_orders, Workload, WorkloadOptions};

use super::source::{controls, source_files, wait_caught_up, SourceProcess};
use super::{unique, write_file, SimServer, TestBroker};

/// A worker file for sink processes on `broker`.
pub fn sink_worker(dir: &Path, broker: &TestBroker) -> std::path::PathBuf {
    write_file(dir, "sink-worker.toml", &format!("[kafka]\nbootstrap_servers = \"{}\"\n[telemetry]\nlisten = \"127.0.0.1:0\"\n", broker.bootstrap))
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
                let mut client = mssql_cdc::sim::client::connect(&config).await.expect("login");
                let rows = client.simple_query("SELECT order_id FROM dbo.orders").await.unwrap().into_first_result().await.unwrap();
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

/// A bronze connector file.
pub fn bronze_file(dir: &Path, name: &str, topic: &str, app_id: &str, extra: &str) -> std::path::PathBuf {
    write_file(
        dir,
        &format!("{name}.toml"),
        &format!(
            "name = \"{name}\"\nkind = \"delta-bronze\"\ntopic = \"{topic}\"\ntarget = \"{}\"\napp_id = \"{app_id}\"\nfacts_table = \"{}\"\n{extra}\n",
            dir.join(format!("{name}-bronze")).display(),
            dir.join("facts").display()
        ),
    )
}

/// A silver connector file over `bronze_file(dir, "orders", ..)`'s tables, with its control
/// table in `dir/control` and silver in `dir/silver`.
pub fn silver_file(dir: &Path, max_batches_per_apply: u64) -> std::path::PathBuf {
    write_file(
        dir,
        "silver.toml",
        &format!(
            "name = \"orders-silver\"\nkind = \"delta-silver\"\nbronze = \"{}\"\ntarget = \"{}\"\napp_id = \"orders-silver-v1\"\ncontrol_table = \"{}\"\nfacts_table = \"{}\"\ngranularity = \"minute\"\nmax_batches_per_apply = {max_batches_per_apply}\npoll_interval_ms = 200\n",
            dir.join("orders-bronze").display(),
            dir.join("silver").display(),
            dir.join("control").display(),
            dir.join("facts").display()
        ),
    )
}

/// A feed published by the real source: returns (data topic, control records).
pub async fn feed(broker: &TestBroker, sim: &SimServer, dir: &Path, changes: u64) -> (String, Vec<ControlRecord>) {
    setup_and_load(sim, changes, 1);
    let prefix = unique("bronze");
    let topic = format!("{prefix}.sales.dbo.orders");
    let (worker, connector) = source_files(dir, &broker.bootstrap, sim, &prefix, "max_commits_per_batch = 10");
    let mut source = SourceProcess::spawn(&worker, &connector);
    wait_caught_up(&broker.bootstrap, &topic, &sim.client_config(), &source, Duration::from_secs(120)).await;
    source.stop();
    // Read after the stop: a heartbeat may have followed.
    (topic.clone(), controls(&broker.bootstrap, &topic))
}
