//! Reading Delta tables with SQL (DataFusion over delta-rs's table provider). File statistics
//! prune what a `WHERE` on a column excludes, so a range on `_batch_id` reads only the files
//! of those batches.

use arrow::array::RecordBatch;
use deltalake::datafusion::prelude::SessionContext;
use deltalake::DeltaTable;

use super::table::DeltaError;

/// Runs `sql` over `tables`, each registered under its name. Tables with deletion vectors are
/// read on a runtime with room for their vector reads ([`super::vector_reads`]).
pub async fn query(tables: &[(&str, &DeltaTable)], sql: &str) -> Result<Vec<RecordBatch>, DeltaError> {
    let vectors: usize = tables.iter().map(|(_, table)| super::vector_reads::files_with_vectors(table)).sum();
    if vectors == 0 {
        return run(tables, sql).await;
    }
    let owned: Vec<(String, DeltaTable)> = tables.iter().map(|(name, table)| ((*name).to_owned(), (*table).clone())).collect();
    let sql = sql.to_owned();
    super::vector_reads::with_room_for_vectors(vectors, move || async move {
        let tables: Vec<(&str, &DeltaTable)> = owned.iter().map(|(name, table)| (name.as_str(), table)).collect();
        run(&tables, &sql).await
    })
    .await
}

async fn run(tables: &[(&str, &DeltaTable)], sql: &str) -> Result<Vec<RecordBatch>, DeltaError> {
    let ctx = SessionContext::new();
    for (name, table) in tables {
        let location = table.table_url().to_string();
        table.update_datafusion_session(&ctx.state()).map_err(|e| DeltaError::new(&location, e))?;
        let provider = table.table_provider().await.map_err(|e| DeltaError::new(&location, e))?;
        ctx.register_table(*name, provider).map_err(|e| DeltaError::new(&location, e))?;
    }
    let location = tables.iter().map(|(_, t)| t.table_url().to_string()).collect::<Vec<_>>().join(", ");
    let fail = |e: deltalake::datafusion::error::DataFusionError| DeltaError::new(&location, QueryFailed { sql: sql.to_owned(), cause: e });
    let frame = ctx.sql(sql).await.map_err(fail)?;
    frame.collect().await.map_err(fail)
}

/// Runs `sql` over `rows` (all of `schema`), registered as table `name`: the same SQL over
/// rows already read (a [`super::tail::Tail`]'s).
pub async fn query_rows(name: &str, schema: arrow::datatypes::SchemaRef, rows: Vec<RecordBatch>, sql: &str) -> Result<Vec<RecordBatch>, DeltaError> {
    let fail = |e: deltalake::datafusion::error::DataFusionError| DeltaError::new(name, QueryFailed { sql: sql.to_owned(), cause: e });
    let ctx = SessionContext::new();
    let table = deltalake::datafusion::datasource::MemTable::try_new(schema, vec![rows]).map_err(fail)?;
    ctx.register_table(name, std::sync::Arc::new(table)).map_err(fail)?;
    ctx.sql(sql).await.map_err(fail)?.collect().await.map_err(fail)
}

/// A SQL query over Delta tables failed.
#[derive(Debug, thiserror::Error)]
#[error("{cause} (in `{sql}`)")]
pub struct QueryFailed {
    /// The query.
    pub sql: String,
    /// Why.
    #[source]
    pub cause: deltalake::datafusion::error::DataFusionError,
}

/// `"name"`: a column name quoted for SQL (case kept).
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'`: a string literal.
pub fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Column `index` of a query result as plain UTF-8 text (DataFusion may return string views).
pub fn text_column(batch: &RecordBatch, index: usize) -> Result<arrow::array::StringArray, arrow::error::ArrowError> {
    let array = arrow::compute::cast(batch.column(index), &arrow::datatypes::DataType::Utf8)?;
    Ok(arrow::array::AsArray::as_string::<i32>(&array).clone())
}
