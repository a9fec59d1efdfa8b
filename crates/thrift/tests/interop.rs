//! Interoperability with the official Apache Thrift library: messages encoded
//! by its Python binding (from the IDLs in examples/thrift) are decoded here
//! and every field checked, and messages encoded here are decoded there.
//! Every variant: strict and old headers, framed and unframed transport.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use fastpath_thrift::{
    Decoded, Decoder, Encoder, ForwarderMsg, Header, Limits, Message, MessageType, TType,
    Transport, Value,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The thrift compiler's Python code for the IDLs in `dir`, and a Python that has
/// the thrift package; `None` after a visible skip.
fn setup(dir: &Path) -> Option<String> {
    let idls =
        ["alltypes.thrift", "forwarder.thrift"].map(|idl| root().join("examples/thrift").join(idl));
    let idls: Vec<&Path> = idls.iter().map(PathBuf::as_path).collect();
    fastpath_testkit::thrift_py("thrift interop", &idls, dir).map(str::to_owned)
}

fn python(python: &str, gen: &Path, mode: &str, dir: &Path) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(gen)
        .arg(mode)
        .arg(dir)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{python} {} {mode}: {}\nstdout:\n{}\nstderr:\n{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

const VARIANTS: [(bool, Transport, &str); 4] = [
    (true, Transport::Framed, "strict-framed.bin"),
    (true, Transport::Unframed, "strict-unframed.bin"),
    (false, Transport::Framed, "old-framed.bin"),
    (false, Transport::Unframed, "old-unframed.bin"),
];

/// A value as text, with its type: i32 bare, other integers suffixed,
/// strings quoted (hex when not UTF-8), sets and maps sorted (the Python
/// library writes them in hash order).
fn render(v: &Value<'_>, out: &mut String) {
    match *v {
        Value::Bool(b) => write!(out, "{b}").unwrap(),
        Value::Byte(n) => write!(out, "{n}i8").unwrap(),
        Value::I16(n) => write!(out, "{n}i16").unwrap(),
        Value::I32(n) => write!(out, "{n}").unwrap(),
        Value::I64(n) => write!(out, "{n}i64").unwrap(),
        Value::Double(d) => write!(out, "{d:?}f").unwrap(),
        Value::Binary(b) | Value::Uuid(b) => match std::str::from_utf8(b) {
            Ok(s) => write!(out, "{s:?}").unwrap(),
            Err(_) => {
                out.push_str("0x");
                for byte in b {
                    write!(out, "{byte:02x}").unwrap();
                }
            }
        },
        Value::Struct(s) => {
            let fields: Vec<String> = s
                .fields()
                .map(|f| {
                    let mut t = format!("{}:", f.id);
                    render(&f.value, &mut t);
                    t
                })
                .collect();
            write!(out, "{{{}}}", fields.join(", ")).unwrap();
        }
        Value::List(l) | Value::Set(l) => {
            let mut items: Vec<String> = l
                .iter()
                .map(|e| {
                    let mut t = String::new();
                    render(&e, &mut t);
                    t
                })
                .collect();
            assert_eq!(items.len(), l.len());
            if matches!(v, Value::Set(_)) {
                items.sort();
                out.push_str("set");
            }
            write!(out, "[{}]", items.join(", ")).unwrap();
        }
        Value::Map(m) => {
            let mut items: Vec<String> = m
                .iter()
                .map(|(k, e)| {
                    let mut t = String::new();
                    render(&k, &mut t);
                    t.push_str(": ");
                    render(&e, &mut t);
                    t
                })
                .collect();
            assert_eq!(items.len(), m.len());
            items.sort();
            write!(out, "map{{{}}}", items.join(", ")).unwrap();
        }
    }
}

fn args(m: &Message<'_>) -> String {
    let mut s = String::new();
    render(&Value::Struct(m.args()), &mut s);
    s
}

const EVERYTHING: &str = concat!(
    "{1:true, 2:-7i8, 3:-1234i16, 4:123456789, 5:-9876543210123i64, 6:3.25f, ",
    "7:\"héllo wörld\", 8:0x00ff62696e, 9:[1, -2, 2147483647, -2147483648], ",
    "10:set[\"alpha\", \"beta\"], 11:map{\"one\": 1i64, \"two\": -2i64}, ",
    "12:{1:{1:5, 2:\"five\"}, 2:[{1:1, 2:\"a\"}, {1:2, 2:\"b\"}], 3:map{\"x\": {1:9, 2:\"nine\"}}}, ",
    "13:7, 14:[[1i16, 2i16], [], [-3i16]], 15:map{4: [{1:4, 2:\"four\"}]}, ",
    "16:[true, false, true], 17:set[-128i8, 127i8], 18:[0.5f, -1e300f]}",
);

/// The five messages of each stream, in order: name, type, seq id (as the
/// Python side writes them), rendered arguments.
fn expected() -> [(&'static str, MessageType, i32, String); 5] {
    [
        (
            "msg",
            MessageType::Oneway,
            0,
            "{1:42, 2:\"hello, forwarder\"}".to_owned(),
        ),
        (
            "echo",
            MessageType::Call,
            0,
            format!("{{1:{EVERYTHING}, 2:-1i64}}"),
        ),
        (
            "echo",
            MessageType::Reply,
            77,
            format!("{{0:{EVERYTHING}}}"),
        ),
        (
            "echo",
            MessageType::Exception,
            78,
            "{1:\"no such method\", 2:1}".to_owned(),
        ),
        ("note", MessageType::Oneway, 0, "{1:\"ünïcode\"}".to_owned()),
    ]
}

#[test]
fn decodes_what_the_official_library_encodes() {
    let gen = tempfile::tempdir().unwrap();
    let Some(py) = setup(gen.path()) else { return };
    let files = tempfile::tempdir().unwrap();
    python(&py, gen.path(), "encode", files.path());
    for (strict, transport, name) in VARIANTS {
        let data = std::fs::read(files.path().join(name)).unwrap();
        let decoder = Decoder::new(transport, Limits::default());
        let mut rest = &data[..];
        for (i, (method, kind, seq, fields)) in expected().into_iter().enumerate() {
            let m = match decoder.decode(rest) {
                Ok(Decoded::Message(m)) => m,
                other => panic!("{name} message {i}: {other:?}"),
            };
            assert_eq!(m.name_str(), Some(method), "{name} {i}");
            assert_eq!(m.message_type(), kind, "{name} {i}");
            assert_eq!(m.seq_id(), seq, "{name} {i}");
            assert_eq!(m.is_strict(), strict, "{name} {i}");
            assert_eq!(args(&m), fields, "{name} {i}");
            if i == 0 {
                let f = ForwarderMsg::from_message(&m).unwrap();
                assert_eq!((f.key, f.payload), (42, &b"hello, forwarder"[..]));
            }
            // Every cut of the message is "need more", never an error.
            for cut in 0..m.wire_len() {
                assert!(
                    matches!(decoder.decode(&rest[..cut]), Ok(Decoded::NeedMore(_))),
                    "{name} {i} cut at {cut}"
                );
            }
            rest = &rest[m.wire_len()..];
        }
        assert!(rest.is_empty(), "{name}: {} bytes left", rest.len());
        println!("{name}: 5 messages checked");
    }
}

fn leaf(e: &mut Encoder<'_>, n: i32, s: &str) {
    e.field(1, TType::I32).i32(n);
    e.field(2, TType::String).string(s).stop();
}

fn everything(e: &mut Encoder<'_>) {
    e.field(1, TType::Bool).bool(true);
    e.field(2, TType::Byte).byte(-7);
    e.field(3, TType::I16).i16(-1234);
    e.field(4, TType::I32).i32(123456789);
    e.field(5, TType::I64).i64(-9876543210123);
    e.field(6, TType::Double).double(3.25);
    e.field(7, TType::String).string("héllo wörld");
    e.field(8, TType::String).binary(b"\x00\xffbin");
    e.field(9, TType::List).list(TType::I32, 4);
    e.i32(1).i32(-2).i32(i32::MAX).i32(i32::MIN);
    e.field(10, TType::Set).set(TType::String, 2);
    e.string("alpha").string("beta");
    e.field(11, TType::Map).map(TType::String, TType::I64, 2);
    e.string("one").i64(1).string("two").i64(-2);
    e.field(12, TType::Struct);
    e.field(1, TType::Struct);
    leaf(e, 5, "five");
    e.field(2, TType::List).list(TType::Struct, 2);
    leaf(e, 1, "a");
    leaf(e, 2, "b");
    e.field(3, TType::Map).map(TType::String, TType::Struct, 1);
    e.string("x");
    leaf(e, 9, "nine");
    e.stop();
    e.field(13, TType::I32).i32(7);
    e.field(14, TType::List).list(TType::List, 3);
    e.list(TType::I16, 2).i16(1).i16(2);
    e.list(TType::I16, 0);
    e.list(TType::I16, 1).i16(-3);
    e.field(15, TType::Map).map(TType::I32, TType::List, 1);
    e.i32(4).list(TType::Struct, 1);
    leaf(e, 4, "four");
    e.field(16, TType::List).list(TType::Bool, 3);
    e.bool(true).bool(false).bool(true);
    e.field(17, TType::Set)
        .set(TType::Byte, 2)
        .byte(-128)
        .byte(127);
    e.field(18, TType::List).list(TType::Double, 2);
    e.double(0.5).double(-1e300);
}

#[test]
fn the_official_library_decodes_what_we_encode() {
    let gen = tempfile::tempdir().unwrap();
    let Some(py) = setup(gen.path()) else { return };
    let files = tempfile::tempdir().unwrap();
    for (strict, transport, name) in VARIANTS {
        let mut out = Vec::new();
        let header = |name: &'static [u8], message_type, seq_id| Header {
            name,
            message_type,
            seq_id,
            strict,
        };
        fastpath_thrift::encode_forwarder_msg(
            &mut out,
            transport,
            strict,
            1,
            42,
            b"hello, forwarder",
        );
        let mut e = Encoder::new(&mut out, transport, header(b"echo", MessageType::Call, 2));
        e.field(1, TType::Struct);
        everything(&mut e);
        e.stop();
        e.field(2, TType::I64).i64(-1);
        e.finish();
        let mut e = Encoder::new(&mut out, transport, header(b"echo", MessageType::Reply, 77));
        e.field(0, TType::Struct);
        everything(&mut e);
        e.stop();
        e.finish();
        let mut e = Encoder::new(
            &mut out,
            transport,
            header(b"echo", MessageType::Exception, 78),
        );
        e.field(1, TType::String).string("no such method");
        e.field(2, TType::I32).i32(1);
        e.finish();
        let mut e = Encoder::new(
            &mut out,
            transport,
            header(b"note", MessageType::Oneway, -3),
        );
        e.field(1, TType::String).string("ünïcode");
        e.finish();
        std::fs::write(files.path().join(name), &out).unwrap();

        // And what we wrote reads back here as the official encoding does.
        let decoder = Decoder::new(transport, Limits::default());
        let Ok(Decoded::Message(m)) = decoder.decode(&out) else {
            panic!("{name}")
        };
        assert_eq!(args(&m), "{1:42, 2:\"hello, forwarder\"}");
        let Ok(Decoded::Message(m)) = decoder.decode(&out[m.wire_len()..]) else {
            panic!("{name}")
        };
        assert_eq!(args(&m), format!("{{1:{EVERYTHING}, 2:-1i64}}"));
    }
    python(&py, gen.path(), "decode", files.path());
}
