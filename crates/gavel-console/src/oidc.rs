//! Sign-in with an OpenID Provider: the authorization code flow with PKCE
//! (S256), `state` and `nonce`. `/oidc/start` keeps nothing: it seals the
//! pending sign-in (state, nonce, PKCE verifier, the page to return to and
//! when it started) into a short-lived cookie with an AEAD key only this
//! console process holds ([`SignInSealer`]), and sends the browser to the
//! provider; `/oidc/callback` opens the cookie (its tag, its age, its state
//! equal to the query's), exchanges the code at the token endpoint, and
//! verifies the ID token with [`gavel_oidc::Provider`], the same code the
//! nodes verify it with. The ID token is then the person's bearer towards
//! the cluster. A stranger's `/oidc/start` costs the console no memory; the
//! only table, [`SpentSignIns`], holds sign-ins the provider completed, so
//! that a replayed callback is refused (docs/decisions/0089).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::SecureRandom;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ConsoleError;
use crate::limits::{SIGN_INS_SPENT_MAX, SIGN_IN_PENDING_TTL};
use crate::session::{random_token, same_secret};

/// The cookie that binds a pending sign-in to the browser that started it.
pub const STATE_COOKIE: &str = "gavel_oidc_state";

/// The path the provider sends the browser back to, under the console's origin.
pub const CALLBACK_PATH: &str = "/oidc/callback";

/// How the console signs people in with a provider.
#[derive(Clone)]
pub struct OidcSignIn {
    /// The provider, whose token rules name the client id as audience.
    pub provider: Arc<gavel_oidc::Provider>,
    /// The OAuth client id registered for the console.
    pub client_id: String,
    /// The client secret, for a confidential client (`client_secret_post`);
    /// `None` for a public client, which PKCE alone protects.
    pub client_secret: Option<String>,
}

/// A sign-in sent to the provider and not yet back: what `/oidc/start`
/// seals into the browser's cookie and `/oidc/callback` opens.
/// (No `Debug`: it holds the verifier, which no log may show.)
#[derive(Serialize, Deserialize)]
pub struct PendingSignIn {
    /// The `state` sent to the provider; the callback's must equal it.
    pub state: String,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The PKCE verifier whose S256 challenge the provider holds.
    pub verifier: String,
    /// The console page to show after signing in (a checked same-origin path).
    pub return_to: String,
    /// When the sign-in started, in seconds since the Unix epoch.
    pub issued_at: u64,
}

/// Seals pending sign-ins into cookie values and opens them: ChaCha20-Poly1305
/// under a random 256-bit key made when the console starts and never
/// stored, so only this process can make or read one, and a restarted
/// console refuses the sign-ins the previous one started (as it forgets its
/// sessions). Nonces are a counter: under one key they never repeat.
pub struct SignInSealer {
    key: LessSafeKey,
    sealed: AtomicU64,
}

/// Bound to every sealed value, so a ciphertext made for another purpose
/// under the same key (there is none today) could not pass for a sign-in.
const SEAL_CONTEXT: &[u8] = b"gavel-console oidc sign-in v1";

impl SignInSealer {
    /// A sealer with a fresh key from the operating system's generator.
    pub fn new() -> std::io::Result<SignInSealer> {
        let mut key = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut key)
            .map_err(|_| std::io::Error::other("the operating system's random generator failed"))?;
        let key = UnboundKey::new(&CHACHA20_POLY1305, &key)
            .map_err(|_| std::io::Error::other("a ChaCha20-Poly1305 key is 32 bytes"))?;
        Ok(SignInSealer { key: LessSafeKey::new(key), sealed: AtomicU64::new(0) })
    }

    /// The cookie value of `pending`: base64url of nonce, ciphertext and tag.
    pub fn seal(&self, pending: &PendingSignIn) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        nonce[NONCE_LEN - 8..].copy_from_slice(&self.sealed.fetch_add(1, Ordering::Relaxed).to_be_bytes());
        // Serializing a struct of strings and a number cannot fail.
        let mut sealed = serde_json::to_vec(pending).unwrap_or_default();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(SEAL_CONTEXT), &mut sealed)
            .expect("sealing a few hundred bytes cannot exceed ChaCha20-Poly1305's length limit");
        let mut value = nonce.to_vec();
        value.extend_from_slice(&sealed);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value)
    }

    /// The pending sign-in sealed in `value`, or `None` when it was not
    /// sealed by this process or was changed.
    pub fn open(&self, value: &str) -> Option<PendingSignIn> {
        let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(value).ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let mut sealed = bytes.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&bytes).ok()?;
        let plain = self.key.open_in_place(nonce, Aad::from(SEAL_CONTEXT), &mut sealed).ok()?;
        serde_json::from_slice(plain).ok()
    }

    /// Starts a sign-in at `now`: a fresh state, nonce and PKCE verifier
    /// (each 244 random bits), the authorization URL carrying them, and the
    /// sealed cookie value that carries them and `return_to` to the callback.
    pub fn start(
        &self,
        authorization_endpoint: &str,
        client_id: &str,
        redirect_uri: &str,
        return_to: &str,
        now: u64,
    ) -> Start {
        let pending = PendingSignIn {
            state: random_token(),
            nonce: random_token(),
            verifier: random_token(),
            return_to: return_to.to_string(),
            issued_at: now,
        };
        let query = [
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", redirect_uri),
            ("scope", "openid email profile"),
            ("state", &pending.state),
            ("nonce", &pending.nonce),
            ("code_challenge", &code_challenge(&pending.verifier)),
            ("code_challenge_method", "S256"),
        ];
        let query: Vec<String> =
            query.iter().map(|(name, value)| format!("{name}={}", gavel_oidc::http::form_encode(value))).collect();
        let separator = if authorization_endpoint.contains('?') { '&' } else { '?' };
        let location = format!("{authorization_endpoint}{separator}{}", query.join("&"));
        Start { location, cookie: self.seal(&pending) }
    }

    /// Opens the browser's pending sign-in for the callback's `state` at
    /// `now`: the cookie must be sealed by this process, no older than
    /// [`SIGN_IN_PENDING_TTL`], for this very state, and not spent.
    pub fn finish(
        &self,
        state: &str,
        cookie: Option<&str>,
        spent: &SpentSignIns,
        now: u64,
    ) -> Result<PendingSignIn, ConsoleError> {
        let pending = cookie.and_then(|cookie| self.open(cookie)).ok_or(ConsoleError::SignInState)?;
        let fresh = now.saturating_sub(pending.issued_at) < SIGN_IN_PENDING_TTL.as_secs();
        if !fresh || !same_secret(&pending.state, state) || spent.contains(&pending.state) {
            return Err(ConsoleError::SignInState);
        }
        Ok(pending)
    }
}

/// Where to send the browser, and the cookie to set.
pub struct Start {
    /// The provider's authorization URL with every parameter.
    pub location: String,
    /// The sealed pending sign-in, the cookie's value.
    pub cookie: String,
}

/// The S256 code challenge of a PKCE verifier (RFC 7636 §4.2).
pub fn code_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// The states of sign-ins that the provider completed, kept until their
/// cookie expires so that a replay of the same callback (the cookie and
/// the URL, copied) is refused even by a provider that would redeem a code
/// twice. A state is recorded only after the provider returned an ID token
/// that verified with its nonce, so only a person who signed in at the
/// provider adds one; when [`SIGN_INS_SPENT_MAX`] are held, the oldest is
/// forgotten rather than anyone refused (its code is spent at the provider).
#[derive(Default)]
pub struct SpentSignIns {
    spent: Mutex<Spent>,
}

#[derive(Default)]
struct Spent {
    /// Each spent state and when its cookie expires (seconds since the epoch).
    expires_at: HashMap<String, u64>,
    /// The same states, oldest spent first.
    order: VecDeque<String>,
}

impl SpentSignIns {
    /// Whether this state was already spent.
    pub fn contains(&self, state: &str) -> bool {
        self.lock().expires_at.contains_key(state)
    }

    /// Spends the state of `pending` at `now`; `false` when it was spent
    /// already (two callbacks of one sign-in raced: only one goes on).
    /// States stay until the set is full; then the expired go, and if none
    /// has, the oldest.
    pub fn spend(&self, pending: &PendingSignIn, now: u64) -> bool {
        let mut spent = self.lock();
        if spent.expires_at.contains_key(&pending.state) {
            return false;
        }
        if spent.order.len() >= SIGN_INS_SPENT_MAX {
            spent.expires_at.retain(|_, expires_at| *expires_at > now);
            let Spent { expires_at, order } = &mut *spent;
            order.retain(|state| expires_at.contains_key(state));
        }
        if spent.order.len() >= SIGN_INS_SPENT_MAX {
            if let Some(oldest) = spent.order.pop_front() {
                spent.expires_at.remove(&oldest);
            }
        }
        let expires_at = pending.issued_at.saturating_add(SIGN_IN_PENDING_TTL.as_secs());
        spent.expires_at.insert(pending.state.clone(), expires_at);
        spent.order.push_back(pending.state.clone());
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Spent> {
        self.spent.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The `Set-Cookie` of a pending sign-in: `SameSite=Lax`, not `Strict`,
/// because the provider's redirect back is a cross-site navigation, which
/// does not carry Strict cookies; it holds the sealed pending sign-in
/// ([`SignInSealer::seal`]), which no script may read (`HttpOnly`), lives
/// [`SIGN_IN_PENDING_TTL`], and is scoped to the callback's path.
pub fn state_cookie(sealed: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{STATE_COOKIE}={sealed}; Path=/oidc; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        SIGN_IN_PENDING_TTL.as_secs()
    )
}

/// The `Set-Cookie` that drops the pending sign-in's cookie.
pub fn cleared_state_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{STATE_COOKIE}=; Path=/oidc; HttpOnly; SameSite=Lax; Max-Age=0{secure}")
}

/// The sealed pending sign-in in a `Cookie` header.
pub fn cookie_state(cookie_header: &str) -> Option<&str> {
    cookie_header.split(';').map(str::trim).find_map(|pair| pair.strip_prefix(STATE_COOKIE)?.strip_prefix('='))
}

/// Exchanges `code` at the token endpoint and verifies the ID token it
/// returns (signature, issuer, audience = client id, times, a lifetime of
/// at most `gavel_oidc::limits::ID_TOKEN_LIFETIME_MAX_DEFAULT`, `nonce`,
/// and a principal claim holding an email address, verified when it is
/// `email`): the rules the nodes apply, so a person the nodes would refuse
/// is refused at sign-in, with the same `OIDC_…` code. Returns the ID token
/// and what it says.
pub async fn redeem(
    sign_in: &OidcSignIn,
    code: &str,
    verifier: &str,
    nonce: &str,
    redirect_uri: &str,
) -> Result<(String, gavel_oidc::Identity), ConsoleError> {
    #[derive(Deserialize)]
    struct TokenResponse {
        id_token: Option<String>,
    }
    let provider = &sign_in.provider;
    let discovery = provider.discovery().await?;
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("client_id", sign_in.client_id.as_str()),
        ("code_verifier", verifier),
    ];
    if let Some(secret) = &sign_in.client_secret {
        form.push(("client_secret", secret.as_str()));
    }
    let body = provider.http().post_form(&discovery.token_endpoint, &form).await?;
    let answer: TokenResponse = serde_json::from_slice(&body).map_err(|error| {
        gavel_oidc::OidcError::Provider(format!("the token endpoint's answer is not a token response: {error}"))
    })?;
    let id_token = answer.id_token.ok_or_else(|| {
        gavel_oidc::OidcError::Provider("the token endpoint returned no id_token (is `openid` in scope?)".to_string())
    })?;
    let identity = provider.verify(&id_token, gavel_oidc::unix_seconds(), Some(nonce)).await?;
    Ok((id_token, identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_challenge_is_s256_of_the_verifier() {
        // RFC 7636 appendix B.
        assert_eq!(
            code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    const NOW: u64 = 1_800_000_000;

    fn started(sealer: &SignInSealer) -> Start {
        sealer.start("https://id.example/auth?x=1", "desk", "https://desk/oidc/callback", "/approvals/a1", NOW)
    }

    fn state_of(start: &Start) -> String {
        let query = start.location.split_once("&state=").expect("a state").1;
        query.split('&').next().expect("the state's value").to_string()
    }

    #[test]
    fn a_pending_sign_in_comes_back_only_from_its_own_sealed_cookie() {
        let sealer = SignInSealer::new().expect("a key");
        let spent = SpentSignIns::default();
        let start = started(&sealer);
        assert!(start.location.starts_with("https://id.example/auth?x=1&response_type=code&client_id=desk&"));
        assert!(start.location.contains("code_challenge_method=S256"));
        assert!(start.location.contains("redirect_uri=https%3A%2F%2Fdesk%2Foidc%2Fcallback"));
        let state = state_of(&start);
        // Nothing readable travels in the cookie.
        assert!(!start.cookie.contains(&state) && !start.cookie.contains("approvals"));
        let pending = sealer.finish(&state, Some(&start.cookie), &spent, NOW + 1).expect("finish");
        assert_eq!(pending.state, state);
        assert_eq!(pending.return_to, "/approvals/a1");
        assert!(start.location.contains(&format!("nonce={}", pending.nonce)));
        assert!(start.location.contains(&format!("code_challenge={}", code_challenge(&pending.verifier))));
        // No cookie (another browser), another sign-in's cookie, a changed
        // one, one sealed by another console process, or an expired one.
        let other = started(&sealer);
        let mut changed = start.cookie.clone().into_bytes();
        let last = changed.len() - 2;
        changed[last] = if changed[last] == b'A' { b'B' } else { b'A' };
        let changed = String::from_utf8(changed).expect("base64url");
        let foreign = started(&SignInSealer::new().expect("another key"));
        let ttl = SIGN_IN_PENDING_TTL.as_secs();
        for (cookie, now) in [
            (None, NOW),
            (Some(other.cookie.as_str()), NOW),
            (Some(changed.as_str()), NOW),
            (Some(foreign.cookie.as_str()), NOW),
            (Some("not-base64!"), NOW),
            (Some(""), NOW),
            (Some(start.cookie.as_str()), NOW + ttl),
        ] {
            let refused = sealer.finish(&state, cookie, &spent, now);
            assert!(matches!(refused, Err(ConsoleError::SignInState)), "{cookie:?} at {now}");
        }
        assert!(sealer.finish(&state, Some(&start.cookie), &spent, NOW + ttl - 1).is_ok());
    }

    #[test]
    fn a_spent_sign_in_cannot_be_used_again() {
        let sealer = SignInSealer::new().expect("a key");
        let spent = SpentSignIns::default();
        let start = started(&sealer);
        let state = state_of(&start);
        let pending = sealer.finish(&state, Some(&start.cookie), &spent, NOW).expect("finish");
        // Two callbacks of one sign-in, in flight together: only one goes on.
        let racing = sealer.finish(&state, Some(&start.cookie), &spent, NOW).expect("not spent yet");
        assert!(spent.spend(&pending, NOW));
        assert!(!spent.spend(&racing, NOW));
        assert!(matches!(sealer.finish(&state, Some(&start.cookie), &spent, NOW), Err(ConsoleError::SignInState)));
    }

    #[test]
    fn the_spent_sign_ins_forget_the_oldest_and_the_expired_and_refuse_no_one() {
        let spent = SpentSignIns::default();
        let pending = |state: String, issued_at: u64| PendingSignIn {
            state,
            nonce: String::new(),
            verifier: String::new(),
            return_to: "/inbox".to_string(),
            issued_at,
        };
        for n in 0..SIGN_INS_SPENT_MAX {
            assert!(spent.spend(&pending(format!("s{n}"), NOW), NOW));
        }
        assert!(spent.spend(&pending("newest".to_string(), NOW), NOW));
        assert!(!spent.contains("s0") && spent.contains("s1") && spent.contains("newest"));
        assert_eq!(spent.lock().order.len(), SIGN_INS_SPENT_MAX);
        // Past their cookie's lifetime, the spent states go (the cookie's
        // age refuses them from then on).
        let later = NOW + SIGN_IN_PENDING_TTL.as_secs();
        assert!(spent.spend(&pending("later".to_string(), later), later));
        let held = spent.lock();
        assert_eq!((held.order.len(), held.expires_at.len()), (1, 1));
    }

    #[test]
    fn the_state_cookie_is_lax_http_only_and_scoped() {
        let cookie = state_cookie("s", true);
        assert!(cookie.contains("SameSite=Lax") && cookie.contains("HttpOnly") && cookie.contains("Path=/oidc"));
        assert!(cookie.ends_with("; Secure") && !state_cookie("s", false).contains("Secure"));
        assert_eq!(cookie_state("a=1; gavel_oidc_state=xyz"), Some("xyz"));
        assert!(cleared_state_cookie(false).contains("Max-Age=0"));
        // The longest return path still fits a browser's 4 KiB cookie.
        let longest = format!("/{}", "a".repeat(crate::limits::RETURN_PATH_MAX_BYTES - 1));
        let sealer = SignInSealer::new().expect("a key");
        let start = sealer.start("https://id.example/auth", "desk", "https://desk/oidc/callback", &longest, NOW);
        assert!(state_cookie(&start.cookie, true).len() < 4096);
    }
}
