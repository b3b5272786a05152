//! `mssql-cdc broker`: the embedded Kafka-protocol broker as a process of its own.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use mssql_cdc::broker::{self, BrokerOptions};
use mssql_cdc_core::telemetry::{http, metrics, Health};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args)]
pub struct BrokerArgs {
    #[command(flatten)]
    broker: BrokerOptions,
    /// Address of the `/metrics` and `/health` listener (port 0 picks one).
    #[arg(long, default_value = "127.0.0.1:0")]
    metrics_listen: SocketAddr,
}

pub async fn run(args: BrokerArgs) -> anyhow::Result<ExitCode> {
    let handle = metrics::install();
    let health = Health::default();
    let shutdown = CancellationToken::new();
    let metrics_address = http::serve(args.metrics_listen, handle, health.clone(), None, shutdown.clone()).await?;
    let mut running = broker::start(&args.broker).await?;
    health.set_ready(true);
    tracing::info!(address = %running.address, storage = %args.broker.storage, tls = args.broker.tls_cert.is_some(), "broker ready");
    // Test harnesses and scripts read these two lines to learn the chosen ports.
    println!("listening on {}", running.address);
    println!("metrics on {metrics_address}");
    std::io::stdout().flush()?;

    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
        _ = interrupt.recv() => tracing::info!("SIGINT: stopping"),
        () = running.wait() => {
            anyhow::bail!("the embedded broker stopped on its own");
        }
    }
    shutdown.cancel();
    running.stop().await;
    Ok(ExitCode::SUCCESS)
}
