//! The client against Pebble, Let's Encrypt's test ACME server: whole orders over http-01
//! and tls-alpn-01 validated for real, renewal with ARI, revocation, and what goes wrong.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant, SystemTime};

use fastpath_acme::{
    obtain, obtain_order, renew, Account, CertificateStore, ChallengeBoard, ChallengeKind, Client,
    Error, OrderSpec, Published, Status,
};
use fastpath_testkit::pebble::{Options, Pebble, Tools};

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn store(pebble: &Pebble) -> CertificateStore {
    CertificateStore::new(pebble.dir.path().join("state")).unwrap()
}

fn obtains_over(kind: ChallengeKind, test: &str) {
    let Some(tools) = Tools::find(test) else {
        return;
    };
    let pebble = Pebble::start(&tools, Options::default());
    let account = pebble.account();
    let store = store(&pebble);
    let wanted = names(&["a.example.test", "www.a.example.test"]);
    let issued = obtain(&account, &wanted, kind, &*pebble.board, &store)
        .unwrap_or_else(|e| panic!("{e}\n{}", pebble.log()));
    let cert = &issued.certificate;
    assert_eq!(cert.dir, store.root().join("a.example.test"));
    let mut got = cert.names.clone();
    got.sort();
    assert_eq!(got, wanted);
    pebble.verify_chain(&cert.chain_pem, "a.example.test");
    pebble.verify_chain(&cert.chain_pem, "www.a.example.test");
    // The key on disk is the certificate's, and only its owner reads it.
    let key_pem = std::fs::read_to_string(cert.key_path()).unwrap();
    let key = rcgen::KeyPair::from_pem(&key_pem).unwrap();
    let (_, leaf) = x509_parser::parse_x509_certificate(&cert.leaf_der).unwrap();
    assert_eq!(
        leaf.public_key().subject_public_key.data.as_ref(),
        key.public_key_raw()
    );
    let mode = std::fs::metadata(cert.key_path())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    // Both names were shown, with the type asked, and withdrawn after.
    let published = pebble.board.published.lock().unwrap().clone();
    assert_eq!(published.len(), 2);
    assert!(published.iter().all(|(_, k)| *k == kind));
    assert_eq!(*pebble.board.withdrawn.lock().unwrap(), published);
    // What the store reads back is what was issued; renewal is not due yet.
    let read = store.load("a.example.test").unwrap().unwrap();
    assert_eq!(read.chain_pem, cert.chain_pem);
    assert!(!read.renewal_due(SystemTime::now()));
    assert!(read.not_after > SystemTime::now() + Duration::from_secs(80 * 86_400));
}

#[test]
fn obtains_a_certificate_over_http01() {
    obtains_over(ChallengeKind::Http01, "acme obtain over http-01");
}

#[test]
fn obtains_a_certificate_over_tls_alpn01() {
    obtains_over(ChallengeKind::TlsAlpn01, "acme obtain over tls-alpn-01");
}

#[test]
fn the_account_key_is_private_and_finds_the_same_account_again() {
    let Some(tools) = Tools::find("acme account reuse") else {
        return;
    };
    let pebble = Pebble::start(&tools, Options::default());
    let key_path = pebble.dir.path().join("keys/account.key");
    std::fs::create_dir(key_path.parent().unwrap()).unwrap();
    let contact = names(&["mailto:admin@example.test"]);
    let first = Account::open(pebble.client(), &key_path, &contact, true).unwrap();
    let mode = std::fs::metadata(&key_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let key_pem = std::fs::read_to_string(&key_path).unwrap();
    assert!(key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
    // A second run: the same key, the same account, and new contacts taken.
    let other = names(&["mailto:ops@example.test", "mailto:admin@example.test"]);
    let second = Account::open(pebble.client(), &key_path, &other, true).unwrap();
    assert_eq!(second.url(), first.url());
    assert_eq!(std::fs::read_to_string(&key_path).unwrap(), key_pem);
    assert_eq!(second.key().thumbprint(), first.key().thumbprint());
}

#[test]
fn renews_with_replaces_in_the_window_ari_gives() {
    let Some(tools) = Tools::find("acme renewal") else {
        return;
    };
    // Certificates of an hour: Pebble's ARI window for them starts at once.
    let options = Options {
        profiles: vec![("shortlived", 3600)],
        ..Options::default()
    };
    let pebble = Pebble::start(&tools, options);
    let account = pebble.account();
    assert!(account.client().directory().renewal_info.is_some());
    assert!(account
        .client()
        .directory()
        .meta
        .profiles
        .contains_key("shortlived"));
    let store = store(&pebble);
    let spec = OrderSpec {
        names: names(&["r.example.test"]),
        kind: ChallengeKind::Http01,
        profile: Some("shortlived".into()),
        replaces: None,
    };
    let first = obtain_order(&account, &spec, &*pebble.board, &store)
        .unwrap_or_else(|e| panic!("{e}\n{}", pebble.log()))
        .certificate;
    let lifetime = first.not_after.duration_since(first.not_before).unwrap();
    assert!(lifetime <= Duration::from_secs(3600), "{lifetime:?}");
    // The window was asked for and kept: it starts before two thirds of the lifetime, so
    // renewal is due now although the certificate is young.
    let window = first.renewal_window.clone().expect("an ARI window");
    assert!(window.start < first.not_before + lifetime * 2 / 3);
    assert!(window.end <= first.not_after);
    let read = store.load("r.example.test").unwrap().unwrap();
    assert_eq!(
        read.renewal_window.as_ref().map(|w| w.start),
        Some(window.start)
    );
    assert!(read.renewal_due(SystemTime::now()));

    let renewed = renew(
        &account,
        &read,
        ChallengeKind::Http01,
        &*pebble.board,
        &store,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", pebble.log()));
    let order = account.order(&renewed.order_url).unwrap();
    assert_eq!(order.replaces, first.ari_id);
    assert_ne!(renewed.certificate.ari_id, first.ari_id);
    assert_eq!(
        store.load("r.example.test").unwrap().unwrap().ari_id,
        renewed.certificate.ari_id
    );
    pebble.verify_chain(&renewed.certificate.chain_pem, "r.example.test");

    // The old certificate has its replacement: a second renewal of it is refused
    // `alreadyReplaced` by the CA and ordered again without `replaces`.
    let again = renew(
        &account,
        &read,
        ChallengeKind::Http01,
        &*pebble.board,
        &store,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", pebble.log()));
    assert_eq!(account.order(&again.order_url).unwrap().replaces, None);
}

#[test]
fn revokes_a_certificate_then_obtains_another() {
    let Some(tools) = Tools::find("acme revocation") else {
        return;
    };
    let pebble = Pebble::start(&tools, Options::default());
    let account = pebble.account();
    let store = store(&pebble);
    let wanted = names(&["v.example.test"]);
    let first = obtain(
        &account,
        &wanted,
        ChallengeKind::Http01,
        &*pebble.board,
        &store,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", pebble.log()))
    .certificate;
    account.revoke(&first.leaf_der, Some(4)).unwrap();
    // Revoked once is revoked: the CA says so, typed.
    let twice = account.revoke(&first.leaf_der, None).unwrap_err();
    assert!(
        twice.problem().is_some_and(|p| p.is("alreadyRevoked")),
        "{twice}"
    );
    // ARI now asks for a renewal at once.
    let info = account
        .client()
        .renewal_info(first.ari_id.as_deref().unwrap())
        .unwrap()
        .unwrap();
    assert!(info.start <= SystemTime::now());
    let second = obtain(
        &account,
        &wanted,
        ChallengeKind::Http01,
        &*pebble.board,
        &store,
    )
    .unwrap()
    .certificate;
    assert_ne!(second.leaf_der, first.leaf_der);
    pebble.verify_chain(&second.chain_pem, "v.example.test");
    // Revoked by the certificate's own key (the `jwk` form), as when the account is lost.
    let key_pem = std::fs::read_to_string(second.key_path()).unwrap();
    let cert_key = fastpath_acme::AccountKey::from_pkcs8_pem(&key_pem).unwrap();
    account
        .client()
        .revoke_with_certificate_key(&second.leaf_der, &cert_key, None)
        .unwrap();
    let again = account.revoke(&second.leaf_der, None).unwrap_err();
    assert!(
        again.problem().is_some_and(|p| p.is("alreadyRevoked")),
        "{again}"
    );
}

#[test]
fn a_server_that_is_down_is_a_quick_typed_error_then_is_used_once_up() {
    let Some(tools) = Tools::find("acme server down") else {
        return;
    };
    let port = fastpath_testkit::free_port();
    let options = Options {
        port: Some(port),
        ..Options::default()
    };
    // The configuration a client would have, before anything listens there.
    let dir = tempfile::tempdir().unwrap();
    let pki = fastpath_testkit::TestPki::new(dir.path());
    let mut config = fastpath_acme::ClientConfig::new(format!("https://127.0.0.1:{port}/dir"));
    config.roots = fastpath_acme::TrustRoots::only(pki.ca());
    let started = Instant::now();
    let err = Client::new(config).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    match &err {
        Error::Io { source, .. } => {
            assert_eq!(
                source.kind(),
                std::io::ErrorKind::ConnectionRefused,
                "{err}"
            )
        }
        other => panic!("not an I/O error: {other}"),
    }
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );

    let pebble = Pebble::start(&tools, options);
    let account = pebble.account();
    let issued = obtain(
        &account,
        &names(&["up.example.test"]),
        ChallengeKind::Http01,
        &*pebble.board,
        &store(&pebble),
    )
    .unwrap();
    assert_eq!(issued.certificate.names, names(&["up.example.test"]));
}

#[test]
fn a_bad_contact_is_the_servers_invalid_contact_problem() {
    let Some(tools) = Tools::find("acme invalid contact") else {
        return;
    };
    let pebble = Pebble::start(&tools, Options::default());
    let key = pebble.dir.path().join("account.key");
    let err = Account::open(
        pebble.client(),
        &key,
        &names(&["mailto:not an address"]),
        true,
    )
    .unwrap_err();
    let problem = err.problem().unwrap_or_else(|| panic!("no problem: {err}"));
    assert!(problem.is("invalidContact"), "{problem:?}");
    assert_eq!(problem.status, Some(400));
    assert!(!problem.detail.is_empty());
    let shown = err.to_string();
    assert!(
        shown.contains("urn:ietf:params:acme:error:invalidContact")
            && shown.contains(&problem.detail),
        "{shown}"
    );
}

/// A board that shows nothing: validation must fail.
struct Blank;

impl ChallengeBoard for Blank {
    fn publish(&self, _: &Published) {}
    fn withdraw(&self, _: &Published) {}
}

#[test]
fn a_failed_validation_is_an_invalid_authorization_with_the_cas_reason() {
    let Some(tools) = Tools::find("acme failed validation") else {
        return;
    };
    let pebble = Pebble::start(&tools, Options::default());
    let account = pebble.account();
    let err = obtain(
        &account,
        &names(&["f.example.test"]),
        ChallengeKind::Http01,
        &Blank,
        &store(&pebble),
    )
    .unwrap_err();
    match &err {
        Error::Invalid { what, problem } => {
            assert!(what.contains("f.example.test"), "{err}");
            let problem = problem.as_ref().expect("the challenge's error");
            assert!(
                problem.kind.starts_with("urn:ietf:params:acme:error:"),
                "{err}"
            );
        }
        other => panic!("not an invalid authorization: {other}"),
    }
    assert!(store(&pebble).load("f.example.test").unwrap().is_none());
}

#[test]
fn a_refused_nonce_is_sent_again_with_a_fresh_one() {
    let Some(tools) = Tools::find("acme bad nonce") else {
        return;
    };
    // Half of all good nonces refused: a request meets a refusal half the time, and two
    // in a row (then the error is the server's badNonce) a quarter of the time.
    let options = Options {
        nonce_reject: 50,
        ..Options::default()
    };
    let pebble = Pebble::start(&tools, options);
    let open = || {
        let key = pebble.dir.path().join("account.key");
        Account::open(pebble.client(), &key, &[], true)
    };
    let account = (0..12)
        .find_map(|_| open().ok())
        .expect("an account in 12 tries");
    let order = (0..12)
        .find_map(|_| {
            account
                .new_order(&names(&["n.example.test"]), None, None)
                .ok()
        })
        .expect("an order in 12 tries");
    let before = account.client().bad_nonce_retries();
    let (mut succeeded, mut failed) = (0u64, 0u64);
    for _ in 0..40 {
        match account.order(&order.url) {
            Ok(read) => {
                assert_eq!(read.status, Status::Pending);
                succeeded += 1;
            }
            Err(e) => {
                assert!(e.problem().is_some_and(|p| p.is("badNonce")), "{e}");
                failed += 1;
            }
        }
    }
    let retries = account.client().bad_nonce_retries() - before;
    // Each failure spent its one retry; more retries than failures means some retries
    // went through with the nonce the refusal carried.
    assert!(
        retries > failed,
        "{retries} retries, {failed} failed, {succeeded} passed"
    );
    assert!(succeeded > 0, "{succeeded} passed, {failed} failed");
}
