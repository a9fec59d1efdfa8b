#!/usr/bin/env python3
"""Checks the framework benchmark's peers (built by build.sh) against the protocols.

  * echo peers (libevent_echo, tokio_echo): after the 4-byte size header, 1 KiB messages
    come back byte for byte, on several connections at once; with --plain, without header;
  * forwarders (libevent_forward, thrift_forward): messages encoded by the official Apache
    Thrift Python library (code generated from examples/thrift/forwarder.thrift by the thrift
    compiler into a temporary directory) reach destination key mod N (Euclidean, so negative
    keys too) byte for byte and in order; the destinations start after the forwarder, as in
    the benchmark; a malformed message closes its client (libevent_forward says why on
    stderr, precisely: each way a message can be wrong is tried) and the forwarder goes on
    serving others. Sequence ids are kept too.

Usage: check.py BIN_DIR [--only NAME,...]. Prints one line per check; exit status 1 if any
failed. Run by crates/bench/tests/peers.rs.
"""

import argparse
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench import wait_port  # noqa: E402

IDL = os.path.join(REPO, "examples", "thrift", "forwarder.thrift")
TIMEOUT = 10


class CheckFailed(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peer:
    """A peer process with its stderr kept in a file."""

    def __init__(self, argv, port, tmp):
        self.err_path = os.path.join(tmp, f"{os.path.basename(argv[0])}-{port}.err")
        self.err = open(self.err_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.err)
        self.port = port
        try:
            wait_port(port, timeout=TIMEOUT)
        except SystemExit:
            self.stop()
            raise CheckFailed(f"{argv[0]} does not listen on {port}: {self.stderr()!r}")

    def stderr(self):
        self.err.flush()
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise CheckFailed(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def echo_session(port, size, count, plain, seed, errors):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not plain:
                s.sendall(struct.pack(">I", size))
            for i in range(count):
                msg = bytes((seed * 31 + i * 7 + j) % 251 for j in range(size))
                s.sendall(msg)
                back = recv_exact(s, size)
                if back != msg:
                    at = next(k for k in range(size) if back[k] != msg[k])
                    raise CheckFailed(f"message {i}: byte {at} differs")
            # Nothing more may come: the header is not echoed, nothing is sent twice.
            s.settimeout(0.2)
            try:
                extra = s.recv(1)
            except socket.timeout:
                extra = b""
            if extra:
                raise CheckFailed("extra bytes after the last echo")
    except (CheckFailed, OSError) as e:
        errors.append(f"connection {seed}: {e}")


def check_echo(binary, tmp, plain):
    port = free_port()
    argv = [binary] + (["--plain"] if plain else []) + [str(port)]
    peer = Peer(argv, port, tmp)
    try:
        errors = []
        threads = [threading.Thread(target=echo_session, args=(port, 1024, 50, plain, c, errors))
                   for c in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise CheckFailed("; ".join(errors))
        if not peer.alive():
            raise CheckFailed(f"exited: {peer.stderr()!r}")
    finally:
        peer.stop()


class Sinks:
    """Destinations that accept connections and keep every byte they receive."""

    def __init__(self, n):
        self.listeners = []
        self.data = [bytearray() for _ in range(n)]
        self.lock = threading.Lock()
        for _ in range(n):
            ls = socket.socket()
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", 0))
            self.listeners.append(ls)
        self.addrs = [f"127.0.0.1:{ls.getsockname()[1]}" for ls in self.listeners]

    def start(self):
        for i, ls in enumerate(self.listeners):
            ls.listen(16)
            threading.Thread(target=self._accept, args=(i, ls), daemon=True).start()

    def _accept(self, i, ls):
        while True:
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(i, conn), daemon=True).start()

    def _read(self, i, conn):
        with conn:
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                with self.lock:
                    self.data[i] += chunk

    def wait_for(self, expected):
        end = time.time() + TIMEOUT
        while time.time() < end:
            with self.lock:
                if all(len(d) >= len(e) for d, e in zip(self.data, expected)):
                    break
            time.sleep(0.02)
        time.sleep(0.1)  # anything extra would show now
        with self.lock:
            return [bytes(d) for d in self.data]

    def close(self):
        for ls in self.listeners:
            ls.close()


def thrift_encoder(tmp):
    """A function (key, payload, seqid) -> the framed message the official library sends
    (its generated client always sends sequence id 0; a forwarder must keep any)."""
    gen = os.path.join(tmp, "gen-py")
    os.makedirs(gen, exist_ok=True)
    subprocess.run(["thrift", "--gen", "py", "-out", gen, IDL], check=True)
    sys.path.insert(0, gen)
    from forwarder import Forwarder
    from thrift.protocol import TBinaryProtocol
    from thrift.Thrift import TMessageType
    from thrift.transport import TTransport

    def encode(key, payload, seqid=0):
        buf = TTransport.TMemoryBuffer()
        framed = TTransport.TFramedTransport(buf)
        prot = TBinaryProtocol.TBinaryProtocol(framed)
        if seqid == 0:
            Forwarder.Client(prot).msg(key, payload)
        else:
            prot.writeMessageBegin("msg", TMessageType.ONEWAY, seqid)
            Forwarder.msg_args(key=key, payload=payload).write(prot)
            prot.writeMessageEnd()
            framed.flush()
        return buf.getvalue()

    return encode


def describe_mismatch(got, want):
    if len(got) != len(want):
        return f"{len(got)} bytes arrived, {len(want)} expected"
    at = next(k for k in range(len(got)) if got[k] != want[k])
    return f"byte {at} differs"


def expect_closed(port, data, what):
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as bad:
        bad.sendall(data)
        try:
            closed = bad.recv(1) == b""
        except ConnectionResetError:
            closed = True
        except socket.timeout:
            closed = False
    if not closed:
        raise CheckFailed(f"{what} did not close its client")


def malformed_cases():
    """(frame, what libevent_forward says about it) for each way a message can be wrong."""
    def frame(body):
        return struct.pack(">I", len(body)) + body

    def head(name=b"msg", mtype=4):
        return struct.pack(">II", 0x80010000 | mtype, len(name)) + name + b"\0\0\0\0"

    key = b"\x08\x00\x01\0\0\0\1\0"
    return [
        (frame(b""), "frame too short for a message header"),
        (frame(b"\x80\x01\x00\x04"), "frame too short for a message header"),
        (struct.pack(">I", 0x7fffffff) + b"x" * 16, "frame larger than 16 MiB"),
        (frame(b"\x00\x00\x00\x03msg\x04\0\0\0\0" + key),
         "not a strict binary protocol message header"),
        (frame(head(mtype=2) + key), "message type is neither call nor oneway"),
        (frame(b"\x80\x01\x00\x04\xff\xff\xff\xff" + b"\0" * 12),
         "method name length out of the frame"),
        (frame(head() + b"\x08\x00"), "frame ends before the key"),
        (frame(head(b"nope") + key), "method is not msg"),
        (frame(head() + b"\x0b\x00\x02\0\0\0\0\0"), "first field is not 1: i32 key"),
    ]


def check_forward(binary, tmp, encode, strict_stderr):
    n = 3
    sinks = Sinks(n)
    port = free_port()
    # The forwarder starts first and the destinations listen only after, as in the benchmark.
    peer = Peer([binary, str(port)] + sinks.addrs, port, tmp)
    try:
        sinks.start()
        keys = [0, 1, 2, 3, 4, 5, -1, -2, -3, -4, 7, 2**31 - 1, -(2**31), 100, -100]
        sizes = [0, 1, 32, 100, 1024, 4096, 65536]
        messages = []
        for i, key in enumerate(keys * 3):
            size = sizes[i % len(sizes)]
            payload = bytes((i * 13 + j) % 256 for j in range(size)).decode("latin-1")
            # Sequence ids 0 (what the generated client sends) and others, negative included.
            seqid = 0 if i % 2 else i * 1000003 - 2**30
            messages.append((key, encode(key, payload, seqid)))
        expected = [bytearray() for _ in range(n)]
        for key, frame in messages:
            expected[key % n] += frame
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as c:
            # Some messages alone, then the rest in one write (several frames per read, and
            # frames cut across reads).
            for _, frame in messages[:5]:
                c.sendall(frame)
                time.sleep(0.01)
            c.sendall(b"".join(frame for _, frame in messages[5:]))
            got = sinks.wait_for(expected)
        for i in range(n):
            if got[i] != expected[i]:
                raise CheckFailed(f"destination {i}: {describe_mismatch(got[i], expected[i])}")

        # A malformed message: a frame with an unknown protocol version (0x8002) in its header.
        body = (b"\x80\x02\x00\x04" + b"\x00\x00\x00\x03msg" + b"\x00" * 4
                + b"\x08\x00\x01" + b"\x00" * 5)
        expect_closed(port, struct.pack(">I", len(body)) + body, "an unknown protocol version")
        if strict_stderr:
            if "not a strict binary protocol message header; closing it" not in peer.stderr():
                raise CheckFailed(f"stderr does not say why it closed: {peer.stderr()!r}")
            # Every other way a message can be wrong, each with its own message.
            for data, says in malformed_cases():
                expect_closed(port, data, f"a message where {says}")
                deadline = time.time() + TIMEOUT
                while f"{says}; closing it" not in peer.stderr() and time.time() < deadline:
                    time.sleep(0.02)
                if f"{says}; closing it" not in peer.stderr():
                    raise CheckFailed(f"stderr does not say {says!r}: {peer.stderr()!r}")
        if not peer.alive():
            raise CheckFailed(f"exited after a malformed message: {peer.stderr()!r}")

        # Still forwarding, for a new client.
        last = encode(-7, "after")
        expected[(-7) % n] += last
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as c:
            c.sendall(last)
            got = sinks.wait_for(expected)
        if got[(-7) % n] != expected[(-7) % n]:
            raise CheckFailed("a message after the malformed one: "
                              + describe_mismatch(got[(-7) % n], expected[(-7) % n]))
    finally:
        peer.stop()
        sinks.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("--only", help="comma-separated peer names")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    failed = passed = 0
    with tempfile.TemporaryDirectory(prefix="peers-check-") as tmp:
        encode = thrift_encoder(tmp)
        checks = [
            ("libevent_echo", lambda b: check_echo(b, tmp, plain=False)),
            ("libevent_echo --plain", lambda b: check_echo(b, tmp, plain=True)),
            ("tokio_echo", lambda b: check_echo(b, tmp, plain=False)),
            ("tokio_echo --plain", lambda b: check_echo(b, tmp, plain=True)),
            ("libevent_forward", lambda b: check_forward(b, tmp, encode, strict_stderr=True)),
            ("thrift_forward", lambda b: check_forward(b, tmp, encode, strict_stderr=False)),
        ]
        for name, check in checks:
            program = name.split()[0]
            if only and program not in only:
                continue
            try:
                check(os.path.join(args.bin_dir, program))
                print(f"ok   {name}", flush=True)
                passed += 1
            except (CheckFailed, OSError, subprocess.SubprocessError) as e:
                print(f"FAIL {name}: {e}", flush=True)
                failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
