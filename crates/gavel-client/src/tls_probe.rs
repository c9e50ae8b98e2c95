//! Telling a client without TLS that the node it calls speaks TLS.
//!
//! A client given no CA dials `http://`. A node that serves TLS reads the
//! HTTP/2 preface as a broken TLS record and answers with a TLS alert,
//! which HTTP/2 reads as an oversized frame: the call fails as a transport
//! break (`h2 protocol error`), which is retried until the retry budget is
//! spent and then reads as "no node reachable", although every node is up
//! and only the CA is missing. So after such a failure the client asks the
//! node once, on a connection of its own, what it answers to the preface:
//! a TLS record (content type alert or handshake, version 3.x) means TLS,
//! and the call fails at once, saying which setting is missing.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::Error;

/// Bound on one probe: connecting, sending the preface and reading the answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// TLS record content types a TLS server answers garbage with.
const TLS_ALERT: u8 = 0x15;
const TLS_HANDSHAKE: u8 = 0x16;
/// The major version of every TLS record (SSL 3.0 and TLS 1.0 to 1.3).
const TLS_MAJOR_VERSION: u8 = 0x03;

/// What the node at an endpoint answered the HTTP/2 preface with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// A TLS record: the node speaks TLS.
    Tls,
    /// Something else, or nothing within [`PROBE_TIMEOUT`].
    NotTls,
    /// Nothing listens there (the connection was refused): ask again later.
    Refused,
}

/// Whether `bytes`, the start of a node's answer, is a TLS record.
pub(crate) fn is_tls_record(bytes: &[u8]) -> bool {
    matches!(bytes, [TLS_ALERT | TLS_HANDSHAKE, TLS_MAJOR_VERSION, ..])
}

/// Sends the HTTP/2 preface to `endpoint` (`host:port`) on a connection of
/// its own and says whether the answer is TLS.
pub(crate) async fn probe(endpoint: &str) -> Probe {
    let answer = tokio::time::timeout(PROBE_TIMEOUT, async {
        let mut stream = TcpStream::connect(endpoint).await?;
        stream.write_all(PREFACE).await?;
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).await?;
        Ok::<_, std::io::Error>(head)
    })
    .await;
    match answer {
        Ok(Ok(head)) if is_tls_record(&head) => Probe::Tls,
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => Probe::Refused,
        _ => Probe::NotTls,
    }
}

/// The error of a call to `endpoint`, a node that speaks TLS, from a client
/// given no CA: a configuration problem, named with the setting to add.
pub(crate) fn tls_without_ca(endpoint: &str) -> Error {
    Error::Config(format!(
        "{endpoint} answers with TLS, but no CA is configured to verify it: give the cluster CA with --ca or \
         GAVEL_CA (for `gavel dev`, run the line it prints: export GAVEL_ENDPOINTS=... GAVEL_CA=... \
         GAVEL_CERT=... GAVEL_KEY=...)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_alert_or_handshake_record_is_tls_and_an_http2_frame_is_not() {
        // What a rustls node answers the preface with: a fatal decode_error alert.
        assert!(is_tls_record(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]));
        assert!(is_tls_record(&[0x16, 0x03, 0x01]));
        // A plaintext node's SETTINGS frame, and an HTTP/1 answer.
        assert!(!is_tls_record(&[0x00, 0x00, 0x12, 0x04]));
        assert!(!is_tls_record(b"HTTP/1.1 400"));
        assert!(!is_tls_record(&[0x15]));
    }
}
