#!/usr/bin/env python3
"""What Prometheus metrics cost per request: fastpath's CPU time per request on
workload 1 (1 KiB file, keep-alive, 64 connections) with `[metrics] listen` set
and without, as BENCHMARKS.md reports it.

One worker (epoll) pinned to CPU 0 and `fastpath bench` pinned to CPU 1, as in
the comparison suite (bench/run.sh). Each round starts the server once with
metrics off and once on (in alternating order, so that a drift of the machine
weighs on both alike), warms it up, and divides the CPU time the server's
threads were given during the measured run (/proc/PID/task/*/schedstat: user
and system, in nanoseconds) by the replies. A scrape is made during every run
with metrics on, so the exposition is exercised too. The medians of the rounds
and their ratio are printed.

Usage: bench/metrics.py [--rounds N] [--duration S] [--bin PATH]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

SERVER_CPU = "0"
CLIENT_CPU = "1"
PORT = 18791
METRICS_PORT = 18792


def server_ns(pid):
    """CPU time of every thread of `pid` so far, in nanoseconds."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def wait_up(url):
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"the server did not answer {url}")


def run(binary, work, metrics, duration, warmup):
    """CPU nanoseconds per request of one run."""
    conf = os.path.join(work, "metrics-on.toml" if metrics else "metrics-off.toml")
    with open(conf, "w") as f:
        f.write(f'workers = 1\nmodel = "epoll"\nroot = "{work}/www"\n'
                f'[log]\naccess = "off"\nlevel = "warn"\n')
        if metrics:
            f.write(f'[metrics]\nlisten = "127.0.0.1:{METRICS_PORT}"\n')
    cmd = ["taskset", "-c", SERVER_CPU, binary, "serve", "--config", conf,
           "--listen", f"127.0.0.1:{PORT}"]
    if os.geteuid() == 0:
        cmd.append("--run-as-root")
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{PORT}/1k.bin"
        wait_up(url)
        load = ["taskset", "-c", CLIENT_CPU, binary, "bench", "-t", "1", "-q", "--json",
                "-c", "64"]
        subprocess.run(load + ["-d", f"{warmup}s", url], check=True,
                       stdout=subprocess.DEVNULL)
        before = server_ns(server.pid)
        bench = subprocess.Popen(load + ["-d", f"{duration}s", url], stdout=subprocess.PIPE)
        if metrics:
            time.sleep(duration / 2)
            text = urllib.request.urlopen(
                f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5).read()
            assert b"fastpath_http_requests_total" in text
        out, _ = bench.communicate()
        after = server_ns(server.pid)
        report = json.loads(out)
        errors = report.get("errors", {}).get("total", 0)
        if errors:
            sys.exit(f"{errors} errors in the load run")
        return (after - before) / report["replies"], report["replies"] / duration
    finally:
        server.terminate()
        server.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--bin", default="target/release/fastpath")
    args = parser.parse_args()
    if not shutil.which("taskset"):
        sys.exit("taskset is required (util-linux)")
    binary = os.path.realpath(args.bin)
    work = tempfile.mkdtemp(prefix="fastpath-metrics-")
    try:
        os.mkdir(os.path.join(work, "www"))
        with open(os.path.join(work, "www", "1k.bin"), "wb") as f:
            f.write(os.urandom(1024))
        results = {False: [], True: []}
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for metrics in order:
                ns, rate = run(binary, work, metrics, args.duration, args.warmup)
                results[metrics].append(ns)
                print(f"round {i + 1} metrics {'on ' if metrics else 'off'}: "
                      f"{ns / 1000:.3f} µs CPU per request, {rate:,.0f} req/s", flush=True)
        off = statistics.median(results[False])
        on = statistics.median(results[True])
        print(f"median off: {off / 1000:.3f} µs per request")
        print(f"median on:  {on / 1000:.3f} µs per request")
        print(f"on / off: {on / off:.3f}")
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
