//! `AuditService`: the ordered, resumable audit trail, and the applications'
//! own events appended to it (`RecordEvent`, a command like any other).
//!
//! A cursor names the last event a reader has seen. Any cursor up to the
//! head (the last event written) is valid, and so is one past it, the cursor
//! the next event will get; the head and one past it both read "from now
//! on". A cursor further ahead names events that do not exist, and
//! following it would skip the events written in between, so it is refused
//! with `OUT_OF_RANGE` and a message naming the head. A cursor whose
//! successors were already dropped by retention is refused the same way,
//! naming the cursor to resume from.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use gavel_core::limits::EVENTS_PAGE_MAX;
use gavel_core::{Action, Command, Event, State};
use gavel_proto::v1 as pb;
use gavel_proto::v1::audit_service_server::AuditService;
use tonic::{Request, Response, Status};

use crate::convert::audit::record_event_in;
use crate::convert::execution::event_out;
use gavel_store::reads::Woken;

use crate::node::{domain_status, Node};

/// Serves the audit trail.
pub struct Audit {
    /// The node.
    pub node: Arc<Node>,
}

/// How long a replica that is not the leader waits to catch up with a
/// cursor ahead of its own head before refusing it: a follower lags the
/// leader, and must not refuse a cursor the leader already handed out.
const CURSOR_CATCH_UP: Duration = Duration::from_secs(3);

/// Why a cursor cannot be read after.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CursorRefusal {
    /// The cursor is more than one past the last event written (`head`).
    Ahead { cursor: u64, head: u64 },
    /// Retention dropped the events after the cursor, up to `dropped_to`.
    Dropped { dropped_to: u64 },
}

impl CursorRefusal {
    pub(crate) fn status(&self) -> Status {
        let message = match self {
            CursorRefusal::Ahead { cursor, head } => format!(
                "cursor {cursor} is ahead of the audit trail, whose last event is cursor {head}; \
                 resume from cursor {head} or lower"
            ),
            CursorRefusal::Dropped { dropped_to } => {
                format!("events up to cursor {dropped_to} were dropped by retention; resume from cursor {dropped_to}")
            }
        };
        crate::node::refusal_status(gavel_core::ErrorCode::OutOfRange, &message, None, None)
    }
}

/// Where a read after `after_cursor` starts: the cursor itself, or the head
/// for a cursor one past it (both mean "from now on"; starting at the head
/// delivers nothing twice that was not written yet).
fn resume_point(state: &State, after_cursor: u64) -> Result<u64, CursorRefusal> {
    let head = state.next_cursor().saturating_sub(1);
    if after_cursor > head.saturating_add(1) {
        return Err(CursorRefusal::Ahead { cursor: after_cursor, head });
    }
    let first_retained = state.events_after(0, 1).first().map_or(state.next_cursor(), |event| event.cursor);
    if after_cursor > 0 && after_cursor.saturating_add(1) < first_retained {
        return Err(CursorRefusal::Dropped { dropped_to: first_retained - 1 });
    }
    Ok(after_cursor.min(head))
}

/// Events after a cursor, optionally of one execution, those `visible`
/// admits, and the cursor to read after next: the last event read (returned
/// or not), or where this read started. `ListEvents`, `ListExecutionEvents`
/// and `WatchEvents` share its cursor rules.
pub(crate) fn page(
    state: &State,
    after_cursor: u64,
    limit: u32,
    execution_id: Option<&str>,
    visible: &dyn Fn(&Event) -> bool,
) -> Result<(Vec<pb::Event>, u64), CursorRefusal> {
    let start = resume_point(state, after_cursor)?;
    let events = match execution_id {
        Some(id) => state.execution_events(id, start, limit),
        None => state.events_after(start, limit),
    };
    let last_cursor = events.last().map_or(start, |event| event.cursor);
    Ok((events.iter().filter(|event| visible(event)).map(event_out).collect(), last_cursor))
}

/// A `ListEvents` request's page size (0: [`gavel_core::limits::LIST_PAGE_DEFAULT`]; above
/// the limit, `PAGE_SIZE_INVALID`) and page token: the cursor a page
/// continues from (after it oldest first, before it newest first).
fn list_events_in(request: &pb::ListEventsRequest) -> Result<(u32, Option<u64>), gavel_core::DomainError> {
    let limit = crate::convert::common::page_size_in(request.limit)?;
    let limit = u32::try_from(limit).expect("a page size is at most LIST_PAGE_MAX");
    if request.page_token.is_empty() {
        return Ok((limit, None));
    }
    let cursor = request.page_token.parse().map_err(|_| {
        gavel_core::DomainError::new(
            gavel_core::ErrorCode::PageTokenInvalid,
            format!("page token {:?} is not one ListEvents handed out; start again without it", request.page_token),
        )
    })?;
    Ok((limit, Some(cursor)))
}

/// One newest-first page of events after `after_cursor`, before the
/// `before` cursor a previous page handed out (none: from the head), and
/// the token of the next page when an older event is left.
fn newest_events_page(
    state: &State,
    execution_id: Option<&str>,
    after_cursor: u64,
    before: Option<u64>,
    limit: u32,
) -> pb::ListEventsResponse {
    let before = before.unwrap_or_else(|| state.next_cursor());
    let events = state.events_before(execution_id, after_cursor, before, limit);
    let last_cursor = events.first().map_or(after_cursor, |event| event.cursor);
    let oldest = events.last().map(|event| event.cursor);
    let next_page_token = match oldest {
        Some(oldest)
            if events.len() == limit as usize
                && !state.events_before(execution_id, after_cursor, oldest, 1).is_empty() =>
        {
            oldest.to_string()
        }
        _ => String::new(),
    };
    pb::ListEventsResponse { events: events.iter().map(event_out).collect(), last_cursor, next_page_token }
}

/// Where a stream after `after_cursor` starts on this replica. The leader
/// answers after a read barrier; another replica first waits, bounded by
/// [`CURSOR_CATCH_UP`], for its state to reach a cursor past its head (one
/// past its head included: it may be a cursor the leader handed out).
async fn watch_start(node: &Node, after_cursor: u64) -> Result<u64, Status> {
    let exact = node.raft.status().is_leader() && node.linearizable().await.is_ok();
    let deadline = tokio::time::Instant::now() + if exact { Duration::ZERO } else { CURSOR_CATCH_UP };
    let mut applied = node.reads.watch();
    loop {
        let (resumed, head) =
            applied.read(|state| (resume_point(state, after_cursor), state.next_cursor().saturating_sub(1)));
        let refusal = match resumed {
            // One past this replica's head reads "from now on", but a replica
            // that is not the leader cannot tell that cursor from one the
            // leader already handed out for an event it has not applied yet:
            // it waits (bounded) for that event before taking the cursor as
            // "from now on", or it would replay an event the caller has seen.
            Ok(start) if after_cursor > head && tokio::time::Instant::now() < deadline => {
                match applied.next_apply(Some(deadline)).await {
                    Woken::Applied => continue,
                    Woken::DeadlineReached => return Ok(start),
                }
            }
            Ok(start) => return Ok(start),
            Err(refusal) => refusal,
        };
        if !matches!(refusal, CursorRefusal::Ahead { .. }) {
            return Err(refusal.status());
        }
        if applied.next_apply(Some(deadline)).await == Woken::DeadlineReached {
            return Err(refusal.status());
        }
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::Event, Status>> + Send>>;

#[tonic::async_trait]
impl AuditService for Audit {
    type WatchEventsStream = EventStream;

    /// Streams from the local replica: every replica holds the same ordered
    /// trail (a prefix of the leader's), so any node can serve a subscriber,
    /// in order and without gaps, and a reconnect resumes from its last cursor.
    async fn watch_events(
        &self,
        request: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = super::caller(&extensions)?;
        // Served from this replica without a barrier: authorized against its
        // grants, and again before every batch, so a revocation ends the
        // stream once this replica applied it. An auditor watches every
        // event; anyone else those of the records it may read.
        self.node.reads.read(|state| state.authorize(caller.as_ref(), Action::WatchEvents)).map_err(domain_status)?;
        let start = watch_start(&self.node, message.after_cursor).await?;
        let node = self.node.clone();
        let (sender, receiver) = tokio::sync::mpsc::channel(256);
        tokio::spawn(async move {
            let mut cursor = start;
            let mut applied = node.reads.watch();
            loop {
                let batch = applied.read(|state| {
                    let visible = |event: &Event| state.may_read_event(caller.as_ref(), event);
                    state
                        .authorize(caller.as_ref(), Action::WatchEvents)
                        .map(|()| page(state, cursor, EVENTS_PAGE_MAX, message.execution_id.as_deref(), &visible))
                });
                let batch = match batch {
                    Ok(batch) => batch,
                    Err(refusal) => {
                        let _ = sender.send(Err(domain_status(refusal))).await;
                        return;
                    }
                };
                match batch {
                    Err(refusal) => {
                        let _ = sender.send(Err(refusal.status())).await;
                        return;
                    }
                    // Nothing new was read: wait for the next applied entry.
                    Ok((_, last_cursor)) if last_cursor <= cursor => {
                        applied.next_apply(None).await;
                    }
                    // The events past the caller's view are skipped, and the
                    // stream moves past them all the same.
                    Ok((events, last_cursor)) => {
                        for event in events {
                            if sender.send(Ok(event)).await.is_err() {
                                return;
                            }
                        }
                        cursor = last_cursor;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver))))
    }

    async fn list_events(
        &self,
        request: Request<pb::ListEventsRequest>,
    ) -> Result<Response<pb::ListEventsResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = super::caller(&extensions)?;
        let (limit, token) = list_events_in(&message).map_err(domain_status)?;
        let execution_id = message.execution_id.as_deref();
        if message.newest_first {
            let page = self
                .node
                .read(caller.as_ref(), Action::ReadAudit, |state| {
                    newest_events_page(state, execution_id, message.after_cursor, token, limit)
                })
                .await?;
            return Ok(Response::new(page));
        }
        let after_cursor = token.unwrap_or(message.after_cursor);
        let (events, last_cursor) = self
            .node
            .read(caller.as_ref(), Action::ReadAudit, |state| page(state, after_cursor, limit, execution_id, &|_| true))
            .await?
            .map_err(|refusal| refusal.status())?;
        let next_page_token = if events.len() == limit as usize { last_cursor.to_string() } else { String::new() };
        Ok(Response::new(pb::ListEventsResponse { events, last_cursor, next_page_token }))
    }

    async fn get_event(&self, request: Request<pb::GetEventRequest>) -> Result<Response<pb::GetEventResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = super::caller(&extensions)?;
        let event = self
            .node
            .read(caller.as_ref(), Action::ReadAudit, |state| state.event(message.cursor).as_ref().map(event_out))
            .await?;
        Ok(Response::new(pb::GetEventResponse { event }))
    }

    async fn get_checkpoint(
        &self,
        request: Request<pb::GetCheckpointRequest>,
    ) -> Result<Response<pb::GetCheckpointResponse>, Status> {
        let caller = super::caller(request.extensions())?;
        let mut head = self.node.read(caller.as_ref(), Action::ReadAudit, super::audit_proof::checkpoint).await?;
        head.events_retention_ms = self.node.settings.retention.events_ms;
        Ok(Response::new(head))
    }

    async fn get_inclusion_proof(
        &self,
        request: Request<pb::GetInclusionProofRequest>,
    ) -> Result<Response<pb::GetInclusionProofResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = super::caller(&extensions)?;
        let proof = self
            .node
            .read(caller.as_ref(), Action::ReadAudit, |state| {
                super::audit_proof::inclusion_proof(state, message.index, message.size)
            })
            .await??;
        Ok(Response::new(proof))
    }

    async fn get_consistency_proof(
        &self,
        request: Request<pb::GetConsistencyProofRequest>,
    ) -> Result<Response<pb::GetConsistencyProofResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = super::caller(&extensions)?;
        let proof = self
            .node
            .read(caller.as_ref(), Action::ReadAudit, |state| {
                super::audit_proof::consistency_proof(state, message.old_size, message.new_size)
            })
            .await??;
        Ok(Response::new(proof))
    }

    async fn list_leaves(
        &self,
        request: Request<pb::ListLeavesRequest>,
    ) -> Result<Response<pb::ListLeavesResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = super::caller(&extensions)?;
        let page = self
            .node
            .read(caller.as_ref(), Action::ReadAudit, |state| {
                super::audit_proof::leaves(state, message.start_index, message.limit)
            })
            .await?;
        Ok(Response::new(page))
    }

    async fn register_note_key(
        &self,
        request: Request<pb::RegisterNoteKeyRequest>,
    ) -> Result<Response<pb::CosignResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = super::caller(&extensions)?;
        let command = Command::RegisterNoteKey { node_id: message.node_id, public_key: message.public_key };
        Ok(Response::new(self.node.call(caller.as_ref(), "", command).await?))
    }

    async fn cosign_checkpoint(
        &self,
        request: Request<pb::CosignCheckpointRequest>,
    ) -> Result<Response<pb::CosignResponse>, Status> {
        let (_, extensions, message) = request.into_parts();
        let caller = super::caller(&extensions)?;
        let command = Command::CosignCheckpoint {
            node_id: message.node_id,
            size: message.size,
            timestamp_s: message.timestamp,
            signature: message.signature,
            log_signature: message.log_signature,
        };
        self.node.reads.read(|state| check_cosignature(state, &command))?;
        Ok(Response::new(self.node.call(caller.as_ref(), "", command).await?))
    }

    /// Appends an application event through the log, like any command: checked
    /// and authorized before it is proposed, and again where it is applied.
    async fn record_event(
        &self,
        request: Request<pb::RecordEventRequest>,
    ) -> Result<Response<pb::RecordEventResponse>, Status> {
        let (metadata, extensions, message) = request.into_parts();
        let (caller, request_id) = (super::caller(&extensions)?, super::request_id(&metadata, &message.request_id)?);
        let command = record_event_in(&message, caller.as_ref()).map_err(domain_status)?;
        let event: Event = self.node.call(caller.as_ref(), &request_id, command).await?;
        Ok(Response::new(pb::RecordEventResponse { event: Some(event_out(&event)) }))
    }
}

/// Checks a node's cosignature (and log signature, if any) before it is
/// proposed: they must verify with the node's registered note key over the
/// `cosignature/v1` message of (and the bare) checkpoint body this replica
/// computes for that size, so a published checkpoint counts only
/// signatures an auditor's `gavel audit verify --keys` accepts. (The core
/// cannot check it at apply: Ed25519 is not in its dependencies.) A size
/// this replica has not reached is refused `UNAVAILABLE`, and the node
/// sends it again; an unregistered node is left to the apply's refusal.
pub(crate) fn check_cosignature(state: &State, command: &Command) -> Result<(), Status> {
    let Command::CosignCheckpoint { node_id, size, timestamp_s, signature, log_signature } = command else {
        return Ok(());
    };
    let Some(public_key) = state.note_keys().get(node_id) else {
        return Ok(());
    };
    let Ok(body) = state.checkpoint_body_at(*size) else {
        return Err(Status::unavailable(format!(
            "this node's audit tree has not reached size {size}; send the cosignature again"
        )));
    };
    let key = ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public_key);
    let refuse = |what: &str| {
        let message =
            format!("node {node_id}'s {what} of the checkpoint of size {size} does not verify with its note key");
        domain_status(gavel_core::DomainError::new(gavel_core::ErrorCode::InvalidArgument, message))
    };
    let message = gavel_core::note::cosigned_message(&body, *timestamp_s);
    key.verify(message.as_bytes(), signature).map_err(|_| refuse("cosignature"))?;
    match log_signature {
        Some(log_signature) => key.verify(body.as_bytes(), log_signature).map_err(|_| refuse("log signature")),
        None => Ok(()),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use gavel_core::{Command, Envelope, Retention};
    use tonic::Code;

    /// A state whose trail holds events 1..=`count`: one capability
    /// registration each, event `n` at time `n` seconds.
    pub(in crate::services) fn state_with_events(count: u64) -> State {
        let mut state = State::new();
        for index in 0..count {
            let spec = gavel_core::CapabilitySpec {
                id: format!("docs.read.{index}"),
                side_effect: Some(gavel_core::SideEffect::Read),
                risk: Some(gavel_core::Risk::Low),
                idempotent: false,
                retry: None,
                timeout_ms: None,
                heartbeat_timeout_ms: None,
                approval: None,
                queue: None,
                tags: Vec::new(),
            };
            let now_ms = (index + 1) * 1_000;
            let envelope =
                Envelope { request_id: None, now_ms, caller: None, command: Command::RegisterCapability(spec) };
            state.apply(&envelope);
        }
        assert_eq!(state.next_cursor(), count + 1, "one event per registration");
        state
    }

    #[test]
    fn cursors_up_to_one_past_the_head_read_from_now_on() {
        let state = state_with_events(7);
        assert_eq!(resume_point(&state, 0), Ok(0));
        assert_eq!(resume_point(&state, 7), Ok(7));
        assert_eq!(resume_point(&state, 8), Ok(7), "the next event's cursor reads from now on, skipping nothing");
        let (events, last_cursor) = page(&state, 8, 10, None, &|_| true).expect("a valid cursor");
        assert!(events.is_empty());
        assert_eq!(last_cursor, 7, "following last_cursor skips no event");
    }

    #[test]
    fn cursors_further_ahead_are_refused_naming_the_head() {
        let state = state_with_events(7);
        for cursor in [9, 999_999, u64::MAX] {
            assert_eq!(resume_point(&state, cursor), Err(CursorRefusal::Ahead { cursor, head: 7 }));
        }
        let status = CursorRefusal::Ahead { cursor: 999_999, head: 7 }.status();
        assert_eq!(status.code(), Code::OutOfRange);
        assert!(status.message().contains("last event is cursor 7"), "{}", status.message());
        let fresh = State::new();
        assert_eq!(resume_point(&fresh, 1), Ok(0), "an empty trail reads from now on at cursor 1 too");
        assert_eq!(resume_point(&fresh, 2), Err(CursorRefusal::Ahead { cursor: 2, head: 0 }));
    }

    #[test]
    fn cursors_before_the_retained_events_are_refused() {
        let mut state = state_with_events(3);
        // Events are retained for one second: at 3.5 s only event 3 (at 3 s) remains.
        let retention = Retention { events_ms: 1_000, ..Retention::default() };
        let tick = Envelope { request_id: None, now_ms: 3_500, caller: None, command: Command::Tick { retention } };
        state.apply(&tick);
        let first = state.events_after(0, 1).first().map(|event| event.cursor).expect("one event is retained");
        assert_eq!(first, 3);
        assert_eq!(resume_point(&state, 1), Err(CursorRefusal::Dropped { dropped_to: 2 }));
        assert_eq!(resume_point(&state, 2), Ok(2));
        assert_eq!(resume_point(&state, 0), Ok(0), "0 starts at the oldest retained event");
    }

    #[test]
    fn a_cosignature_is_checked_against_the_node_s_key_and_this_replica_s_checkpoint_body() {
        use ring::signature::{Ed25519KeyPair, KeyPair};
        let mut state = state_with_events(5);
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).expect("a key");
        let key = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("the key reads");
        let register = Command::RegisterNoteKey { node_id: 1, public_key: key.public_key().as_ref().to_vec() };
        let caller = Some(gavel_core::Caller::of(gavel_core::Principal::node(1)));
        state.apply(&Envelope { request_id: None, now_ms: 10_000, caller, command: register });
        let body = state.checkpoint_body_at(4).expect("a size the tree reached");
        let cosign = |size: u64, signature: Vec<u8>, log_signature: Option<Vec<u8>>| Command::CosignCheckpoint {
            node_id: 1,
            size,
            timestamp_s: 1_700_000_000,
            signature,
            log_signature,
        };
        let message = gavel_core::note::cosigned_message(&body, 1_700_000_000);
        let signed = key.sign(message.as_bytes()).as_ref().to_vec();
        let as_log = key.sign(body.as_bytes()).as_ref().to_vec();
        assert!(check_cosignature(&state, &cosign(4, signed.clone(), Some(as_log.clone()))).is_ok());
        // Another size's body, a changed byte, the bare body as a cosignature,
        // a cosignature as the log's signature: refused before the log.
        let changed = [&signed[..63], &[signed[63] ^ 1]].concat();
        for command in [
            cosign(3, signed.clone(), None),
            cosign(4, changed, None),
            cosign(4, as_log.clone(), None),
            cosign(4, signed.clone(), Some(signed.clone())),
        ] {
            let refused = check_cosignature(&state, &command).expect_err("a bad cosignature");
            assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
        }
        let other = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new()).expect("a key");
        let other = Ed25519KeyPair::from_pkcs8(other.as_ref()).expect("the key reads");
        let forged = other.sign(message.as_bytes()).as_ref().to_vec();
        assert_eq!(
            check_cosignature(&state, &cosign(4, forged, None)).expect_err("another key").code(),
            Code::InvalidArgument
        );
        let ahead = check_cosignature(&state, &cosign(99, signed, None)).expect_err("past this replica's tree");
        assert_eq!(ahead.code(), Code::Unavailable);
    }
}
