//! How a client proves who it is: TLS material, a bearer token, and the
//! flags and `GAVEL_*` variables every binary reads them from.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::error::Error;

/// The cluster CA a client trusts and, optionally, its own certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The cluster CA certificate (PEM) the nodes' certificates chain to.
    pub ca_pem: String,
    /// The client certificate and its private key (PEM), whose SAN URI
    /// names the principal; `None` when a token authenticates instead.
    pub identity: Option<(String, String)>,
}

impl ClientTls {
    /// tonic's rustls configuration for these settings: the node must present
    /// a certificate chaining to the CA and naming the dialled host; the
    /// client presents its own certificate when it has one.
    pub fn tonic_config(&self) -> tonic::transport::ClientTlsConfig {
        let config = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem));
        match &self.identity {
            Some((cert_pem, key_pem)) => config.identity(tonic::transport::Identity::from_pem(cert_pem, key_pem)),
            None => config,
        }
    }
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The private key stays out of logs.
        f.debug_struct("ClientTls").field("identity", &self.identity.is_some()).finish_non_exhaustive()
    }
}

/// The environment variables client binaries read their credentials from.
pub mod env {
    /// PEM file of the cluster CA; its presence turns TLS on.
    pub const CA: &str = "GAVEL_CA";
    /// PEM file of the client certificate.
    pub const CERT: &str = "GAVEL_CERT";
    /// PEM file of the client certificate's private key.
    pub const KEY: &str = "GAVEL_KEY";
    /// A bearer token.
    pub const TOKEN: &str = "GAVEL_TOKEN";
    /// A file holding a bearer token.
    pub const TOKEN_FILE: &str = "GAVEL_TOKEN_FILE";
    /// `1` (or `true`, `yes`) to dial plaintext on purpose.
    pub const INSECURE: &str = "GAVEL_INSECURE";
}

/// Where a client's credentials come from: the `--ca --cert --key --token
/// --token-file --insecure` flags or the `GAVEL_*` variables. Every client
/// binary (CLI, bench, chaos, examples) resolves them the same way with
/// [`Credentials::apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The cluster CA file: with it the endpoints are dialled over TLS.
    pub ca: Option<PathBuf>,
    /// The client certificate file.
    pub cert: Option<PathBuf>,
    /// The client key file.
    pub key: Option<PathBuf>,
    /// A bearer token.
    pub token: Option<String>,
    /// A file holding a bearer token.
    pub token_file: Option<PathBuf>,
    /// Plaintext on purpose (a node started `--insecure`).
    pub insecure: bool,
}

impl Credentials {
    /// The credentials named by the `GAVEL_*` environment variables.
    pub fn from_env() -> Credentials {
        Credentials::from_lookup(|name| std::env::var(name).ok())
    }

    /// The credentials named by `lookup` (an environment); empty values
    /// count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Credentials {
        let value = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        let path = |name: &str| value(name).map(PathBuf::from);
        Credentials {
            ca: path(env::CA),
            cert: path(env::CERT),
            key: path(env::KEY),
            token: value(env::TOKEN),
            token_file: path(env::TOKEN_FILE),
            insecure: value(env::INSECURE).is_some_and(|flag| is_true(&flag)),
        }
    }

    /// `config` with these credentials' TLS and token, read from their files.
    /// Contradictions are refused: `--insecure` with any TLS material or
    /// token, a certificate without its key, a certificate or token without
    /// the CA (a token must not cross the network in plaintext), a token both
    /// inline and in a file.
    pub fn apply(&self, mut config: crate::ClientConfig) -> Result<crate::ClientConfig, Error> {
        let (tls, token) = self.resolve()?;
        config.tls = tls;
        config.token = token;
        Ok(config)
    }

    /// The TLS settings and token these credentials name.
    pub fn resolve(&self) -> Result<(Option<ClientTls>, Option<String>), Error> {
        let refused = |reason: &str| Err(Error::Config(reason.to_string()));
        let has_token = self.token.is_some() || self.token_file.is_some();
        if self.insecure && (self.ca.is_some() || self.cert.is_some() || self.key.is_some() || has_token) {
            return refused("--insecure (GAVEL_INSECURE) dials plaintext: drop --ca, --cert, --key and --token");
        }
        if self.token.is_some() && self.token_file.is_some() {
            return refused("give the token once: --token (GAVEL_TOKEN) or --token-file (GAVEL_TOKEN_FILE)");
        }
        let identity = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some((read(cert, "client certificate")?, read(key, "client key")?)),
            (None, None) => None,
            _ => return refused("--cert (GAVEL_CERT) and --key (GAVEL_KEY) go together"),
        };
        let token = match (&self.token, &self.token_file) {
            (Some(token), _) => Some(token.trim().to_string()),
            (None, Some(file)) => Some(read(file, "token file")?.trim().to_string()),
            (None, None) => None,
        };
        if token.as_deref() == Some("") {
            return refused("the token is empty");
        }
        let tls = match &self.ca {
            Some(ca) => Some(ClientTls { ca_pem: read(ca, "CA certificate")?, identity }),
            None if identity.is_some() || token.is_some() => {
                return refused("a client certificate or token needs TLS: give the cluster CA (--ca or GAVEL_CA)");
            }
            None => None,
        };
        Ok((tls, token))
    }
}

fn is_true(flag: &str) -> bool {
    matches!(flag.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

fn read(path: &Path, what: &str) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|error| Error::Config(format!("{what} {}: {error}", path.display())))
}

/// Stamps `authorization: Bearer <token>` on every request, when a token is
/// configured, and a W3C `traceparent` ([`crate::trace_context`]) unless the
/// request has one.
#[derive(Clone, Debug, Default)]
pub(crate) struct Authorization(Option<MetadataValue<Ascii>>, Option<Arc<crate::backoff::SeededJitter>>);

impl Authorization {
    /// The header for `token`; refuses a token that is not a header value.
    pub(crate) fn bearer(token: Option<&str>) -> Result<Authorization, Error> {
        let Some(token) = token else { return Ok(Authorization(None, None)) };
        let mut value: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::Config("the token has characters a header cannot carry".to_string()))?;
        value.set_sensitive(true);
        Ok(Authorization(Some(value), None))
    }

    /// The same, drawing fresh trace ids from `sequence` (a simulator's
    /// seeded one) instead of the OS.
    pub(crate) fn with_trace_ids(self, sequence: Option<Arc<crate::backoff::SeededJitter>>) -> Authorization {
        Authorization(self.0, sequence)
    }
}

impl Interceptor for Authorization {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert(gavel_proto::metadata::AUTHORIZATION, value.clone());
        }
        if !request.metadata().contains_key(crate::trace_context::TRACEPARENT) {
            let traceparent = crate::trace_context::traceparent(self.1.as_deref());
            request.metadata_mut().insert(crate::trace_context::TRACEPARENT, traceparent);
        }
        Ok(request)
    }
}

/// The TLS error behind a failed call, if the handshake (or the node's
/// verdict on the client certificate) is what failed.
pub(crate) fn tls_failure(status: &Status) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(error) = source {
        if let Some(tls) = error.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if let Some(tls) = io.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
                return Some(tls.to_string());
            }
            // An alert from the node (it refused our certificate) reaches us
            // as text inside the connection's read error.
            let text = io.to_string();
            if io.kind() == std::io::ErrorKind::InvalidData && text.starts_with("received fatal alert") {
                return Some(text);
            }
        }
        source = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn environment_names_every_credential() {
        let credentials = Credentials::from_lookup(lookup(&[
            (env::CA, "/c/ca.pem"),
            (env::CERT, "/c/me.pem"),
            (env::KEY, "/c/me.key"),
            (env::TOKEN, "t"),
            (env::INSECURE, ""),
        ]));
        assert_eq!(credentials.ca, Some(PathBuf::from("/c/ca.pem")));
        assert_eq!(credentials.cert, Some(PathBuf::from("/c/me.pem")));
        assert_eq!(credentials.key, Some(PathBuf::from("/c/me.key")));
        assert_eq!(credentials.token.as_deref(), Some("t"));
        assert!(!credentials.insecure);
        for yes in ["1", "true", "YES"] {
            assert!(Credentials::from_lookup(lookup(&[(env::INSECURE, yes)])).insecure, "{yes}");
        }
        assert!(!Credentials::from_lookup(lookup(&[(env::INSECURE, "0")])).insecure);
    }

    #[test]
    fn nothing_configured_is_plaintext_without_a_token() {
        assert_eq!(Credentials::default().resolve().ok(), Some((None, None)));
    }

    #[test]
    fn files_are_read_into_tls_and_token() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("written");
            path
        };
        let credentials = Credentials {
            ca: Some(write("ca.pem", "CA")),
            cert: Some(write("me.pem", "CERT")),
            key: Some(write("me.key", "KEY")),
            token_file: Some(write("token", "jwt\n")),
            ..Credentials::default()
        };
        let config = credentials.apply(crate::ClientConfig::default()).expect("resolved");
        let tls = config.tls.expect("TLS");
        assert_eq!(tls.ca_pem, "CA");
        assert_eq!(tls.identity, Some(("CERT".to_string(), "KEY".to_string())));
        assert_eq!(config.token.as_deref(), Some("jwt"));
    }

    #[test]
    fn contradictory_credentials_are_refused() {
        let ca = Some(PathBuf::from("/nonexistent/ca.pem"));
        let cases = [
            Credentials { insecure: true, ca: ca.clone(), ..Credentials::default() },
            Credentials { insecure: true, token: Some("t".to_string()), ..Credentials::default() },
            Credentials { cert: Some(PathBuf::from("/c/me.pem")), ca: ca.clone(), ..Credentials::default() },
            Credentials { token: Some("t".to_string()), ..Credentials::default() },
            Credentials {
                token: Some("t".to_string()),
                token_file: Some(PathBuf::from("/t")),
                ca: ca.clone(),
                ..Credentials::default()
            },
            Credentials { ca, ..Credentials::default() },
        ];
        for credentials in cases {
            assert!(matches!(credentials.resolve(), Err(Error::Config(_))), "{credentials:?}");
        }
    }

    #[test]
    fn the_interceptor_stamps_the_bearer_token() {
        let mut authorization = Authorization::bearer(Some("abc")).expect("a header");
        let request = authorization.call(Request::new(())).expect("stamped");
        let value = request.metadata().get(gavel_proto::metadata::AUTHORIZATION).expect("present");
        assert_eq!(value.to_str().ok(), Some("Bearer abc"));
        assert!(request.metadata().contains_key("traceparent"), "every call carries a trace context");
        let mut none = Authorization::bearer(None).expect("no header");
        assert!(none.call(Request::new(())).expect("passed").metadata().get("authorization").is_none());
    }
}
