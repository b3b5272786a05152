//! Shared helpers for the integration suites: a real broker process, unique names, the
//! `mssql-cdc` binary and the Python checkers.
//!
//! The broker is `mssql-cdc broker` started as a child process on a free port with SQLite
//! storage in a temporary directory, unless `MSSQL_CDC_TEST_BOOTSTRAP` names an external
//! Kafka-protocol broker to use instead.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

pub mod sim;
pub mod pipeline;
pub mod registry;
pub mod s3;
pub mod source;

use mssql_cdc::kafka::KafkaConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

/// The `mssql-cdc` binary built for these tests.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mssql-cdc"))
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A name no other test (or earlier run against an external broker) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{nanos}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// How to start a broker process.
#[derive(Default, Clone)]
pub struct BrokerSpec {
    /// SQLite file; a fresh temporary one when `None`.
    pub sqlite: Option<PathBuf>,
    /// Listen address; `127.0.0.1:0` when `None`.
    pub listen: Option<SocketAddr>,
    /// TLS certificate and key files.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Host name advertised to clients.
    pub advertised_host: Option<String>,
}

/// A Kafka-protocol broker for a test: a child process (killed on drop) or an external one.
pub struct TestBroker {
    child: Option<Child>,
    /// `host:port` clients bootstrap from.
    pub bootstrap: String,
    /// The address of the process's `/metrics` and `/health` listener, if it is ours.
    pub metrics: Option<SocketAddr>,
    /// The storage file, for restarts.
    pub sqlite: Option<PathBuf>,
    _dir: Option<tempfile::TempDir>,
}

impl TestBroker {
    /// The broker named by `MSSQL_CDC_TEST_BOOTSTRAP`, else a fresh child process.
    pub fn start() -> Self {
        match std::env::var("MSSQL_CDC_TEST_BOOTSTRAP") {
            Ok(bootstrap) if !bootstrap.is_empty() => {
                Self { child: None, bootstrap, metrics: None, sqlite: None, _dir: None }
            }
            _ => Self::spawn(BrokerSpec::default()),
        }
    }

    /// Starts `mssql-cdc broker` as a child process and waits until it listens.
    pub fn spawn(spec: BrokerSpec) -> Self {
        let (dir, sqlite) = match spec.sqlite {
            Some(path) => (None, path),
            None => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let path = dir.path().join("broker.db");
                (Some(dir), path)
            }
        };
        let listen = spec.listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
        let mut command = Command::new(bin());
        command
            .args(["broker", "--listen", &listen.to_string(), "--storage"])
            .arg(format!("sqlite:{}", sqlite.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .env("RUST_LOG", "warn");
        if let Some((cert, key)) = &spec.tls {
            command.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
        }
        if let Some(host) = &spec.advertised_host {
            command.args(["--advertised-host", host]);
        }
        let mut child = command.spawn().expect("spawn mssql-cdc broker");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut address = None;
        let mut metrics = None;
        while address.is_none() || metrics.is_none() {
            let line = receiver
                .recv_timeout(Duration::from_secs(60))
                .expect("the broker printed its address within 60 s");
            if let Some(rest) = line.strip_prefix("listening on ") {
                address = Some(rest.parse::<SocketAddr>().expect("an address"));
            } else if let Some(rest) = line.strip_prefix("metrics on ") {
                metrics = Some(rest.parse::<SocketAddr>().expect("an address"));
            }
        }
        let address = address.unwrap();
        let host = spec.advertised_host.unwrap_or_else(|| address.ip().to_string());
        Self {
            child: Some(child),
            bootstrap: format!("{host}:{}", address.port()),
            metrics,
            sqlite: Some(sqlite),
            _dir: dir,
        }
    }

    /// Worker Kafka settings pointing at this broker.
    pub fn kafka(&self) -> KafkaConfig {
        KafkaConfig { bootstrap_servers: self.bootstrap.clone(), ..KafkaConfig::default() }
    }

    /// SIGKILLs the process (no clean shutdown), keeping its storage directory.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Takes the temporary directory so it outlives this broker (for restarts).
    pub fn keep_storage(&mut self) -> Option<tempfile::TempDir> {
        self._dir.take()
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Creates a topic with `partitions` partitions and waits for it.
pub async fn create_topic(kafka: &KafkaConfig, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = kafka.client_config().unwrap().create().expect("admin client");
    let results = admin
        .create_topics(&[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))], &AdminOptions::new())
        .await
        .expect("create_topics request");
    for result in results {
        result.expect("topic created");
    }
}

/// A plain HTTP/1.0 GET on loopback: (status code, body).
pub fn http_get(address: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("connect to the metrics listener");
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

/// The Python interpreter with the independent checkers installed (`MSSQL_CDC_PYTHON`, set
/// by `scripts/test.sh`), else `python3`.
pub fn python() -> String {
    std::env::var("MSSQL_CDC_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// Runs a Python script with arguments; panics with its output if it fails. Returns stdout.
pub fn run_python(script: &str, args: &[&str]) -> String {
    let output = Command::new(python()).arg("-c").arg(script).args(args).output().expect("run python");
    assert!(
        output.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `mssql-cdc sim serve` as a child process on a free port (killed on drop).
pub struct SimServer {
    child: Child,
    /// Where it listens.
    pub address: SocketAddr,
}

/// The simulator's default `sa` password in tests.
pub const SIM_PASSWORD: &str = "Sim-Passw0rd";

impl SimServer {
    /// Starts a simulator with the given extra flags (e.g. `--zone`).
    pub fn start(flags: &[&str]) -> Self {
        let mut child = Command::new(bin())
            .args(["sim", "serve", "--listen", "127.0.0.1:0"])
            .args(flags)
            .env("MSSQL_CDC_SIM_PASSWORD", SIM_PASSWORD)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn mssql-cdc sim serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = lines.next().expect("a line").expect("readable");
        let address = line.strip_prefix("listening on ").expect("listening line").parse().expect("an address");
        std::thread::spawn(move || for _ in lines {});
        Self { child, address }
    }

    /// Client settings for `sa`.
    pub fn client_config(&self) -> mssql_cdc::sim::client::ClientConfig {
        mssql_cdc::sim::client::ClientConfig { address: self.address, user: "sa".into(), password: SIM_PASSWORD.into(), database: "sales".into() }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `topic` exists on the broker.
pub fn topic_exists(bootstrap: &str, topic: &str) -> bool {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().unwrap();
    consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .map(|m| m.topics().iter().any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
        .unwrap_or(false)
}
