//! [`Value`]: a SQL Server value, with the conversions, comparisons and arithmetic the
//! simulator's T-SQL needs.

use std::cmp::Ordering;
use std::fmt::Write as _;

use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Timelike};
use uuid::Uuid;

use super::error::{SqlError, SqlResult};
use super::types::{Len, SqlType};

/// A value in a row, a parameter or an expression result.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// SQL `NULL`.
    Null,
    /// `bit`.
    Bit(bool),
    /// Any integer type.
    Int(i64),
    /// `decimal`, `numeric`, `money`, `smallmoney`: `value / 10^scale`.
    Numeric {
        /// The unscaled value.
        value: i128,
        /// Digits after the point.
        scale: u8,
    },
    /// `real` and `float`.
    Float(f64),
    /// Any text type.
    Text(String),
    /// `binary` and `varbinary`.
    Binary(Vec<u8>),
    /// `date`.
    Date(NaiveDate),
    /// `time`.
    Time(NaiveTime),
    /// `datetime`, `datetime2`, `smalldatetime`.
    DateTime(NaiveDateTime),
    /// `datetimeoffset`.
    DateTimeOffset(DateTime<FixedOffset>),
    /// `uniqueidentifier`.
    Guid(Uuid),
}

fn pow10(exp: u8) -> i128 {
    10i128.pow(u32::from(exp))
}

impl Value {
    /// Whether the value is NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The type a literal or computed value naturally has.
    pub fn natural_type(&self) -> SqlType {
        match self {
            Value::Null => SqlType::Int,
            Value::Bit(_) => SqlType::Bit,
            Value::Int(v) => if i32::try_from(*v).is_ok() { SqlType::Int } else { SqlType::BigInt },
            Value::Numeric { value, scale } => {
                let digits = value.unsigned_abs().to_string().len().max(usize::from(*scale) + 1) as u8;
                SqlType::Decimal { precision: digits.clamp(1, 38), scale: *scale }
            }
            Value::Float(_) => SqlType::Float,
            Value::Text(text) => SqlType::NVarChar(Len::N(text.chars().count().clamp(1, 4000) as u32)),
            Value::Binary(bytes) => SqlType::VarBinary(Len::N(bytes.len().clamp(1, 8000) as u32)),
            Value::Date(_) => SqlType::Date,
            Value::Time(_) => SqlType::Time(7),
            Value::DateTime(_) => SqlType::DateTime2(7),
            Value::DateTimeOffset(_) => SqlType::DateTimeOffset(7),
            Value::Guid(_) => SqlType::UniqueIdentifier,
        }
    }

    /// A short type word for messages (`varchar`, `int`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Bit(_) => "bit",
            Value::Int(_) => "int",
            Value::Numeric { .. } => "numeric",
            Value::Float(_) => "float",
            Value::Text(_) => "varchar",
            Value::Binary(_) => "varbinary",
            Value::Date(_) => "date",
            Value::Time(_) => "time",
            Value::DateTime(_) => "datetime2",
            Value::DateTimeOffset(_) => "datetimeoffset",
            Value::Guid(_) => "uniqueidentifier",
        }
    }

    /// The value as `f64`, for numeric values.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Bit(b) => Some(f64::from(u8::from(*b))),
            Value::Int(v) => Some(*v as f64),
            Value::Numeric { value, scale } => Some(*value as f64 / pow10(*scale) as f64),
            Value::Float(v) => Some(*v),
            _ => None,
        }
    }

    /// The value as `i64`, for integer values.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Bit(b) => Some(i64::from(*b)),
            Value::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The text of a text value.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    /// Converts to `target` as `CAST(value AS target)` does: errors 245/8114/8115/2628-style
    /// for values that do not fit. Text is truncated silently only by CAST (`truncate_text`).
    pub fn cast(&self, target: SqlType) -> SqlResult<Value> {
        cast(self, target, true)
    }

    /// Converts to a column's type on INSERT/UPDATE: like CAST, but text or binary that does
    /// not fit is an error instead of being cut (the caller names table and column).
    pub fn assign(&self, target: SqlType) -> SqlResult<Value> {
        cast(self, target, false)
    }

    /// The text form `CONVERT(varchar, value)` gives (style 121 for date/time values).
    pub fn to_text(&self) -> Option<String> {
        Some(match self {
            Value::Null => return None,
            Value::Bit(b) => u8::from(*b).to_string(),
            Value::Int(v) => v.to_string(),
            Value::Numeric { value, scale } => numeric_text(*value, *scale),
            Value::Float(v) => format_float(*v),
            Value::Text(text) => text.clone(),
            Value::Binary(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::Date(d) => d.format("%Y-%m-%d").to_string(),
            Value::Time(t) => format!("{}.{:07}", t.format("%H:%M:%S"), t.nanosecond() / 100),
            Value::DateTime(dt) => format!("{}.{:07}", dt.format("%Y-%m-%d %H:%M:%S"), dt.nanosecond() / 100),
            Value::DateTimeOffset(dt) => format!("{}.{:07} {}", dt.format("%Y-%m-%d %H:%M:%S"), dt.nanosecond() / 100, dt.format("%:z")),
            Value::Guid(g) => g.to_string().to_uppercase(),
        })
    }

    /// Compares two values as SQL Server does after implicit conversion; `None` when either
    /// is NULL. Incompatible types are error 245/8114.
    pub fn compare(&self, other: &Value) -> SqlResult<Option<Ordering>> {
        compare(self, other)
    }
}

fn format_float(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 { format!("{value:.0}") } else { format!("{value}") }
}

/// The decimal text of `value / 10^scale`.
pub fn numeric_text(value: i128, scale: u8) -> String {
    if scale == 0 {
        return value.to_string();
    }
    let divisor = pow10(scale);
    let sign = if value < 0 { "-" } else { "" };
    let magnitude = value.unsigned_abs();
    let whole = magnitude / divisor as u128;
    let fraction = magnitude % divisor as u128;
    format!("{sign}{whole}.{fraction:0width$}", width = usize::from(scale))
}

/// Parses decimal text into (unscaled value, scale).
pub fn parse_numeric(text: &str) -> Option<(i128, u8)> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if !whole.chars().chain(fraction.chars()).all(|c| c.is_ascii_digit()) || fraction.len() > 38 {
        return None;
    }
    let combined = format!("{whole}{fraction}");
    let value: i128 = if combined.is_empty() { 0 } else { combined.parse().ok()? };
    Some((if negative { -value } else { value }, fraction.len() as u8))
}

/// Rescales an unscaled value, rounding half away from zero when digits are dropped.
pub fn rescale(value: i128, from: u8, to: u8) -> Option<i128> {
    match from.cmp(&to) {
        Ordering::Equal => Some(value),
        Ordering::Less => value.checked_mul(pow10(to - from)),
        Ordering::Greater => {
            let divisor = pow10(from - to);
            let quotient = value / divisor;
            let remainder = (value % divisor).abs();
            Some(if remainder * 2 >= divisor { quotient + value.signum() } else { quotient })
        }
    }
}

fn fits_precision(value: i128, precision: u8) -> bool {
    value.unsigned_abs() < pow10(precision) as u128
}

fn text_len(text: &str, target: SqlType) -> (usize, Option<u32>) {
    match target {
        // Single-byte code page: one byte per character.
        SqlType::Char(n) | SqlType::VarChar(Len::N(n)) => (text.chars().count(), Some(n)),
        SqlType::NChar(n) | SqlType::NVarChar(Len::N(n)) => (text.encode_utf16().count(), Some(n)),
        _ => (0, None),
    }
}

fn truncate_text(text: &str, target: SqlType, limit: u32) -> String {
    let limit = limit as usize;
    match target {
        SqlType::NChar(_) | SqlType::NVarChar(_) => {
            let units: Vec<u16> = text.encode_utf16().take(limit).collect();
            String::from_utf16_lossy(&units)
        }
        _ => text.chars().take(limit).collect(),
    }
}

fn int_range(target: SqlType) -> (i64, i64) {
    match target {
        SqlType::TinyInt => (0, 255),
        SqlType::SmallInt => (i64::from(i16::MIN), i64::from(i16::MAX)),
        SqlType::Int => (i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => (i64::MIN, i64::MAX),
    }
}

#[allow(clippy::expect_used)] // invariant: midnight, 1900-01-01 and whole seconds always exist
fn cast(value: &Value, target: SqlType, truncate: bool) -> SqlResult<Value> {
    use SqlType as T;
    if value.is_null() {
        return Ok(Value::Null);
    }
    let fail = || SqlError::conversion(value.kind(), &value.to_text().unwrap_or_default(), &target.to_string());
    match target {
        T::Bit => match value {
            Value::Text(text) => match text.trim().to_ascii_lowercase().as_str() {
                "true" => Ok(Value::Bit(true)),
                "false" => Ok(Value::Bit(false)),
                other => other.parse::<f64>().map(|v| Value::Bit(v != 0.0)).map_err(|_| fail()),
            },
            other => other.as_f64().map(|v| Value::Bit(v != 0.0)).ok_or_else(|| SqlError::converting(other.kind(), "bit")),
        },
        T::TinyInt | T::SmallInt | T::Int | T::BigInt => {
            let (low, high) = int_range(target);
            let integer: i128 = match value {
                Value::Bit(b) => i128::from(*b),
                Value::Int(v) => i128::from(*v),
                Value::Numeric { value, scale } => value / pow10(*scale),
                Value::Float(v) => v.trunc() as i128,
                Value::Text(text) => text.trim().parse::<i128>().map_err(|_| fail())?,
                Value::Binary(bytes) => bytes.iter().fold(0i128, |acc, byte| (acc << 8) | i128::from(*byte)),
                _ => return Err(SqlError::new(529, 16, format!("Explicit conversion from data type {} to {} is not allowed.", value.kind(), target.name()))),
            };
            if integer < i128::from(low) || integer > i128::from(high) {
                return Err(SqlError::overflow(value.kind(), target.name()));
            }
            Ok(Value::Int(integer as i64))
        }
        T::Decimal { .. } | T::Money | T::SmallMoney => {
            let (precision, scale) = match target {
                T::Decimal { precision, scale } => (precision, scale),
                T::Money => (19, 4),
                _ => (10, 4),
            };
            let scaled = match value {
                Value::Bit(b) => Some(i128::from(*b) * pow10(scale)),
                Value::Int(v) => i128::from(*v).checked_mul(pow10(scale)),
                Value::Numeric { value, scale: from } => rescale(*value, *from, scale),
                Value::Float(v) => {
                    let scaled = (v * pow10(scale) as f64).round();
                    (scaled.abs() < 1e38).then_some(scaled as i128)
                }
                Value::Text(text) => {
                    let (raw, from) = parse_numeric(text).ok_or_else(|| SqlError::converting("varchar", "numeric"))?;
                    rescale(raw, from, scale)
                }
                _ => return Err(SqlError::converting(value.kind(), "numeric")),
            };
            match scaled {
                Some(v) if fits_precision(v, precision) => Ok(Value::Numeric { value: v, scale }),
                _ => Err(SqlError::overflow(value.kind(), target.name())),
            }
        }
        T::Real | T::Float => {
            let v = match value {
                Value::Text(text) => text.trim().parse::<f64>().map_err(|_| SqlError::converting("varchar", "float"))?,
                other => other.as_f64().ok_or_else(|| SqlError::converting(other.kind(), "float"))?,
            };
            Ok(Value::Float(if target == T::Real { f64::from(v as f32) } else { v }))
        }
        T::Char(_) | T::VarChar(_) | T::NChar(_) | T::NVarChar(_) => {
            let text = match value {
                Value::Binary(bytes) if matches!(target, T::NChar(_) | T::NVarChar(_)) => {
                    let units: Vec<u16> = bytes.chunks(2).map(|pair| u16::from_le_bytes([pair[0], *pair.get(1).unwrap_or(&0)])).collect();
                    String::from_utf16_lossy(&units)
                }
                other => other.to_text().unwrap_or_default(),
            };
            let (length, limit) = text_len(&text, target);
            match limit {
                Some(limit) if length > limit as usize => {
                    if truncate {
                        Ok(Value::Text(truncate_text(&text, target, limit)))
                    } else {
                        Err(SqlError::new(8152, 16, "String or binary data would be truncated."))
                    }
                }
                Some(limit) if matches!(target, T::Char(_) | T::NChar(_)) && length < limit as usize => {
                    let mut padded = text;
                    padded.extend(std::iter::repeat_n(' ', limit as usize - length));
                    Ok(Value::Text(padded))
                }
                _ => Ok(Value::Text(text)),
            }
        }
        T::Binary(_) | T::VarBinary(_) => {
            let bytes = match value {
                Value::Binary(bytes) => bytes.clone(),
                Value::Text(text) => text.as_bytes().to_vec(),
                Value::Int(v) => {
                    let width = match value.natural_type() {
                        T::BigInt => 8,
                        _ => 4,
                    };
                    v.to_be_bytes()[8 - width..].to_vec()
                }
                Value::Bit(b) => vec![u8::from(*b)],
                Value::Guid(g) => guid_to_sql_bytes(g).to_vec(),
                _ => return Err(SqlError::converting(value.kind(), target.name())),
            };
            let limit = match target {
                T::Binary(n) | T::VarBinary(Len::N(n)) => Some(n as usize),
                _ => None,
            };
            match limit {
                Some(limit) if bytes.len() > limit => {
                    if truncate {
                        Ok(Value::Binary(bytes[..limit].to_vec()))
                    } else {
                        Err(SqlError::new(8152, 16, "String or binary data would be truncated."))
                    }
                }
                Some(limit) if matches!(target, T::Binary(_)) && bytes.len() < limit => {
                    let mut padded = bytes;
                    padded.resize(limit, 0);
                    Ok(Value::Binary(padded))
                }
                _ => Ok(Value::Binary(bytes)),
            }
        }
        T::Date => match value {
            Value::Date(d) => Ok(Value::Date(*d)),
            Value::DateTime(dt) => Ok(Value::Date(dt.date())),
            Value::DateTimeOffset(dt) => Ok(Value::Date(dt.naive_local().date())),
            Value::Text(text) => parse_datetime(text).map(|dt| Value::Date(dt.date())).ok_or_else(|| date_fail(text)),
            _ => Err(SqlError::new(529, 16, format!("Explicit conversion from data type {} to date is not allowed.", value.kind()))),
        },
        T::Time(scale) => {
            let time = match value {
                Value::Time(t) => *t,
                Value::DateTime(dt) => dt.time(),
                Value::DateTimeOffset(dt) => dt.naive_local().time(),
                Value::Text(text) => parse_time(text.trim()).or_else(|| parse_datetime(text).map(|dt| dt.time())).ok_or_else(|| date_fail(text))?,
                _ => return Err(SqlError::converting(value.kind(), "time")),
            };
            Ok(Value::Time(round_time(time, scale)))
        }
        T::DateTime | T::DateTime2(_) | T::SmallDateTime => {
            let datetime = match value {
                Value::DateTime(dt) => *dt,
                Value::Date(d) => d.and_hms_opt(0, 0, 0).expect("midnight exists"),
                Value::DateTimeOffset(dt) => dt.naive_local(),
                Value::Text(text) => parse_datetime(text).ok_or_else(|| date_fail(text))?,
                Value::Time(t) => NaiveDate::from_ymd_opt(1900, 1, 1).expect("valid").and_time(*t),
                _ => return Err(SqlError::converting(value.kind(), target.name())),
            };
            Ok(Value::DateTime(round_datetime(datetime, target)?))
        }
        T::DateTimeOffset(scale) => {
            let offset = match value {
                Value::DateTimeOffset(dt) => *dt,
                Value::DateTime(dt) => dt.and_utc().fixed_offset(),
                Value::Date(d) => d.and_hms_opt(0, 0, 0).expect("midnight exists").and_utc().fixed_offset(),
                Value::Text(text) => parse_datetimeoffset(text).ok_or_else(|| date_fail(text))?,
                _ => return Err(SqlError::converting(value.kind(), "datetimeoffset")),
            };
            let rounded = round_datetime(offset.naive_local(), SqlType::DateTime2(scale))?;
            Ok(Value::DateTimeOffset(rounded.and_local_timezone(*offset.offset()).single().ok_or_else(|| date_fail("offset"))?))
        }
        T::UniqueIdentifier => match value {
            Value::Guid(g) => Ok(Value::Guid(*g)),
            Value::Text(text) => Uuid::parse_str(text.trim().trim_matches(|c| c == '{' || c == '}'))
                .map(Value::Guid)
                .map_err(|_| SqlError::new(8169, 16, "Conversion failed when converting from a character string to uniqueidentifier.")),
            Value::Binary(bytes) if bytes.len() == 16 => Ok(Value::Guid(guid_from_sql_bytes(bytes))),
            _ => Err(SqlError::converting(value.kind(), "uniqueidentifier")),
        },
    }
}

fn date_fail(_text: &str) -> SqlError {
    SqlError::new(241, 16, "Conversion failed when converting date and/or time from character string.")
}

/// Rounds a time to `scale` fractional digits (SQL Server rounds, it does not truncate).
#[allow(clippy::expect_used)] // invariant: midnight, 1900-01-01 and whole seconds always exist
pub fn round_time(time: NaiveTime, scale: u8) -> NaiveTime {
    let unit = 10u64.pow(u32::from(9 - scale.min(7)));
    let nanos = u64::from(time.nanosecond().min(999_999_999));
    let rounded = (nanos + unit / 2) / unit * unit;
    let base = time.with_nanosecond(0).expect("zero nanoseconds is valid");
    base + chrono::Duration::nanoseconds(rounded as i64)
}

#[allow(clippy::expect_used)] // invariant: midnight, 1900-01-01 and whole seconds always exist
fn round_datetime(value: NaiveDateTime, target: SqlType) -> SqlResult<NaiveDateTime> {
    let overflow = || SqlError::new(242, 16, "The conversion of a varchar data type to a datetime data type resulted in an out-of-range value.");
    match target {
        SqlType::DateTime => {
            if value.year() < 1753 {
                return Err(overflow());
            }
            // 1/300 s ticks, rounded.
            let midnight = value.date().and_hms_opt(0, 0, 0).expect("midnight exists");
            let nanos = (value - midnight).num_nanoseconds().unwrap_or(0);
            let ticks = ((nanos as f64) * 300.0 / 1e9).round() as i64;
            Ok(midnight + chrono::Duration::nanoseconds((ticks * 1_000_000_000 + 150) / 300))
        }
        SqlType::SmallDateTime => {
            if !(1900..=2079).contains(&value.year()) {
                return Err(overflow());
            }
            let seconds = value.second();
            let base = value.with_second(0).and_then(|v| v.with_nanosecond(0)).expect("valid");
            Ok(if seconds >= 30 { base + chrono::Duration::minutes(1) } else { base })
        }
        SqlType::DateTime2(scale) => Ok(value.date().and_time(round_time(value.time(), scale))),
        _ => Ok(value),
    }
}

/// Parses the date/time text forms SQL Server accepts in ISO style.
#[allow(clippy::expect_used)] // invariant: midnight, 1900-01-01 and whole seconds always exist
pub fn parse_datetime(text: &str) -> Option<NaiveDateTime> {
    let text = text.trim();
    let formats = ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M", "%Y%m%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M"];
    formats
        .iter()
        .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
        .or_else(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok().map(|d| d.and_hms_opt(0, 0, 0).expect("midnight")))
        .or_else(|| NaiveDate::parse_from_str(text, "%Y%m%d").ok().map(|d| d.and_hms_opt(0, 0, 0).expect("midnight")))
        .or_else(|| parse_datetimeoffset(text).map(|dt| dt.naive_local()))
}

fn parse_time(text: &str) -> Option<NaiveTime> {
    NaiveTime::parse_from_str(text, "%H:%M:%S%.f").ok().or_else(|| NaiveTime::parse_from_str(text, "%H:%M").ok())
}

/// Parses `YYYY-MM-DD hh:mm:ss[.f] +hh:mm`.
pub fn parse_datetimeoffset(text: &str) -> Option<DateTime<FixedOffset>> {
    let text = text.trim();
    ["%Y-%m-%d %H:%M:%S%.f %:z", "%Y-%m-%dT%H:%M:%S%.f%:z", "%Y-%m-%d %H:%M:%S%.f%:z"]
        .iter()
        .find_map(|format| DateTime::parse_from_str(text, format).ok())
        .or_else(|| text.strip_suffix('Z').and_then(parse_datetime).map(|dt| dt.and_utc().fixed_offset()))
}

/// SQL Server's byte order for a uniqueidentifier: the first three groups little-endian.
pub fn guid_to_sql_bytes(guid: &Uuid) -> [u8; 16] {
    let b = guid.as_bytes();
    [b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]
}

/// The inverse of [`guid_to_sql_bytes`].
pub fn guid_from_sql_bytes(bytes: &[u8]) -> Uuid {
    let b = bytes;
    Uuid::from_bytes([b[3], b[2], b[1], b[0], b[5], b[4], b[7], b[6], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]])
}

/// Type precedence, higher wins in implicit conversion (a subset of SQL Server's list).
fn precedence(value: &Value) -> u8 {
    match value {
        Value::Null => 0,
        Value::Binary(_) => 1,
        Value::Text(_) => 2,
        Value::Guid(_) => 3,
        Value::Bit(_) => 4,
        Value::Int(_) => 5,
        Value::Numeric { .. } => 6,
        Value::Float(_) => 7,
        Value::Date(_) | Value::Time(_) => 8,
        Value::DateTime(_) => 9,
        Value::DateTimeOffset(_) => 10,
    }
}

fn compare(a: &Value, b: &Value) -> SqlResult<Option<Ordering>> {
    use Value as V;
    if a.is_null() || b.is_null() {
        return Ok(None);
    }
    Ok(Some(match (a, b) {
        (V::Text(x), V::Text(y)) => compare_text(x, y),
        (V::Binary(x), V::Binary(y)) => x.cmp(y),
        (V::Guid(x), V::Guid(y)) => guid_to_sql_bytes(x).cmp(&guid_to_sql_bytes(y)),
        (V::Int(x), V::Int(y)) => x.cmp(y),
        (V::Bit(x), V::Bit(y)) => x.cmp(y),
        (V::Date(x), V::Date(y)) => x.cmp(y),
        (V::Time(x), V::Time(y)) => x.cmp(y),
        (V::DateTime(x), V::DateTime(y)) => x.cmp(y),
        (V::DateTimeOffset(x), V::DateTimeOffset(y)) => x.cmp(y),
        (V::Numeric { value: x, scale: sx }, V::Numeric { value: y, scale: sy }) => {
            let scale = (*sx).max(*sy);
            match (rescale(*x, *sx, scale), rescale(*y, *sy, scale)) {
                (Some(x), Some(y)) => x.cmp(&y),
                _ => a.as_f64().unwrap_or(0.0).total_cmp(&b.as_f64().unwrap_or(0.0)),
            }
        }
        _ if a.as_f64().is_some() && b.as_f64().is_some() => {
            if let (V::Int(_) | V::Bit(_), V::Numeric { .. }) | (V::Numeric { .. }, V::Int(_) | V::Bit(_)) = (a, b) {
                let (x, y) = (a.cast(SqlType::Decimal { precision: 38, scale: 10 }), b.cast(SqlType::Decimal { precision: 38, scale: 10 }));
                if let (Ok(x), Ok(y)) = (x, y) {
                    return compare(&x, &y);
                }
            }
            a.as_f64().unwrap_or(0.0).total_cmp(&b.as_f64().unwrap_or(0.0))
        }
        _ => {
            // Convert the lower-precedence side to the other's type, as SQL Server does.
            let (low, high, flipped) = if precedence(a) < precedence(b) { (a, b, false) } else { (b, a, true) };
            let converted = low.cast(high.natural_type())?;
            let ordering = compare(&converted, high)?.unwrap_or(Ordering::Equal);
            if flipped { ordering.reverse() } else { ordering }
        }
    }))
}

/// Text comparison: trailing spaces are ignored, as SQL Server's padding rule says. The
/// simulator's collation is binary (code point order, case-sensitive).
pub fn compare_text(a: &str, b: &str) -> Ordering {
    a.trim_end_matches(' ').cmp(b.trim_end_matches(' '))
}

/// A total order for sorting and for keys: NULL first, then by [`Value::compare`]; values
/// that cannot be compared order by type.
pub fn sort_order(a: &Value, b: &Value) -> Ordering {
    match (a.is_null(), b.is_null()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => match compare(a, b) {
            Ok(Some(ordering)) => ordering,
            _ => precedence(a).cmp(&precedence(b)),
        },
    }
}

/// Hex text of bytes, `0x`-prefixed upper case (how SSMS shows binary).
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len() * 2);
    out.push_str("0x");
    for byte in bytes {
        let _ = write!(out, "{byte:02X}");
    }
    out
}

/// Arithmetic operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// `+` (also string concatenation).
    Add,
    /// `-`.
    Sub,
    /// `*`.
    Mul,
    /// `/`.
    Div,
    /// `%`.
    Mod,
}

/// Applies an arithmetic operator with SQL Server's NULL and type rules.
pub fn arithmetic(op: Arith, a: &Value, b: &Value) -> SqlResult<Value> {
    use Value as V;
    if a.is_null() || b.is_null() {
        return Ok(V::Null);
    }
    match (op, a, b) {
        (Arith::Add, V::Text(x), V::Text(y)) => return Ok(V::Text(format!("{x}{y}"))),
        (Arith::Add, V::Binary(x), V::Binary(y)) => return Ok(V::Binary([x.as_slice(), y.as_slice()].concat())),
        (Arith::Add | Arith::Sub, V::DateTime(dt), number) | (Arith::Add, number, V::DateTime(dt)) if number.as_f64().is_some() => {
            let days = number.as_f64().unwrap_or(0.0);
            let delta = chrono::Duration::nanoseconds((days * 86_400e9) as i64);
            return Ok(V::DateTime(if op == Arith::Sub { *dt - delta } else { *dt + delta }));
        }
        _ => {}
    }
    let promote = |v: &Value| -> SqlResult<Value> {
        match v {
            V::Text(text) => {
                if let Ok(i) = text.trim().parse::<i64>() {
                    Ok(V::Int(i))
                } else {
                    v.cast(SqlType::Float)
                }
            }
            V::Bit(b) => Ok(V::Int(i64::from(*b))),
            other if other.as_f64().is_some() => Ok(other.clone()),
            other => Err(SqlError::new(8117, 16, format!("Operand data type {} is invalid for {} operator.", other.kind(), op_name(op)))),
        }
    };
    let (a, b) = (promote(a)?, promote(b)?);
    match (&a, &b) {
        (V::Int(x), V::Int(y)) => {
            let result = match op {
                Arith::Add => x.checked_add(*y),
                Arith::Sub => x.checked_sub(*y),
                Arith::Mul => x.checked_mul(*y),
                Arith::Div => {
                    if *y == 0 {
                        return Err(SqlError::divide_by_zero());
                    }
                    x.checked_div(*y)
                }
                Arith::Mod => {
                    if *y == 0 {
                        return Err(SqlError::divide_by_zero());
                    }
                    x.checked_rem(*y)
                }
            };
            result.map(V::Int).ok_or_else(|| SqlError::new(8115, 16, "Arithmetic overflow error converting expression to data type bigint."))
        }
        (V::Float(_), _) | (_, V::Float(_)) => {
            let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
            if matches!(op, Arith::Div | Arith::Mod) && y == 0.0 {
                return Err(SqlError::divide_by_zero());
            }
            Ok(V::Float(match op {
                Arith::Add => x + y,
                Arith::Sub => x - y,
                Arith::Mul => x * y,
                Arith::Div => x / y,
                Arith::Mod => x % y,
            }))
        }
        _ => {
            let as_numeric = |v: &Value| match v {
                V::Numeric { value, scale } => (*value, *scale),
                V::Int(i) => (i128::from(*i), 0),
                _ => (0, 0),
            };
            let ((x, sx), (y, sy)) = (as_numeric(&a), as_numeric(&b));
            let overflow = || SqlError::new(8115, 16, "Arithmetic overflow error converting expression to data type numeric.");
            match op {
                Arith::Add | Arith::Sub | Arith::Mod => {
                    let scale = sx.max(sy);
                    let (x, y) = (rescale(x, sx, scale).ok_or_else(overflow)?, rescale(y, sy, scale).ok_or_else(overflow)?);
                    let value = match op {
                        Arith::Add => x.checked_add(y),
                        Arith::Sub => x.checked_sub(y),
                        _ => {
                            if y == 0 {
                                return Err(SqlError::divide_by_zero());
                            }
                            Some(x % y)
                        }
                    };
                    Ok(V::Numeric { value: value.ok_or_else(overflow)?, scale })
                }
                Arith::Mul => {
                    let scale = (sx + sy).min(38);
                    let value = x.checked_mul(y).ok_or_else(overflow)?;
                    Ok(V::Numeric { value: rescale(value, sx + sy, scale).ok_or_else(overflow)?, scale })
                }
                Arith::Div => {
                    if y == 0 {
                        return Err(SqlError::divide_by_zero());
                    }
                    let scale = sx.max(6);
                    let numerator = rescale(x, sx, scale + sy).ok_or_else(overflow)?;
                    Ok(V::Numeric { value: numerator / y, scale })
                }
            }
        }
    }
}

fn op_name(op: Arith) -> &'static str {
    match op {
        Arith::Add => "add",
        Arith::Sub => "subtract",
        Arith::Mul => "multiply",
        Arith::Div => "divide",
        Arith::Mod => "modulo",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_text_round_trips() {
        assert_eq!(numeric_text(-12345, 2), "-123.45");
        assert_eq!(numeric_text(5, 3), "0.005");
        assert_eq!(parse_numeric("-123.45"), Some((-12345, 2)));
        assert_eq!(parse_numeric(".5"), Some((5, 1)));
        assert_eq!(parse_numeric("abc"), None);
    }

    #[test]
    fn casts_follow_sql_server_rules() {
        let decimal = SqlType::Decimal { precision: 5, scale: 2 };
        assert_eq!(Value::Text("123.456".into()).cast(decimal).unwrap(), Value::Numeric { value: 12346, scale: 2 });
        assert_eq!(Value::Int(1000).cast(decimal).unwrap_err().number, 8115);
        assert_eq!(Value::Text("abc".into()).cast(SqlType::Int).unwrap_err().number, 245);
        assert_eq!(Value::Int(300).cast(SqlType::TinyInt).unwrap_err().number, 8115);
        assert_eq!(Value::Text("abcdef".into()).cast(SqlType::VarChar(Len::N(3))).unwrap(), Value::Text("abc".into()));
        assert_eq!(Value::Text("abcdef".into()).assign(SqlType::VarChar(Len::N(3))).unwrap_err().number, 8152);
        assert_eq!(Value::Binary(vec![1]).cast(SqlType::Binary(3)).unwrap(), Value::Binary(vec![1, 0, 0]));
        let dt = Value::Text("2026-03-29 01:59:59.1234567".into()).cast(SqlType::DateTime2(3)).unwrap();
        assert_eq!(dt.to_text().unwrap(), "2026-03-29 01:59:59.1230000");
    }

    #[test]
    fn comparisons_convert_implicitly_and_null_is_unknown() {
        assert_eq!(Value::Int(5).compare(&Value::Text("5".into())).unwrap(), Some(Ordering::Equal));
        assert_eq!(Value::Int(5).compare(&Value::Numeric { value: 501, scale: 2 }).unwrap(), Some(Ordering::Less));
        assert_eq!(Value::Null.compare(&Value::Int(1)).unwrap(), None);
        assert_eq!(Value::Text("a ".into()).compare(&Value::Text("a".into())).unwrap(), Some(Ordering::Equal));
        assert_eq!(sort_order(&Value::Null, &Value::Int(i64::MIN)), Ordering::Less);
    }

    #[test]
    fn arithmetic_keeps_types_and_raises_sql_errors() {
        assert_eq!(arithmetic(Arith::Add, &Value::Int(2), &Value::Int(3)).unwrap(), Value::Int(5));
        assert_eq!(arithmetic(Arith::Div, &Value::Int(1), &Value::Int(0)).unwrap_err().number, 8134);
        assert_eq!(
            arithmetic(Arith::Mul, &Value::Numeric { value: 150, scale: 2 }, &Value::Int(2)).unwrap(),
            Value::Numeric { value: 300, scale: 2 }
        );
        assert_eq!(arithmetic(Arith::Add, &Value::Text("a".into()), &Value::Text("b".into())).unwrap(), Value::Text("ab".into()));
        assert_eq!(arithmetic(Arith::Add, &Value::Null, &Value::Int(1)).unwrap(), Value::Null);
    }

    #[test]
    fn guid_bytes_use_sql_server_order() {
        let guid = Uuid::parse_str("01020304-0506-0708-090a-0b0c0d0e0f10").unwrap();
        let bytes = guid_to_sql_bytes(&guid);
        assert_eq!(&bytes[..8], &[4, 3, 2, 1, 6, 5, 8, 7]);
        assert_eq!(guid_from_sql_bytes(&bytes), guid);
    }
}
