//! Automatic HTTPS: hosts with `tls = "auto"` served with certificates the real binary
//! obtains from Pebble (Let's Encrypt's test ACME server, started per test), which
//! validates against the server's own listeners; curl checks the chain against Pebble's
//! root.

use std::path::PathBuf;
use std::time::Duration;

use fastpath_testkit::pebble::{Options, Pebble, Tools};
use fastpath_testkit::{free_port, TestPki};

use crate::check::run;
use crate::util::*;

const NAME: &str = "a.example.test";
const OTHER_NAME: &str = "www.a.example.test";
/// How long the first certificate may take: an order with Pebble takes a second or two.
const OBTAIN: Duration = Duration::from_secs(30);

/// A site with one auto host and the ports Pebble validates on.
struct Auto {
    site: Site,
    http: u16,
    tls: u16,
}

impl Auto {
    fn new() -> Auto {
        let site = Site::new();
        site.file("hello.txt", "hello, automatically");
        Auto {
            site,
            http: free_port(),
            tls: free_port(),
        }
    }

    fn options(&self) -> Options {
        Options {
            validation_ports: Some((self.http, self.tls)),
            ..Options::default()
        }
    }

    /// The configuration: a plain and a TLS listener, `[acme]` with `acme_keys`.
    fn config(&self, directory: &str, ca: &std::path::Path, acme_keys: &str) -> String {
        format!(
            "root = \"root\"\n\
             listen = [{{ address = \"127.0.0.1:{}\" }}, {{ address = \"127.0.0.1:{}\", tls = true }}]\n\
             [acme]\n\
             directory = \"{directory}\"\n\
             state_dir = \"acme\"\n\
             ca_root = {ca:?}\n\
             {acme_keys}\n\
             [[host]]\n\
             names = [\"{NAME}\", \"{OTHER_NAME}\"]\n\
             tls = \"auto\"\n",
            self.http, self.tls
        )
    }

    fn serve(&self, model: Model, pebble: &Pebble, acme_keys: &str) -> Server {
        let text = self.config(&pebble.directory_url, &pebble.ca_pem, acme_keys);
        self.site
            .server(model)
            .config(&text)
            .configured_listen()
            .start()
    }

    /// [`Auto::serve`] with a pid file, for reloads; its path.
    fn serve_with_pid_file(&self, model: Model, pebble: &Pebble) -> (Server, PathBuf) {
        let pid_file = self.site.base().join("fastpath.pid");
        let text = format!(
            "pid_file = {pid_file:?}\n{}",
            self.config(&pebble.directory_url, &pebble.ca_pem, "")
        );
        let srv = self
            .site
            .server(model)
            .config(&text)
            .configured_listen()
            .start();
        (srv, pid_file)
    }

    /// Pebble issuing certificates of 12 seconds, to see renewals.
    fn short_lived_pebble(&self, tools: &Tools) -> Pebble {
        Pebble::start(
            tools,
            Options {
                profiles: vec![("default", 12)],
                ..self.options()
            },
        )
    }

    fn state(&self) -> PathBuf {
        self.site.base().join("acme")
    }
}

/// curl over HTTPS to `name` on the TLS port, trusting Pebble's issuing root alone.
fn curl_auto(auto: &Auto, pebble: &Pebble, name: &str) -> Option<std::process::Output> {
    let root = auto.site.base().join("pebble-root.pem");
    if !root.exists() {
        pebble.write_issuing_root(&root);
    }
    curl_https(&root, name, auto.tls, "/hello.txt", &[])
}

/// Waits until curl gets the file over HTTPS with a certificate from Pebble; `false` when
/// curl is missing (a visible skip).
fn served_over_https(auto: &Auto, pebble: &Pebble, srv: &Server, within: Duration) -> bool {
    let Some(_) = curl_auto(auto, pebble, NAME) else {
        return false;
    };
    let served = wait_for(within, || {
        let out = curl_auto(auto, pebble, NAME)?;
        (out.status.success() && out.stdout == b"hello, automatically").then_some(())
    });
    assert!(
        served.is_some(),
        "not served over HTTPS in {within:?}\n{}\npebble:\n{}",
        srv.report(),
        pebble.log()
    );
    true
}

fn obtains_and_serves(model: Model, challenge: &str, test: &str) {
    let Some(tools) = Tools::find(test) else {
        return;
    };
    let auto = Auto::new();
    let pebble = Pebble::start(&tools, auto.options());
    let started = std::time::Instant::now();
    let srv = auto.serve(model, &pebble, &format!("challenge = \"{challenge}\""));
    // Plain HTTP is served from the start.
    let plain = Conn::open(format!("127.0.0.1:{}", auto.http).parse().unwrap()).exchange(req(
        "GET",
        "/hello.txt",
        &[("Host", NAME)],
    ));
    assert_eq!(plain.status, 200);
    if !served_over_https(&auto, &pebble, &srv, OBTAIN) {
        return;
    }
    // Shown with --nocapture: how long a first certificate takes from the start.
    eprintln!(
        "{model} {challenge}: served over HTTPS {:.2} s after the start",
        started.elapsed().as_secs_f64()
    );
    // Both names, with the same certificate, verified against Pebble's root.
    let out = curl_auto(&auto, &pebble, OTHER_NAME).unwrap();
    assert!(out.status.success(), "{out:?}");
    let a = pebble.served_leaf(auto.tls, NAME).unwrap();
    assert_eq!(pebble.served_leaf(auto.tls, OTHER_NAME).unwrap(), a);
    // Stored with its key, private to the server's user.
    let dir = auto.state().join(NAME);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.join("key.pem"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(dir.join("cert.pem").is_file());
    assert!(
        srv.wait_stderr(Duration::from_secs(5), "obtained, valid until"),
        "{}",
        srv.report()
    );
    // The challenges were withdrawn.
    let left: Vec<_> = std::fs::read_dir(auto.state().join("challenges"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

httptest!(obtains_and_serves_over_http01, |model| {
    obtains_and_serves(model, "http-01", "acme http-01")
});

httptest!(obtains_and_serves_over_tls_alpn01, |model| {
    obtains_and_serves(model, "tls-alpn-01", "acme tls-alpn-01")
});

/// A short-lived certificate is renewed at two thirds of its life (or as ARI says), and
/// the new one is served without a restart and without a failed handshake in between.
fn renews(model: Model, test: &str) {
    let Some(tools) = Tools::find(test) else {
        return;
    };
    let auto = Auto::new();
    let pebble = auto.short_lived_pebble(&tools);
    let srv = auto.serve(model, &pebble, "");
    if !served_over_https(&auto, &pebble, &srv, OBTAIN) {
        return;
    }
    let first = pebble.served_leaf(auto.tls, NAME).unwrap();
    let pid = srv.pid();
    let mut handshakes = 0;
    let renewed = wait_for(Duration::from_secs(30), || {
        // Every handshake meanwhile succeeds, with the old certificate or the new.
        let leaf = pebble
            .served_leaf(auto.tls, NAME)
            .unwrap_or_else(|e| panic!("a handshake failed: {e}\n{}", srv.report()));
        handshakes += 1;
        std::thread::sleep(Duration::from_millis(100));
        (leaf != first).then_some(())
    });
    eprintln!("{model}: renewed after {handshakes} handshakes, none failed");
    assert!(
        renewed.is_some(),
        "not renewed\n{}\npebble:\n{}",
        srv.report(),
        pebble.log()
    );
    assert_eq!(srv.pid(), pid);
    assert!(srv.wait_stderr(Duration::from_secs(5), "renewed, valid until"));
    let out = curl_auto(&auto, &pebble, NAME).unwrap();
    assert!(out.status.success(), "{out:?}");
}

httptest!(renews_a_short_lived_certificate_without_restart, |model| {
    renews(model, "acme renewal")
});

httptest!(
    waits_for_an_acme_server_that_is_down_then_obtains,
    |model| {
        let Some(tools) = Tools::find("acme server down") else {
            return;
        };
        let auto = Auto::new();
        let pki_dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(pki_dir.path());
        let ca = pki.ca().to_owned();
        let port = free_port();
        let directory = format!("https://127.0.0.1:{port}/dir");
        let srv = auto
            .site
            .server(model)
            .config(&auto.config(&directory, &ca, ""))
            .configured_listen()
            .start();
        // The server serves plain HTTP, and says why it has no certificate yet.
        assert!(
            srv.wait_stderr(Duration::from_secs(10), "trying again in"),
            "{}",
            srv.report()
        );
        assert!(
            srv.stderr().contains(&format!("127.0.0.1:{port}")),
            "{}",
            srv.report()
        );
        let plain = Conn::open(format!("127.0.0.1:{}", auto.http).parse().unwrap()).exchange(req(
            "GET",
            "/hello.txt",
            &[("Host", NAME)],
        ));
        assert_eq!(plain.status, 200);
        let pebble = Pebble::start(
            &tools,
            Options {
                port: Some(port),
                pki: Some(pki),
                ..auto.options()
            },
        );
        served_over_https(&auto, &pebble, &srv, OBTAIN);
    }
);

httptest!(
    a_contact_the_ca_refuses_is_logged_with_its_problem_and_the_server_stays,
    |model| {
        let Some(tools) = Tools::find("acme invalid contact") else {
            return;
        };
        let auto = Auto::new();
        let pebble = Pebble::start(&tools, auto.options());
        let mut srv = auto.serve(model, &pebble, "contact = \"mailto:admin@@example.test\"");
        assert!(
            srv.wait_stderr(
                Duration::from_secs(10),
                "urn:ietf:params:acme:error:invalidContact"
            ),
            "{}",
            srv.report()
        );
        assert!(
            srv.stderr().contains("trying again in 60s"),
            "{}",
            srv.report()
        );
        assert!(srv.is_running());
        // Plain HTTP goes on; TLS for the name has no certificate to show.
        let plain = Conn::open(format!("127.0.0.1:{}", auto.http).parse().unwrap()).exchange(req(
            "GET",
            "/hello.txt",
            &[("Host", NAME)],
        ));
        assert_eq!(plain.status, 200);
        assert!(pebble.served_leaf(auto.tls, NAME).is_err());
        assert!(srv.is_running());
    }
);

#[test]
fn check_says_what_each_auto_host_gets() {
    let Some(tools) = Tools::find("acme check") else {
        return;
    };
    let auto = Auto::new();
    let pebble = Pebble::start(&tools, auto.options());
    let config = auto
        .site
        .config(&auto.config(&pebble.directory_url, &pebble.ca_pem, ""));
    let check = || {
        let mut cmd = std::process::Command::new(BIN);
        cmd.arg("check").arg("--config").arg(&config);
        let out = run(cmd);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let before = check();
    assert!(
        before.contains(&format!(
            "{NAME}, {OTHER_NAME}: certificate to be obtained from {}",
            pebble.directory_url
        )),
        "{before}"
    );
    let srv = auto.serve("epoll", &pebble, "");
    if !served_over_https(&auto, &pebble, &srv, OBTAIN) {
        return;
    }
    let after = check();
    assert!(
        after.contains(&format!(
            "{NAME}, {OTHER_NAME}: certificate from ACME on disk"
        )) && after.contains("valid until"),
        "{after}"
    );
}

/// Started as root with `user`: the ACME process drops to the user like the serving
/// processes, which read the files it writes (the key too, private to that user).
fn obtains_as_the_configured_user(model: Model, test: &str) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    // SAFETY: cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        fastpath_testkit::skip(
            test,
            fastpath_testkit::Missing::Environment,
            "needs root: it checks the switch from root to another user",
        );
        return;
    }
    let Some(tools) = Tools::find(test) else {
        return;
    };
    let auto = Auto::new();
    let pebble = Pebble::start(&tools, auto.options());
    // Temporary directories are private to root: the user reaches the state directory and
    // Pebble's root through the site's.
    std::fs::set_permissions(auto.site.base(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ca = auto.site.base().join("pebble-https-ca.pem");
    std::fs::copy(&pebble.ca_pem, &ca).unwrap();
    std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
    let text = format!(
        "user = \"nobody\"\n{}",
        auto.config(&pebble.directory_url, &ca, "")
    );
    let srv = auto
        .site
        .server(model)
        .without_run_as_root()
        .config(&text)
        .configured_listen()
        .start();
    if !served_over_https(&auto, &pebble, &srv, OBTAIN) {
        return;
    }
    let key = std::fs::metadata(auto.state().join(NAME).join("key.pem")).unwrap();
    let nobody = std::fs::metadata(auto.state()).unwrap().uid();
    assert_ne!(nobody, 0, "the state directory is the user's");
    assert_eq!(key.uid(), nobody);
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
}

#[test]
fn obtains_as_the_configured_user_on_epoll() {
    obtains_as_the_configured_user("epoll", "acme as a user epoll");
}

#[test]
fn obtains_as_the_configured_user_on_prefork() {
    obtains_as_the_configured_user("prefork", "acme as a user prefork");
}

/// A reload's new server serves the certificate on disk, and its ACME process orders no
/// other: the old one's ended with the old server.
#[test]
fn a_reload_serves_the_certificate_obtained_without_ordering_again() {
    let Some(tools) = Tools::find("acme reload") else {
        return;
    };
    let auto = Auto::new();
    let pebble = Pebble::start(&tools, auto.options());
    let (srv, pid_file) = auto.serve_with_pid_file("epoll", &pebble);
    if !served_over_https(&auto, &pebble, &srv, OBTAIN) {
        return;
    }
    let first = pebble.served_leaf(auto.tls, NAME).unwrap();
    let acme_pid = pid_after(&srv, ", kept by process ");
    crate::reload::replace(&pid_file, libc::SIGHUP);
    // The old server's ACME process ended with it.
    let gone = wait_for(Duration::from_secs(5), || {
        (!std::path::Path::new(&format!("/proc/{acme_pid}")).exists()).then_some(())
    });
    assert!(
        gone.is_some(),
        "ACME process {acme_pid} outlived its server"
    );
    assert_eq!(pebble.served_leaf(auto.tls, NAME).unwrap(), first);
    // Time for the new ACME process to look at the certificate and find it good.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        srv.stderr().matches("ACME: certificate for").count(),
        1,
        "{}",
        srv.report()
    );
    assert_eq!(
        srv.stderr().matches(", kept by process").count(),
        2,
        "{}",
        srv.report()
    );
}

/// The pid in the first `MARK PID` line of `srv`'s error log.
fn pid_after(srv: &Server, mark: &str) -> u32 {
    let err = srv.stderr();
    let at = err
        .find(mark)
        .unwrap_or_else(|| panic!("{mark:?} in\n{}", srv.report()))
        + mark.len();
    err[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Waits until the certificate served for NAME is no longer `old`, every handshake in
/// between succeeding (with the old certificate or the new).
fn replaced(auto: &Auto, pebble: &Pebble, srv: &Server, old: &[u8], within: Duration) -> Vec<u8> {
    let new = wait_for(within, || {
        let leaf = pebble
            .served_leaf(auto.tls, NAME)
            .unwrap_or_else(|e| panic!("a handshake failed: {e}\n{}", srv.report()));
        std::thread::sleep(Duration::from_millis(100));
        (leaf != old).then_some(leaf)
    });
    new.unwrap_or_else(|| {
        panic!(
            "not replaced in {within:?}\n{}\npebble:\n{}",
            srv.report(),
            pebble.log()
        )
    })
}

/// `fastpath acme revoke`: the certificate is revoked at the CA and set aside, and the
/// running server obtains another, with a new key, serving the revoked one until then.
fn revoked_by_the_operator_is_replaced(model: Model, test: &str) {
    let Some(tools) = Tools::find(test) else {
        return;
    };
    let auto = Auto::new();
    let pebble = Pebble::start(&tools, auto.options());
    let srv = auto.serve(model, &pebble, "");
    // Where `serve` wrote the configuration.
    let config = auto.site.base().join("fastpath.toml");
    if !served_over_https(&auto, &pebble, &srv, OBTAIN) {
        return;
    }
    let first = pebble.served_leaf(auto.tls, NAME).unwrap();
    let key_file = auto.state().join(NAME).join("key.pem");
    let first_key = std::fs::read(&key_file).unwrap();
    let revoke = |name: &str| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args([
            "acme",
            "revoke",
            name,
            "--reason",
            "keyCompromise",
            "--config",
        ])
        .arg(&config);
        run(cmd)
    };
    let out = revoke(OTHER_NAME);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(said.contains("is revoked; kept as"), "{said}");
    assert_eq!(pebble.certificate_status(&first), "Revoked");
    let second = replaced(&auto, &pebble, &srv, &first, OBTAIN);
    assert_eq!(pebble.certificate_status(&second), "Valid");
    assert_ne!(std::fs::read(&key_file).unwrap(), first_key, "a new key");
    let out = curl_auto(&auto, &pebble, NAME).unwrap();
    assert!(out.status.success(), "{out:?}");
    // The revoked chain is kept beside the new one.
    let kept = std::fs::read_dir(auto.state().join(NAME))
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("cert.pem.revoked-")
        })
        .count();
    assert_eq!(kept, 1);
    // A name no auto host has, and a reason the CA does not take, are refused and said.
    let out = revoke("other.example.test");
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("no host with tls = \"auto\" is named other.example.test"),
        "{said}"
    );
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["acme", "revoke", NAME, "--reason", "bored", "--config"])
        .arg(&config);
    let out = run(cmd);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("keyCompromise"),
        "{out:?}"
    );
    assert_eq!(pebble.certificate_status(&second), "Valid");
}

httptest!(
    revoked_by_the_operator_is_replaced_with_a_new_key,
    |model| { revoked_by_the_operator_is_replaced(model, "acme revoke") }
);

/// A certificate the CA revoked (here with its key, by someone else) is replaced when the
/// CA's renewal window (ARI) says so: asked at start, so after a reload at the latest.
fn revoked_by_the_ca_is_replaced_after_a_reload(model: Model) {
    let Some(tools) = Tools::find("acme revoked by the CA") else {
        return;
    };
    let auto = Auto::new();
    let pebble = Pebble::start(&tools, auto.options());
    let (srv, pid_file) = auto.serve_with_pid_file(model, &pebble);
    if !served_over_https(&auto, &pebble, &srv, OBTAIN) {
        return;
    }
    let first = pebble.served_leaf(auto.tls, NAME).unwrap();
    let key = std::fs::read_to_string(auto.state().join(NAME).join("key.pem")).unwrap();
    pebble.revoke_with_key(&first, &key);
    assert_eq!(pebble.certificate_status(&first), "Revoked");
    crate::reload::replace(&pid_file, libc::SIGHUP);
    let second = replaced(&auto, &pebble, &srv, &first, OBTAIN);
    assert_eq!(pebble.certificate_status(&second), "Valid");
    assert!(
        srv.wait_stderr(Duration::from_secs(5), "the CA asks for the certificate of"),
        "{}",
        srv.report()
    );
}

#[test]
fn revoked_by_the_ca_is_replaced_after_a_reload_on_epoll() {
    revoked_by_the_ca_is_replaced_after_a_reload("epoll");
}

#[test]
fn revoked_by_the_ca_is_replaced_after_a_reload_on_prefork() {
    revoked_by_the_ca_is_replaced_after_a_reload("prefork");
}

/// The process that keeps the certificates is started again when it dies, and goes on
/// renewing; the server never stops serving.
fn a_killed_acme_process_is_started_again(model: Model, test: &str) {
    let Some(tools) = Tools::find(test) else {
        return;
    };
    let auto = Auto::new();
    let pebble = auto.short_lived_pebble(&tools);
    let mut srv = auto.serve(model, &pebble, "");
    if !served_over_https(&auto, &pebble, &srv, OBTAIN) {
        return;
    }
    let first = pebble.served_leaf(auto.tls, NAME).unwrap();
    let guardian = pid_after(&srv, ", kept by process ");
    let keeper = pid_after(&srv, "ACME: process ");
    // SAFETY: signals a process this test's server started.
    assert_eq!(
        unsafe { libc::kill(keeper as libc::pid_t, libc::SIGKILL) },
        0
    );
    assert!(
        srv.wait_stderr(
            Duration::from_secs(5),
            "the process keeping the certificates was killed by signal 9; started again in 1s"
        ),
        "{}",
        srv.report()
    );
    assert!(
        srv.wait_stderr(
            Duration::from_secs(5),
            &format!("ACME: process {}", keeper + 1)
        ) || srv
            .stderr()
            .matches("obtains and renews the certificates")
            .count()
            == 2,
        "{}",
        srv.report()
    );
    replaced(&auto, &pebble, &srv, &first, OBTAIN);
    assert!(std::path::Path::new(&format!("/proc/{guardian}")).exists());
    assert!(srv.is_running());
}

#[test]
fn a_killed_acme_process_is_started_again_on_epoll() {
    a_killed_acme_process_is_started_again("epoll", "acme restart epoll");
}

#[test]
fn a_killed_acme_process_is_started_again_on_prefork() {
    a_killed_acme_process_is_started_again("prefork", "acme restart prefork");
}
