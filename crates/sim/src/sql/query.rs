//! `SELECT`: FROM (with joins), WHERE (seeking the leading key where bounded), GROUP BY with
//! aggregates, HAVING, DISTINCT, ORDER BY (NULLs first ascending), TOP.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use sqlparser::ast::{self, Expr, GroupByExpr, JoinConstraint, JoinOperator, OrderByKind, Query, SelectItem, SetExpr, TableFactor, TopQuantity};

use super::expr::{object_name, truth, AggCall, AggFn, CExpr, Cmp, Compiler, Ctx, ScopeColumn};
use super::sources::{KeyRange, Source};
use super::ResultSet;
use crate::error::{SqlError, SqlResult};
use crate::table::RowKey;
use crate::types::SqlType;
use crate::value::{arithmetic, sort_order, Arith, Value};
use crate::versions::ReadView;

/// An ORDER BY item: an output column, or an expression over the source.
enum SortKey {
    Output(usize),
    Expr(CExpr),
}

/// Runs a query.
pub fn run(query: &Query, ctx: &Ctx<'_>) -> SqlResult<ResultSet> {
    if query.with.is_some() {
        return Err(SqlError::unsupported("common table expressions"));
    }
    if query.limit_clause.is_some() || query.fetch.is_some() {
        return Err(SqlError::unsupported("OFFSET/FETCH"));
    }
    let select = match query.body.as_ref() {
        SetExpr::Select(select) => select,
        SetExpr::Query(inner) if query.order_by.is_none() => return run(inner, ctx),
        other => return Err(SqlError::unsupported(&format!("the query form `{other}`"))),
    };
    if select.into.is_some() {
        return Err(SqlError::unsupported("SELECT INTO"));
    }

    // FROM: describe every source, then scan.
    let mut scope: Vec<ScopeColumn> = Vec::new();
    let mut rows: Vec<Vec<Value>> = vec![Vec::new()];
    let single = select.from.len() == 1 && select.from[0].joins.is_empty();
    let mut compiler_scope_sources: Vec<Source<'_>> = Vec::new();
    for from in &select.from {
        compiler_scope_sources.push(open(&from.relation, ctx)?);
        for join in &from.joins {
            compiler_scope_sources.push(open(&join.relation, ctx)?);
        }
    }
    for source in &compiler_scope_sources {
        scope.extend(source.columns.iter().cloned());
    }

    let where_clause = match &select.selection {
        Some(expr) => Some(Compiler { scope: &scope, params: ctx.params, session: ctx.session, aggs: None }.compile(expr)?),
        None => None,
    };

    // Projection (wildcards expanded), aggregates, grouping.
    let mut aggs: Vec<AggCall> = Vec::new();
    let mut outputs: Vec<(String, CExpr)> = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::Wildcard(_) => {
                if scope.is_empty() {
                    return Err(SqlError::new(263, 16, "Must specify table to select from."));
                }
                outputs.extend(scope.iter().enumerate().map(|(i, c)| (c.name.clone(), CExpr::Column(i))));
            }
            SelectItem::QualifiedWildcard(kind, _) => {
                let qualifier = kind.to_string().to_ascii_lowercase();
                let before = outputs.len();
                outputs.extend(
                    scope
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| c.qualifiers.contains(&qualifier))
                        .map(|(i, c)| (c.name.clone(), CExpr::Column(i))),
                );
                if outputs.len() == before {
                    return Err(SqlError::new(4104, 16, format!("The multi-part identifier \"{qualifier}\" could not be bound.")));
                }
            }
            SelectItem::UnnamedExpr(expr) => {
                let compiled = Compiler { scope: &scope, params: ctx.params, session: ctx.session, aggs: Some(&mut aggs) }.compile(expr)?;
                outputs.push((column_name(expr), compiled));
            }
            SelectItem::ExprWithAliases { .. } => return Err(SqlError::unsupported("several aliases for one select item")),
            SelectItem::ExprWithAlias { expr, alias } => {
                let compiled = Compiler { scope: &scope, params: ctx.params, session: ctx.session, aggs: Some(&mut aggs) }.compile(expr)?;
                outputs.push((alias.value.clone(), compiled));
            }
        }
    }
    let group_by: Vec<CExpr> = match &select.group_by {
        GroupByExpr::Expressions(exprs, _) => exprs
            .iter()
            .map(|e| Compiler { scope: &scope, params: ctx.params, session: ctx.session, aggs: None }.compile(e))
            .collect::<SqlResult<_>>()?,
        GroupByExpr::All(_) => return Err(SqlError::unsupported("GROUP BY ALL")),
    };
    let having = match &select.having {
        Some(expr) => Some(Compiler { scope: &scope, params: ctx.params, session: ctx.session, aggs: Some(&mut aggs) }.compile(expr)?),
        None => None,
    };

    // ORDER BY: output alias, ordinal, or an expression over the source.
    let mut sort: Vec<(SortKey, bool)> = Vec::new();
    if let Some(order_by) = &query.order_by {
        let OrderByKind::Expressions(items) = &order_by.kind else {
            return Err(SqlError::unsupported("ORDER BY ALL"));
        };
        for item in items {
            let ascending = item.options.asc.unwrap_or(true);
            let key = match &item.expr {
                Expr::Value(value) if matches!(value.value, ast::Value::Number(..)) => {
                    let ordinal: usize = value.value.to_string().parse().map_err(|_| SqlError::syntax("ORDER BY position"))?;
                    if ordinal == 0 || ordinal > outputs.len() {
                        return Err(SqlError::new(108, 16, format!("The ORDER BY position number {ordinal} is out of range of the number of items in the select list.")));
                    }
                    SortKey::Output(ordinal - 1)
                }
                Expr::Identifier(ident) if outputs.iter().any(|(name, _)| name.eq_ignore_ascii_case(&ident.value)) && {
                    // An alias wins only when the name is not also a source column.
                    Compiler { scope: &scope, params: ctx.params, session: ctx.session, aggs: None }.resolve(std::slice::from_ref(&ident.value)).is_err()
                        || outputs.iter().any(|(name, e)| name.eq_ignore_ascii_case(&ident.value) && !matches!(e, CExpr::Column(_)))
                } => SortKey::Output(outputs.iter().position(|(name, _)| name.eq_ignore_ascii_case(&ident.value)).unwrap_or(0)),
                expr => SortKey::Expr(Compiler { scope: &scope, params: ctx.params, session: ctx.session, aggs: Some(&mut aggs) }.compile(expr)?),
            };
            sort.push((key, ascending));
        }
    }

    let aggregated = !aggs.is_empty() || !group_by.is_empty();
    // Rows already in the ORDER BY's order (a single source read in its key order) skip the sort.
    let mut presorted = false;
    if single {
        let source = &compiler_scope_sources[0];
        let range = match (source.key_column, &where_clause) {
            (Some(key), Some(filter)) => key_range(filter, key, ctx)?,
            _ => None,
        };
        // Rows come in key order: a TOP that needs no other order stops the scan early.
        // (Not WITH TIES: how many rows tie with the last is only known past it.)
        let ties = select.top.as_ref().is_some_and(|top| top.with_ties);
        presorted = !aggregated && !ties && in_key_order(&sort, &outputs, &source.key_columns());
        let early = presorted && having.is_none() && select.distinct.is_none();
        let limit = if early { top_limit(select, ctx)?.unwrap_or(usize::MAX) } else { usize::MAX };
        rows = match &where_clause {
            Some(filter) => source.scan_until(range.as_ref(), &mut |row| Ok(truth(&filter.eval(row, &[], ctx)?) == Some(true)), limit)?,
            None => source.scan_until(range.as_ref(), &mut |_| Ok(true), limit)?,
        };
    } else if !compiler_scope_sources.is_empty() {
        let mut offset = 0;
        let mut source_index = 0;
        rows = Vec::new();
        for from in &select.from {
            let first = &compiler_scope_sources[source_index];
            source_index += 1;
            let mut current: Vec<Vec<Value>> = first.scan(None)?;
            let mut width = first.columns.len();
            for join in &from.joins {
                let right = &compiler_scope_sources[source_index];
                source_index += 1;
                let right_rows = right.scan(None)?;
                let (constraint, outer) = match &join.join_operator {
                    JoinOperator::Join(c) | JoinOperator::Inner(c) => (Some(c), false),
                    JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => (Some(c), true),
                    JoinOperator::CrossJoin(_) => (None, false),
                    other => return Err(SqlError::unsupported(&format!("the join {other:?}"))),
                };
                let condition = match constraint {
                    Some(JoinConstraint::On(expr)) => {
                        let visible = &scope[offset..offset + width + right.columns.len()];
                        Some(Compiler { scope: visible, params: ctx.params, session: ctx.session, aggs: None }.compile(expr)?)
                    }
                    Some(JoinConstraint::None) | None => None,
                    Some(other) => return Err(SqlError::unsupported(&format!("the join condition {other:?}"))),
                };
                current = super::join::join(&current, &right_rows, (width, right.columns.len()), condition.as_ref(), outer, ctx)?;
                width += right.columns.len();
            }
            // Comma-separated FROM items form a cross product.
            rows = if offset == 0 {
                current
            } else {
                rows.iter().flat_map(|left| current.iter().map(move |right| [left.clone(), right.clone()].concat())).collect()
            };
            offset += width;
        }
    }

    if let (Some(filter), false) = (&where_clause, single) {
        let mut kept = Vec::with_capacity(rows.len());
        for row in rows {
            if truth(&filter.eval(&row, &[], ctx)?) == Some(true) {
                kept.push(row);
            }
        }
        rows = kept;
    }

    // Each output row with the source row and aggregate values it came from (for ORDER BY).
    let mut produced: Vec<(Vec<Value>, Vec<Value>, Vec<Value>)> = Vec::new();
    if aggregated {
        check_grouping(&outputs, &group_by, &scope)?;
        let mut groups: BTreeMap<RowKey, Vec<usize>> = BTreeMap::new();
        for (index, row) in rows.iter().enumerate() {
            let key = group_by.iter().map(|g| g.eval(row, &[], ctx)).collect::<SqlResult<Vec<_>>>()?;
            groups.entry(RowKey(key)).or_default().push(index);
        }
        if groups.is_empty() && group_by.is_empty() {
            groups.insert(RowKey(Vec::new()), Vec::new());
        }
        let null_row = vec![Value::Null; scope.len()];
        for members in groups.values() {
            let values = aggs.iter().map(|call| aggregate(call, members.iter().map(|i| &rows[*i]), ctx)).collect::<SqlResult<Vec<_>>>()?;
            let representative = members.first().map_or(&null_row, |i| &rows[*i]);
            if let Some(having) = &having
                && truth(&having.eval(representative, &values, ctx)?) != Some(true) {
                    continue;
                }
            let output = outputs.iter().map(|(_, e)| e.eval(representative, &values, ctx)).collect::<SqlResult<Vec<_>>>()?;
            produced.push((output, representative.clone(), values));
        }
    } else {
        for row in rows {
            let output = outputs.iter().map(|(_, e)| e.eval(&row, &[], ctx)).collect::<SqlResult<Vec<_>>>()?;
            produced.push((output, row, Vec::new()));
        }
    }

    if select.distinct.is_some() {
        let mut seen: BTreeMap<RowKey, ()> = BTreeMap::new();
        produced.retain(|(output, _, _)| seen.insert(RowKey(output.clone()), ()).is_none());
    }

    // The sort keys of the produced rows, once sorted (for TOP ... WITH TIES).
    let mut sorted_keys: Option<Vec<Vec<Value>>> = None;
    if !sort.is_empty() && !presorted {
        // (sort key, (group key, aggregate inputs, output row)) per produced row.
        #[allow(clippy::type_complexity)]
        let mut keyed: Vec<(Vec<Value>, (Vec<Value>, Vec<Value>, Vec<Value>))> = Vec::with_capacity(produced.len());
        for entry in produced {
            let keys = sort
                .iter()
                .map(|(key, _)| match key {
                    SortKey::Output(i) => Ok(entry.0[*i].clone()),
                    SortKey::Expr(e) => e.eval(&entry.1, &entry.2, ctx),
                })
                .collect::<SqlResult<Vec<_>>>()?;
            keyed.push((keys, entry));
        }
        keyed.sort_by(|a, b| {
            for (index, (_, ascending)) in sort.iter().enumerate() {
                let ordering = sort_order(&a.0[index], &b.0[index]);
                let ordering = if *ascending { ordering } else { ordering.reverse() };
                if ordering != std::cmp::Ordering::Equal {
                    return ordering;
                }
            }
            std::cmp::Ordering::Equal
        });
        let (keys, entries): (Vec<_>, Vec<_>) = keyed.into_iter().unzip();
        produced = entries;
        sorted_keys = Some(keys);
    }

    if let Some(limit) = top_limit(select, ctx)? {
        produced.truncate(top_end(select, limit, sorted_keys.as_deref())?);
    }

    let columns = outputs
        .iter()
        .map(|(name, e)| super::ColumnMeta {
            name: name.clone(),
            ty: e.ty(&scope, &aggs),
            nullable: match e {
                CExpr::Column(i) => scope[*i].nullable,
                _ => true,
            },
        })
        .collect();
    Ok(ResultSet { columns, rows: produced.into_iter().map(|(output, _, _)| output).collect() })
}

/// `TOP n`'s row count, if the select has one.
fn top_limit(select: &ast::Select, ctx: &Ctx<'_>) -> SqlResult<Option<usize>> {
    let Some(top) = &select.top else { return Ok(None) };
    if top.percent {
        return Err(SqlError::unsupported("TOP PERCENT"));
    }
    Ok(Some(match &top.quantity {
        Some(TopQuantity::Constant(n)) => usize::try_from(*n).unwrap_or(usize::MAX),
        Some(TopQuantity::Expr(expr)) => {
            let compiled = Compiler { scope: &[], params: ctx.params, session: ctx.session, aggs: None }.compile(expr)?;
            match compiled.eval(&[], &[], ctx)?.cast(SqlType::BigInt)? {
                Value::Int(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                _ => return Err(SqlError::new(1014, 15, "A TOP N or FETCH rows count value may not be negative.")),
            }
        }
        None => usize::MAX,
    }))
}

/// How many of the sorted rows `TOP (limit)` keeps: `limit`, and with `WITH TIES` every
/// further row whose ORDER BY values equal the last kept row's (an error without ORDER BY, as
/// SQL Server's 1062).
fn top_end(select: &ast::Select, limit: usize, sorted_keys: Option<&[Vec<Value>]>) -> SqlResult<usize> {
    if !select.top.as_ref().is_some_and(|top| top.with_ties) {
        return Ok(limit);
    }
    let Some(keys) = sorted_keys else {
        return Err(SqlError::new(1062, 16, "The TOP N WITH TIES clause is not allowed without a corresponding ORDER BY clause."));
    };
    let mut end = limit.min(keys.len());
    let tie = |a: &[Value], b: &[Value]| a.iter().zip(b).all(|(x, y)| sort_order(x, y) == std::cmp::Ordering::Equal);
    while end > 0 && end < keys.len() && tie(&keys[end], &keys[end - 1]) {
        end += 1;
    }
    Ok(end)
}

/// Whether an ORDER BY (none, or ascending over a prefix of the clustered key) is met by the
/// key order a base table's scan produces.
fn in_key_order(sort: &[(SortKey, bool)], outputs: &[(String, CExpr)], key: &[usize]) -> bool {
    sort.len() <= key.len()
        && sort.iter().zip(key).all(|((sort_key, ascending), key_column)| {
            let column = match sort_key {
                SortKey::Expr(CExpr::Column(i)) => Some(*i),
                SortKey::Output(o) => match outputs.get(*o) {
                    Some((_, CExpr::Column(i))) => Some(*i),
                    _ => None,
                },
                SortKey::Expr(_) => None,
            };
            *ascending && column == Some(*key_column)
        })
}

fn open<'a>(factor: &TableFactor, ctx: &Ctx<'a>) -> SqlResult<Source<'a>> {
    match factor {
        TableFactor::Table { name, alias, args, with_hints, .. } => {
            let parts = object_name(name);
            let dirty = with_hints.iter().any(|hint| matches!(hint.to_string().to_ascii_uppercase().as_str(), "NOLOCK" | "READUNCOMMITTED"));
            let view = if dirty { ReadView::Dirty } else { ctx.view };
            let arguments = match args {
                Some(args) => {
                    let mut values = Vec::new();
                    for arg in &args.args {
                        match arg {
                            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(expr)) => {
                                let compiled = Compiler { scope: &[], params: ctx.params, session: ctx.session, aggs: None }.compile(expr)?;
                                values.push(compiled.eval(&[], &[], ctx)?);
                            }
                            other => return Err(SqlError::unsupported(&format!("the argument `{other}`"))),
                        }
                    }
                    Some(values)
                }
                None => None,
            };
            Source::open(ctx.db, &parts, arguments, alias.as_ref().map(|a| a.name.value.as_str()), view)
        }
        TableFactor::NestedJoin { .. } => Err(SqlError::unsupported("parenthesised joins")),
        TableFactor::Derived { .. } => Err(SqlError::unsupported("derived tables")),
        other => Err(SqlError::unsupported(&format!("the FROM item `{other}`"))),
    }
}

/// The name SQL Server gives an unaliased select item: the column's name, else none.
fn column_name(expr: &Expr) -> String {
    match expr {
        Expr::Identifier(ident) => ident.value.clone(),
        Expr::CompoundIdentifier(parts) => parts.last().map(|p| p.value.clone()).unwrap_or_default(),
        _ => String::new(),
    }
}

/// A bound on the key column from top-level `AND`ed comparisons with constants.
pub(crate) fn key_range(filter: &CExpr, key: usize, ctx: &Ctx<'_>) -> SqlResult<Option<KeyRange>> {
    let mut conjuncts = Vec::new();
    fn flatten<'e>(expr: &'e CExpr, out: &mut Vec<&'e CExpr>) {
        match expr {
            CExpr::And(a, b) => {
                flatten(a, out);
                flatten(b, out);
            }
            other => out.push(other),
        }
    }
    flatten(filter, &mut conjuncts);
    let mut low: Bound<Value> = Bound::Unbounded;
    let mut high: Bound<Value> = Bound::Unbounded;
    let mut found = false;
    let mut tighten = |cmp: Cmp, value: Value| {
        if value.is_null() {
            return;
        }
        found = true;
        let raise = |bound: &mut Bound<Value>, candidate: Bound<Value>| {
            let replace = match (&*bound, &candidate) {
                (Bound::Unbounded, _) => true,
                (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => sort_order(b, a) == std::cmp::Ordering::Greater,
                _ => false,
            };
            if replace {
                *bound = candidate;
            }
        };
        let lower = |bound: &mut Bound<Value>, candidate: Bound<Value>| {
            let replace = match (&*bound, &candidate) {
                (Bound::Unbounded, _) => true,
                (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => sort_order(b, a) == std::cmp::Ordering::Less,
                _ => false,
            };
            if replace {
                *bound = candidate;
            }
        };
        match cmp {
            Cmp::Gt => raise(&mut low, Bound::Excluded(value)),
            Cmp::Ge => raise(&mut low, Bound::Included(value)),
            Cmp::Lt => lower(&mut high, Bound::Excluded(value)),
            Cmp::Le => lower(&mut high, Bound::Included(value)),
            Cmp::Eq => {
                raise(&mut low, Bound::Included(value.clone()));
                lower(&mut high, Bound::Included(value));
            }
            Cmp::Ne => {}
        }
    };
    for conjunct in conjuncts {
        match conjunct {
            CExpr::Compare(cmp, a, b) => match (a.as_ref(), b.as_ref()) {
                (CExpr::Column(c), other) if *c == key && other.is_constant() => tighten(*cmp, other.eval(&[], &[], ctx)?),
                (other, CExpr::Column(c)) if *c == key && other.is_constant() => tighten(cmp.flip(), other.eval(&[], &[], ctx)?),
                _ => {}
            },
            CExpr::Between(false, e, lo, hi) if matches!(e.as_ref(), CExpr::Column(c) if *c == key) && lo.is_constant() && hi.is_constant() => {
                tighten(Cmp::Ge, lo.eval(&[], &[], ctx)?);
                tighten(Cmp::Le, hi.eval(&[], &[], ctx)?);
            }
            _ => {}
        }
    }
    Ok(found.then_some((low, high)))
}

/// Error 8120 for a bare column that is neither grouped nor aggregated.
fn check_grouping(outputs: &[(String, CExpr)], group_by: &[CExpr], scope: &[ScopeColumn]) -> SqlResult<()> {
    // A select item may use a GROUP BY expression whole (`GROUP BY (id - 1) / 10` with
    // `SELECT (id - 1) / 10, COUNT_BIG(*)`): its columns are then grouped. Compiled
    // expressions compare by their debug form, which spells every node and constant.
    let grouped_exprs: Vec<String> = group_by.iter().filter(|g| !matches!(g, CExpr::Column(_))).map(|g| format!("{g:?}")).collect();
    fn bare_columns(expr: &CExpr, grouped_exprs: &[String], out: &mut Vec<usize>) {
        if !grouped_exprs.is_empty() && grouped_exprs.contains(&format!("{expr:?}")) {
            return;
        }
        let bare_columns = |expr: &CExpr, out: &mut Vec<usize>| bare_columns(expr, grouped_exprs, out);
        match expr {
            CExpr::Column(i) => out.push(*i),
            CExpr::Agg(_) | CExpr::Const(_) => {}
            CExpr::Arith(_, a, b) | CExpr::Compare(_, a, b) | CExpr::And(a, b) | CExpr::Or(a, b) | CExpr::Like(_, a, b) | CExpr::AtTimeZone(a, b) => {
                bare_columns(a, out);
                bare_columns(b, out);
            }
            CExpr::Neg(a) | CExpr::Not(a) | CExpr::IsNull(_, a) => bare_columns(a, out),
            CExpr::Between(_, a, b, c) => {
                bare_columns(a, out);
                bare_columns(b, out);
                bare_columns(c, out);
            }
            CExpr::InList(_, a, list) => {
                bare_columns(a, out);
                list.iter().for_each(|e| bare_columns(e, out));
            }
            CExpr::Cast { expr, .. } => bare_columns(expr, out),
            CExpr::Case { operand, whens, otherwise } => {
                if let Some(o) = operand {
                    bare_columns(o, out);
                }
                for (a, b) in whens {
                    bare_columns(a, out);
                    bare_columns(b, out);
                }
                if let Some(o) = otherwise {
                    bare_columns(o, out);
                }
            }
            CExpr::Call(_, args) => args.iter().for_each(|e| bare_columns(e, out)),
        }
    }
    let grouped: Vec<usize> = group_by.iter().filter_map(|g| if let CExpr::Column(i) = g { Some(*i) } else { None }).collect();
    for (_, expr) in outputs {
        let mut columns = Vec::new();
        bare_columns(expr, &grouped_exprs, &mut columns);
        if let Some(column) = columns.into_iter().find(|c| !grouped.contains(c)) {
            let column = &scope[column];
            let qualifier = column.qualifiers.last().cloned().unwrap_or_default();
            return Err(SqlError::new(
                8120,
                16,
                format!("Column '{qualifier}.{}' is invalid in the select list because it is not contained in either an aggregate function or the GROUP BY clause.", column.name),
            ));
        }
    }
    Ok(())
}

fn aggregate<'r>(call: &AggCall, rows: impl Iterator<Item = &'r Vec<Value>>, ctx: &Ctx<'_>) -> SqlResult<Value> {
    let mut values = Vec::new();
    let mut count = 0i64;
    for row in rows {
        match &call.arg {
            None => count += 1,
            Some(arg) => {
                let value = arg.eval(row, &[], ctx)?;
                if !value.is_null() {
                    values.push(value);
                }
            }
        }
    }
    if call.distinct {
        values.sort_by(sort_order);
        values.dedup_by(|a, b| sort_order(a, b) == std::cmp::Ordering::Equal);
    }
    Ok(match call.func {
        AggFn::Count | AggFn::CountBig => Value::Int(if call.arg.is_none() { count } else { values.len() as i64 }),
        AggFn::Sum | AggFn::Avg => {
            if values.is_empty() {
                return Ok(Value::Null);
            }
            let mut total = Value::Int(0);
            for value in &values {
                total = arithmetic(Arith::Add, &total, value)?;
            }
            if call.func == AggFn::Avg {
                let divisor = Value::Int(values.len() as i64);
                match total {
                    Value::Int(_) => arithmetic(Arith::Div, &total, &divisor)?,
                    other => arithmetic(Arith::Div, &other, &divisor)?,
                }
            } else {
                total
            }
        }
        AggFn::Min => values.into_iter().min_by(sort_order).unwrap_or(Value::Null),
        AggFn::Max => values.into_iter().max_by(sort_order).unwrap_or(Value::Null),
    })
}

/// Parameters and variables visible to a statement.
pub type Params = HashMap<String, Value>;
