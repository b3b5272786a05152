//! `mssql-cdc bench` (no subcommand): the benchmark report, one table.
//!
//! The simulator (served over TDS) and the broker (SQLite storage) run in this process; the
//! three stages run as `mssql-cdc run` child processes, so each has its own peak RSS. In order:
//!
//! 1. **Idle**: the stages start on an empty table; their RSS after a few seconds is the
//!    memory baseline. They are then killed (they resume from their checkpoints later).
//! 2. **Backlog**: the workload makes `--changes` changes as fast as it can; then the source
//!    alone drains them (rows/s), then bronze alone (rows/s), then silver alone (apply time
//!    per batch). Baselines from the same run: the same records produced by a bare rdkafka
//!    producer; the same records decoded and written to one Parquet file; bronze's own
//!    append time per batch.
//! 3. **Steady**: with all three running, the workload commits `--rate` changes/s for
//!    `--steady-seconds`, at each rate of the list in turn (1,000, 5,000 and 20,000 by
//!    default: the latency curve); the silver control row is read every 100 ms, and each commit's
//!    latency is the time from its `tran_end_time` to the first read whose `end_commit_ts`
//!    covers it. Baseline: a record's produce-to-consume latency on the same broker.
//!
//! The report is a Markdown table on standard output (as `docs/performance.md` holds it).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use chrono::{DateTime, Utc};
use mssql_cdc::broker::BrokerStorage;
use mssql_cdc_lake::delta::table;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_sim::workload::{create_orders, Workload, WorkloadOptions};
use mssql_cdc_sim::{LocalClient, SimConfig, Simulator, Value};
use mssql_cdc_lake::facts::facts_app_id;
use mssql_cdc_lake::silver::control;
use mssql_cdc_core::telemetry::metrics as m;
use mssql_cdc_testkit::files::{bronze_toml, silver_toml, source_toml, worker_toml, write_file, Lake};
use mssql_cdc_testkit::kafka::{controls, exists, totals};
use mssql_cdc_testkit::metrics::{mean, sum};
use mssql_cdc_testkit::process::Log;
use mssql_cdc_testkit::stats::{latencies, percentile};
use mssql_cdc_testkit::stage::StageProcess;

use super::bench::{bare_read, consumer_parquet_baseline, parquet_baseline, raw_producer_baseline, Landed};
use super::services::Services;

#[derive(Debug, clap::Args)]
pub struct ReportBench {
    /// Changes in the backlog the stages drain one after the other.
    #[arg(long, default_value_t = 100_000)]
    changes: u64,
    /// Changes per second in the steady phase: one rate, or several separated by commas,
    /// measured one after the other (the latency curve).
    #[arg(long, value_delimiter = ',', default_values_t = [1000, 5000, 20000])]
    rate: Vec<u64>,
    /// Seconds of the steady phase, at each rate.
    #[arg(long, default_value_t = 30)]
    steady_seconds: u64,
    /// The embedded broker's storage: `memory` (closest to a Kafka cluster's throughput) or
    /// `sqlite` (in the working directory; as the demo and the tests use it).
    #[arg(long, default_value = "memory")]
    broker_storage: String,
    /// Working directory (tables, broker storage, stage logs); cleared first.
    #[arg(long, default_value = "./bench-data/report")]
    dir: PathBuf,
    /// Run silver with `deletion_vectors = true` (rows replaced by marks, not file rewrites).
    #[arg(long)]
    silver_deletion_vectors: bool,
    /// Times the source drains the backlog (an odd number), each run into topics of its own and
    /// between two bare reads of the same change rows; the report gives the median run's share
    /// of its bare reads (this machine's speed drifts from one second to the next). The last
    /// run's topic feeds bronze.
    #[arg(long, default_value_t = 3)]
    source_runs: u32,
    /// The source's num_partitions: connections each batch's change rows are read over.
    #[arg(long, default_value_t = 1)]
    num_partitions: u32,
    /// A sink of your own to compare on the same feed: a shell command with `{bootstrap}`,
    /// `{topic}` and `{dir}` in it that reads the topic from its start and exits once it has
    /// written every record (e.g. kafka-delta-ingest with its end-at-latest option). Default:
    /// `MSSQL_CDC_BENCH_EXTERNAL_SINK`, else none.
    #[arg(long)]
    external_sink: Option<String>,
}

impl ReportBench {
    /// The options at their defaults (for `bench` without a subcommand).
    pub fn defaults() -> Self {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            report: ReportBench,
        }
        <Defaults as clap::Parser>::parse_from(["bench"]).report
    }
}

/// The data topic every benchmark's source publishes to.
pub(super) const TOPIC: &str = "bench.sales.dbo.orders";
/// The bronze sink's app id in the benchmarks.
pub(super) const BRONZE_APP: &str = "bench-bronze";

/// What a benchmark over the three stage processes starts from: its working directory
/// (cleared), a simulator with `dbo.orders` (CDC on, its capture job running) and the
/// services serving it and the broker.
pub(super) struct Workbench {
    pub(super) dir: PathBuf,
    pub(super) sim: Simulator,
    pub(super) services: Services,
}

impl Workbench {
    /// Clears `dir` and starts everything; `broker_storage` is `memory` or `sqlite` (in `dir`).
    pub(super) async fn start(dir: &Path, broker_storage: &str) -> anyhow::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let storage = match broker_storage {
            "memory" => BrokerStorage::Memory,
            "sqlite" => BrokerStorage::Sqlite(dir.join("broker.db")),
            other => anyhow::bail!("--broker-storage: `{other}` (expected `sqlite` or `memory`)"),
        };
        let sim = Simulator::new(SimConfig::default());
        // The job thread ends by itself once the simulator is dropped.
        drop(sim.spawn_jobs(Duration::from_millis(100)));
        create_orders(&mut LocalClient::new(&sim)).map_err(|e| anyhow::anyhow!("setup: {e}"))?;
        let services = Services::start(storage, "mssql-cdc-bench", &sim).await?;
        Ok(Self { dir, sim, services })
    }
}

pub async fn run(args: ReportBench) -> anyhow::Result<ExitCode> {
    let Workbench { dir, sim, services } = Workbench::start(&args.dir, &args.broker_storage).await?;
    let (sim_address, broker_address) = (services.sim_address, services.broker_address);
    let kafka = KafkaConfig { bootstrap_servers: broker_address.to_string(), ..KafkaConfig::default() };
    let silver_extra = if args.silver_deletion_vectors { "deletion_vectors = true" } else { "" };
    anyhow::ensure!(args.source_runs % 2 == 1, "--source-runs: expected an odd number (1, 3, 5, ...), so that one run is the median");
    let source_extra = format!("max_commits_per_batch = 1000\nnum_partitions = {}", args.num_partitions);
    let files = Files::write(&dir, &broker_address.to_string(), sim_address, &source_extra, silver_extra)?;
    eprintln!("bench: simulator on {sim_address}, broker on {broker_address}, files in {}", dir.display());

    let repeats = (1..args.source_runs).map(|run| RepeatedSource::write(&dir, sim_address, run, &source_extra)).collect::<anyhow::Result<Vec<_>>>()?;
    // The stages start on the empty table, then the backlog is made while none runs.
    let idle_rss = idle_memory(&files, &repeats, &dir).await?;
    let options = WorkloadOptions { rate: 0, changes: args.changes, ..WorkloadOptions::default() };
    let workload_sim = sim.clone();
    let backlog_report = tokio::task::spawn_blocking(move || Workload::new(options, Vec::new()).run(&mut LocalClient::new(&workload_sim))).await??;
    eprintln!("bench: backlog of {} changes", backlog_report.changes);
    let (mut stages, drained) = drain_backlog(&sim, sim_address, &kafka, &files, &repeats, &dir).await?;
    let external = match args.external_sink.clone().or_else(|| std::env::var("MSSQL_CDC_BENCH_EXTERNAL_SINK").ok().filter(|c| !c.trim().is_empty())) {
        Some(command) => {
            eprintln!("bench: external sink `{command}` on the same feed");
            Some(super::bench_external::run(&command, &kafka.bootstrap_servers, TOPIC, &dir.join("external"), Duration::from_secs(1800)).await?)
        }
        None => None,
    };
    let mut steady = Vec::with_capacity(args.rate.len());
    for rate in &args.rate {
        eprintln!("bench: steady phase at {rate} changes/s");
        steady.push(steady_rate(&sim, &files, &mut stages, *rate, args.steady_seconds).await?);
    }
    let kafka_latencies = kafka_round_trips(&kafka, 200).await?;
    let peak: Vec<f64> = stages.iter().map(|p| p.rss_mb("VmHWM")).collect();
    for process in &mut stages {
        process.stop();
    }
    services.stop().await;
    print_report(&args, &drained, &steady, &kafka_latencies, &peak, &idle_rss);
    if let Some(external) = external {
        println!(
            "| external sink `{}` on the same feed{} | {:.0} rows/s ({:.1} s to its exit), peak RSS {:.0} MB | bronze: {:.0} rows/s, peak RSS {:.0} MB |",
            external.command.replace('|', "\\|"),
            if external.success { "" } else { " (exited with an error: its log is in the working directory)" },
            drained.rows as f64 / external.secs,
            external.secs,
            external.peak_mb,
            drained.rows as f64 / drained.bronze_secs,
            peak[1]
        );
        println!();
    }
    let workloads: Vec<String> = steady.iter().map(|s| format!("{} changes in {} transactions ({:.0} changes/s)", s.workload.changes, s.workload.transactions, s.workload.changes_per_second())).collect();
    println!(
        "steady workloads: {}; backlog workload {} changes; broker storage {}; silver {}; machine: {} cores",
        workloads.join(", "),
        backlog_report.changes,
        args.broker_storage,
        if args.silver_deletion_vectors { "by deletion vectors" } else { "copy-on-write" },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(ExitCode::SUCCESS)
}

/// Phase 1: the stages start on an empty feed; their RSS after a few seconds is the memory
/// baseline. They are killed (and resume from their checkpoints later). The repeated sources
/// start and stop with them, so that each later run, like the bench's source, resumes a
/// stream whose topics exist.
async fn idle_memory(files: &Files, repeats: &[RepeatedSource], dir: &Path) -> anyhow::Result<Vec<f64>> {
    let mut idle = Vec::new();
    for connector in [&files.source, &files.bronze, &files.silver].into_iter().chain(repeats.iter().map(|r| &r.connector)) {
        idle.push(stage(&files.worker, connector, dir)?);
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let rss = idle.iter().take(3).map(|p| p.rss_mb("VmRSS")).collect();
    for mut process in idle {
        process.kill();
    }
    Ok(rss)
}

/// What phase 2 measured.
struct Drained {
    rows: u64,
    bytes: u64,
    /// Each run of the source over the backlog, in order (the last fed bronze).
    source_runs: Vec<SourceRun>,
    raw_acked: u64,
    raw_secs: f64,
    /// From the spawn to the commit that completed the rows, by the stage's clock.
    bronze_secs: f64,
    /// From the spawn to its first commit, when recorded.
    bronze_first_secs: Option<f64>,
    /// Bronze's rate from its first commit to its last (setup left out).
    bronze_streaming: f64,
    bronze_metrics: String,
    parquet_rows: usize,
    parquet_secs: f64,
    /// A bare rdkafka consumer decoding the feed into one Parquet file: (rows, seconds).
    consumer_parquet: (u64, f64),
    silver_secs: f64,
    silver_metrics: String,
}

/// A source like the bench's own, into topics of its own: it drains the backlog before the
/// bench's source does, for the median of several runs.
struct RepeatedSource {
    connector: PathBuf,
    topic: String,
}

impl RepeatedSource {
    fn write(dir: &Path, sim: SocketAddr, run: u32, extra: &str) -> anyhow::Result<Self> {
        let (name, prefix) = (format!("bench-source-run{run}"), format!("bench-run{run}"));
        let connector = write_file(dir, &format!("source-run{run}.toml"), &source_toml(&name, sim.port(), &prefix, extra))?;
        Ok(Self { connector, topic: format!("{prefix}.sales.dbo.orders") })
    }
}

/// The bare read of the source's change rows, the source's ceiling.
const BARE_SQL: &str = "SELECT * FROM cdc.dbo_orders_CT ORDER BY __$start_lsn, __$seqval, __$operation";

/// One run of the source over the backlog.
struct SourceRun {
    /// From the spawn to the control record that completed the rows, by the stage's clock.
    secs: f64,
    /// The same, by the bench's poll (up to ~0.1 s late).
    polled_secs: f64,
    /// Batches and record bytes it published.
    batches: u64,
    bytes: u64,
    /// From the spawn to its first batch's control record, when recorded.
    first_secs: Option<f64>,
    /// The rate from its first batch's publication to its last (setup left out).
    streaming: f64,
    /// The same change rows read by a bare tiberius query just before the run and just after:
    /// (rows, seconds) each.
    bare: [(u64, f64); 2],
}

impl SourceRun {
    fn between(mut self, before: (u64, f64), after: (u64, f64)) -> Self {
        self.bare = [before, after];
        self
    }

    /// The bare read's rate: the mean of the reads before and after.
    fn ceiling(&self) -> f64 {
        self.bare.iter().map(|&(rows, secs)| if secs > 0.0 { rows as f64 / secs } else { 0.0 }).sum::<f64>() / 2.0
    }

    /// The run's rate as a percentage of [`Self::ceiling`].
    fn share(&self, rows: u64) -> f64 {
        let ceiling = self.ceiling();
        if ceiling > 0.0 && self.secs > 0.0 { 100.0 * rows as f64 / self.secs / ceiling } else { 0.0 }
    }
}

/// Runs the source of `connector` until `topic` holds `rows` rows; returns it, still running,
/// with its times by its control records (the bare reads left empty).
async fn source_run(files: &Files, connector: &Path, topic: &str, rows: u64, dir: &Path, kafka: &KafkaConfig) -> anyhow::Result<(StageProcess, SourceRun)> {
    let spawned = Utc::now();
    let (source, polled_secs) = drain(files, connector, dir, kafka, Until::Published { topic, rows }).await?;
    let (cluster, read) = (kafka.clone(), topic.to_owned());
    let records = super::bench::off_runtime(move || controls(&cluster, &read)).await?;
    let published = Landed::of_controls(&records);
    let run = SourceRun {
        secs: by_records("source", published.seconds_until(rows, spawned), polled_secs),
        batches: records.len() as u64,
        bytes: records.iter().map(|c| c.metrics.bytes).sum(),
        polled_secs,
        first_secs: published.seconds_until(1, spawned),
        streaming: published.streaming_rate(),
        bare: [(0, 0.0); 2],
    };
    Ok((source, run))
}

/// What a draining stage waits for.
pub(super) enum Until<'a> {
    /// The control topic of `topic` names at least `rows` rows.
    Published { topic: &'a str, rows: u64 },
    /// The facts table records this batch for `app_id`'s facts.
    Facts { table: &'a str, app: &'a str, batch: i64 },
    /// Silver's control row (for the silver table at `url`) reached this batch.
    Applied { control: &'a str, url: &'a str, batch: i64 },
    /// The control topic holds a snapshot's completion (`bootstrap` or `resnapshot`).
    SnapshotComplete,
}

impl Until<'_> {
    pub(super) async fn reached(&self, kafka: &KafkaConfig) -> anyhow::Result<bool> {
        Ok(match self {
            Until::Published { topic, rows } => {
                let (cluster, topic) = (kafka.clone(), topic.to_string());
                super::bench::off_runtime(move || totals(&cluster, &topic)).await?.rows >= *rows
            }
            Until::Facts { table: location, app, batch } => match table::open(location, &Default::default()).await? {
                Some(facts) => table::txn_version(&facts, app).await?.unwrap_or(-1) >= *batch,
                None => false,
            },
            Until::Applied { control, url, batch } => control_row(control, url).await.is_some_and(|r| r.applied_batch >= *batch),
            Until::SnapshotComplete => {
                let cluster = kafka.clone();
                let records = super::bench::off_runtime(move || if exists(&cluster, &format!("{TOPIC}.control")) { controls(&cluster, TOPIC) } else { Ok(Vec::new()) }).await?;
                records.iter().any(|r| r.events.iter().any(|e| matches!(e.name(), "bootstrap" | "resnapshot")))
            }
        })
    }
}

/// Starts a stage and waits (polling every 100 ms, at most 30 minutes) until `until`,
/// checking that it stays up; returns it with the seconds it took.
pub(super) async fn drain(files: &Files, connector: &Path, dir: &Path, kafka: &KafkaConfig, until: Until<'_>) -> anyhow::Result<(StageProcess, f64)> {
    let started = Instant::now();
    let mut stage = stage(&files.worker, connector, dir)?;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        stage.alive()?;
        if until.reached(kafka).await? {
            return Ok((stage, started.elapsed().as_secs_f64()));
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(1800), "{} did not drain the backlog in 30 minutes", stage.name());
    }
}

/// Phase 2: the source alone drains the backlog, then bronze alone, then silver alone, each
/// next to its baselines (the same change rows read bare over TDS; a raw producer of the same
/// records; a bare consumer decoding them into one Parquet file; the same records decoded and
/// written with the read left out). Returns the three stages, still running.
async fn drain_backlog(sim: &Simulator, sim_address: SocketAddr, kafka: &KafkaConfig, files: &Files, repeats: &[RepeatedSource], dir: &Path) -> anyhow::Result<(Vec<StageProcess>, Drained)> {
    let expected = sim.changes("dbo_orders").len() as u64;
    // The source's ceiling is read on both sides of each run: this machine's speed drifts
    // between runs, and the mean of the two stands for the time between.
    // The runs before the last go to topics of their own, each source stopped after its run;
    // the last is the bench's source, and bronze reads its topic.
    let mut bare_before = bare_read(sim_address, BARE_SQL).await?;
    let mut source_runs = Vec::new();
    for repeat in repeats {
        let (mut process, timed) = source_run(files, &repeat.connector, &repeat.topic, expected, dir, kafka).await?;
        process.stop();
        let bare_after = bare_read(sim_address, BARE_SQL).await?;
        source_runs.push(timed.between(bare_before, bare_after));
        bare_before = bare_after;
    }
    let (mut source, last) = source_run(files, &files.source, TOPIC, expected, dir, kafka).await?;
    // The bench's source runs on (the steady phase needs it): paused, it cannot take turns
    // with the bare read after it, as the stopped sources before it could not.
    source.process().signal("-STOP")?;
    let bare_after = bare_read(sim_address, BARE_SQL).await;
    source.process().signal("-CONT")?;
    source_runs.push(last.between(bare_before, bare_after?));
    let fed = totals(kafka, TOPIC)?;
    let (_, raw_acked, raw_secs, _) = raw_producer_baseline(kafka, TOPIC).await?;
    for (n, run) in source_runs.iter().enumerate() {
        eprintln!(
            "bench: source run {}: {} rows in {:.2} s ({:.2} s polled), {:.0}% of the bare TDS read ({} rows in {:.2} s before it, {} in {:.2} s after)",
            n + 1,
            fed.rows,
            run.secs,
            run.polled_secs,
            run.share(fed.rows),
            run.bare[0].0,
            run.bare[0].1,
            run.bare[1].0,
            run.bare[1].1
        );
    }
    eprintln!("bench: raw producer {raw_acked} in {raw_secs:.1} s");

    let last_batch = fed.batches as i64 - 1;
    let facts_app = facts_app_id(BRONZE_APP);
    let until = Until::Facts { table: &files.facts_table, app: &facts_app, batch: last_batch };
    let spawned = Utc::now();
    let (bronze, polled_secs) = drain(files, &files.bronze, dir, kafka, until).await?;
    let bronze_metrics = bronze.scrape().unwrap_or_default();
    let written = bronze_commits(&files.facts_table).await?;
    let bronze_secs = by_records("bronze", written.seconds_until(fed.rows, spawned), polled_secs);
    let bronze_first_secs = written.seconds_until(1, spawned);
    let bronze_streaming = written.streaming_rate();
    let consumer_parquet = consumer_parquet_baseline(kafka, TOPIC, fed.rows, dir).await?;
    let (parquet_rows, _, decode_secs, write_secs) = parquet_baseline(kafka, TOPIC, dir).await?;
    eprintln!("bench: bronze in {bronze_secs:.2} s ({polled_secs:.2} s polled); bare consumer + parquet {:.1} s; decode+parquet {:.1} s", consumer_parquet.1, decode_secs + write_secs);

    let silver_url = table::table_url(&files.silver_table)?.to_string();
    let until = Until::Applied { control: &files.control_table, url: &silver_url, batch: last_batch };
    let (silver, silver_secs) = drain(files, &files.silver, dir, kafka, until).await?;
    let silver_metrics = silver.scrape().unwrap_or_default();
    let drained = Drained {
        rows: fed.rows,
        bytes: fed.bytes,
        source_runs,
        raw_acked,
        raw_secs,
        bronze_secs,
        bronze_first_secs,
        bronze_streaming,
        bronze_metrics,
        parquet_rows,
        parquet_secs: decode_secs + write_secs,
        consumer_parquet,
        silver_secs,
        silver_metrics,
    };
    Ok((vec![source, bronze, silver], drained))
}

/// A stage's time by its own records, or by the bench's poll (said on stderr) when its records
/// do not account for every row.
fn by_records(stage: &str, recorded: Option<f64>, polled: f64) -> f64 {
    recorded.unwrap_or_else(|| {
        eprintln!("bench: {stage}'s records do not account for every row: its time is the bench's poll ({polled:.2} s), up to ~1 s late");
        polled
    })
}

/// Bronze's commits, from the facts table: each commit's `written_at` with the rows of its
/// batches, as the source's batches are taken from its control records.
async fn bronze_commits(facts_table: &str) -> anyhow::Result<Landed> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Int64Type;

    let Some(facts) = table::open(facts_table, &Default::default()).await? else { return Ok(Landed::new(Vec::new())) };
    let sql = "SELECT CAST(written_at AS BIGINT) AS at, CAST(SUM(rows) AS BIGINT) AS rows FROM facts WHERE event = 'batch' GROUP BY written_at ORDER BY at";
    let batches = mssql_cdc_lake::delta::query::query(&[("facts", &facts)], sql).await?;
    let mut commits = Vec::new();
    for batch in &batches {
        let (at, rows) = (batch.column(0).as_primitive::<Int64Type>(), batch.column(1).as_primitive::<Int64Type>());
        let valid = (0..batch.num_rows()).filter(|i| at.is_valid(*i) && rows.is_valid(*i));
        commits.extend(valid.filter_map(|i| Some((DateTime::from_timestamp_micros(at.value(i))?, u64::try_from(rows.value(i)).ok()?))));
    }
    Ok(Landed::new(commits))
}

/// What phase 3 measured.
struct Steady {
    workload: mssql_cdc_sim::workload::WorkloadReport,
    /// Each commit's latency to silver, ms.
    latencies: Vec<f64>,
    /// Commits never seen applied.
    unseen: usize,
}

/// Phase 3: with all three stages running, the workload commits `rate` changes/s for
/// `seconds`; the silver control row is read every 100 ms, and each commit's latency is the
/// time from its `tran_end_time` to the first read whose `end_commit_ts` covers it.
async fn steady_rate(sim: &Simulator, files: &Files, stages: &mut [StageProcess], rate: u64, seconds: u64) -> anyhow::Result<Steady> {
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let options = WorkloadOptions { rate, changes: u64::MAX, seed: 11, ..WorkloadOptions::default() };
    let workload = Workload::new(options, order_ids(sim)).controlled(stop.clone(), made.clone());
    let workload_sim = sim.clone();
    let steady_start = Utc::now();
    let thread = std::thread::spawn(move || {
        let mut workload = workload;
        workload.run(&mut LocalClient::new(&workload_sim))
    });
    let silver_url = table::table_url(&files.silver_table)?.to_string();
    let mut observations: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    let begun = Instant::now();
    let mut steady_end = None;
    loop {
        for process in stages.iter_mut() {
            process.alive()?;
        }
        if let Some(end) = control_row(&files.control_table, &silver_url).await.and_then(|r| r.end_commit_ts) {
            observations.push((Utc::now(), end));
        }
        if steady_end.is_none() && begun.elapsed() >= Duration::from_secs(seconds) {
            stop.store(true, Ordering::Relaxed);
            steady_end = Some(Utc::now());
        }
        if let Some(end) = steady_end
            && (observations.last().is_some_and(|(_, applied)| *applied >= end) || Utc::now() - end > chrono::Duration::seconds(60)) {
                break;
            }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let workload = thread.join().map_err(|_| anyhow::anyhow!("the workload panicked"))??;
    let commits = commit_times(sim, steady_start, steady_end.unwrap_or_else(Utc::now));
    let (latencies, unseen) = latencies(&commits, &observations);
    Ok(Steady { workload, latencies, unseen })
}

/// The report: one Markdown table.
fn print_report(args: &ReportBench, drained: &Drained, steady: &[Steady], kafka_latencies: &[f64], peak: &[f64], idle_rss: &[f64]) {
    let silver_metrics = &drained.silver_metrics;
    let silver_batches = sum(silver_metrics, m::SILVER_BATCHES_TOTAL).unwrap_or(0.0);
    let silver_apply_sum = sum(silver_metrics, &format!("{}_sum", m::SILVER_APPLY_DURATION_SECONDS)).unwrap_or(0.0);
    let silver_steps = sum(silver_metrics, &format!("{}_count", m::SILVER_APPLY_DURATION_SECONDS)).unwrap_or(0.0);
    let bronze_commit = mean(&drained.bronze_metrics, m::BRONZE_COMMIT_DURATION_SECONDS).unwrap_or(0.0);
    let (rows, mb) = (drained.rows as f64, drained.bytes as f64 / 1e6);
    let per = |total: f64, count: f64| if count > 0.0 { total / count * 1000.0 } else { 0.0 };
    println!("| measure | mssql-cdc | baseline, same run |");
    println!("|---|---|---|");
    let rate = |(count, secs): (u64, f64)| if secs > 0.0 { count as f64 / secs } else { 0.0 };
    let millis = |secs: Option<f64>| secs.map_or("an unrecorded time".to_owned(), |secs| format!("{:.0} ms", secs * 1000.0));
    let share = |part: f64, whole: f64| if whole > 0.0 { 100.0 * part / whole } else { 0.0 };
    // A rate from the first commit to the last needs two commits at least.
    let streaming = |rate: f64, of: f64| if rate > 0.0 { format!("streaming {rate:.0} rows/s, {:.0}%", share(rate, of)) } else { "no streaming rate (fewer than two batches or commits)".into() };
    // The median run by its share of its own bare reads.
    let mut by_share: Vec<&SourceRun> = drained.source_runs.iter().collect();
    by_share.sort_by(|a, b| a.share(drained.rows).total_cmp(&b.share(drained.rows)));
    let shares: Vec<String> = drained.source_runs.iter().map(|r| format!("{:.0}%", r.share(drained.rows))).collect();
    if let Some(median) = by_share.get(by_share.len() / 2) {
        let [before, after] = median.bare.map(rate);
        let (source_rate, bare_read) = (rows / median.secs, median.ceiling());
        println!(
            "| source: backlog of {} change rows, TDS → Kafka (median of {} runs) | {source_rate:.0} rows/s, {:.1} MB/s ({} batches; process start included, first batch at {}), {:.0}% of the bare read (runs in order: {}); {} | bare tiberius read of the same change rows: {bare_read:.0} rows/s (mean of {before:.0} just before that run and {after:.0} just after); bare rdkafka producer, same records: {:.0} rows/s |",
            drained.rows,
            drained.source_runs.len(),
            median.bytes as f64 / 1e6 / median.secs,
            median.batches,
            millis(median.first_secs),
            share(source_rate, bare_read),
            shares.join(", "),
            streaming(median.streaming, bare_read),
            drained.raw_acked as f64 / drained.raw_secs
        );
    }
    let (bronze_rate, consumer_parquet) = (rows / drained.bronze_secs, rate(drained.consumer_parquet));
    println!(
        "| bronze: the same feed → Delta, with facts | {bronze_rate:.0} rows/s, {:.1} MB/s ({:.0} ms per batch commit; process start included, first commit at {}), {:.0}% of the bare consumer; {} | bare rdkafka consumer + JSON decode + one Parquet file: {consumer_parquet:.0} rows/s; decode + Parquet alone (read left out): {:.0} rows/s |",
        mb / drained.bronze_secs,
        bronze_commit * 1000.0,
        millis(drained.bronze_first_secs),
        share(bronze_rate, consumer_parquet),
        streaming(drained.bronze_streaming, consumer_parquet),
        drained.parquet_rows as f64 / drained.parquet_secs
    );
    println!(
        "| silver: apply time per batch ({} batches in {:.0} applies, {:.1} s) | {:.1} ms per batch, {:.0} ms per apply | bronze's append: {:.0} ms per batch |",
        silver_batches,
        silver_steps,
        drained.silver_secs,
        per(silver_apply_sum, silver_batches),
        per(silver_apply_sum, silver_steps),
        bronze_commit * 1000.0
    );
    for (rate, steady) in args.rate.iter().zip(steady) {
        println!(
            "| end to end at {rate} changes/s ({:.0} made) for {} s: commit → visible in silver ({} commits{}) | p50 {:.0} ms, p99 {:.0} ms | Kafka produce → consume, same broker: p50 {:.0} ms, p99 {:.0} ms |",
            steady.workload.changes_per_second(),
            args.steady_seconds,
            steady.latencies.len(),
            if steady.unseen > 0 { format!(", {} not seen", steady.unseen) } else { String::new() },
            percentile(&steady.latencies, 0.50),
            percentile(&steady.latencies, 0.99),
            percentile(kafka_latencies, 0.50),
            percentile(kafka_latencies, 0.99)
        );
    }
    println!(
        "| peak RSS per stage process: source / bronze / silver | {:.0} / {:.0} / {:.0} MB | idle, same processes: {:.0} / {:.0} / {:.0} MB |",
        peak[0], peak[1], peak[2], idle_rss[0], idle_rss[1], idle_rss[2]
    );
    println!();
}

/// The connector files of the run.
/// The worker and connector files of the benchmarks' stages, and their tables.
pub(super) struct Files {
    pub(super) worker: PathBuf,
    pub(super) source: PathBuf,
    pub(super) bronze: PathBuf,
    pub(super) silver: PathBuf,
    pub(super) facts_table: String,
    pub(super) silver_table: String,
    pub(super) control_table: String,
}

impl Files {
    /// Writes them under `dir`, the source with `source_extra` lines, silver with `silver_extra`.
    pub(super) fn write(dir: &Path, bootstrap: &str, sim: SocketAddr, source_extra: &str, silver_extra: &str) -> anyhow::Result<Self> {
        let lake = Lake::local(&dir.join("lake"));
        Ok(Self {
            worker: write_file(dir, "worker.toml", &worker_toml(bootstrap, ""))?,
            source: write_file(dir, "source.toml", &source_toml("bench-source", sim.port(), "bench", source_extra))?,
            bronze: write_file(dir, "bronze.toml", &bronze_toml("bench", TOPIC, BRONZE_APP, &lake, ""))?,
            silver: write_file(dir, "silver.toml", &silver_toml("bench-silver", "bench-bronze", "bench-silver", &lake, silver_extra))?,
            facts_table: lake.table("facts"),
            silver_table: lake.table("silver"),
            control_table: lake.table("control"),
        })
    }
}

/// One stage as an `mssql-cdc run` child process, its log in the working directory.
pub(super) fn stage(worker: &Path, connector: &Path, dir: &Path) -> anyhow::Result<StageProcess> {
    let name = connector.file_stem().map_or("stage".into(), |s| s.to_string_lossy().into_owned());
    Ok(StageProcess::spawn(&name, worker, connector, &[], Log::File(dir.join(format!("{name}.log"))))?)
}

async fn control_row(control_table: &str, silver_url: &str) -> Option<control::ControlRow> {
    let table = table::open(control_table, &Default::default()).await.ok()??;
    control::read_row(&table, silver_url).await.ok()?
}

pub(super) fn order_ids(sim: &Simulator) -> Vec<i64> {
    sim.table_rows("dbo", "orders").unwrap_or_default().iter().filter_map(|row| if let Some(Value::Int(id)) = row.first() { Some(*id) } else { None }).collect()
}

/// The commit times (`cdc.lsn_time_mapping.tran_end_time`, UTC) in `[from, to]`.
fn commit_times(sim: &Simulator, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    sim.changes("dbo_orders");
    let sets = sim.query("SELECT tran_end_time FROM cdc.lsn_time_mapping").unwrap_or_default();
    let mut times: Vec<DateTime<Utc>> = sets
        .iter()
        .flat_map(|set| set.rows.iter())
        .filter_map(|row| if let Some(Value::DateTime(t)) = row.first() { Some(t.and_utc()) } else { None })
        .filter(|t| *t >= from && *t <= to)
        .collect();
    times.sort();
    times
}

/// Produce-to-consume latencies (ms) of `count` small records, one every 20 ms, on a fresh
/// topic, with the consumer settings bronze's control consumer uses.
async fn kafka_round_trips(kafka: &KafkaConfig, count: usize) -> anyhow::Result<Vec<f64>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::Message;

    let topic = format!("bench.latency.{}", uuid::Uuid::new_v4());
    mssql_cdc_core::kafka::admin::ensure_topics(kafka, &[(&topic, 1)]).await?;
    let kafka = kafka.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<f64>> {
        let producer: BaseProducer = kafka.client_config()?.set("linger.ms", "5").set("enable.idempotence", "true").create()?;
        let consumer: BaseConsumer = kafka
            .client_config()?
            .set("group.id", format!("bench-latency-{}", uuid::Uuid::new_v4()))
            .set("auto.offset.reset", "latest")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", mssql_cdc_lake::bronze::feed::CONTROL_FETCH_WAIT_MS.to_string())
            .create()?;
        consumer.subscribe(&[&topic])?;
        // Wait for the assignment before sending.
        let ready = Instant::now();
        while consumer.assignment()?.count() == 0 && ready.elapsed() < Duration::from_secs(30) {
            consumer.poll(Duration::from_millis(100));
        }
        for _ in 0..10 {
            consumer.poll(Duration::from_millis(100));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let stop = stop.clone();
            let topic = topic.clone();
            std::thread::spawn(move || {
                for _ in 0..count {
                    let sent = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros().to_string();
                    let _ = producer.send(BaseRecord::to(&topic).key("k").payload(&sent));
                    producer.poll(Duration::from_millis(0));
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = producer.flush(Duration::from_secs(30));
                stop.store(true, Ordering::Relaxed);
            })
        };
        let mut out = Vec::with_capacity(count);
        let deadline = Instant::now() + Duration::from_secs(120);
        while out.len() < count && Instant::now() < deadline {
            if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_micros();
                if let Some(sent) = message.payload().and_then(|p| std::str::from_utf8(p).ok()).and_then(|p| p.parse::<u128>().ok())
                    && sent > 0 {
                        out.push(now.saturating_sub(sent) as f64 / 1000.0);
                    }
            } else if stop.load(Ordering::Relaxed) && out.len() + 1 >= count {
                break;
            }
        }
        let _ = sender.join();
        Ok(out)
    })
    .await?
}
