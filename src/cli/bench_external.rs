//! The bench report's optional row for a sink of the user's own choosing (kafka-delta-ingest,
//! a Kafka Connect worker, a script): its command runs on the same feed bronze drained, and
//! the report prints its rate and peak memory next to bronze's.
//!
//! The command runs under `sh -c`, with `{bootstrap}`, `{topic}` and `{dir}` replaced (and
//! the same values in `MSSQL_CDC_BENCH_BOOTSTRAP`, `MSSQL_CDC_BENCH_TOPIC`,
//! `MSSQL_CDC_BENCH_DIR`). It must read the topic from its start and exit once it has written
//! every record; its wall time from start to exit is what the row reports.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// What the external sink's run measured.
pub(super) struct External {
    /// The command as given.
    pub command: String,
    /// Seconds from its start to its exit.
    pub secs: f64,
    /// The peak of the summed RSS of its process tree, sampled every 100 ms, MB.
    pub peak_mb: f64,
    /// Whether it exited with status 0.
    pub success: bool,
}

/// Runs `command` on `topic` at `bootstrap`, writing under `dir`; at most `timeout`.
pub(super) async fn run(command: &str, bootstrap: &str, topic: &str, dir: &Path, timeout: Duration) -> anyhow::Result<External> {
    std::fs::create_dir_all(dir)?;
    let dir_text = dir.display().to_string();
    let line = command.replace("{bootstrap}", bootstrap).replace("{topic}", topic).replace("{dir}", &dir_text);
    let log = std::fs::File::create(dir.join("external-sink.log"))?;
    let started = Instant::now();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&line)
        .env("MSSQL_CDC_BENCH_BOOTSTRAP", bootstrap)
        .env("MSSQL_CDC_BENCH_TOPIC", topic)
        .env("MSSQL_CDC_BENCH_DIR", &dir_text)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting the external sink `{line}`"))?;
    let mut peak_mb: f64 = 0.0;
    let status = loop {
        peak_mb = peak_mb.max(tree_rss_mb(child.id()));
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("the external sink did not exit within {} s (see {}/external-sink.log)", timeout.as_secs(), dir.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Ok(External { command: command.to_owned(), secs: started.elapsed().as_secs_f64(), peak_mb, success: status.success() })
}

/// The summed `VmRSS` of `pid` and its descendants, MB (0 for processes already gone).
fn tree_rss_mb(pid: u32) -> f64 {
    let mut total = 0.0;
    let mut pending = vec![pid];
    while let Some(pid) = pending.pop() {
        total += std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|status| status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
            .map_or(0.0, |kb| kb / 1024.0);
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            pending.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    total
}
