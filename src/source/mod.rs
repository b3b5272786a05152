//! Source connectors: read a database's change feed and publish it to the Kafka log.

pub mod mssql;
