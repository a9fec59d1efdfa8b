//! Differential test of the chunked decoder: generated bodies (valid ones
//! with random chunking, extensions and trailers, and mutations of them) are
//! fed to `ChunkedDecoder` in random pieces and decoded by the reference in
//! `fastpath_http::fuzzing`, a whole-buffer recursive descent over the ABNF.
//! Both must agree on accept, reject (and its status), "need more", the
//! bytes consumed and the data. Seeded, so every run checks the same inputs.

use fastpath_http::fuzzing::{reference_chunked, ChunkedOutcome};
use fastpath_http::{
    ChunkedDecoder, FORBIDDEN_TRAILERS, MAX_CHUNK_LINE, MAX_CHUNK_SIZE_DIGITS, MAX_TRAILER_BYTES,
    MAX_TRAILER_FIELDS,
};

/// Inputs checked: enough that every mutation hits every part of a body
/// many times, few enough for well under a second in a debug build.
const CASES: usize = 20_000;

/// splitmix64: tiny, seedable, good enough to pick test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in 0..n.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const QUOTED_PAIRS: [&[u8]; 3] = [b"\\\"", b"\\\\", b"\\a"];

/// Allowed trailer names that look like forbidden ones.
const NEAR_MISSES: [&[u8]; 3] = [b"Hosts", b"X-Content-Length", b"ETag"];

const TCHARS: &[u8] = b"abcxyzABCXYZ0189!#$%&'*+-.^_`|~";

fn token(rng: &mut Rng, out: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(6) {
        out.push(*rng.pick(TCHARS));
    }
}

/// BWS: usually none, as senders send.
fn bws(rng: &mut Rng, out: &mut Vec<u8>) {
    if rng.one_in(3) {
        for _ in 0..1 + rng.below(2) {
            out.push(*rng.pick(b" \t"));
        }
    }
}

fn extensions(rng: &mut Rng, clean: bool, out: &mut Vec<u8>) {
    for _ in 0..rng.below(3) {
        bws(rng, out);
        out.push(b';');
        bws(rng, out);
        token(rng, out);
        match rng.below(3) {
            0 => {}
            1 => {
                bws(rng, out);
                out.push(b'=');
                bws(rng, out);
                token(rng, out);
            }
            _ => {
                out.push(b'=');
                out.push(b'"');
                for _ in 0..rng.below(6) {
                    match rng.below(4) {
                        0 => out.extend_from_slice(rng.pick::<&[u8]>(&QUOTED_PAIRS)),
                        _ => out.push(*rng.pick(b"ab ;=,\t\x80\xff")),
                    }
                }
                out.push(b'"');
            }
        }
    }
    // Now and then a line near the length limit.
    if !clean && rng.one_in(400) {
        out.extend_from_slice(b";long=");
        let target = MAX_CHUNK_LINE - 3 + rng.below(5);
        while out.len() < target {
            out.push(b'x');
        }
    }
}

fn size_line(rng: &mut Rng, clean: bool, size: usize, out: &mut Vec<u8>) {
    let mut line = Vec::new();
    // Leading zeros; now and then up to the digit limit, or past it.
    let zeros = if rng.one_in(30) {
        MAX_CHUNK_SIZE_DIGITS - 2 + rng.below(if clean { 1 } else { 3 })
    } else {
        rng.below(4)
    };
    line.resize(zeros, b'0');
    let hex = if rng.one_in(2) {
        format!("{size:x}")
    } else {
        format!("{size:X}")
    };
    line.extend_from_slice(hex.as_bytes());
    extensions(rng, clean, &mut line);
    line.extend_from_slice(b"\r\n");
    out.extend_from_slice(&line);
}

fn trailers(rng: &mut Rng, clean: bool, out: &mut Vec<u8>) {
    let start = out.len();
    // Now and then about as many fields as allowed, all of them allowed.
    let many = !clean && rng.one_in(100);
    let count = if many {
        MAX_TRAILER_FIELDS - 1 + rng.below(3)
    } else {
        rng.below(3)
    };
    for _ in 0..count {
        match if many { 2 } else { rng.below(8) } {
            0 if !clean => out.extend_from_slice(rng.pick(FORBIDDEN_TRAILERS).0.as_bytes()),
            1 => out.extend_from_slice(rng.pick::<&[u8]>(&NEAR_MISSES)),
            _ => token(rng, out),
        }
        out.push(b':');
        let long = !clean && rng.one_in(200);
        for _ in 0..rng.below(8) + if long { MAX_TRAILER_BYTES / 8 } else { 0 } {
            out.push(*rng.pick(b"ab \t:;\"\x80\xff"));
        }
        out.extend_from_slice(b"\r\n");
    }
    // Now and then a section one byte short of its limit, at it, or over.
    if !many && !clean && rng.one_in(100) {
        let size = MAX_TRAILER_BYTES - 1 + rng.below(3);
        out.extend_from_slice(b"X-Pad:");
        while out.len() - start + 4 < size {
            out.push(b'p');
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// A chunked body, sometimes followed by the next request: valid if
/// `clean`, else now and then over a limit or with a forbidden trailer.
fn body(rng: &mut Rng, clean: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.below(4) {
        let size = 1 + rng.below(20);
        size_line(rng, clean, size, &mut out);
        for _ in 0..size {
            // Data may hold anything, framing bytes included.
            out.push(*rng.pick(b"ab0;\r\n \x00\xff"));
        }
        out.extend_from_slice(b"\r\n");
    }
    size_line(rng, clean, 0, &mut out);
    trailers(rng, clean, &mut out);
    if rng.one_in(3) {
        out.extend_from_slice(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n");
    }
    out
}

/// The bytes mutations insert: the framing's own, and a few others.
const NOISE: &[u8] = b"\r\n \t;=\":\\0aG\x00\x7f";

fn mutate(rng: &mut Rng, body: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(body.len() + 1);
        match rng.below(5) {
            0 if at < body.len() => body[at] = *rng.pick(NOISE),
            1 if at < body.len() => body[at] ^= 1 << rng.below(8),
            2 if at < body.len() => {
                body.remove(at);
            }
            3 => body.truncate(at),
            _ => body.insert(at, *rng.pick(NOISE)),
        }
    }
}

/// Feeds `input` to a fresh decoder in random pieces.
fn incremental(rng: &mut Rng, input: &[u8]) -> ChunkedOutcome {
    let mut d = ChunkedDecoder::new();
    let mut body = Vec::new();
    let mut pos = 0;
    let byte_by_byte = rng.one_in(8);
    loop {
        let left = input.len() - pos;
        let n = if byte_by_byte {
            left.min(1)
        } else {
            match rng.below(4) {
                0 => left,
                _ => rng.below(left + 1),
            }
        };
        let piece = &input[pos..pos + n];
        match d.feed(piece, |b| body.extend_from_slice(b)) {
            Err(e) => return ChunkedOutcome::Invalid { status: e.status },
            Ok((used, true)) => {
                return ChunkedOutcome::Done {
                    consumed: pos + used,
                    body,
                }
            }
            Ok((used, false)) => {
                assert_eq!(used, n, "an unfinished decoder left bytes");
                pos += n;
                if pos == input.len() {
                    return ChunkedOutcome::Partial { body };
                }
            }
        }
    }
}

#[test]
fn decoder_agrees_with_the_reference() {
    let mut rng = Rng(0x5eed_c0de_2026_1124);
    let (mut done, mut partial, mut invalid) = (0, 0, 0);
    for case in 0..CASES {
        let clean = case % 4 == 0;
        let mut input = body(&mut rng, clean);
        if clean {
            assert!(
                matches!(reference_chunked(&input), ChunkedOutcome::Done { .. }),
                "generated body refused by the reference: {:?}",
                String::from_utf8_lossy(&input)
            );
        } else if case % 4 != 1 {
            mutate(&mut rng, &mut input);
        }
        let want = reference_chunked(&input);
        let got = incremental(&mut rng, &input);
        assert_eq!(
            got,
            want,
            "case {case}: {:?}",
            String::from_utf8_lossy(&input)
        );
        match want {
            ChunkedOutcome::Done { .. } => done += 1,
            ChunkedOutcome::Partial { .. } => partial += 1,
            ChunkedOutcome::Invalid { .. } => invalid += 1,
        }
    }
    // The generator must keep exercising every outcome.
    assert!(done > CASES / 4, "{done} accepted");
    assert!(invalid > CASES / 4, "{invalid} refused");
    assert!(partial > CASES / 50, "{partial} incomplete");
}

#[test]
fn smuggling_shapes_agree() {
    for input in [
        &b"2;\nxx\r\n45\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"[..],
        b"5;foo\nhello\r\n0\r\n\r\n",
        b"5\r\nhello\n0\r\n\r\n",
        b"5 \r\nhello\r\n0\r\n\r\n",
        b"0\r\nhello\r\n\r\n",
        b"0\r\nX: a\x00b\r\n\r\n",
        b"0\r\nX: a\r\n b\r\n\r\n",
        b"0\r\nContent-Length: 5\r\n\r\n",
        b"0\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let mut rng = Rng(input.len() as u64);
        assert_eq!(
            reference_chunked(input),
            ChunkedOutcome::Invalid { status: 400 }
        );
        for _ in 0..50 {
            assert_eq!(
                incremental(&mut rng, input),
                ChunkedOutcome::Invalid { status: 400 }
            );
        }
    }
}
