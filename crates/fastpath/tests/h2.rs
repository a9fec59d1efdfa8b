//! HTTP/2: the real binary with real clients (curl `--http2` and `--http2-prior-knowledge`,
//! nghttp and h2load from nghttp2, Python's h2 library as a raw peer) and the h2spec
//! conformance suite, on every model, over TLS and over h2c. The tests of what a request
//! gets (ranges, conditionals, variants, virtual hosts, errors) run over HTTP/2 as well,
//! through `httptest!(name, h2, ...)` in their own files.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::handover::{by_path, chunked, echo, Backend};
use crate::tls::tls_site;
use crate::util::*;

/// A tool of nghttp2-client, or a skip that says it is missing.
fn nghttp2_tool(tool: &str) -> Option<PathBuf> {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        skip(
            tool,
            Missing::Installable,
            &format!("{tool} (nghttp2-client) is not installed"),
        );
        return None;
    }
    Some(PathBuf::from(tool))
}

/// h2spec, from `go install` (`~/go/bin`) or the path; a skip that says so if neither.
fn h2spec() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let candidates = home
        .map(|h| h.join("go/bin/h2spec"))
        .into_iter()
        .chain(std::iter::once(PathBuf::from("h2spec")));
    for candidate in candidates {
        let runs = Command::new(&candidate)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if runs {
            return Some(candidate);
        }
    }
    skip(
        "h2spec",
        Missing::Installable,
        "h2spec is not installed (see .ci/run)",
    );
    None
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"))
}

/// curl's `-D -` output of one exchange: the status line and the body after the head.
fn status_and_body(out: &Output) -> (String, Vec<u8>) {
    assert!(
        out.status.success(),
        "curl failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let end = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&out.stdout[..end]);
    let status = head.lines().next().unwrap().trim().to_owned();
    (status, out.stdout[end + 4..].to_vec())
}

fn big_file() -> Vec<u8> {
    (0..1_048_583u32).map(|i| (i * 31 % 251) as u8).collect()
}

httptest!(prior_knowledge_serves_files_small_and_large, |model| {
    let site = Site::new();
    site.file("hello.txt", "hello over h2c");
    site.file("big.bin", big_file());
    let srv = site.serve(model);
    let Some(out) = curl(&[
        "-sS",
        "--http2-prior-knowledge",
        "-D",
        "-",
        &srv.url("/hello.txt"),
    ]) else {
        return;
    };
    let (status, body) = status_and_body(&out);
    assert_eq!(status, "HTTP/2 200");
    assert_eq!(body, b"hello over h2c");
    // The access log names the protocol as nginx does.
    let logged = srv.wait_stdout_line(std::time::Duration::from_secs(3), |l| {
        l.contains("\"GET /hello.txt HTTP/2.0\" 200 14 ")
    });
    assert!(
        logged.is_some(),
        "no HTTP/2.0 line in the access log:\n{}",
        srv.stdout()
    );
    let out = curl(&[
        "-sS",
        "--http2-prior-knowledge",
        "-D",
        "-",
        &srv.url("/big.bin"),
    ])
    .unwrap();
    let (status, body) = status_and_body(&out);
    assert_eq!(status, "HTTP/2 200");
    assert!(
        body == big_file(),
        "the 1 MiB file came back altered ({} bytes)",
        body.len()
    );
    // The same listener still speaks HTTP/1.1 to a client that does not open with the preface.
    srv.get("/hello.txt").assert_ok(200, "hello over h2c");
});

httptest!(alpn_chooses_h2_over_tls, |model| {
    let tls = tls_site("");
    let srv = tls.serve(model);
    let port = srv.addr().port();
    let Some(out) = curl_https(
        &tls.ca,
        "a.test",
        port,
        "/hello.txt",
        &["--http2", "-D", "-"],
    ) else {
        return;
    };
    let (status, body) = status_and_body(&out);
    assert_eq!(status, "HTTP/2 200");
    assert_eq!(body, b"hello over tls");
    let out = curl_https(&tls.ca, "a.test", port, "/big.bin", &["--http2", "-D", "-"]).unwrap();
    let (status, body) = status_and_body(&out);
    assert_eq!(status, "HTTP/2 200");
    assert_eq!(body.len(), 1024 * 1024 + 7);
    // A client that offers only HTTP/1.1 gets it.
    let out = curl_https(
        &tls.ca,
        "a.test",
        port,
        "/hello.txt",
        &["--http1.1", "-D", "-"],
    )
    .unwrap();
    assert_eq!(status_and_body(&out).0, "HTTP/1.1 200 OK");
    // The other host, by SNI and :authority: its own root.
    let out = curl_https(
        &tls.ca,
        "b.test",
        port,
        "/hello.txt",
        &["--http2", "-D", "-"],
    )
    .unwrap();
    assert_eq!(
        status_and_body(&out),
        ("HTTP/2 200".to_owned(), b"hello from b".to_vec())
    );
});

httptest!(a_hundred_streams_share_one_connection, |model| {
    let site = Site::new();
    site.file("one.txt", "x".repeat(1024));
    site.file("two.txt", "y".repeat(20_000));
    let srv = site.serve(model);
    let Some(h2load) = nghttp2_tool("h2load") else {
        return;
    };
    let out = run(Command::new(&h2load).args([
        "-n",
        "2000",
        "-c",
        "2",
        "-m",
        "100",
        &srv.url("/one.txt"),
        &srv.url("/two.txt"),
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("2000 succeeded, 0 failed, 0 errored"),
        "h2load:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Some(nghttp) = nghttp2_tool("nghttp") else {
        return;
    };
    // nghttp as a second client: each of a hundred requests on one connection, checked.
    // Each URL once: nghttp asks for a repeated one only once.
    let urls: Vec<String> = (0..100)
        .map(|i| {
            srv.url(&format!(
                "/{}.txt?{i}",
                if i % 2 == 0 { "one" } else { "two" }
            ))
        })
        .collect();
    let out = run(Command::new(&nghttp).arg("-ns").args(&urls));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nghttp:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches(" 200 ").count(), 100, "nghttp:\n{text}");
});

/// Runs all of h2spec against `port`; its summary line and the failures it printed.
fn h2spec_against(port: u16, tls: bool) -> Option<(String, String)> {
    let h2spec = h2spec()?;
    let port = port.to_string();
    let mut args = vec!["-h", "127.0.0.1", "-p", &port, "-o", "5", "--strict"];
    if tls {
        args.extend(["-t", "-k"]);
    }
    let out = run(Command::new(&h2spec).args(&args));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = text
        .lines()
        .rev()
        .find(|l| l.contains(" tests, "))
        .unwrap_or("no summary")
        .to_owned();
    let failures = text
        .split("Failures:")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Some((summary, failures))
}

/// Asserts that h2spec's summary counts no failure and no skip.
#[track_caller]
fn assert_h2spec_whole((summary, failures): (String, String)) {
    let count = |what: &str| -> Option<u64> {
        summary
            .split(", ")
            .find(|part| part.ends_with(what))
            .and_then(|part| part.split(' ').next()?.parse().ok())
    };
    assert!(
        count("failed") == Some(0) && count("skipped") == Some(0) && count("passed") > Some(140),
        "h2spec: {summary}\n{failures}"
    );
}

httptest!(h2spec_passes_whole_over_h2c, |model| {
    // On a listener that speaks HTTP/2 alone: one that takes HTTP/1 too must answer
    // h2spec's "invalid connection preface" as the HTTP/1 request it may be.
    let site = Site::new();
    site.file("index.html", "<p>h2spec</p>");
    let port = free_port();
    let srv = site
        .server(model)
        .config(&format!(
            "root = \"root\"\n[[listen]]\naddress = \"127.0.0.1:{port}\"\nhttp2_only = true\n"
        ))
        .configured_listen()
        .start();
    if let Some(result) = h2spec_against(srv.addr().port(), false) {
        assert_h2spec_whole(result);
    }
});

httptest!(h2spec_passes_on_a_listener_of_both_protocols, |model| {
    let site = Site::new();
    site.file("index.html", "<p>h2spec</p>");
    let srv = site.serve(model);
    let Some((summary, failures)) = h2spec_against(srv.addr().port(), false) else {
        return;
    };
    // All but the one case that is an HTTP/1 request to a listener that takes both.
    assert!(
        summary.ends_with("1 failed") && failures.contains("Sends invalid connection preface"),
        "h2spec: {summary}\n{failures}"
    );
});

httptest!(h2spec_passes_whole_over_tls, |model| {
    let tls = tls_site("");
    tls.site.file("index.html", "<p>h2spec</p>");
    let srv = tls.serve(model);
    if let Some(result) = h2spec_against(srv.addr().port(), true) {
        assert_h2spec_whole(result);
    }
});

#[test]
fn http2_can_be_turned_off() {
    let site = Site::new();
    site.file("hello.txt", "hello");
    let srv = site.serve_config("epoll", "root = \"root\"\n[http2]\nenabled = false\n");
    // The preface is then an HTTP/1 request of a version HTTP/1 does not speak.
    let r = srv.request("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    assert_eq!(r.status, 505, "{r}");
}

/// Runs `h2_peer.py` against `srv`; its JSON report, or `None` (skipped) without Python's h2.
pub(crate) fn peer(srv: &Server, tls: bool, args: &[&str]) -> Option<serde_json::Value> {
    if !python_has("h2") {
        skip(
            "h2 peer",
            Missing::Installable,
            "Python's h2 library is not installed (pip install h2)",
        );
        return None;
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/h2_peer.py");
    let port = srv.addr().port().to_string();
    let mut cmd = Command::new("python3");
    cmd.arg(&script).args(["127.0.0.1", &port]);
    if tls {
        cmd.arg("--tls");
    }
    let out = run(cmd.args(args));
    assert!(
        out.status.success(),
        "h2_peer.py {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "h2_peer.py {args:?} printed {:?}: {e}",
            String::from_utf8_lossy(&out.stdout)
        )
    }))
}

/// The server still answers a new client: what an attack must never take away.
#[track_caller]
fn still_serves(srv: &Server) {
    srv.get("/hello.txt").assert_ok(200, "hello");
    let out = curl(&["-sS", "--http2-prior-knowledge", &srv.url("/hello.txt")]).unwrap();
    assert_eq!(
        out.stdout,
        b"hello",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn attacked_site() -> Site {
    let site = Site::new();
    site.file("hello.txt", "hello");
    site.file("big.bin", big_file());
    site
}

/// The server's resident memory, in KiB, once it has served a request of each protocol (so
/// that what its workers allocate once is counted before).
fn rss_kib(srv: &Server) -> u64 {
    still_serves(srv);
    let status = std::fs::read_to_string(format!("/proc/{}/status", srv.pid())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// How much an attack may make the server's memory grow: a connection's buffers and
/// tables, far below what the attack sends.
const ATTACK_MEMORY_KIB: u64 = 8 * 1024;

/// Asserts that the server's memory grew by less than [`ATTACK_MEMORY_KIB`] since `before`.
#[track_caller]
fn assert_memory_held(srv: &Server, before: u64, attack: &str) {
    let now = rss_kib(srv);
    assert!(
        now < before + ATTACK_MEMORY_KIB,
        "{attack}: memory grew from {before} to {now} KiB"
    );
}

httptest!(rapid_reset_is_calmed, |model| {
    // CVE-2023-44487: each stream is opened and cancelled at once, which costs a server
    // the work of starting a request and the client almost nothing.
    let site = attacked_site();
    let srv = site.serve(model);
    let Some(report) = peer(&srv, false, &["rapid-reset", "20000"]) else {
        return;
    };
    assert_eq!(report["goaway"], "ENHANCE_YOUR_CALM", "{report}");
    assert_eq!(report["closed"], true, "{report}");
    still_serves(&srv);
});

httptest!(made_you_reset_is_calmed, |model| {
    // CVE-2025-8671: frames that make the server reset streams itself count as resets too.
    let site = attacked_site();
    let srv = site.serve(model);
    let Some(report) = peer(&srv, false, &["made-you-reset", "20000"]) else {
        return;
    };
    assert_eq!(report["goaway"], "ENHANCE_YOUR_CALM", "{report}");
    assert!(report["resets"].as_u64().unwrap() <= 1000, "{report}");
    still_serves(&srv);
});

httptest!(continuation_flood_is_cut_short, |model| {
    // CVE-2024-27316: a header block that never ends, half of it empty CONTINUATIONs.
    let site = attacked_site();
    let srv = site.serve(model);
    let before = rss_kib(&srv);
    let Some(report) = peer(&srv, false, &["continuation-flood", "100000"]) else {
        return;
    };
    let code = report["goaway"].as_str().unwrap_or("none");
    assert!(
        ["ENHANCE_YOUR_CALM", "PROTOCOL_ERROR", "FRAME_SIZE_ERROR"].contains(&code),
        "{report}"
    );
    assert_memory_held(&srv, before, "");
    still_serves(&srv);
});

httptest!(hpack_bomb_is_refused, |model| {
    // One 4 KB field in the dynamic table, referenced 20,000 times: 80 MB decoded from
    // 20 KB on the wire. The header list budget stops it: 431, or the connection ends.
    let site = attacked_site();
    let srv = site.serve(model);
    let before = rss_kib(&srv);
    let Some(report) = peer(&srv, false, &["hpack-bomb", "20000"]) else {
        return;
    };
    let refused = report["status"] == 431
        || ["ENHANCE_YOUR_CALM", "COMPRESSION_ERROR", "PROTOCOL_ERROR"]
            .contains(&report["goaway"].as_str().unwrap_or("none"));
    assert!(refused, "{report}");
    assert_memory_held(&srv, before, "");
    still_serves(&srv);
});

httptest!(control_frame_floods_are_bounded, |model| {
    // CVE-2019-9512 and 9515: PINGs and SETTINGS whose acknowledgements the client does not
    // read. The server stops reading while its replies wait, then ends the connection.
    let site = attacked_site();
    let srv = site.serve(model);
    let before = rss_kib(&srv);
    for flood in ["ping-flood", "settings-flood"] {
        let Some(report) = peer(&srv, false, &[flood, "200000"]) else {
            return;
        };
        assert_eq!(report["goaway"], "ENHANCE_YOUR_CALM", "{flood}: {report}");
        assert_memory_held(&srv, before, flood);
    }
    still_serves(&srv);
});

httptest!(empty_frames_are_calmed, |model| {
    // CVE-2019-9518: DATA frames with nothing in them, each a frame to handle.
    let site = attacked_site();
    let srv = site.serve(model);
    let Some(report) = peer(&srv, false, &["empty-frames", "200000"]) else {
        return;
    };
    assert_eq!(report["goaway"], "ENHANCE_YOUR_CALM", "{report}");
    still_serves(&srv);
});

httptest!(a_shut_window_times_out, |model| {
    // CVE-2019-9517: a client that asks for a large file and never opens its window holds
    // the response: the connection ends after the send timeout.
    let site = attacked_site();
    let srv = site.serve_config(model, "root = \"root\"\n[timeouts]\nsend = \"2s\"\n");
    let Some(report) = peer(&srv, false, &["zero-window", "/big.bin"]) else {
        return;
    };
    assert_eq!(report["closed"], true, "{report}");
    let held = report["held_seconds"].as_f64().unwrap();
    assert!((1.5..10.0).contains(&held), "held {held} s: {report}");
    assert_eq!(report["data_bytes"], 0, "{report}");
    still_serves(&srv);
});

httptest!(streams_past_the_limit_are_refused, |model| {
    let site = attacked_site();
    let srv = site.serve_config(
        model,
        "root = \"root\"\n[http2]\nmax_concurrent_streams = 10\n",
    );
    let Some(report) = peer(&srv, false, &["too-many-streams", "15", "/hello.txt"]) else {
        return;
    };
    assert_eq!(report["refused"], 5, "{report}");
    still_serves(&srv);
});

httptest!(a_hundred_proxied_streams_carry_their_bodies, |model| {
    // Each stream a POST of its own 20,000 bytes to a backend that echoes them: a hundred
    // exchanges in flight on one client connection, each on a backend connection of its own.
    let backend = Backend::start(echo);
    let site = crate::handover::site();
    let srv = site.serve_config(
        model,
        &crate::handover::config(&backend, "prefix = \"/app/\"", ""),
    );
    let Some(report) = peer(&srv, false, &["streams", "100", "/app/echo", "20000"]) else {
        return;
    };
    let echo = &report["paths"]["/app/echo"];
    assert_eq!(report["completed"], 100, "{report}");
    assert_eq!(echo["statuses"]["200"], 100, "{report}");
    assert_eq!(echo["echoed"], 100, "{report}");
});

httptest!(a_chunked_backend_body_arrives_unframed, |model| {
    let backend = Backend::start(chunked);
    let site = crate::handover::site();
    let srv = site.serve_config(
        model,
        &crate::handover::config(&backend, "prefix = \"/app/\"", ""),
    );
    let Some(out) = curl(&["-sS", "--http2-prior-knowledge", &srv.url("/app/x")]) else {
        return;
    };
    assert_eq!(
        out.stdout,
        b"hello world",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
});

httptest!(
    a_backend_that_stops_mid_body_resets_its_stream_alone,
    |model| {
        // `/app/cut` promises 1,000 bytes and closes after 5: that stream is reset, the others
        // on the connection (proxied and static) complete.
        let backend = Backend::start(by_path);
        let site = crate::handover::site();
        let srv = site.serve_config(
            model,
            &crate::handover::config(&backend, "prefix = \"/app/\"", ""),
        );
        let paths = "/app/cut,/app/ok,/page.txt";
        let Some(report) = peer(&srv, false, &["streams", "30", paths]) else {
            return;
        };
        assert_eq!(report["completed"], 30, "{report}");
        let paths = &report["paths"];
        assert_eq!(
            paths["/app/cut"]["resets"]["INTERNAL_ERROR"], 10,
            "{report}"
        );
        assert_eq!(paths["/app/ok"]["statuses"]["200"], 10, "{report}");
        assert_eq!(
            paths["/app/ok"]["lengths"],
            serde_json::json!([3]),
            "{report}"
        );
        assert_eq!(
            paths["/page.txt"]["lengths"],
            serde_json::json!([12]),
            "{report}"
        );
    }
);

/// The old server announces GOAWAY on each connection, takes the streams already on their
/// way, names the last once the client has seen the announcement, finishes them and closes;
/// h2load opens new connections to the new server. No request the server received may fail.
/// h2load fails the requests it meant to send on a connection after it saw the GOAWAY,
/// rather than send them on its next one (a browser sends them there); those it never sent
/// (logged with no start time) are counted apart: at most a connection's in-flight share.
fn reload_under_load_fails_no_stream(model: Model) {
    let site = attacked_site();
    let srv = site.serve(model);
    let Some(h2load) = nghttp2_tool("h2load") else {
        return;
    };
    let url = srv.url("/hello.txt");
    let log = site.base().join("h2load.log");
    let log_arg = format!("--log-file={}", log.display());
    let load = std::thread::spawn(move || {
        run(Command::new(h2load).args(["-D", "3", "-c", "4", "-m", "20", &log_arg, &url]))
    });
    std::thread::sleep(std::time::Duration::from_millis(1200));
    srv.signal(libc::SIGHUP);
    let out = load.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(" succeeded"), "h2load:\n{text}");
    let requests = std::fs::read_to_string(&log).unwrap();
    let (mut sent_failed, mut unsent, mut succeeded) = (0, 0, 0);
    for line in requests.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        match (fields[0], fields[1]) {
            (_, "200") => succeeded += 1,
            ("0", _) => unsent += 1,
            _ => sent_failed += 1,
        }
    }
    assert_eq!(sent_failed, 0, "requests sent and failed; h2load:\n{text}");
    assert!(
        unsent <= 4 * 20,
        "{unsent} requests never sent; h2load:\n{text}"
    );
    assert!(succeeded > 1000, "{succeeded} succeeded; h2load:\n{text}");
    assert!(
        srv.wait_stderr(std::time::Duration::from_secs(5), "stops gracefully"),
        "no reload:\n{}",
        srv.stderr()
    );
    still_serves(&srv);
}

httptest!(a_reload_under_load_fails_no_stream, |model| {
    reload_under_load_fails_no_stream(model)
});

httptest!(the_limits_mean_the_same_over_h2, |model| {
    let backend = Backend::start(echo);
    let site = crate::handover::site();
    let config = crate::handover::config(
        &backend,
        "prefix = \"/app/\"",
        "[limits]\nmax_header_bytes = 4096\n",
    )
    .replace("linger = \"1s\"", "linger = \"1s\"\nkeepalive = \"1s\"")
    .replace("max_body_size = \"64m\"", "max_body_size = \"1k\"");
    let srv = site.serve_config(model, &config);
    // A header list over the limit: 431, as over HTTP/1.1, and the connection goes on.
    let big = format!("x-big: {}", "b".repeat(8000));
    let Some(out) = curl(&[
        "-sS",
        "--http2-prior-knowledge",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        &big,
        &srv.url("/page.txt"),
    ]) else {
        return;
    };
    assert_eq!(
        out.stdout,
        b"431",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A body over the backend's max_body_size: 413 before a byte goes to the backend.
    let body = "x".repeat(2000);
    let out = curl(&[
        "-sS",
        "--http2-prior-knowledge",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--data-binary",
        &body,
        &srv.url("/app/upload"),
    ])
    .unwrap();
    assert_eq!(
        out.stdout,
        b"413",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(backend.log.requests.lock().unwrap().is_empty());
    // An idle connection ends after the keep-alive timeout, with GOAWAY.
    let Some(report) = peer(&srv, false, &["idle", "5"]) else {
        return;
    };
    assert_eq!(report["goaway"], "NO_ERROR", "{report}");
    assert_eq!(report["closed"], true, "{report}");
    let held = report["held_seconds"].as_f64().unwrap();
    assert!((0.8..3.0).contains(&held), "held {held} s: {report}");
});

httptest!(priority_floods_are_calmed, |model| {
    // CVE-2019-9513: PRIORITY frames for idle streams and PRIORITY_UPDATEs, none of them a
    // request: counted as frames that move nothing, then GOAWAY.
    let site = attacked_site();
    let srv = site.serve(model);
    let before = rss_kib(&srv);
    let Some(report) = peer(&srv, false, &["priority-flood", "200000"]) else {
        return;
    };
    assert_eq!(report["goaway"], "ENHANCE_YOUR_CALM", "{report}");
    assert_memory_held(&srv, before, "priority flood");
    still_serves(&srv);
});

httptest!(a_data_dribble_is_calmed, |model| {
    // CVE-2019-9511: a window opened a byte at a time, so that a large answer would go out
    // in frames of a byte. Updates read together make frames of what they add up to, and
    // past the budget the connection ends.
    let site = attacked_site();
    let srv = site.serve(model);
    let before = rss_kib(&srv);
    let Some(report) = peer(&srv, false, &["data-dribble", "100000", "/big.bin"]) else {
        return;
    };
    assert_eq!(report["goaway"], "ENHANCE_YOUR_CALM", "{report}");
    let (bytes, frames) = (
        report["data_bytes"].as_u64().unwrap(),
        report["data_frames"].as_u64().unwrap(),
    );
    assert!(
        frames * 2 <= bytes,
        "{frames} DATA frames for {bytes} bytes: {report}"
    );
    assert_memory_held(&srv, before, "data dribble");
    still_serves(&srv);
});
