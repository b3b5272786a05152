//! The config directory: one `<name>.toml` connector file per connector added or changed
//! through the management API, read again when the worker starts (`mssql-cdc run
//! --config-dir DIR`). Files are replaced atomically (written aside, then renamed).

use std::path::{Path, PathBuf};

use mssql_cdc_core::config::Problem;

/// A config directory failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The directory.
#[derive(Clone, Debug)]
pub struct ConfigDir(PathBuf);

impl ConfigDir {
    /// Opens (creating it if needed) the directory.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(path).map_err(|source| io(path, source))?;
        Ok(Self(path.to_owned()))
    }

    /// The connector files in it, in name order.
    pub fn files(&self) -> Result<Vec<PathBuf>, StoreError> {
        let entries = std::fs::read_dir(&self.0).map_err(|source| io(&self.0, source))?;
        let mut files: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "toml")).collect();
        files.sort();
        Ok(files)
    }

    /// Writes `<name>.toml`.
    pub fn write(&self, name: &str, text: &str) -> Result<(), StoreError> {
        let path = self.path(name);
        let aside = self.0.join(format!(".{name}.toml.new"));
        std::fs::write(&aside, text).map_err(|source| io(&aside, source))?;
        std::fs::rename(&aside, &path).map_err(|source| io(&path, source))
    }

    /// Removes `<name>.toml` (nothing to do when it is not there).
    pub fn remove(&self, name: &str) -> Result<(), StoreError> {
        let path = self.path(name);
        match std::fs::remove_file(&path) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(io(&path, error)),
            _ => Ok(()),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(format!("{name}.toml"))
    }
}

fn io(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io { path: path.display().to_string(), source }
}

/// A connector file's text from a request body: a JSON object of the file's keys, `name`
/// added when missing. A body that is not an object, or holds `null`s, is a problem.
pub fn connector_text(name: &str, body: serde_json::Value) -> Result<String, Problem> {
    let serde_json::Value::Object(mut table) = body else {
        return Err(Problem::new("", "the body is not a JSON object", "a JSON object of the connector file's keys"));
    };
    table.entry("name").or_insert_with(|| name.into());
    toml::to_string(&table).map_err(|error| Problem::new("", format!("not representable as a connector file: {error}"), "strings, numbers, booleans, arrays and objects (no null)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body becomes the file `mssql-cdc run` would read, with its name; files are replaced
    /// and removed by name.
    #[test]
    fn bodies_become_connector_files_kept_by_name() {
        let text = connector_text("b", serde_json::json!({"kind": "delta-bronze", "storage_options": {"AWS_REGION": "x"}})).unwrap();
        let parsed: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(parsed["name"].as_str(), Some("b"));
        assert_eq!(parsed["storage_options"]["AWS_REGION"].as_str(), Some("x"));
        assert!(connector_text("b", serde_json::json!([1])).is_err());
        assert!(connector_text("b", serde_json::json!({"kind": null})).is_err());
        let dir = tempfile::tempdir().unwrap();
        let store = ConfigDir::open(dir.path()).unwrap();
        store.write("b", &text).unwrap();
        store.write("b", "name = \"b\"\n").unwrap();
        assert_eq!(store.files().unwrap().len(), 1);
        assert_eq!(std::fs::read_to_string(dir.path().join("b.toml")).unwrap(), "name = \"b\"\n");
        store.remove("b").unwrap();
        store.remove("b").unwrap();
        assert!(store.files().unwrap().is_empty());
    }
}
