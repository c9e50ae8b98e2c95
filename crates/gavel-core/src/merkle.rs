//! The RFC 6962 (RFC 9162 §2.1) Merkle tree over the audit trail: leaf and
//! node hashing, the compact frontier the state machine keeps, and the
//! generation and verification of inclusion and consistency proofs.
//!
//! Everything here is pure: a proof is generated from a [`NodeSource`], which
//! answers the hash of any complete subtree (the state machine's tiles in
//! cold records, [`crate::audit_tree`], or a [`MemoryTree`] built by an
//! offline verifier), and verified from hashes alone.
//!
//! Leaf `i` of the tree is the event at cursor `i + 1`; its hash is
//! `SHA-256(0x00 ‖ canonical bytes)` where the canonical bytes are those of
//! [`event_canonical_bytes`]. An interior node is `SHA-256(0x01 ‖ left ‖ right)`.
//! The root of the empty tree is `SHA-256("")`.

use sha2::{Digest, Sha256};

use crate::audit::Event;

/// A SHA-256 hash: of a leaf, a node or a tree.
pub type Hash = [u8; 32];

/// Why a proof could not be generated or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// A leaf index at or past the tree size was asked about.
    #[error("leaf index {index} is not in a tree of size {size}")]
    IndexOutOfRange {
        /// The index asked about.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// A consistency proof between sizes that are not `old <= new` was asked about.
    #[error("tree size {old} is not at most tree size {new}")]
    SizesOutOfOrder {
        /// The older size.
        old: u64,
        /// The newer size.
        new: u64,
    },
    /// A proof was asked about a size the tree has not reached.
    #[error("tree size {size} is past the tree's size {current}")]
    SizeNotReached {
        /// The size asked about.
        size: u64,
        /// The tree's size now.
        current: u64,
    },
    /// The proof has the wrong number of hashes for the sizes it is about.
    #[error("the proof has the wrong number of hashes")]
    WrongLength,
    /// The hashes recomputed from the proof are not the roots claimed.
    #[error("the proof does not lead to the claimed root")]
    RootMismatch,
}

/// The hash of a leaf: `SHA-256(0x00 ‖ bytes)`.
pub fn leaf_hash(bytes: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0u8]);
    hasher.update(bytes);
    hasher.finalize().into()
}

/// The hash of an interior node: `SHA-256(0x01 ‖ left ‖ right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([1u8]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// The root of the empty tree: `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The canonical bytes of an event, the bytes its leaf hash is taken over:
/// the event's JSON (serde's form of [`Event`]) with every object's members
/// sorted by key (byte order), no whitespace, integers in decimal, strings
/// escaped as `JSON.stringify` does. That is the RFC 8785 (JCS) form of the
/// event whenever its keys are ASCII (every key but an application event's
/// attribute names, which JCS orders by UTF-16 units) and its integers are
/// at most 2^53 (JCS refuses larger ones; they are written exactly here).
/// The export and every proof carry these bytes, so a verifier hashes the
/// string it is given. The form is what `serde_json` writes for the event's
/// `serde_json::Value` (whose maps order their keys); it is written without
/// building that value (`sorted_json`). `event_canonical_bytes_are_stable`
/// pins the form.
pub fn event_canonical_bytes(event: &Event) -> Vec<u8> {
    crate::sorted_json::to_vec(event).expect("events serialize to JSON: every key is a string, every field plain data")
}

/// The leaf hash of an event ([`event_canonical_bytes`]).
pub fn event_leaf_hash(event: &Event) -> Hash {
    leaf_hash(&event_canonical_bytes(event))
}

/// The body of a C2SP `tlog-checkpoint` for a tree: the origin line, the
/// size in decimal and the root in standard base64, each ending in a newline.
pub fn checkpoint_body(origin: &str, size: u64, root: &Hash) -> String {
    use base64::Engine as _;
    format!("{origin}\n{size}\n{}\n", base64::engine::general_purpose::STANDARD.encode(root))
}

/// The origin line of a Gavel cluster's audit log: `gavel-audit/` and the
/// first 16 hex digits of the hash of its first event, which no other
/// cluster shares (a cluster's first event names its bootstrap and its
/// time); `gavel-audit/empty` before any event.
pub fn origin(first_leaf: Option<&Hash>) -> String {
    match first_leaf {
        Some(leaf) => format!("gavel-audit/{}", hex::encode(&leaf[..8])),
        None => "gavel-audit/empty".to_string(),
    }
}

/// The largest power of two strictly below `n` (`n >= 2`).
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// The compact frontier of a tree: the roots of its maximal complete
/// subtrees, largest (leftmost) first, one per bit set in its size. It is
/// all an append needs, and its root is the tree's: O(log n) hashes.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frontier {
    size: u64,
    hashes: Vec<Hash>,
}

impl Frontier {
    /// The frontier of the empty tree.
    pub fn new() -> Frontier {
        Frontier::default()
    }

    /// How many leaves the tree has.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Appends a leaf hash. `completed` is told each complete subtree the
    /// append finished, as `(height, index at that height, hash)`, from the
    /// leaf itself (height 0) upwards.
    pub fn push(&mut self, leaf: Hash, mut completed: impl FnMut(u32, u64, &Hash)) {
        let mut carry = leaf;
        let mut height = 0;
        let mut index = self.size;
        completed(0, index, &carry);
        while index & 1 == 1 {
            let left = self.hashes.pop().expect("a set bit of the size has its subtree in the frontier");
            carry = node_hash(&left, &carry);
            height += 1;
            index >>= 1;
            completed(height, index, &carry);
        }
        self.hashes.push(carry);
        self.size += 1;
    }

    /// The tree's root.
    pub fn root(&self) -> Hash {
        let mut hashes = self.hashes.iter().rev();
        let Some(last) = hashes.next() else { return empty_root() };
        hashes.fold(*last, |right, left| node_hash(left, &right))
    }
}

/// Answers the hash of a complete subtree: the node at `height` (0 for a
/// leaf) and `index` (counted from the left at that height). Only nodes of a
/// tree already grown past them are asked for.
pub trait NodeSource {
    /// The hash of the complete subtree over leaves `index << height ..
    /// (index + 1) << height`.
    fn node(&self, height: u32, index: u64) -> Hash;
}

/// `MTH(D[start..start + len])`, for a range the RFC's recursion produces
/// (`start` is a multiple of the largest power of two not above `len`).
fn subtree_root(source: &impl NodeSource, start: u64, len: u64) -> Hash {
    if len.is_power_of_two() {
        let height = len.trailing_zeros();
        return source.node(height, start >> height);
    }
    let k = split_point(len);
    node_hash(&subtree_root(source, start, k), &subtree_root(source, start + k, len - k))
}

/// The root of the tree's first `size` leaves.
pub fn root_at(source: &impl NodeSource, size: u64) -> Hash {
    if size == 0 {
        return empty_root();
    }
    subtree_root(source, 0, size)
}

/// The inclusion proof (audit path) of leaf `index` in the tree's first
/// `size` leaves (RFC 9162 §2.1.3.1), nearest sibling first.
pub fn inclusion_proof(source: &impl NodeSource, index: u64, size: u64) -> Result<Vec<Hash>, ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let mut path = Vec::new();
    inclusion_path(source, index, 0, size, &mut path);
    Ok(path)
}

/// `PATH(m, D[start..start + n])`, appended to `path` deepest first.
fn inclusion_path(source: &impl NodeSource, m: u64, start: u64, n: u64, path: &mut Vec<Hash>) {
    if n <= 1 {
        return;
    }
    let k = split_point(n);
    if m < k {
        inclusion_path(source, m, start, k, path);
        path.push(subtree_root(source, start + k, n - k));
    } else {
        inclusion_path(source, m - k, start + k, n - k, path);
        path.push(subtree_root(source, start, k));
    }
}

/// The consistency proof between the tree's first `old` and first `new`
/// leaves (RFC 9162 §2.1.4.1). Empty when `old` is 0 or equals `new`.
pub fn consistency_proof(source: &impl NodeSource, old: u64, new: u64) -> Result<Vec<Hash>, ProofError> {
    if old > new {
        return Err(ProofError::SizesOutOfOrder { old, new });
    }
    let mut proof = Vec::new();
    if old > 0 {
        consistency_subproof(source, old, 0, new, true, &mut proof);
    }
    Ok(proof)
}

/// `SUBPROOF(m, D[start..start + n], b)`, appended to `proof`.
fn consistency_subproof(source: &impl NodeSource, m: u64, start: u64, n: u64, whole: bool, proof: &mut Vec<Hash>) {
    if m == n {
        if !whole {
            proof.push(subtree_root(source, start, n));
        }
        return;
    }
    let k = split_point(n);
    if m <= k {
        consistency_subproof(source, m, start, k, whole, proof);
        proof.push(subtree_root(source, start + k, n - k));
    } else {
        consistency_subproof(source, m - k, start + k, n - k, false, proof);
        proof.push(subtree_root(source, start, k));
    }
}

/// Walks a proof path up the tree from node `fn_` of a tree whose last node
/// at the same height is `sn` (RFC 9162's loop, shared by both checks):
/// `step` gets each hash with true when it is a left sibling. Fails when the
/// path is longer or shorter than the walk to the root.
fn walk_path(mut fn_: u64, mut sn: u64, path: &[Hash], mut step: impl FnMut(&Hash, bool)) -> Result<(), ProofError> {
    for hash in path {
        if sn == 0 {
            return Err(ProofError::WrongLength);
        }
        let left_sibling = fn_ & 1 == 1 || fn_ == sn;
        step(hash, left_sibling);
        if left_sibling {
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(ProofError::WrongLength);
    }
    Ok(())
}

/// Checks that `leaf` is leaf `index` of the tree of `size` leaves whose
/// root is `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(leaf: &Hash, index: u64, size: u64, proof: &[Hash], root: &Hash) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::IndexOutOfRange { index, size });
    }
    let mut hash = *leaf;
    walk_path(index, size - 1, proof, |sibling, left| {
        hash = if left { node_hash(sibling, &hash) } else { node_hash(&hash, sibling) };
    })?;
    if hash != *root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// Checks that the tree of `old` leaves with root `old_root` is a prefix of
/// the tree of `new` leaves with root `new_root` (RFC 9162 §2.1.4.2). The
/// empty tree is a prefix of every tree (with an empty proof).
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old > new {
        return Err(ProofError::SizesOutOfOrder { old, new });
    }
    if old == 0 || old == new {
        if !proof.is_empty() {
            return Err(ProofError::WrongLength);
        }
        let expected_old = if old == 0 { empty_root() } else { *new_root };
        if *old_root != expected_old {
            return Err(ProofError::RootMismatch);
        }
        return Ok(());
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else { return Err(ProofError::WrongLength) };
    let mut fn_ = old - 1;
    let mut sn = new - 1;
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let mut old_hash = *first;
    let mut new_hash = *first;
    walk_path(fn_, sn, rest, |node, left| {
        if left {
            old_hash = node_hash(node, &old_hash);
            new_hash = node_hash(node, &new_hash);
        } else {
            new_hash = node_hash(&new_hash, node);
        }
    })?;
    if old_hash != *old_root || new_hash != *new_root {
        return Err(ProofError::RootMismatch);
    }
    Ok(())
}

/// A whole tree in memory, every level kept: what an offline verifier builds
/// from an exported file, and the reference the tests compare against.
#[derive(Debug, Clone, Default)]
pub struct MemoryTree {
    /// `levels[h][i]` is the node at height `h`, index `i`; complete nodes only.
    levels: Vec<Vec<Hash>>,
}

impl MemoryTree {
    /// The empty tree.
    pub fn new() -> MemoryTree {
        MemoryTree::default()
    }

    /// How many leaves the tree has.
    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |leaves| leaves.len() as u64)
    }

    /// Appends a leaf hash, completing the nodes it finishes.
    pub fn push(&mut self, leaf: Hash) {
        let mut height = 0;
        let mut hash = leaf;
        loop {
            if self.levels.len() == height {
                self.levels.push(Vec::new());
            }
            self.levels[height].push(hash);
            let level = &self.levels[height];
            if level.len() % 2 == 1 {
                break;
            }
            hash = node_hash(&level[level.len() - 2], &level[level.len() - 1]);
            height += 1;
        }
    }

    /// The leaf hash at `index`, if the tree has it.
    pub fn leaf(&self, index: u64) -> Option<Hash> {
        self.levels.first()?.get(usize::try_from(index).ok()?).copied()
    }

    /// The root of the first `size` leaves.
    pub fn root_at(&self, size: u64) -> Hash {
        root_at(self, size)
    }
}

impl NodeSource for MemoryTree {
    fn node(&self, height: u32, index: u64) -> Hash {
        self.levels[height as usize][usize::try_from(index).expect("indices of a tree in memory fit usize")]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(count: u64) -> Vec<Hash> {
        (0..count).map(|i| leaf_hash(&i.to_be_bytes())).collect()
    }

    /// `MTH` straight from RFC 6962's definition, over a slice.
    fn reference_root(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = split_point(n as u64) as usize;
                node_hash(&reference_root(&leaves[..k]), &reference_root(&leaves[k..]))
            }
        }
    }

    #[test]
    fn frontier_and_memory_tree_roots_equal_the_definitions_root_at_every_size() {
        let all = leaves(70);
        let mut frontier = Frontier::new();
        let mut tree = MemoryTree::new();
        assert_eq!(frontier.root(), empty_root());
        for (i, leaf) in all.iter().enumerate() {
            frontier.push(*leaf, |_, _, _| {});
            tree.push(*leaf);
            let expected = reference_root(&all[..=i]);
            assert_eq!(frontier.root(), expected, "frontier at size {}", i + 1);
            assert_eq!(tree.root_at(i as u64 + 1), expected, "tree at size {}", i + 1);
        }
        for size in 0..=70 {
            assert_eq!(tree.root_at(size), reference_root(&all[..size as usize]));
        }
    }

    #[test]
    fn every_inclusion_and_consistency_proof_of_small_trees_verifies_and_a_changed_one_does_not() {
        let all = leaves(33);
        let mut tree = MemoryTree::new();
        all.iter().for_each(|leaf| tree.push(*leaf));
        for size in 1..=33u64 {
            let root = tree.root_at(size);
            for index in 0..size {
                let proof = inclusion_proof(&tree, index, size).expect("in range");
                assert_eq!(verify_inclusion(&all[index as usize], index, size, &proof, &root), Ok(()));
                let wrong_leaf = leaf_hash(b"not a leaf");
                assert_eq!(verify_inclusion(&wrong_leaf, index, size, &proof, &root), Err(ProofError::RootMismatch));
                if let Some(first) = proof.first() {
                    let mut bent = proof.clone();
                    bent[0] = node_hash(first, first);
                    assert!(verify_inclusion(&all[index as usize], index, size, &bent, &root).is_err());
                }
            }
            for old in 0..=size {
                let proof = consistency_proof(&tree, old, size).expect("ordered");
                let old_root = tree.root_at(old);
                assert_eq!(verify_consistency(old, size, &old_root, &root, &proof), Ok(()), "{old} -> {size}");
                if old > 0 && old < size {
                    let forked = leaf_hash(b"fork");
                    assert!(verify_consistency(old, size, &forked, &root, &proof).is_err());
                }
            }
        }
    }

    #[test]
    fn event_canonical_bytes_are_stable() {
        let event = Event {
            cursor: 7,
            kind: crate::audit::EventKind::Started { attempt: 1, lease_id: 42, worker_id: "w-1".into() },
            timestamp_ms: 1_760_000_000_000,
            actor: crate::model::Actor::new("alice", crate::model::ActorKind::User),
            execution_id: Some("exe-1".into()),
            capability_id: Some("docs.read".into()),
            approval_id: None,
            correlation_id: Some("c\u{1f}\"é".into()),
            input_hash: None,
            principal: None,
        };
        let canonical = String::from_utf8(event_canonical_bytes(&event)).expect("UTF-8");
        let expected = concat!(
            r#"{"actor":{"attributes":{},"display_name":null,"id":"alice","kind":"User"},"approval_id":null,"#,
            r#""capability_id":"docs.read","correlation_id":"c\u001f\"é","cursor":7,"execution_id":"exe-1","#,
            r#""input_hash":null,"kind":{"Started":{"attempt":1,"lease_id":42,"worker_id":"w-1"}},"#,
            r#""principal":null,"timestamp_ms":1760000000000}"#
        );
        assert_eq!(canonical, expected);
        // With ASCII keys and small integers, the RFC 8785 form.
        let json = serde_json::to_string(&event).expect("JSON");
        assert_eq!(crate::canonical_json::canonicalize(&json).expect("JCS"), canonical);
    }

    #[test]
    fn out_of_range_requests_are_errors_not_panics() {
        let mut tree = MemoryTree::new();
        leaves(5).iter().for_each(|leaf| tree.push(*leaf));
        assert_eq!(inclusion_proof(&tree, 5, 5), Err(ProofError::IndexOutOfRange { index: 5, size: 5 }));
        assert_eq!(consistency_proof(&tree, 4, 3), Err(ProofError::SizesOutOfOrder { old: 4, new: 3 }));
        let root = tree.root_at(5);
        assert_eq!(verify_inclusion(&root, 9, 5, &[], &root), Err(ProofError::IndexOutOfRange { index: 9, size: 5 }));
        assert_eq!(verify_inclusion(&root, 0, 5, &[], &root), Err(ProofError::WrongLength));
        assert_eq!(verify_consistency(2, 5, &root, &root, &[]), Err(ProofError::WrongLength));
    }
}
