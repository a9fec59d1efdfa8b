//! Small HTTP servers on 127.0.0.1 that behave well or badly on purpose, and helpers to run
//! the load generator against them. Each server runs on threads of its own until the test
//! binary exits.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastpath_bench::{run, Config, Report, Target, Url};

/// How a test server answers.
#[derive(Clone)]
pub enum Behaviour {
    /// 200 with this body and Content-Length, keep-alive unless asked to close.
    Ok(Vec<u8>),
    /// 200 with this body in two chunks.
    Chunked(Vec<u8>),
    /// `/status/NNN` answers NNN with a short body; anything else 200 "ok".
    Status,
    /// Files below this root, 404 if missing; `corrupt` names a path answered with one
    /// byte changed.
    Static {
        root: PathBuf,
        corrupt: Option<String>,
    },
    /// Accept, then close with SO_LINGER 0 (a reset).
    Reset,
    /// Accept and never answer.
    Stall,
    /// Content-Length 100, send 50 bytes, close.
    Short,
    /// Content-Length 5, send 10 bytes (in the same write as the head).
    LongerThanSaid,
    /// Not HTTP at all.
    Garbage,
    /// A Content-Length that is not a number.
    BadLength,
    /// HTTP/1.0 with no length: the body runs to the close.
    UntilClose(Vec<u8>),
    /// `100 Continue`, then 200 with a short body.
    Interim,
}

/// A running test server and what it saw.
pub struct Server {
    pub addr: SocketAddr,
    pub accepted: Arc<AtomicU64>,
    pub requests: Arc<AtomicU64>,
    /// Requests that said `Connection: close`.
    pub close_requests: Arc<AtomicU64>,
    /// Most requests found in one read (pipelining shows as more than 1).
    pub max_batch: Arc<AtomicU64>,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl Server {
    pub fn start(behaviour: Behaviour) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = Server {
            addr: listener.local_addr().unwrap(),
            accepted: Arc::default(),
            requests: Arc::default(),
            close_requests: Arc::default(),
            max_batch: Arc::default(),
            held: Arc::default(),
        };
        let accepted = server.accepted.clone();
        let counters = (
            server.requests.clone(),
            server.close_requests.clone(),
            server.max_batch.clone(),
        );
        let held = server.held.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                accepted.fetch_add(1, Ordering::SeqCst);
                match &behaviour {
                    Behaviour::Reset => {
                        let sock = socket2::SockRef::from(&stream);
                        sock.set_linger(Some(Duration::ZERO)).unwrap();
                        drop(stream);
                    }
                    Behaviour::Stall => held.lock().unwrap().push(stream),
                    b => {
                        let b = b.clone();
                        let counters = counters.clone();
                        std::thread::spawn(move || serve(stream, &b, &counters));
                    }
                }
            }
        });
        server
    }

    /// A closed port: a free one, so connecting is refused.
    pub fn closed_port() -> SocketAddr {
        free_addr()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }

    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

type Counters = (Arc<AtomicU64>, Arc<AtomicU64>, Arc<AtomicU64>);

fn serve(mut stream: TcpStream, behaviour: &Behaviour, counters: &Counters) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut out = Vec::new();
        let mut batch = 0;
        let mut close = false;
        while let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            buf.drain(..end + 4);
            batch += 1;
            counters.0.fetch_add(1, Ordering::SeqCst);
            let wants_close = head.to_ascii_lowercase().contains("connection: close");
            if wants_close {
                counters.1.fetch_add(1, Ordering::SeqCst);
            }
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            close |= respond(&mut out, behaviour, &path, wants_close);
            if close {
                break;
            }
        }
        counters.2.fetch_max(batch, Ordering::SeqCst);
        if stream.write_all(&out).is_err() || close {
            return;
        }
    }
}

/// Appends the reply; returns whether the connection closes after it.
fn respond(out: &mut Vec<u8>, behaviour: &Behaviour, path: &str, wants_close: bool) -> bool {
    let conn = if wants_close {
        "Connection: close\r\n"
    } else {
        ""
    };
    let simple = |out: &mut Vec<u8>, status: u16, body: &[u8]| {
        out.extend_from_slice(
            format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n{conn}\r\n",
                body.len()
            )
            .as_bytes(),
        );
        out.extend_from_slice(body);
    };
    match behaviour {
        Behaviour::Ok(body) => simple(out, 200, body),
        Behaviour::Status => match path.strip_prefix("/status/") {
            Some(code) => simple(out, code.parse().unwrap_or(500), b"status"),
            None => simple(out, 200, b"ok"),
        },
        Behaviour::Static { root, corrupt } => {
            match std::fs::read(root.join(path.trim_start_matches('/'))) {
                Ok(mut body) => {
                    if corrupt.as_deref() == Some(path) {
                        body[0] ^= 1;
                    }
                    simple(out, 200, &body)
                }
                Err(_) => simple(out, 404, b"not found"),
            }
        }
        Behaviour::Chunked(body) => {
            let (a, b) = body.split_at(body.len() / 2);
            out.extend_from_slice(
                format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n{conn}\r\n").as_bytes(),
            );
            for part in [a, b] {
                if !part.is_empty() {
                    out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
                    out.extend_from_slice(part);
                    out.extend_from_slice(b"\r\n");
                }
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
        Behaviour::Short => {
            out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n");
            out.extend_from_slice(&[b'x'; 50]);
            return true;
        }
        Behaviour::LongerThanSaid => {
            out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n0123456789");
        }
        Behaviour::Garbage => {
            out.extend_from_slice(b"hello, this is not HTTP\r\n\r\n");
            return true;
        }
        Behaviour::BadLength => {
            out.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: five\r\n\r\nhello");
            return true;
        }
        Behaviour::UntilClose(body) => {
            out.extend_from_slice(b"HTTP/1.0 200 OK\r\n\r\n");
            out.extend_from_slice(body);
            return true;
        }
        Behaviour::Interim => {
            out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            simple(out, 200, b"final");
        }
        Behaviour::Reset | Behaviour::Stall => unreachable!("handled at accept"),
    }
    wants_close
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A closed-loop configuration for one URL: `connections`, `requests` requests, 1 thread.
pub fn config(url: &str, connections: usize, requests: u64) -> Config {
    let url = Url::parse(url).unwrap();
    let mut c = Config::new(Target::from_urls(&url.to_string(), &[url]).unwrap());
    c.connections = connections;
    c.requests = Some(requests);
    c.duration = Some(Duration::from_secs(20));
    c.threads = 1;
    c.timeout = Duration::from_secs(5);
    c
}

/// Runs and checks the bookkeeping every report must satisfy.
pub fn run_checked(config: &Config) -> Report {
    let r = run(config, None).expect("run");
    check_invariants(&r);
    r
}

/// Every request ends as a reply, an error, or in flight at the end; status classes add up.
pub fn check_invariants(r: &Report) {
    let e = &r.errors;
    let classes = e.refused
        + e.reset
        + e.timeout
        + e.fd_unavail
        + e.addr_unavail
        + e.short_body
        + e.bad_response
        + e.verify
        + e.tls
        + e.other;
    assert_eq!(
        e.total, classes,
        "error total is the sum of the classes: {r:#?}"
    );
    assert_eq!(
        r.requests,
        r.replies + e.total + r.in_flight_at_end,
        "every request is a reply, an error or in flight: {r:#?}"
    );
    assert_eq!(
        r.latency_us.count, r.replies,
        "one latency sample per reply"
    );
    assert_eq!(r.first_byte_us.count, r.replies);
    assert_eq!(r.transfer_us.count, r.replies);
    assert_eq!(r.connect_us.count, r.conns_established);
    assert!(r.conns_established <= r.conns_opened);
    if r.replies > 0 {
        let p = &r.latency_us;
        assert!(p.min <= p.p50 && p.p50 <= p.p90 && p.p90 <= p.p99, "{p:?}");
        assert!(p.p99 <= p.p999 && p.p999 <= p.max, "{p:?}");
        assert!(r.rps > 0.0 && r.bytes_per_s > 0.0);
    }
}

/// A free port on 127.0.0.1, as an address (for servers the code under test starts).
pub fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], fastpath_testkit::free_port()))
}
