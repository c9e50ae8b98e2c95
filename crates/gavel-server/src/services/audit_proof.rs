//! The audit tree's reads (`GetCheckpoint`, `GetInclusionProof`,
//! `GetConsistencyProof`, `ListLeaves` of `AuditService`): each a pure
//! function of the state, so the handlers in `audit.rs` only authorize and
//! take the linearizable read. A request about a leaf or a size the tree
//! has not reached is `OUT_OF_RANGE`, with the tree's size in the message.

use gavel_core::limits::AUDIT_LEAVES_PAGE_MAX;
use gavel_core::merkle::{self, Hash, ProofError};
use gavel_core::{ErrorCode, State};
use gavel_proto::v1 as pb;
use tonic::Status;

/// Leaves per page when the caller asks for the server's default.
const LEAVES_PAGE_DEFAULT: u32 = 100;

/// A refused proof request, as `OUT_OF_RANGE`.
fn out_of_range(error: &ProofError) -> Status {
    crate::node::refusal_status(ErrorCode::OutOfRange, &error.to_string(), None, None)
}

/// `size`, or the tree's size now for 0.
fn size_or_now(state: &State, size: u64) -> u64 {
    if size == 0 {
        state.audit_tree_size()
    } else {
        size
    }
}

/// The canonical bytes of the event at leaf `index`, if retained.
fn canonical_event(state: &State, index: u64) -> Option<String> {
    let event = state.event(index.checked_add(1)?)?;
    Some(String::from_utf8(merkle::event_canonical_bytes(&event)).expect("canonical JSON is UTF-8"))
}

/// The origin line of this cluster's audit log.
pub(crate) fn origin(state: &State) -> String {
    merkle::origin(state.audit_leaf_hash(0).as_ref())
}

/// The tree head now.
pub(crate) fn checkpoint(state: &State) -> pb::GetCheckpointResponse {
    let (size, root) = (state.audit_tree_size(), state.audit_tree_root());
    let origin = origin(state);
    let checkpoint = merkle::checkpoint_body(&origin, size, &root);
    pb::GetCheckpointResponse {
        origin,
        size,
        root: root.to_vec(),
        checkpoint,
        signed_checkpoint: state.signed_checkpoint(),
        note_keys: state.note_verifier_keys(),
        first_retained_index: state.audit_first_retained_index(),
        // The node's setting, not the state's: the handler fills it in.
        events_retention_ms: 0,
    }
}

fn bytes(hashes: Vec<Hash>) -> Vec<Vec<u8>> {
    hashes.into_iter().map(|hash| hash.to_vec()).collect()
}

/// The inclusion proof of leaf `index` in the first `size` leaves (0: now).
pub(crate) fn inclusion_proof(state: &State, index: u64, size: u64) -> Result<pb::GetInclusionProofResponse, Status> {
    let size = size_or_now(state, size);
    let proof = state.audit_inclusion_proof(index, size).map_err(|error| out_of_range(&error))?;
    let root = state.audit_tree_root_at(size).map_err(|error| out_of_range(&error))?;
    let leaf_hash = state.audit_leaf_hash(index).expect("a leaf below a reached size is sealed");
    Ok(pb::GetInclusionProofResponse {
        index,
        size,
        leaf_hash: leaf_hash.to_vec(),
        proof: bytes(proof),
        root: root.to_vec(),
        canonical_event: canonical_event(state, index),
    })
}

/// The consistency proof between the first `old_size` and `new_size` (0: now) leaves.
pub(crate) fn consistency_proof(
    state: &State,
    old_size: u64,
    new_size: u64,
) -> Result<pb::GetConsistencyProofResponse, Status> {
    let new_size = size_or_now(state, new_size);
    let proof = state.audit_consistency_proof(old_size, new_size).map_err(|error| out_of_range(&error))?;
    let old_root = state.audit_tree_root_at(old_size).map_err(|error| out_of_range(&error))?;
    let new_root = state.audit_tree_root_at(new_size).map_err(|error| out_of_range(&error))?;
    Ok(pb::GetConsistencyProofResponse {
        old_size,
        new_size,
        proof: bytes(proof),
        old_root: old_root.to_vec(),
        new_root: new_root.to_vec(),
    })
}

/// Leaves from `start_index`, at most `limit` (0: the default; capped at
/// [`AUDIT_LEAVES_PAGE_MAX`]). A start at or past the size returns none.
pub(crate) fn leaves(state: &State, start_index: u64, limit: u32) -> pb::ListLeavesResponse {
    let limit = if limit == 0 { LEAVES_PAGE_DEFAULT } else { limit.min(AUDIT_LEAVES_PAGE_MAX) };
    let size = state.audit_tree_size();
    let end = start_index.saturating_add(u64::from(limit)).min(size);
    let leaves = (start_index..end)
        .map(|index| pb::Leaf {
            index,
            leaf_hash: state.audit_leaf_hash(index).expect("a leaf below the size is sealed").to_vec(),
            canonical_event: canonical_event(state, index),
        })
        .collect();
    pb::ListLeavesResponse { leaves, size }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::audit::tests::state_with_events;
    use tonic::Code;

    fn hash(bytes: &[u8]) -> Hash {
        bytes.try_into().expect("32 bytes")
    }

    #[test]
    fn served_proofs_verify_against_the_served_roots_and_leaves_hash_their_canonical_events() {
        let state = state_with_events(13);
        let head = checkpoint(&state);
        assert_eq!(head.size, 13);
        assert!(head.checkpoint.starts_with(&format!("{}\n13\n", head.origin)), "{}", head.checkpoint);
        let proof = inclusion_proof(&state, 4, 0).expect("in range");
        let event = proof.canonical_event.as_deref().expect("retained");
        assert_eq!(hash(&proof.leaf_hash), merkle::leaf_hash(event.as_bytes()));
        let path: Vec<Hash> = proof.proof.iter().map(|sibling| hash(sibling)).collect();
        assert_eq!(merkle::verify_inclusion(&hash(&proof.leaf_hash), 4, 13, &path, &hash(&head.root)), Ok(()));
        let consistency = consistency_proof(&state, 5, 0).expect("ordered");
        let path: Vec<Hash> = consistency.proof.iter().map(|node| hash(node)).collect();
        let verified =
            merkle::verify_consistency(5, 13, &hash(&consistency.old_root), &hash(&consistency.new_root), &path);
        assert_eq!(verified, Ok(()));
        let page = leaves(&state, 10, 0);
        assert_eq!(page.leaves.iter().map(|leaf| leaf.index).collect::<Vec<_>>(), vec![10, 11, 12]);
    }

    #[test]
    fn requests_past_the_tree_are_out_of_range_naming_its_size() {
        let state = state_with_events(3);
        for status in [
            inclusion_proof(&state, 3, 0).expect_err("index at the size"),
            inclusion_proof(&state, 0, 4).expect_err("size not reached"),
            consistency_proof(&state, 3, 2).expect_err("sizes out of order"),
            consistency_proof(&state, 1, 9).expect_err("size not reached"),
        ] {
            assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
        }
        assert!(inclusion_proof(&state, 0, 4).expect_err("not reached").message().contains("tree's size 3"));
        assert!(leaves(&state, 7, 5).leaves.is_empty());
    }
}
