#!/usr/bin/env python3
"""Framework benchmark: Slick's two tables (seed 002, tables 3.2 and 3.3) on this machine, in
one run, against real peers built by bench/peers/framework/build.sh.

  * Echo, buffer sizes 32 B .. 16 KiB: `fastpath echo` against an echo server on libevent
    2.1 (C, single-threaded: the seed's user-space baseline) and one on tokio (multi-thread
    runtime, one worker per core it may use). With a binary that has the kernel path and
    run as root, two fastpath rows: `fastpath echo` (--kernel-path off) and
    `fastpath-kernel` (--kernel-path on: the echo done by a BPF sockmap program).
  * Forwarder, payloads 32 B .. 4 KiB, 2 and 4 destinations: `fastpath forward` (its kernel
    path is withdrawn, docs/framework.md) against a forwarder on libevent (the seed's baseline) and one on Apache Thrift's C++ library
    (TNonblockingServer, framed, its handler forwarding through generated clients).

Every run: the server under test alone on CPU 0 (taskset), the load generator on CPU 1; over
the steady part of the run (its first and last moments left out) the busy time of both cores
from /proc/stat and the server's own user+system time from /proc (its whole process tree),
each divided by the messages: kernel work on loopback lands on whichever core runs the
softirq, so the server's own time alone undercounts and both cores' busy time (which
includes the load generator) bounds it from above.

The load generators are `fastpath bench echo` and `fastpath bench thrift` (`--client
fastpath`, the default when the binary has them); `--client python` uses small Python
clients built in here instead (far slower: they check the peers and this script, their
figures say nothing about the servers).

Usage: bench/framework.py [--quick] [--out FILE.md] [--json FILE] [--client fastpath|python]
[--duration SECONDS] [--tables echo,forward] [--echo-sizes 32,64,...] [--forward-sizes 32,...]
[--servers NAME,...]
[--no-build] [--peers-only]; FASTPATH_BIN selects
the binary (otherwise target/release/fastpath, built first). Only the Python standard library
is used. crates/bench/tests/peers.rs runs `--quick --client python --peers-only`.
"""

import argparse
import datetime
import json
import os
import platform
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import cpu_busy, cpu_times, loadavg, root_flag, tree_cpu_seconds, wait_port  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_SRC = os.path.join(REPO, "bench", "peers", "framework")
SERVER_CPU = 0
CLIENT_CPU = 1
ECHO_SIZES = [32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
FORWARD_PAYLOADS = [32, 64, 128, 256, 512, 1024, 2048, 4096]
QUICK_ECHO_SIZES = [64, 4096]
QUICK_FORWARD_PAYLOADS = [64, 1024]


class RunFailed(Exception):
    pass


def log(msg):
    print(f"[framework] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fmt_size(n):
    return f"{n // 1024} KiB" if n >= 1024 and n % 1024 == 0 else f"{n} B"


# --- the built-in Python load generators (--client python) ---------------------------------

def percentile(sorted_values, p):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, int(round(p / 100 * (len(sorted_values) - 1))))
    return sorted_values[i]


def py_echo(addr, size, conns, duration, json_path):
    """Closed loop on `conns` connections: send one message, wait for all of it back."""
    host, port = addr.rsplit(":", 1)
    msg = bytes(i % 251 for i in range(size))
    sel = selectors.DefaultSelector()
    state = {}
    errors = 0
    for _ in range(conns):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(struct.pack(">I", size))
        state[s] = [bytearray(), 0.0]
        sel.register(s, selectors.EVENT_READ)
    rtts = []
    start = time.monotonic()
    end = start + duration
    for s, st in state.items():
        st[1] = time.monotonic()
        s.sendall(msg)
    while state:
        now = time.monotonic()
        if now >= end:
            break
        for key, _ in sel.select(timeout=end - now):
            s = key.fileobj
            st = state[s]
            chunk = s.recv(size - len(st[0]))
            if not chunk:
                errors += 1
                sel.unregister(s)
                del state[s]
                continue
            st[0] += chunk
            if len(st[0]) < size:
                continue
            t = time.monotonic()
            rtts.append((t - st[1]) * 1e6)
            if st[0] != msg:
                errors += 1
            st[0] = bytearray()
            st[1] = t
            s.sendall(msg)
    elapsed = time.monotonic() - start
    for s in list(state):
        s.close()
    rtts.sort()
    n = len(rtts)
    report = {"messages": n, "messages_per_sec": n / elapsed, "bytes_per_sec": n * size / elapsed,
              "p50_us": percentile(rtts, 50), "p99_us": percentile(rtts, 99), "errors": errors}
    with open(json_path, "w") as f:
        json.dump(report, f)


def thrift_frame(key, payload):
    """A framed Thrift binary `msg(key, payload)` oneway call, as the official library writes
    it (strict header, seqid 0)."""
    body = (struct.pack(">II", 0x80010004, 3) + b"msg" + struct.pack(">i", 0)
            + b"\x08\x00\x01" + struct.pack(">i", key)
            + b"\x0b\x00\x02" + struct.pack(">I", len(payload)) + payload + b"\x00")
    return struct.pack(">I", len(body)) + body


def py_thrift(fwd, sinks, payload, conns, duration, json_path):
    """Sinks on `sinks`, then `conns` clients streaming a prerecorded ring of messages whose
    keys spread evenly over the destinations (negative ones included); every frame a sink
    gets must be one of the ring's and meant for that sink."""
    n = len(sinks)
    ring = []  # (client, frames)
    expected_sink = {}
    for c in range(conns):
        frames = []
        for i, key in enumerate(range(-2 * n, 2 * n)):
            head = struct.pack(">HH", c, i)
            body = (head * (payload // 4 + 1))[:payload]
            frame = thrift_frame(key, body)
            frames.append(frame)
            expected_sink[frame] = key % n
        ring.append(b"".join(frames))
    per_ring = 4 * n
    counts = {"delivered": 0, "corrupt": 0}
    lock = threading.Lock()
    listeners = []
    for addr in sinks:
        host, port = addr.rsplit(":", 1)
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, int(port)))
        ls.listen(64)
        listeners.append(ls)

    def sink_conn(i, conn):
        buf = bytearray()
        delivered = corrupt = 0
        while True:
            chunk = conn.recv(1 << 18)
            if not chunk:
                break
            buf += chunk
            pos = 0
            while len(buf) - pos >= 4:
                (length,) = struct.unpack_from(">I", buf, pos)
                if len(buf) - pos < 4 + length:
                    break
                frame = bytes(buf[pos:pos + 4 + length])
                pos += 4 + length
                if expected_sink.get(frame) == i:
                    delivered += 1
                else:
                    corrupt += 1
            del buf[:pos]
            with lock:
                counts["delivered"] += delivered
                counts["corrupt"] += corrupt
            delivered = corrupt = 0

    def sink_accept(i, ls):
        while True:
            try:
                conn, _ = ls.accept()
            except OSError:
                return
            threading.Thread(target=sink_conn, args=(i, conn), daemon=True).start()

    for i, ls in enumerate(listeners):
        threading.Thread(target=sink_accept, args=(i, ls), daemon=True).start()

    sent = [0] * conns
    stop = threading.Event()

    def client(c):
        host, port = fwd.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            while not stop.is_set():
                s.sendall(ring[c])
                sent[c] += per_ring

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(conns)]
    start = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(duration)
    with lock:
        delivered_in_window = counts["delivered"]
    elapsed = time.monotonic() - start
    stop.set()
    for t in threads:
        t.join(10)
    total = sum(sent)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with lock:
            if counts["delivered"] + counts["corrupt"] >= total:
                break
        time.sleep(0.05)
    with lock:
        delivered, corrupt = counts["delivered"], counts["corrupt"]
    report = {"sent": total, "delivered": delivered, "lost": max(0, total - delivered - corrupt),
              "duplicated": max(0, delivered + corrupt - total), "reordered": None,
              "corrupt": corrupt, "messages_per_sec": delivered_in_window / elapsed,
              "bytes_per_sec": delivered_in_window * payload / elapsed,
              "p50_us": None, "p99_us": None, "errors": corrupt}
    with open(json_path, "w") as f:
        json.dump(report, f)


# --- running one server against one load --------------------------------------------------

class Server:
    """A server under test pinned to SERVER_CPU, its stderr kept in a file."""

    def __init__(self, name, argv, port, err_path):
        self.name = name
        self.err_path = err_path
        self.err = open(err_path, "wb")
        self.proc = subprocess.Popen(["taskset", "-c", str(SERVER_CPU)] + argv,
                                     stdout=subprocess.DEVNULL, stderr=self.err,
                                     start_new_session=True)
        # Short waits in a loop, so a server that exits at once (bad arguments) fails the
        # run at once.
        end = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                self.err.close()
                raise RunFailed(f"{name} exited: {self.stderr()[-500:]}")
            try:
                wait_port(port, timeout=0.25)
                break
            except SystemExit:
                if time.monotonic() > end:
                    self.stop()
                    raise RunFailed(f"{name} does not listen on {port}: {self.stderr()[-500:]}")

    def stderr(self):
        if not self.err.closed:
            self.err.flush()
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.err.close()


def first(report, *paths):
    """The first of these fields (a path through nested objects) that the report has."""
    for path in paths:
        v = report
        for key in path.split("."):
            v = v.get(key) if isinstance(v, dict) else None
        if v is not None:
            return v
    return None


def normalize(report):
    """The figures the tables use, from the load generator's JSON: the names agreed on
    (messages_per_sec, bytes_per_sec, p50_us, p99_us, errors) or the ones `fastpath bench`
    writes; the whole report is kept under `client`."""
    errors = report.get("errors")
    if isinstance(errors, dict):
        errors = errors.get("total")
    out = {
        "messages_per_sec": first(report, "messages_per_sec", "delivered_per_s",
                                  "messages_per_s"),
        "bytes_per_sec": first(report, "bytes_per_sec", "payload_bytes_per_s", "bytes_per_s"),
        "p50_us": first(report, "p50_us", "rtt_us.p50", "latency_us.p50"),
        "p99_us": first(report, "p99_us", "rtt_us.p99", "latency_us.p99"),
        "errors": errors,
        "client": report,
    }
    for key in ("sent", "delivered", "lost", "duplicated", "reordered", "corrupt"):
        if key in report:
            out[key] = report[key]
    return out


def measure(server, client_argv, duration, json_path):
    """Runs the load generator on CLIENT_CPU against a running server; samples the cores and
    the server's CPU time over the steady part of the run. Returns the report with the
    measurements added."""
    if os.path.exists(json_path):
        os.remove(json_path)
    margin = min(0.5, duration / 5)
    samples = []

    def sample():
        samples.append((cpu_times(), tree_cpu_seconds(server.proc.pid)))

    start = time.monotonic()
    client = subprocess.Popen(["taskset", "-c", str(CLIENT_CPU)] + client_argv,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for at in (margin, duration - margin):
        delay = start + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if client.poll() is None:
            sample()
    try:
        _, err = client.communicate(timeout=duration + 60)
    except subprocess.TimeoutExpired:
        client.kill()
        client.communicate()
        raise RunFailed("the load generator did not finish")
    if not os.path.exists(json_path):
        raise RunFailed(f"the load generator wrote no report (exit {client.returncode}): "
                        f"{err.strip()[-500:]}")
    with open(json_path) as f:
        report = normalize(json.load(f))
    report["client_exit"] = client.returncode
    if server.proc.poll() is not None:
        raise RunFailed(f"{server.name} exited during the run: {server.stderr()[-500:]}")
    if len(samples) == 2:
        (t0, s0), (t1, s1) = samples
        window = t1[0] - t0[0]
        busy = [cpu_busy(t0, t1, cpu) for cpu in (SERVER_CPU, CLIENT_CPU)]
        rate = report.get("messages_per_sec") or 0
        report["window_s"] = window
        report["server_core_busy"] = busy[0]
        report["client_core_busy"] = busy[1]
        report["server_cpu_s"] = s1 - s0
        if rate > 0 and window > 0 and None not in busy:
            # Busy fractions are rates too: core-seconds per second over messages per second.
            report["cpu_us_per_msg_all"] = (busy[0] + busy[1]) / rate * 1e6
            report["cpu_us_per_msg_server"] = (s1 - s0) / window / rate * 1e6
    return report


# --- the tables ----------------------------------------------------------------------------

def has_subcommand(binary, *words):
    try:
        return subprocess.run([binary, *words, "--help"], capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def bpf_capable():
    """Whether this process (and so the servers it starts) may load BPF sockmap programs."""
    try:
        with open("/proc/self/status") as f:
            caps = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return False
    has = lambda bit: caps & (1 << bit) != 0  # noqa: E731
    return has(12) and (has(39) or has(21))  # CAP_NET_ADMIN, CAP_BPF, CAP_SYS_ADMIN


def has_option(binary, words, option):
    """Whether `binary WORDS --help` lists `option`."""
    r = subprocess.run([binary, *words, "--help"], capture_output=True, text=True)
    return r.returncode == 0 and option in r.stdout


def client_argv(args, kind, target, size, conns, json_path, sinks=None):
    dur = f"{int(args.duration * 1000)}ms"
    if args.client == "fastpath":
        if kind == "echo":
            return [args.fastpath, "bench", "echo", target, "--size", str(size), "-c",
                    str(conns), "--duration", dur, "--json", json_path, "-q"]
        return [args.fastpath, "bench", "thrift", target, "--sinks", ",".join(sinks),
                "--payload", str(size), "-c", str(conns), "--duration", dur, "--json",
                json_path, "-q"]
    me = os.path.abspath(__file__)
    if kind == "echo":
        return [sys.executable, me, "_load-echo", target, str(size), str(conns),
                str(args.duration), json_path]
    return [sys.executable, me, "_load-thrift", target, ",".join(sinks), str(size), str(conns),
            str(args.duration), json_path]


def echo_servers(args):
    """(name, argv builder taking a port), for the servers that are there."""
    servers = []
    if args.fastpath_echo:
        # With the kernel path in the binary, user space and kernel are two rows of one run.
        off = ["--kernel-path", "off"] if args.fastpath_kernel else []
        servers.append(("fastpath echo", lambda p: [
            args.fastpath, "echo", "--listen", f"127.0.0.1:{p}", "--workers", "1",
            *off, *args.fastpath_model, *args.root]))
    if args.fastpath_kernel:
        servers.append(("fastpath-kernel", lambda p: [
            args.fastpath, "echo", "--listen", f"127.0.0.1:{p}", "--workers", "1",
            "--kernel-path", "on", *args.fastpath_model, *args.root]))
    servers.append(("libevent", lambda p: [os.path.join(args.peers, "libevent_echo"), str(p)]))
    servers.append(("tokio", lambda p: [os.path.join(args.peers, "tokio_echo"), str(p)]))
    return [s for s in servers if not args.servers or s[0] in args.servers]


def forward_servers(args):
    servers = []
    if args.fastpath_forward:
        servers.append(("fastpath forward", lambda p, to: [
            args.fastpath, "forward", "--listen", f"127.0.0.1:{p}", "--to", ",".join(to),
            "--workers", "1", *args.fastpath_model, *args.root]))
    servers.append(("libevent", lambda p, to: [
        os.path.join(args.peers, "libevent_forward"), str(p), *to]))
    servers.append(("thrift C++", lambda p, to: [
        os.path.join(args.peers, "thrift_forward"), str(p), *to]))
    return [s for s in servers if not args.servers or s[0] in args.servers]


def run_table(args, kind, tmp):
    rows = []
    if kind == "echo":
        sizes = args.echo_sizes or (QUICK_ECHO_SIZES if args.quick else ECHO_SIZES)
        configs = [(size, None) for size in sizes]
        servers = echo_servers(args)
        conns = args.echo_conns
    else:
        sizes = args.forward_sizes or (QUICK_FORWARD_PAYLOADS if args.quick else FORWARD_PAYLOADS)
        configs = [(size, nsinks) for nsinks in args.sinks for size in sizes]
        servers = forward_servers(args)
        conns = args.forward_conns
    for size, nsinks in configs:
        for name, build in servers:
            port = free_port()
            target = f"127.0.0.1:{port}"
            json_path = os.path.join(tmp, "report.json")
            # The machine may be shared: the load average before each run tells.
            row = {"table": kind, "server": name, "size": size, "sinks": nsinks,
                   "conns": conns, "loadavg_before": loadavg()[0]}
            label = f"{kind} {fmt_size(size)} {name}" + (f" ({nsinks} sinks)" if nsinks else "")
            log(label)
            try:
                if kind == "echo":
                    argv, sinks = build(port), None
                else:
                    sinks = [f"127.0.0.1:{free_port()}" for _ in range(nsinks)]
                    argv = build(port, sinks)
                server = Server(name, argv, port, os.path.join(tmp, "server.err"))
                try:
                    row.update(measure(server, client_argv(args, kind, target, size, conns,
                                                           json_path, sinks),
                                       args.duration, json_path))
                finally:
                    server.stop()
            except RunFailed as e:
                row["failed"] = str(e)
                log(f"  failed: {e}")
            rows.append(row)
    return rows


def num(v, fmt="{:,.0f}"):
    return "-" if v is None else fmt.format(v)


def pct(v):
    return "-" if v is None else f"{v * 100:.0f} %"


def markdown(kind, rows):
    if kind == "echo":
        head = ("| size | server | msg/s | MB/s | p50 µs | p99 µs | CPU µs/msg, both cores "
                "| CPU µs/msg, server | server core busy | errors |")
    else:
        head = ("| payload | sinks | server | msg/s | MB/s | p50 µs | p99 µs "
                "| CPU µs/msg, both cores | CPU µs/msg, server | server core busy "
                "| lost / dup / reordered / corrupt |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        first = f"| {fmt_size(r['size'])} |" + (f" {r['sinks']} |" if kind == "forward" else "")
        if "failed" in r:
            cells = head.count("|") - 1 - (3 if kind == "forward" else 2)
            why = " ".join(r["failed"].split())[:120].replace("|", "/")
            lines.append(f"{first} {r['server']} | failed: {why} |"
                         + " |" * (cells - 1))
            continue
        cells = [r["server"], num(r.get("messages_per_sec")),
                 num((r.get("bytes_per_sec") or 0) / 1e6, "{:,.1f}"),
                 num(r.get("p50_us")), num(r.get("p99_us")),
                 num(r.get("cpu_us_per_msg_all"), "{:.2f}"),
                 num(r.get("cpu_us_per_msg_server"), "{:.2f}"),
                 pct(r.get("server_core_busy"))]
        if kind == "echo":
            cells.append(num(r.get("errors")))
        else:
            cells.append(" / ".join(num(r.get(k)) for k in
                                    ("lost", "duplicated", "reordered", "corrupt")))
        lines.append(first + " " + " | ".join(cells) + " |")
    return "\n".join(lines)


def versions(args):
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True,
                                  timeout=10).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    tokio = "?"
    try:
        with open(os.path.join(PEERS_SRC, "tokio_echo", "Cargo.lock")) as f:
            lock = f.read()
        tokio = lock.split('name = "tokio"\nversion = "')[1].split('"')[0]
    except (OSError, IndexError):
        pass
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"kernel": platform.release(), "cpu": cpu, "cpus": os.cpu_count(),
            "libevent": out(["pkg-config", "--modversion", "libevent"]),
            "thrift": out(["thrift", "--version"]), "tokio": tokio,
            "fastpath": out([args.fastpath, "--version"]) if args.fastpath else "-",
            "client": args.client}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a short smoke run: two sizes per table, 2 sinks, 0.5 s runs")
    ap.add_argument("--duration", type=float, help="seconds per run (default 5, quick 0.5)")
    ap.add_argument("--client", choices=["fastpath", "python"],
                    help="load generator (default fastpath when it has echo and thrift modes)")
    ap.add_argument("--tables", default="echo,forward", help="echo, forward or both")
    ap.add_argument("--sinks", default=None, help="destination counts (default 2,4; quick 2)")
    ap.add_argument("--echo-conns", type=int, default=16)
    ap.add_argument("--forward-conns", type=int, default=8)
    ap.add_argument("--model", help="fastpath's --model (default: its own default)")
    ap.add_argument("--echo-sizes", help="echo buffer sizes, e.g. 32,64,4096 (default: all)")
    ap.add_argument("--forward-sizes", help="forwarder payloads, e.g. 32,512 (default: all)")
    ap.add_argument("--servers", help="only these rows, by name, e.g. 'fastpath echo,"
                    "fastpath-kernel' (default: every server that is there)")
    ap.add_argument("--peers", default=os.path.join(REPO, "target", "peers"),
                    help="where build.sh puts the peers")
    ap.add_argument("--no-build", action="store_true", help="use the peers already built")
    ap.add_argument("--peers-only", action="store_true",
                    help="leave fastpath's rows out (with --client python, no fastpath binary "
                    "is needed: the test of this script runs so)")
    ap.add_argument("--out", help="write the Markdown tables to this file too")
    ap.add_argument("--json", help="write every figure here (default: --out with .json, "
                    "else target/framework.json)")
    args = ap.parse_args()
    args.duration = args.duration or (0.5 if args.quick else 5.0)
    args.sinks = [int(s) for s in (args.sinks or ("2" if args.quick else "2,4")).split(",")]
    args.echo_sizes = [int(s) for s in args.echo_sizes.split(",")] if args.echo_sizes else None
    args.forward_sizes = ([int(s) for s in args.forward_sizes.split(",")]
                          if args.forward_sizes else None)
    args.servers = [s.strip() for s in args.servers.split(",")] if args.servers else None
    tables = [t for t in args.tables.split(",") if t]
    for t in tables:
        if t not in ("echo", "forward"):
            raise SystemExit(f"unknown table {t!r} (echo, forward)")
    if any(s < 1 for s in args.sinks):
        raise SystemExit("--sinks: at least one destination")
    if subprocess.run(["taskset", "-c", str(CLIENT_CPU), "true"]).returncode != 0:
        raise SystemExit(f"taskset cannot pin to CPU {CLIENT_CPU}: two CPUs are needed")

    args.fastpath = None
    if not (args.peers_only and args.client == "python"):
        args.fastpath = (os.environ.get("FASTPATH_BIN")
                         or os.path.join(REPO, "target/release/fastpath"))
        if not os.environ.get("FASTPATH_BIN"):
            subprocess.run(["cargo", "build", "--release", "-p", "fastpath"], cwd=REPO,
                           check=True)
    if not args.no_build:
        r = subprocess.run(["bash", os.path.join(PEERS_SRC, "build.sh"), args.peers])
        if r.returncode != 0:
            raise SystemExit("bench/peers/framework/build.sh failed (see above)")
    have = (lambda *words: has_subcommand(args.fastpath, *words)) if args.fastpath else (
        lambda *words: False)
    args.root = root_flag(args.fastpath) if args.fastpath else []
    args.fastpath_model = ["--model", args.model] if args.model else []
    args.fastpath_echo = not args.peers_only and have("echo")
    args.fastpath_forward = not args.peers_only and have("forward")
    # The in-kernel echo (fastpath-kernel row): a binary that has --kernel-path, and the
    # capabilities to load BPF programs (CAP_BPF or CAP_SYS_ADMIN, and CAP_NET_ADMIN).
    args.fastpath_kernel = (args.fastpath_echo and bpf_capable()
                            and has_option(args.fastpath, ["echo"], "--kernel-path"))
    bench_modes = have("bench", "echo") and have("bench", "thrift")
    if args.client is None:
        args.client = "fastpath" if bench_modes else "python"
    if args.client == "fastpath" and not bench_modes:
        raise SystemExit(f"{args.fastpath} has no `bench echo` / `bench thrift`: "
                         "use --client python")
    for sub, there in (("echo", args.fastpath_echo), ("forward", args.fastpath_forward)):
        if not there and not args.peers_only:
            log(f"{args.fastpath} has no `{sub}` subcommand: its rows are left out")
    log(f"load generator: {args.client}")

    tmp_dir = tempfile.TemporaryDirectory(prefix="framework-")
    tmp = tmp_dir.name
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"), "versions": versions(args),
               "duration_s": args.duration, "quick": args.quick, "rows": []}
    text = [f"Framework benchmark, {started:%Y-%m-%d %H:%M} UTC: server on CPU {SERVER_CPU}, "
            f"load generator ({args.client}) on CPU {CLIENT_CPU}, {args.duration:g} s per run. "
            + ", ".join(f"{k} {v}" for k, v in results["versions"].items() if k != "client")]
    for kind in tables:
        rows = run_table(args, kind, tmp)
        results["rows"].extend(rows)
        conns = args.echo_conns if kind == "echo" else args.forward_conns
        title = ("Echo (round trip per message)" if kind == "echo"
                 else "Thrift forwarder (oneway messages, delivered)")
        text.append(f"### {title}, {conns} connections\n\n" + markdown(kind, rows))
    text.append("MB/s: payload bytes one way. CPU µs/msg, both cores: the busy time of CPUs "
                f"{SERVER_CPU} and {CLIENT_CPU} from /proc/stat (load generator and kernel "
                "included) per message; server: the server's own user+system time per message "
                "(softirq work on its behalf may be missing); server core busy: CPU "
                f"{SERVER_CPU} not idle. fastpath runs with --workers 1; tokio's runtime sees "
                "one CPU, so one worker. The load average before each run is in the JSON.")
    if args.client == "python":
        text.append("Load generator: the built-in Python clients, far slower than the servers: "
                    "these figures check the setup, they do not compare the servers.")
    out = "\n\n".join(text) + "\n"
    print(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out)
    json_path = args.json or (os.path.splitext(args.out)[0] + ".json" if args.out
                              else os.path.join(REPO, "target", "framework.json"))
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    log(f"figures in {json_path}")
    tmp_dir.cleanup()
    failed = [r for r in results["rows"] if "failed" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_load-echo":
        a = sys.argv[2:]
        py_echo(a[0], int(a[1]), int(a[2]), float(a[3]), a[4])
    elif len(sys.argv) > 1 and sys.argv[1] == "_load-thrift":
        a = sys.argv[2:]
        py_thrift(a[0], a[1].split(","), int(a[2]), int(a[3]), float(a[4]), a[5])
    else:
        sys.exit(main())
