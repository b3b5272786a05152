//! T-SQL execution: batches are parsed with sqlparser's MS SQL dialect and the statement
//! trees are executed against the [`Database`]. No query text is ever matched as a string.

pub mod computed;
pub mod ddl;
pub mod dml;
pub mod expr;
pub mod functions;
pub mod join;
pub mod procs;
pub mod query;
pub mod sources;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlparser::ast::{DataType, Ident, ObjectName, Statement};
use sqlparser::dialect::MsSqlDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::Token;

use self::expr::{Compiler, Ctx, SessionInfo};
use super::db::{Database, Isolation, OpenTxn};
use super::versions::ReadView;
use super::error::{SqlError, SqlResult};
use super::fault::{Fault, Faults};
use super::types::SqlType;
use super::value::Value;

/// A result column.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnMeta {
    /// Its name (empty for an unnamed expression).
    pub name: String,
    /// Its type.
    pub ty: SqlType,
    /// Whether it may be NULL.
    pub nullable: bool,
}

/// One result set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResultSet {
    /// Columns.
    pub columns: Vec<ColumnMeta>,
    /// Rows.
    pub rows: Vec<Vec<Value>>,
}

/// What one statement produced.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A result set.
    Rows(ResultSet),
    /// Rows affected by a DML statement.
    Count(u64),
    /// A statement without a row count (DDL, SET, transaction control).
    Done,
    /// A procedure's return status.
    Status(i32),
}

/// The outcome of a batch: the outputs of the statements that ran, then the error that stopped
/// it (if any), and whether the connection must be dropped (an injected fault).
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Outputs in order.
    pub outputs: Vec<Output>,
    /// The error that ended the batch.
    pub error: Option<SqlError>,
    /// Drop the connection after sending `outputs` (injected fault).
    pub disconnect: bool,
}

/// A connection's state.
#[derive(Debug)]
pub struct Session {
    /// Session id (`@@SPID`).
    pub spid: u16,
    txn: Option<OpenTxn>,
    tran_count: u32,
    /// `SET LOCK_TIMEOUT` in milliseconds (-1: wait forever).
    pub lock_timeout_ms: i64,
    /// `SET TRANSACTION ISOLATION LEVEL`.
    pub isolation: Isolation,
    variables: HashMap<String, (SqlType, Value)>,
}

impl Session {
    /// A new session.
    pub fn new(spid: u16) -> Self {
        Self { spid, txn: None, tran_count: 0, lock_timeout_ms: -1, isolation: Isolation::default(), variables: HashMap::new() }
    }

    /// Open transaction count (`@@TRANCOUNT`).
    pub fn tran_count(&self) -> u32 {
        self.tran_count
    }
}

/// A parsed statement: sqlparser's, or one T-SQL form sqlparser lacks.
#[derive(Clone, Debug)]
pub enum Stmt {
    /// A statement sqlparser parsed.
    Sql(Box<Statement>),
    /// `ALTER TABLE t ALTER COLUMN c type [NULL | NOT NULL]`.
    AlterColumn {
        /// The table.
        table: ObjectName,
        /// The column.
        column: Ident,
        /// The new type.
        data_type: DataType,
        /// Explicit nullability.
        nullable: Option<bool>,
        /// The statement text (for `cdc.ddl_history`).
        text: String,
    },
    /// `ALTER DATABASE { name | CURRENT } SET option { ON | OFF } [WITH ...]`.
    AlterDatabase {
        /// The option, upper case.
        option: String,
        /// ON or OFF.
        on: bool,
    },
}

/// Parses a batch into statements.
pub fn parse_batch(sql: &str) -> SqlResult<Vec<Stmt>> {
    let dialect = MsSqlDialect {};
    let syntax = |error: sqlparser::parser::ParserError| SqlError::new(102, 15, format!("Incorrect syntax: {error}"));
    let tokens = sqlparser::tokenizer::Tokenizer::new(&dialect, sql).tokenize_with_location().map_err(|e| syntax(e.into()))?;
    let mut parser = Parser::new(&dialect).with_tokens_with_locations(computed::rewrite(tokens));
    let mut statements = Vec::new();
    loop {
        while parser.consume_token(&Token::SemiColon) {}
        if parser.peek_token().token == Token::EOF {
            break;
        }
        let is_alter_column = matches!(&parser.peek_nth_token(0).token, Token::Word(w) if w.keyword == Keyword::ALTER)
            && matches!(&parser.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::TABLE)
            && {
                // ALTER TABLE <name> ALTER COLUMN: find ALTER COLUMN after the object name.
                let mut n = 2;
                while matches!(parser.peek_nth_token(n).token, Token::Word(_) | Token::Period) {
                    n += 1;
                    if matches!(&parser.peek_nth_token(n - 1).token, Token::Word(w) if w.keyword == Keyword::ALTER) {
                        break;
                    }
                }
                matches!(&parser.peek_nth_token(n - 1).token, Token::Word(w) if w.keyword == Keyword::ALTER)
                    && matches!(&parser.peek_nth_token(n).token, Token::Word(w) if w.keyword == Keyword::COLUMN)
            };
        if is_alter_column {
            let start = parser.peek_token().span.start;
            parser.next_token();
            parser.next_token();
            let table = parser.parse_object_name(false).map_err(syntax)?;
            if !parser.parse_keywords(&[Keyword::ALTER, Keyword::COLUMN]) {
                return Err(SqlError::syntax("expected ALTER COLUMN"));
            }
            let column = parser.parse_identifier().map_err(syntax)?;
            let data_type = parser.parse_data_type().map_err(syntax)?;
            let nullable = if parser.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
                Some(false)
            } else if parser.parse_keyword(Keyword::NULL) {
                Some(true)
            } else {
                None
            };
            let end = parser.peek_token().span.start;
            let text = slice_text(sql, start, end);
            statements.push(Stmt::AlterColumn { table, column, data_type, nullable, text });
            continue;
        }
        if matches!(&parser.peek_nth_token(0).token, Token::Word(w) if w.keyword == Keyword::ALTER)
            && matches!(&parser.peek_nth_token(1).token, Token::Word(w) if w.keyword == Keyword::DATABASE)
        {
            statements.push(alter_database(&mut parser)?);
            continue;
        }
        statements.push(Stmt::Sql(Box::new(parser.parse_statement().map_err(syntax)?)));
    }
    Ok(statements)
}

/// `ALTER DATABASE { name | CURRENT } SET option { ON | OFF } [WITH ROLLBACK ...]`.
fn alter_database(parser: &mut Parser<'_>) -> SqlResult<Stmt> {
    let syntax = |error: sqlparser::parser::ParserError| SqlError::new(102, 15, format!("Incorrect syntax: {error}"));
    parser.next_token();
    parser.next_token();
    parser.parse_identifier().map_err(syntax)?;
    if !parser.parse_keyword(Keyword::SET) {
        return Err(SqlError::syntax("ALTER DATABASE supports only SET <option> ON | OFF here"));
    }
    let option = parser.parse_identifier().map_err(syntax)?.value.to_ascii_uppercase();
    let on = match parser.parse_identifier().map_err(syntax)?.value.to_ascii_uppercase().as_str() {
        "ON" => true,
        "OFF" => false,
        other => return Err(SqlError::syntax(&format!("ALTER DATABASE SET {option} {other}: expected ON or OFF"))),
    };
    // `WITH ROLLBACK IMMEDIATE` / `WITH NO_WAIT`: nothing to wait for here.
    while !matches!(parser.peek_token().token, Token::SemiColon | Token::EOF) {
        parser.next_token();
    }
    Ok(Stmt::AlterDatabase { option, on })
}

fn slice_text(sql: &str, start: sqlparser::tokenizer::Location, end: sqlparser::tokenizer::Location) -> String {
    let offset = |location: sqlparser::tokenizer::Location| -> usize {
        if location.line == 0 {
            return sql.len();
        }
        let mut offset = 0;
        for (index, line) in sql.split_inclusive('\n').enumerate() {
            if index + 1 == location.line as usize {
                return offset + line.char_indices().nth(location.column as usize - 1).map_or(line.len(), |(i, _)| i);
            }
            offset += line.len();
        }
        sql.len()
    };
    sql[offset(start)..offset(end).max(offset(start))].trim().trim_end_matches(';').to_owned()
}

/// The simulator's SQL engine: the database behind a lock, a parse cache, and faults.
pub struct Engine {
    db: Mutex<Database>,
    cache: Mutex<HashMap<String, Arc<Vec<Stmt>>>>,
    /// Injected faults.
    pub faults: Faults,
}

/// How often a statement waiting for a row lock tries again.
const LOCK_POLL: Duration = Duration::from_millis(1);

/// Parsed batches kept for reuse (parameterised statements repeat their text).
const CACHE_LIMIT: usize = 4096;

impl Engine {
    /// An engine over a database.
    pub fn new(db: Database) -> Self {
        Self { db: Mutex::new(db), cache: Mutex::new(HashMap::new()), faults: Faults::default() }
    }

    /// Runs `f` with the database locked (jobs and tests use it).
    pub fn with_db<T>(&self, f: impl FnOnce(&mut Database) -> T) -> T {
        let mut db = crate::lock(&self.db);
        f(&mut db)
    }

    fn parse(&self, sql: &str) -> SqlResult<Arc<Vec<Stmt>>> {
        if let Some(hit) = crate::lock(&self.cache).get(sql) {
            return Ok(hit.clone());
        }
        let parsed = Arc::new(parse_batch(sql)?);
        let mut cache = crate::lock(&self.cache);
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(sql.to_owned(), parsed.clone());
        Ok(parsed)
    }

    /// Executes a batch with parameters (`@name` → value), as `sp_executesql` or a plain batch.
    pub fn execute(&self, session: &mut Session, sql: &str, params: &[(String, Value)]) -> BatchOutcome {
        let mut outcome = BatchOutcome::default();
        let statements = match self.parse(sql) {
            Ok(statements) => statements,
            Err(error) => {
                outcome.error = Some(error);
                return outcome;
            }
        };
        // Variables live for one batch, as in T-SQL.
        session.variables.clear();
        let given: HashMap<String, Value> = params.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
        let mut params_map = given.clone();
        for statement in statements.iter() {
            let simulator_call = matches!(statement, Stmt::Sql(s) if procs::is_simulator_procedure(s));
            if !simulator_call {
                match self.faults.next() {
                    Some(Fault::Deadlock) => {
                        self.rollback(session);
                        outcome.error = Some(SqlError::deadlock_victim(session.spid));
                        return outcome;
                    }
                    Some(Fault::LockTimeout) => {
                        outcome.error = Some(SqlError::lock_timeout());
                        return outcome;
                    }
                    Some(Fault::Disconnect) => {
                        self.rollback(session);
                        outcome.disconnect = true;
                        return outcome;
                    }
                    Some(Fault::Delay(duration)) => std::thread::sleep(duration),
                    None => {}
                }
            }
            for (name, (_, value)) in &session.variables {
                if !given.contains_key(name) {
                    params_map.insert(name.clone(), value.clone());
                }
            }
            match self.statement_waiting(session, statement, &params_map) {
                Ok(outputs) => outcome.outputs.extend(outputs),
                Err(error) => {
                    // As SQL Server with XACT_ABORT off: the batch stops and the failed
                    // statement's work is undone; a deadlock victim and a SNAPSHOT
                    // transaction with an update conflict lose their transaction.
                    if matches!(error.number, 1205 | 3960) {
                        self.rollback(session);
                    }
                    outcome.error = Some(error);
                    return outcome;
                }
            }
        }
        outcome
    }

    /// Runs a statement; one stopped by another transaction's row lock is retried (its partial
    /// work undone) until the lock is released, `LOCK_TIMEOUT` runs out (1222), or the wait
    /// closes a cycle of waiting transactions (1205: this session is the victim).
    fn statement_waiting(&self, session: &mut Session, statement: &Stmt, params: &HashMap<String, Value>) -> SqlResult<Vec<Output>> {
        let started = Instant::now();
        let waiter = session.txn.as_ref().map(|txn| txn.tran_id);
        let result = loop {
            match self.statement(session, statement, params) {
                Err(SqlError { blocked_by: Some(holder), .. }) => {
                    if let Some(waiter) = waiter
                        && self.with_db(|db| db.wait_for(waiter, holder))
                    {
                        break Err(SqlError::deadlock_victim(session.spid));
                    }
                    let timeout = u64::try_from(session.lock_timeout_ms).ok().map(Duration::from_millis);
                    if timeout.is_some_and(|timeout| started.elapsed() >= timeout) {
                        break Err(SqlError::lock_timeout());
                    }
                    std::thread::sleep(LOCK_POLL);
                }
                other => break other,
            }
        };
        if let Some(waiter) = waiter {
            self.with_db(|db| db.stop_waiting(waiter));
        }
        result
    }

    fn rollback(&self, session: &mut Session) {
        if let Some(txn) = session.txn.take() {
            self.with_db(|db| db.rollback(txn));
        }
        session.tran_count = 0;
    }

    fn statement(&self, session: &mut Session, statement: &Stmt, params: &HashMap<String, Value>) -> SqlResult<Vec<Output>> {
        let mut db = crate::lock(&self.db);
        db.run_capture();
        let info = SessionInfo { spid: session.spid, tran_count: session.tran_count };
        let statement = match statement {
            Stmt::Sql(statement) => statement.as_ref(),
            Stmt::AlterColumn { table, column, data_type, nullable, text } => {
                return self.write(&mut db, session, |db, txn| ddl::alter_column(db, txn, table, column, data_type, *nullable, text).map(|()| vec![Output::Done]));
            }
            Stmt::AlterDatabase { option, on } => {
                match option.as_str() {
                    "ALLOW_SNAPSHOT_ISOLATION" => db.allow_snapshot_isolation = *on,
                    "READ_COMMITTED_SNAPSHOT" => db.read_committed_snapshot = *on,
                    other => return Err(SqlError::unsupported(&format!("ALTER DATABASE SET {other}"))),
                }
                return Ok(vec![Output::Done]);
            }
        };
        if matches!(statement, Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)) {
            // A SNAPSHOT transaction's snapshot starts with its first statement that touches
            // data; its writes then check for update conflicts.
            db.read_view(session.txn.as_mut(), session.isolation)?;
        }
        match statement {
            Statement::Query(query) => {
                let view = db.read_view(session.txn.as_mut(), session.isolation)?;
                let ctx = Ctx { db: &db, params, session: info, view };
                Ok(vec![Output::Rows(query::run(query, &ctx)?)])
            }
            Statement::Insert(insert) => self.write(&mut db, session, |db, txn| dml::insert(db, txn, insert, params, info).map(|n| vec![Output::Count(n)])),
            Statement::Update(update) => self.write(&mut db, session, |db, txn| dml::update(db, txn, update, params, info).map(|n| vec![Output::Count(n)])),
            Statement::Delete(delete) => self.write(&mut db, session, |db, txn| dml::delete(db, txn, delete, params, info).map(|n| vec![Output::Count(n)])),
            Statement::CreateTable(create) => self.write(&mut db, session, |db, txn| ddl::create_table(db, txn, create).map(|()| vec![Output::Done])),
            Statement::AlterTable(alter) => {
                let text = computed::original_text(&statement.to_string());
                self.write(&mut db, session, |db, txn| ddl::alter_table(db, txn, alter, &text).map(|()| vec![Output::Done]))
            }
            Statement::Drop { object_type: sqlparser::ast::ObjectType::Table, names, if_exists, .. } => {
                self.write(&mut db, session, |db, txn| ddl::drop_tables(db, txn, names, *if_exists).map(|()| vec![Output::Done]))
            }
            Statement::StartTransaction { .. } => {
                if session.txn.is_none() {
                    session.txn = Some(db.begin());
                }
                session.tran_count += 1;
                Ok(vec![Output::Done])
            }
            Statement::Commit { .. } => {
                if session.tran_count == 0 {
                    return Err(SqlError::new(3902, 16, "The COMMIT TRANSACTION request has no corresponding BEGIN TRANSACTION."));
                }
                session.tran_count -= 1;
                if session.tran_count == 0
                    && let Some(txn) = session.txn.take() {
                        db.commit(txn);
                        db.run_capture();
                    }
                Ok(vec![Output::Done])
            }
            Statement::Rollback { .. } => {
                if session.tran_count == 0 {
                    return Err(SqlError::new(3903, 16, "The ROLLBACK TRANSACTION request has no corresponding BEGIN TRANSACTION."));
                }
                if let Some(txn) = session.txn.take() {
                    db.rollback(txn);
                }
                session.tran_count = 0;
                Ok(vec![Output::Done])
            }
            Statement::Set(set) => {
                procs::set_statement(session, set)?;
                Ok(vec![Output::Done])
            }
            Statement::Declare { stmts } => {
                for declare in stmts {
                    let ty = match &declare.data_type {
                        Some(data_type) => expr::data_type_of(data_type)?,
                        None => return Err(SqlError::unsupported("DECLARE without a type")),
                    };
                    let value = match &declare.assignment {
                        Some(sqlparser::ast::DeclareAssignment::Expr(e) | sqlparser::ast::DeclareAssignment::Default(e)) => {
                            let ctx = Ctx { db: &db, params, session: info, view: ReadView::Dirty };
                            Compiler { scope: &[], params, session: info, aggs: None }.compile(e)?.eval(&[], &[], &ctx)?.cast(ty)?
                        }
                        _ => Value::Null,
                    };
                    for name in &declare.names {
                        session.variables.insert(name.value.to_ascii_lowercase(), (ty, value.clone()));
                    }
                }
                Ok(vec![Output::Done])
            }
            Statement::Execute { name: Some(name), parameters, .. } => {
                let parts = expr::object_name(name);
                procs::execute(self, &mut db, session, &parts, parameters, params)
            }
            Statement::Use(_) => Ok(vec![Output::Done]),
            other => Err(SqlError::unsupported(&format!("the statement `{}`", first_words(&other.to_string())))),
        }
    }

    /// Runs a writing statement in the session's transaction, or in its own (autocommit).
    fn write(
        &self,
        db: &mut Database,
        session: &mut Session,
        work: impl FnOnce(&mut Database, &mut OpenTxn) -> SqlResult<Vec<Output>>,
    ) -> SqlResult<Vec<Output>> {
        match session.txn.as_mut() {
            Some(txn) => {
                let savepoint = Database::savepoint(txn);
                let result = work(db, txn);
                if result.is_err() {
                    db.rollback_to(txn, savepoint);
                }
                result
            }
            None => {
                let mut txn = db.begin();
                match work(db, &mut txn) {
                    Ok(outputs) => {
                        db.commit(txn);
                        db.run_capture();
                        Ok(outputs)
                    }
                    Err(error) => {
                        db.rollback(txn);
                        Err(error)
                    }
                }
            }
        }
    }
}

fn first_words(text: &str) -> String {
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_split_and_alter_column_is_parsed() {
        let statements = parse_batch("SELECT 1; ALTER TABLE dbo.t ALTER COLUMN amount decimal(20,4) NOT NULL; SELECT 2").unwrap();
        assert_eq!(statements.len(), 3);
        match &statements[1] {
            Stmt::AlterColumn { column, nullable, text, .. } => {
                assert_eq!(column.value, "amount");
                assert_eq!(*nullable, Some(false));
                assert_eq!(text, "ALTER TABLE dbo.t ALTER COLUMN amount decimal(20,4) NOT NULL");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse_batch("SELEC 1").unwrap_err().number, 102);
    }
}
