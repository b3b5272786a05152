//! [`SqlType`]: the SQL Server data types the simulator stores, with their catalog metadata.

use std::fmt;

use super::error::{SqlError, SqlResult};

/// A length: `n` or `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Len {
    /// At most `n` bytes (binary, char) or characters (nchar).
    N(u32),
    /// `(max)`: up to 2 GB, sent as PLP on the wire.
    Max,
}

/// A SQL Server data type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SqlType {
    /// `bit`.
    Bit,
    /// `tinyint` (0..=255).
    TinyInt,
    /// `smallint`.
    SmallInt,
    /// `int`.
    Int,
    /// `bigint`.
    BigInt,
    /// `decimal(p,s)` / `numeric(p,s)`.
    Decimal {
        /// Total digits, 1..=38.
        precision: u8,
        /// Digits after the point, 0..=precision.
        scale: u8,
    },
    /// `money`: 8-byte, 4 decimal places.
    Money,
    /// `smallmoney`: 4-byte, 4 decimal places.
    SmallMoney,
    /// `real` (f32).
    Real,
    /// `float` (f64).
    Float,
    /// `char(n)`: fixed, single-byte.
    Char(u32),
    /// `varchar(n|max)`.
    VarChar(Len),
    /// `nchar(n)`: fixed, UTF-16.
    NChar(u32),
    /// `nvarchar(n|max)`.
    NVarChar(Len),
    /// `binary(n)`.
    Binary(u32),
    /// `varbinary(n|max)`.
    VarBinary(Len),
    /// `date`.
    Date,
    /// `time(s)`, s = fractional digits 0..=7.
    Time(u8),
    /// `datetime` (1/300 s ticks).
    DateTime,
    /// `datetime2(s)`.
    DateTime2(u8),
    /// `smalldatetime` (minutes).
    SmallDateTime,
    /// `datetimeoffset(s)`.
    DateTimeOffset(u8),
    /// `uniqueidentifier`.
    UniqueIdentifier,
}

/// `sysname`: `nvarchar(128)`.
pub const SYSNAME: SqlType = SqlType::NVarChar(Len::N(128));

impl SqlType {
    /// Parses a type as written in T-SQL: `int`, `decimal(18,2)`, `nvarchar(max)`,
    /// `datetime2(3)`, ... (case-insensitive; `numeric` is `decimal`).
    pub fn parse(text: &str) -> SqlResult<Self> {
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect::<String>().to_ascii_lowercase();
        let (name, args) = match compact.split_once('(') {
            Some((name, rest)) => (name.to_owned(), rest.strip_suffix(')').map(|args| args.split(',').map(str::to_owned).collect::<Vec<_>>())),
            None => (compact.clone(), Some(Vec::new())),
        };
        let args = args.ok_or_else(|| SqlError::new(2715, 16, format!("Column, parameter, or variable: cannot find data type {text}.")))?;
        let number = |index: usize, default: u32| -> SqlResult<u32> {
            match args.get(index) {
                None => Ok(default),
                Some(arg) => arg.parse::<u32>().map_err(|_| SqlError::new(2715, 16, format!("Column, parameter, or variable: cannot find data type {text}."))),
            }
        };
        let length = |default: u32, limit: u32| -> SqlResult<Len> {
            match args.first().map(String::as_str) {
                Some("max") => Ok(Len::Max),
                _ => {
                    let n = number(0, default)?;
                    if n == 0 || n > limit {
                        return Err(SqlError::new(131, 15, format!("The size ({n}) given to the type '{name}' exceeds the maximum allowed ({limit}).")));
                    }
                    Ok(Len::N(n))
                }
            }
        };
        let fixed = |default: u32, limit: u32| -> SqlResult<u32> {
            match length(default, limit)? {
                Len::N(n) => Ok(n),
                Len::Max => Err(SqlError::new(2716, 16, format!("Column, parameter, or variable: invalid use of MAX with type {name}."))),
            }
        };
        let scale = |default: u32| -> SqlResult<u8> {
            let s = number(0, default)?;
            if s > 7 {
                return Err(SqlError::new(1002, 15, format!("Specified scale {s} is invalid.")));
            }
            Ok(s as u8)
        };
        Ok(match name.as_str() {
            "bit" => Self::Bit,
            "tinyint" => Self::TinyInt,
            "smallint" => Self::SmallInt,
            "int" | "integer" => Self::Int,
            "bigint" => Self::BigInt,
            "decimal" | "numeric" | "dec" => {
                let precision = number(0, 18)?;
                let scale = number(1, 0)?;
                if !(1..=38).contains(&precision) || scale > precision {
                    return Err(SqlError::new(2750, 16, format!("Column or parameter has an invalid precision or scale ({precision},{scale}).")));
                }
                Self::Decimal { precision: precision as u8, scale: scale as u8 }
            }
            "money" => Self::Money,
            "smallmoney" => Self::SmallMoney,
            "real" => Self::Real,
            "float" | "doubleprecision" => {
                if number(0, 53)? <= 24 { Self::Real } else { Self::Float }
            }
            "char" | "character" => Self::Char(fixed(1, 8000)?),
            "varchar" => Self::VarChar(length(1, 8000)?),
            "nchar" => Self::NChar(fixed(1, 4000)?),
            "nvarchar" => Self::NVarChar(length(1, 4000)?),
            "sysname" => SYSNAME,
            "binary" => Self::Binary(fixed(1, 8000)?),
            "varbinary" => Self::VarBinary(length(1, 8000)?),
            "date" => Self::Date,
            "time" => Self::Time(scale(7)?),
            "datetime" => Self::DateTime,
            "datetime2" => Self::DateTime2(scale(7)?),
            "smalldatetime" => Self::SmallDateTime,
            "datetimeoffset" => Self::DateTimeOffset(scale(7)?),
            "uniqueidentifier" => Self::UniqueIdentifier,
            _ => return Err(SqlError::new(2715, 16, format!("Column, parameter, or variable #1: Cannot find data type {name}."))),
        })
    }

    /// The base type name, as `sys.types.name` and `cdc.captured_columns.column_type` show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bit => "bit",
            Self::TinyInt => "tinyint",
            Self::SmallInt => "smallint",
            Self::Int => "int",
            Self::BigInt => "bigint",
            Self::Decimal { .. } => "decimal",
            Self::Money => "money",
            Self::SmallMoney => "smallmoney",
            Self::Real => "real",
            Self::Float => "float",
            Self::Char(_) => "char",
            Self::VarChar(_) => "varchar",
            Self::NChar(_) => "nchar",
            Self::NVarChar(_) => "nvarchar",
            Self::Binary(_) => "binary",
            Self::VarBinary(_) => "varbinary",
            Self::Date => "date",
            Self::Time(_) => "time",
            Self::DateTime => "datetime",
            Self::DateTime2(_) => "datetime2",
            Self::SmallDateTime => "smalldatetime",
            Self::DateTimeOffset(_) => "datetimeoffset",
            Self::UniqueIdentifier => "uniqueidentifier",
        }
    }

    /// `sys.columns.max_length`: bytes, -1 for `(max)`.
    pub fn max_length(self) -> i16 {
        let len = |len: Len, unit: u32| match len {
            Len::N(n) => (n * unit) as i16,
            Len::Max => -1,
        };
        match self {
            Self::Bit | Self::TinyInt => 1,
            Self::SmallInt => 2,
            Self::Int | Self::Real | Self::SmallMoney | Self::SmallDateTime => 4,
            Self::BigInt | Self::Float | Self::Money | Self::DateTime => 8,
            Self::Decimal { precision, .. } => match precision {
                1..=9 => 5,
                10..=19 => 9,
                20..=28 => 13,
                _ => 17,
            },
            Self::Char(n) | Self::Binary(n) => n as i16,
            Self::NChar(n) => (n * 2) as i16,
            Self::VarChar(l) | Self::VarBinary(l) => len(l, 1),
            Self::NVarChar(l) => len(l, 2),
            Self::Date => 3,
            Self::Time(s) => time_bytes(s) as i16,
            Self::DateTime2(s) => time_bytes(s) as i16 + 3,
            Self::DateTimeOffset(s) => time_bytes(s) as i16 + 5,
            Self::UniqueIdentifier => 16,
        }
    }

    /// `sys.columns.precision`.
    pub fn precision(self) -> u8 {
        match self {
            Self::Bit => 1,
            Self::TinyInt => 3,
            Self::SmallInt => 5,
            Self::Int => 10,
            Self::BigInt => 19,
            Self::Decimal { precision, .. } => precision,
            Self::Money => 19,
            Self::SmallMoney => 10,
            Self::Real => 24,
            Self::Float => 53,
            Self::Date => 10,
            Self::Time(s) => if s == 0 { 8 } else { 9 + s },
            Self::DateTime => 23,
            Self::DateTime2(s) => if s == 0 { 19 } else { 20 + s },
            Self::SmallDateTime => 16,
            Self::DateTimeOffset(s) => if s == 0 { 26 } else { 27 + s },
            _ => 0,
        }
    }

    /// `sys.columns.scale`.
    pub fn scale(self) -> u8 {
        match self {
            Self::Decimal { scale, .. } => scale,
            Self::Money | Self::SmallMoney => 4,
            Self::Time(s) | Self::DateTime2(s) | Self::DateTimeOffset(s) => s,
            Self::DateTime => 3,
            _ => 0,
        }
    }

    /// Whether the type holds text.
    pub fn is_text(self) -> bool {
        matches!(self, Self::Char(_) | Self::VarChar(_) | Self::NChar(_) | Self::NVarChar(_))
    }

    /// Whether the type is exact or approximate numeric.
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            Self::Bit | Self::TinyInt | Self::SmallInt | Self::Int | Self::BigInt | Self::Decimal { .. } | Self::Money | Self::SmallMoney | Self::Real | Self::Float
        )
    }
}

/// Bytes of a `time(s)` value on disk and on the wire.
pub fn time_bytes(scale: u8) -> u8 {
    match scale {
        0..=2 => 3,
        3..=4 => 4,
        _ => 5,
    }
}

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = |len: &Len| match len {
            Len::N(n) => n.to_string(),
            Len::Max => "max".to_owned(),
        };
        match self {
            Self::Decimal { precision, scale } => write!(f, "decimal({precision},{scale})"),
            Self::Char(n) | Self::NChar(n) | Self::Binary(n) => write!(f, "{}({n})", self.name()),
            Self::VarChar(l) | Self::NVarChar(l) | Self::VarBinary(l) => write!(f, "{}({})", self.name(), len(l)),
            Self::Time(s) | Self::DateTime2(s) | Self::DateTimeOffset(s) => write!(f, "{}({s})", self.name()),
            other => f.write_str(other.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_parse_as_written_in_tsql() {
        assert_eq!(SqlType::parse("DECIMAL(18, 2)").unwrap(), SqlType::Decimal { precision: 18, scale: 2 });
        assert_eq!(SqlType::parse("numeric").unwrap(), SqlType::Decimal { precision: 18, scale: 0 });
        assert_eq!(SqlType::parse("nvarchar(max)").unwrap(), SqlType::NVarChar(Len::Max));
        assert_eq!(SqlType::parse("datetime2").unwrap(), SqlType::DateTime2(7));
        assert_eq!(SqlType::parse("time(3)").unwrap(), SqlType::Time(3));
        assert_eq!(SqlType::parse("sysname").unwrap(), SYSNAME);
        assert_eq!(SqlType::parse("float(24)").unwrap(), SqlType::Real);
        assert_eq!(SqlType::parse("varchar(8001)").unwrap_err().number, 131);
        assert_eq!(SqlType::parse("char(max)").unwrap_err().number, 2716);
        assert_eq!(SqlType::parse("blob").unwrap_err().number, 2715);
    }

    #[test]
    fn catalog_sizes_follow_sql_server() {
        assert_eq!(SqlType::parse("decimal(18,2)").unwrap().max_length(), 9);
        assert_eq!(SqlType::parse("nvarchar(50)").unwrap().max_length(), 100);
        assert_eq!(SqlType::parse("varbinary(max)").unwrap().max_length(), -1);
        assert_eq!(SqlType::parse("datetime2(7)").unwrap().max_length(), 8);
        assert_eq!(SqlType::parse("datetimeoffset(2)").unwrap().max_length(), 8);
        assert_eq!(SqlType::DateTime2(3).to_string(), "datetime2(3)");
    }
}
