//! Delta Lake plumbing shared by the sinks: table locations, and appends made idempotent by
//! `txn` actions ([`table`]).

pub mod location;
pub mod table;
