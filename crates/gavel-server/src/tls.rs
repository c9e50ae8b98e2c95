//! The TLS side of a secured node's port: handshakes run concurrently, each
//! bounded by [`TLS_HANDSHAKE_TIMEOUT`], and a refused handshake closes so
//! that the client reads why.
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
//! handshake ([`Authenticated`]), not on every request of the connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use crate::security::{Peer, SecurityError, TLS_HANDSHAKE_TIMEOUT};

/// How long a refused connection is drained before it is dropped.
const REFUSED_LINGER: Duration = Duration::from_secs(1);

/// Handshaken connections waiting for the server to take them.
const READY_CONNECTIONS_MAX: usize = 64;

/// The rustls server configuration of a node: its certificate and key, the
/// cluster CA as client CA with client certificates optional (token clients
/// present none), HTTP/2 by ALPN.
pub fn server_config(ca_pem: &str, cert_pem: &str, key_pem: &str) -> Result<Arc<ServerConfig>, SecurityError> {
    let invalid = |what: &str, error: &dyn std::fmt::Display| SecurityError::Tls(format!("{what}: {error}"));
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

/// The TLS connections accepted on `listener`, for
/// `Server::serve_with_incoming_shutdown`. Accepting stops when the stream
/// is dropped (the server stopped).
pub fn incoming(listener: TcpListener, config: Arc<ServerConfig>) -> ReceiverStream<io::Result<Authenticated>> {
    let (ready, connections) = mpsc::channel(READY_CONNECTIONS_MAX);
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = ready.closed() => return,
            };
            let tcp = match accepted {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    // Out of descriptors and the like: the next accept may work.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Without it a response written in two segments waits for the
            // client's delayed ACK (~40 ms).
            let _ = tcp.set_nodelay(true);
            let (acceptor, ready) = (acceptor.clone(), ready.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp).into_fallible()).await {
                    Ok(Ok(tls)) => {
                        let _ = ready.send(Ok(Authenticated::new(tls))).await;
                    }
                    Ok(Err((error, tcp))) => {
                        tracing::debug!(%error, "TLS handshake refused");
                        close_refused(tcp).await;
                    }
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(connections)
}

/// Closes a connection whose handshake failed (the alert is already
/// written) without a reset: end of stream, then drain until the client
/// closes or [`REFUSED_LINGER`] passes.
async fn close_refused(mut tcp: TcpStream) {
    let _ = tcp.shutdown().await;
    let mut buffer = [0u8; 4096];
    let _ = tokio::time::timeout(REFUSED_LINGER, async {
        while matches!(tcp.read(&mut buffer).await, Ok(read) if read > 0) {}
    })
    .await;
}

/// A handshaken TLS connection and the identity its client certificate
/// names, read once. tonic puts [`Authenticated::connect_info`] (the
/// [`Peer`]) into the extensions of every request on the connection, where
/// [`Peer::of`] finds it.
pub struct Authenticated {
    stream: TlsStream<TcpStream>,
    peer: Peer,
}

impl Authenticated {
    fn new(stream: TlsStream<TcpStream>) -> Authenticated {
        let leaf = stream.get_ref().1.peer_certificates().and_then(|chain| chain.first());
        let peer = match leaf {
            None => Peer::Anonymous,
            Some(leaf) => match gavel_pki::principal_from_certificate(leaf.as_ref()) {
                Ok(principal) => Peer::Certified(principal),
                Err(error) => Peer::Unnamed(error.to_string()),
            },
        };
        Authenticated { stream, peer }
    }
}

impl Connected for Authenticated {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for Authenticated {
    fn poll_read(self: Pin<&mut Self>, context: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(context, buf)
    }
}

impl AsyncWrite for Authenticated {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(context, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(context)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(context)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(context, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
