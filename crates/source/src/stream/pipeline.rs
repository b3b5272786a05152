//! Overlapping batches: while one batch's records are acknowledged and its control record is
//! written, the next batch is planned and read.
//!
//! A batch that leaves commits behind it on the server (not caught up), carries no event and is
//! read while no snapshot is open is *handed off* once its rows are queued: a blocking task waits for the set's
//! acknowledgements, makes the control record from where they landed and writes it
//! ([`Publisher::settle_in_background`](crate::publish::Publisher::settle_in_background)). The
//! stream's position moves past the batch at once, and the server state read after its rows
//! stands for the next batch's (no second query). What keeps the log's contract:
//!
//! - one batch in flight at most: the next batch's control record is written only after the
//!   one in flight has been ([`Stream::settle`], called once the next batch's rows are
//!   queued), so control records keep the batches' order;
//! - the next batch's records are queued after every record of the one in flight (one
//!   idempotent producer: they land after them in every partition), and in a set of their own,
//!   so each control record names exactly its batch's records;
//! - a batch in flight that fails (a record not delivered, an acknowledgement count that does
//!   not match its rows) stops the stream with that error, like a batch waited for in line: the
//!   restarted stream resumes from the last control record written, and what was queued after
//!   it is orphaned (sinks read only named records).
//!
//! Everything else (snapshots, events, the caught-up batch, a chunked snapshot's waves, stop
//! and reconnect) settles the batch in flight first, so it runs as before.

use std::time::Instant;

use super::{Position, Stream};
use crate::error::SourceError;
use crate::publish::InFlight;
use crate::reader::ServerState;

/// The batch in flight and the server state the next batch starts from.
#[derive(Default)]
pub(super) struct Pipeline {
    in_flight: Option<Pending>,
    /// The server state read after the in-flight batch's rows.
    next_state: Option<ServerState>,
}

struct Pending {
    handle: InFlight,
    started: Instant,
}

impl Pipeline {
    /// Keeps a handed-off batch (started at `started`) and the state read after its rows.
    pub(super) fn hand_off(&mut self, handle: InFlight, started: Instant, state_after: Option<ServerState>) {
        debug_assert!(self.in_flight.is_none(), "one batch in flight at most");
        self.in_flight = Some(Pending { handle, started });
        self.next_state = state_after;
    }

    /// The state to start the next batch from, if the last batch left one (taken once).
    pub(super) fn take_state(&mut self) -> Option<ServerState> {
        self.next_state.take()
    }
}

impl Stream {
    /// Waits for the batch in flight, if any: once its control record is written the batch is
    /// logged and counted as published; its error otherwise.
    pub(super) async fn settle(&self, position: &mut Position) -> Result<(), SourceError> {
        if let Some(Pending { handle, started }) = position.pipeline.in_flight.take() {
            let record = handle.wait().await?;
            self.published(&record, started.elapsed());
        }
        Ok(())
    }

    /// [`Stream::settle`] for a position that may not be known yet.
    pub(super) async fn settle_any(&self, position: &mut Option<Position>) -> Result<(), SourceError> {
        match position.as_mut() {
            Some(position) => self.settle(position).await,
            None => Ok(()),
        }
    }

    /// [`Stream::settle`] where the stream stops anyway: a failure is logged, not returned.
    pub(super) async fn settle_before_stop(&self, position: &mut Option<Position>) {
        if let Err(error) = self.settle_any(position).await {
            tracing::warn!(connector = %self.connector_name, capture_instance = %self.wanted, error = %error, "the batch in flight was not published; the stream resumes before it");
        }
    }
}
