//! Cosigned audit checkpoints: each node's Ed25519 note key (registered by
//! a replicated `RegisterNoteKey`) and the checkpoint the nodes are
//! cosigning (`CosignCheckpoint`), published once a quorum of the
//! registered keys has signed the same size.
//!
//! The checkpoint body is a C2SP `tlog-checkpoint` of the tree's first
//! `size` leaves ([`crate::merkle::checkpoint_body`]). A node signs the body
//! it computes from its own replica's tree, so its signature is its check of
//! the tree (a witness's cosignature); the state stores signatures as they
//! come and does not verify them (the core has no signature code); an
//! auditor verifies them offline against the listed keys. The leader starts
//! a checkpoint by cosigning a size past the one being cosigned; the others
//! cosign the size in the state when their tree reaches it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::Reply;
use crate::error::{DomainError, ErrorCode};
use crate::limits::NOTE_KEYS_MAX;
use crate::merkle;
use crate::note;
use crate::State;

/// A checkpoint with the signatures it has, by node id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Cosigned {
    /// Its tree size.
    pub size: u64,
    /// Ed25519 signatures over its body, by node id, each with the public
    /// key it was made with (a node restored from a backup has a new key:
    /// the checkpoints its old key signed still name the old one).
    pub signatures: BTreeMap<u64, NodeSignature>,
}

/// One node's signature of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSignature {
    /// The node's note key when it signed.
    pub public_key: Vec<u8>,
    /// The Ed25519 signature over the checkpoint body.
    pub signature: Vec<u8>,
}

/// The part of the state for checkpoints. Invariant: `pending`, when set,
/// is larger than `published`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct AuditCheckpoints {
    /// Each node's note key.
    keys: BTreeMap<u64, Vec<u8>>,
    /// The checkpoint being cosigned.
    pending: Option<Cosigned>,
    /// The last checkpoint a quorum signed.
    published: Option<Cosigned>,
}

/// The name of node `node_id`'s note key in a signed note.
pub fn note_key_name(origin: &str, node_id: u64) -> String {
    format!("{origin}/node-{node_id}")
}

impl State {
    /// `RegisterNoteKey`: records (or replaces) a node's key.
    pub(super) fn register_note_key(&mut self, node_id: u64, public_key: &[u8]) -> Result<Reply, DomainError> {
        let keys = &mut self.audit_checkpoints.keys;
        if !keys.contains_key(&node_id) && keys.len() >= NOTE_KEYS_MAX {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("{NOTE_KEYS_MAX} nodes already have note keys, the most a cluster keeps"),
            ));
        }
        keys.insert(node_id, public_key.to_vec());
        let size = self.audit_checkpoints.pending.as_ref().map_or(0, |pending| pending.size);
        Ok(Reply::Cosigned { size, published: false })
    }

    /// `CosignCheckpoint`: adds a node's signature to the checkpoint of
    /// `size`, starting it when it is past the one being cosigned, and
    /// publishes it once a majority of the registered keys signed. A
    /// signature for a size already superseded changes nothing.
    pub(super) fn cosign_checkpoint(
        &mut self,
        node_id: u64,
        size: u64,
        signature: &[u8],
    ) -> Result<Reply, DomainError> {
        if !self.audit_checkpoints.keys.contains_key(&node_id) {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("node {node_id} has no note key registered"),
            ));
        }
        if size == 0 || size > self.audit_tree.size() {
            return Err(DomainError::new(
                ErrorCode::FailedPrecondition,
                format!("a checkpoint of size {size} is not of the tree, whose size is {}", self.audit_tree.size()),
            ));
        }
        let checkpoints = &mut self.audit_checkpoints;
        let public_key = checkpoints.keys.get(&node_id).expect("checked above").clone();
        let published_size = checkpoints.published.as_ref().map_or(0, |published| published.size);
        let pending_size = checkpoints.pending.as_ref().map_or(0, |pending| pending.size);
        if size <= published_size || size < pending_size {
            return Ok(Reply::Cosigned { size, published: false });
        }
        if size > pending_size {
            checkpoints.pending = Some(Cosigned { size, signatures: BTreeMap::new() });
        }
        let pending = checkpoints.pending.as_mut().expect("a pending checkpoint of this size");
        pending.signatures.insert(node_id, NodeSignature { public_key, signature: signature.to_vec() });
        let quorum = checkpoints.keys.len() / 2 + 1;
        if pending.signatures.len() < quorum {
            return Ok(Reply::Cosigned { size, published: false });
        }
        checkpoints.published = checkpoints.pending.take();
        Ok(Reply::Cosigned { size, published: true })
    }

    /// Every registered note key, by node id.
    pub fn note_keys(&self) -> &BTreeMap<u64, Vec<u8>> {
        &self.audit_checkpoints.keys
    }

    /// The checkpoint being cosigned, if any.
    pub fn pending_checkpoint(&self) -> Option<&Cosigned> {
        self.audit_checkpoints.pending.as_ref()
    }

    /// The last checkpoint a quorum of note keys signed, if any.
    pub fn published_checkpoint(&self) -> Option<&Cosigned> {
        self.audit_checkpoints.published.as_ref()
    }

    /// The origin line of this cluster's audit log ([`merkle::origin`]).
    pub fn audit_origin(&self) -> String {
        merkle::origin(self.audit_leaf_hash(0).as_ref())
    }

    /// The checkpoint body of the tree's first `size` leaves, which a note key signs.
    pub fn checkpoint_body_at(&self, size: u64) -> Result<String, merkle::ProofError> {
        Ok(merkle::checkpoint_body(&self.audit_origin(), size, &self.audit_tree_root_at(size)?))
    }

    /// The verifier key (C2SP `name+hash+key`) of every registered note key, by node id.
    pub fn note_verifier_keys(&self) -> Vec<String> {
        let origin = self.audit_origin();
        let keys = &self.audit_checkpoints.keys;
        keys.iter().map(|(node_id, key)| note::verifier_key(&note_key_name(&origin, *node_id), key)).collect()
    }

    /// The last published checkpoint as a C2SP signed note: its body and
    /// one signature line per node that signed it.
    pub fn signed_checkpoint(&self) -> Option<String> {
        let published = self.audit_checkpoints.published.as_ref()?;
        let origin = self.audit_origin();
        let body = self.checkpoint_body_at(published.size).expect("a published checkpoint is of the tree");
        let signatures: Vec<note::NoteSignature> = published
            .signatures
            .iter()
            .map(|(node_id, signed)| {
                let name = note_key_name(&origin, *node_id);
                let id = note::key_id(&name, &signed.public_key);
                note::NoteSignature { id, name, signature: signed.signature.clone() }
            })
            .collect();
        Some(note::signed_note(&body, &signatures))
    }

    /// Whether node `node_id`'s registered note key is `public_key`.
    pub fn has_note_key(&self, node_id: u64, public_key: &[u8]) -> bool {
        self.audit_checkpoints.keys.get(&node_id).is_some_and(|key| key == public_key)
    }
}
