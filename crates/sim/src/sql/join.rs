//! Joining two row sets on an `ON` condition: by hashing when the condition carries an
//! equality between a left column and a right column, by nested loops otherwise.
//!
//! The hash only narrows the pairs the condition is evaluated on: every candidate pair is still
//! checked against the whole condition, so the result is the nested loop's, row for row and in
//! the same order (left rows in order, each with its matching right rows in order). A catalog
//! join of a few tables over 50 captured tables went from about 0.5 s (holding the database
//! lock, so 50 such queries at a source's start-up stalled every other session for 25 s) to
//! milliseconds.

use std::collections::HashMap;

use super::expr::{truth, CExpr, Cmp, Ctx};
use crate::error::SqlResult;
use crate::value::Value;

/// The rows of `left` joined with `right`: pairs the `condition` holds for (every pair when
/// there is none), and for an `outer` join each unmatched left row padded with NULLs.
/// `left_width` and `right_width` are the widths of a left and a right row; the condition
/// reads a left row followed by a right row.
pub fn join(left: &[Vec<Value>], right: &[Vec<Value>], (left_width, right_width): (usize, usize), condition: Option<&CExpr>, outer: bool, ctx: &Ctx<'_>) -> SqlResult<Vec<Vec<Value>>> {
    let index = condition.and_then(|condition| HashIndex::build(condition, left_width, right));
    let every_row: Vec<usize> = (0..right.len()).collect();
    let mut joined = Vec::new();
    for left_row in left {
        let candidates = index.as_ref().and_then(|index| index.candidates(left_row)).unwrap_or(&every_row);
        let mut matched = false;
        for &at in candidates {
            let mut combined = Vec::with_capacity(left_row.len() + right[at].len());
            combined.extend(left_row.iter().cloned());
            combined.extend(right[at].iter().cloned());
            let keep = match condition {
                Some(condition) => truth(&condition.eval(&combined, &[], ctx)?) == Some(true),
                None => true,
            };
            if keep {
                matched = true;
                joined.push(combined);
            }
        }
        if outer && !matched {
            let mut combined = left_row.clone();
            combined.extend(std::iter::repeat_n(Value::Null, right_width));
            joined.push(combined);
        }
    }
    Ok(joined)
}

/// A value's hash key: equal values (as `=` compares them) get equal keys. Only kinds whose
/// equality is plain are hashed: integers, text (trailing spaces do not count) and bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum HashKey {
    Int(i64),
    Text(String),
    Binary(Vec<u8>),
}

impl HashKey {
    /// `Ok(None)` for NULL (it equals nothing); `Err(())` for a kind not hashed.
    fn of(value: &Value) -> Result<Option<Self>, ()> {
        match value {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(Self::Int(*v))),
            Value::Text(text) => Ok(Some(Self::Text(text.trim_end_matches(' ').to_owned()))),
            Value::Binary(bytes) => Ok(Some(Self::Binary(bytes.clone()))),
            _ => Err(()),
        }
    }

    fn kind(&self) -> u8 {
        match self {
            Self::Int(_) => 0,
            Self::Text(_) => 1,
            Self::Binary(_) => 2,
        }
    }
}

/// The right rows by the key of one column, for the left column the condition equates it with.
struct HashIndex {
    left_column: usize,
    kind: Option<u8>,
    rows: HashMap<HashKey, Vec<usize>>,
}

impl HashIndex {
    /// An index for the first usable equality among the condition's `AND`ed terms; `None`
    /// when there is none, or when the right column holds values of a kind not hashed or of
    /// more than one kind (a comparison across kinds converts, which a hash cannot follow).
    fn build(condition: &CExpr, left_width: usize, right: &[Vec<Value>]) -> Option<Self> {
        let mut terms = Vec::new();
        conjuncts(condition, &mut terms);
        terms.into_iter().filter_map(|term| equated_columns(term, left_width)).find_map(|(left_column, right_column)| {
            let mut kind = None;
            let mut rows: HashMap<HashKey, Vec<usize>> = HashMap::new();
            for (at, row) in right.iter().enumerate() {
                let key = HashKey::of(row.get(right_column - left_width)?).ok()?;
                if let Some(key) = key {
                    if *kind.get_or_insert(key.kind()) != key.kind() {
                        return None;
                    }
                    rows.entry(key).or_default().push(at);
                }
            }
            Some(Self { left_column, kind, rows })
        })
    }

    /// The right rows whose key equals the left row's; `None` when the hash cannot place the
    /// left value (a kind other than the right column's, which `=` may convert), so the row is
    /// compared with every right row instead.
    fn candidates(&self, left_row: &[Value]) -> Option<&[usize]> {
        match left_row.get(self.left_column).map(HashKey::of) {
            Some(Ok(Some(key))) if self.kind.is_none_or(|kind| kind == key.kind()) => Some(self.rows.get(&key).map_or(&[], Vec::as_slice)),
            Some(Ok(None)) => Some(&[]),
            _ => None,
        }
    }
}

fn conjuncts<'a>(expr: &'a CExpr, out: &mut Vec<&'a CExpr>) {
    if let CExpr::And(a, b) = expr {
        conjuncts(a, out);
        conjuncts(b, out);
    } else {
        out.push(expr);
    }
}

/// `(left column, right column)` when `term` is `a = b` with one side a left column and the
/// other a right column (scope positions; right columns start at `left_width`).
fn equated_columns(term: &CExpr, left_width: usize) -> Option<(usize, usize)> {
    let CExpr::Compare(Cmp::Eq, a, b) = term else { return None };
    match (a.as_ref(), b.as_ref()) {
        (CExpr::Column(x), CExpr::Column(y)) if *x < left_width && *y >= left_width => Some((*x, *y)),
        (CExpr::Column(x), CExpr::Column(y)) if *y < left_width && *x >= left_width => Some((*y, *x)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    // A test panics on what it did not expect: that is the failure, with its message.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use crate::{SimConfig, Simulator};

    fn rows(sim: &Simulator, sql: &str) -> Vec<Vec<crate::Value>> {
        let mut sets = sim.query(sql).unwrap_or_else(|error| panic!("{sql}: {error}"));
        sets.pop().unwrap().rows
    }

    /// Invariant: a join answered through the hash index gives the nested loop's rows in the
    /// nested loop's order. `(… OR 1 = 0)` keeps the same condition out of the index's reach.
    #[test]
    fn hashed_joins_give_the_nested_loops_rows_in_its_order() {
        let sim = Simulator::new(SimConfig::default());
        let mut sql = String::from(
            "CREATE TABLE dbo.l (id int NOT NULL PRIMARY KEY, k int NULL, t nvarchar(10) NULL, b varbinary(4) NULL);\n\
             CREATE TABLE dbo.r (id int NOT NULL PRIMARY KEY, k bigint NULL, t nvarchar(10) NULL, kt varchar(10) NULL, b varbinary(4) NULL);\n",
        );
        let texts = ["'a'", "'a '", "'A'", "'b'", "NULL", "N''"];
        let mut state = 7_u64;
        let mut draw = |below: u64| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % below
        };
        for id in 0..60 {
            let k = if draw(6) == 0 { "NULL".to_owned() } else { draw(8).to_string() };
            let (t, b) = (texts[draw(6) as usize], ["0x01", "0x0100", "NULL"][draw(3) as usize]);
            sql.push_str(&format!("INSERT INTO dbo.l VALUES ({id}, {k}, {t}, {b});\n"));
            let k = if draw(6) == 0 { "NULL".to_owned() } else { draw(8).to_string() };
            let (t, b) = (texts[draw(6) as usize], ["0x01", "0x0100", "NULL"][draw(3) as usize]);
            sql.push_str(&format!("INSERT INTO dbo.r VALUES ({id}, {k}, {t}, '{}', {b});\n", draw(8)));
        }
        let mut session = sim.session();
        assert!(sim.execute(&mut session, &sql, &[]).error.is_none());
        for (on, outer) in [
            ("l.k = r.k", false),
            ("r.k = l.k AND l.id < r.id", false),
            ("l.k = r.k AND l.id < r.id", true),
            ("l.t = r.t", false),
            ("l.t = r.t", true),
            ("l.b = r.b", false),
            // An int against text: SQL Server converts, a hash cannot; the loop answers.
            ("l.k = r.kt", false),
            ("l.id = r.id", true),
        ] {
            let kind = if outer { "LEFT JOIN" } else { "JOIN" };
            let hashed = rows(&sim, &format!("SELECT l.id, r.id FROM dbo.l l {kind} dbo.r r ON {on}"));
            let looped = rows(&sim, &format!("SELECT l.id, r.id FROM dbo.l l {kind} dbo.r r ON ({on} OR 1 = 0)"));
            assert!(!looped.is_empty(), "{on}: the data gives the join rows to compare");
            assert_eq!(hashed, looped, "ON {on} ({kind})");
        }
        // Three tables: the second join hashes on a column the first join brought in.
        let hashed = rows(&sim, "SELECT a.id, b.id, c.id FROM dbo.l a JOIN dbo.r b ON b.k = a.k JOIN dbo.l c ON c.t = b.t");
        let looped = rows(&sim, "SELECT a.id, b.id, c.id FROM dbo.l a JOIN dbo.r b ON (b.k = a.k OR 1 = 0) JOIN dbo.l c ON (c.t = b.t OR 1 = 0)");
        assert!(!looped.is_empty());
        assert_eq!(hashed, looped, "three tables");
    }
}
