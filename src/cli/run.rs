//! `mssql-cdc run`: runs connectors, Kafka Connect style: each a stage of its own, managed by
//! the worker ([`mssql_cdc::worker`]) and its management API on the telemetry listener.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use mssql_cdc::worker::store::ConfigDir;
use mssql_cdc::worker::{api, State, Worker};
use mssql_cdc_core::stage::StopReason;
use mssql_cdc_core::telemetry::{http, metrics, Health};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

/// Exit code when a file has problems (as `validate`).
const EXIT_PROBLEMS: u8 = 2;
/// Exit code when a stage stops with an error.
const EXIT_STAGE_FAILED: u8 = 1;
/// Exit code when every stage that stopped did so on a schema change (a decision is needed:
/// `docs/schema-changes.md`).
const EXIT_SCHEMA_CHANGED: u8 = 3;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The worker file (Kafka cluster, telemetry, management API). Default: built-in defaults
    /// and `MSSQL_CDC_WORKER__*` variables.
    #[arg(long)]
    worker: Option<PathBuf>,
    /// A directory of connector files: they run too, and the management API keeps the
    /// connectors it adds or changes there. With it, the worker keeps running when no
    /// connector does (until SIGINT/SIGTERM).
    #[arg(long)]
    config_dir: Option<PathBuf>,
    /// Connector files; each runs as one stage.
    #[arg(required_unless_present = "config_dir")]
    connectors: Vec<PathBuf>,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let store = args.config_dir.as_deref().map(ConfigDir::open).transpose()?;
    let mut paths = args.connectors.clone();
    if let Some(store) = &store {
        paths.extend(store.files()?);
    }
    let worker = super::load_worker(args.worker.as_deref())?;
    let mut connectors = Vec::new();
    let mut complete = worker.is_some();
    let mut names = BTreeMap::new();
    for path in &paths {
        match super::load_connector(path)? {
            Some(connector) => {
                if let Some(first) = names.insert(connector.name.clone(), path.clone()) {
                    eprintln!("{}: name: connector name also used by `{}` (expected a name unique across the files)", path.display(), first.display());
                    complete = false;
                }
                connectors.push((connector, std::fs::read_to_string(path)?));
            }
            None => complete = false,
        }
    }
    let Some(config) = worker.filter(|_| complete) else {
        return Ok(ExitCode::from(EXIT_PROBLEMS));
    };
    let cancel = CancellationToken::new();
    let keeps_changes = store.is_some();
    let worker = Worker::new(config.clone(), store, cancel.clone());
    let api = if config.api.enabled { Some(api::router(worker.clone(), config.telemetry.listen.to_string())?) } else { None };
    let handle = metrics::install();
    let health = Health::default();
    let metrics_address = http::serve(config.telemetry.listen, handle, health.clone(), api, cancel.clone()).await?;
    println!("metrics on {metrics_address}");
    std::io::stdout().flush()?;
    for (connector, text) in connectors {
        worker.add(connector, text).await;
    }
    health.set_ready(true);
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
        _ = interrupt.recv() => tracing::info!("SIGINT: stopping"),
        // Without a config directory the process ends with its last running connector.
        _ = worker.idle(), if !keeps_changes => {}
    }
    let failed: Vec<_> = worker.statuses().into_iter().filter(|s| s.state == State::Failed).collect();
    worker.shutdown().await;
    // The supervisor logged and counted each failure (StageFailed); this is the summary.
    for status in &failed {
        eprintln!("error: {}", status.trace.as_deref().unwrap_or("failed"));
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else if failed.iter().all(|s| s.reason == Some(StopReason::SchemaChanged)) {
        ExitCode::from(EXIT_SCHEMA_CHANGED)
    } else {
        ExitCode::from(EXIT_STAGE_FAILED)
    })
}
