//! How a node secures its port: TLS material, the token verification keys
//! and the first admin. Without TLS material the node runs `--insecure`:
//! plaintext, no authentication, identity self-declared.

use std::path::PathBuf;

use gavel_core::Principal;

/// A node's security settings.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// TLS for clients and peers; `None` is `--insecure`.
    pub tls: Option<TlsFiles>,
    /// Bearer tokens the node accepts, besides client certificates.
    pub tokens: Option<TokenSettings>,
    /// The first admin, granted by the bootstrapping node once the cluster
    /// has a leader (like etcd's root user).
    pub bootstrap_admin: Option<Principal>,
}

impl Security {
    /// Plaintext, no authentication (`--insecure`).
    pub fn insecure() -> Security {
        Security::default()
    }
}

/// PEM files of a node's TLS identity and the CA it trusts.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The cluster CA certificate: client and peer certificates must chain to it.
    pub ca: PathBuf,
    /// This node's certificate (SAN URI `gavel://node/<id>`), used both as
    /// server certificate and as client certificate towards peers.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// Which JWTs a node accepts.
#[derive(Debug, Clone)]
pub struct TokenSettings {
    /// Required `aud` claim.
    pub audience: String,
    /// PEM public keys (Ed25519 for EdDSA, P-256 for ES256) a token may be
    /// signed with.
    pub public_keys: Vec<PathBuf>,
    /// A file holding an HS256 shared secret, when HS256 is allowed.
    pub hs256_secret: Option<PathBuf>,
}
