//! [`BrokerProcess`]: the embedded broker as an `mssql-cdc broker` child process with SQLite
//! storage, or the external Kafka-protocol broker `MSSQL_CDC_TEST_BOOTSTRAP` names; stoppable
//! and restartable on the same address and storage.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use mssql_cdc_core::kafka::KafkaConfig;

use crate::error::{Error, Result};
use crate::process::{Log, Process};

/// How to start a broker process.
#[derive(Default, Clone)]
pub struct BrokerSpec {
    /// SQLite file; a fresh temporary one when `None` (unless `memory`).
    pub sqlite: Option<PathBuf>,
    /// The broker's in-memory storage (what `bench` uses) instead of SQLite.
    pub memory: bool,
    /// Listen address; `127.0.0.1:0` when `None`.
    pub listen: Option<SocketAddr>,
    /// TLS certificate and key files.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Host name advertised to clients.
    pub advertised_host: Option<String>,
}

/// A broker for a test, killed on drop.
pub struct BrokerProcess {
    process: Option<Process>,
    spec: BrokerSpec,
    /// `host:port` clients bootstrap from.
    pub bootstrap: String,
    /// The address it listens on (ours only).
    pub address: Option<SocketAddr>,
    /// The address of its `/metrics` and `/health` listener (ours only).
    pub metrics: Option<SocketAddr>,
    /// The directory holding the storage file when it is a temporary one.
    dir: Option<PathBuf>,
}

impl BrokerProcess {
    /// The broker named by `MSSQL_CDC_TEST_BOOTSTRAP`, else a fresh child process.
    pub fn start() -> Result<Self> {
        match std::env::var("MSSQL_CDC_TEST_BOOTSTRAP") {
            Ok(bootstrap) if !bootstrap.is_empty() => {
                Ok(Self { process: None, spec: BrokerSpec::default(), bootstrap, address: None, metrics: None, dir: None })
            }
            _ => Self::spawn(BrokerSpec::default()),
        }
    }

    /// Starts `mssql-cdc broker` and waits until it listens.
    pub fn spawn(mut spec: BrokerSpec) -> Result<Self> {
        let mut dir = None;
        if spec.sqlite.is_none() && !spec.memory {
            let temporary = std::env::temp_dir().join(format!("mssql-cdc-broker-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&temporary).map_err(crate::error::io("creating the broker's directory"))?;
            spec.sqlite = Some(temporary.join("broker.db"));
            dir = Some(temporary);
        }
        let mut broker = Self { process: None, spec, bootstrap: String::new(), address: None, metrics: None, dir };
        broker.launch()?;
        Ok(broker)
    }

    fn launch(&mut self) -> Result<()> {
        let spec = &self.spec;
        let listen = self.address.or(spec.listen).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let mut command = Command::new(crate::bin::mssql_cdc());
        command.args(["broker", "--listen", &listen.to_string(), "--storage"]).env("RUST_LOG", "warn");
        match &spec.sqlite {
            Some(sqlite) if !spec.memory => command.arg(format!("sqlite:{}", sqlite.display())),
            _ => command.arg("memory"),
        };
        if let Some((cert, key)) = &spec.tls {
            command.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        if let Some(host) = &spec.advertised_host {
            command.args(["--advertised-host", host]);
        }
        let mut process = Process::spawn("mssql-cdc broker", command, Log::Capture)?;
        let address: SocketAddr = parse(process.wait_line("listening on ", Duration::from_secs(60))?)?;
        let metrics: SocketAddr = parse(process.wait_line("metrics on ", Duration::from_secs(60))?)?;
        let host = spec.advertised_host.clone().unwrap_or_else(|| address.ip().to_string());
        self.bootstrap = format!("{host}:{}", address.port());
        self.address = Some(address);
        self.metrics = Some(metrics);
        self.process = Some(process);
        Ok(())
    }

    /// Worker Kafka settings pointing at this broker.
    pub fn kafka(&self) -> KafkaConfig {
        KafkaConfig { bootstrap_servers: self.bootstrap.clone(), ..KafkaConfig::default() }
    }

    /// The SQLite storage file (ours only).
    pub fn sqlite(&self) -> Option<&PathBuf> {
        self.spec.sqlite.as_ref()
    }

    /// SIGKILL (no clean shutdown); the storage stays for [`Self::restart`].
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// SIGTERM (a clean shutdown, up to 30 s); the storage stays for [`Self::restart`].
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop(Duration::from_secs(30));
        }
    }

    /// Starts it again on the same address and storage, after [`Self::kill`] or
    /// [`Self::stop`].
    pub fn restart(&mut self) -> Result<()> {
        if self.process.is_some() {
            return Err(Error::Failed("the broker is running".into()));
        }
        self.launch()
    }
}

fn parse(text: String) -> Result<SocketAddr> {
    text.parse().map_err(|_| Error::Failed(format!("`{text}` is not an address")))
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
