//! Trust at process level: every exploit of the trust issue, replayed against
//! a secure 3-node cluster of real `gavel node` processes (real TLS, kit-made
//! CA, certificates and token key), is refused; bad credentials get a clear
//! error and the node serves on; a revoked approver racing decisions through
//! all three nodes gets no decision ordered after its revocation.
//!
//! "Nothing reached the log" is checked three ways: the applied index of
//! every node did not move, the audit trail has no new event, and the record
//! attacked is unchanged. The applied index moves on its own only by the
//! leader's ticks, which it proposes when a replicated deadline passes: a
//! lease or backoff ending (none exists while an index is compared here) and
//! the audit compaction, once a minute counted from the first tick, right
//! after the first audit event. [`Secure::quiet_log`] therefore waits out a
//! compaction due within [`COMPACTION_MARGIN`] before it takes the baseline,
//! so that the compared window (a few seconds) holds no tick. One refusal is
//! ordered in the log on purpose: the self-approval rule, which the state
//! machine decides against the approval's recorded requester; for it the
//! trail and the record are compared.
//!
//! Needs the debug binary (`cargo build -p gavel-cli`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use gavel_client::{pb, Client, ClientConfig, ClientTls};
use gavel_core::{Caller, Command, Envelope, Grant, GrantName};
use gavel_pki::{node_hosts, Authority, Principal, TokenClaims, TokenKey, Validity, DEFAULT_AUDIENCE};
use gavel_raft::pb::raft_service_client::RaftServiceClient;
use gavel_raft::pb::{snapshot_chunk, RaftBytes, SnapshotChunk, SnapshotHeader};
use gavel_testkit::Cluster;
use openraft::{BasicNode, EntryPayload, LogId, SnapshotMeta};
use tonic::Code;

mod support;

use support::WAIT;

/// A command as gavel-raft encodes it: one byte string, which bincode writes
/// exactly like a `Vec<u8>` (openraft 0.10 wants its commands `Display`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct ForgedCommand(Vec<u8>);

impl std::fmt::Display for ForgedCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ForgedCommand({} bytes)", self.0.len())
    }
}

openraft::declare_raft_types!(
    /// The wire shape of gavel-raft's types, to forge peer messages.
    Forged:
        D = ForgedCommand,
        R = Vec<u8>,
        NodeId = u64,
        Node = BasicNode,
);

/// The leader id a log id carries (openraft 0.10's default: term and node).
type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, u64>;
/// A vote, as gavel-raft's (openraft 0.10's default over [`LeaderId`]).
type Vote = openraft::impls::Vote<LeaderId>;

/// The audit compaction cadence of the state machine (`COMPACTION_INTERVAL_MS`).
const COMPACTION_INTERVAL: Duration = Duration::from_secs(60);

/// How close a due compaction may be before [`Secure::quiet_log`] waits it out.
const COMPACTION_MARGIN: Duration = Duration::from_secs(15);

fn principal(text: &str) -> Principal {
    Principal::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

/// A secure kit cluster, its admin (who is also auditor) and its directory.
struct Secure {
    cluster: Cluster,
    admin: Client,
    _dir: tempfile::TempDir,
}

impl Secure {
    /// Starts three secure voters with `user:admin` as bootstrap admin and
    /// waits until the admin holds the grant; the admin then makes itself
    /// auditor, to read the trail.
    async fn start() -> Secure {
        let dir = tempfile::tempdir().expect("temp dir");
        let cluster = support::start_secure(dir.path()).await;
        let admin = Client::with_config(&cluster.addrs(), cluster.client_config()).expect("a client");
        gavel_testkit::eventually(WAIT, Duration::from_millis(100), || async {
            let answer = admin.who_am_i(pb::WhoAmIRequest {}).await.ok()?;
            answer.grants.iter().any(|grant| grant.grant == "admin").then_some(())
        })
        .await
        .expect("the bootstrap admin holds the admin grant");
        let secure = Secure { cluster, admin, _dir: dir };
        secure.grant("user:admin", "auditor", &[]).await;
        secure
    }

    /// A client authenticated by a certificate for `who`.
    fn client_as(&self, who: &str) -> Client {
        let config = self.cluster.client_config_as(&principal(who)).expect("a client certificate");
        Client::with_config(&self.cluster.addrs(), config).expect("a client")
    }

    /// A client with `config`'s credentials that gives up quickly (a refused
    /// handshake or plaintext to a TLS node is not worth the default budget).
    fn client_with(&self, tls: Option<ClientTls>, token: Option<String>) -> Client {
        let config = ClientConfig { tls, token, retry_budget: Duration::from_secs(2), ..ClientConfig::default() };
        Client::with_config(&self.cluster.addrs(), config).expect("a client")
    }

    /// A client that sends every call to node `id` (forwarded from there).
    fn client_through(&self, who: &str, id: u64) -> Client {
        let config = ClientConfig {
            follow_leader: false,
            ..self.cluster.client_config_as(&principal(who)).expect("a client certificate")
        };
        Client::with_config(&[self.cluster.addr(id).expect("a node").to_string()], config).expect("a client")
    }

    async fn grant(&self, who: &str, grant: &str, scope: &[&str]) {
        let grant = pb::AccessGrant {
            principal: who.into(),
            grant: grant.into(),
            scope: scope.iter().map(|item| item.to_string()).collect(),
            skew_ms_max: None,
        };
        self.admin
            .grant(pb::GrantRequest { grant: Some(grant), request_id: String::new() })
            .await
            .unwrap_or_else(|error| panic!("the admin grants {who}: {error}"));
    }

    /// The whole audit trail, oldest first.
    async fn events(&self) -> Vec<pb::Event> {
        let mut events = Vec::new();
        loop {
            let after_cursor = events.last().map_or(0, |event: &pb::Event| event.cursor);
            let page = self
                .admin
                .list_events(pb::ListEventsRequest {
                    after_cursor,
                    limit: 500,
                    execution_id: None,
                    ..pb::ListEventsRequest::default()
                })
                .await
                .expect("the auditor reads the trail")
                .events;
            if page.is_empty() {
                return events;
            }
            events.extend(page);
        }
    }

    async fn last_cursor(&self) -> u64 {
        self.events().await.last().map_or(0, |event| event.cursor)
    }

    /// Every node's applied index once they are equal and have not moved for
    /// half a second.
    async fn settled_applied(&self) -> Vec<u64> {
        let started = Instant::now();
        let (mut last, mut stable_since) = (Vec::new(), Instant::now());
        while started.elapsed() < WAIT {
            let applied: Vec<u64> =
                self.cluster.statuses().await.values().map(|status| status.last_applied_index).collect();
            if applied != last {
                (last, stable_since) = (applied, Instant::now());
            } else if last.len() == 3
                && last.iter().all(|index| *index == last[0])
                && stable_since.elapsed() > Duration::from_millis(500)
            {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the applied indexes did not settle within {WAIT:?}: {last:?}");
    }

    /// The baseline of a window in which the log must not move: every node's
    /// applied index, settled, with no compaction tick due for at least
    /// [`COMPACTION_MARGIN`] minus the settling time (see the module doc).
    /// No lease or backoff may exist while it is used.
    async fn quiet_log(&self) -> Vec<u64> {
        let first = self.events().await.first().map(|event| event.timestamp_ms).expect("an audit event");
        let since_first = Duration::from_millis((gavel_testkit::wall_clock_ms() - first).max(0) as u64);
        let phase = Duration::from_millis((since_first.as_millis() % COMPACTION_INTERVAL.as_millis()) as u64);
        if COMPACTION_INTERVAL - phase < COMPACTION_MARGIN {
            // Past the next compaction, with a second for the tick to apply.
            tokio::time::sleep(COMPACTION_INTERVAL - phase + Duration::from_secs(1)).await;
        }
        self.settled_applied().await
    }

    async fn applied(&self) -> Vec<u64> {
        self.cluster.statuses().await.values().map(|status| status.last_applied_index).collect()
    }

    /// A good client is still served: a fresh certificate is answered as itself.
    async fn still_serves_a_good_client(&self) {
        let answer = self.client_as("user:good").who_am_i(pb::WhoAmIRequest {}).await.expect("a good client is served");
        assert_eq!(answer.principal, "user:good");
        self.cluster.check_alive().expect("every node is still running");
    }
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(result: Result<T, gavel_client::Error>, code: &str, case: &str) -> String {
    match result {
        Ok(value) => panic!("{case}: expected {code}, got a success: {value:?}"),
        Err(error) => {
            assert_eq!(error.code(), code, "{case}: {error}");
            eprintln!("{case}: {error}");
            error.to_string()
        }
    }
}

#[track_caller]
fn assert_status<T>(result: Result<tonic::Response<T>, tonic::Status>, code: Code, case: &str) {
    match result {
        Ok(_) => panic!("{case}: expected {code:?}, the forged message was accepted"),
        Err(status) => {
            assert_eq!(status.code(), code, "{case}: {status:?}");
            eprintln!("{case}: {:?} {}", status.code(), status.message());
        }
    }
}

/// The peak resident memory of process `pid` (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process status");
    let line = status.lines().find(|line| line.starts_with("VmHWM:")).expect("a VmHWM line");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("VmHWM in kB")
}

/// A certificate and its private key, PEM.
type Pem = (String, String);

/// A Raft client to node `id` over TLS presenting `identity` (or nothing).
fn raft_client(
    secure: &Secure,
    id: u64,
    identity: Option<(String, String)>,
) -> RaftServiceClient<tonic::transport::Channel> {
    let tls = ClientTls { ca_pem: secure.cluster.authority().expect("secure").cert_pem().to_string(), identity };
    let addr = secure.cluster.addr(id).expect("a node");
    let channel = gavel_testkit::channel_with(addr, Duration::from_secs(5), Some(&tls)).expect("a channel");
    RaftServiceClient::new(channel)
}

fn bincode_of<T: serde::Serialize>(value: &T) -> Vec<u8> {
    bincode::serialize(value).expect("a forged message encodes")
}

/// A heartbeat of leader `leader` at `term` with an empty log; the issue's
/// is term 1000, leader 9.
fn forged_heartbeat(term: u64, leader: u64) -> RaftBytes {
    let request = openraft::raft::AppendEntriesRequest::<Forged> {
        vote: Vote::new_committed(term, leader),
        prev_log_id: None,
        entries: Vec::new(),
        leader_commit: None,
    };
    RaftBytes { payload: bincode_of(&request) }
}

/// A vote request of `candidate` at `term` with an empty log.
fn forged_vote(term: u64, candidate: u64) -> RaftBytes {
    RaftBytes { payload: bincode_of(&openraft::raft::VoteRequest::<Forged>::new(Vote::new(term, candidate), None)) }
}

/// One entry a follower would append and apply if it believed it: it follows
/// the follower's last log entry, in the current leader's name and term, and
/// carries a command making `user:mallory` admin "as" the admin, in the
/// batch format of gavel-raft (version 1, count, length-prefixed commands).
/// The message claims `vote` (the current leader's, for the attack).
fn forged_entry(status: &pb::StatusResponse, vote: Vote) -> RaftBytes {
    let leader = status.leader_id.expect("a known leader");
    let log_id = |index| LogId::new(LeaderId { term: status.term, node_id: leader }, index);
    let envelope = Envelope {
        request_id: None,
        now_ms: gavel_testkit::wall_clock_ms() as u64,
        caller: Some(Caller::of(principal("user:admin"))),
        command: Command::Grant { principal: principal("user:mallory"), grant: Grant::of(GrantName::Admin) },
    };
    let command = bincode_of(&envelope);
    let mut batch = vec![1u8];
    batch.extend_from_slice(&1u32.to_le_bytes());
    batch.extend_from_slice(&(command.len() as u32).to_le_bytes());
    batch.extend_from_slice(&command);
    let next = log_id(status.last_log_index + 1);
    let request = openraft::raft::AppendEntriesRequest::<Forged> {
        vote,
        prev_log_id: Some(log_id(status.last_log_index)),
        entries: vec![openraft::Entry { log_id: next, payload: EntryPayload::Normal(ForgedCommand(batch)) }],
        leader_commit: Some(next),
    };
    RaftBytes { payload: bincode_of(&request) }
}

/// The issue's oversized snapshot header: 2^62 bytes announced.
fn oversized_snapshot() -> futures::stream::Iter<std::vec::IntoIter<SnapshotChunk>> {
    let vote_and_meta =
        bincode_of(&(Vote::new_committed(1000, 9), SnapshotMeta::<LeaderId, u64, BasicNode>::default()));
    let header = SnapshotHeader { vote_and_meta, total_bytes: 1 << 62 };
    futures::stream::iter(vec![SnapshotChunk { kind: Some(snapshot_chunk::Kind::Header(header)) }])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_raft_traffic_and_membership_changes_from_non_members_are_refused() {
    let secure = Secure::start().await;
    let cluster = &secure.cluster;
    let leader = cluster.wait_for_leader(WAIT).await.expect("a leader");
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    let authority = cluster.authority().expect("secure");
    let mallory = authority.issue(&principal("user:mallory"), &[], Validity::days(1)).expect("a certificate");
    let stranger = authority.issue(&Principal::node(9), &node_hosts(&[]), Validity::days(1)).expect("a certificate");
    // Who attacks: nobody (TLS without a certificate), a user certificate of
    // the cluster CA, and a node certificate of a node that is no member.
    let attackers: [(&str, Option<Pem>, Code); 3] = [
        ("no certificate", None, Code::Unauthenticated),
        ("a user certificate", Some((mallory.cert_pem.clone(), mallory.key_pem.clone())), Code::PermissionDenied),
        ("a non-member node certificate", Some((stranger.cert_pem, stranger.key_pem)), Code::PermissionDenied),
    ];

    let applied_before = secure.quiet_log().await;
    let cursor_before = secure.last_cursor().await;
    let before = cluster.statuses().await;
    for (who, identity, code) in &attackers {
        for id in cluster.ids() {
            let mut raft = raft_client(&secure, id, identity.clone());
            let case = format!("{who}: forged heartbeat (term 1000, leader 9) to node {id}");
            assert_status(raft.append_entries(forged_heartbeat(1000, 9)).await, *code, &case);
            let case = format!("{who}: forged vote (term 1000, candidate 9) to node {id}");
            assert_status(raft.vote(forged_vote(1000, 9)).await, *code, &case);
            let case = format!("{who}: snapshot header of 2^62 bytes to node {id}");
            assert_status(raft.install_snapshot(oversized_snapshot()).await, *code, &case);
        }
        let mut raft = raft_client(&secure, follower, identity.clone());
        let case = format!("{who}: forged entry to follower {follower}");
        let status = &before[&follower];
        let vote = Vote::new_committed(status.term, status.leader_id.expect("a leader"));
        assert_status(raft.append_entries(forged_entry(status, vote)).await, *code, &case);
        let case = format!("{who}: forged entry over StreamAppend to follower {follower}");
        let streamed = futures::stream::iter([forged_entry(status, vote)]);
        assert_status(raft.stream_append(streamed).await, *code, &case);
    }
    // A member's certificate passes the door, but the oversized header is
    // still refused before anything is allocated or created.
    let member_tls = secure.cluster.certs().expect("secure");
    let member = (
        std::fs::read_to_string(member_tls.node_cert(follower)).expect("the follower's certificate"),
        std::fs::read_to_string(member_tls.node_key(follower)).expect("the follower's key"),
    );
    let mut raft = raft_client(&secure, leader, Some(member));
    let case = "a member node certificate: snapshot header of 2^62 bytes to the leader";
    assert_status(raft.install_snapshot(oversized_snapshot()).await, Code::ResourceExhausted, case);
    // The control: the forged encodings are what Raft decodes. From a
    // member's certificate, the same messages at a stale term (0, harmless)
    // reach openraft, which answers them by rejecting the stale vote.
    let stale = Vote::new_committed(0, 9);
    for (what, message) in [("heartbeat", forged_heartbeat(0, 9)), ("entry", forged_entry(&before[&leader], stale))] {
        let answer = raft.append_entries(message).await.unwrap_or_else(|status| panic!("{what}: {status:?}"));
        let answer: openraft::raft::AppendEntriesResponse<Forged> =
            bincode::deserialize(&answer.into_inner().payload).expect("an append-entries answer");
        assert!(
            matches!(answer, openraft::raft::AppendEntriesResponse::HigherVote(_)),
            "a stale {what} from a member is decoded and rejected by raft: {answer:?}"
        );
    }
    let streamed = futures::stream::iter([forged_heartbeat(0, 9), forged_entry(&before[&leader], stale)]);
    let mut answers = raft.stream_append(streamed).await.expect("a member opens an append stream").into_inner();
    let answer = answers.message().await.expect("the stream's first answer").expect("an answer");
    let answer: openraft::raft::StreamAppendResult<Forged> =
        bincode::deserialize(&answer.payload).expect("a stream-append answer");
    assert!(
        matches!(answer, Err(openraft::raft::StreamAppendError::HigherVote(_))),
        "a stale streamed heartbeat from a member is decoded and rejected by raft: {answer:?}"
    );
    let rest = answers.message().await.expect("the stream ends cleanly");
    assert!(rest.is_none(), "nothing is answered after a refusal: {rest:?}");
    let answer = raft.vote(forged_vote(0, 9)).await.expect("a vote from a member is answered");
    let answer: openraft::raft::VoteResponse<Forged> =
        bincode::deserialize(&answer.into_inner().payload).expect("a vote answer");
    assert!(!answer.vote_granted, "a stale vote is not granted: {answer:?}");
    // The issue's 250 MiB AppendEntries of zeros, here just over the limit
    // (64 MiB), from a member: refused from its length prefix, so the
    // leader's peak memory does not grow by the message.
    let leader_pid = cluster.pid(leader).expect("the leader runs");
    let peak_before = peak_rss_kib(leader_pid);
    let oversized = RaftBytes { payload: vec![0; gavel_raft::limits::APPEND_ENTRIES_BYTES_MAX + (1 << 20)] };
    let case = "a member node certificate: AppendEntries of 65 MiB of zeros to the leader";
    assert_status(raft.append_entries(oversized).await, Code::OutOfRange, case);
    let grown_kib = peak_rss_kib(leader_pid).saturating_sub(peak_before);
    assert!(grown_kib < 32 * 1024, "the leader's peak memory grew by {grown_kib} KiB for a refused message");

    // Membership: RemoveNode 3 and AddLearner 9 at an address the attacker
    // listens on, anonymously, with a certificate and by a submitter token.
    secure.grant("user:submitter", "submitter", &[]).await;
    let applied_membership = secure.quiet_log().await;
    let cursor_membership = secure.last_cursor().await;
    let trap = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a listener");
    let trap_addr = trap.local_addr().expect("bound").to_string();
    let ca_only = cluster.ca_only().expect("secure");
    let token = cluster.token(&principal("user:submitter"), None).expect("a token");
    let callers = [
        ("anonymous", secure.client_with(Some(ca_only.clone()), None), "UNAUTHENTICATED"),
        ("user:mallory by certificate", secure.client_as("user:mallory"), "PERMISSION_DENIED"),
        ("user:submitter by token", secure.client_with(Some(ca_only), Some(token)), "PERMISSION_DENIED"),
    ];
    for (who, client, code) in &callers {
        let removed = client.remove_node(pb::RemoveNodeRequest { request_id: String::new(), node_id: 3 }).await;
        assert_refused(removed, code, &format!("{who}: RemoveNode 3"));
        let added = client
            .add_learner(pb::AddLearnerRequest {
                request_id: String::new(),
                node_id: 9,
                addr: trap_addr.clone(),
                wait_caught_up: false,
            })
            .await;
        assert_refused(added, code, &format!("{who}: AddLearner 9 at {trap_addr}"));
    }
    let accepted = tokio::time::timeout(Duration::from_secs(1), trap.accept()).await;
    assert!(accepted.is_err(), "no node dialled the attacker's listener");

    let after = cluster.statuses().await;
    for (id, status) in &after {
        assert_eq!(status.term, before[id].term, "node {id}: no forged message moved the term");
        assert_eq!(status.leader_id, Some(leader), "node {id}: the leader was not deposed");
        assert_eq!(status.members, before[id].members, "node {id}: the membership did not change");
    }
    assert_eq!(secure.applied().await, applied_membership, "no refused call reached the log");
    assert_eq!(applied_membership[0], applied_before[0] + 1, "only the admin's grant was applied in between");
    let events = secure.events().await;
    let new: Vec<&pb::Event> = events.iter().filter(|event| event.cursor > cursor_before).collect();
    assert_eq!(new.len(), 1, "only the admin's grant is new in the trail: {new:?}");
    assert_eq!(secure.last_cursor().await, cursor_membership);
    let mallory_grants = secure
        .admin
        .list_grants(pb::ListGrantsRequest { principal: Some("user:mallory".into()) })
        .await
        .expect("the admin lists grants");
    assert!(mallory_grants.grants.is_empty(), "the forged entry granted nothing: {mallory_grants:?}");
    secure.still_serves_a_good_client().await;
}

/// A request for a critical, destructive refund approval `id` (the actor
/// left out: it defaults to the principal), expiring in `expires_in_ms` when
/// given.
fn approval_request(id: &str, expires_in_ms: Option<u64>) -> pb::CreateApprovalRequest {
    pb::CreateApprovalRequest {
        id: id.into(),
        capability_id: "orders.refund".into(),
        surface: "trust".into(),
        input_json: format!(r#"{{"order":"{id}","amount_cents":777777}}"#),
        risk: pb::Risk::Critical as i32,
        side_effect: pb::SideEffect::Destructive as i32,
        expires_in_ms,
        ..pb::CreateApprovalRequest::default()
    }
}

/// A pending approval `id` requested by `requester`.
async fn create_approval(requester: &Client, id: &str, expires_in_ms: Option<u64>) -> pb::Approval {
    requester
        .create_approval(approval_request(id, expires_in_ms))
        .await
        .unwrap_or_else(|error| panic!("create {id}: {error}"))
        .approval
        .expect("the approval")
}

fn decide(id: &str, approver: Option<&str>, caller_now_ms: Option<i64>) -> pb::DecideApprovalRequest {
    pb::DecideApprovalRequest {
        id: id.into(),
        status: pb::ApprovalStatus::Approved as i32,
        approver: approver.map(|approver| support::user(approver.trim_start_matches("user:"))),
        caller_now_ms,
        ..pb::DecideApprovalRequest::default()
    }
}

async fn approval(client: &Client, id: &str) -> Option<pb::Approval> {
    match client.get_approval(pb::GetApprovalRequest { id: id.into(), caller_now_ms: None }).await {
        Ok(answer) => answer.approval,
        Err(error) if error.code().ends_with("NOT_FOUND") => None,
        Err(error) => panic!("read {id}: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_declared_identity_clock_and_lease_exploits_are_refused() {
    let secure = Secure::start().await;
    secure.grant("user:alice", "submitter", &[]).await;
    secure.grant("user:bob", "approver", &[]).await;
    secure.grant("user:carol", "submitter", &[]).await;
    secure.grant("user:carol", "approver", &[]).await;
    secure.grant("worker:w1", "worker", &["refunds"]).await;
    secure.grant("worker:w2", "worker", &["refunds"]).await;
    secure.grant("worker:w3", "worker", &["other"]).await;
    let (alice, bob, carol) =
        (secure.client_as("user:alice"), secure.client_as("user:bob"), secure.client_as("user:carol"));

    let forged = create_approval(&alice, "forged-approver", None).await;
    let own = create_approval(&carol, "own-request", None).await;
    let short = create_approval(&alice, "expires-in-1ms", Some(1)).await;
    assert_eq!(forged.actor.as_ref().map(|actor| actor.id.as_str()), Some("alice"), "the actor is the principal");
    // Let the 1 ms approval expire on every clock.
    tokio::time::sleep(Duration::from_millis(50)).await;

    let applied_before = secure.quiet_log().await;
    let cursor_before = secure.last_cursor().await;
    // Forged approver: bob decides naming user:cfo.
    assert_refused(
        bob.decide_approval(decide("forged-approver", Some("user:cfo"), None)).await,
        "PERMISSION_DENIED",
        "bob decides naming user:cfo as approver",
    );
    // The submitter approving its own request under another name.
    assert_refused(
        carol.decide_approval(decide("own-request", Some("user:bob"), None)).await,
        "PERMISSION_DENIED",
        "carol decides her own request naming user:bob",
    );
    // Self opt-out: the requester sets allow_self_approval without the grant.
    let opt_out = alice
        .create_approval(pb::CreateApprovalRequest { allow_self_approval: true, ..approval_request("opt-out", None) })
        .await;
    assert_refused(opt_out, "PERMISSION_DENIED", "alice opts her request out of the self-approval check");
    // Clock override: deciding the expired approval "at" its request time,
    // and creating one with a caller clock, without the clock grant.
    assert_refused(
        bob.decide_approval(decide("expires-in-1ms", None, Some(short.requested_at_ms))).await,
        "PERMISSION_DENIED",
        "bob decides an expired approval with caller_now_ms at its request time",
    );
    let clocked = alice
        .create_approval(pb::CreateApprovalRequest {
            caller_now_ms: Some(short.requested_at_ms - 3_600_000),
            ..approval_request("clocked", None)
        })
        .await;
    assert_refused(clocked, "PERMISSION_DENIED", "alice creates an approval with caller_now_ms");

    assert_eq!(secure.applied().await, applied_before, "no refused command reached the log");
    assert_eq!(secure.last_cursor().await, cursor_before, "no refused command left an audit event");
    // As herself, carol meets the self-approval rule. That one is decided by
    // the state machine against the approval's recorded requester, so the
    // command is ordered in the log and refused there, changing nothing:
    // no audit event, and the approval stays pending (checked below).
    assert_refused(
        carol.decide_approval(decide("own-request", None, None)).await,
        "APPROVAL_SELF_APPROVAL",
        "carol decides her own request as herself",
    );
    assert_eq!(secure.last_cursor().await, cursor_before, "the self-approval left no audit event");
    for (id, original) in [("forged-approver", &forged), ("own-request", &own)] {
        let now = approval(&secure.admin, id).await.expect("still there");
        assert_eq!(now.status, pb::ApprovalStatus::Pending as i32, "{id} is still pending");
        assert_eq!(now.decision, original.decision, "{id} has no decision");
    }
    assert!(approval(&secure.admin, "opt-out").await.is_none(), "the opt-out request was not stored");
    assert!(approval(&secure.admin, "clocked").await.is_none(), "the clocked request was not stored");
    let expired = approval(&secure.admin, "expires-in-1ms").await.expect("still there");
    assert_eq!(expired.status, pb::ApprovalStatus::Expired as i32, "cluster time decides the expiry");

    // The same approver decides as itself: allowed, and the decision names it.
    let decided = bob.decide_approval(decide("forged-approver", None, None)).await.expect("bob decides as bob");
    let decision = decided.approval.and_then(|approval| approval.decision).expect("a decision");
    assert_eq!(decision.approver.map(|approver| approver.id), Some("bob".to_string()));

    lease_takeover_and_ungranted_queue(&secure, &alice).await;
    secure.still_serves_a_good_client().await;
}

/// A lease is bound to the worker principal it was granted to; a worker
/// polls only its granted queues.
async fn lease_takeover_and_ungranted_queue(secure: &Secure, submitter: &Client) {
    let spec = pb::CapabilitySpec {
        queue: Some("refunds".into()),
        ..support::capability("payments.refund", pb::SideEffect::Write)
    };
    secure
        .admin
        .register_capability(pb::RegisterCapabilityRequest { request_id: String::new(), spec: Some(spec) })
        .await
        .expect("the admin registers the capability");
    // Polls of an empty queue: refused before waiting, not answered empty.
    let (w3, nobody) = (secure.client_as("worker:w3"), secure.client_as("worker:nobody"));
    let empty_poll =
        pb::PollRequest { queues: vec!["refunds".into()], max_tasks: 1, wait_ms: 200, ..Default::default() };
    let case = "worker:w3 polls refunds (granted: other) with nothing ready";
    assert_refused(w3.poll(empty_poll.clone()).await, "PERMISSION_DENIED", case);
    let case = "worker:nobody (no worker grant) polls refunds with nothing ready";
    assert_refused(nobody.poll(empty_poll).await, "PERMISSION_DENIED", case);
    let own = pb::PollRequest { queues: vec!["other".into()], max_tasks: 1, wait_ms: 200, ..Default::default() };
    assert!(w3.poll(own).await.expect("w3 polls its own queue").tasks.is_empty());
    let submitted = submitter
        .submit(pb::SubmitRequest {
            capability_id: "payments.refund".into(),
            input_json: r#"{"amount_cents":777777}"#.into(),
            surface: "trust".into(),
            ..pb::SubmitRequest::default()
        })
        .await
        .expect("alice submits");
    let Some(pb::submit_response::Outcome::Execution(execution)) = submitted.outcome else {
        panic!("the capability needs no approval: {submitted:?}");
    };
    let (w1, w2) = (secure.client_as("worker:w1"), secure.client_as("worker:w2"));
    let poll = |queue: &str| pb::PollRequest {
        worker_id: "w1".into(),
        queues: vec![queue.into()],
        max_tasks: 1,
        wait_ms: 2_000,
        ..pb::PollRequest::default()
    };
    // A worker polling a queue it was not granted, now that work is ready there.
    let case = "worker:w3 polls refunds (granted: other) with work ready";
    assert_refused(w3.poll(poll("refunds")).await, "PERMISSION_DENIED", case);
    let task = w1.poll(poll("refunds")).await.expect("w1 polls").tasks.pop().expect("the task");
    let lease_id = task.lease.as_ref().expect("a lease").lease_id;
    assert_eq!(task.execution_id, execution.execution_id);

    // Another worker quotes the lease id and w1's worker id from the trail.
    let cursor_before = secure.last_cursor().await;
    let heartbeat = pb::HeartbeatRequest { request_id: String::new(), lease_id, worker_id: "w1".into() };
    assert_refused(w2.heartbeat(heartbeat.clone()).await, "PERMISSION_DENIED", "worker:w2 heartbeats w1's lease");
    let forged = pb::ReportRequest {
        request_id: String::new(),
        lease_id,
        worker_id: "w1".into(),
        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
            output_json: r#"{"forged":true}"#.into(),
        })),
    };
    assert_refused(w2.report(forged).await, "PERMISSION_DENIED", "worker:w2 reports on w1's lease");
    assert_eq!(secure.last_cursor().await, cursor_before, "the refused heartbeat and report left no event");
    let still =
        secure.admin.get_execution(pb::GetExecutionRequest { execution_id: execution.execution_id.clone() }).await;
    // The auditor may read executions; either way the lease is w1's still.
    if let Ok(still) = still {
        let still = still.execution.expect("the execution");
        assert_eq!(still.state, pb::ExecutionState::Leased as i32, "the execution is still w1's: {still:?}");
    }

    // The real worker is served.
    w1.heartbeat(heartbeat).await.expect("w1 heartbeats its own lease");
    let report = pb::ReportRequest {
        request_id: String::new(),
        lease_id,
        worker_id: "w1".into(),
        outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted {
            output_json: r#"{"refunded":true}"#.into(),
        })),
    };
    let reported = w1.report(report).await.expect("w1 reports").execution.expect("the execution");
    assert_eq!(reported.state, pb::ExecutionState::Completed as i32);
    match reported.result.and_then(|result| result.outcome) {
        Some(pb::result_envelope::Outcome::Completed(completed)) => {
            assert_eq!(completed.output_json, r#"{"refunded":true}"#)
        }
        other => panic!("the real worker's result: {other:?}"),
    }
    let events = secure.events().await;
    assert!(
        events.iter().all(|event| event.principal.as_deref() != Some("worker:w2")),
        "nothing in the trail was done by worker:w2"
    );
}

/// What a raw TLS client presenting `tls`'s certificate to `addr` gets after
/// the handshake, an HTTP/2 preface and a large write: the node's refusal.
async fn handshake_refusal(addr: &str, tls: &ClientTls) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_slice_iter(tls.ca_pem.as_bytes()) {
        roots.add(certificate.expect("the CA parses")).expect("the CA is usable");
    }
    let (cert_pem, key_pem) = tls.identity.as_ref().expect("a client certificate");
    let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>().expect("a chain");
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("a key");
    let mut config = tokio_rustls::rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .expect("a client configuration");
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("the node accepts TCP");
    let host = ServerName::try_from(addr.rsplit_once(':').expect("host:port").0.to_string()).expect("a server name");
    let exchange = async {
        let mut stream = connector.connect(host, tcp).await?;
        // A client that keeps writing (a large first request) while the node
        // refuses it: the node must not reset the connection before the
        // client has read the alert.
        stream.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
        stream.write_all(&vec![0u8; 256 * 1024]).await?;
        stream.flush().await?;
        let mut buffer = [0u8; 256];
        stream.read(&mut buffer).await
    };
    match tokio::time::timeout(Duration::from_secs(5), exchange).await {
        Ok(Ok(read)) => panic!("the node answered a refused certificate with {read} bytes"),
        Ok(Err(error)) => error.to_string(),
        Err(_) => panic!("the node neither answered nor refused the certificate"),
    }
}

/// A token whose header and claims are these JSON texts, signed by nobody.
fn unsigned_token(header: &str, claims: &str) -> String {
    let encode = |text: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text);
    format!("{}.{}.", encode(header), encode(claims))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_certificates_plaintext_and_bad_tokens_get_a_clear_error_and_others_are_served() {
    let secure = Secure::start().await;
    let cluster = &secure.cluster;
    let authority = cluster.authority().expect("secure");
    let ca_pem = authority.cert_pem().to_string();
    let alice = principal("user:alice");

    // Certificates.
    let tls_with =
        |cert_pem: String, key_pem: String| ClientTls { ca_pem: ca_pem.clone(), identity: Some((cert_pem, key_pem)) };
    let other_ca = Authority::create("another CA", Validity::days(1)).expect("a CA");
    let foreign = other_ca.issue(&alice, &[], Validity::days(1)).expect("a certificate");
    let expired = authority.issue(&alice, &[], Validity::expired()).expect("a certificate");
    let self_signed = Authority::create("user:alice", Validity::days(1)).expect("a self-signed certificate");
    let no_certificate = secure.client_with(Some(cluster.ca_only().expect("secure")), None);
    assert_refused(no_certificate.who_am_i(pb::WhoAmIRequest {}).await, "UNAUTHENTICATED", "no certificate, no token");
    secure.still_serves_a_good_client().await;
    for (case, tls, alert) in [
        ("a certificate of another CA", tls_with(foreign.cert_pem, foreign.key_pem), "UnknownCA"),
        ("an expired certificate", tls_with(expired.cert_pem, expired.key_pem), "CertificateExpired"),
        (
            "a self-signed certificate",
            tls_with(self_signed.cert_pem().to_string(), self_signed.key_pem()),
            "CertificateUnknown",
        ),
    ] {
        // At the handshake: the node answers the certificate with a fatal
        // alert naming the fault, and closes without a reset even while the
        // client is still writing (gavel-server's TLS acceptor), so the
        // client reads the alert.
        let refusal = handshake_refusal(cluster.addr(1).expect("node 1"), &tls).await;
        assert!(refusal.contains(&format!("received fatal alert: {alert}")), "{case}: {refusal}");
        eprintln!("{case}: handshake refused: {refusal}");
        // Through the SDK: no node serves the call. TLS 1.3 lets the client
        // send its request before the node checks its certificate; the SDK
        // names the alert (UNAUTHENTICATED) when hyper hands it the read
        // error, but when the connection ends before the queued request is
        // written, hyper reports it cancelled and the SDK can only say the
        // node did not answer (UNAVAILABLE).
        let client = secure.client_with(Some(tls), None);
        let error = client.who_am_i(pb::WhoAmIRequest {}).await.expect_err(case);
        eprintln!("{case}: {error}");
        match error.code() {
            "UNAUTHENTICATED" => {
                assert!(error.to_string().contains(&format!("fatal alert: {alert}")), "{case}: {error}")
            }
            "UNAVAILABLE" => assert!(!error.to_string().contains("user:"), "{case}: {error}"),
            other => panic!("{case}: refused with {other}: {error}"),
        }
        secure.still_serves_a_good_client().await;
    }
    // Plaintext to a TLS node: the handshake never happens, no node serves
    // the call, and the client says at once that the node speaks TLS and
    // no CA is configured (`gavel_client`'s TLS probe, issue #40).
    let plaintext = secure.client_with(None, None);
    let message = assert_refused(plaintext.who_am_i(pb::WhoAmIRequest {}).await, "CONFIG", "plaintext");
    assert!(!message.contains("user:"), "no node answered plaintext: {message}");
    assert!(message.contains("answers with TLS") && message.contains("GAVEL_CA"), "plaintext: {message}");
    secure.still_serves_a_good_client().await;

    // Tokens, sent over TLS without a certificate.
    let key = cluster.token_key().expect("secure");
    let good = cluster.token(&alice, None).expect("a token");
    // Tampered: alice's signed token with its subject changed to the admin.
    let tampered = {
        let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let parts: Vec<&str> = good.split('.').collect();
        let claims = String::from_utf8(engine.decode(parts[1]).expect("base64 claims")).expect("JSON claims");
        let claims = claims.replace("\"user:alice\"", "\"user:admin\"");
        format!("{}.{}.{}", parts[0], engine.encode(claims), parts[2])
    };
    assert_ne!(tampered, good, "the subject was changed");
    let now = gavel_pki::unix_seconds();
    let expired = key
        .issue(&TokenClaims { exp: now - 3600, iat: now - 7200, ..TokenClaims::new(&alice, DEFAULT_AUDIENCE, WAIT) })
        .expect("a token");
    let wrong_audience =
        key.issue(&TokenClaims::new(&alice, "another-cluster", Duration::from_secs(600))).expect("a token");
    let foreign_key = TokenKey::create().expect("a key");
    let foreign =
        foreign_key.issue(&TokenClaims::new(&alice, DEFAULT_AUDIENCE, Duration::from_secs(600))).expect("a token");
    let far_future = gavel_pki::unix_seconds() + 3600;
    let alg_none = unsigned_token(
        r#"{"alg":"none","typ":"JWT"}"#,
        &format!(r#"{{"sub":"user:admin","aud":"{DEFAULT_AUDIENCE}","exp":{far_future},"iat":1}}"#),
    );
    let garbage = base64::engine::general_purpose::STANDARD.encode([0x9f, 0x00, 0xff, 0x13, 0x37, 0xc3, 0x28]);
    // Signed with the cluster's key, but breaking a rule on the claims; the
    // nodes run with the default --token-lifetime-max (24 h).
    let an_hour = || TokenClaims::new(&alice, DEFAULT_AUDIENCE, Duration::from_secs(3600));
    let not_yet_valid =
        key.issue(&TokenClaims { nbf: Some(gavel_pki::unix_seconds() + 3600), ..an_hour() }).expect("a token");
    let year_9999 = key.issue(&TokenClaims { exp: 253_402_300_799, ..an_hour() }).expect("a token");
    let node_subject = key.issue(&TokenClaims { sub: "node:1".to_string(), ..an_hour() }).expect("a token");
    for (case, token, reason) in [
        ("a token whose subject was changed to the admin", tampered, "signature does not verify"),
        ("an expired token", expired, "has expired"),
        ("a token for another audience", wrong_audience, "not meant for audience"),
        ("a token signed by another key", foreign, "signature does not verify"),
        ("an alg: none token naming the admin", alg_none, "is not accepted"),
        ("garbage bytes as token", garbage, "not a JWT"),
        ("a token whose nbf is an hour ahead", not_yet_valid, "the token is not valid yet"),
        ("a token expiring in year 9999", year_9999, "over the maximum token lifetime of 1d"),
        ("a token for node:1", node_subject, "nodes authenticate with their certificate only"),
    ] {
        let client = secure.client_with(Some(cluster.ca_only().expect("secure")), Some(token));
        let message = assert_refused(client.who_am_i(pb::WhoAmIRequest {}).await, "UNAUTHENTICATED", case);
        assert!(message.contains(reason), "{case}: {message}");
        secure.still_serves_a_good_client().await;
    }
    let client = secure.client_with(Some(cluster.ca_only().expect("secure")), Some(good));
    let answer = client.who_am_i(pb::WhoAmIRequest {}).await.expect("a good token is served");
    assert_eq!(answer.principal, "user:alice");
}

/// What one racing decision got, and when its call started.
struct Attempt {
    started: Instant,
    outcome: Result<(), String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_approver_racing_decisions_through_every_node_decides_nothing_after_the_revoke() {
    const APPROVALS: usize = 150;
    let secure = Secure::start().await;
    secure.grant("user:alice", "submitter", &[]).await;
    secure.grant("user:racer", "approver", &[]).await;
    let alice = secure.client_as("user:alice");
    let ids: Vec<String> = (0..APPROVALS).map(|index| format!("race-{index}")).collect();
    for chunk in ids.chunks(25) {
        futures::future::join_all(chunk.iter().map(|id| create_approval(&alice, id, None))).await;
    }

    // One racer per node, each call sent to (and forwarded from) its node.
    let queue = Arc::new(Mutex::new(ids.iter().cloned().collect::<VecDeque<String>>()));
    let attempts = Arc::new(Mutex::new(Vec::<Attempt>::new()));
    let racers: Vec<_> = secure
        .cluster
        .ids()
        .into_iter()
        .map(|id| {
            let client = secure.client_through("user:racer", id);
            let (queue, attempts) = (queue.clone(), attempts.clone());
            tokio::spawn(async move {
                let deadline = Instant::now() + WAIT;
                while Instant::now() < deadline {
                    let Some(next) = queue.lock().expect("queue").pop_front() else { return };
                    let started = Instant::now();
                    let outcome = client.decide_approval(decide(&next, None, None)).await;
                    let outcome = outcome.map(|_| ()).map_err(|error| error.code().to_string());
                    attempts.lock().expect("attempts").push(Attempt { started, outcome });
                }
            })
        })
        .collect();
    let successes = || attempts.lock().expect("attempts").iter().filter(|attempt| attempt.outcome.is_ok()).count();
    let started = Instant::now();
    while successes() < 10 {
        assert!(started.elapsed() < WAIT, "the racers decided nothing");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    secure
        .admin
        .revoke(pb::RevokeRequest {
            principal: "user:racer".into(),
            grant: "approver".into(),
            request_id: String::new(),
        })
        .await
        .expect("the admin revokes the racer's approver grant");
    let revoked_at = Instant::now();
    for racer in racers {
        racer.await.expect("a racer");
    }

    let attempts = std::mem::take(&mut *attempts.lock().expect("attempts"));
    let approved = attempts.iter().filter(|attempt| attempt.outcome.is_ok()).count();
    let refused = attempts
        .iter()
        .filter(|attempt| attempt.outcome.as_ref().is_err_and(|code| code == "PERMISSION_DENIED"))
        .count();
    assert_eq!(approved + refused, APPROVALS, "every decision was approved or refused for permission");
    assert!(
        approved >= 10 && refused >= 1,
        "the race had decisions on both sides: {approved} approved, {refused} refused"
    );
    for attempt in &attempts {
        if attempt.started > revoked_at {
            assert!(attempt.outcome.is_err(), "a decision started after the revoke was acknowledged succeeded");
        }
    }

    // The trail orders every decision by the racer before the revocation.
    let events = secure.events().await;
    let revoked = events
        .iter()
        .find(|event| event.r#type == "access.revoked" && event.subject_principal.as_deref() == Some("user:racer"))
        .expect("the access.revoked event");
    assert_eq!(revoked.grant.as_deref(), Some("approver"));
    let decisions: Vec<&pb::Event> = events
        .iter()
        .filter(|event| matches!(event.r#type.as_str(), "capability.approved" | "capability.rejected"))
        .filter(|event| event.principal.as_deref() == Some("user:racer"))
        .collect();
    assert_eq!(decisions.len(), approved, "one audit event per acknowledged decision");
    let late: Vec<u64> =
        decisions.iter().filter(|event| event.cursor > revoked.cursor).map(|event| event.cursor).collect();
    assert!(late.is_empty(), "decisions ordered after the revoke at cursor {}: {late:?}", revoked.cursor);
    eprintln!(
        "revocation race: {approved} approved before the revoke (cursor {}), {refused} refused PERMISSION_DENIED",
        revoked.cursor
    );
    secure.still_serves_a_good_client().await;
}
