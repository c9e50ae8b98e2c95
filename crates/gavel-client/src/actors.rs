//! Actors, the one way people read them, and the cluster's rule on their ids
//! run before sending (docs/decisions/0090-one-spelling-of-a-principal.md).
//!
//! An actor is written `kind:id` (`user:bob-finance`), as a principal is.
//! So an actor id must not name a kind itself: `user:alice` passed as the
//! id of a user would be read `user:user:alice`. The cluster refuses such an
//! id with `INVALID_ARGUMENT` (`gavel_core::validate::check_actor_id`); a
//! request naming one is refused here with the same code and message, and
//! costs no round trip.

use gavel_proto::v1 as pb;

use crate::error::Error;

/// The kind names an actor id may not start with (followed by `:`), each
/// with the actor kind to pass instead: the actor kinds, and the principal
/// kinds `worker` and `node` (a worker acts as automation, a node as a
/// service). The core's table; a test below holds the two together.
const KIND_NAMES: [(&str, &str); 6] = [
    ("user", "user"),
    ("service", "service"),
    ("automation", "automation"),
    ("anonymous", "anonymous"),
    ("worker", "automation"),
    ("node", "service"),
];

/// `kind:id`, the way people read an actor (`user:bob-finance`), the same
/// as a principal and as `--as` takes it.
pub fn actor_text(actor: &pb::Actor) -> String {
    let kind = match pb::ActorKind::try_from(actor.kind) {
        Ok(kind) => kind.as_str_name().trim_start_matches("ACTOR_KIND_").to_lowercase(),
        Err(_) => "unknown".to_string(),
    };
    format!("{kind}:{}", actor.id)
}

/// The refusal of an actor id that names a kind, as the cluster words it
/// (`field` is the request's field: `actor` or `approver`).
pub fn actor_id_problem(field: &str, id: &str) -> Option<String> {
    let (prefix, rest) = id.split_once(':')?;
    let (_, kind) = KIND_NAMES.iter().find(|(name, _)| *name == prefix)?;
    Some(format!("{field} id {id:?} already names a kind; pass id {rest:?} with kind {kind}"))
}

/// A request that may name an actor.
pub(crate) trait NamesActor {
    /// The actor, and the name the cluster gives its field in a refusal.
    fn actor(&self) -> Option<(&'static str, &pb::Actor)>;
}

/// Refuses the request's actor as the cluster would, before it is sent.
pub(crate) fn check(request: &impl NamesActor) -> Result<(), Error> {
    let Some((field, actor)) = request.actor() else {
        return Ok(());
    };
    match actor_id_problem(field, &actor.id) {
        Some(message) => Err(Error::Domain {
            code: "INVALID_ARGUMENT".to_string(),
            message,
            problems: Vec::new(),
            status: tonic::Code::InvalidArgument,
            approval: None,
        }),
        None => Ok(()),
    }
}

macro_rules! names_actor {
    ($request:ty, $field:ident) => {
        impl NamesActor for $request {
            fn actor(&self) -> Option<(&'static str, &pb::Actor)> {
                self.$field.as_ref().map(|actor| (stringify!($field), actor))
            }
        }
    };
}

names_actor!(pb::CreateApprovalRequest, actor);
names_actor!(pb::SubmitRequest, actor);
names_actor!(pb::RecordEventRequest, actor);
names_actor!(pb::CancelExecutionRequest, actor);
names_actor!(pb::DecideApprovalRequest, approver);
names_actor!(pb::CastVoteRequest, approver);
names_actor!(pb::WithdrawVoteRequest, approver);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_refuses_exactly_the_ids_the_cluster_refuses_with_its_message() {
        let ids = [
            "user:ts-alice",
            "service:billing",
            "automation:agent-7",
            "anonymous:x",
            "worker:refunds-1",
            "node:2",
            "user:",
            "alice",
            "tenant:alice",
            "alice@example.com",
            "User:alice",
            "urn:user:alice",
        ];
        for id in ids {
            for field in ["actor", "approver"] {
                assert_eq!(
                    actor_id_problem(field, id),
                    gavel_core::validate::check_actor_id(field, id).err(),
                    "{field} {id}"
                );
            }
        }
    }

    #[test]
    fn a_request_naming_a_prefixed_actor_is_refused_as_invalid_argument() {
        let request = pb::SubmitRequest {
            actor: Some(pb::Actor {
                id: "user:ts-alice".into(),
                kind: pb::ActorKind::User as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        let error = check(&request).expect_err("refused before sending");
        assert_eq!(error.code(), "INVALID_ARGUMENT");
        assert_eq!(
            error.to_string(),
            r#"INVALID_ARGUMENT: actor id "user:ts-alice" already names a kind; pass id "ts-alice" with kind user"#
        );
        assert!(check(&pb::SubmitRequest::default()).is_ok());
    }

    #[test]
    fn an_actor_reads_as_kind_and_id() {
        let bob = pb::Actor { id: "bob-finance".into(), kind: pb::ActorKind::User as i32, ..Default::default() };
        assert_eq!(actor_text(&bob), "user:bob-finance");
        let agent = pb::Actor { id: "agent-7".into(), kind: pb::ActorKind::Automation as i32, ..Default::default() };
        assert_eq!(actor_text(&agent), "automation:agent-7");
    }
}
