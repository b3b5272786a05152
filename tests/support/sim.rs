//! Helpers for driving the simulator in-process.

use mssql_cdc::sim::{Output, ResultSet, Session, SimConfig, Simulator, SqlError, Value};

/// A simulator with one session.
pub struct Sim {
    /// The simulator.
    pub sim: Simulator,
    /// Its session.
    pub session: Session,
}

impl Sim {
    /// A fresh simulator.
    pub fn new(config: SimConfig) -> Self {
        let sim = Simulator::new(config);
        let session = sim.session();
        Self { sim, session }
    }

    /// Runs a batch, panicking with the SQL error if it fails.
    pub fn exec(&mut self, sql: &str) -> Vec<Output> {
        self.exec_with(sql, &[])
    }

    /// Runs a batch with parameters, panicking on error.
    pub fn exec_with(&mut self, sql: &str, params: &[(&str, Value)]) -> Vec<Output> {
        let params: Vec<(String, Value)> = params.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect();
        let outcome = self.sim.execute(&mut self.session, sql, &params);
        if let Some(error) = outcome.error {
            panic!("{sql}: {error}");
        }
        outcome.outputs
    }

    /// Runs a batch expected to fail; returns the error.
    pub fn fail(&mut self, sql: &str) -> SqlError {
        self.sim.execute(&mut self.session, sql, &[]).error.unwrap_or_else(|| panic!("{sql} succeeded"))
    }

    /// The last result set of a batch.
    pub fn query(&mut self, sql: &str) -> ResultSet {
        self.query_with(sql, &[])
    }

    /// The last result set of a batch with parameters.
    pub fn query_with(&mut self, sql: &str, params: &[(&str, Value)]) -> ResultSet {
        self.exec_with(sql, params)
            .into_iter()
            .filter_map(|o| if let Output::Rows(rows) = o { Some(rows) } else { None })
            .last()
            .unwrap_or_else(|| panic!("{sql} returned no result set"))
    }

    /// A single value.
    pub fn scalar(&mut self, sql: &str) -> Value {
        self.query(sql).rows[0][0].clone()
    }

    /// Creates `dbo.orders` (id, status, amount) and enables CDC on it.
    pub fn orders_with_cdc(&mut self) {
        self.exec("CREATE TABLE dbo.orders (id int NOT NULL PRIMARY KEY, status varchar(20) NULL, amount decimal(10,2) NULL)");
        self.exec("EXEC sys.sp_cdc_enable_db");
        self.exec("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL");
    }
}

/// A 10-byte binary value as an LSN's hex.
pub fn lsn_hex(value: &Value) -> String {
    match value {
        Value::Binary(bytes) => bytes.iter().map(|b| format!("{b:02X}")).collect(),
        other => panic!("not binary: {other:?}"),
    }
}
