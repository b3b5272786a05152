//! DDL on the source table, batch by batch (`schema_change_policy`).
//!
//! Before a batch is planned the stream reads `cdc.ddl_history` after its position. A batch
//! never runs past the first DDL ahead: the batch that carries a DDL ends with its commit, so
//! the log's schema changes between two batches and the `schema_change` event names the batch
//! it applies from. SQL Server alters a change table's column when the captured column's type
//! changes, old rows included, so the types of what is read next are the catalog's as it is
//! now. They are compared with the log's schema (the last control record's):
//!
//! - a type the log's type widens to ([`ColumnType::widens_to`]) is taken at the DDL's batch:
//!   a new schema version (and for Avro a new writer schema under the subject);
//! - the same type (a longer `nvarchar`, `ADD`, `DROP COLUMN`, an index) changes nothing on
//!   the log: the event records it;
//! - any other type stops the stage before a row is read, naming the column and the fix (a
//!   cast in `columns` that keeps the log's type). The check runs against the log's schema,
//!   so a restart stops again until the configuration changes.
//!
//! Under `fail` any DDL stops the stage at its batch, after the batches before it.

use mssql_cdc_core::log::control::{Event, SchemaChange, TypeChange};
use mssql_cdc_core::log::schema::TableSchema;
use mssql_cdc_types::lsn::Lsn;

use super::{Position, Setup, Stream};
use crate::config::SchemaChangePolicy;
use crate::connection::TdsClient;
use crate::error::SourceError;
use crate::reader::{self, CapturedTable, Ddl};

/// The DDL ahead of the stream's position and what the catalog says about it.
pub(super) struct DdlAhead {
    /// The DDL after the position, up to the server's maximum LSN, in LSN order.
    pub ddl: Vec<Ddl>,
    /// The captured columns as the catalog has them now (read when there is DDL ahead).
    pub captured: Option<CapturedTable>,
}

impl DdlAhead {
    /// No DDL ahead (none up to the maximum LSN, or nothing left to read).
    pub fn none() -> Self {
        Self { ddl: Vec::new(), captured: None }
    }

    /// The LSN the next batch may not run past: the first DDL's.
    pub fn bound(&self) -> Option<Lsn> {
        self.ddl.first().map(|d| d.lsn)
    }
}

/// How the catalog's captured types compare with the log's.
#[derive(Debug, PartialEq)]
pub(super) enum Verdict {
    /// Every type is the log's or one it widens to (listed).
    Compatible(Vec<TypeChange>),
    /// A column's type the log cannot become: the first such column.
    Incompatible(TypeChange),
}

/// Compares the log's schema with the catalog's, column by column; columns only one side has
/// are left alone (a column the log lacks is added, one the catalog lacks stays on the log).
pub(super) fn compare(log: &TableSchema, catalog: &TableSchema) -> Verdict {
    let mut widened = Vec::new();
    for column in &catalog.columns {
        let Some(before) = log.columns.iter().find(|c| c.name == column.name) else { continue };
        if before.ty == column.ty {
            continue;
        }
        let change = TypeChange { column: column.name.clone(), from: before.ty, to: column.ty };
        if !before.ty.widens_to(column.ty) {
            return Verdict::Incompatible(change);
        }
        widened.push(change);
    }
    Verdict::Compatible(widened)
}

/// The columns of `table` not in `captured`, and those of `captured` not in `table`, in order.
pub(super) fn column_drift(table: &[String], captured: &[String]) -> (Vec<String>, Vec<String>) {
    let missing = |from: &[String], other: &[String]| from.iter().filter(|c| !other.iter().any(|o| o.eq_ignore_ascii_case(c))).cloned().collect();
    (missing(table, captured), missing(captured, table))
}

impl Stream {
    /// The DDL ahead of `position`; with some, the catalog's captured columns, checked against
    /// the log's schema: a type the log cannot hold stops the stage here, before a row is read.
    pub(super) async fn ddl_ahead(&self, conn: &mut TdsClient, setup: &Setup, position: &Position, max_lsn: Lsn) -> Result<DdlAhead, SourceError> {
        let ci = setup.instance.name.as_str();
        if max_lsn <= position.lsn {
            return Ok(DdlAhead::none());
        }
        let ddl = reader::ddl_history(conn, &self.connector, ci, position.lsn, max_lsn).await?;
        if ddl.is_empty() {
            return Ok(DdlAhead { ddl, captured: None });
        }
        let captured = reader::table_schema(conn, &self.connector, &setup.instance, &self.options).await?;
        let log = position.log_schema.as_ref().unwrap_or(&setup.schema);
        if let Verdict::Incompatible(change) = compare(log, &captured.schema) {
            // The statement most likely to have made the type: the last that altered one.
            let culprit = ddl.iter().rev().find(|d| d.required_column_update).unwrap_or(&ddl[0]);
            return Err(narrowed(ci, culprit, &change, &captured));
        }
        Ok(DdlAhead { ddl, captured: Some(captured) })
    }

    /// The batch ending at `to` carries the DDL of `ahead` up to it: under `fail` the stage
    /// stops; under `classify` the log takes the catalog's types and the events are returned.
    pub(super) async fn apply_ddl(&self, conn: &mut TdsClient, setup: &mut Setup, position: &Position, ahead: &DdlAhead, to: Lsn) -> Result<Vec<Event>, SourceError> {
        let ci = setup.instance.name.clone();
        let in_batch: Vec<&Ddl> = ahead.ddl.iter().take_while(|d| d.lsn <= to).collect();
        let (Some(first), Some(captured)) = (in_batch.first(), &ahead.captured) else { return Ok(Vec::new()) };
        if self.options.schema_change_policy == SchemaChangePolicy::Fail {
            return Err(SourceError::SchemaChanged {
                capture_instance: ci,
                ddl_lsn: first.lsn,
                command: first.command.clone(),
                message: "schema_change_policy = \"fail\" stops on any DDL; look at what it did (docs/schema-changes.md), adapt the consumers, then restart once with schema_change_policy = \"classify\" to go past it".into(),
            });
        }
        let log = position.log_schema.clone().unwrap_or_else(|| setup.schema.clone());
        let widened = match compare(&log, &captured.schema) {
            Verdict::Compatible(widened) => widened,
            Verdict::Incompatible(change) => return Err(narrowed(&ci, first, &change, captured)),
        };
        if captured.schema != setup.schema {
            self.take_schema(setup, captured.clone()).await?;
        }
        let table_columns = reader::table_columns(conn, &self.connector, &setup.instance).await?;
        let captured_names: Vec<String> = captured.sql_types.iter().map(|(name, _)| name.clone()).collect();
        let (not_captured, dropped) = column_drift(&table_columns, &captured_names);
        let schema_version = setup.schema.fingerprint();
        let events = in_batch
            .iter()
            .map(|ddl| {
                tracing::warn!(
                    connector = %self.connector_name,
                    capture_instance = %ci,
                    ddl_lsn = %ddl.lsn,
                    command = %ddl.command,
                    widened = widened.len(),
                    not_captured = ?not_captured,
                    dropped = ?dropped,
                    "DDL on the source table; the stream goes on (schema_change_policy = classify), schema_change published"
                );
                Event::SchemaChange(SchemaChange {
                    ddl_lsn: ddl.lsn,
                    ddl_time: ddl.time,
                    command: ddl.command.clone(),
                    required_column_update: ddl.required_column_update,
                    widened: widened.clone(),
                    not_captured: not_captured.clone(),
                    dropped: dropped.clone(),
                    schema_version,
                })
            })
            .collect();
        Ok(events)
    }

    /// Publishes from now on with `captured`'s layout (for Avro, registered first: a registry
    /// refusing it stops the stage with its answer).
    pub(super) async fn take_schema(&self, setup: &mut Setup, captured: CapturedTable) -> Result<(), SourceError> {
        let names = setup.debezium.as_ref().map(|debezium| &debezium.0);
        (setup.key_schema_id, setup.value_schema_id) = self.register_schemas(&captured.schema, &setup.data_topic, names).await?;
        setup.change_sql = reader::change_query(&setup.instance.name, &captured.select, captured.schema.include_command_id);
        let CapturedTable { schema, select, sql_types, notes } = captured;
        (setup.schema, setup.select, setup.sql_types, setup.null_columns) = (schema, select, sql_types, notes.null_columns());
        tracing::info!(connector = %self.connector_name, capture_instance = %setup.instance.name, schema_version = setup.schema.fingerprint(), "the log's schema changed");
        Ok(())
    }
}

/// The stop for a captured column whose new type the log cannot take.
fn narrowed(ci: &str, ddl: &Ddl, change: &TypeChange, captured: &CapturedTable) -> SourceError {
    let sql_type = captured.sql_types.iter().find(|(name, _)| *name == change.column).map_or("?", |(_, t)| t.as_str());
    let keep = change.from.sql_type();
    SourceError::SchemaChanged {
        capture_instance: ci.to_owned(),
        ddl_lsn: ddl.lsn,
        command: ddl.command.clone(),
        message: format!(
            "column `{}` is now {sql_type} (log type {:?}), which the log's {:?} cannot become without breaking its readers; nothing of the batch was read. Keep the log's type with a cast in `columns` (list every column to publish, with \"{} {keep}\"), then restart; or roll the table onto a new capture instance and a new topic (docs/schema-changes.md)",
            change.column, change.to, change.from, change.column
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mssql_cdc_core::log::schema::{Column, ColumnType};

    fn schema(columns: &[(&str, ColumnType)]) -> TableSchema {
        TableSchema { columns: columns.iter().map(|(n, t)| Column { name: (*n).into(), ty: *t }).collect(), key: vec!["id".into()], include_command_id: true }
    }

    /// Invariant: the log takes a widening, and refuses a type change it cannot hold, naming
    /// the first such column.
    #[test]
    fn widening_is_compatible_and_narrowing_is_not() {
        let log = schema(&[("id", ColumnType::Int32), ("qty", ColumnType::Int32), ("note", ColumnType::String)]);
        assert_eq!(compare(&log, &log), Verdict::Compatible(Vec::new()));
        let wider = schema(&[("id", ColumnType::Int32), ("qty", ColumnType::Int64), ("note", ColumnType::String)]);
        assert_eq!(compare(&log, &wider), Verdict::Compatible(vec![TypeChange { column: "qty".into(), from: ColumnType::Int32, to: ColumnType::Int64 }]));
        assert_eq!(compare(&wider, &log), Verdict::Incompatible(TypeChange { column: "qty".into(), from: ColumnType::Int64, to: ColumnType::Int32 }));
        let text = schema(&[("id", ColumnType::Int32), ("qty", ColumnType::String)]);
        assert!(matches!(compare(&log, &text), Verdict::Incompatible(change) if change.column == "qty"));
        // A column only one side has is no type change.
        let added = schema(&[("id", ColumnType::Int32), ("qty", ColumnType::Int32), ("note", ColumnType::String), ("region", ColumnType::String)]);
        assert_eq!(compare(&log, &added), Verdict::Compatible(Vec::new()));
    }

    #[test]
    fn column_drift_names_added_and_dropped_columns() {
        let names = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let (not_captured, dropped) = column_drift(&names(&["id", "qty", "Region"]), &names(&["id", "qty", "note"]));
        assert_eq!((not_captured, dropped), (names(&["Region"]), names(&["note"])));
    }

    #[test]
    fn the_narrowing_stop_names_the_column_and_the_cast() {
        let ddl = Ddl { lsn: Lsn::parse_hex("2A").unwrap(), command: "ALTER TABLE dbo.t ALTER COLUMN qty int".into(), required_column_update: true, time: None };
        let captured = CapturedTable { schema: schema(&[("qty", ColumnType::Int32)]), select: vec!["[qty]".into()], sql_types: vec![("qty".into(), "int".into())], notes: Default::default() };
        let change = TypeChange { column: "qty".into(), from: ColumnType::Int64, to: ColumnType::Int32 };
        let error = narrowed("dbo_t", &ddl, &change, &captured);
        let text = error.to_string();
        assert!(text.contains("dbo_t") && text.contains("0x0000000000000000002A") && text.contains("ALTER COLUMN qty int"), "{text}");
        assert!(text.contains("\"qty bigint\""), "{text}");
        assert_eq!(mssql_cdc_core::stage::Retriable::stop_reason(&error), mssql_cdc_core::stage::StopReason::SchemaChanged);
    }
}
