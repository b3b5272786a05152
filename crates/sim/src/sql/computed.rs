//! Computed columns: `name AS (expression) [PERSISTED]` in `CREATE TABLE` and
//! `ALTER TABLE ... ADD`.
//!
//! SQL Server derives a computed column's type from its expression and recomputes its value
//! whenever the row is written; a statement cannot write it (error 271). Change data capture
//! stores NULL for it in every change row, persisted or not (Microsoft: "Change data capture
//! and other SQL Server features", computed columns).
//!
//! sqlparser's MS SQL dialect has no grammar for the type-less definition, so a batch's tokens
//! are rewritten before parsing: `name AS (` in a column definition becomes
//! `name __computed GENERATED ALWAYS AS (`, and a `PERSISTED` after the closing parenthesis is
//! dropped. [`is_marker`] recognises the placeholder type; the column's real type comes from
//! [`infer_types`] once the table's other columns are known.

use std::collections::HashMap;

use sqlparser::ast::{DataType, Expr};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::expr::{Compiler, Ctx, ScopeColumn, SessionInfo};
use crate::db::Database;
use crate::error::{SqlError, SqlResult};
use crate::table::{Column, Table};
use crate::types::{Len, SqlType};
use crate::value::Value;
use crate::versions::ReadView;

/// The placeholder type the rewrite gives a computed column.
const MARKER: &str = "__computed";

/// Whether a parsed column type is the rewrite's placeholder.
pub fn is_marker(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Custom(name, args) if args.is_empty() && name.to_string().eq_ignore_ascii_case(MARKER))
}

/// The statement text as T-SQL wrote it, from the parsed statement's rendering.
pub fn original_text(rendered: &str) -> String {
    rendered.replace(&format!(" {MARKER} GENERATED ALWAYS AS ("), " AS (")
}

fn is_word(token: &Token, keyword: Keyword) -> bool {
    matches!(token, Token::Word(w) if w.keyword == keyword)
}

/// Rewrites every computed-column definition of a batch's tokens (see the module docs); the
/// tokens of anything else are left as they are.
pub fn rewrite(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let significant: Vec<usize> = (0..tokens.len()).filter(|&i| !matches!(tokens[i].token, Token::Whitespace(_))).collect();
    let at = |n: usize| significant.get(n).map(|&i| &tokens[i].token);
    // Indexes (into `tokens`) after which the placeholder goes, and of PERSISTED words to drop.
    let mut inserts = Vec::new();
    let mut drops = Vec::new();
    // Per statement: whether it is CREATE TABLE / ALTER TABLE, and the parenthesis depth.
    let mut in_table_ddl = false;
    let mut depth = 0usize;
    for n in 0..significant.len() {
        let token = &tokens[significant[n]].token;
        match token {
            Token::SemiColon => {
                in_table_ddl = false;
                depth = 0;
                continue;
            }
            Token::LParen => depth += 1,
            Token::RParen => depth = depth.saturating_sub(1),
            _ => {}
        }
        if n > 0 && is_word(token, Keyword::TABLE) && at(n - 1).is_some_and(|t| is_word(t, Keyword::CREATE) || is_word(t, Keyword::ALTER)) {
            in_table_ddl = true;
            depth = 0;
        }
        let starts_definition = n > 0 && at(n - 1).is_some_and(|t| matches!(t, Token::LParen | Token::Comma) && depth == 1 || is_word(t, Keyword::ADD) && depth == 0);
        if !in_table_ddl || !starts_definition || !matches!(token, Token::Word(_)) {
            continue;
        }
        if !(at(n + 1).is_some_and(|t| is_word(t, Keyword::AS)) && at(n + 2).is_some_and(|t| matches!(t, Token::LParen))) {
            continue;
        }
        inserts.push(significant[n]);
        // The expression's closing parenthesis, then an optional PERSISTED.
        let mut level = 0usize;
        let mut m = n + 2;
        while let Some(t) = at(m) {
            match t {
                Token::LParen => level += 1,
                Token::RParen => {
                    level -= 1;
                    if level == 0 {
                        break;
                    }
                }
                _ => {}
            }
            m += 1;
        }
        if at(m + 1).is_some_and(|t| matches!(t, Token::Word(w) if w.value.eq_ignore_ascii_case("PERSISTED"))) {
            drops.push(significant[m + 1]);
        }
    }
    if inserts.is_empty() {
        return tokens;
    }
    let mut out = Vec::with_capacity(tokens.len() + 4 * inserts.len());
    for (index, token) in tokens.into_iter().enumerate() {
        if drops.contains(&index) {
            continue;
        }
        let span = token.span;
        out.push(token);
        if inserts.contains(&index) {
            for word in [MARKER, "GENERATED", "ALWAYS"] {
                out.push(TokenWithSpan::new(Token::Whitespace(sqlparser::tokenizer::Whitespace::Space), span));
                out.push(TokenWithSpan::new(Token::make_word(word, None), span));
            }
        }
    }
    out
}

/// The scope a table's own expressions see (its columns, by name).
fn scope_of(table_name: &str, columns: &[Column]) -> Vec<ScopeColumn> {
    let qualifier = table_name.to_ascii_lowercase();
    columns.iter().map(|c| ScopeColumn { qualifiers: vec![qualifier.clone()], name: c.name.clone(), ty: c.ty, nullable: c.nullable }).collect()
}

/// A value of type `ty` to evaluate expressions on when their type is wanted.
fn sample(ty: SqlType) -> Value {
    let text = match ty {
        SqlType::Date => "2000-01-01",
        SqlType::Time(_) => "00:00:00",
        SqlType::DateTime | SqlType::DateTime2(_) | SqlType::SmallDateTime | SqlType::DateTimeOffset(_) => "2000-01-01 00:00:00",
        SqlType::UniqueIdentifier => "00000000-0000-0000-0000-000000000000",
        SqlType::Binary(_) | SqlType::VarBinary(_) => return Value::Binary(vec![1]),
        _ => "1",
    };
    Value::Text(text.to_owned()).cast(ty).unwrap_or(Value::Null)
}

/// The type SQL Server would give a value of the expression's result: integers stay `int`
/// (or `bigint`), decimals keep their scale at full precision, text is `nvarchar(max)`.
fn type_of(value: &Value) -> SqlType {
    match value {
        Value::Numeric { scale, .. } => SqlType::Decimal { precision: 38, scale: *scale },
        Value::Text(_) => SqlType::NVarChar(Len::Max),
        Value::Binary(_) => SqlType::VarBinary(Len::Max),
        other => other.natural_type(),
    }
}

/// Gives each computed column of a table being defined its type, from its expression
/// evaluated over a row of sample values of the other columns.
pub fn infer_types(db: &Database, table_name: &str, columns: &mut [Column]) -> SqlResult<()> {
    let scope = scope_of(table_name, columns);
    let row: Vec<Value> = columns.iter().map(|c| if c.computed.is_some() { Value::Null } else { sample(c.ty) }).collect();
    let params = HashMap::new();
    let ctx = Ctx { db, params: &params, session: SessionInfo::default(), view: ReadView::Dirty };
    let mut types = Vec::new();
    for column in columns.iter() {
        types.push(match &column.computed {
            Some(expr) => Some(type_of(&compile(&scope, &params, expr)?.eval(&row, &[], &ctx)?)),
            None => None,
        });
    }
    for (column, ty) in columns.iter_mut().zip(types) {
        if let Some(ty) = ty {
            column.ty = ty;
        }
    }
    Ok(())
}

fn compile(scope: &[ScopeColumn], params: &HashMap<String, Value>, expr: &Expr) -> SqlResult<super::expr::CExpr> {
    Compiler { scope, params, session: SessionInfo::default(), aggs: None }.compile(expr)
}

/// Sets a row's computed columns from its other values, as a write leaves them.
pub fn fill(db: &Database, table: &Table, row: &mut [Value]) -> SqlResult<()> {
    if table.columns.iter().all(|c| c.computed.is_none()) {
        return Ok(());
    }
    let scope = scope_of(&table.name, &table.columns);
    let params = HashMap::new();
    let ctx = Ctx { db, params: &params, session: SessionInfo::default(), view: ReadView::Dirty };
    for (index, column) in table.columns.iter().enumerate() {
        if let Some(expr) = &column.computed {
            let value = compile(&scope, &params, expr)?.eval(row, &[], &ctx)?;
            row[index] = if value.is_null() { Value::Null } else { value.cast(column.ty)? };
        }
    }
    Ok(())
}

/// Refuses a statement that writes a computed column (error 271).
pub fn check_writable(table: &Table, index: usize) -> SqlResult<()> {
    match table.columns.get(index) {
        Some(column) if column.computed.is_some() => Err(SqlError::new(
            271,
            16,
            format!("The column \"{}\" cannot be modified because it is either a computed column or is the result of a UNION operator.", column.name),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlparser::dialect::MsSqlDialect;
    use sqlparser::tokenizer::Tokenizer;

    fn rewritten(sql: &str) -> String {
        let tokens = Tokenizer::new(&MsSqlDialect {}, sql).tokenize_with_location().unwrap();
        rewrite(tokens).into_iter().map(|t| t.token.to_string()).collect()
    }

    /// Invariant: only column definitions of CREATE / ALTER TABLE are rewritten; an `AS (` in a
    /// query is left alone.
    #[test]
    fn only_column_definitions_are_rewritten() {
        assert_eq!(
            rewritten("CREATE TABLE t (id int PRIMARY KEY, qty int, total AS (qty * (2 + 1)) PERSISTED, note nvarchar(10))"),
            "CREATE TABLE t (id int PRIMARY KEY, qty int, total __computed GENERATED ALWAYS AS (qty * (2 + 1)) , note nvarchar(10))"
        );
        assert_eq!(rewritten("ALTER TABLE dbo.t ADD doubled AS (qty * 2)"), "ALTER TABLE dbo.t ADD doubled __computed GENERATED ALWAYS AS (qty * 2)");
        let query = "SELECT CAST(qty AS int) AS x FROM t; WITH c AS (SELECT 1 AS one) SELECT * FROM c";
        assert_eq!(rewritten(query), query);
        assert_eq!(original_text(&rewritten("ALTER TABLE t ADD d AS (qty * 2)")), "ALTER TABLE t ADD d AS (qty * 2)");
    }
}
