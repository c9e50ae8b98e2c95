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
    TokenVerifier::new(&TokenVerifierSettings {
        audience: DEFAULT_AUDIENCE.to_string(),
        public_keys_pem: vec![key.public_pem().to_string()],
        hs256_secret: None,
    })
    .expect("a verifier")
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
    claims.exp = unix_seconds() - EXPIRY_LEEWAY_SECONDS - 60;
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
