//! Witnesses of the audit log, without IO or signature arithmetic: the
//! C2SP `tlog-policy` file that says which log keys and how many of which
//! witnesses a checkpoint needs ([`Policy`]), and both sides of the C2SP
//! `tlog-witness` `add-checkpoint` call: the request a log sends
//! ([`add_checkpoint_request`]) and the witness's decision
//! ([`WitnessLogs::add_checkpoint`]), which the `gavel witness` command
//! serves over HTTP with its own key and persisted state.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::audit_export::parse_checkpoint_body;
use crate::merkle::{self, Hash};
use crate::note::{self, KeyKind, VerifierKey};

/// Most consistency proof lines an `add-checkpoint` request may carry (C2SP).
pub const PROOF_LINES_MAX: usize = 63;

/// A C2SP `tlog-policy`: the log keys (a checkpoint must carry a verified
/// signature of one of them, when any is listed), the witnesses with their
/// optional submission URL, and the quorum of witnesses a checkpoint needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `log <vkey> [<url>]` lines.
    pub logs: Vec<VerifierKey>,
    /// `witness <name> <vkey> [<url>]` lines, in file order.
    pub witnesses: Vec<PolicyWitness>,
    /// Groups by name: a threshold and members (witness or group names).
    groups: BTreeMap<String, (usize, Vec<String>)>,
    /// The `quorum` line's name (`none`: no cosignature needed).
    quorum: String,
}

/// One witness of a policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyWitness {
    /// Its name in the policy file.
    pub name: String,
    /// Its cosignature key (type 0x04).
    pub key: VerifierKey,
    /// Its submission prefix, if given.
    pub url: Option<String>,
}

impl Policy {
    /// Parses a policy file (C2SP `tlog-policy`: `log`, `witness`, `group`
    /// and exactly one `quorum` line; `#` comments and blank lines ignored).
    pub fn parse(text: &str) -> Result<Policy, String> {
        let mut policy =
            Policy { logs: Vec::new(), witnesses: Vec::new(), groups: BTreeMap::new(), quorum: String::new() };
        let mut quorum = None;
        for (number, line) in text.lines().enumerate().map(|(at, line)| (at + 1, line.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split([' ', '\t']).filter(|word| !word.is_empty()).collect();
            let problem = |what: &str| format!("policy line {number}: {what}");
            match words.as_slice() {
                ["log", vkey] | ["log", vkey, _] => {
                    let key = note::parse_verifier_key(vkey).map_err(|error| problem(&error))?;
                    if key.kind != KeyKind::Ed25519 {
                        return Err(problem("a log key is a plain Ed25519 note key (type 0x01)"));
                    }
                    if policy.logs.iter().any(|known| known.public_key == key.public_key) {
                        return Err(problem("a duplicate log key"));
                    }
                    policy.logs.push(key);
                }
                ["witness", name, vkey, rest @ ..] if rest.len() <= 1 => {
                    let key = note::parse_verifier_key(vkey).map_err(|error| problem(&error))?;
                    if key.kind != KeyKind::Cosignature {
                        return Err(problem("a witness key is a tlog-cosignature/v1 key (type 0x04)"));
                    }
                    if policy.is_defined(name) {
                        return Err(problem(&format!("{name} is defined twice")));
                    }
                    if policy.witnesses.iter().any(|known| known.key.public_key == key.public_key) {
                        return Err(problem("a duplicate witness key"));
                    }
                    let url = rest.first().map(|url| url.trim_end_matches('/').to_string());
                    policy.witnesses.push(PolicyWitness { name: name.to_string(), key, url });
                }
                ["group", name, threshold, members @ ..] if !members.is_empty() => {
                    if policy.is_defined(name) {
                        return Err(problem(&format!("{name} is defined twice")));
                    }
                    let mut seen: Vec<String> = Vec::new();
                    for member in members {
                        if !policy.is_defined(member) {
                            return Err(problem(&format!("{member} is not defined on an earlier line")));
                        }
                        if seen.iter().any(|known| known == member) {
                            return Err(problem(&format!("{member} is listed twice")));
                        }
                        seen.push(member.to_string());
                    }
                    let threshold = match *threshold {
                        "all" => seen.len(),
                        "any" => 1,
                        k => k.parse::<usize>().ok().filter(|k| (1..=seen.len()).contains(k)).ok_or_else(|| {
                            problem(&format!("the threshold is all, any or 1 to {} (its members)", seen.len()))
                        })?,
                    };
                    policy.groups.insert(name.to_string(), (threshold, seen));
                }
                ["quorum", name] => {
                    if quorum.is_some() {
                        return Err(problem("a policy has one quorum line"));
                    }
                    if *name != "none" && !policy.is_defined(name) {
                        return Err(problem(&format!("{name} is not defined on an earlier line")));
                    }
                    quorum = Some(name.to_string());
                }
                _ => return Err(problem("not a log, witness, group or quorum line")),
            }
        }
        policy.quorum = quorum.ok_or("the policy has no quorum line")?;
        Ok(policy)
    }

    fn is_defined(&self, name: &str) -> bool {
        self.groups.contains_key(name) || self.witnesses.iter().any(|witness| witness.name == name)
    }

    /// Whether `name` (a witness or group) witnessed, given the witnesses that cosigned.
    fn witnessed(&self, name: &str, cosigned: &[&str]) -> bool {
        match self.groups.get(name) {
            Some((threshold, members)) => {
                members.iter().filter(|member| self.witnessed(member, cosigned)).count() >= *threshold
            }
            None => name == "none" || cosigned.contains(&name),
        }
    }

    /// Checks a checkpoint's signed note against the policy: a verified
    /// signature by one of the log keys (when the policy lists any) and
    /// verified cosignatures by witnesses that meet the quorum.
    /// `verify(public key, message, signature)` is the Ed25519 check.
    pub fn check(&self, checkpoint: &str, verify: impl Fn(&[u8], &[u8], &[u8]) -> bool) -> Result<(), String> {
        let witness_keys: Vec<VerifierKey> = self.witnesses.iter().map(|witness| witness.key.clone()).collect();
        let mut keys = self.logs.clone();
        keys.extend(witness_keys);
        let (text, signers) = note::verified_signers(checkpoint, &keys, verify)?;
        if !self.logs.is_empty() {
            let origin = text.lines().next().unwrap_or_default();
            let by_log = signers.iter().any(|key| key.kind == KeyKind::Ed25519 && key.name == origin);
            if !by_log {
                return Err(format!("no log key of the policy signed the checkpoint under its origin {origin}"));
            }
        }
        let cosigned: Vec<&str> = self
            .witnesses
            .iter()
            .filter(|witness| signers.iter().any(|key| key.kind == KeyKind::Cosignature && **key == witness.key))
            .map(|witness| witness.name.as_str())
            .collect();
        if !self.witnessed(&self.quorum, &cosigned) {
            return Err(format!(
                "the witnesses that cosigned it ({}) do not meet the policy's quorum {}",
                if cosigned.is_empty() { "none".to_string() } else { cosigned.join(", ") },
                self.quorum
            ));
        }
        Ok(())
    }
}

/// The body of an `add-checkpoint` request: `old N`, the consistency proof
/// from size N in base64 a line, a blank line, then the signed checkpoint.
pub fn add_checkpoint_request(old_size: u64, proof: &[Hash], checkpoint: &str) -> String {
    let mut body = format!("old {old_size}\n");
    for hash in proof {
        body.push_str(&STANDARD.encode(hash));
        body.push('\n');
    }
    body.push('\n');
    body.push_str(checkpoint);
    body
}

/// An `add-checkpoint` request read back: the old size, the proof and the checkpoint note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpoint {
    /// The size of the checkpoint the log believes the witness holds.
    pub old_size: u64,
    /// The consistency proof from `old_size`.
    pub proof: Vec<Hash>,
    /// The signed checkpoint.
    pub checkpoint: String,
}

/// Parses an `add-checkpoint` request body.
pub fn parse_add_checkpoint(body: &str) -> Result<AddCheckpoint, String> {
    let (head, checkpoint) = body.split_once("\n\n").ok_or("no blank line before the checkpoint")?;
    let mut lines = head.split('\n');
    let old = lines.next().and_then(|line| line.strip_prefix("old ")).ok_or("the first line is not \"old N\"")?;
    if old.len() > 1 && old.starts_with('0') {
        return Err("the old size has a leading zero".to_string());
    }
    let old_size = old.parse::<u64>().map_err(|_| "the old size is not a decimal number")?;
    let proof = lines
        .map(|line| {
            STANDARD
                .decode(line)
                .ok()
                .and_then(|bytes| Hash::try_from(bytes).ok())
                .ok_or_else(|| format!("{line:?} is not a base64 hash"))
        })
        .collect::<Result<Vec<Hash>, String>>()?;
    if proof.len() > PROOF_LINES_MAX {
        return Err(format!("more than {PROOF_LINES_MAX} proof lines"));
    }
    Ok(AddCheckpoint { old_size, proof, checkpoint: checkpoint.to_string() })
}

/// What a witness answers to `add-checkpoint`, by the spec's HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WitnessAnswer {
    /// 200: cosign this checkpoint body (the caller signs and answers the
    /// signature line), after recording it as the origin's latest.
    Cosign {
        /// The checkpoint's text (body) to cosign.
        body: String,
    },
    /// 400: a malformed request (or an old size past the checkpoint's).
    BadRequest(String),
    /// 403: no verified signature by a log key of the origin, or one that fails.
    Forbidden(String),
    /// 404: the witness knows no log of this origin.
    UnknownLog(String),
    /// 409: the old size is not the size the witness last cosigned; the
    /// body is that size in decimal and a newline (`text/x.tlog.size`).
    Conflict {
        /// The size the witness holds for the origin.
        size: u64,
    },
    /// 422: the proof does not verify (or the empty tree's root is wrong).
    Unprocessable(String),
}

impl WitnessAnswer {
    /// The HTTP status code of the answer.
    pub fn status(&self) -> u16 {
        match self {
            WitnessAnswer::Cosign { .. } => 200,
            WitnessAnswer::BadRequest(_) => 400,
            WitnessAnswer::Forbidden(_) => 403,
            WitnessAnswer::UnknownLog(_) => 404,
            WitnessAnswer::Conflict { .. } => 409,
            WitnessAnswer::Unprocessable(_) => 422,
        }
    }
}

/// A witness's state: the latest checkpoint it cosigned per origin (size and root).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct WitnessLogs {
    /// Origin → (size, root hex) of the latest cosigned checkpoint.
    pub latest: BTreeMap<String, (u64, String)>,
}

impl WitnessLogs {
    /// Decides an `add-checkpoint` request as C2SP `tlog-witness` says,
    /// against the log keys the witness trusts (plain Ed25519 keys named as
    /// the origin), and records the checkpoint when it is to be cosigned.
    /// The caller persists the state before it answers.
    pub fn add_checkpoint(
        &mut self,
        log_keys: &[VerifierKey],
        request: &str,
        verify: impl Fn(&[u8], &[u8], &[u8]) -> bool,
    ) -> WitnessAnswer {
        let request = match parse_add_checkpoint(request) {
            Ok(request) => request,
            Err(problem) => return WitnessAnswer::BadRequest(problem),
        };
        let body = match parse_checkpoint_body(&request.checkpoint) {
            Ok(body) => body,
            Err(problem) => return WitnessAnswer::BadRequest(problem),
        };
        let keys: Vec<VerifierKey> =
            log_keys.iter().filter(|key| key.kind == KeyKind::Ed25519 && key.name == body.origin).cloned().collect();
        if keys.is_empty() {
            return WitnessAnswer::UnknownLog(format!("no log of origin {} is known here", body.origin));
        }
        match note::verified_signers(&request.checkpoint, &keys, verify) {
            Ok((_, signers)) if !signers.is_empty() => {}
            Ok(_) => return WitnessAnswer::Forbidden("no signature by a known key of the log".to_string()),
            Err(problem) => return WitnessAnswer::Forbidden(problem),
        }
        if request.old_size > body.size {
            return WitnessAnswer::BadRequest(format!(
                "old size {} is past the checkpoint's {}",
                request.old_size, body.size
            ));
        }
        let (held_size, held_root) = match self.latest.get(&body.origin) {
            Some((size, root)) => (*size, hex::decode(root).ok().and_then(|bytes| Hash::try_from(bytes).ok())),
            None => (0, Some(merkle::empty_root())),
        };
        if request.old_size != held_size {
            return WitnessAnswer::Conflict { size: held_size };
        }
        let held_root = held_root.expect("a witness stores 32-byte roots");
        if body.size == 0 && body.root != merkle::empty_root() {
            return WitnessAnswer::Unprocessable("a checkpoint of size 0 has the empty tree's root".to_string());
        }
        if request.old_size == 0 && !request.proof.is_empty() {
            return WitnessAnswer::Unprocessable("a proof from size 0 is empty".to_string());
        }
        if request.old_size == body.size {
            if body.root != held_root {
                return WitnessAnswer::Unprocessable(format!(
                    "a checkpoint of size {} with another root than the one cosigned: a fork",
                    body.size
                ));
            }
        } else if request.old_size > 0 {
            if let Err(error) =
                merkle::verify_consistency(request.old_size, body.size, &held_root, &body.root, &request.proof)
            {
                return WitnessAnswer::Unprocessable(format!("the consistency proof does not verify: {error}"));
            }
        }
        self.latest.insert(body.origin.clone(), (body.size, hex::encode(body.root)));
        let text_end = request.checkpoint.rfind("\n\n").map_or(request.checkpoint.len(), |at| at + 1);
        WitnessAnswer::Cosign { body: request.checkpoint[..text_end].to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::MemoryTree;

    /// A stand-in Ed25519: a "signature" is the message's SHA-256 twice,
    /// which a test key of 32 bytes "verifies" when the key is all 1s.
    fn fake_sign(message: &[u8]) -> Vec<u8> {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(message);
        [digest.as_slice(), digest.as_slice()].concat()
    }

    fn fake_verify(key: &[u8], message: &[u8], signature: &[u8]) -> bool {
        key == [1u8; 32] && signature == fake_sign(message)
    }

    fn signed(origin: &str, tree: &MemoryTree, size: u64) -> String {
        let body = merkle::checkpoint_body(origin, size, &tree.root_at(size));
        let name = origin.to_string();
        let signature =
            note::NoteSignature { id: note::key_id(&name, &[1; 32]), name, signature: fake_sign(body.as_bytes()) };
        note::signed_note(&body, &[signature])
    }

    fn tree(leaves: u64, salt: u8) -> MemoryTree {
        let mut tree = MemoryTree::new();
        for leaf in 0..leaves {
            tree.push(merkle::leaf_hash(&[salt, leaf as u8]));
        }
        tree
    }

    #[test]
    fn a_witness_cosigns_a_growing_log_and_refuses_a_fork_a_stale_size_and_strangers() {
        let origin = "gavel-audit/0011223344556677";
        let log_key = note::parse_verifier_key(&note::verifier_key(origin, &[1; 32])).expect("a key");
        let keys = [log_key];
        let honest = tree(20, 0);
        let mut witness = WitnessLogs::default();
        // First sight: old 0, no proof.
        let first = add_checkpoint_request(0, &[], &signed(origin, &honest, 8));
        assert!(matches!(witness.add_checkpoint(&keys, &first, fake_verify), WitnessAnswer::Cosign { .. }));
        assert_eq!(witness.latest[origin].0, 8);
        // The same request again: the old size is stale now, 409 with the size.
        assert_eq!(witness.add_checkpoint(&keys, &first, fake_verify), WitnessAnswer::Conflict { size: 8 });
        // Growth with a proof.
        let proof = merkle::consistency_proof(&honest, 8, 20).expect("a proof");
        let grown = add_checkpoint_request(8, &proof, &signed(origin, &honest, 20));
        let answer = witness.add_checkpoint(&keys, &grown, fake_verify);
        assert_eq!(answer.status(), 200);
        if let WitnessAnswer::Cosign { body } = answer {
            assert_eq!(body, merkle::checkpoint_body(origin, 20, &honest.root_at(20)));
        }
        // A rewritten history signed with the log's key: 422, nothing recorded.
        let forged = tree(24, 9);
        let proof = merkle::consistency_proof(&forged, 20, 24).expect("a proof");
        let fork = add_checkpoint_request(20, &proof, &signed(origin, &forged, 24));
        assert_eq!(witness.add_checkpoint(&keys, &fork, fake_verify).status(), 422);
        let same_size = add_checkpoint_request(20, &[], &signed(origin, &forged, 20));
        assert_eq!(witness.add_checkpoint(&keys, &same_size, fake_verify).status(), 422);
        assert_eq!(witness.latest[origin].0, 20);
        // An unknown origin, a forged signature, a bad old size, a bad body.
        let stranger = add_checkpoint_request(0, &[], &signed("example.com/other", &honest, 4));
        assert_eq!(witness.add_checkpoint(&keys, &stranger, fake_verify).status(), 404);
        let unsigned = add_checkpoint_request(20, &[], &signed(origin, &honest, 20).replace("\u{2014} ", "\u{2014} x"));
        assert_eq!(witness.add_checkpoint(&keys, &unsigned, fake_verify).status(), 403);
        let past = add_checkpoint_request(30, &[], &signed(origin, &honest, 20));
        assert_eq!(witness.add_checkpoint(&keys, &past, fake_verify).status(), 400);
        assert_eq!(witness.add_checkpoint(&keys, "old 01\n\nx", fake_verify).status(), 400);
    }

    /// tlog-witness's example request body reads back as its old size, its
    /// four proof lines and its checkpoint with two signatures.
    #[test]
    fn the_tlog_witness_example_request_parses() {
        let body = "old 20852014\n\
PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\n\
jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n\
5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n\
/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n\
\n\
example.com/behind-the-sofa\n\
20852163\n\
CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\
\n\
\u{2014} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n\
\u{2014} example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n";
        let request = parse_add_checkpoint(body).expect("the example parses");
        assert_eq!((request.old_size, request.proof.len()), (20_852_014, 4));
        let checkpoint = parse_checkpoint_body(&request.checkpoint).expect("a checkpoint");
        assert_eq!((checkpoint.origin.as_str(), checkpoint.size), ("example.com/behind-the-sofa", 20_852_163));
        assert_eq!(note::parse_signed_note(&request.checkpoint).expect("signed").1.len(), 2);
        assert_eq!(add_checkpoint_request(request.old_size, &request.proof, &request.checkpoint), body);
    }

    #[test]
    fn a_policy_needs_a_log_signature_and_its_witness_quorum() {
        let origin = "gavel-audit/0011223344556677";
        let witness_key = |name: &str, key: u8| note::verifier_key_of(KeyKind::Cosignature, name, &[key; 32]);
        let text = format!(
            "# two of three\nlog {}\nwitness w1 {} http://127.0.0.1:1/\nwitness w2 {}\nwitness w3 {}\ngroup all3 2 w1 w2 w3\nquorum all3\n",
            note::verifier_key(origin, &[1; 32]),
            witness_key("w1.example", 1),
            witness_key("w2.example", 2),
            witness_key("w3.example", 3),
        );
        let policy = Policy::parse(&text).expect("a policy");
        assert_eq!(policy.witnesses[0].url.as_deref(), Some("http://127.0.0.1:1"));
        let honest = tree(5, 0);
        let body = merkle::checkpoint_body(origin, 5, &honest.root_at(5));
        let log_line = note::NoteSignature {
            name: origin.to_string(),
            id: note::key_id(origin, &[1; 32]),
            signature: fake_sign(body.as_bytes()),
        };
        let cosigned_by = |name: &str, key: u8| note::NoteSignature {
            name: name.to_string(),
            id: note::key_id_of(KeyKind::Cosignature, name, &[key; 32]),
            signature: note::timestamped_signature(7, &fake_sign(note::cosigned_message(&body, 7).as_bytes())),
        };
        // Only w1's key "verifies" with the fake scheme (all 1s): one of three.
        let one = note::signed_note(&body, &[log_line.clone(), cosigned_by("w1.example", 1)]);
        let problem = policy.check(&one, fake_verify).expect_err("one witness of two needed");
        assert!(problem.contains("w1") && problem.contains("all3"), "{problem}");
        let verify_all = |key: &[u8], message: &[u8], signature: &[u8]| {
            key.iter().all(|byte| *byte == key[0]) && signature == fake_sign(message)
        };
        let two =
            note::signed_note(&body, &[log_line.clone(), cosigned_by("w1.example", 1), cosigned_by("w3.example", 3)]);
        assert_eq!(policy.check(&two, verify_all), Ok(()));
        let no_log = note::signed_note(&body, &[cosigned_by("w1.example", 1), cosigned_by("w3.example", 3)]);
        assert!(policy.check(&no_log, verify_all).is_err(), "the log's own signature is required");
        assert!(Policy::parse("witness w1 x\nquorum w1\n").is_err());
        assert!(Policy::parse(&format!("witness w1 {}\n", witness_key("a", 1))).is_err(), "no quorum line");
        assert!(Policy::parse("quorum w9\n").is_err(), "an undefined name");
        assert_eq!(Policy::parse("quorum none\n").map(|policy| policy.check(&two, verify_all)), Ok(Ok(())));
    }
}
