//! The embedded Kafka-protocol broker: [tansu](https://crates.io/crates/tansu-broker) run
//! in-process, for `mssql-cdc broker`, `demo` and the test suites.
//!
//! tansu speaks the Kafka protocol (produce, fetch, consumer groups, offsets, idempotent
//! producers) but has no transactions; nothing in this project depends on them (ADR 0001).
//! Its own TLS setting does not wrap connections in the version we embed, so TLS is
//! terminated here ([`tls`]) in front of a loopback-only tansu listener.

pub mod storage;
pub mod tls;

use std::net::{Ipv4Addr, SocketAddr, TcpListener as StdTcpListener};
use std::path::PathBuf;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use url::Url;

pub use storage::BrokerStorage;

/// Errors starting or running the embedded broker.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A listener could not be bound.
    #[error("broker: cannot listen on {address}: {source}")]
    Bind {
        /// The address.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The storage directory could not be created.
    #[error("broker: cannot create storage directory `{path}`: {source}")]
    StorageDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TLS certificate or key could not be loaded.
    #[error("broker: TLS: {0}")]
    Tls(String),
    /// tansu refused to start (bad storage URL, unreadable database, ...).
    #[error("broker: tansu failed to start: {0}")]
    Start(String),
}

/// How to run the embedded broker (the flags of `mssql-cdc broker`).
#[derive(Clone, Debug, clap::Args)]
pub struct BrokerOptions {
    /// Address clients connect to. Port 0 picks a free port; the chosen address is printed as
    /// `listening on <addr>`.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub listen: SocketAddr,
    /// Host name advertised to clients in metadata (default: the listen address's IP).
    #[arg(long)]
    pub advertised_host: Option<String>,
    /// Where records are kept: `memory` (lost at exit) or `sqlite:<file>` (survives restarts).
    #[arg(long, default_value = "memory")]
    pub storage: BrokerStorage,
    /// PEM certificate chain: serve TLS instead of plain TCP (needs --tls-key).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Kafka cluster id reported to clients.
    #[arg(long, default_value = "mssql-cdc")]
    pub cluster_id: String,
}

/// A running embedded broker.
pub struct RunningBroker {
    /// The address clients connect to.
    pub address: SocketAddr,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningBroker {
    /// The `bootstrap.servers` string for this broker.
    pub fn bootstrap_servers(&self, advertised_host: &str) -> String {
        format!("{advertised_host}:{}", self.address.port())
    }

    /// Stops accepting connections and waits for the listener tasks to end.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            task.abort();
            let _ended = task.await;
        }
    }

    /// Waits until a listener task ends (which it only does on failure or shutdown).
    pub async fn wait(&mut self) {
        if let Some(first) = self.tasks.first_mut() {
            let _ended = first.await;
        }
    }
}

/// Starts the broker and returns once it accepts connections.
pub async fn start(options: &BrokerOptions) -> Result<RunningBroker, BrokerError> {
    let shutdown = CancellationToken::new();
    let storage = options.storage.tansu_url()?;

    // Resolve port 0 now: tansu needs the final address to advertise it.
    let public = StdTcpListener::bind(options.listen).map_err(|source| BrokerError::Bind { address: options.listen, source })?;
    let address = public.local_addr().map_err(|source| BrokerError::Bind { address: options.listen, source })?;
    let advertised_host = options.advertised_host.clone().unwrap_or_else(|| address.ip().to_string());
    let advertised = listener_url(&advertised_host, address.port());

    let (tansu_listen, front) = match (&options.tls_cert, &options.tls_key) {
        (Some(cert), Some(key)) => {
            let acceptor = tls::acceptor(cert, key)?;
            // tansu listens on a loopback port of its own; the TLS front forwards to it.
            let internal = free_loopback_port()?;
            public.set_nonblocking(true).map_err(|source| BrokerError::Bind { address, source })?;
            let listener = tokio::net::TcpListener::from_std(public).map_err(|source| BrokerError::Bind { address, source })?;
            let task = tokio::spawn(tls::serve(listener, acceptor, internal, shutdown.clone()));
            (internal, Some(task))
        }
        _ => {
            drop(public);
            (address, None)
        }
    };

    type Tansu = tansu_broker::broker::Broker<
        tansu_broker::coordinator::group::administrator::Controller<tansu_storage::StorageContainer>,
        tansu_storage::StorageContainer,
    >;
    let broker = Tansu::builder()
        .node_id(1)
        .cluster_id(options.cluster_id.clone())
        .incarnation_id(uuid::Uuid::new_v4())
        .advertised_listener(advertised)
        .storage(storage)
        .listener(listener_url(&tansu_listen.ip().to_string(), tansu_listen.port()))
        .silent(true)
        .build()
        .await
        .map_err(|error| BrokerError::Start(format!("{error:?}")))?;

    let tansu = tokio::spawn(async move {
        let mut broker = broker;
        if let Err(error) = broker.serve(tokio::time::Instant::now()).await {
            tracing::error!(error = ?error, "embedded broker stopped");
        }
    });

    wait_until_accepting(tansu_listen).await?;
    let mut tasks = vec![tansu];
    tasks.extend(front);
    Ok(RunningBroker { address, shutdown, tasks })
}

#[allow(clippy::expect_used)] // invariant: a host and a port always form a URL
fn listener_url(host: &str, port: u16) -> Url {
    let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
    Url::parse(&format!("tcp://{host}:{port}")).expect("a host and port always form a URL")
}

fn free_loopback_port() -> Result<SocketAddr, BrokerError> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let probe = StdTcpListener::bind(address).map_err(|source| BrokerError::Bind { address, source })?;
    probe.local_addr().map_err(|source| BrokerError::Bind { address, source })
}

async fn wait_until_accepting(address: SocketAddr) -> Result<(), BrokerError> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match tokio::net::TcpStream::connect(address).await {
            Ok(_) => return Ok(()),
            Err(source) if tokio::time::Instant::now() >= deadline => return Err(BrokerError::Bind { address, source }),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}
