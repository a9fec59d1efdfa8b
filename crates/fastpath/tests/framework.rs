//! The services built on the service API, `fastpath echo` and `fastpath forward`, on every
//! model: the seed's protocols, backpressure, bad input, and interop with the official Apache
//! Thrift library.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::util::*;

pub(crate) fn echo(model: Model, args: &[&str]) -> (Site, Server) {
    let site = Site::new();
    let mut builder = site.server(model).service("echo");
    for arg in args {
        builder = builder.arg(arg);
    }
    let server = builder.start();
    (site, server)
}

pub(crate) fn forward(model: Model, to: &[SocketAddr], args: &[&str]) -> (Site, Server) {
    let site = Site::new();
    let list: Vec<String> = to.iter().map(|a| a.to_string()).collect();
    let mut builder = site
        .server(model)
        .service("forward")
        .arg("--to")
        .arg(&list.join(","));
    for arg in args {
        builder = builder.arg(arg);
    }
    let server = builder.start();
    (site, server)
}

pub(crate) fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    stream
}

/// Deterministic bytes, different for every (seed, index).
pub(crate) fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + seed * 7) % 251) as u8)
        .collect()
}

httptest!(echo_returns_every_buffer_after_the_size_header, |model| {
    echo_returns_every_buffer(model, &[]);
});

httptest!(echo_plain_returns_bytes_from_the_first, |model| {
    echo_plain_returns_bytes(model, &[]);
});

httptest!(echo_refuses_an_impossible_buffer_size, |model| {
    echo_refuses_a_bad_size(model, &[]);
});

httptest!(echo_to_a_client_that_never_reads_stays_bounded, |model| {
    echo_stays_bounded(model, &[]);
});

// The echo tests' bodies, shared with the kernel path's tests (kernel_path.rs), which run
// them with `--kernel-path on`: `extra` are more arguments for the server.

/// Three clients with buffers of 32 B, 1 KiB and 16 KiB, 50 rounds each.
pub(crate) fn echo_returns_every_buffer(model: Model, extra: &[&str]) {
    let (_site, srv) = echo(model, extra);
    let mut clients: Vec<TcpStream> = (0..3).map(|_| connect(srv.addr())).collect();
    for (i, client) in clients.iter_mut().enumerate() {
        let size = [32usize, 1024, 16 * 1024][i];
        client.write_all(&(size as u32).to_be_bytes()).unwrap();
        for round in 0..50 {
            let sent = pattern(round + i, size);
            client.write_all(&sent).unwrap();
            let mut got = vec![0; size];
            client.read_exact(&mut got).unwrap();
            if let Some(at) = (0..size).find(|&k| got[k] != sent[k]) {
                let seed = (0..60).find(|&s| pattern(s, size)[at..] == got[at..]);
                panic!(
                    "buffer {round} of {size} bytes came back altered from byte {at} \
                     (the rest is buffer {seed:?}'s)"
                );
            }
        }
    }
}

pub(crate) fn echo_plain_returns_bytes(model: Model, extra: &[&str]) {
    let mut args = vec!["--plain"];
    args.extend_from_slice(extra);
    let (_site, srv) = echo(model, &args);
    let mut client = connect(srv.addr());
    client.write_all(b"\x00\x00hello").unwrap();
    let mut got = [0; 7];
    client.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"\x00\x00hello");
}

/// The server closes `client` (an end of stream or a reset) without sending anything.
fn expect_closed(client: &mut TcpStream) {
    let mut buf = [0; 16];
    match client.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection closed, got {other:?}"),
    }
}

pub(crate) fn echo_refuses_a_bad_size(model: Model, extra: &[&str]) {
    let (_site, srv) = echo(model, extra);
    let mut client = connect(srv.addr());
    client.write_all(&0u32.to_be_bytes()).unwrap();
    expect_closed(&mut client);
    assert!(
        srv.wait_stderr(IO_TIMEOUT, "buffer size 0 is not in 1..="),
        "no log line naming the bad size"
    );
}

pub(crate) fn echo_stays_bounded(model: Model, extra: &[&str]) {
    // A client that sends and never reads fills its own receive buffer, then the server's
    // output limit, then the server stops reading it: what the client can push in is bounded
    // by socket buffers and that limit, not by its patience.
    let mut args = vec!["--plain"];
    args.extend_from_slice(extra);
    let (_site, srv) = echo(model, &args);
    let client = connect(srv.addr());
    let pushed = push_until_stalled(
        &client,
        &[7u8; 64 * 1024],
        Duration::from_secs(3),
        Duration::from_millis(500),
    );
    assert!(pushed.error.is_none(), "write: {:?}", pushed.error);
    assert!(
        pushed.stalled,
        "the server kept taking bytes from a client that reads none ({} bytes)",
        pushed.bytes
    );
    assert!(
        pushed.bytes < 48 << 20,
        "{} bytes taken before the stall",
        pushed.bytes
    );
}

/// What a client that sends and never reads managed to push.
pub struct Pushed {
    /// Bytes the kernel took.
    pub bytes: usize,
    /// The writes stalled for `stall` (rather than the time running out first).
    pub stalled: bool,
    /// The write error that ended it, if one did.
    pub error: Option<std::io::Error>,
}

/// Writes `message` again and again on the non-blocking `stream`, whole messages one after
/// the other whatever each write takes, for at most `within`, until the writes have stalled
/// for `stall` or one fails.
pub fn push_until_stalled(
    stream: &TcpStream,
    message: &[u8],
    within: Duration,
    stall: Duration,
) -> Pushed {
    stream.set_nonblocking(true).unwrap();
    let mut pushed = Pushed {
        bytes: 0,
        stalled: false,
        error: None,
    };
    let mut stalled_since = None;
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let at = pushed.bytes % message.len();
        match (&*stream).write(&message[at..]) {
            Ok(n) => {
                pushed.bytes += n;
                stalled_since = None;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() > stall {
                    pushed.stalled = true;
                    break;
                }
                thread::sleep(Duration::from_millis(5));
            }
            Err(e) => {
                pushed.error = Some(e);
                break;
            }
        }
    }
    pushed
}

/// A TCP sink that records what arrives on every connection, in arrival order per
/// connection.
pub(crate) struct Sink {
    pub(crate) addr: SocketAddr,
    pub(crate) received: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
}

impl Sink {
    pub(crate) fn start() -> Sink {
        Sink::start_after(Duration::ZERO)
    }

    /// A sink that reads nothing for `pause` after each connection opens.
    pub(crate) fn start_after(pause: Duration) -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let shared = received.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let shared = shared.clone();
                thread::spawn(move || {
                    thread::sleep(pause);
                    let mut buf = [0; 65536];
                    while let Ok(n) = conn.read(&mut buf) {
                        if n == 0 {
                            return;
                        }
                        shared.lock().unwrap().extend_from_slice(&buf[..n]);
                    }
                });
            }
        });
        Sink { addr, received }
    }

    pub(crate) fn len(&self) -> usize {
        self.received.lock().unwrap().len()
    }
}

/// A framed `msg(key, payload)` as the official library writes it (strict header, oneway).
pub(crate) fn framed_msg(seq: i32, key: i32, payload: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0x8001_0004u32.to_be_bytes());
    body.extend_from_slice(&3u32.to_be_bytes());
    body.extend_from_slice(b"msg");
    body.extend_from_slice(&seq.to_be_bytes());
    body.extend_from_slice(&[8, 0, 1]);
    body.extend_from_slice(&key.to_be_bytes());
    body.extend_from_slice(&[11, 0, 2]);
    body.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    body.extend_from_slice(payload);
    body.push(0);
    let mut framed = (body.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(&body);
    framed
}

httptest!(forward_sends_each_message_to_key_mod_n, |model| {
    forward_sends_by_key(model, &[]);
});

// The forwarder tests' bodies: `extra` are more arguments for the server.

pub(crate) fn forward_sends_by_key(model: Model, extra: &[&str]) {
    let sinks = [Sink::start(), Sink::start(), Sink::start()];
    let to: Vec<SocketAddr> = sinks.iter().map(|s| s.addr).collect();
    let (_site, srv) = forward(model, &to, extra);
    let mut client = connect(srv.addr());
    let mut expected = [Vec::new(), Vec::new(), Vec::new()];
    for seq in 0..300 {
        let key = seq - 150;
        let msg = framed_msg(seq, key, &pattern(seq as usize, (seq as usize * 13) % 3000));
        expected[key.rem_euclid(3) as usize].extend_from_slice(&msg);
        client.write_all(&msg).unwrap();
    }
    let want: usize = expected.iter().map(Vec::len).sum();
    let arrived = wait_for(Duration::from_secs(10), || {
        (sinks.iter().map(Sink::len).sum::<usize>() >= want).then_some(())
    });
    assert!(arrived.is_some(), "not everything arrived");
    for (i, sink) in sinks.iter().enumerate() {
        assert!(
            *sink.received.lock().unwrap() == expected[i],
            "destination {i} got other bytes than the messages for it, in order"
        );
    }
}

httptest!(
    forward_closes_a_client_that_sends_garbage_and_says_why,
    |model| {
        forward_refuses_garbage(model, &[]);
    }
);

pub(crate) fn forward_refuses_garbage(model: Model, extra: &[&str]) {
    {
        let sink = Sink::start();
        let (_site, srv) = forward(model, &[sink.addr], extra);
        let mut client = connect(srv.addr());
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        expect_closed(&mut client);
        assert!(
            srv.wait_stderr(IO_TIMEOUT, "over the limit"),
            "no reason logged"
        );
        // A message for another method is refused too, and nothing reaches the destination.
        let mut client = connect(srv.addr());
        let mut other = framed_msg(1, 0, b"x");
        other[12..15].copy_from_slice(b"get");
        client.write_all(&other).unwrap();
        let _ = client.read(&mut [0; 16]);
        assert!(srv.wait_stderr(IO_TIMEOUT, "not the method msg"));
        assert_eq!(sink.len(), 0);
    }
}

httptest!(
    forward_counts_what_an_unreachable_destination_misses,
    |model| {
        forward_counts_unreachable(model, &[]);
    }
);

pub(crate) fn forward_counts_unreachable(model: Model, extra: &[&str]) {
    {
        // A port nobody listens on: connecting is refused.
        let down: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let up = Sink::start();
        let (_site, srv) = forward(model, &[up.addr, down], extra);
        let mut client = connect(srv.addr());
        for seq in 0..20 {
            client.write_all(&framed_msg(seq, seq, b"payload")).unwrap();
        }
        assert!(
            srv.wait_stderr(IO_TIMEOUT, "undelivered"),
            "messages for the unreachable destination were not counted"
        );
        let per_message = framed_msg(0, 0, b"payload").len();
        let ok = wait_for(IO_TIMEOUT, || (up.len() >= 10 * per_message).then_some(()));
        assert!(
            ok.is_some(),
            "the reachable destination did not get its messages"
        );
    }
}

pub(crate) fn interop(model: Model, transport: &str, extra: &[&str]) {
    let gen = tempfile::tempdir().unwrap();
    let idl =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/thrift/forwarder.thrift");
    let Some(python) =
        fastpath_testkit::thrift_py("framework::forward_interop", &[idl.as_path()], gen.path())
    else {
        return;
    };
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let to: Vec<SocketAddr> = ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}").parse().unwrap())
        .collect();
    let mut args = vec!["--transport", transport];
    args.extend_from_slice(extra);
    let (_site, srv) = forward(model, &to, &args);
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/framework/forward_interop.py");
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    let out = Command::new(python)
        .arg(&script)
        .arg(gen.path())
        .arg(srv.addr().port().to_string())
        .arg(list.join(","))
        .args(["4", "400", transport])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

httptest!(
    forward_delivers_what_it_queued_after_the_client_has_gone,
    |model| {
        // Clients that send a burst to three destinations and close at once, one after
        // another and a few at a time: their last messages are queued for a destination as
        // the client's end arrives. Where a worker serves one client at a time (prefork,
        // threads), its destination connections outlive the client only to send what they
        // hold; closing them at once lost the last few messages of some clients.
        let sinks = [Sink::start(), Sink::start(), Sink::start()];
        let to: Vec<SocketAddr> = sinks.iter().map(|s| s.addr).collect();
        let (_site, srv) = forward(model, &to, &[]);
        let mut expected = [0usize; 3];
        for round in 0..10 {
            let senders: Vec<_> = (0..4)
                .map(|c| {
                    let mut burst = Vec::new();
                    for seq in 0..60 {
                        let key = round * 1000 + c * 100 + seq;
                        burst.push((key, framed_msg(seq, key, &pattern(key as usize, 700))));
                    }
                    for (key, msg) in &burst {
                        expected[key.rem_euclid(3) as usize] += msg.len();
                    }
                    let addr = srv.addr();
                    thread::spawn(move || {
                        let mut client = connect(addr);
                        let bytes: Vec<u8> = burst.into_iter().flat_map(|(_, m)| m).collect();
                        client.write_all(&bytes).unwrap();
                    })
                })
                .collect();
            for sender in senders {
                sender.join().unwrap();
            }
        }
        let arrived = wait_for(Duration::from_secs(20), || {
            (0..3).all(|d| sinks[d].len() >= expected[d]).then_some(())
        });
        let got: Vec<usize> = sinks.iter().map(Sink::len).collect();
        assert!(
            arrived.is_some(),
            "{got:?} of {expected:?} bytes arrived\n{}",
            srv.stderr()
        );
        assert_eq!(got, expected.to_vec(), "more arrived than was sent");
    }
);

httptest!(forward_interop_with_apache_thrift_framed, |model| {
    interop(model, "framed", &[]);
});

httptest!(forward_interop_with_apache_thrift_unframed, |model| {
    interop(model, "unframed", &[]);
});

httptest!(
    forward_makes_clients_wait_for_a_destination_that_stops_reading,
    |model| {
        forward_waits_for_a_stuck_destination(model, &[]);
    }
);

pub(crate) fn forward_waits_for_a_stuck_destination(model: Model, extra: &[&str]) {
    {
        // Destination 0 accepts and never reads; destination 1 is healthy. A client sending to 0
        // is stopped once the queue and the socket buffers are full (bounded memory); another
        // client, sending to 1, goes on meanwhile.
        let stuck = TcpListener::bind("127.0.0.1:0").unwrap();
        let stuck_addr = stuck.local_addr().unwrap();
        let held = thread::spawn(move || stuck.accept().map(|(conn, _)| conn));
        let healthy = Sink::start();
        let mut args = vec!["--queue-limit", "256k"];
        args.extend_from_slice(extra);
        let (_site, srv) = forward(model, &[stuck_addr, healthy.addr], &args);
        let blocked = connect(srv.addr());
        let msg = framed_msg(0, 0, &[b'p'; 4000]);
        let pushed = push_until_stalled(
            &blocked,
            &msg,
            Duration::from_secs(5),
            Duration::from_millis(500),
        );
        assert!(pushed.error.is_none(), "write: {:?}", pushed.error);
        assert!(pushed.stalled, "never stalled after {} bytes", pushed.bytes);
        assert!(
            pushed.bytes < 48 << 20,
            "{} bytes taken for a stuck destination",
            pushed.bytes
        );
        let mut other = connect(srv.addr());
        let to_healthy = framed_msg(1, 1, b"still flowing");
        other.write_all(&to_healthy).unwrap();
        let ok = wait_for(IO_TIMEOUT, || {
            (healthy.len() >= to_healthy.len()).then_some(())
        });
        assert!(
            ok.is_some(),
            "a stuck destination held up another client's messages"
        );
        drop(held);
    }
}

httptest!(forward_reconnects_a_destination_that_went_away, |model| {
    forward_reconnects(model, &[]);
});

pub(crate) fn forward_reconnects(model: Model, extra: &[&str]) {
    // The destination closes its first connection after one message; later messages reach
    // it over a new connection.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let msg = framed_msg(0, 0, b"first");
    let first_len = msg.len();
    let sink = thread::spawn(move || {
        let (mut first, _) = listener.accept().unwrap();
        let mut buf = vec![0; first_len];
        first.read_exact(&mut buf).unwrap();
        drop(first);
        let (mut second, _) = listener.accept().unwrap();
        second.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        let mut rest = Vec::new();
        let mut chunk = [0; 4096];
        while let Ok(n) = second.read(&mut chunk) {
            if n == 0 {
                break;
            }
            rest.extend_from_slice(&chunk[..n]);
            if rest.ends_with(b"last\0") {
                break;
            }
        }
        (buf, rest)
    });
    let (_site, srv) = forward(model, &[addr], extra);
    let mut client = connect(srv.addr());
    client.write_all(&msg).unwrap();
    // Time for the destination to close; a message sent into the closing connection may be
    // lost (and is then counted): the test asks only that the last one arrives.
    thread::sleep(Duration::from_millis(300));
    let mut n = 0;
    let last = framed_msg(9, 0, b"last");
    while !sink.is_finished() && n < 20 {
        client.write_all(&last).unwrap();
        n += 1;
        thread::sleep(Duration::from_millis(100));
    }
    let (first, rest) = sink.join().unwrap();
    assert_eq!(first, msg);
    assert!(
        rest.ends_with(&last),
        "no message arrived over a second connection"
    );
}

/// Started by systemd's socket activation (a socket unit with `Accept=no`), a service serves
/// the listening socket it was passed instead of binding its own.
#[test]
fn echo_serves_the_socket_passed_by_socket_activation() {
    let activate = std::path::Path::new("/usr/bin/systemd-socket-activate");
    if !activate.exists() {
        return skip(
            "echo under systemd-socket-activate",
            Missing::Installable,
            "systemd-socket-activate is not installed (apt-get install systemd)",
        );
    }
    let port = free_port();
    let child = Command::new(activate)
        .args(["-l", &format!("127.0.0.1:{port}")])
        .arg(BIN)
        .args(["echo", "--plain", "--run-as-root", "--workers", "1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _child = Reap(child);
    // The first connection starts the service; it may take a moment to answer.
    let until = Instant::now() + Duration::from_secs(10);
    let echoed = loop {
        if let Ok(mut client) = TcpStream::connect(("127.0.0.1", port)) {
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            client.write_all(b"activated").unwrap();
            let mut back = [0u8; 9];
            if client.read_exact(&mut back).is_ok() {
                break back;
            }
        }
        assert!(Instant::now() < until, "no echo on the activated socket");
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(&echoed, b"activated");
}

/// Runs `script` under Python with the arguments `args`, `input` on its stdin; its stdout.
fn python_with(script: &str, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("timeout")
        .args(["30", "python3", "-c", script])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A certificate for `localhost` made by a test CA in `site`'s directory: (CA, chain, key).
fn service_certificate(site: &Site) -> (PathBuf, PathBuf, PathBuf) {
    let pki = fastpath_testkit::TestPki::new(site.base());
    let (chain, key) = pki.leaf(
        "service",
        &["localhost"],
        fastpath_testkit::KeyKind::EcdsaP256,
    );
    (pki.ca().to_owned(), chain, key)
}

/// Sends stdin over TLS to the port, reading back as many bytes when asked ("echo").
const TLS_CLIENT: &str = r#"
import socket, ssl, sys
port, ca, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
data = sys.stdin.buffer.read()
ctx = ssl.create_default_context(cafile=ca)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                    server_hostname="localhost")
s.sendall(data)
if mode == "echo":
    back = b""
    while len(back) < len(data):
        chunk = s.recv(65536)
        if not chunk:
            break
        back += chunk
    print("echoed", back == data, len(back))
else:
    print("sent", len(data))
print(s.version())
s.unwrap()
"#;

httptest!(
    echo_and_forward_speak_tls_when_given_a_certificate,
    |model| {
        let site = Site::new();
        let (ca, chain, key) = service_certificate(&site);
        let tls_args = [
            "--tls-certificate",
            chain.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ];
        let mut builder = site.server(model).service("echo").arg("--plain");
        for arg in tls_args {
            builder = builder.arg(arg);
        }
        let echo = builder.start();
        let data = pattern(3, 300_000);
        let port = echo.addr().port().to_string();
        let out = python_with(TLS_CLIENT, &[&port, ca.to_str().unwrap(), "echo"], &data);
        assert_eq!(out, "echoed True 300000\nTLSv1.3\n");
        assert!(
            echo.wait_stderr(Duration::from_secs(5), "kernel path: off (TLS"),
            "{}",
            echo.stderr()
        );
        // Plain bytes to a TLS echo are not echoed: the handshake fails and the connection ends.
        let mut plain = connect(echo.addr());
        plain.write_all(b"hello, plain\n").unwrap();
        let mut answer = Vec::new();
        let _ = plain.read_to_end(&mut answer);
        assert!(!answer.windows(5).any(|w| w == b"hello"), "{answer:?}");

        let sinks = [Sink::start(), Sink::start()];
        let to: Vec<String> = sinks.iter().map(|s| s.addr.to_string()).collect();
        let mut builder = site
            .server(model)
            .service("forward")
            .arg("--to")
            .arg(&to.join(","));
        for arg in tls_args {
            builder = builder.arg(arg);
        }
        let forward = builder.start();
        let mut messages = Vec::new();
        let mut expected = [Vec::new(), Vec::new()];
        for seq in 0..200 {
            let msg = framed_msg(seq, seq, &pattern(seq as usize, 500 + seq as usize * 7));
            expected[(seq % 2) as usize].extend_from_slice(&msg);
            messages.extend_from_slice(&msg);
        }
        let port = forward.addr().port().to_string();
        let out = python_with(
            TLS_CLIENT,
            &[&port, ca.to_str().unwrap(), "send"],
            &messages,
        );
        assert_eq!(out, format!("sent {}\nTLSv1.3\n", messages.len()));
        let arrived = wait_for(Duration::from_secs(10), || {
            (sinks.iter().map(Sink::len).sum::<usize>() >= messages.len()).then_some(())
        });
        assert!(arrived.is_some(), "not everything arrived");
        for (i, sink) in sinks.iter().enumerate() {
            assert!(
                *sink.received.lock().unwrap() == expected[i],
                "destination {i} got other bytes than its messages, in plaintext and in order"
            );
        }
    }
);

#[test]
fn echo_refuses_the_kernel_path_over_tls() {
    let site = Site::new();
    let (_, chain, key) = service_certificate(&site);
    let out = Command::new(BIN)
        .args([
            "echo",
            "--run-as-root",
            "--kernel-path",
            "on",
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--tls-certificate")
        .arg(&chain)
        .arg("--tls-key")
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot echo over TLS"), "{err}");
    // A key without a certificate is refused by the command line.
    let out = Command::new(BIN)
        .args(["echo", "--tls-key"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tls-certificate"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
