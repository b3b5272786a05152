//! `/metrics` over HTTP, and metric values summed by name from the Prometheus text.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::error::{io, Result};

/// `GET <path>` on `address` (HTTP/1.0): (status code, body).
pub fn get(address: SocketAddr, path: &str) -> Result<(u16, String)> {
    request(address, "GET", path)
}

/// A plain HTTP/1.0 request without a body on loopback: (status code, body).
pub fn request(address: SocketAddr, method: &str, path: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(address).map_err(io(format!("connecting to {address}")))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(io("setting a read timeout"))?;
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n").map_err(io(format!("{method} {path}")))?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(io(format!("reading {method} {path}")))?;
    let status = response.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// The `/metrics` text of a process.
pub fn scrape(address: SocketAddr) -> Result<String> {
    get(address, "/metrics").map(|(_, body)| body)
}

/// The sum of every sample of metric `name` (any labels) in Prometheus text; `None` when
/// there is none.
pub fn sum(text: &str, name: &str) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        // The name must end here: `name{...} v` or `name v`, not `name_suffix v`.
        let value = match rest.chars().next() {
            Some('{') => rest.rsplit_once('}').map(|(_, value)| value),
            Some(' ') => Some(rest),
            _ => None,
        };
        if let Some(value) = value.and_then(|value| value.trim().parse::<f64>().ok()) {
            *total.get_or_insert(0.0) += value;
        }
    }
    total
}

/// The mean of a histogram or summary `name` (`_sum` / `_count`); `None` without samples.
pub fn mean(text: &str, name: &str) -> Option<f64> {
    let total = sum(text, &format!("{name}_sum"))?;
    let count = sum(text, &format!("{name}_count"))?;
    (count > 0.0).then(|| total / count)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE mssql_cdc_source_rows_total counter\n\
        mssql_cdc_source_rows_total{capture_instance=\"dbo_orders\"} 120\n\
        mssql_cdc_source_rows_total{capture_instance=\"dbo_items\"} 30\n\
        mssql_cdc_source_rows_total_extra 99\n\
        mssql_cdc_bronze_rows_total 7\n\
        d_sum 6\n\
        d_count 3\n";

    /// A metric is summed over its label sets, and a longer name is never mistaken for it.
    #[test]
    fn metrics_are_summed_over_labels_by_exact_name() {
        assert_eq!(sum(TEXT, "mssql_cdc_source_rows_total"), Some(150.0));
        assert_eq!(sum(TEXT, "mssql_cdc_bronze_rows_total"), Some(7.0));
        assert_eq!(sum(TEXT, "mssql_cdc_silver_changes_total"), None);
        assert_eq!(mean(TEXT, "d"), Some(2.0));
    }
}
