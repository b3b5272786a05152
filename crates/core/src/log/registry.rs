//! A client of a Confluent-compatible schema registry: registers the Avro schemas of a topic
//! under TopicNameStrategy (`<topic>-key`, `<topic>-value`) and fetches schemas by id.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value as Json;

use super::format::RegistrySettings;
use crate::config::secret::SecretString;

/// A registry call failed. Messages never hold the password.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The password could not be read.
    #[error("schema_registry.password: {0}")]
    Secret(#[from] crate::config::secret::SecretError),
    /// The registry could not be reached.
    #[error("schema registry {url}: {reason}")]
    Unreachable {
        /// The registry URL.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The registry answered with an error status.
    #[error("schema registry {url} refused `{subject}` with HTTP {status}: {body}")]
    Refused {
        /// The registry URL.
        url: String,
        /// The subject, or `id <n>`.
        subject: String,
        /// The status code.
        status: u16,
        /// The body it sent.
        body: String,
    },
}

impl RegistryError {
    /// Whether a retry may succeed: the registry unreachable, or answering 5xx or 429.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Refused { status, .. } => *status >= 500 || *status == 429,
            Self::Secret(_) => false,
        }
    }
}

/// A registry client with a cache of registered schemas.
pub struct SchemaRegistry {
    url: String,
    user: Option<String>,
    password: Option<SecretString>,
    http: reqwest::Client,
    registered: Mutex<HashMap<(String, String), u32>>,
    by_id: Mutex<HashMap<u32, apache_avro::Schema>>,
}

impl std::fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaRegistry").field("url", &self.url).field("user", &self.user).finish_non_exhaustive()
    }
}

impl SchemaRegistry {
    /// A client of a validated registry.
    pub fn new(config: &RegistrySettings) -> Result<Self, RegistryError> {
        let password = config.password.as_ref().map(|p| p.resolve()).transpose()?;
        let url = config.url.clone();
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| RegistryError::Unreachable { url: url.clone(), reason: e.to_string() })?;
        Ok(Self { url, user: config.user.clone(), password, http, registered: Mutex::new(HashMap::new()), by_id: Mutex::new(HashMap::new()) })
    }

    fn authorize(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.user {
            Some(user) => request.basic_auth(user, self.password.as_ref().map(|p| p.expose().to_owned())),
            None => request,
        }
    }

    /// Registers `schema` under `subject` (idempotent: the registry returns the existing id of
    /// an equal schema) and returns its id.
    pub async fn register(&self, subject: &str, schema: &Json) -> Result<u32, RegistryError> {
        let text = schema.to_string();
        let cache_key = (subject.to_owned(), text.clone());
        if let Some(id) = self.registered.lock().unwrap_or_else(|e| e.into_inner()).get(&cache_key) {
            return Ok(*id);
        }
        let url = format!("{}/subjects/{}/versions", self.url, subject);
        let body = serde_json::json!({ "schema": text, "schemaType": "AVRO" }).to_string();
        let request = self.http.post(&url).header("Content-Type", "application/vnd.schemaregistry.v1+json").body(body);
        let response = self.authorize(request).send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| self.unreachable(e))?;
        if !(200..300).contains(&status) {
            return Err(RegistryError::Refused { url: self.url.clone(), subject: subject.to_owned(), status, body: text });
        }
        let id = serde_json::from_str::<Json>(&text).ok().and_then(|v| v["id"].as_u64()).and_then(|id| u32::try_from(id).ok());
        let id = id.ok_or_else(|| RegistryError::Refused {
            url: self.url.clone(),
            subject: subject.to_owned(),
            status,
            body: format!("no schema id in the answer: {text}"),
        })?;
        self.registered.lock().unwrap_or_else(|e| e.into_inner()).insert(cache_key, id);
        Ok(id)
    }

    /// The schema registered under `id` (cached: ids never change meaning).
    pub async fn schema_by_id(&self, id: u32) -> Result<apache_avro::Schema, RegistryError> {
        if let Some(schema) = self.by_id.lock().unwrap_or_else(|e| e.into_inner()).get(&id) {
            return Ok(schema.clone());
        }
        let url = format!("{}/schemas/ids/{id}", self.url);
        let response = self.authorize(self.http.get(&url)).send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status().as_u16();
        let text = response.text().await.map_err(|e| self.unreachable(e))?;
        let refused = |body: String| RegistryError::Refused { url: self.url.clone(), subject: format!("id {id}"), status, body };
        if !(200..300).contains(&status) {
            return Err(refused(text));
        }
        let schema_text = serde_json::from_str::<Json>(&text).ok().and_then(|v| v["schema"].as_str().map(str::to_owned)).ok_or_else(|| refused(text.clone()))?;
        let schema = apache_avro::Schema::parse_str(&schema_text).map_err(|e| refused(e.to_string()))?;
        self.by_id.lock().unwrap_or_else(|e| e.into_inner()).insert(id, schema.clone());
        Ok(schema)
    }

    fn unreachable(&self, error: reqwest::Error) -> RegistryError {
        // reqwest's message names the URL, never the basic-auth password.
        RegistryError::Unreachable { url: self.url.clone(), reason: error.without_url().to_string() }
    }
}
