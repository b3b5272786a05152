//! TLS termination in front of the embedded broker: each TLS client connection is forwarded,
//! byte for byte, to tansu's loopback listener.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::BrokerError;
use mssql_cdc_core::telemetry::events::{TlsConnectionAccepted, TlsHandshakeFailed};

/// Loads a PEM certificate chain and private key into a TLS acceptor.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, BrokerError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|error| BrokerError::Tls(format!("cannot read `{}`: {error}", path.display())))
    };
    let certs = rustls_pemfile::certs(&mut read(cert)?.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| BrokerError::Tls(format!("`{}` is not a PEM certificate chain: {error}", cert.display())))?;
    let key = rustls_pemfile::private_key(&mut read(key)?.as_slice())
        .map_err(|error| BrokerError::Tls(format!("`{}` is not a PEM private key: {error}", key.display())))?
        .ok_or_else(|| BrokerError::Tls(format!("`{}` holds no private key", key.display())))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|error| BrokerError::Tls(error.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|error| BrokerError::Tls(format!("certificate and key do not form a server identity: {error}")))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts TLS clients on `listener` and forwards each to `upstream` until `shutdown`.
pub async fn serve(listener: TcpListener, acceptor: TlsAcceptor, upstream: SocketAddr, shutdown: CancellationToken) {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(error = %error, "TLS listener accept failed");
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let mut client = match acceptor.accept(stream).await {
                Ok(client) => client,
                Err(error) => return TlsHandshakeFailed { peer, error: &error }.emit(),
            };
            TlsConnectionAccepted { peer }.emit();
            let Ok(mut broker) = TcpStream::connect(upstream).await else {
                return tracing::warn!(peer = %peer, "embedded broker unreachable behind TLS");
            };
            let _ = broker.set_nodelay(true);
            let _closed = tokio::io::copy_bidirectional(&mut client, &mut broker).await;
        });
    }
}
