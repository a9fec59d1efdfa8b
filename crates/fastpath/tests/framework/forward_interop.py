"""Drives `fastpath forward` with the official Apache Thrift Python library.

Usage: forward_interop.py GEN_DIR FORWARDER_PORT DEST_PORTS CLIENTS MESSAGES TRANSPORT

Starts one Thrift server per destination port (code generated from
examples/thrift/forwarder.thrift into GEN_DIR, TThreadedServer, recording every
call), then CLIENTS Thrift clients that each send MESSAGES `msg` calls through
the forwarder, with keys spread over the destinations (negative ones too) and
payloads that name the client and the sequence number. Then it waits for every
message and checks that each arrived exactly once, intact, at destination
key mod N (Euclidean), in the order its client sent it. Exits 1 with the reason
otherwise.
"""

import sys
import threading
import time

gen_dir, fwd_port, dest_ports, clients, messages, transport = sys.argv[1:7]
sys.path.insert(0, gen_dir)

from forwarder import Forwarder  # noqa: E402
from thrift.protocol import TBinaryProtocol  # noqa: E402
from thrift.server import TServer  # noqa: E402
from thrift.transport import TSocket, TTransport  # noqa: E402

dest_ports = [int(p) for p in dest_ports.split(",")]
clients, messages = int(clients), int(messages)
framed = transport == "framed"
transport_factory = (
    TTransport.TFramedTransportFactory() if framed else TTransport.TBufferedTransportFactory()
)


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []

    def msg(self, key, payload):
        with self.lock:
            self.calls.append((key, payload))


recorders = []
for port in dest_ports:
    recorder = Recorder()
    recorders.append(recorder)
    server = TServer.TThreadedServer(
        Forwarder.Processor(recorder),
        TSocket.TServerSocket(host="127.0.0.1", port=port),
        transport_factory,
        TBinaryProtocol.TBinaryProtocolFactory(),
        daemon=True,
    )
    threading.Thread(target=server.serve, daemon=True).start()
time.sleep(0.3)

n = len(dest_ports)


def payload(client, seq):
    # Sizes vary from a few bytes to several KiB, so messages straddle reads.
    body = "c%d-s%d-" % (client, seq)
    return body + "x" * ((seq * 37 + client * 101) % 5000)


def key(client, seq):
    return (seq + client) % (3 * n) - n  # negative keys too


errors = []


def run_client(client):
    try:
        sock = TSocket.TSocket("127.0.0.1", int(fwd_port))
        trans = TTransport.TFramedTransport(sock) if framed else TTransport.TBufferedTransport(sock)
        trans.open()
        proxy = Forwarder.Client(TBinaryProtocol.TBinaryProtocol(trans))
        for seq in range(messages):
            proxy.msg(key(client, seq), payload(client, seq))
        trans.close()
    except Exception as e:  # noqa: BLE001
        errors.append("client %d: %r" % (client, e))


threads = [threading.Thread(target=run_client, args=(c,)) for c in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if errors:
    print("\n".join(errors))
    sys.exit(1)

total = clients * messages
deadline = time.time() + 30
while time.time() < deadline:
    if sum(len(r.calls) for r in recorders) >= total:
        break
    time.sleep(0.05)
time.sleep(0.2)  # anything extra (a duplicate) would show now

got = sum(len(r.calls) for r in recorders)
problems = []
if got != total:
    problems.append("%d messages arrived, %d were sent" % (got, total))
for dest, recorder in enumerate(recorders):
    last = {}
    for k, p in recorder.calls:
        if k % n != dest:
            problems.append("key %d arrived at destination %d" % (k, dest))
            continue
        head = p.split("-")
        client, seq = int(head[0][1:]), int(head[1][1:])
        if p != payload(client, seq) or k != key(client, seq):
            problems.append("message c%d s%d arrived altered" % (client, seq))
        if last.get(client, -1) >= seq:
            problems.append(
                "destination %d: client %d's message %d after %d" % (dest, client, seq, last[client])
            )
        last[client] = seq
if problems:
    print("\n".join(problems[:20]))
    sys.exit(1)
print("ok: %d messages from %d clients through %d destinations" % (total, clients, n))
