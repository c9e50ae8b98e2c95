//! The TLS side of a secured node's port: the server configuration, and how
//! a refused handshake closes so that the client reads why. Handshakes run
//! concurrently, each bounded by the authentication deadline
//! ([`crate::connections`]).
//!
//! With TLS 1.3 a client finishes its half of the handshake and sends its
//! first request before the node has checked its certificate. When the node
//! refuses the certificate it sends a fatal alert (`UnknownCA`,
//! `CertificateExpired`, ...). Closing the socket right after, with the
//! client's request still unread, makes the kernel send a reset, which can
//! overtake the alert: the client then sees only "connection reset" and
//! cannot tell a refused certificate from a dead node. So a refused
//! connection is closed gracefully: the alert, then end of stream, then
//! whatever the client still sends is read and dropped for a moment, so the
//! socket closes with nothing unread.
//!
//! The client's identity is read from its certificate once, at the
//! handshake ([`crate::peer::Peer::of_certificates`]), not on every
//! request of the connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

/// How long a refused connection is drained before it is dropped.
const REFUSED_LINGER: Duration = Duration::from_secs(1);

/// Why a node's TLS material does not make a server configuration: which
/// part is unusable and why (the caller says it is TLS material).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsMaterialError(String);

/// The rustls server configuration of a node: its certificate and key, the
/// cluster CA as client CA with client certificates optional (token clients
/// present none), HTTP/2 by ALPN.
pub fn server_config(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>, TlsMaterialError> {
    let invalid = |what: &str, error: &dyn std::fmt::Display| TlsMaterialError(format!("{what}: {error}"));
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let certificate = certificate.map_err(|error| invalid("the CA certificate", &error))?;
        roots.add(certificate).map_err(|error| invalid("the CA certificate", &error))?;
    }
    let verifier = WebPkiClientVerifier::builder(Arc::new(roots))
        .allow_unauthenticated()
        .build()
        .map_err(|error| invalid("the client certificate verifier", &error))?;
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| invalid("the node certificate", &error))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|error| invalid("the node key", &error))?;
    let mut config = ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|error| invalid("the node certificate and key", &error))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Closes a connection whose handshake failed (the alert is already
/// written) without a reset: end of stream, then drain until the client
/// closes or [`REFUSED_LINGER`] passes.
pub(crate) async fn close_refused(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let mut buffer = [0u8; 4096];
    let _ = tokio::time::timeout(REFUSED_LINGER, async {
        while matches!(tcp.read(&mut buffer).await, Ok(read) if read > 0) {}
    })
    .await;
}
