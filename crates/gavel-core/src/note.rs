//! C2SP `signed-note` for Ed25519 note keys, without the signature
//! arithmetic (the core has none): key ids, verifier keys (`name+hash+key`),
//! writing a note with its signature lines and reading one back, and C2SP
//! `tlog-cosignature/v1` (signature type 0x04: a timestamp and an Ed25519
//! signature over `cosignature/v1\ntime T\n` and the note's text). Whoever
//! checks a signature passes the Ed25519 verification in.

use std::collections::BTreeSet;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The kind of a note key: its signature type byte in key ids and verifier keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyKind {
    /// `0x01`: a plain Ed25519 signature over the note's text (a log's key).
    Ed25519,
    /// `0x04`: a C2SP `tlog-cosignature/v1` (a cosigner's key: a node or a witness).
    Cosignature,
}

impl KeyKind {
    /// The signature type byte.
    pub fn type_byte(self) -> u8 {
        match self {
            KeyKind::Ed25519 => 0x01,
            KeyKind::Cosignature => 0x04,
        }
    }

    fn of_byte(byte: u8) -> Option<KeyKind> {
        match byte {
            0x01 => Some(KeyKind::Ed25519),
            0x04 => Some(KeyKind::Cosignature),
            _ => None,
        }
    }
}

/// The key id of a plain Ed25519 note key ([`key_id_of`] with [`KeyKind::Ed25519`]).
pub fn key_id(name: &str, public_key: &[u8]) -> [u8; 4] {
    key_id_of(KeyKind::Ed25519, name, public_key)
}

/// The key id of a note key: the first 4 bytes of
/// `SHA-256(name ‖ "\n" ‖ type ‖ public key)`.
pub fn key_id_of(kind: KeyKind, name: &str, public_key: &[u8]) -> [u8; 4] {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update(b"\n");
    hasher.update([kind.type_byte()]);
    hasher.update(public_key);
    let digest = hasher.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// The verifier key of a plain Ed25519 note key: `name+<key id, 8 hex>+<base64(0x01 ‖ key)>`.
pub fn verifier_key(name: &str, public_key: &[u8]) -> String {
    verifier_key_of(KeyKind::Ed25519, name, public_key)
}

/// The verifier key of a note key of `kind`: `name+<key id>+<base64(type ‖ key)>`.
pub fn verifier_key_of(kind: KeyKind, name: &str, public_key: &[u8]) -> String {
    let mut typed = vec![kind.type_byte()];
    typed.extend_from_slice(public_key);
    format!("{name}+{}+{}", hex::encode(key_id_of(kind, name, public_key)), STANDARD.encode(typed))
}

/// The message a `tlog-cosignature/v1` signs: `cosignature/v1`, `time T`
/// and the checkpoint's text (ending in a newline, without signature lines).
pub fn cosigned_message(text: &str, timestamp_s: u64) -> String {
    format!("cosignature/v1\ntime {timestamp_s}\n{text}")
}

/// The signature bytes of a cosignature line after the key id: the
/// timestamp big-endian, then the Ed25519 signature.
pub fn timestamped_signature(timestamp_s: u64, signature: &[u8]) -> Vec<u8> {
    let mut bytes = timestamp_s.to_be_bytes().to_vec();
    bytes.extend_from_slice(signature);
    bytes
}

/// Splits a cosignature's bytes (after the key id) into its timestamp and
/// Ed25519 signature; `None` unless 8 + 64 bytes with a timestamp below 2^63.
pub fn split_timestamped(bytes: &[u8]) -> Option<(u64, &[u8])> {
    if bytes.len() != 8 + 64 {
        return None;
    }
    let timestamp = u64::from_be_bytes(bytes[..8].try_into().expect("8 bytes"));
    (timestamp < 1 << 63).then_some((timestamp, &bytes[8..]))
}

/// A verifier key read back: its name and Ed25519 public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    /// Its signature type.
    pub kind: KeyKind,
    /// The key's name.
    pub name: String,
    /// Its key id.
    pub id: [u8; 4],
    /// The Ed25519 public key.
    pub public_key: Vec<u8>,
}

/// Parses a verifier key, checking its key id.
pub fn parse_verifier_key(text: &str) -> Result<VerifierKey, String> {
    let text = text.trim();
    // A name holds no '+' (C2SP), while base64 may: split at the first two.
    let mut parts = text.splitn(3, '+');
    let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("{text:?} is not a verifier key (name+hash+key)"));
    };
    let typed = STANDARD.decode(key).map_err(|_| format!("{text:?}: the key is not base64"))?;
    let Some((kind, public_key)) = typed.split_first().and_then(|(byte, key)| Some((KeyKind::of_byte(*byte)?, key)))
    else {
        return Err(format!("{text:?}: not an Ed25519 key (type 0x01) or cosignature key (type 0x04)"));
    };
    if public_key.len() != 32 {
        return Err(format!("{text:?}: an Ed25519 key has 32 bytes"));
    }
    if name.is_empty() || name.chars().any(char::is_whitespace) {
        return Err(format!("{text:?}: a key name is not empty and holds no space"));
    }
    let expected = key_id_of(kind, name, public_key);
    if hex::encode(expected) != id {
        return Err(format!("{text:?}: the key id does not match the name and key"));
    }
    Ok(VerifierKey { kind, name: name.to_string(), id: expected, public_key: public_key.to_vec() })
}

/// One signature line of a note: the key's name and id, and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    /// The signing key's name.
    pub name: String,
    /// Its key id.
    pub id: [u8; 4],
    /// The signature over the note's text.
    pub signature: Vec<u8>,
}

/// A signed note: `text` (ending in a newline), a blank line, then one
/// line `— name base64(key id ‖ signature)` per signature.
pub fn signed_note(text: &str, signatures: &[NoteSignature]) -> String {
    let mut note = format!("{text}\n");
    for signature in signatures {
        let mut bytes = signature.id.to_vec();
        bytes.extend_from_slice(&signature.signature);
        note.push_str(&format!("\u{2014} {} {}\n", signature.name, STANDARD.encode(bytes)));
    }
    note
}

/// Splits a signed note into its text and signature lines.
pub fn parse_signed_note(note: &str) -> Result<(String, Vec<NoteSignature>), String> {
    let Some(split) = note.rfind("\n\n") else { return Err("the note has no signatures".to_string()) };
    let (text, signatures) = (&note[..=split], &note[split + 2..]);
    let mut parsed = Vec::new();
    for line in signatures.lines() {
        let rest = line.strip_prefix("\u{2014} ").ok_or_else(|| format!("{line:?} is not a signature line"))?;
        let (name, encoded) = rest.split_once(' ').ok_or_else(|| format!("{line:?} is not a signature line"))?;
        let bytes = STANDARD.decode(encoded).map_err(|_| format!("{line:?}: the signature is not base64"))?;
        if bytes.len() < 5 {
            return Err(format!("{line:?}: the signature is too short"));
        }
        let id = [bytes[0], bytes[1], bytes[2], bytes[3]];
        parsed.push(NoteSignature { name: name.to_string(), id, signature: bytes[4..].to_vec() });
    }
    Ok((text.to_string(), parsed))
}

/// The keys of `keys` whose signature `note` carries and that verifies
/// (C2SP: signatures by other keys are ignored; one by a listed key that
/// does not verify rejects the whole note), with the note's text.
/// `verify(public key, message, signature)` is the Ed25519 check.
pub fn verified_signers<'k>(
    note: &str,
    keys: &'k [VerifierKey],
    verify: impl Fn(&[u8], &[u8], &[u8]) -> bool,
) -> Result<(String, Vec<&'k VerifierKey>), String> {
    let (text, signatures) = parse_signed_note(note)?;
    let mut signers: Vec<&VerifierKey> = Vec::new();
    for signature in &signatures {
        for key in keys.iter().filter(|key| key.name == signature.name && key.id == signature.id) {
            let verified = match key.kind {
                KeyKind::Ed25519 => verify(&key.public_key, text.as_bytes(), &signature.signature),
                KeyKind::Cosignature => split_timestamped(&signature.signature).is_some_and(|(time, bytes)| {
                    verify(&key.public_key, cosigned_message(&text, time).as_bytes(), bytes)
                }),
            };
            if !verified {
                return Err(format!("the signature of {} does not verify", key.name));
            }
            if !signers.contains(&key) {
                signers.push(key);
            }
        }
    }
    Ok((text, signers))
}

/// Checks that at least `quorum` of `keys` signed `note` (distinct keys;
/// signatures by other keys are ignored, as C2SP says). `verify(public
/// key, message, signature)` is the Ed25519 check.
pub fn verify_note(
    note: &str,
    keys: &[VerifierKey],
    quorum: usize,
    verify: impl Fn(&[u8], &[u8], &[u8]) -> bool,
) -> Result<String, String> {
    let (text, signers) = verified_signers(note, keys, verify)?;
    let distinct: BTreeSet<(&str, [u8; 4])> = signers.iter().map(|key| (key.name.as_str(), key.id)).collect();
    if distinct.len() < quorum {
        return Err(format!("{} of the listed keys signed the checkpoint, fewer than {quorum}", distinct.len()));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_and_verifier_keys_read_back_what_was_written() {
        // 0xF8 bytes make '+' and '/' in base64, which a verifier key must survive.
        let key = [0xF8u8; 32];
        let vkey = verifier_key("gavel-audit/abc/node-1", &key);
        let parsed = parse_verifier_key(&vkey).expect("a verifier key");
        assert_eq!(parsed.public_key, key.to_vec());
        assert!(parse_verifier_key(&vkey.replace("node-1", "node-2")).is_err(), "the id binds the name");
        let signature = NoteSignature { name: parsed.name.clone(), id: parsed.id, signature: vec![9; 64] };
        let note = signed_note("origin\n3\nAAAA\n", std::slice::from_ref(&signature));
        let (text, signatures) = parse_signed_note(&note).expect("a note");
        assert_eq!((text.as_str(), signatures), ("origin\n3\nAAAA\n", vec![signature]));
        let accept = |_: &[u8], _: &[u8], signature: &[u8]| signature == [9; 64];
        assert!(verify_note(&note, std::slice::from_ref(&parsed), 1, accept).is_ok());
        assert!(verify_note(&note, std::slice::from_ref(&parsed), 2, accept).is_err(), "one of two");
        assert!(verify_note(&note, &[parsed], 1, |_, _, _| false).is_err(), "a bad signature");
    }

    #[test]
    fn a_cosignature_key_signs_the_timestamped_message() {
        let key = [7u8; 32];
        let vkey = parse_verifier_key(&verifier_key_of(KeyKind::Cosignature, "witness.example/w1", &key))
            .expect("a cosignature verifier key");
        assert_eq!(vkey.kind, KeyKind::Cosignature);
        assert_ne!(vkey.id, key_id("witness.example/w1", &key), "the type byte is in the key id");
        let body = "example.com/log\n3\nAAAA\n";
        assert_eq!(
            cosigned_message(body, 1_679_315_147),
            "cosignature/v1\ntime 1679315147\nexample.com/log\n3\nAAAA\n"
        );
        let signature = NoteSignature {
            name: vkey.name.clone(),
            id: vkey.id,
            signature: timestamped_signature(1_679_315_147, &[5; 64]),
        };
        let note = signed_note(body, &[signature]);
        // The check sees the timestamped message, not the bare text.
        let accept = |_: &[u8], message: &[u8], signature: &[u8]| {
            message.starts_with(b"cosignature/v1\ntime 1679315147\nexample.com/log\n") && signature == [5; 64]
        };
        let (_, signers) = verified_signers(&note, std::slice::from_ref(&vkey), accept).expect("verifies");
        assert_eq!(signers, vec![&vkey]);
        assert!(split_timestamped(&[0; 71]).is_none(), "8 + 64 bytes");
    }

    /// tlog-cosignature's example: the witness line's bytes are a key id,
    /// the timestamp 1679315147 of its signed-message example, and 64 bytes.
    #[test]
    fn the_tlog_cosignature_example_line_reads_as_key_id_timestamp_and_signature() {
        let note = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n\
\u{2014} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n\
\u{2014} witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZqhf5nNo0xUe+mbIUBkBIfZ+qnA==\n";
        let (text, signatures) = parse_signed_note(note).expect("a note");
        assert_eq!(text, "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n");
        assert_eq!(signatures[0].signature.len(), 64, "the log's plain Ed25519 signature");
        let (timestamp, signature) = split_timestamped(&signatures[1].signature).expect("a cosignature");
        assert_eq!((timestamp, signature.len()), (1_679_315_147, 64));
    }
}
