//! SQL Server's time zones: Windows zone ids (what `CURRENT_TIMEZONE_ID()` and `AT TIME ZONE`
//! use) mapped to IANA rules, and the conversions between server-local and UTC times.
//!
//! Shared by the simulator (which keeps a server clock) and the source (which converts the
//! local commit times of `cdc.lsn_time_mapping` to UTC).

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

/// The Windows zone ids known here (the simulator's `sys.time_zone_info`).
pub fn windows_zone_names() -> Vec<&'static str> {
    WINDOWS_ZONES.iter().map(|(windows, _)| *windows).collect()
}
