//! Many tables from one sink file: the topics a template names, found on the broker, each
//! followed into its own Delta tables (locations rendered from templates), each run apart
//! ([`mssql_cdc_core::stage::tables`]) so one table's fatal error stops that table only.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::delta::location::check_location;
use mssql_cdc_core::config::problem::Problems;
use mssql_cdc_core::kafka::admin::list_topics;
use mssql_cdc_core::kafka::KafkaConfig;
use mssql_cdc_core::log::topic::TOPIC_FORM;
use mssql_cdc_core::stage::tables::{run_tables, BuildTable, TableRun, Tables};
use mssql_cdc_core::stage::{StageContext, StageError};
use mssql_cdc_core::tables::template::{TemplateError, TEMPLATE_FORM};
use mssql_cdc_core::tables::{Bindings, Template};

/// The data topics a sink file follows by template, looked for on the broker.
#[derive(Clone, Debug)]
pub struct TopicTemplate {
    /// The topic template, e.g. `cdc.sales.{schema}.{table}`.
    pub topic: Template,
    /// How often the broker's topics are listed again.
    pub interval: Duration,
}

/// Why the topics could not be listed.
#[derive(Debug, thiserror::Error)]
#[error("listing the broker's topics to find those `{template}` names: {source}")]
pub struct DiscoveryError {
    template: String,
    #[source]
    source: mssql_cdc_core::kafka::admin::AdminError,
}

impl mssql_cdc_core::stage::Retriable for DiscoveryError {
    /// A broker that cannot answer now may later.
    fn is_retriable(&self) -> bool {
        true
    }
}

/// The data topics on the broker `template` names, with their tables' bindings; control
/// topics (`<topic>.control`) are left out.
pub async fn matching_topics(kafka: &KafkaConfig, template: &Template) -> Result<Vec<(String, Bindings)>, DiscoveryError> {
    let topics = list_topics(kafka).await.map_err(|source| DiscoveryError { template: template.as_str().to_owned(), source })?;
    Ok(topics.into_iter().filter(|topic| !topic.ends_with(".control")).filter_map(|topic| template.match_topic(&topic).map(|bound| (topic, bound))).collect())
}

/// The tables of a templated sink: each matching topic a table, named `schema.table` (or by
/// its topic when the template binds no schema and table), built by `build`.
pub struct TopicTables<F> {
    /// The template and its interval.
    pub template: TopicTemplate,
    /// The connector's context (name, worker, board).
    pub context: StageContext,
    /// A table's run from its topic and bindings.
    pub build: F,
}

impl<F> Tables for TopicTables<F>
where
    F: Fn(&str, &Bindings, &StageContext) -> BuildTable + Send,
{
    fn discover(&mut self) -> BoxFuture<'_, Result<Vec<TableRun>, StageError>> {
        Box::pin(async move {
            let found = matching_topics(&self.context.worker.kafka, &self.template.topic).await.map_err(|e| StageError::from_cause(&self.context.name, e))?;
            Ok(found
                .into_iter()
                .map(|(topic, bound)| {
                    let build = (self.build)(&topic, &bound, &self.context);
                    TableRun { table: bound.table_id().unwrap_or(topic), build }
                })
                .collect())
        })
    }

    fn interval(&self) -> Option<Duration> {
        Some(self.template.interval)
    }
}

/// A stage of many tables: runs [`run_tables`] over `tables` with the connector's board and
/// the worker's retry schedule for each table.
pub struct ManyTables<T> {
    name: String,
    retry: mssql_cdc_core::stage::retry::RetryConfig,
    board: mssql_cdc_core::stage::board::TableBoard,
    tables: T,
}

impl<T> ManyTables<T> {
    /// The stage of `tables`, reporting to `context`'s board.
    pub fn new(context: &StageContext, tables: T) -> Self {
        Self { name: context.name.clone(), retry: context.worker.retry.clone(), board: context.tables.clone(), tables }
    }
}

impl<T: Tables + 'static> mssql_cdc_core::stage::Stage for ManyTables<T> {
    fn run(self: Box<Self>, cancel: tokio_util::sync::CancellationToken) -> BoxFuture<'static, Result<(), StageError>> {
        Box::pin(async move {
            let Self { name, retry, board, tables } = *self;
            run_tables(&name, &retry, &board, tables, cancel).await
        })
    }
}

/// A context for one table's run: the connector's, reporting to the table's progress.
pub fn table_context(context: &StageContext, progress: &mssql_cdc_core::stage::Progress) -> StageContext {
    StageContext { progress: progress.clone(), ..context.clone() }
}

/// A table's build from a function of its settings.
pub fn build_table<S, B>(settings: S, context: &StageContext, make: B) -> BuildTable
where
    S: Clone + Send + Sync + 'static,
    B: Fn(S, &StageContext) -> Result<Box<dyn mssql_cdc_core::stage::Stage>, StageError> + Send + Sync + 'static,
{
    let context = context.clone();
    Arc::new(move |progress| make(settings.clone(), &table_context(&context, progress)))
}

/// Checks a topic template: placeholders known, the rest topic characters, the table named.
pub fn check_topic_template(problems: &mut Problems, key: &str, text: &str) -> Option<Template> {
    let template = parsed(problems, key, text)?;
    if template.literals().any(|literal| !literal.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))) {
        problems.invalid(key, "has characters a topic name may not hold", TOPIC_FORM);
        return None;
    }
    if !template.names_the_table() {
        problems.invalid(key, "a topic template must name the table", TEMPLATE_FORM);
        return None;
    }
    Some(template)
}

/// Checks a location option of a templated file: a template that names the table, with only
/// placeholders `topic` binds, that renders as a table location.
pub fn check_location_template(problems: &mut Problems, key: &str, text: Option<&str>, topic: &Template, required: bool) -> Option<Template> {
    let template = check_bound(problems, key, text?, topic)?;
    if !template.names_the_table() {
        problems.invalid(key, "with a topic template, each table needs its own location", "a location with {schema} and {table} (or {capture_instance}) in it, e.g. \"s3://lake/bronze/{schema}/{table}\"");
        return None;
    }
    let example = template.render(&Bindings::table(Some("sales"), "dbo", "orders"));
    check_location(problems, key, Some(&example), required)?;
    Some(template)
}

/// Checks a value of a templated file that may hold placeholders `topic` binds (or none).
pub fn check_bound(problems: &mut Problems, key: &str, text: &str, topic: &Template) -> Option<Template> {
    let template = parsed(problems, key, text)?;
    let unbound = template.unbound_by(topic);
    if !unbound.is_empty() {
        problems.invalid(key, format!("uses {} that the topic template does not name", unbound.iter().map(|f| format!("{{{f}}}")).collect::<Vec<_>>().join(", ")), "placeholders the topic template holds");
        return None;
    }
    Some(template)
}

fn parsed(problems: &mut Problems, key: &str, text: &str) -> Option<Template> {
    Template::parse(text).map_err(|error: TemplateError| problems.invalid(key, error.to_string(), TEMPLATE_FORM)).ok()
}

/// Checks `discovery_interval_ms` (only with a template): at least a second.
pub fn check_interval(problems: &mut Problems, templated: bool, interval_ms: Option<u64>) -> Duration {
    match interval_ms {
        Some(_) if !templated => problems.invalid("discovery_interval_ms", "set without a topic template", "leave it out, or give `topic` placeholders such as {table}"),
        Some(ms) if ms < 1000 => problems.invalid("discovery_interval_ms", "under a second", "milliseconds, at least 1000"),
        Some(ms) => return Duration::from_millis(ms),
        None => {}
    }
    mssql_cdc_core::tables::DEFAULT_DISCOVERY_INTERVAL
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A templated file's locations must each name the table and use only what the topic
    /// binds; the topic template must be a topic name around its placeholders.
    #[test]
    fn templates_are_checked_against_the_topic() {
        let mut problems = Problems::under("");
        let topic = check_topic_template(&mut problems, "topic", "cdc.sales.{schema}.{table}").unwrap();
        assert!(check_location_template(&mut problems, "target", Some("./lake/{schema}/{table}"), &topic, true).is_some());
        assert!(problems.is_empty());
        assert!(check_location_template(&mut problems, "target", Some("./lake/bronze"), &topic, true).is_none());
        assert!(check_location_template(&mut problems, "facts_table", Some("./lake/{database}/{table}"), &topic, false).is_none());
        assert!(check_topic_template(&mut problems, "topic", "cdc/{table}").is_none());
        assert!(check_topic_template(&mut problems, "topic", "cdc.{schema}").is_none());
        assert!(check_bound(&mut problems, "app_id", "bronze", &topic).is_some());
        let keys: Vec<String> = problems.into_vec().into_iter().map(|p| p.key).collect();
        assert_eq!(keys, ["target", "facts_table", "topic", "topic"]);
    }
}
