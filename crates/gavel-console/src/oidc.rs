//! Sign-in with an OpenID Provider: the authorization code flow with PKCE
//! (S256), `state` and `nonce`. `/oidc/start` remembers a pending sign-in
//! (its nonce and PKCE verifier, keyed by `state`, bound to the browser by
//! a short-lived cookie) and sends the browser to the provider;
//! `/oidc/callback` takes the pending sign-in back exactly once, exchanges
//! the code at the token endpoint, and verifies the ID token with
//! [`gavel_oidc::Provider`], the same code the nodes verify it with. The ID
//! token is then the person's bearer towards the cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::ConsoleError;
use crate::limits::{SIGN_INS_PENDING_MAX, SIGN_IN_PENDING_TTL};
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

/// A sign-in sent to the provider and not yet back.
struct Pending {
    nonce: String,
    verifier: String,
    started: Instant,
}

/// The pending sign-ins of one console process.
#[derive(Default)]
pub struct PendingSignIns {
    by_state: Mutex<HashMap<String, Pending>>,
}

/// Where to send the browser, and the cookie to set.
pub struct Start {
    /// The provider's authorization URL with every parameter.
    pub location: String,
    /// The `state`, also the cookie's value.
    pub state: String,
}

/// The S256 code challenge of a PKCE verifier (RFC 7636 §4.2).
pub fn code_challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

impl PendingSignIns {
    /// Starts a sign-in: a fresh state, nonce and PKCE verifier (each 244
    /// random bits), and the authorization URL carrying them.
    pub fn start(
        &self,
        authorization_endpoint: &str,
        client_id: &str,
        redirect_uri: &str,
    ) -> Result<Start, ConsoleError> {
        let (state, nonce, verifier) = (random_token(), random_token(), random_token());
        let query = [
            ("response_type", "code"),
            ("client_id", client_id),
            ("redirect_uri", redirect_uri),
            ("scope", "openid email profile"),
            ("state", &state),
            ("nonce", &nonce),
            ("code_challenge", &code_challenge(&verifier)),
            ("code_challenge_method", "S256"),
        ];
        let query: Vec<String> =
            query.iter().map(|(name, value)| format!("{name}={}", gavel_oidc::http::form_encode(value))).collect();
        let separator = if authorization_endpoint.contains('?') { '&' } else { '?' };
        let location = format!("{authorization_endpoint}{separator}{}", query.join("&"));
        let mut by_state = self.lock();
        by_state.retain(|_, pending| pending.started.elapsed() < SIGN_IN_PENDING_TTL);
        if by_state.len() >= SIGN_INS_PENDING_MAX {
            return Err(ConsoleError::Busy(format!(
                "{SIGN_INS_PENDING_MAX} sign-ins are under way; try again in a few minutes"
            )));
        }
        by_state.insert(state.clone(), Pending { nonce, verifier, started: Instant::now() });
        Ok(Start { location, state })
    }

    /// Takes back the pending sign-in of `state`, once: the state must equal
    /// the browser's cookie and be neither unknown nor older than
    /// [`SIGN_IN_PENDING_TTL`]. Returns its nonce and PKCE verifier.
    pub fn finish(&self, state: &str, cookie_state: Option<&str>) -> Result<(String, String), ConsoleError> {
        if !cookie_state.is_some_and(|cookie| same_secret(cookie, state)) {
            return Err(ConsoleError::SignInState);
        }
        let pending = self.lock().remove(state).ok_or(ConsoleError::SignInState)?;
        if pending.started.elapsed() >= SIGN_IN_PENDING_TTL {
            return Err(ConsoleError::SignInState);
        }
        Ok((pending.nonce, pending.verifier))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.by_state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The `Set-Cookie` of a pending sign-in: `SameSite=Lax`, not `Strict`,
/// because the provider's redirect back is a cross-site navigation, which
/// does not carry Strict cookies; it holds only the state, lives
/// [`SIGN_IN_PENDING_TTL`], and is scoped to the callback's path.
pub fn state_cookie(state: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{STATE_COOKIE}={state}; Path=/oidc; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        SIGN_IN_PENDING_TTL.as_secs()
    )
}

/// The `Set-Cookie` that drops the pending sign-in's cookie.
pub fn cleared_state_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{STATE_COOKIE}=; Path=/oidc; HttpOnly; SameSite=Lax; Max-Age=0{secure}")
}

/// The pending sign-in's state in a `Cookie` header.
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

    #[test]
    fn a_pending_sign_in_is_taken_back_once_and_only_by_its_browser() {
        let pending = PendingSignIns::default();
        let start = pending.start("https://id.example/auth?x=1", "desk", "https://desk/oidc/callback").expect("start");
        assert!(start.location.starts_with("https://id.example/auth?x=1&response_type=code&client_id=desk&"));
        assert!(start.location.contains("code_challenge_method=S256"));
        assert!(start.location.contains("redirect_uri=https%3A%2F%2Fdesk%2Foidc%2Fcallback"));
        assert!(matches!(pending.finish(&start.state, None), Err(ConsoleError::SignInState)));
        assert!(matches!(pending.finish(&start.state, Some("another")), Err(ConsoleError::SignInState)));
        let (nonce, verifier) = pending.finish(&start.state, Some(&start.state)).expect("finish");
        assert!(start.location.contains(&format!("nonce={nonce}")));
        assert!(start.location.contains(&format!("code_challenge={}", code_challenge(&verifier))));
        assert!(matches!(pending.finish(&start.state, Some(&start.state)), Err(ConsoleError::SignInState)));
    }

    #[test]
    fn the_state_cookie_is_lax_http_only_and_scoped() {
        let cookie = state_cookie("s", true);
        assert!(cookie.contains("SameSite=Lax") && cookie.contains("HttpOnly") && cookie.contains("Path=/oidc"));
        assert!(cookie.ends_with("; Secure") && !state_cookie("s", false).contains("Secure"));
        assert_eq!(cookie_state("a=1; gavel_oidc_state=xyz"), Some("xyz"));
        assert!(cleared_state_cookie(false).contains("Max-Age=0"));
    }
}
