//! `AuditService`: the ordered, resumable audit trail.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use gavel_core::limits::EVENTS_PAGE_MAX;
use gavel_core::State;
use gavel_proto::v1 as pb;
use gavel_proto::v1::audit_service_client::AuditServiceClient;
use gavel_proto::v1::audit_service_server::AuditService;
use tonic::{Request, Response, Status};

use super::is_forwarded;
use crate::convert::execution::event_out;
use crate::node::{Node, Routed};
use crate::serve;

/// Serves the audit trail.
pub struct Audit {
    /// The node.
    pub node: Arc<Node>,
}

const NO_WAIT: Duration = Duration::ZERO;

/// Events after a cursor, optionally of one execution; `OUT_OF_RANGE` when
/// retention already dropped events the caller has not seen.
fn page(state: &State, after_cursor: u64, limit: u32, execution_id: Option<&str>) -> Result<Vec<pb::Event>, Status> {
    if let Some(first) = state.events_after(0, 1).first().map(|event| event.cursor) {
        if after_cursor > 0 && after_cursor + 1 < first {
            return Err(Status::out_of_range(format!(
                "events up to cursor {} were dropped by retention; resume from cursor {}",
                first - 1,
                first - 1
            )));
        }
    }
    let events = match execution_id {
        Some(id) => state.execution_events(id, after_cursor, limit),
        None => state.events_after(after_cursor, limit),
    };
    Ok(events.into_iter().map(event_out).collect())
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
        let message = request.into_inner();
        let node = self.node.clone();
        let (sender, receiver) = tokio::sync::mpsc::channel(256);
        tokio::spawn(async move {
            let mut cursor = message.after_cursor;
            let mut applied = node.app.subscribe();
            loop {
                applied.borrow_and_update();
                let batch = page(&node.app.state(), cursor, EVENTS_PAGE_MAX, message.execution_id.as_deref());
                match batch {
                    Err(status) => {
                        let _ = sender.send(Err(status)).await;
                        return;
                    }
                    Ok(events) if events.is_empty() => {
                        if applied.changed().await.is_err() {
                            return;
                        }
                    }
                    Ok(events) => {
                        for event in events {
                            cursor = event.cursor;
                            if sender.send(Ok(event)).await.is_err() {
                                return;
                            }
                        }
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
        let forwarded = is_forwarded(&request);
        let message = request.into_inner();
        serve!(
            self.node,
            forwarded,
            message,
            NO_WAIT,
            AuditServiceClient,
            list_events,
            async {
                self.node.linearizable().await?;
                let limit = if message.limit == 0 { 100 } else { message.limit };
                let events =
                    page(&self.node.app.state(), message.after_cursor, limit, message.execution_id.as_deref())?;
                let last_cursor = events.last().map_or(message.after_cursor, |event| event.cursor);
                Ok::<_, Routed>(pb::ListEventsResponse { events, last_cursor })
            }
            .await
        )
    }
}
