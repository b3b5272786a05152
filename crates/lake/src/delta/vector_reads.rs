//! Reading tables whose files carry deletion vectors without running out of blocking threads.
//!
//! delta-rs 1.1's scan starts one blocking task per file with a deletion vector, all at once,
//! and each task waits for an engine read that itself needs a blocking thread of the same
//! runtime when the table is on a local disk (`object_store`'s local reads run on the blocking
//! pool). Once the files with vectors outnumber the pool (512 threads by default), every
//! blocking thread waits on a read that no thread is left to run, and the scan never ends
//! (delta-io/delta-rs#4657). A silver table kept by deletion vectors passes that count after
//! some hundreds of steps: `bench backlog` hung there counting a 4M-row silver table of 798
//! such files.
//!
//! [`with_room_for_vectors`] runs such a read on a runtime of its own whose blocking pool holds
//! every vector task with room to spare for the reads they wait on. A table without vectors is
//! read on the caller's runtime, as before.
//!
//! ```no_run
//! # async fn example(table: deltalake::DeltaTable) -> Result<(), mssql_cdc_lake::delta::error::DeltaError> {
//! use mssql_cdc_lake::delta::vector_reads::{files_with_vectors, with_room_for_vectors};
//! let vectors = files_with_vectors(&table);
//! let rows = with_room_for_vectors(vectors, move || async move {
//!     mssql_cdc_lake::delta::query::query(&[("t", &table)], "SELECT COUNT(*) FROM t").await
//! })
//! .await?;
//! # Ok(()) }
//! ```

use std::future::Future;

use deltalake::DeltaTable;

use super::error::DeltaError;

/// Blocking threads left free beside the vector tasks, for the reads they wait on and for the
/// scan's other blocking work.
const SPARE_BLOCKING_THREADS: usize = 64;

/// Worker threads of the runtime a read with vectors runs on.
const WORKER_THREADS: usize = 2;

/// Files of `table`'s current snapshot that carry a deletion vector (0 without a snapshot).
pub fn files_with_vectors(table: &DeltaTable) -> usize {
    table.snapshot().map_or(0, |snapshot| snapshot.log_data().iter().filter(|file| file.deletion_vector_descriptor().is_some()).count())
}

/// Runs the future `read` makes: on the caller's runtime when `vectors` is 0, else on a
/// runtime of its own, in a thread of its own, whose blocking pool has room for `vectors`
/// tasks and [`SPARE_BLOCKING_THREADS`] more. `read` must own what it reads (the tables are
/// cheap to clone).
pub async fn with_room_for_vectors<T, F, Fut>(vectors: usize, read: F) -> Result<T, DeltaError>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, DeltaError>>,
{
    if vectors == 0 {
        return read().await;
    }
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("delta-vector-read".into())
        .spawn(move || {
            let outcome = match tokio::runtime::Builder::new_multi_thread().worker_threads(WORKER_THREADS).max_blocking_threads(vectors + SPARE_BLOCKING_THREADS).enable_all().build() {
                Ok(runtime) => runtime.block_on(read()),
                Err(error) => Err(DeltaError::new("(a runtime for a read with deletion vectors)", error)),
            };
            // The caller may have gone (its task dropped): nothing waits for the result then.
            let _ = sender.send(outcome);
        })
        .map_err(|error| DeltaError::new("(a thread for a read with deletion vectors)", error))?;
    receiver.await.map_err(|_| DeltaError::new("(a read with deletion vectors)", "its thread ended without a result (a panic)"))?
}
