//! A copy of a source table to seed a stream from (`mssql-cdc seed --from`): a Delta table at
//! any supported location, or a local directory of Parquet files, read with DataFusion.
//!
//! Every read is `SELECT <columns> FROM copy ORDER BY <order> NULLS FIRST`: with the key first
//! and every other column after it, a total order, so a resumed seed skips exactly the rows it
//! published before. The identity says what was read (a Delta version; the Parquet files'
//! names, sizes and modification times, digested), so a resumed seed can refuse a copy that
//! changed under it. The sort runs in memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::AsArray;
use arrow::datatypes::{Int64Type, SchemaRef};
use deltalake::datafusion::execution::SendableRecordBatchStream;
use deltalake::datafusion::prelude::{ParquetReadOptions, SessionContext};

use super::query::ident;
use super::storage::Storage;
use super::table::{self, DeltaError};

/// An opened copy.
pub struct Copy {
    location: String,
    identity: String,
    schema: SchemaRef,
    rows: Option<u64>,
    ctx: SessionContext,
}

impl Copy {
    /// Opens the Delta table at `location` (its newest version), or else the local directory
    /// of `*.parquet` files there.
    pub async fn open(location: &str, storage: &Storage) -> Result<Self, DeltaError> {
        let fail = |e: deltalake::datafusion::error::DataFusionError| DeltaError::new(location, e);
        let ctx = SessionContext::new();
        let identity = match table::open(location, storage).await? {
            Some(delta) => {
                delta.update_datafusion_session(&ctx.state()).map_err(|e| DeltaError::new(location, e))?;
                let provider = delta.table_provider().await.map_err(|e| DeltaError::new(location, e))?;
                ctx.register_table("copy", provider).map_err(fail)?;
                format!("delta version {}", delta.version().map_or(-1, |v| v as i64))
            }
            None => {
                let directory = PathBuf::from(location.strip_prefix("file://").unwrap_or(location));
                let files = parquet_files(&directory).map_err(|e| DeltaError::new(location, NotACopy(format!("not a Delta table, and its Parquet files cannot be listed: {e}"))))?;
                if files.is_empty() {
                    return Err(DeltaError::new(location, NotACopy("neither a Delta table nor a directory holding *.parquet files".into())));
                }
                let path = format!("{}/", directory.display().to_string().trim_end_matches('/'));
                ctx.register_parquet("copy", &path, ParquetReadOptions::default()).await.map_err(fail)?;
                digest(&directory, &files)
            }
        };
        let frame = ctx.table("copy").await.map_err(fail)?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let counted = ctx.sql("SELECT COUNT(*) FROM copy").await.map_err(fail)?.collect().await.map_err(fail)?;
        let rows = counted.first().filter(|b| b.num_rows() > 0).and_then(|b| b.column(0).as_primitive_opt::<Int64Type>().map(|c| c.value(0).max(0) as u64));
        Ok(Self { location: location.to_owned(), identity, schema, rows, ctx })
    }

    /// Where it is.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// What is read: `delta version <n>`, or `parquet <n> files, <bytes> bytes, digest <hex>`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Its columns.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Its rows.
    pub fn rows(&self) -> Option<u64> {
        self.rows
    }

    /// Its `columns` sorted by `order` (ascending, NULLs first), as a stream of batches.
    pub async fn read(&self, columns: &[String], order: &[String]) -> Result<SendableRecordBatchStream, DeltaError> {
        let select: Vec<String> = columns.iter().map(|c| ident(c)).collect();
        let order: Vec<String> = order.iter().map(|c| format!("{} ASC NULLS FIRST", ident(c))).collect();
        let mut sql = format!("SELECT {} FROM copy", select.join(", "));
        if !order.is_empty() {
            sql.push_str(&format!(" ORDER BY {}", order.join(", ")));
        }
        let fail = |e: deltalake::datafusion::error::DataFusionError| DeltaError::new(&self.location, super::query::QueryFailed { sql: sql.clone(), cause: e });
        self.ctx.sql(&sql).await.map_err(fail)?.execute_stream().await.map_err(fail)
    }
}

/// The location is not a copy this reads.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NotACopy(String);

/// The `*.parquet` files under `directory`, as paths relative to it, sorted.
fn parquet_files(directory: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut pending = vec![directory.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                found.push(path.strip_prefix(directory).unwrap_or(&path).to_path_buf());
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The Parquet files' identity: count, total bytes, and an FNV-1a digest of each file's
/// relative path, size and modification time.
fn digest(directory: &Path, files: &[PathBuf]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut bytes = 0u64;
    for file in files {
        let meta = std::fs::metadata(directory.join(file)).ok();
        let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
        let modified = meta.and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
        bytes += size;
        for byte in format!("{}\0{size}\0{modified}\0", file.display()).bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("parquet {} files, {bytes} bytes, digest {hash:016x}", files.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The identity changes when a file is added, and not when nothing changed.
    #[test]
    fn the_parquet_identity_follows_the_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("part")).unwrap();
        std::fs::write(dir.path().join("part/a.parquet"), b"x").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"y").unwrap();
        let files = parquet_files(dir.path()).unwrap();
        assert_eq!(files, vec![PathBuf::from("part/a.parquet")]);
        let first = digest(dir.path(), &files);
        assert_eq!(first, digest(dir.path(), &parquet_files(dir.path()).unwrap()));
        assert!(first.starts_with("parquet 1 files, 1 bytes"), "{first}");
        std::fs::write(dir.path().join("b.parquet"), b"zz").unwrap();
        assert_ne!(first, digest(dir.path(), &parquet_files(dir.path()).unwrap()));
    }
}
