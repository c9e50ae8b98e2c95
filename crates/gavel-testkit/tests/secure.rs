//! A secure kit cluster against real `gavel node` processes: the kit's
//! material (CA, node certificates naming each node's address, the admin's
//! certificate, the token key) lets the nodes elect a leader over mutual
//! TLS, lets the kit read their status as the admin, and lets a test act as
//! the admin, as any principal by certificate, or by token. A plaintext call
//! is refused. Needs the debug binary (`cargo build -p gavel-cli`).

use std::time::Duration;

use gavel_client::{pb, Client};
use gavel_pki::{GrantName, Principal, PrincipalKind};
use gavel_testkit::{eventually, resolve_gavel_binary, Cluster, ClusterSpec, Security};

/// Upper bound of any wait in these tests.
const WAIT: Duration = Duration::from_secs(30);

fn user(id: &str) -> Principal {
    Principal::new(PrincipalKind::User, id).expect("a principal")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secure_cluster_serves_the_admin_certificates_and_tokens_and_refuses_plaintext() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(resolve_gavel_binary(None).unwrap_or_else(|error| panic!("{error}")), dir.path());
    spec.security = Security::secure(user("admin"));
    let mut cluster = Cluster::start(spec).await.expect("the secure cluster starts");
    assert!(cluster.is_secure());
    assert!(cluster.endpoints().iter().all(|endpoint| endpoint.starts_with("https://127.0.0.1:")));

    // The admin: its certificate authenticates it, and the node it leads
    // binds the bootstrap admin grant.
    let admin = Client::with_config(&cluster.addrs(), cluster.client_config()).expect("a client");
    let granted = eventually(WAIT, Duration::from_millis(200), || async {
        let answer = admin.who_am_i(pb::WhoAmIRequest {}).await.ok()?;
        answer.grants.iter().any(|grant| grant.grant == "admin").then_some(answer)
    })
    .await
    .expect("the bootstrap admin holds the admin grant");
    assert_eq!(granted.principal, "user:admin");

    // Anyone else by a certificate issued on demand: authenticated, no grants.
    let bob = Client::with_config(&cluster.addrs(), cluster.client_config_as(&user("bob")).expect("bob's config"))
        .expect("a client");
    let answer = bob.who_am_i(pb::WhoAmIRequest {}).await.expect("bob is authenticated");
    assert_eq!(answer.principal, "user:bob");
    assert!(answer.grants.is_empty(), "{answer:?}");
    let refused = bob.list_grants(pb::ListGrantsRequest::default()).await.expect_err("bob is no admin");
    assert_eq!(refused.code(), "PERMISSION_DENIED", "{refused}");

    // By token, down-scoped.
    let carol_config =
        cluster.client_config_with_token(&user("carol"), Some(&[GrantName::Submitter])).expect("carol's token config");
    let carol = Client::with_config(&cluster.addrs(), carol_config).expect("a client");
    let answer = carol.who_am_i(pb::WhoAmIRequest {}).await.expect("carol is authenticated");
    assert_eq!(answer.principal, "user:carol");
    assert_eq!(answer.token_scope, vec!["submitter".to_string()]);

    // Plaintext to a TLS node gets no answer.
    let addr = cluster.addr(1).expect("node 1").to_string();
    assert!(gavel_testkit::status(&addr, Duration::from_secs(1)).await.is_err());

    // A node added later gets its certificate from the kit and catches up
    // over mutual TLS once the admin adds it.
    let joined = cluster.add_node().expect("a node placed");
    cluster.start_node(joined).expect("the node starts");
    let joined_addr = cluster.addr(joined).expect("its address").to_string();
    admin
        .add_learner(pb::AddLearnerRequest { node_id: joined, addr: joined_addr, ..pb::AddLearnerRequest::default() })
        .await
        .expect("the admin adds the learner");
    cluster.converge(WAIT).await.expect("the learner converges over mutual TLS");
}
