//! Many tables from one connector file: which tables a file names, and how a table's topics
//! and Delta locations are written.
//!
//! - [`pattern::TablePattern`]: `schema.table` globs (`dbo.*`, `sales.order_?`) that select
//!   tables on the source and exclude some of them;
//! - [`template::Template`]: a topic or a location with `{database}`, `{schema}`, `{table}` and
//!   `{capture_instance}` in it, rendered for one table, and matched against the topics on the
//!   broker to find the tables a sink follows.
//!
//! The stage side (one supervised run per table, failures kept to their table) is
//! [`crate::stage::tables`].

pub mod pattern;
pub mod template;

use std::collections::BTreeMap;
use std::time::Duration;

pub use pattern::TablePattern;
pub use template::{Bindings, Template};

/// How often a multi-table stage looks for tables it does not run yet, when the file leaves
/// `discovery_interval_ms` out: a minute.
pub const DEFAULT_DISCOVERY_INTERVAL: Duration = Duration::from_secs(60);

/// A table's name as overrides and the status name it: `schema.table`.
pub fn table_id(schema: &str, table: &str) -> String {
    format!("{schema}.{table}")
}

/// The override of `id` among `overrides` (keys `schema.table`, matched ignoring case, an exact
/// match winning).
pub fn override_for<'a, T>(overrides: &'a BTreeMap<String, T>, id: &str) -> Option<&'a T> {
    overrides.get(id).or_else(|| overrides.iter().find(|(key, _)| key.eq_ignore_ascii_case(id)).map(|(_, value)| value))
}

/// Checks the keys of an `[overrides]` table: each a `schema.table` name, none twice when case
/// is ignored.
pub fn check_override_keys<T>(problems: &mut crate::config::problem::Problems, key: &str, overrides: &BTreeMap<String, T>) {
    let mut seen: Vec<String> = Vec::new();
    for name in overrides.keys() {
        let lower = name.to_lowercase();
        let valid = name.split_once('.').is_some_and(|(schema, table)| !schema.is_empty() && !table.is_empty()) && !name.chars().any(char::is_control);
        if !valid {
            problems.invalid(&format!("{key}.{name}"), "not a table name", "a table as schema.table, e.g. [overrides.\"dbo.orders\"]");
        } else if seen.contains(&lower) {
            problems.invalid(&format!("{key}.{name}"), "names a table another override names (case is ignored)", "one override per table");
        }
        seen.push(lower);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::problem::Problems;

    /// An override is found ignoring case, and an exact spelling wins over another case.
    #[test]
    fn overrides_match_ignoring_case_exact_first() {
        let overrides: BTreeMap<String, u8> = [("dbo.Orders".to_owned(), 1), ("dbo.orders".to_owned(), 2)].into();
        assert_eq!(override_for(&overrides, "dbo.orders"), Some(&2));
        assert_eq!(override_for(&overrides, "DBO.ORDERS"), Some(&1));
        assert_eq!(override_for(&overrides, "dbo.lines"), None);
        let mut problems = Problems::under("");
        check_override_keys(&mut problems, "overrides", &overrides);
        let bad: BTreeMap<String, u8> = [("orders".to_owned(), 1)].into();
        check_override_keys(&mut problems, "overrides", &bad);
        let keys: Vec<String> = problems.into_vec().into_iter().map(|p| p.key).collect();
        assert_eq!(keys, ["overrides.dbo.orders", "overrides.orders"]);
    }
}
