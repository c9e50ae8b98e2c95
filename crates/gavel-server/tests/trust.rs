//! The node's edge on secured in-process nodes (real TLS on loopback with
//! certificates from `gavel-pki`, real gRPC, real sled in temporary
//! directories): who may connect, who a call is made by, and who may speak
//! Raft or forward on someone else's behalf.
//!
//! Grants are decided by the state machine; these tests only need what the
//! edge decides: `WhoAmI` (any authenticated caller) and `Status` answer
//! whoever authenticated, so they show who the node thinks is calling.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use gavel_core::{GrantName, Principal};
use gavel_pki::{node_hosts, Authority, IssuedCertificate, TokenClaims, TokenKey, Validity};
use gavel_proto::error_detail::read_error_detail;
use gavel_proto::metadata;
use gavel_proto::v1 as pb;
use gavel_proto::v1::access_service_client::AccessServiceClient;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_raft::pb::raft_service_client::RaftServiceClient;
use gavel_raft::pb::{snapshot_chunk, RaftBytes, SnapshotChunk, SnapshotHeader};
use gavel_raft::RaftTimings;
use gavel_server::security::{Security, TlsFiles, TokenSettings};
use gavel_server::server::{start, NodeOptions, RunningNode};
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::Code;

mod support;

use support::WAIT;

/// The token audience the nodes accept.
const AUDIENCE: &str = "gavel";

/// The OpenID Provider the nodes accept ID tokens of; never reached (its
/// JWKS is a file).
const OIDC_ISSUER: &str = "https://id.example.test";
/// The console's client id, the `aud` of the provider's ID tokens.
const OIDC_AUDIENCE: &str = "gavel-console";
/// gavel-oidc's test keys (RSA, P-256, Ed25519) and their JWKS.
const OIDC_FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../gavel-oidc/tests/fixtures");

/// A cluster CA, a token key, and secured nodes started in this process.
struct SecureCluster {
    dir: tempfile::TempDir,
    authority: Authority,
    token_key: TokenKey,
    nodes: Vec<RunningNode>,
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write credential file");
    path
}

impl SecureCluster {
    /// Starts `count` secured voters; node 1 bootstraps the cluster.
    async fn start(count: u64) -> SecureCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let authority = Authority::create("trust test CA", Validity::days(1)).expect("a CA");
        let token_key = TokenKey::create().expect("a token key");
        write(dir.path(), "ca.pem", authority.cert_pem());
        write(dir.path(), "token.pub", token_key.public_pem());
        let mut cluster = SecureCluster { dir, authority, token_key, nodes: Vec::new() };
        let (listeners, peers) = support::loopback_listeners(count).await;
        for (index, listener) in listeners.into_iter().enumerate() {
            cluster.start_node(index as u64 + 1, &peers, listener).await;
        }
        cluster
    }

    /// Starts secured node `id` on `listener`; node 1 bootstraps a cluster
    /// of `peers`, any other waits to be added.
    async fn start_node(&mut self, id: u64, peers: &BTreeMap<u64, String>, listener: tokio::net::TcpListener) {
        let dir = self.dir.path();
        let issued =
            self.authority.issue(&Principal::node(id), &node_hosts(&[]), Validity::days(1)).expect("a node cert");
        let security = Security {
            tls: Some(TlsFiles {
                ca: dir.join("ca.pem"),
                cert: write(dir, &format!("node-{id}.pem"), &issued.cert_pem),
                key: write(dir, &format!("node-{id}.key"), &issued.key_pem),
            }),
            tokens: Some(TokenSettings {
                audience: AUDIENCE.into(),
                public_keys: vec![dir.join("token.pub")],
                hs256_secret: None,
                lifetime_max: gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT,
            }),
            // Every node also accepts the ID tokens of a provider whose
            // keys are the gavel-oidc fixtures (a JWKS file: nothing fetched).
            oidc: Some(gavel_oidc::ProviderSettings {
                rules: gavel_oidc::TokenRules {
                    issuer: OIDC_ISSUER.to_string(),
                    audience: OIDC_AUDIENCE.to_string(),
                    principal_claim: "email".to_string(),
                    principal_prefix: "user:".to_string(),
                    clock_skew_seconds: gavel_pki::limits::TOKEN_CLOCK_SKEW_SECONDS,
                },
                jwks: gavel_oidc::JwksSource::File(PathBuf::from(OIDC_FIXTURES).join("jwks.json")),
                ca_file: None,
            }),
            // The bootstrapping node names the first admin once it leads:
            // one command every replica applies.
            bootstrap_admin: (id == 1).then(|| Principal::parse("user:root").expect("a principal")),
        };
        let options = NodeOptions {
            id,
            advertise: listener.local_addr().expect("bound").to_string(),
            peers: peers.clone(),
            data_dir: dir.join(format!("n{id}")),
            timings: RaftTimings::default(),
            bootstrap: id == 1,
            settings: gavel_server::node::ServerSettings::default(),
            security,
        };
        self.nodes.push(start(options, listener).await.expect("start a secured node"));
    }

    /// Waits until one node leads and every node knows it; returns (leader,
    /// a follower) as indexes into `nodes`.
    async fn leader_and_follower(&self) -> (usize, usize) {
        support::leader_and_follower(&self.nodes).await
    }

    /// Every node's applied index, once they are equal and have not moved
    /// for a while: the bootstrap admin and the first tick it schedules are
    /// behind us, and the next tick is a minute away.
    async fn settled_applied(&self) -> Vec<Option<u64>> {
        let started = Instant::now();
        let mut last = Vec::new();
        let mut stable_since = Instant::now();
        while started.elapsed() < WAIT {
            let applied: Vec<_> = self.nodes.iter().map(|node| node.node.raft.status().last_applied_index).collect();
            if applied != last {
                (last, stable_since) = (applied, Instant::now());
            } else if last.iter().all(|index| *index == last[0]) && stable_since.elapsed() > Duration::from_millis(500)
            {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the applied indexes did not settle within {WAIT:?}: {last:?}");
    }

    fn addr(&self, index: usize) -> String {
        self.nodes[index].addr.to_string()
    }

    /// A client certificate of this cluster's CA for `principal`.
    fn client_cert(&self, principal: &str) -> IssuedCertificate {
        let principal = Principal::parse(principal).expect("a principal");
        self.authority.issue(&principal, &[], Validity::days(1)).expect("a client cert")
    }

    /// A valid token for `principal`.
    fn token(&self, principal: &str) -> String {
        let principal = Principal::parse(principal).expect("a principal");
        self.token_key.issue(&TokenClaims::new(&principal, AUDIENCE, Duration::from_secs(600))).expect("a token")
    }

    /// A TLS channel to node `index` trusting the cluster CA, presenting
    /// `identity` as client certificate when given.
    async fn channel(&self, index: usize, identity: Option<&IssuedCertificate>) -> Result<Channel, String> {
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(self.authority.cert_pem()));
        if let Some(identity) = identity {
            tls = tls.identity(Identity::from_pem(&identity.cert_pem, &identity.key_pem));
        }
        Endpoint::from_shared(format!("https://{}", self.addr(index)))
            .expect("an endpoint")
            .tls_config(tls)
            .expect("a TLS config")
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .map_err(|error| format!("{error:?}"))
    }

    /// The principal node `index` says `channel` calls as (with `token`).
    async fn who_am_i(&self, channel: Channel, token: Option<&str>) -> Result<pb::WhoAmIResponse, tonic::Status> {
        let mut request = tonic::Request::new(pb::WhoAmIRequest {});
        if let Some(token) = token {
            let value = MetadataValue::try_from(format!("Bearer {token}")).expect("a header value");
            request.metadata_mut().insert(metadata::AUTHORIZATION, value);
        }
        AccessServiceClient::new(channel).who_am_i(request).await.map(tonic::Response::into_inner)
    }

    /// Node `index` still serves a good client: a client certificate for
    /// `user:good` is answered as `user:good`.
    async fn still_serves_a_good_client(&self, index: usize) {
        let good = self.client_cert("user:good");
        let channel = self.channel(index, Some(&good)).await.expect("a good client connects");
        let answer = self.who_am_i(channel, None).await.expect("a good client is served");
        assert_eq!(answer.principal, "user:good");
    }

    async fn stop(self) {
        for node in self.nodes {
            node.stop().await.expect("stop a node");
        }
        drop(self.dir);
    }
}

/// Asserts `UNAUTHENTICATED` with that domain code; returns the message.
fn assert_unauthenticated(result: Result<pb::WhoAmIResponse, tonic::Status>, case: &str) -> String {
    let status = result.expect_err(case);
    assert_eq!(status.code(), Code::Unauthenticated, "{case}: {status:?}");
    let detail = read_error_detail(&status).unwrap_or_else(|| panic!("{case}: no error detail in {status:?}"));
    assert_eq!(detail.code, "UNAUTHENTICATED", "{case}");
    status.message().to_string()
}

#[tokio::test]
async fn a_plaintext_client_gets_nothing_from_a_tls_node() {
    let cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let plaintext = Endpoint::from_shared(format!("http://{}", cluster.addr(0)))
        .expect("an endpoint")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_lazy();
    let status = ClusterServiceClient::new(plaintext)
        .status(pb::StatusRequest { without_state_hash: true })
        .await
        .expect_err("a plaintext call to a TLS port is not answered");
    assert!(read_error_detail(&status).is_none(), "the node never answered: {status:?}");
    cluster.still_serves_a_good_client(0).await;
    cluster.stop().await;
}

#[tokio::test]
async fn a_call_without_credentials_is_unauthenticated_but_health_needs_none() {
    let cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let anonymous = cluster.channel(0, None).await.expect("TLS without a client certificate is allowed");
    assert_unauthenticated(cluster.who_am_i(anonymous.clone(), None).await, "no credentials");
    let status = ClusterServiceClient::new(anonymous.clone())
        .status(pb::StatusRequest { without_state_hash: true })
        .await
        .expect_err("status needs an authenticated caller");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    // Probes need no credentials.
    let health = tonic_health::pb::health_client::HealthClient::new(anonymous)
        .check(tonic_health::pb::HealthCheckRequest { service: String::new() })
        .await
        .expect("health answers without credentials");
    assert_eq!(health.into_inner().status, tonic_health::pb::health_check_response::ServingStatus::Serving as i32);
    cluster.still_serves_a_good_client(0).await;
    cluster.stop().await;
}

#[tokio::test]
async fn client_certificates_of_another_ca_expired_or_self_signed_are_refused_and_the_node_serves_on() {
    let cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let alice = Principal::parse("user:alice").expect("a principal");
    let other_ca = Authority::create("another CA", Validity::days(1)).expect("a CA");
    let self_signed = Authority::create("user:alice", Validity::days(1)).expect("a self-signed certificate");
    let cases = [
        ("another CA", other_ca.issue(&alice, &[], Validity::days(1)).expect("a cert"), "UnknownCA"),
        ("expired", cluster.authority.issue(&alice, &[], Validity::expired()).expect("a cert"), "CertificateExpired"),
        (
            "self-signed",
            IssuedCertificate { cert_pem: self_signed.cert_pem().into(), key_pem: self_signed.key_pem() },
            "fatal alert",
        ),
    ];
    for (case, identity, alert) in cases {
        // TLS 1.3 lets the client finish its side of the handshake before
        // the server checks its certificate, so the refusal may surface at
        // connect or at the first call; either way nothing is answered.
        let refusal = match cluster.channel(0, Some(&identity)).await {
            Err(error) => error,
            Ok(channel) => {
                let status = cluster.who_am_i(channel, None).await.expect_err(case);
                assert!(read_error_detail(&status).is_none(), "{case}: no handler answered: {status:?}");
                format!("{status:?}")
            }
        };
        assert!(refusal.contains(alert), "{case}: the handshake is refused with {alert}: {refusal}");
        cluster.still_serves_a_good_client(0).await;
    }
    cluster.stop().await;
}

/// A token whose header and claims are these JSON texts, signed by nobody.
fn unsigned_token(header: &str, claims: &str) -> String {
    let encode = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
    format!("{}.{}.", encode(header), encode(claims))
}

#[tokio::test]
async fn bad_tokens_are_unauthenticated_and_a_good_token_names_its_principal_and_scope() {
    let cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let bob = Principal::parse("user:bob").expect("a principal");
    let good = cluster.token("user:bob");
    let tampered = {
        // Flip one character of the signature.
        let (rest, signature) = good.rsplit_once('.').expect("a JWT");
        let mut signature: Vec<char> = signature.chars().collect();
        signature[3] = if signature[3] == 'A' { 'B' } else { 'A' };
        format!("{rest}.{}", signature.into_iter().collect::<String>())
    };
    let expired = {
        let mut claims = TokenClaims::new(&bob, AUDIENCE, Duration::from_secs(600));
        claims.exp = claims.iat - 3600;
        claims.iat -= 7200;
        cluster.token_key.issue(&claims).expect("a token")
    };
    let wrong_audience =
        cluster.token_key.issue(&TokenClaims::new(&bob, "another-cluster", Duration::from_secs(600))).expect("a token");
    let other_key = TokenKey::create().expect("a key");
    let foreign = other_key.issue(&TokenClaims::new(&bob, AUDIENCE, Duration::from_secs(600))).expect("a token");
    let far_future = gavel_pki::unix_seconds() + 3600;
    let alg_none = unsigned_token(
        r#"{"alg":"none","typ":"JWT"}"#,
        &format!(r#"{{"sub":"user:admin","aud":"{AUDIENCE}","exp":{far_future},"iat":1}}"#),
    );
    // Signed by the cluster's key, but breaking a rule on its claims.
    let signed = |claims: TokenClaims| cluster.token_key.issue(&claims).expect("a token");
    let an_hour = || TokenClaims::new(&bob, AUDIENCE, Duration::from_secs(3600));
    let not_yet_valid = signed(TokenClaims { nbf: Some(gavel_pki::unix_seconds() + 3600), ..an_hour() });
    let year_9999 = signed(TokenClaims { exp: 253_402_300_799, ..an_hour() });
    let node_subject = signed(TokenClaims { sub: "node:1".to_string(), ..an_hour() });
    // A client certificate does not rescue a bad token: the token decides.
    let carol = cluster.client_cert("user:carol");
    let cases = [
        ("tampered", tampered.as_str(), "signature does not verify"),
        ("expired", expired.as_str(), "has expired"),
        ("wrong audience", wrong_audience.as_str(), "not meant for audience"),
        ("signed by another key", foreign.as_str(), "signature does not verify"),
        ("alg none", alg_none.as_str(), "is not accepted"),
        ("garbage", "%%%.@@@.###", "not a JWT"),
        ("not even three parts", "definitely-not-a-jwt", "not a JWT"),
        ("nbf an hour ahead", not_yet_valid.as_str(), "not valid yet: its nbf is"),
        ("exp in year 9999", year_9999.as_str(), "over the maximum token lifetime of 1d"),
        ("sub node:1", node_subject.as_str(), "sub node:1 is a node"),
    ];
    for (case, token, reason) in cases {
        let channel = cluster.channel(0, None).await.expect("connect");
        let message = assert_unauthenticated(cluster.who_am_i(channel, Some(token)).await, case);
        assert!(message.starts_with("bearer token refused: ") && message.contains(reason), "{case}: {message}");
        let with_cert = cluster.channel(0, Some(&carol)).await.expect("connect");
        assert_unauthenticated(cluster.who_am_i(with_cert, Some(token)).await, case);
        cluster.still_serves_a_good_client(0).await;
    }
    let channel = cluster.channel(0, None).await.expect("connect");
    let answer = cluster.who_am_i(channel.clone(), Some(&good)).await.expect("a good token is served");
    assert_eq!(answer.principal, "user:bob");
    assert!(answer.token_scope.is_empty());
    let scoped = cluster
        .token_key
        .issue(&TokenClaims::new(&bob, AUDIENCE, Duration::from_secs(600)).with_roles(&[GrantName::Approver]))
        .expect("a token");
    let answer = cluster.who_am_i(channel, Some(&scoped)).await.expect("a scoped token is served");
    assert_eq!((answer.principal.as_str(), answer.token_scope), ("user:bob", vec!["approver".to_string()]));
    cluster.stop().await;
}

fn snapshot_header(total_bytes: u64) -> SnapshotChunk {
    SnapshotChunk {
        kind: Some(snapshot_chunk::Kind::Header(SnapshotHeader { vote_and_meta: vec![0; 16], total_bytes })),
    }
}

#[tokio::test]
async fn raft_calls_from_anyone_but_a_member_node_are_refused_before_raft_sees_them() {
    let cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let applied_before = cluster.settled_applied().await;
    let before = cluster.nodes[0].node.raft.status();
    let mallory = cluster.client_cert("user:mallory");
    let stranger_node =
        cluster.authority.issue(&Principal::node(9), &node_hosts(&[]), Validity::days(1)).expect("a node cert");
    let cases: [(&str, Option<&IssuedCertificate>, Code); 3] = [
        ("no certificate", None, Code::Unauthenticated),
        ("a user certificate", Some(&mallory), Code::PermissionDenied),
        ("a node certificate of a non-member", Some(&stranger_node), Code::PermissionDenied),
    ];
    for (case, identity, code) in cases {
        let mut raft = RaftServiceClient::new(cluster.channel(0, identity).await.expect("connect"));
        // A forged heartbeat from a phantom leader would be 34 bytes of
        // bincode; refused before decoding, the content does not matter.
        let status = raft.vote(RaftBytes { payload: vec![0; 34] }).await.expect_err(case);
        assert_eq!(status.code(), code, "{case}: vote: {status:?}");
        let status = raft.append_entries(RaftBytes { payload: vec![0; 34] }).await.expect_err(case);
        assert_eq!(status.code(), code, "{case}: append: {status:?}");
        let stream = futures::stream::iter(vec![snapshot_header(1 << 62)]);
        let status = raft.install_snapshot(stream).await.expect_err(case);
        assert_eq!(status.code(), code, "{case}: snapshot: {status:?}");
    }
    let after = cluster.nodes[0].node.raft.status();
    assert_eq!(after.term, before.term, "no forged message reached raft");
    assert_eq!(vec![after.last_applied_index], applied_before, "nothing reached the log");
    assert!(after.is_leader());
    cluster.still_serves_a_good_client(0).await;
    cluster.stop().await;
}

#[tokio::test]
async fn a_forwarded_for_header_from_a_client_certificate_is_refused() {
    let cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let mallory = cluster.client_cert("user:mallory");
    let stranger_node =
        cluster.authority.issue(&Principal::node(9), &node_hosts(&[]), Validity::days(1)).expect("a node cert");
    for (case, identity) in [("a user certificate", &mallory), ("a non-member node", &stranger_node)] {
        for (header, value) in [(metadata::FORWARDED_FOR, "user:admin"), (metadata::FORWARDED, "1")] {
            let channel = cluster.channel(0, Some(identity)).await.expect("connect");
            let mut request = tonic::Request::new(pb::WhoAmIRequest {});
            request.metadata_mut().insert(header, MetadataValue::from_static(value));
            let status = AccessServiceClient::new(channel).who_am_i(request).await.expect_err(case);
            assert_eq!(status.code(), Code::PermissionDenied, "{case} with {header}: {status:?}");
            let detail = read_error_detail(&status).expect("an error detail");
            assert_eq!(detail.code, "PERMISSION_DENIED");
        }
    }
    cluster.still_serves_a_good_client(0).await;
    cluster.stop().await;
}

#[tokio::test]
async fn a_secured_cluster_replicates_over_mutual_tls_and_a_follower_forwards_with_the_caller_preserved() {
    let cluster = SecureCluster::start(3).await;
    let (leader, follower) = cluster.leader_and_follower().await;
    // Every node applies the same log (the leader's blank entry, then the
    // bootstrap admin command): peers reach each other over mTLS (the nodes
    // serve TLS only, and admit Raft calls from node certificates only).
    let started = Instant::now();
    loop {
        let statuses: Vec<_> = cluster.nodes.iter().map(|node| node.node.raft.status()).collect();
        let applied: Vec<_> = statuses.iter().map(|status| status.last_applied_index).collect();
        if applied[0].is_some_and(|index| index >= 2) && applied.iter().all(|index| *index == applied[0]) {
            break;
        }
        assert!(started.elapsed() < WAIT, "replicas did not converge: {applied:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A certificate client through a follower: answered by the leader, as itself.
    let dana = cluster.client_cert("user:dana");
    let channel = cluster.channel(follower, Some(&dana)).await.expect("connect to a follower");
    let response =
        AccessServiceClient::new(channel).who_am_i(pb::WhoAmIRequest {}).await.expect("a forwarded call is served");
    let leader_header = response.metadata().get(metadata::LEADER).map(|value| value.to_str().unwrap_or("").to_string());
    assert_eq!(leader_header, Some(cluster.addr(leader)), "the follower forwarded the call");
    assert_eq!(response.into_inner().principal, "user:dana");

    // A down-scoped token through a follower: principal and scope survive.
    let erin = Principal::parse("service:erin").expect("a principal");
    let scoped = cluster
        .token_key
        .issue(
            &TokenClaims::new(&erin, AUDIENCE, Duration::from_secs(600))
                .with_roles(&[GrantName::Submitter, GrantName::Auditor]),
        )
        .expect("a token");
    let channel = cluster.channel(follower, None).await.expect("connect to a follower");
    let answer = cluster.who_am_i(channel, Some(&scoped)).await.expect("a forwarded token call is served");
    assert_eq!(answer.principal, "service:erin");
    assert_eq!(answer.token_scope, vec!["submitter".to_string(), "auditor".to_string()]);

    // A bad token is refused at the follower; nothing is forwarded for it.
    let channel = cluster.channel(follower, None).await.expect("connect to a follower");
    assert_unauthenticated(cluster.who_am_i(channel, Some("not-a-jwt")).await, "bad token at a follower");
    cluster.stop().await;
}

fn grant_request(principal: &str, grant: &str) -> pb::GrantRequest {
    pb::GrantRequest {
        grant: Some(pb::AccessGrant {
            principal: principal.into(),
            grant: grant.into(),
            scope: Vec::new(),
            skew_ms_max: None,
        }),
        request_id: String::new(),
    }
}

#[tokio::test]
async fn the_bootstrap_admin_grants_through_a_follower_and_nobody_else_changes_access_or_membership() {
    let cluster = SecureCluster::start(3).await;
    let (_, follower) = cluster.leader_and_follower().await;
    let root = cluster.client_cert("user:root");
    let mallory = cluster.client_cert("user:mallory");

    // The bootstrapping node names user:root admin once it leads.
    let started = Instant::now();
    loop {
        let channel = cluster.channel(follower, Some(&root)).await.expect("connect");
        let answer = cluster.who_am_i(channel, None).await.expect("root is authenticated");
        if answer.grants.iter().any(|grant| grant.grant == "admin") {
            assert_eq!(answer.principal, "user:root");
            break;
        }
        assert!(started.elapsed() < WAIT, "the bootstrap admin was never named: {answer:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Someone without admin: refused, and nothing reaches the log.
    let applied_before = cluster.settled_applied().await;
    let members_before = cluster.nodes[0].node.raft.status().members;
    let mut access = AccessServiceClient::new(cluster.channel(follower, Some(&mallory)).await.expect("connect"));
    let status = access.grant(grant_request("user:mallory", "admin")).await.expect_err("mallory is no admin");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let status = access.list(pb::ListGrantsRequest { principal: None }).await.expect_err("mallory may not list");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let mut cluster_client =
        ClusterServiceClient::new(cluster.channel(follower, Some(&mallory)).await.expect("connect"));
    let status = cluster_client
        .add_learner(pb::AddLearnerRequest {
            request_id: String::new(),
            node_id: 9,
            addr: "127.0.0.1:1".into(),
            wait_caught_up: false,
        })
        .await
        .expect_err("mallory may not add a learner");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let status = cluster_client
        .remove_node(pb::RemoveNodeRequest { request_id: String::new(), node_id: 3 })
        .await
        .expect_err("mallory may not remove a node");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    let applied_after: Vec<_> = cluster.nodes.iter().map(|node| node.node.raft.status().last_applied_index).collect();
    assert_eq!(applied_after, applied_before, "no refused command reached the log");
    assert_eq!(cluster.nodes[0].node.raft.status().members, members_before, "the membership did not change");

    // The admin grants through a follower; the grant is an audit event
    // naming who granted what to whom.
    let mut access = AccessServiceClient::new(cluster.channel(follower, Some(&root)).await.expect("connect"));
    let granted = access.grant(grant_request("user:bob", "approver")).await.expect("root grants").into_inner();
    assert_eq!(granted.grants.iter().map(|grant| grant.grant.as_str()).collect::<Vec<_>>(), vec!["approver"]);
    access.grant(grant_request("user:root", "auditor")).await.expect("root makes itself auditor");
    let listed = access.list(pb::ListGrantsRequest { principal: None }).await.expect("root lists").into_inner();
    let bindings: Vec<(String, String)> =
        listed.grants.into_iter().map(|grant| (grant.principal, grant.grant)).collect();
    assert!(bindings.contains(&("user:bob".into(), "approver".into())), "{bindings:?}");
    let mut audit = gavel_proto::v1::audit_service_client::AuditServiceClient::new(
        cluster.channel(follower, Some(&root)).await.expect("connect"),
    );
    let events = audit
        .list_events(pb::ListEventsRequest {
            after_cursor: 0,
            limit: 100,
            execution_id: None,
            ..pb::ListEventsRequest::default()
        })
        .await
        .expect("an auditor reads the trail")
        .into_inner()
        .events;
    let granted_event = events
        .iter()
        .find(|event| event.r#type == "access.granted" && event.subject_principal.as_deref() == Some("user:bob"))
        .unwrap_or_else(|| panic!("an access.granted event for user:bob in {events:?}"));
    assert_eq!(granted_event.principal.as_deref(), Some("user:root"));
    assert_eq!(granted_event.grant.as_deref(), Some("approver"));
    cluster.stop().await;
}

#[tokio::test]
async fn an_admin_adds_a_fresh_secured_node_which_catches_up_over_mutual_tls() {
    let mut cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let root = cluster.client_cert("user:root");
    let settled = cluster.settled_applied().await;
    let (listeners, _) = support::loopback_listeners(1).await;
    let listener = listeners.into_iter().next().expect("one listener");
    let addr = listener.local_addr().expect("bound").to_string();
    // A fresh node knows no membership yet, so it admits the leader's node
    // certificate; the leader dials it with its own.
    cluster.start_node(2, &BTreeMap::from([(2, addr.clone())]), listener).await;
    let mut admin = ClusterServiceClient::new(cluster.channel(0, Some(&root)).await.expect("connect"));
    let started = Instant::now();
    loop {
        match admin
            .add_learner(pb::AddLearnerRequest {
                request_id: String::new(),
                node_id: 2,
                addr: addr.clone(),
                wait_caught_up: false,
            })
            .await
        {
            Ok(_) => break,
            // The bootstrap admin may not be applied yet, or the change may race one.
            Err(status) => assert!(started.elapsed() < WAIT, "the admin cannot add a learner: {status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    loop {
        let leader = cluster.nodes[0].node.raft.status().last_applied_index;
        let learner = cluster.nodes[1].node.raft.status().last_applied_index;
        if learner.is_some() && learner == leader && learner > settled[0] {
            break;
        }
        assert!(started.elapsed() < WAIT, "the learner did not catch up: {learner:?} behind {leader:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.stop().await;
}

#[tokio::test]
async fn a_scoped_approver_lists_only_the_approvals_its_scope_covers() {
    let cluster = SecureCluster::start(3).await;
    let (leader, _) = cluster.leader_and_follower().await;
    let root = cluster.client_cert("user:root");
    let fin = cluster.client_cert("user:fin");
    let mut access = AccessServiceClient::new(cluster.channel(leader, Some(&root)).await.expect("connect"));
    let finance_approver = pb::GrantRequest {
        grant: Some(pb::AccessGrant {
            scope: vec!["finance".into()],
            ..grant_request("user:fin", "approver").grant.expect("a grant")
        }),
        request_id: String::new(),
    };
    // The bootstrap admin is named once the leader settles.
    let started = Instant::now();
    while access.grant(grant_request("user:root", "submitter")).await.is_err() {
        assert!(started.elapsed() < WAIT, "the bootstrap admin never granted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    access.grant(finance_approver).await.expect("a finance approver");

    let mut approvals = ApprovalServiceClient::new(cluster.channel(leader, Some(&root)).await.expect("connect"));
    // Human approvals first, so an unfiltered first page would hold none of finance's.
    for (id, approval_type) in [("apr-human-1", "human"), ("apr-human-2", "human"), ("apr-fin-1", "finance")] {
        let request = pb::CreateApprovalRequest {
            id: id.into(),
            capability_id: "payments.refund".into(),
            surface: "trust-test".into(),
            input_json: r#"{"k":1}"#.into(),
            risk: pb::Risk::Medium as i32,
            side_effect: pb::SideEffect::Write as i32,
            types: vec![approval_type.into()],
            ..pb::CreateApprovalRequest::default()
        };
        approvals.create_approval(request).await.expect("root creates as submitter");
    }

    let mut as_fin = ApprovalServiceClient::new(cluster.channel(leader, Some(&fin)).await.expect("connect"));
    for limit in [1, 10] {
        let page = as_fin
            .list_approvals(pb::ListApprovalsRequest { limit, ..pb::ListApprovalsRequest::default() })
            .await
            .expect("a finance approver lists")
            .into_inner();
        let ids: Vec<&str> = page.approvals.iter().map(|approval| approval.id.as_str()).collect();
        assert_eq!(ids, ["apr-fin-1"], "limit {limit}");
    }
    let all = approvals.list_approvals(pb::ListApprovalsRequest::default()).await.expect("root lists").into_inner();
    assert_eq!(all.approvals.len(), 3, "a submitter sees every approval");
    cluster.stop().await;
}

/// An ID token of the fixture provider signed with `alg`'s fixture key
/// (`kid` as given), carrying `claims` over the defaults.
fn id_token(alg: jsonwebtoken::Algorithm, kid: &str, claims: serde_json::Value) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey};
    let fixture = |name: &str| std::fs::read(Path::new(OIDC_FIXTURES).join(name)).expect("a fixture key");
    let key = match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&fixture("rsa.pem")).expect("rsa"),
        Algorithm::ES256 => EncodingKey::from_ec_pem(&fixture("ec.pem")).expect("ec"),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(&fixture("ed25519.pem")).expect("ed25519"),
        _ => EncodingKey::from_secret(b"a public value"),
    };
    let now = gavel_pki::unix_seconds();
    let mut all = serde_json::json!({"iss": OIDC_ISSUER, "aud": OIDC_AUDIENCE, "sub": "24400320",
        "email": "ada@example.com", "email_verified": true, "iat": now, "exp": now + 600});
    for (name, value) in claims.as_object().expect("an object") {
        match value {
            serde_json::Value::Null => drop(all.as_object_mut().expect("an object").remove(name)),
            value => all[name] = value.clone(),
        }
    }
    let mut header = jsonwebtoken::Header::new(alg);
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(&header, &all, &key).expect("sign")
}

#[tokio::test]
async fn provider_id_tokens_name_their_claim_principal_beside_gavel_tokens_and_bad_ones_are_unauthenticated() {
    use jsonwebtoken::Algorithm;
    use serde_json::json;
    let cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let channel = cluster.channel(0, None).await.expect("connect");
    for (alg, kid) in [(Algorithm::RS256, "rsa-1"), (Algorithm::ES256, "ec-1"), (Algorithm::EdDSA, "ed25519-1")] {
        let token = id_token(alg, kid, json!({}));
        let answer = cluster.who_am_i(channel.clone(), Some(&token)).await.expect("a provider token is served");
        assert_eq!(answer.principal, "user:ada@example.com", "{alg:?}");
        assert!(answer.token_scope.is_empty(), "an ID token carries no Gavel roles");
    }
    // Gavel's own tokens keep working beside the provider's.
    let answer = cluster.who_am_i(channel.clone(), Some(&cluster.token("user:bob"))).await.expect("a gavel token");
    assert_eq!(answer.principal, "user:bob");

    let now = gavel_pki::unix_seconds();
    let unsigned_with_issuer = unsigned_token(
        r#"{"alg":"none","typ":"JWT"}"#,
        &format!(
            r#"{{"iss":"{OIDC_ISSUER}","aud":"{OIDC_AUDIENCE}","email":"root@x","sub":"1","exp":{},"iat":{now}}}"#,
            now + 600
        ),
    );
    let cases = [
        (
            "wrong audience",
            id_token(Algorithm::RS256, "rsa-1", json!({"aud": "another-client"})),
            "OIDC_WRONG_AUDIENCE",
        ),
        (
            "expired",
            id_token(Algorithm::ES256, "ec-1", json!({"iat": now - 4000, "exp": now - 3600})),
            "OIDC_TOKEN_EXPIRED",
        ),
        (
            "not yet valid",
            id_token(Algorithm::EdDSA, "ed25519-1", json!({"nbf": now + 3600})),
            "OIDC_TOKEN_NOT_YET_VALID",
        ),
        ("alg none", unsigned_with_issuer, "OIDC_ALGORITHM_REFUSED"),
        ("HS256", id_token(Algorithm::HS256, "rsa-1", json!({})), "OIDC_ALGORITHM_REFUSED"),
        ("unknown kid", id_token(Algorithm::RS256, "rotated", json!({})), "OIDC_UNKNOWN_KEY"),
        ("no email claim", id_token(Algorithm::RS256, "rsa-1", json!({"email": null})), "OIDC_CLAIM_MISSING"),
        (
            "bad principal",
            id_token(Algorithm::RS256, "rsa-1", json!({"email": "ada lovelace@x"})),
            "OIDC_BAD_PRINCIPAL",
        ),
    ];
    for (case, token, code) in cases {
        let message = assert_unauthenticated(cluster.who_am_i(channel.clone(), Some(&token)).await, case);
        assert!(message.contains(code), "{case}: {message}");
    }
    // A token of another issuer is not the provider's: the Gavel verifier
    // refuses it (it is not signed by the cluster's token key).
    let other_issuer = id_token(Algorithm::EdDSA, "ed25519-1", json!({"iss": "https://elsewhere.example"}));
    let message = assert_unauthenticated(cluster.who_am_i(channel, Some(&other_issuer)).await, "other issuer");
    assert!(message.starts_with("bearer token refused: "), "{message}");
    cluster.stop().await;
}

#[tokio::test]
async fn provider_id_tokens_live_at_most_the_node_token_lifetime_and_never_name_a_local_principal() {
    use jsonwebtoken::Algorithm;
    use serde_json::json;
    let cluster = SecureCluster::start(1).await;
    cluster.leader_and_follower().await;
    let channel = cluster.channel(0, None).await.expect("connect");
    let now = gavel_pki::unix_seconds();
    // The nodes run with the default --token-lifetime-max (24 h).
    let cap = gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT.as_secs();
    let at_cap = id_token(Algorithm::RS256, "rsa-1", json!({"iat": now, "exp": now + cap}));
    let answer = cluster.who_am_i(channel.clone(), Some(&at_cap)).await.expect("an ID token living exactly 24 h");
    assert_eq!(answer.principal, "user:ada@example.com");

    let ten_years = 10 * 365 * 86_400;
    let cases = [
        (
            "ten-year ID token",
            id_token(Algorithm::RS256, "rsa-1", json!({"iat": now, "exp": now + ten_years})),
            "OIDC_TOKEN_LIFETIME_TOO_LONG",
        ),
        (
            "one second over the cap",
            id_token(Algorithm::ES256, "ec-1", json!({"iat": now, "exp": now + cap + 1})),
            "OIDC_TOKEN_LIFETIME_TOO_LONG",
        ),
        // user:root is this cluster's bootstrap admin, user:admin gavel dev's.
        ("email root", id_token(Algorithm::RS256, "rsa-1", json!({"email": "root"})), "OIDC_BAD_PRINCIPAL"),
        ("email admin", id_token(Algorithm::EdDSA, "ed25519-1", json!({"email": "admin"})), "OIDC_BAD_PRINCIPAL"),
        (
            "email admin@localhost",
            id_token(Algorithm::RS256, "rsa-1", json!({"email": "admin@localhost"})),
            "OIDC_BAD_PRINCIPAL",
        ),
        (
            "unverified email",
            id_token(Algorithm::RS256, "rsa-1", json!({"email": "root@example.com", "email_verified": false})),
            "OIDC_EMAIL_NOT_VERIFIED",
        ),
        (
            "email_verified absent",
            id_token(Algorithm::RS256, "rsa-1", json!({"email_verified": null})),
            "OIDC_EMAIL_NOT_VERIFIED",
        ),
    ];
    for (case, token, code) in cases {
        let message = assert_unauthenticated(cluster.who_am_i(channel.clone(), Some(&token)).await, case);
        assert!(message.contains(code), "{case}: {message}");
    }
    // The admin's own certificate still names it.
    let root = cluster.client_cert("user:root");
    let answer = cluster.who_am_i(cluster.channel(0, Some(&root)).await.expect("connect"), None).await.expect("root");
    assert_eq!(answer.principal, "user:root");
    cluster.stop().await;
}
