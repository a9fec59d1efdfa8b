#!/usr/bin/env python3
"""Modules benchmark: fastpath's compress and basic_auth modules against nginx's gzip and
auth_basic, with h2load speaking HTTP/1.1 (`--h1`).

One run, on this machine's two cores:
  * one document root for every server: a 100 KiB HTML page that compresses as pages do (the
    tests' generator), and a 1 KiB file under /private/;
  * the servers, one worker each, access logs off, all running at once on CPU 0 and
    measured in turn:
      - nginx: `gzip on; gzip_comp_level 6; gzip_types text/html; gzip_min_length 256`
        (gzip_vary on), and `auth_basic` on /private/ with the password file;
      - fastpath: `[[module]] compress` with `codings = ["gzip"]` at level 6 (the same coding
        and level), and `[[module]] basic_auth` on /private/;
      - fastpath with the content cache off (`[cache] enabled = false`): every request
        compresses anew;
  * a backend for both, a third nginx on CPU 1 serving the same page under /app/ without
    compression: nginx proxies /app/ to it (`proxy_pass` over kept connections) and gzips
    what comes back, fastpath relays it through `[[route]]` and compresses it as it passes;
    neither keeps the backend's response (it has no freshness to cache by);
  * the cases: the page with `Accept-Encoding: gzip` (16 connections); the same page from
    the backend, gzip on the fly (16 connections); the 1 KiB private
    file with `Authorization: Basic` against a bcrypt entry (htpasswd -B -C 5) and against
    a {SHA} entry (16 connections);
  * in interleaved rounds (--rounds, the servers' order turned each round, medians
    reported): a 1 s warm-up, then `h2load --h1 -D duration` on CPU 1; requests/s and the
    server's own CPU time per request (user+sys of its process tree from /proc). Every run
    must have every request succeed with a 2xx status; before the rounds, each server's
    gzip body is decoded and compared with the page.

Results go to stdout and between the modules markers in BENCHMARKS.md (unless --no-write).
Usage: bench/modules.py [--duration 5] [--rounds 3] [--no-write]; FASTPATH_BIN selects the
binary.
"""

import argparse
import base64
import datetime
import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import cpu_busy, cpu_times, loadavg, root_flag, tree_cpu_seconds, wait_port  # noqa: E402
from h2 import parse_h2load  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = {"fastpath": 18361, "fastpath, cache off": 18362, "nginx": 18363}
BACKEND_PORT = 18364

BACKEND = """daemon off; master_process off; worker_processes 1; pid {work}/backend.pid;
error_log {work}/backend.err warn; worker_rlimit_nofile 20000;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  open_file_cache max=100; types {{ text/html html; }}
  server {{ listen 127.0.0.1:{port} backlog=4096; root {root}; }} }}
"""
USERS = {"bcrypt": ("alice", "wonderland", "-B"), "sha": ("bob", "builder", "-s")}

NGINX = """daemon off; master_process off; worker_processes 1; pid {work}/nginx.pid;
error_log {work}/nginx.err warn; worker_rlimit_nofile 20000;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  open_file_cache max=100; default_type application/octet-stream;
  types {{ text/html html; }}
  gzip on; gzip_comp_level 6; gzip_types text/html; gzip_min_length 256; gzip_vary on;
  upstream backend {{ server 127.0.0.1:{backend}; keepalive 32; }}
  server {{ listen 127.0.0.1:{port} backlog=4096; root {root};
    location /app/ {{ proxy_pass http://backend; proxy_http_version 1.1;
      proxy_set_header Connection ""; }}
    location /private/ {{ auth_basic "Staff"; auth_basic_user_file {work}/htpasswd; }} }} }}
"""

FASTPATH = """listen = "127.0.0.1:{port}"
workers = 1
model = "epoll"
root = "{root}"
[log]
access = "off"
error = "stderr"
level = "warn"
[cache]
enabled = {cache}
[[module]]
name = "compress"
codings = ["gzip"]
gzip_level = 6
types = ["text/html"]
[[module]]
name = "basic_auth"
prefix = "/private/"
realm = "Staff"
user_file = "{work}/htpasswd"
[[backend]]
name = "app"
addresses = "127.0.0.1:{backend}"
[[route]]
backend = "app"
prefix = "/app/"
"""

CASES = [
    ("gzip", "100 KiB page, gzip on the fly", "/page.html", ["-H", "Accept-Encoding: gzip"]),
    ("proxied", "100 KiB page from a backend, gzip on the fly", "/app/page.html",
     ["-H", "Accept-Encoding: gzip"]),
    ("bcrypt", "1 KiB, basic auth (bcrypt)", "/private/1k.html", None),
    ("sha", "1 KiB, basic auth ({SHA})", "/private/1k.html", None),
]


def page():
    """The tests' 100 KiB page (crates/fastpath/tests/modules.rs)."""
    out = bytearray(b"<!DOCTYPE html>\n<html><body>\n")
    n = 0
    while len(out) < 100 * 1024:
        n = (n * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out += f'<p class="row">Row {len(out)} of the table, value {n >> 40}</p>\n'.encode()
    return bytes(out)


def auth_header(kind):
    user, password, _ = USERS[kind]
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return ["-H", f"Authorization: Basic {token}"]


def h2load(port, path, options, duration):
    cmd = ["taskset", "-c", "1", "h2load", "--h1", "-t", "1", "-c", "16", "-D",
           str(duration)] + options + [f"http://127.0.0.1:{port}{path}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    r = parse_h2load(out.stdout)
    problems = []
    if "done" not in r or r.get("done", 0) == 0:
        problems.append("no request done: " + " / ".join(out.stdout.strip().splitlines()[-3:]))
    elif r["succeeded"] != r["done"] or r.get("2xx", 0) < r["succeeded"] or \
            any(r.get(c, 0) for c in ("3xx", "4xx", "5xx")):
        problems.append(f"{r['done']} done, {r['succeeded']} succeeded, "
                        f"{r.get('2xx', 0)} 2xx, {r.get('4xx', 0)} 4xx, {r.get('5xx', 0)} 5xx")
    r["problems"] = problems
    return r


def measure(pid, port, path, options, duration):
    h2load(port, path, options, 1)
    before = tree_cpu_seconds(pid)
    core_before = cpu_times()
    r = h2load(port, path, options, duration)
    core_after = cpu_times()
    used = tree_cpu_seconds(pid) - before
    done = max(r.get("done", 0), 1)
    return {"rps": r.get("rps", 0.0), "cpu_us": used / done * 1e6,
            "busy": cpu_busy(core_before, core_after, 0) or 0.0, "problems": r["problems"]}


def check_gzip(name, port, expected, path="/page.html"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read()
        coding = resp.headers.get("Content-Encoding")
    if coding != "gzip" or gzip.decompress(body) != expected:
        raise SystemExit(f"{name} did not send the page gzipped and whole ({coding})")
    return len(body)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    for tool in ("taskset", "h2load", "nginx", "htpasswd"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed (.ci/run installs it)")
    binary = os.environ.get("FASTPATH_BIN") or os.path.join(REPO, "target/release/fastpath")
    if "FASTPATH_BIN" not in os.environ:
        subprocess.run(["cargo", "build", "--release", "-p", "fastpath"], cwd=REPO, check=True)
    work = tempfile.mkdtemp(prefix="fastpath-modules.")
    root = os.path.join(work, "www")
    os.makedirs(os.path.join(root, "private"))
    os.makedirs(os.path.join(root, "app"))
    the_page = page()
    for name in ("page.html", "app/page.html"):
        with open(os.path.join(root, name), "wb") as f:
            f.write(the_page)
    with open(os.path.join(root, "private", "1k.html"), "wb") as f:
        f.write(b"<p>" + b"s" * 1014 + b"</p>\n")
    lines = []
    for user, password, flag in USERS.values():
        cmd = ["htpasswd", "-nb", flag] + (["-C", "5"] if flag == "-B" else []) + [user, password]
        lines.append(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip())
    with open(os.path.join(work, "htpasswd"), "w") as f:
        f.write("\n".join(lines) + "\n")
    servers = {}
    backend = None
    try:
        with open(os.path.join(work, "backend.conf"), "w") as f:
            f.write(BACKEND.format(work=work, port=BACKEND_PORT, root=root))
        backend = subprocess.Popen(
            ["taskset", "-c", "1", "nginx", "-c", os.path.join(work, "backend.conf"), "-p", work],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name in ("fastpath", "fastpath, cache off"):
            conf = os.path.join(work, f"{PORTS[name]}.toml")
            with open(conf, "w") as f:
                f.write(FASTPATH.format(port=PORTS[name], root=root, work=work,
                                        backend=BACKEND_PORT,
                                        cache="true" if name == "fastpath" else "false"))
            servers[name] = subprocess.Popen(
                ["taskset", "-c", "0", binary, "serve", "--config", conf] + root_flag(binary),
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, f"{name}.err"), "w"))
        with open(os.path.join(work, "nginx.conf"), "w") as f:
            f.write(NGINX.format(work=work, port=PORTS["nginx"], root=root,
                                 backend=BACKEND_PORT))
        servers["nginx"] = subprocess.Popen(
            ["taskset", "-c", "0", "nginx", "-c", os.path.join(work, "nginx.conf"), "-p", work],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name in servers:
            wait_port(PORTS[name])
        wait_port(BACKEND_PORT)
        sizes = {name: check_gzip(name, PORTS[name], the_page) for name in servers}
        for name in servers:
            check_gzip(name, PORTS[name], the_page, "/app/page.html")
        load_start = loadavg()
        results = {}
        order = list(servers)
        for rnd in range(a.rounds):
            for key, label, path, options in CASES:
                opts = options if options is not None else auth_header(key)
                for name in order:
                    # The content cache is for static files: off, only their case differs.
                    if key != "gzip" and name == "fastpath, cache off":
                        continue
                    r = measure(servers[name].pid, PORTS[name], path, opts, a.duration)
                    if r["problems"]:
                        raise SystemExit(f"{name} {label}: " + "; ".join(r["problems"]))
                    results.setdefault((key, name), []).append(r)
                    print(f"round {rnd + 1} {label:34} {name:20} {r['rps']:10,.0f}/s "
                          f"{r['cpu_us']:8.1f} µs server CPU  busy {r['busy']:.0%}", flush=True)
            order = order[1:] + order[:1]
        load_end = loadavg()
    finally:
        every = list(servers.values()) + ([backend] if backend else [])
        for p in every:
            p.terminate()
        for p in every:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)
    write(results, sizes, a, load_start, load_end)


def write(results, sizes, a, load_start, load_end):
    spreads = []
    rows = []
    for key, label, _, _ in CASES:
        nginx_cpu = statistics.median(r["cpu_us"] for r in results[(key, "nginx")])
        for name in ("fastpath", "fastpath, cache off", "nginx"):
            rs = results.get((key, name))
            if not rs:
                continue
            cpu = statistics.median(r["cpu_us"] for r in rs)
            rps = statistics.median(r["rps"] for r in rs)
            spread = (max(r["cpu_us"] for r in rs) - min(r["cpu_us"] for r in rs)) / cpu
            spreads.append(spread)
            ratio = "" if name == "nginx" else f"{cpu / nginx_cpu:.2f}×"
            rows.append(f"| {label} | {name} | {rps:,.0f} | {cpu:.1f} | {spread:.0%} | {ratio} |")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    nginx_version = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    text = [
        f"Run {now}, `bench/modules.py --duration {a.duration} --rounds {a.rounds}` (medians of "
        f"{a.rounds} interleaved rounds), {nginx_version.replace('nginx version: ', '')}, "
        f"h2load --h1 with 16 connections on CPU 1, servers on CPU 0 with one worker each. "
        f"Load average {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end; the "
        f"rounds of one figure differ by a median of {statistics.median(spreads):.0%} (at worst "
        f"{max(spreads):.0%}) in server CPU per request. Gzip bodies of the page: "
        + ", ".join(f"{n} {s:,} bytes" for n, s in sizes.items()) + ".",
        "",
        "| case | server | requests/s | server CPU µs/request | ± | ÷ nginx |",
        "|---|---|--:|--:|--:|--:|",
    ] + rows
    out = "\n".join(text)
    print(out)
    if a.no_write:
        return
    path = os.path.join(REPO, "BENCHMARKS.md")
    with open(path) as f:
        doc = f.read()
    begin, end = "<!-- modules results begin -->", "<!-- modules results end -->"
    if begin in doc:
        doc = re.sub(re.escape(begin) + ".*?" + re.escape(end), begin + "\n" + out + "\n" + end,
                     doc, flags=re.S)
    else:
        doc += f"\n{begin}\n{out}\n{end}\n"
    with open(path, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
