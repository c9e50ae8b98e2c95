//! The pure half: a provider's JWKS as a key set, and the checks an ID
//! token must pass against it at a given time. No IO and no clock: the
//! caller passes `now`, so every rule is tested without a provider.
//!
//! The principal rule keeps the provider's people apart from every name
//! given locally (`gavel dev`'s `user:admin`, certificates, Gavel tokens):
//! the claim's value must be an email address, `name@domain.tld`, and when
//! the claim is `email` the provider must say `email_verified: true`. A
//! local name has no `@` (docs/security.md), so no ID token can name one.

use std::time::Duration;

use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::limits::{ID_TOKEN_BYTES_MAX, JWKS_KEYS_MAX};
use crate::OidcError;

/// The algorithms an ID token may be signed with. Never `none`, never
/// HS*: an HMAC "signature" keyed with a public value would be forgeable
/// by anyone who can read the JWKS.
pub const ALLOWED_ALGORITHMS: [&str; 3] = ["RS256", "ES256", "EdDSA"];

/// What an ID token must say to be accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRules {
    /// The exact `iss`.
    pub issuer: String,
    /// The `aud` the token must name (the OAuth client id).
    pub audience: String,
    /// The claim whose string value names the person (`email` by default;
    /// another claim, such as `upn`, must hold an email address too).
    pub principal_claim: String,
    /// Put before the claim's value to make the principal (`user:`).
    pub principal_prefix: String,
    /// How far the provider's clock and ours may disagree, in seconds
    /// (Gavel's own tokens' `TOKEN_CLOCK_SKEW_SECONDS`).
    pub clock_skew_seconds: u64,
}

/// What a verified ID token says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `principal_prefix` + the principal claim's value, an email address
    /// (not yet checked against the cluster's principal rules: the caller
    /// does that).
    pub principal: String,
    /// The provider's `sub`.
    pub subject: String,
    /// `exp`, seconds since the Unix epoch: nothing built on the token may
    /// outlive it.
    pub expires_at: u64,
}

/// The key kinds the allowed algorithms need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyFamily {
    Rsa,
    P256,
    Ed25519,
}

impl KeyFamily {
    fn algorithm(self) -> Algorithm {
        match self {
            KeyFamily::Rsa => Algorithm::RS256,
            KeyFamily::P256 => Algorithm::ES256,
            KeyFamily::Ed25519 => Algorithm::EdDSA,
        }
    }

    /// The `alg` header value this kind of key verifies.
    fn alg_name(self) -> &'static str {
        match self {
            KeyFamily::Rsa => "RS256",
            KeyFamily::P256 => "ES256",
            KeyFamily::Ed25519 => "EdDSA",
        }
    }
}

struct SigningKey {
    kid: Option<String>,
    family: KeyFamily,
    key: DecodingKey,
}

/// The signing keys of a provider's JWKS that an allowed algorithm can use.
/// Keys of other kinds (symmetric, encryption, other curves) are skipped.
#[derive(Default)]
pub struct KeySet {
    keys: Vec<SigningKey>,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kids: Vec<_> = self.keys.iter().map(|key| (key.kid.as_deref(), key.family)).collect();
        f.debug_struct("KeySet").field("keys", &kids).finish()
    }
}

impl KeySet {
    /// The usable keys of a JWKS document (`{"keys": [...]}`).
    pub fn from_jwks(json: &[u8]) -> Result<KeySet, OidcError> {
        #[derive(Deserialize)]
        struct Document {
            keys: Vec<Value>,
        }
        let document: Document = serde_json::from_slice(json)
            .map_err(|error| OidcError::Provider(format!("the JWKS is not a JSON key set: {error}")))?;
        if document.keys.len() > JWKS_KEYS_MAX {
            return Err(OidcError::Provider(format!(
                "the JWKS holds {} keys, over the {JWKS_KEYS_MAX} accepted",
                document.keys.len()
            )));
        }
        let keys = document.keys.into_iter().filter_map(signing_key).collect();
        Ok(KeySet { keys })
    }

    /// Whether a key has this `kid`.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.keys.iter().any(|key| key.kid.as_deref() == Some(kid))
    }

    /// How many usable keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set holds no usable key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// One JWK as a signing key, or `None` when no allowed algorithm can use it.
fn signing_key(value: Value) -> Option<SigningKey> {
    if value.get("use").and_then(Value::as_str).is_some_and(|usage| usage != "sig") {
        return None;
    }
    let jwk: Jwk = serde_json::from_value(value).ok()?;
    let family = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => KeyFamily::Rsa,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => KeyFamily::P256,
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => KeyFamily::Ed25519,
        _ => return None,
    };
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(SigningKey { kid: jwk.common.key_id.clone(), family, key })
}

/// The parts of a token's header the verifier chooses a key by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenHeader {
    /// `alg`, already checked against [`ALLOWED_ALGORITHMS`].
    pub alg: String,
    /// `kid`, when the token names its key.
    pub kid: Option<String>,
}

/// Reads a token's header, refusing what is not a JWT and any algorithm
/// outside [`ALLOWED_ALGORITHMS`] before a key is looked at.
pub fn token_header(token: &str) -> Result<TokenHeader, OidcError> {
    #[derive(Deserialize)]
    struct RawHeader {
        alg: String,
        #[serde(default)]
        kid: Option<String>,
    }
    if token.len() > ID_TOKEN_BYTES_MAX {
        return Err(OidcError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(OidcError::Malformed);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header).map_err(|_| OidcError::Malformed)?;
    let header: RawHeader = serde_json::from_slice(&bytes).map_err(|_| OidcError::Malformed)?;
    if !ALLOWED_ALGORITHMS.contains(&header.alg.as_str()) {
        return Err(OidcError::AlgorithmRefused(header.alg));
    }
    Ok(TokenHeader { alg: header.alg, kid: header.kid })
}

/// The `iss` a JWT's payload claims, read without checking anything: how a
/// node tells a provider's ID token from one of Gavel's own tokens (which
/// carry no `iss`) before choosing the verifier. Never trusted on its own.
pub fn unverified_issuer(token: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Payload {
        iss: Option<String>,
    }
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()?;
    serde_json::from_slice::<Payload>(&bytes).ok()?.iss
}

/// Verifies `token` against `keys` at `now` (seconds since the Unix epoch):
/// an allowed algorithm, the key its `kid` names (or, without a `kid`, any
/// key of the algorithm's kind), the signature, `iss`, `aud`, `exp`, `nbf`
/// and `iat` within the clock skew, a lifetime `exp − iat` of at most
/// `lifetime_max`, the `nonce` when one is expected, and a principal claim
/// holding an email address (verified, when the claim is `email`).
pub fn verify_with_keys(
    keys: &KeySet,
    token: &str,
    rules: &TokenRules,
    lifetime_max: Duration,
    now: u64,
    expected_nonce: Option<&str>,
) -> Result<Identity, OidcError> {
    let header = token_header(token)?;
    let candidates: Vec<&SigningKey> = match &header.kid {
        Some(kid) => {
            let key = keys
                .keys
                .iter()
                .find(|key| key.kid.as_deref() == Some(kid.as_str()))
                .ok_or_else(|| OidcError::UnknownKey(kid.clone()))?;
            if key.family.alg_name() != header.alg {
                return Err(OidcError::KeyMismatch { kid: kid.clone(), alg: header.alg });
            }
            vec![key]
        }
        None => keys.keys.iter().filter(|key| key.family.alg_name() == header.alg).collect(),
    };
    let mut claims = None;
    for key in candidates {
        let mut validation = Validation::new(key.family.algorithm());
        // Every claim rule is checked below, with the configured skew and
        // a clear refusal for each.
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, &validation) {
            Ok(data) => {
                claims = Some(data.claims);
                break;
            }
            Err(error) => match error.kind() {
                jsonwebtoken::errors::ErrorKind::Json(_) => return Err(OidcError::Malformed),
                // Another key of the kind may have signed it.
                _ => continue,
            },
        }
    }
    let claims = claims.ok_or(OidcError::BadSignature)?;
    check_claims(&claims, rules, lifetime_max, now, expected_nonce)
}

/// The claim rules of a signature-checked token.
fn check_claims(
    claims: &Map<String, Value>,
    rules: &TokenRules,
    lifetime_max: Duration,
    now: u64,
    expected_nonce: Option<&str>,
) -> Result<Identity, OidcError> {
    let text = |name: &str| claims.get(name).and_then(Value::as_str).filter(|value| !value.is_empty());
    let seconds = |name: &str| claims.get(name).and_then(Value::as_u64);
    let missing = |name: &str| OidcError::MissingClaim(name.to_string());
    let issuer = text("iss").ok_or_else(|| missing("iss"))?;
    if issuer != rules.issuer {
        return Err(OidcError::WrongIssuer { expected: rules.issuer.clone(), found: issuer.to_string() });
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(audience)) => *audience == rules.audience,
        Some(Value::Array(audiences)) => audiences.iter().any(|audience| audience.as_str() == Some(&rules.audience)),
        _ => return Err(missing("aud")),
    };
    if !audience_ok {
        return Err(OidcError::WrongAudience(rules.audience.clone()));
    }
    let expires_at = seconds("exp").ok_or_else(|| missing("exp"))?;
    let issued_at = seconds("iat").ok_or_else(|| missing("iat"))?;
    if expires_at.saturating_add(rules.clock_skew_seconds) < now {
        return Err(OidcError::Expired);
    }
    let latest_start = now.saturating_add(rules.clock_skew_seconds);
    if let Some(not_before) = seconds("nbf").filter(|not_before| *not_before > latest_start) {
        return Err(OidcError::NotYetValid(not_before - now));
    }
    if issued_at > latest_start {
        return Err(OidcError::IssuedInFuture(issued_at - now));
    }
    // As for Gavel's own tokens: `exp − iat`, so an old `iat` cannot hide a
    // long life, and a future `iat` was refused above.
    let lifetime_seconds = expires_at.saturating_sub(issued_at);
    if lifetime_seconds > lifetime_max.as_secs() {
        return Err(OidcError::LifetimeTooLong { lifetime_seconds, max_seconds: lifetime_max.as_secs() });
    }
    if let Some(expected) = expected_nonce {
        if text("nonce") != Some(expected) {
            return Err(OidcError::NonceMismatch);
        }
    }
    let subject = text("sub").ok_or_else(|| missing("sub"))?;
    let value = text(&rules.principal_claim).ok_or_else(|| missing(&rules.principal_claim))?;
    check_email_address(value)
        .map_err(|reason| OidcError::BadPrincipal { claim: rules.principal_claim.clone(), reason })?;
    if rules.principal_claim == "email" && !email_verified(claims.get("email_verified")) {
        return Err(OidcError::EmailNotVerified);
    }
    Ok(Identity { principal: format!("{}{value}", rules.principal_prefix), subject: subject.to_string(), expires_at })
}

/// Whether `email_verified` says yes: `true`, or the string `"true"` some
/// providers send (Amazon Cognito). Absent is no.
fn email_verified(claim: Option<&Value>) -> bool {
    matches!(claim, Some(Value::Bool(true))) || claim.and_then(Value::as_str) == Some("true")
}

/// Checks that a principal claim's value is an email address: one `@`, a
/// local part of RFC 5322 atoms joined by dots (no quoted strings, no
/// comments), and a domain name of at least two labels of letters, digits
/// and inner hyphens whose last label holds a letter (no address literals).
/// This is what keeps the provider's principals apart from local names,
/// which have no `@`; the cluster's principal rules then narrow the
/// characters further.
pub fn check_email_address(value: &str) -> Result<(), String> {
    let not_email = |why: &str| {
        format!(
            "{value:?} is not an email address ({why}); principals from the identity provider are email \
             addresses, so that one never equals a name given locally, such as user:admin"
        )
    };
    let Some((local, domain)) = value.split_once('@') else {
        return Err(not_email("no @"));
    };
    if domain.contains('@') {
        return Err(not_email("more than one @"));
    }
    let atom_char = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    let local_ok = local.len() <= 64 && local.split('.').all(|atom| !atom.is_empty() && atom.chars().all(atom_char));
    if !local_ok {
        return Err(not_email("the part before the @ is not a dot-separated name"));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    let label_ok = |label: &&str| {
        (1..=63).contains(&label.len())
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    let top_level_ok = labels.last().is_some_and(|label| label.chars().any(|c| c.is_ascii_alphabetic()));
    if domain.len() > 253 || labels.len() < 2 || !labels.iter().all(label_ok) || !top_level_ok {
        return Err(not_email("the part after the @ is not a domain name such as example.com"));
    }
    Ok(())
}
