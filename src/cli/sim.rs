//! `mssql-cdc sim`: the SQL Server simulator's commands.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use mssql_cdc_sim::client::{password_from_env, BlockingClient, ClientConfig, DEFAULT_PASSWORD};
use mssql_cdc_sim::workload::{orders_backlog, SqlClient, Workload, WorkloadOptions, ORDERS_CDC, ORDERS_DDL};
use mssql_cdc_sim::{tds, LocalClient, ServerZone, SimConfig, Simulator};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;


#[derive(Debug, clap::Args)]
pub struct SimArgs {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(Debug, clap::Subcommand)]
enum SimCommand {
    /// Serve the simulator over TDS 7.4 until SIGINT/SIGTERM
    Serve(ServeArgs),
    /// Drive the orders workload (in-process, or over TDS with --server) and report changes/s
    Workload(WorkloadArgs),
    /// Benchmark: workload changes/s in-process, then change-table reads over TDS (tiberius)
    /// next to the same query in-process
    Bench(BenchArgs),
    /// Print an access token that `sim serve --trust-token-key` trusts (for token sign-in)
    Token(TokenArgs),
}

#[derive(Debug, clap::Args)]
struct TokenArgs {
    /// File holding the signing key (the one given to `sim serve --trust-token-key`).
    #[arg(long)]
    key: PathBuf,
    /// The principal the token names (`upn` and `sub` claims).
    #[arg(long, default_value = "cdc-reader@sim.local")]
    principal: String,
    /// Seconds until it expires (negative: already expired).
    #[arg(long, default_value_t = 3600, allow_hyphen_values = true)]
    expires_in: i64,
}

/// How `sim serve` secures connections.
#[derive(Debug, clap::Args)]
struct WireArgs {
    /// PEM certificate chain to present: with it the simulator negotiates TLS in PRELOGIN as
    /// SQL Server does (TLS 1.2 inside TDS); without it, encryption is not supported.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With --tls-cert: `off` (encryption available: login packet only for clients that ask
    /// for off, whole connection for those asking on/required) or `required` (forced: every
    /// connection encrypted whole).
    #[arg(long, value_enum, default_value = "off")]
    encrypt: tds::tls::ServerEncryption,
    /// File holding a key: access tokens signed with it (HMAC-SHA256 JWTs, `sim token`) and not
    /// expired are let in by federated sign-in (TDS FEDAUTH). Without it tokens are refused.
    #[arg(long)]
    trust_token_key: Option<PathBuf>,
}

impl WireArgs {
    fn wire(&self) -> anyhow::Result<tds::WireSecurity> {
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(tds::tls::TlsServer::load(cert, key, self.encrypt).map_err(|error| anyhow::anyhow!("--tls-cert/--tls-key: {error}"))?),
            _ => None,
        };
        let token_key = match &self.trust_token_key {
            Some(path) => Some(read_key(path, "--trust-token-key")?),
            None => None,
        };
        Ok(tds::WireSecurity { tls, token_key })
    }
}

/// A signing key's bytes (one trailing newline dropped).
fn read_key(path: &std::path::Path, flag: &str) -> anyhow::Result<std::sync::Arc<[u8]>> {
    let bytes = std::fs::read(path).map_err(|error| anyhow::anyhow!("{flag}: cannot read `{}`: {error}", path.display()))?;
    let trimmed = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    if trimmed.is_empty() {
        anyhow::bail!("{flag}: `{}` is empty", path.display());
    }
    Ok(trimmed.into())
}

#[derive(Debug, clap::Args)]
struct BenchArgs {
    /// Changes the workload makes before the read is measured.
    #[arg(long, default_value_t = 200_000)]
    changes: u64,
}

#[derive(Debug, clap::Args)]
struct ServerSettings {
    /// Server time zone (Windows id such as "W. Europe Standard Time", or IANA).
    #[arg(long, default_value = "UTC")]
    zone: String,
    /// Database name.
    #[arg(long, default_value = "sales")]
    database: String,
    /// Milliseconds between a commit and its harvest by the capture job.
    #[arg(long, default_value_t = 0)]
    capture_lag_ms: u64,
    /// Milliseconds of quiet before the capture job writes an idle mapping entry.
    #[arg(long, default_value_t = 5000)]
    idle_entry_interval_ms: u64,
}

impl ServerSettings {
    fn config(&self) -> anyhow::Result<SimConfig> {
        let zone = ServerZone::parse(&self.zone).ok_or_else(|| anyhow::anyhow!("--zone: unknown time zone `{}` (expected a Windows id or IANA name)", self.zone))?;
        let password = password_from_env();
        Ok(SimConfig {
            database: self.database.clone(),
            zone,
            capture_lag: Duration::from_millis(self.capture_lag_ms),
            idle_entry_interval: Duration::from_millis(self.idle_entry_interval_ms),
            logins: vec![("sa".to_owned(), password)],
        })
    }
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks one; printed as `listening on <addr>`).
    #[arg(long, default_value = "127.0.0.1:1433")]
    listen: SocketAddr,
    #[command(flatten)]
    settings: ServerSettings,
    #[command(flatten)]
    security: WireArgs,
}

#[derive(Debug, clap::Args)]
struct WorkloadArgs {
    #[command(flatten)]
    workload: WorkloadOptions,
    /// A TDS server (the served simulator or SQL Server) to drive; default: in-process.
    #[arg(long)]
    server: Option<SocketAddr>,
    /// Login for --server (password from MSSQL_CDC_SIM_PASSWORD).
    #[arg(long, default_value = "sa")]
    user: String,
    /// Create dbo.orders and enable CDC on it first.
    #[arg(long)]
    setup: bool,
    /// dbo.orders holds orders 1..=N from before CDC was enabled: with --setup they are
    /// inserted before CDC is enabled; the workload then changes them too.
    #[arg(long, default_value_t = 0)]
    preloaded: u64,
    #[command(flatten)]
    settings: ServerSettings,
}

pub fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        SimCommand::Serve(args) => tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(serve(args)),
        SimCommand::Workload(args) => workload(args),
        SimCommand::Bench(args) => tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(bench(args)),
        SimCommand::Token(args) => token(&args),
    }
}

fn token(args: &TokenArgs) -> anyhow::Result<ExitCode> {
    let key = read_key(&args.key, "--key")?;
    let now = chrono::Utc::now().timestamp();
    println!("{}", tds::token::mint(&key, &args.principal, now, now.saturating_add(args.expires_in)));
    Ok(ExitCode::SUCCESS)
}

async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    use std::time::Instant;

    let changes = args.changes;
    let (sim, report) = tokio::task::spawn_blocking(move || orders_backlog(changes)).await??;
    println!("workload (in-process, one thread): {} changes, {} transactions in {:.2} s = {:.0} changes/s", report.changes, report.transactions, report.elapsed.as_secs_f64(), report.changes_per_second());

    let query = "SELECT * FROM cdc.fn_cdc_get_all_changes_dbo_orders(sys.fn_cdc_get_min_lsn('dbo_orders'), sys.fn_cdc_get_max_lsn(), N'all')";
    let started = Instant::now();
    let local_rows = sim.query(query).map_err(|error| anyhow::anyhow!("{query}: {error}"))?.iter().map(|set| set.rows.len()).sum::<usize>();
    let local_secs = started.elapsed().as_secs_f64();

    let shutdown = CancellationToken::new();
    let address = tds::start(sim.clone(), SocketAddr::from(([127, 0, 0, 1], 0)), tds::WireSecurity::default(), shutdown.clone()).await?;
    let config = ClientConfig { address, user: "sa".into(), password: DEFAULT_PASSWORD.into(), database: "sales".into() };
    let mut client = mssql_cdc_sim::client::connect(&config).await?;
    let started = Instant::now();
    let mut stream = client.simple_query(query).await?;
    let mut rows = 0usize;
    let mut bytes = 0usize;
    use futures::TryStreamExt;
    while let Some(item) = stream.try_next().await? {
        if let tiberius::QueryItem::Row(row) = item {
            rows += 1;
            bytes += row.cells().map(|(_, data)| approximate_size(data)).sum::<usize>();
        }
    }
    let tds_secs = started.elapsed().as_secs_f64();
    shutdown.cancel();
    println!("in-process read: {local_rows} change rows in {local_secs:.2} s = {:.0} rows/s", local_rows as f64 / local_secs);
    println!(
        "tiberius read over TDS (one connection): {rows} change rows, {:.1} MB in {tds_secs:.2} s = {:.0} rows/s, {:.1} MB/s",
        bytes as f64 / 1e6,
        rows as f64 / tds_secs,
        bytes as f64 / 1e6 / tds_secs
    );
    anyhow::ensure!(rows == local_rows, "TDS read {rows} rows, in-process {local_rows}");
    Ok(ExitCode::SUCCESS)
}

fn approximate_size(data: &tiberius::ColumnData<'_>) -> usize {
    use tiberius::ColumnData as C;
    match data {
        C::String(Some(s)) => s.len(),
        C::Binary(Some(b)) => b.len(),
        C::U8(_) | C::Bit(_) => 1,
        C::I16(_) => 2,
        C::I32(_) | C::F32(_) => 4,
        C::Guid(_) => 16,
        C::Numeric(_) => 9,
        _ => 8,
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let sim = Simulator::new(args.settings.config()?);
    let _jobs = sim.spawn_jobs(Duration::from_millis(100));
    let shutdown = CancellationToken::new();
    let address = tds::start(sim, args.listen, args.security.wire()?, shutdown.clone()).await?;
    tracing::info!(address = %address, "simulator serving TDS");
    println!("listening on {address}");
    std::io::stdout().flush()?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    shutdown.cancel();
    Ok(ExitCode::SUCCESS)
}

fn workload(args: WorkloadArgs) -> anyhow::Result<ExitCode> {
    let local = match args.server {
        None => Some(Simulator::new(args.settings.config()?)),
        Some(_) => None,
    };
    let mut client: Box<dyn SqlClient> = match (&local, args.server) {
        (Some(sim), _) => Box::new(LocalClient::new(sim)),
        (None, Some(address)) => {
            let password = password_from_env();
            let config = ClientConfig { address, user: args.user.clone(), password, database: args.settings.database.clone() };
            Box::new(BlockingClient::connect(&config).map_err(|error| anyhow::anyhow!("connecting to {address}: {error}"))?)
        }
        (None, None) => unreachable!("one of the two is set"),
    };
    if args.setup || local.is_some() {
        let setup = |client: &mut dyn SqlClient| -> Result<(), mssql_cdc_sim::SqlError> {
            client.execute(ORDERS_DDL, &[])?;
            Workload::preload(client, args.preloaded, args.workload.seed.wrapping_add(1))?;
            ORDERS_CDC.iter().try_for_each(|sql| client.execute(sql, &[]).map(|_| ()))
        };
        setup(client.as_mut()).map_err(|error| anyhow::anyhow!("setting up dbo.orders: {error}"))?;
        if args.preloaded > 0 {
            println!("dbo.orders preloaded with {} orders before CDC was enabled", args.preloaded);
        }
    }
    let existing: Vec<i64> = (1..=i64::try_from(args.preloaded).unwrap_or(i64::MAX)).collect();
    let report = Workload::new(args.workload, existing).run(client.as_mut())?;
    println!(
        "{} changes in {} transactions ({} statements, {} retries) in {:.2} s: {:.0} changes/s",
        report.changes,
        report.transactions,
        report.statements,
        report.retries,
        report.elapsed.as_secs_f64(),
        report.changes_per_second()
    );
    if let Some(sim) = &local {
        let captured = sim.changes("dbo_orders").len();
        let rows = sim.table_rows("dbo", "orders").map_or(0, |rows| rows.len());
        println!("captured {captured} change rows; dbo.orders holds {rows} rows");
    }
    Ok(ExitCode::SUCCESS)
}
