//! HTTPS: the load generator against the real fastpath binary on a TLS listener, with a
//! certificate from the test's own CA: keep-alive, a connection per request with full and
//! with resumed handshakes, pinned versions and suites, and certificates that fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use fastpath_bench::cli::{execute, parse_args};
use fastpath_bench::{Report, TlsOptions, TlsVersion};
use fastpath_testkit::{KeyKind, Listening, TestPki};
use serde_json::Value;

use crate::util::{config, run_checked};

const BODY: usize = 1000;

/// The `fastpath` binary: `FASTPATH_BIN`, or built once per test process with the cargo
/// running the tests, in the same profile and target directory (`cargo test -p
/// fastpath-bench` does not build other packages' binaries).
fn fastpath_bin() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        if let Some(bin) = std::env::var_os("FASTPATH_BIN") {
            return PathBuf::from(bin);
        }
        let args = ["-p", "fastpath", "--bin", "fastpath"];
        fastpath_testkit::build_beside_test(env!("CARGO"), env!("CARGO_MANIFEST_DIR"), &args)
            .join("fastpath")
    })
}

/// fastpath serving `hello.txt` (1000 bytes) over TLS on 127.0.0.1 with a certificate for
/// `localhost`, one epoll worker.
struct Https {
    server: Listening,
    ca: PathBuf,
    /// Holds the files while the server runs.
    _dir: tempfile::TempDir,
}

impl Https {
    fn start() -> Https {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("hello.txt"), vec![b'h'; BODY]).unwrap();
        let pki = TestPki::new(dir.path());
        let (chain, key) = pki.leaf("localhost", &["localhost"], KeyKind::EcdsaP256);
        let config = dir.path().join("fastpath.toml");
        std::fs::write(
            &config,
            format!(
                "root = {root:?}\nworkers = 1\ntls_certificate = {chain:?}\ntls_key = {key:?}\n\
                 [log]\naccess = \"off\"\n"
            ),
        )
        .unwrap();
        let mut cmd = Command::new(fastpath_bin());
        cmd.arg("serve").arg("--config").arg(&config).args([
            "--tls-listen",
            "127.0.0.1:0",
            "--model",
            "epoll",
        ]);
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            cmd.arg("--run-as-root");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start fastpath");
        Https {
            server: Listening::adopt(child, Duration::from_secs(20)),
            ca: pki.ca().to_owned(),
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("https://localhost:{}/hello.txt", self.server.addr.port())
    }

    /// `n` requests on `connections` connections (one thread), trusting the test CA.
    fn run(
        &self,
        connections: usize,
        n: u64,
        tweak: impl FnOnce(&mut fastpath_bench::Config),
    ) -> Report {
        let mut c = config(&self.url(), connections, n);
        c.tls = TlsOptions {
            ca_file: Some(self.ca.clone()),
            ..TlsOptions::default()
        };
        tweak(&mut c);
        run_checked(&c)
    }
}

fn all_replied(r: &Report, n: u64) {
    assert_eq!((r.requests, r.replies, r.errors.total), (n, n, 0), "{r:#?}");
    assert_eq!(r.status.s2xx, n);
    assert_eq!(r.body_bytes, n * BODY as u64);
}

#[test]
fn keep_alive_over_tls_does_one_handshake_per_connection() {
    let https = Https::start();
    let r = https.run(4, 400, |_| {});
    all_replied(&r, 400);
    assert_eq!((r.conns_opened, r.conns_established), (4, 4));
    let t = r.tls.as_ref().expect("an https run reports TLS");
    assert_eq!(
        (t.handshakes_full, t.handshakes_resumed, t.failures),
        (4, 0, 0)
    );
    assert_eq!(t.protocol, "TLSv1.3");
    assert!(t.cipher.starts_with("TLS13_"), "{t:?}");
    assert_eq!(t.handshake_us.count, 4);
    // The connect time runs to the end of the handshake, which it contains.
    assert!(r.connect_us.max >= t.handshake_us.min, "{r:#?}");
}

#[test]
fn a_connection_per_request_makes_full_handshakes() {
    let https = Https::start();
    let r = https.run(2, 40, |c| c.keepalive = false);
    all_replied(&r, 40);
    assert_eq!((r.conns_opened, r.conns_established), (40, 40));
    let t = r.tls.as_ref().unwrap();
    assert_eq!((t.handshakes_full, t.handshakes_resumed), (40, 0));
}

#[test]
fn sessions_resume_when_asked() {
    let https = Https::start();
    // One connection at a time: the first is full, and each gives tickets to the next.
    let r = https.run(1, 40, |c| {
        c.keepalive = false;
        c.tls.resume = true;
    });
    all_replied(&r, 40);
    let t = r.tls.as_ref().unwrap();
    assert_eq!((t.handshakes_full, t.handshakes_resumed), (1, 39), "{t:?}");
    // Many at once: only those opened before any ticket came make full handshakes.
    let r = https.run(16, 400, |c| {
        c.keepalive = false;
        c.tls.resume = true;
    });
    all_replied(&r, 400);
    let t = r.tls.as_ref().unwrap();
    assert_eq!(
        (t.handshakes_full, t.handshakes_resumed),
        (16, 384),
        "{t:?}"
    );
    // And with TLS 1.2, whose tickets come in the handshake.
    let r = https.run(1, 20, |c| {
        c.keepalive = false;
        c.tls.resume = true;
        c.tls.version = Some(TlsVersion::Tls12);
    });
    all_replied(&r, 20);
    let t = r.tls.as_ref().unwrap();
    assert_eq!(t.protocol, "TLSv1.2");
    assert_eq!((t.handshakes_full, t.handshakes_resumed), (1, 19), "{t:?}");
}

#[test]
fn version_and_cipher_can_be_pinned() {
    let https = Https::start();
    let r = https.run(1, 10, |c| {
        c.tls.version = Some(TlsVersion::Tls12);
        c.tls.cipher = Some("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256".into());
    });
    all_replied(&r, 10);
    let t = r.tls.as_ref().unwrap();
    assert_eq!(
        (t.protocol, t.cipher),
        ("TLSv1.2", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256")
    );
    let r = https.run(1, 10, |c| {
        c.tls.cipher = Some("TLS13_AES_128_GCM_SHA256".into());
    });
    all_replied(&r, 10);
    assert_eq!(r.tls.as_ref().unwrap().cipher, "TLS13_AES_128_GCM_SHA256");
    // A TLS 1.3 suite with TLS 1.2 only cannot make a handshake: refused before the run.
    let mut c = config(&https.url(), 1, 1);
    c.tls = TlsOptions {
        ca_file: Some(https.ca.clone()),
        version: Some(TlsVersion::Tls12),
        cipher: Some("TLS13_AES_128_GCM_SHA256".into()),
        ..TlsOptions::default()
    };
    assert!(fastpath_bench::run(&c, None).is_err());
}

#[test]
fn a_certificate_from_another_ca_is_a_counted_verification_error() {
    let https = Https::start();
    let other = tempfile::tempdir().unwrap();
    let stranger = TestPki::new(other.path());
    let r = https.run(2, 10, |c| c.tls.ca_file = Some(stranger.ca().to_owned()));
    assert_eq!((r.requests, r.replies), (10, 0));
    assert_eq!((r.errors.total, r.errors.tls), (10, 10), "{r:#?}");
    assert_eq!((r.conns_opened, r.conns_established), (10, 0));
    let t = r.tls.as_ref().unwrap();
    assert_eq!(
        (t.handshakes_full, t.handshakes_resumed, t.failures),
        (0, 0, 10)
    );
    assert_eq!(t.failure_reasons.get("certificate"), Some(&10), "{t:?}");
    // Both CAs have the same name, so the chain is found and its signature is wrong.
    let why = t.first_failure.as_deref().unwrap_or_default();
    assert!(why.starts_with("invalid peer certificate"), "{why}");
}

#[test]
fn the_command_line_speaks_https() {
    let https = Https::start();
    let url = https.url();
    let ca = https.ca.to_str().unwrap();
    let bench = |args: &[&str]| -> Result<String, String> {
        let args = parse_args(std::iter::once("bench").chain(args.iter().copied())).unwrap();
        let mut out = Vec::new();
        execute(&args, &mut out).map(|()| String::from_utf8(out).unwrap())
    };
    let text = bench(&[
        "--json",
        "-q",
        "-t",
        "1",
        "-c",
        "1",
        "-n",
        "12",
        "--no-keepalive",
        "--tls-resume",
        "--tls-version",
        "1.3",
        "--tls-cipher",
        "TLS13_AES_256_GCM_SHA384",
        "--cacert",
        ca,
        &url,
    ])
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["replies"], 12);
    assert_eq!(v["errors"]["tls"], 0);
    let t = &v["tls"];
    for key in [
        "handshakes_full",
        "handshakes_resumed",
        "failures",
        "failure_reasons",
        "first_failure",
        "protocol",
        "cipher",
        "group",
        "handshake_us",
    ] {
        assert!(t.get(key).is_some(), "missing tls.{key} in {t}");
    }
    assert_eq!(
        (&t["handshakes_full"], &t["handshakes_resumed"]),
        (&1.into(), &11.into())
    );
    assert_eq!(t["protocol"], "TLSv1.3");
    assert_eq!(t["cipher"], "TLS13_AES_256_GCM_SHA384");
    assert_eq!(t["handshake_us"]["count"], 12);
    // The table says it too.
    let table = bench(&["-q", "-t", "1", "-c", "1", "-n", "3", "--insecure", &url]).unwrap();
    assert!(table.contains("tls           TLSv1.3"), "{table}");
    assert!(
        table.contains("handshakes 1 full, 0 resumed, 0 failed"),
        "{table}"
    );
    // An https URL with neither a CA nor --insecure is refused; so is an unknown suite.
    let err = bench(&["-n", "1", &url]).unwrap_err();
    assert!(err.contains("--cacert"), "{err}");
    let err = bench(&["-n", "1", "--insecure", "--tls-cipher", "RC4", &url]).unwrap_err();
    assert!(err.contains("unknown --tls-cipher"), "{err}");
    // Plain HTTP targets have no tls object.
    let plain = crate::util::Server::start(crate::util::Behaviour::Ok(b"x".to_vec()));
    let v: Value =
        serde_json::from_str(&bench(&["--json", "-q", "-n", "2", &plain.url("/")]).unwrap())
            .unwrap();
    assert!(v.get("tls").is_none(), "{v}");
}
