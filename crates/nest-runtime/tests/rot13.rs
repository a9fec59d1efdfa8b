//! The rot13 server (Figure 3.3, examples/rot13.rs) on every model: START's greeting, the
//! rules, the longest match with ties to the first rule, input split across writes, END on
//! every kind of close, and config.nest.

mod common;

use std::io::Write;
use std::net::Shutdown;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{example, read_to_close, read_until, send, skip, Server, MODELS};

fn serve(dir: &std::path::Path, model: &str, extra: &[&str]) -> Server {
    let mut args = vec!["--listen", "127.0.0.1:0", "--model", model];
    args.extend_from_slice(extra);
    Server::start("rot13", dir, &args)
}

#[test]
fn greeting_lines_split_input_and_quit() {
    let dir = tempfile::tempdir().unwrap();
    for model in MODELS {
        let server = serve(dir.path(), model, &[]);
        let mut c = server.connect();
        // START replies before the client has sent anything.
        assert_eq!(read_until(&mut c, "\n"), "rot13 server ready\n", "{model}");
        send(&mut c, b"Hello, World\n");
        assert_eq!(read_until(&mut c, "\n"), "Uryyb, Jbeyq\n", "{model}");
        // One line in three writes, the line end kept as sent ($2).
        for part in [&b"ab"[..], b"c xy", b"z\r\n"] {
            send(&mut c, part);
            c.flush().unwrap();
            std::thread::sleep(Duration::from_millis(30));
        }
        assert_eq!(read_until(&mut c, "\n"), "nop klm\r\n", "{model}");
        // Two lines in one write: two matches, in order.
        send(&mut c, b"one\ntwo\n");
        assert_eq!(read_until(&mut c, "gjb\n"), "bar\ngjb\n", "{model}");
        // "QUIT\n" matches both rules over the same length: the first written wins, and
        // its $close runs END before the close.
        send(&mut c, b"QUIT\n");
        assert_eq!(read_to_close(&mut c), "bye\nclosing\n", "{model}");
        // A longer line that starts like QUIT is the longer match of the other rule.
        let mut c = server.connect();
        read_until(&mut c, "\n");
        send(&mut c, b"QUITS\n");
        assert_eq!(read_until(&mut c, "\n"), "DHVGF\n", "{model}");
    }
}

#[test]
fn end_runs_when_the_peer_closes() {
    let dir = tempfile::tempdir().unwrap();
    for model in MODELS {
        let server = serve(dir.path(), model, &[]);
        let mut c = server.connect();
        read_until(&mut c, "\n");
        send(&mut c, b"abc\npartial");
        c.shutdown(Shutdown::Write).unwrap();
        // The matched line, then END's reply: sent before the close, the peer still reads.
        assert_eq!(read_to_close(&mut c), "nop\nclosing\n", "{model}");
        let log = server.wait_log("peer closed with unmatched input");
        assert!(
            log.contains("peer closed with unmatched input"),
            "{model}: {log}"
        );
    }
}

#[test]
fn input_buffer_full_and_idle_timeout_from_config_nest() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.nest");
    std::fs::write(
        &config,
        "# the runtime options of rot13\ninputBuffer 16\n\nidleTimeout 400ms\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    for model in MODELS {
        let server = serve(dir.path(), model, &["--config", config]);
        // 15 bytes without a line end wait; the 16th fills the buffer: END, close.
        let mut c = server.connect();
        read_until(&mut c, "\n");
        send(&mut c, b"0123456789abcde");
        std::thread::sleep(Duration::from_millis(100));
        send(&mut c, b"f");
        assert_eq!(read_to_close(&mut c), "closing\n", "{model}");
        let log = server.wait_log("input buffer full");
        assert!(
            log.contains("input buffer full (16 bytes unmatched)"),
            "{model}: {log}"
        );
        // A line of 16 bytes, line end included, still fits.
        let mut c = server.connect();
        read_until(&mut c, "\n");
        send(&mut c, b"0123456789abcd\r\n");
        assert_eq!(read_until(&mut c, "\n"), "0123456789nopq\r\n", "{model}");
        // Silent for the idle timeout: END, close.
        let started = Instant::now();
        assert_eq!(read_to_close(&mut c), "closing\n", "{model}");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
            "{model}: closed after {waited:?}"
        );
        let log = server.wait_log("idle timeout");
        assert!(log.contains("idle timeout"), "{model}: {log}");
    }
}

#[test]
fn config_nest_sets_the_port_beside_the_binary_or_given() {
    let dir = tempfile::tempdir().unwrap();
    let port = fastpath_testkit::free_port();
    let config = dir.path().join("config.nest");
    std::fs::write(
        &config,
        format!("serverPort {port}\nserverName nest.test\n"),
    )
    .unwrap();
    // Given with --config and with NEST_CONFIG.
    let server = Server::start("rot13", dir.path(), &["--config", config.to_str().unwrap()]);
    assert_eq!(server.addr.port(), port);
    let mut c = server.connect();
    assert_eq!(read_until(&mut c, "\n"), "rot13 server ready\n");
    drop(server);
    // A missing given file is an error; a missing default one is not.
    let out = Command::new(example("rot13"))
        .args(["--config", dir.path().join("absent.nest").to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("absent.nest: No such file"), "{err}");
}

#[test]
fn config_nest_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &str); 5] = [
        (
            "# ok\nserverPort 9\n\ninputBuffer lots\n",
            ":4: inputBuffer: `lots` is not a size",
        ),
        (
            "threadServer 4\n",
            ":1: threadServer can only be set in the specification",
        ),
        ("inetd\n", ":1: inetd can only be set in the specification"),
        ("serverPort 8000\nbogus 1\n", ":2: unknown option `bogus`"),
        (
            "%option serverPort 1\n",
            ":1: config.nest lines are `NAME VALUE`, without %option",
        ),
    ];
    for (text, says) in cases {
        let config = dir.path().join("config.nest");
        std::fs::write(&config, text).unwrap();
        let out = Command::new(example("rot13"))
            .args(["--listen", "127.0.0.1:0"])
            .env("NEST_CONFIG", &config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{text:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        let want = format!("rot13: {}{says}", config.display());
        assert!(err.contains(&want), "{text:?}: {err}");
    }
}

#[test]
fn python_socket_client() {
    let dir = tempfile::tempdir().unwrap();
    if Command::new("python3").arg("--version").output().is_err() {
        return skip("nest rot13", "python3 is not installed");
    }
    let script = r#"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
f = s.makefile("rwb")
assert f.readline() == b"rot13 server ready\n"
for line in [b"Why did the chicken cross the road?", b"Gb trg gb gur bgure fvqr!"]:
    f.write(line + b"\r\n"); f.flush()
    print(f.readline().decode().rstrip("\r\n"))
f.write(b"QUIT\n"); f.flush()
print(f.read().decode(), end="")
"#;
    for model in MODELS {
        let server = serve(dir.path(), model, &[]);
        let out = Command::new("python3")
            .args(["-c", script, &server.addr.port().to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{model}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "Jul qvq gur puvpxra pebff gur ebnq?\nTo get to the other side!\nbye\nclosing\n",
            "{model}"
        );
    }
}

#[test]
fn graceful_stop_runs_end() {
    let dir = tempfile::tempdir().unwrap();
    for model in MODELS {
        let server = serve(dir.path(), model, &[]);
        let mut c = server.connect();
        read_until(&mut c, "\n");
        send(&mut c, b"a\n");
        assert_eq!(read_until(&mut c, "\n"), "n\n");
        drop(server);
        assert_eq!(read_to_close(&mut c), "closing\n", "{model}");
    }
}

#[test]
fn a_client_that_does_not_read_is_not_read_either() {
    // outputBuffer 1KiB: past it the server stops reading this client until its output
    // drains, then matches the rest of what it holds; nothing is lost or reordered.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.nest");
    std::fs::write(&config, "outputBuffer 1KiB\n").unwrap();
    let config = config.to_str().unwrap();
    let lines = 20_000;
    let mut input = Vec::new();
    let mut want = String::from("rot13 server ready\n");
    for i in 0..lines {
        input.extend_from_slice(format!("line {i:06} abcdefghijklmnopqrstuvwxyz\n").as_bytes());
        want.push_str(&format!("yvar {i:06} nopqrstuvwxyzabcdefghijklm\n"));
    }
    want.push_str("bye\nclosing\n");
    input.extend_from_slice(b"QUIT\n");
    for model in MODELS {
        let server = serve(dir.path(), model, &["--config", config]);
        let mut c = server.connect();
        let mut writer = c.try_clone().unwrap();
        let input = input.clone();
        let sending = std::thread::spawn(move || writer.write_all(&input).unwrap());
        // Not reading for a while: the server's output and then its input fill up.
        std::thread::sleep(Duration::from_millis(300));
        let got = read_to_close(&mut c);
        sending.join().unwrap();
        assert!(
            got == want,
            "{model}: {} bytes back, {} expected",
            got.len(),
            want.len()
        );
    }
}
