//! The certificate directory layout shared by `gavel cert`, `gavel dev`,
//! `gavel node --certs-dir` and the testkit, and the development material
//! written into it.

use std::path::{Path, PathBuf};

use gavel_core::{Principal, PrincipalKind};

use crate::{node_hosts, Authority, IssuedCertificate, PkiError, TokenKey, Validity};

/// A certificate directory: `ca.pem`, `ca.key`, `node-<id>.pem`,
/// `node-<id>.key`, `client-<kind>-<id>.pem`, `client-<kind>-<id>.key`,
/// `token.key` (Ed25519 PKCS#8 version 1 PEM) and `token.pub` (SPKI PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertsDir {
    root: PathBuf,
}

impl CertsDir {
    /// The layout under `root`.
    pub fn new(root: impl Into<PathBuf>) -> CertsDir {
        CertsDir { root: root.into() }
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The CA certificate.
    pub fn ca_cert(&self) -> PathBuf {
        self.root.join("ca.pem")
    }

    /// The CA private key.
    pub fn ca_key(&self) -> PathBuf {
        self.root.join("ca.key")
    }

    /// Node `id`'s certificate.
    pub fn node_cert(&self, id: u64) -> PathBuf {
        self.root.join(format!("node-{id}.pem"))
    }

    /// Node `id`'s private key.
    pub fn node_key(&self, id: u64) -> PathBuf {
        self.root.join(format!("node-{id}.key"))
    }

    /// The certificate of `principal`: `node-<id>.pem` for a node,
    /// `client-<kind>-<id>.pem` otherwise.
    pub fn cert(&self, principal: &Principal) -> PathBuf {
        self.root.join(format!("{}.pem", file_stem(principal)))
    }

    /// The private key of `principal`, next to its certificate.
    pub fn key(&self, principal: &Principal) -> PathBuf {
        self.root.join(format!("{}.key", file_stem(principal)))
    }

    /// The token signing key.
    pub fn token_key(&self) -> PathBuf {
        self.root.join("token.key")
    }

    /// The token verification key.
    pub fn token_public(&self) -> PathBuf {
        self.root.join("token.pub")
    }

    /// Writes `certificate` as `principal`'s certificate and key.
    pub fn write_certificate(&self, principal: &Principal, certificate: &IssuedCertificate) -> Result<(), PkiError> {
        self.create()?;
        write_public(&self.cert(principal), &certificate.cert_pem)?;
        write_secret(&self.key(principal), &certificate.key_pem)
    }

    /// Writes the CA certificate and key.
    pub fn write_authority(&self, authority: &Authority) -> Result<(), PkiError> {
        self.create()?;
        write_public(&self.ca_cert(), authority.cert_pem())?;
        write_secret(&self.ca_key(), &authority.key_pem())
    }

    /// Writes the token key pair.
    pub fn write_token_key(&self, key: &TokenKey) -> Result<(), PkiError> {
        self.create()?;
        write_secret(&self.token_key(), key.private_pem())?;
        write_public(&self.token_public(), key.public_pem())
    }

    /// The CA stored here.
    pub fn load_authority(&self) -> Result<Authority, PkiError> {
        Authority::load(&read(&self.ca_cert())?, &read(&self.ca_key())?)
    }

    /// The token key stored here.
    pub fn load_token_key(&self) -> Result<TokenKey, PkiError> {
        TokenKey::load_file(&self.token_key())
    }

    fn create(&self) -> Result<(), PkiError> {
        std::fs::create_dir_all(&self.root).map_err(|source| PkiError::Io { path: self.root.clone(), source })
    }
}

fn file_stem(principal: &Principal) -> String {
    match principal.kind {
        PrincipalKind::Node => format!("node-{}", principal.id),
        kind => format!("client-{}-{}", kind.as_str(), principal.id),
    }
}

/// Reads a PEM file.
pub(crate) fn read(path: &Path) -> Result<String, PkiError> {
    std::fs::read_to_string(path).map_err(|source| PkiError::Io { path: path.to_path_buf(), source })
}

fn write_public(path: &Path, text: &str) -> Result<(), PkiError> {
    std::fs::write(path, text).map_err(|source| PkiError::Io { path: path.to_path_buf(), source })
}

/// Writes a private key readable by its owner only.
fn write_secret(path: &Path, text: &str) -> Result<(), PkiError> {
    use std::io::Write;
    let io = |source| PkiError::Io { path: path.to_path_buf(), source };
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).map_err(io)?;
    file.write_all(text.as_bytes()).map_err(io)
}

/// A node that development material is made for: its id and the hosts its
/// certificate names besides `localhost` and `127.0.0.1` (its advertise host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevNode {
    /// The node id.
    pub id: u64,
    /// Extra SAN hosts, typically the advertise host.
    pub hosts: Vec<String>,
}

/// What [`create_dev_material`] wrote.
#[derive(Debug)]
pub struct DevMaterial {
    /// Where.
    pub dir: CertsDir,
    /// The CA (to issue more client certificates on demand).
    pub authority: Authority,
    /// The token signing key (to issue tokens on demand).
    pub token_key: TokenKey,
    /// The admin the client certificate was issued to.
    pub admin: Principal,
}

/// Writes a development PKI into `dir`: a CA (kept if `dir` already holds
/// one, so restarting `gavel dev` does not invalidate issued credentials),
/// a certificate for each of `nodes`, a client certificate for `admin`, and
/// a token key pair (also kept if present, and rewritten in the PKCS#8
/// version 1 form if an earlier version wrote it).
pub fn create_dev_material(dir: &Path, nodes: &[DevNode], admin: &Principal) -> Result<DevMaterial, PkiError> {
    let certs = CertsDir::new(dir);
    let authority = if certs.ca_cert().exists() && certs.ca_key().exists() {
        certs.load_authority()?
    } else {
        let authority = Authority::create("Gavel development CA", Validity::authority_default())?;
        certs.write_authority(&authority)?;
        authority
    };
    for node in nodes {
        let principal = Principal::node(node.id);
        let issued = authority.issue(&principal, &node_hosts(&node.hosts), Validity::leaf_default())?;
        certs.write_certificate(&principal, &issued)?;
    }
    let issued = authority.issue(admin, &[], Validity::leaf_default())?;
    certs.write_certificate(admin, &issued)?;
    let token_key = if certs.token_key().exists() {
        let key = certs.load_token_key()?;
        // A key an earlier version wrote (PKCS#8 version 2) is rewritten in
        // the version 1 form OpenSSL reads: the same key.
        if read(&certs.token_key())? != key.private_pem() {
            write_secret(&certs.token_key(), key.private_pem())?;
        }
        write_public(&certs.token_public(), key.public_pem())?;
        key
    } else {
        let key = TokenKey::create()?;
        certs.write_token_key(&key)?;
        key
    };
    Ok(DevMaterial { dir: certs, authority, token_key, admin: admin.clone() })
}
