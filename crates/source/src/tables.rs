//! Which tables a source stage reads, and one table's stream as a stage of its own: the
//! capture instances a file lists and the tables its patterns select, each run apart
//! ([`mssql_cdc_core::stage::tables`]) so one table's fatal error stops that table only.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::config::MssqlSourceSettings;
use crate::connection::Connector;
use crate::error::SourceError;
use crate::reader::{self, Instance};
use crate::stream::Stream;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::log::registry::SchemaRegistry;
use mssql_cdc_core::stage::tables::{BuildTable, TableRun, Tables};
use mssql_cdc_core::stage::{Progress, Stage, StageError};
use mssql_cdc_core::tables::pattern::selected;
use mssql_cdc_core::tables::table_id;

/// What every table's stream is built with.
#[derive(Clone)]
pub struct StreamParts {
    /// The connector's name.
    pub connector: String,
    /// The file's settings (a table's override is applied per table).
    pub settings: Arc<MssqlSourceSettings>,
    /// The worker's Kafka cluster.
    pub kafka: KafkaConfig,
    /// The schema registry, with Avro.
    pub registry: Option<Arc<SchemaRegistry>>,
}

impl StreamParts {
    /// A table's run: a stream of `capture_instance` with `settings`.
    pub fn table(&self, table: String, capture_instance: String, settings: Arc<MssqlSourceSettings>) -> TableRun {
        let parts = self.clone();
        let build: BuildTable = Arc::new(move |progress: &Progress| {
            let stream = Stream::new(&parts.connector, &capture_instance, settings.clone(), &parts.kafka, parts.registry.clone())
                .map_err(|e| StageError::from_cause(&parts.connector, e))?
                .reporting(progress.clone());
            Ok(Box::new(TableStream { connector: parts.connector.clone(), stream }) as Box<dyn Stage>)
        });
        TableRun { table, build }
    }

    /// The listed capture instances, each its own table, resolved as its stream starts.
    pub fn listed(&self) -> Vec<TableRun> {
        self.settings.capture_instances.iter().map(|name| self.table(name.clone(), name.clone(), self.settings.clone())).collect()
    }
}

/// One table's stream, run as a stage.
struct TableStream {
    connector: String,
    stream: Stream,
}

impl Stage for TableStream {
    fn run(self: Box<Self>, cancel: CancellationToken) -> BoxFuture<'static, Result<(), StageError>> {
        Box::pin(async move { self.stream.run(cancel).await.map_err(|e| StageError::from_cause(&self.connector, e)) })
    }
}

/// The tables found by listing the database's capture instances
/// (`sys.sp_cdc_help_change_data_capture`): the listed instances, and each table the patterns
/// select, through its oldest instance (the stream moves on to newer ones).
pub struct Discovered {
    parts: StreamParts,
    connector: Connector,
}

impl Discovered {
    /// Discovery for `parts` (no network until the first look).
    pub fn new(parts: StreamParts) -> Result<Self, SourceError> {
        let connector = Connector::new(&parts.settings.login)?;
        Ok(Self { parts, connector })
    }

    async fn look(&self) -> Result<Vec<TableRun>, SourceError> {
        let mut client = self.connector.connect().await?;
        let all = reader::instances(&mut client, &self.connector).await?;
        Ok(plan(&self.parts.settings, &all).into_iter().map(|(table, instance)| self.parts.table(table.clone(), instance, Arc::new(self.parts.settings.for_table_id(&table)))).collect())
    }
}

impl Tables for Discovered {
    fn discover(&mut self) -> BoxFuture<'_, Result<Vec<TableRun>, StageError>> {
        Box::pin(async move { self.look().await.map_err(|e| StageError::from_cause(&self.parts.connector, e)) })
    }

    fn interval(&self) -> Option<Duration> {
        (!self.parts.settings.tables.include.is_empty()).then_some(self.parts.settings.tables.discovery_interval)
    }
}

/// The tables to read among `all` instances, each `schema.table` (or a listed name that names
/// no instance, which fails on its own) with the instance its stream starts from.
fn plan(settings: &MssqlSourceSettings, all: &[Instance]) -> BTreeMap<String, String> {
    let mut tables = BTreeMap::new();
    for name in &settings.capture_instances {
        match reader::choose_instance(all.to_vec(), name) {
            Ok(instance) => tables.insert(table_id(&instance.source_schema, &instance.source_table), name.clone()),
            Err(_) => tables.insert(name.clone(), name.clone()),
        };
    }
    let selection = &settings.tables;
    for instance in all {
        if !selected(&selection.include, &selection.exclude, &instance.source_schema, &instance.source_table) {
            continue;
        }
        let oldest = all.iter().filter(|other| other.same_table(instance)).min_by_key(|other| (other.created, other.start_lsn)).unwrap_or(instance);
        tables.entry(table_id(&instance.source_schema, &instance.source_table)).or_insert_with(|| oldest.name.clone());
    }
    tables
}

impl MssqlSourceSettings {
    /// [`MssqlSourceSettings::for_table`] by `schema.table` (a listed instance name that names
    /// no table gets the file's settings).
    fn for_table_id(&self, id: &str) -> MssqlSourceSettings {
        match id.split_once('.') {
            Some((schema, table)) => self.for_table(schema, table),
            None => self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mssql_cdc_core::tables::TablePattern;
    use mssql_cdc_core::stage::ConnectorKind;
    use mssql_cdc_types::lsn::Lsn;

    fn instance(schema: &str, table: &str, name: &str, start: u64) -> Instance {
        Instance { name: name.into(), source_schema: schema.into(), source_table: table.into(), index_columns: vec![], start_lsn: Lsn::from_record(start), created: None }
    }

    /// Patterns select tables (exclusions win), each once through its oldest instance; a listed
    /// instance keeps its own name, and one that names nothing is kept to fail on its own.
    #[test]
    fn patterns_and_lists_plan_one_stream_per_table() {
        let all = [
            instance("dbo", "orders", "dbo_orders", 1),
            instance("dbo", "orders", "dbo_orders_v2", 5),
            instance("dbo", "audit_log", "dbo_audit_log", 1),
            instance("sales", "lines", "sales_lines", 1),
        ];
        let mut settings = crate::config::tests::valid().validate(&mut mssql_cdc_core::config::problem::Problems::under("")).unwrap();
        settings.capture_instances = vec!["sales_lines".into(), "gone".into()];
        settings.tables.include = vec![TablePattern::parse("dbo.*").unwrap()];
        settings.tables.exclude = vec![TablePattern::parse("dbo.audit_*").unwrap()];
        let planned = plan(&settings, &all);
        let expected: BTreeMap<String, String> =
            [("dbo.orders", "dbo_orders"), ("gone", "gone"), ("sales.lines", "sales_lines")].into_iter().map(|(a, b)| (a.to_owned(), b.to_owned())).collect();
        assert_eq!(planned, expected);
    }
}
