//! Application events (`AuditService.RecordEvent`). Gavel's own events are
//! encoded by [`super::execution::event_out`], which encodes these too.

use gavel_core::{Caller, Command, DomainError, RecordEvent};
use gavel_proto::v1 as pb;

use super::common::actor_or_caller;

/// Decodes a record request: the actor defaults to the caller, an empty
/// optional id means none.
pub fn record_event_in(request: &pb::RecordEventRequest, caller: Option<&Caller>) -> Result<Command, DomainError> {
    let present = |id: &Option<String>| id.clone().filter(|id| !id.is_empty());
    Ok(Command::RecordEvent(RecordEvent {
        event_type: request.r#type.clone(),
        actor: actor_or_caller("actor", request.actor.as_ref(), caller)?,
        execution_id: present(&request.execution_id),
        approval_id: present(&request.approval_id),
        correlation_id: present(&request.correlation_id),
        capability_id: present(&request.capability_id),
        payload_json: request.payload_json.clone(),
        attributes: request.attributes.clone(),
    }))
}
