//! [`Template`]: a topic name or a table location with placeholders for the table.

use std::collections::BTreeMap;
use std::fmt;

/// A placeholder a template may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// `{database}`: the source database, as the topic names it.
    Database,
    /// `{schema}`: the table's schema.
    Schema,
    /// `{table}`: the table's name.
    Table,
    /// `{capture_instance}`: SQL Server's default capture instance name of the table,
    /// `<schema>_<table>` (a sink cannot see another name in the topic).
    CaptureInstance,
}

impl Field {
    const ALL: [Field; 4] = [Field::Database, Field::Schema, Field::Table, Field::CaptureInstance];

    fn name(self) -> &'static str {
        match self {
            Self::Database => "database",
            Self::Schema => "schema",
            Self::Table => "table",
            Self::CaptureInstance => "capture_instance",
        }
    }
}

/// The expected form of a template, for problems.
pub const TEMPLATE_FORM: &str = "text with {database}, {schema}, {table} or {capture_instance} in it, e.g. \"cdc.sales.{schema}.{table}\"";

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Field(Field),
}

/// Text with `{database}`, `{schema}`, `{table}` and `{capture_instance}` placeholders, such as
/// `cdc.sales.{schema}.{table}` or `s3://lake/bronze/{schema}/{table}`. Rendered with a
/// table's [`Bindings`]; a topic template is also matched against topic names, where each
/// placeholder stands for one or more characters other than `.`.
#[derive(Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
    parts: Vec<Part>,
}

/// Why a template was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    /// `{` without its `}`.
    #[error("a `{{` is not closed")]
    Unclosed,
    /// A placeholder that is not one of the four.
    #[error("`{{{0}}}` is not a placeholder (database, schema, table, capture_instance)")]
    Unknown(String),
    /// A `}` without its `{`.
    #[error("a `}}` has no `{{`")]
    Stray,
}

impl Template {
    /// Parses `text`; text without `{` is a template without placeholders.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find(['{', '}']) {
            if rest[open..].starts_with('}') {
                return Err(TemplateError::Stray);
            }
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let close = rest[open..].find('}').ok_or(TemplateError::Unclosed)? + open;
            let name = &rest[open + 1..close];
            let field = Field::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| TemplateError::Unknown(name.to_owned()))?;
            parts.push(Part::Field(field));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Ok(Self { text: text.to_owned(), parts })
    }

    /// Whether `text` has any placeholder (or brace) in it.
    pub fn is_template(text: &str) -> bool {
        text.contains(['{', '}'])
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The literal text between the placeholders.
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Literal(text) => Some(text.as_str()),
            Part::Field(_) => None,
        })
    }

    fn fields(&self) -> impl Iterator<Item = Field> + '_ {
        self.parts.iter().filter_map(|part| match part {
            Part::Field(field) => Some(*field),
            Part::Literal(_) => None,
        })
    }

    /// Whether every table gets its own rendering: the template names the table (`{table}` or
    /// `{capture_instance}`).
    pub fn names_the_table(&self) -> bool {
        self.fields().any(|f| matches!(f, Field::Table | Field::CaptureInstance))
    }

    /// The placeholders this template holds that `topic` cannot bind (`{capture_instance}`
    /// needs `{schema}` and `{table}`), by name.
    pub fn unbound_by(&self, topic: &Template) -> Vec<&'static str> {
        let bound: Vec<Field> = topic.fields().collect();
        let binds = |field: Field| match field {
            Field::CaptureInstance => bound.contains(&Field::CaptureInstance) || (bound.contains(&Field::Schema) && bound.contains(&Field::Table)),
            field => bound.contains(&field),
        };
        let mut missing: Vec<&'static str> = self.fields().filter(|f| !binds(*f)).map(Field::name).collect();
        missing.dedup();
        missing
    }

    /// The text with each placeholder replaced by its binding (an unbound one left as written).
    pub fn render(&self, bindings: &Bindings) -> String {
        let mut out = String::with_capacity(self.text.len() + 32);
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Field(field) => match bindings.get(*field) {
                    Some(value) => out.push_str(&value),
                    None => {
                        out.push('{');
                        out.push_str(field.name());
                        out.push('}');
                    }
                },
            }
        }
        out
    }

    /// The bindings under which this template renders as `topic`, if any: each placeholder
    /// takes one or more characters other than `.`, the same placeholder the same text.
    pub fn match_topic(&self, topic: &str) -> Option<Bindings> {
        let mut bound = BTreeMap::new();
        match_parts(&self.parts, topic, &mut bound).then_some(Bindings(bound))
    }
}

fn match_parts(parts: &[Part], text: &str, bound: &mut BTreeMap<Field, String>) -> bool {
    let Some((first, rest)) = parts.split_first() else { return text.is_empty() };
    match first {
        Part::Literal(literal) => text.strip_prefix(literal.as_str()).is_some_and(|after| match_parts(rest, after, bound)),
        Part::Field(field) => {
            let segment_end = text.find('.').unwrap_or(text.len());
            // Longest first: a placeholder followed by a literal that is not a dot may stop
            // earlier in its segment.
            for end in (1..=segment_end).rev().filter(|end| text.is_char_boundary(*end)) {
                let value = &text[..end];
                if bound.get(field).is_some_and(|earlier| earlier != value) {
                    continue;
                }
                let fresh = bound.insert(*field, value.to_owned()).is_none();
                if match_parts(rest, &text[end..], bound) {
                    return true;
                }
                if fresh {
                    bound.remove(field);
                }
            }
            false
        }
    }
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

/// The values of a table's placeholders.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bindings(BTreeMap<Field, String>);

impl Bindings {
    /// The bindings of a table known by name.
    pub fn table(database: Option<&str>, schema: &str, table: &str) -> Self {
        let mut bound = BTreeMap::from([(Field::Schema, schema.to_owned()), (Field::Table, table.to_owned())]);
        if let Some(database) = database {
            bound.insert(Field::Database, database.to_owned());
        }
        Self(bound)
    }

    /// A placeholder's value; `{capture_instance}` is `<schema>_<table>` unless bound itself.
    pub fn get(&self, field: Field) -> Option<String> {
        match (self.0.get(&field), field) {
            (Some(value), _) => Some(value.clone()),
            (None, Field::CaptureInstance) => Some(format!("{}_{}", self.0.get(&Field::Schema)?, self.0.get(&Field::Table)?)),
            (None, _) => None,
        }
    }

    /// The table these bindings name, `schema.table`, when both are bound.
    pub fn table_id(&self) -> Option<String> {
        Some(super::table_id(self.0.get(&Field::Schema)?, self.0.get(&Field::Table)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(text: &str) -> Template {
        Template::parse(text).unwrap()
    }

    /// A template renders a table's names into its placeholders.
    #[test]
    fn templates_render_a_table() {
        let bindings = Bindings::table(Some("sales"), "dbo", "orders");
        assert_eq!(template("s3://lake/bronze/{schema}/{table}").render(&bindings), "s3://lake/bronze/dbo/orders");
        assert_eq!(template("cdc.{database}.{schema}.{table}").render(&bindings), "cdc.sales.dbo.orders");
        assert_eq!(template("./silver/{capture_instance}").render(&bindings), "./silver/dbo_orders");
        assert_eq!(template("fixed").render(&bindings), "fixed");
        assert!(!template("fixed").names_the_table());
        assert!(template("x/{capture_instance}").names_the_table());
        assert_eq!(Template::parse("x/{tabel}"), Err(TemplateError::Unknown("tabel".into())));
        assert_eq!(Template::parse("x/{table"), Err(TemplateError::Unclosed));
        assert_eq!(Template::parse("x/table}"), Err(TemplateError::Stray));
    }

    /// A topic template finds the table in a topic name, one dot-free segment per placeholder,
    /// and never matches the feed's control topic.
    #[test]
    fn topic_templates_bind_from_topic_names() {
        let topics = template("cdc.sales.{schema}.{table}");
        let bound = topics.match_topic("cdc.sales.dbo.orders").unwrap();
        assert_eq!(bound.table_id().as_deref(), Some("dbo.orders"));
        assert_eq!(bound.get(Field::CaptureInstance).as_deref(), Some("dbo_orders"));
        assert!(topics.match_topic("cdc.sales.dbo.orders.control").is_none());
        assert!(topics.match_topic("cdc.hr.dbo.orders").is_none());
        assert!(topics.match_topic("cdc.sales.dbo.").is_none());
        let suffixed = template("cdc.{schema}_{table}.v1");
        let bound = suffixed.match_topic("cdc.dbo_order_lines.v1").unwrap();
        assert_eq!(bound.table_id().as_deref(), Some("dbo_order.lines"), "the longest first binding wins");
        let twice = template("{table}.{table}");
        assert!(twice.match_topic("a.a").is_some());
        assert!(twice.match_topic("a.b").is_none());
    }

    #[test]
    fn a_location_may_only_use_what_the_topic_binds() {
        let topics = template("cdc.sales.{schema}.{table}");
        assert!(template("lake/{schema}/{table}").unbound_by(&topics).is_empty());
        assert!(template("lake/{capture_instance}").unbound_by(&topics).is_empty());
        assert_eq!(template("lake/{database}/{table}").unbound_by(&topics), ["database"]);
        assert_eq!(template("lake/{capture_instance}").unbound_by(&template("cdc.{table}")), ["capture_instance"]);
    }
}
