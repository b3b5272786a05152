//! Small statistics the benchmarks report: commit-to-visible latencies and nearest-rank
//! percentiles.

use chrono::{DateTime, Utc};

/// Each commit's latency, ms: from its time to the first observation whose applied end covers
/// it. Returns (latencies, commits never seen applied).
pub fn latencies(commits: &[DateTime<Utc>], observations: &[(DateTime<Utc>, DateTime<Utc>)]) -> (Vec<f64>, usize) {
    let mut out = Vec::with_capacity(commits.len());
    let mut unseen = 0;
    for commit in commits {
        match observations.iter().find(|(_, applied)| applied >= commit) {
            Some((seen, _)) => out.push(((*seen - *commit).num_microseconds().unwrap_or(0) as f64 / 1000.0).max(0.0)),
            None => unseen += 1,
        }
    }
    (out, unseen)
}

/// The `q` quantile (nearest rank) of `values`; 0 when empty.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit's latency runs to the first read that covers it; a commit no read covers is
    /// counted, not dropped.
    #[test]
    fn latency_is_measured_to_the_first_covering_read() {
        let t = |ms: i64| DateTime::<Utc>::from_timestamp_millis(1_800_000_000_000 + ms).unwrap();
        let commits = [t(0), t(100), t(900)];
        let observations = [(t(50), t(-10)), (t(300), t(150)), (t(800), t(800))];
        let (found, unseen) = latencies(&commits, &observations);
        assert_eq!(found, vec![300.0, 200.0]);
        assert_eq!(unseen, 1);
    }

    /// Nearest-rank percentiles.
    #[test]
    fn percentiles_use_the_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
