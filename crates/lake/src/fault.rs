//! Fault points for the crash tests. In a build with the `fault-injection` feature (the test
//! script's build), the process aborts at a point when the point's environment variable names
//! a batch it reaches; in any other build, shipped binaries included, a point compiles to
//! nothing and no variable is read.

/// A place between two commits where a crash must lose and duplicate nothing.
#[derive(Clone, Copy, Debug)]
pub enum Point {
    /// Bronze: after a batch's data commit, before its facts commit. Fires for the batch id
    /// `MSSQL_CDC_FAULT_ABORT_AFTER_DATA_COMMIT` names.
    AfterBronzeDataCommit,
    /// Silver: after a MERGE commit, before its control row. Fires for the first commit that
    /// reaches the batch id `MSSQL_CDC_FAULT_ABORT_AFTER_SILVER_COMMIT` names, or a later one.
    AfterSilverCommit,
    /// Silver: after the commit of a slice of a large batch, before the next slice (a batch
    /// larger than `max_rows_per_apply`). Fires for the batch id
    /// `MSSQL_CDC_FAULT_ABORT_AFTER_SILVER_SLICE` names, or a later one.
    AfterSilverSlice,
}

impl Point {
    /// The variable that arms the point.
    pub fn variable(self) -> &'static str {
        match self {
            Self::AfterBronzeDataCommit => "MSSQL_CDC_FAULT_ABORT_AFTER_DATA_COMMIT",
            Self::AfterSilverCommit => "MSSQL_CDC_FAULT_ABORT_AFTER_SILVER_COMMIT",
            Self::AfterSilverSlice => "MSSQL_CDC_FAULT_ABORT_AFTER_SILVER_SLICE",
        }
    }

    /// Whether the point fires at `batch_id` when armed with `armed`.
    pub fn fires(self, armed: i64, batch_id: i64) -> bool {
        match self {
            Self::AfterBronzeDataCommit => batch_id == armed,
            Self::AfterSilverCommit | Self::AfterSilverSlice => batch_id >= armed,
        }
    }
}

/// Aborts the process at `point` when it is armed for `batch_id` (feature `fault-injection`).
#[cfg(feature = "fault-injection")]
pub fn crash_point(point: Point, batch_id: i64) {
    let armed = std::env::var(point.variable()).ok().and_then(|value| value.parse::<i64>().ok());
    if armed.is_some_and(|armed| point.fires(armed, batch_id)) {
        tracing::error!(?point, batch_id, "fault injection: aborting");
        std::process::abort();
    }
}

/// Does nothing: this build has no fault points.
#[cfg(not(feature = "fault-injection"))]
pub fn crash_point(_point: Point, _batch_id: i64) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_fire_at_their_batches() {
        assert!(Point::AfterBronzeDataCommit.fires(3, 3));
        assert!(!Point::AfterBronzeDataCommit.fires(3, 4));
        assert!(Point::AfterSilverCommit.fires(5, 7));
        assert!(!Point::AfterSilverCommit.fires(5, 4));
    }
}
