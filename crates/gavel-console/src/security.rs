//! Security headers on every answer, and the origin and CSRF checks every
//! state-changing request passes before any call reaches the cluster.

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use crate::error::ConsoleError;
use crate::session::same_secret;

/// The Content-Security-Policy: only the console's own script, style and
/// images; no inline script or style; never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

/// Adds the security headers to every response.
pub async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends
    // `Origin: null` with a form POST, and the origin check needs the origin.
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Refuses a state-changing request that does not come from `origin`: the
/// `Origin` header must be present and equal, and `Sec-Fetch-Site`, when a
/// browser sends it, must be `same-origin`.
pub fn check_origin(headers: &HeaderMap, origin: &str) -> Result<(), ConsoleError> {
    let sent = headers.get(header::ORIGIN).and_then(|value| value.to_str().ok());
    if sent != Some(origin) {
        return Err(ConsoleError::Origin);
    }
    match headers.get("sec-fetch-site").and_then(|value| value.to_str().ok()) {
        None | Some("same-origin") => Ok(()),
        Some(_) => Err(ConsoleError::Origin),
    }
}

/// Refuses a form whose CSRF token is missing or not the session's.
pub fn check_csrf(sent: Option<&str>, expected: &str) -> Result<(), ConsoleError> {
    match sent {
        Some(sent) if same_secret(sent, expected) => Ok(()),
        _ => Err(ConsoleError::CsrfToken),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn only_the_consoles_own_origin_may_post() {
        let origin = "http://127.0.0.1:7500";
        assert!(check_origin(&with(&[("origin", "http://127.0.0.1:7500")]), origin).is_ok());
        assert!(check_origin(&with(&[("origin", "http://127.0.0.1:7500"), ("sec-fetch-site", "same-origin")]), origin)
            .is_ok());
        assert!(check_origin(&with(&[]), origin).is_err());
        assert!(check_origin(&with(&[("origin", "http://evil.example")]), origin).is_err());
        assert!(check_origin(&with(&[("origin", "null")]), origin).is_err());
        assert!(check_origin(&with(&[("origin", "http://127.0.0.1:7500"), ("sec-fetch-site", "cross-site")]), origin)
            .is_err());
    }

    #[test]
    fn the_csrf_token_must_match() {
        assert!(check_csrf(Some("token"), "token").is_ok());
        assert!(check_csrf(Some("tokem"), "token").is_err());
        assert!(check_csrf(Some(""), "token").is_err());
        assert!(check_csrf(None, "token").is_err());
    }

    #[test]
    fn the_policy_allows_no_inline_script_or_style() {
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
    }
}
