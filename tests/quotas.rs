//! Per-principal quotas on a real secure three-node cluster of `gavel node`
//! processes (TLS, client certificates): an admin sets a small quota for
//! one submitter with `gavel access quota set`; that submitter floods the
//! leader with approval creates until its quota stops it; meanwhile another
//! submitter's creates keep succeeding. Asserted: the flood gets
//! `RESOURCE_EXHAUSTED` / `QUOTA_EXCEEDED` (a retry hint for the rate, none
//! for the count), the flooder never holds more than its quota, the
//! refusals cost no log entry (the leader's applied index moves by about
//! the accepted writes, not the refused ones), the leader and its term do
//! not change, and the other submitter's median stays within
//! [`P50_RATIO_MAX`] of its baseline (its p99 is printed). The figures are printed
//! (`cargo test -p gavel-tests --test quotas -- --nocapture`).

mod admin_cli;

use std::time::{Duration, Instant};

use admin_cli::{gavel_as, principal, secure_cluster};
use gavel_proto::error_detail::read_error_detail;
use gavel_proto::v1 as pb;
use gavel_proto::v1::approval_service_client::ApprovalServiceClient;

use tonic::transport::Channel;
use tonic::Code;

/// Upper bound of every wait.
const WAIT: Duration = Duration::from_secs(60);

const ADMIN: &str = "user:admin";
const FLOODER: &str = "user:flooder";
const OTHER: &str = "user:other";

/// The flooder's quotas: the flood is a few hundred creates. The rate is
/// far below what four loops send (hundreds per second even on a loaded
/// machine), so the burst always runs out before the count quota is
/// reached, and both refusals are always seen.
const FLOODER_PENDING_MAX: u64 = 300;
const FLOODER_WRITES_PER_SECOND: u64 = 50;
const FLOODER_WRITE_BURST: u64 = 100;

/// Concurrent flood loops, each creating as fast as it is answered.
const FLOOD_LOOPS: usize = 4;

/// Most attempts the flood makes in all, and its longest duration: it
/// stops by itself, at whichever comes first. The time is the bound that
/// matters: a refusal takes well under a millisecond, and with 20,000
/// attempts the loops ran out in about a second, before the 50 writes a
/// second had brought the flooder to its count quota (152 of 300 pending).
const FLOOD_ATTEMPTS_MAX: u64 = 2_000_000;
const FLOOD_TIME_MAX: Duration = Duration::from_secs(20);

/// Sequential creates of the other submitter, in the baseline and again
/// during the flood.
const OTHER_CALLS: usize = 150;

/// How far the other submitter's median may rise during the flood. The p99
/// is printed, not asserted: on two cores shared by the node processes,
/// this test's own flood loops and other work, a refusal still costs TLS,
/// decoding and the edge check on the leader, and that CPU shows in the
/// other's tail (1.6x to 7.4x its p99 across runs here, the median 1.7x to
/// 2.7x; the bound leaves room for a busier machine); what the quota
/// removes is the log entry, the fsync and the apply of each refused write
/// (docs/decisions.md).
const P50_RATIO_MAX: f64 = 4.0;

/// Log entries the leader may apply besides the accepted writes during the
/// flood (ticks, the bootstrap's tail): far fewer than the refusals.
const OTHER_ENTRIES_MAX: u64 = 100;

fn create_request(id: &str) -> pb::CreateApprovalRequest {
    pb::CreateApprovalRequest {
        input_json: format!(r#"{{"approval":"{id}"}}"#),
        id: id.to_string(),
        capability_id: "quota.create".into(),
        surface: "quotas".into(),
        risk: pb::Risk::High as i32,
        side_effect: pb::SideEffect::Write as i32,
        ..pb::CreateApprovalRequest::default()
    }
}

/// `count` sequential creates by `name` over `channel`; their latencies,
/// every one of which must succeed.
async fn timed_creates(channel: Channel, name: &str, count: usize) -> Vec<Duration> {
    let mut client = ApprovalServiceClient::new(channel);
    let mut latencies = Vec::with_capacity(count);
    for sequence in 0..count {
        let started = Instant::now();
        client
            .create_approval(create_request(&format!("{name}-{sequence}")))
            .await
            .unwrap_or_else(|status| panic!("{name}'s create {sequence} failed: {status:?}"));
        latencies.push(started.elapsed());
    }
    latencies
}

fn quantile(latencies: &mut [Duration], quantile: f64) -> Duration {
    latencies.sort();
    let index = (latencies.len() as f64 * quantile) as usize;
    latencies[index.min(latencies.len() - 1)]
}

/// What the flood saw.
#[derive(Debug, Default)]
struct Flood {
    created: u64,
    rate_refusals: u64,
    count_refusals: u64,
    other_failures: Vec<String>,
}

/// One flood loop: creates until `stop`, counting answers.
async fn flood_loop(channel: Channel, loop_id: usize, stop: tokio::sync::watch::Receiver<bool>) -> Flood {
    let mut client = ApprovalServiceClient::new(channel);
    let mut flood = Flood::default();
    let attempts_max = FLOOD_ATTEMPTS_MAX / FLOOD_LOOPS as u64;
    let started = Instant::now();
    for sequence in 0..attempts_max {
        if *stop.borrow() || started.elapsed() > FLOOD_TIME_MAX {
            break;
        }
        match client.create_approval(create_request(&format!("flood-{loop_id}-{sequence}"))).await {
            Ok(_) => flood.created += 1,
            Err(status) => {
                let detail = read_error_detail(&status);
                match (status.code(), detail) {
                    (Code::ResourceExhausted, Some(detail)) if detail.code == "QUOTA_EXCEEDED" => {
                        assert!(!detail.message.contains(OTHER), "a refusal names only its caller: {detail:?}");
                        match detail.quota_kind.as_deref() {
                            Some("write_rate") => {
                                assert!(detail.retry_after_ms.is_some_and(|ms| ms > 0), "{detail:?}");
                                flood.rate_refusals += 1;
                            }
                            Some("pending_approvals") => {
                                assert_eq!(detail.retry_after_ms, None, "a count has no retry time: {detail:?}");
                                assert!(detail.message.contains("finish or cancel"), "{detail:?}");
                                flood.count_refusals += 1;
                            }
                            other => panic!("unexpected quota kind {other:?}: {detail:?}"),
                        }
                    }
                    _ => flood.other_failures.push(format!("{status:?}")),
                }
            }
        }
    }
    flood
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flooding_submitter_is_stopped_at_the_edge_while_another_keeps_its_latency() {
    // The kit's unthrottled quota (it cannot depend on the core) is the
    // largest an admin may set.
    let unthrottled = gavel_testkit::unthrottled(&principal(FLOODER));
    assert_eq!(unthrottled.pending_approvals_max, Some(gavel_core::limits::QUOTA_COUNT_MAX));
    assert_eq!(unthrottled.writes_per_second, Some(gavel_core::limits::QUOTA_WRITES_PER_SECOND_MAX));
    assert_eq!(unthrottled.write_burst, Some(gavel_core::limits::QUOTA_WRITE_BURST_MAX));

    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = secure_cluster(dir.path(), &principal(ADMIN), WAIT).await;
    let admin = principal(ADMIN);
    for name in [FLOODER, OTHER] {
        cluster.grant(&principal(name), &[gavel_pki::GrantName::Submitter], WAIT).await.expect("grant");
    }

    // The CLI: set, get (one's own; another's needs admin), list.
    let set = gavel_as(
        &cluster,
        &admin,
        &[
            "access",
            "quota",
            "set",
            FLOODER,
            "--pending-approvals",
            &FLOODER_PENDING_MAX.to_string(),
            "--writes-per-second",
            &FLOODER_WRITES_PER_SECOND.to_string(),
            "--write-burst",
            &FLOODER_WRITE_BURST.to_string(),
            "--json",
        ],
    )
    .await
    .json();
    assert_eq!(set["quotas"][0]["pendingApprovalsMax"], FLOODER_PENDING_MAX, "{set}");
    assert_eq!(set["quotas"][0]["overridden"], true, "{set}");
    let own = gavel_as(&cluster, &principal(FLOODER), &["access", "quota", "get", "--json"]).await.json();
    assert_eq!(own["quotas"][0]["principal"], FLOODER, "{own}");
    assert_eq!(own["quotas"][0]["writesPerSecond"], FLOODER_WRITES_PER_SECOND, "{own}");
    gavel_as(&cluster, &principal(FLOODER), &["access", "quota", "get", OTHER]).await.refused(3, "PERMISSION_DENIED");
    gavel_as(&cluster, &principal(FLOODER), &["access", "quota", "list"]).await.refused(3, "PERMISSION_DENIED");
    let set_own = ["access", "quota", "set", FLOODER, "--pending-approvals", "9"];
    gavel_as(&cluster, &principal(FLOODER), &set_own).await.refused(3, "PERMISSION_DENIED");
    let bad = gavel_as(&cluster, &admin, &["access", "quota", "set", FLOODER, "--write-burst", "0"]).await;
    bad.refused(3, "INVALID_ARGUMENT");
    let other_default = gavel_as(&cluster, &admin, &["access", "quota", "get", OTHER, "--json"]).await.json();
    assert_eq!(other_default["quotas"][0]["overridden"], false, "{other_default}");
    assert_eq!(
        other_default["quotas"][0]["pendingApprovalsMax"],
        gavel_core::limits::PENDING_APPROVALS_PER_PRINCIPAL_DEFAULT,
        "{other_default}"
    );

    let leader = cluster.wait_for_leader(WAIT).await.unwrap_or_else(|error| panic!("{error}"));
    let addr = cluster.addr(leader).expect("the leader's address").to_string();
    let channel_as = |name: &str| {
        let tls = cluster.credentials(&principal(name)).expect("credentials");
        gavel_testkit::channel_with(&addr, Duration::from_secs(10), Some(&tls)).expect("a channel")
    };

    // Baseline of the other submitter, alone.
    let mut baseline = timed_creates(channel_as(OTHER), "other-base", OTHER_CALLS).await;
    let baseline_p50 = quantile(&mut baseline, 0.50);
    let baseline_p99 = quantile(&mut baseline, 0.99);
    let before = cluster.status(leader).await.expect("the leader's status");

    // The flood, and the other submitter during it.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let loops: Vec<_> = (0..FLOOD_LOOPS)
        .map(|loop_id| tokio::spawn(flood_loop(channel_as(FLOODER), loop_id, stopped.clone())))
        .collect();
    // Let the flood reach its quota first, so the other's calls meet the
    // refusals, not the admitted part of the flood.
    let flood_started = Instant::now();
    loop {
        let view = gavel_as(&cluster, &admin, &["access", "quota", "get", FLOODER, "--json"]).await.json();
        if view["quotas"][0]["pendingApprovals"] == FLOODER_PENDING_MAX {
            break;
        }
        assert!(flood_started.elapsed() < FLOOD_TIME_MAX, "the flood did not reach its quota: {view}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut during = timed_creates(channel_as(OTHER), "other-flood", OTHER_CALLS).await;
    let during_p50 = quantile(&mut during, 0.50);
    let during_p99 = quantile(&mut during, 0.99);
    stop.send(true).expect("the loops listen");
    let mut flood = Flood::default();
    for handle in loops {
        let one = tokio::time::timeout(FLOOD_TIME_MAX, handle).await.expect("a loop stops").expect("a loop");
        flood.created += one.created;
        flood.rate_refusals += one.rate_refusals;
        flood.count_refusals += one.count_refusals;
        flood.other_failures.extend(one.other_failures);
    }
    let after = cluster.status(leader).await.expect("the leader's status");
    let applied = after.last_applied_index - before.last_applied_index;
    let ratio = during_p50.as_secs_f64() / baseline_p50.as_secs_f64();
    let p99_ratio = during_p99.as_secs_f64() / baseline_p99.as_secs_f64();
    eprintln!(
        "quotas test: flood {} created, {} refused for the rate, {} for the count, in {:?}; leader applied {applied} \
         entries; other submitter p50 {baseline_p50:?} alone, {during_p50:?} during the flood ({ratio:.2}x), p99 \
         {baseline_p99:?} alone, {during_p99:?} during ({p99_ratio:.2}x)",
        flood.created,
        flood.rate_refusals,
        flood.count_refusals,
        flood_started.elapsed(),
    );

    assert!(flood.other_failures.is_empty(), "the flood saw only quota refusals: {:?}", flood.other_failures);
    assert_eq!(flood.created, FLOODER_PENDING_MAX, "the flooder got exactly its quota");
    assert!(flood.count_refusals > 0, "the count quota stopped the flood");
    assert!(flood.rate_refusals > 0, "the write rate refused the burst first");
    let refused = flood.rate_refusals + flood.count_refusals;
    assert!(
        applied <= flood.created + OTHER_CALLS as u64 + OTHER_ENTRIES_MAX,
        "{refused} refusals cost no log entry: applied {applied} entries for {} accepted writes",
        flood.created + OTHER_CALLS as u64
    );
    assert!(refused > applied, "more refusals ({refused}) than entries applied ({applied})");
    assert_eq!((after.leader_id, after.term), (before.leader_id, before.term), "no leader change");
    assert!(
        ratio <= P50_RATIO_MAX,
        "the other submitter's p50 rose from {baseline_p50:?} to {during_p50:?} ({ratio:.2}x)"
    );
    let counted = gavel_as(&cluster, &admin, &["access", "quota", "list", "--json"]).await.json();
    let rows = counted["quotas"].as_array().cloned().unwrap_or_default();
    let flooder = rows.iter().find(|row| row["principal"] == FLOODER).expect("the flooder is listed");
    assert_eq!(flooder["pendingApprovals"], FLOODER_PENDING_MAX, "{counted}");
    let other = rows.iter().find(|row| row["principal"] == OTHER).expect("the other is listed");
    assert_eq!(other["pendingApprovals"], 2 * OTHER_CALLS as u64, "{counted}");
}
