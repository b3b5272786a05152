//! [`StageProcess`]: a stage as an `mssql-cdc run` child process, with the `/metrics` address it
//! printed; restartable from the same files, keeping the tail of earlier runs' logs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::process::{tail, Log, Process};

/// How much of earlier runs' logs a restarted stage keeps for failure messages.
const PAST_LOG: usize = 12_000;

/// How long a stage may take to print its `metrics on` line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// One `mssql-cdc run --worker <worker> <connector>` process.
pub struct StageProcess {
    name: String,
    worker: PathBuf,
    connector: PathBuf,
    env: Vec<(String, String)>,
    log: Log,
    process: Process,
    /// Its `/metrics` and `/health` listener; `None` when it exited before serving one.
    pub metrics: Option<SocketAddr>,
    past: String,
    /// Restarts after [`Self::kill`] so far.
    pub kills: u32,
}

impl StageProcess {
    /// Starts a stage with extra environment variables. The simulator's password variable
    /// (`MSSQL_CDC_SIM_PASSWORD`) is passed on, with the simulator's default when unset.
    pub fn spawn(name: &str, worker: &Path, connector: &Path, env: &[(&str, &str)], log: Log) -> Result<Self> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let (process, metrics) = start(name, worker, connector, &env, &log)?;
        Ok(Self { name: name.to_owned(), worker: worker.to_owned(), connector: connector.to_owned(), env, log, process, metrics, past: String::new(), kills: 0 })
    }

    /// Its name (for messages).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process.
    pub fn process(&mut self) -> &mut Process {
        &mut self.process
    }

    /// SIGKILL, keeping the tail of what this run logged.
    pub fn kill(&mut self) {
        self.process.kill();
        self.kills += 1;
        self.past.push_str(&format!("[killed, run {}]\n{}\n", self.kills, tail(&self.process.log(), PAST_LOG)));
        self.past = tail(&self.past, PAST_LOG).to_owned();
    }

    /// Starts it again from the same files.
    pub fn respawn(&mut self) -> Result<()> {
        let (process, metrics) = start(&self.name, &self.worker, &self.connector, &self.env, &self.log)?;
        self.process = process;
        self.metrics = metrics;
        Ok(())
    }

    /// SIGTERM and up to 30 s to stop; its exit status when it stopped on its own.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.process.stop(Duration::from_secs(30))
    }

    /// This run's log.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Earlier runs' and this run's log tails, for failure messages.
    pub fn logs(&self) -> String {
        format!(
            "===== {name} (earlier runs, tail) =====\n{}\n===== {name} (current run, tail) =====\n{}",
            self.past,
            tail(&self.process.log(), PAST_LOG),
            name = self.name
        )
    }

    /// Its `/metrics` text.
    pub fn scrape(&self) -> Result<String> {
        let address = self.metrics.ok_or_else(|| Error::Failed(format!("{} serves no /metrics", self.name)))?;
        crate::metrics::scrape(address)
    }
}

impl std::ops::Deref for StageProcess {
    type Target = Process;

    fn deref(&self) -> &Process {
        &self.process
    }
}

impl std::ops::DerefMut for StageProcess {
    fn deref_mut(&mut self) -> &mut Process {
        &mut self.process
    }
}

fn start(name: &str, worker: &Path, connector: &Path, env: &[(String, String)], log: &Log) -> Result<(Process, Option<SocketAddr>)> {
    let mut command = Command::new(crate::bin::mssql_cdc());
    command.args(["run", "--worker"]).arg(worker).arg(connector).env(mssql_cdc_sim::client::PASSWORD_ENV, mssql_cdc_sim::client::password_from_env());
    command.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let mut process = Process::spawn(name, command, log.clone())?;
    let metrics = match process.wait_line("metrics on ", START_TIMEOUT) {
        Ok(address) => Some(address.parse().map_err(|_| Error::Failed(format!("{name}: `metrics on {address}` is not an address")))?),
        // It exited before serving (bad files, a fault at start): the caller sees the exit.
        Err(_) if process.wait(Duration::from_secs(2)).is_some() => None,
        Err(error) => return Err(error),
    };
    Ok((process, metrics))
}
