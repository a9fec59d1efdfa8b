#!/usr/bin/env python3
"""Buffering benchmark: how long slow clients hold a backend's workers, with fastpath's
request and response buffering on (the default) and off.

The backend is the demo's WSGI application (examples/backend/app.py) under gunicorn with 2
sync workers, the setup gunicorn's documentation says must sit behind a buffering proxy. For
each fastpath model and each buffering setting, three scenarios run one after another, each on
a fresh gunicorn:

  * none: no slow client, the baseline;
  * slow bodies: N clients send a POST body to /app/echo at one byte a second;
  * slow readers: N clients ask for a 32 MiB /app/big and read none of it.

Meanwhile one fast client asks for /app/hello over and over on a kept-alive connection for
`--duration` seconds (a request not answered within 2 s is counted as timed out and the client
reconnects; an answer other than 200 is an error). Reported per scenario: the fast client's
answers, median and worst latency, timeouts and errors, and the backend's occupancy: the seconds gunicorn's workers spent on the slow
clients' requests (`%(L)s` from its access log, for the requests it finished; a request still
held when the scenario ends is finished then, when the slow clients leave).

CPUs: fastpath on CPU 0, gunicorn and the clients on CPU 1 (taskset).
Results go to stdout and between the buffering markers in BENCHMARKS.md (unless --no-write).
Usage: bench/buffering.py [--duration 10] [--slow 4] [--models epoll] [--no-write];
FASTPATH_BIN selects the binary.
"""

import argparse
import datetime
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import root_flag, wait_port  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PORTS = {"gunicorn": 18261, "fastpath": 18262}
BIG = 32 << 20
FAST_TIMEOUT = 2.0

FASTPATH_CONFIG = """workers = 1
root = "{root}"
[log]
access = "off"
[[backend]]
name = "app"
addresses = "127.0.0.1:{backend}"
cache = false
response_timeout = "60s"
request_buffering = {buffering}
response_buffering = {buffering}
[[route]]
backend = "app"
prefix = "/app/"
"""






def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_gunicorn(work, log):
    proc = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "-m", "gunicorn",
         "--chdir", os.path.join(REPO, "examples/backend"),
         "--bind", f"127.0.0.1:{PORTS['gunicorn']}", "--workers", "2",
         "--access-logfile", log, "--access-logformat", "%(U)s %(s)s %(L)s",
         "--log-level", "warning", "app:application"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
    wait_port(PORTS["gunicorn"])
    return proc


def start_fastpath(binary, work, model, buffering):
    config = os.path.join(work, f"fastpath-{buffering}.toml")
    with open(config, "w") as f:
        f.write(FASTPATH_CONFIG.format(root=work, backend=PORTS["gunicorn"],
                                       buffering="true" if buffering else "false"))
    proc = subprocess.Popen(
        ["taskset", "-c", "0", binary, "serve", "--config", config, "--model", model,
         "--listen", f"127.0.0.1:{PORTS['fastpath']}"] + root_flag(binary),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(PORTS["fastpath"])
    return proc


def slow_bodies(n, stop_event):
    """N clients sending a POST body at one byte a second until told to stop."""
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", PORTS["fastpath"]))
        s.sendall(b"POST /app/echo HTTP/1.1\r\nHost: bench\r\nContent-Length: 1000\r\n\r\nx")
        conns.append(s)

    def trickle():
        while not stop_event.wait(1.0):
            for s in conns:
                try:
                    s.sendall(b"x")
                except OSError:
                    pass
        for s in conns:
            s.close()

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    return thread


def slow_readers(n, stop_event):
    """N clients asking for a large answer and reading none of it until told to stop."""
    conns = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", PORTS["fastpath"]))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        s.sendall(f"GET /app/big?n={BIG} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        conns.append(s)

    def hold():
        stop_event.wait()
        for s in conns:
            s.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def read_answer(sock):
    """Reads one response framed by Content-Length; raises on timeout or close."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise OSError("closed")
        body += chunk
    return head.split(b" ")[1]


def fast_client(duration):
    """Sequential GET /app/hello for `duration` seconds; latencies and timeouts."""
    latencies, timeouts, errors = [], 0, 0
    end = time.time() + duration
    sock = None
    while time.time() < end:
        if sock is None:
            sock = socket.create_connection(("127.0.0.1", PORTS["fastpath"]))
            sock.settimeout(FAST_TIMEOUT)
        started = time.time()
        try:
            sock.sendall(b"GET /app/hello HTTP/1.1\r\nHost: bench\r\n\r\n")
            status = read_answer(sock)
            if status == b"200":
                latencies.append(time.time() - started)
            else:
                errors += 1
        except socket.timeout:
            timeouts += 1
            sock.close()
            sock = None
        except OSError:
            # fastpath closes a kept connection after max_requests_per_connection.
            sock.close()
            sock = None
    if sock is not None:
        sock.close()
    return latencies, timeouts, errors


def occupancy(log, path):
    """Seconds gunicorn spent on requests for `path`, and how many it finished."""
    total, count = 0.0, 0
    try:
        with open(log) as f:
            for line in f:
                fields = line.split()
                if len(fields) == 3 and fields[0] == path:
                    total += float(fields[2])
                    count += 1
    except FileNotFoundError:
        pass
    return total, count


def run_scenario(binary, work, model, buffering, scenario, slow, duration):
    log = os.path.join(work, f"gunicorn-{model}-{buffering}-{scenario}.log")
    gunicorn = start_gunicorn(work, log)
    fastpath = start_fastpath(binary, work, model, buffering)
    try:
        stop_event = threading.Event()
        holder = None
        if scenario == "slow bodies":
            holder = slow_bodies(slow, stop_event)
        elif scenario == "slow readers":
            holder = slow_readers(slow, stop_event)
        time.sleep(1)
        latencies, timeouts, errors = fast_client(duration)
        stop_event.set()
        if holder is not None:
            holder.join()
        # Held requests end once their clients have left; gunicorn logs them then.
        time.sleep(2)
    finally:
        stop(fastpath)
        stop(gunicorn)
    path = {"slow bodies": "/app/echo", "slow readers": "/app/big"}.get(scenario)
    held, finished = occupancy(log, path) if path else (0.0, 0)
    ordered = sorted(latencies)
    return {
        "answers": len(latencies),
        "p50_ms": statistics.median(ordered) * 1000 if ordered else None,
        "max_ms": ordered[-1] * 1000 if ordered else None,
        "timeouts": timeouts,
        "errors": errors,
        "held_s": held,
        "finished": finished,
    }


def fmt_ms(v):
    return "-" if v is None else f"{v:.1f} ms"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--slow", type=int, default=4, help="slow clients per scenario")
    parser.add_argument("--models", default="epoll")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    binary = os.environ.get("FASTPATH_BIN") or os.path.join(REPO, "target/release/fastpath")
    if not os.environ.get("FASTPATH_BIN"):
        subprocess.run(["cargo", "build", "--release", "-p", "fastpath"], cwd=REPO, check=True)
    if shutil.which("taskset") is None:
        raise SystemExit("taskset is required (apt-get install util-linux)")
    if subprocess.run([sys.executable, "-c", "import gunicorn"]).returncode != 0:
        raise SystemExit("gunicorn is required (python3 -m pip install gunicorn)")
    work = tempfile.mkdtemp(prefix="fastpath-buffering.")
    os.chmod(work, 0o755)
    rows = []
    try:
        for model in [m for m in args.models.split(",") if m]:
            for buffering in (True, False):
                for scenario in ("none", "slow bodies", "slow readers"):
                    r = run_scenario(binary, work, model, buffering, scenario, args.slow,
                                     args.duration)
                    row = (f"| {model} | {'on' if buffering else 'off'} | {scenario} | "
                           f"{r['answers']} | {fmt_ms(r['p50_ms'])} | {fmt_ms(r['max_ms'])} | "
                           f"{r['timeouts']} | {r['errors']} | "
                           + (f"{r['held_s']:.2f} s ({r['finished']} requests)"
                              if scenario != "none" else "-")
                           + " |")
                    print(row, flush=True)
                    rows.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "bench/buffering.py" + (f" --duration {args.duration}"
                                      f" --slow {args.slow} --models {args.models}")
    table = "\n".join([
        f"Run {now}, `{command}`, {os.cpu_count()} cores, kernel {os.uname().release}. "
        f"fastpath (one worker) on CPU 0; gunicorn (2 sync workers, examples/backend/app.py), "
        f"{args.slow} slow clients and one fast client on CPU 1. Each scenario runs "
        f"{args.duration} s on a fresh gunicorn; the fast client asks for /app/hello in a loop "
        f"(a request not answered within {FAST_TIMEOUT:.0f} s counts as timed out, an answer other than 200 as an error). Backend "
        f"occupancy is the time gunicorn's workers spent on the slow clients' requests, from "
        f"its access log (`%(L)s`), including the time after the scenario until they left.",
        "",
        "| model | buffering | slow clients | fast answers | p50 | worst | timeouts | errors "
        "| backend occupancy |",
        "|---|---|---|---|---|---|---|---|---|",
    ] + rows)
    print(table)
    if not args.no_write:
        path = os.path.join(REPO, "BENCHMARKS.md")
        with open(path) as f:
            text = f.read()
        begin, end = "<!-- buffering:begin -->", "<!-- buffering:end -->"
        if begin in text and end in text:
            head, rest = text.split(begin, 1)
            _, tail = rest.split(end, 1)
            text = f"{head}{begin}\n{table}\n{end}{tail}"
            with open(path, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
