//! The transport layer driven in memory with a toy transport: a one-line handshake, then
//! records of a 2-byte length and the bytes XOR 0x5A; a record of length 0 ends the stream.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::testing::{TestConn, TestWorker};
use crate::{
    Cidr, CloseReason, Handler, Io, Layers, Next, Opened, ProxyProtocol, Received, Transport,
    TransportError, TransportInfo, TransportSetup, Transported, Transports, Worker, ENCODE_AHEAD,
};

const HELLO: &[u8] = b"HELLO\n";
const WELCOME: &[u8] = b"WELCOME\n";
const BAD: &[u8] = b"ALERT\n";

#[derive(Default)]
struct Toy {
    established: bool,
    wire: Vec<u8>,
    records_sent: Arc<AtomicUsize>,
}

fn seal(plain: &[u8]) -> Vec<u8> {
    let mut out = (plain.len() as u16).to_be_bytes().to_vec();
    out.extend(plain.iter().map(|b| b ^ 0x5A));
    out
}

/// What a client makes of the records in `wire`: the plaintext, and whether the end came.
fn open_records(mut wire: &[u8]) -> (Vec<u8>, bool) {
    let mut plain = Vec::new();
    while wire.len() >= 2 {
        let len = u16::from_be_bytes([wire[0], wire[1]]) as usize;
        if len == 0 {
            return (plain, true);
        }
        plain.extend(wire[2..2 + len].iter().map(|b| b ^ 0x5A));
        wire = &wire[2 + len..];
    }
    (plain, false)
}

impl Transport for Toy {
    fn receive(&mut self, wire: &[u8], plain: &mut Vec<u8>) -> Result<Received, TransportError> {
        if !self.established {
            if wire.len() < HELLO.len() {
                return Ok(Received::default());
            }
            if &wire[..HELLO.len()] != HELLO {
                self.wire.extend_from_slice(BAD);
                return Err(TransportError {
                    message: "not a hello".into(),
                    kind: "bad_hello",
                });
            }
            self.established = true;
            self.wire.extend_from_slice(WELCOME);
            let rest = self.receive(&wire[HELLO.len()..], plain)?;
            return Ok(Received {
                taken: HELLO.len() + rest.taken,
                ended: rest.ended,
            });
        }
        let mut received = Received::default();
        let mut rest = wire;
        while rest.len() >= 2 {
            let len = u16::from_be_bytes([rest[0], rest[1]]) as usize;
            if len == 0 {
                received.taken += 2;
                received.ended = true;
                break;
            }
            if rest.len() < 2 + len {
                break;
            }
            plain.extend(rest[2..2 + len].iter().map(|b| b ^ 0x5A));
            received.taken += 2 + len;
            rest = &rest[2 + len..];
        }
        Ok(received)
    }

    fn send(&mut self, plain: &[u8]) -> Result<(), TransportError> {
        self.records_sent.fetch_add(1, Relaxed);
        self.wire.extend(seal(plain));
        Ok(())
    }

    fn take_wire(&mut self, wire: &mut Vec<u8>) {
        wire.append(&mut self.wire);
    }

    fn wants_wire(&self) -> bool {
        !self.wire.is_empty()
    }

    fn is_established(&self) -> bool {
        self.established
    }

    fn close(&mut self) {
        self.wire.extend_from_slice(&[0, 0]);
    }

    fn info(&self) -> TransportInfo {
        TransportInfo {
            server_name: Some("toy.example".into()),
            protocol: "TOY",
            ..TransportInfo::default()
        }
    }
}

#[derive(Default)]
struct ToySetup {
    records_sent: Arc<AtomicUsize>,
    outcomes: Mutex<Vec<Option<&'static str>>>,
}

impl TransportSetup for ToySetup {
    fn start(&self, _opened: &Opened) -> Box<dyn Transport> {
        Box::new(Toy {
            records_sent: Arc::clone(&self.records_sent),
            ..Toy::default()
        })
    }

    fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(5)
    }

    fn handshake_done(&self, _resumed: bool, failure: Option<&'static str>) {
        self.outcomes.lock().unwrap().push(failure);
    }
}

/// Echoes lines; "big N" answers N bytes from a file; "bye" closes; records what it saw of
/// the transport and the peers it was told of.
#[derive(Default)]
struct Lines {
    opened: usize,
    peers: Vec<std::net::SocketAddr>,
    server_names: Vec<Option<String>>,
    calls: usize,
    file: Option<Arc<std::fs::File>>,
}

impl Handler for Lines {
    type Conn = ();

    fn on_open(&mut self, opened: Opened, io: &mut Io<'_>) -> ((), Next) {
        self.opened += 1;
        self.peers.push(opened.peer());
        self.server_names.push(
            io.transport()
                .and_then(|t| t.server_name.as_deref().map(str::to_owned)),
        );
        io.set_deadline(Some(io.now() + Duration::from_secs(60)));
        ((), Next::Read)
    }

    fn on_ready(&mut self, _conn: &mut (), io: &mut Io<'_>) -> Next {
        self.calls += 1;
        while let Some(end) = io.input().data().iter().position(|&b| b == b'\n') {
            let line = io.input().data()[..end].to_vec();
            io.input_mut().consume(end + 1);
            if line == b"bye" {
                io.write(b"goodbye\n");
                return Next::Close;
            }
            if let Some(n) = line.strip_prefix(b"big ") {
                let n: u64 = std::str::from_utf8(n).unwrap().parse().unwrap();
                let file = Arc::clone(self.file.as_ref().unwrap());
                io.output_mut().push_file(file, 0, n);
                continue;
            }
            io.write(&line);
            io.write(b"\n");
        }
        if io.eof() {
            Next::Close
        } else {
            Next::Read
        }
    }

    fn on_timeout(&mut self, _conn: &mut (), _io: &mut Io<'_>) -> Next {
        Next::Close
    }

    fn on_close(&mut self, _conn: (), _reason: CloseReason, _worker: &mut Worker<'_>) {}
}

fn worker(setup: &Arc<ToySetup>) -> TestWorker<Transported<Lines>> {
    let setup: Arc<dyn TransportSetup> = Arc::clone(setup) as _;
    let proxy = Arc::new(ProxyProtocol {
        trusted: vec!["127.0.0.0/8".parse().unwrap(), "::1".parse().unwrap()],
        timeout: Duration::from_secs(3),
    });
    // Listener 0 is under the toy transport, listener 1 is plain, listener 2 expects a PROXY
    // header, listener 3 a PROXY header and then the toy transport.
    let transports = Transports::new(vec![
        Layers {
            proxy: None,
            transport: Some(Arc::clone(&setup)),
        },
        Layers::default(),
        Layers {
            proxy: Some(Arc::clone(&proxy)),
            transport: None,
        },
        Layers {
            proxy: Some(proxy),
            transport: Some(setup),
        },
    ]);
    TestWorker::new(Transported::new(Lines::default(), transports))
}

fn connect(worker: &mut TestWorker<Transported<Lines>>, listener: usize) -> TestConn {
    worker.connect_from(listener, "127.0.0.1:40000".parse().unwrap())
}

/// A client of listener 0 past its handshake, the server's answer to it read.
fn handshaken(worker: &mut TestWorker<Transported<Lines>>) -> TestConn {
    let client = connect(worker, 0);
    worker.send(client, HELLO);
    assert_eq!(worker.received(client), WELCOME);
    client
}

#[test]
fn the_handler_hears_of_a_connection_once_its_handshake_is_over() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = connect(&mut worker, 0);
    worker.send(client, &HELLO[..3]);
    assert_eq!(worker.handler().inner().opened, 0);
    assert_eq!(worker.received(client), b"");
    worker.send(client, &HELLO[3..]);
    assert_eq!(worker.received(client), WELCOME);
    assert_eq!(worker.handler().inner().opened, 1);
    assert_eq!(
        worker.handler().inner().server_names,
        [Some("toy.example".to_owned())]
    );
    assert_eq!(*setup.outcomes.lock().unwrap(), [None]);

    worker.send(client, &seal(b"one\ntwo\n"));
    let (plain, ended) = open_records(&worker.received(client));
    assert_eq!(plain, b"one\ntwo\n");
    assert!(!ended);
}

#[test]
fn layers_for_every_listener_reach_listeners_of_any_index() {
    let setup: Arc<dyn TransportSetup> = Arc::new(ToySetup::default());
    let transports = Transports::every_listener(Layers {
        proxy: None,
        transport: Some(setup),
    });
    assert!(transports.of(0).is_some() && transports.of(3).is_some());
    let mut worker = TestWorker::new(Transported::new(Lines::default(), transports));
    for listener in [0, 3] {
        let client = connect(&mut worker, listener);
        worker.send(client, HELLO);
        assert_eq!(worker.received(client), WELCOME, "listener {listener}");
        worker.send(client, &seal(b"line\n"));
        assert_eq!(open_records(&worker.received(client)).0, b"line\n");
    }
    assert_eq!(worker.handler().inner().opened, 2);
}

#[test]
fn a_handshake_under_way_when_the_stop_begins_is_finished_and_its_request_answered() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = connect(&mut worker, 0);
    worker.send(client, &HELLO[..3]);
    worker.drain();
    assert!(worker.is_open(client), "cut off mid-handshake");
    worker.send(client, &HELLO[3..]);
    assert_eq!(worker.received(client), WELCOME);
    assert_eq!(worker.handler().inner().opened, 1);
    worker.send(client, &seal(b"last\n"));
    assert_eq!(open_records(&worker.received(client)).0, b"last\n");
    // A PROXY header under way goes on too.
    let proxied = connect(&mut worker, 2);
    worker.send(proxied, b"PROXY TCP4 192.0.2.1 ");
    worker.drain();
    assert!(worker.is_open(proxied));
    worker.send(proxied, b"192.0.2.2 1000 80\r\nhello\n");
    assert_eq!(worker.handler().inner().opened, 2);
}

#[test]
fn bytes_that_complete_no_record_do_not_call_the_handler() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = handshaken(&mut worker);
    let calls = worker.handler().inner().calls;
    let record = seal(b"split\n");
    for byte in &record[..record.len() - 1] {
        worker.send(client, std::slice::from_ref(byte));
    }
    assert_eq!(worker.handler().inner().calls, calls);
    worker.send(client, &record[record.len() - 1..]);
    assert_eq!(worker.handler().inner().calls, calls + 1);
    assert_eq!(open_records(&worker.received(client)).0, b"split\n");
}

#[test]
fn a_handshake_that_stalls_ends_at_its_timeout_unheard_by_the_handler() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = connect(&mut worker, 0);
    worker.send(client, b"HEL");
    worker.advance(Duration::from_secs(4));
    assert!(worker.is_open(client));
    worker.advance(Duration::from_secs(2));
    assert!(!worker.is_open(client));
    assert_eq!(worker.handler().inner().opened, 0);
    assert_eq!(*setup.outcomes.lock().unwrap(), [Some("timeout")]);
}

#[test]
fn a_broken_handshake_gets_the_transport_s_answer_and_the_connection_closes() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = connect(&mut worker, 0);
    worker.send(client, b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(worker.received(client), BAD);
    assert!(worker.ended_to_peer(client));
    assert_eq!(worker.handler().inner().opened, 0);
    assert_eq!(*setup.outcomes.lock().unwrap(), [Some("bad_hello")]);
}

#[test]
fn closing_sends_the_end_of_stream_after_the_last_record() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = handshaken(&mut worker);
    worker.send(client, &seal(b"bye\n"));
    let (plain, ended) = open_records(&worker.received(client));
    assert_eq!(plain, b"goodbye\n");
    assert!(ended, "the end of stream follows the last record");
    assert!(!worker.is_open(client));
}

#[test]
fn the_peer_s_end_of_stream_is_the_handler_s_end_of_input() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = handshaken(&mut worker);
    let mut bytes = seal(b"last\n");
    bytes.extend_from_slice(&[0, 0]);
    worker.send(client, &bytes);
    let (plain, ended) = open_records(&worker.received(client));
    assert_eq!(plain, b"last\n");
    assert!(ended);
    assert!(!worker.is_open(client));
}

#[test]
fn a_file_is_encoded_as_the_peer_takes_it_in_records_that_grow() {
    let mut file = tempfile::tempfile().unwrap();
    let content: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
    file.write_all(&content).unwrap();
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    worker.handler().inner().file = Some(Arc::new(file));
    let client = handshaken(&mut worker);
    // The client reads nothing: what is encoded stays near ENCODE_AHEAD.
    worker.window(client, Some(0));
    worker.send(client, &seal(b"big 400000\n"));
    let queued = worker.queued(client);
    assert!(queued >= ENCODE_AHEAD / 2, "{queued}");
    assert!(queued <= ENCODE_AHEAD + 4096, "{queued}");
    worker.window(client, None);
    let (plain, _) = open_records(&worker.received(client));
    assert_eq!(plain.len(), content.len());
    assert!(plain == content);
    // Small records first (about a segment each for 16 KiB), then 16 KiB ones.
    let records = setup.records_sent.load(Relaxed);
    let small = 16 * 1024 / 1400 + 1;
    let full = (400_000 - 16 * 1024) / (16 * 1024);
    assert!(records >= small + full, "{records}");
    assert!(records <= small + full + 40, "{records}");
}

#[test]
fn a_plain_listener_s_connections_pass_straight_to_the_handler() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = connect(&mut worker, 1);
    assert_eq!(worker.handler().inner().opened, 1);
    assert_eq!(worker.handler().inner().server_names, [None]);
    worker.send(client, b"plain\n");
    assert_eq!(worker.received(client), b"plain\n");
    assert!(setup.outcomes.lock().unwrap().is_empty());
}

const PROXY_V1: &[u8] = b"PROXY TCP4 192.0.2.7 198.51.100.1 51234 443\r\n";

/// A v2 header for 2001:db8::7 port 51234 (to [2001:db8::1]:443).
fn proxy_v2() -> Vec<u8> {
    let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    header.extend_from_slice(&[0x21, 0x21, 0, 36]);
    header.extend_from_slice(
        &"2001:db8::7"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    header.extend_from_slice(
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    header.extend_from_slice(&51234u16.to_be_bytes());
    header.extend_from_slice(&443u16.to_be_bytes());
    header
}

#[test]
fn a_proxy_header_names_the_client_for_the_handler() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = connect(&mut worker, 2);
    assert_eq!(worker.handler().inner().opened, 0);
    // Split anywhere, with the first request right behind it.
    let mut bytes = PROXY_V1.to_vec();
    bytes.extend_from_slice(b"first\n");
    worker.send(client, &bytes[..10]);
    assert_eq!(worker.handler().inner().opened, 0);
    worker.send(client, &bytes[10..]);
    assert_eq!(
        worker.handler().inner().peers,
        ["192.0.2.7:51234".parse().unwrap()]
    );
    assert_eq!(worker.received(client), b"first\n");

    let client = connect(&mut worker, 2);
    worker.send(client, &proxy_v2());
    worker.send(client, b"second\n");
    assert_eq!(
        worker.handler().inner().peers[1],
        "[2001:db8::7]:51234".parse().unwrap()
    );
    assert_eq!(worker.received(client), b"second\n");
}

#[test]
fn a_proxy_header_comes_before_the_handshake() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    let client = connect(&mut worker, 3);
    let mut bytes = PROXY_V1.to_vec();
    bytes.extend_from_slice(HELLO);
    bytes.extend_from_slice(&seal(b"over tls\n"));
    worker.send(client, &bytes);
    let received = worker.received(client);
    assert_eq!(&received[..WELCOME.len()], WELCOME);
    assert_eq!(open_records(&received[WELCOME.len()..]).0, b"over tls\n");
    assert_eq!(
        worker.handler().inner().peers,
        ["192.0.2.7:51234".parse().unwrap()]
    );
}

#[test]
fn no_valid_proxy_header_or_an_untrusted_source_ends_the_connection() {
    let setup = Arc::new(ToySetup::default());
    let mut worker = worker(&setup);
    // Not a header.
    let client = connect(&mut worker, 2);
    worker.send(client, b"GET / HTTP/1.1\r\n\r\n");
    assert!(!worker.is_open(client));
    // A malformed one.
    let client = connect(&mut worker, 2);
    worker.send(client, b"PROXY TCP4 300.1.2.3 1.2.3.4 1 2\r\n");
    assert!(!worker.is_open(client));
    // One that never ends.
    let client = connect(&mut worker, 2);
    worker.send(client, b"PROXY TCP4 ");
    worker.send(client, &[b'1'; crate::PROXY_HEADER_MAX]);
    assert!(!worker.is_open(client));
    // One that stalls: closed at the header timeout.
    let client = connect(&mut worker, 2);
    worker.send(client, b"PROXY TCP4 192.0.2.7");
    worker.advance(Duration::from_secs(2));
    assert!(worker.is_open(client));
    worker.advance(Duration::from_secs(2));
    assert!(!worker.is_open(client));
    // From an address that is not a trusted balancer's.
    let client = worker.connect_from(2, "203.0.113.9:40000".parse().unwrap());
    assert!(!worker.is_open(client));
    assert_eq!(worker.handler().inner().opened, 0);
}

#[test]
fn address_blocks_hold_their_addresses() {
    let net: Cidr = "10.1.0.0/16".parse().unwrap();
    assert!(net.contains("10.1.2.3".parse().unwrap()));
    assert!(net.contains("::ffff:10.1.2.3".parse().unwrap()));
    assert!(!net.contains("10.2.0.1".parse().unwrap()));
    let one: Cidr = "2001:db8::1".parse().unwrap();
    assert!(one.contains("2001:db8::1".parse().unwrap()));
    assert!(!one.contains("2001:db8::2".parse().unwrap()));
    let all: Cidr = "0.0.0.0/0".parse().unwrap();
    assert!(all.contains("203.0.113.9".parse().unwrap()));
    assert!(!all.contains("::1".parse().unwrap()));
    assert!("10.0.0.0/33".parse::<Cidr>().is_err());
    assert!("example.com".parse::<Cidr>().is_err());
}

#[test]
fn the_proxy_header_fuzz_corpus_parses_as_its_names_say() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/proxy_header");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let data = std::fs::read(&path).unwrap();
        let parsed = crate::parse_proxy_header(&data);
        if name.starts_with("seed-bad-") {
            assert!(parsed.is_err(), "{name}: {parsed:?}");
        } else if name.starts_with("seed-") {
            let (length, _) = parsed
                .unwrap()
                .unwrap_or_else(|| panic!("{name}: incomplete"));
            assert!(length <= data.len(), "{name}");
        }
        seen += 1;
    }
    assert!(seen >= 8, "{seen} seeds in {}", dir.display());
}
