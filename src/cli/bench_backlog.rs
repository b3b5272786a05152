//! `mssql-cdc bench backlog`: the memory run. A backlog of `--changes` changes (10 million by
//! default) is made while no stage runs, as after an outage; then the three stages start
//! together, each its own process, and catch up. Printed: how long each took to reach the
//! backlog's end, its rows/s over that time and its peak RSS, against the 512 MB every stage
//! must stay under whatever the backlog's size.
//!
//! The simulator and the broker run in this process, so the broker defaults to SQLite storage
//! here: memory storage would hold the whole feed in this process next to the simulator's
//! change table (about 1.3 GB per million changes).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_lake::delta::table;
use mssql_cdc_lake::facts::facts_app_id;
use mssql_cdc_sim::workload::{Workload, WorkloadOptions};
use mssql_cdc_sim::LocalClient;
use mssql_cdc_testkit::kafka::totals;
use mssql_cdc_testkit::stage::StageProcess;

use super::bench_report::{stage, Files, Until, Workbench, BRONZE_APP, TOPIC};

/// Every stage's peak RSS must stay under this, whatever the backlog (issue 20).
const RSS_LIMIT_MB: f64 = 512.0;

/// How often the stages' current RSS is printed while they catch up (a stage whose memory
/// grows with the backlog shows as a rising line, long before its peak passes the limit).
const RSS_TRACE_EVERY: Duration = Duration::from_secs(15);

#[derive(Debug, clap::Args)]
pub struct BacklogBench {
    /// Changes in the backlog (about 1.4 change rows each: an update is two).
    #[arg(long, default_value_t = 10_000_000)]
    changes: u64,
    /// The embedded broker's storage: `sqlite` (in the working directory) or `memory`.
    #[arg(long, default_value = "sqlite")]
    broker_storage: String,
    /// The source's max_commits_per_batch; 0 leaves it unlimited, so the whole backlog is one
    /// batch (what one very large source transaction makes).
    #[arg(long, default_value_t = 1000)]
    max_commits_per_batch: u64,
    /// Silver's `max_rows_per_apply` (rows; its default, 100000, when omitted). A batch larger
    /// than this is applied in slices of keys; `100000000` applies any batch whole.
    #[arg(long)]
    silver_max_rows_per_apply: Option<u64>,
    /// Changes per transaction: every transaction of the backlog has this many, the last one
    /// ending at `--changes` (without it, 1 to 5). `--changes 1000000 --transaction-size
    /// 1000000` is one source transaction of a million changes.
    #[arg(long)]
    transaction_size: Option<u32>,
    /// Percent of the changes that insert new orders; 100 is a bulk load, every change a new
    /// key. The workload's other shares follow (updates 35, key moves 5, deletes the rest):
    /// at 80, 20% updates; at 20, 40% deletes.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(0..=100))]
    insert_percent: u32,
    /// Run silver with `deletion_vectors = true` (rows replaced by marks, not file rewrites).
    #[arg(long)]
    silver_deletion_vectors: bool,
    /// Working directory (tables, broker storage, stage logs); cleared first.
    #[arg(long, default_value = "./bench-data/backlog")]
    dir: PathBuf,
    /// Give up when the stages have not caught up after this many minutes.
    #[arg(long, default_value_t = 120)]
    timeout_minutes: u64,
}

/// When one stage reached the backlog's end, seconds after the three started.
#[derive(Default)]
struct CaughtUp {
    source: Option<f64>,
    bronze: Option<f64>,
    silver: Option<f64>,
}

pub async fn run(args: BacklogBench) -> anyhow::Result<ExitCode> {
    let Workbench { dir, sim, services } = Workbench::start(&args.dir, &args.broker_storage).await?;
    let kafka = KafkaConfig { bootstrap_servers: services.broker_address.to_string(), ..KafkaConfig::default() };
    let source_extra = match args.max_commits_per_batch {
        0 => String::new(),
        commits => format!("max_commits_per_batch = {commits}"),
    };
    let mut silver_extra = String::new();
    if args.silver_deletion_vectors {
        silver_extra.push_str("deletion_vectors = true\n");
    }
    if let Some(rows) = args.silver_max_rows_per_apply {
        silver_extra.push_str(&format!("max_rows_per_apply = {rows}\n"));
    }
    let files = Files::write(&dir, &kafka.bootstrap_servers, services.sim_address, &source_extra, &silver_extra)?;

    let mut options = WorkloadOptions { rate: 0, changes: args.changes, insert_percent: args.insert_percent, ..WorkloadOptions::default() };
    if let Some(size) = args.transaction_size {
        (options.min_transaction_size, options.max_transaction_size) = (size, size);
    }
    let workload_sim = sim.clone();
    let made = tokio::task::spawn_blocking(move || Workload::new(options, Vec::new()).run(&mut LocalClient::new(&workload_sim))).await??;
    let change_rows = sim.change_count("dbo_orders") as u64;
    eprintln!("bench: backlog of {} changes ({change_rows} change rows) made in {:.0} s", made.changes, made.elapsed.as_secs_f64());

    let mut stages = vec![stage(&files.worker, &files.source, &dir)?, stage(&files.worker, &files.bronze, &dir)?, stage(&files.worker, &files.silver, &dir)?];
    let caught_up = catch_up(&files, &kafka, &mut stages, change_rows, Duration::from_secs(args.timeout_minutes * 60)).await;
    let peak: Vec<f64> = stages.iter().map(|p| p.rss_mb("VmHWM")).collect();
    let fed = totals(&kafka, TOPIC);
    for process in &mut stages {
        process.stop();
    }
    services.stop().await;
    let caught_up = caught_up?;
    let fed = fed?;
    // The peaks first: they stand even if the check below fails.
    print_backlog(&args, &made, change_rows, fed.bytes, &caught_up, &peak);
    // Caught up means equal: silver holds as many rows as the table.
    let table_rows = match sim.query("SELECT COUNT_BIG(*) FROM dbo.orders").map_err(|e| anyhow::anyhow!("counting dbo.orders: {e}"))?.first().and_then(|set| set.rows.first()).and_then(|row| row.first()) {
        Some(mssql_cdc_sim::Value::Int(n)) => *n,
        other => anyhow::bail!("counting dbo.orders returned {other:?}"),
    };
    let silver_rows = super::bench_silver::count(&files.silver_table).await?;
    anyhow::ensure!(silver_rows == table_rows, "silver holds {silver_rows} rows after catching up, dbo.orders {table_rows}");
    println!("silver holds {silver_rows} rows, as dbo.orders does");
    Ok(if peak.iter().all(|mb| *mb < RSS_LIMIT_MB) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Polls every 200 ms until silver applied the backlog's last batch, noting when each stage
/// reached the end; fails when a stage exits or the time runs out.
async fn catch_up(files: &Files, kafka: &KafkaConfig, stages: &mut [StageProcess], change_rows: u64, timeout: Duration) -> anyhow::Result<CaughtUp> {
    let started = Instant::now();
    let facts_app = facts_app_id(BRONZE_APP);
    let silver_url = table::table_url(&files.silver_table)?.to_string();
    let mut at = CaughtUp::default();
    let mut last_batch = None;
    let mut traced = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for process in stages.iter_mut() {
            process.alive()?;
        }
        let now = started.elapsed().as_secs_f64();
        if traced.elapsed() >= RSS_TRACE_EVERY {
            traced = Instant::now();
            let rss: Vec<String> = stages.iter().map(|p| format!("{:.0}", p.rss_mb("VmRSS"))).collect();
            eprintln!("bench: after {now:.0} s, RSS source / bronze / silver: {} MB", rss.join(" / "));
        }
        if at.source.is_none() && (Until::Published { topic: TOPIC, rows: change_rows }).reached(kafka).await? {
            at.source = Some(now);
            last_batch = Some(totals(kafka, TOPIC)?.batches as i64 - 1);
            eprintln!("bench: the source reached the backlog's end after {now:.1} s");
        }
        if let Some(batch) = last_batch {
            if at.bronze.is_none() && (Until::Facts { table: &files.facts_table, app: &facts_app, batch }).reached(kafka).await? {
                at.bronze = Some(now);
                eprintln!("bench: bronze reached it after {now:.1} s");
            }
            if at.silver.is_none() && (Until::Applied { control: &files.control_table, url: &silver_url, batch }).reached(kafka).await? {
                at.silver = Some(now);
                eprintln!("bench: silver reached it after {now:.1} s");
            }
        }
        if at.bronze.is_some() && at.silver.is_some() {
            return Ok(at);
        }
        anyhow::ensure!(started.elapsed() < timeout, "the stages did not catch up in {} minutes", timeout.as_secs() / 60);
    }
}

fn print_backlog(args: &BacklogBench, made: &mssql_cdc_sim::workload::WorkloadReport, rows: u64, bytes: u64, at: &CaughtUp, peak: &[f64]) {
    println!("| stage | caught up after | rows/s | peak RSS | under {RSS_LIMIT_MB:.0} MB |");
    println!("|---|---|---|---|---|");
    for (index, (name, secs)) in [("source", at.source), ("bronze", at.bronze), ("silver", at.silver)].into_iter().enumerate() {
        let secs = secs.unwrap_or(f64::NAN);
        let mb = peak.get(index).copied().unwrap_or(f64::NAN);
        println!("| {name} | {secs:.0} s | {:.0} | {mb:.0} MB | {} |", rows as f64 / secs, if mb < RSS_LIMIT_MB { "yes" } else { "**no**" });
    }
    println!();
    println!(
        "backlog: {} changes ({}% inserts) in {} transactions, {rows} change rows, {:.0} MB on the data topic (made in {:.0} s, no stage running); the three stages started together; broker storage {}; max_commits_per_batch {}; silver {}, max_rows_per_apply {}; machine: {} cores",
        made.changes,
        args.insert_percent,
        made.transactions,
        bytes as f64 / 1e6,
        made.elapsed.as_secs_f64(),
        args.broker_storage,
        if args.max_commits_per_batch == 0 { "unlimited".to_owned() } else { args.max_commits_per_batch.to_string() },
        if args.silver_deletion_vectors { "by deletion vectors" } else { "copy-on-write" },
        args.silver_max_rows_per_apply.map_or("default".to_owned(), |rows| rows.to_string()),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
}
