//! The binary's security commands and flags: `gavel node` refuses to start
//! without TLS material unless `--insecure` (and then warns), `gavel cert`
//! writes a CA and certificates that chain and name their principal, and
//! `gavel token issue` prints a token the nodes' verifier accepts.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gavel_pki::{
    principal_from_certificate, CertsDir, GrantName, Principal, PrincipalKind, TokenVerifier, TokenVerifierSettings,
};

fn gavel() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gavel"))
}

fn free_port() -> u16 {
    gavel_testkit::free_port().expect("a free port")
}

fn der(pem: &str) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).expect("a certificate").to_vec()
}

#[test]
fn a_node_without_tls_material_refuses_to_start_with_exit_2() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let output = gavel()
        .args(["node", "--id=1", &format!("--listen=127.0.0.1:{}", free_port())])
        .arg(format!("--data-dir={}", dir.path().join("n1").display()))
        .env_remove("GAVEL_CERTS_DIR")
        .output()
        .expect("run gavel node");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("needs TLS material") && stderr.contains("--insecure"), "{stderr}");
}

#[test]
fn a_node_refuses_insecure_mixed_with_tls_material_and_missing_files() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let base = ["node", "--id=1"];
    let listen = format!("--listen=127.0.0.1:{}", free_port());
    let data = format!("--data-dir={}", dir.path().join("n1").display());
    let mixed = gavel()
        .args(base)
        .args([&listen, &data, "--insecure", &format!("--certs-dir={}", dir.path().display())])
        .output()
        .expect("run gavel node");
    assert_eq!(mixed.status.code(), Some(2), "{mixed:?}");
    let missing = gavel()
        .args(base)
        .args([&listen, &data, &format!("--certs-dir={}", dir.path().display())])
        .output()
        .expect("run");
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("ca.pem"), "{missing:?}");
}

#[test]
fn an_insecure_node_warns_when_it_starts() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = free_port();
    let mut node = gavel()
        .args(["node", "--id=1", &format!("--listen=127.0.0.1:{port}"), &format!("--peers=1=127.0.0.1:{port}")])
        .arg(format!("--data-dir={}", dir.path().join("n1").display()))
        .arg("--insecure")
        .env("GAVEL_LOG", "warn")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn gavel node");
    let stderr = node.stderr.take().expect("stderr");
    let (lines, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let started = Instant::now();
    let mut warned = None;
    while started.elapsed() < Duration::from_secs(20) {
        match receive.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains("--insecure") => {
                warned = Some(line);
                break;
            }
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = node.kill();
    let _ = node.wait();
    let warned = warned.expect("a warning naming --insecure");
    assert!(warned.contains("WARN") && warned.contains("no authentication"), "{warned}");
}

#[test]
fn cert_commands_write_a_ca_and_certificates_naming_their_principals() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let certs_dir = dir.path().join("certs");
    let flag = format!("--certs-dir={}", certs_dir.display());
    let run = |args: &[&str]| gavel().arg("cert").args(args).arg(&flag).output().expect("run gavel cert");
    let created = run(&["create-ca"]);
    assert!(created.status.success(), "{created:?}");
    let again = run(&["create-ca"]);
    assert_eq!(again.status.code(), Some(2), "a second CA would orphan the first: {again:?}");
    assert!(run(&["create-node", "--id=2", "--host=10.1.0.2"]).status.success());
    assert!(run(&["create-client", "--principal=worker:refunds-1"]).status.success());
    let bad = run(&["create-client", "--principal=robot:x"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");

    let certs = CertsDir::new(&certs_dir);
    let read = |path: std::path::PathBuf| std::fs::read_to_string(path).expect("written");
    assert_eq!(principal_from_certificate(&der(&read(certs.node_cert(2)))), Ok(Principal::node(2)));
    let worker = Principal::new(PrincipalKind::Worker, "refunds-1").expect("a principal");
    assert_eq!(principal_from_certificate(&der(&read(certs.cert(&worker)))), Ok(worker));
    assert!(certs.token_key().is_file() && certs.token_public().is_file());
}

#[test]
fn token_issue_prints_a_token_the_nodes_accept() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let flag = format!("--certs-dir={}", dir.path().display());
    assert!(gavel().args(["cert", "create-ca", &flag]).status().expect("run").success());
    let output = gavel()
        .args(["token", "issue", "--sub=service:billing", "--roles=submitter,act-for", "--ttl=10m", &flag])
        .output()
        .expect("run gavel token issue");
    assert!(output.status.success(), "{output:?}");
    let token = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let settings =
        TokenVerifierSettings::from_files("gavel", &[CertsDir::new(dir.path()).token_public()], None).expect("key");
    let caller = TokenVerifier::new(&settings).expect("a verifier").verify(&token).expect("accepted");
    assert_eq!(caller.principal, Principal::new(PrincipalKind::Service, "billing").expect("a principal"));
    assert_eq!(caller.scope, Some([GrantName::Submitter, GrantName::ActFor].into_iter().collect()));
    let bad = gavel().args(["token", "issue", "--sub=service:billing", "--roles=root", &flag]).output().expect("run");
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
}

#[test]
fn cert_commands_refuse_zero_days_and_write_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let certs_dir = dir.path().join("certs");
    let flag = format!("--certs-dir={}", certs_dir.display());
    let run = |args: &[&str]| gavel().arg("cert").args(args).arg(&flag).output().expect("run gavel cert");
    let refused = run(&["create-ca", "--days=0"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--days: a certificate must be valid for 1 to 36500 days, not 0"), "{stderr}");
    assert!(!certs_dir.join("ca.pem").exists(), "nothing written: {refused:?}");
    assert!(run(&["create-ca"]).status.success());
    for args in [
        &["create-client", "--principal=user:bob", "--days=0"][..],
        &["create-node", "--id=1", "--days=0"],
        &["create-client", "--principal=user:bob", "--days=4294967295"],
    ] {
        let refused = run(args);
        assert_eq!(refused.status.code(), Some(2), "{args:?}: {refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("a certificate must be valid for 1 to"),
            "{refused:?}"
        );
    }
    let certs = CertsDir::new(&certs_dir);
    let bob = Principal::new(PrincipalKind::User, "bob").expect("a principal");
    assert!(!certs.cert(&bob).exists() && !certs.node_cert(1).exists(), "no certificate written");
    assert!(run(&["create-client", "--principal=user:bob", "--days=1"]).status.success());
}

#[test]
fn token_issue_refuses_what_a_node_would_refuse() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let flag = format!("--certs-dir={}", dir.path().display());
    assert!(gavel().args(["cert", "create-ca", &flag]).status().expect("run").success());
    let issue = |args: &[&str]| gavel().args(["token", "issue"]).args(args).arg(&flag).output().expect("run");
    let long = issue(&["--sub=user:bob", "--ttl=48h"]);
    assert_eq!(long.status.code(), Some(2), "{long:?}");
    let stderr = String::from_utf8_lossy(&long.stderr);
    assert!(
        stderr.contains(
            "not issuing this token: the token is valid for 2d (exp - iat), over the maximum token lifetime of 1d"
        ),
        "{stderr}"
    );
    assert!(long.stdout.is_empty(), "{long:?}");
    let node = issue(&["--sub=node:1"]);
    assert_eq!(node.status.code(), Some(2), "{node:?}");
    assert!(
        String::from_utf8_lossy(&node.stderr).contains("nodes authenticate with their certificate only"),
        "{node:?}"
    );
    let ceiling = issue(&["--sub=user:bob", "--lifetime-max=400d"]);
    assert_eq!(ceiling.status.code(), Some(2), "{ceiling:?}");
    // The default lifetime fits the default bound; a node configured for a
    // week takes a token told so.
    let week = TokenVerifierSettings {
        lifetime_max: Duration::from_secs(7 * 86_400),
        ..TokenVerifierSettings::from_files("gavel", &[CertsDir::new(dir.path()).token_public()], None).expect("key")
    };
    let verifier = TokenVerifier::new(&week).expect("a verifier");
    for args in [
        &["--sub=user:bob"][..],
        &["--sub=user:bob", "--ttl=24h"],
        &["--sub=user:bob", "--ttl=7d", "--lifetime-max=7d"],
    ] {
        let issued = issue(args);
        assert!(issued.status.success(), "{args:?}: {issued:?}");
        let token = String::from_utf8_lossy(&issued.stdout).trim().to_string();
        assert!(verifier.verify(&token).is_ok(), "{args:?}");
    }
}

#[test]
fn openssl_reads_the_token_key_gavel_cert_writes() {
    let openssl = std::path::Path::new("/usr/bin/openssl");
    assert!(openssl.is_file(), "this test runs the real OpenSSL and needs /usr/bin/openssl (apt-get install openssl)");
    let dir = tempfile::tempdir().expect("a temp dir");
    let flag = format!("--certs-dir={}", dir.path().display());
    assert!(gavel().args(["cert", "create-ca", &flag]).status().expect("run").success());
    let certs = CertsDir::new(dir.path());
    let output = Command::new(openssl)
        .args(["pkey", "-pubout", "-in"])
        .arg(certs.token_key())
        .output()
        .expect("run openssl pkey");
    assert!(output.status.success(), "openssl pkey: {}", String::from_utf8_lossy(&output.stderr));
    let public = std::fs::read_to_string(certs.token_public()).expect("token.pub");
    assert_eq!(String::from_utf8_lossy(&output.stdout), public, "OpenSSL derives the token.pub gavel wrote");
}
