//! An ACME client (RFC 8555): certificates obtained from a CA such as Let's Encrypt and
//! renewed before they expire, for the hosts fastpath serves with `tls = "auto"`. The
//! server runs it on a thread of its own; nothing here touches a serving worker.
//!
//! Where it sits among fastpath's crates: docs/architecture.md. The protocol is written
//! here, blocking, on `std::net`, a rustls client and httparse: the well-kept ACME crate
//! (instant-acme) needs tokio and hyper, a second runtime and a large build beside an
//! engine that has its own loops, and the blocking ones (acme-lib, acme-micro) are
//! unmaintained and bind OpenSSL. ACME needs a dozen requests per certificate a few times a
//! quarter; a blocking client on one thread is all it takes.
//!
//! The pieces:
//!
//! - [`Client`]: the directory, nonces (`badNonce` answered by one retry), signed requests
//!   over one kept-alive HTTPS connection with every wait bounded ([`Timeouts`]). It trusts
//!   the system's CA bundle and/or further root files ([`TrustRoots`]); the bundle is read
//!   from `SSL_CERT_FILE` or the usual distribution paths with rustls-pki-types' PEM
//!   reader rather than through rustls-native-certs, which would add a crate to do the
//!   same on the one system fastpath runs on (Linux).
//! - [`Account`]: the account key (P-256, PKCS#8 PEM, mode 0600, made if missing) and the
//!   account found or created with it; orders, authorizations, challenges, finalization,
//!   downloads and revocation.
//! - [`ChallengeBoard`]: how the server shows challenges ([`Published`]): http-01 key
//!   authorizations, tls-alpn-01 certificates (RFC 8737), made here.
//! - [`CertificateStore`]: certificates on disk, and when each is due for renewal
//!   (the CA's ARI window, RFC 9773, else two thirds of its lifetime).
//! - [`obtain`] and [`renew`]: a whole order, from newOrder to the stored chain.
//! - [`Error`]: typed; a CA's problem document is kept whole ([`Problem`]).
//!
//! ```no_run
//! use std::sync::Mutex;
//! use std::collections::HashMap;
//! use fastpath_acme::{
//!     obtain, Account, CertificateStore, ChallengeBoard, ChallengeKind, Client, ClientConfig,
//!     Published,
//! };
//!
//! /// http-01 answers a server would look up by path.
//! #[derive(Default)]
//! struct Board(Mutex<HashMap<String, String>>);
//!
//! impl ChallengeBoard for Board {
//!     fn publish(&self, c: &Published) {
//!         self.0.lock().unwrap().insert(c.http01_path(), c.key_authorization.clone());
//!     }
//!     fn withdraw(&self, c: &Published) {
//!         self.0.lock().unwrap().remove(&c.http01_path());
//!     }
//! }
//!
//! # fn main() -> Result<(), fastpath_acme::Error> {
//! let client = Client::new(ClientConfig::new(
//!     "https://acme-staging-v02.api.letsencrypt.org/directory",
//! ))?;
//! let contact = vec!["mailto:admin@example.com".to_string()];
//! let account = Account::open(client, "/var/lib/fastpath/acme/account.key".as_ref(), &contact, true)?;
//! let store = CertificateStore::new("/var/lib/fastpath/acme")?;
//! let board = Board::default();
//! let names = vec!["example.com".to_string(), "www.example.com".to_string()];
//! let issued = obtain(&account, &names, ChallengeKind::Http01, &board, &store)?;
//! println!("{} until {:?}", issued.certificate.cert_path().display(), issued.certificate.not_after);
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod ari;
mod challenge;
mod client;
mod error;
mod files;
mod http;
mod jws;
mod store;

pub use ari::{certificate_facts, certificate_id, parse_rfc3339, CertificateFacts, RenewalInfo};
pub use challenge::{
    tls_alpn01_certificate, AlpnCertificate, ChallengeBoard, ChallengeKind, Published,
    ACME_TLS_ALPN, HTTP01_PREFIX,
};
pub use client::{
    Account, Authorization, Challenge, Client, ClientConfig, Directory, DirectoryMeta, Order,
    Status,
};
pub use error::{Error, Identifier, Problem, ACME_ERROR_PREFIX};
pub use files::write_atomic;
pub use http::{parse_retry_after, Timeouts, TrustRoots, MAX_BODY};
pub use jws::{ec_thumbprint, key_authorization, AccountKey};
pub use store::{CertificateStore, StoredCertificate, CERT_FILE, KEY_FILE, RENEWAL_FILE};

use std::time::Instant;

use rcgen::{CertificateParams, DistinguishedName, KeyPair, PKCS_ECDSA_P256_SHA256};

/// What an order asks for.
#[derive(Debug, Clone)]
pub struct OrderSpec {
    /// The DNS names, the first naming the store's directory.
    pub names: Vec<String>,
    /// The challenge type answered for each name.
    pub kind: ChallengeKind,
    /// A certificate profile the CA offers (its directory's `meta.profiles`), if any.
    pub profile: Option<String>,
    /// The ARI identifier of the certificate this one replaces (RFC 9773 section 5).
    pub replaces: Option<String>,
}

/// A certificate just issued and stored.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate as stored.
    pub certificate: StoredCertificate,
    /// The order's URL.
    pub order_url: String,
    /// The certificate's URL at the CA.
    pub certificate_url: String,
    /// URLs of alternate chains the CA offered.
    pub alternates: Vec<String>,
}

/// Obtains a certificate for `names` by answering `kind` challenges, and stores it.
pub fn obtain(
    account: &Account,
    names: &[String],
    kind: ChallengeKind,
    board: &dyn ChallengeBoard,
    store: &CertificateStore,
) -> Result<Issued, Error> {
    let spec = OrderSpec {
        names: names.to_vec(),
        kind,
        profile: None,
        replaces: None,
    };
    obtain_order(account, &spec, board, store)
}

/// Renews `current` for the same names: the order says which certificate it replaces
/// when the CA has ARI (a CA that already took a replacement for it gets an order without).
pub fn renew(
    account: &Account,
    current: &StoredCertificate,
    kind: ChallengeKind,
    board: &dyn ChallengeBoard,
    store: &CertificateStore,
) -> Result<Issued, Error> {
    let ari = account.client().directory().renewal_info.is_some();
    let spec = OrderSpec {
        names: current.names.clone(),
        kind,
        profile: None,
        replaces: current.ari_id.clone().filter(|_| ari),
    };
    match obtain_order(account, &spec, board, store) {
        Err(e)
            if spec.replaces.is_some() && e.problem().is_some_and(|p| p.is("alreadyReplaced")) =>
        {
            tracing::info!("{e}; ordering without replaces");
            let spec = OrderSpec {
                replaces: None,
                ..spec
            };
            obtain_order(account, &spec, board, store)
        }
        other => other,
    }
}

/// Asks the CA when `cert` should be renewed (RFC 9773) and notes the answer in the store;
/// `None` when the CA has no ARI or the certificate no ARI identifier.
pub fn refresh_renewal_info(
    account: &Account,
    store: &CertificateStore,
    cert: &StoredCertificate,
) -> Result<Option<RenewalInfo>, Error> {
    let Some(id) = &cert.ari_id else {
        return Ok(None);
    };
    let Some(info) = account.client().renewal_info(id)? else {
        return Ok(None);
    };
    store.save_renewal_info(cert, &info)?;
    Ok(Some(info))
}

/// Withdraws what it published when dropped, whatever way the order ends.
struct Shown<'a> {
    board: &'a dyn ChallengeBoard,
    published: Vec<Published>,
}

impl Drop for Shown<'_> {
    fn drop(&mut self) {
        for challenge in &self.published {
            self.board.withdraw(challenge);
        }
    }
}

fn check_names(names: &[String], kind: ChallengeKind) -> Result<Vec<String>, Error> {
    if names.is_empty() {
        return Err(Error::Unsupported("an order with no name".into()));
    }
    let mut checked: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if name.starts_with("*.") {
            return Err(Error::Unsupported(format!(
                "{name}: a wildcard name needs dns-01, not {}",
                kind.as_str()
            )));
        }
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if name.len() > 253 || !name.split('.').all(label_ok) {
            return Err(Error::Unsupported(format!("{name:?} is not a DNS name")));
        }
        if !checked.contains(&name) {
            checked.push(name);
        }
    }
    Ok(checked)
}

/// Runs a whole order: newOrder, each authorization's challenge published, answered and
/// polled (then withdrawn), the order finalized with a CSR of a fresh P-256 key, the chain
/// downloaded and stored with that key, and the CA's renewal window noted when it has ARI.
pub fn obtain_order(
    account: &Account,
    spec: &OrderSpec,
    board: &dyn ChallengeBoard,
    store: &CertificateStore,
) -> Result<Issued, Error> {
    let names = check_names(&spec.names, spec.kind)?;
    // Refused before the CA is asked, rather than after a certificate it cannot store.
    store.dir_for(&names[0])?;
    let deadline = Instant::now() + account.order_deadline();
    let order = account.new_order(&names, spec.replaces.as_deref(), spec.profile.as_deref())?;
    tracing::info!("ACME order {} for {}", order.url, names.join(", "));

    // Every pending authorization's challenge shown, then all answered, then all polled:
    // the CA validates them side by side.
    let mut shown = Shown {
        board,
        published: Vec::new(),
    };
    let mut answering = Vec::new();
    let thumbprint = account.key().thumbprint();
    for url in &order.authorizations {
        let authz = account.authorization(url)?;
        let name = authz.identifier.value.clone();
        match authz.status {
            Status::Valid => continue,
            Status::Pending => {}
            other => {
                return Err(Error::Invalid {
                    what: format!("the authorization for {name} ({other:?})"),
                    problem: None,
                })
            }
        }
        let challenge = authz.challenge(spec.kind).ok_or_else(|| {
            Error::Unsupported(format!(
                "the CA offers no {} for {name}",
                spec.kind.as_str()
            ))
        })?;
        let token = challenge
            .token
            .clone()
            .filter(|t| {
                !t.is_empty()
                    && t.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
            .ok_or_else(|| {
                Error::Protocol(format!("challenge {} has no usable token", challenge.url))
            })?;
        let key_authorization = key_authorization(&token, &thumbprint);
        let alpn_certificate = match spec.kind {
            ChallengeKind::TlsAlpn01 => Some(tls_alpn01_certificate(&name, &key_authorization)?),
            ChallengeKind::Http01 => None,
        };
        let published = Published {
            name,
            kind: spec.kind,
            token,
            key_authorization,
            alpn_certificate,
        };
        board.publish(&published);
        shown.published.push(published);
        answering.push((url.clone(), challenge.clone()));
    }
    for (_, challenge) in &answering {
        if challenge.status == Status::Pending {
            account.respond(challenge)?;
        }
    }
    for (url, _) in &answering {
        let authz = account.poll_authorization(url, deadline)?;
        if authz.status != Status::Valid {
            let problem = authz
                .challenge(spec.kind)
                .and_then(|c| c.error.clone())
                .map(Box::new);
            return Err(Error::Invalid {
                what: format!("the authorization for {}", authz.identifier.value),
                problem,
            });
        }
    }
    drop(shown);

    let order = account.poll_order(&order.url, &[Status::Pending], deadline)?;
    if order.status != Status::Ready {
        return Err(order_failed(&order));
    }
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)
        .map_err(|e| Error::Local(format!("certificate key: {e}")))?;
    let mut params = CertificateParams::new(names.clone())
        .map_err(|e| Error::Local(format!("CSR for {}: {e}", names[0])))?;
    // The names are in the subject alternative names; the subject stays empty.
    params.distinguished_name = DistinguishedName::new();
    let csr = params
        .serialize_request(&key)
        .map_err(|e| Error::Local(format!("CSR for {}: {e}", names[0])))?;
    let order = account.finalize(&order, csr.der())?;
    let order = if order.status == Status::Valid {
        order
    } else {
        account.poll_order(&order.url, &[Status::Ready, Status::Processing], deadline)?
    };
    if order.status != Status::Valid {
        return Err(order_failed(&order));
    }
    let certificate_url = order
        .certificate
        .clone()
        .ok_or_else(|| Error::Protocol(format!("valid order {} has no certificate", order.url)))?;
    let (chain, alternates) = account.certificate_chain(&certificate_url)?;
    // Checked before it replaces what the store holds.
    check_issued(&chain, &names, &key)?;
    let certificate = store.save(&names, &chain, &key.serialize_pem())?;
    tracing::info!(
        "ACME certificate for {} stored in {}",
        names.join(", "),
        certificate.dir.display()
    );
    let certificate = match refresh_renewal_info(account, store, &certificate) {
        Ok(Some(info)) => StoredCertificate {
            renewal_window: Some(info),
            ..certificate
        },
        Ok(None) => certificate,
        Err(e) => {
            // The certificate is good; the window is asked for again later.
            tracing::warn!("renewal information for {}: {e}", names[0]);
            certificate
        }
    };
    Ok(Issued {
        certificate,
        order_url: order.url,
        certificate_url,
        alternates,
    })
}

fn order_failed(order: &Order) -> Error {
    Error::Invalid {
        what: format!("the order {} ({:?})", order.url, order.status),
        problem: order.error.clone().map(Box::new),
    }
}

/// The chain's leaf is for our key and covers the names ordered.
fn check_issued(chain_pem: &str, names: &[String], key: &KeyPair) -> Result<(), Error> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let leaf = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .ok_or_else(|| Error::Protocol("the issued chain holds no certificate".into()))?
        .map_err(|e| Error::Protocol(format!("issued chain: {e}")))?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf)
        .map_err(|e| Error::Protocol(format!("issued certificate: {e}")))?;
    if parsed.public_key().subject_public_key.data.as_ref() != key.public_key_raw() {
        return Err(Error::Protocol(
            "the issued certificate is not for the key of the CSR".into(),
        ));
    }
    let covered = certificate_facts(&leaf)?.names;
    for name in names {
        if !covered.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return Err(Error::Protocol(format!(
                "the issued certificate does not cover {name}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_lowered_and_deduplicated() {
        let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            check_names(
                &names(&["A.Example.TEST.", "a.example.test", "b.example.test"]),
                ChallengeKind::Http01
            )
            .unwrap(),
            vec!["a.example.test", "b.example.test"]
        );
        for bad in [
            &[][..],
            &["*.example.test"],
            &["-a.example"],
            &["a b"],
            &["a..b"],
        ] {
            assert!(
                check_names(&names(bad), ChallengeKind::Http01).is_err(),
                "{bad:?}"
            );
        }
    }
}
