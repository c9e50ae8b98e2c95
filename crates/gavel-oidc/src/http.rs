//! The few HTTP exchanges OpenID Connect needs (GET a discovery document or
//! a JWKS, POST a form to the token endpoint), on hyper's HTTP/1.1 client
//! over rustls: what the node already builds with, no second HTTP stack.
//! `https` always, except plain `http` to a loopback host (tests and a
//! provider on the same machine).

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use crate::limits::{PROVIDER_HTTP_TIMEOUT, PROVIDER_RESPONSE_BYTES_MAX};
use crate::OidcError;

/// Where the operating system keeps its trusted CAs (Debian/Ubuntu, Fedora/RHEL,
/// Alpine/openSUSE): used when no `--oidc-ca-file` is given.
const SYSTEM_CA_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem"];

/// A URL split into what a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Whether the exchange is TLS.
    pub https: bool,
    /// The host, without brackets for IPv6.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Target {
    /// Parses `http(s)://host[:port]/path`, refusing plain `http` off loopback.
    pub fn parse(url: &str) -> Result<Target, OidcError> {
        let refused = |reason: &str| OidcError::Settings(format!("{url:?}: {reason}"));
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(refused("not an http(s) URL"));
        };
        let (authority, path) = rest.find('/').map_or((rest, "/"), |slash| rest.split_at(slash));
        if authority.contains('@') {
            return Err(refused("user information in a provider URL is not accepted"));
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, after) = bracketed.split_once(']').ok_or_else(|| refused("unclosed IPv6 bracket"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(refused("no host"));
        }
        let port = match port {
            None => {
                if https {
                    443
                } else {
                    80
                }
            }
            Some(port) => port.parse().map_err(|_| refused("bad port"))?,
        };
        let target = Target { https, host: host.to_string(), port, path: path.to_string() };
        if !https && !target.is_loopback() {
            return Err(refused("plain http is accepted only for a loopback provider; use https"));
        }
        Ok(target)
    }

    fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    fn host_header(&self) -> String {
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        match (self.https, self.port) {
            (true, 443) | (false, 80) => host,
            _ => format!("{host}:{}", self.port),
        }
    }
}

/// An HTTP client for one provider's endpoints.
#[derive(Clone)]
pub struct HttpClient {
    tls: TlsConnector,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client trusting the CAs in `ca_file` (PEM), or the operating
    /// system's bundle without one.
    pub fn new(ca_file: Option<&Path>) -> Result<HttpClient, OidcError> {
        let bundle = match ca_file {
            Some(path) => path.to_path_buf(),
            None => SYSTEM_CA_BUNDLES
                .iter()
                .map(Path::new)
                .find(|path| path.exists())
                .map(Path::to_path_buf)
                .unwrap_or_default(),
        };
        let mut roots = RootCertStore::empty();
        if bundle.exists() {
            for certificate in CertificateDer::pem_file_iter(&bundle)
                .map_err(|error| OidcError::Settings(format!("{}: {error}", bundle.display())))?
            {
                let certificate =
                    certificate.map_err(|error| OidcError::Settings(format!("{}: {error}", bundle.display())))?;
                // A bundle may hold certificates rustls cannot use; the rest still serve.
                let _ = roots.add(certificate);
            }
        } else if ca_file.is_some() {
            return Err(OidcError::Settings(format!("{}: no such file", bundle.display())));
        }
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| OidcError::Settings(error.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(HttpClient { tls: TlsConnector::from(Arc::new(config)) })
    }

    /// GETs `url` and returns the body of a 200 answer.
    pub async fn get(&self, url: &str) -> Result<Bytes, OidcError> {
        self.exchange(url, None).await
    }

    /// POSTs the form `fields` (url-encoded) to `url` and returns the body of
    /// a 200 answer.
    pub async fn post_form(&self, url: &str, fields: &[(&str, &str)]) -> Result<Bytes, OidcError> {
        let body: Vec<String> =
            fields.iter().map(|(name, value)| format!("{}={}", form_encode(name), form_encode(value))).collect();
        self.exchange(url, Some(body.join("&"))).await
    }

    async fn exchange(&self, url: &str, form: Option<String>) -> Result<Bytes, OidcError> {
        let target = Target::parse(url)?;
        tokio::time::timeout(PROVIDER_HTTP_TIMEOUT, self.exchange_with(&target, form))
            .await
            .map_err(|_| OidcError::Provider(format!("{url} did not answer within {PROVIDER_HTTP_TIMEOUT:?}")))?
            .map_err(|reason| OidcError::Provider(format!("{url}: {reason}")))
    }

    async fn exchange_with(&self, target: &Target, form: Option<String>) -> Result<Bytes, String> {
        let stream =
            TcpStream::connect((target.host.as_str(), target.port)).await.map_err(|error| error.to_string())?;
        let builder = Request::builder()
            .uri(&target.path)
            .header(hyper::header::HOST, target.host_header())
            .header(hyper::header::ACCEPT, "application/json");
        let request = match form {
            None => builder.method("GET").body(Full::new(Bytes::new())),
            Some(form) => builder
                .method("POST")
                .header(hyper::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Full::new(Bytes::from(form))),
        }
        .map_err(|error| error.to_string())?;
        if target.https {
            let name = ServerName::try_from(target.host.clone()).map_err(|error| error.to_string())?;
            let stream = self.tls.connect(name, stream).await.map_err(|error| error.to_string())?;
            send(TokioIo::new(stream), request).await
        } else {
            send(TokioIo::new(stream), request).await
        }
    }
}

async fn send<T>(io: T, request: Request<Full<Bytes>>) -> Result<Bytes, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|error| error.to_string())?;
    let driver = tokio::spawn(connection);
    let response = sender.send_request(request).await.map_err(|error| error.to_string());
    let result = match response {
        Ok(response) => {
            let status = response.status();
            let body = Limited::new(response.into_body(), PROVIDER_RESPONSE_BYTES_MAX)
                .collect()
                .await
                .map_err(|error| format!("reading the answer (at most {PROVIDER_RESPONSE_BYTES_MAX} bytes): {error}"))?
                .to_bytes();
            if status.is_success() {
                Ok(body)
            } else {
                let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
                Err(format!("answered {status}: {text}"))
            }
        }
        Err(error) => Err(error),
    };
    driver.abort();
    result
}

/// `application/x-www-form-urlencoded` encoding of one name or value.
pub fn form_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => encoded.push(byte as char),
            _ => encoded.push_str(&format!("%{byte:02X}")),
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_plain_http_is_only_for_loopback() {
        let target = Target::parse("https://id.example.com/.well-known/openid-configuration").expect("https");
        assert_eq!((target.https, target.host.as_str(), target.port), (true, "id.example.com", 443));
        assert_eq!(target.path, "/.well-known/openid-configuration");
        let target = Target::parse("http://127.0.0.1:9000").expect("loopback");
        assert_eq!((target.port, target.path.as_str(), target.host_header().as_str()), (9000, "/", "127.0.0.1:9000"));
        let target = Target::parse("http://[::1]:9/jwks").expect("ipv6 loopback");
        assert_eq!((target.host.as_str(), target.host_header().as_str()), ("::1", "[::1]:9"));
        for refused in ["http://id.example.com/", "ftp://x/", "https://:1/", "https://a@b/", "https://h:x/"] {
            assert!(matches!(Target::parse(refused), Err(OidcError::Settings(_))), "{refused}");
        }
    }

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(form_encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
    }
}
