//! Keyset reads of a table: the T-SQL that reads the rows after a key, in key order, and the key
//! values as the control record keeps them (JSON) and as the next read binds them.
//!
//! A snapshot reads `snapshot_fetch_rows` rows at a time with `SELECT TOP (n) ... WHERE <after
//! the last key> ORDER BY <key>`: a seek on the clustered or unique index, so each read costs
//! its rows, not the table, and memory stays constant for any table size. Keys that are not
//! unique (`snapshot_keys` on a table without a unique index) read `TOP (n) WITH TIES`, so the
//! rows sharing the last value come in the same read and the next one starts after them.

use chrono::{DateTime, FixedOffset, NaiveDate, NaiveDateTime, NaiveTime};
use serde_json::Value as Json;
use tiberius::numeric::Numeric;
use tiberius::{ColumnData, FromSql, IntoSql};

use super::reader::quote;
use mssql_cdc_core::log::control::ChunkBounds;
use mssql_cdc_core::log::schema::ColumnType;

/// A key column: its name and log type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyColumn {
    /// The column name.
    pub name: String,
    /// Its type on the log.
    pub ty: ColumnType,
    /// The SQL type its bound value is cast to ([`param_cast`]), if any.
    pub param_cast: Option<&'static str>,
}

/// The type a key value bound as a parameter must be cast to so the comparison runs in the
/// column's own type, for the column types whose parameter type differs: a `varchar`/`char`
/// column compared with an `nvarchar` parameter would be converted (a different order under
/// SQL collations, and no seek), a `datetime` with a `datetime2` one re-reads the boundary row,
/// `money` with `decimal` converts the column. `None`: the parameter already has the column's
/// type.
pub fn param_cast(sql_type: &str) -> Option<&'static str> {
    match sql_type {
        "varchar" | "char" => Some("varchar(8000)"),
        "datetime" => Some("datetime"),
        "smalldatetime" => Some("smalldatetime"),
        "money" => Some("money"),
        "smallmoney" => Some("smallmoney"),
        _ => None,
    }
}

/// A key value the keyset cannot carry.
#[derive(Debug, thiserror::Error)]
pub enum KeysetError {
    /// A value the control record holds does not read back as the column's type.
    #[error("snapshot key column `{column}`: `{value}` is not a {ty:?} value")]
    BadValue {
        /// The column.
        column: String,
        /// The value as stored.
        value: String,
        /// The column's type.
        ty: ColumnType,
    },
    /// A NULL in a composite key at a read boundary: rows after it cannot be sought.
    #[error("snapshot key column `{column}` is NULL at a read boundary of a composite key; use NOT NULL columns as snapshot_keys")]
    NullInCompositeKey {
        /// The column.
        column: String,
    },
}

/// The query reading up to `fetch` rows after `after` (the first read when `None`), in key
/// order. `select` is the list the change rows are read with; `unique` says whether rows with
/// equal keys are impossible (else `WITH TIES` keeps them together). Parameters are the key
/// values from `@P1` on ([`params`]).
pub fn chunk_query(table: &str, select: &[String], keys: &[KeyColumn], unique: bool, fetch: u64, after: Option<&[Json]>) -> Result<String, KeysetError> {
    let ties = if unique { "" } else { " WITH TIES" };
    let order = keys.iter().map(|k| quote(&k.name)).collect::<Vec<_>>().join(", ");
    let filter = match after {
        None => String::new(),
        Some(values) => format!(" WHERE {}", after_key(keys, values)?),
    };
    Ok(format!("SELECT TOP ({fetch}){ties} {} FROM {table}{filter} ORDER BY {order}", select.join(", ")))
}

/// `(k1, k2, ...) > (@P1, @P2, ...)` in index order, as a seekable predicate: the leading
/// column bounded first, then the lexicographic comparison. A single NULL key (a unique index
/// allows one; ties keep non-unique ones together) continues with the non-NULL values.
fn after_key(keys: &[KeyColumn], values: &[Json]) -> Result<String, KeysetError> {
    compare_key(keys, values, 1, Bound::After, false)
}

/// Which side of a key value a predicate keeps.
#[derive(Clone, Copy, PartialEq)]
enum Bound {
    /// The keys after it.
    After,
    /// The keys up to it, itself included (NULL, first in key order, too).
    Through,
}

/// The lexicographic comparison of the key with `values` bound from `@P{first}` on;
/// `lead_null`: whether a NULL leading column can be in range (else its test is left out, so
/// the predicate stays a seek).
fn compare_key(keys: &[KeyColumn], values: &[Json], first: usize, bound: Bound, lead_null: bool) -> Result<String, KeysetError> {
    let column = |i: usize| quote(&keys[i].name);
    let param = |i: usize| match keys[i].param_cast {
        Some(ty) => format!("CAST(@P{} AS {ty})", i + first),
        None => format!("@P{}", i + first),
    };
    if let [value] = values
        && value.is_null()
    {
        return Ok(match bound {
            Bound::After => format!("{} IS NOT NULL", column(0)),
            Bound::Through => format!("{} IS NULL", column(0)),
        });
    }
    if let Some(index) = values.iter().position(Json::is_null) {
        return Err(KeysetError::NullInCompositeKey { column: keys[index].name.clone() });
    }
    // NULL sorts first: "after a value" never holds for it (a comparison with NULL is not
    // true), "up to a value" must say so.
    let compare = |i: usize, op: &str| match bound {
        Bound::Through if i > 0 || lead_null => format!("({c} IS NULL OR {c} {op} {p})", c = column(i), p = param(i)),
        _ => format!("{} {op} {}", column(i), param(i)),
    };
    let (lead, strict, last_op) = match bound {
        Bound::After => (">=", ">", ">"),
        Bound::Through => ("<=", "<", "<="),
    };
    if keys.len() == 1 {
        return Ok(compare(0, last_op));
    }
    let alternatives: Vec<String> = (0..keys.len())
        .map(|last| {
            let mut parts: Vec<String> = (0..last).map(|i| format!("{} = {}", column(i), param(i))).collect();
            let op = if last + 1 == keys.len() { last_op } else { strict };
            parts.push(compare(last, op));
            format!("({})", parts.join(" AND "))
        })
        .collect();
    Ok(format!("{} AND ({})", compare(0, lead), alternatives.join(" OR ")))
}

/// The filter of one chunk of a chunked snapshot, `WHERE` excluded, with its parameters: the
/// keys after `bounds.after` and up to `bounds.through` (NULL of a single key column belongs
/// to the first chunk); `None` for the one chunk of a one-chunk plan.
pub fn range_filter(keys: &[KeyColumn], bounds: &ChunkBounds) -> Result<(Option<String>, Vec<ColumnData<'static>>), KeysetError> {
    let mut parts = Vec::new();
    let mut bound = Vec::new();
    if let Some(after) = &bounds.after {
        parts.push(compare_key(keys, after, 1, Bound::After, false)?);
        bound.extend(params(keys, after)?);
    }
    if let Some(through) = &bounds.through {
        // After a bound, a NULL leading column is out of range already.
        parts.push(compare_key(keys, through, bound.len() + 1, Bound::Through, bounds.after.is_none())?);
        bound.extend(params(keys, through)?);
    }
    Ok(((!parts.is_empty()).then(|| parts.join(" AND ")), bound))
}

/// The parameters binding `values` (skipping a lone NULL, which the predicate tests itself).
pub fn params(keys: &[KeyColumn], values: &[Json]) -> Result<Vec<ColumnData<'static>>, KeysetError> {
    if values.iter().all(Json::is_null) {
        return Ok(Vec::new());
    }
    keys.iter().zip(values).map(|(key, value)| from_json(value, key)).collect()
}

/// A key value as the control record keeps it: numbers as numbers, decimals and temporal values
/// as their ISO text, binary as `0x` hex, GUIDs as upper-case text.
pub fn to_json(data: &ColumnData<'static>) -> Json {
    match data {
        ColumnData::U8(v) => v.map_or(Json::Null, Json::from),
        ColumnData::I16(v) => v.map_or(Json::Null, Json::from),
        ColumnData::I32(v) => v.map_or(Json::Null, Json::from),
        ColumnData::I64(v) => v.map_or(Json::Null, Json::from),
        ColumnData::F32(v) => v.map_or(Json::Null, |v| Json::from(f64::from(v))),
        ColumnData::F64(v) => v.map_or(Json::Null, Json::from),
        ColumnData::Bit(v) => v.map_or(Json::Null, Json::from),
        ColumnData::String(v) => v.as_ref().map_or(Json::Null, |s| Json::from(s.as_ref())),
        ColumnData::Guid(v) => v.map_or(Json::Null, |g| Json::from(g.to_string().to_uppercase())),
        ColumnData::Binary(v) => v.as_ref().map_or(Json::Null, |b| Json::from(format!("0x{}", b.iter().map(|x| format!("{x:02X}")).collect::<String>()))),
        ColumnData::Numeric(v) => v.map_or(Json::Null, |n| Json::from(n.to_string())),
        ColumnData::Date(_) => NaiveDate::from_sql(data).ok().flatten().map_or(Json::Null, |d| Json::from(d.format("%Y-%m-%d").to_string())),
        ColumnData::Time(_) => NaiveTime::from_sql(data).ok().flatten().map_or(Json::Null, |t| Json::from(t.format("%H:%M:%S%.f").to_string())),
        ColumnData::DateTime(_) | ColumnData::SmallDateTime(_) | ColumnData::DateTime2(_) => {
            NaiveDateTime::from_sql(data).ok().flatten().map_or(Json::Null, |t| Json::from(t.format("%Y-%m-%dT%H:%M:%S%.f").to_string()))
        }
        ColumnData::DateTimeOffset(_) => DateTime::<FixedOffset>::from_sql(data).ok().flatten().map_or(Json::Null, |t| Json::from(t.to_rfc3339())),
        ColumnData::Xml(v) => v.as_ref().map_or(Json::Null, |x| Json::from(x.to_string())),
    }
}

/// A key value read back from the control record as a parameter of the column's type.
pub fn from_json(value: &Json, key: &KeyColumn) -> Result<ColumnData<'static>, KeysetError> {
    let bad = || KeysetError::BadValue { column: key.name.clone(), value: value.to_string(), ty: key.ty };
    let text = || value.as_str().ok_or_else(bad);
    let integer = || value.as_i64().ok_or_else(bad);
    Ok(match key.ty {
        ColumnType::Boolean => ColumnData::Bit(Some(value.as_bool().ok_or_else(bad)?)),
        ColumnType::Int16 => ColumnData::I16(Some(i16::try_from(integer()?).map_err(|_| bad())?)),
        ColumnType::Int32 => ColumnData::I32(Some(i32::try_from(integer()?).map_err(|_| bad())?)),
        ColumnType::Int64 => ColumnData::I64(Some(integer()?)),
        ColumnType::Float32 => ColumnData::F32(Some(value.as_f64().ok_or_else(bad)? as f32)),
        ColumnType::Float64 => ColumnData::F64(Some(value.as_f64().ok_or_else(bad)?)),
        ColumnType::Decimal { .. } => ColumnData::Numeric(Some(parse_numeric(text()?).ok_or_else(bad)?)),
        ColumnType::String => ColumnData::String(Some(text()?.to_owned().into())),
        ColumnType::Uuid => ColumnData::Guid(Some(text()?.parse().map_err(|_| bad())?)),
        ColumnType::Binary => {
            let hex = text()?.strip_prefix("0x").ok_or_else(bad)?;
            let bytes: Option<Vec<u8>> = (0..hex.len()).step_by(2).map(|i| hex.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok())).collect();
            ColumnData::Binary(Some(bytes.ok_or_else(bad)?.into()))
        }
        ColumnType::Date => NaiveDate::parse_from_str(text()?, "%Y-%m-%d").map_err(|_| bad())?.into_sql(),
        ColumnType::Time => NaiveTime::parse_from_str(text()?, "%H:%M:%S%.f").map_err(|_| bad())?.into_sql(),
        ColumnType::LocalTimestamp => NaiveDateTime::parse_from_str(text()?, "%Y-%m-%dT%H:%M:%S%.f").map_err(|_| bad())?.into_sql(),
        ColumnType::Timestamp => DateTime::parse_from_rfc3339(text()?).map_err(|_| bad())?.into_sql(),
    })
}

/// `-12.50` → a numeric with scale 2.
fn parse_numeric(text: &str) -> Option<Numeric> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let scale = u8::try_from(fraction.len()).ok().filter(|s| *s <= 37)?;
    let digits: i128 = format!("{whole}{fraction}").parse().ok()?;
    Some(Numeric::new_with_scale(digits, scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, ty: ColumnType) -> KeyColumn {
        KeyColumn { name: name.into(), ty, param_cast: None }
    }

    /// Invariant: a key value survives the control record: what a read ends on is what the next
    /// read starts after, for every key type.
    #[test]
    fn key_values_round_trip_through_json() {
        let cases: Vec<(ColumnType, ColumnData<'static>)> = vec![
            (ColumnType::Int64, ColumnData::I64(Some(-9_000_000_000))),
            (ColumnType::Int32, ColumnData::I32(Some(7))),
            (ColumnType::Int16, ColumnData::I16(Some(-3))),
            (ColumnType::Boolean, ColumnData::Bit(Some(true))),
            (ColumnType::String, ColumnData::String(Some("Zürich ✓".into()))),
            (ColumnType::Uuid, ColumnData::Guid(Some("6F9619FF-8B86-D011-B42D-00C04FC964FF".parse().unwrap()))),
            (ColumnType::Binary, ColumnData::Binary(Some(vec![0u8, 1, 255].into()))),
            (ColumnType::Decimal { precision: 18, scale: 2 }, ColumnData::Numeric(Some(Numeric::new_with_scale(-1250, 2)))),
            (ColumnType::Float64, ColumnData::F64(Some(0.1))),
            (ColumnType::Date, NaiveDate::from_ymd_opt(2026, 3, 29).unwrap().into_sql()),
            (ColumnType::LocalTimestamp, NaiveDate::from_ymd_opt(2026, 3, 29).unwrap().and_hms_nano_opt(2, 30, 0, 123_456_700).unwrap().into_sql()),
            (ColumnType::Timestamp, DateTime::parse_from_rfc3339("2026-03-29T02:30:00.1234567-03:00").unwrap().into_sql()),
        ];
        for (ty, data) in cases {
            let json = to_json(&data);
            let back = from_json(&json, &key("k", ty)).unwrap_or_else(|e| panic!("{ty:?}: {e}"));
            assert_eq!(to_json(&back), json, "{ty:?}");
        }
        assert!(from_json(&Json::from("12"), &key("k", ColumnType::Int64)).is_err());
    }

    #[test]
    fn reads_seek_after_the_last_key_in_index_order() {
        let one = [key("id", ColumnType::Int64)];
        let select = vec!["[id]".to_owned(), "[name]".to_owned()];
        assert_eq!(chunk_query("[dbo].[t]", &select, &one, true, 100, None).unwrap(), "SELECT TOP (100) [id], [name] FROM [dbo].[t] ORDER BY [id]");
        assert_eq!(
            chunk_query("[dbo].[t]", &select, &one, false, 100, Some(&[Json::from(5)])).unwrap(),
            "SELECT TOP (100) WITH TIES [id], [name] FROM [dbo].[t] WHERE [id] > @P1 ORDER BY [id]"
        );
        assert_eq!(chunk_query("[dbo].[t]", &select, &one, true, 10, Some(&[Json::Null])).unwrap(), "SELECT TOP (10) [id], [name] FROM [dbo].[t] WHERE [id] IS NOT NULL ORDER BY [id]");
        let two = [key("a", ColumnType::Int32), key("b", ColumnType::String)];
        assert_eq!(
            chunk_query("[dbo].[t]", &select, &two, true, 10, Some(&[Json::from(1), Json::from("x")])).unwrap(),
            "SELECT TOP (10) [id], [name] FROM [dbo].[t] WHERE [a] >= @P1 AND (([a] > @P1) OR ([a] = @P1 AND [b] > @P2)) ORDER BY [a], [b]"
        );
        assert!(chunk_query("[dbo].[t]", &select, &two, true, 10, Some(&[Json::Null, Json::from("x")])).is_err());
        assert!(params(&one, &[Json::Null]).unwrap().is_empty());
    }

    /// Invariant: consecutive chunks share a bound, the earlier one keeping the bound's own
    /// key and the later one the keys after it, so the plan's chunks tile the key space.
    #[test]
    fn chunk_filters_meet_at_their_shared_bound() {
        let one = [key("id", ColumnType::Int64)];
        let first = ChunkBounds { after: None, through: Some(vec![Json::from(10)]) };
        let middle = ChunkBounds { after: Some(vec![Json::from(10)]), through: Some(vec![Json::from(20)]) };
        let (filter, bound) = range_filter(&one, &first).unwrap();
        assert_eq!(filter.as_deref(), Some("([id] IS NULL OR [id] <= @P1)"));
        assert_eq!(bound.len(), 1);
        let (filter, bound) = range_filter(&one, &middle).unwrap();
        assert_eq!(filter.as_deref(), Some("[id] > @P1 AND [id] <= @P2"), "a seek, without the NULL test the lower bound makes needless");
        assert_eq!(bound.len(), 2);
        assert_eq!(range_filter(&one, &ChunkBounds { after: None, through: None }).unwrap().0, None);
        let nulls = ChunkBounds { after: None, through: Some(vec![Json::Null]) };
        let (filter, bound) = range_filter(&one, &nulls).unwrap();
        assert_eq!((filter.as_deref(), bound.len()), (Some("[id] IS NULL"), 0));
        let after_nulls = ChunkBounds { after: Some(vec![Json::Null]), through: Some(vec![Json::from(3)]) };
        assert_eq!(range_filter(&one, &after_nulls).unwrap().0.as_deref(), Some("[id] IS NOT NULL AND [id] <= @P1"));
        let two = [key("a", ColumnType::Int32), key("b", ColumnType::String)];
        let (filter, bound) = range_filter(&two, &ChunkBounds { after: Some(vec![Json::from(1), Json::from("x")]), through: Some(vec![Json::from(2), Json::from("y")]) }).unwrap();
        assert_eq!(
            filter.as_deref(),
            Some(
                "[a] >= @P1 AND (([a] > @P1) OR ([a] = @P1 AND [b] > @P2)) AND [a] <= @P3 AND (([a] < @P3) OR ([a] = @P3 AND ([b] IS NULL OR [b] <= @P4)))"
            )
        );
        assert_eq!(bound.len(), 4);
    }

    /// Invariant: a bound key value compares in the key column's own type, so the seek keeps
    /// the column's order and does not re-read the boundary row.
    #[test]
    fn bound_values_are_cast_to_the_columns_type() {
        let select = vec!["[code]".to_owned()];
        let keys = [KeyColumn { name: "code".into(), ty: ColumnType::String, param_cast: param_cast("varchar") }, KeyColumn { name: "at".into(), ty: ColumnType::LocalTimestamp, param_cast: param_cast("datetime") }];
        assert_eq!(
            chunk_query("[dbo].[t]", &select, &keys, true, 5, Some(&[Json::from("A"), Json::from("2026-01-01T00:00:00.003333333")])).unwrap(),
            "SELECT TOP (5) [code] FROM [dbo].[t] WHERE [code] >= CAST(@P1 AS varchar(8000)) AND (([code] > CAST(@P1 AS varchar(8000))) OR ([code] = CAST(@P1 AS varchar(8000)) AND [at] > CAST(@P2 AS datetime))) ORDER BY [code], [at]"
        );
        assert_eq!(param_cast("nvarchar"), None);
        assert_eq!(param_cast("datetime2"), None);
        assert_eq!(param_cast("int"), None);
    }
}
