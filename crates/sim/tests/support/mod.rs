#![allow(dead_code)]
//! Helpers for driving the simulator in-process.

use mssql_cdc_sim::{Output, ResultSet, Session, SimConfig, Simulator, SqlError, Value};

/// A simulator with one session.
pub struct Sim {
    /// The simulator.
    pub sim: Simulator,
    /// Its session.
    pub session: Session,
}

impl Sim {
    /// A fresh simulator.
    pub fn new(config: SimConfig) -> Self {
        let sim = Simulator::new(config);
        let session = sim.session();
        Self { sim, session }
    }

    /// Runs a batch, panicking with the SQL error if it fails.
    pub fn exec(&mut self, sql: &str) -> Vec<Output> {
        self.exec_with(sql, &[])
    }

    /// Runs a batch with parameters, panicking on error.
    pub fn exec_with(&mut self, sql: &str, params: &[(&str, Value)]) -> Vec<Output> {
        let params: Vec<(String, Value)> = params.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        let outcome = self.sim.execute(&mut self.session, sql, &params);
        if let Some(error) = outcome.error {
            panic!("{sql}: {error}");
        }
        outcome.outputs
    }

    /// Runs a batch expected to fail; returns the error.
    pub fn fail(&mut self, sql: &str) -> SqlError {
        self.sim.execute(&mut self.session, sql, &[]).error.unwrap_or_else(|| panic!("{sql} succeeded"))
    }

    /// The last result set of a batch.
    pub fn query(&mut self, sql: &str) -> ResultSet {
        self.query_with(sql, &[])
    }

    /// The last result set of a batch with parameters.
    pub fn query_with(&mut self, sql: &str, params: &[(&str, Value)]) -> ResultSet {
        self.exec_with(sql, params)
            .into_iter()
            .filter_map(|o| if let Output::Rows(rows) = o { Some(rows) } else { None })
            .next_back()
            .unwrap_or_else(|| panic!("{sql} returned no result set"))
    }

    /// A single value.
    pub fn scalar(&mut self, sql: &str) -> Value {
        self.query(sql).rows[0][0].clone()
    }

    /// Creates `dbo.orders` (id, status, amount) and enables CDC on it.
    pub fn orders_with_cdc(&mut self) {
        self.exec("CREATE TABLE dbo.orders (id int NOT NULL PRIMARY KEY, status varchar(20) NULL, amount decimal(10,2) NULL)");
        self.exec("EXEC sys.sp_cdc_enable_db");
        self.exec("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL");
    }
}

/// A 10-byte binary value as an LSN's hex.
pub fn lsn_hex(value: &Value) -> String {
    match value {
        Value::Binary(bytes) => bytes.iter().map(|b| format!("{b:02X}")).collect(),
        other => panic!("not binary: {other:?}"),
    }
}

/// The simulator served over TDS on a free local port, in this process, on a runtime of its
/// own (so a test's blocking client never starves it); stopped on drop.
pub struct SimServer {
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: tokio_util::sync::CancellationToken,
    /// Where it listens.
    pub address: std::net::SocketAddr,
}

/// The `sa` password the served simulator accepts.
pub const SIM_PASSWORD: &str = mssql_cdc_sim::client::DEFAULT_PASSWORD;

impl SimServer {
    /// Serves a fresh simulator (database `sales`, UTC) with `sa` / [`SIM_PASSWORD`].
    pub fn start() -> Self {
        let config = SimConfig { logins: vec![("sa".to_owned(), SIM_PASSWORD.to_owned())], ..SimConfig::default() };
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        // Started from inside a test's runtime: no `block_on` here, the answer comes back by
        // channel from the server's own runtime.
        let (sender, answer) = std::sync::mpsc::channel();
        let serving = shutdown.clone();
        runtime.spawn(async move {
            let _ = sender.send(mssql_cdc_sim::tds::start(Simulator::new(config), listen, mssql_cdc_sim::tds::WireSecurity::default(), serving).await);
        });
        let address = answer.recv().unwrap().unwrap();
        Self { runtime: Some(runtime), shutdown, address }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Runs a Python script (with the independent checkers: `MSSQL_CDC_PYTHON`, set by
/// `scripts/test.sh`, else `python3`); panics with its output if it fails. Returns stdout.
pub fn run_python(script: &str, args: &[&str]) -> String {
    let python = std::env::var("MSSQL_CDC_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let output = std::process::Command::new(python).arg("-c").arg(script).args(args).output().unwrap();
    assert!(output.status.success(), "python failed: {}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

impl SimServer {
    /// Client settings for `sa` on database `sales`.
    pub fn client_config(&self) -> mssql_cdc_sim::client::ClientConfig {
        mssql_cdc_sim::client::ClientConfig { address: self.address, user: "sa".into(), password: SIM_PASSWORD.into(), database: "sales".into() }
    }
}
