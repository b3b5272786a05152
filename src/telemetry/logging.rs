//! Structured logs on standard error through `tracing`.

use tracing_subscriber::EnvFilter;

use super::config::LogFormat;

/// The embedded broker's crates log every request at info, and the Delta kernel logs an error
/// for every probe of a table that does not exist yet (the sinks probe before creating): keep
/// them quiet unless asked.
const QUIET_DEPENDENCIES: &str = "buoyant_kernel=warn,buoyant_kernel::snapshot::builder=off,deltalake_core=warn,deltalake_core::writer::stats=error,deltalake_core::operations::merge=error,tansu_broker=warn,tansu_storage=warn,tansu_service=warn,tansu_sans_io=warn,tansu_schema=warn,tansu_auth=warn,libsql=warn";

/// Installs the global subscriber: `RUST_LOG` if set, else `level` (with the embedded
/// broker's crates at `warn`). Safe to call once per process; later calls are ignored.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(format!("{level},{QUIET_DEPENDENCIES}")))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
