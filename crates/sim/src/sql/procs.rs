//! Stored procedures: the CDC system procedures, `sp_executesql`, `SET` options, and the
//! simulator's own `sim.*` procedures (faults, jobs, clock).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use sqlparser::ast::{BinaryOperator, Expr, Set, SetSessionParamKind, Statement, TransactionIsolationLevel, TransactionMode};

use super::expr::{object_name, Compiler, Ctx, SessionInfo};
use super::{ColumnMeta, Engine, Output, ResultSet, Session};
use crate::cdc::{CaptureInstance, CapturedColumn};
use crate::db::{Database, Isolation};
use crate::error::{SqlError, SqlResult};
use crate::fault::Fault;
use mssql_cdc_types::lsn::Lsn;
use crate::types::{Len, SqlType, SYSNAME};
use crate::value::Value;
use crate::versions::ReadView;

/// Whether a statement calls one of the simulator's own procedures (exempt from faults).
pub fn is_simulator_procedure(statement: &Statement) -> bool {
    match statement {
        Statement::Execute { name: Some(name), .. } => object_name(name).first().is_some_and(|schema| schema.eq_ignore_ascii_case("sim")),
        _ => false,
    }
}

/// Procedure arguments: named (`@x = v`) and positional, evaluated as constants.
struct Args {
    procedure: String,
    named: HashMap<String, Value>,
    positional: Vec<Value>,
}

impl Args {
    fn parse(procedure: &str, db: &Database, exprs: &[Expr], params: &HashMap<String, Value>, session: SessionInfo) -> SqlResult<Self> {
        let ctx = Ctx { db, params, session, view: ReadView::Dirty };
        let eval = |expr: &Expr| -> SqlResult<Value> { Compiler { scope: &[], params, session, aggs: None }.compile(expr)?.eval(&[], &[], &ctx) };
        let mut named = HashMap::new();
        let mut positional = Vec::new();
        for expr in exprs {
            match expr {
                Expr::BinaryOp { left, op: BinaryOperator::Eq, right } if matches!(left.as_ref(), Expr::Identifier(i) if i.value.starts_with('@')) => {
                    let Expr::Identifier(ident) = left.as_ref() else { unreachable!("matched above") };
                    named.insert(ident.value.to_ascii_lowercase(), eval(right)?);
                }
                other => positional.push(eval(other)?),
            }
        }
        Ok(Self { procedure: procedure.to_owned(), named, positional })
    }

    /// The value of parameter `name` (with `@`), by name or by its position.
    fn get(&self, name: &str, position: usize) -> Option<&Value> {
        self.named.get(name).or_else(|| self.positional.get(position))
    }

    fn text(&self, name: &str, position: usize) -> Option<String> {
        self.get(name, position).and_then(Value::to_text)
    }

    fn required_text(&self, name: &str, position: usize) -> SqlResult<String> {
        match self.get(name, position) {
            None => Err(SqlError::missing_parameter(&self.procedure, name)),
            Some(value) => value.to_text().filter(|t| !t.trim().is_empty()).ok_or_else(|| {
                SqlError::new(22963, 16, format!("Parameter '{name}' cannot be null or empty. Specify a value for the named parameter and retry the operation."))
            }),
        }
    }

    fn int(&self, name: &str, position: usize) -> SqlResult<Option<i64>> {
        match self.get(name, position) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => Ok(value.cast(SqlType::BigInt)?.as_i64()),
        }
    }
}

/// Runs `EXEC <name> <args>`.
pub fn execute(engine: &Engine, db: &mut Database, session: &mut Session, parts: &[String], exprs: &[Expr], params: &HashMap<String, Value>) -> SqlResult<Vec<Output>> {
    let lower: Vec<String> = parts.iter().map(|p| p.to_ascii_lowercase()).collect();
    let info = SessionInfo { spid: session.spid, tran_count: session.tran_count };
    let (schema, name) = match lower.as_slice() {
        [name] => ("sys", name.as_str()),
        [schema, name] => (schema.as_str(), name.as_str()),
        _ => return Err(SqlError::unknown_procedure(&parts.join("."))),
    };
    let display = format!("{schema}.{name}");
    let args = Args::parse(&display, db, exprs, params, info)?;
    let status = |outputs: Vec<Output>| {
        let mut outputs = outputs;
        outputs.push(Output::Status(0));
        Ok(outputs)
    };
    match (schema, name) {
        ("sys", "sp_cdc_enable_db") => {
            db.cdc_enabled = true;
            status(vec![])
        }
        ("sys", "sp_cdc_disable_db") => {
            db.cdc_enabled = false;
            db.cdc.instances.clear();
            db.cdc.mapping.clear();
            status(vec![])
        }
        ("sys", "sp_cdc_enable_table") => {
            enable_table(db, &args)?;
            status(vec![])
        }
        ("sys", "sp_cdc_disable_table") => {
            let schema = args.required_text("@source_schema", 0)?;
            let table = args.required_text("@source_name", 1)?;
            let instance = args.required_text("@capture_instance", 2)?;
            let source = db.table(Some(&schema), &table).ok_or_else(|| source_missing(&schema, &table))?.object_id;
            let before = db.cdc.instances.len();
            if instance.eq_ignore_ascii_case("all") {
                db.cdc.instances.retain(|ci| ci.source_object_id != source);
            } else {
                db.cdc.instances.retain(|ci| !(ci.source_object_id == source && ci.name.eq_ignore_ascii_case(&instance)));
            }
            if db.cdc.instances.len() == before {
                return Err(SqlError::new(22960, 16, format!("Change data capture instance '{instance}' has not been enabled for the source table '{schema}.{table}'. Use sys.sp_cdc_help_change_data_capture to verify the capture instance name and retry the operation.")));
            }
            status(vec![])
        }
        ("sys", "sp_cdc_start_job") | ("sys", "sp_cdc_stop_job") => {
            let running = name == "sp_cdc_start_job";
            match args.text("@job_type", 0).unwrap_or_else(|| "capture".to_owned()).to_ascii_lowercase().as_str() {
                "capture" => db.cdc.jobs.capture_running = running,
                "cleanup" => db.cdc.jobs.cleanup_running = running,
                other => return Err(job_type_error(other)),
            }
            status(vec![])
        }
        ("sys", "sp_cdc_change_job") => {
            let job = args.text("@job_type", 0).unwrap_or_else(|| "capture".to_owned()).to_ascii_lowercase();
            if let Some(retention) = args.int("@retention", 6)? {
                if job != "cleanup" {
                    return Err(SqlError::new(22995, 16, "The @retention parameter applies only to the cleanup job."));
                }
                if !(1..=52_494_800).contains(&retention) {
                    return Err(SqlError::new(22994, 16, "The retention value specified for the Change Data Capture cleanup process must be greater than 0 and less than or equal to 52494800."));
                }
                db.cdc.jobs.retention_minutes = retention;
            }
            if !matches!(job.as_str(), "capture" | "cleanup") {
                return Err(job_type_error(&job));
            }
            status(vec![])
        }
        ("sys", "sp_cdc_cleanup_change_table") => {
            let instance = args.required_text("@capture_instance", 0)?;
            let current = db.cdc.instance(&instance).ok_or_else(|| SqlError::new(22960, 16, format!("Change data capture instance '{instance}' has not been enabled.")))?.start_lsn;
            let mark = match args.get("@low_water_mark", 1) {
                None | Some(Value::Null) => current,
                Some(Value::Binary(bytes)) => {
                    let lsn = Lsn::from_bytes(bytes).ok_or_else(|| SqlError::new(22964, 16, "The specified @low_water_mark is not a valid LSN."))?;
                    if !db.cdc.mapping.contains_key(&lsn) {
                        return Err(SqlError::new(22964, 16, format!("LSN {lsn}, specified as the new low end point for the change table associated with capture instance '{instance}', is not a start_lsn value in cdc.lsn_time_mapping.")));
                    }
                    lsn
                }
                Some(_) => return Err(SqlError::new(206, 16, "Operand type clash: @low_water_mark must be binary(10).")),
            };
            db.cleanup_to(Some(&instance), mark);
            status(vec![])
        }
        ("sys", "sp_cdc_help_change_data_capture") => status(vec![Output::Rows(help(db, &args))]),
        ("sys", "sp_cdc_help_jobs") => status(vec![Output::Rows(help_jobs(db))]),
        ("sys", "sp_executesql") => Err(SqlError::unsupported("sp_executesql inside a batch with other statements; send it as an RPC or on its own")),
        ("sim", "inject_fault") => {
            let kind = args.text("@kind", 0).unwrap_or_default().to_ascii_lowercase();
            let count = args.int("@count", 1)?.unwrap_or(1).max(0) as usize;
            let fault = match kind.as_str() {
                "deadlock" | "1205" => Fault::Deadlock,
                "lock_timeout" | "1222" => Fault::LockTimeout,
                "disconnect" => Fault::Disconnect,
                "delay" => Fault::Delay(Duration::from_millis(args.int("@delay_ms", 2)?.unwrap_or(1000).max(0) as u64)),
                other => return Err(SqlError::new(50_000, 16, format!("Unknown fault '{other}': use deadlock, lock_timeout, disconnect or delay."))),
            };
            engine.faults.inject(fault, count);
            status(vec![])
        }
        ("sim", "clear_faults") => {
            engine.faults.clear();
            status(vec![])
        }
        ("sim", "run_capture_job") => {
            db.run_capture();
            status(vec![])
        }
        ("sim", "run_cleanup_job") => {
            db.run_cleanup();
            status(vec![])
        }
        ("sim", "set_clock") => {
            let at = args.get("@utc", 0).cloned().unwrap_or(Value::Null).cast(SqlType::DateTime2(7))?;
            let Value::DateTime(at) = at else { return Err(SqlError::missing_parameter("sim.set_clock", "@utc")) };
            let freeze = args.int("@freeze", 1)?.unwrap_or(1) != 0;
            db.clock.set(at.and_utc(), freeze);
            status(vec![])
        }
        ("sim", "advance_clock") => {
            let millis = args.int("@milliseconds", 1)?.unwrap_or(0) + args.int("@seconds", 0)?.unwrap_or(0) * 1000;
            db.clock.advance(chrono::Duration::milliseconds(millis));
            status(vec![])
        }
        ("sim", "set_capture_lag") => {
            db.config.capture_lag = Duration::from_millis(args.int("@milliseconds", 0)?.unwrap_or(0).max(0) as u64);
            status(vec![])
        }
        _ => Err(SqlError::unknown_procedure(&parts.join("."))),
    }
}

fn job_type_error(job: &str) -> SqlError {
    SqlError::new(22992, 16, format!("The specified @job_type, {job}, is not supported. The value specified for the parameter @job_type must be N'capture' to indicate a capture job, or N'cleanup' to indicate a cleanup job."))
}

fn source_missing(schema: &str, table: &str) -> SqlError {
    SqlError::new(22931, 16, format!("Source table '{schema}.{table}' does not exist in the current database. Ensure that the correct database context is set. Specify a valid schema and table name for the database."))
}

/// Splits `@captured_column_list`: commas, names quoted with `[]` or `""`.
fn split_column_list(list: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in list.chars() {
        match (quote, c) {
            (None, '[') => quote = Some(']'),
            (None, '"') => quote = Some('"'),
            (Some(end), c) if c == end => quote = None,
            (None, ',') => names.push(std::mem::take(&mut current)),
            (_, c) => current.push(c),
        }
    }
    names.push(current);
    names.into_iter().map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect()
}

fn enable_table(db: &mut Database, args: &Args) -> SqlResult<()> {
    if !db.cdc_enabled {
        return Err(SqlError::new(22901, 16, format!("The database '{}' is not enabled for Change Data Capture. Ensure that the correct database context is set and retry the operation. To report on the databases enabled for Change Data Capture, query the is_cdc_enabled column in the sys.databases catalog view.", db.config.database)));
    }
    let schema = args.required_text("@source_schema", 0)?;
    let table_name = args.required_text("@source_name", 1)?;
    if !args.named.contains_key("@role_name") && args.positional.len() < 3 {
        return Err(SqlError::missing_parameter("sys.sp_cdc_enable_table", "@role_name"));
    }
    let role_name = args.text("@role_name", 2).map(|r| r.trim_end().to_owned());
    if role_name.as_deref() == Some("") {
        return Err(SqlError::new(22907, 16, "Parameter @role_name cannot be empty. Specify a value for @role_name that is not empty, or specify NULL to disable gating."));
    }
    let table = db.table(Some(&schema), &table_name).ok_or_else(|| source_missing(&schema, &table_name))?.clone();
    let name = args.text("@capture_instance", 3).map(|n| n.trim_end().to_owned()).unwrap_or_else(|| format!("{}_{}", table.schema, table.name));
    if name.chars().count() > 100 {
        return Err(SqlError::new(22927, 16, format!("The length of the capture instance name '{name}' exceeds 100 characters.")));
    }
    if db.cdc.instances.iter().any(|ci| ci.name.eq_ignore_ascii_case(&name)) {
        return Err(SqlError::new(22926, 16, format!("Could not create a capture instance because the capture instance name '{name}' already exists in the current database. Specify an explicit unique name for the parameter @capture_instance.")));
    }
    if db.cdc.instances.iter().filter(|ci| ci.source_object_id == table.object_id).count() >= 2 {
        return Err(SqlError::new(22962, 16, format!("Two capture instances already exist for source table '{}.{}'. A table can have at most two capture instances. If the current tracking options are not appropriate, disable change tracking for the obsolete instance by using sys.sp_cdc_disable_table and retry the operation.", table.schema, table.name)));
    }
    let index_name = args.text("@index_name", 5);
    if let Some(index) = &index_name
        && table.key_name.as_deref().is_none_or(|k| !k.eq_ignore_ascii_case(index)) {
            return Err(SqlError::new(22928, 16, format!("Index name '{index}' is not a unique index on the source table '{}.{}'.", table.schema, table.name)));
        }
    let key_columns = table.key_columns();
    let supports_net_changes = match args.int("@supports_net_changes", 4)? {
        Some(flag) => flag != 0,
        None => !key_columns.is_empty(),
    };
    if supports_net_changes && key_columns.is_empty() {
        return Err(SqlError::new(22939, 16, format!("The parameter @supports_net_changes is set to 1, but the source table '{}.{}' does not have a primary key defined and no alternate unique index has been specified.", table.schema, table.name)));
    }
    let selected: Vec<String> = match args.text("@captured_column_list", 6) {
        Some(list) => {
            let names = split_column_list(&list);
            for n in &names {
                if n.starts_with("__$") {
                    return Err(SqlError::new(22975, 16, format!("Column '{n}' in @captured_column_list is a reserved column name.")));
                }
                if table.column_index(n).is_none() {
                    return Err(SqlError::new(22930, 16, format!("Could not locate column '{n}' in source table '{}.{}'. Ensure that the column exists.", table.schema, table.name)));
                }
            }
            if let Some(missing) = key_columns.iter().find(|k| !names.iter().any(|n| n.eq_ignore_ascii_case(k))) {
                return Err(SqlError::new(22943, 16, format!("Column '{missing}' of the row identifier index must be included in @captured_column_list.")));
            }
            names
        }
        None => table.columns.iter().map(|c| c.name.clone()).collect(),
    };
    let captured: Vec<CapturedColumn> = table
        .columns
        .iter()
        .filter(|c| selected.iter().any(|s| s.eq_ignore_ascii_case(&c.name)))
        .enumerate()
        .map(|(i, c)| CapturedColumn { name: c.name.clone(), column_id: c.column_id, ty: c.ty, ordinal: i as i32 + 1, computed: c.computed.is_some() })
        .collect();
    let enabled_at = db.next_lsn();
    let object_id = db.next_object_id();
    let now = db.clock.now();
    let create_date = db.config.zone.local(now);
    db.cdc.instances.push(CaptureInstance {
        name,
        object_id,
        source_object_id: table.object_id,
        source_schema: table.schema.clone(),
        source_table: table.name.clone(),
        captured,
        index_name: if key_columns.is_empty() { None } else { table.key_name.clone() },
        index_columns: key_columns,
        start_lsn: enabled_at,
        supports_net_changes,
        role_name,
        create_date,
        enabled_at,
        rows: BTreeMap::new(),
    });
    Ok(())
}

/// `sys.sp_cdc_help_jobs`: the capture and cleanup jobs' settings (the columns of
/// `msdb.dbo.cdc_jobs` SQL Server returns, without `database_id`).
fn help_jobs(db: &Database) -> ResultSet {
    let column = |name: &str, ty: SqlType| ColumnMeta { name: name.to_owned(), ty, nullable: true };
    let columns = vec![
        column("job_id", SqlType::UniqueIdentifier),
        column("job_type", SqlType::NVarChar(Len::N(20))),
        column("job_name", SYSNAME),
        column("maxtrans", SqlType::Int),
        column("maxscans", SqlType::Int),
        column("continuous", SqlType::Bit),
        column("pollinginterval", SqlType::BigInt),
        column("retention", SqlType::BigInt),
        column("threshold", SqlType::BigInt),
    ];
    let database = &db.config.database;
    let job = |kind: &str, retention: Value, id: u8| {
        vec![
            Value::Guid(uuid::Uuid::from_bytes([id; 16])),
            Value::Text(kind.to_owned()),
            Value::Text(format!("cdc.{database}_{kind}")),
            Value::Int(500),
            Value::Int(10),
            Value::Bit(true),
            Value::Int(5),
            retention,
            Value::Int(5000),
        ]
    };
    let rows = vec![job("capture", Value::Int(0), 1), job("cleanup", Value::Int(db.cdc.jobs.retention_minutes), 2)];
    ResultSet { columns, rows }
}

fn help(db: &Database, args: &Args) -> ResultSet {
    let schema = args.text("@source_schema", 0);
    let table = args.text("@source_name", 1);
    let column = |name: &str, ty: SqlType| ColumnMeta { name: name.to_owned(), ty, nullable: true };
    let columns = vec![
        column("source_schema", SYSNAME),
        column("source_table", SYSNAME),
        column("capture_instance", SYSNAME),
        column("object_id", SqlType::Int),
        column("source_object_id", SqlType::Int),
        column("start_lsn", SqlType::Binary(10)),
        column("end_lsn", SqlType::Binary(10)),
        column("supports_net_changes", SqlType::Bit),
        column("has_drop_pending", SqlType::Bit),
        column("role_name", SYSNAME),
        column("index_name", SYSNAME),
        column("filegroup_name", SYSNAME),
        column("create_date", SqlType::DateTime),
        column("index_column_list", SqlType::NVarChar(Len::Max)),
        column("captured_column_list", SqlType::NVarChar(Len::Max)),
    ];
    let quote = |names: Vec<&str>| names.iter().map(|n| format!("[{n}]")).collect::<Vec<_>>().join(", ");
    let rows = db
        .cdc
        .instances
        .iter()
        .filter(|ci| schema.as_ref().is_none_or(|s| ci.source_schema.eq_ignore_ascii_case(s)))
        .filter(|ci| table.as_ref().is_none_or(|t| ci.source_table.eq_ignore_ascii_case(t)))
        .map(|ci| {
            vec![
                Value::Text(ci.source_schema.clone()),
                Value::Text(ci.source_table.clone()),
                Value::Text(ci.name.clone()),
                Value::Int(i64::from(ci.object_id)),
                Value::Int(i64::from(ci.source_object_id)),
                Value::Binary(ci.start_lsn.0.to_vec()),
                Value::Null,
                Value::Bit(ci.supports_net_changes),
                Value::Null,
                ci.role_name.clone().map_or(Value::Null, Value::Text),
                ci.index_name.clone().map_or(Value::Null, Value::Text),
                Value::Null,
                Value::DateTime(ci.create_date).cast(SqlType::DateTime).unwrap_or(Value::Null),
                Value::Text(quote(ci.index_columns.iter().map(String::as_str).collect())),
                Value::Text(quote(ci.captured.iter().map(|c| c.name.as_str()).collect())),
            ]
        })
        .collect();
    ResultSet { columns, rows }
}

/// `SET` statements: session options the simulator honours or accepts.
pub fn set_statement(session: &mut Session, set: &Set) -> SqlResult<()> {
    match set {
        Set::SetSessionParam(SetSessionParamKind::Generic(generic)) => {
            for name in &generic.names {
                match name.to_ascii_uppercase().as_str() {
                    "LOCK_TIMEOUT" => {
                        session.lock_timeout_ms = generic.value.trim().parse().map_err(|_| SqlError::syntax("SET LOCK_TIMEOUT needs a number"))?;
                    }
                    "NOCOUNT" | "ANSI_NULLS" | "ANSI_PADDING" | "ANSI_WARNINGS" | "ANSI_NULL_DFLT_ON" | "ARITHABORT" | "CONCAT_NULL_YIELDS_NULL" | "QUOTED_IDENTIFIER" | "XACT_ABORT" | "TEXTSIZE" | "DATEFORMAT" | "DATEFIRST" | "LANGUAGE" | "CURSOR_CLOSE_ON_COMMIT" | "IMPLICIT_TRANSACTIONS" | "DEADLOCK_PRIORITY" | "NUMERIC_ROUNDABORT" => {
                        if name.eq_ignore_ascii_case("IMPLICIT_TRANSACTIONS") && generic.value.eq_ignore_ascii_case("ON") {
                            return Err(SqlError::unsupported("SET IMPLICIT_TRANSACTIONS ON"));
                        }
                    }
                    other => return Err(SqlError::new(195, 15, format!("'{other}' is not a recognized SET option."))),
                }
            }
            Ok(())
        }
        Set::SetTransaction { modes, .. } => {
            for mode in modes {
                if let TransactionMode::IsolationLevel(level) = mode {
                    session.isolation = match level {
                        TransactionIsolationLevel::ReadUncommitted => Isolation::ReadUncommitted,
                        TransactionIsolationLevel::Snapshot => Isolation::Snapshot,
                        TransactionIsolationLevel::ReadCommitted | TransactionIsolationLevel::RepeatableRead | TransactionIsolationLevel::Serializable => Isolation::ReadCommitted,
                    };
                }
            }
            Ok(())
        }
        Set::SingleAssignment { variable, values, .. } => {
            let name = object_name(variable).join(".").to_ascii_lowercase();
            let Some((ty, _)) = session.variables.get(&name).cloned() else {
                return Err(SqlError::undeclared_variable(&name));
            };
            let [value] = values.as_slice() else { return Err(SqlError::syntax("SET @variable = expression")) };
            let params: HashMap<String, Value> = session.variables.iter().map(|(k, (_, v))| (k.clone(), v.clone())).collect();
            let compiled = Compiler { scope: &[], params: &params, session: SessionInfo { spid: session.spid, tran_count: session.tran_count }, aggs: None }.compile(value)?;
            let super::expr::CExpr::Const(value) = compiled else {
                return Err(SqlError::unsupported("SET @variable with a computed expression"));
            };
            session.variables.insert(name, (ty, value.cast(ty)?));
            Ok(())
        }
        other => Err(SqlError::unsupported(&format!("`{other}`"))),
    }
}
