//! The demo's live view: per stage, rows/s, totals, batches, lag and the verdict, read from the
//! same Prometheus metrics a user would scrape (so the view shows what monitoring shows).

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mssql_cdc_core::telemetry::metrics as m;
use crate::metrics::sum as sum_metric;

/// One reading of the metrics the view shows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// Changes the workload committed.
    pub workload_changes: u64,
    /// Rows the source published.
    pub source_rows: f64,
    /// Batches the source published (heartbeats included).
    pub source_batches: f64,
    /// Seconds between the newest commit read and its capture.
    pub source_lag_seconds: Option<f64>,
    /// Rows bronze committed.
    pub bronze_rows: f64,
    /// Batches bronze committed.
    pub bronze_batches: f64,
    /// Control records (batches) bronze has yet to read.
    pub bronze_behind: Option<f64>,
    /// Changes silver applied.
    pub silver_changes: f64,
    /// Batches silver applied.
    pub silver_batches: f64,
}

impl Reading {
    /// Reads the view's numbers out of Prometheus text.
    pub fn parse(text: &str, workload_changes: u64) -> Self {
        let sum = |name| sum_metric(text, name).unwrap_or(0.0);
        Self {
            workload_changes,
            source_rows: sum(m::SOURCE_ROWS_TOTAL),
            source_batches: sum(m::SOURCE_BATCHES_TOTAL),
            source_lag_seconds: sum_metric(text, m::SOURCE_CAPTURE_LAG_SECONDS),
            bronze_rows: sum(m::BRONZE_ROWS_TOTAL),
            bronze_batches: sum(m::BRONZE_BATCHES_TOTAL),
            bronze_behind: sum_metric(text, m::BRONZE_RECORDS_BEHIND),
            silver_changes: sum(m::SILVER_CHANGES_TOTAL),
            silver_batches: sum(m::SILVER_BATCHES_TOTAL),
        }
    }
}

/// The view as text: a header line and one line per stage. `previous` and `interval` give the
/// rates.
pub fn render(elapsed: Duration, now: &Reading, previous: &Reading, interval: Duration, finalized_until: Option<DateTime<Utc>>) -> String {
    let seconds = interval.as_secs_f64().max(1e-3);
    let rate = |now: f64, before: f64| (now - before).max(0.0) / seconds;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "mssql-cdc demo  {:>5.0} s   workload: {} changes ({}/s)",
        elapsed.as_secs_f64(),
        thousands(now.workload_changes as f64),
        thousands(rate(now.workload_changes as f64, previous.workload_changes as f64))
    );
    let _ = writeln!(out, "{:<8} {:>9} {:>11} {:>8}  {:<22} finalized_until", "stage", "rows/s", "rows", "batches", "lag");
    let lag = now.source_lag_seconds.map_or("-".to_owned(), |s| format!("capture {s:.1} s"));
    let _ = writeln!(out, "{:<8} {:>9} {:>11} {:>8}  {:<22} ", "source", thousands(rate(now.source_rows, previous.source_rows)), thousands(now.source_rows), thousands(now.source_batches), lag);
    let lag = now.bronze_behind.map_or("-".to_owned(), |r| format!("{} batches behind", thousands(r)));
    let _ = writeln!(out, "{:<8} {:>9} {:>11} {:>8}  {:<22} ", "bronze", thousands(rate(now.bronze_rows, previous.bronze_rows)), thousands(now.bronze_rows), thousands(now.bronze_batches), lag);
    let behind = (now.bronze_batches - now.silver_batches).max(0.0);
    let verdict = finalized_until.map_or("none yet".to_owned(), |t| {
        format!("{} ({:.0} s ago)", t.format("%Y-%m-%d %H:%M:%SZ"), (Utc::now() - t).num_milliseconds() as f64 / 1000.0)
    });
    let _ = writeln!(
        out,
        "{:<8} {:>9} {:>11} {:>8}  {:<22} {}",
        "silver",
        thousands(rate(now.silver_changes, previous.silver_changes)),
        thousands(now.silver_changes),
        thousands(now.silver_batches),
        format!("{} batches behind", thousands(behind)),
        verdict
    );
    out
}

/// `1234567.8` as `1,234,568`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (index, c) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rates are the counter's growth over the interval, never negative.
    #[test]
    fn rates_come_from_counter_growth() {
        let before = Reading::parse("mssql_cdc_source_rows_total 100\n", 0);
        let now = Reading::parse("mssql_cdc_source_rows_total 300\n", 0);
        let text = render(Duration::from_secs(3), &now, &before, Duration::from_secs(2), None);
        let source = text.lines().find(|l| l.starts_with("source")).unwrap();
        assert_eq!(source.split_whitespace().nth(1), Some("100"), "{text}");
        assert_eq!(thousands(1234567.8), "1,234,568");
        assert_eq!(thousands(12.0), "12");
    }
}
