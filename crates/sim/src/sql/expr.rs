//! Expressions: compiled from sqlparser's tree against a scope (so unknown columns fail with
//! 207 before any row is read), then evaluated per row.

use std::cmp::Ordering;
use std::collections::HashMap;

use chrono::{Datelike, NaiveDateTime, Timelike};
use sqlparser::ast::{self, BinaryOperator, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator};

use super::functions::{self, Builtin};
use crate::db::Database;
use crate::error::{SqlError, SqlResult};
use crate::types::{Len, SqlType};
use crate::value::{arithmetic, parse_numeric, Arith, Value};
use crate::versions::ReadView;

/// A column visible to an expression.
#[derive(Clone, Debug)]
pub struct ScopeColumn {
    /// Lower-case names that qualify it: the alias, or the table name and `schema.table`.
    pub qualifiers: Vec<String>,
    /// The column name.
    pub name: String,
    /// Its type.
    pub ty: SqlType,
    /// Whether it may be NULL.
    pub nullable: bool,
}

/// Session facts expressions can read (`@@SPID`, `@@TRANCOUNT`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionInfo {
    /// The session id.
    pub spid: u16,
    /// Open transaction count.
    pub tran_count: u32,
}

/// What evaluation needs besides the row.
pub struct Ctx<'a> {
    /// The database (for the CDC functions and the clock).
    pub db: &'a Database,
    /// Parameters and variables by lower-case name including `@`.
    pub params: &'a HashMap<String, Value>,
    /// The session.
    pub session: SessionInfo,
    /// How base tables are read (the session's isolation level, and its snapshot).
    pub view: ReadView,
}

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `=`.
    Eq,
    /// `<>` / `!=`.
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

impl Cmp {
    fn test(self, ordering: Ordering) -> bool {
        match self {
            Cmp::Eq => ordering == Ordering::Equal,
            Cmp::Ne => ordering != Ordering::Equal,
            Cmp::Lt => ordering == Ordering::Less,
            Cmp::Le => ordering != Ordering::Greater,
            Cmp::Gt => ordering == Ordering::Greater,
            Cmp::Ge => ordering != Ordering::Less,
        }
    }

    /// The operator with its operands swapped.
    pub fn flip(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
            other => other,
        }
    }
}

/// Aggregate functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFn {
    /// `COUNT` (int).
    Count,
    /// `COUNT_BIG` (bigint).
    CountBig,
    /// `SUM`.
    Sum,
    /// `MIN`.
    Min,
    /// `MAX`.
    Max,
    /// `AVG`.
    Avg,
}

/// One aggregate call of a query.
#[derive(Clone, Debug)]
pub struct AggCall {
    /// The function.
    pub func: AggFn,
    /// Its argument (`None` for `COUNT(*)`).
    pub arg: Option<CExpr>,
    /// `DISTINCT`.
    pub distinct: bool,
}

/// A compiled expression.
#[derive(Clone, Debug)]
pub enum CExpr {
    /// A column of the scope, by position.
    Column(usize),
    /// A constant (literals and parameters).
    Const(Value),
    /// Arithmetic.
    Arith(Arith, Box<CExpr>, Box<CExpr>),
    /// Unary minus.
    Neg(Box<CExpr>),
    /// Comparison.
    Compare(Cmp, Box<CExpr>, Box<CExpr>),
    /// `AND` (three-valued).
    And(Box<CExpr>, Box<CExpr>),
    /// `OR` (three-valued).
    Or(Box<CExpr>, Box<CExpr>),
    /// `NOT`.
    Not(Box<CExpr>),
    /// `IS [NOT] NULL`.
    IsNull(bool, Box<CExpr>),
    /// `[NOT] BETWEEN`.
    Between(bool, Box<CExpr>, Box<CExpr>, Box<CExpr>),
    /// `[NOT] IN (list)`.
    InList(bool, Box<CExpr>, Vec<CExpr>),
    /// `[NOT] LIKE pattern`.
    Like(bool, Box<CExpr>, Box<CExpr>),
    /// `CAST`/`CONVERT` (with a style), `TRY_` when `lenient`.
    Cast {
        /// The operand.
        expr: Box<CExpr>,
        /// The target type.
        ty: SqlType,
        /// `CONVERT` style.
        style: Option<i64>,
        /// The operand's static type, for styles whose text depends on it (the fractional
        /// digits of `datetime2(n)` and `time(n)`).
        from: Option<SqlType>,
        /// `TRY_CAST`/`TRY_CONVERT`: NULL instead of an error.
        lenient: bool,
    },
    /// `CASE`.
    Case {
        /// `CASE operand WHEN ...` form.
        operand: Option<Box<CExpr>>,
        /// (condition or value, result).
        whens: Vec<(CExpr, CExpr)>,
        /// `ELSE`.
        otherwise: Option<Box<CExpr>>,
    },
    /// A built-in scalar function.
    Call(Builtin, Vec<CExpr>),
    /// `expr AT TIME ZONE zone`.
    AtTimeZone(Box<CExpr>, Box<CExpr>),
    /// The value of aggregate slot `n` for the current group.
    Agg(usize),
}

/// Compiles expressions against a scope.
pub struct Compiler<'a> {
    /// Columns in scope.
    pub scope: &'a [ScopeColumn],
    /// Parameters and variables.
    pub params: &'a HashMap<String, Value>,
    /// Session facts.
    pub session: SessionInfo,
    /// Where aggregate calls go; `None` where aggregates are not allowed.
    pub aggs: Option<&'a mut Vec<AggCall>>,
}

/// Lower-case dotted name of an object name.
pub fn object_name(name: &ast::ObjectName) -> Vec<String> {
    name.0.iter().filter_map(|part| part.as_ident().map(|ident| ident.value.clone())).collect()
}

impl Compiler<'_> {
    /// Resolves a (possibly qualified) column name.
    pub fn resolve(&self, parts: &[String]) -> SqlResult<usize> {
        let (qualifier, name) = match parts {
            [name] => (None, name),
            [.., qualifier, name] => {
                let full = parts[..parts.len() - 1].join(".").to_ascii_lowercase();
                let _ = qualifier;
                (Some(full), name)
            }
            [] => return Err(SqlError::syntax("empty name")),
        };
        let matches: Vec<usize> = self
            .scope
            .iter()
            .enumerate()
            .filter(|(_, column)| column.name.eq_ignore_ascii_case(name))
            .filter(|(_, column)| {
                qualifier.as_ref().is_none_or(|q| column.qualifiers.iter().any(|cq| cq == q || cq.ends_with(&format!(".{q}"))))
            })
            .map(|(index, _)| index)
            .collect();
        match matches.as_slice() {
            [index] => Ok(*index),
            [] => Err(SqlError::invalid_column(name)),
            _ => Err(SqlError::new(209, 16, format!("Ambiguous column name '{name}'."))),
        }
    }

    /// Compiles an expression.
    pub fn compile(&mut self, expr: &Expr) -> SqlResult<CExpr> {
        Ok(match expr {
            Expr::Identifier(ident) => self.identifier(&ident.value)?,
            Expr::CompoundIdentifier(parts) => {
                let names: Vec<String> = parts.iter().map(|part| part.value.clone()).collect();
                CExpr::Column(self.resolve(&names)?)
            }
            Expr::Value(value) => CExpr::Const(literal(&value.value)?),
            Expr::Nested(inner) => self.compile(inner)?,
            Expr::UnaryOp { op, expr } => match op {
                UnaryOperator::Minus => match self.compile(expr)? {
                    CExpr::Const(value) => CExpr::Const(arithmetic(Arith::Sub, &Value::Int(0), &value).map(|v| match (v, &value) {
                        (Value::Int(i), Value::Float(_)) => Value::Float(i as f64),
                        (v, _) => v,
                    })?),
                    other => CExpr::Neg(Box::new(other)),
                },
                UnaryOperator::Plus => self.compile(expr)?,
                UnaryOperator::Not => CExpr::Not(Box::new(self.compile(expr)?)),
                other => return Err(SqlError::unsupported(&format!("the operator {other}"))),
            },
            Expr::BinaryOp { left, op, right } => {
                let (l, r) = (Box::new(self.compile(left)?), Box::new(self.compile(right)?));
                match op {
                    BinaryOperator::Plus => CExpr::Arith(Arith::Add, l, r),
                    BinaryOperator::Minus => CExpr::Arith(Arith::Sub, l, r),
                    BinaryOperator::Multiply => CExpr::Arith(Arith::Mul, l, r),
                    BinaryOperator::Divide => CExpr::Arith(Arith::Div, l, r),
                    BinaryOperator::Modulo => CExpr::Arith(Arith::Mod, l, r),
                    BinaryOperator::Eq => CExpr::Compare(Cmp::Eq, l, r),
                    BinaryOperator::NotEq => CExpr::Compare(Cmp::Ne, l, r),
                    BinaryOperator::Lt => CExpr::Compare(Cmp::Lt, l, r),
                    BinaryOperator::LtEq => CExpr::Compare(Cmp::Le, l, r),
                    BinaryOperator::Gt => CExpr::Compare(Cmp::Gt, l, r),
                    BinaryOperator::GtEq => CExpr::Compare(Cmp::Ge, l, r),
                    BinaryOperator::And => CExpr::And(l, r),
                    BinaryOperator::Or => CExpr::Or(l, r),
                    BinaryOperator::StringConcat => CExpr::Arith(Arith::Add, l, r),
                    other => return Err(SqlError::unsupported(&format!("the operator {other}"))),
                }
            }
            Expr::IsNull(inner) => CExpr::IsNull(false, Box::new(self.compile(inner)?)),
            Expr::IsNotNull(inner) => CExpr::IsNull(true, Box::new(self.compile(inner)?)),
            Expr::Between { expr, negated, low, high } => CExpr::Between(
                *negated,
                Box::new(self.compile(expr)?),
                Box::new(self.compile(low)?),
                Box::new(self.compile(high)?),
            ),
            Expr::InList { expr, list, negated } => {
                let list = list.iter().map(|item| self.compile(item)).collect::<SqlResult<Vec<_>>>()?;
                CExpr::InList(*negated, Box::new(self.compile(expr)?), list)
            }
            Expr::Like { negated, expr, pattern, .. } => {
                CExpr::Like(*negated, Box::new(self.compile(expr)?), Box::new(self.compile(pattern)?))
            }
            Expr::Cast { kind, expr, data_type, .. } => CExpr::Cast {
                expr: Box::new(self.compile(expr)?),
                ty: data_type_of(data_type)?,
                style: None,
                from: None,
                lenient: matches!(kind, ast::CastKind::TryCast | ast::CastKind::SafeCast),
            },
            Expr::Convert { is_try, expr, data_type, styles, .. } => {
                let ty = data_type.as_ref().map(data_type_of).transpose()?.ok_or_else(|| SqlError::syntax("CONVERT needs a type"))?;
                let style = match styles.first() {
                    Some(style) => match self.compile(style)? {
                        CExpr::Const(value) => value.as_i64(),
                        _ => return Err(SqlError::syntax("CONVERT style must be a constant")),
                    },
                    None => None,
                };
                let expr = self.compile(expr)?;
                let from = style.map(|_| expr.ty(self.scope, self.aggs.as_deref().map_or(&[][..], Vec::as_slice)));
                CExpr::Cast { expr: Box::new(expr), ty, style, from, lenient: *is_try }
            }
            Expr::Case { operand, conditions, else_result, .. } => {
                let operand = operand.as_ref().map(|operand| self.compile(operand).map(Box::new)).transpose()?;
                let whens = conditions
                    .iter()
                    .map(|when| Ok((self.compile(&when.condition)?, self.compile(&when.result)?)))
                    .collect::<SqlResult<Vec<_>>>()?;
                let otherwise = else_result.as_ref().map(|e| self.compile(e).map(Box::new)).transpose()?;
                CExpr::Case { operand, whens, otherwise }
            }
            Expr::AtTimeZone { timestamp, time_zone } => {
                CExpr::AtTimeZone(Box::new(self.compile(timestamp)?), Box::new(self.compile(time_zone)?))
            }
            Expr::Function(function) => self.function(function)?,
            other => return Err(SqlError::unsupported(&format!("the expression `{other}`"))),
        })
    }

    fn identifier(&self, name: &str) -> SqlResult<CExpr> {
        if let Some(system) = name.strip_prefix("@@") {
            return Ok(CExpr::Const(match system.to_ascii_lowercase().as_str() {
                "spid" => Value::Int(i64::from(self.session.spid)),
                "trancount" => Value::Int(i64::from(self.session.tran_count)),
                "version" => Value::Text(functions::VERSION.to_owned()),
                "servername" => Value::Text("mssql-cdc-sim".to_owned()),
                "language" => Value::Text("us_english".to_owned()),
                _ => return Err(SqlError::unknown_function(name)),
            }));
        }
        if name.starts_with('@') {
            return self
                .params
                .get(&name.to_ascii_lowercase())
                .cloned()
                .map(CExpr::Const)
                .ok_or_else(|| SqlError::undeclared_variable(name));
        }
        Ok(CExpr::Column(self.resolve(&[name.to_owned()])?))
    }

    fn function(&mut self, function: &ast::Function) -> SqlResult<CExpr> {
        let parts = object_name(&function.name);
        let name = parts.join(".").to_ascii_lowercase();
        let (args, distinct, star) = match &function.args {
            FunctionArguments::None => (Vec::new(), false, false),
            FunctionArguments::List(list) => {
                let distinct = matches!(list.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct));
                let mut star = false;
                let mut args = Vec::new();
                for arg in &list.args {
                    match arg {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(expr)) => args.push(expr.clone()),
                        FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => star = true,
                        other => return Err(SqlError::unsupported(&format!("the argument `{other}`"))),
                    }
                }
                (args, distinct, star)
            }
            FunctionArguments::Subquery(_) => return Err(SqlError::unsupported("subquery arguments")),
        };
        let aggregate = match name.as_str() {
            "count" => Some(AggFn::Count),
            "count_big" => Some(AggFn::CountBig),
            "sum" => Some(AggFn::Sum),
            "min" => Some(AggFn::Min),
            "max" => Some(AggFn::Max),
            "avg" => Some(AggFn::Avg),
            _ => None,
        };
        if let Some(func) = aggregate {
            let arg = match (star, args.as_slice()) {
                (true, []) if matches!(func, AggFn::Count | AggFn::CountBig) => None,
                (false, [arg]) => {
                    // Aggregates cannot nest: compile the argument without an aggregate sink.
                    let mut inner = Compiler { scope: self.scope, params: self.params, session: self.session, aggs: None };
                    Some(inner.compile(arg)?)
                }
                _ => return Err(SqlError::new(174, 15, format!("The {name} function requires 1 argument(s)."))),
            };
            let Some(aggs) = self.aggs.as_deref_mut() else {
                return Err(SqlError::new(
                    147,
                    15,
                    "An aggregate may not appear in the WHERE clause unless it is in a subquery contained in a HAVING clause or a select list, and the column being aggregated is an outer reference.",
                ));
            };
            aggs.push(AggCall { func, arg, distinct });
            return Ok(CExpr::Agg(aggs.len() - 1));
        }
        let builtin = functions::lookup(&parts)?;
        let compiled = args.iter().map(|arg| self.compile(arg)).collect::<SqlResult<Vec<_>>>()?;
        builtin.check_arity(compiled.len())?;
        Ok(CExpr::Call(builtin, compiled))
    }
}

/// The simulator's type for a sqlparser data type.
pub fn data_type_of(data_type: &DataType) -> SqlResult<SqlType> {
    SqlType::parse(&data_type.to_string())
}

/// A literal's value.
pub fn literal(value: &ast::Value) -> SqlResult<Value> {
    Ok(match value {
        ast::Value::Number(text, _) => {
            if let Ok(integer) = text.parse::<i64>() {
                Value::Int(integer)
            } else if text.contains(['e', 'E']) {
                Value::Float(text.parse().map_err(|_| SqlError::syntax(text))?)
            } else {
                let (value, scale) = parse_numeric(text).ok_or_else(|| SqlError::syntax(text))?;
                Value::Numeric { value, scale }
            }
        }
        ast::Value::SingleQuotedString(text) | ast::Value::NationalStringLiteral(text) => Value::Text(text.clone()),
        ast::Value::HexStringLiteral(hex) => {
            let padded = if hex.len() % 2 == 1 { format!("0{hex}") } else { hex.clone() };
            let bytes = (0..padded.len())
                .step_by(2)
                .map(|index| u8::from_str_radix(&padded[index..index + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|_| SqlError::syntax(hex))?;
            Value::Binary(bytes)
        }
        ast::Value::Boolean(flag) => Value::Bit(*flag),
        ast::Value::Null => Value::Null,
        other => return Err(SqlError::unsupported(&format!("the literal {other}"))),
    })
}

/// Three-valued truth of a value: `None` for NULL/unknown.
pub fn truth(value: &Value) -> Option<bool> {
    match value {
        Value::Null => None,
        Value::Bit(flag) => Some(*flag),
        other => other.as_f64().map(|number| number != 0.0),
    }
}

impl CExpr {
    /// Evaluates against a row and the current group's aggregate values.
    pub fn eval(&self, row: &[Value], aggs: &[Value], ctx: &Ctx<'_>) -> SqlResult<Value> {
        Ok(match self {
            CExpr::Column(index) => row[*index].clone(),
            CExpr::Const(value) => value.clone(),
            CExpr::Agg(index) => aggs.get(*index).cloned().unwrap_or(Value::Null),
            CExpr::Arith(op, a, b) => arithmetic(*op, &a.eval(row, aggs, ctx)?, &b.eval(row, aggs, ctx)?)?,
            CExpr::Neg(inner) => match inner.eval(row, aggs, ctx)? {
                Value::Float(v) => Value::Float(-v),
                other => arithmetic(Arith::Sub, &Value::Int(0), &other)?,
            },
            CExpr::Compare(op, a, b) => {
                let (a, b) = (a.eval(row, aggs, ctx)?, b.eval(row, aggs, ctx)?);
                match a.compare(&b)? {
                    None => Value::Null,
                    Some(ordering) => Value::Bit(op.test(ordering)),
                }
            }
            CExpr::And(a, b) => {
                let left = truth(&a.eval(row, aggs, ctx)?);
                if left == Some(false) {
                    return Ok(Value::Bit(false));
                }
                match (left, truth(&b.eval(row, aggs, ctx)?)) {
                    (_, Some(false)) => Value::Bit(false),
                    (Some(true), Some(true)) => Value::Bit(true),
                    _ => Value::Null,
                }
            }
            CExpr::Or(a, b) => {
                let left = truth(&a.eval(row, aggs, ctx)?);
                if left == Some(true) {
                    return Ok(Value::Bit(true));
                }
                match (left, truth(&b.eval(row, aggs, ctx)?)) {
                    (_, Some(true)) => Value::Bit(true),
                    (Some(false), Some(false)) => Value::Bit(false),
                    _ => Value::Null,
                }
            }
            CExpr::Not(inner) => match truth(&inner.eval(row, aggs, ctx)?) {
                None => Value::Null,
                Some(flag) => Value::Bit(!flag),
            },
            CExpr::IsNull(negated, inner) => Value::Bit(inner.eval(row, aggs, ctx)?.is_null() != *negated),
            CExpr::Between(negated, e, low, high) => {
                let value = e.eval(row, aggs, ctx)?;
                let (low, high) = (low.eval(row, aggs, ctx)?, high.eval(row, aggs, ctx)?);
                match (value.compare(&low)?, value.compare(&high)?) {
                    (Some(a), Some(b)) => Value::Bit((a != Ordering::Less && b != Ordering::Greater) != *negated),
                    _ => Value::Null,
                }
            }
            CExpr::InList(negated, e, list) => {
                let value = e.eval(row, aggs, ctx)?;
                if value.is_null() {
                    return Ok(Value::Null);
                }
                let mut unknown = false;
                for item in list {
                    match value.compare(&item.eval(row, aggs, ctx)?)? {
                        Some(Ordering::Equal) => return Ok(Value::Bit(!*negated)),
                        None => unknown = true,
                        Some(_) => {}
                    }
                }
                if unknown { Value::Null } else { Value::Bit(*negated) }
            }
            CExpr::Like(negated, e, pattern) => {
                let (value, pattern) = (e.eval(row, aggs, ctx)?, pattern.eval(row, aggs, ctx)?);
                match (value.to_text(), pattern.to_text()) {
                    (Some(value), Some(pattern)) => Value::Bit(like(&value, &pattern) != *negated),
                    _ => Value::Null,
                }
            }
            CExpr::Cast { expr, ty, style, from, lenient } => {
                let value = expr.eval(row, aggs, ctx)?;
                let converted = functions::convert(&value, *ty, *style, *from);
                match converted {
                    Err(_) if *lenient => Value::Null,
                    other => other?,
                }
            }
            CExpr::Case { operand, whens, otherwise } => {
                let subject = operand.as_ref().map(|o| o.eval(row, aggs, ctx)).transpose()?;
                for (condition, result) in whens {
                    let hit = match &subject {
                        Some(subject) => subject.compare(&condition.eval(row, aggs, ctx)?)? == Some(Ordering::Equal),
                        None => truth(&condition.eval(row, aggs, ctx)?) == Some(true),
                    };
                    if hit {
                        return result.eval(row, aggs, ctx);
                    }
                }
                match otherwise {
                    Some(otherwise) => otherwise.eval(row, aggs, ctx)?,
                    None => Value::Null,
                }
            }
            CExpr::Call(builtin, args) => {
                let values = args.iter().map(|arg| arg.eval(row, aggs, ctx)).collect::<SqlResult<Vec<_>>>()?;
                builtin.call(&values, ctx)?
            }
            CExpr::AtTimeZone(value, zone) => {
                let (value, zone) = (value.eval(row, aggs, ctx)?, zone.eval(row, aggs, ctx)?);
                functions::at_time_zone(&value, &zone)?
            }
        })
    }

    /// The static type of the expression's results.
    pub fn ty(&self, scope: &[ScopeColumn], aggs: &[AggCall]) -> SqlType {
        match self {
            CExpr::Column(index) => scope[*index].ty,
            CExpr::Const(Value::Null) => SqlType::Int,
            CExpr::Const(value) => value.natural_type(),
            CExpr::Arith(op, a, b) => {
                let (ta, tb) = (a.ty(scope, aggs), b.ty(scope, aggs));
                if *op == Arith::Add && ta.is_text() {
                    return SqlType::NVarChar(Len::Max);
                }
                wider(ta, tb)
            }
            CExpr::Neg(inner) => inner.ty(scope, aggs),
            CExpr::Compare(..) | CExpr::And(..) | CExpr::Or(..) | CExpr::Not(_) | CExpr::IsNull(..) | CExpr::Between(..) | CExpr::InList(..) | CExpr::Like(..) => SqlType::Bit,
            CExpr::Cast { ty, .. } => *ty,
            CExpr::Case { whens, otherwise, .. } => whens
                .first()
                .map(|(_, result)| result.ty(scope, aggs))
                .or_else(|| otherwise.as_ref().map(|o| o.ty(scope, aggs)))
                .unwrap_or(SqlType::Int),
            CExpr::Call(builtin, args) => builtin.result_type(&args.iter().map(|a| a.ty(scope, aggs)).collect::<Vec<_>>()),
            CExpr::AtTimeZone(..) => SqlType::DateTimeOffset(7),
            CExpr::Agg(index) => {
                let call = &aggs[*index];
                match call.func {
                    AggFn::Count => SqlType::Int,
                    AggFn::CountBig => SqlType::BigInt,
                    AggFn::Avg => match call.arg.as_ref().map(|a| a.ty(scope, aggs)) {
                        Some(SqlType::Decimal { scale, .. }) => SqlType::Decimal { precision: 38, scale: scale.max(6) },
                        Some(SqlType::Float | SqlType::Real) => SqlType::Float,
                        _ => SqlType::Int,
                    },
                    AggFn::Sum => match call.arg.as_ref().map(|a| a.ty(scope, aggs)) {
                        Some(SqlType::Decimal { scale, .. }) => SqlType::Decimal { precision: 38, scale },
                        Some(SqlType::BigInt) => SqlType::BigInt,
                        Some(SqlType::Money | SqlType::SmallMoney) => SqlType::Money,
                        Some(SqlType::Float | SqlType::Real) => SqlType::Float,
                        _ => SqlType::Int,
                    },
                    AggFn::Min | AggFn::Max => call.arg.as_ref().map_or(SqlType::Int, |a| a.ty(scope, aggs)),
                }
            }
        }
    }

    /// Whether the expression reads no column (so it can be evaluated once).
    pub fn is_constant(&self) -> bool {
        match self {
            CExpr::Column(_) | CExpr::Agg(_) => false,
            CExpr::Const(_) => true,
            CExpr::Arith(_, a, b) | CExpr::Compare(_, a, b) | CExpr::And(a, b) | CExpr::Or(a, b) | CExpr::Like(_, a, b) | CExpr::AtTimeZone(a, b) => {
                a.is_constant() && b.is_constant()
            }
            CExpr::Neg(a) | CExpr::Not(a) | CExpr::IsNull(_, a) => a.is_constant(),
            CExpr::Between(_, a, b, c) => a.is_constant() && b.is_constant() && c.is_constant(),
            CExpr::InList(_, a, list) => a.is_constant() && list.iter().all(CExpr::is_constant),
            CExpr::Cast { expr, .. } => expr.is_constant(),
            CExpr::Case { operand, whens, otherwise } => {
                operand.as_ref().is_none_or(|o| o.is_constant())
                    && whens.iter().all(|(a, b)| a.is_constant() && b.is_constant())
                    && otherwise.as_ref().is_none_or(|o| o.is_constant())
            }
            CExpr::Call(builtin, args) => builtin.is_deterministic_per_statement() && args.iter().all(CExpr::is_constant),
        }
    }
}

fn wider(a: SqlType, b: SqlType) -> SqlType {
    use SqlType as T;
    let rank = |t: SqlType| match t {
        T::Bit => 1,
        T::TinyInt => 2,
        T::SmallInt => 3,
        T::Int => 4,
        T::BigInt => 5,
        T::SmallMoney => 6,
        T::Money => 7,
        T::Decimal { .. } => 8,
        T::Real => 9,
        T::Float => 10,
        T::Date | T::Time(_) | T::SmallDateTime | T::DateTime | T::DateTime2(_) => 11,
        T::DateTimeOffset(_) => 12,
        _ => 0,
    };
    match (a, b) {
        (T::Decimal { precision: p1, scale: s1 }, T::Decimal { precision: p2, scale: s2 }) => {
            let scale = s1.max(s2);
            T::Decimal { precision: ((p1 - s1).max(p2 - s2) + scale + 1).min(38), scale }
        }
        _ => if rank(a) >= rank(b) { a } else { b },
    }
}

/// SQL `LIKE` with `%`, `_` and `[...]` classes (binary collation).
pub fn like(value: &str, pattern: &str) -> bool {
    fn matches(value: &[char], pattern: &[char]) -> bool {
        match pattern.first() {
            None => value.is_empty(),
            Some('%') => (0..=value.len()).any(|skip| matches(&value[skip..], &pattern[1..])),
            Some('_') => !value.is_empty() && matches(&value[1..], &pattern[1..]),
            Some('[') => {
                let Some(end) = pattern.iter().position(|c| *c == ']') else {
                    return value.first() == Some(&'[') && matches(&value[1..], &pattern[1..]);
                };
                let class = &pattern[1..end];
                let (negate, class) = match class.first() {
                    Some('^') => (true, &class[1..]),
                    _ => (false, class),
                };
                let Some(c) = value.first() else { return false };
                let mut hit = false;
                let mut index = 0;
                while index < class.len() {
                    if index + 2 < class.len() && class[index + 1] == '-' {
                        hit |= (class[index]..=class[index + 2]).contains(c);
                        index += 3;
                    } else {
                        hit |= class[index] == *c;
                        index += 1;
                    }
                }
                hit != negate && matches(&value[1..], &pattern[end + 1..])
            }
            Some(p) => value.first() == Some(p) && matches(&value[1..], &pattern[1..]),
        }
    }
    let value: Vec<char> = value.trim_end_matches(' ').chars().collect();
    let pattern: Vec<char> = pattern.chars().collect();
    matches(&value, &pattern)
}

/// Date parts for `DATEADD`/`DATEDIFF`/`DATEPART`.
pub fn date_part(value: &NaiveDateTime, part: &str) -> Option<i64> {
    Some(match part {
        "year" | "yy" | "yyyy" => i64::from(value.year()),
        "month" | "mm" | "m" => i64::from(value.month()),
        "day" | "dd" | "d" => i64::from(value.day()),
        "hour" | "hh" => i64::from(value.hour()),
        "minute" | "mi" | "n" => i64::from(value.minute()),
        "second" | "ss" | "s" => i64::from(value.second()),
        "millisecond" | "ms" => i64::from(value.nanosecond() / 1_000_000),
        "dayofyear" | "dy" | "y" => i64::from(value.ordinal()),
        "weekday" | "dw" => i64::from(value.weekday().num_days_from_sunday() + 1),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns() {
        assert!(like("dbo_orders", "dbo[_]%"));
        assert!(like("abc", "a_c"));
        assert!(!like("abc", "a[^b]c"));
        assert!(like("abc  ", "abc"));
        assert!(like("x", "%"));
    }

    #[test]
    fn literals() {
        assert_eq!(literal(&ast::Value::Number("1.50".into(), false)).unwrap(), Value::Numeric { value: 150, scale: 2 });
        assert_eq!(literal(&ast::Value::HexStringLiteral("0A1".into())).unwrap(), Value::Binary(vec![0x00, 0xA1]));
    }
}
