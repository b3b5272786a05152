//! Converting `cdc.lsn_time_mapping`'s local commit times to UTC, per `source_time_zone`.
//!
//! With a named zone (configured, or `CURRENT_TIMEZONE_ID()` under `auto`), each commit gets
//! the offset in force at its own time. In the hour a fall-back repeats, a local time is
//! ambiguous: the earlier instant is taken unless it would go before the previous commit, so
//! commit times follow commit order. Without a zone name (`auto` on a server before 2022) the
//! server's current offset is applied to the whole batch, with a warning: exact only for zones
//! without daylight saving.

use chrono::{DateTime, FixedOffset, LocalResult, NaiveDateTime, TimeZone, Utc};

use mssql_cdc_types::timezone::ServerZone;

/// How local commit times become UTC.
#[derive(Clone, Debug, PartialEq)]
pub enum ZoneRule {
    /// A zone with its rules.
    Named(ServerZone),
    /// The server's offset now, for the whole batch (the fallback).
    CurrentOffset(FixedOffset),
}

impl ZoneRule {
    /// The UTC instant of `local`, not before `previous` where the zone allows a choice.
    pub fn to_utc(&self, local: NaiveDateTime, previous: Option<DateTime<Utc>>) -> DateTime<Utc> {
        match self {
            Self::CurrentOffset(offset) => offset.from_local_datetime(&local).single().map_or_else(|| local.and_utc(), |t| t.with_timezone(&Utc)),
            Self::Named(zone) => match zone.tz.from_local_datetime(&local) {
                LocalResult::Single(t) => t.with_timezone(&Utc),
                LocalResult::Ambiguous(earlier, later) => {
                    let earlier = earlier.with_timezone(&Utc);
                    if previous.is_some_and(|p| earlier < p) { later.with_timezone(&Utc) } else { earlier }
                }
                LocalResult::None => zone.attach(local).with_timezone(&Utc),
            },
        }
    }

    /// The server's local time at `utc` (how `cdc.lsn_time_mapping` would record it).
    pub fn to_local(&self, utc: DateTime<Utc>) -> NaiveDateTime {
        match self {
            Self::CurrentOffset(offset) => utc.with_timezone(offset).naive_local(),
            Self::Named(zone) => zone.local(utc),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    fn local(h: u32, m: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 10, 25).unwrap().and_hms_opt(h, m, 0).unwrap()
    }

    /// Europe's fall-back on 2026-10-25: 03:00 CEST becomes 02:00 CET, so 02:00-03:00 repeats.
    #[test]
    fn fall_back_hour_keeps_commit_order() {
        let rule = ZoneRule::Named(ServerZone::parse("W. Europe Standard Time").unwrap());
        let first = rule.to_utc(local(2, 30), None);
        assert_eq!(first.to_rfc3339(), "2026-10-25T00:30:00+00:00");
        let after_change = rule.to_utc(local(2, 10), Some(first));
        assert_eq!(after_change.to_rfc3339(), "2026-10-25T01:10:00+00:00");
        assert_eq!(rule.to_utc(local(3, 30), Some(after_change)).to_rfc3339(), "2026-10-25T02:30:00+00:00");
        assert_eq!(rule.to_utc(local(1, 30), None).to_rfc3339(), "2026-10-24T23:30:00+00:00");
    }

    #[test]
    fn local_times_invert_the_conversion() {
        let rule = ZoneRule::Named(ServerZone::parse("W. Europe Standard Time").unwrap());
        let utc = rule.to_utc(local(3, 30), None);
        assert_eq!(rule.to_local(utc), local(3, 30));
        let fixed = ZoneRule::CurrentOffset(FixedOffset::east_opt(-7200).unwrap());
        assert_eq!(fixed.to_local(fixed.to_utc(local(1, 0), None)), local(1, 0));
    }

    #[test]
    fn a_fixed_offset_applies_to_every_commit() {
        let rule = ZoneRule::CurrentOffset(FixedOffset::east_opt(3600).unwrap());
        assert_eq!(rule.to_utc(local(2, 30), None).to_rfc3339(), "2026-10-25T01:30:00+00:00");
    }
}
