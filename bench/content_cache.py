#!/usr/bin/env python3
"""The content cache, one per process against one per worker, in noise-free figures.

For each fastpath binary given (the first is the one under test; a second is measured the
same way, e.g. the code before a change) and each worker count, the server (model epoll,
pinned to CPU 0) is loaded by `fastpath bench` (on CPU 1) with a fixed number of requests
per workload, and reports:

  * instructions per request, counted by callgrind: the slope between a short and a long
    run, which leaves out start-up and exit (as bench/instructions.sh);
  * the content cache's hit rate over the long run after a warm-up of the short one, and
    its memory and entries at the end, from the metrics listener of a plain server;
  * system calls per request by name (strace -c -f attached to that server's threads for
    the long run): the calls that open, stat and read files are what a miss costs.

Workloads: w1 (a 1 KiB file, 64 connections), w2 (the SPECweb96 file-size mix, 64
connections), ws (a working set larger than one worker's share of the budget: 600 files of
4 KiB, kept in memory, and 600 of 16 KiB, kept as descriptors, requested in a shuffled
order, with [cache] max_memory = 4MiB and max_open_files = 1024).

Usage: bench/content_cache.py [--workers 1,2,8] [--workloads w1,w2,ws] [--no-callgrind]
                              [--json FILE] BINARY [BASELINE_BINARY]
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SERVER_CPU, CLIENT_CPU = "0", "1"
WS_SMALL, WS_LARGE, WS_COUNT = 4096, 16384, 600
# The system calls a cache miss makes (open, stat, read of the file, close of the old
# entry's descriptors), counted per request.
FILE_CALLS = ("openat", "openat2", "statx", "fstat", "newfstatat", "pread64", "close")
WS_LIMITS = 'max_memory = "4MiB"\nmax_open_files = 1024\n'


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_docroot(binary, work):
    www = os.path.join(work, "www")
    subprocess.run([binary, "bench", "make-docroot", www], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(www, "1k.bin"), "wb") as f:
        f.write(os.urandom(1024))
    ws = os.path.join(www, "ws")
    os.mkdir(ws)
    paths = []
    for i in range(WS_COUNT):
        for kind, size in (("s", WS_SMALL), ("l", WS_LARGE)):
            name = f"{kind}{i:04}"
            with open(os.path.join(ws, name), "wb") as f:
                f.write(os.urandom(size))
            paths.append(f"/ws/{name}")
    rng = random.Random(13)
    order = []
    for _ in range(20):
        rng.shuffle(paths)
        order.extend(paths)
    urls = os.path.join(work, "ws.urls")
    with open(urls, "w") as f:
        f.write("\n".join(order) + "\n")
    return www, urls


def workload_args(name, www, urls):
    if name == "w1":
        return ["-c", "64"], "/1k.bin"
    if name == "w2":
        return ["-c", "64", "--mix", "specweb96", "--docroot", www], "/"
    return ["-c", "64", "--urls", urls], "/"


def config(work, www, workers, name, metrics_port):
    text = (f'workers = {workers}\nmodel = "epoll"\nroot = "{www}"\n'
            '[log]\naccess = "off"\nerror = "stderr"\nlevel = "warn"\n')
    if name == "ws":
        text += "[cache]\n" + WS_LIMITS
    if metrics_port:
        text += f'[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n'
    path = os.path.join(work, f"{name}-{workers}.toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def wait_up(port):
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/1k.bin", timeout=1).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server on {port} never answered")


def start(binary, conf, port, wrapper, log):
    cmd = ["taskset", "-c", SERVER_CPU] + wrapper + [
        binary, "serve", "--run-as-root", "--config", conf, "--listen", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
    wait_up(port)
    return proc


def stop(proc):
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def load(loadgen, port, args, path, requests):
    cmd = ["taskset", "-c", CLIENT_CPU, loadgen, "bench", "-t", "1", "-q", "--json",
           "-n", str(requests), "--timeout", "60s"] + args + [f"http://127.0.0.1:{port}{path}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = json.loads(out)
    bad = {k: v for k, v in res["errors"].items() if k != "total" and v}
    if bad or res["status"].get("2xx", 0) != res["replies"]:
        raise SystemExit(f"bench reported problems: {bad} {res['status']}")
    return res["replies"]


def callgrind(binary, loadgen, work, www, urls, workers, name, requests):
    counts = []
    for n in requests:
        port = free_port()
        out = os.path.join(work, "cg.out")
        conf = config(work, www, workers, name, None)
        with open(os.path.join(work, "server.log"), "w") as log:
            proc = start(binary, conf, port,
                         ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"], log)
            args, path = workload_args(name, www, urls)
            replies = load(loadgen, port, args, path, n)
            stop(proc)
        with open(out) as f:
            summary = re.search(r"^summary:\s+(\d+)", f.read(), re.M)
        # The warm-up request of wait_up is one more reply.
        counts.append((replies + 1, int(summary.group(1))))
    (r1, i1), (r2, i2) = counts
    return (i2 - i1) / (r2 - r1)


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = {}
    for line in text.splitlines():
        m = re.match(r"^(fastpath_content_cache_\w+)\{[^}]*\} (\S+)$", line)
        if m:
            total[m.group(1)] = total.get(m.group(1), 0) + float(m.group(2))
    return total


def plain(binary, loadgen, work, www, urls, workers, name, requests):
    """After a warm-up of the short count of requests: the cache's hit rate over the long
    count, its memory and entries at the end, and system calls per request (strace -c
    attached to every thread for the long count)."""
    port, mport = free_port(), free_port()
    conf = config(work, www, workers, name, mport)
    args, path = workload_args(name, www, urls)
    trace = os.path.join(work, "strace.txt")
    with open(os.path.join(work, "server.log"), "w") as log:
        proc = start(binary, conf, port, [], log)
        load(loadgen, port, args, path, requests[0])
        time.sleep(0.5)  # figures are published on the workers' ticks
        before = scrape(mport)
        tids = os.listdir(f"/proc/{proc.pid}/task")
        tracer = subprocess.Popen(["strace", "-c", "-f", "-o", trace] +
                                  [x for t in tids for x in ("-p", t)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        replies = load(loadgen, port, args, path, requests[1])
        time.sleep(0.5)
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
        after = scrape(mport)
        stop(proc)
    calls = {}
    with open(trace) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                calls[parts[-1]] = int(parts[3]) / replies
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    hits = delta.get("fastpath_content_cache_hits_total", 0)
    misses = delta.get("fastpath_content_cache_misses_total", 0)
    return {
        "replies": replies,
        "hit_rate": hits / (hits + misses) if hits + misses else None,
        "hits": hits, "misses": misses,
        "memory": after.get("fastpath_content_cache_memory_bytes", 0),
        "entries": after.get("fastpath_content_cache_entries", 0),
        "syscalls": calls,
        "syscalls_per_request": sum(calls.values()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--workers", default="1,2,8")
    ap.add_argument("--workloads", default="w1,w2,ws")
    ap.add_argument("--requests", default="w1=3000:12000,w2=3000:12000,ws=12000:36000",
                    help="short:long request counts per workload")
    ap.add_argument("--no-callgrind", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    for tool in ("taskset", "strace") + (() if a.no_callgrind else ("valgrind",)):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is required")
    binaries = [os.path.realpath(b) for b in a.binaries]
    loadgen = binaries[0]
    counts = {k: tuple(int(x) for x in v.split(":"))
              for k, v in (p.split("=") for p in a.requests.split(","))}
    work = tempfile.mkdtemp(prefix="fastpath-content-cache.")
    results = []
    try:
        www, urls = make_docroot(loadgen, work)
        for name in a.workloads.split(","):
            for workers in [int(w) for w in a.workers.split(",")]:
                for binary in binaries:
                    row = {"binary": binary, "workload": name, "workers": workers}
                    row.update(plain(binary, loadgen, work, www, urls, workers, name,
                                     counts[name]))
                    if not a.no_callgrind:
                        row["instructions"] = callgrind(binary, loadgen, work, www, urls,
                                                        workers, name, counts[name])
                    results.append(row)
                    sc = row["syscalls"]
                    disk = sum(sc.get(c, 0) for c in FILE_CALLS)
                    print(f"{name} workers={workers} {os.path.basename(binary)}: "
                          f"hit rate {row['hit_rate']:.3f}, memory {row['memory'] / 2**20:.2f} MiB, "
                          f"entries {row['entries']:.0f}, "
                          f"instructions/req {row.get('instructions', 0):.0f}, "
                          f"openat/req {sc.get('openat2', 0) + sc.get('openat', 0):.3f}, "
                          f"file calls/req {disk:.3f}, calls/req {row['syscalls_per_request']:.2f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
