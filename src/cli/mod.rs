//! The command line: one subcommand per file.

#[cfg(feature = "embedded-broker")]
mod bench;
#[cfg(feature = "embedded-broker")]
mod bench_report;
#[cfg(feature = "embedded-broker")]
mod bench_silver;
#[cfg(feature = "embedded-broker")]
mod broker;
#[cfg(feature = "embedded-broker")]
mod demo;
mod run;
#[cfg(feature = "embedded-broker")]
mod services;
mod sim;
mod silver;
mod table;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
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
    /// Compact a Delta table's small files (optionally z-ordered)
    Optimize(table::OptimizeArgs),
    /// Delete a Delta table's files older versions no longer need
    Vacuum(table::VacuumArgs),
    /// Run connectors (Kafka Connect standalone style) until SIGINT/SIGTERM or a stage error
    Run(run::RunArgs),
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
        Command::Apply(args) => runtime()?.block_on(silver::apply(args)),
        Command::Freshness(args) => runtime()?.block_on(silver::freshness(args)),
        Command::IsFinal(args) => runtime()?.block_on(silver::is_final(args)),
        Command::Optimize(args) => runtime()?.block_on(table::optimize(args)),
        Command::Vacuum(args) => runtime()?.block_on(table::vacuum(args)),
        Command::Sim(args) => sim::run(args),
        Command::Validate(args) => validate::run(args),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
