//! A sink table's schema following the log's (`docs/schema-changes.md`): columns the table
//! lacks are added (nullable, NULL in older rows), and columns the log widened are widened.
//!
//! delta-rs 1.x neither writes nor reads Delta's `typeWidening` table feature, and a merge of
//! schemas keeps the table's narrower type (casting wider values down, which fails on the first
//! value that does not fit). So a widening rewrites the table once: every file read through
//! DataFusion with the widened columns cast, written back in one commit that replaces the
//! schema (`SaveMode::Overwrite` with `SchemaMode::Overwrite`). That commit keeps the table's
//! properties, partitioning and `txn` versions, and readers without type widening read it.
//! Its cost is a full rewrite, paid once per DDL that widens a captured column.


use arrow::datatypes::{DataType, Schema};
use deltalake::datafusion::common::metadata::FieldMetadata;
use deltalake::datafusion::logical_expr::{cast, Expr};
use deltalake::datafusion::prelude::SessionContext;
use deltalake::kernel::engine::arrow_conversion::{TryIntoArrow, TryIntoKernel};
use deltalake::kernel::StructField;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::operations::write::SchemaMode;
use deltalake::protocol::SaveMode;
use deltalake::DeltaTable;

use super::error::DeltaError;
use mssql_cdc_core::log::schema::arrow_widens;

/// The columns of `table` whose type `incoming` widens, with their new types, in table order.
pub fn widenings(table: &Schema, incoming: &Schema) -> Vec<(String, DataType)> {
    table
        .fields()
        .iter()
        .filter_map(|field| {
            let new = incoming.field_with_name(field.name()).ok()?;
            arrow_widens(field.data_type(), new.data_type()).then(|| (field.name().clone(), new.data_type().clone()))
        })
        .collect()
}

/// The table's Arrow schema, from its snapshot's metadata (no I/O).
pub fn arrow_schema(table: &DeltaTable) -> Result<Schema, DeltaError> {
    let location = table.table_url().to_string();
    let snapshot = table.snapshot().map_err(|e| DeltaError::new(&location, e))?;
    let schema = snapshot.schema();
    schema.as_ref().try_into_arrow().map_err(|e| DeltaError::new(&location, e))
}

/// Whether `table` lacks a column of `incoming` or has one that `incoming` widens, so that
/// [`evolve_for`] would change it (no I/O).
pub fn needed(table: &DeltaTable, incoming: &Schema) -> Result<bool, DeltaError> {
    let current = arrow_schema(table)?;
    Ok(incoming.fields().iter().any(|f| current.field_with_name(f.name()).is_err()) || !widenings(&current, incoming).is_empty())
}

/// Makes `table` take `incoming` (the next write's schema): adds the columns it lacks, then
/// widens those `incoming` widens; `table` as it is when there is nothing to do.
pub async fn evolve_for(table: DeltaTable, incoming: &Schema, metadata: impl IntoIterator<Item = (String, serde_json::Value)>) -> Result<DeltaTable, DeltaError> {
    let current = arrow_schema(&table)?;
    let missing: Vec<&arrow::datatypes::Field> = incoming.fields().iter().filter(|f| current.field_with_name(f.name()).is_err()).map(|f| f.as_ref()).collect();
    let table = if missing.is_empty() {
        table
    } else {
        let location = table.table_url().to_string();
        let fields = missing
            .iter()
            .map(|f| nullable_column(f))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| DeltaError::new(&location, e))?;
        let names: Vec<&String> = missing.iter().map(|f| f.name()).collect();
        tracing::info!(table = %location, columns = ?names, "columns added");
        table.add_columns().with_fields(fields).await.map_err(|e| DeltaError::new(&location, e))?
    };
    let columns = widenings(&arrow_schema(&table)?, incoming);
    widen(table, &columns, metadata).await
}

/// An Arrow field as a nullable Delta column.
fn nullable_column(field: &arrow::datatypes::Field) -> Result<StructField, arrow::error::ArrowError> {
    (&field.clone().with_nullable(true)).try_into_kernel()
}

/// Rewrites `table` with `columns` cast to their new types, in one commit carrying `metadata`;
/// column comments are kept. A no-op without columns.
/// A table with deletion vectors is rewritten on a runtime with room for their reads
/// ([`super::vector_reads`]).
pub async fn widen(table: DeltaTable, columns: &[(String, DataType)], metadata: impl IntoIterator<Item = (String, serde_json::Value)>) -> Result<DeltaTable, DeltaError> {
    if columns.is_empty() {
        return Ok(table);
    }
    let vectors = super::vector_reads::files_with_vectors(&table);
    let columns = columns.to_vec();
    let metadata: Vec<(String, serde_json::Value)> = metadata.into_iter().collect();
    super::vector_reads::with_room_for_vectors(vectors, move || async move { rewrite(table, &columns, metadata).await }).await
}

async fn rewrite(table: DeltaTable, columns: &[(String, DataType)], metadata: Vec<(String, serde_json::Value)>) -> Result<DeltaTable, DeltaError> {
    let location = table.table_url().to_string();
    let fail = |e: deltalake::datafusion::error::DataFusionError| DeltaError::new(&location, e);
    let ctx = SessionContext::new();
    table.update_datafusion_session(&ctx.state()).map_err(|e| DeltaError::new(&location, e))?;
    let provider = table.table_provider().await.map_err(|e| DeltaError::new(&location, e))?;
    let schema = provider.schema();
    ctx.register_table("widened", provider).map_err(fail)?;
    let exprs: Vec<Expr> = schema
        .fields()
        .iter()
        .map(|field| {
            let column = Expr::Column(deltalake::datafusion::common::Column::new_unqualified(field.name()));
            let value = match columns.iter().find(|(name, _)| name == field.name()) {
                Some((_, to)) => cast(column, to.clone()),
                None => column,
            };
            let kept = (!field.metadata().is_empty()).then(|| FieldMetadata::from(field.metadata()));
            value.alias_with_metadata(field.name(), kept)
        })
        .collect();
    let frame = ctx.table("widened").await.map_err(fail)?.select(exprs).map_err(fail)?;
    let plan = frame.logical_plan().clone();
    let widened: Vec<String> = columns.iter().map(|(name, to)| format!("{name} {to}")).collect();
    let properties = CommitProperties::default().with_metadata(
        metadata.into_iter().chain([("mssql_cdc.widened".to_owned(), serde_json::json!(widened))]),
    );
    let table = table
        .write(Vec::new())
        .with_input_plan(plan)
        .with_save_mode(SaveMode::Overwrite)
        .with_schema_mode(SchemaMode::Overwrite)
        .with_commit_properties(properties)
        .await
        .map_err(|e| DeltaError::new(&location, e))?;
    tracing::info!(table = %location, columns = ?widened, "table rewritten with widened columns");
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::storage::Storage;
    use crate::delta::table::{append, create, open, txn_version};
    use arrow::array::{Int32Array, Int64Array, RecordBatch, StringArray};
    use arrow::datatypes::Field;
    use std::sync::Arc;
    use std::collections::HashMap;

    fn schema(qty: DataType) -> Arc<Schema> {
        Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false), Field::new("qty", qty, true), Field::new("note", DataType::Utf8, true)]))
    }

    /// Invariant: a widening keeps every row and value, the `txn` versions and the comments,
    /// and the table then takes values only the wider type holds.
    #[tokio::test]
    async fn widening_rewrites_the_table_keeping_rows_txn_and_comments() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("t").to_str().unwrap().to_owned();
        let storage = Storage::new();
        let narrow = schema(DataType::Int32);
        let comments = HashMap::from([("qty", "how many")]);
        let table = create(&location, &storage, &narrow, &comments, "widen").await.unwrap();
        let rows = RecordBatch::try_new(narrow.clone(), vec![Arc::new(Int32Array::from(vec![1, 2])), Arc::new(Int32Array::from(vec![Some(7), None])), Arc::new(StringArray::from(vec!["a", "b"]))]).unwrap();
        let table = append(table, vec![rows], "app", 0, []).await.unwrap();
        let wide = schema(DataType::Int64);
        let columns = widenings(&arrow_schema(&table).unwrap(), &wide);
        assert_eq!(columns, vec![("qty".to_owned(), DataType::Int64)]);
        let table = widen(table, &columns, []).await.unwrap();
        let more = RecordBatch::try_new(wide.clone(), vec![Arc::new(Int32Array::from(vec![3])), Arc::new(Int64Array::from(vec![Some(5_000_000_000)])), Arc::new(StringArray::from(vec!["c"]))]).unwrap();
        append(table, vec![more], "app", 1, []).await.unwrap();
        let table = open(&location, &storage).await.unwrap().unwrap();
        assert_eq!(txn_version(&table, "app").await.unwrap(), Some(1));
        let read = arrow_schema(&table).unwrap();
        assert_eq!(read.field_with_name("qty").unwrap().data_type(), &DataType::Int64);
        assert!(!read.field_with_name("id").unwrap().is_nullable(), "nullability kept");
        let snapshot = table.snapshot().unwrap();
        let qty = snapshot.schema().field("qty").cloned().unwrap();
        assert!(format!("{:?}", qty.metadata()).contains("how many"), "comment kept: {:?}", qty.metadata());
        let sums = crate::delta::query::query(&[("t", &table)], "SELECT COUNT(*), SUM(qty) FROM t").await.unwrap();
        let counted = sums[0].column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
        let total = sums[0].column(1).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
        assert_eq!((counted, total), (3, 5_000_000_007));
        // Nothing left to widen.
        assert!(widenings(&read, &wide).is_empty());
    }
}
