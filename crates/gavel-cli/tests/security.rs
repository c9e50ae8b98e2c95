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
