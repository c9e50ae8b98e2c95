//! Bearer tokens: an Ed25519 signing key that issues JWTs, and the verifier
//! a node checks them with.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use gavel_core::{Caller, GrantName, Principal};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::{PkiError, TokenError};

/// The audience a node requires unless told otherwise.
pub const DEFAULT_AUDIENCE: &str = "gavel";

/// How far past `exp` a token is still accepted: room for clock drift
/// between the issuer and the node, small next to any sensible TTL.
pub const EXPIRY_LEEWAY_SECONDS: u64 = 30;

/// The claims of a Gavel token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenClaims {
    /// The principal, `kind:id`.
    pub sub: String,
    /// The audience (the cluster's token audience).
    pub aud: String,
    /// Expiry, seconds since the Unix epoch.
    pub exp: u64,
    /// Issued at, seconds since the Unix epoch.
    pub iat: u64,
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
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519)?;
        TokenKey::load(&key.serialize_pem())
    }

    /// The key in this PKCS#8 PEM text.
    pub fn load(private_pem: &str) -> Result<TokenKey, PkiError> {
        let refused = |reason: String| PkiError::Key { what: "token key".to_string(), reason };
        let key = rcgen::KeyPair::from_pem(private_pem).map_err(|error| refused(error.to_string()))?;
        if !key.is_compatible(&rcgen::PKCS_ED25519) {
            return Err(refused("not an Ed25519 key".to_string()));
        }
        let encoding = EncodingKey::from_ed_pem(private_pem.as_bytes()).map_err(|error| refused(error.to_string()))?;
        Ok(TokenKey { private_pem: private_pem.to_string(), public_pem: key.public_key_pem(), encoding })
    }

    /// The key in the PKCS#8 PEM file `path`.
    pub fn load_file(path: &Path) -> Result<TokenKey, PkiError> {
        TokenKey::load(&read_text(path)?)
    }

    /// The private key, PKCS#8 PEM.
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

/// Which tokens a [`TokenVerifier`] accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenVerifierSettings {
    /// The required `aud` claim.
    pub audience: String,
    /// SPKI PEM public keys: Ed25519 (EdDSA) or P-256 (ES256).
    pub public_keys_pem: Vec<String>,
    /// An HS256 shared secret; without one HS256 tokens are refused.
    pub hs256_secret: Option<Vec<u8>>,
}

impl TokenVerifierSettings {
    /// Settings read from files: PEM public keys and an optional file whose
    /// bytes (trailing whitespace trimmed) are the HS256 secret.
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
        Ok(TokenVerifierSettings { audience: audience.to_string(), public_keys_pem, hs256_secret })
    }
}

/// Checks bearer tokens against the configured keys and audience.
pub struct TokenVerifier {
    audience: String,
    ed25519: Vec<DecodingKey>,
    p256: Vec<DecodingKey>,
    hs256: Option<DecodingKey>,
}

impl std::fmt::Debug for TokenVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenVerifier")
            .field("audience", &self.audience)
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
        let mut verifier =
            TokenVerifier { audience: settings.audience.clone(), ed25519: Vec::new(), p256: Vec::new(), hs256: None };
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
        validation.leeway = EXPIRY_LEEWAY_SECONDS;
        let mut refusal = TokenError::BadSignature;
        for key in keys {
            match jsonwebtoken::decode::<TokenClaims>(token, key, &validation) {
                Ok(data) => return caller_of(data.claims),
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
            ErrorKind::ExpiredSignature => TokenError::Expired,
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
