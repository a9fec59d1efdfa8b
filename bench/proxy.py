#!/usr/bin/env python3
"""Proxy benchmark: fastpath's hand-over against nginx proxy_pass, to the same backend.

One run, on this machine's two cores:
  * the backend (nginx serving a 1 KiB file from memory, keep-alive) and the load generator
    (`fastpath bench`) share CPU 1; the proxies run on CPU 0, all started at once and
    measured one at a time, round after round (`--rounds`, medians reported);
  * each proxy keeps its backend connections alive (fastpath reuses them by design; nginx
    gets `proxy_http_version 1.1`, `keepalive 64` and an empty Connection header);
  * for each proxy: replies/s, p50 and p99 latency, the proxy's own CPU time per request
    (user+sys of its whole process tree from /proc, over the measured run), and CPU 0's
    busy time per request (network work the kernel does while the proxy sleeps included);
  * the same for fastpath with its backend response cache on, asking for a copy of the file
    the backend marks `Cache-Control: max-age=600`: the CPU per request of a cache hit;
  * then the isolation check: fastpath's static requests/s alone, and again while 64
    connections wait on a backend that takes a second to answer each request.

Results go to stdout and between the proxy markers in BENCHMARKS.md (unless --no-write).
Usage: bench/proxy.py [--duration 10] [--rounds 3] [--models epoll,uring] [--no-write];
FASTPATH_BIN selects the binary.
"""

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import cpu_busy, cpu_times, root_flag, wait_port  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")
PORTS = {"backend": 18251, "fastpath": 18252, "nginx": 18253, "slow": 18254}

NGINX_BACKEND = """daemon off; master_process off; worker_processes 1; pid {work}/backend.pid;
error_log {work}/backend.err warn; worker_rlimit_nofile 20000;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  open_file_cache max=100; server {{ listen 127.0.0.1:{port} backlog=4096; root {root};
    location /app/cached/ {{ expires 600s; }} }} }}
"""

NGINX_PROXY = """daemon off; master_process off; worker_processes 1; pid {work}/proxy.pid;
error_log {work}/proxy.err warn; worker_rlimit_nofile 20000;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  upstream backend {{ server 127.0.0.1:{backend}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port} backlog=4096;
    location / {{ proxy_pass http://backend; proxy_http_version 1.1;
      proxy_set_header Connection ""; proxy_buffering on; }} }} }}
"""

FASTPATH_PROXY = """workers = 1
root = "{root}"
[log]
access = "off"
[[backend]]
name = "app"
addresses = "127.0.0.1:{backend}"
max_connections = 1024
cache = {cache}
[[route]]
backend = "app"
prefix = "/app/"
"""




def cpu_of_tree(pid):
    """user+sys seconds of a process and all its descendants."""
    total = 0
    pids = [pid]
    seen = set()
    while pids:
        p = pids.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    pids.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / CLK_TCK




def bench(binary, url, duration, connections=64):
    out = subprocess.run(
        ["taskset", "-c", "1", binary, "bench", "-t", "1", "-q", "--json",
         "-c", str(connections), "-d", f"{duration}s", url],
        capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def measure(binary, pid, url, duration):
    bench(binary, url, 1)  # warm up: connections to the backend are open
    before = cpu_of_tree(pid)
    core_before = cpu_times()
    result = bench(binary, url, duration)
    core_after = cpu_times()
    used = cpu_of_tree(pid) - before
    replies = max(result["replies"], 1)
    # The proxy's core, whatever ran on it: the kernel's network work for a socket is not
    # always charged to the process (softirq work that runs while the process sleeps is
    # charged to nobody), so the process's own time can flatter a proxy that idles more.
    busy = cpu_busy(core_before, core_after, 0) or 0.0
    core_used = busy * (core_after[0] - core_before[0])
    return {
        "rps": result["rps"],
        "p50_us": result["latency_us"]["p50"],
        "p99_us": result["latency_us"]["p99"],
        "errors": result["errors"]["total"],
        "non2xx": sum(v for k, v in result["status"].items() if k != "2xx"),
        "cpu_us": used / replies * 1e6,
        "core_us": core_used / replies * 1e6,
    }


def median_run(runs):
    """Each figure's median over the rounds (the rounds of one proxy differ by noise only)."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def slow_backend(port, stop):
    """Accepts connections and answers each request after one second."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(1024)
    server.settimeout(0.5)

    def serve(conn):
        # Keep-alive, one answer per request (the requests carry no body).
        with conn:
            try:
                while conn.recv(65536):
                    time.sleep(1)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nslow\n")
            except OSError:
                pass

    while not stop.is_set():
        try:
            conn, _ = server.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
    server.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--rounds", type=int, default=3,
                        help="measurements of each proxy, taken in turn; medians are reported")
    parser.add_argument("--models", default="epoll,uring",
                        help="fastpath models to measure, comma-separated (default: epoll,uring)")
    parser.add_argument("--baseline-bin", default=None, metavar="PATH",
                        help="also measure this fastpath binary on each model, as \"fastpath "
                             "(base)\": a change against the code it changes, in one run "
                             "(use with --no-write)")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    binary = os.environ.get("FASTPATH_BIN") or os.path.join(REPO, "target/release/fastpath")
    if not os.environ.get("FASTPATH_BIN"):
        subprocess.run(["cargo", "build", "--release", "-p", "fastpath"], cwd=REPO, check=True)
    for tool in ("nginx", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is required (apt-get install nginx util-linux)")
    work = tempfile.mkdtemp(prefix="fastpath-proxy.")
    os.chmod(work, 0o755)
    root = os.path.join(work, "www")
    os.makedirs(os.path.join(root, "app", "cached"))
    with open(os.path.join(root, "app", "1k.bin"), "wb") as f:
        f.write(os.urandom(1024))
    # The same answer marked cacheable (Cache-Control: max-age=600), for the rows where
    # fastpath answers from its backend response cache.
    shutil.copy(os.path.join(root, "app", "1k.bin"), os.path.join(root, "app", "cached", "1k.bin"))
    with open(os.path.join(root, "static.bin"), "wb") as f:
        f.write(os.urandom(1024))
    procs = []
    stop = threading.Event()
    try:
        def start(cmd, cpu, port):
            p = subprocess.Popen(["taskset", "-c", str(cpu)] + cmd,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            wait_port(port)
            return p

        def write(name, text):
            path = os.path.join(work, name)
            with open(path, "w") as f:
                f.write(text)
            return path

        start(["nginx", "-c", write("backend.conf", NGINX_BACKEND.format(
            work=work, port=PORTS["backend"], root=root))], 1, PORTS["backend"])
        config = write("fastpath.toml", FASTPATH_PROXY.format(
            root=root, backend=PORTS["backend"], cache="false"))
        cached_config = write("cached.toml", FASTPATH_PROXY.format(
            root=root, backend=PORTS["backend"], cache="true"))
        # Every proxy runs at once on CPU 0 (an idle one costs nothing), and the rounds take
        # them in turn, so a drift of the machine over the run touches all of them alike.
        targets = {}
        for i, model in enumerate(models):
            port = PORTS["fastpath"] + 10 + i
            fp = start([binary, "serve", "--config", config, "--model", model,
                        "--listen", f"127.0.0.1:{port}"] + root_flag(binary), 0, port)
            targets[f"fastpath {model}"] = (fp.pid, f"http://127.0.0.1:{port}/app/1k.bin")
            if args.baseline_bin:
                port += len(models)
                base_bin = os.path.abspath(args.baseline_bin)
                base = start([base_bin, "serve", "--config", config, "--model", model,
                              "--listen", f"127.0.0.1:{port}"] + root_flag(base_bin), 0, port)
                targets[f"fastpath (base) {model}"] = (
                    base.pid, f"http://127.0.0.1:{port}/app/1k.bin")
        # Answers from the backend response cache: every request after the first is a hit.
        for i, model in enumerate(models):
            port = PORTS["fastpath"] + 30 + i
            fp = start([binary, "serve", "--config", cached_config, "--model", model,
                        "--listen", f"127.0.0.1:{port}"] + root_flag(binary), 0, port)
            targets[f"fastpath {model}, cache hits"] = (
                fp.pid, f"http://127.0.0.1:{port}/app/cached/1k.bin")
            if args.baseline_bin:
                port += len(models)
                base_bin = os.path.abspath(args.baseline_bin)
                base = start([base_bin, "serve", "--config", cached_config, "--model", model,
                              "--listen", f"127.0.0.1:{port}"] + root_flag(base_bin), 0, port)
                targets[f"fastpath (base) {model}, cache hits"] = (
                    base.pid, f"http://127.0.0.1:{port}/app/cached/1k.bin")
        ng = start(["nginx", "-c", write("proxy.conf", NGINX_PROXY.format(
            work=work, port=PORTS["nginx"], backend=PORTS["backend"]))], 0, PORTS["nginx"])
        targets["nginx"] = (ng.pid, f"http://127.0.0.1:{PORTS['nginx']}/app/1k.bin")
        runs = {name: [] for name in targets}
        for _ in range(args.rounds):
            for name, (pid, url) in targets.items():
                runs[name].append(measure(binary, pid, url, args.duration))
        results = {name: median_run(r) for name, r in runs.items()}

        # Isolation: static speed alone, then with 64 requests parked on a slow backend.
        threading.Thread(target=slow_backend, args=(PORTS["slow"], stop), daemon=True).start()
        wait_port(PORTS["slow"])
        iso_conf = write("iso.toml", FASTPATH_PROXY.format(
            root=root, backend=PORTS["slow"], cache="false"))
        iso = start([binary, "serve", "--config", iso_conf, "--listen", "127.0.0.1:18255"]
                    + root_flag(binary), 0, 18255)
        alone = measure(binary, iso.pid, "http://127.0.0.1:18255/static.bin", args.duration)
        slow_load = subprocess.Popen(
            ["taskset", "-c", "1", binary, "bench", "-t", "1", "-q", "--json", "-c", "64",
             "-d", f"{args.duration + 4}s", "--timeout", "10s", "http://127.0.0.1:18255/app/x"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(2)
        loaded = measure(binary, iso.pid, "http://127.0.0.1:18255/static.bin", args.duration)
        slow_result = json.loads(slow_load.communicate()[0])
    finally:
        stop.set()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)

    n = results["nginx"]
    best = min((k for k in results
                if k != "nginx" and "(base)" not in k and "cache hits" not in k),
               key=lambda k: results[k]["cpu_us"])
    f = results[best]
    lines = [
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"`bench/proxy.py --duration {args.duration} --rounds {args.rounds}` (each figure the median "
        f"of {args.rounds} measurements, the proxies taken in turn), "
        f"{os.cpu_count()} cores, kernel {os.uname().release}. Proxies on CPU 0 (fastpath with one worker "
        "per model, and nginx with one worker process; all running, measured in turn); backend (nginx, 1 KiB file) and "
        "`fastpath bench -c 64` on CPU 1. Process CPU is the proxy's own user+sys per request; "
        "core CPU is everything that kept CPU 0 from idling, per request (from /proc/stat's "
        "idle time), which also counts the kernel's network work done for the proxy while "
        "it slept. The cache-hit rows ask fastpath, with `cache = true`, for the same file "
        "marked `Cache-Control: max-age=600` by the backend: every answer but the first comes "
        "from its backend response cache (nginx's row is proxied, without `proxy_cache`).",
        "",
        "| proxy | replies/s | p50 | p99 | process CPU µs/request | ÷ nginx | core CPU µs/request "
        "| ÷ nginx | errors |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | {r['rps']:,.0f} | {r['p50_us']:,.0f} µs | {r['p99_us']:,.0f} µs | "
                     f"{r['cpu_us']:.1f} | {r['cpu_us'] / n['cpu_us']:.2f}× | "
                     f"{r['core_us']:.1f} | {r['core_us'] / max(n['core_us'], 1e-9):.2f}× | "
                     f"{r['errors'] + r['non2xx']} |")
    met = f["cpu_us"] <= 0.7 * n["cpu_us"] and f["core_us"] <= 0.7 * n["core_us"]
    lines += [
        "",
        f"Target: at most 0.7× nginx's CPU per proxied request, counted both ways: "
        f"**{'met' if met else 'not met'}** ({best}: process {f['cpu_us'] / n['cpu_us']:.2f}×, "
        f"core {f['core_us'] / max(n['core_us'], 1e-9):.2f}×).",
        "",
        "Static requests while a slow backend (1 s per answer) holds 64 proxied requests:",
        "",
        "| static 1 KiB on fastpath | replies/s | p99 | errors |",
        "|---|--:|--:|--:|",
        f"| alone | {alone['rps']:,.0f} | {alone['p99_us']:,.0f} µs | {alone['errors'] + alone['non2xx']} |",
        f"| with the slow backend loaded | {loaded['rps']:,.0f} | {loaded['p99_us']:,.0f} µs | "
        f"{loaded['errors'] + loaded['non2xx']} |",
        "",
        f"The slow requests meanwhile: {slow_result['replies']:,} answered, p50 {slow_result['latency_us']['p50'] / 1000:,.0f} ms, "
        f"p99 {slow_result['latency_us']['p99'] / 1000:,.0f} ms, {slow_result['errors']['total']} errors, "
        f"{sum(v for k, v in slow_result['status'].items() if k != '2xx')} answers other than 2xx.",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        path = os.path.join(REPO, "BENCHMARKS.md")
        with open(path) as fh:
            doc = fh.read()
        begin, end = "<!-- proxy:begin -->", "<!-- proxy:end -->"
        block = f"{begin}\n{text}\n{end}"
        if begin in doc and end in doc:
            doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
        else:
            doc = doc.rstrip() + "\n\n## Hand-over: proxied requests against nginx proxy_pass\n\n" + block + "\n"
        with open(path, "w") as fh:
            fh.write(doc)


if __name__ == "__main__":
    sys.exit(main())
