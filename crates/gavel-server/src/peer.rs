//! Who the client certificate of a connection names ([`Peer`]), read once
//! at its TLS handshake. A leaf: the connection that reads it
//! ([`crate::connections`]) and the authentication that uses it
//! ([`crate::security`]) both name it.

use gavel_core::{Principal, PrincipalKind};

/// What the client certificate of a connection says, if it presented one.
/// The TLS handshake already checked its chain to the cluster CA and its
/// validity; this only reads the principal it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// No certificate (a token client, or none at all).
    Anonymous,
    /// A certificate naming this principal.
    Certified(Principal),
    /// A certificate of the cluster CA that names no valid principal.
    Unnamed(String),
}

impl Peer {
    /// What the certificate chain a client presented at the handshake
    /// names: its leaf's principal.
    pub fn of_certificates(chain: Option<&[tokio_rustls::rustls::pki_types::CertificateDer<'_>]>) -> Peer {
        match chain.and_then(|chain| chain.first()) {
            None => Peer::Anonymous,
            Some(leaf) => match gavel_pki::principal_from_certificate(leaf.as_ref()) {
                Ok(principal) => Peer::Certified(principal),
                Err(error) => Peer::Unnamed(error.to_string()),
            },
        }
    }

    /// The node id, when the certificate is a node certificate.
    pub fn node_id(&self) -> Option<u64> {
        match self {
            Peer::Certified(Principal { kind: PrincipalKind::Node, id }) => id.parse().ok(),
            _ => None,
        }
    }
}
