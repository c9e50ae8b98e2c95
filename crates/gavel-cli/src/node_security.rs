//! `gavel node`'s security flags turned into the node's
//! [`gavel_server::security::Security`]: TLS material from `--certs-dir` or
//! `--tls-ca/--tls-cert/--tls-key`, token keys, the first admin, or
//! `--insecure`. Without TLS material and without `--insecure` the node
//! refuses to start ([`NodeUsageError`], exit code 2).

use std::path::Path;

use gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT;
use gavel_pki::{CertsDir, Principal};
use gavel_server::security::{Security, TlsFiles, TokenSettings};

use crate::cli::NodeSecurityArgs;

/// A `gavel node` command line that cannot start a node (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NodeUsageError(pub String);

fn usage<T>(message: impl Into<String>) -> Result<T, NodeUsageError> {
    Err(NodeUsageError(message.into()))
}

/// The security settings node `id` runs with.
pub fn node_security(id: u64, args: &NodeSecurityArgs) -> Result<Security, NodeUsageError> {
    let explicit = [&args.tls_ca, &args.tls_cert, &args.tls_key];
    let any_explicit = explicit.iter().any(|file| file.is_some());
    let wants_tokens = !args.token_keys.is_empty() || args.token_hs256_secret.is_some() || args.oidc_issuer.is_some();
    if args.insecure {
        if args.certs_dir.is_some() || any_explicit || wants_tokens {
            return usage(
                "--insecure runs plaintext without authentication: drop --certs-dir, --tls-*, --token-key, \
                 --token-hs256-secret and --oidc-*, or drop --insecure",
            );
        }
        return Ok(Security { bootstrap_admin: bootstrap_admin(args)?, ..Security::insecure() });
    }
    let mut token_keys = args.token_keys.clone();
    let tls = match (&args.certs_dir, &args.tls_ca, &args.tls_cert, &args.tls_key) {
        (Some(_), _, _, _) if any_explicit => {
            return usage("give either --certs-dir or --tls-ca/--tls-cert/--tls-key, not both")
        }
        (Some(dir), _, _, _) => {
            let certs = CertsDir::new(dir);
            if certs.token_public().is_file() && !token_keys.contains(&certs.token_public()) {
                token_keys.push(certs.token_public());
            }
            TlsFiles { ca: certs.ca_cert(), cert: certs.node_cert(id), key: certs.node_key(id) }
        }
        (None, Some(ca), Some(cert), Some(key)) => TlsFiles { ca: ca.clone(), cert: cert.clone(), key: key.clone() },
        (None, None, None, None) => {
            return usage(
                "gavel node needs TLS material: --certs-dir DIR (from `gavel cert` or `gavel dev`), or --tls-ca, \
                 --tls-cert and --tls-key; or --insecure to run plaintext without authentication",
            )
        }
        _ => return usage("--tls-ca, --tls-cert and --tls-key go together"),
    };
    for (flag, file) in [("CA", &tls.ca), ("certificate", &tls.cert), ("key", &tls.key)] {
        readable(&format!("TLS {flag}"), file)?;
    }
    for key in &token_keys {
        readable("token key", key)?;
    }
    if let Some(secret) = &args.token_hs256_secret {
        readable("HS256 secret", secret)?;
    }
    let tokens = (!token_keys.is_empty() || args.token_hs256_secret.is_some()).then(|| TokenSettings {
        audience: args.token_audience.clone(),
        public_keys: token_keys,
        hs256_secret: args.token_hs256_secret.clone(),
        lifetime_max: args.token_lifetime_max.unwrap_or(TOKEN_LIFETIME_MAX_DEFAULT),
    });
    Ok(Security { tls: Some(tls), tokens, oidc: oidc(args)?, bootstrap_admin: bootstrap_admin(args)? })
}

/// The OpenID Provider settings of `--oidc-*`, with the clock skew Gavel's
/// own tokens are checked with.
fn oidc(args: &NodeSecurityArgs) -> Result<Option<gavel_oidc::ProviderSettings>, NodeUsageError> {
    let (Some(issuer), Some(audience)) = (&args.oidc_issuer, &args.oidc_audience) else {
        return Ok(None);
    };
    if let Some(file) = &args.oidc.oidc_ca_file {
        readable("--oidc-ca-file", file)?;
    }
    let jwks = gavel_oidc::JwksSource::from_flag(args.oidc_jwks.as_deref());
    if let gavel_oidc::JwksSource::File(file) = &jwks {
        readable("--oidc-jwks", file)?;
    }
    Ok(Some(args.oidc.provider_settings(issuer, audience, jwks)))
}

fn bootstrap_admin(args: &NodeSecurityArgs) -> Result<Option<Principal>, NodeUsageError> {
    match &args.bootstrap_admin {
        None => Ok(None),
        Some(text) => {
            Principal::parse(text).map(Some).map_err(|error| NodeUsageError(format!("--bootstrap-admin: {error}")))
        }
    }
}

fn readable(what: &str, path: &Path) -> Result<(), NodeUsageError> {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_file() => Ok(()),
        Ok(_) => usage(format!("{what} {} is not a file", path.display())),
        Err(error) => usage(format!("{what} {}: {error}", path.display())),
    }
}

/// One line saying how the node is secured, for its start log.
pub fn describe(security: &Security) -> String {
    match &security.tls {
        None => "plaintext (--insecure)".to_string(),
        Some(tls) => {
            let tokens = security.tokens.as_ref().map_or(0, |tokens| tokens.public_keys.len());
            let oidc = security.oidc.as_ref().map_or(String::new(), |oidc| {
                format!(", ID tokens of {} for {}", oidc.rules.issuer, oidc.rules.audience)
            });
            format!("TLS with {} (CA {}), {tokens} token key(s){oidc}", display(&tls.cert), display(&tls.ca))
        }
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use gavel_pki::{create_dev_material, DevNode, PrincipalKind};

    use super::*;

    fn args() -> NodeSecurityArgs {
        NodeSecurityArgs {
            token_audience: "gavel".to_string(),
            oidc: crate::cli::OidcPrincipalArgs {
                oidc_ca_file: None,
                oidc_principal_claim: "email".to_string(),
                oidc_principal_prefix: "user:".to_string(),
            },
            ..NodeSecurityArgs::default()
        }
    }

    #[test]
    fn oidc_flags_reach_the_node_with_gavel_s_clock_skew_and_need_tls() {
        let dir = tempfile::tempdir().expect("temp dir");
        let admin = Principal::parse("user:root").expect("a principal");
        create_dev_material(dir.path(), &[DevNode { id: 1, hosts: vec![] }], &admin).expect("material");
        let with_oidc = NodeSecurityArgs {
            certs_dir: Some(dir.path().to_path_buf()),
            oidc_issuer: Some("https://id.example.com".to_string()),
            oidc_audience: Some("gavel-console".to_string()),
            ..args()
        };
        let oidc = node_security(1, &with_oidc).expect("secure").oidc.expect("oidc");
        assert_eq!(oidc.rules.audience, "gavel-console");
        assert_eq!(oidc.rules.clock_skew_seconds, gavel_pki::limits::TOKEN_CLOCK_SKEW_SECONDS);
        assert_eq!(oidc.jwks, gavel_oidc::JwksSource::Discovery);
        let missing_jwks = NodeSecurityArgs { oidc_jwks: Some("/nonexistent/jwks.json".to_string()), ..with_oidc };
        assert!(node_security(1, &missing_jwks).expect_err("no file").0.contains("--oidc-jwks"));
        let insecure = NodeSecurityArgs {
            insecure: true,
            oidc_issuer: Some("http://127.0.0.1:9".to_string()),
            oidc_audience: Some("c".to_string()),
            ..args()
        };
        assert!(node_security(1, &insecure).expect_err("insecure").0.contains("--oidc-*"));
    }

    #[test]
    fn no_tls_material_and_no_insecure_is_refused() {
        let refused = node_security(1, &args()).expect_err("refused");
        assert!(refused.0.contains("--insecure"), "{refused}");
    }

    #[test]
    fn insecure_is_plaintext_and_refuses_tls_material() {
        let insecure = node_security(1, &NodeSecurityArgs { insecure: true, ..args() }).expect("insecure");
        assert!(insecure.tls.is_none() && insecure.tokens.is_none());
        let mixed = NodeSecurityArgs { insecure: true, certs_dir: Some(PathBuf::from("/c")), ..args() };
        assert!(node_security(1, &mixed).is_err());
    }

    #[test]
    fn a_certs_dir_names_the_node_files_and_the_token_key() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let admin = Principal::new(PrincipalKind::User, "admin").expect("a principal");
        create_dev_material(dir.path(), &[DevNode { id: 2, hosts: vec![] }], &admin).expect("material");
        let security = node_security(
            2,
            &NodeSecurityArgs {
                certs_dir: Some(dir.path().to_path_buf()),
                bootstrap_admin: Some("user:admin".to_string()),
                ..args()
            },
        )
        .expect("secure");
        let tls = security.tls.expect("TLS");
        assert_eq!(tls.cert, dir.path().join("node-2.pem"));
        assert_eq!(tls.key, dir.path().join("node-2.key"));
        assert_eq!(tls.ca, dir.path().join("ca.pem"));
        let tokens = security.tokens.expect("tokens");
        assert_eq!(tokens.public_keys, vec![dir.path().join("token.pub")]);
        assert_eq!(tokens.audience, "gavel");
        assert_eq!(tokens.lifetime_max, TOKEN_LIFETIME_MAX_DEFAULT, "24 h unless --token-lifetime-max");
        let week = std::time::Duration::from_secs(7 * 86_400);
        let configured =
            NodeSecurityArgs { certs_dir: Some(dir.path().to_path_buf()), token_lifetime_max: Some(week), ..args() };
        let tokens = node_security(2, &configured).expect("secure").tokens.expect("tokens");
        assert_eq!(tokens.lifetime_max, week, "--token-lifetime-max reaches the verifier settings");
        assert_eq!(security.bootstrap_admin, Some(admin));
        // Node 3 has no certificate there.
        let missing = node_security(3, &NodeSecurityArgs { certs_dir: Some(dir.path().to_path_buf()), ..args() });
        assert!(missing.expect_err("no node-3.pem").0.contains("node-3.pem"));
    }

    #[test]
    fn partial_tls_flags_and_bad_admins_are_refused() {
        let partial = NodeSecurityArgs { tls_ca: Some(PathBuf::from("/c/ca.pem")), ..args() };
        assert!(node_security(1, &partial).expect_err("partial").0.contains("go together"));
        let bad_admin = NodeSecurityArgs { insecure: true, bootstrap_admin: Some("root".to_string()), ..args() };
        assert!(node_security(1, &bad_admin).expect_err("bad admin").0.contains("--bootstrap-admin"));
    }
}
