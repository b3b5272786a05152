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
//!    `--steady-seconds`; the silver control row is read every 100 ms, and each commit's
//!    latency is the time from its `tran_end_time` to the first read whose `end_commit_ts`
//!    covers it. Baseline: a record's produce-to-consume latency on the same broker.
//!
//! The report is a Markdown table on standard output (as `docs/performance.md` holds it).

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use chrono::{DateTime, Utc};
use mssql_cdc::broker::BrokerStorage;
use mssql_cdc::delta::table;
use mssql_cdc::kafka::KafkaConfig;
use mssql_cdc::sim::workload::{create_orders, Workload, WorkloadOptions};
use mssql_cdc::sim::{LocalClient, Output, SimConfig, Simulator, Value};
use mssql_cdc::sink::facts::facts_app_id;
use mssql_cdc::sink::silver::control;
use mssql_cdc::telemetry::metrics as m;

use super::bench::{control_totals, parquet_baseline, raw_producer_baseline};
use super::services::Services;

#[derive(Debug, clap::Args)]
pub struct ReportBench {
    /// Changes in the backlog the stages drain one after the other.
    #[arg(long, default_value_t = 100_000)]
    changes: u64,
    /// Changes per second in the steady phase.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Seconds of the steady phase.
    #[arg(long, default_value_t = 30)]
    steady_seconds: u64,
    /// The embedded broker's storage: `memory` (closest to a Kafka cluster's throughput) or
    /// `sqlite` (in the working directory; as the demo and the tests use it).
    #[arg(long, default_value = "memory")]
    broker_storage: String,
    /// Working directory (tables, broker storage, stage logs); cleared first.
    #[arg(long, default_value = "./bench-data/report")]
    dir: PathBuf,
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

const TOPIC: &str = "bench.sales.dbo.orders";
const BRONZE_APP: &str = "bench-bronze";

pub async fn run(args: ReportBench) -> anyhow::Result<ExitCode> {
    let dir = args.dir.clone();
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let sim = Simulator::new(SimConfig::default());
    let _jobs = sim.spawn_jobs(Duration::from_millis(100));
    create_orders(&mut LocalClient::new(&sim)).map_err(|e| anyhow::anyhow!("setup: {e}"))?;
    let storage = match args.broker_storage.as_str() {
        "memory" => BrokerStorage::Memory,
        "sqlite" => BrokerStorage::Sqlite(dir.join("broker.db")),
        other => anyhow::bail!("--broker-storage: `{other}` (expected `sqlite` or `memory`)"),
    };
    let services = Services::start(storage, "mssql-cdc-bench", &sim).await?;
    let (sim_address, broker_address) = (services.sim_address, services.broker_address);
    let kafka = KafkaConfig { bootstrap_servers: broker_address.to_string(), ..KafkaConfig::default() };
    let files = Files::write(&dir, &broker_address.to_string(), sim_address)?;
    eprintln!("bench: simulator on {sim_address}, broker on {broker_address}, files in {}", dir.display());

    // 1. Idle memory.
    let mut idle = Vec::new();
    for connector in [&files.source, &files.bronze, &files.silver] {
        idle.push(StageProcess::spawn(&files.worker, connector, &dir)?);
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    let idle_rss: Vec<f64> = idle.iter().map(|p| p.rss_mb("VmRSS")).collect();
    for mut process in idle {
        process.kill();
    }

    // 2. Backlog.
    let options = WorkloadOptions { rate: 0, changes: args.changes, ..WorkloadOptions::default() };
    let workload_sim = sim.clone();
    let report = tokio::task::spawn_blocking(move || Workload::new(options, Vec::new()).run(&mut LocalClient::new(&workload_sim))).await??;
    let expected = sim.changes("dbo_orders").len() as u64;
    eprintln!("bench: backlog of {} changes ({expected} change rows)", report.changes);

    let started = Instant::now();
    let source = StageProcess::spawn(&files.worker, &files.source, &dir)?;
    let (rows, bytes, batches) = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        source.alive()?;
        let totals = tokio::task::block_in_place(|| control_totals(&kafka, &format!("{TOPIC}.control")))?;
        if totals.0 >= expected {
            break totals;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(1800), "the source did not drain the backlog in 30 minutes");
    };
    let source_secs = started.elapsed().as_secs_f64();
    let (_, acked, raw_secs, _) = raw_producer_baseline(&kafka, TOPIC).await?;
    eprintln!("bench: source {rows} rows in {source_secs:.1} s; raw producer {acked} in {raw_secs:.1} s");

    let last_batch = batches as i64 - 1;
    let started = Instant::now();
    let bronze = StageProcess::spawn(&files.worker, &files.bronze, &dir)?;
    let facts_app = facts_app_id(BRONZE_APP);
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        bronze.alive()?;
        if let Some(facts) = table::open(&files.facts_table, &Default::default()).await? {
            if table::txn_version(&facts, &facts_app).await?.unwrap_or(-1) >= last_batch {
                break;
            }
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(1800), "bronze did not drain the backlog in 30 minutes");
    }
    let bronze_secs = started.elapsed().as_secs_f64();
    let bronze_metrics = bronze.scrape();
    let (baseline_rows, _, decode_secs, write_secs) = parquet_baseline(&kafka, TOPIC, &dir).await?;
    eprintln!("bench: bronze in {bronze_secs:.1} s; decode+parquet {:.1} s", decode_secs + write_secs);

    let started = Instant::now();
    let silver = StageProcess::spawn(&files.worker, &files.silver, &dir)?;
    let silver_url = table::table_url(&files.silver_table)?.to_string();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        silver.alive()?;
        if control_row(&files.control_table, &silver_url).await.is_some_and(|r| r.applied_batch >= last_batch) {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(1800), "silver did not drain the backlog in 30 minutes");
    }
    let silver_secs = started.elapsed().as_secs_f64();
    let silver_metrics = silver.scrape();

    // 3. Steady rate, all three running.
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let options = WorkloadOptions { rate: args.rate, changes: u64::MAX, seed: 11, ..WorkloadOptions::default() };
    let existing = order_ids(&sim);
    let workload = Workload::new(options, existing).controlled(stop.clone(), made.clone());
    let workload_sim = sim.clone();
    let steady_start = Utc::now();
    let thread = std::thread::spawn(move || {
        let mut workload = workload;
        workload.run(&mut LocalClient::new(&workload_sim))
    });
    let mut observations: Vec<(DateTime<Utc>, DateTime<Utc>)> = Vec::new();
    let steady = Duration::from_secs(args.steady_seconds);
    let begun = Instant::now();
    let mut steady_end = None;
    loop {
        for process in [&source, &bronze, &silver] {
            process.alive()?;
        }
        if let Some(end) = control_row(&files.control_table, &silver_url).await.and_then(|r| r.end_commit_ts) {
            observations.push((Utc::now(), end));
        }
        if steady_end.is_none() && begun.elapsed() >= steady {
            stop.store(true, Ordering::Relaxed);
            steady_end = Some(Utc::now());
        }
        if let Some(end) = steady_end {
            if observations.last().is_some_and(|(_, applied)| *applied >= end) || Utc::now() - end > chrono::Duration::seconds(60) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let steady_report = thread.join().map_err(|_| anyhow::anyhow!("the workload panicked"))??;
    let commits = commit_times(&sim, steady_start, steady_end.unwrap_or_else(Utc::now));
    let (latencies, unseen) = latencies(&commits, &observations);
    let kafka_latencies = kafka_round_trips(&kafka, 200).await?;
    let peak: Vec<f64> = [&source, &bronze, &silver].iter().map(|p| p.rss_mb("VmHWM")).collect();
    for mut process in [source, bronze, silver] {
        process.stop();
    }
    services.stop().await;

    // The report.
    let mean = |text: &str, name: &str| {
        let sum = super::demo::sum_metric(text, &format!("{name}_sum"))?;
        let count = super::demo::sum_metric(text, &format!("{name}_count"))?;
        (count > 0.0).then(|| sum / count)
    };
    let silver_batches = super::demo::sum_metric(&silver_metrics, m::SILVER_BATCHES_TOTAL).unwrap_or(0.0);
    let silver_apply_sum = super::demo::sum_metric(&silver_metrics, &format!("{}_sum", m::SILVER_APPLY_DURATION_SECONDS)).unwrap_or(0.0);
    let silver_steps = super::demo::sum_metric(&silver_metrics, &format!("{}_count", m::SILVER_APPLY_DURATION_SECONDS)).unwrap_or(0.0);
    let bronze_commit = mean(&bronze_metrics, m::BRONZE_COMMIT_DURATION_SECONDS).unwrap_or(0.0);
    let mb = bytes as f64 / 1e6;
    println!("| measure | mssql-cdc | baseline, same run |");
    println!("|---|---|---|");
    println!(
        "| source: backlog of {} change rows, TDS → Kafka | {:.0} rows/s, {:.1} MB/s ({batches} batches) | bare rdkafka producer, same records: {:.0} rows/s |",
        rows,
        rows as f64 / source_secs,
        mb / source_secs,
        acked as f64 / raw_secs
    );
    println!(
        "| bronze: the same feed → Delta, with facts | {:.0} rows/s, {:.1} MB/s ({:.0} ms per batch commit) | JSON decode + one Parquet file: {:.0} rows/s |",
        rows as f64 / bronze_secs,
        mb / bronze_secs,
        bronze_commit * 1000.0,
        baseline_rows as f64 / (decode_secs + write_secs)
    );
    println!(
        "| silver: apply time per batch ({} batches in {:.0} applies, {:.1} s) | {:.1} ms per batch, {:.0} ms per apply | bronze's append: {:.0} ms per batch |",
        silver_batches,
        silver_steps,
        silver_secs,
        if silver_batches > 0.0 { silver_apply_sum / silver_batches * 1000.0 } else { 0.0 },
        if silver_steps > 0.0 { silver_apply_sum / silver_steps * 1000.0 } else { 0.0 },
        bronze_commit * 1000.0
    );
    println!(
        "| end to end at {} changes/s for {} s: commit → visible in silver ({} commits{}) | p50 {:.0} ms, p99 {:.0} ms | Kafka produce → consume, same broker: p50 {:.0} ms, p99 {:.0} ms |",
        args.rate,
        args.steady_seconds,
        latencies.len(),
        if unseen > 0 { format!(", {unseen} not seen") } else { String::new() },
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        percentile(&kafka_latencies, 0.50),
        percentile(&kafka_latencies, 0.99)
    );
    println!(
        "| peak RSS per stage process: source / bronze / silver | {:.0} / {:.0} / {:.0} MB | idle, same processes: {:.0} / {:.0} / {:.0} MB |",
        peak[0], peak[1], peak[2], idle_rss[0], idle_rss[1], idle_rss[2]
    );
    println!();
    println!(
        "steady workload: {} changes in {} transactions ({:.0} changes/s); backlog workload {} changes; broker storage {}; machine: {} cores",
        steady_report.changes,
        steady_report.transactions,
        steady_report.changes_per_second(),
        report.changes,
        args.broker_storage,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    Ok(ExitCode::SUCCESS)
}

/// The connector files of the run.
struct Files {
    worker: PathBuf,
    source: PathBuf,
    bronze: PathBuf,
    silver: PathBuf,
    facts_table: String,
    silver_table: String,
    control_table: String,
}

impl Files {
    fn write(dir: &Path, bootstrap: &str, sim: SocketAddr) -> anyhow::Result<Self> {
        let lake = dir.join("lake");
        let (bronze_table, facts_table) = (lake.join("bronze").display().to_string(), lake.join("facts").display().to_string());
        let (silver_table, control_table) = (lake.join("silver").display().to_string(), lake.join("control").display().to_string());
        let write = |name: &str, text: String| -> anyhow::Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        Ok(Self {
            worker: write("worker.toml", format!("[kafka]\nbootstrap_servers = \"{bootstrap}\"\n[telemetry]\nlisten = \"127.0.0.1:0\"\n"))?,
            source: write(
                "source.toml",
                format!(
                    "name = \"bench-source\"\nkind = \"mssql-source\"\nconnection_string = \"Server=127.0.0.1,{};Database=sales\"\nuser = \"sa\"\npassword = {{ env = \"MSSQL_CDC_SIM_PASSWORD\" }}\nencrypt = \"not_supported\"\ncapture_instances = [\"dbo_orders\"]\ntopic_prefix = \"bench\"\nmax_commits_per_batch = 1000\npoll_interval_ms = 100\nheartbeat_interval_ms = 1000\n",
                    sim.port()
                ),
            )?,
            bronze: write(
                "bronze.toml",
                format!("name = \"bench-bronze\"\nkind = \"delta-bronze\"\ntopic = \"{TOPIC}\"\ntarget = \"{bronze_table}\"\napp_id = \"{BRONZE_APP}\"\nfacts_table = \"{facts_table}\"\n"),
            )?,
            silver: write(
                "silver.toml",
                format!(
                    "name = \"bench-silver\"\nkind = \"delta-silver\"\nbronze = \"{bronze_table}\"\ntarget = \"{silver_table}\"\napp_id = \"bench-silver\"\ncontrol_table = \"{control_table}\"\nfacts_table = \"{facts_table}\"\ngranularity = \"minute\"\npoll_interval_ms = 200\n"
                ),
            )?,
            facts_table,
            silver_table,
            control_table,
        })
    }
}

/// One stage as an `mssql-cdc run` child process, its log in the working directory.
struct StageProcess {
    child: Child,
    metrics: SocketAddr,
}

impl StageProcess {
    fn spawn(worker: &Path, connector: &Path, dir: &Path) -> anyhow::Result<Self> {
        let name = connector.file_stem().map_or("stage".into(), |s| s.to_string_lossy().into_owned());
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(format!("{name}.log")))?;
        let mut child = Command::new(std::env::current_exe()?)
            .args(["run", "--worker"])
            .arg(worker)
            .arg(connector)
            .env("MSSQL_CDC_SIM_PASSWORD", std::env::var("MSSQL_CDC_SIM_PASSWORD").unwrap_or_else(|_| "Sim-Passw0rd".into()))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()?;
        let stdout = child.stdout.take().context("piped stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = lines.next().context("the stage printed nothing")??;
        let metrics = line.strip_prefix("metrics on ").context("a `metrics on` line")?.parse()?;
        std::thread::spawn(move || for _ in lines {});
        Ok(Self { child, metrics })
    }

    fn alive(&self) -> anyhow::Result<()> {
        let path = format!("/proc/{}/status", self.child.id());
        let state = std::fs::read_to_string(&path).unwrap_or_default();
        anyhow::ensure!(state.lines().any(|l| l.starts_with("State:") && !l.contains("zombie")), "a stage process exited: see its log in the bench directory");
        Ok(())
    }

    /// `VmRSS` or `VmHWM` (peak) of the process, MB.
    fn rss_mb(&self, field: &str) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
            .map_or(0.0, |kb| kb / 1024.0)
    }

    /// Its `/metrics` text.
    fn scrape(&self) -> String {
        let Ok(mut stream) = TcpStream::connect(self.metrics) else { return String::new() };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let _ = write!(stream, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then SIGKILL after 20 s.
    fn stop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
    }
}

impl Drop for StageProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn control_row(control_table: &str, silver_url: &str) -> Option<control::ControlRow> {
    let table = table::open(control_table, &Default::default()).await.ok()??;
    control::read_row(&table, silver_url).await.ok()?
}

fn order_ids(sim: &Simulator) -> Vec<i64> {
    sim.table_rows("dbo", "orders").unwrap_or_default().iter().filter_map(|row| if let Some(Value::Int(id)) = row.first() { Some(*id) } else { None }).collect()
}

/// The commit times (`cdc.lsn_time_mapping.tran_end_time`, UTC) in `[from, to]`.
fn commit_times(sim: &Simulator, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    sim.changes("dbo_orders");
    let mut session = sim.session();
    let outcome = sim.execute(&mut session, "SELECT tran_end_time FROM cdc.lsn_time_mapping", &[]);
    let mut times: Vec<DateTime<Utc>> = outcome
        .outputs
        .iter()
        .filter_map(|o| if let Output::Rows(set) = o { Some(set) } else { None })
        .flat_map(|set| set.rows.iter())
        .filter_map(|row| if let Some(Value::DateTime(t)) = row.first() { Some(t.and_utc()) } else { None })
        .filter(|t| *t >= from && *t <= to)
        .collect();
    times.sort();
    times
}

/// Each commit's latency, ms: from its time to the first observation whose applied end covers
/// it. Returns (latencies, commits never seen applied).
fn latencies(commits: &[DateTime<Utc>], observations: &[(DateTime<Utc>, DateTime<Utc>)]) -> (Vec<f64>, usize) {
    let mut out = Vec::with_capacity(commits.len());
    let mut unseen = 0;
    for commit in commits {
        match observations.iter().find(|(_, applied)| applied >= commit) {
            Some((seen, _)) => out.push(((*seen - *commit).num_microseconds().unwrap_or(0) as f64 / 1000.0).max(0.0)),
            None => unseen += 1,
        }
    }
    (out, unseen)
}

/// Produce-to-consume latencies (ms) of `count` small records, one every 20 ms, on a fresh
/// topic, with the consumer settings bronze's control consumer uses.
async fn kafka_round_trips(kafka: &KafkaConfig, count: usize) -> anyhow::Result<Vec<f64>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::Message;

    let topic = format!("bench.latency.{}", uuid::Uuid::new_v4());
    let admin = mssql_cdc::source::mssql::publish::Publisher::new(kafka, &Default::default(), "bench-latency")?;
    admin.ensure_topics(&topic, 1, &format!("{topic}.control")).await?;
    drop(admin);
    let kafka = kafka.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<f64>> {
        let producer: BaseProducer = kafka.client_config()?.set("linger.ms", "5").set("enable.idempotence", "true").create()?;
        let consumer: BaseConsumer = kafka
            .client_config()?
            .set("group.id", format!("bench-latency-{}", uuid::Uuid::new_v4()))
            .set("auto.offset.reset", "latest")
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "100")
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
                if let Some(sent) = message.payload().and_then(|p| std::str::from_utf8(p).ok()).and_then(|p| p.parse::<u128>().ok()) {
                    if sent > 0 {
                        out.push(now.saturating_sub(sent) as f64 / 1000.0);
                    }
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

/// The `q` quantile (nearest rank) of `values`; 0 when empty.
fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit's latency runs to the first read that covers it; a commit no read covers is
    /// counted, not dropped.
    #[test]
    fn latency_is_measured_to_the_first_covering_read() {
        let t = |ms: i64| DateTime::<Utc>::from_timestamp_millis(1_800_000_000_000 + ms).unwrap();
        let commits = [t(0), t(100), t(900)];
        let observations = [(t(50), t(-10)), (t(300), t(150)), (t(800), t(800))];
        let (found, unseen) = latencies(&commits, &observations);
        assert_eq!(found, vec![300.0, 200.0]);
        assert_eq!(unseen, 1);
    }

    /// Nearest-rank percentiles.
    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
