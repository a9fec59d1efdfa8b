//! Certificates on disk: one directory per certificate under a state directory, named by
//! its first DNS name, holding the chain, its key, and the renewal window the CA suggested.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::ari::{certificate_facts, RenewalInfo};
use crate::error::Error;
use crate::files;

/// The chain's file in a certificate's directory.
pub const CERT_FILE: &str = "cert.pem";
/// The key's file (mode 0600).
pub const KEY_FILE: &str = "key.pem";
/// The last renewal window the CA suggested, with the ARI identifier it is for.
pub const RENEWAL_FILE: &str = "renewal.json";

/// The certificates under a state directory: `STATE/NAME/cert.pem` (the chain, leaf
/// first), `STATE/NAME/key.pem` (PKCS#8, mode 0600) and `STATE/NAME/renewal.json`, where
/// NAME is the certificate's first DNS name in lower case. Every file is replaced
/// atomically; the key is written before the chain, so a reader that finds a chain also
/// finds its key.
#[derive(Debug, Clone)]
pub struct CertificateStore {
    root: PathBuf,
}

/// A certificate as stored, with what was read from it.
#[derive(Debug, Clone)]
pub struct StoredCertificate {
    /// Its directory.
    pub dir: PathBuf,
    /// The DNS names it covers (its subject alternative names).
    pub names: Vec<String>,
    /// The chain, PEM, leaf first.
    pub chain_pem: String,
    /// The leaf, DER.
    pub leaf_der: Vec<u8>,
    /// Its notBefore.
    pub not_before: SystemTime,
    /// Its notAfter.
    pub not_after: SystemTime,
    /// Its ARI identifier (RFC 9773), when it has an authority key identifier.
    pub ari_id: Option<String>,
    /// The renewal window the CA last suggested for it, if known.
    pub renewal_window: Option<RenewalInfo>,
}

impl StoredCertificate {
    /// The chain's path.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CERT_FILE)
    }

    /// The key's path.
    pub fn key_path(&self) -> PathBuf {
        self.dir.join(KEY_FILE)
    }

    /// When it should be renewed: the start of the CA's suggested window when known, else
    /// two thirds into its lifetime (as RFC 9773 and Let's Encrypt advise without ARI).
    pub fn renew_at(&self) -> SystemTime {
        if let Some(window) = &self.renewal_window {
            return window.start;
        }
        let lifetime = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or(Duration::ZERO);
        self.not_before + lifetime * 2 / 3
    }

    /// Whether it is due for renewal at `now`.
    pub fn renewal_due(&self, now: SystemTime) -> bool {
        now >= self.renew_at()
    }
}

/// Whether `name` may name a directory of the store: a DNS name (letters, digits, hyphens,
/// dots, an underscore), lower case, not starting with a dot, at most 253 bytes.
fn checked_dir_name(name: &str) -> Result<String, Error> {
    let name = name.to_ascii_lowercase();
    let ok = !name.is_empty()
        && name.len() <= 253
        && !name.starts_with('.')
        && !name.contains("..")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if ok {
        Ok(name)
    } else {
        Err(Error::Local(format!(
            "{name:?} cannot name a certificate directory"
        )))
    }
}

impl CertificateStore {
    /// The store under `root`, which is made (mode 0700) if missing.
    pub fn new(root: impl Into<PathBuf>) -> Result<CertificateStore, Error> {
        let root = root.into();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .map_err(|e| Error::Local(format!("{}: {e}", root.display())))?;
        Ok(CertificateStore { root })
    }

    /// The state directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the certificate whose first name is `first_name`.
    pub fn dir_for(&self, first_name: &str) -> Result<PathBuf, Error> {
        Ok(self.root.join(checked_dir_name(first_name)?))
    }

    /// Stores a chain (PEM, leaf first) and its key (PKCS#8 PEM) under the first of
    /// `names`, replacing what was there, and reads it back.
    pub fn save(
        &self,
        names: &[String],
        chain_pem: &str,
        key_pem: &str,
    ) -> Result<StoredCertificate, Error> {
        let first = names
            .first()
            .ok_or_else(|| Error::Local("a certificate with no name".into()))?;
        let dir = self.dir_for(first)?;
        let local = |e: std::io::Error| Error::Local(format!("{}: {e}", dir.display()));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(local)?;
        // Checked before anything is replaced: a chain that does not parse is not stored.
        parse_chain(chain_pem, &dir)?;
        files::write_atomic(&dir.join(KEY_FILE), key_pem.as_bytes(), 0o600).map_err(local)?;
        files::write_atomic(&dir.join(CERT_FILE), chain_pem.as_bytes(), 0o644).map_err(local)?;
        // The window was the old certificate's.
        match fs::remove_file(dir.join(RENEWAL_FILE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(local(e)),
            _ => {}
        }
        self.load_dir(&dir)?
            .ok_or_else(|| Error::Local(format!("{}: vanished while written", dir.display())))
    }

    /// Notes the renewal window the CA suggested for `cert`.
    pub fn save_renewal_info(
        &self,
        cert: &StoredCertificate,
        info: &RenewalInfo,
    ) -> Result<(), Error> {
        let Some(ari_id) = &cert.ari_id else {
            return Ok(());
        };
        let mut json = info.to_json();
        json["ari_id"] = serde_json::Value::from(ari_id.as_str());
        let path = cert.dir.join(RENEWAL_FILE);
        files::write_atomic(&path, json.to_string().as_bytes(), 0o644)
            .map_err(|e| Error::Local(format!("{}: {e}", path.display())))
    }

    /// Takes `cert` out of service: its chain is renamed to `cert.pem.LABEL-SECONDS` in its
    /// directory (kept for the record, never read again), and its renewal window removed.
    /// What keeps the certificates then finds none and obtains a new one, with a new key;
    /// the serving processes go on with the one they have until then. Returns the new
    /// path.
    pub fn set_aside(&self, cert: &StoredCertificate, label: &str) -> Result<PathBuf, Error> {
        let local = |e: std::io::Error| Error::Local(format!("{}: {e}", cert.dir.display()));
        let seconds = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let aside = cert.dir.join(format!("{CERT_FILE}.{label}-{seconds}"));
        fs::rename(cert.cert_path(), &aside).map_err(local)?;
        match fs::remove_file(cert.dir.join(RENEWAL_FILE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(local(e)),
            _ => {}
        }
        Ok(aside)
    }

    /// The certificate stored under `first_name`, if any.
    pub fn load(&self, first_name: &str) -> Result<Option<StoredCertificate>, Error> {
        self.load_dir(&self.dir_for(first_name)?)
    }

    /// Every certificate stored, by directory name.
    pub fn list(&self) -> Result<Vec<StoredCertificate>, Error> {
        let local = |e: std::io::Error| Error::Local(format!("{}: {e}", self.root.display()));
        let mut dirs: Vec<PathBuf> = fs::read_dir(&self.root)
            .map_err(local)?
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
            .map(|entry| entry.path())
            .collect();
        dirs.sort();
        let mut certs = Vec::new();
        for dir in dirs {
            if let Some(cert) = self.load_dir(&dir)? {
                certs.push(cert);
            }
        }
        Ok(certs)
    }

    fn load_dir(&self, dir: &Path) -> Result<Option<StoredCertificate>, Error> {
        let chain_pem = match fs::read_to_string(dir.join(CERT_FILE)) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::Local(format!("{}: {e}", dir.display()))),
        };
        let leaf_der = parse_chain(&chain_pem, dir)?;
        let facts = certificate_facts(&leaf_der)?;
        let renewal_window = fs::read(dir.join(RENEWAL_FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .filter(|json| json.get("ari_id").and_then(|v| v.as_str()) == facts.ari_id.as_deref())
            .and_then(|json| RenewalInfo::from_json(&json));
        Ok(Some(StoredCertificate {
            dir: dir.to_owned(),
            names: facts.names,
            chain_pem,
            leaf_der,
            not_before: facts.not_before,
            not_after: facts.not_after,
            ari_id: facts.ari_id,
            renewal_window,
        }))
    }
}

/// The leaf of a PEM chain, DER; an error when there is no certificate in it.
fn parse_chain(chain_pem: &str, dir: &Path) -> Result<Vec<u8>, Error> {
    let leaf = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .ok_or_else(|| Error::Local(format!("{}: no certificate in the chain", dir.display())))?
        .map_err(|e| Error::Local(format!("{}: {e}", dir.display())))?;
    certificate_facts(&leaf)?;
    Ok(leaf.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn self_signed(names: &[&str], days: i64) -> (String, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        let secs = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let now = rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(secs);
        params.not_before = now;
        params.not_after = now + rcgen_days(days);
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn rcgen_days(days: i64) -> Duration {
        Duration::from_secs(days as u64 * 86_400)
    }

    /// A store under `dir` holding one 90-day certificate for a.example.test, and its chain.
    fn one_saved(dir: &Path) -> (CertificateStore, StoredCertificate, String) {
        let store = CertificateStore::new(dir).unwrap();
        let (chain, key) = self_signed(&["a.example.test"], 90);
        let saved = store
            .save(&["a.example.test".into()], &chain, &key)
            .unwrap();
        (store, saved, chain)
    }

    #[test]
    fn a_saved_certificate_is_read_back_with_its_files_modes() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertificateStore::new(dir.path().join("state")).unwrap();
        let (chain, key) = self_signed(&["www.example.test", "example.test"], 90);
        let names = vec!["WWW.example.test".to_string(), "example.test".to_string()];
        let saved = store.save(&names, &chain, &key).unwrap();
        assert_eq!(saved.dir, dir.path().join("state/www.example.test"));
        assert_eq!(saved.names, vec!["www.example.test", "example.test"]);
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&saved.key_path()), 0o600);
        assert_eq!(mode(&saved.dir), 0o700);
        assert_eq!(fs::read_to_string(saved.key_path()).unwrap(), key);
        let lifetime = saved.not_after.duration_since(saved.not_before).unwrap();
        assert_eq!(lifetime, rcgen_days(90));
        let again = store.load("www.example.test").unwrap().unwrap();
        assert_eq!(again.chain_pem, chain);
        assert_eq!(store.list().unwrap().len(), 1);
        assert!(store.load("other.example.test").unwrap().is_none());
        // Only the three files: no temporary left.
        let mut entries: Vec<_> = fs::read_dir(&saved.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        entries.sort();
        assert_eq!(entries, vec!["cert.pem", "key.pem"]);
    }

    #[test]
    fn a_certificate_set_aside_is_kept_but_no_longer_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let (store, saved, chain) = one_saved(dir.path());
        let aside = store.set_aside(&saved, "revoked").unwrap();
        assert!(store.load("a.example.test").unwrap().is_none());
        assert_eq!(fs::read_to_string(&aside).unwrap(), chain);
        let name = aside.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("cert.pem.revoked-"), "{name}");
        // Twice is an error that names the directory, not a panic.
        let again = store.set_aside(&saved, "revoked").unwrap_err();
        assert!(again.to_string().contains("a.example.test"), "{again}");
    }

    #[test]
    fn renewal_is_due_at_two_thirds_or_at_the_window_start() {
        let dir = tempfile::tempdir().unwrap();
        let (store, saved, _) = one_saved(dir.path());
        let two_thirds = saved.not_before + rcgen_days(60);
        assert_eq!(saved.renew_at(), two_thirds);
        assert!(!saved.renewal_due(two_thirds - Duration::from_secs(1)));
        assert!(saved.renewal_due(two_thirds));
        // A self-signed rcgen certificate has no authority key identifier, so no ARI id:
        // a window cannot be noted for it.
        assert!(saved.ari_id.is_none());
        let mut with_id = saved.clone();
        with_id.ari_id = Some("aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE".into());
        let window = RenewalInfo {
            start: saved.not_before + rcgen_days(10),
            end: saved.not_before + rcgen_days(11),
            explanation_url: None,
            retry_after: None,
        };
        store.save_renewal_info(&with_id, &window).unwrap();
        // Read back, the window belongs to another identifier than the stored
        // certificate's: it is not applied.
        let read = store.load("a.example.test").unwrap().unwrap();
        assert!(read.renewal_window.is_none());
        with_id.renewal_window = Some(window.clone());
        assert_eq!(with_id.renew_at(), window.start);
        assert!(with_id.renewal_due(window.start));
    }

    #[test]
    fn bad_names_and_bad_chains_are_refused_and_leave_the_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = CertificateStore::new(dir.path()).unwrap();
        for bad in ["", "../x", ".hidden", "a/b", "*.example.test", "a..b"] {
            assert!(store.dir_for(bad).is_err(), "{bad:?}");
        }
        let (chain, key) = self_signed(&["a.example.test"], 90);
        let names = vec!["a.example.test".to_string()];
        store.save(&names, &chain, &key).unwrap();
        assert!(store.save(&names, "not a chain", "not a key").is_err());
        let kept = store.load("a.example.test").unwrap().unwrap();
        assert_eq!(kept.chain_pem, chain);
        assert_eq!(fs::read_to_string(kept.key_path()).unwrap(), key);
    }
}
