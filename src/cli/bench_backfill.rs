//! `mssql-cdc bench backfill`: a table's existing rows through a chunked snapshot with 1, 2
//! and 4 chunk readers, next to the full snapshot of the same table, while a workload changes
//! it; and the stream's lag meanwhile.
//!
//! The in-process simulator (served over TDS) holds `dbo.orders` with `--rows` rows from before
//! CDC; a workload commits `--rate` changes/s throughout. For each mode, a fresh embedded broker
//! (memory storage) and the `mssql-source` stage as its own process, with `bootstrap = true`,
//! until its control topic holds the completion:
//!
//! - rows/s: the snapshot's rows over the time from the stage's start to the completion;
//! - the stream's lag: for every change batch published while the snapshot was open, the time
//!   from its first (oldest) commit to its publication (p50 and max); a full snapshot publishes no change
//!   batch until it completes, so its lag is the whole snapshot's length;
//! - the source's peak RSS.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use mssql_cdc::broker::BrokerStorage;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::log::ControlRecord;
use mssql_cdc_sim::workload::{Workload, WorkloadOptions};
use mssql_cdc_sim::LocalClient;
use mssql_cdc_testkit::kafka::controls;
use mssql_cdc_testkit::stats::percentile;

use super::bench_report::{drain, order_ids, Files, Until, TOPIC};
use super::bench_snapshot::preloaded_orders;
use super::services::Services;

#[derive(Debug, clap::Args)]
pub struct BackfillBench {
    /// Rows in `dbo.orders` before CDC is enabled.
    #[arg(long, default_value_t = 2_000_000)]
    rows: u64,
    /// `backfill.chunk_rows` of the chunked runs.
    #[arg(long, default_value_t = 100_000)]
    chunk_rows: u64,
    /// Chunk readers (`backfill.num_partitions`) of the chunked runs, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    partitions: Vec<u32>,
    /// `backfill.target_wave_seconds` of the chunked runs.
    #[arg(long, default_value_t = 5.0)]
    target_wave_seconds: f64,
    /// Changes per second the workload commits throughout.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Working directory (stage logs); cleared first.
    #[arg(long, default_value = "./bench-data/backfill")]
    dir: PathBuf,
}

/// One mode's measurements.
struct Measured {
    mode: String,
    snapshot_rows: u64,
    seconds: f64,
    waves: u64,
    lag_p50: Option<f64>,
    lag_max: Option<f64>,
    peak_mb: f64,
}

pub async fn run(args: BackfillBench) -> anyhow::Result<ExitCode> {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir).with_context(|| format!("clearing {}", args.dir.display()))?;
    }
    let (sim, _jobs) = preloaded_orders(args.rows).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let options = WorkloadOptions { rate: args.rate, changes: u64::MAX, seed: 13, ..WorkloadOptions::default() };
    let workload = Workload::new(options, order_ids(&sim)).controlled(stop.clone(), made.clone());
    let workload_sim = sim.clone();
    let thread = std::thread::spawn(move || {
        let mut workload = workload;
        workload.run(&mut LocalClient::new(&workload_sim))
    });
    let mut modes = vec![("full".to_owned(), "bootstrap = true".to_owned())];
    for partitions in &args.partitions {
        let options = format!(
            "bootstrap = true\nsnapshot = \"chunked\"\nbackfill = {{ chunk_rows = {}, num_partitions = {partitions}, target_wave_seconds = {:?} }}",
            args.chunk_rows, args.target_wave_seconds
        );
        modes.push((format!("chunked, {partitions} reader{}", if *partitions == 1 { "" } else { "s" }), options));
    }
    let mut all = Vec::new();
    for (index, (mode, options)) in modes.into_iter().enumerate() {
        let dir = args.dir.join(index.to_string());
        std::fs::create_dir_all(&dir)?;
        let measured = one_mode(&sim, &mode, &options, &dir.canonicalize()?).await;
        match measured {
            Ok(m) => all.push(m),
            Err(error) => {
                stop.store(true, Ordering::Relaxed);
                return Err(error.context(format!("mode {mode}")));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let report = thread.join().map_err(|_| anyhow::anyhow!("the workload panicked"))??;
    println!("| snapshot | rows | time | rows/s | waves | stream lag while open (p50 / max) | source peak RSS |");
    println!("|---|---|---|---|---|---|---|");
    for m in &all {
        let lag = match (m.lag_p50, m.lag_max) {
            (Some(p50), Some(max)) => format!("{p50:.2} s / {max:.2} s"),
            _ => format!("no change batch: {:.1} s", m.seconds),
        };
        println!("| {} | {} | {:.1} s | {:.0} | {} | {lag} | {:.0} MB |", m.mode, m.snapshot_rows, m.seconds, m.snapshot_rows as f64 / m.seconds.max(0.001), m.waves, m.peak_mb);
    }
    println!(
        "table of {} rows; chunk_rows {}; target_wave_seconds {}; workload {} changes at {} changes/s throughout; JSON feed; broker storage memory; machine: {} cores",
        args.rows,
        args.chunk_rows,
        args.target_wave_seconds,
        report.changes,
        args.rate,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(ExitCode::SUCCESS)
}

/// One snapshot mode on a fresh broker: the source until its completion.
async fn one_mode(sim: &mssql_cdc_sim::Simulator, mode: &str, options: &str, dir: &std::path::Path) -> anyhow::Result<Measured> {
    let services = Services::start(BrokerStorage::Memory, "mssql-cdc-bench", sim).await?;
    let kafka = KafkaConfig { bootstrap_servers: services.broker_address.to_string(), ..KafkaConfig::default() };
    let files = Files::write(dir, &services.broker_address.to_string(), services.sim_address, options, "")?;
    let (mut source, seconds) = drain(&files, &files.source, dir, &kafka, Until::SnapshotComplete).await?;
    let cluster = kafka.clone();
    let records = super::bench::off_runtime(move || controls(&cluster, TOPIC)).await?;
    let peak_mb = source.rss_mb("VmHWM");
    source.stop();
    services.stop().await;
    let measured = measure(mode, &records, seconds, peak_mb);
    eprintln!("bench: {mode}: {} rows in {seconds:.1} s", measured.snapshot_rows);
    Ok(measured)
}

fn completes(record: &ControlRecord) -> bool {
    record.events.iter().any(|e| matches!(e.name(), "bootstrap" | "resnapshot"))
}

/// The snapshot's rows and waves, and the lag of the change batches published while it was
/// open.
fn measure(mode: &str, records: &[ControlRecord], seconds: f64, peak_mb: f64) -> Measured {
    let open = records.iter().position(|r| r.events.iter().any(|e| e.name() == "snapshot_open")).unwrap_or(0);
    let done = records.iter().position(completes).unwrap_or(records.len());
    let window = &records[open..done];
    let snapshot_rows: u64 = window.iter().filter(|r| r.chunk().is_some() || r.open_snapshot().is_some()).map(|r| r.rows).sum();
    let waves = window.iter().filter_map(|r| r.chunk().map(|c| c.wave + 1)).max().unwrap_or(0);
    let mut lags: Vec<f64> = window
        .iter()
        .filter(|r| r.chunk().is_none() && r.rows > 0)
        .filter_map(|r| Some((r.metrics.published_at? - r.min_commit_ts?).num_milliseconds() as f64 / 1000.0))
        .collect();
    lags.sort_by(f64::total_cmp);
    Measured { mode: mode.to_owned(), snapshot_rows, seconds, waves, lag_p50: (!lags.is_empty()).then(|| percentile(&lags, 0.5)), lag_max: lags.last().copied(), peak_mb }
}
