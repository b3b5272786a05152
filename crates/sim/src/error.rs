//! [`SqlError`]: an error as SQL Server reports it (number, state, class, message).

use std::fmt;

/// An error raised by the simulator, shaped like a SQL Server ERROR token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SqlError {
    /// The message number, e.g. 208 for an unknown object.
    pub number: i32,
    /// The state.
    pub state: u8,
    /// The severity class (16 for user errors, 13 for deadlocks, 14 for login failures).
    pub class: u8,
    /// The message text, as SQL Server words it.
    pub message: String,
    /// For a statement stopped by a row lock: the transaction holding it. The engine waits
    /// and retries such a statement; a client only ever sees 1222 or 1205.
    pub blocked_by: Option<u64>,
}

impl SqlError {
    /// An error with number, class and message; state 1.
    pub fn new(number: i32, class: u8, message: impl Into<String>) -> Self {
        Self { number, state: 1, class, message: message.into(), blocked_by: None }
    }

    /// 207: `Invalid column name '<name>'.`
    pub fn invalid_column(name: &str) -> Self {
        Self::new(207, 16, format!("Invalid column name '{name}'."))
    }

    /// 208: `Invalid object name '<name>'.`
    pub fn invalid_object(name: &str) -> Self {
        Self::new(208, 16, format!("Invalid object name '{name}'."))
    }

    /// 102: a syntax error near a token.
    pub fn syntax(detail: &str) -> Self {
        Self::new(102, 15, format!("Incorrect syntax: {detail}"))
    }

    /// 245: conversion of a value to a type failed.
    pub fn conversion(from_type: &str, value: &str, to_type: &str) -> Self {
        Self::new(245, 16, format!("Conversion failed when converting the {from_type} value '{value}' to data type {to_type}."))
    }

    /// 8114: `Error converting data type <a> to <b>.`
    pub fn converting(from_type: &str, to_type: &str) -> Self {
        Self::new(8114, 16, format!("Error converting data type {from_type} to {to_type}."))
    }

    /// 8115: arithmetic overflow.
    pub fn overflow(from_type: &str, to_type: &str) -> Self {
        Self::new(8115, 16, format!("Arithmetic overflow error converting {from_type} to data type {to_type}."))
    }

    /// 8134: `Divide by zero error encountered.`
    pub fn divide_by_zero() -> Self {
        Self::new(8134, 16, "Divide by zero error encountered.")
    }

    /// 2628: string or binary data would be truncated.
    pub fn truncated(table: &str, column: &str, value: &str) -> Self {
        Self::new(
            2628,
            16,
            format!("String or binary data would be truncated in table '{table}', column '{column}'. Truncated value: '{value}'."),
        )
    }

    /// 2627: primary key violation.
    pub fn duplicate_key(constraint: &str, table: &str, key: &str) -> Self {
        Self::new(
            2627,
            14,
            format!(
                "Violation of PRIMARY KEY constraint '{constraint}'. Cannot insert duplicate key in object '{table}'. The duplicate key value is ({key})."
            ),
        )
    }

    /// 515: NULL into a NOT NULL column.
    pub fn null_not_allowed(column: &str, table: &str, statement: &str) -> Self {
        Self::new(
            515,
            16,
            format!("Cannot insert the value NULL into column '{column}', table '{table}'; column does not allow nulls. {statement} fails."),
        )
    }

    /// 1205: chosen as deadlock victim.
    pub fn deadlock_victim(spid: u16) -> Self {
        Self::new(
            1205,
            13,
            format!(
                "Transaction (Process ID {spid}) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction."
            ),
        )
    }

    /// A statement waiting for `holder`'s row lock (becomes 1222 when `LOCK_TIMEOUT` runs out).
    pub fn blocked(holder: u64) -> Self {
        Self { blocked_by: Some(holder), ..Self::lock_timeout() }
    }

    /// 3952: SNAPSHOT isolation in a database that does not allow it.
    pub fn snapshot_not_allowed(database: &str) -> Self {
        Self::new(
            3952,
            16,
            format!("Snapshot isolation transaction failed accessing database '{database}' because snapshot isolation is not allowed in this database. Use ALTER DATABASE to allow snapshot isolation."),
        )
    }

    /// 3960: a SNAPSHOT transaction writing a row changed since its snapshot.
    pub fn update_conflict(table: &str) -> Self {
        Self::new(
            3960,
            16,
            format!("Snapshot isolation transaction aborted due to update conflict. You cannot use snapshot isolation to access table '{table}' to update, delete, or insert the row that has been modified or deleted by another transaction. Retry the transaction or change the isolation level for the update/delete statement."),
        )
    }

    /// 3961: a SNAPSHOT transaction reading a table whose definition changed since its snapshot.
    pub fn snapshot_ddl_changed(database: &str) -> Self {
        Self::new(
            3961,
            16,
            format!("Snapshot isolation transaction failed in database '{database}' because the object accessed by the statement has been modified by a DDL statement in another concurrent transaction since the start of this transaction. It is disallowed because the metadata is not versioned."),
        )
    }

    /// 1222: `Lock request time out period exceeded.`
    pub fn lock_timeout() -> Self {
        Self::new(1222, 16, "Lock request time out period exceeded.")
    }

    /// 313 state 3: what the CDC table-valued functions raise for an invalid LSN range.
    pub fn cdc_invalid_range(function: &str) -> Self {
        let family = if function.starts_with("fn_cdc_get_net_changes_") { "fn_cdc_get_net_changes_" } else { "fn_cdc_get_all_changes_" };
        Self {
            number: 313,
            state: 3,
            class: 16,
            message: format!("An insufficient number of arguments were supplied for the procedure or function cdc.{family} ... ."),
            blocked_by: None,
        }
    }

    /// 18456: login failure (the client is never told why).
    pub fn login_failed(user: &str) -> Self {
        Self::new(18456, 14, format!("Login failed for user '{user}'."))
    }

    /// 201: a required procedure parameter is missing.
    pub fn missing_parameter(procedure: &str, parameter: &str) -> Self {
        Self::new(201, 16, format!("Procedure or function '{procedure}' expects parameter '{parameter}', which was not supplied."))
    }

    /// 2812: unknown stored procedure.
    pub fn unknown_procedure(name: &str) -> Self {
        Self::new(2812, 16, format!("Could not find stored procedure '{name}'."))
    }

    /// 195: unknown built-in function.
    pub fn unknown_function(name: &str) -> Self {
        Self::new(195, 15, format!("'{name}' is not a recognized built-in function name."))
    }

    /// 137: an undeclared variable.
    pub fn undeclared_variable(name: &str) -> Self {
        Self::new(137, 15, format!("Must declare the scalar variable \"{name}\"."))
    }

    /// 40000-range: a feature the simulator does not implement (never a silent wrong answer).
    pub fn unsupported(what: &str) -> Self {
        Self::new(40_000, 16, format!("The SQL Server simulator does not support {what}."))
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Msg {}, Level {}, State {}: {}", self.number, self.class, self.state, self.message)
    }
}

impl std::error::Error for SqlError {}

/// Result of simulator operations.
pub type SqlResult<T> = Result<T, SqlError>;
