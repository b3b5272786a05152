//! Structured logs on standard error through `tracing`.

use tracing_subscriber::EnvFilter;

use super::config::LogFormat;

/// The embedded broker's crates log every request at info, and the Delta kernel logs an error
/// for every probe of a table that does not exist yet (the sinks probe before creating): keep
/// them quiet unless asked.
const QUIET_DEPENDENCIES: &str = "buoyant_kernel=warn,buoyant_kernel::snapshot::builder=off,deltalake_core=warn,deltalake_core::writer::stats=error,deltalake_core::operations::merge=error,tansu_broker=warn,tansu_storage=warn,tansu_service=warn,tansu_sans_io=warn,tansu_schema=warn,tansu_auth=warn,libsql=warn";

/// Installs the global subscriber: `RUST_LOG` if set, else `level`, over the quiet defaults
/// for the dependencies above (a `RUST_LOG` naming one of their targets overrides it). Safe to
/// call once per process; later calls are ignored.
pub fn init(format: LogFormat, level: &str) {
    let wanted = std::env::var("RUST_LOG").ok().filter(|value| !value.trim().is_empty()).unwrap_or_else(|| level.to_owned());
    let filter = EnvFilter::try_new(format!("{QUIET_DEPENDENCIES},{wanted}")).unwrap_or_else(|_| EnvFilter::new(format!("info,{QUIET_DEPENDENCIES}")));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _already_set = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
