//! Challenges: what the CA asks to see (RFC 8555 section 8.3 http-01, RFC 8737
//! tls-alpn-01), made here and shown by the caller through a [`ChallengeBoard`].

use aws_lc_rs::digest::{digest, SHA256};
use rcgen::{CertificateParams, CustomExtension, KeyPair, PKCS_ECDSA_P256_SHA256};

use crate::error::Error;

/// The ALPN protocol name a tls-alpn-01 validation connects with (RFC 8737 section 6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The path prefix under which http-01 key authorizations are served.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// Which challenge type to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChallengeKind {
    /// `http-01`: the key authorization at `http://NAME/.well-known/acme-challenge/TOKEN`,
    /// port 80.
    Http01,
    /// `tls-alpn-01`: a self-signed certificate for NAME with the `acmeIdentifier`
    /// extension, to a TLS client on port 443 that offers ALPN `acme-tls/1` and no other.
    TlsAlpn01,
}

impl ChallengeKind {
    /// The type's name in ACME (`http-01`, `tls-alpn-01`).
    pub fn as_str(self) -> &'static str {
        match self {
            ChallengeKind::Http01 => "http-01",
            ChallengeKind::TlsAlpn01 => "tls-alpn-01",
        }
    }
}

/// The certificate a tls-alpn-01 validation must be shown, with its key.
///
/// With rustls, make its `CertifiedKey` with `CertifiedKey::new` and the provider's
/// `load_private_key`: `CertifiedKey::from_der` checks the pair by parsing the certificate
/// with webpki, which refuses the critical acmeIdentifier extension every such certificate
/// has.
#[derive(Clone)]
pub struct AlpnCertificate {
    /// The self-signed certificate, DER.
    pub certificate_der: Vec<u8>,
    /// Its P-256 key, PKCS#8 DER.
    pub key_pkcs8_der: Vec<u8>,
}

impl AlpnCertificate {
    /// The certificate and then its key, PEM: one file a server that serves the challenge
    /// from disk reads both from.
    pub fn to_pem(&self) -> String {
        let mut out = crate::jws::pem("CERTIFICATE", &self.certificate_der);
        out.push_str(&crate::jws::pem("PRIVATE KEY", &self.key_pkcs8_der));
        out
    }
}

impl std::fmt::Debug for AlpnCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlpnCertificate")
            .field("certificate_der", &self.certificate_der.len())
            .finish_non_exhaustive()
    }
}

/// One challenge to show while the CA validates it.
#[derive(Debug, Clone)]
pub struct Published {
    /// The DNS name being validated.
    pub name: String,
    /// The challenge type.
    pub kind: ChallengeKind,
    /// The challenge's token.
    pub token: String,
    /// The key authorization: for http-01, the whole body to answer
    /// `GET /.well-known/acme-challenge/TOKEN` with (`Content-Type: application/octet-stream`
    /// or `text/plain`).
    pub key_authorization: String,
    /// For tls-alpn-01, the certificate to present to a handshake with SNI `name` and ALPN
    /// `acme-tls/1` (and to no other).
    pub alpn_certificate: Option<AlpnCertificate>,
}

impl Published {
    /// The http-01 path this challenge is served at.
    pub fn http01_path(&self) -> String {
        format!("{HTTP01_PREFIX}{}", self.token)
    }
}

/// Where challenges are shown: the server answers what is published until it is withdrawn.
///
/// [`crate::obtain`] calls `publish` before telling the CA to validate, and `withdraw`
/// once the authorization is settled, whatever the outcome. Both are called from the
/// thread that runs the order; an implementation shared with serving workers must be
/// `Sync` and must make a published challenge visible to them before `publish` returns.
pub trait ChallengeBoard {
    /// Starts answering `challenge`.
    fn publish(&self, challenge: &Published);
    /// Stops answering `challenge`.
    fn withdraw(&self, challenge: &Published);
}

/// The tls-alpn-01 certificate for `name` (RFC 8737 section 3): self-signed, a fresh
/// P-256 key, `name` as its only subject alternative name, and the critical
/// `acmeIdentifier` extension holding SHA-256 of the key authorization.
pub fn tls_alpn01_certificate(
    name: &str,
    key_authorization: &str,
) -> Result<AlpnCertificate, Error> {
    let failed = |e: rcgen::Error| Error::Local(format!("tls-alpn-01 certificate for {name}: {e}"));
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(failed)?;
    let mut params = CertificateParams::new(vec![name.to_string()]).map_err(failed)?;
    let hash = digest(&SHA256, key_authorization.as_bytes());
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(hash.as_ref())];
    let cert = params.self_signed(&key).map_err(failed)?;
    Ok(AlpnCertificate {
        certificate_der: cert.der().to_vec(),
        key_pkcs8_der: key.serialize_der(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_parser::oid_registry::Oid;

    #[test]
    fn the_alpn_certificate_carries_the_hash_of_the_key_authorization() {
        let keyauth = "token.thumbprint";
        let cert = tls_alpn01_certificate("a.example.test", keyauth).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&cert.certificate_der).unwrap();
        // id-pe-acmeIdentifier, 1.3.6.1.5.5.7.1.31, critical, an OCTET STRING of the hash.
        let oid = Oid::from(&[1, 3, 6, 1, 5, 5, 7, 1, 31]).unwrap();
        let ext = parsed
            .extensions()
            .iter()
            .find(|e| e.oid == oid)
            .expect("acmeIdentifier");
        assert!(ext.critical);
        let mut expected = vec![0x04, 32];
        expected.extend_from_slice(digest(&SHA256, keyauth.as_bytes()).as_ref());
        assert_eq!(ext.value, &expected[..]);
        let san = parsed.subject_alternative_name().unwrap().unwrap();
        assert_eq!(san.value.general_names.len(), 1);
        assert_eq!(
            san.value.general_names[0].to_string(),
            "DNSName(a.example.test)"
        );
        // The key is the certificate's.
        let key = KeyPair::try_from(&cert.key_pkcs8_der[..]).unwrap();
        assert_eq!(
            key.public_key_raw(),
            parsed.public_key().subject_public_key.data.as_ref()
        );
    }
}
