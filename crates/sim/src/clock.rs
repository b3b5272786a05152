//! The simulator's clock and the server's time zone.
//!
//! SQL Server stores CDC commit times (`cdc.lsn_time_mapping`) in the server's local time,
//! without an offset. The simulator keeps time in UTC and converts with a configured zone,
//! named as SQL Server names zones (Windows ids such as `W. Europe Standard Time`) or by an
//! IANA name.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

pub use mssql_cdc_types::timezone::{windows_zone_names, ServerZone};

/// The simulator's clock: real time plus an adjustable offset, or frozen for tests.
#[derive(Debug, Default)]
pub struct SimClock {
    state: Mutex<ClockState>,
}

#[derive(Debug, Default)]
struct ClockState {
    offset: chrono::Duration,
    frozen: Option<DateTime<Utc>>,
}

impl SimClock {
    /// The current UTC instant.
    pub fn now(&self) -> DateTime<Utc> {
        let state = crate::lock(&self.state);
        state.frozen.unwrap_or_else(|| Utc::now() + state.offset)
    }

    /// Sets the time: frozen at `at` when `freeze`, else running from `at`.
    pub fn set(&self, at: DateTime<Utc>, freeze: bool) {
        let mut state = crate::lock(&self.state);
        if freeze {
            state.frozen = Some(at);
        } else {
            state.frozen = None;
            state.offset = at - Utc::now();
        }
    }

    /// Moves the clock forward (or back, with a negative duration).
    pub fn advance(&self, by: chrono::Duration) {
        let mut state = crate::lock(&self.state);
        match &mut state.frozen {
            Some(at) => *at += by,
            None => state.offset += by,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{NaiveDateTime, TimeZone};

    use super::*;

    #[test]
    fn windows_names_map_to_rules_with_dst() {
        let zone = ServerZone::parse("w. europe standard time").unwrap();
        assert_eq!(zone.windows_id, "W. Europe Standard Time");
        let winter = Utc.with_ymd_and_hms(2026, 1, 15, 12, 0, 0).unwrap();
        let summer = Utc.with_ymd_and_hms(2026, 7, 15, 12, 0, 0).unwrap();
        assert_eq!(zone.local(winter).to_string(), "2026-01-15 13:00:00");
        assert_eq!(zone.local(summer).to_string(), "2026-07-15 14:00:00");
        assert_eq!(ServerZone::parse("Europe/Berlin").unwrap().windows_id, "W. Europe Standard Time");
        assert!(ServerZone::parse("Mars/Olympus").is_none());
    }

    #[test]
    fn at_time_zone_resolves_gaps_and_overlaps_like_sql_server() {
        // Microsoft's AT TIME ZONE examples for Central European Standard Time, 2015.
        let zone = ServerZone::parse("Central European Standard Time").unwrap();
        let gap = NaiveDateTime::parse_from_str("2015-03-29 02:01:00", "%Y-%m-%d %H:%M:%S").unwrap();
        assert_eq!(zone.attach(gap).to_string(), "2015-03-29 03:01:00 +02:00");
        let overlap = NaiveDateTime::parse_from_str("2015-10-25 02:00:00", "%Y-%m-%d %H:%M:%S").unwrap();
        assert_eq!(zone.attach(overlap).offset().local_minus_utc(), 7200);
    }

    #[test]
    fn frozen_clock_advances_only_when_told() {
        let clock = SimClock::default();
        let at = Utc.with_ymd_and_hms(2026, 3, 29, 0, 30, 0).unwrap();
        clock.set(at, true);
        assert_eq!(clock.now(), at);
        clock.advance(chrono::Duration::minutes(90));
        assert_eq!(clock.now(), at + chrono::Duration::minutes(90));
    }
}

