//! Pebble, Let's Encrypt's test ACME server, and pebble-challtestsrv as its DNS, started per
//! test on free ports; and the test's own answers to Pebble's validations, fed from a
//! [`ChallengeBoard`], unless the test has Pebble validate against a server of its own
//! ([`Options::validation_ports`]).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::{free_port, skip, KeyKind, Missing, TestPki};
use fastpath_acme::{
    Account, ChallengeBoard, ChallengeKind, Client, ClientConfig, Published, Timeouts, TrustRoots,
    ACME_TLS_ALPN,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};

/// A Go tool from `go install` (`~/go/bin`) or the path; a visible skip if neither.
pub fn go_tool(test: &str, name: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(|h| PathBuf::from(h).join("go/bin").join(name));
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let found = home.into_iter().chain(on_path).find(|p| p.is_file());
    if found.is_none() {
        skip(
            test,
            Missing::Installable,
            &format!("{name} is not installed (see .ci/run)"),
        );
    }
    found
}

/// How a test wants its Pebble.
pub struct Options {
    /// PEBBLE_WFE_NONCEREJECT: the share of good nonces refused, in percent.
    pub nonce_reject: u8,
    /// The port of the ACME listener (a free one if `None`).
    pub port: Option<u16>,
    /// The certificate profiles, name and validity in seconds.
    pub profiles: Vec<(&'static str, u64)>,
    /// The ports Pebble validates http-01 and tls-alpn-01 on, for a server of the test's
    /// own (on 127.0.0.1); `None`: the test's responders fed from [`Pebble::board`].
    pub validation_ports: Option<(u16, u16)>,
    /// The CA of Pebble's own HTTPS certificate, when the test needs its root before Pebble
    /// starts; `None`: one made in Pebble's directory.
    pub pki: Option<TestPki>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            nonce_reject: 0,
            port: None,
            profiles: vec![("default", 90 * 86_400)],
            validation_ports: None,
            pki: None,
        }
    }
}

/// The tools, found once per test; `None` after a skip.
pub struct Tools {
    pebble: PathBuf,
    challtestsrv: PathBuf,
}

impl Tools {
    pub fn find(test: &str) -> Option<Tools> {
        Some(Tools {
            pebble: go_tool(test, "pebble")?,
            challtestsrv: go_tool(test, "pebble-challtestsrv")?,
        })
    }
}

/// A running Pebble with its DNS, and the test's validation responders.
pub struct Pebble {
    pub dir: tempfile::TempDir,
    pub directory_url: String,
    pub management_port: u16,
    pub ca_pem: PathBuf,
    pub board: Arc<TestBoard>,
    pebble: Child,
    dns: Child,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in [&mut self.pebble, &mut self.dns] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A log file both outputs of a child append to.
fn log_file(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("a log file")
}

fn wait_for_port(port: u16, what: &str, child: &mut Child, log: &Path) {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "{what} did not listen on {port}: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

impl Pebble {
    pub fn start(tools: &Tools, options: Options) -> Pebble {
        let dir = tempfile::tempdir().expect("temporary directory");
        // The ACME listener's certificate, from a CA of the test's own.
        let pki = options.pki.unwrap_or_else(|| TestPki::new(dir.path()));
        let (cert, key) = pki.leaf("pebble", &["127.0.0.1", "localhost"], KeyKind::EcdsaP256);

        // The answers to Pebble's validations, on ports the test holds from the start.
        let board = Arc::new(TestBoard::default());
        let (http_port, tls_port) = match options.validation_ports {
            Some(ports) => ports,
            None => {
                let http = TcpListener::bind("127.0.0.1:0").expect("bind the http-01 responder");
                let tls = TcpListener::bind("127.0.0.1:0").expect("bind the tls-alpn-01 responder");
                let ports = (
                    http.local_addr().unwrap().port(),
                    tls.local_addr().unwrap().port(),
                );
                serve_http01(http, board.clone());
                serve_tls_alpn01(tls, board.clone());
                ports
            }
        };

        let dns_port = free_port();
        let dns_log = dir.path().join("challtestsrv.log");
        let mut dns = Command::new(&tools.challtestsrv)
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .args(["-management", &format!("127.0.0.1:{}", free_port())])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", ""])
            .stdin(Stdio::null())
            .stdout(log_file(&dns_log))
            .stderr(log_file(&dns_log))
            .spawn()
            .expect("start pebble-challtestsrv");
        wait_for_port(dns_port, "pebble-challtestsrv", &mut dns, &dns_log);

        let port = options.port.unwrap_or_else(free_port);
        let management_port = free_port();
        let profiles: serde_json::Map<String, serde_json::Value> = options
            .profiles
            .iter()
            .map(|(name, secs)| {
                (
                    name.to_string(),
                    serde_json::json!({"description": name, "validityPeriod": secs}),
                )
            })
            .collect();
        let config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management_port}"),
            "certificate": cert,
            "privateKey": key,
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "domainBlocklist": ["blocked-domain.example"],
            "retryAfter": {"authz": 1, "order": 1},
            "keyAlgorithm": "ecdsa",
            "profiles": profiles,
        }});
        let config_path = dir.path().join("pebble-config.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let log = dir.path().join("pebble.log");
        let mut pebble = Command::new(&tools.pebble)
            .arg("-config")
            .arg(&config_path)
            .arg("-strict")
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", options.nonce_reject.to_string())
            .env("PEBBLE_AUTHZREUSE", "0")
            .env("PEBBLE_CHAIN_LENGTH", "2")
            .stdin(Stdio::null())
            .stdout(log_file(&log))
            .stderr(log_file(&log))
            .spawn()
            .expect("start pebble");
        wait_for_port(port, "pebble", &mut pebble, &log);
        wait_for_port(management_port, "pebble management", &mut pebble, &log);
        Pebble {
            directory_url: format!("https://127.0.0.1:{port}/dir"),
            management_port,
            ca_pem: pki.ca().to_owned(),
            board,
            dir,
            pebble,
            dns,
        }
    }

    /// Pebble's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }

    pub fn config(&self) -> ClientConfig {
        ClientConfig {
            directory_url: self.directory_url.clone(),
            roots: TrustRoots::only(&self.ca_pem),
            timeouts: Timeouts {
                connect: Duration::from_secs(2),
                io: Duration::from_secs(10),
                request: Duration::from_secs(20),
            },
            order_deadline: Duration::from_secs(30),
        }
    }

    pub fn client(&self) -> Client {
        Client::new(self.config()).expect("read Pebble's directory")
    }

    /// An account whose key is in the test's directory.
    pub fn account(&self) -> Account {
        let key = self.dir.path().join("account.key");
        let contact = vec!["mailto:admin@example.test".to_string()];
        Account::open(self.client(), &key, &contact, true).expect("an account")
    }

    /// Writes Pebble's issuing root to `path` as PEM (for curl's `--cacert`).
    pub fn write_issuing_root(&self, path: &Path) {
        let body = https_get(&self.ca_pem, self.management_port, "/roots/0");
        std::fs::write(path, body).expect("write Pebble's root");
    }

    /// The leaf certificate (DER) a TLS server on 127.0.0.1:`port` shows for `name`, its
    /// chain verified against Pebble's issuing root; why not, as text.
    pub fn served_leaf(&self, port: u16, name: &str) -> Result<Vec<u8>, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuing_root()).map_err(|e| e.to_string())?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let server_name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
        let mut conn = rustls::ClientConnection::new(Arc::new(config), server_name)
            .map_err(|e| e.to_string())?;
        let mut sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        while conn.is_handshaking() {
            conn.complete_io(&mut sock).map_err(|e| e.to_string())?;
        }
        let leaf = conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .ok_or("no certificate")?;
        Ok(leaf.to_vec())
    }

    /// What Pebble says of the certificate `leaf_der` (DER): "Valid" or "Revoked", from
    /// its management interface.
    pub fn certificate_status(&self, leaf_der: &[u8]) -> String {
        let serial = fastpath_acme::certificate_facts(leaf_der)
            .expect("a certificate")
            .serial;
        let body = https_get(
            &self.ca_pem,
            self.management_port,
            &format!("/cert-status-by-serial/{serial}"),
        );
        let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        json["Status"].as_str().unwrap_or_default().to_owned()
    }

    /// Revokes `leaf_der` with a request signed by its own key (`key_pem`, PKCS#8), as
    /// anyone holding the key may: how a certificate is revoked by someone other than the
    /// account that ordered it.
    pub fn revoke_with_key(&self, leaf_der: &[u8], key_pem: &str) {
        let key = fastpath_acme::AccountKey::from_pkcs8_pem(key_pem).expect("a PKCS#8 key");
        self.client()
            .revoke_with_certificate_key(leaf_der, &key, Some(1))
            .expect("revoked");
    }

    /// Pebble's issuing root, from its management interface.
    pub fn issuing_root(&self) -> CertificateDer<'static> {
        let body = https_get(&self.ca_pem, self.management_port, "/roots/0");
        CertificateDer::from_pem_slice(&body).expect("Pebble's root as PEM")
    }

    /// Verifies a PEM chain for `name` against Pebble's issuing root, as a TLS client would.
    pub fn verify_chain(&self, chain_pem: &str, name: &str) {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(chain_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("a PEM chain");
        assert!(certs.len() >= 2, "leaf and intermediate: {chain_pem}");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.issuing_root()).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        use rustls::client::danger::ServerCertVerifier;
        verifier
            .verify_server_cert(
                &certs[0],
                &certs[1..],
                &ServerName::try_from(name.to_string()).unwrap(),
                &[],
                UnixTime::now(),
            )
            .unwrap_or_else(|e| panic!("the chain for {name} does not verify: {e}"));
    }
}

/// A GET over TLS to 127.0.0.1:`port`, trusting `ca`; the body.
fn https_get(ca: &Path, port: u16, path: &str) -> Vec<u8> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    match tls.read_to_end(&mut response) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => panic!("GET {path}: {e}"),
    }
    let at = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    assert!(response.starts_with(b"HTTP/1.1 200"), "GET {path}");
    response[at + 4..].to_vec()
}

/// What the test shows Pebble's validations, and what was published and withdrawn.
#[derive(Debug, Default)]
pub struct TestBoard {
    http: Mutex<HashMap<String, String>>,
    alpn: Mutex<HashMap<String, Arc<rustls::sign::CertifiedKey>>>,
    pub published: Mutex<Vec<(String, ChallengeKind)>>,
    pub withdrawn: Mutex<Vec<(String, ChallengeKind)>>,
}

impl ChallengeBoard for TestBoard {
    fn publish(&self, c: &Published) {
        match c.kind {
            ChallengeKind::Http01 => {
                self.http
                    .lock()
                    .unwrap()
                    .insert(c.http01_path(), c.key_authorization.clone());
            }
            ChallengeKind::TlsAlpn01 => {
                let alpn = c
                    .alpn_certificate
                    .as_ref()
                    .expect("a tls-alpn-01 certificate");
                // `CertifiedKey::new`, not `from_der`: the latter's check that key and
                // certificate match parses the certificate with webpki, which refuses the
                // critical acmeIdentifier extension.
                let provider = rustls::crypto::aws_lc_rs::default_provider();
                let signing = provider
                    .key_provider
                    .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                        alpn.key_pkcs8_der.clone(),
                    )))
                    .expect("the certificate's key");
                let key = rustls::sign::CertifiedKey::new(
                    vec![CertificateDer::from(alpn.certificate_der.clone())],
                    signing,
                );
                self.alpn
                    .lock()
                    .unwrap()
                    .insert(c.name.clone(), Arc::new(key));
            }
        }
        self.published
            .lock()
            .unwrap()
            .push((c.name.clone(), c.kind));
    }

    fn withdraw(&self, c: &Published) {
        match c.kind {
            ChallengeKind::Http01 => {
                self.http.lock().unwrap().remove(&c.http01_path());
            }
            ChallengeKind::TlsAlpn01 => {
                self.alpn.lock().unwrap().remove(&c.name);
            }
        }
        self.withdrawn
            .lock()
            .unwrap()
            .push((c.name.clone(), c.kind));
    }
}

/// Answers http-01 validations: `GET /.well-known/acme-challenge/TOKEN` with the key
/// authorization published, 404 otherwise.
fn serve_http01(listener: TcpListener, board: Arc<TestBoard>) {
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let board = board.clone();
            thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
                    match conn.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let path = head.split(' ').nth(1).unwrap_or("");
                let answer = board.http.lock().unwrap().get(path).cloned();
                let response = match answer {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    ),
                    None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
                };
                let _ = conn.write_all(response.as_bytes());
            });
        }
    });
}

#[derive(Debug)]
struct AlpnResolver(Arc<TestBoard>);

impl rustls::server::ResolvesServerCert for AlpnResolver {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        // Only a validation: SNI of a published name, ALPN acme-tls/1.
        let acme = hello
            .alpn()
            .is_some_and(|mut protocols| protocols.any(|p| p == ACME_TLS_ALPN));
        if !acme {
            return None;
        }
        let name = hello.server_name()?;
        self.0.alpn.lock().unwrap().get(name).cloned()
    }
}

/// Answers tls-alpn-01 validations with the certificate published for the SNI name.
fn serve_tls_alpn01(listener: TcpListener, board: Arc<TestBoard>) {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(AlpnResolver(board)));
    config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
    let config = Arc::new(config);
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut sock) = conn else { continue };
            let config = config.clone();
            thread::spawn(move || {
                let _ = sock.set_read_timeout(Some(Duration::from_secs(5)));
                let Ok(mut tls) = rustls::ServerConnection::new(config) else {
                    return;
                };
                while tls.is_handshaking() {
                    if tls.complete_io(&mut sock).is_err() {
                        return;
                    }
                }
                tls.send_close_notify();
                let _ = tls.complete_io(&mut sock);
            });
        }
    });
}
