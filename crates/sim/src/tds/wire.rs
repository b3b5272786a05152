//! TDS value encodings: TYPE_INFO and values of every simulator type, both directions.
//!
//! Layouts follow Microsoft's MS-TDS specification (2.2.5 data type definitions).

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime, Timelike};

use crate::error::{SqlError, SqlResult};
use crate::types::{time_bytes, Len, SqlType};
use crate::value::{guid_from_sql_bytes, guid_to_sql_bytes, rescale, Value};

/// The collation sent for every text column and in the login ENVCHANGE:
/// SQL_Latin1_General_CP1_CI_AS (LCID 0x0409, sort id 52, code page 1252).
pub const COLLATION: [u8; 5] = [0x09, 0x04, 0xD0, 0x00, 0x34];

const PLP_NULL: u64 = u64::MAX;
const PLP_UNKNOWN: u64 = u64::MAX - 1;

/// Little-endian writer helpers.
pub trait Put {
    /// Appends a u16 LE.
    fn u16le(&mut self, v: u16);
    /// Appends a u32 LE.
    fn u32le(&mut self, v: u32);
    /// Appends a u64 LE.
    fn u64le(&mut self, v: u64);
    /// Appends UTF-16LE text.
    fn utf16(&mut self, text: &str);
    /// A `B_VARCHAR`: u8 count of UTF-16 units, then the text.
    fn b_varchar(&mut self, text: &str);
    /// A `US_VARCHAR`: u16 count of UTF-16 units, then the text.
    fn us_varchar(&mut self, text: &str);
}

impl Put for Vec<u8> {
    fn u16le(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn u32le(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn u64le(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn utf16(&mut self, text: &str) {
        for unit in text.encode_utf16() {
            self.extend_from_slice(&unit.to_le_bytes());
        }
    }
    fn b_varchar(&mut self, text: &str) {
        let units: Vec<u16> = text.encode_utf16().take(255).collect();
        self.push(units.len() as u8);
        for unit in units {
            self.extend_from_slice(&unit.to_le_bytes());
        }
    }
    fn us_varchar(&mut self, text: &str) {
        let units: Vec<u16> = text.encode_utf16().take(65_535).collect();
        self.u16le(units.len() as u16);
        for unit in units {
            self.extend_from_slice(&unit.to_le_bytes());
        }
    }
}

/// Writes a column's TYPE_INFO.
pub fn put_type_info(out: &mut Vec<u8>, ty: SqlType) {
    let max = |len: Len, unit: u32| match len {
        Len::N(n) => (n * unit) as u16,
        Len::Max => 0xFFFF,
    };
    match ty {
        SqlType::Bit => out.extend_from_slice(&[0x68, 1]),
        SqlType::TinyInt => out.extend_from_slice(&[0x26, 1]),
        SqlType::SmallInt => out.extend_from_slice(&[0x26, 2]),
        SqlType::Int => out.extend_from_slice(&[0x26, 4]),
        SqlType::BigInt => out.extend_from_slice(&[0x26, 8]),
        SqlType::Decimal { precision, scale } => out.extend_from_slice(&[0x6C, decimal_len(precision), precision, scale]),
        SqlType::Money => out.extend_from_slice(&[0x6E, 8]),
        SqlType::SmallMoney => out.extend_from_slice(&[0x6E, 4]),
        SqlType::Real => out.extend_from_slice(&[0x6D, 4]),
        SqlType::Float => out.extend_from_slice(&[0x6D, 8]),
        SqlType::Char(n) => {
            out.push(0xAF);
            out.u16le(n as u16);
            out.extend_from_slice(&COLLATION);
        }
        SqlType::VarChar(len) => {
            out.push(0xA7);
            out.u16le(max(len, 1));
            out.extend_from_slice(&COLLATION);
        }
        SqlType::NChar(n) => {
            out.push(0xEF);
            out.u16le((n * 2) as u16);
            out.extend_from_slice(&COLLATION);
        }
        SqlType::NVarChar(len) => {
            out.push(0xE7);
            out.u16le(max(len, 2));
            out.extend_from_slice(&COLLATION);
        }
        SqlType::Binary(n) => {
            out.push(0xAD);
            out.u16le(n as u16);
        }
        SqlType::VarBinary(len) => {
            out.push(0xA5);
            out.u16le(max(len, 1));
        }
        SqlType::Date => out.push(0x28),
        SqlType::Time(s) => out.extend_from_slice(&[0x29, s]),
        SqlType::DateTime2(s) => out.extend_from_slice(&[0x2A, s]),
        SqlType::DateTimeOffset(s) => out.extend_from_slice(&[0x2B, s]),
        SqlType::DateTime => out.extend_from_slice(&[0x6F, 8]),
        SqlType::SmallDateTime => out.extend_from_slice(&[0x6F, 4]),
        SqlType::UniqueIdentifier => out.extend_from_slice(&[0x24, 16]),
    }
}

fn decimal_len(precision: u8) -> u8 {
    match precision {
        0..=9 => 5,
        10..=19 => 9,
        20..=28 => 13,
        _ => 17,
    }
}

fn is_plp(ty: SqlType) -> bool {
    matches!(ty, SqlType::VarChar(Len::Max) | SqlType::NVarChar(Len::Max) | SqlType::VarBinary(Len::Max))
}

fn days_since(date: NaiveDate, epoch: NaiveDate) -> i64 {
    (date - epoch).num_days()
}

#[allow(clippy::expect_used)] // invariant: slices taken by exact length, and constant dates
fn date_epoch() -> NaiveDate {
    NaiveDate::from_ymd_opt(1, 1, 1).expect("valid date")
}

#[allow(clippy::expect_used)] // invariant: slices taken by exact length, and constant dates
fn datetime_epoch() -> NaiveDate {
    NaiveDate::from_ymd_opt(1900, 1, 1).expect("valid date")
}

fn put_time(out: &mut Vec<u8>, time: NaiveTime, scale: u8) {
    let nanos = u64::from(time.num_seconds_from_midnight()) * 1_000_000_000 + u64::from(time.nanosecond().min(999_999_999));
    let units = nanos / 10u64.pow(u32::from(9 - scale));
    let bytes = units.to_le_bytes();
    out.extend_from_slice(&bytes[..usize::from(time_bytes(scale))]);
}

fn put_date(out: &mut Vec<u8>, date: NaiveDate) {
    let days = days_since(date, date_epoch()) as u32;
    out.extend_from_slice(&days.to_le_bytes()[..3]);
}

/// Encodes text in code page 1252 (characters it lacks become `?`, as SQL Server stores them).
fn cp1252(text: &str) -> Vec<u8> {
    let (bytes, _, _) = encoding_rs::WINDOWS_1252.encode(text);
    bytes.into_owned()
}

fn put_plp(out: &mut Vec<u8>, bytes: &[u8]) {
    out.u64le(bytes.len() as u64);
    for chunk in bytes.chunks(8_000) {
        out.u32le(chunk.len() as u32);
        out.extend_from_slice(chunk);
    }
    out.u32le(0);
}

/// Writes a value as a ROW token carries it for a column of type `ty`.
pub fn put_value(out: &mut Vec<u8>, ty: SqlType, value: &Value) -> SqlResult<()> {
    if value.is_null() {
        match ty {
            _ if is_plp(ty) => out.u64le(PLP_NULL),
            SqlType::Char(_) | SqlType::VarChar(_) | SqlType::NChar(_) | SqlType::NVarChar(_) | SqlType::Binary(_) | SqlType::VarBinary(_) => out.u16le(0xFFFF),
            _ => out.push(0),
        }
        return Ok(());
    }
    let value = value.cast(ty)?;
    match (ty, &value) {
        (SqlType::Bit, Value::Bit(b)) => out.extend_from_slice(&[1, u8::from(*b)]),
        (SqlType::TinyInt, Value::Int(v)) => out.extend_from_slice(&[1, *v as u8]),
        (SqlType::SmallInt, Value::Int(v)) => {
            out.push(2);
            out.extend_from_slice(&(*v as i16).to_le_bytes());
        }
        (SqlType::Int, Value::Int(v)) => {
            out.push(4);
            out.extend_from_slice(&(*v as i32).to_le_bytes());
        }
        (SqlType::BigInt, Value::Int(v)) => {
            out.push(8);
            out.extend_from_slice(&v.to_le_bytes());
        }
        (SqlType::Decimal { precision, .. }, Value::Numeric { value, .. }) => {
            let len = decimal_len(precision);
            out.push(len);
            out.push(u8::from(*value >= 0));
            out.extend_from_slice(&value.unsigned_abs().to_le_bytes()[..usize::from(len - 1)]);
        }
        (SqlType::Money, Value::Numeric { value, scale }) => {
            let units = rescale(*value, *scale, 4).unwrap_or(0) as i64;
            out.push(8);
            out.extend_from_slice(&((units >> 32) as i32).to_le_bytes());
            out.extend_from_slice(&(units as u32).to_le_bytes());
        }
        (SqlType::SmallMoney, Value::Numeric { value, scale }) => {
            out.push(4);
            out.extend_from_slice(&(rescale(*value, *scale, 4).unwrap_or(0) as i32).to_le_bytes());
        }
        (SqlType::Real, Value::Float(v)) => {
            out.push(4);
            out.extend_from_slice(&(*v as f32).to_le_bytes());
        }
        (SqlType::Float, Value::Float(v)) => {
            out.push(8);
            out.extend_from_slice(&v.to_le_bytes());
        }
        (SqlType::Char(_) | SqlType::VarChar(_), Value::Text(text)) => {
            let bytes = cp1252(text);
            if is_plp(ty) {
                put_plp(out, &bytes);
            } else {
                out.u16le(bytes.len() as u16);
                out.extend_from_slice(&bytes);
            }
        }
        (SqlType::NChar(_) | SqlType::NVarChar(_), Value::Text(text)) => {
            let mut bytes = Vec::with_capacity(text.len() * 2);
            bytes.utf16(text);
            if is_plp(ty) {
                put_plp(out, &bytes);
            } else {
                out.u16le(bytes.len() as u16);
                out.extend_from_slice(&bytes);
            }
        }
        (SqlType::Binary(_) | SqlType::VarBinary(_), Value::Binary(bytes)) => {
            if is_plp(ty) {
                put_plp(out, bytes);
            } else {
                out.u16le(bytes.len() as u16);
                out.extend_from_slice(bytes);
            }
        }
        (SqlType::Date, Value::Date(date)) => {
            out.push(3);
            put_date(out, *date);
        }
        (SqlType::Time(s), Value::Time(time)) => {
            out.push(time_bytes(s));
            put_time(out, *time, s);
        }
        (SqlType::DateTime2(s), Value::DateTime(dt)) => {
            out.push(time_bytes(s) + 3);
            put_time(out, dt.time(), s);
            put_date(out, dt.date());
        }
        (SqlType::DateTimeOffset(s), Value::DateTimeOffset(dt)) => {
            let utc = dt.naive_utc();
            out.push(time_bytes(s) + 5);
            put_time(out, utc.time(), s);
            put_date(out, utc.date());
            out.extend_from_slice(&((dt.offset().local_minus_utc() / 60) as i16).to_le_bytes());
        }
        (SqlType::DateTime, Value::DateTime(dt)) => {
            let days = days_since(dt.date(), datetime_epoch()) as i32;
            let nanos = u64::from(dt.time().num_seconds_from_midnight()) * 1_000_000_000 + u64::from(dt.time().nanosecond());
            let ticks = ((nanos as f64) * 300.0 / 1e9).round() as u32;
            out.push(8);
            out.extend_from_slice(&days.to_le_bytes());
            out.extend_from_slice(&ticks.to_le_bytes());
        }
        (SqlType::SmallDateTime, Value::DateTime(dt)) => {
            let days = days_since(dt.date(), datetime_epoch()) as u16;
            let minutes = (dt.time().num_seconds_from_midnight() / 60) as u16;
            out.push(4);
            out.extend_from_slice(&days.to_le_bytes());
            out.extend_from_slice(&minutes.to_le_bytes());
        }
        (SqlType::UniqueIdentifier, Value::Guid(guid)) => {
            out.push(16);
            out.extend_from_slice(&guid_to_sql_bytes(guid));
        }
        (ty, value) => return Err(SqlError::new(50_001, 16, format!("cannot send {} as {ty}", value.kind()))),
    }
    Ok(())
}

/// A reader over a request's bytes.
pub struct Reader<'a> {
    bytes: &'a [u8],
    /// Position.
    pub at: usize,
}

fn bad_length(type_id: u8, len: usize) -> SqlError {
    SqlError::new(8009, 16, format!("The incoming tabular data stream (TDS) remote procedure call (RPC) protocol stream is incorrect. Parameter of type 0x{type_id:02X} has an invalid data length {len}."))
}

fn short() -> SqlError {
    SqlError::new(4002, 16, "The incoming tabular data stream (TDS) protocol stream is incorrect. The stream ended unexpectedly.")
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, at: 0 }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.at >= self.bytes.len()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> SqlResult<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len()).ok_or_else(short)?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    /// A byte.
    pub fn u8(&mut self) -> SqlResult<u8> {
        Ok(self.take(1)?[0])
    }

    /// A u16 LE.
    #[allow(clippy::expect_used)] // invariant: slices taken by exact length, and constant dates
    pub fn u16le(&mut self) -> SqlResult<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("two bytes")))
    }

    /// A u32 LE.
    #[allow(clippy::expect_used)] // invariant: slices taken by exact length, and constant dates
    pub fn u32le(&mut self) -> SqlResult<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("four bytes")))
    }

    /// A u64 LE.
    #[allow(clippy::expect_used)] // invariant: slices taken by exact length, and constant dates
    pub fn u64le(&mut self) -> SqlResult<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("eight bytes")))
    }

    /// UTF-16LE text of `units` code units.
    pub fn utf16(&mut self, units: usize) -> SqlResult<String> {
        let bytes = self.take(units * 2)?;
        let units: Vec<u16> = bytes.chunks_exact(2).map(|pair| u16::from_le_bytes([pair[0], pair[1]])).collect();
        Ok(String::from_utf16_lossy(&units))
    }

    /// A `B_VARCHAR`.
    pub fn b_varchar(&mut self) -> SqlResult<String> {
        let units = usize::from(self.u8()?);
        self.utf16(units)
    }

    /// A `US_VARCHAR`.
    pub fn us_varchar(&mut self) -> SqlResult<String> {
        let units = usize::from(self.u16le()?);
        self.utf16(units)
    }

    fn plp(&mut self) -> SqlResult<Option<Vec<u8>>> {
        let total = self.u64le()?;
        if total == PLP_NULL {
            return Ok(None);
        }
        let left = (self.bytes.len() - self.at) as u64;
        let mut data = Vec::with_capacity(if total == PLP_UNKNOWN { 0 } else { total.min(left) as usize });
        loop {
            let chunk = self.u32le()? as usize;
            if chunk == 0 {
                break;
            }
            data.extend_from_slice(self.take(chunk)?);
        }
        Ok(Some(data))
    }
}

fn read_time(bytes: &[u8], scale: u8) -> SqlResult<NaiveTime> {
    let mut padded = [0u8; 8];
    padded[..bytes.len()].copy_from_slice(bytes);
    let units = u64::from_le_bytes(padded);
    let nanos = units * 10u64.pow(u32::from(9 - scale.min(7)));
    NaiveTime::from_num_seconds_from_midnight_opt((nanos / 1_000_000_000) as u32, (nanos % 1_000_000_000) as u32).ok_or_else(short)
}

fn read_date(bytes: &[u8]) -> SqlResult<NaiveDate> {
    let days = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], 0]);
    date_epoch().checked_add_days(chrono::Days::new(u64::from(days))).ok_or_else(short)
}

/// Reads an RPC parameter's TYPE_INFO and value; returns the value and the declared type.
#[allow(clippy::expect_used)] // invariant: slices taken by exact length, and constant dates
pub fn read_param(reader: &mut Reader<'_>) -> SqlResult<(Value, Option<SqlType>)> {
    let type_id = reader.u8()?;
    let fixed = |reader: &mut Reader<'_>, n: usize| -> SqlResult<Vec<u8>> { Ok(reader.take(n)?.to_vec()) };
    let int_of = |bytes: &[u8], unsigned_byte: bool| -> i64 {
        match bytes.len() {
            1 if unsigned_byte => i64::from(bytes[0]),
            1 => i64::from(bytes[0] as i8),
            2 => i64::from(i16::from_le_bytes([bytes[0], bytes[1]])),
            4 => i64::from(i32::from_le_bytes(bytes.try_into().expect("four"))),
            _ => i64::from_le_bytes(bytes.try_into().unwrap_or([0; 8])),
        }
    };
    Ok(match type_id {
        0x1F => (Value::Null, None),
        0x30 => (Value::Int(int_of(&fixed(reader, 1)?, true)), Some(SqlType::TinyInt)),
        0x32 => (Value::Bit(fixed(reader, 1)?[0] != 0), Some(SqlType::Bit)),
        0x34 => (Value::Int(int_of(&fixed(reader, 2)?, false)), Some(SqlType::SmallInt)),
        0x38 => (Value::Int(int_of(&fixed(reader, 4)?, false)), Some(SqlType::Int)),
        0x7F => (Value::Int(int_of(&fixed(reader, 8)?, false)), Some(SqlType::BigInt)),
        0x3B => (Value::Float(f64::from(f32::from_le_bytes(fixed(reader, 4)?.try_into().expect("four")))), Some(SqlType::Real)),
        0x3E => (Value::Float(f64::from_le_bytes(fixed(reader, 8)?.try_into().expect("eight"))), Some(SqlType::Float)),
        0x26 => {
            let _max = reader.u8()?;
            let len = usize::from(reader.u8()?);
            if len == 0 {
                (Value::Null, None)
            } else {
                let ty = match len {
                    1 => SqlType::TinyInt,
                    2 => SqlType::SmallInt,
                    4 => SqlType::Int,
                    8 => SqlType::BigInt,
                    _ => return Err(bad_length(type_id, len)),
                };
                (Value::Int(int_of(reader.take(len)?, true)), Some(ty))
            }
        }
        0x68 => {
            let _max = reader.u8()?;
            match reader.u8()? {
                0 => (Value::Null, Some(SqlType::Bit)),
                n => (Value::Bit(reader.take(usize::from(n))?[0] != 0), Some(SqlType::Bit)),
            }
        }
        0x6D => {
            let _max = reader.u8()?;
            match reader.u8()? {
                0 => (Value::Null, Some(SqlType::Float)),
                4 => (Value::Float(f64::from(f32::from_le_bytes(reader.take(4)?.try_into().expect("four")))), Some(SqlType::Real)),
                _ => (Value::Float(f64::from_le_bytes(reader.take(8)?.try_into().expect("eight"))), Some(SqlType::Float)),
            }
        }
        0x6E => {
            let _max = reader.u8()?;
            match reader.u8()? {
                0 => (Value::Null, Some(SqlType::Money)),
                4 => (Value::Numeric { value: i128::from(i32::from_le_bytes(reader.take(4)?.try_into().expect("four"))), scale: 4 }, Some(SqlType::SmallMoney)),
                _ => {
                    let high = i32::from_le_bytes(reader.take(4)?.try_into().expect("four"));
                    let low = u32::from_le_bytes(reader.take(4)?.try_into().expect("four"));
                    (Value::Numeric { value: i128::from((i64::from(high) << 32) | i64::from(low)), scale: 4 }, Some(SqlType::Money))
                }
            }
        }
        0x6A | 0x6C => {
            let _max = reader.u8()?;
            let precision = reader.u8()?;
            let scale = reader.u8()?;
            if !(1..=38).contains(&precision) || scale > precision {
                return Err(SqlError::new(8009, 16, format!("Invalid precision ({precision}) or scale ({scale}) of a decimal parameter.")));
            }
            let ty = SqlType::Decimal { precision, scale };
            match reader.u8()? {
                0 => (Value::Null, Some(ty)),
                len @ (5 | 9 | 13 | 17) => {
                    let sign = reader.u8()?;
                    let mut magnitude = [0u8; 16];
                    let bytes = reader.take(usize::from(len) - 1)?;
                    magnitude[..bytes.len()].copy_from_slice(bytes);
                    let value = u128::from_le_bytes(magnitude);
                    if value >= 10u128.pow(u32::from(precision)) {
                        return Err(SqlError::new(8009, 16, "A decimal parameter's value exceeds its precision."));
                    }
                    let value = value as i128;
                    (Value::Numeric { value: if sign == 0 { -value } else { value }, scale }, Some(ty))
                }
                len => return Err(bad_length(type_id, usize::from(len))),
            }
        }
        0x24 => {
            let _max = reader.u8()?;
            match reader.u8()? {
                0 => (Value::Null, Some(SqlType::UniqueIdentifier)),
                _ => (Value::Guid(guid_from_sql_bytes(reader.take(16)?)), Some(SqlType::UniqueIdentifier)),
            }
        }
        0x28 => match reader.u8()? {
            0 => (Value::Null, Some(SqlType::Date)),
            3 => (Value::Date(read_date(reader.take(3)?)?), Some(SqlType::Date)),
            len => return Err(bad_length(type_id, usize::from(len))),
        },
        0x29..=0x2B => {
            let scale = reader.u8()?;
            if scale > 7 {
                return Err(SqlError::new(8009, 16, format!("Invalid scale {scale} of a time parameter.")));
            }
            let len = usize::from(reader.u8()?);
            let tb = usize::from(time_bytes(scale));
            let expected = match type_id {
                0x29 => tb,
                0x2A => tb + 3,
                _ => tb + 5,
            };
            if len != 0 && len != expected {
                return Err(bad_length(type_id, len));
            }
            if len == 0 {
                let ty = match type_id {
                    0x29 => SqlType::Time(scale),
                    0x2A => SqlType::DateTime2(scale),
                    _ => SqlType::DateTimeOffset(scale),
                };
                return Ok((Value::Null, Some(ty)));
            }
            let bytes = reader.take(len)?;
            let time = read_time(&bytes[..tb], scale)?;
            match type_id {
                0x29 => (Value::Time(time), Some(SqlType::Time(scale))),
                0x2A => (Value::DateTime(read_date(&bytes[tb..tb + 3])?.and_time(time)), Some(SqlType::DateTime2(scale))),
                _ => {
                    let utc = read_date(&bytes[tb..tb + 3])?.and_time(time);
                    let minutes = i16::from_le_bytes([bytes[tb + 3], bytes[tb + 4]]);
                    let offset = FixedOffset::east_opt(i32::from(minutes) * 60).ok_or_else(short)?;
                    (Value::DateTimeOffset(DateTime::<FixedOffset>::from_naive_utc_and_offset(utc, offset)), Some(SqlType::DateTimeOffset(scale)))
                }
            }
        }
        0x6F | 0x3D | 0x3A => {
            let len = if type_id == 0x6F {
                let _max = reader.u8()?;
                usize::from(reader.u8()?)
            } else if type_id == 0x3D {
                8
            } else {
                4
            };
            if len == 0 {
                return Ok((Value::Null, Some(SqlType::DateTime)));
            }
            if len != 4 && len != 8 {
                return Err(bad_length(type_id, len));
            }
            let bytes = reader.take(len)?;
            let midnight = |days: i64| datetime_epoch().checked_add_signed(chrono::Duration::days(days)).map(|date| NaiveDateTime::new(date, NaiveTime::MIN));
            let value = if len == 8 {
                let days = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                let ticks = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]).min(25_919_999);
                let nanos = (u64::from(ticks) * 1_000_000_000 + 150) / 300;
                midnight(i64::from(days)).map(|base| base + chrono::Duration::nanoseconds(nanos as i64))
            } else {
                let days = u16::from_le_bytes([bytes[0], bytes[1]]);
                let minutes = u16::from_le_bytes([bytes[2], bytes[3]]).min(1439);
                midnight(i64::from(days)).map(|base| base + chrono::Duration::minutes(i64::from(minutes)))
            };
            let value = value.ok_or_else(|| SqlError::new(8009, 16, "A datetime parameter is out of range."))?;
            (Value::DateTime(value), Some(if len == 8 { SqlType::DateTime } else { SqlType::SmallDateTime }))
        }
        0xA7 | 0xAF | 0xE7 | 0xEF | 0xA5 | 0xAD => {
            let max = reader.u16le()?;
            let text = !matches!(type_id, 0xA5 | 0xAD);
            if text {
                reader.take(5)?;
            }
            let bytes = if max == 0xFFFF {
                reader.plp()?
            } else {
                match reader.u16le()? {
                    0xFFFF => None,
                    len => Some(reader.take(usize::from(len))?.to_vec()),
                }
            };
            let unicode = matches!(type_id, 0xE7 | 0xEF);
            let len = if max == 0xFFFF { Len::Max } else { Len::N(u32::from(if unicode { max / 2 } else { max }).max(1)) };
            let ty = match type_id {
                0xA7 => SqlType::VarChar(len),
                0xAF => SqlType::Char(u32::from(max).max(1)),
                0xE7 => SqlType::NVarChar(len),
                0xEF => SqlType::NChar(u32::from(max / 2).max(1)),
                0xA5 => SqlType::VarBinary(len),
                _ => SqlType::Binary(u32::from(max).max(1)),
            };
            let value = match bytes {
                None => Value::Null,
                Some(bytes) if unicode => {
                    let units: Vec<u16> = bytes.chunks_exact(2).map(|p| u16::from_le_bytes([p[0], p[1]])).collect();
                    Value::Text(String::from_utf16_lossy(&units))
                }
                Some(bytes) if text => Value::Text(encoding_rs::WINDOWS_1252.decode(&bytes).0.into_owned()),
                Some(bytes) => Value::Binary(bytes),
            };
            (value, Some(ty))
        }
        other => return Err(SqlError::new(8009, 16, format!("The incoming tabular data stream (TDS) remote procedure call (RPC) protocol stream is incorrect. Parameter has an unknown data type 0x{other:02X}."))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(ty: SqlType, value: Value) -> Value {
        let mut out = Vec::new();
        put_type_info(&mut out, ty);
        put_value(&mut out, ty, &value).unwrap();
        read_param(&mut Reader::new(&out)).unwrap().0
    }

    #[test]
    fn values_round_trip_through_the_wire_encoding() {
        let cases = [
            (SqlType::Int, Value::Int(-42)),
            (SqlType::BigInt, Value::Int(i64::MIN)),
            (SqlType::TinyInt, Value::Int(255)),
            (SqlType::Bit, Value::Bit(true)),
            (SqlType::Decimal { precision: 38, scale: 4 }, Value::Numeric { value: -99_999_999_999_999_999_999_999_999_999_999_999, scale: 4 }),
            (SqlType::Money, Value::Numeric { value: -9_223_372_036_854_775_808, scale: 4 }),
            (SqlType::Float, Value::Float(1.5e300)),
            (SqlType::NVarChar(Len::N(10)), Value::Text("𝄞 ü".into())),
            (SqlType::NVarChar(Len::Max), Value::Text("y".repeat(20_000))),
            (SqlType::VarChar(Len::N(10)), Value::Text("café".into())),
            (SqlType::VarBinary(Len::Max), Value::Binary(vec![9; 17_000])),
            (SqlType::Date, Value::Date(NaiveDate::from_ymd_opt(9999, 12, 31).unwrap())),
            (SqlType::DateTime2(7), Value::DateTime(NaiveDate::from_ymd_opt(1, 1, 1).unwrap().and_hms_nano_opt(0, 0, 0, 100).unwrap())),
            (SqlType::Time(3), Value::Time(NaiveTime::from_hms_milli_opt(23, 59, 59, 999).unwrap())),
            (SqlType::UniqueIdentifier, Value::Guid(uuid::Uuid::from_u128(0x0011_2233_4455_6677_8899_AABB_CCDD_EEFF))),
            (SqlType::NVarChar(Len::N(5)), Value::Null),
        ];
        for (ty, value) in cases {
            assert_eq!(round_trip(ty, value.clone()), value, "{ty}");
        }
    }

    #[test]
    fn datetimeoffset_travels_as_utc_plus_offset() {
        let value = Value::DateTimeOffset(DateTime::parse_from_rfc3339("2026-03-29T02:30:00-03:00").unwrap());
        let mut out = Vec::new();
        put_value(&mut out, SqlType::DateTimeOffset(0), &value).unwrap();
        assert_eq!(&out[out.len() - 2..], &(-180i16).to_le_bytes());
        assert_eq!(round_trip(SqlType::DateTimeOffset(0), value.clone()), value);
    }

    #[test]
    fn guid_uses_sql_server_byte_order() {
        let mut out = Vec::new();
        put_value(&mut out, SqlType::UniqueIdentifier, &Value::Guid(uuid::Uuid::parse_str("00112233-4455-6677-8899-AABBCCDDEEFF").unwrap())).unwrap();
        assert_eq!(&out[1..9], &[0x33, 0x22, 0x11, 0x00, 0x55, 0x44, 0x77, 0x66]);
    }
}
