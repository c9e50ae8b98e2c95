//! The SDK over real TLS: a tonic server with rustls and a certificate from
//! `gavel-pki` answers `AccessService.WhoAmI` with the principal of the
//! client certificate it saw and the `authorization` header it got. The
//! node's own authentication is tested with real nodes in `tests/`; this
//! pins the client half: https, the CA check, the identity it presents, the
//! token on every call, and refusals that are not retried.

use std::net::SocketAddr;
use std::time::Duration;

use gavel_client::pb::access_service_server::{AccessService, AccessServiceServer};
use gavel_client::{pb, Client, ClientConfig, ClientTls};
use gavel_core::{Principal, PrincipalKind};
use gavel_pki::{node_hosts, principal_from_certificate, Authority, IssuedCertificate, Validity};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

/// Echoes who called: the certificate's principal and the bearer header.
struct Echo;

#[tonic::async_trait]
impl AccessService for Echo {
    async fn grant(&self, _request: Request<pb::GrantRequest>) -> Result<Response<pb::GrantResponse>, Status> {
        Err(Status::permission_denied("user:bob lacks admin"))
    }

    async fn revoke(&self, _request: Request<pb::RevokeRequest>) -> Result<Response<pb::RevokeResponse>, Status> {
        Err(Status::unauthenticated("the bearer token has expired"))
    }

    async fn list(&self, _request: Request<pb::ListGrantsRequest>) -> Result<Response<pb::ListGrantsResponse>, Status> {
        Ok(Response::new(pb::ListGrantsResponse::default()))
    }

    async fn who_am_i(&self, request: Request<pb::WhoAmIRequest>) -> Result<Response<pb::WhoAmIResponse>, Status> {
        let principal = request
            .peer_certs()
            .and_then(|certs| certs.first().map(|cert| principal_from_certificate(cert)))
            .map(|principal| principal.map(|principal| principal.to_string()).unwrap_or_else(|e| e.to_string()))
            .unwrap_or_default();
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .map(str::to_string)
            .into_iter()
            .collect();
        Ok(Response::new(pb::WhoAmIResponse { principal, grants: Vec::new(), token_scope: authorization }))
    }

    async fn set_quota(
        &self,
        _request: Request<pb::SetQuotaRequest>,
    ) -> Result<Response<pb::SetQuotaResponse>, Status> {
        Err(Status::unimplemented("not part of this TLS test"))
    }

    async fn get_quota(
        &self,
        _request: Request<pb::GetQuotaRequest>,
    ) -> Result<Response<pb::GetQuotaResponse>, Status> {
        Err(Status::unimplemented("not part of this TLS test"))
    }

    async fn list_quotas(
        &self,
        _request: Request<pb::ListQuotasRequest>,
    ) -> Result<Response<pb::ListQuotasResponse>, Status> {
        Err(Status::unimplemented("not part of this TLS test"))
    }
}

struct TlsServer {
    addr: SocketAddr,
    authority: Authority,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsServer {
    async fn start() -> TlsServer {
        TlsServer::start_named(&node_hosts(&[])).await
    }

    /// A server whose certificate names only `hosts`.
    async fn start_named(hosts: &[String]) -> TlsServer {
        let authority = Authority::create("client test CA", Validity::days(1)).expect("a CA");
        let node = authority.issue(&Principal::node(1), hosts, Validity::days(1)).expect("node cert");
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(&node.cert_pem, &node.key_pem))
            .client_ca_root(Certificate::from_pem(authority.cert_pem()))
            .client_auth_optional(true);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bound");
        let addr = listener.local_addr().expect("an address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = Server::builder().tls_config(tls).expect("TLS").add_service(AccessServiceServer::new(Echo));
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = server
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        TlsServer { addr, authority, stop: Some(stop), task }
    }

    fn client(&self, host: &str, tls: ClientTls, token: Option<&str>) -> Client {
        let config = ClientConfig {
            tls: Some(tls),
            token: token.map(str::to_string),
            retry_budget: Duration::from_secs(2),
            ..ClientConfig::default()
        };
        Client::with_config(&[format!("{host}:{}", self.addr.port())], config).expect("a client")
    }

    fn tls_as(&self, identity: Option<&IssuedCertificate>) -> ClientTls {
        ClientTls {
            ca_pem: self.authority.cert_pem().to_string(),
            identity: identity.map(|issued| (issued.cert_pem.clone(), issued.key_pem.clone())),
        }
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = self.task.await;
    }
}

fn user(id: &str) -> Principal {
    Principal::new(PrincipalKind::User, id).expect("a principal")
}

#[tokio::test]
async fn client_certificate_names_the_principal_over_tls() {
    let server = TlsServer::start().await;
    let admin = server.authority.issue(&user("admin"), &[], Validity::days(1)).expect("admin cert");
    for host in ["127.0.0.1", "localhost"] {
        let client = server.client(host, server.tls_as(Some(&admin)), None);
        let answer = client.who_am_i(pb::WhoAmIRequest {}).await.expect("answered");
        assert_eq!(answer.principal, "user:admin", "via {host}");
        assert!(answer.token_scope.is_empty(), "no token was configured");
    }
    server.stop().await;
}

#[tokio::test]
async fn token_is_sent_on_every_call_without_a_certificate() {
    let server = TlsServer::start().await;
    let client = server.client("127.0.0.1", server.tls_as(None), Some("eyJ.token.sig"));
    for _ in 0..2 {
        let answer = client.who_am_i(pb::WhoAmIRequest {}).await.expect("answered");
        assert_eq!(answer.principal, "");
        assert_eq!(answer.token_scope, vec!["Bearer eyJ.token.sig".to_string()]);
    }
    server.stop().await;
}

#[tokio::test]
async fn access_refusals_carry_their_code_and_are_not_retried() {
    let server = TlsServer::start().await;
    let client = server.client("127.0.0.1", server.tls_as(None), Some("t"));
    let denied = client.grant(pb::GrantRequest::default()).await.expect_err("refused");
    assert_eq!(denied.code(), "PERMISSION_DENIED");
    assert!(denied.is_access_refused() && !denied.is_retryable());
    assert_eq!(client.attempts(), 1, "a refusal is not retried");
    let unauthenticated = client.revoke(pb::RevokeRequest::default()).await.expect_err("refused");
    assert_eq!(unauthenticated.code(), "UNAUTHENTICATED");
    assert_eq!(client.attempts(), 2);
    server.stop().await;
}

#[tokio::test]
async fn a_node_certificate_from_another_ca_fails_the_handshake_without_retries() {
    let server = TlsServer::start().await;
    let other = Authority::create("another CA", Validity::days(1)).expect("a CA");
    let tls = ClientTls { ca_pem: other.cert_pem().to_string(), identity: None };
    let client = server.client("127.0.0.1", tls, None);
    let refused = client.who_am_i(pb::WhoAmIRequest {}).await.expect_err("refused");
    assert_eq!(refused.code(), "UNAUTHENTICATED", "{refused}");
    assert!(refused.to_string().contains("TLS"), "{refused}");
    assert_eq!(client.attempts(), 1, "a bad certificate is not retried");
    server.stop().await;
}

#[tokio::test]
async fn a_host_the_node_certificate_does_not_name_fails_the_handshake() {
    let server = TlsServer::start_named(&["localhost".to_string()]).await;
    let admin = server.authority.issue(&user("admin"), &[], Validity::days(1)).expect("admin cert");
    let client = server.client("127.0.0.1", server.tls_as(Some(&admin)), None);
    let refused = client.who_am_i(pb::WhoAmIRequest {}).await.expect_err("refused");
    assert_eq!(refused.code(), "UNAUTHENTICATED", "{refused}");
    server.stop().await;
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused_by_the_node() {
    let server = TlsServer::start().await;
    let other = Authority::create("another CA", Validity::days(1)).expect("a CA");
    let forged = other.issue(&user("admin"), &[], Validity::days(1)).expect("forged cert");
    let client = server.client("127.0.0.1", server.tls_as(Some(&forged)), None);
    let refused = client.who_am_i(pb::WhoAmIRequest {}).await.expect_err("refused");
    assert_eq!(refused.code(), "UNAUTHENTICATED", "{refused}");
    assert!(refused.to_string().contains("UnknownCA"), "{refused}");
    assert_eq!(client.attempts(), 1, "a refused certificate is not retried");
    server.stop().await;
}

#[tokio::test]
async fn plaintext_client_cannot_talk_to_a_tls_node() {
    let server = TlsServer::start().await;
    let config = ClientConfig { retry_budget: Duration::from_millis(500), ..ClientConfig::default() };
    let client = Client::with_config(&[server.addr.to_string()], config).expect("a client");
    assert!(client.who_am_i(pb::WhoAmIRequest {}).await.is_err());
    server.stop().await;
}

#[tokio::test]
async fn an_expired_client_certificate_is_refused_by_the_node() {
    let server = TlsServer::start().await;
    let expired = server.authority.issue(&user("late"), &[], Validity::expired()).expect("expired cert");
    let client = server.client("127.0.0.1", server.tls_as(Some(&expired)), None);
    let refused = client.who_am_i(pb::WhoAmIRequest {}).await.expect_err("refused");
    assert_eq!(refused.code(), "UNAUTHENTICATED", "{refused}");
    assert_eq!(client.attempts(), 1);
    server.stop().await;
}
