//! Every metric the project emits, declared in one place, and the Prometheus recorder.
//!
//! Names follow `mssql_cdc_<subsystem>_<noun>_<unit>[_total]`; labels are bounded (connector
//! names, capture instances, topic names — never keys or values). Stages add their metrics here
//! when they are built.

use std::sync::OnceLock;

use metrics::{describe_counter, describe_gauge, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Unix time at which the process started (gauge, seconds).
pub const PROCESS_START_TIME_SECONDS: &str = "mssql_cdc_process_start_time_seconds";
/// Client connections accepted by the embedded broker's TLS listener (counter).
pub const BROKER_TLS_CONNECTIONS_TOTAL: &str = "mssql_cdc_broker_tls_connections_total";
/// TLS handshakes the embedded broker's listener rejected (counter).
pub const BROKER_TLS_HANDSHAKE_FAILURES_TOTAL: &str = "mssql_cdc_broker_tls_handshake_failures_total";

fn describe_all() {
    describe_gauge!(PROCESS_START_TIME_SECONDS, Unit::Seconds, "Unix time at which the process started.");
    describe_counter!(BROKER_TLS_CONNECTIONS_TOTAL, Unit::Count, "Connections accepted by the embedded broker's TLS listener.");
    describe_counter!(BROKER_TLS_HANDSHAKE_FAILURES_TOTAL, Unit::Count, "TLS handshakes rejected by the embedded broker's listener.");
}

/// Installs the process-wide Prometheus recorder (once) and returns the handle that renders it.
pub fn install() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .install_recorder()
                .expect("the Prometheus recorder is installed once per process");
            describe_all();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|elapsed| elapsed.as_secs_f64())
                .unwrap_or_default();
            metrics::gauge!(PROCESS_START_TIME_SECONDS).set(now);
            handle
        })
        .clone()
}
