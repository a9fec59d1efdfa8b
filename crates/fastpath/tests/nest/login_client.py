#!/usr/bin/env python3
"""A client of examples/nest/login.nest (Figure 3.4): logs in, stores a file with PUT, fetches
it back with GET and compares, asks for a missing file, then QUIT.
Usage: login_client.py HOST PORT USER PASSWORD"""
import os
import socket
import sys

host, port, user, password = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.create_connection((host, port), timeout=10)
f = s.makefile("rb")


def expect(want):
    got = f.readline().decode()
    if got != want:
        sys.exit(f"want {want!r}, got {got!r}")


expect("Username: \n")
s.sendall(user.encode() + b"\r\n")
expect("Password: \n")
s.sendall(password.encode() + b"\r\n")
expect(f"Welcome {user}\n")

# 1 MiB of every byte value, line ends among them: stored as they are, not matched.
body = os.urandom(1 << 20) + b"\r\nGET not-a-command\n"
s.sendall(f"PUT upload.bin {len(body)}\r\n".encode() + body)
expect(f"200 receiving {len(body)}\n")
s.sendall(b"GET upload.bin HTTP/1.0\r\n")
expect(f"200 {len(body)}\n")
got = f.read(len(body))
if got != body:
    sys.exit(f"GET returned {len(got)} bytes, not the {len(body)} stored")
s.sendall(b"GET http://www.cpsc.ucalgary.ca/missing.txt\n")
expect("404 missing.txt not found\n")
s.sendall(b"GET ../etc/passwd\n")
expect("403 ../etc/passwd is not a plain file name\n")
s.sendall(b"QUIT\n")
expect("221 bye\n")
if f.read() != b"":
    sys.exit("more after 221")
print(f"ok {len(body)} bytes stored and fetched")
