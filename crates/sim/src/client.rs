//! A TDS client for the simulator (or a real SQL Server) through tiberius: what
//! `mssql-cdc sim workload --server` uses to drive the workload over the wire.

use std::net::SocketAddr;

use tiberius::{AuthMethod, Client, ColumnData, Config, EncryptionLevel, Query};
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncWriteCompatExt};

use super::error::SqlError;
use super::value::Value;
use super::workload::SqlClient;

/// The environment variable holding the served simulator's `sa` password (`sim serve`,
/// `sim workload --server`, and the connector files of the suites, `demo` and `bench`).
pub const PASSWORD_ENV: &str = "MSSQL_CDC_SIM_PASSWORD";

/// The `sa` password when [`PASSWORD_ENV`] is not set.
pub const DEFAULT_PASSWORD: &str = "Sim-Passw0rd";

/// [`PASSWORD_ENV`]'s value, else [`DEFAULT_PASSWORD`].
pub fn password_from_env() -> String {
    std::env::var(PASSWORD_ENV).unwrap_or_else(|_| DEFAULT_PASSWORD.to_owned())
}

/// Connection settings. `Debug` hides the password.
#[derive(Clone)]
pub struct ClientConfig {
    /// Server address.
    pub address: SocketAddr,
    /// SQL login.
    pub user: String,
    /// Its password.
    pub password: String,
    /// Database.
    pub database: String,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig").field("address", &self.address).field("user", &self.user).field("password", &"***").field("database", &self.database).finish()
    }
}

/// A connected tiberius client.
pub type TdsClient = Client<Compat<TcpStream>>;

/// Connects without TLS, unless the server forces encryption (`sim serve --encrypt
/// required`): then with TLS, trusting any certificate. This client drives workloads and test
/// set-ups; what checks certificates is the source's own connection.
pub async fn connect(config: &ClientConfig) -> Result<TdsClient, tiberius::error::Error> {
    let mut tds = Config::new();
    tds.host(config.address.ip());
    tds.port(config.address.port());
    tds.database(&config.database);
    tds.authentication(AuthMethod::sql_server(&config.user, &config.password));
    tds.encryption(EncryptionLevel::NotSupported);
    tds.trust_cert();
    let tcp = TcpStream::connect(config.address).await?;
    tcp.set_nodelay(true)?;
    Client::connect(tds, tcp.compat_write()).await
}

/// Binds a simulator value as a tiberius parameter.
pub fn bind(query: &mut Query<'_>, value: &Value) {
    match value {
        Value::Null => query.bind(Option::<String>::None),
        Value::Bit(b) => query.bind(*b),
        Value::Int(i) => query.bind(*i),
        Value::Numeric { value, scale } => query.bind(tiberius::numeric::Numeric::new_with_scale(*value, *scale)),
        Value::Float(f) => query.bind(*f),
        Value::Text(text) => query.bind(text.clone()),
        Value::Binary(bytes) => query.bind(bytes.clone()),
        Value::Date(d) => query.bind(*d),
        Value::Time(t) => query.bind(*t),
        Value::DateTime(dt) => query.bind(*dt),
        Value::DateTimeOffset(dt) => query.bind(*dt),
        Value::Guid(g) => query.bind(*g),
    }
}

/// A tiberius error as a SQL error (server errors keep their number; I/O is 10054).
pub fn to_sql_error(error: tiberius::error::Error) -> SqlError {
    match error {
        tiberius::error::Error::Server(token) => SqlError { number: token.code() as i32, state: token.state(), class: token.class(), message: token.message().to_owned(), blocked_by: None },
        other => SqlError::new(10054, 20, other.to_string()),
    }
}

/// Converts a received column value into a simulator value.
pub fn from_column(data: &ColumnData<'_>) -> Value {
    use chrono::NaiveDate;
    match data {
        ColumnData::U8(v) => v.map_or(Value::Null, |v| Value::Int(i64::from(v))),
        ColumnData::I16(v) => v.map_or(Value::Null, |v| Value::Int(i64::from(v))),
        ColumnData::I32(v) => v.map_or(Value::Null, |v| Value::Int(i64::from(v))),
        ColumnData::I64(v) => v.map_or(Value::Null, Value::Int),
        ColumnData::F32(v) => v.map_or(Value::Null, |v| Value::Float(f64::from(v))),
        ColumnData::F64(v) => v.map_or(Value::Null, Value::Float),
        ColumnData::Bit(v) => v.map_or(Value::Null, Value::Bit),
        ColumnData::String(v) => v.as_ref().map_or(Value::Null, |s| Value::Text(s.to_string())),
        ColumnData::Guid(v) => v.map_or(Value::Null, Value::Guid),
        ColumnData::Binary(v) => v.as_ref().map_or(Value::Null, |b| Value::Binary(b.to_vec())),
        ColumnData::Numeric(v) => v.map_or(Value::Null, |n| Value::Numeric { value: n.value(), scale: n.scale() }),
        ColumnData::Date(v) => v.map_or(Value::Null, |d| Value::Date(NaiveDate::from_ymd_opt(1, 1, 1).unwrap_or_default() + chrono::Duration::days(i64::from(d.days())))),
        ColumnData::Time(v) => v.map_or(Value::Null, |t| {
            let nanos = t.increments() * 10u64.pow(u32::from(9 - t.scale()));
            Value::Time(chrono::NaiveTime::from_num_seconds_from_midnight_opt((nanos / 1_000_000_000) as u32, (nanos % 1_000_000_000) as u32).unwrap_or_default())
        }),
        ColumnData::DateTime2(v) => v.map_or(Value::Null, |dt| {
            let date = NaiveDate::from_ymd_opt(1, 1, 1).unwrap_or_default() + chrono::Duration::days(i64::from(dt.date().days()));
            let nanos = dt.time().increments() * 10u64.pow(u32::from(9 - dt.time().scale()));
            Value::DateTime(date.and_hms_opt(0, 0, 0).unwrap_or_default() + chrono::Duration::nanoseconds(nanos as i64))
        }),
        other => Value::Text(format!("{other:?}")),
    }
}

/// A blocking [`SqlClient`] over tiberius, for the workload generator.
pub struct BlockingClient {
    runtime: tokio::runtime::Runtime,
    client: TdsClient,
}

impl BlockingClient {
    /// Connects (on a private single-threaded runtime).
    pub fn connect(config: &ClientConfig) -> Result<Self, SqlError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|error| SqlError::new(10054, 20, error.to_string()))?;
        let client = runtime.block_on(connect(config)).map_err(to_sql_error)?;
        Ok(Self { runtime, client })
    }
}

impl SqlClient for BlockingClient {
    fn execute(&mut self, sql: &str, params: &[(String, Value)]) -> Result<u64, SqlError> {
        let client = &mut self.client;
        if params.is_empty() {
            // A plain batch: transaction control must not run inside sp_executesql.
            return self
                .runtime
                .block_on(async move {
                    let results = client.simple_query(sql).await?.into_results().await?;
                    Ok::<u64, tiberius::error::Error>(results.iter().map(|set| set.len() as u64).sum())
                })
                .map_err(to_sql_error);
        }
        let mut query = Query::new(sql.to_owned());
        for (_, value) in params {
            bind(&mut query, value);
        }
        self.runtime.block_on(async move { query.execute(client).await.map(|result| result.total()) }).map_err(to_sql_error)
    }
}
