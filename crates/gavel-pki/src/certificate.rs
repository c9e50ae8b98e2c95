//! Which principal a certificate names.

use gavel_core::Principal;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::CertificateError;

/// The principal named by the one SAN URI `gavel://kind/id` of a DER
/// certificate. The TLS handshake has already checked the chain; this only
/// reads the name.
pub fn principal_from_certificate(der: &[u8]) -> Result<Principal, CertificateError> {
    let (_, certificate) =
        X509Certificate::from_der(der).map_err(|error| CertificateError::Unparsable(error.to_string()))?;
    let names = certificate
        .subject_alternative_name()
        .map_err(|error| CertificateError::Unparsable(error.to_string()))?
        .map(|extension| extension.value.general_names.clone())
        .unwrap_or_default();
    let uris: Vec<&str> = names
        .iter()
        .filter_map(|name| match name {
            GeneralName::URI(uri) => Some(*uri),
            _ => None,
        })
        .collect();
    match uris.as_slice() {
        [] => Err(CertificateError::NoPrincipal),
        [uri] => Principal::from_uri(uri).map_err(CertificateError::BadPrincipal),
        several => Err(CertificateError::SeveralPrincipals(several.len())),
    }
}
