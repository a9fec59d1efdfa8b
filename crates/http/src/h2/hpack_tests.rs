use super::*;
use crate::testing::Rng;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

type Decoded = Vec<(String, String, Representation)>;

fn decode_with(
    decoder: &mut Decoder,
    block: &[u8],
    limits: &DecodeLimits,
) -> (Decoded, Result<(), HpackError>) {
    let mut fields = Vec::new();
    let result = decoder.decode(block, limits, |name, value, how| {
        fields.push((
            String::from_utf8_lossy(name).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
            how,
        ))
    });
    (fields, result)
}

fn decode(decoder: &mut Decoder, block: &[u8]) -> Decoded {
    let (fields, result) = decode_with(decoder, block, &DecodeLimits::default());
    result.unwrap_or_else(|e| panic!("{e} in {block:02x?}"));
    fields
}

fn decode_err(decoder: &mut Decoder, block: &[u8]) -> HpackError {
    decode_with(decoder, block, &DecodeLimits::default())
        .1
        .expect_err("block accepted")
}

fn strings<'a>(entries: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<(String, String)> {
    entries
        .map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect()
}

fn decoder_table(decoder: &Decoder) -> Vec<(String, String)> {
    strings(decoder.dynamic_table())
}

fn encoder_table(encoder: &Encoder) -> Vec<(String, String)> {
    strings(encoder.dynamic_table())
}

fn owned(fields: &[(&str, &str)]) -> Vec<(String, String)> {
    fields
        .iter()
        .map(|&(n, v)| (n.to_owned(), v.to_owned()))
        .collect()
}

fn names_values(decoded: &Decoded) -> Vec<(String, String)> {
    decoded
        .iter()
        .map(|(n, v, _)| (n.clone(), v.clone()))
        .collect()
}

use Representation::{Indexed, LiteralIndexed, LiteralNeverIndexed, LiteralNotIndexed};

#[test]
fn static_table_is_appendix_a() {
    assert_eq!(STATIC_TABLE[0], (&b":authority"[..], &b""[..]));
    assert_eq!(
        STATIC_TABLE[15],
        (&b"accept-encoding"[..], &b"gzip, deflate"[..])
    );
    assert_eq!(STATIC_TABLE[60], (&b"www-authenticate"[..], &b""[..]));
    assert_eq!(static_field(b":status", b"404"), Some(13));
    assert_eq!(static_field(b":status", b"201"), None);
    assert_eq!(static_name(b":status"), Some(8));
    assert_eq!(static_field(b"age", b""), Some(21));
    assert_eq!(static_name(b"x-unknown"), None);
}

// RFC 7541 C.1.

#[test]
fn c1_integers() {
    for (value, prefix, bytes) in [
        (10, 5, &[0x0a][..]),
        (1337, 5, &[0x1f, 0x9a, 0x0a][..]),
        (42, 8, &[0x2a][..]),
    ] {
        let mut out = Vec::new();
        encode_integer(value, prefix, 0, &mut out);
        assert_eq!(out, bytes, "{value} with a {prefix}-bit prefix");
        let mut pos = 0;
        assert_eq!(decode_integer(bytes, &mut pos, prefix), Ok(value));
        assert_eq!(pos, bytes.len());
    }
    // The bits above the prefix are not part of the value.
    let mut pos = 0;
    assert_eq!(decode_integer(&[0xea], &mut pos, 5), Ok(10));
}

#[test]
fn integer_limits() {
    for prefix in [4, 5, 6, 7] {
        let mut out = Vec::new();
        encode_integer(u32::MAX as usize, prefix, 0, &mut out);
        let mut pos = 0;
        assert_eq!(
            decode_integer(&out, &mut pos, prefix),
            Ok(u32::MAX as usize)
        );
        let mut out = Vec::new();
        encode_integer(u32::MAX as usize + 1, prefix, 0, &mut out);
        assert_eq!(
            decode_integer(&out, &mut 0, prefix),
            Err(HpackError::IntegerOverflow)
        );
    }
    // Five continuation bytes are allowed, even padded with zeros; six are not.
    assert_eq!(
        decode_integer(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x00], &mut 0, 5),
        Ok(31)
    );
    assert_eq!(
        decode_integer(&[0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00], &mut 0, 5),
        Err(HpackError::IntegerOverflow)
    );
    assert_eq!(
        decode_integer(&[0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], &mut 0, 5),
        Err(HpackError::IntegerOverflow)
    );
    assert_eq!(
        decode_integer(&[0x1f], &mut 0, 5),
        Err(HpackError::TruncatedInteger)
    );
    assert_eq!(
        decode_integer(&[0x1f, 0x9a], &mut 0, 5),
        Err(HpackError::TruncatedInteger)
    );
    assert_eq!(
        decode_integer(&[], &mut 0, 5),
        Err(HpackError::TruncatedInteger)
    );
}

// RFC 7541 C.2: each block on its own, with an empty table.

#[test]
fn c2_field_representations() {
    let mut d = Decoder::new(4096);
    let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
    assert_eq!(
        decode(&mut d, &block),
        [("custom-key".into(), "custom-header".into(), LiteralIndexed)]
    );
    assert_eq!(decoder_table(&d), owned(&[("custom-key", "custom-header")]));
    assert_eq!(d.dynamic_table_size(), 55);

    let mut d = Decoder::new(4096);
    let block = hex("040c 2f73 616d 706c 652f 7061 7468");
    assert_eq!(
        decode(&mut d, &block),
        [(":path".into(), "/sample/path".into(), LiteralNotIndexed)]
    );
    assert_eq!(d.dynamic_table_size(), 0);

    let mut d = Decoder::new(4096);
    let block = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
    assert_eq!(
        decode(&mut d, &block),
        [("password".into(), "secret".into(), LiteralNeverIndexed)]
    );
    assert_eq!(d.dynamic_table_size(), 0);

    let mut d = Decoder::new(4096);
    assert_eq!(
        decode(&mut d, &[0x82]),
        [(":method".into(), "GET".into(), Indexed)]
    );
    assert_eq!(d.dynamic_table_size(), 0);
}

/// One request or response of C.3 to C.6: the block, the fields, and the
/// dynamic table after it with its size.
struct Step {
    block: &'static str,
    fields: &'static [(&'static str, &'static str)],
    table: &'static [(&'static str, &'static str)],
    size: usize,
}

const REQUEST_1: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
];
const REQUEST_2: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "http"),
    (":path", "/"),
    (":authority", "www.example.com"),
    ("cache-control", "no-cache"),
];
const REQUEST_3: &[(&str, &str)] = &[
    (":method", "GET"),
    (":scheme", "https"),
    (":path", "/index.html"),
    (":authority", "www.example.com"),
    ("custom-key", "custom-value"),
];
const REQUEST_TABLES: [&[(&str, &str)]; 3] = [
    &[(":authority", "www.example.com")],
    &[
        ("cache-control", "no-cache"),
        (":authority", "www.example.com"),
    ],
    &[
        ("custom-key", "custom-value"),
        ("cache-control", "no-cache"),
        (":authority", "www.example.com"),
    ],
];

const C3: [Step; 3] = [
    Step {
        block: "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
        fields: REQUEST_1,
        table: REQUEST_TABLES[0],
        size: 57,
    },
    Step {
        block: "8286 84be 5808 6e6f 2d63 6163 6865",
        fields: REQUEST_2,
        table: REQUEST_TABLES[1],
        size: 110,
    },
    Step {
        block: "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        fields: REQUEST_3,
        table: REQUEST_TABLES[2],
        size: 164,
    },
];

const C4: [Step; 3] = [
    Step {
        block: "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
        fields: REQUEST_1,
        table: REQUEST_TABLES[0],
        size: 57,
    },
    Step {
        block: "8286 84be 5886 a8eb 1064 9cbf",
        fields: REQUEST_2,
        table: REQUEST_TABLES[1],
        size: 110,
    },
    Step {
        block: "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        fields: REQUEST_3,
        table: REQUEST_TABLES[2],
        size: 164,
    },
];

const RESPONSE_1: &[(&str, &str)] = &[
    (":status", "302"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESPONSE_2: &[(&str, &str)] = &[
    (":status", "307"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
    ("location", "https://www.example.com"),
];
const RESPONSE_3: &[(&str, &str)] = &[
    (":status", "200"),
    ("cache-control", "private"),
    ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
    ("location", "https://www.example.com"),
    ("content-encoding", "gzip"),
    (
        "set-cookie",
        "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
    ),
];
const RESPONSE_TABLES: [&[(&str, &str)]; 3] = [
    &[
        ("location", "https://www.example.com"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("cache-control", "private"),
        (":status", "302"),
    ],
    &[
        (":status", "307"),
        ("location", "https://www.example.com"),
        ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
        ("cache-control", "private"),
    ],
    &[
        (
            "set-cookie",
            "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
        ),
        ("content-encoding", "gzip"),
        ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
    ],
];

const C5: [Step; 3] = [
    Step {
        block: "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
                2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
                6c65 2e63 6f6d",
        fields: RESPONSE_1,
        table: RESPONSE_TABLES[0],
        size: 222,
    },
    Step {
        block: "4803 3330 37c1 c0bf",
        fields: RESPONSE_2,
        table: RESPONSE_TABLES[1],
        size: 222,
    },
    Step {
        block: "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
                54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
                5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
                3d31",
        fields: RESPONSE_3,
        table: RESPONSE_TABLES[2],
        size: 215,
    },
];

const C6: [Step; 3] = [
    Step {
        block: "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
                2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        fields: RESPONSE_1,
        table: RESPONSE_TABLES[0],
        size: 222,
    },
    Step {
        block: "4883 640e ffc1 c0bf",
        fields: RESPONSE_2,
        table: RESPONSE_TABLES[1],
        size: 222,
    },
    Step {
        block: "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
                77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
                9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        fields: RESPONSE_3,
        table: RESPONSE_TABLES[2],
        size: 215,
    },
];

fn run_steps(steps: &[Step], table_size: usize) {
    let mut d = Decoder::new(table_size);
    for (i, step) in steps.iter().enumerate() {
        let decoded = decode(&mut d, &hex(step.block));
        assert_eq!(names_values(&decoded), owned(step.fields), "step {i}");
        assert_eq!(decoder_table(&d), owned(step.table), "step {i}");
        assert_eq!(d.dynamic_table_size(), step.size, "step {i}");
    }
}

#[test]
fn c3_requests_without_huffman() {
    run_steps(&C3, 4096);
}

#[test]
fn c4_requests_with_huffman() {
    run_steps(&C4, 4096);
}

#[test]
fn c5_responses_without_huffman() {
    run_steps(&C5, 256);
}

#[test]
fn c6_responses_with_huffman() {
    run_steps(&C6, 256);
}

fn fields<'a>(list: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = Field<'a>> {
    list.iter()
        .map(|&(n, v)| Field::new(n.as_bytes(), v.as_bytes()))
}

#[test]
fn encoder_writes_c4_byte_for_byte() {
    // The RFC's encoder indexes every field it does not find whole and
    // Huffman-codes every string: what this encoder chooses for requests.
    let mut e = Encoder::new();
    for (i, step) in C4.iter().enumerate() {
        let mut out = Vec::new();
        e.encode(fields(step.fields), &mut out);
        assert_eq!(out, hex(step.block), "request {i}");
        assert_eq!(encoder_table(&e), owned(step.table), "request {i}");
        assert_eq!(e.dynamic_table_size(), step.size, "request {i}");
    }
}

#[test]
fn encoder_and_decoder_tables_stay_in_step_on_c6_responses() {
    let mut e = Encoder::new();
    e.set_max_table_size(256);
    let mut d = Decoder::new(256);
    for (i, step) in C6.iter().enumerate() {
        let mut out = Vec::new();
        e.encode(fields(step.fields), &mut out);
        if i == 0 {
            // 256 = 31 + 225: the size update that starts the first block.
            assert_eq!(out[..3], [0x3f, 0xe1, 0x01]);
        }
        let decoded = decode(&mut d, &out);
        assert_eq!(names_values(&decoded), owned(step.fields), "response {i}");
        assert_eq!(decoder_table(&d), encoder_table(&e), "response {i}");
        assert_eq!(
            d.dynamic_table_size(),
            e.dynamic_table_size(),
            "response {i}"
        );
        // set-cookie is never indexed, and location never enters the table.
        assert!(decoded
            .iter()
            .all(|(n, _, how)| (n == "set-cookie") == (*how == LiteralNeverIndexed)));
        assert!(decoder_table(&d).iter().all(|(n, _)| n != "location"));
    }
}

#[test]
fn sensitive_fields_are_never_indexed() {
    let long_cookie = "session=0123456789abcdef0123";
    let list = [
        Field::new(b"authorization", b"Basic dXNlcjpwYXNz"),
        Field::new(b"proxy-authorization", b"Basic dXNlcjpwYXNz"),
        Field::new(b"cookie", b"id=42"),
        Field::new(b"cookie", long_cookie.as_bytes()),
        Field::new(b"set-cookie", b"a=b"),
        Field::never_indexed(b"x-api-key", b"k"),
        Field::never_indexed(b":method", b"GET"),
        Field::new(b"x-api-key", b"k"),
    ];
    let mut e = Encoder::new();
    let mut out = Vec::new();
    // Twice, so that anything indexed the first time would come back indexed.
    e.encode(list, &mut out);
    e.encode(list, &mut out);
    let decoded = decode(&mut Decoder::new(4096), &out);
    let hows: Vec<Representation> = decoded.iter().map(|f| f.2).collect();
    let never = LiteralNeverIndexed;
    assert_eq!(
        hows,
        [
            never,
            never,
            never,
            LiteralIndexed,
            never,
            never,
            never,
            LiteralIndexed,
            never,
            never,
            never,
            Indexed,
            never,
            never,
            never,
            Indexed,
        ]
    );
    assert_eq!(
        encoder_table(&e),
        owned(&[("x-api-key", "k"), ("cookie", long_cookie)])
    );
}

#[test]
fn strings_are_huffman_coded_only_when_shorter() {
    let mut out = Vec::new();
    encode_without_table([Field::new(b"x-a", b"aaaaaaaa")], &mut out);
    // 0x00, then the name "x-a" raw (Huffman is 3 bytes too), then the
    // value in 5 bytes with the H bit set.
    assert_eq!(out[..5], [0x00, 0x03, b'x', b'-', b'a']);
    assert_eq!(out[5], 0x85);
    let mut out = Vec::new();
    encode_without_table([Field::new(b"x-b", b"\x00\x01")], &mut out);
    assert_eq!(out, [0x00, 0x03, b'x', b'-', b'b', 0x02, 0x00, 0x01]);
}

#[test]
fn encode_without_table_needs_no_table() {
    let list = [
        Field::new(b":status", b"200"),
        Field::new(b":status", b"201"),
        Field::new(b"content-type", b"text/html; charset=utf-8"),
        Field::new(b"x-custom", b"value"),
        Field::new(b"set-cookie", b"a=b"),
        Field::never_indexed(b"x-secret", b"s"),
    ];
    let mut block = Vec::new();
    encode_without_table(list, &mut block);
    assert_eq!(block[0], 0x88);
    // The same bytes decode the same on a connection whose table is full and
    // on one whose table is empty, and leave both tables as they were.
    let mut busy = Decoder::new(4096);
    decode(&mut busy, &hex(C3[0].block));
    let before = decoder_table(&busy);
    for d in [&mut busy, &mut Decoder::new(4096)] {
        let decoded = decode(d, &block);
        let expected = strings(list.iter().map(|f| (f.name, f.value)));
        assert_eq!(names_values(&decoded), expected);
        assert!(decoded.iter().all(|f| f.2 != LiteralIndexed));
        assert_eq!(decoded[4].2, LiteralNeverIndexed);
        assert_eq!(decoded[5].2, LiteralNeverIndexed);
    }
    assert_eq!(decoder_table(&busy), before);

    // A connection with a size update waiting sends it before such a block.
    let mut e = Encoder::new();
    e.set_max_table_size(0);
    let mut out = Vec::new();
    e.begin_block(&mut out);
    assert_eq!(out, [0x20]);
    let mut out = Vec::new();
    e.begin_block(&mut out);
    assert!(out.is_empty());
}

#[test]
fn encoder_signals_table_size_changes() {
    let mut e = Encoder::new();
    let mut out = Vec::new();
    e.set_max_table_size(4096);
    e.set_max_table_size(65536);
    e.encode([Field::new(b":status", b"200")], &mut out);
    assert_eq!(out, [0x88], "no change, no update");

    // 100 = 31 + 69.
    e.set_max_table_size(100);
    let mut out = Vec::new();
    e.encode([], &mut out);
    assert_eq!(out, [0x3f, 0x45]);

    // Lowered and raised again before a block: the lowest, then the last.
    e.encode([Field::new(b"x-a", b"1")], &mut Vec::new());
    assert_eq!(e.dynamic_table_size(), 36);
    e.set_max_table_size(0);
    e.set_max_table_size(8192);
    assert_eq!(e.dynamic_table_size(), 0);
    let mut out = Vec::new();
    e.encode([], &mut out);
    assert_eq!(out, [0x20, 0x3f, 0xe1, 0x1f]);

    // The decoder follows: its table ends empty as the encoder's did.
    let mut d = Decoder::new(4096);
    let mut e = Encoder::new();
    let mut out = Vec::new();
    e.encode([Field::new(b"x-a", b"1")], &mut out);
    decode(&mut d, &out);
    e.set_max_table_size(0);
    e.set_max_table_size(4096);
    let mut out = Vec::new();
    e.encode([Field::new(b"x-b", b"2")], &mut out);
    decode(&mut d, &out);
    assert_eq!(decoder_table(&d), encoder_table(&e));
    assert_eq!(decoder_table(&d), owned(&[("x-b", "2")]));
}

#[test]
fn size_updates_evict() {
    let mut d = Decoder::new(4096);
    for step in &C3 {
        decode(&mut d, &hex(step.block));
    }
    // 60: room for the newest entry (54) only.
    decode(&mut d, &[0x3f, 0x1d]);
    assert_eq!(decoder_table(&d), owned(&[("custom-key", "custom-value")]));
    assert_eq!(d.dynamic_table_size(), 54);
    // Two updates at the start of one block are allowed: 0 then 4096.
    decode(&mut d, &[0x20, 0x3f, 0xe1, 0x1f, 0x82]);
    assert_eq!(d.dynamic_table_size(), 0);
}

#[test]
fn size_update_errors() {
    let mut d = Decoder::new(256);
    // 257 = 31 + 226.
    assert_eq!(
        decode_err(&mut d, &[0x3f, 0xe2, 0x01]),
        HpackError::SizeUpdateTooLarge {
            size: 257,
            max: 256
        }
    );
    let mut d = Decoder::new(4096);
    assert_eq!(
        decode_err(&mut d, &[0x82, 0x20]),
        HpackError::SizeUpdateAfterField
    );

    // A lowered limit must be answered at the start of the next block.
    let mut d = Decoder::new(4096);
    d.set_max_table_size(100);
    assert_eq!(
        decode_err(&mut d, &[0x82]),
        HpackError::MissingSizeUpdate { max: 100 }
    );
    let mut d = Decoder::new(4096);
    d.set_max_table_size(100);
    assert_eq!(
        decode_err(&mut d, &[]),
        HpackError::MissingSizeUpdate { max: 100 }
    );
    let mut d = Decoder::new(4096);
    d.set_max_table_size(100);
    assert_eq!(
        decode_err(&mut d, &[0x3f, 0x46]),
        HpackError::SizeUpdateTooLarge {
            size: 101,
            max: 100
        }
    );
    let mut d = Decoder::new(4096);
    d.set_max_table_size(100);
    decode(&mut d, &[0x3f, 0x45, 0x82]);
    decode(&mut d, &[0x82]);
    // A raised limit needs no update, and allows one up to it.
    d.set_max_table_size(8192);
    decode(&mut d, &[0x82]);
    decode(&mut d, &[0x3f, 0xe1, 0x3f, 0x82]);
}

#[test]
fn malformed_blocks_are_refused() {
    let cases: &[(&[u8], HpackError)] = &[
        (&[0x80], HpackError::IndexZero),
        (
            &[0xbe],
            HpackError::IndexOutOfRange {
                index: 62,
                entries: 61,
            },
        ),
        (
            &[0xff, 0x80, 0x01],
            HpackError::IndexOutOfRange {
                index: 255,
                entries: 61,
            },
        ),
        // A literal whose name index is past the tables.
        (
            &[0x7e, 0x01, b'a'],
            HpackError::IndexOutOfRange {
                index: 62,
                entries: 61,
            },
        ),
        (
            &[0x1f, 0x2f, 0x01, b'a'],
            HpackError::IndexOutOfRange {
                index: 62,
                entries: 61,
            },
        ),
        (&[0xff], HpackError::TruncatedInteger),
        (&[0x40], HpackError::TruncatedInteger),
        (&[0x41], HpackError::TruncatedInteger),
        (&[0x40, 0x01, b'a'], HpackError::TruncatedInteger),
        (
            &[0x40, 0x05, b'a'],
            HpackError::TruncatedString {
                len: 5,
                available: 1,
            },
        ),
        (
            &[0x41, 0x02, b'a'],
            HpackError::TruncatedString {
                len: 2,
                available: 1,
            },
        ),
        (
            &[0x00, 0x7f, 0x80, 0x01],
            HpackError::TruncatedString {
                len: 255,
                available: 0,
            },
        ),
        (
            &[0x00, 0x7f, 0xff, 0xff, 0xff, 0xff, 0x7f],
            HpackError::IntegerOverflow,
        ),
        // Huffman: EOS, 8 bits of padding, padding with a zero.
        (
            &[0x41, 0x84, 0xff, 0xff, 0xff, 0xff],
            HpackError::HuffmanEos,
        ),
        (&[0x41, 0x81, 0xff], HpackError::HuffmanPaddingTooLong),
        (&[0x41, 0x81, 0x1e], HpackError::HuffmanPaddingNotOnes),
        (&[0x40, 0x81, 0x1e, 0x00], HpackError::HuffmanPaddingNotOnes),
    ];
    for (block, error) in cases {
        let mut d = Decoder::new(4096);
        assert_eq!(decode_err(&mut d, block), *error, "{block:02x?}");
        assert!(error.is_connection_error());
        assert!(!error.to_string().is_empty());
        // The compression context is gone: a good block is refused too.
        assert_eq!(decode_err(&mut d, &[0x82]), *error);
    }
}

#[test]
fn too_many_fields() {
    let limits = DecodeLimits {
        max_header_list_size: 4096,
        max_fields: 2,
    };
    let mut d = Decoder::new(4096);
    // Three fields; the third is a literal that enters the table.
    let mut block = vec![0x82, 0x84];
    block.extend(hex(
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
    ));
    let (fields, result) = decode_with(&mut d, &block, &limits);
    assert_eq!(result, Err(HpackError::TooManyFields { limit: 2 }));
    assert!(!result.unwrap_err().is_connection_error());
    assert_eq!(fields.len(), 2);
    // The table kept in step, and the decoder goes on.
    assert_eq!(decoder_table(&d), owned(&[("custom-key", "custom-header")]));
    let (fields, result) = decode_with(&mut d, &[0xbe], &limits);
    assert_eq!(result, Ok(()));
    assert_eq!(
        names_values(&fields),
        owned(&[("custom-key", "custom-header")])
    );
}

#[test]
fn header_list_size_is_bounded() {
    // :method GET is 32 + 7 + 3 = 42.
    let limits = |max| DecodeLimits {
        max_header_list_size: max,
        max_fields: 100,
    };
    let mut d = Decoder::new(4096);
    let (fields, result) = decode_with(&mut d, &[0x82, 0x82], &limits(84));
    assert_eq!((fields.len(), result), (2, Ok(())));
    let (fields, result) = decode_with(&mut d, &[0x82, 0x82], &limits(83));
    assert_eq!(fields.len(), 1);
    assert_eq!(result, Err(HpackError::HeaderListTooLarge { limit: 83 }));

    // A literal: x-a: 1 is 32 + 3 + 1 = 36; with :method GET, 78.
    let block = [0x82, 0x00, 0x03, b'x', b'-', b'a', 0x01, b'1'];
    let (fields, result) = decode_with(&mut d, &block, &limits(78));
    assert_eq!((fields.len(), result), (2, Ok(())));
    let (fields, result) = decode_with(&mut d, &block, &limits(77));
    assert_eq!(fields.len(), 1);
    assert_eq!(result, Err(HpackError::HeaderListTooLarge { limit: 77 }));
    // A name that alone passes the limit.
    let (fields, result) = decode_with(&mut d, &block, &limits(75));
    assert_eq!(fields.len(), 1);
    assert_eq!(result, Err(HpackError::HeaderListTooLarge { limit: 75 }));
}

#[test]
fn strings_over_the_budget_are_not_decoded() {
    let limits = DecodeLimits {
        max_header_list_size: 100,
        max_fields: 100,
    };
    // A Huffman value of 400 bytes, every one of them 0xff: decoded, it
    // would be refused for EOS; but it decodes to at least 107 bytes, over
    // the budget, so it is not decoded at all.
    let mut block = vec![0x01];
    encode_integer(400, 7, 0x80, &mut block);
    block.extend([0xff; 400]);
    let mut d = Decoder::new(4096);
    let (fields, result) = decode_with(&mut d, &block, &limits);
    assert!(fields.is_empty());
    assert_eq!(result, Err(HpackError::HeaderListTooLarge { limit: 100 }));
    // The same in a name.
    let mut block = vec![0x00];
    encode_integer(400, 7, 0x80, &mut block);
    block.extend([0xff; 400]);
    block.extend([0x01, b'v']);
    let (_, result) = decode_with(&mut Decoder::new(4096), &block, &limits);
    assert_eq!(result, Err(HpackError::HeaderListTooLarge { limit: 100 }));
    // Within the budget, the same bytes are decoded and refused.
    let (_, result) = decode_with(&mut Decoder::new(4096), &block, &DecodeLimits::default());
    assert_eq!(result, Err(HpackError::HuffmanEos));

    // A Huffman string whose length does not show it is over the budget
    // is decoded no further than the budget: 70 'a's in 44 bytes, where
    // 100 - 32 - 5 = 63 bytes are left for the value.
    let mut coded = Vec::new();
    huffman::encode(&[b'a'; 70], &mut coded);
    // :path (index 4), not indexed.
    let mut block = vec![0x04, 0x80 | coded.len() as u8];
    block.extend(&coded);
    let (fields, result) = decode_with(&mut Decoder::new(4096), &block, &limits);
    assert!(fields.is_empty());
    assert_eq!(result, Err(HpackError::HeaderListTooLarge { limit: 100 }));
}

#[test]
fn refused_blocks_keep_the_table_in_step() {
    let limits = DecodeLimits {
        max_header_list_size: 60,
        max_fields: 100,
    };
    let mut e = Encoder::new();
    let mut d = Decoder::new(4096);
    let list = [
        Field::new(b"x-first", b"one"),
        Field::new(b"x-long", &[b'v'; 40]),
        Field::new(b"x-third", b"three"),
    ];
    let mut out = Vec::new();
    e.encode(list, &mut out);
    let (fields, result) = decode_with(&mut d, &out, &limits);
    assert_eq!(result, Err(HpackError::HeaderListTooLarge { limit: 60 }));
    assert_eq!(names_values(&fields), owned(&[("x-first", "one")]));
    // Every literal entered both tables, emitted or not.
    assert_eq!(decoder_table(&d), encoder_table(&e));
    assert_eq!(d.dynamic_table().count(), 3);
    // The next block, all indices, decodes.
    let mut out = Vec::new();
    e.encode(list, &mut out);
    assert_eq!(out, [0xc0, 0xbf, 0xbe]);
    let (fields, result) = decode_with(&mut d, &out, &DecodeLimits::default());
    assert_eq!(result, Ok(()));
    assert_eq!(fields.len(), 3);
}

#[test]
fn an_entry_larger_than_the_table_empties_it() {
    let mut d = Decoder::new(64);
    decode(
        &mut d,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    );
    assert_eq!(d.dynamic_table_size(), 55);
    // 32 + 10 + 23 = 65 > 64.
    let mut block = hex("400a 6375 7374 6f6d 2d6b 6579");
    block.push(23);
    block.extend([b'v'; 23]);
    let decoded = decode(&mut d, &block);
    assert_eq!(decoded[0].1.len(), 23);
    assert_eq!(d.dynamic_table_size(), 0);
    // Even when the list limit refused it and it was never read.
    let mut d = Decoder::new(64);
    decode(
        &mut d,
        &hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572"),
    );
    let small = DecodeLimits {
        max_header_list_size: 50,
        max_fields: 10,
    };
    let (_, result) = decode_with(&mut d, &block, &small);
    assert_eq!(result, Err(HpackError::HeaderListTooLarge { limit: 50 }));
    assert_eq!(d.dynamic_table_size(), 0);
}

#[test]
fn a_name_evicted_by_its_own_entry_is_kept() {
    // RFC 7541 §4.4: the entry the new one names may be evicted to make
    // room for it; the new entry still has that name.
    let mut d = Decoder::new(100);
    let mut block = vec![0x40, 10];
    block.extend(b"x-abcdefgh");
    block.push(20);
    block.extend([b'1'; 20]);
    decode(&mut d, &block);
    assert_eq!(d.dynamic_table_size(), 62);
    // Name index 62, value of 30 bytes: 72 + 62 > 100, so the old entry goes.
    let mut block = Vec::new();
    encode_integer(62, 6, 0x40, &mut block);
    block.push(30);
    block.extend([b'2'; 30]);
    let decoded = decode(&mut d, &block);
    assert_eq!(decoded[0].0, "x-abcdefgh");
    assert_eq!(
        decoder_table(&d),
        [("x-abcdefgh".to_owned(), "2".repeat(30))]
    );
    assert_eq!(d.dynamic_table_size(), 72);
}

fn random_field(rng: &mut Rng) -> (Vec<u8>, Vec<u8>, bool) {
    const NAMES: &[&str] = &[
        ":status",
        ":path",
        ":method",
        ":authority",
        "content-type",
        "cache-control",
        "cookie",
        "set-cookie",
        "authorization",
        "date",
        "location",
        "x-request-id",
        "x-custom-header-with-a-long-name",
        "",
    ];
    const VALUES: &[&str] = &[
        "200",
        "GET",
        "/",
        "text/html",
        "no-cache",
        "gzip, deflate",
        "",
    ];
    let name = match rng.below(4) {
        0 => (0..rng.below(12)).map(|_| rng.next() as u8).collect(),
        _ => NAMES[rng.below(NAMES.len())].as_bytes().to_vec(),
    };
    let value = match rng.below(4) {
        0 => VALUES[rng.below(VALUES.len())].as_bytes().to_vec(),
        1 => (0..rng.below(300)).map(|_| rng.next() as u8).collect(),
        _ => (0..rng.below(40))
            .map(|_| b'a' + rng.below(26) as u8)
            .collect(),
    };
    (name, value, rng.below(8) == 0)
}

#[test]
fn random_header_lists_round_trip() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for connection in 0..40 {
        let mut e = Encoder::new();
        let mut d = Decoder::new(4096);
        // Some connections change the table size as they go.
        let sizes = [4096, 0, 100, 256, 4096, 65536];
        for block_no in 0..25 {
            if connection % 3 == 0 && rng.below(5) == 0 {
                e.set_max_table_size(sizes[rng.below(sizes.len())]);
            }
            let list: Vec<_> = (0..rng.below(20)).map(|_| random_field(&mut rng)).collect();
            let fields: Vec<Field<'_>> = list
                .iter()
                .map(|(n, v, never)| Field {
                    name: n,
                    value: v,
                    never_indexed: *never,
                })
                .collect();
            let mut out = Vec::new();
            if block_no % 4 == 3 {
                e.begin_block(&mut out);
                encode_without_table(fields.iter().copied(), &mut out);
            } else {
                e.encode(fields.iter().copied(), &mut out);
            }
            let mut got = Vec::new();
            d.decode(&out, &DecodeLimits::default(), |n, v, how| {
                got.push((n.to_vec(), v.to_vec(), how.is_never_indexed()))
            })
            .unwrap_or_else(|err| panic!("connection {connection} block {block_no}: {err}"));
            let want: Vec<_> = fields
                .iter()
                .map(|f| {
                    (
                        f.name.to_vec(),
                        f.value.to_vec(),
                        f.never_indexed || is_sensitive(f.name, f.value),
                    )
                })
                .collect();
            assert_eq!(got, want, "connection {connection} block {block_no}");
            assert_eq!(decoder_table(&d), encoder_table(&e));
            assert_eq!(d.dynamic_table_size(), e.dynamic_table_size());
            assert!(e.dynamic_table_size() <= MAX_ENCODER_TABLE_SIZE);
        }
    }
}

#[test]
fn errors_say_what_went_wrong() {
    assert_eq!(
        HpackError::IndexOutOfRange {
            index: 70,
            entries: 64
        }
        .to_string(),
        "index 70 past the 64 entries of the static and dynamic tables"
    );
    assert_eq!(
        HpackError::TruncatedString {
            len: 5,
            available: 1
        }
        .to_string(),
        "string of 5 bytes with 1 left in the header block"
    );
    assert_eq!(
        HpackError::HeaderListTooLarge { limit: 100 }.to_string(),
        "header list larger than 100 bytes"
    );
}
