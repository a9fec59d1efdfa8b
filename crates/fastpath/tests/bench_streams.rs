//! `fastpath bench echo`, `thrift` and `thrift-sink` as the binary runs them: exit status,
//! JSON on stdout, and the standalone sinks' summary on SIGTERM. (What they measure and
//! detect is tested in crates/bench/tests/streams.rs.)

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::{free_port, BIN};

fn json_field(json: &str, name: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {json}"))
}

#[test]
fn bench_echo_exit_status() {
    // A plain echo server on a thread.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 || s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let out = Command::new(BIN)
        .args(["bench", "echo", &addr, "--plain", "--size", "32", "-c", "2"])
        .args(["-d", "300ms", "-q", "--json", "-"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(json_field(&stdout, "messages") > 0);
    // The same server with the size header: its 4 bytes come back first, so echoes mismatch.
    let out = Command::new(BIN)
        .args([
            "bench", "echo", &addr, "--size", "32", "-c", "1", "-d", "300ms", "-q",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("mismatched echoes"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("mismatch 0"));
}

#[test]
fn bench_thrift_sink_counts_until_sigterm() {
    let sink = format!("127.0.0.1:{}", free_port());
    let mut sinks = Command::new(BIN)
        .args(["bench", "thrift-sink", "--listen", &sink, "--json", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(sinks.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("listening on"), "{line}");
    // No forwarder: the clients connect straight to the standalone sink, which is the right
    // destination when there is one. The generator's own sink gets nothing, so it reports
    // every message lost and fails.
    let own = format!("127.0.0.1:{}", free_port());
    let out = Command::new(BIN)
        .args([
            "bench",
            "thrift",
            &sink,
            "--sinks",
            &own,
            "--payload",
            "64",
            "-c",
            "2",
        ])
        .args(["-d", "300ms", "--drain", "200ms", "-q", "--json", "-"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{report}");
    let sent = json_field(&report, "sent");
    assert!(sent > 0);
    assert_eq!(json_field(&report, "lost"), sent);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not every message arrived"));
    std::thread::sleep(Duration::from_millis(300));
    unsafe {
        libc::kill(sinks.id() as i32, libc::SIGTERM);
    }
    let out = sinks.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", out.status);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(json_field(&summary, "delivered"), sent, "{summary}");
    for bad in ["duplicated", "reordered", "corrupt", "misrouted"] {
        assert_eq!(json_field(&summary, bad), 0, "{summary}");
    }
}
