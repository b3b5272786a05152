//! The `[backfill]` section of an `mssql-source` connector: how a chunked snapshot
//! (`snapshot = "chunked"`) is planned, read and paced.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use mssql_cdc_core::config::problem::Problems;

/// Options of `[backfill]`. Only read with `snapshot = "chunked"`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct BackfillOptions {
    /// Rows per chunk when the plan is made (about: an integer key is cut by value ranges
    /// counted on the server, other keys every this many keys; a key value is never split).
    /// Fixed for the snapshot once planned. Default 100000.
    pub chunk_rows: u64,
    /// Chunks read at a time, each on its own SQL Server connection. A wave holds whole rounds
    /// of this many chunks. Default 2.
    pub num_partitions: u32,
    /// The wave length to aim for, seconds: after the first round, a wave takes as many rounds
    /// as fit at the last wave's pace. The stream publishes nothing while a wave is read, so
    /// this bounds the lag a wave adds. `0`: one round per wave. Default 60.
    pub target_wave_seconds: f64,
    /// Waves one run of the stage reads at most; then it only streams until restarted.
    /// Default: no limit.
    pub max_waves: Option<u64>,
    /// Seconds of one run after which no wave starts; then it only streams until restarted.
    /// Default: no limit.
    pub max_seconds: Option<f64>,
    /// No wave starts while the stream's retention headroom (hours until CDC cleanup may purge
    /// the oldest change not yet published: the whole retention when the stream has caught
    /// up), less the wave's expected length, is under this many hours (state
    /// `waiting_headroom`); while the retention cannot be read, waves wait too
    /// (`waiting_metrics`). Default: no pause.
    pub min_headroom_hours: Option<f64>,
}

impl Default for BackfillOptions {
    fn default() -> Self {
        Self { chunk_rows: 100_000, num_partitions: 2, target_wave_seconds: 60.0, max_waves: None, max_seconds: None, min_headroom_hours: None }
    }
}

/// Validated `[backfill]` settings.
#[derive(Clone, Debug, PartialEq)]
pub struct BackfillSettings {
    /// Rows per chunk (positive).
    pub chunk_rows: u64,
    /// Chunks read at a time (1 to 64).
    pub num_partitions: usize,
    /// Wave length to aim for.
    pub target_wave: Duration,
    /// Waves per run; `None`: no limit.
    pub max_waves: Option<u64>,
    /// Length of a run after which no wave starts; `None`: no limit.
    pub max_duration: Option<Duration>,
    /// Retention headroom to keep, hours; `None`: never pause.
    pub min_headroom_hours: Option<f64>,
}

/// Most chunks read at a time (connections per stream).
pub const MAX_PARTITIONS: u32 = 64;

impl BackfillOptions {
    /// Validates the section, naming each problem under `backfill.`.
    pub fn validate(&self, problems: &mut Problems) -> Option<BackfillSettings> {
        let before = problems.len();
        if self.chunk_rows == 0 {
            problems.invalid("backfill.chunk_rows", "zero", "a positive number of rows, e.g. 100000");
        }
        if self.num_partitions == 0 || self.num_partitions > MAX_PARTITIONS {
            problems.invalid("backfill.num_partitions", "out of range", "1 to 64 chunks read at a time (one SQL Server connection each)");
        }
        if !self.target_wave_seconds.is_finite() || !(0.0..=86_400.0).contains(&self.target_wave_seconds) {
            problems.invalid("backfill.target_wave_seconds", "out of range", "0 to 86400 seconds (0: one round of num_partitions chunks per wave)");
        }
        if self.max_waves == Some(0) {
            problems.invalid("backfill.max_waves", "zero", "a positive number of waves, or omit it for no limit");
        }
        if let Some(seconds) = self.max_seconds
            && (!seconds.is_finite() || seconds <= 0.0 || seconds > 31_536_000.0)
        {
            problems.invalid("backfill.max_seconds", "out of range", "a positive number of seconds up to a year, or omit it for no limit");
        }
        if let Some(hours) = self.min_headroom_hours
            && (!hours.is_finite() || !(0.0..=8_760.0).contains(&hours))
        {
            problems.invalid("backfill.min_headroom_hours", "out of range", "0 to 8760 hours, below the CDC retention (the capture job's retention, 3 days by default)");
        }
        (problems.len() == before).then(|| BackfillSettings {
            chunk_rows: self.chunk_rows,
            num_partitions: self.num_partitions as usize,
            target_wave: Duration::from_secs_f64(self.target_wave_seconds),
            max_waves: self.max_waves,
            max_duration: self.max_seconds.map(Duration::from_secs_f64),
            min_headroom_hours: self.min_headroom_hours,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every problem of the section is reported at once, under its key path.
    #[test]
    fn every_problem_is_named_under_backfill() {
        let bad = BackfillOptions { chunk_rows: 0, num_partitions: 65, target_wave_seconds: -1.0, max_waves: Some(0), max_seconds: Some(0.0), min_headroom_hours: Some(f64::NAN) };
        let mut problems = Problems::under("");
        assert!(bad.validate(&mut problems).is_none());
        let keys: Vec<String> = problems.into_vec().into_iter().map(|p| p.key).collect();
        assert_eq!(keys, ["backfill.chunk_rows", "backfill.num_partitions", "backfill.target_wave_seconds", "backfill.max_waves", "backfill.max_seconds", "backfill.min_headroom_hours"]);
        let settings = BackfillOptions::default().validate(&mut Problems::under("")).unwrap();
        assert_eq!((settings.chunk_rows, settings.num_partitions, settings.target_wave), (100_000, 2, Duration::from_secs(60)));
        assert_eq!((settings.max_waves, settings.max_duration, settings.min_headroom_hours), (None, None, None));
    }
}
