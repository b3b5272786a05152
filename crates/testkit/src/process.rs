//! [`Process`]: a child process with its log kept (in memory or in a file), its standard
//! output read line by line, stopped by SIGTERM (with a grace period) or SIGKILL, and its
//! memory read from `/proc`. Killed on drop.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{io, Error, Result};

/// Where a process's standard error goes.
#[derive(Clone, Debug)]
pub enum Log {
    /// Kept in memory ([`Process::log`]).
    Capture,
    /// Appended to a file.
    File(PathBuf),
}

/// A running child process.
pub struct Process {
    child: Child,
    name: String,
    captured: Option<Arc<Mutex<String>>>,
    file: Option<PathBuf>,
    stdout: Receiver<String>,
}

impl Process {
    /// Starts `command` (its standard output is read by [`Self::wait_line`]); `name` names
    /// it in errors.
    pub fn spawn(name: &str, mut command: Command, log: Log) -> Result<Self> {
        command.stdout(Stdio::piped());
        let (captured, file) = match &log {
            Log::Capture => {
                command.stderr(Stdio::piped());
                (Some(Arc::new(Mutex::new(String::new()))), None)
            }
            Log::File(path) => {
                let file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(io(format!("opening {}", path.display())))?;
                command.stderr(file);
                (None, Some(path.clone()))
            }
        };
        let mut child = command.spawn().map_err(io(format!("starting {name} ({})", command.get_program().to_string_lossy())))?;
        if let (Some(sink), Some(pipe)) = (captured.clone(), child.stderr.take()) {
            std::thread::spawn(move || copy_lines(pipe, &sink));
        }
        let (sender, stdout) = mpsc::channel();
        if let Some(pipe) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(std::result::Result::ok) {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Self { child, name: name.to_owned(), captured, file, stdout })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The rest of the first standard-output line starting with `prefix` (e.g. `listening
    /// on `), waiting up to `timeout`; an error when the process exits first.
    pub fn wait_line(&mut self, prefix: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.stdout.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return Ok(rest.to_owned());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        Err(Error::Failed(format!("{} printed no `{prefix}` line within {timeout:?}:\n{}", self.name, self.log())))
    }

    /// What it logged on standard error so far.
    pub fn log(&self) -> String {
        match (&self.captured, &self.file) {
            (Some(captured), _) => captured.lock().map(|text| text.clone()).unwrap_or_default(),
            (None, Some(path)) => std::fs::read_to_string(path).unwrap_or_default(),
            (None, None) => String::new(),
        }
    }

    /// Ok while it runs; an error naming its exit and log once it has exited.
    pub fn alive(&mut self) -> Result<()> {
        match self.child.try_wait().map_err(io(format!("waiting for {}", self.name)))? {
            None => Ok(()),
            Some(status) => Err(Error::Failed(format!("{} exited ({status}):\n{}", self.name, self.log()))),
        }
    }

    /// Waits up to `timeout` for it to exit on its own.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                // Let the log readers take the last lines.
                std::thread::sleep(Duration::from_millis(200));
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends a signal by name (`-TERM`, `-STOP`, ...) with kill(1): the workspace forbids the
    /// `unsafe` a libc call would need.
    pub fn signal(&self, signal: &str) -> Result<()> {
        let status = Command::new("kill").args([signal, &self.child.id().to_string()]).status().map_err(io("running kill"))?;
        if status.success() { Ok(()) } else { Err(Error::Failed(format!("kill {signal} {} failed", self.name))) }
    }

    /// SIGTERM, then waits up to `grace`; SIGKILL if it is still running. Returns its exit
    /// status when it stopped on SIGTERM.
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        if self.signal("-TERM").is_err() {
            self.kill();
            return None;
        }
        let status = self.wait(grace);
        if status.is_none() {
            self.kill();
        }
        status
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A `/proc/<pid>/status` size field (`VmRSS`, `VmHWM` for the peak), in MB; 0 once
    /// the process is gone.
    pub fn rss_mb(&self, field: &str) -> f64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|status| status.lines().find(|line| line.starts_with(field)).and_then(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok()))
            .map_or(0.0, |kb| kb / 1024.0)
    }
}

/// The established TCP connections process `pid` holds to a peer on `port` (from its
/// `/proc/<pid>/fd` sockets and `/proc/<pid>/net/tcp{,6}`); 0 where `/proc` cannot say.
pub fn tcp_connections_to(pid: u32, port: u16) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    let inodes: std::collections::HashSet<String> = fds
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| link.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_owned))
        .collect();
    let wanted = format!(":{port:04X}");
    let mut count = 0;
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            if fields.len() > 9 && fields[2].ends_with(&wanted) && fields[3] == "01" && inodes.contains(fields[9]) {
                count += 1;
            }
        }
    }
    count
}

impl Drop for Process {
    fn drop(&mut self) {
        // A stopped (SIGSTOP) process still dies of SIGKILL.
        self.kill();
    }
}

fn copy_lines(pipe: impl Read, sink: &Mutex<String>) {
    for line in BufReader::new(pipe).lines().map_while(std::result::Result::ok) {
        if let Ok(mut all) = sink.lock() {
            all.push_str(&line);
            all.push('\n');
        }
    }
}

/// The last `limit` bytes of `text` (on a character boundary), for failure messages.
pub fn tail(text: &str, limit: usize) -> &str {
    let mut start = text.len().saturating_sub(limit);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}
