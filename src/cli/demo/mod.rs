//! `mssql-cdc demo`: the whole pipeline on one machine with nothing installed.
//!
//! One process holds every part, each the real thing: the SQL Server simulator served over TDS
//! on a free local port, the embedded Kafka-protocol broker (in memory), and the three stages
//! of `connectors/demo/` (the source reading CDC through tiberius, the bronze sink, the silver
//! stage) writing Delta tables under `./demo-data/`. A workload drives `dbo.orders` at a steady
//! rate while a live view shows each stage's progress from the Prometheus metrics. At Ctrl-C,
//! SIGTERM or after `--duration`, the workload stops, the stages catch up to the last commit,
//! and silver is read back and compared with the simulator's table, column by column.



use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mssql_cdc::broker::BrokerStorage;
use mssql_cdc_core::config::load::Document;
use mssql_cdc_core::config::secret::{Secret, SecretString};
use mssql_cdc::connectors::ConnectorConfig;
use mssql_cdc_core::config::WorkerConfig;
use mssql_cdc_lake::delta::table;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_types::lsn::Lsn;
use mssql_cdc_sim::workload::{create_orders, Workload, WorkloadOptions};
use mssql_cdc_sim::{LocalClient, SimConfig, Simulator, Value};
use mssql_cdc_lake::silver::control;
use mssql_cdc_source::config::ConnectionString;
use mssql_cdc::connectors::ConnectorSettings;
use mssql_cdc_core::telemetry::{http, metrics, Health};
use mssql_cdc_testkit::{compare as check, view};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

use super::services::Services;

/// The connector files the demo runs, as shipped in `connectors/demo/`.
const CONNECTORS: &[(&str, &str)] = &[
    ("connectors/demo/source.toml", include_str!("../../../connectors/demo/source.toml")),
    ("connectors/demo/bronze.toml", include_str!("../../../connectors/demo/bronze.toml")),
    ("connectors/demo/silver.toml", include_str!("../../../connectors/demo/silver.toml")),
];
/// Where the demo's tables go (the connector files name paths under it).
const DATA_DIR: &str = "demo-data";
/// A file marking a directory as the demo's, so a rerun may clear it.
const MARKER: &str = ".mssql-cdc-demo";
/// Exit code when silver does not equal the simulator's table.
const EXIT_DIFFERENT: u8 = 1;

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Seconds the workload runs before the demo stops by itself (default: until Ctrl-C).
    #[arg(long)]
    duration: Option<u64>,
    /// Workload changes per second.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Seconds the stages get to catch up after the workload stops.
    #[arg(long, default_value_t = 180)]
    catch_up_timeout: u64,
    /// Address of the `/metrics` and `/health` listener (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics_listen: SocketAddr,
}

pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    prepare_data_dir(Path::new(DATA_DIR))?;
    let shutdown = CancellationToken::new();
    let health = Health::default();
    let handle = metrics::install();
    let metrics_address = http::serve(args.metrics_listen, handle.clone(), health.clone(), None, shutdown.clone()).await?;

    let password = mssql_cdc_sim::client::password_from_env();
    let sim = Simulator::new(SimConfig { logins: vec![("sa".to_owned(), password.clone())], ..SimConfig::default() });
    let _jobs = sim.spawn_jobs(Duration::from_millis(100));
    create_orders(&mut LocalClient::new(&sim)).map_err(|error| anyhow::anyhow!("creating dbo.orders: {error}"))?;
    // SQLite storage: the broker's memory engine can report high watermarks behind the records
    // a consumer reads, and the demo should show the storage a deployment would use.
    let services = Services::start(BrokerStorage::Sqlite(Path::new(DATA_DIR).join("broker.db")), "mssql-cdc-demo", &sim).await?;
    let (sim_address, broker_address) = (services.sim_address, services.broker_address);
    println!("simulator (SQL Server over TDS) on {sim_address}; broker on {broker_address}; metrics on http://{metrics_address}/metrics");
    println!("stages from connectors/demo/ (source, bronze, silver); tables under ./{DATA_DIR}/lake/");

    let stages_cancel = CancellationToken::new();
    let (mut stages, (silver_table, control_table)) = start_stages(sim_address, broker_address, &password, &stages_cancel)?;
    health.set_ready(true);

    // The workload, on its own thread, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicU64::new(0));
    let options = WorkloadOptions { rate: args.rate, changes: u64::MAX, ..WorkloadOptions::default() };
    let workload = Workload::new(options, Vec::new()).controlled(stop.clone(), made.clone());
    let workload_sim = sim.clone();
    let workload_thread = std::thread::spawn(move || {
        let mut workload = workload;
        workload.run(&mut LocalClient::new(&workload_sim))
    });

    let mut live = Live::new(handle, made.clone(), &silver_table, &control_table);
    let started = live.started;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let deadline = args.duration.map(Duration::from_secs);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let reason = loop {
        tokio::select! {
            _ = terminate.recv() => break "SIGTERM",
            _ = interrupt.recv() => break "Ctrl-C",
            joined = stages.join_next() => {
                let error = match joined {
                    Some(Ok(Err(error))) => error.to_string(),
                    Some(Err(error)) => format!("a stage panicked: {error}"),
                    _ => "a stage stopped".to_owned(),
                };
                stop.store(true, Ordering::Relaxed);
                stop_stages(&stages_cancel, &mut stages).await;
                anyhow::bail!("{error}");
            }
            _ = tick.tick() => {
                live.update().await;
                if deadline.is_some_and(|d| started.elapsed() >= d) {
                    break "--duration reached";
                }
            }
        }
    };

    stop.store(true, Ordering::Relaxed);
    let report = workload_thread.join().map_err(|_| anyhow::anyhow!("the workload panicked"))??;
    let target = max_lsn(&sim).context("reading the simulator's max LSN")?;
    println!("\n{reason}: workload stopped after {} changes in {} transactions; waiting for silver to reach LSN {target}", report.changes, report.transactions);
    let catch_up = Instant::now();
    let caught_up = loop {
        if live.verdict.applied_through().is_some_and(|end| end >= target) {
            break true;
        }
        if catch_up.elapsed() > Duration::from_secs(args.catch_up_timeout) {
            break false;
        }
        tokio::select! {
            joined = stages.join_next() => {
                if let Some(Ok(Err(error))) = joined {
                    stop_stages(&stages_cancel, &mut stages).await;
                    anyhow::bail!("{error}");
                }
            }
            _ = tick.tick() => live.update().await,
        }
    };
    stop_stages(&stages_cancel, &mut stages).await;

    let last = live.reading();
    let compared = compare_silver(&sim, &silver_table).await?;
    shutdown.cancel();
    services.stop().await;

    print_summary(started.elapsed(), catch_up.elapsed(), &report, &last, &live.verdict);
    if !caught_up {
        println!("silver did not reach LSN {target} within {} s", args.catch_up_timeout);
    }
    Ok(print_check(&compared))
}

/// The demo's closing summary: what each stage did, and the verdict.
fn print_summary(elapsed: Duration, catching_up: Duration, report: &mssql_cdc_sim::workload::WorkloadReport, last: &view::Reading, verdict: &Verdict) {
    let seconds = elapsed.as_secs_f64();
    println!();
    println!("summary after {seconds:.0} s ({} s to catch up):", catching_up.as_secs());
    println!("  workload  {} changes in {} transactions ({:.0} changes/s)", report.changes, report.transactions, report.changes_per_second());
    println!("  source    {} rows in {} batches", view::thousands(last.source_rows), view::thousands(last.source_batches));
    println!("  bronze    {} rows in {} batches", view::thousands(last.bronze_rows), view::thousands(last.bronze_batches));
    println!("  silver    {} changes applied from {} batches", view::thousands(last.silver_changes), view::thousands(last.silver_batches));
    if let Some(row) = &verdict.row {
        println!(
            "  verdict   finalized_until {} (end commit {}, LSN {})",
            row.finalized_until.map_or("none".to_owned(), |t| t.to_rfc3339()),
            row.end_commit_ts.map_or("none".to_owned(), |t| t.to_rfc3339()),
            row.end_lsn.as_deref().unwrap_or("none")
        );
    }
}

/// Prints whether silver equals the simulator's table; the exit code that says it.
fn print_check(compared: &check::Comparison) -> ExitCode {
    if compared.equal() {
        println!(
            "check: silver equals dbo.orders: {} rows, {} columns compared",
            compared.source_rows, compared.columns
        );
        println!("tables: ./{DATA_DIR}/lake/ (bronze/orders, silver/orders, ops/facts, ops/finalization)");
        ExitCode::SUCCESS
    } else {
        println!(
            "check: silver DIFFERS from dbo.orders: {} rows differ ({} missing from silver, {} extra, {} with other values); {} rows in dbo.orders, {} in silver{}",
            compared.missing + compared.extra + compared.differing,
            compared.missing,
            compared.extra,
            compared.differing,
            compared.source_rows,
            compared.silver_rows,
            if compared.missing_columns.is_empty() { String::new() } else { format!("; columns missing from silver: {}", compared.missing_columns.join(", ")) }
        );
        for example in &compared.examples {
            println!("  {example}");
        }
        ExitCode::from(EXIT_DIFFERENT)
    }
}

/// The running stages of the demo, and silver's (table, control table).
type Stages = (tokio::task::JoinSet<Result<(), mssql_cdc_core::stage::StageError>>, (String, String));

/// Builds the three stages from `connectors/demo/` (the simulator's port and password filled
/// in) and starts each under the supervisor.
fn start_stages(sim_address: SocketAddr, broker_address: SocketAddr, password: &str, cancel: &CancellationToken) -> anyhow::Result<Stages> {
    let worker = WorkerConfig { kafka: KafkaConfig { bootstrap_servers: broker_address.to_string(), ..KafkaConfig::default() }, ..WorkerConfig::default() };
    let mut stages = tokio::task::JoinSet::new();
    let mut silver = None;
    for (origin, text) in CONNECTORS {
        let mut connector = ConnectorConfig::from_document(Document::parse(origin, text)?)
            .map_err(|problems| anyhow::anyhow!("{origin}: {}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")))?;
        match &mut connector.settings {
            // The simulator's port is chosen at start, and its password is the demo's.
            ConnectorSettings::MssqlSource(settings) => {
                settings.login.connection_string = ConnectionString(format!("Server=127.0.0.1,{};Database=sales", sim_address.port()));
                settings.login.password = Some(Secret::Inline(SecretString::new(password.to_owned())));
            }
            ConnectorSettings::DeltaSilver(settings) => silver = Some((settings.target.clone(), settings.control_table.clone())),
            ConnectorSettings::DeltaBronze(_) => {}
        }
        stages.spawn(connector.supervised(&worker, cancel.child_token()).map_err(|error| anyhow::anyhow!("{origin}: {error}"))?);
    }
    Ok((stages, silver.context("connectors/demo has a delta-silver connector")?))
}

/// Cancels the stages and waits for them (10 s at most), reporting errors.
async fn stop_stages(cancel: &CancellationToken, stages: &mut tokio::task::JoinSet<Result<(), mssql_cdc_core::stage::StageError>>) {
    cancel.cancel();
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(joined) = stages.join_next().await {
            if let Ok(Err(error)) = joined {
                eprintln!("a stage stopped with an error: {error}");
            }
        }
    })
    .await;
    if waited.is_err() {
        stages.abort_all();
    }
}

/// Clears `dir` when it is a previous demo's (the simulator and broker start empty, so old
/// tables would not match them); refuses a directory that is not the demo's.
fn prepare_data_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        anyhow::ensure!(
            dir.join(MARKER).exists() || std::fs::read_dir(dir)?.next().is_none(),
            "./{} exists and is not a previous demo's (no {MARKER} file): move it away or run the demo elsewhere",
            dir.display()
        );
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing ./{}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating ./{}", dir.display()))?;
    std::fs::write(dir.join(MARKER), "tables of `mssql-cdc demo`; the next demo run deletes this directory\n")?;
    Ok(())
}

/// `sys.fn_cdc_get_max_lsn()` of the simulator, after a capture pass.
fn max_lsn(sim: &Simulator) -> Option<Lsn> {
    sim.changes("dbo_orders");
    let sets = sim.query("SELECT sys.fn_cdc_get_max_lsn()").ok()?;
    match sets.first()?.rows.first()?.first()? {
        Value::Binary(bytes) => Lsn::from_bytes(bytes),
        _ => None,
    }
}

/// Silver read back through DataFusion, compared with `SELECT * FROM dbo.orders`.
async fn compare_silver(sim: &Simulator, silver_table: &str) -> anyhow::Result<check::Comparison> {
    let source = sim
        .query("SELECT * FROM dbo.orders")
        .map_err(|error| anyhow::anyhow!("SELECT * FROM dbo.orders: {error}"))?
        .into_iter()
        .next()
        .context("SELECT * FROM dbo.orders returned no rows set")?;
    let batches = match table::open(silver_table, &Default::default()).await? {
        Some(table) => mssql_cdc_lake::delta::query::query(&[("silver", &table)], "SELECT * FROM silver").await?,
        None => Vec::new(),
    };
    check::compare(&source, &batches, "order_id").map_err(|e| anyhow::anyhow!(e))
}

/// The live view's state: the metrics, the workload's count, the verdict and the screen.
struct Live {
    handle: metrics_exporter_prometheus::PrometheusHandle,
    made: Arc<AtomicU64>,
    verdict: Verdict,
    screen: Screen,
    started: Instant,
    previous: (view::Reading, Instant),
}

impl Live {
    fn new(handle: metrics_exporter_prometheus::PrometheusHandle, made: Arc<AtomicU64>, silver_table: &str, control_table: &str) -> Self {
        let now = Instant::now();
        Self { handle, made, verdict: Verdict::new(silver_table, control_table), screen: Screen::new(), started: now, previous: (view::Reading::default(), now) }
    }

    fn reading(&self) -> view::Reading {
        view::Reading::parse(&self.handle.render(), self.made.load(Ordering::Relaxed))
    }

    /// Reads the metrics and the verdict, and redraws.
    async fn update(&mut self) {
        let now = self.reading();
        self.verdict.refresh().await;
        let verdict = self.verdict.row.as_ref().and_then(|r| r.finalized_until);
        self.screen.show(&view::render(self.started.elapsed(), &now, &self.previous.0, self.previous.1.elapsed(), verdict));
        self.previous = (now, Instant::now());
    }
}

/// Silver's control row, re-read on every tick.
struct Verdict {
    silver_url: Option<String>,
    control_table: String,
    row: Option<control::ControlRow>,
}

impl Verdict {
    fn new(silver_table: &str, control_table: &str) -> Self {
        Self { silver_url: table::table_url(silver_table).ok().map(|u| u.to_string()), control_table: control_table.to_owned(), row: None }
    }

    async fn refresh(&mut self) {
        let Some(name) = &self.silver_url else { return };
        if let Ok(Some(control)) = table::open(&self.control_table, &Default::default()).await
            && let Ok(Some(row)) = control::read_row(&control, name).await {
                self.row = Some(row);
            }
    }

    /// The LSN silver has applied through.
    fn applied_through(&self) -> Option<Lsn> {
        self.row.as_ref()?.end_lsn.as_deref().and_then(Lsn::parse_hex)
    }
}

/// Draws the view in place on a terminal; elsewhere prints it every 10 s.
struct Screen {
    terminal: bool,
    lines: usize,
    last: Option<Instant>,
}

impl Screen {
    fn new() -> Self {
        Self { terminal: std::io::stdout().is_terminal(), lines: 0, last: None }
    }

    fn show(&mut self, text: &str) {
        let mut out = std::io::stdout().lock();
        if self.terminal {
            if self.lines > 0 {
                // Up over the previous view, then clear to the end of the screen.
                let _ = write!(out, "\x1b[{}A\x1b[J", self.lines);
            }
            let _ = write!(out, "{text}");
            self.lines = text.lines().count();
        } else if self.last.is_none_or(|at| at.elapsed() >= Duration::from_secs(10)) {
            let _ = writeln!(out, "{text}");
            self.last = Some(Instant::now());
        }
        let _ = out.flush();
    }
}

