#!/usr/bin/env python3
"""Keep-alive file-size sweep: the server's CPU time per request, and requests/s, for one
file at a time from 1 KiB to 1 MiB, for fastpath with the in-memory copy, fastpath with
sendfile, fastpath as configured by default, nginx, lighttpd and h2o, all in one run, and
the floor (bench/peers/floor.c, built here with cc): a server that does one read and one write
per request and nothing else, to tell what any server must spend on this kernel from what
a server's own work adds.

Each server runs as bench/run.sh runs it (configuration from bench/peers/, one worker,
pinned to CPU 0); the client is wrk (`-t1 -c64`, pinned to CPU 1) or, with
`--client fastpath`, `fastpath bench -t 1 -c 64`. All servers are started first (and every
file fetched once from each and compared byte for byte); then, round after round, size
after size, each server is measured in turn, so that whatever else loads the machine for a
while falls on all of them alike. The server's CPU time (utime + stime of its whole
process tree, from /proc) is read around each measured run; each figure is the median of
its rounds.

The two forced fastpath variants set `[cache]` keys in their configuration:
  fastpath-copy      max_file_size = copy_below = 2 MiB: every file in memory, copied
  fastpath-sendfile  copy_below = 0: every file from a kept descriptor, with sendfile
and the table gives the crossover: the smallest size from which sendfile costs less
server CPU per request than the copy, at that size and every larger one measured.

Usage: bench/sizes.py [--quick] [--servers LIST] [--sizes LIST] [--duration S]
                      [--rounds N] [--warmup S] [--model NAME] [--client wrk|fastpath]
                      [--no-write] [--keep] [--port-base N]

Results: printed, put between the sizes:begin/sizes:end markers of BENCHMARKS.md, and
the chart in bench/results/sizes.svg (unless --no-write). FASTPATH_BIN selects the fastpath
binary; without it the script builds one with `cargo build --release -p fastpath`.
Only the Python standard library is used.
"""

import argparse
import datetime
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ left in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as suite  # noqa: E402
import charts  # noqa: E402
import models  # noqa: E402  (fastpath_binary, machine_info, loadavg)
from bench import CLIENT_CPU, HOST, REPO_DIR, RUN_ERRORS, BenchError, log  # noqa: E402

suite.LOG_TAG = "sizes"

MARK_BEGIN = "<!-- sizes:begin -->"
MARK_END = "<!-- sizes:end -->"
SECTION_HEADING = "## File-size sweep"
CHART = "sizes.svg"

KIB = 1024
# 1 KiB to 1 MiB by powers of two, with the 2-128 KiB stretch where the copy and sendfile
# cross filled in.
SIZES_KIB = [1, 2, 4, 6, 8, 12, 16, 20, 24, 32, 40, 48, 64, 96, 128, 256, 1024]
QUICK_SIZES_KIB = [1, 8, 32, 64, 256]

COPY = "fastpath-copy"
SENDFILE = "fastpath-sendfile"
FASTPATH = "fastpath"
PEERS = ["nginx", "lighttpd", "h2o"]
# bench/peers/floor.c: one read and one write per request and nothing else, the least a
# user-space server can spend here; a yardstick, not a peer (never the "best peer").
FLOOR = "floor"
ORDER = [COPY, SENDFILE, FASTPATH] + PEERS + [FLOOR]
LABEL = {COPY: "fastpath, copy", SENDFILE: "fastpath, sendfile", FASTPATH: "fastpath",
         "nginx": "nginx", "lighttpd": "lighttpd", "h2o": "h2o", FLOOR: "floor"}
# The [cache] table each fastpath variant gets (the default one none).
CACHE_KEYS = {COPY: 'max_file_size = "2MiB"\ncopy_below = "2MiB"\n',
              SENDFILE: 'copy_below = "0"\n', FASTPATH: ""}

CONNECTIONS = 64
# Two CPU figures closer than this are a tie (the run-to-run spread is larger).
TIE = 0.01


def path_of(kib):
    return f"/sizes/{kib}k.bin"


class Server(suite.Server):
    """A server of the sweep, started as bench/bench.py starts its servers; it listens on
    --port-base + its place in ORDER."""

    ready_desc = " with the smallest file of the sweep"

    def port_offset(self):
        return ORDER.index(self.name) + 1

    def prepare(self):
        if self.name == FLOOR:
            binary = os.path.join(self.dir, "floor")
            source = os.path.join(suite.PEERS_DIR, "floor.c")
            subprocess.run(["cc", "-O2", "-o", binary, source], check=True)
            return [binary, str(self.port), self.ctx.root], None, ["cc", "--version"]
        if self.name in CACHE_KEYS:
            cmd, test, version = self.prepare_fastpath(self.ctx.model, self.ctx.fastpath_bin)
            conf = cmd[cmd.index("--config") + 1]
            if CACHE_KEYS[self.name]:
                with open(conf, "a") as f:
                    f.write("\n[cache]\n" + CACHE_KEYS[self.name])
            return cmd, test, version
        return super().prepare()

    def version(self):
        if self.name == FLOOR:
            return f"bench/peers/floor.c, built with {suite.first_line(self.version_cmd)}"
        v = super().version()
        if self.name in CACHE_KEYS and "tree at" not in v:
            v += f" (tree at {self.ctx.commit})"
            if CACHE_KEYS[self.name]:
                v += ", [cache] " + CACHE_KEYS[self.name].strip().replace("\n", ", ")
        return v

    def ready(self):
        path = self.ctx.paths[0]
        status, body, _ = suite.http_get(self.port, path)
        return status == 200 and body == self.ctx.contents[path]


class Context(suite.Processes):
    def __init__(self, args):
        self.args = args
        self.port_base = args.port_base
        self.model = args.model
        self.work = args.work
        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)
        self.root = os.path.join(self.work, "www")
        super().__init__(os.path.join(self.work, "pgids"))
        self.fastpath_bin = args.fastpath_bin
        self.commit = suite.git_commit()
        self.contents = {}
        self.paths = []
        self.wrk = None


def make_docroot(ctx, sizes_kib):
    os.makedirs(os.path.join(ctx.root, "sizes"), exist_ok=True)
    for kib in sizes_kib:
        data = suite.make_content(kib * KIB)
        with open(os.path.join(ctx.root, path_of(kib).lstrip("/")), "wb") as f:
            f.write(data)
        ctx.contents[path_of(kib)] = data
        ctx.paths.append(path_of(kib))
    suite.publish_tree(ctx.root)


def client_cmd(ctx, server, path, duration):
    url = f"http://{HOST}:{server.port}{path}"
    if ctx.args.client == "wrk":
        return ["taskset", "-c", CLIENT_CPU, ctx.wrk, "-t1", f"-c{CONNECTIONS}",
                f"-d{duration:g}s", "--timeout", "10s", "-s",
                os.path.join(suite.WRK_DIR, "report.lua"), url]
    return ["taskset", "-c", CLIENT_CPU, ctx.fastpath_bin, "bench", "-t", "1", "-q", "--json",
            "-c", str(CONNECTIONS), "-d", f"{duration:g}s", "--timeout", "10s", url]


def run_client(ctx, server, path, duration, tag):
    """(requests, seconds, problems) of one client run."""
    cmd = client_cmd(ctx, server, path, duration)
    rc, out, err = ctx.run(cmd, duration + 60, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    with open(os.path.join(ctx.work, "logs", f"{server.name}.{tag}.txt"), "w") as f:
        f.write(shlex.join(cmd) + "\n" + out + err)
    size = len(ctx.contents[path])
    if ctx.args.client == "wrk":
        m = re.search(r"^BENCH_RESULT (\{.*\})$", out, re.M)
        if rc != 0 or not m:
            raise BenchError(f"wrk failed against {server.name} (status {rc}):\n{out}{err}")
        res = json.loads(m.group(1))
        n, secs = res["requests"], res["duration_us"] / 1e6
        problems = [f"{res[k]} {k} errors" for k in ("connect", "read", "write", "status",
                                                      "timeout") if res[k]]
        # Each response is the file and a head of a few hundred bytes; one cut off by the
        # end of the run adds bytes no completed request accounts for.
        if n and not size <= res["bytes"] / n <= size + 1024 + CONNECTIONS * (size + 1024) / n:
            problems.append(f"{res['bytes'] / n:.0f} bytes per response for a {size} B file")
    else:
        res = suite.bench_report(rc, out, err)
        n, secs = res["replies"], res["duration_s"]
        problems = suite.check_bench(res)
    if n == 0:
        problems.append("no request completed")
    return n, secs, problems


def tree_sys_seconds(pid):
    """System (kernel) time of the server's tree: stime and cstime of every process."""
    total = 0
    for p in suite.process_tree(pid, models.children_of):
        f = suite.stat_fields(p)
        if f:
            total += int(f[12]) + int(f[14])
    return total / suite.CLK_TCK


def measure(ctx, server, path):
    """One size against a running server: a warm-up run (not counted), then the measured
    run with the server's CPU time read around it."""
    if ctx.args.warmup > 0:
        run_client(ctx, server, path, ctx.args.warmup, f"{path.strip('/').replace('/', '.')}"
                   ".warmup")
    cpu0 = suite.tree_cpu_seconds(server.pid, models.children_of)
    sys0 = tree_sys_seconds(server.pid)
    n, secs, problems = run_client(ctx, server, path, ctx.args.duration,
                                   path.strip("/").replace("/", "."))
    cpu1 = suite.tree_cpu_seconds(server.pid, models.children_of)
    sys1 = tree_sys_seconds(server.pid)
    return {"rps": n / secs if secs else 0.0, "requests": n,
            "cpu_us": (cpu1 - cpu0) * 1e6 / n if n else None,
            "kernel": (sys1 - sys0) / (cpu1 - cpu0) if cpu1 > cpu0 else None,
            "cpu_util": (cpu1 - cpu0) / secs if secs else 0.0, "problems": problems}


def check_files(ctx, server):
    """Every file of the sweep over one connection, byte for byte."""
    conn = http.client.HTTPConnection(HOST, server.port, timeout=10)
    try:
        for path in ctx.paths:
            status, body, _ = suite.http_get(server.port, path, conn)
            if status != 200 or body != ctx.contents[path]:
                raise BenchError(f"{server.name} served {path} wrong: status {status}, "
                                 f"{len(body)} of {len(ctx.contents[path])} bytes")
    finally:
        conn.close()


def start_servers(ctx, names, results):
    """Starts every server (they idle on CPU 0 while another is measured) and checks that
    each serves every file of the sweep; the ones that fail are left out."""
    running = []
    for name in names:
        r = results[name] = {"sizes": {}, "runs": {}}
        server = suite.prepare_server(ctx, name, r, Server)
        if server is None:
            continue
        try:
            server.start()
            check_files(ctx, server)
            running.append(server)
        except RUN_ERRORS as e:
            suite.failed(r, name, e)
            server.stop()
    return running


def sweep(ctx, servers, sizes_kib, results):
    """Round after round, size after size, every server in turn: what disturbs the machine
    for a while (others' builds) then falls on all servers alike. Each figure is the
    median of its rounds."""
    for rnd in range(ctx.args.rounds):
        for kib in sizes_kib:
            for server in list(servers):
                r = results[server.name]
                try:
                    m = measure(ctx, server, path_of(kib))
                except RUN_ERRORS as e:
                    suite.failed(r, server.name, e)
                    servers.remove(server)
                    server.stop()
                    continue
                r["runs"].setdefault(kib, []).append(m)
                log(f"round {rnd + 1}: {server.name} {kib} KiB: {m['rps']:,.0f} req/s, "
                    f"{fmt(m['cpu_us'])} µs CPU/req"
                    + (f" PROBLEMS: {'; '.join(m['problems'])}" if m["problems"] else ""))
    for r in results.values():
        for kib, runs in r["runs"].items():
            ok = [m for m in runs if m["cpu_us"] is not None]
            if not ok:
                r["sizes"][kib] = runs[-1]
                continue
            ok.sort(key=lambda m: m["cpu_us"])
            med = dict(ok[(len(ok) - 1) // 2])
            med["problems"] = [p for m in runs for p in m["problems"]]
            med["all_cpu_us"] = [m["cpu_us"] for m in runs]
            r["sizes"][kib] = med


def crossover(results, sizes_kib):
    """The smallest size at which sendfile costs no more server CPU per request than the
    copy (within TIE), and no more at the next two sizes measured either, or None. Above
    64 KiB both ways run into the same per-connection send-buffer limits and the figures
    scatter (see BENCHMARKS.md), so one size is not taken on its own."""
    c = results.get(COPY, {}).get("sizes", {})
    s = results.get(SENDFILE, {}).get("sizes", {})
    both = [k for k in sizes_kib if c.get(k, {}).get("cpu_us") and s.get(k, {}).get("cpu_us")]

    def wins(k):
        return s[k]["cpu_us"] <= c[k]["cpu_us"] * (1 + TIE)

    for i, kib in enumerate(both):
        if all(wins(k) for k in both[i:i + 3]):
            return kib
    return None


def fmt(v, digits=2):
    return "–" if v is None else f"{v:.{digits}f}"


def size_label(kib):
    return f"{kib // 1024} MiB" if kib >= 1024 and kib % 1024 == 0 else f"{kib} KiB"


def report(ctx, results, sizes_kib, started, load_start, load_end):
    order = [n for n in ORDER if n in results]
    peers = [n for n in PEERS if n in order]
    ran = [n for n in order if results[n]["sizes"]]
    lines = [f"Measured {started:%Y-%m-%d %H:%M} UTC on {models.machine_info()}; "
             f"load average {load_start} at the start, {load_end} at the end (others may "
             "build on this machine at the same time).", "",
             f"Command: `{ctx.args.command}`; all servers running, measured in turn, size "
             f"after size, {ctx.args.rounds} round(s) of {ctx.args.duration} s per size and "
             f"server{f' after {ctx.args.warmup} s of warm-up' if ctx.args.warmup else ''}; "
             f"each figure the median of its rounds. Client "
             + ("`wrk -t1 -c64`" if ctx.args.client == "wrk" else "`fastpath bench -t 1 -c 64`")
             + " on CPU 1, server (one worker) on CPU 0. Server CPU µs per request "
             "(utime + stime of its process tree); lower is better.", ""]
    to_floor = FLOOR in ran and FASTPATH in ran and bool(peers)
    lines.append("| file | " + " | ".join(LABEL[n] for n in ran)
                 + (" | fastpath ÷ best peer |" if peers and FASTPATH in ran else " |")
                 + (" fastpath ÷ floor | best peer ÷ floor |" if to_floor else ""))
    lines.append("|---|" + "--:|" * len(ran) + ("--:|" if peers and FASTPATH in ran else "")
                 + ("--:|--:|" if to_floor else ""))
    for kib in sizes_kib:
        cells = []
        for n in ran:
            m = results[n]["sizes"].get(kib)
            cells.append("–" if not m else fmt(m["cpu_us"]) + (" ⚠" if m["problems"] else ""))
        row = f"| {size_label(kib)} | " + " | ".join(cells) + " |"
        if peers and FASTPATH in ran:
            best = [(results[p]["sizes"][kib]["cpu_us"], p) for p in peers
                    if kib in results[p]["sizes"] and results[p]["sizes"][kib]["cpu_us"]]
            mine = results[FASTPATH]["sizes"].get(kib, {}).get("cpu_us")
            if best and mine:
                b, who = min(best)
                row += f" {mine / b:.2f}× ({LABEL[who]}) |"
            else:
                row += " – |"
            floor = results.get(FLOOR, {}).get("sizes", {}).get(kib, {}).get("cpu_us")
            if to_floor:
                row += (f" {mine / floor:.2f}× | {b / floor:.2f}× |" if best and mine and floor
                        else " – | – |")
        lines.append(row)
    lines += ["", "Requests per second, same runs:", ""]
    lines.append("| file | " + " | ".join(LABEL[n] for n in ran) + " |")
    lines.append("|---|" + "--:|" * len(ran))
    for kib in sizes_kib:
        cells = [f"{results[n]['sizes'][kib]['rps']:,.0f}" if kib in results[n]["sizes"]
                 else "–" for n in ran]
        lines.append(f"| {size_label(kib)} | " + " | ".join(cells) + " |")
    lines += ["", "Kernel share of the server's CPU time (stime ÷ utime + stime), same runs "
              "(over loopback the kernel's share includes TCP receive work done for the "
              "client in the server's context):", ""]
    lines.append("| file | " + " | ".join(LABEL[n] for n in ran) + " |")
    lines.append("|---|" + "--:|" * len(ran))
    for kib in sizes_kib:
        cells = [f"{results[n]['sizes'][kib]['kernel']:.0%}"
                 if results[n]["sizes"].get(kib, {}).get("kernel") is not None else "–"
                 for n in ran]
        lines.append(f"| {size_label(kib)} | " + " | ".join(cells) + " |")
    cross = crossover(results, sizes_kib)
    if COPY in ran and SENDFILE in ran:
        lines.append("")
        if cross is None:
            lines.append("Crossover: sendfile did not cost less than the copy at the largest "
                         "sizes measured.")
        else:
            below = [k for k in sizes_kib if k < cross]
            lines.append(f"Crossover: {size_label(cross)}, the smallest size at which sendfile "
                         "costs no more server CPU per request than the copy (within "
                         f"{TIE:.0%}), and no more at the next two sizes either"
                         + (f" (at {size_label(below[-1])}: copy "
                            f"{fmt(results[COPY]['sizes'][below[-1]]['cpu_us'])} µs, sendfile "
                            f"{fmt(results[SENDFILE]['sizes'][below[-1]]['cpu_us'])} µs)"
                            if below and below[-1] in results[COPY]['sizes']
                            and below[-1] in results[SENDFILE]['sizes'] else "")
                         + ".")
    problems = [f"{LABEL[n]} {size_label(k)}: {'; '.join(m['problems'])}"
                for n in ran for k, m in results[n]["sizes"].items() if m["problems"]]
    fails = [f"{LABEL[n]}: {results[n]['failed']}" for n in order if results[n].get("failed")]
    if problems or fails:
        lines += ["", "Problems (⚠): " + "; ".join(problems + fails)]
    versions = "; ".join(f"{LABEL[n]}: {results[n].get('version', '?')}" for n in order)
    lines += ["", f"Versions: {versions}."]
    return "\n".join(lines) + "\n", cross


def chart(ctx, results, sizes_kib, started):
    series = []
    for n in ORDER:
        pts = results.get(n, {}).get("sizes", {})
        pts = [(kib * KIB, pts[kib]["cpu_us"]) for kib in sizes_kib
               if kib in pts and pts[kib]["cpu_us"]]
        if pts:
            series.append((LABEL[n], pts))
    return charts.size_chart(
        "Server CPU per request by file size (keep-alive, 64 connections)",
        f"{'wrk -t1 -c64' if ctx.args.client == 'wrk' else 'fastpath bench -t 1 -c 64'}, "
        f"{ctx.args.duration:g} s per size; one server worker on CPU 0, client on CPU 1; "
        f"{started:%Y-%m-%d %H:%M} UTC", series)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"sizes {','.join(map(str, QUICK_SIZES_KIB))} KiB, 1 s each, "
                         "no warm-up (a smoke run)")
    ap.add_argument("--servers", default=",".join(ORDER),
                    help=f"comma-separated subset of {','.join(ORDER)}")
    ap.add_argument("--sizes", default=None, help="file sizes in KiB, comma-separated")
    ap.add_argument("--duration", type=int, default=None,
                    help="seconds per size (default 3, quick 1)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="warm-up seconds before each measured run (default 0: every file "
                         "was fetched once at the start, and wrk connects within the run)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds over every size and server; each figure is the median "
                         "(default 2, quick 1)")
    ap.add_argument("--model", default=None,
                    help="fastpath concurrency model (--model) of the three fastpath servers")
    ap.add_argument("--client", choices=["wrk", "fastpath"], default="wrk")
    ap.add_argument("--port-base", type=int, default=18280,
                    help="servers listen on 127.0.0.1:PORT_BASE+1..6")
    ap.add_argument("--no-write", action="store_true",
                    help="print the table without updating BENCHMARKS.md and the chart")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    args.servers = models.parse_list(args.servers, ORDER, "server")
    if args.sizes:
        try:
            args.sizes = sorted({int(x) for x in args.sizes.split(",") if x.strip()})
        except ValueError:
            ap.error(f"--sizes {args.sizes!r}: expected KiB counts such as 1,4,64")
        if not args.sizes or min(args.sizes) < 1:
            ap.error("--sizes: at least one size of 1 KiB or more")
    else:
        args.sizes = QUICK_SIZES_KIB if args.quick else SIZES_KIB
    if args.duration is None:
        args.duration = 1 if args.quick else 3
    if args.warmup is None:
        args.warmup = 0
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.rounds < 1:
        ap.error("--rounds: 1 or more")
    if args.duration < 1 or args.warmup < 0:
        ap.error("--duration: 1 s or more; --warmup: 0 s or more")
    args.command = shlex.join(["bench/sizes.py"] + list(argv))
    return args


def main(argv):
    args = parse_args(argv)
    models.install_missing([s for s in args.servers if s == "nginx"])
    for peer in ("lighttpd", "h2o"):
        if peer in args.servers and not suite.find_program(peer):
            log(f"{peer} is not installed: apt-get install {peer} (skipped)")
            args.servers.remove(peer)
    args.fastpath_bin = models.fastpath_binary()
    suite.raise_nofile()
    args.work = tempfile.mkdtemp(prefix="fastpath-sizes.")
    os.chmod(args.work, 0o755)
    ctx = Context(args)
    if args.client == "wrk":
        ctx.wrk = suite.which("wrk")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        make_docroot(ctx, args.sizes)
        started = datetime.datetime.now(datetime.timezone.utc)
        load_start = models.loadavg()
        results = {}
        servers = start_servers(ctx, [n for n in ORDER if n in args.servers], results)
        log(f"{len(servers)} servers, {len(args.sizes)} sizes, {args.rounds} round(s) of "
            f"{args.duration} s each")
        sweep(ctx, servers, args.sizes, results)
        load_end = models.loadavg()
        text, cross = report(ctx, results, args.sizes, started, load_start, load_end)
        print(text)
        if not args.no_write:
            results_dir = os.path.join(REPO_DIR, "bench", "results")
            os.makedirs(results_dir, exist_ok=True)
            suite.write_file(os.path.join(results_dir, CHART), chart(ctx, results, args.sizes,
                                                                    started))
            block = text + f"\n![Server CPU per request by file size](bench/results/{CHART})\n"
            suite.write_benchmarks_md(os.path.join(REPO_DIR, "BENCHMARKS.md"), block,
                                      MARK_BEGIN, MARK_END, SECTION_HEADING)
            log(f"wrote BENCHMARKS.md and bench/results/{CHART}")
        with open(os.path.join(args.work, "results.json"), "w") as f:
            json.dump({"results": results, "crossover_kib": cross}, f, indent=1, default=str)
        return 1 if any(r.get("failed") for r in results.values()) else 0
    finally:
        ctx.cleanup()
        if args.keep:
            log(f"work directory kept: {args.work}")
        else:
            shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
