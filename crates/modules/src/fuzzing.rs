//! What the `module_inputs` fuzz target checks (fuzz/fuzz_targets/module_inputs.rs), here so
//! that the seed corpus is replayed by `cargo test` too (tests/fuzz_corpus.rs): every text
//! the modules read from a request or a configuration, never a panic, and what each reader
//! promises of what it gives back.
//!
//! The first byte chooses the reader; the rest is its input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::access::Source;
use crate::basic_auth::{parse_basic, MAX_AUTHORIZATION_LEN};
use crate::compress::{choose_coding, compress_whole, CodingSet, Level, MediaRange};
use crate::headers::Expires;
use crate::rewrite::{Action, Outcome, Rule, Rules};

/// Runs one input through the reader its first byte names.
pub fn inputs(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 7 {
        0 => authorization(rest),
        1 => address(rest),
        2 => rewrite(rest),
        3 => htpasswd(rest),
        4 => media_and_expires(rest),
        5 => accept_encoding(rest),
        _ => round_trip(rest),
    }
}

fn authorization(value: &[u8]) {
    if let Some(credentials) = parse_basic(value) {
        assert!(value.len() <= MAX_AUTHORIZATION_LEN);
        assert!(!credentials.user().contains(&b':'));
        // Credentials never carry the control characters RFC 7617 forbids: they go to logs.
        for part in [credentials.user(), credentials.password()] {
            assert!(part.iter().all(|&b| b >= 0x20 && b != 0x7f));
        }
    }
}

fn address(text: &[u8]) {
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    if let Ok((source, _)) = Source::parse(text) {
        for client in [
            IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped()),
        ] {
            let _ = source.contains(client);
        }
        // What it writes reads back as the same source.
        let written = source.to_string();
        assert_eq!(
            Source::parse(&written).map(|(s, _)| s),
            Ok(source),
            "{written}"
        );
    }
}

/// `pattern NUL replacement NUL path`.
fn rewrite(input: &[u8]) {
    let mut parts = input.splitn(3, |&b| b == 0);
    let (Some(pattern), Some(replacement)) = (parts.next(), parts.next()) else {
        return;
    };
    let path = parts.next().unwrap_or(b"/");
    let (Ok(pattern), Ok(replacement)) = (
        std::str::from_utf8(pattern),
        std::str::from_utf8(replacement),
    ) else {
        return;
    };
    // Patterns are the configuration's, and short; a long one only costs the fuzzer time.
    if pattern.len() > 64 {
        return;
    }
    for action in [Action::Rewrite, Action::Redirect(302)] {
        let Ok(rule) = Rule::new(pattern, replacement, action) else {
            continue;
        };
        let rules = Rules::new(vec![rule]);
        match rules.apply(path, Some("q=1")) {
            Ok(Outcome::Rewritten { path, query }) => {
                assert_eq!(path.first(), Some(&b'/'));
                assert!(!path.iter().any(|&b| matches!(b, 0 | b'\r' | b'\n')));
                if let Some(query) = query {
                    assert!(!query.bytes().any(|b| matches!(b, 0 | b'\r' | b'\n')));
                }
            }
            Ok(Outcome::Redirect { location, .. }) => {
                assert!(!location.is_empty());
                assert!(
                    location.bytes().all(|b| (0x21..0x7f).contains(&b)),
                    "{location:?}"
                );
            }
            Ok(Outcome::Unchanged) | Err(_) => {}
        }
    }
}

fn htpasswd(text: &[u8]) {
    if let Err((line, _)) = crate::basic_auth::htpasswd::parse(text) {
        assert!(line >= 1 && line <= text.split(|&b| b == b'\n').count());
    }
}

fn media_and_expires(text: &[u8]) {
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    if let Ok(range) = MediaRange::parse(text) {
        let _ = range.matches(text.as_bytes());
        assert_eq!(MediaRange::parse(&range.to_string()).ok(), Some(range));
    }
    let _ = Expires::parse(text);
}

fn accept_encoding(value: &[u8]) {
    let accept = fastpath_http::parse_accept_encoding(Some(value));
    for q in [accept.gzip, accept.br, accept.zstd] {
        assert!((0.0..=1.0).contains(&q), "{q}");
    }
    if let Some(coding) = choose_coding(&accept, CodingSet::ALL) {
        assert!(coding.q(&accept) > 0.0);
    }
}

/// Every coding gives back what it was given.
fn round_trip(body: &[u8]) {
    use std::io::Read;
    for level in [
        Level::new(crate::compress::Coding::Gzip, 1),
        Level::new(crate::compress::Coding::Brotli, 1),
        Level::new(crate::compress::Coding::Zstd, 1),
    ] {
        let level = level.expect("a valid level");
        let packed = compress_whole(level, body);
        let mut unpacked = Vec::new();
        match level.coding() {
            crate::compress::Coding::Gzip => {
                flate2::read::GzDecoder::new(&packed[..])
                    .read_to_end(&mut unpacked)
                    .expect("gzip decodes");
            }
            crate::compress::Coding::Brotli => {
                brotli::Decompressor::new(&packed[..], 4096)
                    .read_to_end(&mut unpacked)
                    .expect("brotli decodes");
            }
            crate::compress::Coding::Zstd => {
                unpacked = zstd::decode_all(&packed[..]).expect("zstd decodes");
            }
        }
        assert_eq!(unpacked, body);
    }
}
