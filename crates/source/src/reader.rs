//! The T-SQL the source runs. Every statement is parameterised with a text that stays the same
//! for the stream's life (one cached plan each on SQL Server), reads `cdc.lsn_time_mapping` and
//! the change table through their clustered indexes (`start_lsn`, `__$start_lsn`), and looks
//! commit times up once per batch, never per row.

use chrono::{DateTime, FixedOffset, NaiveDateTime};
use futures::TryStreamExt;
use tiberius::{ColumnData, Row};

use super::config::{ColumnChoice, MssqlSourceSettings};
use super::connection::{Connector, TdsClient};
use super::error::SourceError;
use super::rows::ChangeCoordinates;
use mssql_cdc_core::log::schema::{Column, ColumnType, TableSchema};
use mssql_cdc_types::lsn::Lsn;

/// A resolved capture instance.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Its name, as SQL Server spells it.
    pub name: String,
    /// The source table's schema.
    pub source_schema: String,
    /// The source table.
    pub source_table: String,
    /// The key columns CDC tracks (its unique index).
    pub index_columns: Vec<String>,
    /// Its low water mark (`start_lsn`): it holds every change after it. Zero while SQL
    /// Server reports it NULL (a just-enabled instance whose low end is not set yet).
    pub start_lsn: Lsn,
    /// When it was enabled (`create_date`, server-local): of two on a table, the later is the
    /// newer.
    pub created: Option<NaiveDateTime>,
}

impl Instance {
    /// Whether `other` captures the same source table.
    pub fn same_table(&self, other: &Instance) -> bool {
        self.source_schema.eq_ignore_ascii_case(&other.source_schema) && self.source_table.eq_ignore_ascii_case(&other.source_table)
    }

    /// The default name SQL Server gives an instance of the table: `<schema>_<table>`.
    pub fn default_name(&self) -> String {
        format!("{}_{}", self.source_schema, self.source_table)
    }
}

/// The server's CDC state before a batch.
#[derive(Clone, Debug)]
pub struct ServerState {
    /// `sys.fn_cdc_get_max_lsn()`.
    pub max_lsn: Lsn,
    /// `sys.fn_cdc_get_min_lsn(<instance>)`.
    pub min_lsn: Lsn,
    /// `SYSDATETIMEOFFSET()`.
    pub now: DateTime<FixedOffset>,
    /// Local commit time of `max_lsn` (`sys.fn_cdc_map_lsn_to_time`).
    pub max_lsn_time: Option<NaiveDateTime>,
}

/// One row of a change table as read: its coordinates, `__$command_id` (when read) and the
/// captured values in column order.
pub struct ChangeRow {
    /// `__$start_lsn`, `__$seqval`, `__$operation`.
    pub at: ChangeCoordinates,
    /// `__$command_id`.
    pub command_id: Option<i32>,
    /// The captured columns.
    pub values: Vec<ColumnData<'static>>,
}

/// A commit of `cdc.lsn_time_mapping`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    /// Its LSN.
    pub lsn: Lsn,
    /// `tran_end_time`: server-local time.
    pub local_time: NaiveDateTime,
}

/// Runs one statement and returns its first result set.
async fn rows(client: &mut TdsClient, connector: &Connector, sql: &str, params: &[&dyn tiberius::ToSql]) -> Result<Vec<Row>, SourceError> {
    let stream = client.query(sql, params).await.map_err(|e| connector.error(e))?;
    stream.into_first_result().await.map_err(|e| connector.error(e))
}

fn text(row: &Row, index: usize) -> Option<String> {
    row.try_get::<&str, _>(index).ok().flatten().map(str::to_owned)
}

fn lsn(row: &Row, index: usize) -> Option<Lsn> {
    row.try_get::<&[u8], _>(index).ok().flatten().and_then(Lsn::from_bytes)
}

/// `DB_NAME()`.
pub async fn database_name(client: &mut TdsClient, connector: &Connector) -> Result<String, SourceError> {
    let rows = rows(client, connector, "SELECT DB_NAME()", &[]).await?;
    rows.first().and_then(|r| text(r, 0)).ok_or_else(|| SourceError::Sql { message: "DB_NAME() returned nothing".into(), code: None, transient: false })
}

/// Finds the configured capture instance: ignoring case, an exact match winning, and two that
/// differ only in case refused.
pub async fn resolve_instance(client: &mut TdsClient, connector: &Connector, wanted: &str) -> Result<Instance, SourceError> {
    choose_instance(instances(client, connector).await?, wanted)
}

/// Every capture instance of the database (`sys.sp_cdc_help_change_data_capture`).
pub async fn instances(client: &mut TdsClient, connector: &Connector) -> Result<Vec<Instance>, SourceError> {
    let rows = rows(client, connector, "EXEC sys.sp_cdc_help_change_data_capture", &[]).await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            Some(Instance {
                source_schema: text(row, 0)?,
                source_table: text(row, 1)?,
                name: text(row, 2)?,
                index_columns: text(row, 13).map(|list| split_column_list(&list)).unwrap_or_default(),
                start_lsn: lsn(row, 5).unwrap_or(Lsn::ZERO),
                created: row.try_get::<NaiveDateTime, _>(12).ok().flatten(),
            })
        })
        .collect())
}

/// The newest of `all` on `of`'s table other than `of`, if it is newer than `of`.
pub fn newer_instance<'a>(all: &'a [Instance], of: &Instance) -> Option<&'a Instance> {
    let order = |i: &Instance| (i.created, i.start_lsn);
    all.iter().filter(|i| i.same_table(of) && i.name != of.name && order(i) > order(of)).max_by_key(|i| order(i))
}

/// The choice rule of [`resolve_instance`], pure. A name no instance has, which is the default
/// name of a table's instance (`<schema>_<table>`, as SQL Server names the first), resolves to
/// that table's newest instance: the configured one was disabled after a newer replaced it.
pub fn choose_instance(all: Vec<Instance>, wanted: &str) -> Result<Instance, SourceError> {
    if let Some(exact) = all.iter().find(|i| i.name == wanted) {
        return Ok(exact.clone());
    }
    let mut matches: Vec<Instance> = all.iter().filter(|i| i.name.to_lowercase() == wanted.to_lowercase()).cloned().collect();
    let of_default: Vec<&Instance> = all.iter().filter(|i| i.default_name().eq_ignore_ascii_case(wanted)).collect();
    if matches.is_empty()
        && let Some(first) = of_default.first()
    {
        let newest = newer_instance(&all, first).unwrap_or(first);
        return Ok(newest.clone());
    }
    match matches.len() {
        1 => Ok(matches.remove(0)),
        0 => {
            let known: Vec<&str> = all.iter().map(|i| i.name.as_str()).collect();
            Err(SourceError::CaptureInstance(format!("no capture instance `{wanted}` in the database; it has: {}", if known.is_empty() { "none".to_owned() } else { known.join(", ") })))
        }
        _ => {
            let names: Vec<&str> = matches.iter().map(|i| i.name.as_str()).collect();
            Err(SourceError::CaptureInstance(format!("`{wanted}` matches {} ignoring case; give the exact name", names.join(" and "))))
        }
    }
}

/// `[a], [b c]` → `a`, `b c`.
fn split_column_list(list: &str) -> Vec<String> {
    list.split(',').map(|part| part.trim().trim_start_matches('[').trim_end_matches(']').replace("]]", "]")).filter(|p| !p.is_empty()).collect()
}

/// Quotes a name for T-SQL.
pub fn quote(name: &str) -> String {
    format!("[{}]", name.replace(']', "]]"))
}

/// A capture instance's table as the stream reads it.
#[derive(Clone, Debug)]
pub struct CapturedTable {
    /// The record layout.
    pub schema: TableSchema,
    /// The select list of the captured columns (casts applied).
    pub select: Vec<String>,
    /// Each captured column's SQL Server type name (`varchar`, `datetime`, ...), by name.
    pub sql_types: Vec<(String, String)>,
    /// The columns left out or read as NULL, and why.
    pub notes: ColumnNotes,
}

/// A column some capture instance of the table captures, as the catalog describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct CatalogColumn {
    /// Its name.
    pub name: String,
    /// Its SQL Server type name (`sys.types.name`).
    pub type_name: String,
    /// `sys.columns.precision`.
    pub precision: u8,
    /// `sys.columns.scale`.
    pub scale: u8,
    /// A computed column (`cdc.captured_columns.is_computed`): CDC stores NULL for it.
    pub computed: bool,
    /// Captured by the instance the stream reads (otherwise only by another instance of the
    /// same table).
    pub here: bool,
}

/// Columns the schema leaves out or reads as NULL, for the warning the stream records.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ColumnNotes {
    /// Computed columns left out of the log (`columns` omitted).
    pub computed_left_out: Vec<String>,
    /// Computed columns `columns` lists: NULL in every row, snapshot rows too.
    pub computed_null: Vec<String>,
    /// Columns `columns` lists that only another capture instance of the table captures: NULL
    /// until the stream reads an instance that captures them.
    pub other_instance: Vec<String>,
}

impl ColumnNotes {
    /// Whether there is nothing to warn about.
    pub fn is_empty(&self) -> bool {
        self.computed_left_out.is_empty() && self.computed_null.is_empty() && self.other_instance.is_empty()
    }

    /// The columns published as NULL in every row (listed computed ones, and those only
    /// another instance captures).
    pub fn null_columns(&self) -> Vec<String> {
        self.computed_null.iter().chain(&self.other_instance).cloned().collect()
    }

    /// The `column_warnings` event of these notes, `None` when there are none.
    pub fn event(&self, capture_instance: &str) -> Option<mssql_cdc_core::log::control::Event> {
        (!self.is_empty()).then(|| {
            mssql_cdc_core::log::control::Event::ColumnWarnings(mssql_cdc_core::log::control::ColumnWarnings {
                capture_instance: capture_instance.to_owned(),
                computed_left_out: self.computed_left_out.clone(),
                computed_null: self.computed_null.clone(),
                other_instance: self.other_instance.clone(),
            })
        })
    }
}

/// The captured columns with their types, and the select list that reads them (casts
/// applied), following the `columns` option; `columns` may name a column any capture instance
/// of the table captures.
pub async fn table_schema(client: &mut TdsClient, connector: &Connector, instance: &Instance, options: &MssqlSourceSettings) -> Result<CapturedTable, SourceError> {
    let sql = "SELECT ct.capture_instance, cc.column_name, t.name, c.precision, c.scale, cc.is_computed \
               FROM cdc.change_tables me \
               JOIN cdc.change_tables ct ON ct.source_object_id = me.source_object_id \
               JOIN cdc.captured_columns cc ON cc.object_id = ct.object_id \
               JOIN sys.columns c ON c.object_id = ct.object_id AND c.name = cc.column_name \
               JOIN sys.types t ON t.user_type_id = c.user_type_id \
               WHERE me.capture_instance = @P1 \
               ORDER BY ct.capture_instance, cc.column_ordinal";
    let rows = rows(client, connector, sql, &[&instance.name.as_str()]).await?;
    let mut here = Vec::new();
    let mut elsewhere: Vec<CatalogColumn> = Vec::new();
    for row in &rows {
        let column = CatalogColumn {
            name: text(row, 1).unwrap_or_default(),
            type_name: text(row, 2).unwrap_or_default(),
            precision: row.try_get::<u8, _>(3).ok().flatten().unwrap_or(0),
            scale: row.try_get::<u8, _>(4).ok().flatten().unwrap_or(0),
            computed: row.try_get::<bool, _>(5).ok().flatten().unwrap_or(false),
            here: text(row, 0).is_some_and(|ci| ci == instance.name),
        };
        if column.here {
            here.push(column);
        } else if !elsewhere.iter().any(|c| c.name == column.name) {
            elsewhere.push(column);
        }
    }
    // The instance's own columns first, in its order; then what only another instance has.
    elsewhere.retain(|other| !here.iter().any(|c| c.name == other.name));
    let catalog: Vec<CatalogColumn> = here.into_iter().chain(elsewhere).collect();
    let (schema, select, notes) = build_schema(&instance.name, &instance.index_columns, &catalog, &options.columns, options.include_command_id)?;
    let sql_types = catalog.into_iter().filter(|c| c.here).map(|c| (c.name, c.type_name.to_ascii_lowercase())).collect();
    Ok(CapturedTable { schema, select, sql_types, notes })
}

/// Builds the schema and select list from the catalog's facts, pure. Without `columns`, the
/// instance's captured columns but its computed ones; a listed computed column, or one only
/// another instance captures, is selected as a typed NULL.
pub fn build_schema(
    capture_instance: &str,
    index_columns: &[String],
    catalog: &[CatalogColumn],
    choices: &[ColumnChoice],
    include_command_id: bool,
) -> Result<(TableSchema, Vec<String>, ColumnNotes), SourceError> {
    let schema_error = |message: String| SourceError::Schema { capture_instance: capture_instance.to_owned(), message };
    if !catalog.iter().any(|c| c.here) {
        return Err(schema_error("the capture instance has no captured columns".into()));
    }
    let find = |name: &str| catalog.iter().find(|c| c.name == name).or_else(|| catalog.iter().find(|c| c.name.eq_ignore_ascii_case(name)));
    let mut notes = ColumnNotes::default();
    let wanted: Vec<ColumnChoice> = if choices.is_empty() {
        notes.computed_left_out = catalog.iter().filter(|c| c.here && c.computed).map(|c| c.name.clone()).collect();
        catalog.iter().filter(|c| c.here && !c.computed).map(|c| ColumnChoice { name: c.name.clone(), cast: None }).collect()
    } else {
        choices.to_vec()
    };
    let mut columns = Vec::new();
    let mut select = Vec::new();
    for ColumnChoice { name, cast } in wanted {
        let column = find(&name).ok_or_else(|| {
            let captured: Vec<&str> = catalog.iter().map(|c| c.name.as_str()).collect();
            schema_error(format!("columns: `{name}` is captured by no capture instance of the table; captured: {}", captured.join(", ")))
        })?;
        let actual = &column.name;
        let ty = match &cast {
            Some(cast) => cast.ty,
            None => ColumnType::from_sql(&column.type_name, column.precision, column.scale).ok_or_else(|| {
                schema_error(format!("column `{actual}` has type {}, which the log cannot carry; leave it out with `columns` or cast it (e.g. \"{actual} nvarchar(max)\")", column.type_name))
            })?,
        };
        let null = !column.here || column.computed;
        select.push(match &cast {
            // CDC stores NULL for a computed column; the snapshot reads the same NULL.
            _ if null => format!("CAST(NULL AS {}) AS {}", cast.as_ref().map_or_else(|| ty.sql_type(), |c| c.sql_type.clone()), quote(actual)),
            Some(cast) => format!("CAST({} AS {}) AS {}", quote(actual), cast.sql_type, quote(actual)),
            None => quote(actual),
        });
        if !column.here {
            notes.other_instance.push(actual.clone());
        } else if column.computed {
            notes.computed_null.push(actual.clone());
        }
        columns.push(Column { name: actual.clone(), ty });
    }
    let mut key = Vec::new();
    for index_column in index_columns {
        let column = columns
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(index_column))
            .ok_or_else(|| schema_error(format!("columns: the key column `{index_column}` must be listed (records are keyed by it)")))?;
        key.push(column.name.clone());
    }
    // A table without a unique index has no key: its records all carry the empty key (one
    // partition, in order); silver then needs `keys`, and a snapshot `snapshot_keys`.
    Ok((TableSchema { columns, key, include_command_id }, select, notes))
}

/// The maximum and minimum LSNs and the server clock.
pub async fn server_state(client: &mut TdsClient, connector: &Connector, instance: &str) -> Result<ServerState, SourceError> {
    let sql = "SELECT sys.fn_cdc_get_max_lsn(), sys.fn_cdc_get_min_lsn(@P1), SYSDATETIMEOFFSET(), \
               sys.fn_cdc_map_lsn_to_time(sys.fn_cdc_get_max_lsn())";
    let rows = rows(client, connector, sql, &[&instance]).await?;
    let row = rows.first().ok_or_else(|| SourceError::Sql { message: "the state query returned no row".into(), code: None, transient: true })?;
    Ok(ServerState {
        max_lsn: lsn(row, 0).unwrap_or(Lsn::ZERO),
        min_lsn: lsn(row, 1).unwrap_or(Lsn::ZERO),
        now: row.try_get::<DateTime<FixedOffset>, _>(2).ok().flatten().unwrap_or_else(|| chrono::Utc::now().fixed_offset()),
        max_lsn_time: row.try_get::<NaiveDateTime, _>(3).ok().flatten(),
    })
}

/// `CURRENT_TIMEZONE_ID()`, or `None` where the server lacks it (before SQL Server 2022).
pub async fn current_timezone_id(client: &mut TdsClient, connector: &Connector) -> Result<Option<String>, SourceError> {
    match rows(client, connector, "SELECT CURRENT_TIMEZONE_ID()", &[]).await {
        Ok(rows) => Ok(rows.first().and_then(|r| text(r, 0))),
        Err(SourceError::Sql { code: Some(195), .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The cleanup job's retention, minutes (`sys.sp_cdc_help_jobs`), or `None` where the login
/// may not read it (the procedure needs `db_owner`). A transient fault is an error, retried
/// like any other statement's, so a deadlock here is never mistaken for "not readable".
pub async fn retention_minutes(client: &mut TdsClient, connector: &Connector) -> Result<Option<i64>, SourceError> {
    match rows(client, connector, "EXEC sys.sp_cdc_help_jobs", &[]).await {
        Ok(rows) => Ok(rows.iter().find(|r| text(r, 1).as_deref() == Some("cleanup")).and_then(|r| r.try_get::<i64, _>(7).ok().flatten())),
        Err(error) if error.is_transient() => Err(error),
        Err(error) => {
            tracing::info!(error = %error, "the CDC cleanup job's retention is not readable (sys.sp_cdc_help_jobs needs db_owner); retention headroom is not reported");
            Ok(None)
        }
    }
}

/// The commits after `from`, up to `max`: at most `limit` (plus one more, to learn the time of
/// the first commit left for later). Ordered by LSN.
pub async fn plan(client: &mut TdsClient, connector: &Connector, from: Lsn, max: Lsn, limit: Option<u64>) -> Result<Vec<Commit>, SourceError> {
    let top = limit.map(|n| format!("TOP ({}) ", n.saturating_add(1))).unwrap_or_default();
    let sql = format!(
        "SELECT {top}start_lsn, tran_end_time FROM cdc.lsn_time_mapping \
         WHERE start_lsn > @P1 AND start_lsn <= @P2 ORDER BY start_lsn"
    );
    let (from, max) = (from.0.to_vec(), max.0.to_vec());
    let rows = rows(client, connector, &sql, &[&from, &max]).await?;
    Ok(rows
        .iter()
        .filter_map(|row| Some(Commit { lsn: lsn(row, 0)?, local_time: row.try_get::<NaiveDateTime, _>(1).ok().flatten()? }))
        .collect())
}

/// A row of `cdc.ddl_history` for the stream's capture instance.
#[derive(Clone, Debug, PartialEq)]
pub struct Ddl {
    /// `ddl_lsn`: the commit LSN of the DDL.
    pub lsn: Lsn,
    /// `ddl_command`: the statement's text.
    pub command: String,
    /// `required_column_update`: a captured column's type changed.
    pub required_column_update: bool,
    /// `ddl_time`, server-local.
    pub time: Option<NaiveDateTime>,
}

/// The DDL on the capture instance's source table committed after `from`, up to `max`, in
/// LSN order (`cdc.ddl_history`, a small table).
pub async fn ddl_history(client: &mut TdsClient, connector: &Connector, instance: &str, from: Lsn, max: Lsn) -> Result<Vec<Ddl>, SourceError> {
    let sql = "SELECT h.ddl_lsn, h.ddl_command, h.required_column_update, h.ddl_time \
               FROM cdc.ddl_history h JOIN cdc.change_tables ct ON ct.object_id = h.object_id \
               WHERE ct.capture_instance = @P1 AND h.ddl_lsn > @P2 AND h.ddl_lsn <= @P3 \
               ORDER BY h.ddl_lsn";
    let (from, max) = (from.0.to_vec(), max.0.to_vec());
    let rows = rows(client, connector, sql, &[&instance, &from, &max]).await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            Some(Ddl {
                lsn: lsn(row, 0)?,
                command: text(row, 1).unwrap_or_default(),
                required_column_update: row.try_get::<bool, _>(2).ok().flatten().unwrap_or(false),
                time: row.try_get::<NaiveDateTime, _>(3).ok().flatten(),
            })
        })
        .collect())
}

/// The source table's columns now, in column order (`INFORMATION_SCHEMA.COLUMNS`).
pub async fn table_columns(client: &mut TdsClient, connector: &Connector, instance: &Instance) -> Result<Vec<String>, SourceError> {
    let sql = "SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = @P1 AND TABLE_NAME = @P2 ORDER BY ORDINAL_POSITION";
    let rows = rows(client, connector, sql, &[&instance.source_schema.as_str(), &instance.source_table.as_str()]).await?;
    Ok(rows.iter().filter_map(|row| text(row, 0)).collect())
}

/// The text that reads a batch's change rows, in (`__$start_lsn`, `__$seqval`,
/// `__$operation`) order, from the change table's clustered index.
pub fn change_query(instance: &str, select: &[String], include_command_id: bool) -> String {
    let command_id = if include_command_id { "[__$command_id], " } else { "" };
    format!(
        "SELECT [__$start_lsn], [__$seqval], [__$operation], {command_id}{} FROM cdc.{} \
         WHERE [__$start_lsn] > @P1 AND [__$start_lsn] <= @P2 \
         ORDER BY [__$start_lsn], [__$seqval], [__$operation]",
        select.join(", "),
        quote(&format!("{instance}_CT")),
    )
}

/// Starts reading the change rows of `(from, to]`: each comes with its CDC columns and the
/// captured values.
pub async fn read_changes<'a>(
    client: &'a mut TdsClient,
    connector: &'a Connector,
    sql: &str,
    from: Lsn,
    to: Lsn,
    include_command_id: bool,
) -> Result<ChangeRows<'a>, SourceError> {
    let (from, to) = (from.0.to_vec(), to.0.to_vec());
    let stream = client.query(sql, &[&from, &to]).await.map_err(|e| connector.error(e))?;
    Ok(ChangeRows { rows: stream.into_row_stream(), connector, include_command_id })
}

/// The change rows of one read, pulled one at a time.
pub struct ChangeRows<'a> {
    rows: futures::stream::BoxStream<'a, tiberius::Result<Row>>,
    connector: &'a Connector,
    include_command_id: bool,
}

impl ChangeRows<'_> {
    /// The next change row; `None` after the last.
    pub async fn next(&mut self) -> Result<Option<ChangeRow>, SourceError> {
        let Some(row) = self.rows.try_next().await.map_err(|e| self.connector.error(e))? else { return Ok(None) };
        let bad = |what: &str| SourceError::Sql { message: format!("change row without a valid {what}"), code: None, transient: false };
        let mut values: Vec<ColumnData<'static>> = row.into_iter().collect();
        let captured = values.split_off(if self.include_command_id { 4 } else { 3 });
        let mut meta = values.into_iter();
        let start_lsn = match meta.next() {
            Some(ColumnData::Binary(Some(bytes))) => Lsn::from_bytes(&bytes).ok_or_else(|| bad("__$start_lsn"))?,
            _ => return Err(bad("__$start_lsn")),
        };
        let seqval = match meta.next() {
            Some(ColumnData::Binary(Some(bytes))) => Lsn::from_bytes(&bytes).ok_or_else(|| bad("__$seqval"))?,
            _ => return Err(bad("__$seqval")),
        };
        let operation = match meta.next() {
            Some(ColumnData::I32(Some(op))) => op,
            Some(ColumnData::U8(Some(op))) => i32::from(op),
            _ => return Err(bad("__$operation")),
        };
        let command_id = match meta.next() {
            Some(ColumnData::I32(id)) => id,
            _ => None,
        };
        Ok(Some(ChangeRow { at: ChangeCoordinates { start_lsn, seqval, operation }, command_id, values: captured }))
    }
}

/// The table's rows, for a snapshot's progress: an estimate (`NOLOCK`, no waiting on writers).
pub async fn row_estimate(client: &mut TdsClient, connector: &Connector, table: &str) -> Result<Option<u64>, SourceError> {
    let rows = rows(client, connector, &format!("SELECT COUNT_BIG(*) FROM {table} WITH (NOLOCK)"), &[]).await?;
    Ok(rows.first().and_then(|r| r.try_get::<i64, _>(0).ok().flatten()).and_then(|n| u64::try_from(n).ok()))
}

/// The local commit time of `lsn` (`sys.fn_cdc_map_lsn_to_time`), if it is a commit CDC knows.
pub async fn lsn_time(client: &mut TdsClient, connector: &Connector, lsn: Lsn) -> Result<Option<NaiveDateTime>, SourceError> {
    let bytes = lsn.0.to_vec();
    let rows = rows(client, connector, "SELECT sys.fn_cdc_map_lsn_to_time(@P1)", &[&bytes]).await?;
    Ok(rows.first().and_then(|r| r.try_get::<NaiveDateTime, _>(0).ok().flatten()))
}

/// The last commit at or before the local time `at` (`sys.fn_cdc_map_time_to_lsn('largest
/// less than or equal', ...)`); `None` when `cdc.lsn_time_mapping` has none.
pub async fn lsn_at_or_before(client: &mut TdsClient, connector: &Connector, at: NaiveDateTime) -> Result<Option<Lsn>, SourceError> {
    let rows = rows(client, connector, "SELECT sys.fn_cdc_map_time_to_lsn('largest less than or equal', @P1)", &[&at]).await?;
    Ok(rows.first().and_then(|r| lsn(r, 0)).filter(|l| *l != Lsn::ZERO))
}

/// Runs statements that return nothing (transaction control, session options).
pub async fn execute(client: &mut TdsClient, connector: &Connector, sql: &str) -> Result<(), SourceError> {
    let stream = client.simple_query(sql).await.map_err(|e| connector.error(e))?;
    stream.into_results().await.map_err(|e| connector.error(e))?;
    Ok(())
}

/// Starts one keyset read of a snapshot ([`crate::keyset::chunk_query`]): rows of the captured
/// values only, pulled one at a time.
pub async fn read_table<'a>(client: &'a mut TdsClient, connector: &'a Connector, sql: &str, params: &[tiberius::ColumnData<'static>]) -> Result<TableRows<'a>, SourceError> {
    let params: Vec<&dyn tiberius::ToSql> = params.iter().map(|p| p as &dyn tiberius::ToSql).collect();
    let stream = client.query(sql, &params).await.map_err(|e| connector.error(e))?;
    Ok(TableRows { rows: stream.into_row_stream(), connector })
}

/// The rows of one keyset read.
pub struct TableRows<'a> {
    rows: futures::stream::BoxStream<'a, tiberius::Result<Row>>,
    connector: &'a Connector,
}

impl TableRows<'_> {
    /// The next row's values; `None` after the last.
    pub async fn next(&mut self) -> Result<Option<Vec<ColumnData<'static>>>, SourceError> {
        Ok(self.rows.try_next().await.map_err(|e| self.connector.error(e))?.map(|row| row.into_iter().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(name: &str) -> Instance {
        Instance { name: name.into(), source_schema: "dbo".into(), source_table: "t".into(), index_columns: vec!["id".into()], start_lsn: Lsn::ZERO, created: None }
    }

    fn on_orders(name: &str, day: u32) -> Instance {
        let created = chrono::NaiveDate::from_ymd_opt(2026, 1, day).and_then(|d| d.and_hms_opt(0, 0, 0));
        Instance { source_table: "orders".into(), created, ..instance(name) }
    }

    /// Invariant: a disabled default-named instance resolves to its table's newest one; the
    /// newer of two instances is the one enabled later.
    #[test]
    fn a_disabled_default_name_resolves_to_the_tables_newest_instance() {
        let all = vec![on_orders("dbo_orders_v2", 2), on_orders("dbo_orders_v3", 3), instance("dbo_t")];
        assert_eq!(choose_instance(all.clone(), "dbo_orders").unwrap().name, "dbo_orders_v3");
        assert!(choose_instance(all.clone(), "dbo_items").is_err(), "not a default name of any table");
        let old = on_orders("dbo_orders", 1);
        assert_eq!(newer_instance(&all, &old).map(|i| i.name.as_str()), Some("dbo_orders_v3"));
        assert!(newer_instance(&all, &all[1]).is_none(), "none newer than the newest");
        assert!(newer_instance(&all, &all[2]).is_none(), "another table's instances are not newer");
    }

    #[test]
    fn capture_instances_match_ignoring_case_with_exact_winning() {
        let all = vec![instance("dbo_Orders"), instance("dbo_orders"), instance("dbo_items")];
        assert_eq!(choose_instance(all.clone(), "dbo_orders").unwrap().name, "dbo_orders");
        assert_eq!(choose_instance(all.clone(), "DBO_ITEMS").unwrap().name, "dbo_items");
        let ambiguous = choose_instance(all.clone(), "DBO_ORDERS").unwrap_err().to_string();
        assert!(ambiguous.contains("dbo_Orders and dbo_orders"), "{ambiguous}");
        assert!(choose_instance(all, "dbo_nope").unwrap_err().to_string().contains("dbo_items"));
    }

    fn catalog(name: &str, type_name: &str, precision: u8, scale: u8) -> CatalogColumn {
        CatalogColumn { name: name.into(), type_name: type_name.into(), precision, scale, computed: false, here: true }
    }

    fn choose(columns: &[&str]) -> Vec<ColumnChoice> {
        columns.iter().map(|c| crate::config::parse_column(c).unwrap()).collect()
    }

    #[test]
    fn schema_follows_the_columns_option_and_requires_the_key() {
        let captured = vec![catalog("id", "int", 10, 0), catalog("amount", "money", 19, 4), catalog("shape", "geography", 0, 0)];
        let (schema, select, _) = build_schema("dbo_t", &["id".into()], &captured, &choose(&["ID", "amount decimal(10,2)"]), true).unwrap();
        assert_eq!(select, vec!["[id]", "CAST([amount] AS decimal(10,2)) AS [amount]"]);
        assert_eq!(schema.columns[1].ty, ColumnType::Decimal { precision: 10, scale: 2 });
        let all = build_schema("dbo_t", &["id".into()], &captured, &[], true).unwrap_err().to_string();
        assert!(all.contains("shape") && all.contains("geography"), "{all}");
        let error = build_schema("dbo_t", &["id".into()], &captured, &choose(&["amount"]), true).unwrap_err().to_string();
        assert!(error.contains("key column `id`"), "{error}");
        let (keyless, _, _) = build_schema("dbo_t", &[], &captured, &choose(&["id", "amount"]), true).unwrap();
        assert!(keyless.key.is_empty(), "a table without a unique index streams with no key");
    }

    /// Invariant: a computed column (NULL in every change row) is left out unless listed, and
    /// a listed one reads as a typed NULL in change and snapshot rows alike; a column only
    /// another instance of the table captures may be listed and reads NULL until then; one no
    /// instance captures is refused. Each case is noted for the warning.
    #[test]
    fn computed_and_other_instance_columns_are_left_out_or_read_null() {
        let columns = vec![
            catalog("id", "int", 10, 0),
            CatalogColumn { computed: true, ..catalog("total", "decimal", 21, 2) },
            catalog("qty", "int", 10, 0),
            CatalogColumn { here: false, ..catalog("region", "nvarchar", 0, 0) },
        ];
        let (schema, select, notes) = build_schema("dbo_t", &["id".into()], &columns, &[], true).unwrap();
        assert_eq!(schema.columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["id", "qty"]);
        assert_eq!(select, ["[id]", "[qty]"]);
        assert_eq!(notes, ColumnNotes { computed_left_out: vec!["total".into()], ..ColumnNotes::default() });
        let (schema, select, notes) = build_schema("dbo_t", &["id".into()], &columns, &choose(&["id", "total", "REGION", "qty bigint"]), true).unwrap();
        assert_eq!(select, ["[id]", "CAST(NULL AS decimal(21,2)) AS [total]", "CAST(NULL AS nvarchar(max)) AS [region]", "CAST([qty] AS bigint) AS [qty]"]);
        assert_eq!(schema.columns[2].ty, ColumnType::String);
        assert_eq!((notes.computed_null, notes.other_instance), (vec!["total".to_owned()], vec!["region".to_owned()]));
        assert!(notes.computed_left_out.is_empty());
        let unknown = build_schema("dbo_t", &["id".into()], &columns, &choose(&["id", "nope"]), true).unwrap_err().to_string();
        assert!(unknown.contains("`nope` is captured by no capture instance") && unknown.contains("region"), "{unknown}");
        let elsewhere_only = vec![CatalogColumn { here: false, ..catalog("id", "int", 10, 0) }];
        assert!(build_schema("dbo_t", &[], &elsewhere_only, &[], true).is_err(), "the instance itself captures nothing");
    }

    #[test]
    fn the_change_query_orders_by_the_clustered_key() {
        let sql = change_query("dbo_orders", &["[id]".into()], true);
        assert!(sql.contains("FROM cdc.[dbo_orders_CT]"), "{sql}");
        assert!(sql.ends_with("ORDER BY [__$start_lsn], [__$seqval], [__$operation]"), "{sql}");
    }
}
