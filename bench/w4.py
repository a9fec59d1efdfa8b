#!/usr/bin/env python3
"""Workload 4 (a 1 MiB file, keep-alive, 16 connections) taken apart: for each server and
each client (`fastpath bench` and wrk, both pinned to CPU 1, the servers as bench/run.sh
runs them on CPU 0), in rounds that take the servers in turn:

  * requests/s, the server's CPU time per request (utime + stime of its process tree, what
    bench/run.sh reports), the client's, their sum (which does not depend on which of the
    two the kernel charges the loopback's work to), and the busy time of both cores per
    request (from their idle time in /proc/stat; other jobs on the machine count there);
  * with --strace: system calls per request by name (strace -c -f attached to the server
    tree for --strace-duration seconds under the same load), and the bytes each sendfile,
    writev, sendmsg and write call returned (one more strace that logs every send).

Usage: bench/w4.py [--servers fastpath,nginx,lighttpd] [--clients fastpath,wrk]
                   [--rounds 3] [--duration 4] [--strace] [--baseline-bin PATH]
                   [--config-variant NAME:TOML]...

FASTPATH_BIN selects the fastpath binary (it is also the load generator); --baseline-bin
adds another fastpath binary as "fastpath-base", measured the same way.
"""

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as suite  # noqa: E402
import models  # noqa: E402
from bench import CLIENT_CPU, HOST, BenchError, log  # noqa: E402

suite.LOG_TAG = "w4"
PATH = "/1m.bin"
SIZE = 1 << 20
CONNECTIONS = 16
SEND_CALLS = ("sendfile", "writev", "sendmsg", "write", "sendto")


class Server(suite.Server):
    ready_desc = " with the 1 MiB file"

    def port_offset(self):
        return self.ctx.names.index(self.name) + 1

    def prepare(self):
        if self.name in self.ctx.config_variants:
            cmd, test, version = self.prepare_fastpath(None, self.ctx.fastpath_bin)
            path = cmd[cmd.index("--config") + 1]
            with open(path) as f:
                text = f.read()
            extra = self.ctx.config_variants[self.name]
            header, _, keys = extra.partition("\n")
            if header.startswith("[") and f"\n{header}\n" in text:
                # The table is there already: its keys go under it.
                text = text.replace(f"\n{header}\n", f"\n{header}\n{keys}\n", 1)
            else:
                text += "\n" + extra + "\n"
            with open(path, "w") as f:
                f.write(text)
            return cmd, test, version
        env = self.ctx.variants.get(self.name)
        if env is None:
            return super().prepare()
        cmd, test, version = self.prepare_fastpath(None, self.ctx.fastpath_bin)
        return ["env"] + env + cmd, test, version

    def ready(self):
        status, body, _ = suite.http_get(self.port, PATH)
        return status == 200 and body == self.ctx.content


class Context(suite.Processes):
    def __init__(self, args, work):
        self.args = args
        self.port_base = args.port_base
        self.model = None
        self.work = work
        os.makedirs(os.path.join(work, "logs"), exist_ok=True)
        self.root = os.path.join(work, "www")
        os.makedirs(self.root)
        super().__init__(os.path.join(work, "pgids"))
        self.fastpath_bin = args.fastpath_bin
        self.baseline_bin = args.baseline_bin
        self.contents = {}
        self.names = []
        self.variants = {}
        self.config_variants = {}
        self.commit = suite.git_commit()
        self.content = suite.make_content(SIZE)
        with open(os.path.join(self.root, PATH.lstrip("/")), "wb") as f:
            f.write(self.content)
        suite.publish_tree(self.root)
        self.wrk = suite.which("wrk")


def client_cmd(ctx, client, server, duration):
    url = f"http://{HOST}:{server.port}{PATH}"
    if client == "wrk":
        return ["taskset", "-c", CLIENT_CPU, ctx.wrk, "-t1", f"-c{CONNECTIONS}",
                f"-d{duration:g}s", "--timeout", "10s", "-s",
                os.path.join(suite.WRK_DIR, "report.lua"), url]
    return ["taskset", "-c", CLIENT_CPU, ctx.fastpath_bin, "bench", "-t", "1", "-q", "--json",
            "-c", str(CONNECTIONS), "-d", f"{duration:g}s", "--timeout", "10s",
            "--expect-length", str(SIZE), url]


def run_client(ctx, client, server, duration):
    """(requests, seconds) of one client run; fails on any error."""
    cmd = client_cmd(ctx, client, server, duration)
    rc, out, err = ctx.run(cmd, duration + 60, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    if client == "wrk":
        m = re.search(r"^BENCH_RESULT (\{.*\})$", out, re.M)
        if rc != 0 or not m:
            raise BenchError(f"wrk failed against {server.name} (status {rc}):\n{out}{err}")
        res = json.loads(m.group(1))
        bad = [k for k in ("connect", "read", "write", "status", "timeout") if res[k]]
        if bad:
            raise BenchError(f"wrk against {server.name}: errors {bad}")
        return res["requests"], res["duration_us"] / 1e6
    res = suite.bench_report(rc, out, err)
    problems = suite.check_bench(res)
    if problems:
        raise BenchError(f"fastpath bench against {server.name}: {problems}")
    return res["replies"], res["duration_s"]


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(ctx, client, server, duration):
    try:
        run_client(ctx, client, server, 1)  # warm-up
    except BenchError as e:
        log(f"warm-up: {e}")
    cpu0 = suite.tree_cpu_seconds(server.pid, models.children_of)
    client0 = children_cpu()
    t0 = suite.cpu_times()
    n, secs = run_client(ctx, client, server, duration)
    t1 = suite.cpu_times()
    client1 = children_cpu()
    cpu1 = suite.tree_cpu_seconds(server.pid, models.children_of)
    busy = sum(suite.cpu_busy(t0, t1, c) for c in (0, 1)) * (t1[0] - t0[0])
    return {"rps": n / secs, "server_us": (cpu1 - cpu0) * 1e6 / n,
            "client_us": (client1 - client0) * 1e6 / n,
            "pair_us": (cpu1 - cpu0 + client1 - client0) * 1e6 / n,
            "both_cores_us": busy * 1e6 / n}


def tids(pid):
    out = []
    for p in suite.process_tree(pid, models.children_of):
        try:
            out += os.listdir(f"/proc/{p}/task")
        except OSError:
            pass
    return out


def strace(ctx, client, server, duration):
    """System calls per request, and the bytes per send call, under the same load."""
    work = ctx.work
    out = {}
    for mode in ("count", "sizes"):
        trace = os.path.join(work, f"strace.{mode}")
        args = ["strace", "-f", "-o", trace]
        args += ["-c"] if mode == "count" else ["-e", "trace=" + ",".join(SEND_CALLS)]
        for t in tids(server.pid):
            args += ["-p", t]
        tracer = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        n, _ = run_client(ctx, client, server, duration)
        tracer.send_signal(2)
        tracer.wait(timeout=60)
        with open(trace) as f:
            text = f.read()
        if mode == "count":
            calls = {}
            for line in text.splitlines():
                parts = line.split()
                if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
                    calls[parts[-1]] = int(parts[3]) / n
            out["calls"] = calls
        else:
            sizes = {}
            for m in re.finditer(r"\b(\w+)\(.*\)\s+=\s+(-?\d+)", text):
                if m.group(1) in SEND_CALLS:
                    sizes.setdefault(m.group(1), []).append(int(m.group(2)))
            out["sizes"] = {k: {"calls": len(v), "mean": statistics.mean(v),
                                "median": statistics.median(v),
                                "eagain": sum(1 for x in v if x < 0)}
                            for k, v in sizes.items()}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="fastpath,nginx,lighttpd")
    ap.add_argument("--clients", default="fastpath,wrk")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=4)
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--strace-duration", type=float, default=2)
    ap.add_argument("--baseline-bin")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:VAR=VALUE[,VAR=VALUE]: fastpath again, started with these "
                         "environment variables (for experiments)")
    ap.add_argument("--config-variant", action="append", default=[],
                    help="NAME:TOML: fastpath again, with TOML (\\n for new lines) added to "
                         "its configuration, e.g. 'fastpath-sb:[limits]\\nsend_buffer = \"256KiB\"'")
    ap.add_argument("--port-base", type=int, default=18400)
    ap.add_argument("--fastpath-bin", default=os.environ.get("FASTPATH_BIN"))
    ap.add_argument("--json")
    args = ap.parse_args()
    if not args.fastpath_bin:
        raise SystemExit("set FASTPATH_BIN or --fastpath-bin")
    args.fastpath_bin = os.path.realpath(args.fastpath_bin)
    names = args.servers.split(",")
    if args.baseline_bin:
        args.baseline_bin = os.path.realpath(args.baseline_bin)
        names.insert(names.index("fastpath") + 1, suite.BASELINE)
    clients = args.clients.split(",")
    work = tempfile.mkdtemp(prefix="fastpath-w4.")
    os.chmod(work, 0o755)
    ctx = Context(args, work)
    for v in args.variant:
        name, env = v.split(":", 1)
        ctx.variants[name] = env.split(",")
        names.append(name)
    for v in args.config_variant:
        name, text = v.split(":", 1)
        ctx.config_variants[name] = text.replace("\\n", "\n")
        names.append(name)
    ctx.names = names
    results = {name: {c: [] for c in clients} for name in names}
    running = []
    load = [suite.loadavg()]
    try:
        for name in names:
            server = suite.prepare_server(ctx, name, {}, Server)
            if server is None:
                raise SystemExit(f"{name} could not be prepared")
            server.start()
            running.append(server)
        for rnd in range(args.rounds):
            for client in clients:
                for server in running:
                    r = measure(ctx, client, server, args.duration)
                    results[server.name][client].append(r)
                    log(f"round {rnd + 1}, {client} -> {server.name}: {r['rps']:.0f} req/s, "
                        f"server {r['server_us']:.0f} µs/req, client {r['client_us']:.0f}, "
                        f"both cores "
                        f"{r['both_cores_us']:.0f} µs/req")
        if args.strace:
            for client in clients:
                for server in running:
                    s = strace(ctx, client, server, args.strace_duration)
                    results[server.name][client + "-strace"] = s
                    calls = ", ".join(f"{k} {v:.2f}" for k, v in sorted(
                        s["calls"].items(), key=lambda kv: -kv[1]) if v >= 0.05)
                    sizes = ", ".join(f"{k}: {v['calls']} calls, mean {v['mean']:.0f} B, "
                                      f"median {v['median']:.0f} B, {v['eagain']} EAGAIN"
                                      for k, v in s["sizes"].items())
                    log(f"strace, {client} -> {server.name}: per request {calls}; {sizes}")
    finally:
        for server in running:
            server.stop()
        ctx.cleanup()
        load.append(suite.loadavg())
    print(f"load average before {load[0]}, after {load[1]}")
    print("| client | server | req/s (median, min-max) | server CPU µs/req | "
          "client CPU µs/req | server + client µs/req | both cores busy µs/req |")
    print("|---|---|--:|--:|--:|--:|--:|")
    for client in clients:
        for name in names:
            rs = results[name][client]

            def fig(key, fmt):
                v = [r[key] for r in rs]
                return f"{fmt(statistics.median(v))} ({fmt(min(v))}-{fmt(max(v))})"
            print(f"| {client} | {name} | {fig('rps', lambda x: f'{x:,.0f}')} | "
                  f"{fig('server_us', lambda x: f'{x:.0f}')} | "
                  f"{fig('client_us', lambda x: f'{x:.0f}')} | "
                  f"{fig('pair_us', lambda x: f'{x:.0f}')} | "
                  f"{fig('both_cores_us', lambda x: f'{x:.0f}')} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
