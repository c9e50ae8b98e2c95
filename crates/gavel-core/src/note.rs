//! C2SP `signed-note` for Ed25519 note keys, without the signature
//! arithmetic (the core has none): key ids, verifier keys (`name+hash+key`),
//! writing a note with its signature lines and reading one back. Whoever
//! checks a signature passes the Ed25519 verification in.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The signature algorithm byte of Ed25519 in a key id and a verifier key.
const ED25519: u8 = 0x01;

/// The key id of an Ed25519 note key: the first 4 bytes of
/// `SHA-256(name ‖ "\n" ‖ 0x01 ‖ public key)`.
pub fn key_id(name: &str, public_key: &[u8]) -> [u8; 4] {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update(b"\n");
    hasher.update([ED25519]);
    hasher.update(public_key);
    let digest = hasher.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// The verifier key of a note key: `name+<key id, 8 hex>+<base64(0x01 ‖ key)>`.
pub fn verifier_key(name: &str, public_key: &[u8]) -> String {
    let mut typed = vec![ED25519];
    typed.extend_from_slice(public_key);
    format!("{name}+{}+{}", hex::encode(key_id(name, public_key)), STANDARD.encode(typed))
}

/// A verifier key read back: its name and Ed25519 public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
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
    let Some((&ED25519, public_key)) = typed.split_first() else {
        return Err(format!("{text:?}: not an Ed25519 key"));
    };
    if public_key.len() != 32 {
        return Err(format!("{text:?}: an Ed25519 key has 32 bytes"));
    }
    let expected = key_id(name, public_key);
    if hex::encode(expected) != id {
        return Err(format!("{text:?}: the key id does not match the name and key"));
    }
    Ok(VerifierKey { name: name.to_string(), id: expected, public_key: public_key.to_vec() })
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

/// Checks that at least `quorum` of `keys` signed `note` (distinct keys;
/// signatures by other keys are ignored, as C2SP says). `verify(public
/// key, message, signature)` is the Ed25519 check.
pub fn verify_note(
    note: &str,
    keys: &[VerifierKey],
    quorum: usize,
    verify: impl Fn(&[u8], &[u8], &[u8]) -> bool,
) -> Result<String, String> {
    let (text, signatures) = parse_signed_note(note)?;
    let mut signed_by: BTreeMap<&str, ()> = BTreeMap::new();
    for signature in &signatures {
        let key = keys.iter().find(|key| key.name == signature.name && key.id == signature.id);
        if let Some(key) = key {
            if !verify(&key.public_key, text.as_bytes(), &signature.signature) {
                return Err(format!("the signature of {} does not verify", key.name));
            }
            signed_by.insert(&key.name, ());
        }
    }
    if signed_by.len() < quorum {
        return Err(format!("{} of the listed keys signed the checkpoint, fewer than {quorum}", signed_by.len()));
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
}
