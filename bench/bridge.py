#!/usr/bin/env python3
"""Bridge benchmark: the bridge hand-over joined in the kernel (a BPF sockmap,
`[handover] kernel_path = "on"`) against the splice bridge and nginx `proxy_pass`, to the same
backend, on keep-alive connections.

One run, on this machine's two cores, laid out as bench/proxy.py does: the backend (nginx
serving 1 KiB and 100 KiB files from memory) and the load generator (`fastpath bench -c 64`)
on CPU 1, the proxies on CPU 0 (one fastpath worker, one nginx worker process), all started
at once and measured in turn, round after round (medians reported). A bridged connection is
the backend's for good after its first request, so the client's later requests go to the
backend through the kernel untouched; nginx parses and relays each one.

CPU is counted over every context: both cores' busy time from /proc/stat's idle time over the
window (kworkers, which finish a sockmap redirect, and softirqs included), per request. The
same load straight to the backend ("direct") is measured too, and each proxy's share is its
total minus direct's. The proxy's own user+sys time is shown alongside.

Usage: bench/bridge.py [--duration 5] [--rounds 3] [--no-write]; FASTPATH_BIN selects the
binary. Results go to stdout and between the bridge markers in BENCHMARKS.md.
"""

import argparse
import datetime
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import cpu_busy, cpu_times, loadavg, root_flag, wait_port  # noqa: E402
from proxy import CLK_TCK, NGINX_BACKEND, NGINX_PROXY, bench, cpu_of_tree  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = {"backend": 18351, "on": 18352, "off": 18353, "nginx": 18354}
SIZES = {"1 KiB": "1k.bin", "100 KiB": "100k.bin"}

FASTPATH_BRIDGE = """workers = 1
root = "{root}"
[log]
access = "off"
[handover]
kernel_path = "{mode}"
[[backend]]
name = "app"
addresses = "127.0.0.1:{backend}"
max_connections = 1024
response_timeout = "300s"
[[route]]
backend = "app"
prefix = "/app/"
method = "bridge"
"""


def kworkers():
    """user+sys seconds of the kernel's worker threads, which finish sockmap redirects."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        if name.startswith("kworker") or name.startswith("ksoftirqd"):
            fields = text.rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def irq_time():
    """irq and softirq seconds of both cores (/proc/stat)."""
    with open("/proc/stat") as f:
        parts = f.readline().split()
    return (int(parts[6]) + int(parts[7])) / CLK_TCK


def accounted(pids):
    """CPU seconds of this benchmark's processes (proxy, backend, load generator: waited
    children), kernel workers and interrupts: what the machine spent on it, without what
    others running at the same time spent."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (sum(cpu_of_tree(p) for p in pids) + children.ru_utime + children.ru_stime
            + kworkers() + irq_time())


def measure(binary, pid, url, duration, backend_pid):
    bench(binary, url, 1)  # warm up
    pids = [p for p in (pid, backend_pid) if p]
    before = cpu_of_tree(pid) if pid else 0.0
    acc0 = accounted(pids)
    kw0 = kworkers()
    t0 = cpu_times()
    result = bench(binary, url, duration)
    t1 = cpu_times()
    acc = accounted(pids) - acc0
    kw = kworkers() - kw0
    own = (cpu_of_tree(pid) - before) if pid else 0.0
    wall = t1[0] - t0[0]
    total = sum((cpu_busy(t0, t1, cpu) or 0.0) * wall for cpu in (0, 1))
    replies = max(result["replies"], 1)
    return {
        "acc_us": acc / replies * 1e6,
        "kworker_us": kw / replies * 1e6,
        "rps": result["rps"],
        "p99_us": result["latency_us"]["p99"],
        "errors": result["errors"]["total"] + sum(
            v for k, v in result["status"].items() if k != "2xx"),
        "own_us": own / replies * 1e6,
        "total_us": total / replies * 1e6,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    binary = os.environ.get("FASTPATH_BIN") or os.path.join(REPO, "target/release/fastpath")
    if not os.environ.get("FASTPATH_BIN"):
        subprocess.run(["cargo", "build", "--release", "-p", "fastpath"], cwd=REPO, check=True)
    for tool in ("nginx", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is required (apt-get install nginx util-linux)")
    work = tempfile.mkdtemp(prefix="fastpath-bridge.")
    os.chmod(work, 0o755)
    root = os.path.join(work, "www")
    os.makedirs(os.path.join(root, "app"))
    for name, size in (("1k.bin", 1024), ("100k.bin", 100 * 1024)):
        with open(os.path.join(root, "app", name), "wb") as f:
            f.write(os.urandom(size))
    procs = []
    load_before = loadavg()
    try:
        def start(cmd, cpu, port):
            p = subprocess.Popen(["taskset", "-c", str(cpu)] + cmd,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            procs.append(p)
            wait_port(port)
            return p

        def write(name, text):
            path = os.path.join(work, name)
            with open(path, "w") as f:
                f.write(text)
            return path

        backend = start(["nginx", "-c", write("backend.conf", NGINX_BACKEND.format(
            work=work, port=PORTS["backend"], root=root))], 1, PORTS["backend"])
        targets = {"direct (no proxy)": (None, PORTS["backend"])}
        for mode, label in (("on", "fastpath bridge, kernel"), ("off", "fastpath bridge, splice")):
            config = write(f"{mode}.toml", FASTPATH_BRIDGE.format(
                root=root, backend=PORTS["backend"], mode=mode))
            fp = start([binary, "serve", "--config", config, "--model", "epoll",
                        "--listen", f"127.0.0.1:{PORTS[mode]}"] + root_flag(binary), 0, PORTS[mode])
            targets[label] = (fp.pid, PORTS[mode])
        ng = start(["nginx", "-c", write("proxy.conf", NGINX_PROXY.format(
            work=work, port=PORTS["nginx"], backend=PORTS["backend"]))], 0, PORTS["nginx"])
        targets["nginx proxy_pass"] = (ng.pid, PORTS["nginx"])
        runs = {(t, s): [] for t in targets for s in SIZES}
        for _ in range(args.rounds):
            for size, file in SIZES.items():
                for name, (pid, port) in targets.items():
                    url = f"http://127.0.0.1:{port}/app/{file}"
                    runs[(name, size)].append(
                        measure(binary, pid, url, args.duration, backend.pid))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    load_after = loadavg()
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in runs.items()}
    uname = os.uname()
    lines = [
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"`bench/bridge.py --duration {args.duration} --rounds {args.rounds}` (medians of "
        f"{args.rounds}), 2 cores, kernel {uname.release}, load average {load_before[0]:.1f} "
        f"before and {load_after[0]:.1f} after. Keep-alive, 64 connections; proxies on CPU 0, "
        "backend nginx and `fastpath bench` on CPU 1. Total CPU: both cores' busy time per "
        "request (every context); share: total minus the same load sent straight to the "
        "backend; own: the proxy process's user+sys. Accounted: the CPU time of this "
        "benchmark's processes (proxy, backend, load generator), of the kernel's worker "
        "threads and of interrupts, per request, which leaves out what other work on the "
        "machine took meanwhile; its share is likewise over direct. Kernel workers: the "
        "kworker and ksoftirqd threads' part of it.",
        "",
        "| size | proxy | replies/s | p99 | own CPU µs/req | total CPU µs/req | share µs/req "
        "| share ÷ nginx | accounted µs/req | accounted share | ÷ nginx | kernel workers µs/req "
        "| errors |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for size in SIZES:
        direct = med[("direct (no proxy)", size)]["total_us"]
        nginx_share = med[("nginx proxy_pass", size)]["total_us"] - direct
        direct_acc = med[("direct (no proxy)", size)]["acc_us"]
        nginx_acc = med[("nginx proxy_pass", size)]["acc_us"] - direct_acc
        for name in targets:
            m = med[(name, size)]
            share = m["total_us"] - direct
            acc_share = m["acc_us"] - direct_acc
            proxied = name != "direct (no proxy)"
            ratio = f"{share / nginx_share:.2f}×" if proxied and nginx_share > 0 else "–"
            acc_ratio = f"{acc_share / nginx_acc:.2f}×" if proxied and nginx_acc > 0 else "–"
            lines.append(
                f"| {size} | {name} | {m['rps']:,.0f} | {m['p99_us']:,.0f} µs | {m['own_us']:.1f} "
                f"| {m['total_us']:.1f} | {share:.1f} | {ratio} | {m['acc_us']:.1f} "
                f"| {acc_share:.1f} | {acc_ratio} | {m['kworker_us']:.1f} | {m['errors']:.0f} |")
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        path = os.path.join(REPO, "BENCHMARKS.md")
        with open(path) as f:
            doc = f.read()
        block = f"<!-- bridge:begin -->\n{text}\n<!-- bridge:end -->"
        if "<!-- bridge:begin -->" in doc:
            doc = re.sub(r"<!-- bridge:begin -->.*<!-- bridge:end -->", lambda _: block, doc,
                         flags=re.S)
        else:
            doc += "\n## Hand-over: the bridge in the kernel\n\n" + block + "\n"
        with open(path, "w") as f:
            f.write(doc)


if __name__ == "__main__":
    main()
