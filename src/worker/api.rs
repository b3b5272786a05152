//! The management API, with Kafka Connect's REST conventions, on the telemetry listener:
//!
//! | request | answer |
//! |---|---|
//! | `GET /connectors` | `["name", ...]` |
//! | `GET /connectors/{name}` | `{name, type, config}`: the options, secrets redacted |
//! | `GET /connectors/{name}/status` | `{name, type, connector: {state, worker_id, trace?, reason?}, tasks: [...]}`; `reason` is `failed` or `schema_changed`; a stage of many tables has one task per table (`{id, table, state, worker_id, trace?, reason?}`) |
//! | `GET /connectors/{name}/tasks` | the tasks, `[{id: {connector, task}, table}]` |
//! | `POST /connectors/{name}/tasks/{task}/restart` | 204; one table (its task id or `schema.table`) starts again from its checkpoints, the others go on; 404 for an unknown table, 409 when the connector does not run |
//! | `PUT /connectors/{name}/pause` | 202; the stage stops until resumed |
//! | `PUT /connectors/{name}/resume` | 202 |
//! | `POST /connectors/{name}/restart` | 204; the stage starts again from its checkpoints |
//! | `PUT /connectors/{name}/config` | 201 (new) or 200 (changed), the connector as `GET` shows it; 400 with every problem and its key path |
//! | `DELETE /connectors/{name}` | 204 |
//!
//! Errors are `{error_code, message}` (plus `problems` for 400). With `[api] basic_auth`, a
//! request without the credentials is answered 401.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use base64::Engine as _;
use mssql_cdc_core::config::api::BasicAuth;
use mssql_cdc_core::config::secret::SecretError;
use mssql_cdc_core::stage::board::TableRestartError;
use serde_json::{json, Value};

use super::{Status, Worker, WorkerError};

#[derive(Clone)]
struct Api {
    worker: Arc<Worker>,
    worker_id: String,
    /// `Basic <base64(user:password)>`, when basic auth is on.
    expected: Option<String>,
}

/// The API's routes over `worker`; `worker_id` names this worker in status answers (its
/// listener address). Reads the basic-auth password now.
pub fn router(worker: Arc<Worker>, worker_id: String) -> Result<Router, SecretError> {
    let expected = match &worker.config().api.basic_auth {
        Some(BasicAuth { user, password }) => {
            let password = password.resolve()?;
            Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{}", password.expose()))))
        }
        None => None,
    };
    let api = Api { worker, worker_id, expected };
    Ok(Router::new()
        .route("/connectors", get(list))
        .route("/connectors/{name}", get(describe).delete(delete))
        .route("/connectors/{name}/status", get(status))
        .route("/connectors/{name}/config", put(put_config))
        .route("/connectors/{name}/pause", put(pause))
        .route("/connectors/{name}/resume", put(resume))
        .route("/connectors/{name}/restart", post(restart))
        .route("/connectors/{name}/tasks", get(tasks))
        .route("/connectors/{name}/tasks/{task}/restart", post(restart_task))
        .route_layer(middleware::from_fn_with_state(api.clone(), authorize))
        .with_state(api))
}

async fn authorize(State(api): State<Api>, request: Request, next: Next) -> Response {
    let Some(expected) = &api.expected else { return next.run(request).await };
    let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if given.is_some_and(|given| constant_time_eq(given.as_bytes(), expected.as_bytes())) {
        return next.run(request).await;
    }
    let mut response = failure(StatusCode::UNAUTHORIZED, "authentication required".into(), None);
    response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Basic realm=\"mssql-cdc\""));
    response
}

/// Compares without stopping at the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A JSON answer.
fn answer(code: StatusCode, body: &Value) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn failure(code: StatusCode, message: String, problems: Option<Value>) -> Response {
    let mut body = json!({"error_code": code.as_u16(), "message": message});
    if let Some(problems) = problems {
        body["problems"] = problems;
    }
    answer(code, &body)
}

impl IntoResponse for WorkerError {
    fn into_response(self) -> Response {
        match &self {
            WorkerError::NotFound(_) => failure(StatusCode::NOT_FOUND, self.to_string(), None),
            WorkerError::Invalid(problems) => {
                let list: Vec<Value> = problems.iter().map(|p| json!({"key": p.key, "message": p.message, "expected": p.expected, "text": p.to_string()})).collect();
                let message = problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
                failure(StatusCode::BAD_REQUEST, message, Some(Value::Array(list)))
            }
            WorkerError::NoConfigDir => failure(StatusCode::CONFLICT, self.to_string(), None),
            WorkerError::Store(_) => failure(StatusCode::INTERNAL_SERVER_ERROR, self.to_string(), None),
            WorkerError::Table(TableRestartError::UnknownTable(_)) => failure(StatusCode::NOT_FOUND, self.to_string(), None),
            WorkerError::Table(TableRestartError::NotRunning) => failure(StatusCode::CONFLICT, self.to_string(), None),
        }
    }
}

/// `source` or `sink`, as Kafka Connect types connectors.
fn connector_type(kind: &str) -> &'static str {
    if kind.ends_with("-source") { "source" } else { "sink" }
}

async fn list(State(api): State<Api>) -> Response {
    answer(StatusCode::OK, &json!(api.worker.names()))
}

/// The connector's task ids: one per table of a multi-table stage, else one.
fn task_ids(api: &Api, name: &str) -> Result<Vec<Value>, WorkerError> {
    let tables = api.worker.tables(name)?;
    if tables.is_empty() {
        return Ok(vec![json!({"connector": name, "task": 0})]);
    }
    Ok(tables.iter().enumerate().map(|(task, _)| json!({"connector": name, "task": task})).collect())
}

fn described(api: &Api, name: &str) -> Result<Value, WorkerError> {
    let status = api.worker.status(name)?;
    let config = api.worker.redacted_config(name)?;
    Ok(json!({"name": name, "type": connector_type(status.kind), "config": config, "tasks": task_ids(api, name)?}))
}

async fn tasks(State(api): State<Api>, Path(name): Path<String>) -> Result<Response, WorkerError> {
    let tables = api.worker.tables(&name)?;
    let ids = task_ids(&api, &name)?;
    let listed: Vec<Value> = ids.into_iter().enumerate().map(|(index, id)| json!({"id": id, "table": tables.get(index).map(|t| t.table.clone())})).collect();
    Ok(answer(StatusCode::OK, &Value::Array(listed)))
}

async fn restart_task(State(api): State<Api>, Path((name, task)): Path<(String, String)>) -> Result<StatusCode, WorkerError> {
    api.worker.restart_table(&name, &task)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn describe(State(api): State<Api>, Path(name): Path<String>) -> Result<Response, WorkerError> {
    Ok(answer(StatusCode::OK, &described(&api, &name)?))
}

fn status_body(api: &Api, status: &Status) -> Value {
    let mut state = json!({"state": status.state, "worker_id": api.worker_id});
    if let Some(trace) = &status.trace {
        state["trace"] = trace.clone().into();
    }
    if let Some(reason) = status.reason {
        state["reason"] = json!(reason);
    }
    let mut task = state.clone();
    task["id"] = 0.into();
    json!({"name": status.name, "type": connector_type(status.kind), "connector": state, "tasks": [task]})
}

async fn status(State(api): State<Api>, Path(name): Path<String>) -> Result<Response, WorkerError> {
    let status = api.worker.status(&name)?;
    let mut body = status_body(&api, &status);
    let tables = api.worker.tables(&name)?;
    // A running stage of many tables: a task per table. A stopped one shows its own state.
    if !tables.is_empty() && status.state == super::State::Running {
        let tasks: Vec<Value> = tables
            .iter()
            .enumerate()
            .map(|(id, table)| {
                let mut task = serde_json::to_value(table).unwrap_or_default();
                task["id"] = id.into();
                task["worker_id"] = api.worker_id.clone().into();
                task
            })
            .collect();
        body["tasks"] = Value::Array(tasks);
    }
    Ok(answer(StatusCode::OK, &body))
}

async fn pause(State(api): State<Api>, Path(name): Path<String>) -> Result<StatusCode, WorkerError> {
    api.worker.pause(&name)?;
    Ok(StatusCode::ACCEPTED)
}

async fn resume(State(api): State<Api>, Path(name): Path<String>) -> Result<StatusCode, WorkerError> {
    api.worker.resume(&name).await?;
    Ok(StatusCode::ACCEPTED)
}

async fn restart(State(api): State<Api>, Path(name): Path<String>) -> Result<StatusCode, WorkerError> {
    api.worker.restart(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn put_config(State(api): State<Api>, Path(name): Path<String>, body: Bytes) -> Result<Response, WorkerError> {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(error) => return Ok(failure(StatusCode::BAD_REQUEST, format!("the body is not JSON: {error}"), None)),
    };
    let created = api.worker.put_config(&name, body).await?;
    let code = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok(answer(code, &described(&api, &name)?))
}

async fn delete(State(api): State<Api>, Path(name): Path<String>) -> Result<StatusCode, WorkerError> {
    api.worker.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}
