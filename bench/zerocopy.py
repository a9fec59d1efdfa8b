#!/usr/bin/env python3
"""Does MSG_ZEROCOPY pay over TCP on this machine? The sender's CPU time per send of one
buffer, copied (plain send) or sent with MSG_ZEROCOPY (SO_ZEROCOPY set, completions read
from the error queue as they come, as a server would have to before reusing the buffer),
over a loopback connection: the sender on CPU 0, a receiver that discards everything on
CPU 1. The answer decides whether fastpath's mid-size responses should use zero-copy sends
(docs/performance.md); io_uring's IORING_OP_SEND_ZC takes the same path in the kernel.

Usage: bench/zerocopy.py [--sizes 8,16,32,64,128] [--sends N] [--rounds N]

Only the Python standard library is used. Python adds the same fixed cost to both ways;
the difference between the two columns is the kernel's.
"""

import argparse
import os
import socket
import statistics
import sys
import time

SO_ZEROCOPY = 60
MSG_ZEROCOPY = 0x4000000


def receiver(ls):
    """Child process on CPU 1: accepts one connection and reads it to the end."""
    os.sched_setaffinity(0, {1})
    conn, _ = ls.accept()
    buf = bytearray(1 << 20)
    while conn.recv_into(buf):
        pass
    os._exit(0)


def reap(sock):
    """Reads whatever zero-copy completions are queued; returns how many notices."""
    n = 0
    while True:
        try:
            sock.recvmsg(0, 1024, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
            n += 1
        except BlockingIOError:
            return n


def one_run(size, sends, zerocopy):
    """Sender CPU µs per send of `size` bytes."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    pid = os.fork()
    if pid == 0:
        receiver(ls)
    addr = ls.getsockname()
    ls.close()
    sock = socket.create_connection(addr)
    flags = 0
    if zerocopy:
        sock.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
        flags = MSG_ZEROCOPY
    data = memoryview(b"x" * size)
    t0 = time.thread_time()
    for i in range(sends):
        view = data
        while view:
            n = sock.send(view, flags)
            view = view[n:]
        if zerocopy and i % 8 == 7:
            reap(sock)
    if zerocopy:
        reap(sock)
    t1 = time.thread_time()
    sock.close()
    os.waitpid(pid, 0)
    return (t1 - t0) / sends * 1e6


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,16,32,64,128", help="KiB, comma-separated")
    ap.add_argument("--sends", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3, help="each figure the median of these")
    args = ap.parse_args(argv)
    if len(os.sched_getaffinity(0)) < 2 and os.cpu_count() < 2:
        raise SystemExit("needs two CPUs")
    os.sched_setaffinity(0, {0})
    print("| send | copy: sender CPU µs | MSG_ZEROCOPY: sender CPU µs | zerocopy ÷ copy |")
    print("|---|--:|--:|--:|")
    for kib in [int(x) for x in args.sizes.split(",") if x.strip()]:
        copy, zc = [], []
        for _ in range(args.rounds):
            copy.append(one_run(kib * 1024, args.sends, False))
            zc.append(one_run(kib * 1024, args.sends, True))
        c, z = statistics.median(copy), statistics.median(zc)
        print(f"| {kib} KiB | {c:.2f} | {z:.2f} | {z / c:.2f}× |", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
