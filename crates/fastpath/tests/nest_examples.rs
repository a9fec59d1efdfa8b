//! The NEST examples (examples/nest/) end to end: each specification built once per test run
//! with the real `fastpath nest build` (offline, every project into one shared target
//! directory), then run on every model with clients no one here wrote (Python's socket module
//! and smtplib, swaks), under a real inetd (openbsd-inetd) and under systemd's socket
//! activation. One build serves every model: a generated server takes `--model 'NAME [N]'`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::util::*;
use fastpath_testkit::{openbsd_inetd, Listening, Reaped, OPENBSD_INETD};

/// Every model, as a generated server's `--model` names it.
const MODELS: [&str; 5] = [
    "processServer 3",
    "threadServer 8",
    "eventServer 2",
    "uringServer 2",
    "percoreServer",
];

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/nest")
}

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nest")
}

/// Where the examples are built: projects in `NAME/`, one cargo target directory for all.
fn build_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("nest-examples")
}

/// The server built from `spec` (a `.nest` file) as package `name`, once per test process:
/// `fastpath nest build` with the network forbidden to cargo, so the build shows that a
/// generated project needs nothing the workspace has not already fetched.
fn build(name: &str, spec: &Path) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let cell = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(name.to_string())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let root = build_root();
        let project = root.join(name);
        let target = root.join("target");
        let out = Command::new(BIN)
            .args(["nest", "build"])
            .arg(spec)
            .arg("-o")
            .arg(&project)
            .env("CARGO_TARGET_DIR", &target)
            .env("CARGO_NET_OFFLINE", "true")
            // What is tested here is how the servers behave, not how fast they are: built
            // unoptimised, the examples and their dependencies (aws-lc's C among them) take
            // about a third of the CPU time of an optimised build, minutes off the test run.
            .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
            .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
            .output()
            .expect("run fastpath nest build");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "fastpath nest build {}: {stdout}{}",
            spec.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let binary = target.join("release").join(name);
        assert!(
            stdout.contains(&format!("built {}", binary.display())),
            "{stdout}"
        );
        assert!(
            project.join("Cargo.lock").is_file(),
            "the workspace's Cargo.lock is copied"
        );
        binary
    })
    .clone()
}

/// An example of examples/nest/, built (once per test process, into one target directory
/// that every test building an example shares).
pub(crate) fn example(name: &str) -> PathBuf {
    build(name, &examples().join(format!("{name}.nest")))
}

/// smtp.nest with `%option inetd`, as Figure 3.6 has it: one process per connection.
fn smtp_inetd() -> PathBuf {
    let root = build_root();
    std::fs::create_dir_all(&root).unwrap();
    let spec = root.join("smtp_inetd.nest");
    let text = std::fs::read_to_string(examples().join("smtp.nest")).unwrap();
    let text = text.replacen(
        "%option threadServer 200\n",
        "%option threadServer 200\n%option inetd\n",
        1,
    );
    assert!(text.contains("%option inetd\n"));
    // Written only when changed, so that cargo sees no change in a rebuilt project.
    if std::fs::read_to_string(&spec).ok().as_deref() != Some(text.as_str()) {
        std::fs::write(&spec, &text).unwrap();
    }
    build("smtp_inetd", &spec)
}

/// A running example server; SIGTERM and wait on drop.
struct Nest(Listening);

impl std::ops::Deref for Nest {
    type Target = Listening;
    fn deref(&self) -> &Listening {
        &self.0
    }
}

impl Nest {
    /// Starts `binary` with `args` on a free port, waits for its "listening on" line.
    fn start(binary: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Nest {
        let mut cmd = Command::new(binary);
        cmd.args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("NEST_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Nest::adopt(cmd.spawn().expect("start the example"))
    }

    /// A started server (standard error piped): waits for its "listening on" line.
    fn adopt(child: Child) -> Nest {
        Nest(Listening::adopt(child, START_TIMEOUT))
    }

    fn port(&self) -> String {
        self.addr.port().to_string()
    }

    /// The log once it holds `text` (a line written as a connection closes may come a moment
    /// after the client saw the close), or as it is after 10 s.
    fn wait_log(&self, text: &str) -> String {
        self.0.wait_log(text, Duration::from_secs(10))
    }
}

/// Runs a client program; its standard output when it succeeds, else the test fails with
/// everything it said.
fn client(program: &str, args: &[&str], what: &str) -> String {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what}: {program} {args:?} failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn python(script: &str, args: &[&str], what: &str) -> String {
    let path = scripts().join(script);
    let mut all = vec![path.to_str().unwrap()];
    all.extend_from_slice(args);
    client("python3", &all, what)
}

/// Everything the server sends until it closes the connection.
fn read_to_close(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    s.read_to_end(&mut got)
        .expect("the server closes the connection");
    String::from_utf8_lossy(&got).into_owned()
}

/// Reads until `text` has arrived (or the peer closes, or 10 s pass).
fn read_until(s: &mut TcpStream, text: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let until = Instant::now() + Duration::from_secs(10);
    while !String::from_utf8_lossy(&got).contains(text) && Instant::now() < until {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e} (got {:?})", String::from_utf8_lossy(&got)),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// A config.nest in `dir` with `text`; its path.
fn config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("config.nest");
    std::fs::write(&path, text).unwrap();
    path
}

/// Connections that say nothing: each gets END's reply once the idle timeout (300 ms in
/// `cfg`) has passed, then the close.
fn silent_clients_are_closed(server: &Nest, greeting: &str, end: &str, model: &str) {
    let started = Instant::now();
    let mut conns: Vec<TcpStream> = (0..3).map(|_| server.connect()).collect();
    for c in &mut conns {
        assert_eq!(
            read_to_close(c),
            format!("{greeting}{end}"),
            "{model}: a silent client"
        );
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(10),
        "{model}: closed after {took:?}"
    );
    let log = server.wait_log("idle timeout");
    assert!(log.contains("idle timeout"), "{model}: {log}");
}

// ---------------------------------------------------------------------------
// rot13 (Figure 3.3)

#[test]
fn nest_rot13_with_a_python_client_on_every_model() {
    let rot13 = example("rot13");
    for model in MODELS {
        let server = Nest::start(&rot13, &["--model", model], &[]);
        let out = python("rot13_client.py", &["127.0.0.1", &server.port()], model);
        assert_eq!(out, "ok 204 lines; end: 'rot13: closing\\n'\n", "{model}");
    }
}

#[test]
fn nest_rot13_speaks_tls_with_a_certificate_in_config_nest() {
    let rot13 = example("rot13");
    let dir = tempfile::tempdir().unwrap();
    let pki = fastpath_testkit::TestPki::new(dir.path());
    let (chain, key) = pki.leaf(
        "rot13",
        &["localhost"],
        fastpath_testkit::KeyKind::EcdsaP256,
    );
    let cfg = config(
        dir.path(),
        &format!(
            "tlsCertificate {}\ntlsKey {}\n",
            chain.display(),
            key.display()
        ),
    );
    let cfg = cfg.to_str().unwrap();
    let ca = pki.ca().to_str().unwrap();
    for model in MODELS {
        let server = Nest::start(&rot13, &["--model", model, "--config", cfg], &[]);
        let out = python("rot13_client.py", &["127.0.0.1", &server.port(), ca], model);
        assert_eq!(out, "ok 204 lines over TLSv1.3\n", "{model}");
        // Plain text to it is no TLS: no rot13 comes back.
        let mut c = server.connect();
        c.write_all(b"hello\n").unwrap();
        let answer = read_to_close(&mut c);
        assert!(!answer.contains("uryyb"), "{model}: {answer:?}");
    }
    // One without the other is refused at start.
    let half = config(dir.path(), &format!("tlsCertificate {}\n", chain.display()));
    let out = Command::new(&rot13)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--config",
            half.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tlsCertificate needs tlsKey too"), "{err}");
}

#[test]
fn nest_rot13_bad_input_and_silence_end_the_connection() {
    let rot13 = example("rot13");
    let dir = tempfile::tempdir().unwrap();
    // config.nest overrides the specification: a small input buffer, a short idle timeout.
    let cfg = config(dir.path(), "inputBuffer 64\nidleTimeout 300ms\n");
    let cfg = cfg.to_str().unwrap();
    for model in MODELS {
        let server = Nest::start(&rot13, &["--model", model, "--config", cfg], &[]);
        // A line longer than the input buffer: END's reply, then the close.
        let mut c = server.connect();
        c.write_all(b"short\n").unwrap();
        c.write_all(&[b'x'; 100]).unwrap();
        assert_eq!(read_to_close(&mut c), "fubeg\nrot13: closing\n", "{model}");
        let log = server.wait_log("input buffer full");
        assert!(log.contains("input buffer full"), "{model}: {log}");
        silent_clients_are_closed(&server, "", "rot13: closing\n", model);
    }
}

// ---------------------------------------------------------------------------
// login (Figure 3.4)

#[test]
fn nest_login_put_and_get_with_a_python_client_on_every_model() {
    let login = example("login");
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    let users = dir.path().join("users");
    std::fs::write(&users, "alice wonderland\nbob builder\n").unwrap();
    // The directory of the files: config.nest's `directory`.
    let cfg = config(dir.path(), &format!("directory {}\n", files.display()));
    for model in MODELS {
        let server = Nest::start(
            &login,
            &["--model", model, "--config", cfg.to_str().unwrap()],
            &[("NEST_USERS", &users)],
        );
        let out = python(
            "login_client.py",
            &["127.0.0.1", &server.port(), "bob", "builder"],
            model,
        );
        assert_eq!(out, "ok 1048596 bytes stored and fetched\n", "{model}");
        // Stored in the directory the option names, whole, and no `.part` left.
        let stored = std::fs::metadata(files.join("upload.bin")).unwrap();
        assert_eq!(stored.len(), 1048596, "{model}");
        assert!(!files.join("upload.bin.part").exists(), "{model}");
        std::fs::remove_file(files.join("upload.bin")).unwrap();
    }
}

#[test]
fn nest_login_bad_input_ends_the_connection() {
    let login = example("login");
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &format!("directory {}\nidleTimeout 300ms\n", dir.path().display()),
    );
    let cfg = cfg.to_str().unwrap();
    const END: &str = "Incorrect input - connection terminating!\n";
    for model in MODELS {
        let server = Nest::start(&login, &["--model", model, "--config", cfg], &[]);
        // A wrong password.
        let mut c = server.connect();
        c.write_all(b"nest\nguess\n").unwrap();
        assert_eq!(
            read_to_close(&mut c),
            format!("Username: \nPassword: \nLogin incorrect\n{END}"),
            "{model}"
        );
        // A command the VALID state does not know.
        let mut c = server.connect();
        c.write_all(b"nest\r\nsecret\r\nDELETE everything\r\nGET x\n")
            .unwrap();
        assert_eq!(
            read_to_close(&mut c),
            format!("Username: \nPassword: \nWelcome nest\n{END}"),
            "{model}"
        );
        // A carriage return inside the user name: no rule can match it, END at once,
        // without waiting for the line's end.
        let mut c = server.connect();
        assert_eq!(read_until(&mut c, "\n"), "Username: \n");
        c.write_all(b"ne\rst").unwrap();
        assert_eq!(read_to_close(&mut c), END, "{model}");
        let log = server.wait_log("input matches no rule");
        assert!(log.contains("input matches no rule"), "{model}: {log}");
        // PUT outside the directory.
        let mut c = server.connect();
        c.write_all(b"nest\nsecret\nPUT ../escape 3\nabc").unwrap();
        assert_eq!(
            read_to_close(&mut c),
            format!("Username: \nPassword: \nWelcome nest\n403 ../escape is not a plain file name\n{END}"),
            "{model}"
        );
        assert!(!dir.path().parent().unwrap().join("escape").exists());
        silent_clients_are_closed(&server, "Username: \n", END, model);
    }
}

// ---------------------------------------------------------------------------
// smtp (Figure 3.6, extended)

/// A maildir for the SMTP example and a config.nest that makes it the server's directory.
fn maildir() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let maildir = dir.path().join("Maildir");
    std::fs::create_dir(&maildir).unwrap();
    let cfg = config(
        dir.path(),
        &format!(
            "directory {}\nserverName mx.example.org\nidleTimeout 300ms\n",
            maildir.display()
        ),
    );
    (dir, maildir, cfg)
}

/// The mails in `maildir`/new, oldest first by name.
fn mails(maildir: &Path) -> Vec<String> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(maildir.join("new"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// swaks' body: lines that need dot-stuffing and a line holding only a dot.
const SWAKS_BODY: &str = "first line\n.starts with a dot\n.\n..two dots\nlast line\n";

fn swaks(port: &str, to: &str, what: &str) -> Option<String> {
    if !Path::new("/usr/bin/swaks").exists() {
        skip(
            "nest smtp with swaks",
            Missing::Installable,
            "swaks is not installed (apt-get install swaks)",
        );
        return None;
    }
    Some(client(
        "/usr/bin/swaks",
        &[
            "--server",
            &format!("127.0.0.1:{port}"),
            "--helo",
            "swaks.example.org",
            "--from",
            "sender@example.org",
            "--to",
            to,
            "--header",
            "Subject: from swaks",
            "--body",
            SWAKS_BODY,
        ],
        what,
    ))
}

/// A mail swaks sent: the envelope's headers, swaks' own, the body unstuffed.
fn assert_swaks_mail(mail: &str, to: &str, what: &str) {
    assert!(
        mail.starts_with(&format!(
            "Return-Path: <sender@example.org>\nDelivered-To: {to}\nReceived: from swaks.example.org ("
        )),
        "{what}: {mail}"
    );
    assert!(mail.contains("\nSubject: from swaks\n"), "{what}: {mail}");
    assert!(
        mail.contains(&format!("\n\n{SWAKS_BODY}")),
        "{what}: the body changed: {mail:?}"
    );
    assert!(
        !mail.contains('\r'),
        "{what}: maildir files end lines with \\n"
    );
}

#[test]
fn nest_smtp_with_smtplib_and_swaks_on_every_model() {
    let smtp = example("smtp");
    for model in MODELS {
        let (_dir, maildir, cfg) = maildir();
        let server = Nest::start(
            &smtp,
            &["--model", model, "--config", cfg.to_str().unwrap()],
            &[],
        );
        let out = python(
            "smtp_client.py",
            &["127.0.0.1", &server.port(), maildir.to_str().unwrap()],
            model,
        );
        assert_eq!(out, "ok 2 mails\n", "{model}");
        let Some(out) = swaks(&server.port(), "rcpt@example.org", model) else {
            continue;
        };
        assert!(out.contains("<-  250 OK: queued as "), "{model}: {out}");
        assert!(
            out.contains("<-  221 mx.example.org closing connection"),
            "{model}: {out}"
        );
        let all = mails(&maildir);
        assert_eq!(all.len(), 3, "{model}");
        let mail = all.iter().find(|m| m.contains("from swaks")).unwrap();
        assert_swaks_mail(mail, "rcpt@example.org", model);
        assert_eq!(std::fs::read_dir(maildir.join("tmp")).unwrap().count(), 0);
    }
}

#[test]
fn nest_smtp_replies_to_commands_out_of_order_and_ends_bad_input() {
    let smtp = example("smtp");
    for model in MODELS {
        let (_dir, maildir, cfg) = maildir();
        let server = Nest::start(
            &smtp,
            &["--model", model, "--config", cfg.to_str().unwrap()],
            &[],
        );
        let mut c = server.connect();
        let greeting = read_until(&mut c, "\r\n");
        assert!(
            greeting.starts_with("220 mx.example.org Simple SMTP; ")
                && greeting.ends_with(" +0000\r\n"),
            "{model}: {greeting:?}"
        );
        // Each command and its reply, one at a time.
        for (send, want) in [
            ("MAIL FROM:<a@example.org>\r\n", "503 say HELO first\r\n"),
            ("DATA\r\n", "503 need MAIL and RCPT first\r\n"),
            ("RCPT TO:<b@example.org>\r\n", "503 need MAIL first\r\n"),
            ("VRFY root\r\n", "500 unrecognised command\r\n"),
            ("helo client\r\n", "250 mx.example.org hello client\r\n"),
            (
                "mail from: a@example.org\r\n",
                "501 syntax: MAIL FROM:<address>\r\n",
            ),
            ("Mail From:<a@example.org>\n", "250 OK\r\n"),
            (
                "MAIL FROM:<c@example.org>\r\n",
                "503 nested MAIL command\r\n",
            ),
            ("DATA\r\n", "503 need MAIL and RCPT first\r\n"),
            (
                "RCPT TO:b@example.org\r\n",
                "501 syntax: RCPT TO:<address>\r\n",
            ),
            ("NOOP\r\n", "250 OK\r\n"),
            ("RSET\r\n", "250 OK\r\n"),
            ("RCPT TO:<b@example.org>\r\n", "503 need MAIL first\r\n"),
            ("QUITTING\r\n", "500 unrecognised command\r\n"),
        ] {
            c.write_all(send.as_bytes()).unwrap();
            assert_eq!(read_until(&mut c, "\r\n"), want, "{model}: {send:?}");
        }
        // A whole transaction in one write (pipelined), text lines that look like commands,
        // a stuffed dot, then a bare carriage return in a command: no rule can match it.
        c.write_all(
            b"EHLO x\r\nMAIL FROM:<>\r\nRCPT TO:<b@example.org>\r\nDATA\r\nQUIT\r\n..\r\n\r\n.\r\nNOOP\r\nHELO a\rb\r\n",
        )
        .unwrap();
        let got = read_to_close(&mut c);
        let want_head = "250 mx.example.org hello x\r\n250 OK\r\n250 OK\r\n354 end data with <CR><LF>.<CR><LF>\r\n250 OK: queued as ";
        assert!(got.starts_with(want_head), "{model}: {got:?}");
        assert!(
            got.ends_with("\r\n250 OK\r\n421 mx.example.org closing connection\r\n"),
            "{model}: {got:?}"
        );
        let all = mails(&maildir);
        assert_eq!(all.len(), 1, "{model}");
        assert!(all[0].starts_with("Return-Path: <>\nDelivered-To: b@example.org\nReceived: from x ([127.0.0.1]) by mx.example.org with SMTP; "), "{model}: {:?}", all[0]);
        assert!(
            all[0].ends_with(" +0000\nQUIT\n.\n\n"),
            "{model}: {:?}",
            all[0]
        );
        // A mail cut short by the client: nothing delivered, nothing left in tmp/.
        let mut c = server.connect();
        c.write_all(b"HELO x\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\nhalf a mail\r\n")
            .unwrap();
        read_until(&mut c, "354 ");
        drop(c);
        // The file was in tmp/ before 354 was sent; END removes it.
        let tmp_files = || std::fs::read_dir(maildir.join("tmp")).unwrap().count();
        wait_for(Duration::from_secs(10), || (tmp_files() == 0).then_some(()));
        assert_eq!(
            tmp_files(),
            0,
            "{model}: the mail cut short is left in tmp/"
        );
        assert_eq!(mails(&maildir).len(), 1, "{model}");
        silent_clients_are_closed_smtp(&server, model);
    }
}

/// SMTP's variant of [`silent_clients_are_closed`]: the greeting holds the time.
fn silent_clients_are_closed_smtp(server: &Nest, model: &str) {
    let started = Instant::now();
    let mut c = server.connect();
    let got = read_to_close(&mut c);
    assert!(
        got.starts_with("220 mx.example.org Simple SMTP; ")
            && got.ends_with("\r\n421 mx.example.org closing connection\r\n"),
        "{model}: {got:?}"
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(10),
        "{model}: closed after {took:?}"
    );
}

// ---------------------------------------------------------------------------
// inetd and socket activation

/// Waits until something listens on `port` (the superserver started).
fn wait_listening(port: u16) {
    let until = Instant::now() + START_TIMEOUT;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < until, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn nest_smtp_inetd_under_openbsd_inetd() {
    if !Path::new(OPENBSD_INETD).exists() {
        return skip(
            "nest smtp under inetd",
            Missing::Installable,
            "inetd is not installed (apt-get install openbsd-inetd)",
        );
    }
    let server = smtp_inetd();
    let (dir, maildir, cfg) = maildir();
    let port = free_port();
    // inetd runs the server with the arguments of its line: the config file with the
    // maildir. `nowait`: a process per connection, the connection on 0, 1 and 2.
    let inetd = openbsd_inetd(
        dir.path(),
        &format!(
            "127.0.0.1:{port} stream tcp nowait root {} smtp_inetd --config {}",
            server.display(),
            cfg.display()
        ),
    );
    wait_listening(port);
    let Some(out) = swaks(&port.to_string(), "inetd@example.org", "openbsd-inetd") else {
        return;
    };
    assert!(out.contains("<-  220 mx.example.org Simple SMTP"), "{out}");
    assert!(
        out.contains("<-  221 mx.example.org closing connection"),
        "{out}"
    );
    // Python's smtplib too, on a connection (a process) of its own each time.
    let out = python(
        "smtp_client.py",
        &["127.0.0.1", &port.to_string(), maildir.to_str().unwrap()],
        "openbsd-inetd",
    );
    assert_eq!(out, "ok 2 mails\n");
    let all = mails(&maildir);
    assert_eq!(all.len(), 3);
    let mail = all.iter().find(|m| m.contains("from swaks")).unwrap();
    assert_swaks_mail(mail, "inetd@example.org", "openbsd-inetd");
    // Bad input under inetd: END's reply, then the process exits and the connection closes.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"HELO a\rb\r\n").unwrap();
    let got = read_to_close(&mut c);
    assert!(
        got.ends_with("\r\n421 mx.example.org closing connection\r\n"),
        "{got:?}"
    );
    let err = inetd.stop();
    assert!(!err.contains("exit status 0x1"), "{err}");
}

#[test]
fn nest_smtp_inetd_under_systemd_socket_activate() {
    let activate = Path::new("/usr/bin/systemd-socket-activate");
    if !activate.exists() {
        return skip(
            "nest smtp under systemd-socket-activate --inetd",
            Missing::Installable,
            "systemd-socket-activate is not installed (apt-get install systemd)",
        );
    }
    let server = smtp_inetd();
    let (_dir, maildir, cfg) = maildir();
    let port = free_port();
    let child = Command::new(activate)
        .args(["--inetd", "--accept", "-l", &format!("127.0.0.1:{port}")])
        .arg(&server)
        .arg("--config")
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _reaped = Reaped(child);
    wait_listening(port);
    let out = python(
        "smtp_client.py",
        &["127.0.0.1", &port.to_string(), maildir.to_str().unwrap()],
        "systemd-socket-activate --inetd",
    );
    assert_eq!(out, "ok 2 mails\n");
    if let Some(out) = swaks(
        &port.to_string(),
        "activated@example.org",
        "socket activation",
    ) {
        assert!(out.contains("<-  250 OK: queued as "), "{out}");
        let all = mails(&maildir);
        let mail = all.iter().find(|m| m.contains("from swaks")).unwrap();
        assert_swaks_mail(mail, "activated@example.org", "--inetd");
    }
}

#[test]
fn nest_smtp_standalone_under_socket_activation_on_every_model() {
    let activate = Path::new("/usr/bin/systemd-socket-activate");
    if !activate.exists() {
        return skip(
            "nest smtp under systemd-socket-activate",
            Missing::Installable,
            "systemd-socket-activate is not installed (apt-get install systemd)",
        );
    }
    let smtp = example("smtp");
    for model in MODELS {
        let (_dir, maildir, cfg) = maildir();
        let port = free_port();
        // Without --inetd: the listening socket is passed (LISTEN_FDS), as a socket unit
        // with Accept=no does; the server is started by the first connection.
        let child = Command::new(activate)
            .args(["-l", &format!("127.0.0.1:{port}")])
            .arg(&smtp)
            .args(["--model", model, "--config"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_listening(port);
        let server = Nest::adopt(child);
        assert_eq!(server.addr.port(), port, "{model}");
        assert!(
            server.wait_log("(inherited;").contains("(inherited;"),
            "{model}"
        );
        let out = python(
            "smtp_client.py",
            &["127.0.0.1", &port.to_string(), maildir.to_str().unwrap()],
            model,
        );
        assert_eq!(out, "ok 2 mails\n", "{model}");
    }
}

#[test]
fn nest_smtp_refuses_a_mail_over_its_limit_and_goes_on() {
    let smtp = example("smtp");
    let (_dir, maildir, cfg) = maildir();
    let server = Nest::start(
        &smtp,
        &[
            "--model",
            "eventServer 2",
            "--config",
            cfg.to_str().unwrap(),
        ],
        &[],
    );
    let mut c = server.connect();
    c.write_all(b"HELO x\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\n")
        .unwrap();
    let head = read_until(&mut c, "<CR><LF>.<CR><LF>\r\n");
    assert!(
        head.ends_with("\r\n354 end data with <CR><LF>.<CR><LF>\r\n"),
        "{head:?}"
    );
    // 11 MiB of text, past the example's 10 MiB limit: read to its end, stored nowhere.
    let line = format!("{}\r\n", "a".repeat(1022));
    let text = line.repeat(11 * 1024);
    c.write_all(text.as_bytes()).unwrap();
    c.write_all(b".\r\nQUIT\r\n").unwrap();
    assert_eq!(
        read_to_close(&mut c),
        "552 the mail is over 10485760 bytes\r\n221 mx.example.org closing connection\r\n"
    );
    assert!(mails(&maildir).is_empty());
    assert_eq!(std::fs::read_dir(maildir.join("tmp")).unwrap().count(), 0);
}

#[test]
fn nest_example_with_a_missing_directory_does_not_start() {
    let smtp = example("smtp");
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere");
    let cfg = config(dir.path(), &format!("directory {}\n", missing.display()));
    let out = Command::new(&smtp)
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .env_remove("NEST_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.ends_with(&format!(
            "smtp: directory {}: No such file or directory (os error 2)\n",
            missing.display()
        )),
        "{err}"
    );
}
