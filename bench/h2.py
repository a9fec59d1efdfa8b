#!/usr/bin/env python3
"""HTTP/2 benchmark: fastpath against nginx and h2o, h2c and h2 over TLS, with h2load.

One run, on this machine's two cores:
  * one document root for every server: the SPECweb96 file set of `fastpath bench
    make-docroot` (its 1 KiB file /dir00000/class1_0 is the 1 KiB file) and a 1 MiB file;
    one ECDSA P-256 certificate for `localhost` (a CA and a leaf it signs, as bench/tls.py
    makes them);
  * every server with one worker (process or thread), access logs off, two listeners: a
    plain one that takes HTTP/2 with prior knowledge (h2c) and a TLS one that offers h2 by
    ALPN, TLS 1.3 only:
      - nginx: `listen ... http2` (and `ssl http2`), `master_process off`, the suite's
        tuning (bench/peers/nginx.conf: open_file_cache, keepalive_requests) but sendfile
        off (see NGINX below), TLS_AES_128_GCM_SHA256 alone (`ssl_conf_command
        Ciphersuites`);
      - h2o: `num-threads: 1`, as bench/peers/h2o.conf, a plain listener (h2o takes the
        HTTP/2 preface there) and one with `ssl:` (`minimum-version: TLSv1.3`; h2o 2.2
        cannot restrict TLS 1.3's suites, so the client does);
      - fastpath: `workers = 1`, [[listen]] plain (HTTP/1 and h2c) and `tls = true`,
        `[tls] protocols = ["TLSv1.3"]`, on each model of --models;
    all running at once on CPU 0, measured in turn; h2load (one thread) on CPU 1, pinned to
    `--tls13-ciphers TLS_AES_128_GCM_SHA256` (the key exchange is X25519, h2load's first
    group, for all);
  * the cases, each over h2c and over TLS: the 1 KiB file with 1 stream per connection
    (64 connections), 10 streams (16 connections) and 100 streams (4 connections); the
    SPECweb96 mix (h2load -i with a list of 10,000 paths drawn in the mix's proportions,
    16 connections of 10 streams); the 1 MiB file (4 connections of 4 streams);
  * in interleaved rounds (--rounds, the servers' order turned each round, medians
    reported): a 1 s warm-up, then `h2load -D duration`; requests/s, the server's own CPU
    time per request (user+sys of its process tree from /proc, read before and after),
    CPU 0's busy time and h2load's CPU per request. Every h2load run must have every
    request done succeed with a 2xx status, or its failures are reported; before the
    rounds, curl fetches every file from every server over h2c and h2 and compares the
    bytes;
  * with --strace, after the rounds: system calls per request of each server on the 1 KiB
    file at 100 streams (strace -c -f on its process tree for --strace-duration seconds).

Results go to stdout and between the h2 markers in BENCHMARKS.md (unless --no-write).
Usage: bench/h2.py [--duration 5] [--rounds 3] [--models epoll,uring] [--strace]
[--no-write]; FASTPATH_BIN selects the binary.
"""

import argparse
import datetime
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import (FILE_1K, FILE_1M, SPEC_MANIFEST, cpu_busy, cpu_times,  # noqa: E402
                   loadavg, make_content, make_spec_docroot, port_in_use, process_tree,
                   publish_tree, read_manifest, root_flag, tracer_of, tree_cpu_seconds,
                   wait_port)
from tls import make_certificate, nginx_version, openssl_version, spread, stop  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_PORT = 18560
HOST = "127.0.0.1"
TLS13_CIPHER = "TLS_AES_128_GCM_SHA256"
MIX_URIS = 10000
MARK_BEGIN = "<!-- h2 results begin -->"
MARK_END = "<!-- h2 results end -->"

# As bench/tls.py's nginx (bench/peers/nginx.conf's tuning), with HTTP/2 on both listeners
# (nginx 1.22 says it on `listen`; from 1.25.1 `http2 on;` does) and sendfile off: with
# sendfile, nginx 1.22 writes an h2c response's HEADERS with writev and its DATA with
# sendfile, and with one stream per connection the second write waits for the client's
# delayed ACK (about 44 ms a request, 1,400 requests/s over 64 connections); without it
# nginx also spends less CPU per 1 KiB request at 100 streams (16 µs against 20) and about
# 10% more per 1 MiB one. Over TLS nginx cannot use sendfile anyway.
NGINX = """daemon off; master_process off; worker_processes 1; pid {work}/nginx.pid;
error_log {work}/nginx.err warn; worker_rlimit_nofile 20000;
events {{ use epoll; worker_connections 10000; multi_accept on; accept_mutex off; }}
http {{ access_log off; server_tokens off; sendfile off; tcp_nodelay on;
  types {{ text/html html; application/octet-stream bin; }}
  default_type application/octet-stream;
  open_file_cache max=10000 inactive=120s; open_file_cache_valid 120s;
  open_file_cache_min_uses 1; open_file_cache_errors on;
  keepalive_requests 10000000; keepalive_timeout 300s;
  ssl_protocols TLSv1.3; ssl_conf_command Ciphersuites {cipher};
  ssl_session_tickets on; ssl_session_cache shared:SSL:10m;
  server {{ {listen_plain} {listen_tls}
    server_name localhost; root {root};
    ssl_certificate {cert}; ssl_certificate_key {key}; }} }}
"""

# As bench/peers/h2o.conf, with a TLS listener. h2o takes HTTP/2 by ALPN on TLS and the
# preface on plain connections, the latter only with http1-upgrade-to-http2 on (its
# default, which the HTTP/1 suite turns off); it has no access log unless one is configured.
# No pid file (h2o writes it after dropping to nobody) and no OCSP stapling (a perl helper
# that would fetch it for a certificate without an OCSP address).
H2O = """user: nobody
error-log: {work}/h2o.err
num-threads: 1
max-connections: 16384
http1-request-timeout: 300
http1-upgrade-to-http2: ON
send-server-name: OFF
file.send-compressed: OFF
listen:
  host: {host}
  port: {plain}
listen:
  host: {host}
  port: {tls}
  ssl:
    certificate-file: {cert}
    key-file: {key}
    minimum-version: TLSv1.3
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /:
        file.dir: {root}
"""

FASTPATH = """workers = 1
root = "{root}"
tls_certificate = "{cert}"
tls_key = "{key}"

[[listen]]
address = "{host}:{plain}"

[[listen]]
address = "{host}:{tls}"
tls = true

[limits]
max_connections = 16384
max_requests_per_connection = 10000000

[timeouts]
keepalive = "300s"

[log]
access = "off"
error = "stderr"
level = "info"

[tls]
protocols = ["TLSv1.3"]
"""

# (key, label, URL path or None for the mix, h2load options).
CASES = [
    ("s1", "1 KiB, 1 stream × 64 conns", FILE_1K, ["-c", "64", "-m", "1"]),
    ("s10", "1 KiB, 10 streams × 16 conns", FILE_1K, ["-c", "16", "-m", "10"]),
    ("s100", "1 KiB, 100 streams × 4 conns", FILE_1K, ["-c", "4", "-m", "100"]),
    ("mix", "SPECweb96 mix, 10 streams × 16 conns", None, ["-c", "16", "-m", "10"]),
    ("1m", "1 MiB, 4 streams × 4 conns", FILE_1M, ["-c", "4", "-m", "4"]),
]
TRANSPORTS = [("h2c", "http"), ("h2", "https")]
STRACE_CASE = "s100"


def mix_paths(manifest, count):
    """`count` URL paths in the proportions of the manifest's weights (largest remainders),
    shuffled with a fixed seed, so that every server gets the same sequence."""
    with open(manifest) as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:] if line.strip()]
    weights = [(p, float(w)) for p, _size, _crc, w in rows]
    total = sum(w for _, w in weights)
    exact = [(p, w / total * count) for p, w in weights]
    counts = {p: int(x) for p, x in exact}
    short = count - sum(counts.values())
    for p, x in sorted(exact, key=lambda px: px[1] - int(px[1]), reverse=True)[:short]:
        counts[p] += 1
    paths = [p for p, n in counts.items() for _ in range(n)]
    random.Random(96).shuffle(paths)
    return paths


def parse_h2load(text):
    """The figures of h2load's summary."""
    out = {}
    m = re.search(r"finished in ([\d.]+)s, ([\d.]+) req/s", text)
    if m:
        out["seconds"], out["rps"] = float(m.group(1)), float(m.group(2))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, "
                  r"(\d+) failed, (\d+) errored, (\d+) timeout", text)
    if m:
        for k, v in zip(("total", "started", "done", "succeeded", "failed", "errored",
                         "timeout"), m.groups()):
            out[k] = int(v)
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text)
    if m:
        out["2xx"], out["3xx"], out["4xx"], out["5xx"] = map(int, m.groups())
    for key, label in (("alpn", "Application protocol"), ("tls", "TLS Protocol"),
                       ("cipher", "Cipher"), ("kex", "Server Temp Key")):
        m = re.search(rf"^{label}: (.+)$", text, re.M)
        if m:
            out[key] = m.group(1).strip()
    return out


def problems_of(r, scheme):
    """What is wrong with one h2load run: requests not done, done but not succeeded, failed,
    errored, timed out, not 2xx, or not HTTP/2 as asked."""
    if "done" not in r or "rps" not in r:
        return ["no h2load summary"]
    p = []
    if r["done"] == 0:
        p.append("no request done")
    if r["succeeded"] != r["done"]:
        p.append(f"{r['done'] - r['succeeded']} of {r['done']} done not succeeded")
    for k in ("failed", "errored", "timeout"):
        if r[k]:
            p.append(f"{r[k]} {k}")
    # Status codes count responses begun, also those of the streams in flight at the end.
    if r.get("2xx", 0) < r["succeeded"] or any(r.get(c, 0) for c in ("3xx", "4xx", "5xx")):
        p.append(f"status codes {r.get('2xx', 0)} 2xx, {r.get('3xx', 0)} 3xx, "
                 f"{r.get('4xx', 0)} 4xx, {r.get('5xx', 0)} 5xx")
    want = "h2c" if scheme == "http" else "h2"
    if r.get("alpn") != want:
        p.append(f"protocol {r.get('alpn')}, not {want}")
    return p


def h2load(target, options, duration, scheme):
    """One h2load run on CPU 1; returns its figures, its own CPU time and its problems."""
    cmd = ["taskset", "-c", "1", "h2load", "-t", "1", "-D", str(duration)] + options
    if scheme == "https":
        cmd += ["--tls13-ciphers", TLS13_CIPHER]
    cmd += target
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    ru_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = parse_h2load(out.stdout)
    r["client_cpu"] = (ru_after.ru_utime - ru.ru_utime) + (ru_after.ru_stime - ru.ru_stime)
    r["problems"] = problems_of(r, scheme)
    if "done" not in r or "rps" not in r:
        r["problems"].append(f"h2load status {out.returncode}, said: "
                             + " / ".join((out.stdout + out.stderr).strip().splitlines()[-4:]))
    elif out.returncode != 0:
        r["problems"].append(f"h2load status {out.returncode}: {out.stderr.strip()[-300:]}")
    return r


def measure(pid, target, options, duration, scheme):
    warm = h2load(target, options, 1, scheme)
    before = tree_cpu_seconds(pid)
    core_before = cpu_times()
    r = h2load(target, options, duration, scheme)
    core_after = cpu_times()
    used = tree_cpu_seconds(pid) - before
    done = max(r.get("done", 0), 1)
    busy = cpu_busy(core_before, core_after, 0) or 0.0
    return {
        "rps": r.get("rps", 0.0),
        "cpu_us": used / done * 1e6,
        "busy": busy,
        "client_cpu_us": r["client_cpu"] / done * 1e6,
        "done": r.get("done", 0),
        "errors": (r.get("done", 0) - r.get("succeeded", 0) + r.get("failed", 0)
                   + r.get("errored", 0) + r.get("timeout", 0)),
        "problems": ["warm-up: " + p for p in warm["problems"]] + r["problems"],
        "negotiated": " ".join(r[k] for k in ("alpn", "tls", "cipher", "kex") if k in r),
    }


def verify(name, urls, scheme, expected, work):
    """curl fetches every URL over HTTP/2 (prior knowledge on h2c) and the bodies are compared
    with the files: a benchmark of wrong answers is worthless. One curl per URL: curl 7.88
    sends nothing on an h2c connection it reuses."""
    outdir = tempfile.mkdtemp(dir=work)
    bad = []
    for i, url in enumerate(urls):
        path = os.path.join(outdir, str(i))
        cmd = ["curl", "-sS", "--max-time", "60", "-w", "%{http_version} %{response_code}",
               "-o", path] + (["--http2-prior-knowledge"] if scheme == "http" else
                              ["--http2", "-k"]) + [url]
        out = subprocess.run(cmd, capture_output=True, text=True)
        size, crc = expected[url.split(":", 2)[2].split("/", 1)[1]]
        body = b""
        if os.path.exists(path):
            with open(path, "rb") as f:
                body = f.read()
        if (out.returncode != 0 or out.stdout.split() != ["2", "200"] or len(body) != size
                or zlib.crc32(body) != crc):
            bad.append(f"{url}: {out.stdout} {out.stderr.strip()}, {len(body)} bytes")
    shutil.rmtree(outdir, ignore_errors=True)
    if bad:
        raise SystemExit(f"{name} {scheme} served wrong responses:\n  " + "\n  ".join(bad))


def strace_calls(pid, target, options, duration, scheme):
    """System calls per request of the process tree of `pid` during one h2load run."""
    pids = process_tree(pid)
    fd, out_path = tempfile.mkstemp(prefix="fastpath-h2-strace.")
    os.close(fd)
    cmd = ["strace", "-c", "-f", "-o", out_path]
    for p in pids:
        cmd += ["-p", str(p)]
    tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not all(tracer_of(p) == tracer.pid for p in pids):
            if time.monotonic() > deadline or tracer.poll() is not None:
                raise SystemExit("strace did not attach")
            time.sleep(0.05)
        time.sleep(0.3)
        r = h2load(target, options, duration, scheme)
    finally:
        tracer.send_signal(signal.SIGINT)
        try:
            tracer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            tracer.kill()
            tracer.wait()
    calls, total = {}, 0
    with open(out_path) as f:
        for line in f:
            parts = line.split()
            if not parts or not parts[0][0].isdigit():
                continue
            if parts[-1] == "total":
                total = int(parts[3])
            else:
                calls[parts[-1]] = int(parts[3])
    os.unlink(out_path)
    n = max(r.get("done", 0), 1)
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
    return {"per_req": total / n, "top": [(k, v / n) for k, v in top], "done": r.get("done", 0),
            "problems": r["problems"]}


def h2o_version():
    out = subprocess.run(["h2o", "--version"], capture_output=True, text=True).stdout
    return out.split("\n")[0].replace("h2o version ", "")


def h2load_version():
    out = subprocess.run(["h2load", "--version"], capture_output=True, text=True).stdout
    return out.strip().split()[-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3,
                        help="measurements of each server, taken in turn; medians are reported")
    parser.add_argument("--models", default="epoll,uring",
                        help="fastpath models to measure, comma-separated")
    parser.add_argument("--strace", action="store_true",
                        help="then count system calls per request (1 KiB, 100 streams)")
    parser.add_argument("--strace-duration", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    binary = os.environ.get("FASTPATH_BIN") or os.path.join(REPO, "target/release/fastpath")
    if not os.environ.get("FASTPATH_BIN"):
        subprocess.run(["cargo", "build", "--release", "-p", "fastpath"], cwd=REPO, check=True)
    tools = ["nginx", "h2o", "h2load", "curl", "openssl", "taskset"] + (["strace"] * args.strace)
    for tool in tools:
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is required (apt-get install nginx h2o nghttp2-client "
                             "curl openssl util-linux strace)")
    work = tempfile.mkdtemp(prefix="fastpath-h2.")
    os.chmod(work, 0o755)
    root = os.path.join(work, "www")
    os.makedirs(root)
    make_spec_docroot(binary, root)
    manifest = os.path.join(work, SPEC_MANIFEST)
    os.rename(os.path.join(root, SPEC_MANIFEST), manifest)
    expected = {p.lstrip("/"): (size, crc) for p, size, crc in read_manifest(manifest)}
    data_1m = make_content(1 << 20)
    with open(os.path.join(root, FILE_1M.lstrip("/")), "wb") as f:
        f.write(data_1m)
    expected[FILE_1M.lstrip("/")] = (len(data_1m), zlib.crc32(data_1m))
    publish_tree(root)
    paths = mix_paths(manifest, MIX_URIS)
    mix_file = os.path.join(work, "mix.uris")
    with open(mix_file, "w") as f:
        f.write("".join(f"http://{HOST}{p}\n" for p in paths))
    ca, cert, key = make_certificate(work)
    os.chmod(key, 0o644)  # h2o drops to nobody; the directory is private to this run

    names = [f"fastpath {m}" for m in models] + ["nginx", "h2o"]
    ports = {n: (BASE_PORT + 2 * i, BASE_PORT + 2 * i + 1) for i, n in enumerate(names)}
    for n, pair in ports.items():
        for p in pair:
            if port_in_use(p):
                raise SystemExit(f"port {p} (for {n}) is in use")
    procs = []

    def start(name):
        plain, tls = ports[name]
        values = dict(work=work, root=root, cert=cert, key=key, host=HOST, plain=plain, tls=tls)
        if name == "nginx":
            conf = os.path.join(work, "nginx.conf")
            with open(conf, "w") as f:
                f.write(NGINX.format(
                    cipher=TLS13_CIPHER,
                    listen_plain=f"listen {HOST}:{plain} http2 backlog=4096;",
                    listen_tls=f"listen {HOST}:{tls} ssl http2 backlog=4096;", **values))
            cmd = ["nginx", "-c", conf]
        elif name == "h2o":
            conf = os.path.join(work, "h2o.conf")
            with open(conf, "w") as f:
                f.write(H2O.format(**values))
            cmd = ["h2o", "-c", conf]
        else:
            model = name.split()[1]
            conf = os.path.join(work, f"fastpath-{model}.toml")
            with open(conf, "w") as f:
                f.write(FASTPATH.format(**values))
            cmd = [binary, "serve", "--config", conf, "--model", model] + root_flag(binary)
        log = open(os.path.join(work, f"{name.replace(' ', '-')}.out"), "a")
        p = subprocess.Popen(["taskset", "-c", "0"] + cmd, stdout=log, stderr=log)
        log.close()
        procs.append(p)
        wait_port(plain)
        wait_port(tls)
        return p

    def log_tail(name, lines=3):
        with open(os.path.join(work, f"{name.replace(' ', '-')}.out")) as f:
            return [line.strip() for line in f.read().splitlines()[-lines:]]

    def target(name, scheme, path):
        port = ports[name][0 if scheme == "http" else 1]
        if path is None:
            return ["-i", mix_file, "-B", f"{scheme}://{HOST}:{port}"]
        return [f"{scheme}://{HOST}:{port}{path}"]

    load_start = loadavg()
    started = datetime.datetime.now(datetime.timezone.utc)
    runs = {n: {(c[0], t[0]): [] for c in CASES for t in TRANSPORTS} for n in names}
    traced = {}
    events = []
    try:
        servers = {n: start(n) for n in names}
        for n in names:
            for _, scheme in TRANSPORTS:
                port = ports[n][0 if scheme == "http" else 1]
                verify(n, [f"{scheme}://{HOST}:{port}/{p}" for p in sorted(expected)], scheme,
                       expected, work)
        print("every server served every file byte for byte over h2c and h2", flush=True)
        for rnd in range(args.rounds):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for key_, label, path, options in CASES:
                for tname, scheme in TRANSPORTS:
                    for n in order:
                        proc = servers[n]
                        r = measure(proc.pid, target(n, scheme, path), options, args.duration,
                                    scheme)
                        if proc.poll() is not None:
                            # Said in the report; the server is started again and the
                            # measurement taken again.
                            event = (f"{n} exited (status {proc.returncode}) during round "
                                     f"{rnd + 1}, {label} {tname}, its log ending: "
                                     + " / ".join(log_tail(n)))
                            print(event, flush=True)
                            events.append(event)
                            servers[n] = proc = start(n)
                            r = measure(proc.pid, target(n, scheme, path), options,
                                        args.duration, scheme)
                        runs[n][(key_, tname)].append(r)
                        print(f"round {rnd + 1} {label:38} {tname:3} {n:15} {r['rps']:>9,.0f}/s "
                              f"{r['cpu_us']:7.1f} µs server CPU  busy {r['busy']:.0%}  "
                              f"client {r['client_cpu_us']:.1f} µs  {r['negotiated']}"
                              + (f"  PROBLEMS: {'; '.join(r['problems'])}"
                                 if r["problems"] else ""), flush=True)
        if args.strace:
            options = next(c[3] for c in CASES if c[0] == STRACE_CASE)
            for tname, scheme in TRANSPORTS:
                for n in names:
                    s = strace_calls(servers[n].pid, target(n, scheme, FILE_1K), options,
                                     args.strace_duration, scheme)
                    traced[(n, tname)] = s
                    print(f"strace {tname:3} {n:15} {s['per_req']:.2f} calls/request: "
                          + ", ".join(f"{k} {v:.2f}" for k, v in s["top"])
                          + (f"  PROBLEMS: {'; '.join(s['problems'])}"
                             if s["problems"] else ""), flush=True)
    finally:
        for p in procs:
            if p.poll() is None:
                stop(p)
        shutil.rmtree(work, ignore_errors=True)
    load_end = loadavg()
    text = report(args, models, names, runs, traced, events, started, load_start, load_end)
    print()
    print(text)
    if not args.no_write:
        path = os.path.join(REPO, "BENCHMARKS.md")
        with open(path) as fh:
            doc = fh.read()
        block = f"{MARK_BEGIN}\n{text}\n{MARK_END}"
        if MARK_BEGIN in doc and MARK_END in doc:
            doc = doc[:doc.index(MARK_BEGIN)] + block + doc[doc.index(MARK_END) + len(MARK_END):]
        else:
            doc = doc.rstrip() + "\n\n## HTTP/2: fastpath against nginx and h2o\n\n" + block + "\n"
        with open(path, "w") as fh:
            fh.write(doc)
    bad = [(n, k) for n in names for k, rs in runs[n].items() for r in rs if r["problems"]]
    return 1 if bad else 0


def report(args, models, names, runs, traced, events, started, load_start, load_end):
    figures = ("rps", "cpu_us", "busy", "client_cpu_us")
    med = {n: {k: {f: statistics.median(r[f] for r in rs) for f in figures}
               for k, rs in runs[n].items()} for n in names}
    for n in names:
        for k, rs in runs[n].items():
            med[n][k]["errors"] = sum(r["errors"] for r in rs)
            med[n][k]["problems"] = sorted({p for r in rs for p in r["problems"]})
            med[n][k]["spread_rps"] = spread([r["rps"] for r in rs])
            med[n][k]["spread_cpu"] = spread([r["cpu_us"] for r in rs])
    peers = ["nginx", "h2o"]
    negotiated = sorted({r["negotiated"] for n in names for rs in runs[n].values() for r in rs})

    def worst(figure):
        return max(med[n][k][figure] for n in names for k in med[n])

    def typical(figure):
        return statistics.median(med[n][k][figure] for n in names for k in med[n])
    lines = [
        f"Run {started:%Y-%m-%d %H:%M} UTC, `bench/h2.py --duration {args.duration} --rounds "
        f"{args.rounds} --models {','.join(models)}{' --strace' if args.strace else ''}` (each "
        f"figure the median of {args.rounds} rounds, the servers taken in turn, their order "
        f"turned each round), {os.cpu_count()} cores, kernel {os.uname().release}, nginx "
        f"{nginx_version()} with {openssl_version()}, h2o {h2o_version()}, h2load "
        f"{h2load_version()}. Servers on CPU 0 (one worker each, all running, measured in "
        "turn), `h2load -t 1` on CPU 1 for the given duration after a 1 s warm-up run; "
        f"negotiated: {', '.join(negotiated)}. Server CPU is the server's own user+sys per "
        "request from /proc (its process tree, read before and after each run); CPU 0 busy "
        "says whether the server's core was saturated (when it is not, h2load's core was the "
        "limit and the rates say little, the CPU per request still does). Load average "
        f"{load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end. Noise: the rounds of "
        f"one figure differ by a median of {typical('spread_rps'):.0%} (at worst "
        f"{worst('spread_rps'):.0%}) of their median for requests/s, {typical('spread_cpu'):.0%} "
        f"(at worst {worst('spread_cpu'):.0%}) for the server CPU per request; the ± column is "
        "that spread for the row.",
        "",
        "| case | proto | server | requests/s | ÷ nginx | ÷ h2o | server CPU µs/request | ± "
        "| ÷ nginx | ÷ h2o | CPU 0 busy | h2load CPU µs/request | errors |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for key_, label, _, _ in CASES:
        for tname, _ in TRANSPORTS:
            k = (key_, tname)
            for n in names:
                r = med[n][k]
                ratios = []
                for fig in ("rps", "cpu_us"):
                    ratios.append(" | ".join(
                        "" if n == p else f"{r[fig] / med[p][k][fig]:.2f}×" for p in peers))
                lines.append(
                    f"| {label} | {tname} | {n} | {r['rps']:,.0f} | {ratios[0]} | "
                    f"{r['cpu_us']:.1f} | {r['spread_cpu']:.0%} | {ratios[1]} | "
                    f"{r['busy']:.0%} | {r['client_cpu_us']:.1f} | {r['errors']:,} |")
    problems = [f"{n}, {k[0]} {k[1]}: {'; '.join(med[n][k]['problems'])}"
                for n in names for k in med[n] if med[n][k]["problems"]]
    lines += ["", "Every h2load run had every request it did succeed with a 2xx status."
              if not problems else "**Failures** (these figures are not to be trusted):"]
    lines += [f"- {p}" for p in problems]
    if events:
        lines += ["", "Servers that exited during the run (each started again and the "
                  "measurement taken again):", ""] + [f"- {e}" for e in events]

    def verdict(ok):
        return "**met**" if ok else "**not met**"
    lines += ["", "Targets (server CPU per request; at 100 streams on 1 KiB at most 0.6× "
              "nginx's and 0.8× h2o's; in every case and protocol no worse than 0.9× the best "
              "peer, i.e. CPU per request at most 1/0.9 = 1.11× the lower of the two and "
              "requests/s at least 0.9× the higher):", ""]
    for m in models:
        n = f"fastpath {m}"
        for tname, _ in TRANSPORTS:
            k = ("s100", tname)
            rn = med[n][k]["cpu_us"] / med["nginx"][k]["cpu_us"]
            rh = med[n][k]["cpu_us"] / med["h2o"][k]["cpu_us"]
            lines.append(f"- {n}, 1 KiB at 100 streams, {tname}: {rn:.2f}× nginx's CPU per "
                         f"request (≤ 0.6×: {verdict(rn <= 0.6)}), {rh:.2f}× h2o's (≤ 0.8×: "
                         f"{verdict(rh <= 0.8)})")
        cpu_worse, rps_worse = [], []
        worst_cpu = worst_rps = None
        for key_, label, _, _ in CASES:
            for tname, _ in TRANSPORTS:
                k = (key_, tname)
                best_cpu = min(med[p][k]["cpu_us"] for p in peers)
                best_rps = max(med[p][k]["rps"] for p in peers)
                c = med[n][k]["cpu_us"] / best_cpu
                q = med[n][k]["rps"] / best_rps
                worst_cpu = max(worst_cpu or c, c)
                worst_rps = min(worst_rps or q, q)
                if c > 1 / 0.9:
                    cpu_worse.append(f"{label} {tname} ({c:.2f}×)")
                if q < 0.9:
                    rps_worse.append(f"{label} {tname} ({q:.2f}×)")
        lines.append(
            f"- {n}, no worse than 0.9× the best peer anywhere: CPU per request at worst "
            f"{worst_cpu:.2f}× the better peer's ({verdict(not cpu_worse)}"
            + (f": {', '.join(cpu_worse)}" if cpu_worse else "") + f"), requests/s at worst "
            f"{worst_rps:.2f}× the better peer's ({verdict(not rps_worse)}"
            + (f": {', '.join(rps_worse)}" if rps_worse else "") + ")")
    if traced:
        lines += ["", f"System calls per request, 1 KiB at 100 streams × 4 connections "
                  f"(strace -c -f on the server's process tree for {args.strace_duration} s, "
                  "its rates much lower than untraced):", "",
                  "| proto | server | calls/request | the most frequent (per request) |",
                  "|---|---|--:|---|"]
        for (n, tname), s in traced.items():
            lines.append(f"| {tname} | {n} | {s['per_req']:.2f} | "
                         + ", ".join(f"{k} {v:.2f}" for k, v in s["top"]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
