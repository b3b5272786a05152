//! Instrumentation events: each one logs and updates its metrics in a single `emit` call, so a
//! log line and its counter never disagree.

use std::net::SocketAddr;

use super::metrics::{BROKER_TLS_CONNECTIONS_TOTAL, BROKER_TLS_HANDSHAKE_FAILURES_TOTAL};

/// A client completed a TLS handshake with the embedded broker.
pub struct TlsConnectionAccepted {
    /// The client's address.
    pub peer: SocketAddr,
}

impl TlsConnectionAccepted {
    /// Logs at debug and counts the connection.
    pub fn emit(self) {
        tracing::debug!(peer = %self.peer, "TLS connection accepted");
        metrics::counter!(BROKER_TLS_CONNECTIONS_TOTAL).increment(1);
    }
}

/// A client's TLS handshake with the embedded broker failed.
pub struct TlsHandshakeFailed<'a> {
    /// The client's address.
    pub peer: SocketAddr,
    /// Why it failed.
    pub error: &'a std::io::Error,
}

impl TlsHandshakeFailed<'_> {
    /// Logs a warning and counts the failure.
    pub fn emit(self) {
        tracing::warn!(peer = %self.peer, error = %self.error, "TLS handshake failed");
        metrics::counter!(BROKER_TLS_HANDSHAKE_FAILURES_TOTAL).increment(1);
    }
}
