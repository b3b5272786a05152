//! The HTTP listener every long-running process serves: `/metrics` and `/health`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Errors starting the listener.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The address could not be bound.
    #[error("cannot listen for /metrics and /health on {address}: {source}")]
    Bind {
        /// The configured address.
        address: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Whether the process is ready: `/health` answers 200 when it is, 503 before.
#[derive(Clone, Debug, Default)]
pub struct Health(Arc<AtomicBool>);

impl Health {
    /// Marks the process ready (or not).
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }

    fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: PrometheusHandle,
    health: Health,
}

/// Binds `address` and serves `/metrics` and `/health`, plus the routes of `api` (the
/// worker's management API) when given, until `shutdown` fires. Returns the bound address
/// (useful with port 0).
pub async fn serve(
    address: SocketAddr,
    metrics: PrometheusHandle,
    health: Health,
    api: Option<Router>,
    shutdown: CancellationToken,
) -> Result<SocketAddr, HttpError> {
    let listener = TcpListener::bind(address).await.map_err(|source| HttpError::Bind { address, source })?;
    let bound = listener.local_addr().map_err(|source| HttpError::Bind { address, source })?;
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/health", get(health_check))
        .with_state(AppState { metrics, health });
    let app = match api {
        Some(api) => app.merge(api),
        None => app,
    };
    tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
        if let Err(error) = served {
            tracing::error!(error = %error, "metrics listener stopped");
        }
    });
    Ok(bound)
}

async fn render_metrics(State(state): State<AppState>) -> String {
    state.metrics.render()
}

async fn health_check(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.health.is_ready() {
        (StatusCode::OK, "{\"status\":\"ok\"}\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "{\"status\":\"starting\"}\n")
    }
}
