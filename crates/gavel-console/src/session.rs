//! Sessions: a random id in an HttpOnly, SameSite=Strict cookie names the
//! signed-in person's token, client and CSRF token, held in memory only. A
//! restarted console signs everyone out; it holds no cluster data.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gavel_client::Client;

use crate::error::ConsoleError;
use crate::limits::{SESSIONS_MAX, SESSION_TTL};

/// The session cookie's name.
pub const COOKIE_NAME: &str = "gavel_session";

/// One signed-in person.
pub struct Session {
    /// The principal the cluster authenticated (`kind:id`), from WhoAmI.
    pub principal: String,
    /// A client carrying the person's bearer token: every call is theirs.
    pub client: Client,
    /// The token every state-changing form must carry.
    pub csrf: String,
    /// Whether this is a development sign-in (shown on every page).
    pub development: bool,
    /// When the session ends.
    pub expires_at: Instant,
    /// The last event cursor a live stream delivered, where the next resumes.
    pub cursor: AtomicU64,
    /// Live streams open now.
    pub streams: AtomicUsize,
}

/// A random token of 244 bits from the operating system's generator.
pub fn random_token() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

/// The sessions of one console process.
#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    /// Stores a session and returns its id; expired sessions are dropped first.
    pub fn insert(&self, session: Session) -> Result<String, ConsoleError> {
        let mut by_id = self.by_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        by_id.retain(|_, session| session.expires_at > now);
        if by_id.len() >= SESSIONS_MAX {
            return Err(ConsoleError::Busy(format!("the console holds {SESSIONS_MAX} sessions; try later")));
        }
        let id = random_token();
        by_id.insert(id.clone(), Arc::new(session));
        Ok(id)
    }

    /// The live session with this id.
    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        let by_id = self.by_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        by_id.get(id).filter(|session| session.expires_at > Instant::now()).cloned()
    }

    /// Ends a session (logout).
    pub fn remove(&self, id: &str) {
        self.by_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(id);
    }
}

/// The `Set-Cookie` value that starts a session living `lifetime`
/// (at most [`SESSION_TTL`]): HttpOnly, SameSite=Strict, and Secure unless
/// the console is served on loopback over plain HTTP.
pub fn session_cookie(id: &str, secure: bool, lifetime: Duration) -> String {
    let secure = if secure { "; Secure" } else { "" };
    let max_age = lifetime.min(SESSION_TTL).as_secs();
    format!("{COOKIE_NAME}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}")
}

/// The `Set-Cookie` value that ends a session.
pub fn cleared_cookie(secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{secure}")
}

/// The session id in a `Cookie` header.
pub fn cookie_session_id(cookie_header: &str) -> Option<&str> {
    cookie_header.split(';').map(str::trim).find_map(|pair| pair.strip_prefix(COOKIE_NAME)?.strip_prefix('='))
}

/// Whether two secrets are equal, in time that depends only on their length.
pub fn same_secret(left: &str, right: &str) -> bool {
    left.len() == right.len() && left.bytes().zip(right.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_off_loopback() {
        let cookie = session_cookie("abc", true, SESSION_TTL);
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict") && cookie.contains("Secure"));
        assert!(!session_cookie("abc", false, SESSION_TTL).contains("Secure"));
        assert!(session_cookie("abc", false, Duration::from_secs(90)).contains("Max-Age=90"));
        assert!(session_cookie("abc", false, SESSION_TTL * 3).contains(&format!("Max-Age={}", SESSION_TTL.as_secs())));
        assert!(cleared_cookie(false).contains("Max-Age=0"));
    }

    #[test]
    fn the_session_id_is_read_from_among_other_cookies() {
        assert_eq!(cookie_session_id("a=1; gavel_session=xyz; b=2"), Some("xyz"));
        assert_eq!(cookie_session_id("gavel_sessionx=1"), None);
        assert_eq!(cookie_session_id(""), None);
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert_ne!(random_token(), random_token());
        assert_eq!(random_token().len(), 64);
    }
}
