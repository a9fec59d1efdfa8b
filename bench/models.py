#!/usr/bin/env python3
"""Concurrency-model benchmark: fastpath's models against each model's natural peer.

Every model `fastpath serve --model NAME` accepts (prefork, threads, epoll, uring,
percore) is run against the server built the same way:

    prefork            <->  Apache httpd, prefork MPM  (bench/peers/apache2-prefork.conf)
    threads            <->  Apache httpd, worker MPM   (bench/peers/apache2-worker.conf)
    epoll/uring/percore <-> nginx                      (bench/peers/nginx.conf)

in one run, one server at a time, the server pinned to CPU 0 and the load generator
(`fastpath bench`, one thread) to CPU 1. A model the binary does not accept is skipped
with a message, so the script runs on any binary.

Per server, as in the NEST tables (httperf's figures at rising connection rates, up to
and past saturation):
  * an open-loop connection-rate sweep (`fastpath bench --conn-rate R --calls 1
    --no-keepalive --timeout 500ms`: a new connection every 1/R s whatever the server
    does, one request for a 1 KiB file each, every reply verified): replies/s, connection
    time and response time (request written -> first reply byte) p50 and p99, errors by
    class, accept-queue overflows, and the server's CPU time per reply (user+sys of its
    whole process tree from /proc, read before and after every step);
  * memory per idle keep-alive connection (bench/idle_conns.py), as PSS summed over the
    process tree (shared pages of forked children are divided among them, not counted
    once per child); pool models (one process or thread per connection) are measured
    with a number of connections that fits their pool.

Results: a Markdown report on stdout and between the models:begin/models:end markers of
BENCHMARKS.md (unless --no-write); --keep keeps the work directory with every server
configuration and log and the raw JSON of every run.

Usage: python3 bench/models.py [--quick] [--no-write] [--keep] [--models LIST]
       [--peers LIST] [--rates LIST] [--duration S] ...   (--help for all)
The default run (8 rates of 3 s, 10,000 idle connections for the event models) takes
about 5 to 6 minutes with all eight servers; --quick (4 rates of 1 s, 1,000 idle
connections) about 2.
FASTPATH_BIN selects the fastpath binary (server and load generator); without it the
script builds one with `cargo build --release -p fastpath`. Missing packages (nginx,
apache2, util-linux) are installed with apt-get. Every process it starts is stopped when
it ends, also after a failure or an interrupt. Python 3 standard library only.
"""

import argparse
import ctypes
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ left in bench/
# The servers, process trees, clients and helpers of the comparison suite (bench/bench.py).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as suite  # noqa: E402
from bench import (CLIENT_BUSY, CLIENT_CPU, CLIENT_LAG_US, CLK_TCK, FILE_1K, HOST,  # noqa: E402
                   REPO_DIR, RUN_ERRORS, SERVER_BUSY, SERVER_CPU, BenchError,
                   http_get, last_line, log)

suite.LOG_TAG = "models"

MARK_BEGIN = "<!-- models:begin -->"
MARK_END = "<!-- models:end -->"
SECTION_HEADING = "## Concurrency models"

MODELS = ["prefork", "threads", "epoll", "uring", "percore"]
PEER_OF = {"prefork": "apache2-prefork", "threads": "apache2-worker",
           "epoll": "nginx", "uring": "nginx", "percore": "nginx"}
PEERS = ["apache2-prefork", "apache2-worker", "nginx"]
# Run order: each fastpath model next to its peer.
ORDER = ["fastpath-prefork", "apache2-prefork", "fastpath-threads", "apache2-worker",
         "fastpath-epoll", "fastpath-uring", "fastpath-percore", "nginx"]
GROUPS = [
    ("Processes: one connection per process", ["fastpath-prefork", "apache2-prefork"]),
    ("Threads: one connection per thread", ["fastpath-threads", "apache2-worker"]),
    ("Events: many connections per thread",
     ["fastpath-epoll", "fastpath-uring", "fastpath-percore", "nginx"]),
]
LABEL = {"fastpath-prefork": "fastpath prefork", "fastpath-threads": "fastpath threads",
         "fastpath-epoll": "fastpath epoll", "fastpath-uring": "fastpath uring",
         "fastpath-percore": "fastpath percore", "apache2-prefork": "Apache (prefork)",
         "apache2-worker": "Apache (worker)", "nginx": "nginx"}
MODEL_DESC = {
    "fastpath-prefork": "pool of processes (5 at start, ≤ 256)",
    "apache2-prefork": "pool of processes (5 at start, ≤ 256)",
    "fastpath-threads": "pool of 256 threads, one process",
    "apache2-worker": "pool of 256 threads, one child",
    "fastpath-epoll": "epoll loop, 1 thread",
    "fastpath-uring": "io_uring loop, 1 thread",
    "fastpath-percore": "pinned loop per CPU (1 here)",
    "nginx": "epoll loop, 1 worker",
}
# One process or thread per connection, with a limited pool: measured with fewer idle
# connections than the event models.
POOL_SERVERS = {"fastpath-prefork", "fastpath-threads", "apache2-prefork", "apache2-worker"}

DEFAULT_RATES = [1000, 2000, 4000, 8000, 12000, 16000, 20000, 24000]
QUICK_RATES = [1000, 4000, 12000, 20000]

PAGE = os.sysconf("SC_PAGE_SIZE")


class Unsupported(Exception):
    """The fastpath binary does not accept this --model."""


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(f"signal {signum}")
        self.signum = signum


# --------------------------------------------------------------------------
# Process trees, CPU time and memory from /proc


def children_of(pid):
    """Child pids of every thread of a process (/proc/PID/task/*/children)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def server_cpu(server):
    """User + system time of the server's whole tree, found through the children files:
    every process with all its threads (live or exited: /proc/PID/stat of a process counts
    them all), plus the children it has already reaped (cutime, cstime), so a prefork child
    that exits between two readings moves from one term to the other and is never lost."""
    return suite.tree_cpu_seconds(server.pid, children_of)


def tree_memory(pid):
    """{"pss", "rss"} bytes summed over the tree, and its processes and threads."""
    return suite.tree_memory(pid, children_of)


_libc = None


def die_with_parent():
    """preexec_fn: the started server gets SIGTERM if this script dies without cleaning
    up (even by SIGKILL), so no server outlives the run."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(None, use_errno=True)
        _libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# --------------------------------------------------------------------------
# Servers


class Server(suite.Server):
    """A server of this benchmark (a fastpath model or a peer), run as bench/bench.py runs
    its servers; it listens on --port-base + its place in ORDER."""

    start_timeout = 20
    ready_desc = f" GET {FILE_1K} correctly"
    preexec_fn = staticmethod(die_with_parent)

    def port_offset(self):
        return ORDER.index(self.name) + 1

    @property
    def model(self):
        return self.name.split("-", 1)[1] if self.name.startswith("fastpath-") else None

    def prepare(self):
        if self.model:
            # The configuration of bench/run.sh (one worker, access log off, long
            # keep-alive, high connection limit); the model on the command line.
            cmd, _test, version = self.prepare_fastpath(self.model, self.ctx.fastpath_bin)
            return cmd, None, version
        if self.name == "nginx":
            return self.prepare_nginx()
        if self.name.startswith("apache2-"):
            return self.prepare_apache2(f"{self.name}.conf", self.ctx.files)
        raise BenchError(f"unknown server {self.name}")

    def version(self):
        v = super().version()
        if self.model:
            v += f" (tree at {self.ctx.commit}), --model {self.model}"
        return v

    def ready(self):
        return answer_error(self.ctx, self.port, timeout=2) is None

    def start_error(self, what, offset):
        text = suite.read_log(self.log_path, offset)
        if (self.model and self.proc.returncode is not None
                and re.search(r"unknown model|invalid value .*model", text or "")):
            return Unsupported(last_line(text))
        return BenchError(f"{self.name} {what}: {last_line(text)}")


def answer_error(ctx, port, timeout=5):
    """None if the server answers GET FILE_1K with the file, else what it answered."""
    status, body, _ = http_get(port, FILE_1K, timeout=timeout)
    if status == 200 and body == ctx.file_1k:
        return None
    return f"status {status}, {len(body)} bytes"


# --------------------------------------------------------------------------
# Measurements


def display_cmd(ctx, cmd):
    s = shlex.join(cmd)
    return s.replace(ctx.fastpath_bin, "fastpath").replace(ctx.root, "WORK/www")


def bench_cmd(ctx, server, rate, duration):
    return ["taskset", "-c", CLIENT_CPU, ctx.fastpath_bin, "bench", "-t", "1", "-q", "--json",
            "-d", f"{duration:g}s", "--conn-rate", f"{rate:g}", "--calls", "1",
            "--no-keepalive", "--timeout", ctx.timeout, "--docroot", ctx.root, "--verify",
            f"http://{HOST}:{server.port}{FILE_1K}"]


def warm_up(ctx, server):
    """The lowest rate for a moment, not counted: the first step then does not pay for
    first touches (page faults, caches filled) of a freshly started server."""
    if ctx.warmup <= 0:
        return
    cmd = bench_cmd(ctx, server, ctx.rates[0], ctx.warmup)
    rc, out, err = ctx.run(cmd, ctx.warmup + 60, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    with open(os.path.join(ctx.work, "raw", f"{server.name}.warmup.json"), "w") as f:
        f.write(out)
    if rc != 0:
        raise BenchError(f"fastpath bench failed in the warm-up (status {rc}): "
                         f"{(err or out).strip()[-1500:]}")


def bench_step(ctx, server, rate):
    """One step of the sweep: `fastpath bench` opening connections at `rate` per second,
    with the server's CPU time and the kernel's listen counters read around it."""
    cmd = bench_cmd(ctx, server, rate, ctx.duration)
    cpu0, tcp0, t0 = server_cpu(server), suite.tcp_counters(), time.monotonic()
    cores0 = suite.cpu_times()
    rc, out, err = ctx.run(cmd, ctx.duration * 8 + 60, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    cores1 = suite.cpu_times()
    cpu1, tcp1, t1 = server_cpu(server), suite.tcp_counters(), time.monotonic()
    with open(os.path.join(ctx.work, "raw", f"{server.name}.{rate:g}.json"), "w") as f:
        f.write(out)
    res = suite.bench_report(rc, out, err)
    secs = res["duration_s"] or 1e-9
    classes = {k: v for k, v in res["errors"].items() if k != "total" and v}
    non2xx = sum(v for k, v in res["status"].items() if k != "2xx")
    lag = res["send_lag_us"]
    client_util = res["cpu_s"] / secs
    cpu = cpu1 - cpu0

    def pct(key, p):
        h = res.get(key) or {}
        return h.get(p) if h.get("count") else None

    pt = {
        "offered": rate,
        "replies": res["replies"],
        "rps": res["rps"],
        "errors": res["errors"]["total"] + non2xx,
        "classes": classes,
        "non2xx": non2xx,
        "missed": res.get("missed", 0),
        "in_flight": res.get("in_flight_at_end", 0),
        "conns_opened": res.get("conns_opened"),
        "connect_p50": pct("connect_us", "p50"), "connect_p99": pct("connect_us", "p99"),
        "response_p50": pct("first_byte_us", "p50"), "response_p99": pct("first_byte_us", "p99"),
        "transfer_p99": pct("transfer_us", "p99"), "transfer_max": pct("transfer_us", "max"),
        "total_p50": pct("latency_us", "p50"), "total_p99": pct("latency_us", "p99"),
        "lag_p50": pct("send_lag_us", "p50"),
        "server_cpu_s": cpu,
        "server_util": cpu / secs,
        "cpu_us_per_reply": cpu * 1e6 / res["replies"] if res["replies"] else None,
        "client_util": client_util,
        # Everything that ran on each core during the step (including the client's start
        # and exit): the server's share of its core, and whether other work shared it.
        "server_core_busy": suite.cpu_busy(cores0, cores1, int(SERVER_CPU)),
        "client_core_busy": suite.cpu_busy(cores0, cores1, int(CLIENT_CPU)),
        "listen_overflows": tcp1["ListenOverflows"] - tcp0["ListenOverflows"],
        "syncookies": tcp1["SyncookiesSent"] - tcp0["SyncookiesSent"],
        "wall_s": t1 - t0,
        "cmd": display_cmd(ctx, cmd),
    }
    # Late: the median connection went out late, the client's core was saturated and the
    # replies fell short, or more than 1% of the step's connections were never opened.
    pt["client_lagged"] = bool((lag["count"] and lag["p50"] > CLIENT_LAG_US)
                               or (client_util >= CLIENT_BUSY and res["rps"] < 0.95 * rate)
                               or pt["missed"] > 0.01 * rate * ctx.duration)
    # The server was past its capacity when its core was busy, its accept queue
    # overflowed, requests timed out, or a backlog of requests was still unanswered at the
    # end (more than a late client's last burst): a pool model can be saturated by its
    # pool, with CPU to spare.
    pt["server_saturated"] = bool(
        pt["server_util"] >= SERVER_BUSY or pt["listen_overflows"] > 0
        or classes.get("timeout", 0) > 0
        or pt["in_flight"] > max(256, 0.02 * rate * ctx.duration))
    pt["mark"] = ("‡" if pt["server_saturated"] else "†") if pt["client_lagged"] else ""
    # Kept up: every connection of the step answered, at the offered rate, with the
    # client on schedule.
    pt["kept_up"] = (pt["errors"] == 0 and pt["missed"] == 0 and not pt["client_lagged"]
                     and pt["rps"] >= 0.97 * rate)
    return pt


def sweep(ctx, server):
    points = []
    for rate in ctx.rates:
        pt = bench_step(ctx, server, rate)
        points.append(pt)
        behind = f" [{pt['mark']} the load generator fell behind]" if pt["mark"] else ""
        log(f"{server.name}: {rate:g} conn/s: {pt['rps']:,.0f} replies/s, "
            f"connect p50/p99 {fmt_lat(pt['connect_p50'])}/{fmt_lat(pt['connect_p99'])}, "
            f"response p50/p99 {fmt_lat(pt['response_p50'])}/{fmt_lat(pt['response_p99'])}, "
            f"errors {fmt_errors(pt, full=True)}, overflows {pt['listen_overflows']:,}, "
            f"server CPU {pt['server_util'] * 100:.0f}% of CPU {SERVER_CPU} "
            f"{fmt_pct(pt['server_core_busy'])} busy "
            f"({fmt_num(pt['cpu_us_per_reply'])} µs/reply), client CPU "
            f"{pt['client_util'] * 100:.0f}%, {pt['wall_s']:.1f} s{behind}")
        if server.proc.poll() is not None:
            return points, [f"the server exited during the {rate:g} conn/s step "
                            f"(status {server.proc.returncode})"]
        # A late client with the server idle enough (†) means the client core is the
        # limit: higher rates would only measure it. With the server saturated too (‡)
        # the sweep goes on, past the server's saturation.
        if pt["client_lagged"] and not pt["server_saturated"] and not ctx.keep_going:
            log(f"{server.name}: the load generator could not keep up at {rate:g} conn/s "
                f"while the server was not saturated; higher rates not run "
                f"(--keep-going runs them)")
            pt["ended_sweep"] = True
            break
        if pt["wall_s"] > 4 * ctx.duration + 5 and not ctx.keep_going:
            log(f"{server.name}: the {rate:g} conn/s step took {pt['wall_s']:.0f} s; "
                f"higher rates not run")
            pt["ended_sweep"] = True
            break
        time.sleep(ctx.pause)
    # The server must still answer correctly afterwards.
    def answers():
        err = answer_error(ctx, server.port)
        if err:
            raise BenchError(err)

    _, problem = suite.recovery(answers)
    return points, [problem] if problem else []


def settle_memory(pid, timeout=5.0):
    """Memory of the tree once its process and thread counts stop changing (a prefork
    pool may still be forking spare children)."""
    time.sleep(1.0)
    last = tree_memory(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.5)
        cur = tree_memory(pid)
        if (cur["processes"], cur["threads"]) == (last["processes"], last["threads"]):
            return cur
        last = cur
    return last


def idle_memory(ctx, server, count):
    """Memory per idle keep-alive connection: PSS and RSS of the server's tree before and
    with `count` connections held by bench/idle_conns.py (each made one request)."""
    http_get(server.port, FILE_1K)
    before = settle_memory(server.pid)
    after, ready, held, problems = suite.hold_idle(
        ctx, server, count, lambda: settle_memory(server.pid), ["--timeout", "60"])
    return {"requested": count, "held": held, "before": before, "after": after,
            "open_seconds": ready["seconds"],
            "pss_per_conn": (after["pss"] - before["pss"]) / held if held else None,
            "rss_per_conn": (after["rss"] - before["rss"]) / held if held else None,
            "problems": problems}


def run_server(ctx, name):
    r = {"name": name, "label": LABEL[name]}
    server = suite.prepare_server(ctx, name, r, Server)
    if server is None:
        return r
    try:
        count = ctx.idle_pool if name in POOL_SERVERS else ctx.idle
        log(f"{name}: starting on port {server.port} for {count:,} idle connections")
        server.start()
        r["idle"] = idle_memory(ctx, server, count)
        i = r["idle"]
        log(f"{name}: idle: PSS {fmt_bytes(i['before']['pss'])} -> {fmt_bytes(i['after']['pss'])} "
            f"with {i['held']:,} held: {fmt_num(i['pss_per_conn'])} B PSS per connection "
            f"({fmt_num(i['rss_per_conn'])} B RSS); {i['before']['processes']} -> "
            f"{i['after']['processes']} processes, {i['before']['threads']} -> "
            f"{i['after']['threads']} threads"
            + (f"; PROBLEMS: {'; '.join(i['problems'])}" if i["problems"] else ""))
        server.stop()
        time.sleep(ctx.pause)

        log(f"{name}: restarting for the sweep ({', '.join(f'{x:g}' for x in ctx.rates)} "
            f"conn/s, {ctx.duration:g} s each)")
        server.start()
        warm_up(ctx, server)
        time.sleep(ctx.pause)
        r["points"], r["problems"] = sweep(ctx, server)
        for p in r["problems"]:
            log(f"ERROR {name}: {p}")
    except Unsupported as e:
        r = {"name": name, "label": LABEL[name], "skipped": str(e)}
        log(f"{name}: SKIPPED: this fastpath binary does not accept --model {server.model} ({e})")
    except RUN_ERRORS + (KeyError,) as e:
        suite.failed(r, name, e)
    finally:
        server.stop()
    return r


# --------------------------------------------------------------------------
# Formatting


def fmt_num(v, digits=3):
    if v is None:
        return "–"
    if abs(v) >= 10 ** digits:
        return f"{v:,.0f}"
    s = f"{v:.{digits}g}"
    if "e" in s:
        s = f"{v:,.0f}"
    return s


def fmt_lat(us):
    if us is None:
        return "–"
    if us < 1000:
        return f"{us:.0f} µs"
    if us < 10000:
        return f"{us / 1000:.2f} ms"
    if us < 100000:
        return f"{us / 1000:.1f} ms"
    return f"{us / 1000:,.0f} ms"


def fmt_pct(v):
    return "–" if v is None else f"{v * 100:.0f}%"


def fmt_bytes(b):
    if b is None:
        return "–"
    if abs(b) >= 2 ** 20:
        return f"{b / 2 ** 20:.1f} MiB"
    return f"{b / 1024:.0f} KiB"


def fmt_errors(pt, full=False):
    """The failed requests by class; with `full`, also what the client never sent and
    what was still unanswered when the window closed (neither is an error)."""
    parts = [f"{k.replace('_', '-')} {v:,}" for k, v in sorted(pt["classes"].items(),
                                                               key=lambda kv: -kv[1])]
    if pt["non2xx"]:
        parts.append(f"non-2xx {pt['non2xx']:,}")
    text = ", ".join(parts) or "none"
    if full and pt["missed"]:
        text += f"; {pt['missed']:,} not sent (client behind)"
    if full and pt["in_flight"]:
        text += f"; {pt['in_flight']:,} unanswered at the end"
    return text


def summary(r):
    pts = r.get("points") or []
    peak = max(pts, key=lambda p: p["rps"]) if pts else None
    kept = None
    for p in pts:  # the rates from the lowest up that were all answered in full
        if not p["kept_up"]:
            break
        kept = p["offered"]
    return peak, kept


def pairs_table(ctx, by):
    """Each fastpath model against its peer, at the highest rate both kept up with."""
    rows = []
    for model in MODELS:
        m, peer = by.get(f"fastpath-{model}"), by.get(PEER_OF[model])
        if not m or not peer or not m.get("points") or not peer.get("points"):
            continue
        _, km = summary(m)
        _, kp = summary(peer)
        pm, pp = summary(m)[0], summary(peer)[0]
        at = min(km, kp) if km and kp else None
        a = next((p for p in m["points"] if p["offered"] == at), None)
        b = next((p for p in peer["points"] if p["offered"] == at), None)

        def ratio(x, y):
            return f"{x / y:.2f}×" if x is not None and y else "–"

        im, ip = (m.get("idle") or {}).get("pss_per_conn"), (peer.get("idle") or {}).get("pss_per_conn")
        rows.append(
            f"| {m['label']} | {peer['label']} | " + (f"{at:,}" if at else "–") + " | "
            + (f"{fmt_num(a['cpu_us_per_reply'])} vs {fmt_num(b['cpu_us_per_reply'])} "
               f"({ratio(a['cpu_us_per_reply'], b['cpu_us_per_reply'])})" if a and b else "–")
            + " | "
            + (f"{fmt_lat(a['response_p99'])} vs {fmt_lat(b['response_p99'])}" if a and b else "–")
            + " | "
            + (f"{pm['rps']:,.0f} vs {pp['rps']:,.0f} ({ratio(pm['rps'], pp['rps'])})"
               if pm and pp else "–")
            + " | "
            + (f"{fmt_num(im)} B vs {fmt_num(ip)} B ({ratio(im, ip)})"
               if im is not None and ip is not None else "–")
            + " |")
    if not rows:
        return []
    return ["### Each model against its peer", "",
            "| fastpath model | peer | compared at conn/s | CPU µs/reply (÷ peer) | "
            "response p99 | peak replies/s (÷ peer) | memory per idle connection (÷ peer) |",
            "|---|---|--:|--:|--:|--:|--:|"] + rows + [
            "", "Compared at the highest rate both kept up with (every rate up to it answered "
            "in full); peak replies/s over the whole sweep. Memory per idle connection is "
            "PSS (see below).", ""]


def report(ctx, results, started, load_start, load_end, skipped):
    order = [r for r in results if "points" in r or "failed" in r]
    by = {r["name"]: r for r in results}
    lines = []
    lines.append(f"Run of {started:%Y-%m-%d %H:%M} UTC, {'quick' if ctx.quick else 'full'} mode: "
                 f"{ctx.duration:g} s per rate after {ctx.warmup:g} s of warm-up at the lowest "
                 f"rate, {ctx.pause:g} s rest between rates, timeout {ctx.timeout}.")
    lines += ["", "```sh", ctx.command, "```", ""]
    lines.append(f"- Machine: {machine_info()}; servers on CPU {SERVER_CPU}, load generator on "
                 f"CPU {CLIENT_CPU}.")
    lines.append(f"- Load average (1, 5, 15 min): {load_start} at the start, {load_end} at the end; "
                 f"in the second before the run CPU 0 was {fmt_pct(ctx.idle_check[0])} and CPU 1 "
                 f"{fmt_pct(ctx.idle_check[1])} busy.")
    # Judged by the second before the run only: the load average still counts the work of a
    # suite that ran just before, which is over.
    busy = any(v is not None and v > 0.1 for v in ctx.idle_check)
    if busy:
        lines.append("- **The machine was not idle when the run started** (other jobs were "
                     "running on it, on the same cores), so these figures are noisy: rerun on "
                     "a quiet machine before drawing conclusions.")
    steps = [p for r in results for p in r.get("points", [])
             if p.get("server_core_busy") is not None]
    shared = [p["server_core_busy"] - p["server_util"] for p in steps
              if p["server_core_busy"] - p["server_util"] > 0.25]
    if steps and len(shared) * 4 > len(steps):
        lines.append(f"- **CPU 0 was busy with more than the server** in {len(shared)} of "
                     f"{len(steps)} steps (by up to {max(shared) * 100:.0f} points of the core, "
                     f"see \"server CPU / CPU 0 busy\"): other work shared the server's core, "
                     f"which slows the server and inflates its CPU time per reply.")
    lines.append(f"- Load generator: `{ctx.bench_display}` per rate (fastpath bench, one thread, "
                 f"every reply verified against the manifest).")
    for r in results:
        if r.get("version"):
            lines.append(f"- {r['label']}: {r['version']}")
    for name, why in skipped:
        lines.append(f"- {LABEL[name]}: **skipped**, this binary does not accept the model "
                     f"(`` {why} ``).")
    lines.append("")

    # Summary
    lines.append("### Summary")
    lines.append("")
    low = ctx.rates[0]
    lines.append(f"| server | model | peak replies/s (at conn/s) | kept up to conn/s | "
                 f"CPU µs/reply at {low:,} conn/s | CPU µs/reply at peak | "
                 f"memory per idle connection (PSS) | idle connections held |")
    lines.append("|---|---|--:|--:|--:|--:|--:|--:|")
    for r in order:
        name = r["name"]
        if "failed" in r and "points" not in r:
            lines.append(f"| {r['label']} | {MODEL_DESC[name]} | **failed**: "
                         f"{md_escape(r['failed'].splitlines()[0])} | | | | | |")
            continue
        peak, kept = summary(r)
        lowpt = next((p for p in r["points"] if p["offered"] == low), None)
        idle = r.get("idle") or {}
        lines.append(
            f"| {r['label']} | {MODEL_DESC[name]} | "
            + (f"{peak['rps']:,.0f} ({peak['offered']:,}{(' ' + peak['mark']) if peak['mark'] else ''})"
               if peak else "–") + " | "
            + (f"{kept:,}" if kept else "none") + " | "
            + (fmt_num(lowpt["cpu_us_per_reply"]) if lowpt else "–") + " | "
            + (fmt_num(peak["cpu_us_per_reply"]) if peak else "–") + " | "
            + (f"{fmt_num(idle.get('pss_per_conn'))} B" if idle.get("pss_per_conn") is not None
               else "–") + " | "
            + (f"{idle['held']:,}" if idle else "–") + " |")
    lines.append("")
    lines.append("Peak replies/s is the best step (marked † or ‡ when the load generator was "
                 "behind its schedule there, so the server might have done more); "
                 "\"kept up to\" is the highest offered rate up to which every rate was "
                 "answered in full (no error, at least 97% of the offered replies per second, "
                 "the client on schedule). CPU per reply is the server's "
                 "own user+sys time over the step ÷ replies, from `/proc/PID/stat` (utime, "
                 "stime, cutime, cstime) of every process of its tree (found through "
                 "`/proc/PID/task/*/children`), read before and after each step; the kernel "
                 f"counts it in clock ticks ({1000 // CLK_TCK} ms), so at the lowest rates it is "
                 "a few percent coarse. It includes the idle work of the step (timers, a pool's "
                 "maintenance), which weighs most at the lowest rate.")
    lines.append("")

    lines += pairs_table(ctx, by)

    # Per group
    transfer_max = max((p["transfer_max"] or 0 for r in order for p in r.get("points", [])),
                       default=0)
    for title, names in GROUPS:
        rs = [by[n] for n in names if n in by and by[n].get("points")]
        if not rs:
            continue
        lines.append(f"### {title}: " + ", ".join(r["label"] for r in rs))
        lines.append("")
        lines.append("| offered conn/s | server | replies/s | connect p50 | connect p99 | "
                     "response p50 | response p99 | total p99 | errors by class | "
                     "accept-queue overflows | server CPU / CPU 0 busy | CPU µs/reply |")
        lines.append("|--:|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|")
        for rate in ctx.rates:
            for r in rs:
                pt = next((p for p in r["points"] if p["offered"] == rate), None)
                if pt is None:
                    lines.append(f"| {rate:,} | {r['label']} | not run | | | | | | | | | |")
                    continue
                err = fmt_errors(pt, full=True)
                lines.append(
                    f"| {rate:,} | {r['label']} | {pt['rps']:,.0f}{(' ' + pt['mark']) if pt['mark'] else ''} | "
                    f"{fmt_lat(pt['connect_p50'])} | {fmt_lat(pt['connect_p99'])} | "
                    f"{fmt_lat(pt['response_p50'])} | {fmt_lat(pt['response_p99'])} | "
                    f"{fmt_lat(pt['total_p99'])} | {err} | {pt['listen_overflows']:,} | "
                    f"{pt['server_util'] * 100:.0f}% / {fmt_pct(pt['server_core_busy'])} | "
                    f"{fmt_num(pt['cpu_us_per_reply'])} |")
        lines.append("")
    if not any(r.get("points") for r in order):
        lines.append("No sweep completed.")
        lines.append("")
    else:
        lines.append(notes_latency(ctx, transfer_max))
        lines.append("")
    idle_rows = [r for r in order if r.get("idle")]
    if idle_rows:
        lines += memory_section(ctx, idle_rows)
    problems = [(r["label"], p) for r in results for p in r.get("problems", [])]
    problems += [(r["label"], r["failed"]) for r in results if "failed" in r]
    if problems:
        lines.append("")
        lines.append("Problems:")
        lines.append("")
        for label, p in problems:
            lines.append(f"- {label}: {md_escape(p.splitlines()[0])}")
    return "\n".join(lines).rstrip() + "\n"


def notes_latency(ctx, transfer_max):
    return (
        "Connect: `connect()` to established, of the connections that were. Response: request "
        "written to the first byte of the reply (httperf's \"response\" time). Transfer time "
        "(first to last reply byte) is not shown: it was "
        + (f"at most {fmt_lat(transfer_max)}" if transfer_max >= 1 else "under 1 µs")
        + " in every step, since the 1 KiB reply arrives in one read. Total: from the time the "
        "connection was scheduled to the last byte of the reply, so queueing before `connect()` "
        "counts too (no coordinated omission). Errors are `fastpath bench`'s classes (httperf's "
        "refused, reset, timeout, fd-unavail, addr-unavail, plus short or malformed replies and "
        f"failed verification); a request unanswered after {ctx.timeout} is a timeout. "
        "Accept-queue overflows are the kernel's `ListenOverflows` during the step; the counter "
        "is machine-wide, so another job's listener that overflows at the same time counts "
        "too. Server CPU is the server's user+sys time ÷ the step's length; CPU 0 busy is "
        "everything that ran on the server's core over the step (from `/proc/stat`: the "
        "server, interrupts and kernel threads working for its traffic, and any other job on "
        "the machine), so a saturated server shows CPU 0 near 100% whatever its own share. "
        "† / ‡: the load generator fell behind its schedule (median connection more than 1 ms "
        "late, its core ≥ 90% busy and replies short of the offered rate, or more than 1% of "
        "the step's connections never opened) while the server "
        "was not saturated (its CPU under 85%, no accept-queue overflow, no timeout, no backlog "
        "of unanswered requests) (†: the client core was the limit; the sweep of that server stops "
        "there, since higher rates would measure the client: \"not run\") or was saturated too "
        "(‡: the offered load was lower than the nominal rate, but the server was past "
        "saturation; the sweep goes on). \"Not sent\": connections due in the step that the "
        "client never opened; \"unanswered at the end\": requests still waiting when the step "
        "ended. Neither counts as an error.")


def memory_section(ctx, rows):
    lines = []
    lines.append("### Memory per idle keep-alive connection")
    lines.append("")
    lines.append("| server | idle connections held | PSS before | PSS with idle connections | "
                 "PSS per connection | RSS per connection | processes / threads before → with |"
                 " errors |")
    lines.append("|---|--:|--:|--:|--:|--:|---|---|")
    for r in rows:
        i = r["idle"]
        b, a = i["before"], i["after"]
        lines.append(
            f"| {r['label']} | {i['held']:,} of {i['requested']:,} | {fmt_bytes(b['pss'])} | "
            f"{fmt_bytes(a['pss'])} | {fmt_num(i['pss_per_conn'])} B | "
            f"{fmt_num(i['rss_per_conn'])} B | {b['processes']} / {b['threads']} → "
            f"{a['processes']} / {a['threads']} | "
            f"{md_escape('; '.join(i['problems'])) or 'none'} |")
    lines.append("")
    lines.append(
        f"Each server is started afresh, fetches the file once, and its memory is read; "
        f"`bench/idle_conns.py` (on CPU {CLIENT_CPU}) then opens the connections, each making "
        f"one request and staying open, and the memory is read again once the number of "
        f"processes and threads has settled. PSS (proportional set size, from "
        f"`/proc/PID/smaps_rollup`, summed over the process tree) divides a page shared by n "
        f"processes by n, so the copy-on-write pages of forked children are not counted once "
        f"per child as the RSS sum counts them. Models with one process or thread per "
        f"connection and a pool of at most 256 are measured with {ctx.idle_pool:,} "
        f"connections, which fit the pool (the figure then includes the processes or threads "
        f"the pool adds to serve them); the others with {ctx.idle:,}. Kernel socket memory "
        f"is not included.")
    return lines


def md_escape(s):
    return s.replace("|", "\\|")


def machine_info():
    m = suite.machine_info()
    cpu = "unknown CPU" if m["cpu"] == "unknown" else m["cpu"]
    mem = "" if m["memory"] == "unknown" else f", {m['memory']} memory"
    return f"{m['nproc']} CPUs ({cpu}){mem}, Linux {m['kernel']}"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


def write_benchmarks_md(block):
    path = os.path.join(REPO_DIR, "BENCHMARKS.md")
    suite.write_benchmarks_md(path, block.rstrip() + "\n", MARK_BEGIN, MARK_END,
                              SECTION_HEADING)
    return path


# --------------------------------------------------------------------------
# Setup


def install_missing(servers):
    need = []
    if "nginx" in servers and not suite.find_program("nginx"):
        need.append("nginx")
    if any(s.startswith("apache2-") for s in servers) and not suite.find_program("apache2"):
        need.append("apache2")
    if not suite.find_program("taskset"):
        need.append("util-linux")
    if not need:
        return
    log(f"installing {' '.join(need)}")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + need,
                   check=True, env=env, stdout=subprocess.DEVNULL)


def fastpath_binary():
    given = os.environ.get("FASTPATH_BIN")
    if given:
        b = os.path.abspath(given)
    else:
        log("building fastpath (cargo build --release -p fastpath)")
        subprocess.run(["cargo", "build", "--release", "-p", "fastpath"], cwd=REPO_DIR,
                       check=True)
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO_DIR, "target")
        if not os.path.isabs(target):
            target = os.path.join(REPO_DIR, target)
        b = os.path.join(target, "release", "fastpath")
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        raise SystemExit(f"error: fastpath binary {b} is not an executable (set FASTPATH_BIN)")
    return b


def parse_list(text, allowed, what):
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad:
        raise SystemExit(f"error: unknown {what} {', '.join(bad)} (known: {', '.join(allowed)})")
    return items


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/models.py",
        description="fastpath's concurrency models against each model's natural peer "
                    "(Apache prefork, Apache worker, nginx): connection time, response time, "
                    "errors and CPU per reply at rising connection rates, and memory per idle "
                    "connection.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="FASTPATH_BIN=path selects the fastpath binary; without it the script builds "
               "one with `cargo build --release -p fastpath`.")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke run: rates {','.join(map(str, QUICK_RATES))}, 1 s each, "
                         f"1,000 idle connections (about 2 minutes)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (configurations, logs, raw JSON of every run)")
    ap.add_argument("--json", metavar="FILE", help="write the results as JSON to FILE")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="fastpath models to try (default: all of %(default)s); a model the "
                         "binary does not accept is skipped")
    ap.add_argument("--peers", default=None,
                    help=f"peers to run, a subset of {','.join(PEERS)} or 'none' "
                         f"(default: the peers of the models asked for)")
    ap.add_argument("--rates", help="offered connection rates, comma separated (default "
                                    f"{','.join(map(str, DEFAULT_RATES))})")
    ap.add_argument("--duration", type=float, help="seconds per rate (default 3, quick 1)")
    ap.add_argument("--pause", type=float, help="seconds of rest between rates (default 1, quick 0.5)")
    ap.add_argument("--warmup", type=float,
                    help="seconds at the lowest rate before the sweep, not counted "
                         "(default 1, quick 0.5)")
    ap.add_argument("--timeout", default="500ms", help="fastpath bench --timeout (default 500ms)")
    ap.add_argument("--idle", type=int,
                    help="idle connections for the event models (default 10000, quick 1000)")
    ap.add_argument("--idle-pool", type=int, default=100,
                    help="idle connections for the pool models: prefork, threads, Apache "
                         "prefork and worker (default 100)")
    ap.add_argument("--keep-going", action="store_true",
                    help="run every rate even after the load generator fell behind")
    ap.add_argument("--port-base", type=int, default=18300,
                    help="servers listen on 127.0.0.1:N+1 to N+8 (default 18300)")
    args = ap.parse_args(argv)
    suite.fill_defaults(args, {"duration": (1.0, 3.0), "warmup": (0.5, 1.0),
                               "pause": (0.5, 1.0), "idle": (1000, 10000)})
    args.models = parse_list(args.models, MODELS, "model")
    if args.peers is None:
        args.peers = [p for p in PEERS if any(PEER_OF[m] == p for m in args.models)]
    elif args.peers.strip() in ("", "none"):
        args.peers = []
    else:
        args.peers = parse_list(args.peers, PEERS, "peer")
    if args.rates:
        try:
            args.rates = sorted({int(x) for x in args.rates.split(",") if x.strip()})
        except ValueError:
            raise SystemExit("error: --rates takes whole numbers, e.g. 1000,2000,4000")
    else:
        args.rates = QUICK_RATES if args.quick else DEFAULT_RATES
    if not re.fullmatch(r"\d+(ms|s)", args.timeout):
        raise SystemExit("error: --timeout takes e.g. 500ms or 2s")
    return args


class Context(suite.Processes):
    def __init__(self, args, fastpath_bin, work):
        super().__init__()
        self.args = args
        self.quick = args.quick
        self.fastpath_bin = fastpath_bin
        self.work = work
        self.root = os.path.join(work, "www")
        self.rates = args.rates
        self.duration = args.duration
        self.pause = args.pause
        self.warmup = args.warmup
        self.timeout = args.timeout
        self.idle = args.idle
        self.idle_pool = args.idle_pool
        self.keep_going = args.keep_going
        self.port_base = args.port_base
        self.idle_check = (None, None)
        self.commit = suite.git_commit()
        self.files = []
        self.file_1k = b""
        shown = ["bench/models.py"] + sys.argv[1:]
        self.command = shlex.join(shown)
        if os.environ.get("FASTPATH_BIN"):
            self.command = f"FASTPATH_BIN={os.environ['FASTPATH_BIN']} {self.command}"
        self.bench_display = (f"taskset -c {CLIENT_CPU} fastpath bench -t 1 -q --json "
                              f"-d {self.duration:g}s --conn-rate R --calls 1 --no-keepalive "
                              f"--timeout {self.timeout} --docroot WORK/www --verify "
                              f"http://127.0.0.1:PORT{FILE_1K}")


def make_docroot(ctx):
    suite.make_spec_docroot(ctx.fastpath_bin, ctx.root)
    ctx.files = suite.publish_tree(ctx.root)
    with open(os.path.join(ctx.root, FILE_1K.lstrip("/")), "rb") as f:
        ctx.file_1k = f.read()
    if len(ctx.file_1k) != 1024:
        raise BenchError(f"{FILE_1K} of {ctx.root} is not 1 KiB")


def main(argv):
    args = parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("error: needs at least two CPUs (server on CPU 0, client on CPU 1)")
    servers = [n for n in ORDER
               if (n.startswith("fastpath-") and n.split("-", 1)[1] in args.models)
               or n in args.peers]
    install_missing(servers)
    fastpath_bin = fastpath_binary()
    # This script (and the clients it starts without taskset) stays off the server's core.
    try:
        os.sched_setaffinity(0, {int(CLIENT_CPU)})
    except OSError:
        pass
    limit = suite.raise_nofile()
    if limit < args.idle + 200:
        log(f"warning: open-file limit {limit} is below {args.idle} idle connections")

    work = tempfile.mkdtemp(prefix="fastpath-models.")
    os.chmod(work, 0o755)
    os.makedirs(os.path.join(work, "logs"))
    os.makedirs(os.path.join(work, "raw"))
    ctx = Context(args, fastpath_bin, work)

    def on_signal(signum, _frame):
        raise Interrupted(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    rc = 0
    try:
        make_docroot(ctx)
        c0 = suite.cpu_times()
        time.sleep(1)
        c1 = suite.cpu_times()
        ctx.idle_check = (suite.cpu_busy(c0, c1, int(SERVER_CPU)), suite.cpu_busy(c0, c1, int(CLIENT_CPU)))
        started = datetime.datetime.now(datetime.timezone.utc)
        load_start = loadavg()
        t0 = time.monotonic()
        log(f"servers: {', '.join(servers)}; rates {', '.join(map(str, ctx.rates))} conn/s, "
            f"{ctx.duration:g} s each; work directory {work}")
        results, skipped = [], []
        for name in servers:
            r = run_server(ctx, name)
            if "skipped" in r:
                skipped.append((name, r["skipped"]))
            else:
                results.append(r)
            time.sleep(ctx.pause)
        load_end = loadavg()
        log(f"done in {time.monotonic() - t0:.0f} s")
        text = report(ctx, results, started, load_start, load_end, skipped)
        print(text, flush=True)
        raw = {"started": started.isoformat(), "command": ctx.command, "rates": ctx.rates,
               "duration_s": ctx.duration, "timeout": ctx.timeout,
               "skipped": dict(skipped), "servers": results}
        with open(os.path.join(work, "results.json"), "w") as f:
            json.dump(raw, f, indent=1)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(raw, f, indent=1)
        if not args.no_write:
            log(f"written to {write_benchmarks_md(text)}")
        if any("failed" in r or r.get("problems") for r in results):
            rc = 2
    except Interrupted as e:
        log(f"interrupted ({e}); stopping everything")
        rc = 128 + e.signum
    except BenchError as e:
        log(f"ERROR: {e}")
        rc = 2
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        ctx.cleanup()
        if args.keep:
            log(f"work directory kept: {work} (raw JSON in raw/, logs in logs/, results.json)")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
