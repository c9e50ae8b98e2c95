//! Unit tests: issued certificates chain to their CA and name their
//! principal; every refused certificate and token gets its typed error.

use std::time::Duration;

use gavel_core::{GrantName, Principal, PrincipalKind};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use webpki::{EndEntityCert, KeyUsage};

use crate::*;

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("a certificate PEM")
}

/// Whether `leaf_pem` chains to `ca_pem` for `usage` now.
fn chains(ca_pem: &str, leaf_pem: &str, usage: KeyUsage) -> Result<(), webpki::Error> {
    let ca = der(ca_pem);
    let anchors = vec![webpki::anchor_from_trusted_cert(&ca)?.to_owned()];
    let leaf = der(leaf_pem);
    let leaf = EndEntityCert::try_from(&leaf)?;
    leaf.verify_for_usage(webpki::ALL_VERIFICATION_ALGS, &anchors, &[], UnixTime::now(), usage, None, None)?;
    Ok(())
}

fn server_name_ok(leaf_pem: &str, name: &str) -> bool {
    let leaf = der(leaf_pem);
    let leaf = EndEntityCert::try_from(&leaf).expect("a certificate");
    let name = ServerName::try_from(name.to_string()).expect("a server name");
    leaf.verify_is_valid_for_subject_name(&name).is_ok()
}

fn user(id: &str) -> Principal {
    Principal::new(PrincipalKind::User, id).expect("a principal")
}

fn authority() -> Authority {
    Authority::create("test CA", Validity::days(1)).expect("a CA")
}

#[test]
fn node_certificate_chains_as_server_and_client_and_names_its_hosts() {
    let ca = authority();
    let hosts = node_hosts(&["10.0.3.2".to_string(), "gavel-2.internal".to_string()]);
    let issued = ca.issue(&Principal::node(2), &hosts, Validity::days(1)).expect("issued");
    chains(ca.cert_pem(), &issued.cert_pem, KeyUsage::server_auth()).expect("server certificate");
    chains(ca.cert_pem(), &issued.cert_pem, KeyUsage::client_auth()).expect("client certificate");
    for name in ["localhost", "127.0.0.1", "10.0.3.2", "gavel-2.internal"] {
        assert!(server_name_ok(&issued.cert_pem, name), "{name} must be a SAN");
    }
    assert!(!server_name_ok(&issued.cert_pem, "10.0.3.3"));
    assert_eq!(principal_from_certificate(&der(&issued.cert_pem)), Ok(Principal::node(2)));
}

#[test]
fn client_certificate_is_not_a_server_certificate() {
    let ca = authority();
    let issued = ca.issue(&user("bob"), &[], Validity::days(1)).expect("issued");
    chains(ca.cert_pem(), &issued.cert_pem, KeyUsage::client_auth()).expect("client certificate");
    assert!(chains(ca.cert_pem(), &issued.cert_pem, KeyUsage::server_auth()).is_err());
    assert_eq!(principal_from_certificate(&der(&issued.cert_pem)), Ok(user("bob")));
}

#[test]
fn expired_certificate_does_not_chain() {
    let ca = authority();
    let issued = ca.issue(&user("late"), &[], Validity::expired()).expect("issued");
    assert!(matches!(
        chains(ca.cert_pem(), &issued.cert_pem, KeyUsage::client_auth()),
        Err(webpki::Error::CertExpired { .. })
    ));
}

#[test]
fn certificate_from_another_authority_does_not_chain() {
    let ca = authority();
    let other = authority();
    let issued = other.issue(&user("mallory"), &[], Validity::days(1)).expect("issued");
    assert!(chains(ca.cert_pem(), &issued.cert_pem, KeyUsage::client_auth()).is_err());
}

#[test]
fn loaded_authority_issues_certificates_that_chain_to_the_original() {
    let ca = authority();
    let loaded = Authority::load(ca.cert_pem(), &ca.key_pem()).expect("loaded");
    let issued = loaded.issue(&user("carol"), &[], Validity::days(1)).expect("issued");
    chains(ca.cert_pem(), &issued.cert_pem, KeyUsage::client_auth()).expect("chains to the original CA");
}

#[test]
fn authority_load_refuses_garbage() {
    let ca = authority();
    assert!(matches!(Authority::load(ca.cert_pem(), "not a key"), Err(PkiError::Key { .. })));
    assert!(matches!(Authority::load("not a cert", &ca.key_pem()), Err(PkiError::Certificate(_))));
}

#[test]
fn issue_refuses_a_malformed_host() {
    let ca = authority();
    let refused = ca.issue(&Principal::node(1), &["bad host!".to_string()], Validity::days(1));
    assert!(matches!(refused, Err(PkiError::Host(host)) if host == "bad host!"));
}

#[test]
fn certificate_without_a_uri_names_no_principal() {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("self-signed");
    assert_eq!(principal_from_certificate(certified.cert.der()), Err(CertificateError::NoPrincipal));
}

fn self_signed_with_uris(uris: &[&str]) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().expect("a key");
    let mut params = rcgen::CertificateParams::default();
    for uri in uris {
        params.subject_alt_names.push(rcgen::SanType::URI((*uri).try_into().expect("an IA5 string")));
    }
    params.self_signed(&key).expect("self-signed").der().to_vec()
}

#[test]
fn certificate_with_two_uris_is_refused() {
    let der = self_signed_with_uris(&["gavel://user/a", "gavel://user/b"]);
    assert_eq!(principal_from_certificate(&der), Err(CertificateError::SeveralPrincipals(2)));
}

#[test]
fn certificate_with_a_foreign_uri_is_refused() {
    for uri in ["https://example.com/x", "gavel://robot/x", "gavel://user/"] {
        let der = self_signed_with_uris(&[uri]);
        assert!(matches!(principal_from_certificate(&der), Err(CertificateError::BadPrincipal(_))), "{uri}");
    }
}

#[test]
fn garbage_is_not_a_certificate() {
    assert!(matches!(principal_from_certificate(b"\x30\x03garbage"), Err(CertificateError::Unparsable(_))));
}

fn verifier_for(key: &TokenKey) -> TokenVerifier {
    TokenVerifier::new(&settings_for(key)).expect("a verifier")
}

fn settings_for(key: &TokenKey) -> TokenVerifierSettings {
    TokenVerifierSettings {
        audience: DEFAULT_AUDIENCE.to_string(),
        public_keys_pem: vec![key.public_pem().to_string()],
        hs256_secret: None,
        lifetime_max: limits::TOKEN_LIFETIME_MAX_DEFAULT,
    }
}

fn hour() -> Duration {
    Duration::from_secs(3600)
}

#[test]
fn token_round_trips_with_and_without_roles() {
    let key = TokenKey::create().expect("a key");
    let verifier = verifier_for(&key);
    let bob = user("bob");
    let plain = key.issue(&TokenClaims::new(&bob, DEFAULT_AUDIENCE, hour())).expect("signed");
    let caller = verifier.verify(&plain).expect("verified");
    assert_eq!(caller.principal, bob);
    assert_eq!(caller.scope, None);
    let scoped = TokenClaims::new(&bob, DEFAULT_AUDIENCE, hour()).with_roles(&[GrantName::Approver]);
    let caller = verifier.verify(&key.issue(&scoped).expect("signed")).expect("verified");
    assert_eq!(caller.scope, Some([GrantName::Approver].into_iter().collect()));
}

#[test]
fn token_key_survives_a_reload() {
    let key = TokenKey::create().expect("a key");
    let loaded = TokenKey::load(key.private_pem()).expect("loaded");
    assert_eq!(loaded.public_pem(), key.public_pem());
    let token = loaded.issue(&TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour())).expect("signed");
    assert!(verifier_for(&key).verify(&token).is_ok());
}

#[test]
fn token_key_load_refuses_a_p256_key() {
    let p256 = rcgen::KeyPair::generate().expect("a P-256 key");
    assert!(matches!(TokenKey::load(&p256.serialize_pem()), Err(PkiError::Key { .. })));
}

#[test]
fn unsigned_token_is_refused() {
    let key = TokenKey::create().expect("a key");
    let b64 = |text: &str| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
    };
    let exp = unix_seconds() + 3600;
    let claims = format!(r#"{{"sub":"user:bob","aud":"gavel","exp":{exp},"iat":0}}"#);
    for alg in ["none", "None", "NONE"] {
        let token = format!("{}.{}.", b64(&format!(r#"{{"alg":"{alg}","typ":"JWT"}}"#)), b64(&claims));
        assert_eq!(verifier_for(&key).verify(&token), Err(TokenError::AlgorithmRefused(alg.to_string())));
    }
}

#[test]
fn tampered_token_is_refused() {
    let key = TokenKey::create().expect("a key");
    let token = key.issue(&TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour())).expect("signed");
    let parts: Vec<&str> = token.split('.').collect();
    let forged_claims = {
        use base64::Engine;
        let exp = unix_seconds() + 3600;
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(format!(r#"{{"sub":"user:admin","aud":"gavel","exp":{exp},"iat":0}}"#))
    };
    let forged = format!("{}.{}.{}", parts[0], forged_claims, parts[2]);
    assert_eq!(verifier_for(&key).verify(&forged), Err(TokenError::BadSignature));
}

#[test]
fn token_signed_by_another_key_is_refused() {
    let key = TokenKey::create().expect("a key");
    let other = TokenKey::create().expect("another key");
    let token = other.issue(&TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour())).expect("signed");
    assert_eq!(verifier_for(&key).verify(&token), Err(TokenError::BadSignature));
}

#[test]
fn expired_token_is_refused() {
    let key = TokenKey::create().expect("a key");
    let mut claims = TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour());
    claims.exp = unix_seconds() - limits::TOKEN_CLOCK_SKEW_SECONDS - 60;
    let token = key.issue(&claims).expect("signed");
    assert_eq!(verifier_for(&key).verify(&token), Err(TokenError::Expired));
}

#[test]
fn token_for_another_audience_is_refused() {
    let key = TokenKey::create().expect("a key");
    let token = key.issue(&TokenClaims::new(&user("bob"), "another-cluster", hour())).expect("signed");
    assert_eq!(verifier_for(&key).verify(&token), Err(TokenError::WrongAudience(DEFAULT_AUDIENCE.to_string())));
}

#[test]
fn garbage_token_is_refused() {
    let key = TokenKey::create().expect("a key");
    for garbage in ["", "garbage", "a.b.c", "....", "\u{0}\u{1}.\u{2}.x"] {
        assert_eq!(verifier_for(&key).verify(garbage), Err(TokenError::Malformed), "{garbage:?}");
    }
}

#[derive(serde::Serialize)]
struct NoExpiry {
    sub: String,
    aud: String,
}

#[test]
fn token_without_expiry_is_refused() {
    let key = TokenKey::create().expect("a key");
    let encoding = EncodingKey::from_ed_pem(key.private_pem().as_bytes()).expect("a key");
    let claims = NoExpiry { sub: "user:bob".to_string(), aud: DEFAULT_AUDIENCE.to_string() };
    let token = jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &encoding).expect("signed");
    assert!(matches!(verifier_for(&key).verify(&token), Err(TokenError::BadClaims(_))));
}

#[test]
fn token_with_a_malformed_subject_or_unknown_role_is_refused() {
    let key = TokenKey::create().expect("a key");
    let mut claims = TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour());
    claims.sub = "bob".to_string();
    assert!(matches!(verifier_for(&key).verify(&key.issue(&claims).expect("signed")), Err(TokenError::BadSubject(_))));
    let mut claims = TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour());
    claims.roles = Some(vec!["root".to_string()]);
    assert_eq!(
        verifier_for(&key).verify(&key.issue(&claims).expect("signed")),
        Err(TokenError::UnknownRole("root".to_string()))
    );
}

#[test]
fn es256_token_is_accepted_with_its_public_key() {
    let p256 = rcgen::KeyPair::generate().expect("a P-256 key");
    let encoding = EncodingKey::from_ec_pem(p256.serialize_pem().as_bytes()).expect("an EC key");
    let claims = TokenClaims::new(&user("svc"), DEFAULT_AUDIENCE, hour());
    let token = jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &encoding).expect("signed");
    let verifier = TokenVerifier::new(&TokenVerifierSettings {
        audience: DEFAULT_AUDIENCE.to_string(),
        public_keys_pem: vec![p256.public_key_pem()],
        hs256_secret: None,
        lifetime_max: limits::TOKEN_LIFETIME_MAX_DEFAULT,
    })
    .expect("a verifier");
    assert_eq!(verifier.verify(&token).expect("verified").principal, user("svc"));
    // The same token is refused by a node that only has an Ed25519 key.
    let ed = TokenKey::create().expect("a key");
    assert_eq!(verifier_for(&ed).verify(&token), Err(TokenError::AlgorithmRefused("ES256".to_string())));
}

#[test]
fn hs256_token_needs_the_configured_secret() {
    let claims = TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour());
    let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(b"s3cret"))
        .expect("signed");
    let key = TokenKey::create().expect("a key");
    assert_eq!(verifier_for(&key).verify(&token), Err(TokenError::AlgorithmRefused("HS256".to_string())));
    let settings = |secret: &[u8]| TokenVerifierSettings {
        audience: DEFAULT_AUDIENCE.to_string(),
        public_keys_pem: Vec::new(),
        hs256_secret: Some(secret.to_vec()),
        lifetime_max: limits::TOKEN_LIFETIME_MAX_DEFAULT,
    };
    let right = TokenVerifier::new(&settings(b"s3cret")).expect("a verifier");
    assert_eq!(right.verify(&token).expect("verified").principal, user("bob"));
    let wrong = TokenVerifier::new(&settings(b"other")).expect("a verifier");
    assert_eq!(wrong.verify(&token), Err(TokenError::BadSignature));
}

#[test]
fn verifier_refuses_a_key_that_is_not_a_public_key() {
    let settings = TokenVerifierSettings {
        audience: DEFAULT_AUDIENCE.to_string(),
        public_keys_pem: vec!["-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n".to_string()],
        hs256_secret: None,
        lifetime_max: limits::TOKEN_LIFETIME_MAX_DEFAULT,
    };
    assert!(matches!(TokenVerifier::new(&settings), Err(PkiError::Key { .. })));
}

#[test]
fn verifier_settings_read_from_files() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let key = TokenKey::create().expect("a key");
    let certs = CertsDir::new(dir.path());
    certs.write_token_key(&key).expect("written");
    let secret = dir.path().join("hs256");
    std::fs::write(&secret, "s3cret\n").expect("written");
    let settings =
        TokenVerifierSettings::from_files("gavel", &[certs.token_public()], Some(&secret)).expect("settings");
    assert_eq!(settings.hs256_secret.as_deref(), Some(&b"s3cret"[..]));
    let token = key.issue(&TokenClaims::new(&user("bob"), "gavel", hour())).expect("signed");
    assert!(TokenVerifier::new(&settings).expect("a verifier").verify(&token).is_ok());
    let missing = TokenVerifierSettings::from_files("gavel", &[dir.path().join("absent.pub")], None);
    assert!(matches!(missing, Err(PkiError::Io { .. })));
}

#[test]
fn dev_material_is_complete_and_keeps_its_authority_when_rerun() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let nodes = [DevNode { id: 1, hosts: vec![] }, DevNode { id: 2, hosts: vec!["10.0.0.2".to_string()] }];
    let admin = user("admin");
    let material = create_dev_material(dir.path(), &nodes, &admin).expect("created");
    let certs = &material.dir;
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).expect("a file");
    let ca = read(certs.ca_cert());
    for id in [1, 2] {
        chains(&ca, &read(certs.node_cert(id)), KeyUsage::server_auth()).expect("node certificate");
        assert!(certs.node_key(id).exists());
    }
    assert!(server_name_ok(&read(certs.node_cert(2)), "10.0.0.2"));
    assert_eq!(certs.cert(&admin), dir.path().join("client-user-admin.pem"));
    chains(&ca, &read(certs.cert(&admin)), KeyUsage::client_auth()).expect("admin certificate");
    assert_eq!(principal_from_certificate(&der(&read(certs.cert(&admin)))), Ok(admin.clone()));
    let token = material.token_key.issue(&TokenClaims::new(&admin, DEFAULT_AUDIENCE, hour())).expect("signed");
    let settings = TokenVerifierSettings::from_files(DEFAULT_AUDIENCE, &[certs.token_public()], None).expect("read");
    assert!(TokenVerifier::new(&settings).expect("a verifier").verify(&token).is_ok());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for key in [certs.ca_key(), certs.node_key(1), certs.key(&admin), certs.token_key()] {
            let mode = std::fs::metadata(&key).expect("metadata").permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} must be private", key.display());
        }
    }
    let again = create_dev_material(dir.path(), &nodes, &admin).expect("created again");
    assert_eq!(read(again.dir.ca_cert()), ca);
    assert!(TokenVerifier::new(&settings).expect("a verifier").verify(&token).is_ok());
}

/// The node's clock in the token rule tests: a fixed instant, so that every
/// bound is tested exactly at its edge.
const NOW: u64 = 1_800_000_000;

/// Claims for `user:bob` issued at `NOW`, valid for an hour.
fn claims_at_now() -> TokenClaims {
    TokenClaims { iat: NOW, exp: NOW + 3600, ..TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour()) }
}

fn verified_at(key: &TokenKey, claims: &TokenClaims) -> Result<Caller, TokenError> {
    verifier_for(key).verify_at(&key.issue(claims).expect("signed"), NOW)
}

#[test]
fn token_whose_nbf_is_ahead_by_more_than_the_clock_skew_is_refused() {
    let key = TokenKey::create().expect("a key");
    let skew = limits::TOKEN_CLOCK_SKEW_SECONDS;
    let refused = verified_at(&key, &TokenClaims { nbf: Some(NOW + skew + 1), ..claims_at_now() });
    assert_eq!(refused, Err(TokenError::NotYetValid { seconds_ahead: skew + 1 }));
    let message = refused.expect_err("refused").to_string();
    assert!(message.contains("not valid yet") && message.contains("31s ahead"), "{message}");
    let an_hour_ahead = verified_at(&key, &TokenClaims { nbf: Some(NOW + 3599), ..claims_at_now() });
    assert_eq!(an_hour_ahead, Err(TokenError::NotYetValid { seconds_ahead: 3599 }));
    assert!(an_hour_ahead.expect_err("refused").to_string().contains("its nbf is 59m59s ahead"));
}

#[test]
fn token_whose_nbf_is_ahead_within_the_clock_skew_or_past_is_accepted() {
    let key = TokenKey::create().expect("a key");
    let skew = limits::TOKEN_CLOCK_SKEW_SECONDS;
    for nbf in [NOW + skew, NOW + 1, NOW, NOW - 600] {
        let caller = verified_at(&key, &TokenClaims { nbf: Some(nbf), ..claims_at_now() });
        assert_eq!(caller.expect("accepted").principal, user("bob"), "nbf {nbf}");
    }
}

#[test]
fn token_issued_in_the_future_beyond_the_clock_skew_is_refused() {
    // A future iat would make exp - iat understate how long the token lives.
    let key = TokenKey::create().expect("a key");
    let skew = limits::TOKEN_CLOCK_SKEW_SECONDS;
    let future = TokenClaims { iat: NOW + skew + 1, exp: NOW + skew + 3600, ..claims_at_now() };
    assert_eq!(verified_at(&key, &future), Err(TokenError::IssuedInFuture { seconds_ahead: skew + 1 }));
    let within = TokenClaims { iat: NOW + skew, exp: NOW + skew + 3600, ..claims_at_now() };
    assert!(verified_at(&key, &within).is_ok());
}

#[test]
fn expiry_is_checked_within_the_clock_skew() {
    let key = TokenKey::create().expect("a key");
    let skew = limits::TOKEN_CLOCK_SKEW_SECONDS;
    let just_expired = TokenClaims { iat: NOW - 3600, exp: NOW - skew, ..claims_at_now() };
    assert!(verified_at(&key, &just_expired).is_ok(), "within the skew");
    let expired = TokenClaims { iat: NOW - 3600, exp: NOW - skew - 1, ..claims_at_now() };
    assert_eq!(verified_at(&key, &expired), Err(TokenError::Expired));
}

#[test]
fn token_living_longer_than_the_maximum_lifetime_is_refused() {
    let key = TokenKey::create().expect("a key");
    let max = limits::TOKEN_LIFETIME_MAX_DEFAULT.as_secs();
    let longest = TokenClaims { exp: NOW + max, ..claims_at_now() };
    assert!(verified_at(&key, &longest).is_ok(), "exactly the maximum is accepted");
    let over = TokenClaims { exp: NOW + max + 1, ..claims_at_now() };
    assert_eq!(
        verified_at(&key, &over),
        Err(TokenError::LifetimeTooLong { lifetime_seconds: max + 1, max_seconds: max })
    );
    // Year 9999.
    let forever = TokenClaims { exp: 253_402_300_799, ..claims_at_now() };
    let refused = verified_at(&key, &forever).expect_err("refused");
    assert!(matches!(refused, TokenError::LifetimeTooLong { .. }), "{refused:?}");
    assert!(refused.to_string().contains("over the maximum token lifetime of 1d"), "{refused}");
    // An issuer cannot hide a long life behind an old iat either: exp - iat counts.
    let old = TokenClaims { iat: NOW - max, exp: NOW + 60, ..claims_at_now() };
    assert!(matches!(verified_at(&key, &old), Err(TokenError::LifetimeTooLong { .. })));
}

#[test]
fn the_lifetime_bound_is_the_verifier_setting() {
    let key = TokenKey::create().expect("a key");
    let week = Duration::from_secs(7 * 86_400);
    let verifier =
        TokenVerifier::new(&TokenVerifierSettings { lifetime_max: week, ..settings_for(&key) }).expect("a verifier");
    let six_days = TokenClaims { exp: NOW + 6 * 86_400, ..claims_at_now() };
    assert!(verifier.verify_at(&key.issue(&six_days).expect("signed"), NOW).is_ok());
    assert!(matches!(verified_at(&key, &six_days), Err(TokenError::LifetimeTooLong { .. })), "default: a day");
}

#[test]
fn token_for_a_node_principal_is_refused() {
    let key = TokenKey::create().expect("a key");
    let node = TokenClaims { sub: "node:1".to_string(), ..claims_at_now() };
    let refused = verified_at(&key, &node);
    assert_eq!(refused, Err(TokenError::NodeSubject("node:1".to_string())));
    assert!(refused.expect_err("refused").to_string().contains("certificate only"));
    for sub in ["user:node-1", "service:node", "worker:1"] {
        assert!(verified_at(&key, &TokenClaims { sub: sub.to_string(), ..claims_at_now() }).is_ok(), "{sub}");
    }
}

#[test]
fn issued_claims_pass_the_same_rules_a_node_applies() {
    let fresh = TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, limits::TOKEN_LIFETIME_MAX_DEFAULT);
    assert_eq!(check_claims(&fresh, fresh.iat, limits::TOKEN_LIFETIME_MAX_DEFAULT), Ok(()));
    let long = TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, Duration::from_secs(2 * 86_400));
    let refused = check_claims(&long, long.iat, limits::TOKEN_LIFETIME_MAX_DEFAULT).expect_err("refused");
    assert_eq!(
        refused.to_string().split(';').next(),
        Some("the token is valid for 2d (exp - iat), over the maximum token lifetime of 1d")
    );
}

/// The PKCS#8 version 2 form (with the public key) that earlier versions
/// wrote as token.key, and that OpenSSL 3.0 refuses.
fn version_2_key_pem() -> String {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("an Ed25519 key").serialize_pem()
}

#[test]
fn token_key_is_written_as_pkcs8_version_1_and_old_keys_still_load() {
    let key = TokenKey::create().expect("a key");
    // RFC 8410's example form: SEQUENCE of 46 bytes, version 0.
    assert!(
        key.private_pem().starts_with("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI"),
        "{}",
        key.private_pem()
    );
    let old_pem = version_2_key_pem();
    let old = TokenKey::load(&old_pem).expect("an old-format key loads");
    assert_ne!(old.private_pem(), old_pem);
    assert!(old.private_pem().contains("MC4CAQAw"), "normalized to version 1");
    let again = TokenKey::load(old.private_pem()).expect("reloaded");
    assert_eq!(again.public_pem(), old.public_pem(), "the same key");
    let token = old.issue(&TokenClaims::new(&user("bob"), DEFAULT_AUDIENCE, hour())).expect("signed");
    assert!(verifier_for(&again).verify(&token).is_ok());
}

#[test]
fn openssl_reads_the_token_key_and_derives_the_same_public_key() {
    let openssl = std::path::Path::new("/usr/bin/openssl");
    assert!(openssl.is_file(), "this test runs the real OpenSSL and needs /usr/bin/openssl (apt-get install openssl)");
    let dir = tempfile::tempdir().expect("a temp dir");
    let certs = CertsDir::new(dir.path());
    let key = TokenKey::create().expect("a key");
    certs.write_token_key(&key).expect("written");
    let run = |args: &[&str]| {
        let output = std::process::Command::new(openssl).args(args).output().expect("run openssl");
        assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).expect("text")
    };
    let token_key = certs.token_key();
    let path = token_key.to_str().expect("a UTF-8 path");
    run(&["pkey", "-in", path, "-noout"]);
    assert_eq!(run(&["pkey", "-in", path, "-pubout"]), key.public_pem(), "OpenSSL derives token.pub");
    let public = certs.token_public();
    run(&["pkey", "-pubin", "-in", public.to_str().expect("a UTF-8 path"), "-noout"]);
}

#[test]
fn dev_material_rewrites_an_old_format_token_key_as_the_same_key() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let certs = CertsDir::new(dir.path());
    let old_pem = version_2_key_pem();
    std::fs::write(certs.token_key(), &old_pem).expect("written");
    let public_pem = TokenKey::load(&old_pem).expect("loads").public_pem().to_string();
    let material = create_dev_material(dir.path(), &[DevNode { id: 1, hosts: vec![] }], &user("admin")).expect("made");
    let rewritten = std::fs::read_to_string(certs.token_key()).expect("a file");
    assert_eq!(rewritten, material.token_key.private_pem());
    assert_ne!(rewritten, old_pem);
    assert_eq!(std::fs::read_to_string(certs.token_public()).expect("a file"), public_pem, "the same key");
}

#[test]
fn certificate_days_must_be_one_to_the_maximum() {
    for days in [0, limits::CERTIFICATE_DAYS_MAX + 1, u32::MAX] {
        let refused = Validity::checked_days(days).expect_err("refused");
        assert!(matches!(refused, PkiError::Days(refused_days) if refused_days == days));
    }
    assert_eq!(
        PkiError::Days(0).to_string(),
        format!("a certificate must be valid for 1 to {} days, not 0", limits::CERTIFICATE_DAYS_MAX)
    );
    for days in [1, limits::CERTIFICATE_DAYS_MAX] {
        let validity = Validity::checked_days(days).expect("accepted");
        assert!(validity.not_after > validity.not_before);
    }
}
