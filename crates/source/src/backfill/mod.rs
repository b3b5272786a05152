//! Chunked snapshots (`snapshot = "chunked"`): the stream starts at the snapshot's LSN S at
//! once, and the table is read beside it in chunks, a wave at a time.
//!
//! 1. **Open**: S is the server's maximum LSN; a `snapshot_open` batch (mode `chunked`) is
//!    published and the stream goes on from S.
//! 2. **Plan** ([`plan`]): chunks of about `chunk_rows` cut on the key, published as a
//!    `snapshot_plan` batch before any chunk is read; the snapshot's state on every later
//!    control record names the plan's offset, so the plan never changes while it is open.
//! 3. **Waves**: when the stream has caught up (or, while it is behind, once it has had as
//!    long as the last wave took), a wave of whole rounds of `num_partitions`
//!    chunks is stamped with the server's maximum LSN W (at or after S) and read, each chunk on
//!    its own connection; each chunk is then published as one batch of operation-0 rows with
//!    `_start_lsn = _seqval = W` and `_snapshot = S`, its control record carrying a
//!    `snapshot_chunk` event. Chunks are published in plan order, so the chunks done are a
//!    prefix of the plan.
//! 4. **Complete**: after the last chunk, the `bootstrap` (or `resnapshot`) event: downstream
//!    removes the keys no chunk held and no change after S wrote.
//!
//! Every change at or before W committed before the wave's reads began, so a chunk row holds
//! it; a change after W is published after the chunk (the stream goes on from where it was,
//! at or before W), and, newer by its LSN, wins over the row. So applying the log in order by
//! LSN ends at the table's state, and a crash anywhere resumes from the last control record:
//! a chunk whose control record was not published is read again in a new wave, and its
//! earlier records, named by no control record, are never read by a sink.

pub mod config;
pub mod plan;
