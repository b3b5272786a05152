//! The simulator as child processes: [`SimProcess`] (`mssql-cdc sim serve`) and
//! [`WorkloadProcess`] (`mssql-cdc sim workload --server`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use mssql_cdc_sim::client::{password_from_env, ClientConfig, PASSWORD_ENV};

use crate::error::{Error, Result};
use crate::process::{Log, Process};

/// `mssql-cdc sim serve` on a free local port (killed on drop).
pub struct SimProcess {
    process: Process,
    /// Where it listens.
    pub address: SocketAddr,
}

impl SimProcess {
    /// Starts a simulator with extra `sim serve` flags (e.g. `--zone`); its `sa` password is
    /// `MSSQL_CDC_SIM_PASSWORD`, or the simulator's default.
    pub fn start(flags: &[&str]) -> Result<Self> {
        let mut command = Command::new(crate::bin::mssql_cdc());
        command.args(["sim", "serve", "--listen", "127.0.0.1:0"]).args(flags).env(PASSWORD_ENV, password_from_env()).env("RUST_LOG", "warn");
        let mut process = Process::spawn("mssql-cdc sim serve", command, Log::Capture)?;
        let line = process.wait_line("listening on ", Duration::from_secs(60))?;
        let address = line.parse().map_err(|_| Error::Failed(format!("`listening on {line}` is not an address")))?;
        Ok(Self { process, address })
    }

    /// Client settings for `sa` on database `sales`.
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig { address: self.address, user: "sa".into(), password: password_from_env(), database: "sales".into() }
    }

    /// The process (to freeze or kill it).
    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }
}

/// `mssql-cdc sim workload --server <addr> <args>`, its output in a file (killed on drop).
pub struct WorkloadProcess {
    process: Process,
}

impl WorkloadProcess {
    /// Starts it against `server` with `args`; standard error goes to `log`.
    pub fn spawn(server: SocketAddr, log: &Path, args: &[&str]) -> Result<Self> {
        let mut command = Command::new(crate::bin::mssql_cdc());
        command.args(["sim", "workload", "--server", &server.to_string()]).args(args).env(PASSWORD_ENV, password_from_env()).env("RUST_LOG", "warn");
        Ok(Self { process: Process::spawn("mssql-cdc sim workload", command, Log::File(log.to_owned()))? })
    }

    /// What it logged.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Its exit status within `timeout`, or an error naming its log.
    pub fn finish(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.process.wait(timeout).ok_or_else(|| Error::Failed(format!("the workload did not finish within {timeout:?}:\n{}", self.process.log())))
    }
}
