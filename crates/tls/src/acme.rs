//! What TLS serves for the hosts whose certificates the ACME client keeps (`tls = "auto"`):
//! certificates read again when their files change, and tls-alpn-01 challenge certificates.
//!
//! The ACME client runs in one process and writes files; every serving process (each
//! `prefork` child too) notices them here on its own, with no channel between them.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::certs::{load, CertificateFiles};

/// The ALPN protocol of tls-alpn-01 validations (RFC 8737 section 6.2).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The directory, under the challenges' directory, of the tls-alpn-01 certificates: one
/// `NAME.pem` per name being validated, the certificate then its key.
pub const ALPN_CHALLENGES: &str = "tls-alpn-01";

/// How often a handshake looks at the certificate's file: a renewed certificate is served
/// within this long, and the file is looked at no more than this often per process.
const RECHECK: Duration = Duration::from_secs(1);

/// What identifies a version of a file that is replaced atomically (renamed over): a new
/// file has a new inode. Also how the ACME process notices a certificate changed by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    ino: u64,
    mtime_ns: i128,
    len: u64,
}

impl FileStamp {
    /// The stamp of the file at `path` now; `None` when there is none.
    pub fn of(path: &Path) -> Option<FileStamp> {
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            len: meta.len(),
        })
    }
}

#[derive(Debug, Default)]
struct Current {
    key: Option<Arc<CertifiedKey>>,
    /// The chain file the key was read from.
    seen: Option<FileStamp>,
    checked: Option<Instant>,
}

/// A certificate kept by the ACME client: the last good one read from its files, read again
/// when the chain's file changes.
#[derive(Debug)]
pub(crate) struct AutoCertificate {
    files: CertificateFiles,
    current: RwLock<Current>,
}

impl AutoCertificate {
    pub(crate) fn new(files: CertificateFiles, provider: &CryptoProvider) -> AutoCertificate {
        let cell = AutoCertificate {
            files,
            current: RwLock::new(Current::default()),
        };
        cell.refresh(provider, Instant::now());
        cell
    }

    /// The certificate to serve now; `None` before the first one is there.
    pub(crate) fn get(&self, provider: &CryptoProvider) -> Option<Arc<CertifiedKey>> {
        let now = Instant::now();
        {
            let current = self.current.read().unwrap_or_else(|e| e.into_inner());
            if current
                .checked
                .is_some_and(|at| now.duration_since(at) < RECHECK)
            {
                return current.key.clone();
            }
        }
        self.refresh(provider, now)
    }

    /// Looks at the chain's file, and reads the pair again if it changed. A pair that does
    /// not load (the key of a renewal written, its chain not yet) leaves the certificate
    /// served as it was, and is tried again on the next look.
    fn refresh(&self, provider: &CryptoProvider, now: Instant) -> Option<Arc<CertifiedKey>> {
        // One handshake looks while the others go on with the certificate they have.
        let Ok(mut current) = self.current.try_write() else {
            let current = self.current.read().unwrap_or_else(|e| e.into_inner());
            return current.key.clone();
        };
        if current
            .checked
            .is_some_and(|at| now.duration_since(at) < RECHECK)
        {
            return current.key.clone();
        }
        current.checked = Some(now);
        let found = FileStamp::of(&self.files.chain);
        if found.is_some() && found != current.seen {
            match load(&self.files, provider) {
                Ok(key) => {
                    // Debug only: each new `prefork` child starts from its parent's copy,
                    // taken before any renewal, and reads the file again on its first
                    // handshake.
                    tracing::debug!("TLS: serving {}", self.files.chain.display());
                    current.key = Some(key);
                    current.seen = found;
                }
                Err(e) => tracing::debug!("TLS: {e}; the certificate served stays"),
            }
        }
        current.key.clone()
    }
}

/// The tls-alpn-01 certificate published for `name` under `dir`, if any.
pub(crate) fn challenge_certificate(
    dir: &Path,
    name: &str,
    provider: &CryptoProvider,
) -> Option<Arc<CertifiedKey>> {
    let path: PathBuf = dir.join(ALPN_CHALLENGES).join(format!("{name}.pem"));
    let bytes = std::fs::read(&path).ok()?;
    let cert = CertificateDer::from_pem_slice(&bytes).ok()?;
    let key = PrivateKeyDer::from_pem_slice(&bytes).ok()?;
    let signing = provider.key_provider.load_private_key(key).ok()?;
    // `CertifiedKey::new`, not `from_der`: that one checks the pair by parsing the
    // certificate with webpki, which refuses the critical acmeIdentifier extension every
    // tls-alpn-01 certificate has.
    Some(Arc::new(CertifiedKey::new(vec![cert], signing)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::provider;

    fn write_pair(dir: &Path, name: &str) -> Vec<u8> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        // As the ACME client's store does: the key first, each file renamed into place.
        for (file, text) in [("key.pem", key.serialize_pem()), ("cert.pem", cert.pem())] {
            let tmp = dir.join(format!(".{file}.tmp"));
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, dir.join(file)).unwrap();
        }
        cert.der().to_vec()
    }

    #[test]
    fn a_certificate_is_served_once_there_and_replaced_when_its_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider();
        let files = CertificateFiles {
            names: vec!["a.example.test".into()],
            chain: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
        };
        let cell = AutoCertificate::new(files, &provider);
        assert!(cell.get(&provider).is_none(), "nothing to serve yet");
        let first = write_pair(dir.path(), "a.example.test");
        // Looked at again only after RECHECK.
        assert!(cell.get(&provider).is_none());
        std::thread::sleep(RECHECK);
        let served = cell.get(&provider).expect("the first certificate");
        assert_eq!(served.cert[0].as_ref(), &first[..]);
        // A key that is not the chain's (a renewal half written) leaves the old one.
        let other = tempfile::tempdir().unwrap();
        write_pair(other.path(), "a.example.test");
        std::fs::copy(
            other.path().join("cert.pem"),
            dir.path().join("cert.pem.new"),
        )
        .unwrap();
        std::fs::rename(dir.path().join("cert.pem.new"), dir.path().join("cert.pem")).unwrap();
        std::fs::write(dir.path().join("key.pem"), b"not a key").unwrap();
        std::thread::sleep(RECHECK);
        let kept = cell.get(&provider).unwrap();
        assert_eq!(kept.cert[0].as_ref(), &first[..]);
        // The whole renewal there: the new one is served.
        let second = write_pair(dir.path(), "a.example.test");
        std::thread::sleep(RECHECK);
        let renewed = cell.get(&provider).unwrap();
        assert_eq!(renewed.cert[0].as_ref(), &second[..]);
    }

    #[test]
    fn a_challenge_certificate_is_read_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let provider = provider();
        assert!(challenge_certificate(dir.path(), "a.example.test", &provider).is_none());
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["a.example.test".into()]).unwrap();
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(&[7; 32])];
        let cert = params.self_signed(&key).unwrap();
        std::fs::create_dir(dir.path().join(ALPN_CHALLENGES)).unwrap();
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        std::fs::write(
            dir.path().join(ALPN_CHALLENGES).join("a.example.test.pem"),
            pem,
        )
        .unwrap();
        let found = challenge_certificate(dir.path(), "a.example.test", &provider)
            .expect("the certificate with the acmeIdentifier extension");
        assert_eq!(found.cert[0].as_ref(), cert.der().as_ref());
        assert!(challenge_certificate(dir.path(), "b.example.test", &provider).is_none());
    }
}
