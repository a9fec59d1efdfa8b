#!/usr/bin/env python3
"""fastpath comparison suite: runs fastpath, nginx, lighttpd, h2o and Apache one
after the other on the same document root and the same workloads, and writes
the results as Markdown tables (printed, and put into BENCHMARKS.md).

Normally started by bench/run.sh, which installs the peers and builds fastpath.
Only the Python standard library is used. See BENCHMARKS.md for the method.
"""

import argparse
import atexit
import datetime
import grp
import http.client
import json
import os
import platform
import pwd
import random
import re
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
PEERS_DIR = os.path.join(BENCH_DIR, "peers")
WRK_DIR = os.path.join(BENCH_DIR, "wrk")

ALL_SERVERS = ["fastpath", "nginx", "lighttpd", "h2o", "apache2"]
SERVER_LABEL = {"fastpath": "fastpath", "nginx": "nginx", "lighttpd": "lighttpd",
                "h2o": "h2o", "apache2": "Apache (event)"}
PORT_OFFSET = {name: i + 1 for i, name in enumerate(ALL_SERVERS)}
STRACE_SERVERS = ("fastpath", "nginx")

SERVER_CPU = "0"
CLIENT_CPU = "1"
HOST = "127.0.0.1"

MARK_BEGIN = "<!-- bench:begin -->"
MARK_END = "<!-- bench:end -->"

# SPECweb96-like mix; must match bench/wrk/specweb96.lua.
CLASS_WEIGHTS = [35, 50, 14, 1]
CLASS_UNIT = [102, 1024, 10240, 102400]
FILE_WEIGHTS = [39, 59, 88, 177, 353, 118, 71, 50, 45]

IDLE_CONNECTIONS = 10000

WORKLOADS = [
    {"key": "w1", "num": 1, "title": "1 KiB file, keep-alive, 64 connections",
     "conns": 64, "path": "/1k.html", "script": "report.lua", "headers": [],
     "body": 1024, "rate": "req/s"},
    {"key": "w2", "num": 2, "title": "SPECweb96 file-size mix, keep-alive, 64 connections",
     "conns": 64, "path": "/", "script": "specweb96.lua", "headers": [],
     "body": None, "rate": "req/s"},
    {"key": "w3", "num": 3,
     "title": "new connection per request (`Connection: close`), 1 KiB file, 64 connections",
     "conns": 64, "path": "/1k.html", "script": "report.lua",
     "headers": ["Connection: close"], "body": 1024, "rate": "conn/s"},
    {"key": "w4", "num": 4, "title": "1 MiB file, keep-alive, 16 connections",
     "conns": 16, "path": "/1m.bin", "script": "report.lua", "headers": [],
     "body": 1 << 20, "rate": "req/s"},
]

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


class BenchError(Exception):
    pass


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Process trees, CPU time and memory from /proc


def read_stat(pid):
    """(ppid, cpu ticks incl. reaped children) of one process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("latin-1")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    # rest[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
    ppid = int(rest[1])
    ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
    return ppid, ticks


def process_tree(root):
    """The root pid and all its descendants."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = read_stat(int(entry))
        if st:
            children.setdefault(st[0], []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in tree:
            continue
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def tree_cpu_seconds(root):
    """User + system time of the whole tree: every process (all its threads,
    live or exited) plus the children it has already reaped (cutime/cstime)."""
    total = 0
    for pid in process_tree(root):
        st = read_stat(pid)
        if st:
            total += st[1]
    return total / CLK_TCK


def tree_rss_bytes(root):
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


# --------------------------------------------------------------------------
# Document root


def spec_files():
    """[(path, size, weight)] of the SPECweb96-like mix."""
    files = []
    for c, cw in enumerate(CLASS_WEIGHTS):
        for f, fw in enumerate(FILE_WEIGHTS, start=1):
            files.append((f"/spec/class{c}_{f}.html", CLASS_UNIT[c] * f, cw * fw))
    return files


def spec_expected_body():
    files = spec_files()
    total_w = sum(w for _, _, w in files)
    mean = sum(s * w for _, s, w in files) / total_w
    var = sum(w * (s - mean) ** 2 for _, s, w in files) / total_w
    return mean, var ** 0.5


def make_content(size, seed):
    rnd = random.Random(seed)
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n"
    block = bytes(rnd.choice(alphabet) for _ in range(4096))
    out = (block * (size // len(block) + 1))[:size]
    return out


def make_docroot(root):
    files = {"/1k.html": 1024, "/1m.bin": 1 << 20}
    for path, size, _ in spec_files():
        files[path] = size
    os.makedirs(os.path.join(root, "spec"), exist_ok=True)
    contents = {}
    for i, (path, size) in enumerate(sorted(files.items())):
        data = make_content(size, i)
        full = os.path.join(root, path.lstrip("/"))
        with open(full, "wb") as f:
            f.write(data)
        os.chmod(full, 0o644)
        contents[path] = data
    with open(os.path.join(root, "index.html"), "wb") as f:
        f.write(b"fastpath benchmark document root\n")
    for d in (root, os.path.join(root, "spec")):
        os.chmod(d, 0o755)
    return contents


# --------------------------------------------------------------------------
# Servers


def which(name):
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/local/sbin"
    found = shutil.which(name, path=path)
    if not found:
        raise BenchError(f"{name} is not installed")
    return found


def render(template, values, dest):
    with open(template) as f:
        text = f.read()
    for k, v in values.items():
        text = text.replace("{{" + k + "}}", str(v))
    left = re.findall(r"\{\{[A-Z_]+\}\}", text)
    if left:
        raise BenchError(f"{template}: unfilled placeholders {sorted(set(left))}")
    with open(dest, "w") as f:
        f.write(text)
    return dest


def first_line(cmd):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    out = (p.stdout + "\n" + p.stderr).strip().splitlines()
    return out[0].strip() if out else "unknown"


class Server:
    def __init__(self, name, ctx):
        self.name = name
        self.ctx = ctx
        self.port = ctx.port_base + PORT_OFFSET[name]
        self.dir = os.path.join(ctx.work, name)
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        if os.geteuid() == 0 and name != "fastpath":
            # The peers drop root for "nobody" and some of them write their
            # pid and log files only after that.
            os.chown(self.dir, pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid)
        self.proc = None
        self.log_path = os.path.join(ctx.work, "logs", f"{name}.server.log")
        self.cmd, self.test_cmd, self.version_cmd = self.prepare()

    def prepare(self):
        ctx, name = self.ctx, self.name
        values = {"PORT": self.port, "ROOT": ctx.root, "WORK": ctx.work}
        if name == "fastpath":
            binary = ctx.fastpath_bin
            if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
                raise BenchError(f"fastpath binary {binary} not found (set FASTPATH_BIN)")
            conf = render(os.path.join(PEERS_DIR, "fastpath.toml"), values,
                          os.path.join(self.dir, "fastpath.toml"))
            cmd = [binary, "serve", ctx.root, "--listen", f"{HOST}:{self.port}",
                   "--config", conf]
            if ctx.model:
                cmd += ["--model", ctx.model]
            return cmd, [binary, "check", "--config", conf], [binary, "--version"]
        if name == "nginx":
            binary = which("nginx")
            conf = render(os.path.join(PEERS_DIR, "nginx.conf"), values,
                          os.path.join(self.dir, "nginx.conf"))
            base = [binary, "-p", self.dir + "/", "-e", os.path.join(self.dir, "error.log"),
                    "-c", conf]
            return base, base + ["-t", "-q"], [binary, "-v"]
        if name == "lighttpd":
            binary = which("lighttpd")
            conf = render(os.path.join(PEERS_DIR, "lighttpd.conf"), values,
                          os.path.join(self.dir, "lighttpd.conf"))
            return [binary, "-D", "-f", conf], [binary, "-tt", "-f", conf], [binary, "-v"]
        if name == "h2o":
            binary = which("h2o")
            conf = render(os.path.join(PEERS_DIR, "h2o.conf"), values,
                          os.path.join(self.dir, "h2o.conf"))
            return [binary, "-m", "worker", "-c", conf], [binary, "-t", "-c", conf], \
                [binary, "--version"]
        if name == "apache2":
            binary = which("apache2")
            modules = "/usr/lib/apache2/modules"
            if not os.path.isdir(modules):
                raise BenchError(f"{modules} not found")
            values["APACHE_MODULES"] = modules
            with open(os.path.join(self.dir, "file_cache.conf"), "w") as f:
                f.write("# Generated: every file of the benchmark document root.\n")
                for path in sorted(ctx.contents):
                    f.write(f'CacheFile "{os.path.join(ctx.root, path.lstrip("/"))}"\n')
            conf = render(os.path.join(PEERS_DIR, "apache2.conf"), values,
                          os.path.join(self.dir, "apache2.conf"))
            base = [binary, "-d", self.dir, "-f", conf]
            return base + ["-DFOREGROUND"], base + ["-t"], [binary, "-v"]
        raise BenchError(f"unknown server {name}")

    def version(self):
        v = first_line(self.version_cmd)
        v = v.replace("nginx version: ", "").replace("Server version: ", "")
        v = v.replace(" - a light and fast webserver", "")
        if self.name == "fastpath":
            v += f" (tree at {self.ctx.commit}, model {self.ctx.model or 'default'})"
        return v

    def check_config(self):
        p = subprocess.run(self.test_cmd, capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise BenchError(f"{self.name}: configuration test failed:\n"
                             f"{(p.stdout + p.stderr).strip()}")

    def start(self):
        if port_in_use(self.port):
            raise BenchError(f"port {self.port} is already in use (a leftover server?); "
                             f"choose another with --port-base")
        logf = open(self.log_path, "ab")
        logf.write(f"\n=== start {time.ctime()}: {shlex.join(self.cmd)}\n".encode())
        logf.flush()
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU] + self.cmd,
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     cwd=self.dir, start_new_session=True)
        logf.close()
        self.ctx.register(self)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"{self.name} exited at start (status {self.proc.returncode}): "
                                 f"{last_line(self.log_path)}\n{tail(self.log_path)}")
            try:
                status, body, _ = http_get(self.port, "/1k.html")
                if status == 200 and body == self.ctx.contents["/1k.html"]:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise BenchError(f"{self.name} did not answer on port {self.port} within 15 s: "
                         f"{last_line(self.log_path)}\n{tail(self.log_path)}")

    @property
    def pid(self):
        return self.proc.pid

    def stop(self):
        if not self.proc:
            return
        pgid = self.proc.pid
        tree = process_tree(pgid)
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        # Anything of the tree still alive (children that outlived the parent).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(alive(p) for p in tree):
            time.sleep(0.1)
        for sig_target in [pgid] + tree:
            try:
                if sig_target == pgid:
                    os.killpg(pgid, signal.SIGKILL)
                elif alive(sig_target):
                    os.kill(sig_target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.ctx.unregister(self)
        self.proc = None
        deadline = time.monotonic() + 10
        while port_in_use(self.port) and time.monotonic() < deadline:
            time.sleep(0.1)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def tail(path, n=20):
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        return "\n".join("    " + l for l in lines[-n:])
    except OSError:
        return "    (no log)"


def last_line(path):
    try:
        with open(path, "rb") as f:
            lines = [l.strip() for l in f.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return "(no log)"
    lines = [l for l in lines if l and not l.startswith("=== start")]
    return lines[-1] if lines else "(empty log)"


def port_in_use(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((HOST, port))
        return False
    except OSError:
        return True
    finally:
        s.close()


def http_get(port, path, conn=None):
    own = conn is None
    if own:
        conn = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, body, resp
    finally:
        if own:
            conn.close()


def verify_content(server):
    """GET every file of the document root over one kept-alive connection and
    compare status and body byte for byte."""
    ctx = server.ctx
    conn = http.client.HTTPConnection(HOST, server.port, timeout=10)
    problems = []
    try:
        for path, data in sorted(ctx.contents.items()):
            status, body, _ = http_get(server.port, path, conn)
            if status != 200:
                problems.append(f"{path}: status {status}")
            elif body != data:
                problems.append(f"{path}: {len(body)} bytes received, {len(data)} expected"
                                + ("" if len(body) != len(data) else " (content differs)"))
    finally:
        conn.close()
    if problems:
        raise BenchError(f"{server.name} served wrong responses:\n    " + "\n    ".join(problems))


# --------------------------------------------------------------------------
# Load generation


def run_wrk(ctx, server, wl, duration, tag):
    script = os.path.join(WRK_DIR, wl["script"])
    cmd = ["taskset", "-c", CLIENT_CPU, ctx.wrk, "-t1", f"-c{wl['conns']}", f"-d{duration}s",
           "--latency", "--timeout", "10s", "-s", script]
    for h in wl["headers"]:
        cmd += ["-H", h]
    cmd.append(f"http://{HOST}:{server.port}{wl['path']}")
    p = ctx.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = p.communicate(timeout=duration + 60)
    ctx.reap(p)
    with open(os.path.join(ctx.work, "logs", f"{server.name}.{wl['key']}.{tag}.wrk.txt"), "w") as f:
        f.write(shlex.join(cmd) + "\n" + out)
    m = re.search(r"^BENCH_RESULT (\{.*\})$", out, re.M)
    if p.returncode != 0 or not m:
        raise BenchError(f"wrk failed against {server.name} (status {p.returncode}):\n{out}")
    res = json.loads(m.group(1))
    res["cmd"] = shlex.join(cmd)
    return res


def measure(ctx, server, wl):
    if ctx.warmup > 0:
        run_wrk(ctx, server, wl, ctx.warmup, "warmup")
        time.sleep(0.5)
    cpu0 = tree_cpu_seconds(server.pid)
    res = run_wrk(ctx, server, wl, ctx.duration, "run")
    cpu1 = tree_cpu_seconds(server.pid)
    secs = res["duration_us"] / 1e6
    n = res["requests"]
    res["rps"] = n / secs if secs else 0.0
    res["mbps"] = res["bytes"] / secs / 1e6 if secs else 0.0
    res["cpu_s"] = cpu1 - cpu0
    res["cpu_us_per_req"] = (cpu1 - cpu0) * 1e6 / n if n else None
    res["cpu_util"] = (cpu1 - cpu0) / secs if secs else 0.0
    res["problems"] = check_wrk(res, wl)
    return res


def check_wrk(res, wl):
    """Everything that says the server did not serve what was asked for."""
    problems = []
    n = res["requests"]
    if n == 0:
        return ["no request completed"]
    if res["status"]:
        problems.append(f"{res['status']} non-2xx/3xx")
    for k in ("connect", "read", "write", "timeout"):
        if res[k]:
            problems.append(f"{res[k]} socket {k} errors")
    per_req = res["bytes"] / n
    if wl["body"] is not None:
        body = wl["body"]
        # Headers take up to 1 KiB; a response cut off by the end of the run
        # adds bytes that no completed request accounts for.
        hi = body + 1024 + wl["conns"] * body / n
        lo = body
    else:
        mean, sd = spec_expected_body()
        slack = 6 * sd / (n ** 0.5)
        lo = mean - slack
        hi = mean + slack + 1024 + wl["conns"] * 921600 / n
    if not lo <= per_req <= hi:
        problems.append(f"{per_req:.0f} bytes per response, expected {lo:.0f} to {hi:.0f}")
    return problems


def strace_run(ctx, server):
    """System calls per request on workload 1 with strace attached to every
    process and thread of the server."""
    wl = WORKLOADS[0]
    pids = process_tree(server.pid)
    out_path = os.path.join(ctx.work, "logs", f"{server.name}.strace.txt")
    cmd = [ctx.strace, "-c", "-f", "-o", out_path]
    for pid in pids:
        cmd += ["-p", str(pid)]
    errlog = open(os.path.join(ctx.work, "logs", f"{server.name}.strace.stderr"), "w")
    p = ctx.spawn(cmd, stdout=errlog, stderr=errlog)
    errlog.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise BenchError(f"strace exited at once (status {p.returncode}); see {out_path}")
        if all(tracer_of(pid) == p.pid for pid in pids):
            break
        time.sleep(0.05)
    else:
        p.kill()
        ctx.reap(p)
        raise BenchError("strace did not attach within 10 s")
    time.sleep(0.3)
    try:
        res = run_wrk(ctx, server, wl, ctx.strace_duration, "strace")
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
        ctx.reap(p)
    calls = {}
    total = None
    with open(out_path) as f:
        for line in f:
            parts = line.split()
            if not parts or not parts[0][0].isdigit():
                continue
            name = parts[-1]
            # % time, seconds, usecs/call, calls, [errors,] syscall
            ncalls = int(parts[3])
            if name == "total":
                total = ncalls
            else:
                calls[name] = ncalls
    if total is None:
        raise BenchError(f"no strace summary in {out_path}")
    n = res["requests"]
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
    return {"requests": n, "calls": total, "per_req": total / n if n else None,
            "top": [(k, v / n if n else 0) for k, v in top],
            "problems": check_wrk(res, wl)}


def tracer_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def idle_run(ctx, server):
    """Workload 5: memory per idle keep-alive connection."""
    time.sleep(0.5)
    before = tree_rss_bytes(server.pid)
    cmd = ["taskset", "-c", CLIENT_CPU, sys.executable, os.path.join(BENCH_DIR, "idle_conns.py"),
           "--port", str(server.port), "--count", str(IDLE_CONNECTIONS), "--path", "/1k.html",
           "--in-flight", "64"]
    p = ctx.spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        line = p.stdout.readline()
        if not line.startswith("READY "):
            raise BenchError(f"idle connection client failed: {line!r}")
        ready = json.loads(line[6:])
        if "error" in ready:
            raise BenchError(f"idle connection client: {ready['error']}")
        time.sleep(1.0)
        after = tree_rss_bytes(server.pid)
        p.stdin.write("check\n")
        p.stdin.flush()
        line = p.stdout.readline()
        checked = json.loads(line[8:]) if line.startswith("CHECKED ") else {"alive": 0}
        p.stdin.write("close\n")
        p.stdin.flush()
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
        ctx.reap(p)
    held = checked.get("alive", 0)
    problems = []
    if ready["failures"]:
        problems += [f"{v} × {k}" for k, v in ready["failures"].items()]
    if held != IDLE_CONNECTIONS:
        problems.append(f"{held} of {IDLE_CONNECTIONS} connections still open at the check")
    return {"before": before, "after": after, "held": held, "open_seconds": ready["seconds"],
            "per_conn": (after - before) / held if held else None, "problems": problems}


# --------------------------------------------------------------------------
# Orchestration


class Context:
    def __init__(self, args):
        self.args = args
        self.port_base = args.port_base
        self.model = args.model
        self.fastpath_bin = args.fastpath_bin
        self.duration = args.duration
        self.warmup = args.warmup
        self.strace_duration = args.strace_duration
        self.own_work = args.work is None
        self.work = args.work or tempfile.mkdtemp(prefix="fastpath-bench.")
        os.chmod(self.work, 0o755)
        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)
        self.root = os.path.join(self.work, "www")
        os.makedirs(self.root, exist_ok=True)
        self.pgid_file = os.path.join(self.work, "pgids")
        self.running = {}
        self.clients = set()
        self.contents = {}
        self.wrk = None
        self.strace = None
        self.commit = "unknown"

    def register(self, server):
        self.running[server.name] = server
        self._write_pgids()

    def unregister(self, server):
        self.running.pop(server.name, None)
        self._write_pgids()

    def _write_pgids(self):
        with open(self.pgid_file, "w") as f:
            for s in self.running.values():
                f.write(f"{s.proc.pid}\n")

    def spawn(self, cmd, **kw):
        p = subprocess.Popen(cmd, **kw)
        self.clients.add(p)
        return p

    def reap(self, p):
        self.clients.discard(p)

    def cleanup(self):
        for p in list(self.clients):
            if p.poll() is None:
                try:
                    p.kill()
                    p.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self.clients.discard(p)
        for s in list(self.running.values()):
            try:
                s.stop()
            except Exception as e:  # keep stopping the others
                log(f"stopping {s.name}: {e}")
        if self.own_work and not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)


def run_server(ctx, name, results):
    r = results.setdefault(name, {"workloads": {}, "problems": []})
    try:
        server = Server(name, ctx)
        r["version"] = server.version()
        server.check_config()
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        r["failed"] = str(e)
        log(f"ERROR {name}: {e}")
        return
    try:
        log(f"{name}: starting on port {server.port}")
        server.start()
        verify_content(server)
        for wl in WORKLOADS:
            log(f"{name}: workload {wl['num']} ({wl['title']})")
            res = measure(ctx, server, wl)
            r["workloads"][wl["key"]] = res
            log(f"{name}: workload {wl['num']}: {res['rps']:.0f} {wl['rate']}, "
                f"{res['mbps']:.1f} MB/s, p50 {res['p50']} µs, p99 {res['p99']} µs, "
                f"CPU {fmt_num(res['cpu_us_per_req'])} µs/req ({res['cpu_util'] * 100:.0f}% busy)"
                + (f"; PROBLEMS: {'; '.join(res['problems'])}" if res["problems"] else ""))
            time.sleep(1)
        if name in STRACE_SERVERS and not ctx.args.no_strace:
            log(f"{name}: system calls per request (strace, workload 1, "
                f"{ctx.strace_duration} s)")
            try:
                r["strace"] = strace_run(ctx, server)
                log(f"{name}: {fmt_num(r['strace']['per_req'])} system calls per request")
            except BenchError as e:
                r["strace"] = {"error": str(e)}
                log(f"ERROR {name}: strace: {e}")
        verify_content(server)
        server.stop()

        log(f"{name}: restarting for workload 5 ({IDLE_CONNECTIONS} idle connections)")
        server.start()
        verify_content(server)
        r["idle"] = idle_run(ctx, server)
        idle = r["idle"]
        log(f"{name}: workload 5: RSS {idle['before'] / 2**20:.1f} MiB -> "
            f"{idle['after'] / 2**20:.1f} MiB with {idle['held']} idle: "
            f"{fmt_num(idle['per_conn'])} bytes per connection"
            + (f"; PROBLEMS: {'; '.join(idle['problems'])}" if idle["problems"] else ""))
        server.stop()
    except (BenchError, OSError, subprocess.SubprocessError, ValueError) as e:
        r["failed"] = str(e)
        log(f"ERROR {name}: {e}")
    finally:
        server.stop()


# --------------------------------------------------------------------------
# Report


def fmt_num(v, digits=3):
    if v is None:
        return "–"
    if v == 0:
        return "0"
    mag = abs(v)
    if mag >= 10 ** digits:
        return f"{v:,.0f}"
    decimals = max(0, digits - 1 - int(f"{mag:e}".split("e")[1]))
    return f"{v:,.{decimals}f}"


def fmt_lat(us):
    if us is None:
        return "–"
    if us < 1000:
        return f"{us:.0f} µs"
    return f"{fmt_num(us / 1000)} ms"


def ratio(v, ref):
    if v is None or ref is None or ref == 0:
        return "–"
    return f"{v / ref:.2f}×"


def workload_table(wl, order, results):
    ref = results.get("nginx", {}).get("workloads", {}).get(wl["key"])
    rate = wl["rate"]
    lines = [f"| server | {rate} | {rate} ÷ nginx | MB/s | p50 | p99 | CPU µs/req "
             f"| CPU ÷ nginx | server CPU busy | errors |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for name in order:
        r = results.get(name, {})
        res = r.get("workloads", {}).get(wl["key"])
        label = SERVER_LABEL[name]
        if res is None:
            why = r.get("failed", "not run").splitlines()[0]
            lines.append(f"| {label} | did not run: {why} | | | | | | | | |")
            continue
        errs = "; ".join(res["problems"]) if res["problems"] else "none"
        lines.append(
            f"| {label} | {fmt_num(res['rps'])} | {ratio(res['rps'], ref and ref['rps'])} "
            f"| {fmt_num(res['mbps'])} | {fmt_lat(res['p50'])} | {fmt_lat(res['p99'])} "
            f"| {fmt_num(res['cpu_us_per_req'])} "
            f"| {ratio(res['cpu_us_per_req'], ref and ref['cpu_us_per_req'])} "
            f"| {res['cpu_util'] * 100:.0f}% | {errs} |")
    return lines


def strace_table(order, results):
    lines = ["| server | system calls per request | requests traced | most frequent (per request) |",
             "|---|--:|--:|---|"]
    any_row = False
    for name in order:
        if name not in STRACE_SERVERS:
            continue
        s = results.get(name, {}).get("strace")
        if s is None:
            continue
        any_row = True
        if "error" in s:
            lines.append(f"| {SERVER_LABEL[name]} | failed: {s['error'].splitlines()[0]} | | |")
            continue
        top = ", ".join(f"{k} {v:.2f}" for k, v in s["top"])
        extra = f" (errors: {'; '.join(s['problems'])})" if s["problems"] else ""
        lines.append(f"| {SERVER_LABEL[name]} | {fmt_num(s['per_req'])} | {s['requests']:,}{extra} "
                     f"| {top} |")
    return lines if any_row else []


def idle_table(order, results):
    ref = results.get("nginx", {}).get("idle")
    lines = [f"| server | RSS before | RSS with idle connections | connections held "
             f"| bytes per idle connection | ÷ nginx | errors |",
             "|---|--:|--:|--:|--:|--:|---|"]
    for name in order:
        r = results.get(name, {})
        idle = r.get("idle")
        label = SERVER_LABEL[name]
        if idle is None:
            why = r.get("failed", "not run").splitlines()[0]
            lines.append(f"| {label} | did not run: {why} | | | | | |")
            continue
        errs = "; ".join(idle["problems"]) if idle["problems"] else "none"
        lines.append(f"| {label} | {idle['before'] / 2**20:.1f} MiB | {idle['after'] / 2**20:.1f} MiB "
                     f"| {idle['held']:,} | {fmt_num(idle['per_conn'])} "
                     f"| {ratio(idle['per_conn'], ref and ref['per_conn'])} | {errs} |")
    return lines


def targets_table(results):
    fp = results.get("fastpath", {})
    ng = results.get("nginx", {})
    if "workloads" not in fp or not fp["workloads"] or not ng.get("workloads"):
        return []

    def w(r, key, field):
        res = r.get("workloads", {}).get(key)
        return res.get(field) if res else None

    def verdict(ok):
        if ok is None:
            return "–"
        return "met" if ok else "**not met**"

    rows = []
    others = [n for n in ("lighttpd", "h2o", "apache2") if w(results.get(n, {}), "w1", "rps")]
    for key, num in (("w1", 1), ("w2", 2)):
        mine, ref = w(fp, key, "cpu_us_per_req"), w(ng, key, "cpu_us_per_req")
        ok = mine is not None and ref is not None and mine <= 0.6 * ref
        rows.append(f"| {num}: CPU per request ≤ 0.6 × nginx | {fmt_num(mine)} µs "
                    f"| {fmt_num(ref)} µs → limit {fmt_num(ref and 0.6 * ref)} µs "
                    f"| {ratio(mine, ref)} | {verdict(ok if ref else None)} |")
        best = [w(results[n], key, "cpu_us_per_req") for n in others]
        best = [b for b in best if b is not None]
        if best:
            b = min(best)
            bname = SERVER_LABEL[[n for n in others
                                  if w(results[n], key, "cpu_us_per_req") == b][0]]
            rows.append(f"| {num}: CPU per request ≤ 0.8 × best of lighttpd, h2o, Apache "
                        f"| {fmt_num(mine)} µs | {bname} {fmt_num(b)} µs → limit {fmt_num(0.8 * b)} µs "
                        f"| {ratio(mine, b)} | {verdict(mine is not None and mine <= 0.8 * b)} |")
    mine, ref = w(fp, "w3", "rps"), w(ng, "w3", "rps")
    if mine is not None and ref:
        rows.append(f"| 3: connections/s ≥ 1.3 × nginx | {fmt_num(mine)} | {fmt_num(ref)} → "
                    f"limit {fmt_num(1.3 * ref)} | {ratio(mine, ref)} | {verdict(mine >= 1.3 * ref)} |")
        cm, cr = w(fp, "w3", "cpu_us_per_req"), w(ng, "w3", "cpu_us_per_req")
        if cm is not None and cr:
            rows.append(f"| 3: CPU per connection ≤ nginx | {fmt_num(cm)} µs | {fmt_num(cr)} µs "
                        f"| {ratio(cm, cr)} | {verdict(cm <= cr)} |")
    mine, ref = w(fp, "w4", "mbps"), w(ng, "w4", "mbps")
    if mine is not None and ref:
        rows.append(f"| 4: throughput ≥ nginx | {fmt_num(mine)} MB/s | {fmt_num(ref)} MB/s "
                    f"| {ratio(mine, ref)} | {verdict(mine >= ref)} |")
    mi, ri = fp.get("idle"), ng.get("idle")
    if mi and ri and mi.get("per_conn") is not None and ri.get("per_conn"):
        rows.append(f"| 5: memory per idle connection ≤ nginx | {fmt_num(mi['per_conn'])} B "
                    f"| {fmt_num(ri['per_conn'])} B | {ratio(mi['per_conn'], ri['per_conn'])} "
                    f"| {verdict(mi['per_conn'] <= ri['per_conn'])} |")
    return ["| target | fastpath | reference | ratio | status |",
            "|---|--:|--:|--:|---|"] + rows


def machine_info():
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "unknown"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "kernel": platform.release(), "memory": mem}


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return [0.0, 0.0, 0.0]


def report(ctx, order, results, started, load_start, load_end):
    args = ctx.args
    m = machine_info()
    lines = []
    mode = "quick" if args.quick else "full"
    lines.append(f"Run of {started.strftime('%Y-%m-%d %H:%M UTC')}, {mode} mode: "
                 f"{ctx.duration} s per workload"
                 + (f" after {ctx.warmup} s of warm-up" if ctx.warmup else ", no warm-up")
                 + f"; strace run {ctx.strace_duration} s.")
    lines.append("")
    lines.append("```sh")
    lines.append(ctx.command)
    lines.append("```")
    lines.append("")
    lines.append(f"- Machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory']} memory, "
                 f"Linux {m['kernel']}; servers on CPU {SERVER_CPU}, load generator on "
                 f"CPU {CLIENT_CPU}.")
    lines.append(f"- Load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in load_start)} "
                 f"at the start, {' '.join(f'{x:.2f}' for x in load_end)} at the end.")
    if max(load_start[0], load_end[0]) > 0.7:
        lines.append("- **The machine was not idle during this run** (other jobs were running "
                     "on it), so these figures are noisy: compare them with care and rerun on "
                     "a quiet machine before drawing conclusions.")
    wrk_version = first_line([ctx.wrk, "--version"]).split(" Copyright")[0]
    lines.append(f"- Load generator: {wrk_version}, one thread")
    for name in order:
        v = results.get(name, {}).get("version", "unknown")
        lines.append(f"- {SERVER_LABEL[name]}: {v}")
    lines.append("")
    for wl in WORKLOADS:
        lines.append(f"### Workload {wl['num']}: {wl['title']}")
        lines.append("")
        lines += workload_table(wl, order, results)
        lines.append("")
    lines.append(f"### Workload 5: {IDLE_CONNECTIONS:,} idle keep-alive connections")
    lines.append("")
    lines += idle_table(order, results)
    lines.append("")
    st = strace_table(order, results)
    if st:
        lines.append(f"### System calls per request (workload 1 under strace, "
                     f"{ctx.strace_duration} s)")
        lines.append("")
        lines += st
        lines.append("")
    tt = targets_table(results)
    if tt:
        lines.append("### Targets")
        lines.append("")
        lines += tt
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_benchmarks_md(path, block):
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    else:
        text = "# Benchmarks\n\n"
    new_block = f"{MARK_BEGIN}\n{block}{MARK_END}"
    if MARK_BEGIN in text and MARK_END in text:
        pre = text[:text.index(MARK_BEGIN)]
        post = text[text.index(MARK_END) + len(MARK_END):]
        text = pre + new_block + post
    else:
        text = text.rstrip() + "\n\n## Results\n\n" + new_block + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# --------------------------------------------------------------------------


def parse_args(argv):
    ap = argparse.ArgumentParser(description="fastpath comparison suite")
    ap.add_argument("--quick", action="store_true",
                    help="2 s per workload and no warm-up (smoke run)")
    ap.add_argument("--servers", default=",".join(ALL_SERVERS),
                    help=f"comma-separated subset of {','.join(ALL_SERVERS)}")
    ap.add_argument("--model", default=None, help="fastpath concurrency model (--model)")
    ap.add_argument("--duration", type=int, default=None, help="seconds per workload")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up seconds per workload")
    ap.add_argument("--strace-duration", type=int, default=None)
    ap.add_argument("--no-strace", action="store_true", help="skip the system call count")
    ap.add_argument("--port-base", type=int, default=18180,
                    help="servers listen on 127.0.0.1:PORT_BASE+1..5")
    ap.add_argument("--fastpath-bin", default=os.environ.get("FASTPATH_BIN"))
    ap.add_argument("--work", default=None, help="work directory (made by run.sh)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    ap.add_argument("--output", default=os.path.join(REPO_DIR, "BENCHMARKS.md"),
                    help="Markdown file whose bench:begin/end block is replaced")
    ap.add_argument("--no-write", action="store_true", help="only print the tables")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--command", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.duration is None:
        args.duration = 2 if args.quick else 10
    if args.warmup is None:
        args.warmup = 0 if args.quick else 2
    if args.strace_duration is None:
        args.strace_duration = 1 if args.quick else 3
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    bad = [s for s in servers if s not in ALL_SERVERS]
    if bad or not servers:
        ap.error(f"unknown server(s) {bad}; choose from {','.join(ALL_SERVERS)}")
    args.server_list = [s for s in ALL_SERVERS if s in servers]
    if "fastpath" in args.server_list and not args.fastpath_bin:
        args.fastpath_bin = os.path.join(REPO_DIR, "target", "release", "fastpath")
    return args


def main(argv):
    args = parse_args(argv)
    ctx = Context(args)
    ctx.command = args.command or shlex.join(["bench/bench.py"] + argv)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    atexit.register(ctx.cleanup)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        pass
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < IDLE_CONNECTIONS + 1000:
        log(f"warning: RLIMIT_NOFILE is {resource.getrlimit(resource.RLIMIT_NOFILE)[0]}; "
            f"workload 5 needs more than {IDLE_CONNECTIONS}")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("the suite needs two CPUs (server on CPU 0, load generator on CPU 1)")

    try:
        ctx.wrk = which("wrk")
        ctx.strace = which("strace") if not args.no_strace else None
        which("taskset")
    except BenchError as e:
        raise SystemExit(f"error: {e} (bench/run.sh installs it)")
    try:
        ctx.commit = subprocess.run(["git", "-C", REPO_DIR, "rev-parse", "--short", "HEAD"],
                                    capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        pass

    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = loadavg()
    log(f"work directory {ctx.work}; servers: {', '.join(args.server_list)}; "
        f"{args.duration} s per workload, {args.warmup} s warm-up")
    ctx.contents = make_docroot(ctx.root)
    mean, _ = spec_expected_body()
    log(f"document root {ctx.root}: {len(ctx.contents)} files; "
        f"mix mean body {mean:.0f} bytes")

    results = {}
    try:
        for name in args.server_list:
            run_server(ctx, name, results)
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); stopping servers")
        ctx.cleanup()
        return 130
    load_end = loadavg()

    block = report(ctx, args.server_list, results, started, load_start, load_end)
    print()
    print(block)
    if not args.no_write:
        write_benchmarks_md(args.output, block)
        log(f"results written to {args.output}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, default=str)

    failures = []
    for name in args.server_list:
        r = results.get(name, {})
        if "failed" in r:
            failures.append(f"{name}: {r['failed'].splitlines()[0]}")
        for key, res in r.get("workloads", {}).items():
            for p in res["problems"]:
                failures.append(f"{name} {key}: {p}")
        for p in (r.get("idle") or {}).get("problems", []):
            failures.append(f"{name} w5: {p}")
        s = r.get("strace")
        if s and "error" in s:
            failures.append(f"{name} strace: {s['error'].splitlines()[0]}")
    if failures:
        log("ERRORS (the tables above show them too):")
        for f in failures:
            log("  " + f)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
