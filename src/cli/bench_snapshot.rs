//! `mssql-cdc bench snapshot`: a table's existing rows through the snapshot path, next to a
//! bare TDS read of the same table in the same run.
//!
//! For each size in `--rows`: the in-process simulator (served over TDS) holds `dbo.orders`
//! with that many rows from before CDC was enabled, and the embedded broker runs on memory
//! storage. In order:
//!
//! 1. **Baseline**: tiberius reads every row of the table over TDS (`SELECT` of the captured
//!    columns in key order, every value decoded): the ceiling of any reader of this server.
//! 2. **Source**: the `mssql-source` stage with `bootstrap = true`, as its own `mssql-cdc run`
//!    process, until the control topic counts every row; rows/s, and the process's peak RSS.
//! 3. **Bronze**: the `delta-bronze` stage, as its own process, until its facts record the
//!    snapshot's last batch; rows/s and peak RSS.
//!
//! The source reads `snapshot_fetch_rows` rows per keyset read, so its peak RSS should not grow
//! with the table: running two sizes shows it. The report is one Markdown table.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use mssql_cdc::broker::BrokerStorage;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_lake::facts::facts_app_id;
use mssql_cdc_sim::workload::{SqlClient as _, Workload, ORDERS_CDC, ORDERS_DDL};
use mssql_cdc_sim::{LocalClient, SimConfig, Simulator};
use mssql_cdc_testkit::kafka::totals;

use super::bench_report::{drain, Files, Until, BRONZE_APP, TOPIC};
use super::services::Services;

#[derive(Debug, clap::Args)]
pub struct SnapshotBench {
    /// Rows in `dbo.orders` before CDC is enabled; a comma-separated list runs each size.
    #[arg(long, value_delimiter = ',', default_value = "200000,2000000")]
    rows: Vec<u64>,
    /// The source's `snapshot_fetch_rows` (rows per keyset read and per batch).
    #[arg(long, default_value_t = 50_000)]
    fetch_rows: u64,
    /// Working directory (tables, stage logs); cleared first.
    #[arg(long, default_value = "./bench-data/snapshot")]
    dir: PathBuf,
}

/// One size's measurements.
struct Measured {
    rows: u64,
    bare_secs: f64,
    bare_rows: u64,
    source_secs: f64,
    bytes: u64,
    batches: u64,
    source_peak_mb: f64,
    bronze_secs: f64,
    bronze_peak_mb: f64,
}

pub async fn run(args: SnapshotBench) -> anyhow::Result<ExitCode> {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir).with_context(|| format!("clearing {}", args.dir.display()))?;
    }
    let mut all = Vec::new();
    for &rows in &args.rows {
        let dir = args.dir.join(rows.to_string());
        std::fs::create_dir_all(&dir)?;
        all.push(one_size(rows, args.fetch_rows, &dir.canonicalize()?).await?);
    }
    println!("| rows in the table | bare TDS read (tiberius, same rows) | source: snapshot → Kafka | bronze: snapshot feed → Delta | source peak RSS | bronze peak RSS |");
    println!("|---|---|---|---|---|---|");
    for m in &all {
        let rate = |rows: u64, secs: f64| format!("{:.0} rows/s ({secs:.1} s)", rows as f64 / secs);
        println!(
            "| {} | {} | {}, {:.1} MB/s, {} batches | {} | {:.0} MB | {:.0} MB |",
            m.rows,
            rate(m.bare_rows, m.bare_secs),
            rate(m.rows, m.source_secs),
            m.bytes as f64 / 1e6 / m.source_secs,
            m.batches,
            rate(m.rows, m.bronze_secs),
            m.source_peak_mb,
            m.bronze_peak_mb
        );
    }
    println!(
        "snapshot_fetch_rows {}; JSON feed; broker storage memory; each stage its own process; machine: {} cores",
        args.fetch_rows,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(ExitCode::SUCCESS)
}

/// The in-process simulator with `dbo.orders` holding `rows` rows from before CDC was
/// enabled, its capture job running (keep the handle).
pub(super) async fn preloaded_orders(rows: u64) -> anyhow::Result<(Simulator, std::thread::JoinHandle<()>)> {
    let sim = Simulator::new(SimConfig::default());
    let loading = sim.clone();
    let started = Instant::now();
    tokio::task::spawn_blocking(move || {
        let mut client = LocalClient::new(&loading);
        client.execute(ORDERS_DDL, &[])?;
        Workload::preload(&mut client, rows, 7)?;
        ORDERS_CDC.iter().try_for_each(|sql| client.execute(sql, &[]).map(|_| ()))
    })
    .await?
    .map_err(|e| anyhow::anyhow!("loading the table: {e}"))?;
    eprintln!("bench: {rows} rows loaded in {:.1} s", started.elapsed().as_secs_f64());
    let jobs = sim.spawn_jobs(Duration::from_millis(100));
    Ok((sim, jobs))
}

/// The snapshot of the whole table through the source, then bronze (each its own process):
/// (source seconds, source peak MB, published totals, bronze seconds, bronze peak MB).
pub(super) async fn snapshot_into_bronze(files: &Files, dir: &std::path::Path, kafka: &KafkaConfig, rows: u64) -> anyhow::Result<(f64, f64, mssql_cdc_testkit::kafka::Totals, f64, f64)> {
    let (mut source, source_secs) = drain(files, &files.source, dir, kafka, Until::Published { topic: TOPIC, rows }).await?;
    let source_peak_mb = source.rss_mb("VmHWM");
    source.stop();
    let cluster = kafka.clone();
    let fed = super::bench::off_runtime(move || totals(&cluster, TOPIC)).await?;
    eprintln!("bench: source published {} rows in {source_secs:.1} s", fed.rows);
    let facts_app = facts_app_id(BRONZE_APP);
    let until = Until::Facts { table: &files.facts_table, app: &facts_app, batch: fed.batches as i64 - 1 };
    let (mut bronze, bronze_secs) = drain(files, &files.bronze, dir, kafka, until).await?;
    let bronze_peak_mb = bronze.rss_mb("VmHWM");
    bronze.stop();
    Ok((source_secs, source_peak_mb, fed, bronze_secs, bronze_peak_mb))
}

async fn one_size(rows: u64, fetch_rows: u64, dir: &std::path::Path) -> anyhow::Result<Measured> {
    let (sim, _jobs) = preloaded_orders(rows).await?;
    let services = Services::start(BrokerStorage::Memory, "mssql-cdc-bench", &sim).await?;
    let kafka = KafkaConfig { bootstrap_servers: services.broker_address.to_string(), ..KafkaConfig::default() };

    let (bare_rows, bare_secs) = super::bench::bare_read(services.sim_address, "SELECT * FROM dbo.orders ORDER BY order_id").await?;
    eprintln!("bench: bare TDS read of {bare_rows} rows in {bare_secs:.1} s");
    let files = Files::write(dir, &services.broker_address.to_string(), services.sim_address, &format!("bootstrap = true\nsnapshot_fetch_rows = {fetch_rows}"), "")?;
    let (source_secs, source_peak_mb, fed, bronze_secs, bronze_peak_mb) = snapshot_into_bronze(&files, dir, &kafka, rows).await?;
    services.stop().await;
    Ok(Measured { rows, bare_secs, bare_rows, source_secs, bytes: fed.bytes, batches: fed.batches, source_peak_mb, bronze_secs, bronze_peak_mb })
}

