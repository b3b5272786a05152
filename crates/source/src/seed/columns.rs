//! Matching a copy's columns to the captured ones and converting its values to the log's
//! types.
//!
//! Names match ignoring case; copy columns that are not captured are left out. A captured
//! column the copy lacks is a problem, or NULL with `--allow-missing-columns` (never a key
//! column: the rows are read in order of the key). Values are converted with Arrow's casts,
//! strictly (a value that does not convert stops the seed instead of turning NULL), and GUIDs
//! are written upper case as the stream writes them.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::compute::{can_cast_types, cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Schema};

use mssql_cdc_core::log::schema::{ColumnType, TableSchema};

/// How each captured column is read from the copy.
#[derive(Clone, Debug)]
pub struct CopyColumns {
    /// Per captured column (schema order): its index among [`Self::select`], or `None` (NULL).
    sources: Vec<Option<usize>>,
    /// The copy's columns to read (its own names), in captured order.
    select: Vec<String>,
    /// The order to read them in: the key columns first, then the others.
    order: Vec<String>,
    /// Per captured column: its name, log type, Arrow type, and whether it is in the table's
    /// key (never NULL).
    targets: Vec<(String, ColumnType, DataType, bool)>,
    /// Copy columns not captured (left out).
    pub dropped: Vec<String>,
    /// Captured columns the copy lacks (read as NULL).
    pub missing: Vec<String>,
}

impl CopyColumns {
    /// Matches `copy` to the captured columns of `schema`; `keys` are the columns the rows are
    /// ordered by; `null` are columns the stream publishes as NULL in every row (a computed
    /// column, one the instance does not capture), NULL here too. Every problem at once when
    /// they do not match.
    pub fn new(schema: &TableSchema, copy: &Schema, keys: &[String], null: &[String], allow_missing: bool) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let (mut sources, mut select, mut targets, mut missing) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for column in &schema.columns {
            let target = column.ty.arrow();
            let found: Vec<_> = copy.fields().iter().filter(|f| f.name().eq_ignore_ascii_case(&column.name)).collect();
            match found.as_slice() {
                _ if null.iter().any(|n| n.eq_ignore_ascii_case(&column.name)) => sources.push(None),
                [] if keys.iter().any(|k| k.eq_ignore_ascii_case(&column.name)) => {
                    problems.push(format!("key column `{}` is not in the copy (the rows are read in order of it)", column.name));
                }
                [] if allow_missing => {
                    missing.push(column.name.clone());
                    sources.push(None);
                }
                [] => problems.push(format!("captured column `{}` is not in the copy (--allow-missing-columns reads NULL for it)", column.name)),
                [field] if !can_cast_types(field.data_type(), &target) => {
                    problems.push(format!("column `{}`: the copy's {} cannot be read as {} ({:?})", column.name, field.data_type(), target, column.ty));
                }
                [field] => {
                    sources.push(Some(select.len()));
                    select.push(field.name().clone());
                }
                _ => problems.push(format!("the copy has {} columns named `{}` ignoring case", found.len(), column.name)),
            }
            targets.push((column.name.clone(), column.ty, target, schema.key.contains(&column.name)));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let copy_name = |name: &str| select.iter().find(|s| s.eq_ignore_ascii_case(name)).cloned();
        let mut order: Vec<String> = keys.iter().filter_map(|k| copy_name(k)).collect();
        let rest: Vec<String> = select.iter().filter(|s| !order.contains(s)).cloned().collect();
        order.extend(rest);
        let dropped = copy.fields().iter().map(|f| f.name().clone()).filter(|name| !select.contains(name)).collect();
        Ok(Self { sources, select, order, targets, dropped, missing })
    }

    /// The copy's columns to read.
    pub fn select(&self) -> &[String] {
        &self.select
    }

    /// The order to read them in: a total order over the rows (the key, then every other
    /// column), so that a resumed read skips exactly the rows published before.
    pub fn order(&self) -> &[String] {
        &self.order
    }

    /// `batch` (columns as [`Self::select`]) as the captured columns in schema order, each of
    /// its log type.
    pub fn convert(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>, String> {
        let strict = CastOptions { safe: false, ..CastOptions::default() };
        self.targets
            .iter()
            .zip(&self.sources)
            .map(|((name, ty, target, key), source)| {
                let Some(index) = *source else { return Ok(new_null_array(target, batch.num_rows())) };
                let column = batch.column(index);
                if *key && column.null_count() > 0 {
                    return Err(format!("key column `{name}` is NULL in {} of the copy's rows", column.null_count()));
                }
                let cast = cast_with_options(column, target, &strict).map_err(|e| format!("column `{name}`: {e}"))?;
                Ok(if *ty == ColumnType::Uuid { upper_case(&cast) } else { cast })
            })
            .collect()
    }
}

/// GUID text as the stream publishes it (SQL Server's upper case).
fn upper_case(array: &ArrayRef) -> ArrayRef {
    let text = array.as_string::<i32>();
    Arc::new(text.iter().map(|v| v.map(str::to_uppercase)).collect::<StringArray>()) as ArrayRef
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Decimal128Array, Int64Array, StringArray};
    use arrow::datatypes::Field;
    use mssql_cdc_core::log::schema::Column;

    fn schema() -> TableSchema {
        TableSchema {
            columns: vec![
                Column { name: "order_id".into(), ty: ColumnType::Int32 },
                Column { name: "amount".into(), ty: ColumnType::Decimal { precision: 19, scale: 4 } },
                Column { name: "ref".into(), ty: ColumnType::Uuid },
                Column { name: "note".into(), ty: ColumnType::String },
            ],
            key: vec!["order_id".into()],
            include_command_id: false,
        }
    }

    fn copy() -> Schema {
        Schema::new(vec![
            Field::new("ORDER_ID", DataType::Int64, false),
            Field::new("Amount", DataType::Utf8, true),
            Field::new("ref", DataType::Utf8, true),
            Field::new("exported_at", DataType::Utf8, true),
        ])
    }

    /// Names match ignoring case, extra copy columns are left out, and a missing captured
    /// column is a problem unless allowed (then NULL); the order is the key, then the rest.
    #[test]
    fn columns_match_by_name_ignoring_case() {
        let problems = CopyColumns::new(&schema(), &copy(), &["order_id".into()], &[], false).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("`note`") && problems[0].contains("--allow-missing-columns"), "{problems:?}");
        let columns = CopyColumns::new(&schema(), &copy(), &["order_id".into()], &[], true).unwrap();
        assert_eq!(columns.select(), ["ORDER_ID", "Amount", "ref"]);
        assert_eq!(columns.order(), ["ORDER_ID", "Amount", "ref"]);
        assert_eq!(columns.dropped, ["exported_at"]);
        assert_eq!(columns.missing, ["note"]);
        // A column the stream publishes as NULL (a computed one) is NULL from the copy too,
        // though the copy has it.
        let columns = CopyColumns::new(&schema(), &copy(), &["order_id".into()], &["AMOUNT".into(), "note".into()], false).unwrap();
        assert_eq!(columns.select(), ["ORDER_ID", "ref"]);
        assert!(columns.missing.is_empty() && columns.dropped == ["Amount", "exported_at"], "{columns:?}");
    }

    /// A key column is never read as NULL, and a type that cannot convert is named.
    #[test]
    fn every_problem_is_reported_at_once() {
        let copy = Schema::new(vec![Field::new("amount", DataType::Binary, true), Field::new("ref", DataType::Utf8, true)]);
        let problems = CopyColumns::new(&schema(), &copy, &["order_id".into()], &[], true).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("key column `order_id`"), "{problems:?}");
        assert!(problems[1].contains("`amount`") && problems[1].contains("Binary"), "{problems:?}");
    }

    /// Values convert to the log's types strictly: decimals from text at the column's scale,
    /// GUIDs upper case, NULL for a missing column; a value that does not convert is an error
    /// naming the column, not a NULL.
    #[test]
    fn values_convert_strictly_to_the_log_types() {
        let columns = CopyColumns::new(&schema(), &copy(), &["order_id".into()], &[], true).unwrap();
        let batch = |amount: &str| {
            RecordBatch::try_new(
                Arc::new(Schema::new(vec![Field::new("ORDER_ID", DataType::Int64, false), Field::new("Amount", DataType::Utf8, true), Field::new("ref", DataType::Utf8, true)])),
                vec![
                    Arc::new(Int64Array::from(vec![7])),
                    Arc::new(StringArray::from(vec![amount])),
                    Arc::new(StringArray::from(vec![Some("6f9619ff-8b86-d011-b42d-00c04fc964ff")])),
                ],
            )
            .unwrap()
        };
        let out = columns.convert(&batch("12.5")).unwrap();
        assert_eq!(out[0].data_type(), &DataType::Int32);
        assert_eq!(out[1].as_any().downcast_ref::<Decimal128Array>().unwrap().value(0), 125_000);
        assert_eq!(out[2].as_string::<i32>().value(0), "6F9619FF-8B86-D011-B42D-00C04FC964FF");
        assert!(out[3].is_null(0));
        let error = columns.convert(&batch("twelve")).unwrap_err();
        assert!(error.contains("`amount`"), "{error}");
    }
}
