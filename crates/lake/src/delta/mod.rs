//! Delta Lake plumbing shared by the sinks: table locations and their object-store settings
//! ([`location`], [`storage`]), and appends made idempotent by `txn` actions ([`table`]).

pub mod appender;
pub mod copy;
pub mod deletion_vector;
pub mod error;
pub mod files;
pub mod location;
pub mod query;
pub mod storage;
pub mod table;
pub mod tail;
pub mod vector_reads;
pub mod evolve;
