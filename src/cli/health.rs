//! `mssql-cdc health`: asks a process's telemetry listener for `/health` and answers by exit
//! code (the container image's HEALTHCHECK; no curl needed in the image).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    /// The telemetry listener (`telemetry.listen` of the worker file).
    #[arg(long, default_value = "127.0.0.1:9464")]
    address: SocketAddr,
    /// Seconds to wait for the answer.
    #[arg(long, default_value_t = 3)]
    timeout: u64,
}

/// Exit 0 when `/health` answers 200, 1 otherwise (the status line on standard error).
pub async fn run(args: HealthArgs) -> anyhow::Result<ExitCode> {
    let answer = tokio::time::timeout(Duration::from_secs(args.timeout), status_line(args.address)).await;
    let line = match answer {
        Ok(Ok(line)) => line,
        Ok(Err(error)) => format!("{}: {error}", args.address),
        Err(_) => format!("{}: no answer within {} s", args.address, args.timeout),
    };
    let healthy = line.split_whitespace().nth(1) == Some("200");
    eprintln!("{line}");
    Ok(if healthy { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

async fn status_line(address: SocketAddr) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream.write_all(format!("GET /health HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    Ok(text.lines().next().unwrap_or_default().to_owned())
}
