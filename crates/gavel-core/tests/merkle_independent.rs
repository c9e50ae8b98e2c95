//! Our RFC 6962 tree against an independent implementation, the `ct-merkle`
//! crate: for seeded random trees up to 100,000 leaves, the roots are equal,
//! our inclusion and consistency proofs are byte for byte ct-merkle's, and
//! ct-merkle's verifier accepts ours (and refuses a bent one).

use ct_merkle::mem_backed_tree::MemoryBackedTree;
use ct_merkle::{ConsistencyProof, InclusionProof, RootHash};
use gavel_core::merkle::{self, Hash, MemoryTree};
use sha2_for_ct_merkle::Sha256;

/// A small seeded generator (xorshift64*): the same trees on every run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }
}

fn flat(proof: &[Hash]) -> Vec<u8> {
    proof.iter().flatten().copied().collect()
}

/// Builds both trees over `size` random leaves and checks `probes` random
/// inclusion and consistency proofs in each direction.
fn check_tree(random: &mut Seeded, size: u64, probes: usize) {
    let mut theirs: MemoryBackedTree<Sha256, Vec<u8>> = MemoryBackedTree::new();
    let mut ours = MemoryTree::new();
    let mut leaves = Vec::with_capacity(size as usize);
    for _ in 0..size {
        let bytes = random.next().to_le_bytes()[..random.between(1, 8) as usize].to_vec();
        ours.push(merkle::leaf_hash(&bytes));
        theirs.push(bytes.clone());
        leaves.push(bytes);
    }
    let their_root = theirs.root();
    assert_eq!(their_root.as_bytes().as_slice(), ours.root_at(size).as_slice(), "root of {size} leaves");

    for _ in 0..probes {
        let index = random.between(0, size - 1);
        let proof = merkle::inclusion_proof(&ours, index, size).expect("in range");
        let theirs_proof = theirs.prove_inclusion(index as usize);
        assert_eq!(flat(&proof), theirs_proof.as_bytes(), "inclusion of {index} in {size}");
        let decoded = InclusionProof::<Sha256>::from_bytes(flat(&proof));
        assert!(their_root.verify_inclusion(&leaves[index as usize], index, &decoded).is_ok());
        assert!(their_root.verify_inclusion(&b"another event".to_vec(), index, &decoded).is_err());
        assert_eq!(
            merkle::verify_inclusion(
                &merkle::leaf_hash(&leaves[index as usize]),
                index,
                size,
                &proof,
                &ours.root_at(size)
            ),
            Ok(())
        );
    }

    // Consistency: every old size is a prefix of this tree; ct-merkle proves
    // from the full tree by the number of leaves added since.
    for _ in 0..probes {
        let old = random.between(1, size);
        let proof = merkle::consistency_proof(&ours, old, size).expect("ordered");
        let additions = (size - old) as usize;
        if additions < size as usize {
            let theirs_proof = theirs.prove_consistency(additions);
            assert_eq!(flat(&proof), theirs_proof.as_bytes(), "consistency {old} -> {size}");
        }
        let old_root = RootHash::<Sha256>::new(ours.root_at(old).into(), old);
        let decoded = ConsistencyProof::<Sha256>::try_from_bytes(flat(&proof)).expect("whole hashes");
        assert!(their_root.verify_consistency(&old_root, &decoded).is_ok(), "ct-merkle accepts {old} -> {size}");
        assert_eq!(merkle::verify_consistency(old, size, &ours.root_at(old), &ours.root_at(size), &proof), Ok(()));
        if !proof.is_empty() {
            let mut bent = proof.clone();
            let last = bent.len() - 1;
            bent[last][0] ^= 1;
            let decoded = ConsistencyProof::<Sha256>::try_from_bytes(flat(&bent)).expect("whole hashes");
            assert!(their_root.verify_consistency(&old_root, &decoded).is_err());
            assert!(merkle::verify_consistency(old, size, &ours.root_at(old), &ours.root_at(size), &bent).is_err());
        }
    }
}

#[test]
fn proofs_of_random_small_trees_match_ct_merkle() {
    let mut random = Seeded(0x9E37_79B9_7F4A_7C15);
    for _ in 0..60 {
        let size = random.between(1, 600);
        check_tree(&mut random, size, 20);
    }
}

#[test]
fn proofs_of_a_random_tree_of_100_000_leaves_match_ct_merkle() {
    let mut random = Seeded(0xD1B5_4A32_D192_ED03);
    check_tree(&mut random, 100_000, 100);
}
