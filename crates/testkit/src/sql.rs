//! SQL over TDS with tiberius (against the served simulator or a SQL Server): the rows of a
//! query, statements, the maximum LSN, LSNs as text.

use mssql_cdc_sim::client::{connect, ClientConfig};
use mssql_cdc_types::lsn::Lsn;

use crate::error::{Error, Result};

fn tds(sql: &str) -> impl Fn(tiberius::error::Error) -> Error + '_ {
    move |source| Error::Tds { sql: sql.to_owned(), source }
}

/// The rows of the first result set of `sql`, on a new connection.
pub async fn query_rows(server: &ClientConfig, sql: &str) -> Result<Vec<tiberius::Row>> {
    let mut client = connect(server).await.map_err(tds("login"))?;
    let stream = client.simple_query(sql).await.map_err(tds(sql))?;
    stream.into_first_result().await.map_err(tds(sql))
}

/// Runs statements, on a new connection.
pub async fn exec(server: &ClientConfig, sql: &str) -> Result<()> {
    let mut client = connect(server).await.map_err(tds("login"))?;
    client.simple_query(sql).await.map_err(tds(sql))?.into_results().await.map_err(tds(sql))?;
    Ok(())
}

/// `sys.fn_cdc_get_max_lsn()`.
pub async fn max_lsn(server: &ClientConfig) -> Result<Lsn> {
    const SQL: &str = "SELECT sys.fn_cdc_get_max_lsn()";
    let rows = query_rows(server, SQL).await?;
    rows.first()
        .and_then(|row| row.get::<&[u8], _>(0))
        .and_then(Lsn::from_bytes)
        .ok_or_else(|| Error::Failed(format!("`{SQL}` returned no LSN")))
}

/// Bytes as `0x` and upper-case hex, as LSNs are written in the log.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::from("0x");
    for byte in bytes {
        out.push_str(&format!("{byte:02X}"));
    }
    out
}
