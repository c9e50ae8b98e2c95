//! Security headers on every answer, the origin and CSRF checks every
//! state-changing request passes before any call reaches the cluster, and
//! the one check of where a person is sent after signing in (a page of this
//! console, never another site).

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;

use crate::error::ConsoleError;
use crate::limits::RETURN_PATH_MAX_BYTES;
use crate::session::same_secret;

/// The page a person lands on after signing in when no other was asked for.
pub const HOME_PATH: &str = "/inbox";

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

/// `candidate` when it is an address on this console a person may be sent
/// back to after signing in: a path starting with exactly one `/` (never
/// `//host` or `/\host`, which a browser reads as another site, and never
/// a scheme), of URL characters only (no quote, space, backslash, `;` or
/// control character: it goes into a `Location` header and a meta refresh),
/// at most [`RETURN_PATH_MAX_BYTES`], and not a sign-in address itself.
pub fn return_path(candidate: &str) -> Option<&str> {
    let rest = candidate.strip_prefix('/')?;
    if rest.starts_with('/') || candidate.len() > RETURN_PATH_MAX_BYTES {
        return None;
    }
    let allowed = |byte: u8| byte.is_ascii_alphanumeric() || b"-._~/?=&%+,:@!$*".contains(&byte);
    if !candidate.bytes().all(allowed) {
        return None;
    }
    let first_segment = rest.split(['?', '/']).next().unwrap_or(rest);
    if matches!(first_segment, "signin" | "signout" | "oidc") {
        return None;
    }
    Some(candidate)
}

/// Marks the answer that sends a signed-out person to the sign-in page.
#[derive(Clone, Copy)]
pub struct SignInFirst;

/// Carries the page a signed-out person asked for (a GET, not a page's own
/// live refresh) to the sign-in page as `?next=`, so that they land on it
/// after signing in: a link to an approval, from a notification, opened
/// signed out, ends on that approval.
pub async fn return_after_sign_in(request: Request, next: Next) -> Response {
    let live =
        request.uri().query().is_some_and(|query| query.split('&').any(|pair| pair.split('=').next() == Some("live")));
    let page = (request.method() == Method::GET && !live)
        .then(|| request.uri().path_and_query().map(|page| page.as_str().to_string()))
        .flatten();
    let mut response = next.run(request).await;
    if response.extensions().get::<SignInFirst>().is_none() {
        return response;
    }
    let location = page.as_deref().and_then(return_path).filter(|page| *page != HOME_PATH).map(sign_in_address);
    if let Some(value) = location.and_then(|location| HeaderValue::from_str(&location).ok()) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// The sign-in page's address that returns to `page` (a checked
/// [`return_path`]) after signing in.
pub fn sign_in_address(page: &str) -> String {
    format!("/signin?next={}", gavel_oidc::http::form_encode(page))
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
    fn only_a_page_of_this_console_is_a_return_path() {
        for page in
            ["/inbox", "/approvals/apr_1", "/approvals?id=..", "/history?status=pending&capability=a.b", "/x%2F%2Fy"]
        {
            assert_eq!(return_path(page), Some(page), "{page}");
        }
        let long = format!("/approvals/{}", "a".repeat(RETURN_PATH_MAX_BYTES));
        for refused in [
            "//evil.example/x",
            "///evil.example",
            "/\\evil.example",
            "https://evil.example",
            "http:/evil.example",
            "javascript:alert(1)",
            "evil.example",
            "",
            "/inbox\"><script>",
            "/a b",
            "/a\r\nSet-Cookie:x=1",
            "/a;url=https://evil.example",
            "/a'b",
            "/signin?next=/x",
            "/oidc/start",
            "/signout",
            long.as_str(),
        ] {
            assert_eq!(return_path(refused), None, "{refused:?}");
        }
        assert_eq!(sign_in_address("/approvals?id=.."), "/signin?next=%2Fapprovals%3Fid%3D..");
    }

    #[test]
    fn the_policy_allows_no_inline_script_or_style() {
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
        assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
    }
}
