//! The stream load generators: `echo` against small echo servers (with and without the
//! size header, and one that corrupts a byte), `thrift` against a tiny forwarder (a good
//! one, one that drops a message, one that duplicates one), and the messages it sends
//! decoded by the official Apache Thrift Python library.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fastpath_bench::cli::{execute, parse_args};
use fastpath_bench::fwdmsg::{key_of, ring_len, STAMP};
use fastpath_bench::{run_echo, run_sinks, run_thrift, EchoConfig, ThriftConfig};
use fastpath_thrift::Transport;

use crate::util::free_addr;

// ---- echo ------------------------------------------------------------------------------

/// An echo server on a thread per connection. With `header` it first reads the 4-byte
/// size; `corrupt_at` flips the byte at that offset of the echoed stream of the first
/// connection.
fn echo_server(header: bool, corrupt_at: Option<u64>) -> (SocketAddr, Arc<Mutex<Vec<u32>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let seen = sizes.clone();
    std::thread::spawn(move || {
        let mut first = true;
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let corrupt = if first { corrupt_at } else { None };
            first = false;
            let seen = seen.clone();
            std::thread::spawn(move || {
                let _ = s.set_nodelay(true);
                if header {
                    let mut h = [0u8; 4];
                    if s.read_exact(&mut h).is_err() {
                        return;
                    }
                    seen.lock().unwrap().push(u32::from_be_bytes(h));
                }
                let mut buf = [0u8; 65536];
                let mut offset = 0u64;
                loop {
                    let n = match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if let Some(at) = corrupt {
                        if (offset..offset + n as u64).contains(&at) {
                            buf[(at - offset) as usize] ^= 0x01;
                        }
                    }
                    offset += n as u64;
                    if s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, sizes)
}

fn echo_config(addr: SocketAddr, size: usize) -> EchoConfig {
    let mut c = EchoConfig::new(addr, size);
    c.connections = 3;
    c.threads = 2;
    c.duration = Duration::from_millis(500);
    c
}

#[test]
fn echo_with_the_size_header() {
    let (addr, sizes) = echo_server(true, None);
    let r = run_echo(&echo_config(addr, 100), None).unwrap();
    assert!(r.clean(), "{r:#?}");
    assert!(r.messages > 100, "{r:#?}");
    assert_eq!(r.bytes, r.messages * 100);
    assert_eq!((r.conns_established, r.conns_failed), (3, 0));
    assert_eq!(r.rtt_us.count, r.messages);
    assert!(r.rtt_us.p50 > 0.0 && r.rtt_us.p50 <= r.rtt_us.p99 && r.rtt_us.p99 <= r.rtt_us.max);
    assert!((r.messages_per_s - r.messages as f64 / r.duration_s).abs() < 1e-6);
    assert!(r.cpu_s > 0.0 && r.cpu_us_per_message > 0.0);
    assert_eq!(*sizes.lock().unwrap(), vec![100, 100, 100]);
}

#[test]
fn echo_plain_and_large_messages() {
    // No header: a server that expected one would swallow 4 bytes and every echo would be
    // off; this one echoes from the first byte. 20000 bytes take several reads each way.
    let (addr, sizes) = echo_server(false, None);
    let mut c = echo_config(addr, 20_000);
    c.plain = true;
    let r = run_echo(&c, None).unwrap();
    assert!(r.clean(), "{r:#?}");
    assert!(r.messages > 10, "{r:#?}");
    assert!(sizes.lock().unwrap().is_empty());
    // The same server read with the header on: the 4 header bytes come back first, so
    // every message mismatches, and the report says so.
    let r = run_echo(&echo_config(addr, 64), None).unwrap();
    assert!(!r.clean());
    assert!(r.errors.mismatch > 0, "{r:#?}");
}

#[test]
fn echo_detects_one_corrupt_byte() {
    let (addr, _) = echo_server(true, Some(1000));
    let mut c = echo_config(addr, 64);
    c.connections = 1;
    let r = run_echo(&c, None).unwrap();
    assert_eq!(r.errors.mismatch, 1, "{r:#?}");
    assert_eq!(r.errors.total, 1);
    assert!(r.messages > 100, "the next messages are fine: {r:#?}");
    assert!(!r.clean());
}

#[test]
fn echo_counts_refused_and_closed_connections() {
    let r = run_echo(&echo_config(free_addr(), 32), None).unwrap();
    assert_eq!(
        (r.errors.refused, r.conns_failed, r.messages),
        (3, 3, 0),
        "{r:#?}"
    );
    // A server that reads the header and closes.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            let mut s = s;
            let _ = s.read_exact(&mut [0u8; 4]);
        }
    });
    let r = run_echo(&echo_config(addr, 32), None).unwrap();
    // Closed with the message unread: a reset, or a plain close if the close came first.
    assert_eq!(r.errors.closed + r.errors.reset, 3, "{r:#?}");
    assert_eq!((r.conns_established, r.conns_failed, r.messages), (3, 3, 0));
}

#[test]
fn echo_command_line_text_json_and_exit() {
    let (addr, _) = echo_server(true, None);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("echo.json");
    let a = addr.to_string();
    let args = [
        "bench", "echo", &a, "--size", "32", "-c", "2", "-d", "300ms", "-q", "--json",
    ];
    let mut argv: Vec<&str> = args.to_vec();
    let json_s = json.to_str().unwrap();
    argv.push(json_s);
    let mut out = Vec::new();
    execute(&parse_args(argv).unwrap(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("round trip"), "{text}");
    assert!(text.contains("mismatch 0"), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["mode"], "echo");
    assert_eq!(v["size"], 32);
    assert!(v["messages"].as_u64().unwrap() > 0);
    assert!(v["rtt_us"]["p99"].as_f64().unwrap() > 0.0);
    // A corrupting server makes the command fail, after printing its report.
    let (bad, _) = echo_server(true, Some(10));
    let b = bad.to_string();
    let argv = [
        "bench", "echo", &b, "--size", "32", "-c", "1", "-d", "200ms", "--json", "-",
    ];
    let mut out = Vec::new();
    let err = execute(&parse_args(argv).unwrap(), &mut out).unwrap_err();
    assert!(err.contains("1 mismatched"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["errors"]["mismatch"], 1);
    // A server that swallows the first 4 bytes of a plain stream never completes an echo:
    // no error within a run shorter than the timeout, but the command still fails.
    let argv = [
        "bench", "echo", &a, "--size", "64", "--plain", "-c", "1", "-d", "200ms", "-q",
    ];
    let err = execute(&parse_args(argv).unwrap(), &mut Vec::new()).unwrap_err();
    assert_eq!(err, "no echo came back within the run");
    // Bad sizes are refused with a reason.
    let argv = ["bench", "echo", &a, "--size", "0", "-d", "1s"];
    let err = execute(&parse_args(argv).unwrap(), &mut Vec::new()).unwrap_err();
    assert!(err.contains("--size must be"), "{err}");
}

// ---- a tiny forwarder --------------------------------------------------------------------

/// What the test forwarder does wrong, by the index of the message among all it forwards.
#[derive(Clone, Copy, Default)]
struct Faults {
    drop: Option<u64>,
    duplicate: Option<u64>,
}

/// A forwarder: reads `msg` calls (framed or not) from each client on a thread, sends each
/// whole to destination `key.rem_euclid(N)` on one connection per destination.
fn forwarder(dests: Vec<SocketAddr>, transport: Transport, faults: Faults) -> SocketAddr {
    forwarder_counted(dests, transport, faults).0
}

/// [`forwarder`], with the number of messages it has read.
fn forwarder_counted(
    dests: Vec<SocketAddr>,
    transport: Transport,
    faults: Faults,
) -> (SocketAddr, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let counter = count.clone();
    std::thread::spawn(move || {
        let outs: Arc<Vec<Mutex<Option<TcpStream>>>> =
            Arc::new(dests.iter().map(|_| Mutex::new(None)).collect());
        for client in listener.incoming().flatten() {
            let (outs, dests, count) = (outs.clone(), dests.clone(), count.clone());
            std::thread::spawn(move || {
                let mut r = std::io::BufReader::new(client);
                let frame = usize::from(transport == Transport::Framed) * 4;
                loop {
                    // Through the payload length: frame, version, name, seq id, key field,
                    // payload field header and length (see fastpath_bench::fwdmsg).
                    let mut msg = vec![0; frame + 29];
                    if r.read_exact(&mut msg).is_err() {
                        return;
                    }
                    let len = u32::from_be_bytes(msg[frame + 25..frame + 29].try_into().unwrap());
                    let start = msg.len();
                    msg.resize(start + len as usize + 1, 0);
                    if r.read_exact(&mut msg[start..]).is_err() {
                        return;
                    }
                    let key = i32::from_be_bytes(msg[frame + 18..frame + 22].try_into().unwrap());
                    let d = key.rem_euclid(dests.len() as i32) as usize;
                    let i = count.fetch_add(1, Ordering::SeqCst);
                    let times = if faults.drop == Some(i) {
                        0
                    } else if faults.duplicate == Some(i) {
                        2
                    } else {
                        1
                    };
                    let mut out = outs[d].lock().unwrap();
                    if out.is_none() {
                        *out = Some(TcpStream::connect(dests[d]).unwrap());
                    }
                    for _ in 0..times {
                        // Once the run is over its sinks are gone: stop quietly.
                        if out.as_mut().unwrap().write_all(&msg).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, counter)
}

fn thrift_config(forwarder: SocketAddr, sinks: Vec<SocketAddr>, payload: usize) -> ThriftConfig {
    let mut c = ThriftConfig::new(forwarder, sinks, payload);
    c.connections = 4;
    c.threads = 2;
    c.duration = Duration::from_millis(400);
    // Ends as soon as everything arrived; the margin is for a busy machine, where this
    // forwarder (a system call per message) works through the socket buffers slowly.
    c.drain = Duration::from_secs(10);
    c
}

fn sink_addrs(n: usize) -> Vec<SocketAddr> {
    (0..n).map(|_| free_addr()).collect()
}

#[test]
fn thrift_everything_arrives() {
    for (transport, payload) in [(Transport::Framed, 32), (Transport::Unframed, 4096)] {
        let sinks = sink_addrs(3);
        let fwd = forwarder(sinks.clone(), transport, Faults::default());
        let mut c = thrift_config(fwd, sinks.clone(), payload);
        c.transport = transport;
        let r = run_thrift(&c, None).unwrap();
        assert!(r.clean, "{r:#?}");
        assert!(r.sent > 100, "{r:#?}");
        assert_eq!(r.delivered, r.sent);
        assert_eq!(
            (r.lost, r.duplicated, r.reordered, r.corrupt, r.misrouted),
            (0, 0, 0, 0, 0)
        );
        assert_eq!(r.sinks.len(), 3);
        for (s, addr) in r.sinks.iter().zip(&sinks) {
            assert_eq!(s.addr, addr.to_string());
            assert_eq!(s.delivered, s.expected, "{r:#?}");
            assert_eq!(s.connections, 1);
            // Spread evenly: within one message per client of a third.
            assert!(s.expected.abs_diff(r.sent / 3) <= 4, "{r:#?}");
        }
        assert_eq!(r.latency_us.count, r.delivered);
        assert!(r.latency_us.p50 > 0.0);
        assert!(r.delivered_per_s > 0.0 && r.payload_bytes_per_s > 0.0);
        assert_eq!((r.conns_established, r.conns_failed), (4, 0));
    }
}

#[test]
fn thrift_detects_a_dropped_message() {
    let sinks = sink_addrs(2);
    let fwd = forwarder(
        sinks.clone(),
        Transport::Framed,
        Faults {
            drop: Some(500),
            duplicate: None,
        },
    );
    let mut c = thrift_config(fwd, sinks, 64);
    // The lost message never comes, so the run waits the whole drain: keep the backlog in
    // the socket buffers small enough for the forwarder to clear well within it.
    c.connections = 1;
    c.duration = Duration::from_millis(100);
    c.drain = Duration::from_secs(2);
    let r = run_thrift(&c, None).unwrap();
    assert!(!r.clean);
    assert_eq!(r.lost, 1, "{r:#?}");
    assert_eq!(
        (r.duplicated, r.reordered, r.corrupt, r.misrouted),
        (0, 0, 0, 0)
    );
    assert_eq!(r.delivered + 1, r.sent);
    assert!(r.drain_s >= 2.0, "it waited for the lost message: {r:#?}");
}

#[test]
fn thrift_detects_a_duplicated_message() {
    let sinks = sink_addrs(2);
    let fwd = forwarder(
        sinks.clone(),
        Transport::Framed,
        Faults {
            drop: None,
            duplicate: Some(300),
        },
    );
    let r = run_thrift(&thrift_config(fwd, sinks, 64), None).unwrap();
    assert!(!r.clean);
    assert_eq!((r.lost, r.duplicated, r.errors), (0, 1, 1), "{r:#?}");
    assert_eq!(r.delivered, r.sent);
}

#[test]
fn thrift_command_line_and_refusals() {
    let sinks = sink_addrs(2);
    let fwd = forwarder(sinks.clone(), Transport::Framed, Faults::default());
    let list = format!("{},{}", sinks[0], sinks[1]);
    let f = fwd.to_string();
    let argv = [
        "bench",
        "thrift",
        &f,
        "--sinks",
        &list,
        "--payload",
        "32",
        "-c",
        "2",
        "-d",
        "300ms",
        "-q",
        "--json",
        "-",
    ];
    let mut out = Vec::new();
    execute(&parse_args(argv).unwrap(), &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["mode"], "thrift");
    assert_eq!(v["clean"], true);
    assert_eq!(v["lost"], 0);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["sinks"].as_array().unwrap().len(), 2);
    assert!(v["latency_us"]["p99"].as_f64().unwrap() > 0.0);
    // A payload too small for the stamp, and a sink address already taken.
    let argv = ["bench", "thrift", &f, "--sinks", &list, "--payload", "8"];
    let err = execute(&parse_args(argv).unwrap(), &mut Vec::new()).unwrap_err();
    assert!(err.contains("--payload must be 20.."), "{err}");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let t = taken.local_addr().unwrap().to_string();
    let argv = ["bench", "thrift", &f, "--sinks", &t, "--payload", "32"];
    let err = execute(&parse_args(argv).unwrap(), &mut Vec::new()).unwrap_err();
    assert!(err.contains(&format!("cannot listen on {t}")), "{err}");
    // No forwarder: the connections fail and the run says so.
    let sinks = sink_addrs(1);
    let mut c = thrift_config(free_addr(), sinks, 32);
    c.drain = Duration::from_millis(100);
    let r = run_thrift(&c, None).unwrap();
    assert!(!r.clean);
    assert_eq!((r.conns_failed, r.sent), (4, 0), "{r:#?}");
}

#[test]
fn thrift_sinks_alone_count_until_stopped() {
    let sinks = sink_addrs(2);
    let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    let (tx, rx) = std::sync::mpsc::channel();
    let addrs = sinks.clone();
    let handle = std::thread::spawn(move || {
        run_sinks(&addrs, Transport::Framed, 1, stop, move || {
            tx.send(()).unwrap()
        })
    });
    rx.recv().unwrap();
    // The generator's own sinks would take these addresses: point a forwarder at the
    // standalone ones, and give the generator sinks of its own that get nothing.
    let (fwd, forwarded) = forwarder_counted(sinks.clone(), Transport::Framed, Faults::default());
    let mut c = thrift_config(fwd, sink_addrs(2), 32);
    c.duration = Duration::from_millis(100);
    // The generator's own sinks get nothing here: no point waiting for them.
    c.drain = Duration::from_millis(10);
    let r = run_thrift(&c, None).unwrap();
    // Until the forwarder has passed everything on, then a moment for the sinks to read it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while forwarded.load(Ordering::SeqCst) < r.sent && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let s = handle.join().unwrap().unwrap();
    assert_eq!(s.delivered, r.sent, "{s:#?}");
    assert_eq!(
        (s.duplicated, s.reordered, s.corrupt, s.misrouted),
        (0, 0, 0, 0)
    );
    assert_eq!(s.sinks.iter().map(|c| c.connections).sum::<u64>(), 2);
    assert!(fastpath_bench::render_sinks(&s).contains("delivered"));
}

// ---- the official library reads what the generator sends -----------------------------

const DECODE_PY: &str = r#"
import sys, json
sys.path.insert(0, sys.argv[1])
from thrift.transport import TTransport
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TMessageType
from forwarder import Forwarder
data = open(sys.argv[2], 'rb').read()
mem = TTransport.TMemoryBuffer(data)
trans = TTransport.TFramedTransport(mem) if sys.argv[3] == 'framed' else mem
prot = TBinaryProtocol.TBinaryProtocol(trans, strictRead=True)
out = []
while True:
    if sys.argv[3] == 'framed':
        if mem.cstringio_buf.tell() == len(data):
            break
    elif trans.cstringio_buf.tell() == len(data):
        break
    name, mtype, seqid = prot.readMessageBegin()
    assert name == 'msg' and mtype == TMessageType.ONEWAY, (name, mtype)
    args = Forwarder.msg_args()
    # The payload is a Thrift string of arbitrary bytes (binary on the wire): read it as
    # bytes rather than decoding it as UTF-8.
    prot.readString = prot.readBinary
    args.read(prot)
    del prot.readString
    prot.readMessageEnd()
    out.append([seqid, args.key, args.payload.hex()])
print(json.dumps(out))
"#;

/// Listens as a "forwarder" that records the first bytes a client sends.
fn recorder(limit: usize) -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let rec = seen.clone();
    std::thread::spawn(move || {
        let mut first = true;
        for mut s in listener.incoming().flatten() {
            let (rec, keep) = (rec.clone(), first);
            first = false;
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    let mut r = rec.lock().unwrap();
                    if keep && r.len() < limit {
                        r.extend_from_slice(&buf[..n]);
                    }
                }
            });
        }
    });
    (addr, seen)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn thrift_messages_decode_with_apache_thrift() {
    let test = "thrift messages decode with apache thrift";
    let dir = tempfile::tempdir().unwrap();
    let gen = dir.path().join("gen");
    std::fs::create_dir(&gen).unwrap();
    let idl = root().join("examples/thrift/forwarder.thrift");
    let Some(python) = fastpath_testkit::thrift_py(test, &[idl.as_path()], &gen) else {
        return;
    };
    let script = dir.path().join("decode.py");
    std::fs::write(&script, DECODE_PY).unwrap();
    for (transport, name) in [
        (Transport::Framed, "framed"),
        (Transport::Unframed, "unframed"),
    ] {
        let n = 5;
        let (fwd, seen) = recorder(256 * 1024);
        let mut c = thrift_config(fwd, sink_addrs(n), 40);
        c.transport = transport;
        c.connections = 1;
        c.threads = 1;
        c.duration = Duration::from_millis(200);
        c.drain = Duration::from_millis(10);
        let r = run_thrift(&c, None).unwrap();
        assert!(r.sent > 0);
        let data = seen.lock().unwrap().clone();
        // Whole messages only: cut at the last one the recording holds.
        let wire = r.wire_bytes;
        let whole = data.len() / wire * wire;
        assert!(
            whole >= 2 * ring_len(n) * wire,
            "recorded {} bytes",
            data.len()
        );
        let file = dir.path().join(format!("{name}.bin"));
        std::fs::write(&file, &data[..whole]).unwrap();
        let out = Command::new(python)
            .arg(&script)
            .arg(&gen)
            .arg(&file)
            .arg(name)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let msgs: Vec<(i32, i32, String)> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(msgs.len(), whole / wire);
        let mut negative = false;
        for (i, (seqid, key, payload)) in msgs.iter().enumerate() {
            let slot = i % ring_len(n);
            assert_eq!(*seqid as usize, slot);
            assert_eq!(*key, key_of(slot, n));
            assert_eq!(key.rem_euclid(n as i32) as usize, i % n);
            negative |= *key < 0;
            let p = hex(payload);
            assert_eq!(p.len(), 40);
            assert_eq!(
                u32::from_be_bytes(p[..4].try_into().unwrap()),
                0,
                "client id"
            );
            assert_eq!(
                u64::from_be_bytes(p[4..12].try_into().unwrap()),
                i as u64,
                "sequence"
            );
            assert!(
                u64::from_be_bytes(p[12..STAMP].try_into().unwrap()) > 0,
                "send time"
            );
        }
        assert!(negative);
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
