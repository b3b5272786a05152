//! [`TablePattern`]: a `schema.table` glob.

/// A glob over `schema.table` names: `*` stands for any run of characters (none included), `?`
/// for one character, anything else for itself, ignoring case (SQL Server's default
/// collations do). `dbo.*` selects every table of `dbo`; `*.audit_*` every table whose name
/// starts `audit_`, in any schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TablePattern {
    text: String,
    chars: Vec<char>,
}

/// The expected form of a pattern, for problems.
pub const PATTERN_FORM: &str = "schema.table, with * for any characters and ? for one, e.g. \"dbo.*\"";

impl TablePattern {
    /// The pattern `text` is, when it has the `schema.table` form.
    pub fn parse(text: &str) -> Option<Self> {
        let (schema, table) = text.split_once('.')?;
        if schema.is_empty() || table.is_empty() || text.chars().any(char::is_control) || text.chars().count() > 257 {
            return None;
        }
        Some(Self { text: text.to_owned(), chars: text.to_lowercase().chars().collect() })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `schema.table` matches.
    pub fn matches(&self, schema: &str, table: &str) -> bool {
        let name: Vec<char> = format!("{schema}.{table}").to_lowercase().chars().collect();
        glob(&self.chars, &name)
    }
}

/// Iterative glob match with one backtrack point (the last `*`): linear in practice.
fn glob(pattern: &[char], name: &[char]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == '?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((star_p, star_n)) => {
                    p = star_p + 1;
                    n = star_n + 1;
                    star = Some((star_p, star_n + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// Whether a table is selected: it matches one of `include` and none of `exclude`.
pub fn selected(include: &[TablePattern], exclude: &[TablePattern], schema: &str, table: &str) -> bool {
    include.iter().any(|p| p.matches(schema, table)) && !exclude.iter().any(|p| p.matches(schema, table))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> TablePattern {
        TablePattern::parse(text).unwrap()
    }

    /// Globs select by schema and table, ignoring case, with `*` empty or long and `?` one.
    #[test]
    fn globs_select_tables() {
        assert!(pattern("dbo.*").matches("dbo", "orders"));
        assert!(pattern("DBO.*").matches("dbo", "Orders"));
        assert!(!pattern("dbo.*").matches("sales", "orders"));
        assert!(!pattern("dbo.*").matches("dbox", "orders"), "the dot is literal");
        assert!(pattern("*.audit_*").matches("sales", "audit_2024"));
        assert!(pattern("dbo.order_?").matches("dbo", "order_7"));
        assert!(!pattern("dbo.order_?").matches("dbo", "order_17"));
        assert!(pattern("dbo.a*b*c").matches("dbo", "a_b_b_c"));
        assert!(!pattern("dbo.a*b*c").matches("dbo", "a_b_b_cd"));
        assert!(pattern("dbo.orders").matches("dbo", "orders"));
        assert!(pattern("*.*").matches("x", "y"));
    }

    #[test]
    fn exclusions_win_and_bad_patterns_are_refused() {
        let include = [pattern("dbo.*")];
        let exclude = [pattern("dbo.audit_*")];
        assert!(selected(&include, &exclude, "dbo", "orders"));
        assert!(!selected(&include, &exclude, "dbo", "audit_log"));
        assert!(!selected(&[], &exclude, "dbo", "orders"));
        assert!(TablePattern::parse("orders").is_none());
        assert!(TablePattern::parse(".orders").is_none());
        assert!(TablePattern::parse("dbo.").is_none());
    }
}
