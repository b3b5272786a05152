//! Worker and connector files for the suites, `demo` and `bench`: one writer per kind, the
//! Delta tables placed in a [`Lake`] (a local directory or an object-store prefix).

use std::path::{Path, PathBuf};

use crate::error::{io, Result};

/// Writes `text` to `dir/name`; returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))?;
    Ok(path)
}

/// Where a pipeline's Delta tables live, and the object-store options to reach them.
#[derive(Clone, Debug)]
pub struct Lake {
    /// A local directory or a URL prefix such as `s3://bucket/run-1`.
    pub root: String,
    /// delta-rs storage options (`AWS_ENDPOINT_URL`, ...), empty for a local directory.
    pub storage: Vec<(String, String)>,
}

impl Lake {
    /// Tables under a local directory.
    pub fn local(dir: &Path) -> Self {
        Self { root: dir.display().to_string(), storage: Vec::new() }
    }

    /// The location of table `name`.
    pub fn table(&self, name: &str) -> String {
        format!("{}/{name}", self.root.trim_end_matches('/'))
    }

    /// The `[storage_options]` table of a connector file (empty for a local lake); it must
    /// come last in the file.
    pub fn storage_toml(&self) -> String {
        if self.storage.is_empty() {
            return String::new();
        }
        let lines: String = self.storage.iter().map(|(key, value)| format!("{key} = \"{value}\"\n")).collect();
        format!("[storage_options]\n{lines}")
    }

    /// The storage options as a JSON object (for the Python readers).
    pub fn storage_json(&self) -> String {
        let map: serde_json::Map<String, serde_json::Value> = self.storage.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        serde_json::Value::Object(map).to_string()
    }
}

/// A worker file's text: the broker at `bootstrap`, `/metrics` on a free port, then `extra`
/// (e.g. a `[retry]` table).
pub fn worker_toml(bootstrap: &str, extra: &str) -> String {
    format!("[kafka]\nbootstrap_servers = \"{bootstrap}\"\n\n[telemetry]\nlisten = \"127.0.0.1:0\"\n{extra}")
}

/// An `mssql-source` connector's text for `dbo_orders` on the simulator at `port` (login `sa`,
/// password from `MSSQL_CDC_SIM_PASSWORD`, no TLS), publishing under `topic_prefix`, polling
/// every 100 ms with a 1 s heartbeat; `extra` adds options.
pub fn source_toml(name: &str, port: u16, topic_prefix: &str, extra: &str) -> String {
    source_toml_signed_in(name, port, topic_prefix, &sql_login_toml(), extra)
}

/// The sign-in lines of the simulator's `sa` login without TLS.
pub fn sql_login_toml() -> String {
    format!("user = \"sa\"\npassword = {{ env = \"{}\" }}\nencrypt = \"not_supported\"\n", mssql_cdc_sim::client::PASSWORD_ENV)
}

/// [`source_toml`] with its sign-in and TLS lines (`user`, `authentication`, `encrypt`,
/// `trust_server_certificate_ca`, ...) given by `login`.
pub fn source_toml_signed_in(name: &str, port: u16, topic_prefix: &str, login: &str, extra: &str) -> String {
    format!(
        r#"name = "{name}"
kind = "mssql-source"
connection_string = "Server=127.0.0.1,{port};Database=sales"
{login}
capture_instances = ["dbo_orders"]
topic_prefix = "{topic_prefix}"
poll_interval_ms = 100
heartbeat_interval_ms = 1000
{extra}
"#
    )
}

/// A `delta-bronze` connector's text: `topic` into `<name>-bronze` and the lake's `facts`
/// table with `app_id`; `extra` adds options.
pub fn bronze_toml(name: &str, topic: &str, app_id: &str, lake: &Lake, extra: &str) -> String {
    format!(
        "name = \"{name}\"\nkind = \"delta-bronze\"\ntopic = \"{topic}\"\ntarget = \"{}\"\napp_id = \"{app_id}\"\nfacts_table = \"{}\"\n{extra}\n{}",
        lake.table(&format!("{name}-bronze")),
        lake.table("facts"),
        lake.storage_toml()
    )
}

/// A `delta-silver` connector's text: the lake's `bronze` table into `silver`, with the
/// `control` and `facts` tables, minute granularity and a 200 ms poll; `extra` adds options.
pub fn silver_toml(name: &str, bronze: &str, app_id: &str, lake: &Lake, extra: &str) -> String {
    format!(
        "name = \"{name}\"\nkind = \"delta-silver\"\nbronze = \"{}\"\ntarget = \"{}\"\napp_id = \"{app_id}\"\ncontrol_table = \"{}\"\nfacts_table = \"{}\"\ngranularity = \"minute\"\npoll_interval_ms = 200\n{extra}\n{}",
        lake.table(bronze),
        lake.table("silver"),
        lake.table("control"),
        lake.table("facts"),
        lake.storage_toml()
    )
}
