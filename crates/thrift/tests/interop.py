"""Encodes and decodes Thrift messages with the official Apache Thrift Python
library, for crates/thrift/tests/interop.rs.

    interop.py GEN_PY_DIR encode OUT_DIR   writes one stream per variant
    interop.py GEN_PY_DIR decode IN_DIR    reads the streams fastpath wrote

A variant is strict or non-strict headers, framed or unframed transport. Each
stream holds the same five messages, back to back: msg (Forwarder, oneway),
echo (call with every field type), an echo reply, an exception, note (oneway).
"""

import os
import sys

VARIANTS = [(strict, framed) for strict in (True, False) for framed in (True, False)]


def variant_name(strict, framed):
    return "%s-%s.bin" % ("strict" if strict else "old", "framed" if framed else "unframed")


def main():
    gen, mode, folder = sys.argv[1:4]
    sys.path.insert(0, gen)
    from thrift.Thrift import TApplicationException, TMessageType
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TTransport
    from alltypes import Kitchen
    from alltypes.ttypes import AllTypes, Color, Inner, Leaf
    from forwarder import Forwarder

    everything = AllTypes(
        b=True,
        y=-7,
        s=-1234,
        i=123456789,
        l=-9876543210123,
        d=3.25,
        str="h\u00e9llo w\u00f6rld",
        bin=b"\x00\xffbin",
        ints=[1, -2, 2147483647, -2147483648],
        names={"alpha", "beta"},
        counts={"one": 1, "two": -2},
        inner=Inner(
            leaf=Leaf(n=5, s="five"),
            leaves=[Leaf(n=1, s="a"), Leaf(n=2, s="b")],
            by_name={"x": Leaf(n=9, s="nine")},
        ),
        color=Color.BLUE,
        nested_lists=[[1, 2], [], [-3]],
        deep={4: [Leaf(n=4, s="four")]},
        flags=[True, False, True],
        small={-128, 127},
        ds=[0.5, -1e300],
    )

    def stack(strict, framed, data=None):
        mem = TTransport.TMemoryBuffer(data) if data is not None else TTransport.TMemoryBuffer()
        trans = TTransport.TFramedTransport(mem) if framed else mem
        prot = TBinaryProtocol.TBinaryProtocol(trans, strictRead=strict, strictWrite=strict)
        return mem, trans, prot

    if mode == "encode":
        for strict, framed in VARIANTS:
            mem, trans, prot = stack(strict, framed)
            Forwarder.Client(prot).msg(42, "hello, forwarder")
            kitchen = Kitchen.Client(prot)
            kitchen.send_echo(everything, -1)
            prot.writeMessageBegin("echo", TMessageType.REPLY, 77)
            Kitchen.echo_result(success=everything).write(prot)
            prot.writeMessageEnd()
            trans.flush()
            prot.writeMessageBegin("echo", TMessageType.EXCEPTION, 78)
            TApplicationException(TApplicationException.UNKNOWN_METHOD, "no such method").write(prot)
            prot.writeMessageEnd()
            trans.flush()
            kitchen.note("\u00fcn\u00efcode")
            with open(os.path.join(folder, variant_name(strict, framed)), "wb") as f:
                f.write(mem.getvalue())
    elif mode == "decode":
        for strict, framed in VARIANTS:
            name = variant_name(strict, framed)
            with open(os.path.join(folder, name), "rb") as f:
                data = f.read()
            mem, trans, prot = stack(strict, framed, data)

            def expect(method, kind, seq):
                got = prot.readMessageBegin()
                if isinstance(got[0], bytes):
                    # The library returns an old header's name undecoded.
                    got = (got[0].decode(), got[1], got[2])
                assert got == (method, kind, seq), (name, got)

            expect("msg", TMessageType.ONEWAY, 1)
            args = Forwarder.msg_args()
            args.read(prot)
            assert (args.key, args.payload) == (42, "hello, forwarder"), (name, args)
            expect("echo", TMessageType.CALL, 2)
            args = Kitchen.echo_args()
            args.read(prot)
            assert args.value == everything, (name, args.value)
            assert args.stamp == -1, (name, args.stamp)
            expect("echo", TMessageType.REPLY, 77)
            result = Kitchen.echo_result()
            result.read(prot)
            assert result.success == everything, (name, result.success)
            expect("echo", TMessageType.EXCEPTION, 78)
            exc = TApplicationException()
            exc.read(prot)
            assert (exc.type, exc.message) == (TApplicationException.UNKNOWN_METHOD, "no such method"), name
            expect("note", TMessageType.ONEWAY, -3)
            args = Kitchen.note_args()
            args.read(prot)
            assert args.text == "\u00fcn\u00efcode", (name, args.text)
            prot.readMessageEnd()
            assert mem._buffer.tell() == len(data), (name, "bytes left", len(data) - mem._buffer.tell())
            print("decoded", name)
    else:
        raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    main()
