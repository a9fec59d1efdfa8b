//! The account key and the JSON Web Signatures that ACME requests are (RFC 8555 section
//! 6.2, RFC 7515 flattened JSON, ES256), its JWK thumbprint (RFC 7638) and the key
//! authorizations made from it (RFC 8555 section 8.1).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use aws_lc_rs::digest::{digest, SHA256};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivatePkcs8KeyDer;
use serde_json::{json, Value};

use crate::error::Error;
use crate::files;

pub(crate) fn b64(bytes: impl AsRef<[u8]>) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A P-256 key that signs ACME requests: an account's key, or a certificate's key when a
/// certificate is revoked by its own key.
pub struct AccountKey {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
    x: String,
    y: String,
}

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The public half only: the private key never reaches a log.
        f.debug_struct("AccountKey")
            .field("thumbprint", &self.thumbprint())
            .finish()
    }
}

impl AccountKey {
    /// A new random key.
    pub fn generate() -> Result<AccountKey, Error> {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)
            .map_err(|_| Error::Local("cannot generate a P-256 key".into()))?;
        let pkcs8 = pair
            .to_pkcs8v1()
            .map_err(|_| Error::Local("cannot encode a P-256 key".into()))?;
        AccountKey::from_pkcs8_der(pkcs8.as_ref())
    }

    /// A key from its PKCS#8 DER encoding (P-256 only).
    pub fn from_pkcs8_der(der: &[u8]) -> Result<AccountKey, Error> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
            .map_err(|e| Error::Local(format!("not a PKCS#8 P-256 key: {e}")))?;
        let point = pair.public_key().as_ref();
        // The uncompressed point: 0x04, then X and Y of 32 bytes each.
        if point.len() != 65 || point[0] != 4 {
            return Err(Error::Local("unexpected P-256 public key encoding".into()));
        }
        let (x, y) = (b64(&point[1..33]), b64(&point[33..]));
        Ok(AccountKey {
            pair,
            pkcs8: der.to_vec(),
            x,
            y,
        })
    }

    /// A key from a PEM `PRIVATE KEY` (PKCS#8) block.
    pub fn from_pkcs8_pem(pem: &str) -> Result<AccountKey, Error> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| Error::Local(format!("no PKCS#8 PEM key: {e}")))?;
        AccountKey::from_pkcs8_der(der.secret_pkcs8_der())
    }

    /// The key as a PEM `PRIVATE KEY` (PKCS#8) block.
    pub fn to_pkcs8_pem(&self) -> String {
        pem("PRIVATE KEY", &self.pkcs8)
    }

    /// Reads the key at `path`, or makes one and writes it there (mode 0600, atomically,
    /// never over a key another process wrote meanwhile). `true` when it was made.
    pub fn load_or_create(path: &Path) -> Result<(AccountKey, bool), Error> {
        let local = |e: std::io::Error| Error::Local(format!("{}: {e}", path.display()));
        match fs::read_to_string(path) {
            Ok(text) => {
                let mode = fs::metadata(path).map_err(local)?.permissions().mode();
                if mode & 0o077 != 0 {
                    tracing::warn!(
                        "ACME account key {} can be read by others (mode {:o})",
                        path.display(),
                        mode & 0o777
                    );
                }
                let key = AccountKey::from_pkcs8_pem(&text)
                    .map_err(|e| Error::Local(format!("{}: {e}", path.display())))?;
                Ok((key, false))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = AccountKey::generate()?;
                if files::create_atomic(path, key.to_pkcs8_pem().as_bytes(), 0o600)
                    .map_err(local)?
                {
                    Ok((key, true))
                } else {
                    // Another process made one first: that one is the account's.
                    AccountKey::load_or_create(path)
                }
            }
            Err(e) => Err(local(e)),
        }
    }

    /// The public key as a JWK (RFC 7517), members in the order RFC 7638 hashes them.
    pub fn jwk(&self) -> Value {
        json!({"crv": "P-256", "kty": "EC", "x": self.x, "y": self.y})
    }

    /// The JWK thumbprint (RFC 7638), base64url: what key authorizations end with.
    pub fn thumbprint(&self) -> String {
        ec_thumbprint(&self.x, &self.y)
    }

    /// A flattened JWS (RFC 7515 section 7.2.2) of `payload` (`None`: the empty payload of
    /// a POST-as-GET), with the `jwk` of this key (`kid: None`) or the account URL `kid`.
    pub fn sign(
        &self,
        url: &str,
        nonce: &str,
        kid: Option<&str>,
        payload: Option<&Value>,
    ) -> Result<Vec<u8>, Error> {
        let mut protected = json!({"alg": "ES256", "nonce": nonce, "url": url});
        match kid {
            Some(kid) => protected["kid"] = Value::from(kid),
            None => protected["jwk"] = self.jwk(),
        }
        let protected = b64(protected.to_string());
        let payload = match payload {
            Some(value) => b64(value.to_string()),
            None => String::new(),
        };
        let signature = self.sign_bytes(format!("{protected}.{payload}").as_bytes())?;
        let jws = json!({"protected": protected, "payload": payload, "signature": b64(signature)});
        Ok(jws.to_string().into_bytes())
    }

    /// An ES256 signature: R and S, 32 bytes each (RFC 7518 section 3.4).
    fn sign_bytes(&self, message: &[u8]) -> Result<Vec<u8>, Error> {
        self.pair
            .sign(&SystemRandom::new(), message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| Error::Local("ECDSA signing failed".into()))
    }
}

/// The RFC 7638 thumbprint of a P-256 JWK with coordinates `x` and `y` (base64url): SHA-256
/// of the required members in lexicographic order, no white space.
pub fn ec_thumbprint(x: &str, y: &str) -> String {
    let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    b64(digest(&SHA256, canonical.as_bytes()))
}

/// The key authorization for a challenge's `token` (RFC 8555 section 8.1).
pub fn key_authorization(token: &str, thumbprint: &str) -> String {
    format!("{token}.{thumbprint}")
}

/// A PEM block of `label` around `der`, 64 columns.
pub(crate) fn pem(label: &str, der: &[u8]) -> String {
    let text = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    fn unb64(text: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(text).expect("base64url")
    }

    #[test]
    fn a_jws_verifies_with_the_jwk_it_carries() {
        let key = AccountKey::generate().unwrap();
        let payload = json!({"termsOfServiceAgreed": true});
        let jws = key
            .sign(
                "https://ca.example/new-acct",
                "NONCE_1",
                None,
                Some(&payload),
            )
            .unwrap();
        let jws: Value = serde_json::from_slice(&jws).unwrap();
        let protected = jws["protected"].as_str().unwrap();
        let body = jws["payload"].as_str().unwrap();
        let header: Value = serde_json::from_slice(&unb64(protected)).unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["nonce"], "NONCE_1");
        assert_eq!(header["url"], "https://ca.example/new-acct");
        assert!(header.get("kid").is_none());
        assert_eq!(
            serde_json::from_slice::<Value>(&unb64(body)).unwrap(),
            payload
        );
        // The verifier is given only what the JWS carries: the JWK's point.
        let mut point = vec![4u8];
        point.extend(unb64(header["jwk"]["x"].as_str().unwrap()));
        point.extend(unb64(header["jwk"]["y"].as_str().unwrap()));
        let signature = unb64(jws["signature"].as_str().unwrap());
        assert_eq!(signature.len(), 64);
        let verifier = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point);
        let signed = format!("{protected}.{body}");
        verifier.verify(signed.as_bytes(), &signature).unwrap();
        assert!(verifier
            .verify(format!("{protected}.e30").as_bytes(), &signature)
            .is_err());
    }

    #[test]
    fn a_post_as_get_has_an_empty_payload_and_a_kid() {
        let key = AccountKey::generate().unwrap();
        let jws = key
            .sign(
                "https://ca.example/order/1",
                "N",
                Some("https://ca.example/acct/7"),
                None,
            )
            .unwrap();
        let jws: Value = serde_json::from_slice(&jws).unwrap();
        assert_eq!(jws["payload"], "");
        let header: Value =
            serde_json::from_slice(&unb64(jws["protected"].as_str().unwrap())).unwrap();
        assert_eq!(header["kid"], "https://ca.example/acct/7");
        assert!(header.get("jwk").is_none());
    }

    #[test]
    fn the_thumbprint_of_the_rfc_7517_example_key() {
        // RFC 7517 appendix A.1's P-256 key. The thumbprint was computed apart from this
        // code, with Python's hashlib and base64 over the canonical JSON of RFC 7638 3.2.
        let x = "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4";
        let y = "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM";
        assert_eq!(ec_thumbprint(x, y), THUMBPRINT_A1);
        assert_eq!(
            key_authorization("evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA", THUMBPRINT_A1),
            format!("evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA.{THUMBPRINT_A1}")
        );
    }

    const THUMBPRINT_A1: &str = "cn-I_WNMClehiVp51i_0VpOENW1upEerA8sEam5hn-s";

    #[test]
    fn a_key_survives_pem_and_its_jwk_matches_its_thumbprint() {
        let key = AccountKey::generate().unwrap();
        let pem = key.to_pkcs8_pem();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
        let again = AccountKey::from_pkcs8_pem(&pem).unwrap();
        assert_eq!(again.jwk(), key.jwk());
        let jwk = key.jwk();
        assert_eq!(
            key.thumbprint(),
            b64(digest(&SHA256, jwk.to_string().as_bytes())),
            "serde_json writes the members sorted, as RFC 7638 hashes them"
        );
        assert!(AccountKey::from_pkcs8_pem("not a key").is_err());
    }

    #[test]
    fn the_key_file_is_made_once_with_mode_0600_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("account.key");
        let (made, created) = AccountKey::load_or_create(&path).unwrap();
        assert!(created);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (read, created) = AccountKey::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(read.thumbprint(), made.thumbprint());
    }
}
