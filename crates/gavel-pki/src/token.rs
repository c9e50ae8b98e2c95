//! Bearer tokens: an Ed25519 signing key that issues JWTs, and the verifier
//! a node checks them with.
//!
//! Besides the signature and the audience, a token must be valid now
//! (`exp`, `nbf` and `iat` within [`TOKEN_CLOCK_SKEW_SECONDS`] of the
//! node's clock), live at most the node's maximum lifetime (`exp − iat`,
//! [`TOKEN_LIFETIME_MAX_DEFAULT`] unless configured) and name a principal
//! that is not a node: nodes authenticate by certificate only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use gavel_core::{Caller, GrantName, Principal};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::limits::{TOKEN_CLOCK_SKEW_SECONDS, TOKEN_LIFETIME_MAX_DEFAULT};
use crate::{PkiError, PrincipalKind, TokenError};

/// The audience a node requires unless told otherwise.
pub const DEFAULT_AUDIENCE: &str = "gavel";

/// The claims of a Gavel token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// The principal, `kind:id`.
    pub sub: String,
    /// The audience (the cluster's token audience).
    pub aud: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// Issued at, seconds since the Unix epoch. Required: the lifetime a
    /// node bounds is `exp − iat`.
    pub iat: u64,
    /// Not before, seconds since the Unix epoch; absent means valid from `iat`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    /// Grant names that down-scope the bearer; absent means every grant
    /// bound to the principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
}

impl TokenClaims {
    /// Claims for `principal`, valid for `ttl` from now.
    pub fn new(principal: &Principal, audience: &str, ttl: Duration) -> TokenClaims {
        let now = unix_seconds();
        TokenClaims {
            sub: principal.to_string(),
            aud: audience.to_string(),
            exp: now.saturating_add(ttl.as_secs()),
            iat: now,
            nbf: None,
            roles: None,
        }
    }

    /// The same claims, down-scoped to `roles`.
    pub fn with_roles(mut self, roles: &[GrantName]) -> TokenClaims {
        self.roles = Some(roles.iter().map(|role| role.as_str().to_string()).collect());
        self
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_seconds() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or(0)
}

/// An Ed25519 key that signs tokens (alg EdDSA).
pub struct TokenKey {
    private_pem: String,
    public_pem: String,
    encoding: EncodingKey,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The signing key stays out of logs.
        f.debug_struct("TokenKey").field("public_pem", &self.public_pem).finish_non_exhaustive()
    }
}

impl TokenKey {
    /// A fresh Ed25519 key.
    pub fn create() -> Result<TokenKey, PkiError> {
        let mut seed = [0u8; ED25519_SEED_BYTES];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
            .map_err(|_| PkiError::Key { what: "token key".to_string(), reason: "no randomness".to_string() })?;
        TokenKey::load(&pkcs8_v1_pem(&seed))
    }

    /// The key in this PKCS#8 PEM text: the RFC 8410 form (version 1, the
    /// seed alone) or the version 2 form with the public key that earlier
    /// versions wrote. Either way [`TokenKey::private_pem`] is the version 1
    /// form, which OpenSSL 3 and Python's `cryptography` read.
    pub fn load(private_pem: &str) -> Result<TokenKey, PkiError> {
        let refused = |reason: String| PkiError::Key { what: "token key".to_string(), reason };
        let key = rcgen::KeyPair::from_pem(private_pem).map_err(|error| refused(error.to_string()))?;
        if !key.is_compatible(&rcgen::PKCS_ED25519) {
            return Err(refused("not an Ed25519 key".to_string()));
        }
        let seed = ed25519_seed(key.serialized_der())
            .ok_or_else(|| refused("not an Ed25519 PKCS#8 private key".to_string()))?;
        let private_pem = pkcs8_v1_pem(seed);
        let encoding = EncodingKey::from_ed_pem(private_pem.as_bytes()).map_err(|error| refused(error.to_string()))?;
        Ok(TokenKey { private_pem, public_pem: key.public_key_pem(), encoding })
    }

    /// The key in the PKCS#8 PEM file `path`.
    pub fn load_file(path: &Path) -> Result<TokenKey, PkiError> {
        TokenKey::load(&read_text(path)?)
    }

    /// The private key, PKCS#8 version 1 PEM (RFC 8410).
    pub fn private_pem(&self) -> &str {
        &self.private_pem
    }

    /// The public key, SPKI PEM: what a node verifies tokens with.
    pub fn public_pem(&self) -> &str {
        &self.public_pem
    }

    /// A signed JWT carrying `claims`.
    pub fn issue(&self, claims: &TokenClaims) -> Result<String, PkiError> {
        jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), claims, &self.encoding).map_err(PkiError::Sign)
    }
}

/// Bytes of an Ed25519 private key (its seed).
const ED25519_SEED_BYTES: usize = 32;

/// The DER of an RFC 8410 Ed25519 private key in PKCS#8 version 1, up to
/// its seed: SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 },
/// OCTET STRING { OCTET STRING (32 bytes) } }. Version 2 documents (ring's,
/// with the public key after the seed) differ only in the outer length and
/// the version byte.
const ED25519_PKCS8_PREFIX: [u8; 16] =
    [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];

/// The seed of a PKCS#8 Ed25519 key, version 1 or 2, already parsed and
/// checked by ring; `None` for any other layout.
fn ed25519_seed(der: &[u8]) -> Option<&[u8]> {
    let (prefix, rest) = der.split_at_checked(ED25519_PKCS8_PREFIX.len())?;
    let version_ok = matches!(prefix[4], 0 | 1);
    // Byte 1 is the outer length and byte 4 the version: the rest is fixed.
    let layout_ok = prefix
        .iter()
        .zip(ED25519_PKCS8_PREFIX)
        .enumerate()
        .all(|(index, (byte, expected))| matches!(index, 1 | 4) || *byte == expected);
    (version_ok && layout_ok).then(|| rest.get(..ED25519_SEED_BYTES)).flatten()
}

/// The PKCS#8 version 1 PEM of the Ed25519 key with this seed.
fn pkcs8_v1_pem(seed: &[u8]) -> String {
    let mut der = ED25519_PKCS8_PREFIX.to_vec();
    der.extend_from_slice(seed);
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    format!("-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n")
}

/// Which tokens a [`TokenVerifier`] accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenVerifierSettings {
    /// The required `aud` claim.
    pub audience: String,
    /// SPKI PEM public keys: Ed25519 (EdDSA) or P-256 (ES256).
    pub public_keys_pem: Vec<String>,
    /// An HS256 shared secret; without one HS256 tokens are refused.
    pub hs256_secret: Option<Vec<u8>>,
    /// The longest lifetime (`exp − iat`) accepted.
    pub lifetime_max: Duration,
}

impl TokenVerifierSettings {
    /// Settings read from files: PEM public keys and an optional file whose
    /// bytes (trailing whitespace trimmed) are the HS256 secret; the
    /// lifetime bound is [`TOKEN_LIFETIME_MAX_DEFAULT`].
    pub fn from_files(
        audience: &str,
        public_keys: &[PathBuf],
        hs256_secret: Option<&Path>,
    ) -> Result<TokenVerifierSettings, PkiError> {
        let public_keys_pem = public_keys.iter().map(|path| read_text(path)).collect::<Result<Vec<_>, _>>()?;
        let hs256_secret = match hs256_secret {
            Some(path) => {
                let bytes = std::fs::read(path).map_err(|source| PkiError::Io { path: path.to_path_buf(), source })?;
                let trimmed = bytes.trim_ascii_end().to_vec();
                if trimmed.is_empty() {
                    return Err(PkiError::Key {
                        what: path.display().to_string(),
                        reason: "empty HS256 secret".to_string(),
                    });
                }
                Some(trimmed)
            }
            None => None,
        };
        Ok(TokenVerifierSettings {
            audience: audience.to_string(),
            public_keys_pem,
            hs256_secret,
            lifetime_max: TOKEN_LIFETIME_MAX_DEFAULT,
        })
    }
}

/// Checks bearer tokens against the configured keys and audience.
pub struct TokenVerifier {
    audience: String,
    lifetime_max: Duration,
    ed25519: Vec<DecodingKey>,
    p256: Vec<DecodingKey>,
    hs256: Option<DecodingKey>,
}

impl std::fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("audience", &self.audience)
            .field("lifetime_max", &self.lifetime_max)
            .field("ed25519_keys", &self.ed25519.len())
            .field("p256_keys", &self.p256.len())
            .field("hs256", &self.hs256.is_some())
            .finish()
    }
}

#[derive(Deserialize)]
struct RawHeader {
    alg: String,
}

impl TokenVerifier {
    /// A verifier for `settings`; refuses a public key that is neither
    /// Ed25519 nor P-256.
    pub fn new(settings: &TokenVerifierSettings) -> Result<TokenVerifier, PkiError> {
        let mut verifier = TokenVerifier {
            audience: settings.audience.clone(),
            lifetime_max: settings.lifetime_max,
            ed25519: Vec::new(),
            p256: Vec::new(),
            hs256: None,
        };
        for (position, pem) in settings.public_keys_pem.iter().enumerate() {
            if let Ok(key) = DecodingKey::from_ed_pem(pem.as_bytes()) {
                verifier.ed25519.push(key);
            } else if let Ok(key) = DecodingKey::from_ec_pem(pem.as_bytes()) {
                verifier.p256.push(key);
            } else {
                return Err(PkiError::Key {
                    what: format!("token public key {}", position + 1),
                    reason: "not an Ed25519 or P-256 public key PEM".to_string(),
                });
            }
        }
        verifier.hs256 = settings.hs256_secret.as_deref().map(DecodingKey::from_secret);
        Ok(verifier)
    }

    /// The caller a valid token names: its principal, down-scoped to its
    /// `roles` when it lists them.
    pub fn verify(&self, token: &str) -> Result<Caller, TokenError> {
        self.verify_at(token, unix_seconds())
    }

    /// [`TokenVerifier::verify`] with the node's clock reading `now`
    /// (seconds since the Unix epoch).
    pub fn verify_at(&self, token: &str, now: u64) -> Result<Caller, TokenError> {
        let algorithm = header_algorithm(token)?;
        let (algorithm, keys): (Algorithm, Vec<&DecodingKey>) = match algorithm.as_str() {
            "EdDSA" => (Algorithm::EdDSA, self.ed25519.iter().collect()),
            "ES256" => (Algorithm::ES256, self.p256.iter().collect()),
            "HS256" => (Algorithm::HS256, self.hs256.iter().collect()),
            _ => return Err(TokenError::AlgorithmRefused(algorithm)),
        };
        if keys.is_empty() {
            return Err(TokenError::AlgorithmRefused(format!("{algorithm:?}")));
        }
        let mut validation = Validation::new(algorithm);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        // Every time rule is checked by `check_claims`, against `now`.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        let mut refusal = TokenError::BadSignature;
        for key in keys {
            match jsonwebtoken::decode::<TokenClaims>(token, key, &validation) {
                Ok(data) => {
                    check_claims(&data.claims, now, self.lifetime_max)?;
                    return caller_of(data.claims);
                }
                // Another key may have signed it.
                Err(error) if matches!(error.kind(), ErrorKind::InvalidSignature) => {}
                Err(error) => refusal = self.refusal(error),
            }
        }
        Err(refusal)
    }

    fn refusal(&self, error: jsonwebtoken::errors::Error) -> TokenError {
        match error.kind() {
            ErrorKind::InvalidSignature | ErrorKind::Crypto(_) | ErrorKind::InvalidEcdsaKey => TokenError::BadSignature,
            ErrorKind::InvalidAudience => TokenError::WrongAudience(self.audience.clone()),
            ErrorKind::InvalidAlgorithm => TokenError::AlgorithmRefused("mismatched key".to_string()),
            ErrorKind::MissingRequiredClaim(claim) => TokenError::BadClaims(format!("{claim} is missing")),
            ErrorKind::Json(error) => TokenError::BadClaims(error.to_string()),
            _ => TokenError::Malformed,
        }
    }
}

/// The `alg` of a token's header, read before any key is chosen so that
/// `none` and unknown algorithms get a clear refusal.
fn header_algorithm(token: &str) -> Result<String, TokenError> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(TokenError::Malformed);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header).map_err(|_| TokenError::Malformed)?;
    let header: RawHeader = serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)?;
    Ok(header.alg)
}

/// The rules a signed token's claims must meet at `now` (seconds since the
/// Unix epoch), each within [`TOKEN_CLOCK_SKEW_SECONDS`] of clock skew: not
/// expired, already valid (`nbf`), not issued in the future (`iat`: a future
/// `iat` would let `exp − iat` understate how long the token lives), a
/// lifetime `exp − iat` of at most `lifetime_max`, and a subject that is not
/// a node. `gavel token issue` applies the same rules to what it mints.
pub fn check_claims(claims: &TokenClaims, now: u64, lifetime_max: Duration) -> Result<(), TokenError> {
    if claims.exp.saturating_add(TOKEN_CLOCK_SKEW_SECONDS) < now {
        return Err(TokenError::Expired);
    }
    let latest_start = now.saturating_add(TOKEN_CLOCK_SKEW_SECONDS);
    if let Some(nbf) = claims.nbf.filter(|nbf| *nbf > latest_start) {
        return Err(TokenError::NotYetValid { seconds_ahead: nbf - now });
    }
    if claims.iat > latest_start {
        return Err(TokenError::IssuedInFuture { seconds_ahead: claims.iat - now });
    }
    let lifetime_seconds = claims.exp.saturating_sub(claims.iat);
    if lifetime_seconds > lifetime_max.as_secs() {
        return Err(TokenError::LifetimeTooLong { lifetime_seconds, max_seconds: lifetime_max.as_secs() });
    }
    let principal = Principal::parse(&claims.sub).map_err(TokenError::BadSubject)?;
    if principal.kind == PrincipalKind::Node {
        return Err(TokenError::NodeSubject(claims.sub.clone()));
    }
    Ok(())
}

fn caller_of(claims: TokenClaims) -> Result<Caller, TokenError> {
    let principal = Principal::parse(&claims.sub).map_err(TokenError::BadSubject)?;
    let scope = match claims.roles {
        None => None,
        Some(roles) => Some(
            roles
                .iter()
                .map(|role| GrantName::parse(role).ok_or_else(|| TokenError::UnknownRole(role.clone())))
                .collect::<Result<BTreeSet<_>, _>>()?,
        ),
    };
    Ok(Caller { principal, scope })
}

fn read_text(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Io { path: path.to_path_buf(), source })
}
