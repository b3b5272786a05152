//! Kafka topic names.

use crate::config::problem::Problems;

/// Kafka's limit on a topic name's length.
pub const MAX_TOPIC_LEN: usize = 249;

/// The expected form of a topic name, for problems.
pub const TOPIC_FORM: &str = "a Kafka topic name: 1 to 249 of a-z A-Z 0-9 . _ -";

/// Whether `name` is a legal Kafka topic name (or prefix of one).
pub fn is_valid_topic(name: &str) -> bool {
    (1..=MAX_TOPIC_LEN).contains(&name.len())
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Checks an optional topic option (missing when required, or not a topic name) and yields
/// the topic when it is present and valid.
pub fn check_topic(problems: &mut Problems, key: &str, topic: Option<&str>, required: bool) -> Option<String> {
    match topic {
        None if required => problems.missing(key, TOPIC_FORM),
        Some(topic) if !is_valid_topic(topic) => problems.invalid(key, "not a topic name", TOPIC_FORM),
        Some(topic) => return Some(topic.to_owned()),
        None => {}
    }
    None
}

/// The control topic that belongs to a data topic: `<data topic>.control`.
pub fn control_topic_for(data_topic: &str) -> String {
    format!("{data_topic}.control")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(is_valid_topic("cdc.sales.dbo.orders"));
        assert!(!is_valid_topic(""));
        assert!(!is_valid_topic(".."));
        assert!(!is_valid_topic("orders/v1"));
        assert!(!is_valid_topic(&"x".repeat(250)));
        assert_eq!(control_topic_for("cdc.sales.dbo.orders"), "cdc.sales.dbo.orders.control");
    }
}
