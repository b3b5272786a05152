//! The size of the files silver writes: its table's `delta.targetFileSize`.
//!
//! A copy-on-write MERGE (and the rebuild after a snapshot, and `optimize`) rewrites whole
//! files, and delta-rs's writer holds a file's encoded bytes in memory until the file reaches
//! the table's target size. At delta-rs's default of 100 MiB a silver table of a million
//! rows is one or two files, so every MERGE that touches them rewrites the table through
//! buffers of 100 MiB (docs/adr/0017). Silver keeps the property at its connector's
//! `target_file_size_mb` instead. Appends by deletion vectors (`super::mark`) go through
//! delta-rs's `RecordBatchWriter`, which does not read the property.

use deltalake::DeltaTable;

use super::error::SilverError;

/// The table property delta-rs's writes, MERGEs and `optimize` size their files by.
pub const TARGET_FILE_SIZE: &str = "delta.targetFileSize";

/// `table` with `delta.targetFileSize` at `bytes`: unchanged when it already is, else after
/// one commit setting it (the property's new value applies to the files written after it;
/// files already written keep their size until they are rewritten or compacted).
pub async fn with_target_file_size(table: DeltaTable, bytes: u64, location: &str) -> Result<DeltaTable, SilverError> {
    let current = target_file_size(&table, location)?;
    if current == Some(bytes) {
        return Ok(table);
    }
    tracing::info!(table = location, from = ?current, to = bytes, "silver: setting the table's delta.targetFileSize (target_file_size_mb)");
    table
        .set_tbl_properties()
        .with_properties([(TARGET_FILE_SIZE.to_owned(), bytes.to_string())].into_iter().collect())
        .await
        .map_err(|e| SilverError::delta_at(location, e))
}

/// The table's `delta.targetFileSize` as delta-rs reads it, bytes; `None` when unset.
fn target_file_size(table: &DeltaTable, location: &str) -> Result<Option<u64>, SilverError> {
    let snapshot = table.snapshot().map_err(|e| SilverError::delta_at(location, e))?;
    Ok(snapshot.table_config().target_file_size.map(|size| size.get()))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use deltalake::kernel::engine::arrow_conversion::TryIntoKernel;

    use super::*;

    /// The property is set once: a table that has it at the wanted size gets no commit, one
    /// that has another size gets one commit changing it, and delta-rs then sizes files by it.
    #[tokio::test]
    async fn the_property_is_set_once_and_read_back_by_delta_rs() {
        let dir = tempfile::tempdir().unwrap();
        let location = dir.path().join("silver").to_string_lossy().into_owned();
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let url = crate::delta::table::table_url(&location).unwrap();
        let fields: Vec<deltalake::kernel::StructField> = schema.fields().iter().map(|f| f.as_ref().try_into_kernel().unwrap()).collect();
        let table = DeltaTable::try_from_url(url).await.unwrap().create().with_columns(fields).await.unwrap();
        let table = table.write(vec![RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap()]).await.unwrap();
        let version = |table: &DeltaTable| table.version().unwrap();
        let before = version(&table);

        let table = with_target_file_size(table, 32 << 20, &location).await.unwrap();
        assert_eq!(version(&table), before + 1, "one commit sets it");
        let size = |table: &DeltaTable| target_file_size(table, &location).unwrap();
        assert_eq!(size(&table), Some(32 << 20));

        let table = with_target_file_size(table, 32 << 20, &location).await.unwrap();
        assert_eq!(version(&table), before + 1, "no commit when it is already set");

        let table = with_target_file_size(table, 8 << 20, &location).await.unwrap();
        assert_eq!((version(&table), size(&table)), (before + 2, Some(8 << 20)), "a new size is one more commit");
    }
}
