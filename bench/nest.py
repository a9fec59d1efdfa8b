#!/usr/bin/env python3
"""The NEST thesis' chapter 5 on this machine: the HTTP/1.0 server generated from
examples/nest/http10.nest against hand-written fastpath and the peers of each model.

The thesis requested one 2 KB file with httperf, a new connection per request, at rising
connection rates, from its generated server on each model (processes, threads, events) and
from two servers of the same model (Apache and mini_httpd for processes, Apache's threaded
MPM and JAWS for threads, mathopd and Haboob for events), and reported connection time,
transfer time and errors. Here, one server at a time, pinned to CPU 0, the load generator
(`fastpath bench`, one thread, open loop: `--conn-rate R --calls 1 --no-keepalive`, every
reply's length checked) on CPU 1:

    processes  nest (processServer 256)  fastpath prefork   Apache prefork   mini_httpd
    threads    nest (threadServer 256)   fastpath threads   Apache worker
    events     nest (eventServer 1)      fastpath epoll     lighttpd         nginx
               nest (uringServer 1)      fastpath uring
               nest (percoreServer)      fastpath percore

Per rate: replies/s, connection time and response time (request written -> first reply byte)
p50/p99, errors by class, and the server's CPU per reply (user+sys of its whole process
tree from /proc, reaped children included, read around each step).

It builds what it needs: fastpath (`cargo build --release -p fastpath`, unless FASTPATH_BIN
names a binary) and the generated server (`fastpath nest build examples/nest/http10.nest -o
TARGET/nest-examples/http10`, unless NEST_HTTP_BIN names one); missing packages (apache2,
mini-httpd, lighttpd, nginx, util-linux) are installed with apt-get. Every process it starts
is stopped at the end, also after a failure or an interrupt.

Usage: python3 bench/nest.py [--quick] [--no-write] [--keep] [--servers LIST]
       [--rates LIST] [--duration S] [--pause S] [--warmup S] [--timeout T]
Results: a Markdown report on stdout, in bench/results/nest.md and between the
nest:begin/nest:end markers of BENCHMARKS.md (unless --no-write). The default run (5 rates
of 5 s, 15 servers) takes about 9 minutes; --quick (2 rates of 1 s) about 1.5. Steps are 5 s
because /proc counts CPU time in 10 ms ticks: at 500 conn/s a step of a server that spends
20 µs per reply is only 5 ticks, so CPU per reply is compared at the highest rate that every
server of the comparison kept up with.
"""

import argparse
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

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as suite  # noqa: E402
import models  # noqa: E402
from bench import CLIENT_CPU, HOST, REPO_DIR, RUN_ERRORS, SERVER_CPU, BenchError  # noqa: E402
from models import fmt_errors, fmt_lat, fmt_num, fmt_pct  # noqa: E402

suite.LOG_TAG = "nest"
log = suite.log

MARK_BEGIN = "<!-- nest:begin -->"
MARK_END = "<!-- nest:end -->"
HEADING = "## NEST: generated servers against fastpath and each model's peers"
RESULTS_MD = os.path.join(REPO_DIR, "bench", "results", "nest.md")

FILE = "/lex.ll"  # the thesis requested its lex.ll, 2 KB
FILE_SIZE = 2048

NEST_MODEL = {"prefork": "processServer 256", "threads": "threadServer 256",
              "epoll": "eventServer 1", "uring": "uringServer 1", "percore": "percoreServer"}
GROUPS = [
    ("Processes", ["nest-prefork", "fastpath-prefork", "apache2-prefork", "mini-httpd"]),
    ("Threads", ["nest-threads", "fastpath-threads", "apache2-worker"]),
    ("Events", ["nest-epoll", "fastpath-epoll", "nest-uring", "fastpath-uring",
                "nest-percore", "fastpath-percore", "lighttpd", "nginx"]),
]
ORDER = [n for _, names in GROUPS for n in names]
# The Apache peer of each model, for the target "ahead of its Apache peer".
APACHE_OF = {"prefork": "apache2-prefork", "threads": "apache2-worker"}
LABEL = {
    "mini-httpd": "mini_httpd (a process per connection)",
    "apache2-prefork": "Apache prefork (5..256 processes)",
    "apache2-worker": "Apache worker (256 threads)",
    "lighttpd": "lighttpd (1 event loop)",
    "nginx": "nginx (1 worker)",
}
for _m, _opt in NEST_MODEL.items():
    LABEL[f"nest-{_m}"] = f"nest http10, {_m} (`{_opt}`)"
    LABEL[f"fastpath-{_m}"] = f"fastpath serve, {_m}"

DEFAULT_RATES = [500, 1000, 2000, 4000, 8000]
QUICK_RATES = [1000, 4000]


class Server(models.Server):
    """A server of this benchmark; listens on --port-base + its place in ORDER."""

    ready_desc = f" GET {FILE} correctly"

    def port_offset(self):
        return ORDER.index(self.name) + 1

    @property
    def model(self):
        for prefix in ("fastpath-", "nest-"):
            if self.name.startswith(prefix):
                return self.name[len(prefix):]
        return None

    def prepare(self):
        ctx = self.ctx
        if self.name.startswith("fastpath-"):
            cmd, _test, version = self.prepare_fastpath(self.model, ctx.fastpath_bin)
            return cmd, None, version
        if self.name.startswith("nest-"):
            conf = os.path.join(self.dir, "config.nest")
            with open(conf, "w") as f:
                f.write("# A request per connection: only errors in the log.\nlogLevel warn\n")
            return ([ctx.nest_bin, "--config", conf, "--listen", f"{HOST}:{self.port}",
                     "--model", NEST_MODEL[self.model]], None, None)
        if self.name == "mini-httpd":
            binary = suite.which("mini_httpd")
            return ([binary, "-D", "-h", HOST, "-p", str(self.port), "-d", ctx.root,
                     "-u", "nobody", "-l", "/dev/null",
                     "-i", os.path.join(self.dir, "mini_httpd.pid")], None, [binary, "-V"])
        if self.name in ("lighttpd", "nginx"):
            return suite.Server.prepare(self)
        if self.name.startswith("apache2-"):
            return self.prepare_apache2(f"{self.name}.conf", [FILE])
        raise BenchError(f"unknown server {self.name}")

    def start(self):
        if self.name.startswith("nest-"):
            # The generated server reads its document root from the environment.
            os.environ["DOCUMENT_ROOT"] = self.ctx.root
        super().start()

    def version(self):
        if self.name.startswith("nest-"):
            return f"examples/nest/http10.nest (tree at {self.ctx.commit}), --model " \
                   f"'{NEST_MODEL[self.model]}'"
        if self.name.startswith("fastpath-"):
            return f"fastpath (tree at {self.ctx.commit}), --model {self.model}"
        return super().version()


def answer_error(ctx, port, timeout=5):
    """None if the server answers GET FILE with the file, else what it answered."""
    status, body, _ = suite.http_get(port, FILE, timeout=timeout)
    if status == 200 and body == ctx.file_data:
        return None
    return f"status {status}, {len(body)} bytes"


def bench_cmd(ctx, server, rate, duration):
    return ["taskset", "-c", CLIENT_CPU, ctx.fastpath_bin, "bench", "-t", "1", "-q", "--json",
            "-d", f"{duration:g}s", "--conn-rate", f"{rate:g}", "--calls", "1",
            "--no-keepalive", "--timeout", ctx.timeout, "--expect-length", str(FILE_SIZE),
            f"http://{HOST}:{server.port}{FILE}"]


# models.py's sweep, warm-up and steps, with this file and these checks.
models.answer_error = answer_error
models.bench_cmd = bench_cmd


def run_server(ctx, name):
    r = {"name": name, "label": LABEL[name]}
    server = suite.prepare_server(ctx, name, r, Server)
    if server is None:
        return r
    try:
        log(f"{name}: starting on port {server.port}")
        server.start()
        models.warm_up(ctx, server)
        time.sleep(ctx.pause)
        r["points"], r["problems"] = models.sweep(ctx, server)
        for p in r["problems"]:
            log(f"ERROR {name}: {p}")
    except RUN_ERRORS + (KeyError,) as e:
        suite.failed(r, name, e)
    finally:
        server.stop()
    return r


# --------------------------------------------------------------------------
# Report


def point_at(r, rate):
    return next((p for p in (r or {}).get("points") or [] if p["offered"] == rate), None)


def kept_up_to(r):
    _, kept = models.summary(r)
    return kept


def ratio(a, b):
    return a / b if a is not None and b else None


def server_table(r):
    if "failed" in r:
        return [f"**{r['label']}**: failed: {r['failed']}", ""]
    rows = [f"**{r['label']}** ({r.get('version', '')})", "",
            "| conn/s offered | replies/s | connect p50 / p99 | response p50 / p99 | "
            "errors | CPU µs/reply | server CPU |",
            "|--:|--:|--:|--:|---|--:|--:|"]
    for p in r.get("points") or []:
        rows.append(
            f"| {p['offered']:,}{p['mark']} | {p['rps']:,.0f} | "
            f"{fmt_lat(p['connect_p50'])} / {fmt_lat(p['connect_p99'])} | "
            f"{fmt_lat(p['response_p50'])} / {fmt_lat(p['response_p99'])} | "
            f"{fmt_errors(p)} | {fmt_num(p['cpu_us_per_reply'])} | "
            f"{fmt_pct(p['server_util'])} |")
    for p in r.get("problems") or []:
        rows.append(f"\nProblem: {p}")
    return rows + [""]


def targets(ctx, by):
    """Per model: the generated server's CPU per reply against hand-written fastpath, and
    against the Apache peer, each pair at the highest rate both of it kept up with (CPU time
    comes in 10 ms ticks: the higher the rate, the more of them a step counts)."""
    rows = ["| model | nest ÷ fastpath at conn/s | CPU µs/reply: nest | fastpath | "
            "nest ÷ fastpath (target ≤ 1.2) | nest ÷ Apache at conn/s | nest | Apache peer | "
            "nest ÷ Apache (target < 1) |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    verdicts = []

    def compare(x, y):
        kx, ky = kept_up_to(x), kept_up_to(y)
        at = min(kx, ky) if kx and ky else min(p["offered"] for p in x["points"])
        px, py = point_at(x, at), point_at(y, at)
        cx, cy = px and px["cpu_us_per_reply"], py and py["cpu_us_per_reply"]
        return at, cx, cy, ratio(cx, cy)

    for model in NEST_MODEL:
        n, f = by.get(f"nest-{model}"), by.get(f"fastpath-{model}")
        a = by.get(APACHE_OF[model]) if model in APACHE_OF else None
        if not n or not f or not n.get("points") or not f.get("points"):
            continue
        at, cn, cf, rf = compare(n, f)
        row = (f"| {model} | {at:,} | {fmt_num(cn)} | {fmt_num(cf)} | "
               + (f"{rf:.2f}×" if rf else "–") + " | ")
        ra = None
        if a and a.get("points"):
            at_a, cn_a, ca, ra = compare(n, a)
            row += (f"{at_a:,} | {fmt_num(cn_a)} | {fmt_num(ca)} | "
                    + (f"{ra:.2f}×" if ra else "–") + " |")
        else:
            row += "n/a | | | n/a |"
        rows.append(row)
        met = rf is not None and rf <= 1.2 and (not a or (ra is not None and ra < 1))
        verdicts.append((model, met, rf, ra))
    return rows, verdicts


def report(ctx, results, started, load_start, load_end):
    by = {r["name"]: r for r in results}
    lines = [f"Run of {started:%Y-%m-%d %H:%M} UTC, {'quick' if ctx.quick else 'full'} mode: "
             f"rates {', '.join(f'{x:,}' for x in ctx.rates)} new connections/s, "
             f"{ctx.duration:g} s each after {ctx.warmup:g} s of warm-up at the lowest rate, "
             f"timeout {ctx.timeout}; one GET of a {FILE_SIZE}-byte file per connection.",
             "", "```sh", ctx.command, "```", "",
             f"- Machine: {models.machine_info()}; servers on CPU {SERVER_CPU}, load generator "
             f"on CPU {CLIENT_CPU}.",
             f"- Load average (1, 5, 15 min, from `uptime`): {load_start} at the start, "
             f"{load_end} at the end; in the second before the run CPU 0 was "
             f"{fmt_pct(ctx.idle_check[0])} and CPU 1 {fmt_pct(ctx.idle_check[1])} busy.",
             f"- Each step: `{ctx.bench_display}`.",
             "- Connect: the TCP handshake as the client sees it; response: request written "
             "to first reply byte. CPU µs/reply: user+system time of the server's whole "
             "process tree (reaped children included) over the step, divided by the replies; "
             "the kernel's loopback work for the client can land on either core, so it is a "
             "lower bound for every server alike. † the load generator fell behind "
             "(the server was not saturated); ‡ both.",
             ""]
    rows, verdicts = targets(ctx, by)
    lines += ["### Targets", "", *rows, ""]
    for model, met, rf, ra in verdicts:
        if not met:
            parts = []
            if rf is None or rf > 1.2:
                parts.append("more than 1.2× fastpath's CPU per reply" if rf else
                             "no comparison with fastpath")
            if model in APACHE_OF and (ra is None or ra >= 1):
                parts.append("not ahead of Apache")
            lines.append(f"- **{model}: target missed** ({'; '.join(parts)}).")
    if verdicts and all(v[1] for v in verdicts):
        lines.append("- Every generated server is within 1.2× of fastpath's CPU per reply on "
                     "its model and ahead of its Apache peer.")
    lines.append("")
    for title, names in GROUPS:
        present = [by[n] for n in names if n in by]
        if not present:
            continue
        lines += [f"### {title}", ""]
        for r in present:
            lines += server_table(r)
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------
# Setup


def install_missing(servers):
    need = []
    progs = {"nginx": "nginx", "lighttpd": "lighttpd", "mini-httpd": "mini_httpd"}
    for s in servers:
        if s in progs and not suite.find_program(progs[s]):
            need.append(s)
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


def nest_binary(fastpath_bin):
    given = os.environ.get("NEST_HTTP_BIN")
    if given:
        b = os.path.abspath(given)
    else:
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(REPO_DIR, "target")
        if not os.path.isabs(target):
            target = os.path.join(REPO_DIR, target)
        out = os.path.join(target, "nest-examples", "http10")
        log(f"building examples/nest/http10.nest (fastpath nest build -o {out})")
        subprocess.run([fastpath_bin, "nest", "build",
                        os.path.join(REPO_DIR, "examples", "nest", "http10.nest"), "-o", out],
                       check=True, stdout=subprocess.DEVNULL)
        b = os.path.join(out, "target", "release", "http10")
    if not (os.path.isfile(b) and os.access(b, os.X_OK)):
        raise SystemExit(f"error: {b} is not an executable (set NEST_HTTP_BIN)")
    return b


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bench/nest.py",
        description="The NEST thesis' chapter 5: the HTTP/1.0 server generated from "
                    "examples/nest/http10.nest on each model against hand-written fastpath "
                    "and the peers of that model, at rising connection rates.",
        epilog="FASTPATH_BIN and NEST_HTTP_BIN select the binaries; without them the script "
               "builds them.")
    ap.add_argument("--quick", action="store_true",
                    help=f"smoke run: rates {','.join(map(str, QUICK_RATES))}, 1 s each")
    ap.add_argument("--no-write", action="store_true",
                    help="print only; leave BENCHMARKS.md and bench/results/nest.md alone")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--servers", default=",".join(ORDER),
                    help="servers to run (default: all of %(default)s)")
    ap.add_argument("--rates", help="offered connection rates, comma separated (default "
                                    f"{','.join(map(str, DEFAULT_RATES))})")
    ap.add_argument("--duration", type=float, help="seconds per rate (default 5, quick 1)")
    ap.add_argument("--pause", type=float, help="seconds between rates (default 1, quick 0.5)")
    ap.add_argument("--warmup", type=float, help="seconds at the lowest rate before the sweep, "
                                                 "not counted (default 1, quick 0.5)")
    ap.add_argument("--timeout", default="1s", help="fastpath bench --timeout (default 1s)")
    ap.add_argument("--keep-going", action="store_true",
                    help="run every rate even after the load generator fell behind")
    ap.add_argument("--port-base", type=int, default=18500,
                    help="servers listen on 127.0.0.1:N+1 to N+15 (default 18500)")
    args = ap.parse_args(argv)
    suite.fill_defaults(args, {"duration": (1.0, 5.0), "warmup": (0.5, 1.0),
                               "pause": (0.5, 1.0)})
    args.servers = models.parse_list(args.servers, ORDER, "server")
    if args.rates:
        try:
            args.rates = sorted({int(x) for x in args.rates.split(",") if x.strip()})
        except ValueError:
            raise SystemExit("error: --rates takes whole numbers, e.g. 500,1000,2000")
    else:
        args.rates = QUICK_RATES if args.quick else DEFAULT_RATES
    if not re.fullmatch(r"\d+(ms|s)", args.timeout):
        raise SystemExit("error: --timeout takes e.g. 500ms or 2s")
    return args


class Context(suite.Processes):
    def __init__(self, args, fastpath_bin, nest_bin, work):
        super().__init__()
        self.args = args
        self.quick = args.quick
        self.fastpath_bin = fastpath_bin
        self.nest_bin = nest_bin
        self.work = work
        self.root = os.path.join(work, "www")
        self.rates = args.rates
        self.duration = args.duration
        self.pause = args.pause
        self.warmup = args.warmup
        self.timeout = args.timeout
        self.keep_going = args.keep_going
        self.port_base = args.port_base
        self.idle_check = (None, None)
        self.commit = suite.git_commit()
        self.file_data = b""
        self.command = shlex.join(["bench/nest.py"] + sys.argv[1:])
        for var in ("NEST_HTTP_BIN", "FASTPATH_BIN"):
            if os.environ.get(var):
                self.command = f"{var}={os.environ[var]} {self.command}"
        self.bench_display = (f"taskset -c {CLIENT_CPU} fastpath bench -t 1 -q --json "
                              f"-d {self.duration:g}s --conn-rate R --calls 1 --no-keepalive "
                              f"--timeout {self.timeout} --expect-length {FILE_SIZE} "
                              f"http://127.0.0.1:PORT{FILE}")


def main(argv):
    args = parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("error: needs at least two CPUs (server on CPU 0, client on CPU 1)")
    servers = [n for n in ORDER if n in args.servers]
    install_missing(servers)
    fastpath_bin = models.fastpath_binary()
    nest_bin = nest_binary(fastpath_bin) if any(s.startswith("nest-") for s in servers) else ""
    try:
        os.sched_setaffinity(0, {int(CLIENT_CPU)})
    except OSError:
        pass
    suite.raise_nofile()
    work = tempfile.mkdtemp(prefix="fastpath-nest.")
    os.chmod(work, 0o755)
    os.makedirs(os.path.join(work, "logs"))
    os.makedirs(os.path.join(work, "raw"))
    ctx = Context(args, fastpath_bin, nest_bin, work)

    def on_signal(signum, _frame):
        raise models.Interrupted(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    rc = 0
    try:
        os.makedirs(ctx.root)
        ctx.file_data = suite.make_content(FILE_SIZE)
        with open(os.path.join(ctx.root, FILE.lstrip("/")), "wb") as f:
            f.write(ctx.file_data)
        suite.publish_tree(ctx.root)
        c0 = suite.cpu_times()
        time.sleep(1)
        c1 = suite.cpu_times()
        ctx.idle_check = (suite.cpu_busy(c0, c1, int(SERVER_CPU)),
                          suite.cpu_busy(c0, c1, int(CLIENT_CPU)))
        started = datetime.datetime.now(datetime.timezone.utc)
        load_start = models.loadavg()
        log(f"servers: {', '.join(servers)}; rates {', '.join(map(str, ctx.rates))} conn/s, "
            f"{ctx.duration:g} s each; work directory {work}")
        results = []
        for name in servers:
            results.append(run_server(ctx, name))
            time.sleep(ctx.pause)
        load_end = models.loadavg()
        text = report(ctx, results, started, load_start, load_end)
        print(text, flush=True)
        with open(os.path.join(work, "results.json"), "w") as f:
            json.dump({"started": started.isoformat(), "command": ctx.command,
                       "servers": results}, f, indent=1)
        if not args.no_write:
            suite.write_file(RESULTS_MD, "# NEST: the thesis' chapter 5 on this machine\n\n"
                             "Written by `bench/nest.py`; see BENCHMARKS.md.\n\n" + text)
            block = text.split("### Processes", 1)[0]
            block += ("\nEvery server's table (connection and response times, errors by "
                      "class, at each rate): [bench/results/nest.md](bench/results/nest.md).\n")
            suite.write_benchmarks_md(os.path.join(REPO_DIR, "BENCHMARKS.md"), block,
                                      MARK_BEGIN, MARK_END, HEADING)
            log("written to bench/results/nest.md and BENCHMARKS.md")
        if any("failed" in r or r.get("problems") for r in results):
            rc = 2
    except models.Interrupted as e:
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
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
