//! Reading tables whose files carry deletion vectors without running out of blocking threads.
//!
//! delta-rs 1.1's scan starts one blocking task per file with a deletion vector, all at once,
//! and each task waits for an engine read that itself needs a blocking thread of the same
//! runtime: on a local disk `object_store` reads there, and an object store's HTTP client
//! looks up host names there when it opens connections. Once the files with vectors
//! outnumber the pool (512 threads by default), every blocking thread waits on a read that no
//! thread is left to run, and the scan never ends
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
//! let _version = with_room_for_vectors(vectors, move || async move {
//!     // What reads through delta-rs's scan goes here (`query` does this itself).
//!     Ok(table.version())
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

/// Files of `table`'s current snapshot that carry a deletion vector (0 without a snapshot).
pub fn files_with_vectors(table: &DeltaTable) -> usize {
    table.snapshot().map_or(0, |snapshot| snapshot.log_data().iter().filter(|file| file.deletion_vector_descriptor().is_some()).count())
}

/// Most blocking threads a read with vectors may start; a table needing more is refused with
/// advice to compact it (threads are an operating-system resource, not free).
pub const MAX_BLOCKING_THREADS: usize = 4096;

/// Runs the future `read` makes: on the caller's runtime when `vectors` is 0, else on a
/// runtime of its own, in a thread of its own, whose blocking pool has room for `vectors`
/// tasks and [`SPARE_BLOCKING_THREADS`] more (refused past [`MAX_BLOCKING_THREADS`]). `read`
/// must own what it reads (the tables are cheap to clone). Dropping the returned future does
/// not stop `read`: it runs to its end and its result is dropped.
pub async fn with_room_for_vectors<T, F, Fut>(vectors: usize, read: F) -> Result<T, DeltaError>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, DeltaError>>,
{
    if vectors == 0 {
        return read().await;
    }
    let threads = vectors + SPARE_BLOCKING_THREADS;
    if threads > MAX_BLOCKING_THREADS {
        return Err(DeltaError::new(
            "(a read with deletion vectors)",
            format!("{vectors} files carry a deletion vector, and delta-rs reads each on a blocking thread of its own at once (delta-io/delta-rs#4657): more than {MAX_BLOCKING_THREADS} threads; compact the table first (`mssql-cdc optimize`)"),
        ));
    }
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("delta-vector-read".into())
        .spawn(move || {
            match tokio::runtime::Builder::new_multi_thread().worker_threads(workers).max_blocking_threads(threads).enable_all().build() {
                Ok(runtime) => {
                    let outcome = runtime.block_on(read());
                    // The caller may have gone (its task dropped): nothing waits for the result then.
                    let _ = sender.send(outcome);
                    // Idle blocking threads end in the background.
                    runtime.shutdown_background();
                }
                Err(error) => {
                    let _ = sender.send(Err(DeltaError::new("(a runtime for a read with deletion vectors)", error)));
                }
            }
        })
        .map_err(|error| DeltaError::new("(a thread for a read with deletion vectors)", error))?;
    receiver.await.map_err(|_| DeltaError::new("(a read with deletion vectors)", "its thread ended without a result (a panic)"))?
}
