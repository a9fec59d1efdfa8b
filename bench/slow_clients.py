#!/usr/bin/env python3
"""Slow clients against a pool of processes: fastpath's prefork model against Apache's
prefork MPM, both with Apache's default pool (5 children at start, 5 to 10 idle, at most
256), in one run.

For each server and each count N of slow clients (0, 50 and 200 by default), a fresh
server is started and left to settle, then N clients connect at once and each sends part
of a request head (`GET /a.txt HTTP/1.1` and a `Host` line, never the blank line), so
each holds a child; then one normal client connects and sends a whole request. Measured:
the time from that client's connect to the end of its response, and how many children the
server has just after. Each measurement is repeated (--runs, a fresh server each time) and
the median and the worst are reported. The servers are pinned to CPU 0 and this script to
CPU 1, as in bench/models.py.

Usage: bench/slow_clients.py [--counts 0,50,200] [--runs 3] [--timeout 60]
[--baseline-bin PATH]; FASTPATH_BIN selects the binary (default target/release/fastpath),
--baseline-bin adds a second one (a build of the code before a change) measured the same
way. Prints a Markdown table.
Python 3 standard library only; needs apache2 (Debian's package: `apt-get install apache2`).
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ left in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (APACHE_MODULES, PEERS_DIR, find_program, publish_tree,  # noqa: E402
                   render, root_flag, wait_port)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = {"fastpath": 18271, "apache2": 18272, "fastpath-base": 18273}
LABEL = {"fastpath": "fastpath (prefork)", "apache2": "Apache (prefork MPM)",
         "fastpath-base": "fastpath (prefork), baseline"}
SERVER_CPU = "0"
CLIENT_CPU = 1
# How long a fresh server is left before the slow clients come, so both start from their
# whole start pool (5 children, forked after the port is open) and not from a pool still
# being forked.
SETTLE = 1.5

FASTPATH = """listen = ["127.0.0.1:{port}"]
model = "prefork"
root = "{root}"
[log]
access = "off"
"""

PARTIAL_HEAD = b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\n"
REQUEST = b"GET /a.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"


def children(pid):
    """Process ids whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(rest[1]) == pid:
            found.append(int(entry))
    return found


class Running:
    """A server process (and its process group) started for one measurement."""

    def __init__(self, name, cmd, work):
        self.name = name
        log = open(os.path.join(work, f"{name}.log"), "ab")
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU] + cmd, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_port(PORTS[name])

    def pool_parent(self):
        """The process that forks the children: the server itself (taskset execs it)."""
        return self.proc.pid

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass


def fastpath_cmd(name, binary, work, root):
    conf = os.path.join(work, f"{name}.toml")
    with open(conf, "w") as f:
        f.write(FASTPATH.format(port=PORTS[name], root=root))
    return [binary, "serve", "--config", conf] + root_flag(binary)


def apache_cmd(work, root):
    binary = find_program("apache2")
    if not binary:
        raise SystemExit("apache2 is not installed (apt-get install apache2)")
    run_dir = os.path.join(work, "apache2-prefork")
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "file_cache.conf"), "w") as f:
        f.write(f'CacheFile "{os.path.join(root, "a.txt")}"\n')
    conf = render(os.path.join(PEERS_DIR, "apache2-prefork.conf"),
                  {"WORK": work, "PORT": PORTS["apache2"], "ROOT": root,
                   "APACHE_MODULES": APACHE_MODULES},
                  os.path.join(run_dir, "apache2.conf"))
    return [binary, "-d", run_dir, "-f", conf, "-DFOREGROUND"]


def normal_request(port, timeout):
    """Seconds from connect to the end of a whole response; raises on a wrong answer."""
    started = time.monotonic()
    conn = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    conn.sendall(REQUEST)
    data = b""
    while True:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    took = time.monotonic() - started
    conn.close()
    if not data.startswith(b"HTTP/1.1 200") or not data.endswith(b"hello\n"):
        raise RuntimeError(f"unexpected answer: {data[:200]!r}")
    return took


def measure(name, cmd, work, count, timeout):
    """One fresh server, `count` slow clients, one normal request: (seconds, children)."""
    server = Running(name, cmd, work)
    slow = []
    try:
        time.sleep(SETTLE)
        normal_request(PORTS[name], timeout)  # the server answers at all
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", PORTS[name]), timeout=timeout)
            s.sendall(PARTIAL_HEAD)
            slow.append(s)
        took = normal_request(PORTS[name], timeout)
        pool = len(children(server.pool_parent()))
        return took, pool
    finally:
        for s in slow:
            s.close()
        server.stop()


def fmt_ms(seconds):
    ms = seconds * 1000
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.1f} ms"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="0,50,200", help="slow clients per measurement")
    parser.add_argument("--runs", type=int, default=3, help="measurements per count and server")
    parser.add_argument("--timeout", type=float, default=60, help="seconds a request may take")
    parser.add_argument("--baseline-bin", metavar="PATH",
                        help="a second fastpath binary (the code before a change) run the same way")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    binary = os.environ.get("FASTPATH_BIN", os.path.join(REPO, "target/release/fastpath"))
    if not os.path.exists(binary):
        raise SystemExit(f"{binary} not found: build it (cargo build --release -p fastpath) "
                         "or set FASTPATH_BIN")
    os.sched_setaffinity(0, {CLIENT_CPU})

    work = tempfile.mkdtemp(prefix="fastpath-slow-")
    os.chmod(work, 0o755)  # Apache's children run as nobody
    try:
        root = os.path.join(work, "root")
        os.makedirs(root)
        with open(os.path.join(root, "a.txt"), "w") as f:
            f.write("hello\n")
        publish_tree(root)
        servers = [("fastpath", fastpath_cmd("fastpath", binary, work, root))]
        if args.baseline_bin:
            servers.append(("fastpath-base",
                            fastpath_cmd("fastpath-base", args.baseline_bin, work, root)))
        servers.append(("apache2", apache_cmd(work, root)))
        rows = []
        for name, cmd in servers:
            for count in counts:
                runs = [measure(name, cmd, work, count, args.timeout) for _ in range(args.runs)]
                times = [t for t, _ in runs]
                row = (LABEL[name], count, statistics.median(times), max(times),
                       max(p for _, p in runs))
                print(f"{row[0]}, {count} slow clients: " + ", ".join(fmt_ms(t) for t in times),
                      file=sys.stderr)
                rows.append(row)
        print("| Server | Slow clients | Normal request (median) | Worst | Children after |")
        print("|---|---:|---:|---:|---:|")
        for label, count, median, worst, pool in rows:
            print(f"| {label} | {count} | {fmt_ms(median)} | {fmt_ms(worst)} | {pool} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
