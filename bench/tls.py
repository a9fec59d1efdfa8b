#!/usr/bin/env python3
"""HTTPS benchmark: fastpath's TLS (rustls, aws-lc-rs) against nginx (OpenSSL).

One run, on this machine's two cores:
  * one ECDSA P-256 certificate for `localhost` (openssl CLI: a CA and a leaf it signs), one
    document root with a 1 KiB and a 1 MiB file, for both servers;
  * nginx: one worker, TLS 1.3 only with TLS_AES_128_GCM_SHA256, session tickets on and
    `ssl_session_cache shared:SSL:10m`, `access_log off`, sendfile on (which TLS without
    kTLS cannot use: nginx reads the file and encrypts it, as fastpath does), and the
    suite's tuning (bench/peers/nginx.conf: open_file_cache, multi_accept); fastpath:
    one worker, `[tls] protocols = ["TLSv1.3"]`, on each model of --models; every server
    runs at once on CPU 0 and `fastpath bench` on CPU 1, which also pins the suite
    (`--tls-version 1.3 --tls-cipher TLS13_AES_128_GCM_SHA256`); the key exchange is
    X25519 for all (the client's first choice, and nginx's OpenSSL has no ML-KEM);
  * in interleaved rounds (--rounds, medians reported), for each server: full handshakes
    (a new connection per request, `Connection: close`), resumed handshakes (the same with
    `--tls-resume`), keep-alive requests for the 1 KiB file (64 connections) and for the
    1 MiB file (16 connections): replies/s and the server's own CPU time per request
    (user+sys of its process tree, from /proc), and CPU 0's busy time;
  * memory per idle TLS connection: each server started afresh, then N connections
    (--idle) opened by bench/idle_conns.py --tls, each after its handshake and one request,
    and held; the growth of the server's PSS and RSS (/proc/PID/smaps_rollup, status)
    divided by N, in every round.

Results go to stdout and between the tls markers in BENCHMARKS.md (unless --no-write).
Usage: bench/tls.py [--duration 5] [--rounds 3] [--models epoll,uring] [--idle 2000]
[--no-write]; FASTPATH_BIN selects the binary.
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (BenchError, cpu_busy, cpu_times, hold_with_client, loadavg,  # noqa: E402
                   root_flag, tree_cpu_seconds, tree_memory, wait_port)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
PORTS = {"nginx": 18461, "fastpath": 18462}
SUITE = ["--tls-version", "1.3", "--tls-cipher", "TLS13_AES_128_GCM_SHA256"]

# As bench/peers/nginx.conf tunes the suite's nginx (open_file_cache, accept settings), with
# TLS added.
NGINX = """daemon off; master_process off; worker_processes 1; pid {work}/nginx-{port}.pid;
error_log {work}/nginx-{port}.err warn; worker_rlimit_nofile 20000;
events {{ use epoll; worker_connections 10000; multi_accept on; accept_mutex off; }}
http {{ access_log off; server_tokens off; sendfile on; tcp_nopush on; tcp_nodelay on;
  open_file_cache max=10000 inactive=120s; open_file_cache_valid 120s;
  open_file_cache_min_uses 1; open_file_cache_errors on;
  keepalive_requests 10000000; keepalive_timeout 300s;
  ssl_protocols TLSv1.3; ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256;
  ssl_session_tickets on; ssl_session_cache shared:SSL:10m;
  server {{ listen 127.0.0.1:{port} ssl backlog=4096; server_name localhost; root {root};
    ssl_certificate {cert}; ssl_certificate_key {key}; }} }}
"""

FASTPATH = """workers = 1
root = "{root}"
tls_certificate = "{cert}"
tls_key = "{key}"
[log]
access = "off"
[tls]
protocols = ["TLSv1.3"]
"""

# (key, label, file, bench options): what each round measures on each server.
MEASURES = [
    ("full", "full handshakes", "1k.bin", ["-c", "32", "--no-keepalive"]),
    ("resumed", "resumed handshakes", "1k.bin", ["-c", "32", "--no-keepalive", "--tls-resume"]),
    ("ka1k", "keep-alive 1 KiB", "1k.bin", ["-c", "64"]),
    ("ka1m", "keep-alive 1 MiB", "1m.bin", ["-c", "16"]),
]


def make_certificate(work):
    """A CA and an ECDSA P-256 leaf for localhost that it signs (a self-signed leaf would be
    a CA certificate, which strict verifiers refuse as a server's)."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=work, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", "-new", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "30",
            "-subj", "/CN=fastpath bench CA")
    openssl("req", "-new", *ec, "-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=localhost")
    with open(os.path.join(work, "leaf.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "30", "-extfile", "leaf.ext", "-out", "cert.pem")
    return [os.path.join(work, n) for n in ("ca.pem", "cert.pem", "key.pem")]


def bench(binary, url, ca, duration, options):
    out = subprocess.run(
        ["taskset", "-c", "1", binary, "bench", "-t", "1", "-q", "--json", "-d", f"{duration}s",
         "--cacert", ca] + SUITE + options + [url],
        capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"fastpath bench {url} failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def measure(binary, pid, url, ca, duration, options):
    bench(binary, url, ca, 1, options)  # warm-up: caches, tickets, the allocator
    before = tree_cpu_seconds(pid)
    core_before = cpu_times()
    r = bench(binary, url, ca, duration, options)
    core_after = cpu_times()
    used = tree_cpu_seconds(pid) - before
    replies = max(r["replies"], 1)
    busy = cpu_busy(core_before, core_after, 0) or 0.0
    tls = r["tls"]
    return {
        "rps": r["rps"],
        "cpu_us": used / replies * 1e6,
        "core_us": busy * (core_after[0] - core_before[0]) / replies * 1e6,
        "busy": busy,
        "client_cpu_us": r["cpu_s"] / replies * 1e6,
        "errors": r["errors"]["total"] + sum(v for k, v in r["status"].items() if k != "2xx"),
        "full": tls["handshakes_full"],
        "resumed": tls["handshakes_resumed"],
        "conns": r["conns_established"],
        "negotiated": f"{tls['protocol']} {tls['cipher']} {tls['group']}",
    }


def idle_memory(start, name, count, ca):
    """Bytes of PSS and RSS per idle TLS connection: a fresh server, one request over TLS,
    then `count` connections held by bench/idle_conns.py --tls."""
    proc, port = start(name)
    try:
        subprocess.run(
            [sys.executable, os.path.join(BENCH_DIR, "idle_conns.py"), "--host", "localhost",
             "--port", str(port), "--count", "1", "--path", "/1k.bin", "--tls", "--cafile", ca],
            input="close\n", capture_output=True, text=True, check=True)
        time.sleep(0.5)
        before = tree_memory(proc.pid)

        def measure():
            time.sleep(1.0)
            return tree_memory(proc.pid)

        cmd = ["taskset", "-c", "1", sys.executable, os.path.join(BENCH_DIR, "idle_conns.py"),
               "--host", "localhost", "--port", str(port), "--count", str(count),
               "--path", "/1k.bin", "--in-flight", "64", "--timeout", "120", "--tls",
               "--cafile", ca]
        try:
            after, ready, held = hold_with_client(cmd, measure)
        except BenchError as e:
            raise SystemExit(f"{name}: {e}")
    finally:
        stop(proc)
    if held != count or ready.get("failures"):
        raise SystemExit(f"{name}: {held} of {count} idle TLS connections held: {ready}")
    return {"pss": (after["pss"] - before["pss"]) / held,
            "rss": (after["rss"] - before["rss"]) / held}


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def spread(values):
    """(max - min) / median of a figure's rounds: how much the rounds disagree."""
    m = statistics.median(values)
    return (max(values) - min(values)) / m if m else 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="measurements of each server, taken in turn; medians are reported")
    parser.add_argument("--models", default="epoll",
                        help="fastpath models to measure, comma-separated (e.g. epoll,uring)")
    parser.add_argument("--idle", type=int, default=2000,
                        help="idle TLS connections for the memory figure")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    binary = os.environ.get("FASTPATH_BIN") or os.path.join(REPO, "target/release/fastpath")
    if not os.environ.get("FASTPATH_BIN"):
        subprocess.run(["cargo", "build", "--release", "-p", "fastpath"], cwd=REPO, check=True)
    for tool in ("nginx", "openssl", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is required (apt-get install nginx openssl util-linux)")
    work = tempfile.mkdtemp(prefix="fastpath-tls.")
    os.chmod(work, 0o755)
    root = os.path.join(work, "www")
    os.makedirs(root)
    for name, size in (("1k.bin", 1024), ("1m.bin", 1 << 20)):
        with open(os.path.join(root, name), "wb") as f:
            f.write(os.urandom(size))
    ca, cert, key = make_certificate(work)
    with open(os.path.join(work, "fastpath.toml"), "w") as f:
        f.write(FASTPATH.format(root=root, cert=cert, key=key))
    names = [f"fastpath {m}" for m in models] + ["nginx"]
    procs = []

    def start(name, port=None):
        """Starts `name` on CPU 0 (on its own port, or `port`); returns (process, port)."""
        if name == "nginx":
            port = port or PORTS["nginx"]
            conf = os.path.join(work, f"nginx-{port}.conf")
            with open(conf, "w") as f:
                f.write(NGINX.format(work=work, port=port, root=root, cert=cert, key=key))
            cmd = ["nginx", "-c", conf]
        else:
            model = name.split()[1]
            port = port or PORTS["fastpath"] + 10 + models.index(model)
            cmd = [binary, "serve", "--config", os.path.join(work, "fastpath.toml"),
                   "--model", model, "--tls-listen", f"127.0.0.1:{port}"] + root_flag(binary)
        p = subprocess.Popen(["taskset", "-c", "0"] + cmd,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(p)
        wait_port(port)
        return p, port

    load_start = loadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    runs = {n: {m[0]: [] for m in MEASURES} for n in names}
    memory = {n: [] for n in names}
    try:
        servers = {n: start(n) for n in names}
        for rnd in range(args.rounds):
            for key_, label, path, options in MEASURES:
                for n in names:
                    proc, port = servers[n]
                    url = f"https://localhost:{port}/{path}"
                    r = measure(binary, proc.pid, url, ca, args.duration, options)
                    runs[n][key_].append(r)
                    print(f"round {rnd + 1} {label:20} {n:15} {r['rps']:>9,.0f}/s  "
                          f"{r['cpu_us']:7.1f} µs server CPU  busy {r['busy']:.0%}  "
                          f"full {r['full']} resumed {r['resumed']}  {r['negotiated']}"
                          + (f"  ERRORS {r['errors']}" if r["errors"] else ""), flush=True)
            # Memory on fresh servers (a loaded one has freed memory to reuse), on other ports.
            for i, n in enumerate(names):
                m = idle_memory(lambda name: start(name, 18480 + i), n, args.idle, ca)
                memory[n].append(m)
                print(f"round {rnd + 1} idle memory          {n:15} {m['pss']:,.0f} B PSS, "
                      f"{m['rss']:,.0f} B RSS per connection", flush=True)
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p)
        shutil.rmtree(work, ignore_errors=True)
    load_end = loadavg()

    med = {n: {k: {f: statistics.median(r[f] for r in rs) for f in rs[0] if f != "negotiated"}
               for k, rs in runs[n].items()} for n in names}
    mem = {n: {f: statistics.median(m[f] for m in memory[n]) for f in ("pss", "rss")}
           for n in names}
    def worst_spread(figure):
        return max(spread([r[figure] for r in rs]) for n in names for rs in runs[n].values())
    negotiated = sorted({r["negotiated"] for n in names for rs in runs[n].values() for r in rs})
    nginx = med["nginx"]
    lines = [
        f"Run {started:%Y-%m-%d %H:%M} UTC, `bench/tls.py --duration {args.duration} --rounds "
        f"{args.rounds} --models {','.join(models)} --idle {args.idle}` (each figure the median "
        f"of {args.rounds} rounds, the servers taken in turn), {os.cpu_count()} cores, kernel "
        f"{os.uname().release}, nginx {nginx_version()} with {openssl_version()}. Servers on "
        "CPU 0 (one worker each, all running, measured in turn), `fastpath bench -t 1` on CPU 1 "
        f"pinning {' '.join(SUITE)}; negotiated: {', '.join(negotiated)}. Handshakes: a new "
        "connection per request (1 KiB file, `Connection: close`, 32 at once), full or resumed "
        "with `--tls-resume` (session tickets); keep-alive: 64 connections for 1 KiB, 16 for "
        "1 MiB. Server CPU is the server's own user+sys per request (per handshake) from "
        "/proc; CPU 0 busy says whether the server's core was saturated (when it is not, the "
        "client's core was the limit, and the rates say little: the CPU per request still "
        "does). Load average "
        f"{load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end; the rounds of one "
        f"figure differ by up to {worst_spread('rps'):.0%} of their median for the rates and "
        f"{worst_spread('cpu_us'):.0%} for the server CPU per request.",
        "",
        "| measure | server | replies/s | ÷ nginx | server CPU µs/request | ÷ nginx | CPU 0 busy "
        "| client CPU µs/request | full / resumed handshakes | errors |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for key_, label, _, _ in MEASURES:
        for n in names:
            r = med[n][key_]
            lines.append(
                f"| {label} | {n} | {r['rps']:,.0f} | {r['rps'] / nginx[key_]['rps']:.2f}× | "
                f"{r['cpu_us']:.1f} | {r['cpu_us'] / nginx[key_]['cpu_us']:.2f}× | "
                f"{r['busy']:.0%} | {r['client_cpu_us']:.1f} | {r['full']:,.0f} / "
                f"{r['resumed']:,.0f} | {r['errors']:.0f} |")
    lines += ["", f"Memory per idle TLS connection ({args.idle:,} connections, each after its "
              "handshake and one request for the 1 KiB file; bench/idle_conns.py --tls, Python's "
              "ssl module, on CPU 1; growth of the server's PSS and RSS over the connections, on a "
              "freshly started server):", "",
              "| server | PSS bytes/connection | ÷ nginx | RSS bytes/connection | ÷ nginx |",
              "|---|--:|--:|--:|--:|"]
    for n in names:
        lines.append(f"| {n} | {mem[n]['pss']:,.0f} | {mem[n]['pss'] / mem['nginx']['pss']:.2f}× "
                     f"| {mem[n]['rss']:,.0f} | {mem[n]['rss'] / mem['nginx']['rss']:.2f}× |")
    best = min((n for n in names if n != "nginx"), key=lambda n: med[n]["ka1k"]["cpu_us"])
    f = med[best]

    def verdict(ok):
        return "**met**" if ok else "**not met**"

    def cap(m):
        """Handshakes per second of server CPU: what one core could do, client aside."""
        return 1e6 / m["cpu_us"]
    targets = [
        ("CPU per keep-alive 1 KiB TLS request ≤ 0.75× nginx",
         f["ka1k"]["cpu_us"] / nginx["ka1k"]["cpu_us"], 0.75, False),
        ("CPU per keep-alive 1 MiB TLS request ≤ 0.9× nginx",
         f["ka1m"]["cpu_us"] / nginx["ka1m"]["cpu_us"], 0.9, False),
        ("full handshakes/s ≥ 1.2× nginx", f["full"]["rps"] / nginx["full"]["rps"], 1.2, True),
        ("resumed handshakes/s ≥ 1.2× nginx",
         f["resumed"]["rps"] / nginx["resumed"]["rps"], 1.2, True),
        ("memory (PSS) per idle TLS connection ≤ 0.7× nginx",
         mem[best]["pss"] / mem["nginx"]["pss"], 0.7, False),
    ]
    lines += ["", f"Targets ({best}):", ""]
    for text, ratio, bound, at_least in targets:
        ok = ratio >= bound if at_least else ratio <= bound
        lines.append(f"- {text}: {ratio:.2f}×, {verdict(ok)}")
    lines.append(
        f"- the handshakes per second of server CPU (1 ÷ server CPU per handshake, what the "
        f"server's core would do were the client not the limit): full {cap(f['full']):,.0f} "
        f"against nginx's {cap(nginx['full']):,.0f} ({cap(f['full']) / cap(nginx['full']):.2f}×), "
        f"resumed {cap(f['resumed']):,.0f} against {cap(nginx['resumed']):,.0f} "
        f"({cap(f['resumed']) / cap(nginx['resumed']):.2f}×)")
    text = "\n".join(lines)
    print()
    print(text)
    if not args.no_write:
        path = os.path.join(REPO, "BENCHMARKS.md")
        with open(path) as fh:
            doc = fh.read()
        begin, end = "<!-- tls:begin -->", "<!-- tls:end -->"
        block = f"{begin}\n{text}\n{end}"
        if begin in doc and end in doc:
            doc = doc[:doc.index(begin)] + block + doc[doc.index(end) + len(end):]
        else:
            doc = doc.rstrip() + "\n\n## HTTPS: fastpath's TLS against nginx\n\n" + block + "\n"
        with open(path, "w") as fh:
            fh.write(doc)


def nginx_version():
    out = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr
    return out.strip().split("/")[-1]


def openssl_version():
    out = subprocess.run(["nginx", "-V"], capture_output=True, text=True).stderr
    for line in out.splitlines():
        if "running with" in line:
            return line.split("running with ")[1].rstrip(")").rsplit(" ", 3)[0]
        if line.startswith("built with"):
            return line[len("built with "):].rsplit(" ", 3)[0]
    return "OpenSSL"


if __name__ == "__main__":
    sys.exit(main())
