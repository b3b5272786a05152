//! The command line: one subcommand per file.

#[cfg(feature = "embedded-broker")]
mod bench;
#[cfg(feature = "embedded-broker")]
mod bench_backfill;
#[cfg(feature = "embedded-broker")]
mod bench_backlog;
#[cfg(feature = "embedded-broker")]
mod bench_external;
#[cfg(feature = "embedded-broker")]
mod bench_reconcile;
#[cfg(feature = "embedded-broker")]
mod bench_report;
#[cfg(feature = "embedded-broker")]
mod bench_silver;
#[cfg(feature = "embedded-broker")]
mod bench_snapshot;
#[cfg(feature = "embedded-broker")]
mod broker;
#[cfg(feature = "embedded-broker")]
mod demo;
mod health;
mod reconcile;
mod run;
mod seed;
#[cfg(feature = "embedded-broker")]
mod services;
mod sim;
mod silver;
mod stream;
mod table;
mod validate;

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mssql_cdc::connectors::ConnectorConfig;
use mssql_cdc_core::config::WorkerConfig;
use mssql_cdc_core::telemetry::{logging, LogFormat};

/// Change data capture from SQL Server to Kafka and Delta Lake.
#[derive(Debug, Parser)]
#[command(name = "mssql-cdc", version, about, long_about = None)]
pub struct Cli {
    /// Log line format on standard error.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The whole pipeline on this machine: simulator, broker, source, bronze and silver, a live view, then silver checked against the source table
    #[cfg(feature = "embedded-broker")]
    Demo(demo::DemoArgs),
    /// Benchmarks with a baseline measured in the same run (see docs/operations.md)
    #[cfg(feature = "embedded-broker")]
    Bench(bench::BenchArgs),
    /// Run the embedded Kafka-protocol broker (tansu) until SIGINT/SIGTERM
    #[cfg(feature = "embedded-broker")]
    Broker(broker::BrokerArgs),
    /// One apply_changes pass of a `delta-silver` connector: bronze into silver, then the verdict
    Apply(silver::ApplyArgs),
    /// Print a silver table's finalized_until, its age and the seconds since it last moved
    Freshness(silver::FreshnessArgs),
    /// Exit 0 when the period ending at PERIOD_END is final in silver, 1 when not yet
    IsFinal(silver::IsFinalArgs),
    /// Compare silver with its SQL Server table while both run: exit 0 equal, 1 mismatch, 4 only changes in flight (docs/validation.md)
    Reconcile(reconcile::ReconcileArgs),
    /// Compact a Delta table's small files (optionally z-ordered)
    Optimize(table::OptimizeArgs),
    /// Delete a Delta table's files older versions no longer need
    Vacuum(table::VacuumArgs),
    /// Run connectors (Kafka Connect style, with the management API) until SIGINT/SIGTERM or, without --config-dir, until none runs
    Run(run::RunArgs),
    /// Exit 0 when a process's /health answers 200 (a container HEALTHCHECK)
    Health(health::HealthArgs),
    /// Snapshot the table of a stopped `mssql-source` stream (bootstrap, or --resnapshot), then print its offset as JSON
    Snapshot(stream::SnapshotArgs),
    /// Read waves of a stopped stream's chunked snapshot (opening it if the stream has none), then print its backfill status as JSON; exit 3 when it should be called again
    Backfill(stream::BackfillArgs),
    /// Publish a copy of the table (Delta table or Parquet directory) as a stopped stream's snapshot at --as-of, then print its offset as JSON
    Seed(seed::SeedArgs),
    /// Show an `mssql-source` stream's position, generation and snapshot next to the server's CDC window
    Status(stream::StatusArgs),
    /// The SQL Server simulator: serve it over TDS, or drive a workload
    Sim(sim::SimArgs),
    /// Check worker and connector files without connecting anywhere (exit 2 on problems)
    Validate(validate::ValidateArgs),
}

/// Runs the chosen subcommand.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // The demo's live view owns the terminal: its stages log warnings only (RUST_LOG overrides).
    #[cfg(feature = "embedded-broker")]
    let level = if matches!(cli.command, Command::Demo(_)) { "warn" } else { "info" };
    #[cfg(not(feature = "embedded-broker"))]
    let level = "info";
    logging::init(cli.log_format, level);
    match cli.command {
        #[cfg(feature = "embedded-broker")]
        Command::Demo(args) => runtime()?.block_on(demo::run(args)),
        #[cfg(feature = "embedded-broker")]
        Command::Bench(args) => runtime()?.block_on(bench::run(args)),
        #[cfg(feature = "embedded-broker")]
        Command::Broker(args) => runtime()?.block_on(broker::run(args)),
        Command::Run(args) => runtime()?.block_on(run::run(args)),
        Command::Health(args) => runtime()?.block_on(health::run(args)),
        Command::Snapshot(args) => runtime()?.block_on(stream::snapshot(args)),
        Command::Backfill(args) => runtime()?.block_on(stream::backfill(args)),
        Command::Seed(args) => runtime()?.block_on(seed::seed(args)),
        Command::Status(args) => runtime()?.block_on(stream::status(args)),
        Command::Apply(args) => runtime()?.block_on(silver::apply(args)),
        Command::Freshness(args) => runtime()?.block_on(silver::freshness(args)),
        Command::IsFinal(args) => runtime()?.block_on(silver::is_final(args)),
        Command::Reconcile(args) => runtime()?.block_on(reconcile::run(args)),
        Command::Optimize(args) => runtime()?.block_on(table::optimize(args)),
        Command::Vacuum(args) => runtime()?.block_on(table::vacuum(args)),
        Command::Sim(args) => sim::run(args),
        Command::Validate(args) => validate::run(args),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

/// The worker file (or the defaults with `MSSQL_CDC_WORKER__*`); `None` after printing every
/// problem with its key path.
fn load_worker(path: Option<&Path>) -> anyhow::Result<Option<WorkerConfig>> {
    Ok(match WorkerConfig::load(path)? {
        Ok(worker) => Some(worker),
        Err(problems) => {
            let shown = path.map_or("worker".into(), |p| p.display().to_string());
            for problem in problems {
                eprintln!("{shown}: {problem}");
            }
            None
        }
    })
}

/// A connector file; `None` after printing every problem with its key path.
fn load_connector(path: &Path) -> anyhow::Result<Option<ConnectorConfig>> {
    Ok(match ConnectorConfig::load(path)? {
        Ok(connector) => Some(connector),
        Err(problems) => {
            for problem in problems {
                eprintln!("{}: {problem}", path.display());
            }
            None
        }
    })
}
