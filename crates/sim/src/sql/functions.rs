//! Built-in scalar functions, `CONVERT` styles and `AT TIME ZONE`.

use chrono::{Datelike, NaiveDateTime, Timelike};

use super::expr::{date_part, Ctx};
use crate::cdc::MappingRow;
use crate::clock::ServerZone;
use crate::error::{SqlError, SqlResult};
use mssql_cdc_types::lsn::Lsn;
use crate::types::{Len, SqlType, SYSNAME};
use crate::value::{hex, Value};

/// What `@@VERSION` returns.
pub const VERSION: &str = "Microsoft SQL Server 2022 (RTM) - 16.0.1000.6 (X64) (mssql-cdc simulator)";

/// A built-in function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `ISNULL(a, b)`.
    IsNull,
    /// `COALESCE(...)`.
    Coalesce,
    /// `NULLIF(a, b)`.
    NullIf,
    /// `LEN(s)`.
    Len,
    /// `DATALENGTH(v)`.
    DataLength,
    /// `UPPER(s)`.
    Upper,
    /// `LOWER(s)`.
    Lower,
    /// `LTRIM(s)`.
    LTrim,
    /// `RTRIM(s)`.
    RTrim,
    /// `TRIM(s)`.
    Trim,
    /// `SUBSTRING(s, start, length)`.
    Substring,
    /// `LEFT(s, n)`.
    Left,
    /// `RIGHT(s, n)`.
    Right,
    /// `REPLACE(s, from, to)`.
    Replace,
    /// `CONCAT(...)`.
    Concat,
    /// `ABS(n)`.
    Abs,
    /// `ROUND(n, digits)`.
    Round,
    /// `FLOOR(n)`.
    Floor,
    /// `CEILING(n)`.
    Ceiling,
    /// `DATEADD(part, n, d)`.
    DateAdd,
    /// `DATEDIFF(part, a, b)`.
    DateDiff,
    /// `DATEPART(part, d)`.
    DatePart,
    /// `YEAR(d)`.
    Year,
    /// `MONTH(d)`.
    Month,
    /// `DAY(d)`.
    Day,
    /// `GETDATE()`.
    GetDate,
    /// `GETUTCDATE()`.
    GetUtcDate,
    /// `SYSDATETIME()`.
    SysDateTime,
    /// `SYSUTCDATETIME()`.
    SysUtcDateTime,
    /// `SYSDATETIMEOFFSET()`.
    SysDateTimeOffset,
    /// `CURRENT_TIMEZONE_ID()`.
    CurrentTimezoneId,
    /// `CURRENT_TIMEZONE()`.
    CurrentTimezone,
    /// `DB_NAME()`.
    DbName,
    /// `SCHEMA_NAME([id])`.
    SchemaName,
    /// `OBJECT_ID(name)`.
    ObjectId,
    /// `OBJECT_NAME(id)`.
    ObjectName,
    /// `NEWID()`.
    NewId,
    /// `SERVERPROPERTY(name)`.
    ServerProperty,
    /// `sys.fn_cdc_get_max_lsn()`.
    CdcMaxLsn,
    /// `sys.fn_cdc_get_min_lsn(ci)`.
    CdcMinLsn,
    /// `sys.fn_cdc_increment_lsn(lsn)`.
    CdcIncrementLsn,
    /// `sys.fn_cdc_decrement_lsn(lsn)`.
    CdcDecrementLsn,
    /// `sys.fn_cdc_map_time_to_lsn(op, time)`.
    CdcMapTimeToLsn,
    /// `sys.fn_cdc_map_lsn_to_time(lsn)`.
    CdcMapLsnToTime,
    /// `sys.fn_cdc_is_bit_set(position, mask)`.
    CdcIsBitSet,
    /// `sys.fn_cdc_get_column_ordinal(ci, column)`.
    CdcColumnOrdinal,
}

/// Finds a built-in by its (possibly schema-qualified) name. The CDC functions need their
/// `sys.` schema, as on SQL Server.
pub fn lookup(parts: &[String]) -> SqlResult<Builtin> {
    let lower: Vec<String> = parts.iter().map(|p| p.to_ascii_lowercase()).collect();
    let (schema, name) = match lower.as_slice() {
        [name] => (None, name.as_str()),
        [schema, name] => (Some(schema.as_str()), name.as_str()),
        [_, schema, name] => (Some(schema.as_str()), name.as_str()),
        _ => return Err(SqlError::unknown_function(&parts.join("."))),
    };
    use Builtin as B;
    let builtin = match (schema, name) {
        (Some("sys"), "fn_cdc_get_max_lsn") => B::CdcMaxLsn,
        (Some("sys"), "fn_cdc_get_min_lsn") => B::CdcMinLsn,
        (Some("sys"), "fn_cdc_increment_lsn") => B::CdcIncrementLsn,
        (Some("sys"), "fn_cdc_decrement_lsn") => B::CdcDecrementLsn,
        (Some("sys"), "fn_cdc_map_time_to_lsn") => B::CdcMapTimeToLsn,
        (Some("sys"), "fn_cdc_map_lsn_to_time") => B::CdcMapLsnToTime,
        (Some("sys"), "fn_cdc_is_bit_set") => B::CdcIsBitSet,
        (Some("sys"), "fn_cdc_get_column_ordinal") => B::CdcColumnOrdinal,
        (Some(_), _) => return Err(SqlError::new(4121, 16, format!("Cannot find either column \"{}\" or the user-defined function or aggregate \"{}\", or the name is ambiguous.", lower[0], parts.join(".")))),
        (None, "isnull") => B::IsNull,
        (None, "coalesce") => B::Coalesce,
        (None, "nullif") => B::NullIf,
        (None, "len") => B::Len,
        (None, "datalength") => B::DataLength,
        (None, "upper") => B::Upper,
        (None, "lower") => B::Lower,
        (None, "ltrim") => B::LTrim,
        (None, "rtrim") => B::RTrim,
        (None, "trim") => B::Trim,
        (None, "substring") => B::Substring,
        (None, "left") => B::Left,
        (None, "right") => B::Right,
        (None, "replace") => B::Replace,
        (None, "concat") => B::Concat,
        (None, "abs") => B::Abs,
        (None, "round") => B::Round,
        (None, "floor") => B::Floor,
        (None, "ceiling") => B::Ceiling,
        (None, "dateadd") => B::DateAdd,
        (None, "datediff") => B::DateDiff,
        (None, "datepart") => B::DatePart,
        (None, "year") => B::Year,
        (None, "month") => B::Month,
        (None, "day") => B::Day,
        (None, "getdate") | (None, "current_timestamp") => B::GetDate,
        (None, "getutcdate") => B::GetUtcDate,
        (None, "sysdatetime") => B::SysDateTime,
        (None, "sysutcdatetime") => B::SysUtcDateTime,
        (None, "sysdatetimeoffset") => B::SysDateTimeOffset,
        (None, "current_timezone_id") => B::CurrentTimezoneId,
        (None, "current_timezone") => B::CurrentTimezone,
        (None, "db_name") => B::DbName,
        (None, "schema_name") => B::SchemaName,
        (None, "object_id") => B::ObjectId,
        (None, "object_name") => B::ObjectName,
        (None, "newid") => B::NewId,
        (None, "serverproperty") => B::ServerProperty,
        _ => return Err(SqlError::unknown_function(&parts.join("."))),
    };
    Ok(builtin)
}

fn lsn_arg(value: &Value) -> SqlResult<Option<Lsn>> {
    match value {
        Value::Null => Ok(None),
        Value::Binary(bytes) if bytes.len() <= 10 => {
            let mut padded = [0u8; 10];
            padded[10 - bytes.len()..].copy_from_slice(bytes);
            Ok(Some(Lsn(padded)))
        }
        other => Err(SqlError::new(206, 16, format!("Operand type clash: {} is incompatible with binary(10)", other.kind()))),
    }
}

fn lsn_value(lsn: Option<Lsn>) -> Value {
    lsn.map_or(Value::Null, |lsn| Value::Binary(lsn.0.to_vec()))
}

fn datetime_arg(value: &Value) -> SqlResult<Option<NaiveDateTime>> {
    match value.cast(SqlType::DateTime2(7))? {
        Value::DateTime(dt) => Ok(Some(dt)),
        _ => Ok(None),
    }
}

impl Builtin {
    /// Checks the argument count (error 174, as SQL Server).
    pub fn check_arity(self, count: usize) -> SqlResult<()> {
        use Builtin as B;
        let (low, high) = match self {
            B::GetDate | B::GetUtcDate | B::SysDateTime | B::SysUtcDateTime | B::SysDateTimeOffset | B::CurrentTimezoneId | B::CurrentTimezone | B::NewId | B::CdcMaxLsn => (0, 0),
            B::DbName | B::SchemaName => (0, 1),
            B::Len | B::DataLength | B::Upper | B::Lower | B::LTrim | B::RTrim | B::Trim | B::Abs | B::Floor | B::Ceiling | B::Year | B::Month | B::Day | B::ObjectId | B::ObjectName | B::ServerProperty | B::CdcMinLsn | B::CdcIncrementLsn | B::CdcDecrementLsn | B::CdcMapLsnToTime => (1, 1),
            B::IsNull | B::NullIf | B::Left | B::Right | B::Round | B::DatePart | B::CdcMapTimeToLsn | B::CdcIsBitSet | B::CdcColumnOrdinal => (2, 2),
            B::Substring | B::Replace | B::DateAdd | B::DateDiff => (3, 3),
            B::Coalesce | B::Concat => (2, 254),
        };
        if count < low || count > high {
            return Err(SqlError::new(174, 15, format!("The {self:?} function requires {low} argument(s).")));
        }
        Ok(())
    }

    /// Whether one statement sees one value (time functions, LSN functions: yes).
    pub fn is_deterministic_per_statement(self) -> bool {
        self != Builtin::NewId
    }

    /// The result type given argument types.
    pub fn result_type(self, args: &[SqlType]) -> SqlType {
        use Builtin as B;
        match self {
            B::IsNull | B::Coalesce | B::NullIf | B::Abs | B::Round | B::Floor | B::Ceiling => args.first().copied().unwrap_or(SqlType::Int),
            B::Len | B::Year | B::Month | B::Day | B::DatePart | B::DateDiff | B::ObjectId | B::CdcColumnOrdinal => SqlType::Int,
            B::DataLength => SqlType::BigInt,
            B::Upper | B::Lower | B::LTrim | B::RTrim | B::Trim | B::Substring | B::Left | B::Right | B::Replace => {
                args.first().copied().filter(|t| t.is_text()).unwrap_or(SqlType::NVarChar(Len::N(4000)))
            }
            B::Concat => SqlType::NVarChar(Len::Max),
            B::DateAdd => args.get(2).copied().unwrap_or(SqlType::DateTime),
            B::GetDate | B::GetUtcDate => SqlType::DateTime,
            B::SysDateTime | B::SysUtcDateTime => SqlType::DateTime2(7),
            B::SysDateTimeOffset => SqlType::DateTimeOffset(7),
            B::CurrentTimezoneId | B::CurrentTimezone => SqlType::VarChar(Len::N(128)),
            B::DbName | B::SchemaName | B::ObjectName => SYSNAME,
            B::NewId => SqlType::UniqueIdentifier,
            B::ServerProperty => SqlType::NVarChar(Len::N(128)),
            B::CdcMaxLsn | B::CdcMinLsn | B::CdcIncrementLsn | B::CdcDecrementLsn | B::CdcMapTimeToLsn => SqlType::Binary(10),
            B::CdcMapLsnToTime => SqlType::DateTime,
            B::CdcIsBitSet => SqlType::Bit,
        }
    }

    /// Calls the function.
    pub fn call(self, args: &[Value], ctx: &Ctx<'_>) -> SqlResult<Value> {
        use Builtin as B;
        let db = ctx.db;
        let now = db.clock.now();
        let zone = &db.config.zone;
        let text = |index: usize| args.get(index).and_then(Value::to_text);
        let int = |index: usize| -> SqlResult<Option<i64>> {
            match args.get(index) {
                None | Some(Value::Null) => Ok(None),
                Some(value) => value.cast(SqlType::BigInt).map(|v| v.as_i64()),
            }
        };
        Ok(match self {
            B::IsNull => if args[0].is_null() { args[1].clone() } else { args[0].clone() },
            B::Coalesce => args.iter().find(|v| !v.is_null()).cloned().unwrap_or(Value::Null),
            B::NullIf => if args[0].compare(&args[1])? == Some(std::cmp::Ordering::Equal) { Value::Null } else { args[0].clone() },
            B::Len => text(0).map_or(Value::Null, |t| Value::Int(t.trim_end_matches(' ').chars().count() as i64)),
            B::DataLength => match &args[0] {
                Value::Null => Value::Null,
                Value::Binary(bytes) => Value::Int(bytes.len() as i64),
                Value::Text(t) => Value::Int(t.len() as i64),
                other => Value::Int(i64::from(other.natural_type().max_length().max(0))),
            },
            B::Upper => text(0).map_or(Value::Null, |t| Value::Text(t.to_uppercase())),
            B::Lower => text(0).map_or(Value::Null, |t| Value::Text(t.to_lowercase())),
            B::LTrim => text(0).map_or(Value::Null, |t| Value::Text(t.trim_start_matches(' ').to_owned())),
            B::RTrim => text(0).map_or(Value::Null, |t| Value::Text(t.trim_end_matches(' ').to_owned())),
            B::Trim => text(0).map_or(Value::Null, |t| Value::Text(t.trim_matches(' ').to_owned())),
            B::Substring => match (text(0), int(1)?, int(2)?) {
                (Some(t), Some(start), Some(length)) => {
                    if length < 0 {
                        return Err(SqlError::new(537, 16, "Invalid length parameter passed to the LEFT or SUBSTRING function."));
                    }
                    let chars: Vec<char> = t.chars().collect();
                    let from = (start - 1).max(0) as usize;
                    let to = ((start - 1 + length).max(0) as usize).min(chars.len());
                    Value::Text(if from >= to { String::new() } else { chars[from..to].iter().collect() })
                }
                _ => Value::Null,
            },
            B::Left => match (text(0), int(1)?) {
                (Some(t), Some(n)) => Value::Text(t.chars().take(n.max(0) as usize).collect()),
                _ => Value::Null,
            },
            B::Right => match (text(0), int(1)?) {
                (Some(t), Some(n)) => {
                    let chars: Vec<char> = t.chars().collect();
                    Value::Text(chars[chars.len().saturating_sub(n.max(0) as usize)..].iter().collect())
                }
                _ => Value::Null,
            },
            B::Replace => match (text(0), text(1), text(2)) {
                (Some(t), Some(from), Some(to)) if !from.is_empty() => Value::Text(t.replace(&from, &to)),
                (Some(t), Some(_), Some(_)) => Value::Text(t),
                _ => Value::Null,
            },
            B::Concat => Value::Text(args.iter().filter_map(Value::to_text).collect()),
            B::Abs => match &args[0] {
                Value::Int(v) => Value::Int(v.checked_abs().ok_or_else(|| SqlError::overflow("int", "int"))?),
                Value::Numeric { value, scale } => Value::Numeric { value: value.abs(), scale: *scale },
                Value::Float(v) => Value::Float(v.abs()),
                other => other.clone(),
            },
            B::Round => match (&args[0], int(1)?) {
                (Value::Numeric { value, scale }, Some(digits)) => {
                    let keep = digits.clamp(0, i64::from(*scale)) as u8;
                    let rounded = crate::value::rescale(*value, *scale, keep).unwrap_or(*value);
                    Value::Numeric { value: crate::value::rescale(rounded, keep, *scale).unwrap_or(*value), scale: *scale }
                }
                (Value::Float(v), Some(digits)) => {
                    let factor = 10f64.powi(digits as i32);
                    Value::Float((v * factor).round() / factor)
                }
                (other, _) => other.clone(),
            },
            B::Floor | B::Ceiling => match &args[0] {
                Value::Float(v) => Value::Float(if self == B::Floor { v.floor() } else { v.ceil() }),
                Value::Numeric { value, scale } => {
                    let divisor = 10i128.pow(u32::from(*scale));
                    let mut whole = value.div_euclid(divisor);
                    if self == B::Ceiling && value.rem_euclid(divisor) != 0 {
                        whole += 1;
                    }
                    Value::Numeric { value: whole, scale: 0 }
                }
                other => other.clone(),
            },
            B::DateAdd => {
                let part = text(0).unwrap_or_default().to_ascii_lowercase();
                let (Some(n), Some(base)) = (int(1)?, datetime_arg(&args[2])?) else { return Ok(Value::Null) };
                let shifted = match part.as_str() {
                    "year" | "yy" | "yyyy" => base.with_year(base.year() + n as i32),
                    "month" | "mm" | "m" => base.checked_add_months(chrono::Months::new(n.max(0) as u32)).or_else(|| base.checked_sub_months(chrono::Months::new((-n).max(0) as u32))),
                    "day" | "dd" | "d" => Some(base + chrono::Duration::days(n)),
                    "hour" | "hh" => Some(base + chrono::Duration::hours(n)),
                    "minute" | "mi" | "n" => Some(base + chrono::Duration::minutes(n)),
                    "second" | "ss" | "s" => Some(base + chrono::Duration::seconds(n)),
                    "millisecond" | "ms" => Some(base + chrono::Duration::milliseconds(n)),
                    _ => return Err(SqlError::new(155, 15, format!("'{part}' is not a recognized dateadd option."))),
                };
                let shifted = shifted.ok_or_else(|| SqlError::new(517, 16, "Adding a value to a 'datetime' column caused an overflow."))?;
                Value::DateTime(shifted).cast(match args[2].natural_type() {
                    SqlType::Date => SqlType::Date,
                    _ => SqlType::DateTime2(7),
                })?
            }
            B::DateDiff => {
                let part = text(0).unwrap_or_default().to_ascii_lowercase();
                let (Some(a), Some(b)) = (datetime_arg(&args[1])?, datetime_arg(&args[2])?) else { return Ok(Value::Null) };
                let diff = match part.as_str() {
                    "year" | "yy" | "yyyy" => i64::from(b.year() - a.year()),
                    "month" | "mm" | "m" => i64::from((b.year() - a.year()) * 12) + i64::from(b.month()) - i64::from(a.month()),
                    "day" | "dd" | "d" => (b.date() - a.date()).num_days(),
                    "hour" | "hh" => (b - a).num_hours(),
                    "minute" | "mi" | "n" => (b - a).num_minutes(),
                    "second" | "ss" | "s" => (b - a).num_seconds(),
                    "millisecond" | "ms" => (b - a).num_milliseconds(),
                    _ => return Err(SqlError::new(155, 15, format!("'{part}' is not a recognized datediff option."))),
                };
                Value::Int(diff)
            }
            B::DatePart => {
                let part = text(0).unwrap_or_default().to_ascii_lowercase();
                match datetime_arg(&args[1])? {
                    Some(dt) => Value::Int(date_part(&dt, &part).ok_or_else(|| SqlError::new(155, 15, format!("'{part}' is not a recognized datepart option.")))?),
                    None => Value::Null,
                }
            }
            B::Year | B::Month | B::Day => match datetime_arg(&args[0])? {
                Some(dt) => Value::Int(i64::from(match self {
                    B::Year => dt.year() as u32,
                    B::Month => dt.month(),
                    _ => dt.day(),
                })),
                None => Value::Null,
            },
            B::GetDate => Value::DateTime(zone.local(now)).cast(SqlType::DateTime)?,
            B::GetUtcDate => Value::DateTime(now.naive_utc()).cast(SqlType::DateTime)?,
            B::SysDateTime => Value::DateTime(zone.local(now)).cast(SqlType::DateTime2(7))?,
            B::SysUtcDateTime => Value::DateTime(now.naive_utc()).cast(SqlType::DateTime2(7))?,
            B::SysDateTimeOffset => Value::DateTimeOffset(zone.with_offset(now)),
            B::CurrentTimezoneId => Value::Text(zone.windows_id.clone()),
            B::CurrentTimezone => {
                let offset = zone.with_offset(now).offset().local_minus_utc();
                Value::Text(format!("(UTC{}{:02}:{:02}) {}", if offset < 0 { '-' } else { '+' }, offset.abs() / 3600, offset.abs() % 3600 / 60, zone.windows_id))
            }
            B::DbName => Value::Text(db.config.database.clone()),
            B::SchemaName => match int(0)? {
                None if args.is_empty() => Value::Text("dbo".to_owned()),
                None => Value::Null,
                Some(id) => db.schemas.values().find(|(sid, _)| i64::from(*sid) == id).map_or(Value::Null, |(_, name)| Value::Text(name.clone())),
            },
            B::ObjectId => match text(0) {
                Some(name) => {
                    let parts: Vec<&str> = name.split('.').map(|p| p.trim_matches(|c| c == '[' || c == ']')).collect();
                    let (schema, table) = match parts.as_slice() {
                        [table] => ("dbo", *table),
                        [.., schema, table] => (*schema, *table),
                        [] => ("dbo", ""),
                    };
                    if let Some(t) = db.table(Some(schema), table) {
                        Value::Int(i64::from(t.object_id))
                    } else if schema.eq_ignore_ascii_case("cdc") {
                        db.cdc
                            .instances
                            .iter()
                            .find(|ci| format!("{}_CT", ci.name).eq_ignore_ascii_case(table))
                            .map_or(Value::Null, |ci| Value::Int(i64::from(ci.object_id)))
                    } else {
                        Value::Null
                    }
                }
                None => Value::Null,
            },
            B::ObjectName => match int(0)? {
                Some(id) => db
                    .tables
                    .values()
                    .find(|t| i64::from(t.object_id) == id)
                    .map(|t| t.name.clone())
                    .or_else(|| db.cdc.instances.iter().find(|ci| i64::from(ci.object_id) == id).map(|ci| format!("{}_CT", ci.name)))
                    .map_or(Value::Null, Value::Text),
                None => Value::Null,
            },
            B::NewId => Value::Guid(uuid::Uuid::new_v4()),
            B::ServerProperty => match text(0).unwrap_or_default().to_ascii_lowercase().as_str() {
                "productversion" => Value::Text("16.0.1000.6".to_owned()),
                "productmajorversion" => Value::Text("16".to_owned()),
                "edition" => Value::Text("Developer Edition (64-bit)".to_owned()),
                "engineedition" => Value::Int(3),
                "servername" | "machinename" => Value::Text("mssql-cdc-sim".to_owned()),
                _ => Value::Null,
            },
            B::CdcMaxLsn => lsn_value(db.cdc.max_lsn()),
            B::CdcMinLsn => match text(0) {
                Some(name) => Value::Binary(db.cdc.instance(&name).map_or(Lsn::ZERO, |ci| ci.start_lsn).0.to_vec()),
                None => Value::Binary(Lsn::ZERO.0.to_vec()),
            },
            B::CdcIncrementLsn => lsn_value(lsn_arg(&args[0])?.map(Lsn::increment)),
            B::CdcDecrementLsn => lsn_value(lsn_arg(&args[0])?.map(Lsn::decrement)),
            B::CdcMapLsnToTime => match lsn_arg(&args[0])? {
                Some(lsn) => db.cdc.mapping.get(&lsn).map_or(Value::Null, |row| Value::DateTime(row.tran_end_time)).cast(SqlType::DateTime)?,
                None => Value::Null,
            },
            B::CdcMapTimeToLsn => {
                let relation = text(0).unwrap_or_default().to_ascii_lowercase();
                let Some(at) = datetime_arg(&args[1])? else { return Ok(Value::Null) };
                let rows = db.cdc.mapping.iter();
                let pick: Option<(&Lsn, &MappingRow)> = match relation.as_str() {
                    "largest less than" => rows.filter(|(_, r)| r.tran_end_time < at).max_by_key(|(lsn, r)| (r.tran_end_time, **lsn)),
                    "largest less than or equal" => rows.filter(|(_, r)| r.tran_end_time <= at).max_by_key(|(lsn, r)| (r.tran_end_time, **lsn)),
                    "smallest greater than" => rows.filter(|(_, r)| r.tran_end_time > at).min_by_key(|(lsn, r)| (r.tran_end_time, **lsn)),
                    "smallest greater than or equal" => rows.filter(|(_, r)| r.tran_end_time >= at).min_by_key(|(lsn, r)| (r.tran_end_time, **lsn)),
                    _ => return Err(SqlError::new(22986, 16, format!("The relational operator '{relation}' is not valid. Valid operators are 'largest less than', 'largest less than or equal', 'smallest greater than', and 'smallest greater than or equal'."))),
                };
                lsn_value(pick.map(|(lsn, _)| *lsn))
            }
            B::CdcIsBitSet => match (int(0)?, &args[1]) {
                (Some(position), Value::Binary(mask)) if position >= 1 => {
                    let bit = (position - 1) as usize;
                    let byte = mask.len().checked_sub(1 + bit / 8).map(|i| mask[i]);
                    Value::Bit(byte.is_some_and(|b| b & (1 << (bit % 8)) != 0))
                }
                _ => Value::Null,
            },
            B::CdcColumnOrdinal => match (text(0), text(1)) {
                (Some(ci), Some(column)) => db
                    .cdc
                    .instance(&ci)
                    .and_then(|ci| ci.captured.iter().find(|c| c.name.eq_ignore_ascii_case(&column)))
                    .map_or(Value::Int(-1), |c| Value::Int(i64::from(c.ordinal))),
                _ => Value::Null,
            },
        })
    }
}

/// `CONVERT(ty, value, style)`: the styles the pipeline and common tools use. `from` is the
/// operand's static type: styles 121, 126 and 127 write a `datetime2(n)` or `time(n)` with its
/// `n` fractional digits (t-sql/functions/cast-and-convert-transact-sql, "Date and time
/// styles"), a `datetime` with 3.
pub fn convert(value: &Value, ty: SqlType, style: Option<i64>, from: Option<SqlType>) -> SqlResult<Value> {
    let digits = match from {
        Some(SqlType::DateTime2(n) | SqlType::Time(n)) => n,
        Some(SqlType::SmallDateTime) => 0,
        _ => 3,
    };
    let fraction = |nanos: u32| if digits == 0 { String::new() } else { format!(".{:0width$}", nanos / 10u32.pow(9 - u32::from(digits.min(9))), width = usize::from(digits)) };
    match (value, style) {
        (Value::Binary(bytes), Some(1 | 2)) if ty.is_text() => {
            let shown = hex(bytes);
            Value::Text(if style == Some(2) { shown[2..].to_owned() } else { shown }).cast(ty)
        }
        (Value::Text(text), Some(1 | 2)) if matches!(ty, SqlType::Binary(_) | SqlType::VarBinary(_)) => {
            let digits = if style == Some(1) { text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text) } else { text.as_str() };
            match crate::sql::expr::literal(&sqlparser::ast::Value::HexStringLiteral(digits.to_owned())) {
                Ok(bytes) => bytes.cast(ty),
                Err(_) => Err(SqlError::conversion("varchar", text, &ty.to_string())),
            }
        }
        (Value::Time(t), Some(108 | 8 | 114 | 14 | 121 | 21 | 126 | 127)) if ty.is_text() => {
            let text = match style {
                Some(108 | 8) => t.format("%H:%M:%S").to_string(),
                _ => format!("{}{}", t.format("%H:%M:%S"), fraction(t.nanosecond())),
            };
            Value::Text(text).cast(ty)
        }
        (Value::DateTime(dt), Some(style)) if ty.is_text() => {
            let text = match style {
                120 | 20 => dt.format("%Y-%m-%d %H:%M:%S").to_string(),
                121 | 21 => format!("{}{}", dt.format("%Y-%m-%d %H:%M:%S"), fraction(dt.nanosecond())),
                // A datetime's zero milliseconds are left out in the ISO 8601 styles.
                126 | 127 if dt.nanosecond() == 0 && digits == 3 => format!("{}{}", dt.format("%Y-%m-%dT%H:%M:%S"), if style == 127 { "Z" } else { "" }),
                126 => format!("{}{}", dt.format("%Y-%m-%dT%H:%M:%S"), fraction(dt.nanosecond())),
                127 => format!("{}{}Z", dt.format("%Y-%m-%dT%H:%M:%S"), fraction(dt.nanosecond())),
                112 => dt.format("%Y%m%d").to_string(),
                23 => dt.format("%Y-%m-%d").to_string(),
                _ => value.to_text().unwrap_or_default(),
            };
            Value::Text(text).cast(ty)
        }
        _ => value.cast(ty),
    }
}

/// `value AT TIME ZONE zone` with a Windows zone id.
pub fn at_time_zone(value: &Value, zone: &Value) -> SqlResult<Value> {
    let Some(name) = zone.to_text() else { return Ok(Value::Null) };
    let zone = ServerZone::parse(&name)
        .filter(|z| z.windows_id.eq_ignore_ascii_case(&name))
        .ok_or_else(|| SqlError::new(9820, 16, format!("The time zone parameter '{name}' provided to AT TIME ZONE clause is invalid.")))?;
    Ok(match value {
        Value::Null => Value::Null,
        Value::DateTimeOffset(dt) => Value::DateTimeOffset(zone.with_offset(dt.with_timezone(&chrono::Utc))),
        Value::DateTime(local) => Value::DateTimeOffset(zone.attach(*local)),
        Value::Date(date) => Value::DateTimeOffset(zone.attach(date.and_hms_opt(0, 0, 0).unwrap_or_default())),
        Value::Text(text) => match crate::value::parse_datetime(text) {
            Some(local) => Value::DateTimeOffset(zone.attach(local)),
            None => return Err(SqlError::new(241, 16, "Conversion failed when converting date and/or time from character string.")),
        },
        other => return Err(SqlError::new(8116, 16, format!("Argument data type {} is invalid for argument 1 of AT TIME ZONE function.", other.kind()))),
    })
}
