#!/usr/bin/env python3
"""A client of examples/nest/rot13.nest: sends lines, one at a time and then many in one
write, checks each reply against Python's own rot13 codec, then ends its sending and prints
what the server said last (END's reply). Usage: rot13_client.py HOST PORT [CAFILE]: with
CAFILE, over TLS to a server whose certificate that CA issued for localhost, and without the
end (a half-close has no place in TLS: close_notify ends both directions)."""
import codecs
import socket
import ssl
import sys

host, port = sys.argv[1], int(sys.argv[2])
s = socket.create_connection((host, port), timeout=10)
if len(sys.argv) > 3:
    context = ssl.create_default_context(cafile=sys.argv[3])
    s = context.wrap_socket(s, server_hostname="localhost")
f = s.makefile("rb")


def expect(line):
    want = codecs.encode(line, "rot13") + "\n"
    got = f.readline().decode()
    if got != want:
        sys.exit(f"sent {line!r}: want {want!r}, got {got!r}")


lines = ["Hello, World", "The Quick Brown Fox Jumps Over The Lazy Dog 0123456789", "", "abc\r"]
for line in lines:
    s.sendall(line.encode() + b"\n")
    expect(line)
# Pipelined: many lines in one write, some split across the next write.
burst = [f"line {i} of the burst: nopqrstuvwxyz" for i in range(200)]
data = "".join(x + "\n" for x in burst).encode()
s.sendall(data[:1000])
s.sendall(data[1000:])
for line in burst:
    expect(line)
if len(sys.argv) > 3:
    print(f"ok {len(lines) + len(burst)} lines over {s.version()}")
    sys.exit(0)
# Done sending: the server runs END, replies, closes.
s.shutdown(socket.SHUT_WR)
rest = f.read().decode()
print(f"ok {len(lines) + len(burst)} lines; end: {rest!r}")
