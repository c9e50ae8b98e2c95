//! The cluster CA: creates itself, loads from PEM, issues node and client
//! certificates whose one SAN URI names their principal.

use std::net::IpAddr;
use std::str::FromStr;

use gavel_core::{Principal, PrincipalKind};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::{SecureRandom, SystemRandom};

use crate::{PkiError, Validity};

/// Bytes of a certificate serial number (RFC 5280 allows up to 20).
const SERIAL_BYTES: usize = 16;

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// The certificate (`CERTIFICATE` PEM).
    pub cert_pem: String,
    /// Its private key (PKCS#8 `PRIVATE KEY` PEM).
    pub key_pem: String,
}

/// A certificate authority that signs node and client certificates.
pub struct Authority {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The signing key stays out of logs.
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

impl Authority {
    /// A new self-signed CA named `name` (its subject common name), with a
    /// fresh P-256 key.
    pub fn create(name: &str, validity: Validity) -> Result<Authority, PkiError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        params.serial_number = Some(random_serial()?);
        let cert = params.self_signed(&key)?;
        Ok(Authority { cert_pem: cert.pem(), issuer: Issuer::new(params, key) })
    }

    /// The CA whose certificate and PKCS#8 private key are these PEM texts.
    pub fn load(cert_pem: &str, key_pem: &str) -> Result<Authority, PkiError> {
        let key = KeyPair::from_pem(key_pem)
            .map_err(|error| PkiError::Key { what: "CA key".to_string(), reason: error.to_string() })?;
        let issuer = Issuer::from_ca_cert_pem(cert_pem, key)?;
        Ok(Authority { cert_pem: cert_pem.to_string(), issuer })
    }

    /// The CA certificate (PEM): what clients and nodes trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key (PKCS#8 PEM).
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A certificate for `principal`, signed by this CA, with a fresh P-256
    /// key. Its only SAN URI is `gavel://kind/id`; each of `hosts` becomes
    /// a DNS or IP SAN. A node certificate may serve as server and as client
    /// certificate (EKU serverAuth and clientAuth); any other principal's
    /// only as a client certificate.
    pub fn issue(
        &self,
        principal: &Principal,
        hosts: &[String],
        validity: Validity,
    ) -> Result<IssuedCertificate, PkiError> {
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(&principal.to_string());
        params.subject_alt_names.push(SanType::URI(principal.to_uri().as_str().try_into()?));
        for host in hosts {
            params.subject_alt_names.push(host_san(host)?);
        }
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = match principal.kind {
            PrincipalKind::Node => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
            _ => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        params.use_authority_key_identifier_extension = true;
        params.not_before = validity.not_before;
        params.not_after = validity.not_after;
        params.serial_number = Some(random_serial()?);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCertificate { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

/// The hosts every node certificate names besides its advertise host, so
/// that local clients can dial `localhost` or `127.0.0.1`.
pub fn node_hosts(advertise_hosts: &[String]) -> Vec<String> {
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    for host in advertise_hosts {
        if !hosts.contains(host) {
            hosts.push(host.clone());
        }
    }
    hosts
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Gavel");
    name.push(DnType::CommonName, common_name);
    name
}

fn host_san(host: &str) -> Result<SanType, PkiError> {
    if let Ok(ip) = IpAddr::from_str(host) {
        return Ok(SanType::IpAddress(ip));
    }
    let well_formed = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !well_formed {
        return Err(PkiError::Host(host.to_string()));
    }
    Ok(SanType::DnsName(host.try_into().map_err(|_| PkiError::Host(host.to_string()))?))
}

fn random_serial() -> Result<SerialNumber, PkiError> {
    let mut bytes = [0u8; SERIAL_BYTES];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| PkiError::Key { what: "serial number".to_string(), reason: "no randomness".to_string() })?;
    // A serial is a positive integer: clear the sign bit.
    bytes[0] &= 0x7f;
    Ok(SerialNumber::from_slice(&bytes))
}
