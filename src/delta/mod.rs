//! Delta Lake plumbing shared by the sinks. The table writers arrive with the bronze sink.

pub mod location;
