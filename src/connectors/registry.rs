//! The registry of connector kinds: adding a kind adds one line to the `kinds!` list below.

use mssql_cdc_core::config::load::Document;
use mssql_cdc_core::config::problem::Problems;
use mssql_cdc_core::stage::{ConnectorKind, Stage, StageContext, StageError};
use mssql_cdc_lake::bronze::BronzeOptions;
use mssql_cdc_lake::silver::SilverOptions;
use mssql_cdc_source::MssqlSourceOptions;

/// A registered kind.
pub struct KindEntry {
    /// The `kind` value.
    pub kind: &'static str,
    /// One line describing it.
    pub summary: &'static str,
    /// Extracts its options from a document (without `name` and `kind`) and validates them
    /// into settings.
    pub load: fn(&Document, &mut Problems) -> Option<ConnectorSettings>,
    /// Its options from a document (without `name` and `kind`) as JSON, every key with its
    /// value or default, secrets redacted (the management API's `GET /connectors/{name}`).
    pub redacted: fn(&Document) -> Option<serde_json::Value>,
}

macro_rules! kinds {
    ($($variant:ident($options:ty),)+) => {
        /// The validated settings of a loaded connector, by kind.
        // One value per connector, made once at start: the variants' sizes do not matter.
        #[allow(clippy::large_enum_variant)]
        #[derive(Clone, Debug)]
        pub enum ConnectorSettings {
            $(
                #[doc = concat!("Settings of `", stringify!($options), "`.")]
                $variant(<$options as ConnectorKind>::Settings),
            )+
        }

        impl ConnectorSettings {
            /// Builds the stage of these settings.
            pub fn build(self, context: &StageContext) -> Result<Box<dyn Stage>, StageError> {
                match self {
                    $(Self::$variant(settings) => <$options>::build(settings, context),)+
                }
            }
        }

        /// Every connector kind, in documentation order.
        pub static KINDS: &[KindEntry] = &[
            $(KindEntry {
                kind: <$options>::KIND,
                summary: <$options>::SUMMARY,
                load: |document, problems| load::<$options>(document, problems).map(ConnectorSettings::$variant),
                redacted: redacted::<$options>,
            },)+
        ];
    };
}

kinds! {
    MssqlSource(MssqlSourceOptions),
    DeltaBronze(BronzeOptions),
    DeltaSilver(SilverOptions),
}

fn load<K: ConnectorKind>(document: &Document, problems: &mut Problems) -> Option<K::Settings> {
    let options: K = document.extract(problems)?;
    options.validate(problems)
}

fn redacted<K: ConnectorKind + serde::Serialize>(document: &Document) -> Option<serde_json::Value> {
    let options: K = document.extract(&mut Problems::under(""))?;
    serde_json::to_value(options).ok()
}

/// Finds a kind by its `kind` value (exact, case-sensitive).
pub fn find(kind: &str) -> Option<&'static KindEntry> {
    KINDS.iter().find(|entry| entry.kind == kind)
}

/// The names of every kind.
pub fn kind_names() -> Vec<&'static str> {
    KINDS.iter().map(|entry| entry.kind).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_are_unique() {
        let mut names = kind_names();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), KINDS.len());
    }
}
