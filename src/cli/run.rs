//! `mssql-cdc run`: runs connectors, Kafka Connect standalone style.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use mssql_cdc::connectors::ConnectorConfig;
use mssql_cdc_core::config::WorkerConfig;
use mssql_cdc_core::telemetry::{http, metrics, Health};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// Exit code when a file has problems (as `validate`).
const EXIT_PROBLEMS: u8 = 2;
/// Exit code when a stage stops with an error.
const EXIT_STAGE_FAILED: u8 = 1;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The worker file (Kafka cluster, telemetry). Default: built-in defaults and
    /// `MSSQL_CDC_WORKER__*` variables.
    #[arg(long)]
    worker: Option<PathBuf>,
    /// Connector files; each runs as one stage.
    #[arg(required = true)]
    connectors: Vec<PathBuf>,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut problems = 0;
    let worker = match WorkerConfig::load(args.worker.as_deref())? {
        Ok(worker) => Some(worker),
        Err(found) => {
            for problem in found {
                eprintln!("{}: {problem}", args.worker.as_deref().map_or("worker".into(), |p| p.display().to_string()));
                problems += 1;
            }
            None
        }
    };
    let mut connectors = Vec::new();
    for path in &args.connectors {
        match ConnectorConfig::load(path)? {
            Ok(connector) => connectors.push(connector),
            Err(found) => {
                for problem in found {
                    eprintln!("{}: {problem}", path.display());
                    problems += 1;
                }
            }
        }
    }
    let Some(worker) = worker.filter(|_| problems == 0) else {
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    };
    let cancel = CancellationToken::new();
    let mut stages = Vec::with_capacity(connectors.len());
    for connector in connectors {
        let name = connector.name.clone();
        match connector.supervised(&worker, cancel.child_token()) {
            Ok(stage) => stages.push((name, stage)),
            Err(error) => {
                eprintln!("error: {error}");
                return Ok(ExitCode::from(EXIT_STAGE_FAILED));
            }
        }
    }

    let handle = metrics::install();
    let health = Health::default();
    let metrics_address = http::serve(worker.telemetry.listen, handle, health.clone(), cancel.clone()).await?;
    println!("metrics on {metrics_address}");
    std::io::stdout().flush()?;
    let mut tasks = tokio::task::JoinSet::new();
    for (name, stage) in stages {
        tracing::info!(connector = %name, "starting");
        tasks.spawn(stage);
    }
    health.set_ready(true);
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut failed = false;
    loop {
        tokio::select! {
            _ = terminate.recv() => { tracing::info!("SIGTERM: stopping"); cancel.cancel(); }
            _ = interrupt.recv() => { tracing::info!("SIGINT: stopping"); cancel.cancel(); }
            joined = tasks.join_next() => match joined {
                None => break,
                Some(Ok(Ok(()))) => {}
                Some(Ok(Err(error))) => {
                    // The supervisor logged and counted it (StageFailed); this is the summary.
                    eprintln!("error: {error}");
                    failed = true;
                    cancel.cancel();
                }
                Some(Err(error)) => {
                    eprintln!("error: a stage panicked: {error}");
                    failed = true;
                    cancel.cancel();
                }
            },
        }
    }
    Ok(if failed { ExitCode::from(EXIT_STAGE_FAILED) } else { ExitCode::SUCCESS })
}
