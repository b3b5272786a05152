//! `mssql-cdc bench reconcile`: Tier 1 of `mssql-cdc reconcile` over a table and its silver,
//! next to the cheapest reads that could answer "same number of rows?" in the same run.
//!
//! The in-process simulator (served over TDS) holds `dbo.orders` with `--rows` rows from
//! before CDC; the source snapshots it into the embedded broker, bronze and silver take it in
//! (each stage its own process). Then, in order:
//!
//! 1. **Baselines**: `SELECT COUNT_BIG(*)` over TDS (tiberius), and silver's row count
//!    (`SELECT COUNT(*)` over the Delta table with DataFusion, in this process).
//! 2. **Tier 1**: `mssql-cdc reconcile --sample 0` as its own process: bucket counts and key
//!    sums on both sides; wall time and peak RSS.
//! 3. **Tier 2, every row**: the same with `--sample 1` (every bucket hashed row by row).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use mssql_cdc::broker::BrokerStorage;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_lake::delta::query::query;
use mssql_cdc_lake::delta::table::{self, table_url};
use mssql_cdc_sim::client::{connect, ClientConfig};

use super::bench_report::{drain, Files, Until};
use super::bench_snapshot::{preloaded_orders, snapshot_into_bronze};
use super::services::Services;

#[derive(Debug, clap::Args)]
pub struct ReconcileBench {
    /// Rows in `dbo.orders`.
    #[arg(long, default_value_t = 2_000_000)]
    rows: u64,
    /// Reconcile's `--bucket-rows`.
    #[arg(long, default_value_t = 1_000_000)]
    bucket_rows: u64,
    /// Working directory (tables, stage logs); cleared first.
    #[arg(long, default_value = "./bench-data/reconcile")]
    dir: PathBuf,
}

pub async fn run(args: ReconcileBench) -> anyhow::Result<ExitCode> {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir).with_context(|| format!("clearing {}", args.dir.display()))?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let dir = args.dir.canonicalize()?;
    let (sim, _jobs) = preloaded_orders(args.rows).await?;
    let services = Services::start(BrokerStorage::Memory, "mssql-cdc-bench", &sim).await?;
    let kafka = KafkaConfig { bootstrap_servers: services.broker_address.to_string(), ..KafkaConfig::default() };
    let files = Files::write(&dir, &services.broker_address.to_string(), services.sim_address, "bootstrap = true\nsnapshot_fetch_rows = 50000", "")?;
    let (_, _, fed, _, _) = snapshot_into_bronze(&files, &dir, &kafka, args.rows).await?;
    let url = table_url(&files.silver_table)?.to_string();
    let until = Until::Applied { control: &files.control_table, url: &url, batch: fed.batches as i64 - 1 };
    let (mut silver, silver_secs) = drain(&files, &files.silver, &dir, &kafka, until).await?;
    silver.stop();
    eprintln!("bench: silver applied {} rows in {silver_secs:.1} s", fed.rows);

    let config = ClientConfig { address: services.sim_address, user: "sa".into(), password: mssql_cdc_sim::client::password_from_env(), database: "sales".into() };
    let started = Instant::now();
    let mut client = connect(&config).await?;
    let counted = client.simple_query("SELECT COUNT_BIG(*) FROM dbo.orders").await?.into_row().await?.and_then(|row| row.get::<i64, _>(0)).unwrap_or(-1);
    let count_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let silver_table = table::open(&files.silver_table, &Default::default()).await?.context("silver table")?;
    let batches = query(&[("silver", &silver_table)], "SELECT COUNT(*) FROM silver").await?;
    let silver_count_secs = started.elapsed().as_secs_f64();
    anyhow::ensure!(batches.first().is_some_and(|b| b.num_rows() == 1), "silver's count returned no row");

    let tier1 = reconcile(&files, &dir, args.bucket_rows, "0")?;
    let tier2 = reconcile(&files, &dir, args.bucket_rows, "1")?;
    services.stop().await;
    println!("| rows | `COUNT_BIG(*)` over TDS | silver row count (DataFusion) | reconcile tier 1 (`--sample 0`) | reconcile, every row hashed (`--sample 1`) |");
    println!("|---|---|---|---|---|");
    println!(
        "| {counted} | {count_secs:.2} s | {silver_count_secs:.2} s | {:.2} s, {} buckets, peak RSS {:.0} MB, {} | {:.2} s ({:.0} rows/s), peak RSS {:.0} MB, {} |",
        tier1.secs, tier1.buckets, tier1.peak_mb, tier1.verdict, tier2.secs, counted as f64 / tier2.secs, tier2.peak_mb, tier2.verdict
    );
    println!("bucket_rows {}; each side local (simulator in process over TDS, silver on local disk); machine: {} cores", args.bucket_rows, std::thread::available_parallelism().map_or(0, |n| n.get()));
    Ok(ExitCode::SUCCESS)
}

struct Run {
    secs: f64,
    peak_mb: f64,
    buckets: u64,
    verdict: String,
}

/// `mssql-cdc reconcile` as its own process, its peak RSS read from `/proc` while it runs.
fn reconcile(files: &Files, dir: &Path, bucket_rows: u64, sample: &str) -> anyhow::Result<Run> {
    let started = Instant::now();
    let mut child = Command::new(std::env::current_exe()?)
        .args(["reconcile", &files.silver.display().to_string(), "--source", &files.source.display().to_string(), "--json", "--sample", sample])
        .args(["--bucket-rows", &bucket_rows.to_string()])
        .env(mssql_cdc_sim::client::PASSWORD_ENV, mssql_cdc_sim::client::password_from_env())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join(format!("reconcile-{sample}.log")))?)
        .spawn()?;
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kb = 0u64;
    while child.try_wait()?.is_none() {
        if let Ok(status) = std::fs::read_to_string(&status_file) {
            let hwm = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
            peak_kb = peak_kb.max(hwm.unwrap_or(0));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output()?;
    let secs = started.elapsed().as_secs_f64();
    let outcome: serde_json::Value = serde_json::from_slice(&output.stdout).with_context(|| format!("reconcile's output (see {})", dir.display()))?;
    Ok(Run { secs, peak_mb: peak_kb as f64 / 1024.0, buckets: outcome["buckets_total"].as_u64().unwrap_or(0), verdict: outcome["verdict"].as_str().unwrap_or("?").to_owned() })
}
