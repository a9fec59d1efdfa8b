#!/usr/bin/env python3
"""Open many idle keep-alive HTTP/1.1 connections to one server and hold them.

Used by bench/bench.py for workload 5 (memory per idle connection), and with
--tls by bench/tls.py (memory per idle TLS connection). Each connection is
opened with a non-blocking connect (and with --tls a non-blocking handshake),
sends one GET, reads the whole response (so the server really holds a
kept-alive connection, past its accept and first request), and is then left
idle.

Protocol on stdin/stdout, one line each:
  prints  READY {json}    once every connection is open (or has failed)
  reads   check           prints CHECKED {json}: how many are still open
  reads   close           closes every connection and exits

Only the Python standard library is used.
"""

import argparse
import errno
import json
import resource
import selectors
import socket
import ssl
import sys
import time


class Conn:
    __slots__ = ("sock", "state", "buf")

    def __init__(self, sock):
        self.sock = sock
        self.state = "connect"
        self.buf = b""


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def parse_response(buf):
    """Returns (complete, status, keep_alive) for the bytes read so far."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False, None, None
    head = buf[:end].decode("latin-1").split("\r\n")
    parts = head[0].split(" ", 2)
    try:
        status = int(parts[1])
    except (IndexError, ValueError):
        return True, None, False
    length = 0
    keep_alive = head[0].startswith("HTTP/1.1")
    for line in head[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        value = value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection":
            if "close" in value:
                keep_alive = False
            elif "keep-alive" in value:
                keep_alive = True
    complete = len(buf) - (end + 4) >= length
    return complete, status, keep_alive


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--path", default="/1k.html")
    ap.add_argument("--in-flight", type=int, default=256,
                    help="connections being opened at the same time")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="seconds allowed for opening all connections")
    ap.add_argument("--tls", action="store_true", help="HTTPS: a TLS handshake first")
    ap.add_argument("--cafile", help="with --tls: the PEM roots to trust (default: no check)")
    ap.add_argument("--server-name", help="with --tls: the name sent and checked (default: --host)")
    args = ap.parse_args()
    tls = None
    if args.tls:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if args.cafile:
            tls.load_verify_locations(args.cafile)
        else:
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE

    limit = raise_nofile()
    if limit < args.count + 64:
        print("READY " + json.dumps({"error": f"RLIMIT_NOFILE is {limit}, too low for "
                                              f"{args.count} connections"}), flush=True)
        return 1

    request = (f"GET {args.path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\n"
               f"User-Agent: fastpath-bench-idle\r\n\r\n").encode()
    sel = selectors.DefaultSelector()
    held = []
    failures = {}
    to_open = args.count
    in_flight = 0
    start = time.monotonic()
    deadline = start + args.timeout

    def fail(conn, reason):
        nonlocal in_flight
        failures[reason] = failures.get(reason, 0) + 1
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        in_flight -= 1

    while (to_open or in_flight) and time.monotonic() < deadline:
        while to_open and in_flight < args.in_flight:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            to_open -= 1
            in_flight += 1
            conn = Conn(sock)
            err = sock.connect_ex((args.host, args.port))
            if err not in (0, errno.EINPROGRESS):
                fail(conn, "connect: " + errno.errorcode.get(err, str(err)))
                continue
            sel.register(sock, selectors.EVENT_WRITE, conn)
        for key, _ in sel.select(timeout=0.5):
            conn = key.data
            sock = conn.sock
            if conn.state == "connect":
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    fail(conn, "connect: " + errno.errorcode.get(err, str(err)))
                    continue
                if tls is not None:
                    sel.unregister(sock)
                    conn.sock = sock = tls.wrap_socket(
                        sock, server_hostname=args.server_name or args.host,
                        do_handshake_on_connect=False)
                    sel.register(sock, selectors.EVENT_WRITE, conn)
                    conn.state = "handshake"
            if conn.state == "handshake":
                try:
                    sock.do_handshake()
                except ssl.SSLWantReadError:
                    sel.modify(sock, selectors.EVENT_READ, conn)
                    continue
                except ssl.SSLWantWriteError:
                    sel.modify(sock, selectors.EVENT_WRITE, conn)
                    continue
                except (ssl.SSLError, OSError) as e:
                    fail(conn, f"handshake: {e}")
                    continue
            if conn.state in ("connect", "handshake"):
                try:
                    sock.send(request)
                except OSError as e:
                    fail(conn, "send: " + errno.errorcode.get(e.errno, str(e.errno)))
                    continue
                conn.state = "read"
                sel.modify(sock, selectors.EVENT_READ, conn)
            else:
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    continue
                except OSError as e:
                    fail(conn, "recv: " + errno.errorcode.get(e.errno, str(e.errno)))
                    continue
                if not data:
                    fail(conn, "closed before the response was complete")
                    continue
                conn.buf += data
                complete, status, keep_alive = parse_response(conn.buf)
                if not complete:
                    continue
                if status != 200:
                    fail(conn, f"status {status}")
                elif not keep_alive:
                    fail(conn, "server did not keep the connection alive")
                else:
                    sel.unregister(sock)
                    conn.buf = b""
                    held.append(sock)
                    in_flight -= 1
    if to_open or in_flight:
        failures["timed out while opening"] = to_open + in_flight
    for key in list(sel.get_map().values()):
        key.fileobj.close()

    ready = {"requested": args.count, "held": len(held), "failures": failures,
             "seconds": round(time.monotonic() - start, 3)}
    print("READY " + json.dumps(ready), flush=True)

    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "check":
            alive = 0
            closed = 0
            for sock in held:
                try:
                    # The socket's own recv: a TLS socket's refuses flags.
                    data = socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except BlockingIOError:
                    alive += 1
                    continue
                except OSError:
                    closed += 1
                    continue
                if data:
                    alive += 1  # unexpected bytes, but the connection is open
                else:
                    closed += 1
            print("CHECKED " + json.dumps({"alive": alive, "closed": closed}), flush=True)
        elif cmd == "close":
            break
    for sock in held:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
