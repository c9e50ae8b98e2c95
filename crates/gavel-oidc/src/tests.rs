//! ID tokens signed with the fixture keys (`tests/fixtures`: an RSA, a
//! P-256 and an Ed25519 key, made once with Node's crypto, test-only) and
//! checked against their JWKS; discovery and refresh against a loopback
//! HTTP server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

use super::*;

const JWKS: &str = include_str!("../tests/fixtures/jwks.json");
const ISSUER: &str = "http://127.0.0.1:1/issuer";
const NOW: u64 = 1_800_000_000;
const SKEW: u64 = 30;

fn rules() -> TokenRules {
    TokenRules {
        issuer: ISSUER.to_string(),
        audience: "gavel-console".to_string(),
        principal_claim: "email".to_string(),
        principal_prefix: "user:".to_string(),
        clock_skew_seconds: SKEW,
    }
}

fn claims() -> Value {
    json!({"iss": ISSUER, "aud": "gavel-console", "sub": "248289761001", "email": "ada@example.com",
           "email_verified": true, "iat": NOW - 10, "exp": NOW + 600, "nonce": "n-1"})
}

fn encoding_key(alg: Algorithm) -> (EncodingKey, &'static str) {
    match alg {
        Algorithm::RS256 => {
            (EncodingKey::from_rsa_pem(include_bytes!("../tests/fixtures/rsa.pem")).expect("rsa"), "rsa-1")
        }
        Algorithm::ES256 => (EncodingKey::from_ec_pem(include_bytes!("../tests/fixtures/ec.pem")).expect("ec"), "ec-1"),
        Algorithm::EdDSA => {
            (EncodingKey::from_ed_pem(include_bytes!("../tests/fixtures/ed25519.pem")).expect("ed"), "ed25519-1")
        }
        other => panic!("no fixture key for {other:?}"),
    }
}

fn sign(alg: Algorithm, claims: &Value) -> String {
    let (key, kid) = encoding_key(alg);
    let mut header = Header::new(alg);
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(&header, claims, &key).expect("sign")
}

fn keys() -> KeySet {
    KeySet::from_jwks(JWKS.as_bytes()).expect("the fixture JWKS")
}

/// The lifetime bound the tests verify with: Gavel's default, 24 h.
const LIFETIME_MAX: Duration = limits::ID_TOKEN_LIFETIME_MAX_DEFAULT;

fn verify(token: &str) -> Result<Identity, OidcError> {
    verify_with_keys(&keys(), token, &rules(), LIFETIME_MAX, NOW, Some("n-1"))
}

fn with(changes: Value) -> Value {
    let mut claims = claims();
    for (name, value) in changes.as_object().expect("an object") {
        if value.is_null() {
            claims.as_object_mut().expect("object").remove(name);
        } else {
            claims[name] = value.clone();
        }
    }
    claims
}

#[test]
fn rs256_es256_and_eddsa_tokens_are_accepted() {
    assert_eq!(keys().len(), 3);
    for alg in [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA] {
        let identity = verify(&sign(alg, &claims())).unwrap_or_else(|error| panic!("{alg:?}: {error}"));
        assert_eq!(identity.principal, "user:ada@example.com");
        assert_eq!((identity.subject.as_str(), identity.expires_at), ("248289761001", NOW + 600));
    }
    // An audience list naming the client is accepted too.
    let listed = with(json!({"aud": ["other", "gavel-console"]}));
    assert!(verify(&sign(Algorithm::ES256, &listed)).is_ok());
}

#[test]
fn wrong_issuer_audience_and_times_are_refused() {
    let cases = [
        (json!({"iss": "http://127.0.0.1:1/other"}), "OIDC_WRONG_ISSUER"),
        (json!({"aud": "another-client"}), "OIDC_WRONG_AUDIENCE"),
        (json!({"aud": ["a", "b"]}), "OIDC_WRONG_AUDIENCE"),
        (json!({"exp": NOW - SKEW - 1}), "OIDC_TOKEN_EXPIRED"),
        (json!({"nbf": NOW + SKEW + 5}), "OIDC_TOKEN_NOT_YET_VALID"),
        (json!({"iat": NOW + SKEW + 5}), "OIDC_TOKEN_ISSUED_IN_FUTURE"),
        (json!({"email": null}), "OIDC_CLAIM_MISSING"),
        (json!({"email": 7}), "OIDC_CLAIM_MISSING"),
        (json!({"email": ""}), "OIDC_CLAIM_MISSING"),
        (json!({"exp": null}), "OIDC_CLAIM_MISSING"),
        (json!({"iat": null}), "OIDC_CLAIM_MISSING"),
        (json!({"nonce": "someone-else"}), "OIDC_NONCE_MISMATCH"),
    ];
    for (changes, code) in cases {
        let refusal = verify(&sign(Algorithm::RS256, &with(changes.clone()))).expect_err("refused");
        assert_eq!(refusal.code(), code, "{changes}: {refusal}");
    }
    // Within the skew is still valid, on both ends.
    let edges = with(json!({"exp": NOW - SKEW, "nbf": NOW + SKEW, "iat": NOW + SKEW}));
    assert!(verify(&sign(Algorithm::EdDSA, &edges)).is_ok());
    // Without an expected nonce (the nodes), the nonce is not looked at.
    let token = sign(Algorithm::EdDSA, &with(json!({"nonce": null})));
    assert!(verify_with_keys(&keys(), &token, &rules(), LIFETIME_MAX, NOW, None).is_ok());
}

#[test]
fn an_id_token_living_ten_years_is_refused() {
    let ten_years = 10 * 365 * 24 * 3600;
    let refusal = verify(&sign(Algorithm::RS256, &with(json!({"exp": NOW - 10 + ten_years})))).expect_err("refused");
    assert_eq!(refusal, OidcError::LifetimeTooLong { lifetime_seconds: ten_years, max_seconds: 24 * 3600 });
    assert_eq!(refusal.code(), "OIDC_TOKEN_LIFETIME_TOO_LONG");
    assert_eq!(
        refusal.to_string(),
        "the ID token is valid for 3650d (exp - iat), over the maximum token lifetime of 1d; have the provider \
         issue shorter-lived ID tokens"
    );
    // An old iat cannot hide a long life: exp - iat counts, not exp - now.
    let old = with(json!({"iat": NOW - ten_years, "exp": NOW + 600}));
    assert_eq!(verify(&sign(Algorithm::ES256, &old)).expect_err("refused").code(), "OIDC_TOKEN_LIFETIME_TOO_LONG");
    // Without iat there is no lifetime to bound: refused as before.
    let no_iat = with(json!({"iat": null, "exp": NOW - 10 + ten_years}));
    assert_eq!(verify(&sign(Algorithm::EdDSA, &no_iat)).expect_err("refused"), OidcError::MissingClaim("iat".into()));
}

#[test]
fn an_id_token_at_the_lifetime_cap_is_accepted_and_one_second_over_is_not() {
    let at_cap = with(json!({"iat": NOW - 10, "exp": NOW - 10 + LIFETIME_MAX.as_secs()}));
    let identity = verify(&sign(Algorithm::RS256, &at_cap)).expect("a token living exactly the cap");
    assert_eq!(identity.expires_at, NOW - 10 + LIFETIME_MAX.as_secs());
    let over = with(json!({"iat": NOW - 10, "exp": NOW - 10 + LIFETIME_MAX.as_secs() + 1}));
    assert_eq!(verify(&sign(Algorithm::RS256, &over)).expect_err("over").code(), "OIDC_TOKEN_LIFETIME_TOO_LONG");
    // The cap is the caller's: a node with --token-lifetime-max 7d accepts a two-day token.
    let two_days = sign(Algorithm::EdDSA, &with(json!({"exp": NOW - 10 + 2 * 86_400})));
    assert!(verify(&two_days).is_err());
    let week = Duration::from_secs(7 * 86_400);
    assert!(verify_with_keys(&keys(), &two_days, &rules(), week, NOW, Some("n-1")).is_ok());
}

#[test]
fn an_id_token_naming_admin_or_any_non_email_cannot_become_a_local_principal() {
    // `user:admin` is gavel dev's bootstrap admin; `alice` a dev persona;
    // the rest are not addresses either.
    let not_addresses = [
        "admin",
        "alice",
        "root",
        "node:1",
        "user:admin",
        "admin@",
        "@example.com",
        "admin@localhost",
        "admin@example",
        "admin@@example.com",
        "ad@min@example.com",
        "admin@example.com.",
        "admin@.example.com",
        "admin@-example.com",
        "admin@example-.com",
        "admin@127.0.0.1",
        "admin@[127.0.0.1]",
        ".admin@example.com",
        "ad..min@example.com",
        "ad min@example.com",
        "\"admin\"@example.com",
        "admin@exa mple.com",
    ];
    for value in not_addresses {
        let refusal = verify(&sign(Algorithm::RS256, &with(json!({"email": value})))).expect_err(value);
        assert_eq!(refusal.code(), "OIDC_BAD_PRINCIPAL", "{value}: {refusal}");
        assert!(refusal.to_string().contains("is not an email address"), "{value}: {refusal}");
    }
    // Whatever the claim: with `sub` as the principal claim, a sub of
    // `admin` names nobody.
    let by_sub = TokenRules { principal_claim: "sub".to_string(), ..rules() };
    let token = sign(Algorithm::ES256, &with(json!({"sub": "admin"})));
    let refusal = verify_with_keys(&keys(), &token, &by_sub, LIFETIME_MAX, NOW, None).expect_err("sub admin");
    assert_eq!(refusal.code(), "OIDC_BAD_PRINCIPAL");
    // A claim that holds an address (a UPN) is accepted without email_verified.
    let by_upn = TokenRules { principal_claim: "upn".to_string(), ..rules() };
    let token = sign(Algorithm::ES256, &with(json!({"upn": "ada@corp.example.com", "email_verified": null})));
    let identity = verify_with_keys(&keys(), &token, &by_upn, LIFETIME_MAX, NOW, None).expect("a upn");
    assert_eq!(identity.principal, "user:ada@corp.example.com");
    // Real addresses keep their principal.
    for value in ["ada@example.com", "ada.lovelace@mail.example.co.uk", "a-b_c@x-y.example", "A@EXAMPLE.COM"] {
        let identity = verify(&sign(Algorithm::RS256, &with(json!({"email": value})))).expect(value);
        assert_eq!(identity.principal, format!("user:{value}"));
    }
}

#[test]
fn an_unverified_email_is_refused() {
    // Absent (null removes the claim), false, or anything but true.
    for verified in [json!(null), json!(false), json!("false"), json!(1), json!("yes")] {
        let claims = with(json!({ "email_verified": verified }));
        let refusal = verify(&sign(Algorithm::RS256, &claims)).expect_err("unverified");
        assert_eq!(refusal, OidcError::EmailNotVerified, "email_verified {verified}");
        assert_eq!(refusal.code(), "OIDC_EMAIL_NOT_VERIFIED");
    }
    // Some providers send the flag as a string.
    assert!(verify(&sign(Algorithm::RS256, &with(json!({"email_verified": "true"})))).is_ok());
}

#[test]
fn alg_none_hs256_unknown_kid_mismatched_key_and_forgery_are_refused() {
    let body = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims(), &EncodingKey::from_secret(b"k"))
        .expect("hs256");
    assert_eq!(verify(&body).expect_err("hs256").code(), "OIDC_ALGORITHM_REFUSED");
    // alg none: the same claims, an unsigned header, an empty signature.
    let payload = body.split('.').nth(1).expect("payload");
    let none = format!("{}.{payload}.", base64_url(br#"{"alg":"none","typ":"JWT"}"#));
    assert_eq!(verify(&none).expect_err("none").code(), "OIDC_ALGORITHM_REFUSED");
    let rs384 = format!("{}.{payload}.c2ln", base64_url(br#"{"alg":"RS384","kid":"rsa-1"}"#));
    assert_eq!(verify(&rs384).expect_err("rs384").code(), "OIDC_ALGORITHM_REFUSED");

    let (key, _) = encoding_key(Algorithm::RS256);
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rotated-away".to_string());
    let unknown = jsonwebtoken::encode(&header, &claims(), &key).expect("sign");
    assert_eq!(verify(&unknown).expect_err("unknown kid"), OidcError::UnknownKey("rotated-away".to_string()));
    header.kid = Some("ec-1".to_string());
    let mismatched = jsonwebtoken::encode(&header, &claims(), &key).expect("sign");
    assert_eq!(verify(&mismatched).expect_err("mismatch").code(), "OIDC_KEY_MISMATCH");

    // A token whose claims were changed after signing.
    let token = sign(Algorithm::ES256, &claims());
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    parts[1] = base64_url(with(json!({"email": "mallory@example.com"})).to_string().as_bytes());
    assert_eq!(verify(&parts.join(".")).expect_err("forged").code(), "OIDC_BAD_SIGNATURE");

    for garbage in ["", "a.b", "a.b.c.d", "!!.e30.x", &"x".repeat(limits::ID_TOKEN_BYTES_MAX + 1)] {
        assert_eq!(verify(garbage).expect_err("garbage").code(), "OIDC_TOKEN_MALFORMED");
    }
}

#[test]
fn a_jwks_keeps_only_keys_an_allowed_algorithm_can_use() {
    let jwks = json!({"keys": [
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {"kty": "EC", "crv": "P-384", "kid": "p384", "x": "AA", "y": "AA"},
        {"kty": "RSA", "use": "enc", "kid": "enc", "n": "AQAB", "e": "AQAB"},
        {"kty": "RSA", "kid": "sig", "n": "AQAB", "e": "AQAB"}
    ]});
    let keys = KeySet::from_jwks(jwks.to_string().as_bytes()).expect("a set");
    assert_eq!(keys.len(), 1);
    assert!(keys.has_kid("sig") && !keys.has_kid("hmac"));
    let too_many = json!({"keys": vec![json!({"kty": "oct"}); limits::JWKS_KEYS_MAX + 1]});
    assert!(matches!(KeySet::from_jwks(too_many.to_string().as_bytes()), Err(OidcError::Provider(_))));
    assert!(matches!(KeySet::from_jwks(b"[]"), Err(OidcError::Provider(_))));
}

#[test]
fn refreshes_are_rate_limited() {
    let start = Instant::now();
    assert!(refresh_allowed(None, start));
    assert!(!refresh_allowed(Some(start), start + limits::JWKS_REFRESH_INTERVAL_MIN - Duration::from_millis(1)));
    assert!(refresh_allowed(Some(start), start + limits::JWKS_REFRESH_INTERVAL_MIN));
}

fn base64_url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A loopback HTTP server answering the discovery document and the JWKS,
/// counting JWKS fetches.
async fn provider_server() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    let fetches = Arc::new(AtomicUsize::new(0));
    let (served_issuer, counter) = (issuer.clone(), fetches.clone());
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = vec![0u8; 4096];
            let read = stream.read(&mut request).await.unwrap_or(0);
            let text = String::from_utf8_lossy(&request[..read]).into_owned();
            let body = if text.starts_with("GET /.well-known/openid-configuration ") {
                json!({"issuer": served_issuer, "authorization_endpoint": format!("{served_issuer}/auth"),
                       "token_endpoint": format!("{served_issuer}/token"), "jwks_uri": format!("{served_issuer}/jwks")})
                .to_string()
            } else {
                counter.fetch_add(1, Ordering::SeqCst);
                JWKS.to_string()
            };
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    (issuer, fetches, server)
}

#[tokio::test]
async fn a_provider_is_discovered_and_an_unknown_kid_refreshes_at_most_once_per_interval() {
    let (issuer, fetches, server) = provider_server().await;
    let settings = ProviderSettings {
        rules: TokenRules { issuer: issuer.clone(), ..rules() },
        jwks: JwksSource::from_flag(None),
        ca_file: None,
    };
    let provider = Provider::new(settings).expect("provider");
    let discovery = provider.discovery().await.expect("discovery");
    assert_eq!(discovery.token_endpoint, format!("{issuer}/token"));

    let token = sign(Algorithm::EdDSA, &with(json!({"iss": issuer})));
    let identity = provider.verify(&token, unix_seconds_for_fixture(), None).await.expect("accepted");
    assert_eq!(identity.principal, "user:ada@example.com");
    assert_eq!(fetches.load(Ordering::SeqCst), 1);

    // An unknown kid right after a fetch: refused from the cache, no fetch.
    let (key, _) = encoding_key(Algorithm::EdDSA);
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("next-key".to_string());
    let unknown = jsonwebtoken::encode(&header, &with(json!({"iss": issuer})), &key).expect("sign");
    for _ in 0..3 {
        let refusal = provider.verify(&unknown, unix_seconds_for_fixture(), None).await.expect_err("unknown");
        assert_eq!(refusal.code(), "OIDC_UNKNOWN_KEY");
    }
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "refreshes are rate-limited");
    server.abort();
}

#[tokio::test]
async fn an_unreachable_provider_refuses_tokens_with_a_clear_code() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let issuer = format!("http://{}", listener.local_addr().expect("addr"));
    drop(listener);
    let settings = ProviderSettings {
        rules: TokenRules { issuer: issuer.clone(), ..rules() },
        jwks: JwksSource::Discovery,
        ca_file: None,
    };
    let provider = Provider::new(settings).expect("provider");
    let token = sign(Algorithm::EdDSA, &with(json!({"iss": issuer})));
    let refusal = provider.verify(&token, NOW, None).await.expect_err("no provider");
    assert_eq!(refusal.code(), "OIDC_PROVIDER_UNAVAILABLE");
    // Within the refresh interval the failure is remembered, not retried.
    let again = provider.verify(&token, NOW, None).await.expect_err("still no provider");
    assert_eq!(again, refusal);
}

#[test]
fn a_jwks_file_is_a_source_and_settings_are_checked() {
    assert_eq!(JwksSource::from_flag(Some("https://id/jwks")), JwksSource::Url("https://id/jwks".to_string()));
    assert_eq!(JwksSource::from_flag(Some("/etc/jwks.json")), JwksSource::File("/etc/jwks.json".into()));
    let plain_remote = ProviderSettings {
        rules: TokenRules { issuer: "http://id.example.com".to_string(), ..rules() },
        jwks: JwksSource::Discovery,
        ca_file: None,
    };
    assert_eq!(Provider::new(plain_remote).expect_err("http off loopback").code(), "OIDC_SETTINGS");
}

/// The fixture claims are stamped around [`NOW`]; the provider test passes
/// that as its clock.
fn unix_seconds_for_fixture() -> u64 {
    NOW
}
