//! Membership changes from the CLI at process level: a real secure
//! three-node cluster of `gavel node` processes and a fourth started to
//! join it, changed only through `gavel cluster add-node|promote|remove-node`
//! and observed through `gavel cluster status`.

mod admin_cli;

use std::time::Duration;

use admin_cli::{gavel_as, principal};
use gavel_testkit::{Cluster, ClusterSpec, Security};
use serde_json::Value;

/// Upper bound of every wait.
const WAIT: Duration = Duration::from_secs(60);

const ADMIN: &str = "user:admin";

/// The voters and members `gavel cluster status --json` reports, polled
/// until every listed node answers and they agree on `voters` voters.
async fn wait_for_voters(cluster: &Cluster, voters: usize) -> Value {
    let mut last = Value::Null;
    let started = std::time::Instant::now();
    while started.elapsed() < WAIT {
        let run = gavel_as(cluster, &principal(ADMIN), &["cluster", "status", "--json"]).await;
        if run.code == 0 {
            last = run.json();
            let nodes = last["nodes"].as_array().cloned().unwrap_or_default();
            let counted = nodes.iter().filter(|node| node["voter"] == Value::Bool(true)).count();
            if counted == voters && nodes.iter().all(|node| node["reachable"] == Value::Bool(true)) {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the cluster did not show {voters} voters within {WAIT:?}: {last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fourth_node_is_added_promoted_and_removed_through_the_cli() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(gavel_testkit::resolve_gavel_binary(None).expect("gavel binary"), dir.path());
    spec.security = Security::secure(principal(ADMIN));
    spec.start_timeout = WAIT;
    spec.status_timeout = Duration::from_secs(5);
    let mut cluster = Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"));
    let admin = principal(ADMIN);
    cluster.grant(&principal("user:bob"), &[gavel_pki::GrantName::Auditor], WAIT).await.expect("grant bob");
    wait_for_voters(&cluster, 3).await;

    let fourth = cluster.add_node().expect("a fourth node");
    cluster.start_node(fourth).expect("start the fourth node");
    let addr = cluster.addr(fourth).expect("its address").to_string();
    let id = fourth.to_string();

    // Not admin: refused, nothing changes.
    let refused =
        gavel_as(&cluster, &principal("user:bob"), &["cluster", "add-node", "--id", &id, "--addr", &addr]).await;
    refused.refused(3, "PERMISSION_DENIED");
    // Promoting a node that is no member: a clear refusal.
    let unknown = gavel_as(&cluster, &admin, &["cluster", "promote", "--id", "9"]).await;
    unknown.refused(3, "node 9 is not a learner of this cluster");

    // add-node answers once the learner has caught up.
    let added =
        gavel_as(&cluster, &admin, &["cluster", "add-node", "--id", &id, "--addr", &addr, "--json"]).await.json();
    let members = added["members"].as_array().cloned().unwrap_or_default();
    assert!(
        members.iter().any(|member| member["nodeId"] == fourth && member["voter"] == false),
        "node {fourth} is a learner: {added}"
    );
    let leader = cluster.leader().await.expect("a leader");
    let leader_applied = cluster.status(leader).await.expect("leader status").last_applied_index;
    let learner_applied = cluster.status(fourth).await.expect("learner status").last_applied_index;
    assert!(
        learner_applied + gavel_raft::limits::PROMOTE_LAG_ENTRIES_MAX >= leader_applied,
        "the learner caught up before add-node answered ({learner_applied} vs {leader_applied})"
    );

    gavel_as(&cluster, &admin, &["cluster", "promote", "--id", &id]).await.succeeded();
    let status = wait_for_voters(&cluster, 4).await;
    assert_eq!(status["nodes"].as_array().map(Vec::len), Some(4), "{status}");

    gavel_as(&cluster, &admin, &["cluster", "remove-node", "--id", &id]).await.succeeded();
    // The removed node is no member any more, so status lists the three.
    let status = wait_for_voters(&cluster, 3).await;
    let rows = status["nodes"].as_array().cloned().unwrap_or_default();
    let fourth_row = rows.iter().find(|node| node["nodeId"] == fourth);
    assert!(fourth_row.is_none_or(|row| row["voter"].is_null()), "node {fourth} is no member: {status}");

    // Removing it again: it is not a member.
    let again = gavel_as(&cluster, &admin, &["cluster", "remove-node", "--id", &id]).await;
    again.refused(3, "NOT_A_MEMBER");
    cluster.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_last_voter_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut spec = ClusterSpec::new(gavel_testkit::resolve_gavel_binary(None).expect("gavel binary"), dir.path());
    spec.nodes = 1;
    spec.security = Security::secure(principal(ADMIN));
    spec.start_timeout = WAIT;
    let cluster = Cluster::start(spec).await.unwrap_or_else(|error| panic!("{error}"));
    // The kit's grant retries until the bootstrap admin is named.
    cluster.grant(&principal("user:bob"), &[gavel_pki::GrantName::Auditor], WAIT).await.expect("grant bob");
    wait_for_voters(&cluster, 1).await;
    let run = gavel_as(&cluster, &principal(ADMIN), &["cluster", "remove-node", "--id", "1"]).await;
    run.refused(3, "LAST_VOTER");
    assert!(run.stderr.contains("node 1 is the last voter"), "{run:#?}");
    wait_for_voters(&cluster, 1).await;
    cluster.shutdown();
}
