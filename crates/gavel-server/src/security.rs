//! How a node secures its port: TLS material, the token verification keys
//! and the first admin. Without TLS material the node runs `--insecure`:
//! plaintext, no authentication, identity self-declared.
//!
//! [`Security`] is what the shell configures (file paths); [`Secured`] is
//! what a secured node runs with once they are loaded: the server TLS
//! configuration, the TLS identity it dials peers with, the token verifier
//! and the OpenID Provider whose ID tokens it accepts. The routing layer
//! ([`crate::routing`]) authenticates every call with it: a bearer token
//! (the provider's ID token when its `iss` is the configured issuer, else
//! one of Gavel's own tokens), else the client certificate, else
//! `UNAUTHENTICATED`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gavel_core::{Caller, DomainError, ErrorCode, GrantName, Principal, PrincipalKind};
use gavel_pki::{TokenVerifier, TokenVerifierSettings};
use gavel_raft::PeerTls;
use tonic::codegen::http::HeaderMap;
use tonic::Status;

use crate::peer::Peer;
use crate::status::domain_status;

/// A node's security settings.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// TLS for clients and peers; `None` is `--insecure`.
    pub tls: Option<TlsFiles>,
    /// Bearer tokens the node accepts, besides client certificates. Needs
    /// `tls`: a token sent in plaintext could be replayed by anyone on the path.
    pub tokens: Option<TokenSettings>,
    /// An OpenID Provider whose ID tokens the node accepts as bearer tokens
    /// (`--oidc-*`). Needs `tls`, as tokens do.
    pub oidc: Option<gavel_oidc::ProviderSettings>,
    /// The first admin, named by this node once it leads (like etcd's root
    /// user). Give it to the bootstrapping node; naming the same admin again
    /// (after a restart, or from another node) changes nothing.
    pub bootstrap_admin: Option<Principal>,
}

impl Security {
    /// Plaintext, no authentication (`--insecure`).
    pub fn insecure() -> Security {
        Security::default()
    }

    /// Reads the TLS material and token keys: `None` for an insecure node.
    pub fn load(&self) -> Result<Option<Arc<Secured>>, SecurityError> {
        let Some(tls) = &self.tls else {
            if self.tokens.is_some() || self.oidc.is_some() {
                return Err(SecurityError::TokensWithoutTls);
            }
            return Ok(None);
        };
        let peer_tls = PeerTls { ca_pem: read(&tls.ca)?, cert_pem: read(&tls.cert)?, key_pem: read(&tls.key)? };
        let tokens = match &self.tokens {
            None => None,
            Some(settings) => {
                let files = TokenVerifierSettings::from_files(
                    &settings.audience,
                    &settings.public_keys,
                    settings.hs256_secret.as_deref(),
                )
                .map_err(SecurityError::Tokens)?;
                let verifier_settings = TokenVerifierSettings { lifetime_max: settings.lifetime_max, ..files };
                Some(TokenVerifier::new(&verifier_settings).map_err(SecurityError::Tokens)?)
            }
        };
        let oidc = match &self.oidc {
            None => None,
            Some(settings) => {
                principal_prefix_usable(&settings.rules.principal_prefix)?;
                let provider = gavel_oidc::Provider::new(settings.clone()).map_err(SecurityError::Oidc)?;
                Some(provider.with_lifetime_max(self.id_token_lifetime_max()))
            }
        };
        Ok(Some(Arc::new(Secured { peer_tls, tokens, oidc })))
    }

    /// The longest lifetime (`exp − iat`) an ID token may have: the bound
    /// Gavel's own tokens get (`--token-lifetime-max`), since neither kind
    /// of bearer can be revoked by itself; the default when the node takes
    /// no Gavel tokens.
    pub fn id_token_lifetime_max(&self) -> Duration {
        self.tokens.as_ref().map_or(gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT, |tokens| tokens.lifetime_max)
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
    /// The longest lifetime (`exp − iat`) a token may have
    /// (`--token-lifetime-max`, [`gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT`]
    /// by default).
    pub lifetime_max: Duration,
}

/// Why a node's security settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A PEM file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token keys or secret are not usable.
    #[error("token settings: {0}")]
    Tokens(#[source] gavel_pki::PkiError),
    /// The TLS material does not parse or does not fit together.
    #[error("TLS material: {0}")]
    Tls(String),
    /// The OpenID Provider settings are not usable.
    #[error("{0}")]
    Oidc(#[source] gavel_oidc::OidcError),
    /// Tokens were configured on a node without TLS.
    #[error("bearer tokens need TLS material: a token sent in plaintext can be replayed by anyone on the path")]
    TokensWithoutTls,
}

/// Refuses a principal prefix that cannot start a principal other than a
/// node's (`user:` or `agent:`, with or without the start of an id).
fn principal_prefix_usable(prefix: &str) -> Result<(), SecurityError> {
    let refused = |reason: String| {
        SecurityError::Oidc(gavel_oidc::OidcError::Settings(format!("--oidc-principal-prefix {prefix:?}: {reason}")))
    };
    let principal = Principal::parse(&format!("{prefix}x")).map_err(refused)?;
    if principal.kind == PrincipalKind::Node {
        return Err(refused("nodes authenticate with their certificate only".to_string()));
    }
    Ok(())
}

fn read(path: &Path) -> Result<String, SecurityError> {
    std::fs::read_to_string(path).map_err(|source| SecurityError::Read { path: path.to_path_buf(), source })
}

/// A secured node's loaded credentials and verifiers.
pub struct Secured {
    /// The cluster CA and this node's certificate and key (PEM).
    pub peer_tls: PeerTls,
    tokens: Option<TokenVerifier>,
    oidc: Option<gavel_oidc::Provider>,
}

impl std::fmt::Debug for Secured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secured").field("tokens", &self.tokens).field("oidc", &self.oidc).finish_non_exhaustive()
    }
}

/// `UNAUTHENTICATED` with the domain code `UNAUTHENTICATED`.
pub fn unauthenticated(message: &str) -> Status {
    domain_status(DomainError::new(ErrorCode::Unauthenticated, message))
}

/// `PERMISSION_DENIED` with the domain code `PERMISSION_DENIED`.
pub fn permission_denied(message: &str) -> Status {
    domain_status(DomainError::new(ErrorCode::PermissionDenied, message))
}

impl Secured {
    /// The server side of TLS ([`crate::tls::server_config`]): this node's
    /// certificate, and the cluster CA for client certificates, which are
    /// optional (token clients have none) but must chain to the CA when
    /// presented.
    pub fn server_config(&self) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, SecurityError> {
        crate::tls::server_config(&self.peer_tls.ca_pem, &self.peer_tls.cert_pem, &self.peer_tls.key_pem)
            .map_err(|error| SecurityError::Tls(error.to_string()))
    }

    /// Who makes a call that came on a connection from `peer`: the bearer
    /// token's principal when the call carries one, else the client
    /// certificate's, else `UNAUTHENTICATED`.
    pub async fn authenticate(&self, headers: &HeaderMap, peer: &Peer) -> Result<Caller, Status> {
        if let Some(value) = headers.get(gavel_proto::metadata::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|text| text.strip_prefix("Bearer "))
                .ok_or_else(|| unauthenticated("the authorization header must be \"Bearer <token>\""))?;
            if let Some(provider) = &self.oidc {
                if gavel_oidc::unverified_issuer(token.trim()).as_deref() == Some(provider.rules().issuer.as_str()) {
                    return oidc_caller(provider, token.trim(), gavel_oidc::unix_seconds()).await;
                }
            }
            let verifier = self.tokens.as_ref().ok_or_else(|| unauthenticated("this node accepts no bearer tokens"))?;
            return verifier
                .verify(token.trim())
                .map_err(|error| unauthenticated(&format!("bearer token refused: {error}")));
        }
        match peer {
            Peer::Certified(principal) => Ok(Caller::of(principal.clone())),
            Peer::Unnamed(reason) => Err(unauthenticated(&format!("client certificate refused: {reason}"))),
            Peer::Anonymous => Err(unauthenticated(
                "this node needs credentials: a client certificate of the cluster CA or a bearer token",
            )),
        }
    }
}

/// The caller an ID token of `provider` names at `now`: the principal made
/// from its claim, with every grant bound to it (an ID token carries no
/// Gavel roles). The provider has checked that the claim is an email
/// address (verified, for `email`) and that the token lives at most the
/// node's maximum token lifetime, so the principal's id holds an `@` and
/// never equals a local name such as `gavel dev`'s `user:admin`. Every
/// refusal is `UNAUTHENTICATED`, its `OIDC_…` code in the message.
pub async fn oidc_caller(provider: &gavel_oidc::Provider, token: &str, now: u64) -> Result<Caller, Status> {
    let refused = |error: gavel_oidc::OidcError| {
        unauthenticated(&format!("OpenID Connect token refused ({}): {error}", error.code()))
    };
    let identity = provider.verify(token, now, None).await.map_err(refused)?;
    let bad_principal = |reason: String| {
        refused(gavel_oidc::OidcError::BadPrincipal { claim: provider.rules().principal_claim.clone(), reason })
    };
    let principal = Principal::parse(&identity.principal).map_err(bad_principal)?;
    if principal.kind == PrincipalKind::Node {
        return Err(bad_principal("a node principal cannot come from a token".to_string()));
    }
    Ok(Caller::of(principal))
}

/// The `gavel-forwarded-for` value a forwarding node sends for `caller`:
/// `kind:id`, or `kind:id;grant,grant` when a token down-scoped it.
pub fn forwarded_for(caller: &Caller) -> String {
    match &caller.scope {
        None => caller.principal.to_string(),
        Some(scope) => {
            let names: Vec<&str> = scope.iter().map(|name| name.as_str()).collect();
            format!("{};{}", caller.principal, names.join(","))
        }
    }
}

/// Parses a `gavel-forwarded-for` value (see [`forwarded_for`]).
pub fn parse_forwarded_for(text: &str) -> Result<Caller, String> {
    let (principal, scope) = match text.split_once(';') {
        None => (text, None),
        Some((principal, names)) => {
            let scope = names
                .split(',')
                .filter(|name| !name.is_empty())
                .map(|name| GrantName::parse(name).ok_or_else(|| format!("unknown grant {name:?}")))
                .collect::<Result<BTreeSet<GrantName>, String>>()?;
            (principal, Some(scope))
        }
    };
    Ok(Caller { principal: Principal::parse(principal)?, scope })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_for_round_trips_with_and_without_a_token_scope() {
        let bob = Principal::parse("user:bob").expect("a principal");
        let callers = [
            Caller::of(bob.clone()),
            Caller { principal: bob.clone(), scope: Some(BTreeSet::from([GrantName::Approver, GrantName::Auditor])) },
            Caller { principal: bob, scope: Some(BTreeSet::new()) },
        ];
        for caller in callers {
            assert_eq!(parse_forwarded_for(&forwarded_for(&caller)), Ok(caller));
        }
        assert_eq!(forwarded_for(&Caller::of(Principal::node(2))), "node:2");
        for bad in ["bob", "user:", "user:bob;root", "robot:x"] {
            assert!(parse_forwarded_for(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_without_tls_are_refused_and_no_tls_is_insecure() {
        assert!(Security::insecure().load().expect("insecure").is_none());
        let tokens_only = Security {
            tokens: Some(TokenSettings {
                audience: "gavel".into(),
                public_keys: Vec::new(),
                hs256_secret: None,
                lifetime_max: gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT,
            }),
            ..Security::default()
        };
        assert!(matches!(tokens_only.load(), Err(SecurityError::TokensWithoutTls)));
    }

    #[test]
    fn id_tokens_get_the_lifetime_bound_of_gavel_tokens() {
        assert_eq!(gavel_oidc::limits::ID_TOKEN_LIFETIME_MAX_DEFAULT, gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT);
        assert_eq!(Security::default().id_token_lifetime_max(), gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT);
        let week = Duration::from_secs(7 * 86_400);
        let with_tokens = Security {
            tokens: Some(TokenSettings {
                audience: "gavel".into(),
                public_keys: Vec::new(),
                hs256_secret: None,
                lifetime_max: week,
            }),
            ..Security::default()
        };
        assert_eq!(with_tokens.id_token_lifetime_max(), week, "--token-lifetime-max bounds ID tokens too");
    }

    #[test]
    fn an_oidc_principal_prefix_must_start_a_principal_that_is_not_a_node() {
        assert!(principal_prefix_usable("user:").is_ok());
        assert!(principal_prefix_usable("service:corp-").is_ok());
        for refused in ["node:", "user", "robot:", "user: "] {
            let error = principal_prefix_usable(refused).expect_err(refused);
            assert!(error.to_string().contains("--oidc-principal-prefix"), "{refused}: {error}");
        }
    }
}
