#!/usr/bin/env python3
"""fastpath comparison suite: runs fastpath, nginx, lighttpd, h2o and Apache one
after the other on the same document root and the same workloads, and writes
the results as Markdown tables (printed, and put into BENCHMARKS.md) and SVG
charts (bench/results/).

The load generator is `fastpath bench` (the load generator built into the
fastpath binary): closed loop for workloads 1-4, connection rate for the
overload sweep. wrk runs workload 1 again against every server as a
cross-check of the load generator.

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
import zlib

sys.dont_write_bytecode = True  # no __pycache__ left in bench/
import charts  # noqa: E402  (bench/charts.py)

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
PEERS_DIR = os.path.join(BENCH_DIR, "peers")
WRK_DIR = os.path.join(BENCH_DIR, "wrk")
RESULTS_DIR = os.path.join(BENCH_DIR, "results")
APACHE_MODULES = "/usr/lib/apache2/modules"

ALL_SERVERS = ["fastpath", "nginx", "lighttpd", "h2o", "apache2"]
# A second fastpath binary, run beside the first when --baseline-bin names one: a change
# measured against the code it changes, in the same run and conditions.
BASELINE = "fastpath-base"
SERVER_LABEL = {"fastpath": "fastpath", "nginx": "nginx", "lighttpd": "lighttpd",
                "h2o": "h2o", "apache2": "Apache (event)"}
PORT_OFFSET = {name: i + 1 for i, name in enumerate(ALL_SERVERS + [BASELINE])}
SERVER_LABEL[BASELINE] = "fastpath (base)"
STRACE_SERVERS = ("fastpath", BASELINE, "nginx")

SERVER_CPU = "0"
CLIENT_CPU = "1"
HOST = "127.0.0.1"

MARK_BEGIN = "<!-- bench:begin -->"
MARK_END = "<!-- bench:end -->"

# The document root is the SPECweb96 file set written by
# `fastpath bench make-docroot` (36 files in /dir00000/, with a manifest of
# sizes and CRC-32s that `fastpath bench --verify` checks every reply
# against), plus one 1 MiB file for workload 4 with a manifest of its own.
SPEC_MANIFEST = "specweb96.manifest"
MANIFEST_HEADER = "# fastpath bench manifest v1: path size crc32 weight"
FILE_1K = "/dir00000/class1_0"      # 1,024 bytes, a file of the SPECweb96 set
FILE_1M = "/1m.bin"                 # 1,048,576 bytes, made by this script

IDLE_CONNECTIONS = 10000

# Workloads 1-4, all closed loop with `fastpath bench`. "verify" says which
# manifest the replies are checked against: "spec" (the document root's) or
# "1m" (the manifest of /1m.bin).
WORKLOADS = [
    {"key": "w1", "num": 1, "title": "1 KiB file, keep-alive, 64 connections",
     "path": FILE_1K, "args": ["-c", "64"], "verify": "spec", "rate": "req/s",
     "chart": "workload1-latency.svg"},
    {"key": "w2", "num": 2, "title": "SPECweb96 file-size mix, keep-alive, 64 connections",
     "path": "/", "args": ["-c", "64", "--mix", "specweb96"], "verify": "spec",
     "rate": "req/s", "chart": "workload2-latency.svg"},
    {"key": "w3", "num": 3,
     "title": "new connection per request (`Connection: close`), 1 KiB file, 64 connections",
     "path": FILE_1K, "args": ["-c", "64", "--no-keepalive"], "verify": "spec",
     "rate": "conn/s", "chart": "workload3-latency.svg"},
    {"key": "w4", "num": 4, "title": "1 MiB file, keep-alive, 16 connections",
     "path": FILE_1M, "args": ["-c", "16"], "verify": "1m", "rate": "req/s",
     "chart": "workload4-latency.svg"},
]
# The wrk cross-check: workload 1 again, with wrk.
WRK_CHECK = {"conns": 64, "path": FILE_1K, "body": 1024, "script": "report.lua"}
OVERLOAD_CHART = "overload.svg"

CLK_TCK = os.sysconf("SC_CLK_TCK")

# The name in front of every log line (bench/models.py, which reuses this
# module, sets its own).
LOG_TAG = "bench"


class BenchError(Exception):
    pass


def log(msg):
    print(f"[{LOG_TAG} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Process trees, CPU time and memory from /proc


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name ([0] is field 3,
    the state), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("latin-1")
    except OSError:
        return None
    return data[data.rfind(")") + 2:].split()


def read_stat(pid):
    """(ppid, cpu ticks incl. reaped children) of one process, or None."""
    rest = stat_fields(pid)
    if rest is None:
        return None
    # utime, stime, cutime, cstime are fields 14-17.
    ppid = int(rest[1])
    ticks = int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])
    return ppid, ticks


def process_tree(root, children_of=None):
    """The root pid and all its descendants: through children_of(pid) if given,
    else from the parent pid of every process in /proc."""
    if children_of is None:
        children = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            st = read_stat(int(entry))
            if st:
                children.setdefault(st[0], []).append(int(entry))

        def children_of(pid):
            return children.get(pid, [])

    tree, todo, seen = [], [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        tree.append(pid)
        todo.extend(children_of(pid))
    return tree


def tree_cpu_seconds(root, children_of=None):
    """User + system time of the whole tree: every process (all its threads,
    live or exited) plus the children it has already reaped (cutime/cstime)."""
    total = 0
    for pid in process_tree(root, children_of):
        st = read_stat(pid)
        if st:
            total += st[1]
    return total / CLK_TCK


def proc_numbers(path, *keys):
    """{key: the number after it} for the lines of a /proc file that start with
    one of `keys` ("VmRSS:", "Pss:", ...); 0 for a key not found."""
    out = dict.fromkeys(keys, 0)
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if parts and parts[0] in out:
                    out[parts[0]] = int(parts[1])
    except OSError:
        pass
    return out


def tree_memory(root, children_of=None):
    """{"pss", "rss"} bytes summed over the tree, and its processes and threads."""
    pss = rss = threads = 0
    pids = process_tree(root, children_of)
    for pid in pids:
        pss += proc_numbers(f"/proc/{pid}/smaps_rollup", "Pss:")["Pss:"] * 1024
        status = proc_numbers(f"/proc/{pid}/status", "VmRSS:", "Threads:")
        rss += status["VmRSS:"] * 1024
        threads += status["Threads:"]
    return {"pss": pss, "rss": rss, "processes": len(pids), "threads": threads}


def tree_rss_bytes(root):
    return sum(proc_numbers(f"/proc/{pid}/status", "VmRSS:")["VmRSS:"]
               for pid in process_tree(root)) * 1024


def raise_nofile():
    """Raises the open-file limit to the hard limit; returns the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# --------------------------------------------------------------------------
# Document root


def make_docroot(ctx):
    """Writes the shared document root: the SPECweb96 set of
    `fastpath bench make-docroot`, plus /1m.bin and its manifest. Returns
    {url path: bytes} of every file, for the byte-for-byte checks."""
    root = ctx.root
    make_spec_docroot(ctx.fastpath_bin, root)
    manifest = os.path.join(root, SPEC_MANIFEST)
    entries = read_manifest(manifest)
    data_1m = make_content(1 << 20)
    with open(os.path.join(root, FILE_1M.lstrip("/")), "wb") as f:
        f.write(data_1m)
    # A manifest of its own (outside the document root) so that
    # `fastpath bench --manifest` checks size and CRC-32 of every 1 MiB reply.
    with open(ctx.manifest_1m, "w") as f:
        f.write(f"{MANIFEST_HEADER}\n{FILE_1M}\t{len(data_1m)}\t"
                f"{zlib.crc32(data_1m):08x}\t1.000000000\n")
    contents = {}
    for path, size, crc in entries:
        with open(os.path.join(root, path.lstrip("/")), "rb") as f:
            data = f.read()
        if len(data) != size or zlib.crc32(data) != crc:
            raise BenchError(f"{path}: does not match {manifest}")
        contents[path] = data
    contents[FILE_1M] = data_1m
    if FILE_1K not in contents or len(contents[FILE_1K]) != 1024:
        raise BenchError(f"{FILE_1K} is not a 1 KiB file of the set in {root}")
    publish_tree(root)
    return contents


def make_spec_docroot(fastpath_bin, root):
    """The SPECweb96 file set (and its manifest) of `fastpath bench make-docroot`."""
    cmd = [fastpath_bin, "bench", "make-docroot", root]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise BenchError(f"{shlex.join(cmd)} failed:\n{(p.stdout + p.stderr).strip()}")


def publish_tree(root):
    """Makes a document root readable by every server (the peers run as
    "nobody"); returns the URL path of every file in it."""
    paths = []
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)
            paths.append("/" + os.path.relpath(os.path.join(dirpath, name), root))
    return paths


def read_manifest(path):
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines or lines[0] != MANIFEST_HEADER:
        raise BenchError(f"{path}: not a manifest of `fastpath bench make-docroot`")
    entries = []
    for line in lines[1:]:
        if line.strip():
            p, size, crc, _weight = line.split("\t")
            entries.append((p, int(size), int(crc, 16)))
    return entries


def make_content(size):
    """Deterministic printable bytes."""
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n"
    x = 0x9E3779B97F4A7C15
    block = bytearray()
    for _ in range(4096):
        x = (x * 6364136223846793005 + 1442695040888963407) & (2 ** 64 - 1)
        block.append(alphabet[x >> 58])
    return (bytes(block) * (size // len(block) + 1))[:size]


# --------------------------------------------------------------------------
# Servers


def find_program(name):
    """The path of a program (also in the sbin directories), or None."""
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/local/sbin"
    return shutil.which(name, path=path)


def which(name):
    found = find_program(name)
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
    """One server under test, started and stopped as a process group pinned to
    SERVER_CPU, with its configuration, pid and log files in WORK/NAME/.
    bench/models.py runs its servers with a subclass of this one."""

    # Seconds a fresh server has to answer correctly, and what the error says
    # it did not do in that time.
    start_timeout = 15
    ready_desc = ""
    # Passed to Popen for the server process.
    preexec_fn = None

    def __init__(self, name, ctx):
        self.name = name
        self.ctx = ctx
        self.port = ctx.port_base + self.port_offset()
        self.dir = os.path.join(ctx.work, name)
        os.makedirs(self.dir, exist_ok=True)
        os.chmod(self.dir, 0o755)
        if os.geteuid() == 0 and not name.startswith("fastpath"):
            # The peers drop root for "nobody" and some of them write their
            # pid and log files only after that.
            os.chown(self.dir, pwd.getpwnam("nobody").pw_uid, grp.getgrnam("nogroup").gr_gid)
        self.proc = None
        self.log_path = os.path.join(ctx.work, "logs", f"{name}.server.log")
        self.cmd, self.test_cmd, self.version_cmd = self.prepare()

    def port_offset(self):
        return PORT_OFFSET[self.name]

    def values(self):
        """The placeholders of the configuration templates in bench/peers/."""
        return {"PORT": self.port, "ROOT": self.ctx.root, "WORK": self.ctx.work}

    def prepare(self):
        """(command, configuration test command or None, version command)."""
        name = self.name
        if name == "fastpath":
            return self.prepare_fastpath(self.ctx.model, self.ctx.fastpath_bin)
        if name == BASELINE:
            return self.prepare_fastpath(self.ctx.model, self.ctx.baseline_bin)
        if name == "nginx":
            return self.prepare_nginx()
        values = self.values()
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
            return self.prepare_apache2("apache2.conf", self.ctx.contents)
        raise BenchError(f"unknown server {name}")

    def prepare_fastpath(self, model, binary):
        """fastpath `binary` with bench/peers/fastpath.toml, and --model if `model` is set."""
        ctx = self.ctx
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise BenchError(f"fastpath binary {binary} not found (set FASTPATH_BIN)")
        conf = render(os.path.join(PEERS_DIR, "fastpath.toml"), self.values(),
                      os.path.join(self.dir, "fastpath.toml"))
        if os.geteuid() == 0:
            # As root, serve as "nobody" like the peers; a binary from before the `user`
            # key (the baseline, say) never refused root and keeps the file as it is.
            with open(conf) as f:
                text = f.read()
            with open(conf, "w") as f:
                f.write('user = "nobody"\n' + text)
            p = subprocess.run([binary, "check", "--config", conf], capture_output=True,
                               text=True, timeout=60)
            if "unknown key `user`" in p.stdout + p.stderr:
                with open(conf, "w") as f:
                    f.write(text)
        cmd = [binary, "serve", ctx.root, "--listen", f"{HOST}:{self.port}",
               "--config", conf]
        if model:
            cmd += ["--model", model]
        return cmd, [binary, "check", "--config", conf], [binary, "--version"]

    def prepare_nginx(self):
        binary = which("nginx")
        conf = render(os.path.join(PEERS_DIR, "nginx.conf"), self.values(),
                      os.path.join(self.dir, "nginx.conf"))
        # nginx.conf keeps its pid and error log in WORK/nginx/.
        base = [binary, "-p", self.dir + "/", "-e", os.path.join(self.dir, "error.log"),
                "-c", conf]
        return base, base + ["-t", "-q"], [binary, "-v"]

    def prepare_apache2(self, template, paths):
        """Apache httpd with the configuration bench/peers/`template`, and a
        CacheFile line for each URL path in `paths`."""
        binary = which("apache2")
        if not os.path.isdir(APACHE_MODULES):
            raise BenchError(f"{APACHE_MODULES} not found")
        values = dict(self.values(), APACHE_MODULES=APACHE_MODULES)
        with open(os.path.join(self.dir, "file_cache.conf"), "w") as f:
            f.write("# Generated: every file of the benchmark document root.\n")
            for path in sorted(paths):
                f.write(f'CacheFile "{os.path.join(self.ctx.root, path.lstrip("/"))}"\n')
        conf = render(os.path.join(PEERS_DIR, template), values,
                      os.path.join(self.dir, "apache2.conf"))
        base = [binary, "-d", self.dir, "-f", conf]
        return base + ["-DFOREGROUND"], base + ["-t"], [binary, "-v"]

    def version(self):
        v = first_line(self.version_cmd)
        v = v.replace("nginx version: ", "").replace("Server version: ", "")
        v = v.replace(" - a light and fast webserver", "")
        if self.name == "fastpath":
            v += f" (tree at {self.ctx.commit}, model {self.ctx.model or 'default'})"
        return v

    def check_config(self):
        if not self.test_cmd:
            return
        p = subprocess.run(self.test_cmd, capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            raise BenchError(f"{self.name}: configuration test failed:\n"
                             f"{(p.stdout + p.stderr).strip()}")

    def start(self):
        if port_in_use(self.port):
            raise BenchError(f"port {self.port} is already in use (a leftover server?); "
                             f"choose another with --port-base")
        offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        logf = open(self.log_path, "ab")
        logf.write(f"\n=== start {time.ctime()}: {shlex.join(self.cmd)}\n".encode())
        logf.flush()
        self.proc = subprocess.Popen(["taskset", "-c", SERVER_CPU] + self.cmd,
                                     stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     cwd=self.dir, start_new_session=True,
                                     preexec_fn=self.preexec_fn)
        logf.close()
        self.ctx.register(self)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self.start_error(f"exited at start (status {self.proc.returncode})",
                                       offset)
            try:
                if self.ready():
                    return
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.1)
        raise self.start_error(f"did not answer{self.ready_desc} on port {self.port} "
                               f"within {self.start_timeout} s", offset)

    def ready(self):
        """Whether the server answers GET FILE_1K with the file."""
        status, body, _ = http_get(self.port, FILE_1K)
        return status == 200 and body == self.ctx.contents[FILE_1K]

    def start_error(self, what, offset):
        """The error for a server that did not come up: `what` happened; its log
        from byte `offset` on is what it wrote since this start."""
        return BenchError(f"{self.name} {what}: "
                          f"{last_line(read_log(self.log_path))}\n{tail(self.log_path)}")

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
    f = stat_fields(pid)
    return bool(f) and f[0] != "Z"


def read_log(path, offset=0):
    """The text of a log file from byte `offset` on, or None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def tail(path, n=20):
    text = read_log(path)
    if text is None:
        return "    (no log)"
    return "\n".join("    " + l for l in text.splitlines()[-n:])


def last_line(text):
    """The last line of a server log's text (from read_log) that is not one of
    the marks written at every start."""
    if text is None:
        return "(no log)"
    lines = [l.strip() for l in text.splitlines()]
    lines = [l for l in lines if l and not l.startswith("=== start")]
    return lines[-1] if lines else "(empty log)"


def root_flag(binary):
    """`--run-as-root` for a fastpath that refuses root without it, when run as root (the
    work directory is private to root); nothing for one from before that rule."""
    if os.geteuid() != 0:
        return []
    help_text = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
    return ["--run-as-root"] if "--run-as-root" in help_text else []


def wait_port(port, timeout=15):
    """Waits until something accepts on 127.0.0.1:`port`; ends the script if nothing does."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


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


def http_get(port, path, conn=None, timeout=5):
    own = conn is None
    if own:
        conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
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
# Load generation: fastpath bench


def bench_cmd(ctx, server, wl_args, path, duration, verify, extra=()):
    """The `fastpath bench` command line for one run against `server`, one
    thread on the client CPU, JSON on stdout."""
    cmd = ["taskset", "-c", CLIENT_CPU, ctx.fastpath_bin, "bench", "-t", "1", "-q", "--json",
           "-d", f"{duration}s"]
    cmd += list(wl_args) + list(extra)
    if verify == "spec":
        cmd += ["--docroot", ctx.root, "--verify"]
    elif verify == "1m":
        cmd += ["--manifest", ctx.manifest_1m, "--verify"]
    cmd.append(f"http://{HOST}:{server.port}{path}")
    return cmd


def run_bench(ctx, cmd, log_name, duration):
    rc, out, err = ctx.run(cmd, duration + 60, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    with open(os.path.join(ctx.work, "logs", log_name), "w") as f:
        f.write(shlex.join(cmd) + "\n" + out + err)
    res = bench_report(rc, out, err)
    res["cmd"] = shlex.join(cmd)
    return res


def bench_report(rc, out, err):
    """The JSON report of a `fastpath bench --json` run that ended with status `rc`."""
    if rc != 0:
        raise BenchError(f"fastpath bench failed (status {rc}): {(err or out).strip()[-2000:]}")
    try:
        return json.loads(out)
    except ValueError as e:
        raise BenchError(f"fastpath bench printed no JSON ({e}): {out[:500]!r}")


def display_cmd(ctx, cmd):
    """A command line as the tables show it: paths of the run's work directory
    and binary replaced by short names."""
    s = shlex.join(cmd)
    s = s.replace(ctx.fastpath_bin, "fastpath").replace(ctx.manifest_1m, "WORK/1m.manifest")
    return s.replace(ctx.root, "WORK/www").replace(ctx.work, "WORK")


def measure(ctx, server, wl):
    """One workload: warm-up run (not counted), then the measured run with the
    server's CPU time read around it."""
    if ctx.warmup > 0:
        cmd = bench_cmd(ctx, server, wl["args"], wl["path"], ctx.warmup, wl["verify"],
                        ["--timeout", "10s"])
        run_bench(ctx, cmd, f"{server.name}.{wl['key']}.warmup.json", ctx.warmup)
        time.sleep(0.5)
    cmd = bench_cmd(ctx, server, wl["args"], wl["path"], ctx.duration, wl["verify"],
                    ["--timeout", "10s"])
    cpu0 = tree_cpu_seconds(server.pid)
    res = run_bench(ctx, cmd, f"{server.name}.{wl['key']}.run.json", ctx.duration)
    cpu1 = tree_cpu_seconds(server.pid)
    return summarise(res, cpu1 - cpu0)


def summarise(res, cpu_s):
    secs = res["duration_s"] or 0.0
    n = res["replies"]
    lat = res["latency_us"]
    return {
        "rps": res["rps"],
        "mbps": res["bytes_per_s"] / 1e6,
        "p50": lat["p50"], "p90": lat["p90"], "p99": lat["p99"], "p999": lat["p999"],
        "max": lat["max"],
        "replies": n,
        "cpu_s": cpu_s,
        "cpu_us_per_req": cpu_s * 1e6 / n if n else None,
        "cpu_util": cpu_s / secs if secs else 0.0,
        "client_util": res["cpu_s"] / secs if secs else 0.0,
        "client_us_per_req": res["cpu_s"] * 1e6 / n if n else None,
        "problems": check_bench(res),
        "cmd": res["cmd"],
        "raw": res,
    }


def error_classes(res):
    """[(class, count)] of the nonzero error classes of a fastpath bench report."""
    return [(k, v) for k, v in res["errors"].items() if k != "total" and v]


def check_bench(res):
    """Everything that says the server did not serve what was asked for: any
    failed request (refused, reset, timeout, short or malformed reply, a body
    whose length or CRC-32 is not the file's), any status other than 2xx."""
    problems = []
    if res["replies"] == 0:
        problems.append("no reply")
    for k, v in error_classes(res):
        problems.append(f"{v} {k.replace('_', '-')}")
    for k, v in res["status"].items():
        if k != "2xx" and v:
            problems.append(f"{v} × {k} status")
    return problems


# --------------------------------------------------------------------------
# Load generation: wrk (cross-check of workload 1)


def run_wrk(ctx, server, duration, tag):
    w = WRK_CHECK
    script = os.path.join(WRK_DIR, w["script"])
    cmd = ["taskset", "-c", CLIENT_CPU, ctx.wrk, "-t1", f"-c{w['conns']}", f"-d{duration}s",
           "--latency", "--timeout", "10s", "-s", script, f"http://{HOST}:{server.port}{w['path']}"]
    rc, out, _ = ctx.run(cmd, duration + 60, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    with open(os.path.join(ctx.work, "logs", f"{server.name}.w1.{tag}.wrk.txt"), "w") as f:
        f.write(shlex.join(cmd) + "\n" + out)
    m = re.search(r"^BENCH_RESULT (\{.*\})$", out, re.M)
    if rc != 0 or not m:
        raise BenchError(f"wrk failed against {server.name} (status {rc}):\n{out}")
    res = json.loads(m.group(1))
    res["cmd"] = shlex.join(cmd)
    return res


def measure_wrk(ctx, server):
    cpu0 = tree_cpu_seconds(server.pid)
    res = run_wrk(ctx, server, ctx.duration, "run")
    cpu1 = tree_cpu_seconds(server.pid)
    secs = res["duration_us"] / 1e6
    n = res["requests"]
    return {
        "rps": n / secs if secs else 0.0,
        "p50": res["p50"], "p99": res["p99"],
        "cpu_us_per_req": (cpu1 - cpu0) * 1e6 / n if n else None,
        "cpu_util": (cpu1 - cpu0) / secs if secs else 0.0,
        "problems": check_wrk(res),
        "cmd": res["cmd"],
    }


def check_wrk(res):
    """wrk's error counters, and bytes per response against the file size."""
    problems = []
    n = res["requests"]
    if n == 0:
        return ["no request completed"]
    if res["status"]:
        problems.append(f"{res['status']} non-2xx/3xx")
    for k in ("connect", "read", "write", "timeout"):
        if res[k]:
            problems.append(f"{res[k]} socket {k} errors")
    body = WRK_CHECK["body"]
    per_req = res["bytes"] / n
    # Headers take up to 1 KiB; a response cut off by the end of the run adds
    # bytes that no completed request accounts for.
    hi = body + 1024 + WRK_CHECK["conns"] * body / n
    if not body <= per_req <= hi:
        problems.append(f"{per_req:.0f} bytes per response, expected {body} to {hi:.0f}")
    return problems


# --------------------------------------------------------------------------
# System calls per request


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
        cmd = bench_cmd(ctx, server, wl["args"], wl["path"], ctx.strace_duration, wl["verify"],
                        ["--timeout", "10s"])
        res = run_bench(ctx, cmd, f"{server.name}.strace.json", ctx.strace_duration)
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
    # Requests the server answered while traced: replies, plus those still in
    # flight when the window closed (the server did their work too).
    n = res["replies"] + res["in_flight_at_end"]
    top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
    return {"requests": n, "calls": total, "per_req": total / n if n else None,
            "top": [(k, v / n if n else 0) for k, v in top],
            "problems": check_bench(res)}


def tracer_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------
# Overload: connection-rate sweep


def tcp_counters():
    """Kernel TCP counters (TcpExt of /proc/net/netstat) that tell a listener
    in trouble: accept-queue overflows and SYN cookies sent. They count for the
    whole machine; during a step only the server under test takes connections."""
    want = ("ListenOverflows", "ListenDrops", "SyncookiesSent")
    out = dict.fromkeys(want, 0)
    try:
        with open("/proc/net/netstat") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for head, vals in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:") and vals.startswith("TcpExt:"):
            for k, v in zip(head.split()[1:], vals.split()[1:]):
                if k in out:
                    out[k] = int(v)
    return out


# A step where the load generator did not keep its schedule: the median
# connection went out more than this late, or its thread was this busy while
# the replies fell short of the offered rate.
CLIENT_LAG_US = 1000
CLIENT_BUSY = 0.9
# A step where the server's own process tree was this busy.
SERVER_BUSY = 0.85


def overload_run(ctx, server):
    """Opens connections at each offered rate of the sweep whatever the server
    does (one request each, `Connection: close`), with the server's CPU time
    and the kernel's listen-queue counters read around every step; then checks
    that the server still answers."""
    points = []
    for rate in ctx.overload_rates:
        extra = ["--conn-rate", f"{rate:g}", "--calls", "1", "--no-keepalive",
                 "--timeout", ctx.overload_timeout]
        cmd = bench_cmd(ctx, server, [], FILE_1K, ctx.overload_duration, "spec", extra)
        cpu0, tcp0, t0 = tree_cpu_seconds(server.pid), tcp_counters(), time.monotonic()
        res = run_bench(ctx, cmd, f"{server.name}.overload.{rate:g}.json",
                        ctx.overload_duration)
        cpu1, tcp1, t1 = tree_cpu_seconds(server.pid), tcp_counters(), time.monotonic()
        secs = res["duration_s"] or 1e-9
        errs = res["errors"]
        non2xx = sum(v for k, v in res["status"].items() if k != "2xx")
        lag = res["send_lag_us"]
        client_util = res["cpu_s"] / secs
        pt = {
            "offered": rate,
            "sent": res["conns_opened"] / secs,
            "goodput": res["rps"],
            "replies": res["replies"],
            "errors": errs["total"] + non2xx,
            "errors_per_s": (errs["total"] + non2xx) / secs,
            "classes": error_classes(res),
            "non2xx": non2xx,
            "missed": res["missed"],
            "in_flight": res["in_flight_at_end"],
            "connect_p50": res["connect_us"]["p50"] if res["connect_us"]["count"] else None,
            "connect_p99": res["connect_us"]["p99"] if res["connect_us"]["count"] else None,
            "p50_us": res["latency_us"]["p50"] if res["latency_us"]["count"] else None,
            "p99_us": res["latency_us"]["p99"] if res["latency_us"]["count"] else None,
            "lag_p50": lag["p50"] if lag["count"] else None,
            "server_util": (cpu1 - cpu0) / secs,
            "client_util": client_util,
            # Late, or saturated and short of the offered rate (a busy client
            # that still kept the schedule and got every reply is fine).
            "client_lagged": bool((lag["count"] and lag["p50"] > CLIENT_LAG_US)
                                  or (client_util >= CLIENT_BUSY
                                      and res["rps"] < 0.95 * rate)),
            "listen_overflows": tcp1["ListenOverflows"] - tcp0["ListenOverflows"],
            "syncookies": tcp1["SyncookiesSent"] - tcp0["SyncookiesSent"],
            "wall_s": t1 - t0,
            "cmd": res["cmd"],
        }
        # The server was saturated when its core was busy or its accept queue
        # overflowed. A late client makes the step say nothing certain about
        # the server: with the server not saturated the client core (with the
        # loopback TCP work charged to it) was the limit (†); with both
        # saturated, the two cannot be told apart (‡).
        pt["server_saturated"] = pt["server_util"] >= SERVER_BUSY or pt["listen_overflows"] > 0
        pt["client_bound"] = pt["client_lagged"]
        pt["mark"] = ("‡" if pt["server_saturated"] else "†") if pt["client_lagged"] else ""
        points.append(pt)
        log(f"{server.name}: overload {rate:g} conn/s: {pt['goodput']:.0f} replies/s, "
            f"{pt['errors']} errors ({fmt_errors(pt) or 'none'}), "
            f"connect p99 {fmt_lat(pt['connect_p99'])}, p99 {fmt_lat(pt['p99_us'])}, "
            f"{pt['listen_overflows']} listen overflows, "
            f"server CPU {pt['server_util'] * 100:.0f}%, client CPU {client_util * 100:.0f}%, "
            f"send lag p50 {fmt_lat(pt['lag_p50'])}, {pt['wall_s']:.1f} s"
            + (f" ({pt['mark']} the load generator fell behind)" if pt["mark"] else ""))
        if server.proc.poll() is not None:
            return {"points": points,
                    "problems": [f"the server exited during the {rate:g} conn/s step "
                                 f"(status {server.proc.returncode})"]}
        # Higher rates would only measure the load generator (and take long:
        # a late client opens its backlog of connections in bursts).
        if pt["client_lagged"]:
            log(f"{server.name}: the load generator could not keep up at {rate:g} conn/s; "
                f"higher rates not run")
            break
        if pt["wall_s"] > 4 * ctx.overload_duration + 2:
            log(f"{server.name}: the {rate:g} conn/s step took {pt['wall_s']:.0f} s; "
                f"higher rates not run")
            pt["cut"] = True
            break
        time.sleep(ctx.overload_pause)
    # Recovery: the server must answer every file correctly again within 10 s.
    recovered_s, problem = recovery(lambda: verify_content(server))
    if problem:
        return {"points": points, "problems": [problem]}
    return {"points": points, "problems": [], "recovered_s": recovered_s}


def recovery(check, limit=10):
    """Calls check() until it passes (it raises BenchError, OSError or an HTTP
    error while the server does not answer correctly), at most `limit` s after
    a sweep: (seconds it took, None), or (None, the problem)."""
    start = time.monotonic()
    while True:
        try:
            check()
            return time.monotonic() - start, None
        except (BenchError, OSError, http.client.HTTPException) as e:
            if time.monotonic() - start > limit:
                return None, f"did not answer correctly {limit} s after the sweep: {e}"
            time.sleep(0.5)


def fmt_errors(pt):
    parts = [f"{k.replace('_', '-')} {v:,}" for k, v in pt["classes"]]
    if pt["non2xx"]:
        parts.append(f"non-2xx {pt['non2xx']:,}")
    return ", ".join(parts)


def idle_run(ctx, server):
    """Workload 5: memory per idle keep-alive connection."""
    time.sleep(0.5)
    before = tree_rss_bytes(server.pid)

    def measure():
        time.sleep(1.0)
        return tree_rss_bytes(server.pid)

    after, ready, held, problems = hold_idle(ctx, server, IDLE_CONNECTIONS, measure)
    return {"before": before, "after": after, "held": held, "open_seconds": ready["seconds"],
            "per_conn": (after - before) / held if held else None, "problems": problems}


def hold_idle(ctx, server, count, measure, extra=()):
    """Opens `count` keep-alive connections to the server with
    bench/idle_conns.py (each makes one request and stays open), calls
    measure() while they are held, then closes them. Returns (what measure()
    returned, the client's READY report, connections still open at the check,
    problems)."""
    cmd = ["taskset", "-c", CLIENT_CPU, sys.executable, os.path.join(BENCH_DIR, "idle_conns.py"),
           "--port", str(server.port), "--count", str(count), "--path", FILE_1K,
           "--in-flight", "64"] + list(extra)
    measured, ready, held = hold_with_client(cmd, measure, ctx.spawn, ctx.reap)
    problems = [f"{v} × {k}" for k, v in ready["failures"].items()]
    if held != count:
        problems.append(f"{held} of {count} connections still open at the check")
    return measured, ready, held, problems


def hold_with_client(cmd, measure, spawn=subprocess.Popen, reap=lambda p: None):
    """Runs bench/idle_conns.py as `cmd` (its `--count` connections open, each after one
    request), calls measure() once they are held, asks how many are still open, then
    closes them: (what measure() returned, the client's READY report, connections open at
    the check). `spawn` starts the client and `reap` forgets it (a run's Processes)."""
    p = spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        line = p.stdout.readline()
        if not line.startswith("READY "):
            raise BenchError(f"idle connection client failed: {line!r}")
        ready = json.loads(line[6:])
        if "error" in ready:
            raise BenchError(f"idle connection client: {ready['error']}")
        measured = measure()
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
            p.wait()
        reap(p)
    return measured, ready, checked.get("alive", 0)


# --------------------------------------------------------------------------
# Orchestration


class Processes:
    """The servers and clients a run has started, so that every one of them is
    stopped at the end, whatever happens. With `pgid_file`, the process groups
    of the running servers are kept in that file too (for bench/run.sh)."""

    def __init__(self, pgid_file=None):
        self.pgid_file = pgid_file
        self.running = {}
        self.clients = set()

    def register(self, server):
        self.running[server.name] = server
        self._write_pgids()

    def unregister(self, server):
        self.running.pop(server.name, None)
        self._write_pgids()

    def _write_pgids(self):
        if not self.pgid_file:
            return
        with open(self.pgid_file, "w") as f:
            for s in self.running.values():
                f.write(f"{s.proc.pid}\n")

    def spawn(self, cmd, **kw):
        p = subprocess.Popen(cmd, **kw)
        self.clients.add(p)
        return p

    def reap(self, p):
        self.clients.discard(p)

    def run(self, cmd, timeout, **kw):
        """Runs a client to its end (killed after `timeout` s): (status, stdout, stderr)."""
        p = self.spawn(cmd, **kw)
        try:
            out, err = p.communicate(timeout=timeout)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            self.reap(p)
        return p.returncode, out, err

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


class Context(Processes):
    def __init__(self, args):
        self.args = args
        self.port_base = args.port_base
        self.model = args.model
        self.fastpath_bin = args.fastpath_bin
        self.baseline_bin = args.baseline_bin
        self.duration = args.duration
        self.warmup = args.warmup
        self.strace_duration = args.strace_duration
        self.overload_rates = args.overload_rates
        self.overload_duration = args.overload_duration
        self.overload_timeout = args.overload_timeout
        self.overload_pause = args.overload_pause
        # Rest between runs (sockets in TIME_WAIT, server back to idle).
        self.settle = 0.5 if args.quick else 1.0
        self.own_work = args.work is None
        self.work = args.work or tempfile.mkdtemp(prefix="fastpath-bench.")
        os.chmod(self.work, 0o755)
        os.makedirs(os.path.join(self.work, "logs"), exist_ok=True)
        self.root = os.path.join(self.work, "www")
        self.manifest_1m = os.path.join(self.work, "1m.manifest")
        super().__init__(os.path.join(self.work, "pgids"))
        self.contents = {}
        self.wrk = None
        self.strace = None
        self.commit = "unknown"

    def cleanup(self):
        super().cleanup()
        if self.own_work and not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)


def git_commit():
    """The short hash of the checked-out commit, or "unknown"."""
    try:
        p = subprocess.run(["git", "-C", REPO_DIR, "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "unknown"


# What a failed measurement raises: the server is marked failed, the run goes on.
RUN_ERRORS = (BenchError, OSError, subprocess.SubprocessError, ValueError,
              http.client.HTTPException)


def failed(r, name, e):
    r["failed"] = str(e)
    log(f"ERROR {name}: {e}")


def prepare_server(ctx, name, r, server_class=Server):
    """The server `name` with its configuration written and tested and its
    version in r["version"]; None (and r["failed"]) if that failed."""
    try:
        server = server_class(name, ctx)
        r["version"] = server.version()
        server.check_config()
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        failed(r, name, e)
        return None
    return server


def run_server(ctx, name, results):
    """Every measurement of one server. Three server instances: workloads 1-4,
    the wrk cross-check and strace; then workload 5 on a fresh start; then the
    overload sweep on a fresh start (so that neither inherits the other's
    state, and a server that falls over under overload spoils nothing else)."""
    r = results.setdefault(name, {"workloads": {}, "problems": []})
    server = prepare_server(ctx, name, r)
    if server is None:
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
                f"{res['mbps']:.1f} MB/s, p50 {fmt_lat(res['p50'])}, p99 {fmt_lat(res['p99'])}, "
                f"CPU {fmt_num(res['cpu_us_per_req'])} µs/req ({res['cpu_util'] * 100:.0f}% busy, "
                f"client {res['client_util'] * 100:.0f}%)"
                + (f"; PROBLEMS: {'; '.join(res['problems'])}" if res["problems"] else ""))
            time.sleep(ctx.settle)
        if ctx.wrk:
            log(f"{name}: workload 1 with wrk (cross-check)")
            r["wrk"] = measure_wrk(ctx, server)
            w = r["wrk"]
            log(f"{name}: wrk: {w['rps']:.0f} req/s, p99 {fmt_lat(w['p99'])}, "
                f"CPU {fmt_num(w['cpu_us_per_req'])} µs/req"
                + (f"; PROBLEMS: {'; '.join(w['problems'])}" if w["problems"] else ""))
            time.sleep(ctx.settle)
        if name in STRACE_SERVERS and ctx.strace:
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

        if ctx.overload_rates:
            log(f"{name}: restarting for the overload sweep "
                f"({', '.join(f'{x:g}' for x in ctx.overload_rates)} conn/s, "
                f"{ctx.overload_duration} s each)")
            server.start()
            verify_content(server)
            r["overload"] = overload_run(ctx, server)
            for p in r["overload"]["problems"]:
                log(f"ERROR {name}: overload: {p}")
            server.stop()
    except RUN_ERRORS as e:
        failed(r, name, e)
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




def fmt_rate(v):
    return "–" if v is None else f"{v:,.0f}"


def workload_table(wl, order, results):
    ref = results.get("nginx", {}).get("workloads", {}).get(wl["key"])
    rate = wl["rate"]
    lines = [f"| server | {rate} | {rate} ÷ nginx | MB/s | p50 | p99 | p99.9 | CPU µs/req "
             f"| CPU ÷ nginx | server CPU busy | client CPU busy | errors |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    for name in order:
        r = results.get(name, {})
        res = r.get("workloads", {}).get(wl["key"])
        label = SERVER_LABEL[name]
        if res is None:
            why = r.get("failed", "not run").splitlines()[0]
            lines.append(f"| {label} | did not run: {why} | | | | | | | | | | |")
            continue
        errs = "**" + "; ".join(res["problems"]) + "**" if res["problems"] else "none"
        lines.append(
            f"| {label} | {fmt_rate(res['rps'])} | {ratio(res['rps'], ref and ref['rps'])} "
            f"| {fmt_num(res['mbps'])} | {fmt_lat(res['p50'])} | {fmt_lat(res['p99'])} "
            f"| {fmt_lat(res['p999'])} | {fmt_num(res['cpu_us_per_req'])} "
            f"| {ratio(res['cpu_us_per_req'], ref and ref['cpu_us_per_req'])} "
            f"| {res['cpu_util'] * 100:.0f}% | {res['client_util'] * 100:.0f}% | {errs} |")
    return lines


def wrk_table(order, results):
    lines = ["| server | fastpath bench req/s | wrk req/s | fastpath bench ÷ wrk "
             "| p99 (fastpath bench) | p99 (wrk) | CPU µs/req (fastpath bench) "
             "| CPU µs/req (wrk) | errors (wrk) |",
             "|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    any_row = False
    for name in order:
        r = results.get(name, {})
        b = r.get("workloads", {}).get("w1")
        w = r.get("wrk")
        if b is None and w is None:
            continue
        any_row = True
        errs = ("**" + "; ".join(w["problems"]) + "**" if w and w["problems"]
                else ("none" if w else "not run"))
        lines.append(
            f"| {SERVER_LABEL[name]} | {fmt_rate(b and b['rps'])} | {fmt_rate(w and w['rps'])} "
            f"| {ratio(b and b['rps'], w and w['rps'])} | {fmt_lat(b and b['p99'])} "
            f"| {fmt_lat(w and w['p99'])} | {fmt_num(b and b['cpu_us_per_req'])} "
            f"| {fmt_num(w and w['cpu_us_per_req'])} | {errs} |")
    return lines if any_row else []


def wrk_line(results):
    b = results.get("fastpath", {}).get("workloads", {}).get("w1")
    w = results.get("fastpath", {}).get("wrk")
    if not b or not w:
        return None
    return (f"fastpath bench vs wrk on one client core: {b['rps']:,.0f} req/s vs "
            f"{w['rps']:,.0f} req/s ({ratio(b['rps'], w['rps'])}), against fastpath "
            f"(workload 1; client CPU busy {b['client_util'] * 100:.0f}% with fastpath bench).")


def overload_verdict(ov):
    """The shape of a server's sweep, from the steps where the load generator
    kept its schedule: (peak goodput, offered rate at the peak, highest such
    offered rate, goodput there, its share of the peak, a word)."""
    pts = [p for p in ov["points"] if not p["client_lagged"]]
    if not pts:
        return None
    peak = max(pts, key=lambda p: p["goodput"])
    last = pts[-1]
    share = last["goodput"] / peak["goodput"] if peak["goodput"] else 0.0
    if last is peak:
        # Nothing measured past the peak: the client's limit came first.
        word = "not overloaded" if last["goodput"] >= 0.95 * last["offered"] else "at capacity"
    elif share >= 0.9:
        word = "holds"
    elif share >= 0.5:
        word = "degrades"
    else:
        word = "**collapses**"
    return peak["goodput"], peak["offered"], last["offered"], last["goodput"], share, word


def overload_summary(ctx, order, results):
    rates = ctx.overload_rates
    head = "| server | " + " | ".join(f"{r:,.0f}" for r in rates) + \
        " | peak goodput | at the highest rate the client kept up with | recovered |"
    lines = [head, "|---|" + "--:|" * len(rates) + "--:|---|---|"]
    for name in order:
        r = results.get(name, {})
        ov = r.get("overload")
        if not ov:
            why = r.get("failed", "not run").splitlines()[0]
            lines.append(f"| {SERVER_LABEL[name]} | did not run: {why} |"
                         + " |" * (len(rates) + 2))
            continue
        by_rate = {p["offered"]: p for p in ov["points"]}
        cells = []
        for rate in rates:
            p = by_rate.get(rate)
            if p is None:
                cells.append("–")
                continue
            cell = f"{p['goodput']:,.0f}"
            if p["errors"]:
                cell += f" ({p['errors']:,} err)"
            if p["mark"]:
                cell += " " + p["mark"]
            cells.append(cell)
        v = overload_verdict(ov)
        if v:
            peak = f"{v[0]:,.0f} at {v[1]:,.0f}"
            last = (f"{v[3]:,.0f} at {v[2]:,.0f}: {v[5]}" if v[2] == v[1]
                    else f"{v[3]:,.0f} at {v[2]:,.0f} ({v[4] * 100:.0f}% of peak): {v[5]}")
        else:
            peak, last = "–", "client-bound at every step"
        rec = ("**" + "; ".join(ov["problems"]) + "**" if ov["problems"]
               else f"yes, {ov.get('recovered_s', 0):.1f} s")
        lines.append(f"| {SERVER_LABEL[name]} | " + " | ".join(cells)
                     + f" | {peak} | {last} | {rec} |")
    return lines


def overload_detail(name, ov):
    lines = [f"**{SERVER_LABEL[name]}**", "",
             "| offered conn/s | replies/s (goodput) | connect p50 | connect p99 "
             "| reply p50 | reply p99 | errors by class | listen overflows | SYN cookies "
             "| server CPU | client CPU | send lag p50 |",
             "|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|"]
    for p in ov["points"]:
        errs = fmt_errors(p) or "none"
        if p["in_flight"]:
            errs += f"; {p['in_flight']:,} unanswered at the end of the step"
        if p["missed"]:
            errs += f"; {p['missed']:,} due but not opened"
        lines.append(
            f"| {p['offered']:,.0f}{' ' + p['mark'] if p['mark'] else ''} | {p['goodput']:,.0f} "
            f"| {fmt_lat(p['connect_p50'])} | {fmt_lat(p['connect_p99'])} "
            f"| {fmt_lat(p['p50_us'])} | {fmt_lat(p['p99_us'])} | {errs} "
            f"| {p['listen_overflows']:,} | {p['syncookies']:,} "
            f"| {p['server_util'] * 100:.0f}% | {p['client_util'] * 100:.0f}% "
            f"| {fmt_lat(p['lag_p50'])} |")
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
    lines = ["| server | RSS before | RSS with idle connections | connections held "
             "| bytes per idle connection | ÷ nginx | errors |",
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


def cpu_times():
    """(monotonic seconds, {cpu number: idle seconds}) from /proc/stat. Only the idle
    time is used: with a tickless kernel it is measured exactly, while the busy fields
    are sampled by a tick that does not fire while a core sleeps, so short bursts of
    work between idle periods go uncounted there."""
    out = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu") and line[3].isdigit():
                    parts = line.split()
                    out[int(parts[0][3:])] = (int(parts[4]) + int(parts[5])) / CLK_TCK
    except (OSError, ValueError, IndexError):
        pass
    return time.monotonic(), out


def cpu_busy(t0, t1, cpu):
    """Fraction of the wall time CPU `cpu` was not idle (any task, interrupts) between
    two readings of cpu_times()."""
    (w0, a), (w1, b) = t0, t1
    if cpu not in a or cpu not in b or w1 <= w0:
        return None
    return min(1.0, max(0.0, 1.0 - (b[cpu] - a[cpu]) / (w1 - w0)))


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return [0.0, 0.0, 0.0]


def chart_link(ctx, fname, alt):
    rel = os.path.relpath(os.path.join(ctx.results_dir, fname), os.path.dirname(
        os.path.abspath(ctx.args.output)))
    return f"![{alt}]({rel})"


def write_charts(ctx, order, results, stamp):
    """The SVG charts: latency percentiles per workload, and the overload sweep."""
    os.makedirs(ctx.results_dir, exist_ok=True)
    written = []
    for wl in WORKLOADS:
        series = []
        for name in order:
            res = results.get(name, {}).get("workloads", {}).get(wl["key"])
            if res:
                series.append((SERVER_LABEL[name], res))
        if not series:
            continue
        svg = charts.latency_chart(
            f"Workload {wl['num']}: {re.sub('`', '', wl['title'])}",
            f"fastpath bench, closed loop, one client core; latency per request; {stamp}",
            series)
        path = os.path.join(ctx.results_dir, wl["chart"])
        write_file(path, svg)
        written.append(path)
    series = [(SERVER_LABEL[n], results[n]["overload"]["points"]) for n in order
              if results.get(n, {}).get("overload", {}).get("points")]
    if series:
        svg = charts.overload_chart(
            "Overload: connection-rate sweep, 1 KiB file, one request per connection",
            f"fastpath bench --conn-rate, {ctx.overload_duration} s per step, timeout "
            f"{ctx.overload_timeout}, one client core; hollow: load generator behind schedule; "
            f"{stamp}",
            series, max(ctx.overload_rates))
        path = os.path.join(ctx.results_dir, OVERLOAD_CHART)
        write_file(path, svg)
        written.append(path)
    return written


def write_file(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def report(ctx, order, results, started, load_start, load_end, with_charts):
    args = ctx.args
    m = machine_info()
    lines = []
    mode = "quick" if args.quick else "full"
    lines.append(f"Run of {started.strftime('%Y-%m-%d %H:%M UTC')}, {mode} mode: "
                 f"{ctx.duration} s per workload"
                 + (f" after {ctx.warmup} s of warm-up" if ctx.warmup else ", no warm-up")
                 + f"; strace run {ctx.strace_duration} s"
                 + (f"; overload steps of {ctx.overload_duration} s" if ctx.overload_rates
                    else "") + ".")
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
    # Judged by the second before the run only: the load average still counts the work of a
    # suite that ran just before (and, at the end, this run's own).
    busy = [v for v in ctx.idle_check if v is not None]
    if busy:
        lines.append(f"- In the second before the run CPU {SERVER_CPU} was "
                     f"{busy[0]:.0%} and CPU {CLIENT_CPU} {busy[-1]:.0%} busy.")
    if any(v > 0.1 for v in busy):
        lines.append("- **The machine was not idle when the run started** (other jobs were "
                     "running on it), so these figures are noisy: compare them with care and "
                     "rerun on a quiet machine before drawing conclusions.")
    fp_version = first_line([ctx.fastpath_bin, "--version"])
    lines.append(f"- Load generator: `fastpath bench` ({fp_version}, tree at {ctx.commit}), "
                 f"one thread; cross-check: "
                 f"{first_line([ctx.wrk, '--version']).split(' Copyright')[0] if ctx.wrk else 'none'}"
                 f", one thread")
    for name in order:
        v = results.get(name, {}).get("version", "unknown")
        lines.append(f"- {SERVER_LABEL[name]}: {v}")
    lines.append("")
    for wl in WORKLOADS:
        lines.append(f"### Workload {wl['num']}: {wl['title']}")
        lines.append("")
        cmd = next((r["workloads"][wl["key"]]["cmd"] for r in results.values()
                    if wl["key"] in r.get("workloads", {})), None)
        if cmd:
            lines.append(f"`{display_cmd(ctx, shlex.split(cmd))}`")
            lines.append("")
        lines += workload_table(wl, order, results)
        lines.append("")
        if with_charts and any(wl["key"] in results.get(n, {}).get("workloads", {})
                               for n in order):
            lines.append(chart_link(ctx, wl["chart"], f"Workload {wl['num']} latency"))
            lines.append("")
    wt = wrk_table(order, results)
    if wt:
        lines.append("### Cross-check: workload 1 with wrk")
        lines.append("")
        wl_line = wrk_line(results)
        if wl_line:
            lines.append(wl_line)
            lines.append("")
        cmd = next((r["wrk"]["cmd"] for r in results.values() if r.get("wrk")), None)
        if cmd:
            lines.append(f"`{display_cmd(ctx, shlex.split(cmd)).replace(WRK_DIR, 'bench/wrk')}`")
            lines.append("")
        lines += wt
        lines.append("")
    if any(results.get(n, {}).get("overload") for n in order):
        rates = ctx.overload_rates
        lines.append(f"### Overload: connection-rate sweep ({rates[0]:,.0f} to "
                     f"{rates[-1]:,.0f} conn/s)")
        lines.append("")
        cmd = next((r["overload"]["points"][-1]["cmd"] for r in results.values()
                    if r.get("overload", {}).get("points")), None)
        if cmd:
            lines.append(f"`{display_cmd(ctx, shlex.split(cmd))}` (one run per offered rate)")
            lines.append("")
        lines.append("Goodput (verified replies/s) per offered rate (conn/s), with the "
                     "failed requests of the step. At a step marked † or ‡ the load generator "
                     "did not keep its schedule (the median connection went out more than "
                     "1 ms late, or its core was saturated and the replies fell short of the "
                     "offered rate): † while the server was not saturated (its CPU under 85% "
                     "and no accept-queue overflow), so the limit was the client core and the "
                     "loopback TCP work charged to it; ‡ while the server was saturated too, "
                     "so the two cannot be told apart. The verdict leaves those steps out, "
                     "and the sweep stops at the first of them; – is a rate not run.")
        lines.append("")
        lines += overload_summary(ctx, order, results)
        lines.append("")
        if with_charts:
            lines.append(chart_link(ctx, OVERLOAD_CHART, "Overload sweep"))
            lines.append("")
        for name in order:
            ov = results.get(name, {}).get("overload")
            if ov and ov["points"]:
                lines += overload_detail(name, ov)
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


def write_benchmarks_md(path, block, begin=MARK_BEGIN, end=MARK_END, heading="## Results"):
    """Replaces the text between the markers `begin` and `end` of the Markdown
    file with `block` (which ends with a newline), or appends the block under
    `heading` if the file has no such markers."""
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
    else:
        text = "# Benchmarks\n\n"
    new_block = f"{begin}\n{block}{end}"
    if begin in text and end in text:
        pre = text[:text.index(begin)]
        post = text[text.index(end) + len(end):]
        text = pre + new_block + post
    else:
        text = text.rstrip() + f"\n\n{heading}\n\n" + new_block + "\n"
    write_file(path, text)




# --------------------------------------------------------------------------


def parse_sweep(text):
    try:
        lo, hi, step = (float(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad sweep {text!r}: expected FROM:TO:STEP")
    if not (lo > 0 and hi >= lo and step > 0):
        raise argparse.ArgumentTypeError(f"bad sweep {text!r}: expected FROM:TO:STEP")
    n = int((hi - lo) / step + 1e-9) + 1
    if n > 100:
        raise argparse.ArgumentTypeError(f"sweep {text!r} has {n} steps; at most 100")
    return [lo + step * i for i in range(n)]


def fill_defaults(args, defaults):
    """Sets every option of `defaults` ({name: (quick value, full value)}) that
    was not given on the command line."""
    for name, (quick, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)


def parse_args(argv):
    ap = argparse.ArgumentParser(description="fastpath comparison suite")
    ap.add_argument("--quick", action="store_true",
                    help="2 s per workload, no warm-up, a 5-step overload sweep of 1 s steps")
    ap.add_argument("--servers", default=",".join(ALL_SERVERS),
                    help=f"comma-separated subset of {','.join(ALL_SERVERS)}")
    ap.add_argument("--model", default=None, help="fastpath concurrency model (--model)")
    ap.add_argument("--duration", type=int, default=None, help="seconds per workload")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up seconds per workload")
    ap.add_argument("--strace-duration", type=int, default=None)
    ap.add_argument("--no-strace", action="store_true", help="skip the system call count")
    ap.add_argument("--no-wrk", action="store_true", help="skip the wrk cross-check")
    ap.add_argument("--overload", type=parse_sweep, default=None, metavar="FROM:TO:STEP",
                    help="offered connection rates of the overload sweep "
                         "(default 2000:30000:4000, quick 2000:30000:7000)")
    ap.add_argument("--overload-duration", type=int, default=None,
                    help="seconds per overload step (default 2, quick 1)")
    ap.add_argument("--overload-timeout", default="500ms",
                    help="fastpath bench --timeout in the overload sweep (default 500ms)")
    ap.add_argument("--overload-pause", type=float, default=1.0,
                    help="seconds of rest between overload steps (default 1)")
    ap.add_argument("--no-overload", action="store_true", help="skip the overload sweep")
    ap.add_argument("--baseline-bin", default=None, metavar="PATH",
                    help="also run this fastpath binary, as \"fastpath (base)\", right after "
                         "fastpath: a change against the code it changes, in one run "
                         "(use with --no-write)")
    ap.add_argument("--port-base", type=int, default=18180,
                    help="servers listen on 127.0.0.1:PORT_BASE+1..5")
    ap.add_argument("--fastpath-bin", default=os.environ.get("FASTPATH_BIN"))
    ap.add_argument("--work", default=None, help="work directory (made by run.sh)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    ap.add_argument("--output", default=os.path.join(REPO_DIR, "BENCHMARKS.md"),
                    help="Markdown file whose bench:begin/end block is replaced")
    ap.add_argument("--results-dir", default=RESULTS_DIR,
                    help="where the SVG charts go (default bench/results)")
    ap.add_argument("--no-write", action="store_true",
                    help="only print the tables (no BENCHMARKS.md, no charts)")
    ap.add_argument("--json", default=None, help="also write the raw results here")
    ap.add_argument("--command", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    fill_defaults(args, {"duration": (2, 10), "warmup": (0, 2), "strace_duration": (1, 3),
                         "overload_duration": (1, 2)})
    if args.overload is None:
        args.overload = parse_sweep("2000:30000:7000" if args.quick else "2000:30000:4000")
    args.overload_rates = [] if args.no_overload else args.overload
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    bad = [s for s in servers if s not in ALL_SERVERS]
    if bad or not servers:
        ap.error(f"unknown server(s) {bad}; choose from {','.join(ALL_SERVERS)}")
    args.server_list = [s for s in ALL_SERVERS if s in servers]
    if args.baseline_bin:
        args.baseline_bin = os.path.abspath(args.baseline_bin)
        args.server_list.insert(1 if "fastpath" in servers else 0, BASELINE)
    if not args.fastpath_bin:
        args.fastpath_bin = os.path.join(REPO_DIR, "target", "release", "fastpath")
    args.fastpath_bin = os.path.abspath(args.fastpath_bin)
    return args


def main(argv):
    args = parse_args(argv)
    ctx = Context(args)
    ctx.results_dir = os.path.abspath(args.results_dir)
    ctx.command = args.command or shlex.join(["bench/bench.py"] + argv)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    atexit.register(ctx.cleanup)

    limit = raise_nofile()
    if limit < IDLE_CONNECTIONS + 1000:
        log(f"warning: RLIMIT_NOFILE is {limit}; workload 5 needs more than {IDLE_CONNECTIONS}")
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("the suite needs two CPUs (server on CPU 0, load generator on CPU 1)")

    if not (os.path.isfile(args.fastpath_bin) and os.access(args.fastpath_bin, os.X_OK)):
        raise SystemExit(f"error: fastpath binary {args.fastpath_bin} not found; it is the "
                         f"load generator (set FASTPATH_BIN, or let bench/run.sh build it)")
    try:
        ctx.wrk = which("wrk") if not args.no_wrk else None
        ctx.strace = which("strace") if not args.no_strace else None
        which("taskset")
    except BenchError as e:
        raise SystemExit(f"error: {e} (bench/run.sh installs it)")
    ctx.commit = git_commit()

    c0 = cpu_times()
    time.sleep(1)
    c1 = cpu_times()
    ctx.idle_check = (cpu_busy(c0, c1, int(SERVER_CPU)), cpu_busy(c0, c1, int(CLIENT_CPU)))
    started = datetime.datetime.now(datetime.timezone.utc)
    load_start = loadavg()
    log(f"work directory {ctx.work}; servers: {', '.join(args.server_list)}; "
        f"{args.duration} s per workload, {args.warmup} s warm-up")
    try:
        ctx.contents = make_docroot(ctx)
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        raise SystemExit(f"error: document root: {e}")
    log(f"document root {ctx.root}: {len(ctx.contents)} files "
        f"(fastpath bench make-docroot, plus {FILE_1M})")

    results = {}
    try:
        for name in args.server_list:
            run_server(ctx, name, results)
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); stopping servers")
        ctx.cleanup()
        return 130
    load_end = loadavg()

    with_charts = not args.no_write
    block = report(ctx, args.server_list, results, started, load_start, load_end, with_charts)
    print()
    print(block)
    if not args.no_write:
        stamp = started.strftime("%Y-%m-%d %H:%M UTC")
        for path in write_charts(ctx, args.server_list, results, stamp):
            log(f"chart written to {os.path.relpath(path, REPO_DIR)}")
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
        for p in (r.get("wrk") or {}).get("problems", []):
            failures.append(f"{name} w1 (wrk): {p}")
        for p in (r.get("idle") or {}).get("problems", []):
            failures.append(f"{name} w5: {p}")
        s = r.get("strace")
        if s and "error" in s:
            failures.append(f"{name} strace: {s['error'].splitlines()[0]}")
        elif s:
            for p in s["problems"]:
                failures.append(f"{name} strace: {p}")
        # Errors under overload are what the sweep measures; a server that
        # dies or does not answer correctly afterwards is a failure.
        for p in (r.get("overload") or {}).get("problems", []):
            failures.append(f"{name} overload: {p}")
    if failures:
        log("ERRORS (the tables above show them too):")
        for f in failures:
            log("  " + f)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
