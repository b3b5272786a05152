//! The simulator's clock and the server's time zone.
//!
//! SQL Server stores CDC commit times (`cdc.lsn_time_mapping`) in the server's local time,
//! without an offset. The simulator keeps time in UTC and converts with a configured zone,
//! named as SQL Server names zones (Windows ids such as `W. Europe Standard Time`) or by an
//! IANA name.

use std::sync::Mutex;

use chrono::{DateTime, FixedOffset, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

/// Windows zone ids SQL Server reports, with the IANA zone of CLDR's `windowsZones`
/// (territory 001).
const WINDOWS_ZONES: &[(&str, &str)] = &[
    ("UTC", "Etc/UTC"),
    ("GMT Standard Time", "Europe/London"),
    ("Greenwich Standard Time", "Atlantic/Reykjavik"),
    ("W. Europe Standard Time", "Europe/Berlin"),
    ("Central Europe Standard Time", "Europe/Budapest"),
    ("Central European Standard Time", "Europe/Warsaw"),
    ("Romance Standard Time", "Europe/Paris"),
    ("FLE Standard Time", "Europe/Kiev"),
    ("GTB Standard Time", "Europe/Bucharest"),
    ("Russian Standard Time", "Europe/Moscow"),
    ("E. South America Standard Time", "America/Sao_Paulo"),
    ("Eastern Standard Time", "America/New_York"),
    ("Central Standard Time", "America/Chicago"),
    ("Mountain Standard Time", "America/Denver"),
    ("Pacific Standard Time", "America/Los_Angeles"),
    ("AUS Eastern Standard Time", "Australia/Sydney"),
    ("Tokyo Standard Time", "Asia/Tokyo"),
    ("India Standard Time", "Asia/Calcutta"),
    ("China Standard Time", "Asia/Shanghai"),
    ("Singapore Standard Time", "Asia/Singapore"),
];

/// The server's time zone: its Windows id (what `CURRENT_TIMEZONE_ID()` returns) and rules.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerZone {
    /// The Windows id.
    pub windows_id: String,
    /// The rules.
    pub tz: Tz,
}

impl ServerZone {
    /// UTC.
    pub fn utc() -> Self {
        Self { windows_id: "UTC".to_owned(), tz: Tz::UTC }
    }

    /// A zone by Windows id (case-insensitive, as `AT TIME ZONE` matches) or IANA name.
    pub fn parse(name: &str) -> Option<Self> {
        if let Some((windows, iana)) = WINDOWS_ZONES.iter().find(|(windows, _)| windows.eq_ignore_ascii_case(name)) {
            return Some(Self { windows_id: (*windows).to_owned(), tz: iana.parse().ok()? });
        }
        let tz: Tz = name.parse().ok()?;
        let windows_id = WINDOWS_ZONES
            .iter()
            .find(|(_, iana)| *iana == tz.name())
            .map_or_else(|| tz.name().to_owned(), |(windows, _)| (*windows).to_owned());
        Some(Self { windows_id, tz })
    }

    /// Local wall-clock time at a UTC instant.
    pub fn local(&self, utc: DateTime<Utc>) -> NaiveDateTime {
        utc.with_timezone(&self.tz).naive_local()
    }

    /// The instant with its local offset (`SYSDATETIMEOFFSET()`).
    pub fn with_offset(&self, utc: DateTime<Utc>) -> DateTime<FixedOffset> {
        let offset = self.tz.offset_from_utc_datetime(&utc.naive_utc()).fix();
        utc.with_timezone(&offset)
    }

    /// `local AT TIME ZONE zone`: a local time given an offset; in a spring-forward gap the
    /// offset after the change, in a fall-back overlap the offset before it (as SQL Server).
    pub fn attach(&self, local: NaiveDateTime) -> DateTime<FixedOffset> {
        match self.tz.from_local_datetime(&local) {
            chrono::LocalResult::Single(dt) => dt.fixed_offset(),
            chrono::LocalResult::Ambiguous(earlier, _) => earlier.fixed_offset(),
            chrono::LocalResult::None => {
                // Inside the gap: shift forward by the gap and take the later offset.
                let later = self.tz.from_local_datetime(&(local + chrono::Duration::hours(1)));
                match later {
                    chrono::LocalResult::Single(dt) | chrono::LocalResult::Ambiguous(dt, _) => dt.fixed_offset(),
                    chrono::LocalResult::None => local.and_utc().fixed_offset(),
                }
            }
        }
    }
}

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
        let state = crate::sim::lock(&self.state);
        state.frozen.unwrap_or_else(|| Utc::now() + state.offset)
    }

    /// Sets the time: frozen at `at` when `freeze`, else running from `at`.
    pub fn set(&self, at: DateTime<Utc>, freeze: bool) {
        let mut state = crate::sim::lock(&self.state);
        if freeze {
            state.frozen = Some(at);
        } else {
            state.frozen = None;
            state.offset = at - Utc::now();
        }
    }

    /// Moves the clock forward (or back, with a negative duration).
    pub fn advance(&self, by: chrono::Duration) {
        let mut state = crate::sim::lock(&self.state);
        match &mut state.frozen {
            Some(at) => *at += by,
            None => state.offset += by,
        }
    }
}

#[cfg(test)]
mod tests {
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

/// The Windows zone ids the simulator knows (`sys.time_zone_info`).
pub fn windows_zone_names() -> Vec<&'static str> {
    WINDOWS_ZONES.iter().map(|(windows, _)| *windows).collect()
}
