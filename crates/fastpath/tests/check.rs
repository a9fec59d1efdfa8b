//! `fastpath check --config FILE`: validation without serving.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::Duration;

use crate::util::*;

/// Runs `cmd` to completion, killing it (and failing) after 10 s.
pub(crate) fn run(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = wait_for(Duration::from_secs(10), || child.try_wait().unwrap());
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{cmd:?} still running after 10 s\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.join().unwrap()),
            String::from_utf8_lossy(&err.join().unwrap())
        );
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

pub(crate) fn check(path: &std::path::Path) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.arg("check").arg("--config").arg(path);
    run(cmd)
}

pub(crate) fn show(out: &Output) -> String {
    format!(
        "status: {}\n---- stdout ----\n{}\n---- stderr ----\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const VALID: &str = r#"# Every key, set to something other than its default.
listen = ["127.0.0.1:8181", "127.0.0.1:8182", "unix:fastpath.sock"]
unix_mode = "0660"
workers = 2
model = "epoll"
root = "root"
index = ["index.html", "index.htm"]
dotfiles = false
precompressed = true

[limits]
max_connections = 500
max_request_line = 4096
max_header_bytes = 8192
max_headers = 50
max_discard_body = 65536
max_requests_per_connection = 1000

[timeouts]
header = "5s"
keepalive = 30
send = "500ms"
linger = "1s"

[log]
access = "stdout"
error = "stderr"
level = "info"

[[host]]
names = ["a.example", "*.b.example"]
root = "root"
index = ["home.html"]
dotfiles = true
precompressed = false

[[host]]
names = ["fallback.example"]
root = "root"
default = true
"#;

#[test]
fn valid_config_passes() {
    let site = Site::new();
    let path = site.config(VALID);
    let out = check(&path);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("ok"), "{}", show(&out));
}

#[test]
fn minimal_config_passes() {
    let site = Site::new();
    let path = site.config("listen = \"127.0.0.1:8080\"\n");
    let out = check(&path);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
}

#[test]
fn a_unix_listen_address_is_checked() {
    let site = Site::new();
    let path = site.config("listen = [\"127.0.0.1:8080\", \"unix:\"]\nunix_mode = \"rw\"\n");
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(":1:29: `listen` address \"unix:\": `unix:` needs the socket's path"),
        "{}",
        show(&out)
    );
    assert!(
        stderr.contains(":2:13: `unix_mode` \"rw\" is not a file mode in octal"),
        "{}",
        show(&out)
    );
}

/// Finds a `FILE:LINE:COLUMN: message` line for `line` and returns the message.
fn error_at<'a>(stderr: &'a str, file: &str, line: usize) -> Option<&'a str> {
    let prefix = format!("{file}:{line}:");
    stderr.lines().find_map(|l| {
        let rest = l.strip_prefix(&prefix)?;
        let (col, msg) = rest.split_once(':')?;
        let col: usize = col.parse().ok()?;
        (col >= 1 && !msg.trim().is_empty()).then_some(msg)
    })
}

#[test]
fn errors_name_file_line_and_column() {
    let site = Site::new();
    let path = site.config(
        "listen = \"127.0.0.1:8080\"\nworkers = \"many\"\n\n[timeouts]\nheader = \"10 parsecs\"\n",
    );
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let file = path.display().to_string();
    assert!(
        error_at(&stderr, &file, 2).is_some(),
        "no error for line 2 (workers)\n{}",
        show(&out)
    );
    assert!(
        error_at(&stderr, &file, 5).is_some(),
        "no error for line 5 (header)\n{}",
        show(&out)
    );
}

#[test]
fn more_errors_are_all_reported() {
    let site = Site::new();
    let path = site.config(
        "model = \"no-such-model\"\n[limits]\nmax_connections = -5\n[log]\naccess = 12\n[[host]]\nnames = [\"ok.example\"]\ndefault = \"yes\"\n",
    );
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let file = path.display().to_string();
    for line in [1, 3, 5, 8] {
        assert!(
            error_at(&stderr, &file, line).is_some(),
            "no error for line {line}\n{}",
            show(&out)
        );
    }
}

#[test]
fn toml_syntax_error_has_position() {
    let site = Site::new();
    let path = site.config("listen = \"127.0.0.1:8080\"\nworkers = = 2\n");
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        error_at(&stderr, &path.display().to_string(), 2).is_some(),
        "{}",
        show(&out)
    );
}

// A file saved in Latin-1: the first byte that is not UTF-8 is named at its line and column,
// by check and by serve alike.
#[test]
fn a_file_that_is_not_utf8_is_reported_at_its_first_bad_byte() {
    let site = Site::new();
    let path = site.write(
        "latin1.toml",
        b"root = \"root\"\n# caf\xe9 au lait\nworkers = 2\n",
    );
    let file = path.display().to_string();
    let expected = format!("{file}:2:6: not UTF-8 text");
    let out = check(&path);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&expected), "{}", show(&out));
    assert!(stderr.contains("byte 0xe9"), "{}", show(&out));
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path);
    let out = run(cmd);
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&expected),
        "{}",
        show(&out)
    );
}

#[test]
fn missing_file_fails() {
    let site = Site::new();
    let out = check(&site.base().join("nope.toml"));
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    assert!(!out.stderr.is_empty(), "{}", show(&out));
}

#[test]
fn serve_refuses_invalid_config() {
    let site = Site::new();
    let path = site.config("root = \"root\"\nworkers = \"many\"\n");
    let mut cmd = Command::new(BIN);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path);
    let out = run(cmd);
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        error_at(&stderr, &path.display().to_string(), 2).is_some(),
        "{}",
        show(&out)
    );
}

#[test]
fn model_sections_are_checked_key_by_key() {
    let site = Site::new();
    let path = site.config(
        "root = \"root\"\nmodel = \"prefork\"\n[prefork]\nstart = 2\nmin_spare = 4\nmax_spare = 3\nmax_children = 0\nspare = 1\n[threads]\nthreads = \"many\"\n[percore]\nbusy_poll = \"5 fortnights\"\n",
    );
    let out = check(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", show(&out));
    for expected in [
        ":7:16:",      // max_children = 0
        "`spare`",     // unknown key in [prefork]
        "min_spare",   // min_spare >= max_spare
        ":10:11:",     // threads = "many"
        "`busy_poll`", // a bad duration
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?}\n{}",
            show(&out)
        );
    }
}

#[test]
fn check_says_what_a_model_does_differently() {
    let site = Site::new();
    // Each configuration passes, with a note that says what the model does instead.
    let uring_route = "root = \"root\"\nmodel = \"uring\"\n[[backend]]\nname = \"app\"\naddresses = \"127.0.0.1:9\"\n[[route]]\nbackend = \"app\"\n";
    let cases = [
        (
            "root = \"root\"\nworkers = 4\nmodel = \"percore\"\n[percore]\nbusy_poll = \"50us\"\n"
                .to_owned(),
            "note: `workers` is ignored by model \"percore\"",
        ),
        (
            "root = \"root\"\nmodel = \"prefork\"\n[prefork]\nmax_children = 8\n[handover]\ncache_memory = \"8m\"\n"
                .to_owned(),
            "keeps its caches per child process (the other models keep one per process): each \
             of up to 8 gets 1/8 of [cache] max_memory (8388608 bytes) and of [handover] \
             cache_memory (1048576 bytes); a backend response cached by one is not seen",
        ),
        (
            format!("{uring_route}prefix = \"/app/\"\n"),
            "proxied bodies are copied through memory",
        ),
    ];
    for (text, note) in cases {
        let out = check(&site.config(&text));
        assert!(out.status.success(), "{}", show(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains(note),
            "{}",
            show(&out)
        );
    }
    // percore's workers keep private caches, which is said; the threads share one content
    // cache: nothing to say about it.
    let out = check(&site.config("root = \"root\"\nmodel = \"percore\"\n"));
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("keeps its content cache per core, so that nothing is shared"),
        "{}",
        show(&out)
    );
    let out =
        check(&site.config(
            "root = \"root\"\nmodel = \"threads\"\n[threads]\nthreads = 64\nmax_active = 2\n",
        ));
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("cache"),
        "{}",
        show(&out)
    );
    // More preforked children than inotify instances a user may have: said once, here.
    let limit: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
        .expect("inotify's instance limit")
        .trim()
        .parse()
        .unwrap();
    // (A machine allowing more instances than a pool may have children has nothing to say.)
    let children = limit + 1;
    let out = check(&site.config(&format!(
        "root = \"root\"\nmodel = \"prefork\"\n[prefork]\nmax_children = {children}\n"
    )));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        children > 65_536 // the most children a pool may have
            || stdout.contains(&format!("each of up to {children} children watches"))
            && stdout.contains(&format!("this system allows {limit} per user")),
        "{}",
        show(&out)
    );
    let out = check(&site.config(&format!(
        "root = \"root\"\nmodel = \"prefork\"\n[prefork]\nmax_children = {limit}\n"
    )));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("inotify"),
        "{}",
        show(&out)
    );
    // Bridging is the same on io_uring: nothing to note of the model (only what bridged
    // connections get, the same on every model).
    let out = check(&site.config(&format!(
        "{uring_route}prefix = \"/ws/\"\nmethod = \"bridge\"\n"
    )));
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let notes: Vec<&str> = stdout.lines().filter(|l| l.contains("note:")).collect();
    // And that HTTP/2 streams are proxied rather than bridged.
    assert!(
        notes.len() == 2
            && notes
                .iter()
                .any(|n| n.contains("note: bridged connections: "))
            && notes
                .iter()
                .any(|n| n.contains("streams of a bridging route are proxied")),
        "{}",
        show(&out)
    );
}

httptest!(
    a_second_server_on_a_taken_address_refuses_to_start,
    |model| {
        // SO_REUSEPORT would let a second server of the same user share the port and take half
        // of the connections from another document root: it must refuse to start instead, with
        // one message that names the address.
        let site = Site::new();
        site.file("a.txt", "first");
        let srv = site.serve(model);
        let other = Site::new();
        other.file("a.txt", "second");
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            .arg(other.root())
            .arg("--listen")
            .arg(srv.addr().to_string())
            .arg("--model")
            .arg(model)
            .arg("--run-as-root");
        let out = run(cmd);
        assert!(!out.status.success(), "{}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let addr = srv.addr().to_string();
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains(&addr)).collect();
        assert_eq!(
            lines.len(),
            1,
            "said once, naming the address:\n{}",
            show(&out)
        );
        assert!(
            lines[0].contains("another process is listening there"),
            "{}",
            show(&out)
        );
        for _ in 0..10 {
            srv.get("/a.txt").assert_ok(200, "first");
        }
    }
);

#[test]
fn workers_beyond_the_limit_are_refused_on_the_command_line_too() {
    let site = Site::new();
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg(site.root())
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--workers")
        .arg("5000");
    let out = run(cmd);
    assert!(!out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("5000 is more than 4096"), "{}", show(&out));
}

#[test]
fn a_reader_that_went_away_is_not_a_crash() {
    // `fastpath check FILE | head -1`, at its worst: nobody reads the report at all.
    let site = Site::new();
    let path = site.config("listen = \"127.0.0.1:8080\"\nmodel = \"uring\"\n");
    let mut child = Command::new(BIN)
        .arg("check")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}\n{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `model = "auto"` (the default) is what a start-up probe measured cheapest here, and
/// `fastpath check` says which, with the figures behind it; a named model is not probed.
#[test]
fn check_says_what_auto_runs_here_and_why() {
    let site = Site::new();
    let out = check(&site.config("root = \"root\"\n"));
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    let note = said
        .lines()
        .find(|l| l.contains("note: model \"auto\" runs"))
        .unwrap_or_else(|| panic!("{}", show(&out)));
    assert!(
        note.contains("runs \"epoll\" here") || note.contains("runs \"uring\" here"),
        "{note}"
    );
    // The figures: CPU per request of each loop measured, for both responses.
    assert!(
        note.contains("per request for 1 KiB from memory and 64 KiB from a file: epoll "),
        "{note}"
    );
    let measured_uring = note.contains("; uring ");
    let uring_missing = note.contains("io_uring unavailable");
    assert!(measured_uring != uring_missing, "{note}");
    let out = check(&site.config("root = \"root\"\nmodel = \"epoll\"\n"));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("model \"auto\""),
        "{}",
        show(&out)
    );
}
