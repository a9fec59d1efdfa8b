//! The login and file transfer server (Figure 3.4, examples/login.rs) on every model: states
//! seen and cleared, `$fileReply` (sendfile), `$fileReceive` (input to a file, unmatched),
//! and input that no qualifying rule can match.

mod common;

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::{read_line_exact, read_to_close, read_until, send, Server, MODELS};

fn serve(dir: &std::path::Path, model: &str) -> Server {
    Server::start("login", dir, &["--listen", "127.0.0.1:0", "--model", model])
}

fn log_in(server: &Server) -> TcpStream {
    let mut c = server.connect();
    assert_eq!(read_until(&mut c, "\n"), "Username:\n");
    send(&mut c, b"alice\r\n");
    assert_eq!(read_until(&mut c, "\n"), "Password:\n");
    send(&mut c, b"secret\n");
    assert_eq!(read_until(&mut c, "\n"), "Welcome alice\n");
    c
}

const END_REPLY: &str = "Incorrect input - connection terminating!\n";

#[test]
fn put_then_get() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let server = serve(dir.path(), model);
        let mut c = log_in(&server);
        // The PUT line, then 11 bytes that are stored, not matched (a line end among them),
        // then the next command in the same write.
        send(&mut c, b"PUT notes.txt 11\r\nhello\nworldGET notes.txt\n");
        let got = read_until(&mut c, "hello\nworld");
        assert_eq!(got, "200 receiving 11\n200 11\nhello\nworld", "{model}");
        assert_eq!(
            std::fs::read(dir.path().join("notes.txt")).unwrap(),
            b"hello\nworld"
        );
        assert!(!dir.path().join("notes.txt.part").exists());
        // A file of 3 MiB, sent with sendfile, bigger than the output buffer.
        let big: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("big.bin"), &big).unwrap();
        send(&mut c, b"GET big.bin\n");
        let head = read_line_exact(&mut c);
        assert_eq!(head, format!("200 {}\n", big.len()), "{model}");
        let mut body = vec![0u8; big.len()];
        std::io::Read::read_exact(&mut c, &mut body).unwrap();
        assert!(body == big, "{model}: the file arrived changed");
        // A missing file: the action's own answer.
        send(&mut c, b"GET absent\n");
        assert_eq!(
            read_until(&mut c, "\n"),
            "404 absent not found\n",
            "{model}"
        );
        // Anything else in VALID clears every state: the next input matches no rule.
        send(&mut c, b"HELP\n");
        send(&mut c, b"x");
        assert_eq!(read_to_close(&mut c), END_REPLY, "{model}");
    }
}

#[test]
fn input_matching_no_rule_ends_the_connection_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for model in MODELS {
        let server = serve(dir.path(), model);
        let mut c = server.connect();
        read_until(&mut c, "\n");
        send(&mut c, b"bob\n");
        read_until(&mut c, "\n");
        send(&mut c, b"wrong\n");
        assert_eq!(read_until(&mut c, "\n"), "Denied\n", "{model}");
        // No rule qualifies now: one byte, without a line end, is enough to know.
        send(&mut c, b"G");
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        assert_eq!(read_to_close(&mut c), END_REPLY, "{model}");
        let log = server.wait_log("input matches no rule");
        assert!(log.contains("input matches no rule"), "{model}: {log}");
    }
}

#[test]
fn a_receive_cut_short_leaves_no_file() {
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let server = serve(dir.path(), model);
        let mut c = log_in(&server);
        send(&mut c, b"PUT cut.bin 100\nonly ten b");
        assert_eq!(read_until(&mut c, "\n"), "200 receiving 100\n", "{model}");
        c.flush().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        c.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_to_close(&mut c), END_REPLY, "{model}");
        let log = server.wait_log("peer closed after");
        assert!(
            log.contains("peer closed after 10 of 100 bytes"),
            "{model}: {log}"
        );
        assert!(!dir.path().join("cut.bin").exists(), "{model}");
        assert!(!dir.path().join("cut.bin.part").exists(), "{model}");
    }
}

#[test]
fn end_runs_when_the_peer_stops_reading() {
    // sendTimeout from config.nest: a client that takes none of a large $fileReply is closed,
    // and END still runs (its reply goes nowhere: the connection is gone).
    for model in MODELS {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.nest");
        std::fs::write(&config, "sendTimeout 500ms\nlogLevel debug\n").unwrap();
        std::fs::write(dir.path().join("huge.bin"), vec![7u8; 32 << 20]).unwrap();
        let server = Server::start(
            "login",
            dir.path(),
            &[
                "--listen",
                "127.0.0.1:0",
                "--model",
                model,
                "--config",
                config.to_str().unwrap(),
            ],
        );
        let mut c = log_in(&server);
        send(&mut c, b"GET huge.bin\n");
        let log = server.wait_log("send timeout");
        assert!(log.contains("closing: send timeout"), "{model}: {log}");
        drop(c);
    }
}
