//! Cosigned audit checkpoints: each node's Ed25519 note key (registered by
//! a replicated `RegisterNoteKey`) and the checkpoint the nodes are
//! cosigning (`CosignCheckpoint`), published once a quorum of the
//! registered keys has signed the same size.
//!
//! The checkpoint body is a C2SP `tlog-checkpoint` of the tree's first
//! `size` leaves ([`crate::merkle::checkpoint_body`]). A node signs the body
//! it computes from its own replica's tree, so its signature is its check of
//! the tree: a C2SP `tlog-cosignature/v1` named `<origin>/node-N`. The node
//! that starts a checkpoint (the leader) also signs the body as the log,
//! plainly, under the origin's name (docs/decisions/0099). Cosignatures of
//! external witnesses (C2SP `tlog-witness`) are added to the published
//! checkpoint by the leader (docs/decisions/0100). The state stores signatures as they
//! come and does not verify them (the core has no signature code); an
//! auditor verifies them offline against the listed keys. The leader starts
//! a checkpoint by cosigning a size past the one being cosigned; the others
//! cosign the size in the state when their tree reaches it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::Reply;
use crate::error::{DomainError, ErrorCode};
use crate::limits::{NOTE_KEYS_MAX, WITNESS_COSIGNATURES_MAX};
use crate::merkle;
use crate::note::{self, KeyKind};
use crate::State;

/// A checkpoint with the signatures it has, by node id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Cosigned {
    /// Its tree size.
    pub size: u64,
    /// `tlog-cosignature/v1` signatures of its body, by node id, each with
    /// the public key it was made with (a node restored from a backup has a
    /// new key: the checkpoints its old key signed still name the old one).
    pub signatures: BTreeMap<u64, NodeSignature>,
    /// The log's signature under the origin's name: the plain Ed25519
    /// signature of the node that started it, with that node's key.
    pub log_signature: Option<LogSignature>,
    /// External witnesses' cosignatures, by key name: the signature line's
    /// bytes (key id, timestamp, signature), as the witness answered them.
    pub witness_signatures: BTreeMap<String, Vec<u8>>,
}

/// One node's cosignature of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSignature {
    /// The node's note key when it signed.
    pub public_key: Vec<u8>,
    /// The cosignature's timestamp (POSIX seconds).
    pub timestamp_s: u64,
    /// The Ed25519 signature over the `cosignature/v1` message of the body.
    pub signature: Vec<u8>,
}

/// The log's signature of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogSignature {
    /// The node that made it.
    pub node_id: u64,
    /// Its note key when it signed.
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
        timestamp_s: u64,
        signature: &[u8],
        log_signature: Option<&[u8]>,
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
            checkpoints.pending = Some(Cosigned { size, ..Cosigned::default() });
        }
        let pending = checkpoints.pending.as_mut().expect("a pending checkpoint of this size");
        if let (None, Some(log_signature)) = (&pending.log_signature, log_signature) {
            pending.log_signature =
                Some(LogSignature { node_id, public_key: public_key.clone(), signature: log_signature.to_vec() });
        }
        pending.signatures.insert(node_id, NodeSignature { public_key, timestamp_s, signature: signature.to_vec() });
        let quorum = checkpoints.keys.len() / 2 + 1;
        if pending.signatures.len() < quorum {
            return Ok(Reply::Cosigned { size, published: false });
        }
        checkpoints.published = checkpoints.pending.take();
        Ok(Reply::Cosigned { size, published: true })
    }

    /// `AddWitnessCosignature`: keeps a witness's cosignature of the
    /// published checkpoint (the leader verified it). One for another size
    /// (the checkpoint was superseded meanwhile), or past
    /// [`WITNESS_COSIGNATURES_MAX`] witnesses, changes nothing.
    pub(super) fn add_witness_cosignature(
        &mut self,
        size: u64,
        witness: &str,
        signature: &[u8],
    ) -> Result<Reply, DomainError> {
        if let Some(published) = self.audit_checkpoints.published.as_mut().filter(|published| published.size == size) {
            let signatures = &mut published.witness_signatures;
            if signatures.contains_key(witness) || signatures.len() < WITNESS_COSIGNATURES_MAX {
                signatures.insert(witness.to_string(), signature.to_vec());
            }
        }
        Ok(Reply::Cosigned { size, published: false })
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

    /// The verifier keys (C2SP `name+hash+key`) of every registered note
    /// key: first each as a log key (plain Ed25519, named as the origin),
    /// then each as its node's cosigner key (type 0x04, `<origin>/node-N`).
    pub fn note_verifier_keys(&self) -> Vec<String> {
        let origin = self.audit_origin();
        let keys = &self.audit_checkpoints.keys;
        let as_log = keys.values().map(|key| note::verifier_key_of(KeyKind::Ed25519, &origin, key));
        let as_cosigner = keys
            .iter()
            .map(|(node_id, key)| note::verifier_key_of(KeyKind::Cosignature, &note_key_name(&origin, *node_id), key));
        as_log.chain(as_cosigner).collect()
    }

    /// The last published checkpoint as a C2SP signed note: its body, the
    /// log's signature under the origin's name, one `tlog-cosignature/v1`
    /// line per node that cosigned it, and the witnesses' cosignatures.
    pub fn signed_checkpoint(&self) -> Option<String> {
        let published = self.audit_checkpoints.published.as_ref()?;
        let origin = self.audit_origin();
        let body = self.checkpoint_body_at(published.size).expect("a published checkpoint is of the tree");
        let by_log = published.log_signature.iter().map(|signed| note::NoteSignature {
            id: note::key_id_of(KeyKind::Ed25519, &origin, &signed.public_key),
            name: origin.clone(),
            signature: signed.signature.clone(),
        });
        let by_nodes = published.signatures.iter().map(|(node_id, signed)| {
            let name = note_key_name(&origin, *node_id);
            let id = note::key_id_of(KeyKind::Cosignature, &name, &signed.public_key);
            note::NoteSignature {
                id,
                name,
                signature: note::timestamped_signature(signed.timestamp_s, &signed.signature),
            }
        });
        let by_witnesses = published.witness_signatures.iter().map(|(name, bytes)| note::NoteSignature {
            name: name.clone(),
            id: bytes[..4].try_into().expect("a witness cosignature starts with its 4-byte key id"),
            signature: bytes[4..].to_vec(),
        });
        let signatures: Vec<note::NoteSignature> = by_log.chain(by_nodes).chain(by_witnesses).collect();
        Some(note::signed_note(&body, &signatures))
    }

    /// Whether node `node_id`'s registered note key is `public_key`.
    pub fn has_note_key(&self, node_id: u64, public_key: &[u8]) -> bool {
        self.audit_checkpoints.keys.get(&node_id).is_some_and(|key| key == public_key)
    }
}
