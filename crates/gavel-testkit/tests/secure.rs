//! A secure kit cluster against real `gavel node` processes: the kit's
//! material (CA, node certificates naming each node's address, the admin's
//! certificate, the token key) lets the nodes elect a leader over mutual
//! TLS, lets the kit read their status as the admin, and lets a test act as
//! the admin, as any principal by certificate, or by token. A plaintext call
//! is refused. Every initial node is given the bootstrap admin, and the
//! leader after the first proposes it again harmlessly. Needs the debug
//! binary (`cargo build -p gavel-cli`).

use std::time::Duration;

use gavel_client::{pb, Client};
use gavel_pki::{GrantName, Principal, PrincipalKind};
use gavel_testkit::Converge as _;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_initial_node_bootstraps_the_same_admin_and_the_kit_grants_as_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(resolve_gavel_binary(None).unwrap_or_else(|error| panic!("{error}")), dir.path());
    spec.security = Security::secure(user("admin"));
    let cluster = Cluster::start(spec).await.expect("the secure cluster starts");
    // Node 1 initializes a fresh cluster, so it is the first leader; every
    // initial node is started with the same --bootstrap-admin so that
    // whichever leads next proposes it again should the first leader fail
    // before it committed.
    for id in cluster.ids() {
        let log = std::fs::read_to_string(cluster.log_path(id).expect("a log")).expect("the log reads");
        assert!(log.contains("--bootstrap-admin=user:admin"), "node {id} starts without it:\n{log}");
    }

    // The kit's grant waits for the bootstrap admin and binds as it.
    let bob = user("bob");
    cluster.grant(&bob, &[GrantName::Approver, GrantName::Submitter], WAIT).await.expect("the admin grants bob");
    let bob_client =
        Client::with_config(&cluster.addrs(), cluster.client_config_as(&bob).expect("bob's config")).expect("a client");
    let answer = bob_client.who_am_i(pb::WhoAmIRequest {}).await.expect("bob is authenticated");
    let mut grants: Vec<&str> = answer.grants.iter().map(|grant| grant.grant.as_str()).collect();
    grants.sort_unstable();
    assert_eq!(grants, ["approver", "submitter"], "{answer:?}");

    // The first leader dies; the next one, started with the same flag, had
    // already seen the admin in its replica: the one admin binding stays and
    // the new leader serves the admin.
    let first = cluster.wait_for_leader(WAIT).await.expect("a leader");
    cluster.kill(first).expect("kill the first leader");
    let next = eventually(WAIT, Duration::from_millis(100), || async {
        cluster.leader().await.filter(|leader| *leader != first)
    })
    .await
    .expect("a new leader");
    let survivors: Vec<String> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != first)
        .filter_map(|id| cluster.addr(id).map(String::from))
        .collect();
    let admin = Client::with_config(&survivors, cluster.client_config()).expect("a client");
    let listed = eventually(WAIT, Duration::from_millis(200), || async {
        admin.list_grants(pb::ListGrantsRequest::default()).await.ok()
    })
    .await
    .unwrap_or_else(|| panic!("new leader {next} lists the grants for the admin"));
    let admins: Vec<&str> =
        listed.grants.iter().filter(|grant| grant.grant == "admin").map(|grant| grant.principal.as_str()).collect();
    assert_eq!(admins, ["user:admin"], "{listed:?}");
    cluster.grant(&user("carol"), &[GrantName::Auditor], WAIT).await.expect("the admin still grants");
    // The new leader saw the admin in its replica and left it alone: it
    // neither proposed a second bootstrap nor gave up with a warning.
    let next_log = cluster.log_path(next).expect("a log").to_path_buf();
    let seen = eventually(WAIT, Duration::from_millis(200), || {
        let log = std::fs::read_to_string(&next_log).unwrap_or_default();
        async move { log.contains("an admin is already named").then_some(log) }
    })
    .await
    .unwrap_or_else(|| panic!("new leader {next} sees the bootstrap admin already named"));
    assert!(!seen.contains("cannot name the bootstrap admin"), "new leader {next}:\n{seen}");
    assert!(!seen.contains("did not lead in time"), "new leader {next}:\n{seen}");
}
