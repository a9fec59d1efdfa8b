//! A certificate authority for TLS tests: a CA certificate and leaf certificates signed by
//! it, written as PEM files for a server to serve and a client to trust.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256,
};

/// The kind of a leaf certificate's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// ECDSA over P-256.
    EcdsaP256,
    /// RSA, 2048 bits.
    Rsa2048,
}

/// A test certificate authority writing into a directory.
pub struct TestPki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
    ca_pem: PathBuf,
}

impl TestPki {
    /// A new authority; its certificate is written to `DIR/ca.pem`.
    pub fn new(dir: &Path) -> TestPki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // As a real CA's: strict validators (sslyze's) want the usages spelled out.
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params
            .distinguished_name
            .push(DnType::CommonName, "fastpath test CA");
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("CA key");
        let ca = CertifiedIssuer::self_signed(params, key).expect("CA certificate");
        let ca_pem = dir.join("ca.pem");
        std::fs::write(&ca_pem, ca.pem()).expect("write ca.pem");
        TestPki {
            dir: dir.to_owned(),
            ca,
            ca_pem,
        }
    }

    /// The authority's certificate (PEM), for clients to trust.
    pub fn ca(&self) -> &Path {
        &self.ca_pem
    }

    /// A leaf certificate for `names`, valid from yesterday for 60 days (within the 90 that
    /// Mozilla's profiles allow), written as
    /// `DIR/FILE.pem` (the leaf, then the CA: a chain) and `DIR/FILE.key`.
    pub fn leaf(&self, file: &str, names: &[&str], kind: KeyKind) -> (PathBuf, PathBuf) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        self.leaf_valid(file, names, kind, (now - 86_400, now + 60 * 86_400))
    }

    /// As [`TestPki::leaf`], valid between the two Unix times given.
    pub fn leaf_valid(
        &self,
        file: &str,
        names: &[&str],
        kind: KeyKind,
        (from, until): (i64, i64),
    ) -> (PathBuf, PathBuf) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names.clone()).expect("leaf parameters");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = rcgen::date_time_ymd(1970, 1, 1) + time_secs(from);
        params.not_after = rcgen::date_time_ymd(1970, 1, 1) + time_secs(until);
        let key = match kind {
            KeyKind::EcdsaP256 => KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256),
            KeyKind::Rsa2048 => KeyPair::generate_for(&PKCS_RSA_SHA256),
        }
        .expect("leaf key");
        let cert = params.signed_by(&key, &self.ca).expect("leaf certificate");
        let chain = self.dir.join(format!("{file}.pem"));
        let key_path = self.dir.join(format!("{file}.key"));
        std::fs::write(&chain, format!("{}{}", cert.pem(), self.ca.pem())).expect("write chain");
        std::fs::write(&key_path, key.serialize_pem()).expect("write key");
        (chain, key_path)
    }
}

fn time_secs(secs: i64) -> std::time::Duration {
    std::time::Duration::from_secs(secs.max(0) as u64)
}
