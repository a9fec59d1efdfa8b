//! Certificates and keys: read from PEM files, matched with each other, and described for
//! `fastpath check`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::TlsError;

/// A certificate chain and its key, by file, and the host names it is served for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFiles {
    /// The names (exact, or `*.example.com`) whose SNI chooses this certificate, in lower
    /// case; empty for one that is only the default.
    pub names: Vec<String>,
    /// PEM: the certificate first, then its intermediates.
    pub chain: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: PathBuf,
}

/// What [`inspect`] found in a certificate and its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateReport {
    /// The DNS names the certificate covers (its subject alternative names).
    pub covers: Vec<String>,
    /// When it stops being valid.
    pub not_after: SystemTime,
    /// Names it is configured for that it does not cover.
    pub uncovered: Vec<String>,
}

impl CertificateReport {
    /// How long it stays valid after `now`; `None` once it has expired.
    pub fn remaining(&self, now: SystemTime) -> Option<Duration> {
        self.not_after.duration_since(now).ok()
    }
}

/// Reads the chain, the key and the names a certificate covers; `Err` for files that are
/// missing or do not parse, or a key that is not the certificate's.
pub fn inspect(files: &CertificateFiles) -> Result<CertificateReport, TlsError> {
    let provider = provider();
    let certified = load(files, &provider)?;
    let leaf = &certified.cert[0];
    let (_, parsed) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| TlsError::new(&files.chain, format!("the certificate does not parse: {e}")))?;
    let covers = dns_names(&parsed);
    let not_after = parsed.validity().not_after.timestamp();
    let not_after = if not_after >= 0 {
        UNIX_EPOCH + Duration::from_secs(not_after as u64)
    } else {
        UNIX_EPOCH
    };
    let uncovered = files
        .names
        .iter()
        .filter(|name| !covers.iter().any(|pattern| name_matches(pattern, name)))
        .cloned()
        .collect();
    Ok(CertificateReport {
        covers,
        not_after,
        uncovered,
    })
}

/// The DNS names a certificate covers (its subject alternative names), in lower case.
fn dns_names(parsed: &x509_parser::certificate::X509Certificate<'_>) -> Vec<String> {
    let mut covers = Vec::new();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                covers.push(dns.to_ascii_lowercase());
            }
        }
    }
    covers
}

/// The DNS names the leaf of `certified` covers; none if it does not parse.
pub(crate) fn covered_names(certified: &CertifiedKey) -> Vec<String> {
    match x509_parser::parse_x509_certificate(certified.cert[0].as_ref()) {
        Ok((_, parsed)) => dns_names(&parsed),
        Err(_) => Vec::new(),
    }
}

/// Whether a certificate's DNS name `pattern` (maybe `*.example.com`) covers the configured
/// `name` (maybe a wildcard itself, covered only by the same wildcard).
fn name_matches(pattern: &str, name: &str) -> bool {
    if pattern == name {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(parent) => name
            .split_once('.')
            .is_some_and(|(label, rest)| label != "*" && !label.is_empty() && rest == parent),
        None => false,
    }
}

/// The chain and key of `files`, the key loaded by `provider` and checked to be the
/// certificate's.
pub(crate) fn load(
    files: &CertificateFiles,
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = read_chain(&files.chain)?;
    let key = read_key(&files.key)?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::new(&files.key, format!("the key cannot be used: {e}")))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        TlsError::new(
            &files.key,
            format!(
                "the key is not the one of the certificate in {} ({e})",
                files.chain.display()
            ),
        )
    })?;
    Ok(Arc::new(certified))
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| TlsError::new(path, e.to_string()))?;
    let chain: Vec<_> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::new(path, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(TlsError::new(path, "holds no PEM certificate"));
    }
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = std::fs::read(path).map_err(|e| TlsError::new(path, e.to_string()))?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => {
            TlsError::new(path, "holds no PEM private key")
        }
        other => TlsError::new(path, format!("not a PEM private key: {other}")),
    })
}

/// The crypto every listener uses: aws-lc-rs, with rustls's default key exchange groups
/// (X25519MLKEM768 first, then X25519, P-256, P-384) and cipher suites (AES-GCM and
/// ChaCha20-Poly1305 only, which is Mozilla's profile).
pub(crate) fn provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_cover_one_label_only() {
        assert!(name_matches("*.example.com", "a.example.com"));
        assert!(!name_matches("*.example.com", "example.com"));
        assert!(!name_matches("*.example.com", "a.b.example.com"));
        assert!(name_matches("*.example.com", "*.example.com"));
        assert!(!name_matches("a.example.com", "*.example.com"));
        assert!(name_matches("example.com", "example.com"));
    }
}
