#!/usr/bin/env python3
"""Reload under load: fastpath (SIGHUP through `fastpath reload`) against nginx
(`nginx -s reload`), each reloaded 20 times while `fastpath bench` loads it at full speed.

Four workloads per server, one after the other: a static file and a request proxied to a
backend (nginx serving a file, keep-alive), each on keep-alive connections and with a new
connection per request (`--no-keepalive`). For each: replies, replies/s, and every failure
`fastpath bench` counts (resets, refused connections, timeouts, short bodies, bad responses)
plus non-2xx statuses. A fastpath reload is waited for (the pid file names the new process)
before the next; nginx's are spaced evenly over the run.

Usage: bench/reload.py [--duration 10] [--reloads 20] [--model epoll] [--connections 16];
FASTPATH_BIN selects the binary (default target/release/fastpath). Prints a Markdown table.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import wait_port  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = {"backend": 18261, "fastpath": 18262, "nginx": 18263}

NGINX_BACKEND = """daemon off; master_process off; worker_processes 1; pid {work}/backend.pid;
error_log {work}/backend.err warn; worker_rlimit_nofile 20000;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  server {{ listen 127.0.0.1:{port} backlog=4096; root {root}; }} }}
"""

# nginx under test: a master process (needed for `nginx -s reload`) and one worker, as
# fastpath gets one worker below.
NGINX = """{user}daemon on; master_process on; worker_processes 1; pid {work}/nginx.pid;
error_log {work}/nginx.err warn; worker_rlimit_nofile 20000;
events {{ worker_connections 8192; }}
http {{ access_log off; keepalive_requests 10000000; keepalive_timeout 300s;
  upstream backend {{ server 127.0.0.1:{backend}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port} backlog=4096; root {root};
    location /app/ {{ proxy_pass http://backend; proxy_http_version 1.1;
      proxy_set_header Connection ""; }} }} }}
"""

FASTPATH = """listen = ["127.0.0.1:{port}"]
workers = 1
model = "{model}"
root = "{root}"
pid_file = "{work}/fastpath.pid"
[log]
access = "off"
[[backend]]
name = "app"
addresses = "127.0.0.1:{backend}"
[[route]]
backend = "app"
prefix = "/app/"
"""




def read_pid(path):
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def bench(binary, url, duration, connections, keepalive):
    cmd = [binary, "bench", "-q", "--json", "-c", str(connections), "-d", f"{duration}s",
           "--timeout", "5s"]
    if not keepalive:
        cmd.append("--no-keepalive")
    cmd.append(url)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def summary(result):
    errors = result["errors"]
    bad_status = sum(n for code, n in result.get("status", {}).items() if not code.startswith("2"))
    failed = {k: v for k, v in errors.items() if k != "total" and v}
    return {
        "replies": result["replies"],
        "rps": result["rps"],
        "failed": errors["total"] + bad_status,
        "detail": ", ".join(f"{k} {v}" for k, v in failed.items())
        + (f"{', ' if failed else ''}non-2xx {bad_status}" if bad_status else ""),
    }


def reload_fastpath(binary, work, reloads, duration):
    pid_file = os.path.join(work, "fastpath.pid")
    gap = duration / (reloads + 2)
    time.sleep(gap)
    done = 0
    for _ in range(reloads):
        old = read_pid(pid_file)
        subprocess.run([binary, "reload", "--pid-file", pid_file], check=True,
                       capture_output=True)
        deadline = time.time() + 10
        while read_pid(pid_file) == old and time.time() < deadline:
            time.sleep(0.01)
        done += read_pid(pid_file) != old
        time.sleep(gap)
    return done


def reload_nginx(nginx, conf, reloads, duration):
    gap = duration / (reloads + 2)
    time.sleep(gap)
    done = 0
    for _ in range(reloads):
        done += subprocess.run([nginx, "-c", conf, "-s", "reload"], capture_output=True).returncode == 0
        time.sleep(gap)
    return done


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--reloads", type=int, default=20)
    parser.add_argument("--model", default="epoll")
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    binary = os.environ.get("FASTPATH_BIN", os.path.join(REPO, "target/release/fastpath"))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        sys.exit("nginx is not installed")
    work = tempfile.mkdtemp(prefix="fastpath-reload-")
    root = os.path.join(work, "root")
    os.makedirs(os.path.join(root, "app"))
    with open(os.path.join(root, "a.txt"), "w") as f:
        f.write("x" * 1024)
    with open(os.path.join(root, "app", "b.txt"), "w") as f:
        f.write("y" * 1024)
    procs = []
    try:
        conf = os.path.join(work, "backend.conf")
        with open(conf, "w") as f:
            f.write(NGINX_BACKEND.format(work=work, port=PORTS["backend"], root=root))
        procs.append(subprocess.Popen([nginx, "-c", conf, "-p", work], stderr=subprocess.DEVNULL))
        wait_port(PORTS["backend"])

        fp_conf = os.path.join(work, "fastpath.toml")
        with open(fp_conf, "w") as f:
            f.write(FASTPATH.format(port=PORTS["fastpath"], model=args.model, root=root,
                                    work=work, backend=PORTS["backend"]))
        flags = ["--run-as-root"] if os.geteuid() == 0 else []
        fp_log = open(os.path.join(work, "fastpath.err"), "w")
        # Its own session: the successors it starts are no children of this script.
        subprocess.Popen([binary, "serve", "--config", fp_conf] + flags,
                         stdout=subprocess.DEVNULL, stderr=fp_log, start_new_session=True)
        wait_port(PORTS["fastpath"])

        ng_conf = os.path.join(work, "nginx.conf")
        with open(ng_conf, "w") as f:
            # As root, its worker would run as nobody, who cannot enter the private work
            # directory: it runs as root, as fastpath does here.
            user = "user root;\n" if os.geteuid() == 0 else ""
            f.write(NGINX.format(user=user, work=work, port=PORTS["nginx"], root=root,
                                 backend=PORTS["backend"]))
        subprocess.run([nginx, "-c", ng_conf, "-p", work], check=True)
        wait_port(PORTS["nginx"])

        rows = []
        for server, port in (("fastpath", PORTS["fastpath"]), ("nginx", PORTS["nginx"])):
            for path, kind in (("/a.txt", "static"), ("/app/b.txt", "proxied")):
                for keepalive in (True, False):
                    url = f"http://127.0.0.1:{port}{path}"
                    load = bench(binary, url, args.duration, args.connections, keepalive)
                    if server == "fastpath":
                        reloads = reload_fastpath(binary, work, args.reloads, args.duration)
                    else:
                        reloads = reload_nginx(nginx, ng_conf, args.reloads, args.duration)
                    out, _ = load.communicate()
                    s = summary(json.loads(out))
                    rows.append((server, kind, "keep-alive" if keepalive else "connection per request",
                                 reloads, s))
        print(f"model {args.model}, 1 worker each, {args.connections} connections, "
              f"{args.duration:g} s per run, {args.reloads} reloads per run\n")
        print("| server | request | connections | reloads | replies | replies/s | failed | failures |")
        print("|---|---|---|---:|---:|---:|---:|---|")
        for server, kind, conns, reloads, s in rows:
            print(f"| {server} | {kind} | {conns} | {reloads} | {s['replies']} | {s['rps']:.0f} | "
                  f"{s['failed']} | {s['detail'] or '-'} |")
    finally:
        pid = read_pid(os.path.join(work, "fastpath.pid"))
        if pid:
            try:
                os.kill(pid, 2)
            except OSError:
                pass
        subprocess.run([nginx, "-c", os.path.join(work, "nginx.conf"), "-s", "stop"],
                       capture_output=True)
        for p in procs:
            p.terminate()
            p.wait()
        time.sleep(0.5)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
