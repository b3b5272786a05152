//! A minimal Confluent-compatible schema registry for tests (no registry server can be
//! installed here): registers schemas per subject, returning one id per distinct schema, and
//! serves them by id. Enough for our producer and for Python confluent-kafka's deserializer.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;

#[derive(Default)]
struct Registry {
    schemas: Vec<String>,
    subjects: HashMap<String, Vec<u32>>,
}

type Shared = Arc<Mutex<Registry>>;

/// A registry serving on a free loopback port until the runtime stops.
pub struct TestRegistry {
    /// Its base URL.
    pub url: String,
    state: Shared,
}

impl TestRegistry {
    /// Starts it on the current tokio runtime.
    pub async fn start() -> Self {
        let state: Shared = Arc::default();
        let app = Router::new()
            .route("/subjects/{subject}/versions", post(register))
            .route("/schemas/ids/{id}", get(by_id))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, state }
    }

    /// The schema ids registered under `subject`, in the order they were first registered.
    pub fn versions(&self, subject: &str) -> Vec<u32> {
        self.state.lock().unwrap().subjects.get(subject).cloned().unwrap_or_default()
    }

    /// The subjects registered so far.
    pub fn subjects(&self) -> Vec<String> {
        let mut subjects: Vec<String> = self.state.lock().unwrap().subjects.keys().cloned().collect();
        subjects.sort();
        subjects
    }
}

fn json(status: StatusCode, body: serde_json::Value) -> impl IntoResponse {
    (status, [(header::CONTENT_TYPE, "application/vnd.schemaregistry.v1+json")], body.to_string())
}

async fn register(State(state): State<Shared>, Path(subject): Path<String>, body: String) -> impl IntoResponse {
    let Some(schema) = serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| v["schema"].as_str().map(str::to_owned)) else {
        return json(StatusCode::UNPROCESSABLE_ENTITY, serde_json::json!({"error_code": 42201, "message": "no schema"}));
    };
    if apache_avro::Schema::parse_str(&schema).is_err() {
        return json(StatusCode::UNPROCESSABLE_ENTITY, serde_json::json!({"error_code": 42201, "message": "invalid Avro schema"}));
    }
    let mut registry = state.lock().unwrap();
    let id = match registry.schemas.iter().position(|s| *s == schema) {
        Some(index) => index as u32 + 1,
        None => {
            registry.schemas.push(schema);
            registry.schemas.len() as u32
        }
    };
    let versions = registry.subjects.entry(subject).or_default();
    if !versions.contains(&id) {
        versions.push(id);
    }
    json(StatusCode::OK, serde_json::json!({ "id": id }))
}

async fn by_id(State(state): State<Shared>, Path(id): Path<u32>) -> impl IntoResponse {
    let registry = state.lock().unwrap();
    match registry.schemas.get(id.saturating_sub(1) as usize) {
        Some(schema) if id > 0 => json(StatusCode::OK, serde_json::json!({ "schema": schema })),
        _ => json(StatusCode::NOT_FOUND, serde_json::json!({"error_code": 40403, "message": "Schema not found"})),
    }
}
