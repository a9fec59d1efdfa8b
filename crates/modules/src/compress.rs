//! On-the-fly compression: which coding a client gets, which responses are
//! compressed, the ETag of a compressed variant, and the compressors.
//!
//! Three codings are offered: gzip (flate2), br (brotli) and zstd (zstd). The
//! server's output filter asks [`should_compress`] about a response, picks the
//! coding with [`choose_coding`], renames its ETag with [`variant_etag`], then
//! either compresses a cached body at once with [`compress_whole`] or feeds a
//! body that arrives in pieces to an [`Encoder`].
//!
//! ```
//! use fastpath_http::parse_accept_encoding;
//! use fastpath_modules::compress::{
//!     choose_coding, compress_whole, should_compress, variant_etag, Coding, Encoder, Policy,
//! };
//!
//! let policy = Policy::default();
//! let html = Some(&b"text/html; charset=utf-8"[..]);
//! assert!(should_compress(html, Some(4000), None, 200, None, &policy));
//!
//! let accept = parse_accept_encoding(Some(b"gzip, br;q=0.9"));
//! let coding = choose_coding(&accept, policy.enabled).expect("gzip is acceptable");
//! assert_eq!(coding.token(), "gzip");
//! assert_eq!(variant_etag(b"\"5f3a\"", coding).unwrap(), b"\"5f3a-gzip\"");
//!
//! let body = b"<li>an item of a long list</li>\n".repeat(125);
//! let cached = compress_whole(policy.level(coding), &body);
//! assert!(cached.len() < body.len() / 10);
//!
//! let mut encoder = Encoder::new(policy.level(Coding::Brotli));
//! let mut out = Vec::new();
//! for piece in body.chunks(1000) {
//!     encoder.push(piece, &mut out);
//! }
//! encoder.finish(&mut out);
//! assert!(out.len() < body.len() / 10);
//! ```
#![warn(missing_docs)]

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

use brotli::enc::encode::{
    BrotliEncoderDestroyInstance, BrotliEncoderOperation, BrotliEncoderParameter,
    BrotliEncoderStateStruct,
};
use brotli::enc::StandardAlloc;
use fastpath_http::AcceptEncoding;
use flate2::{Compress, Crc, FlushCompress, Status};
use zstd::stream::raw::{InBuffer, Operation, OutBuffer};

// ---------------------------------------------------------------------------
// Codings and negotiation
// ---------------------------------------------------------------------------

/// A content coding fastpath can apply on the fly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    /// gzip (RFC 1952), the coding every client knows.
    Gzip,
    /// Brotli (RFC 7932), token `br`.
    Brotli,
    /// Zstandard (RFC 8878; as an HTTP coding, RFC 9659).
    Zstd,
}

impl Coding {
    /// Every coding, in the server's order of preference, used to break ties
    /// between equal q-values: br compresses text best at the levels used on
    /// the fly, zstd comes close for less CPU, and gzip is the fallback that
    /// every client has.
    pub const PREFERENCE: [Coding; 3] = [Coding::Brotli, Coding::Zstd, Coding::Gzip];

    /// The token that names the coding in `Content-Encoding` and
    /// `Accept-Encoding`.
    pub const fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// The coding a token names, case-insensitively (RFC 9110 §8.4.1);
    /// `x-gzip` is gzip, as RFC 9110 §8.4.1.3 asks recipients to treat it.
    pub fn from_token(token: &[u8]) -> Option<Coding> {
        if token.eq_ignore_ascii_case(b"gzip") || token.eq_ignore_ascii_case(b"x-gzip") {
            Some(Coding::Gzip)
        } else if token.eq_ignore_ascii_case(b"br") {
            Some(Coding::Brotli)
        } else if token.eq_ignore_ascii_case(b"zstd") {
            Some(Coding::Zstd)
        } else {
            None
        }
    }

    /// The q-value a client gave this coding.
    pub fn q(self, accept: &AcceptEncoding) -> f32 {
        match self {
            Coding::Gzip => accept.gzip,
            Coding::Brotli => accept.br,
            Coding::Zstd => accept.zstd,
        }
    }

    /// The levels accepted for this coding. gzip has 1 to 9 (0 would store
    /// without compressing); brotli 0 to 11, all of them; zstd 1 to 19, as
    /// 20 and up need a window over the 8 MiB that RFC 9659 lets an HTTP
    /// client refuse, and negative levels trade too much size for speed.
    pub const fn levels(self) -> RangeInclusive<u32> {
        match self {
            Coding::Gzip => 1..=9,
            Coding::Brotli => 0..=11,
            Coding::Zstd => 1..=19,
        }
    }

    /// Its place in tables kept per coding (gzip 0, br 1, zstd 2).
    pub const fn index(self) -> usize {
        match self {
            Coding::Gzip => 0,
            Coding::Brotli => 1,
            Coding::Zstd => 2,
        }
    }
}

impl fmt::Display for Coding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.token())
    }
}

/// A set of codings, such as those a configuration enables.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CodingSet(u8);

impl CodingSet {
    /// No coding.
    pub const EMPTY: CodingSet = CodingSet(0);
    /// gzip, br and zstd.
    pub const ALL: CodingSet = CodingSet(0b111);

    /// The set with `coding` added.
    pub const fn with(self, coding: Coding) -> CodingSet {
        CodingSet(self.0 | 1 << coding.index())
    }

    /// The set with `coding` removed.
    pub const fn without(self, coding: Coding) -> CodingSet {
        CodingSet(self.0 & !(1 << coding.index()))
    }

    /// Whether `coding` is in the set.
    pub const fn contains(self, coding: Coding) -> bool {
        self.0 & 1 << coding.index() != 0
    }

    /// Whether the set has no coding.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The codings in the set, in the server's order of preference.
    pub fn iter(self) -> impl Iterator<Item = Coding> {
        Coding::PREFERENCE
            .into_iter()
            .filter(move |&c| self.contains(c))
    }
}

impl FromIterator<Coding> for CodingSet {
    fn from_iter<I: IntoIterator<Item = Coding>>(iter: I) -> CodingSet {
        iter.into_iter().fold(CodingSet::EMPTY, CodingSet::with)
    }
}

impl fmt::Debug for CodingSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(Coding::token))
            .finish()
    }
}

/// The coding to send a response in, or `None` for no coding.
///
/// The enabled coding with the highest q-value wins; equal q-values go to the
/// server's preference (br, zstd, gzip). `None` when no enabled coding has a
/// q-value above 0, and also when the client gave identity (by name or by `*`)
/// a q-value above the best coding's, as `gzip;q=0.5, identity` prefers no
/// coding; identity that the client did not mention ranks below every coding.
/// When this gives `None` and [`AcceptEncoding::identity_acceptable`] is
/// false, the server chooses between 406 and sending identity anyway
/// (RFC 9110 §12.5.3).
pub fn choose_coding(accept: &AcceptEncoding, enabled: CodingSet) -> Option<Coding> {
    let mut best: Option<(Coding, f32)> = None;
    for coding in enabled.iter() {
        let q = coding.q(accept);
        // `q > 0.0` is false for NaN too: a q-value that is not a number
        // does not make a coding acceptable.
        if q > 0.0 && best.is_none_or(|(_, b)| q > b) {
            best = Some((coding, q));
        }
    }
    let (coding, q) = best?;
    match accept.identity {
        Some(identity) if identity > q => None,
        _ => Some(coding),
    }
}

// ---------------------------------------------------------------------------
// Levels
// ---------------------------------------------------------------------------

/// A compression level checked against the range of its coding, so that the
/// compressors need no error path for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Level {
    coding: Coding,
    value: u32,
}

impl Level {
    /// `value` as a level of `coding`, if [`Coding::levels`] has it. The
    /// value is an `i64` so that whatever integer a configuration holds,
    /// negative ones included, gets a message naming it.
    pub fn new(coding: Coding, value: i64) -> Result<Level, LevelError> {
        let range = coding.levels();
        match u32::try_from(value) {
            Ok(v) if range.contains(&v) => Ok(Level { coding, value: v }),
            _ => Err(LevelError { coding, value }),
        }
    }

    /// The level used unless configured: gzip 6 (zlib's own default, most of
    /// the size of 9 for much less CPU), br 5 (about gzip 6's speed, smaller
    /// output; 10 and 11 are far too slow to run per request), zstd 3 (zstd's
    /// own default).
    pub const fn default_for(coding: Coding) -> Level {
        let value = match coding {
            Coding::Gzip => 6,
            Coding::Brotli => 5,
            Coding::Zstd => 3,
        };
        Level { coding, value }
    }

    /// The coding this level is for.
    pub const fn coding(self) -> Coding {
        self.coding
    }

    /// The level's number.
    pub const fn value(self) -> u32 {
        self.value
    }
}

/// A level outside its coding's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelError {
    /// The coding the level was for.
    pub coding: Coding,
    /// The level given.
    pub value: i64,
}

impl fmt::Display for LevelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let range = self.coding.levels();
        write!(
            f,
            "{} level {} is out of range: {} levels are {} to {}",
            self.coding,
            self.value,
            self.coding,
            range.start(),
            range.end()
        )
    }
}

impl std::error::Error for LevelError {}

// ---------------------------------------------------------------------------
// Which responses are compressed
// ---------------------------------------------------------------------------

/// The media types compressed unless configured: nginx's `gzip_types`
/// default (text/html) and the text formats that make up most of a site's
/// other bytes. `text/javascript` is listed beside `application/javascript`
/// because RFC 9239 made it the type for JavaScript. Images, video and
/// archives are left out: they are compressed already.
pub const DEFAULT_TYPES: &[&str] = &[
    "text/html",
    "text/css",
    "text/plain",
    "text/xml",
    "text/javascript",
    "application/javascript",
    "application/json",
    "application/xml",
    "image/svg+xml",
];

/// Bodies shorter than this are sent as they are unless configured: below a
/// few hundred bytes the coding's framing and the CPU cost more than the
/// bytes saved.
pub const DEFAULT_MIN_LENGTH: u64 = 256;

/// A media type pattern: `type/subtype`, `type/*` or `*/*`, without
/// parameters, kept in lowercase as media types compare case-insensitively
/// (RFC 9110 §8.3.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MediaRange {
    kind: String,
    // `None` for a `type/*` pattern.
    subtype: Option<String>,
}

impl MediaRange {
    /// Reads a pattern such as `text/html`, `text/*` or `*/*`.
    pub fn parse(pattern: &str) -> Result<MediaRange, MediaRangeError> {
        let error = |reason| MediaRangeError {
            pattern: pattern.to_owned(),
            reason,
        };
        if pattern.contains(';') {
            return Err(error("parameters are not matched: give the type alone"));
        }
        let Some((kind, subtype)) = pattern.split_once('/') else {
            return Err(error("expected type/subtype, type/* or */*"));
        };
        if kind == "*" {
            return match subtype {
                "*" => Ok(MediaRange {
                    kind: "*".to_owned(),
                    subtype: None,
                }),
                _ => Err(error("*/subtype is not a media range: use */*")),
            };
        }
        // `*` is a tchar, so `application/*+json` would be a token naming
        // no real type: a `*` only stands for a whole part.
        if kind.contains('*') || (subtype != "*" && subtype.contains('*')) {
            return Err(error("a * stands only for a whole type or subtype"));
        }
        if !is_token(kind) {
            return Err(error("the type is not a token"));
        }
        let subtype = match subtype {
            "*" => None,
            s if is_token(s) => Some(s.to_ascii_lowercase()),
            _ => return Err(error("the subtype is not a token")),
        };
        Ok(MediaRange {
            kind: kind.to_ascii_lowercase(),
            subtype,
        })
    }

    /// Whether a `Content-Type` value is in this range; its parameters are
    /// ignored and its case does not matter.
    pub fn matches(&self, content_type: &[u8]) -> bool {
        let Some((kind, subtype)) = split_media_type(content_type) else {
            return false;
        };
        (self.kind == "*" || kind.eq_ignore_ascii_case(self.kind.as_bytes()))
            && self
                .subtype
                .as_ref()
                .is_none_or(|s| subtype.eq_ignore_ascii_case(s.as_bytes()))
    }
}

impl FromStr for MediaRange {
    type Err = MediaRangeError;

    fn from_str(s: &str) -> Result<MediaRange, MediaRangeError> {
        MediaRange::parse(s)
    }
}

impl fmt::Display for MediaRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let subtype = self.subtype.as_deref().unwrap_or("*");
        write!(f, "{}/{}", self.kind, subtype)
    }
}

/// A media type pattern that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRangeError {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for MediaRangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid media type `{}`: {}", self.pattern, self.reason)
    }
}

impl std::error::Error for MediaRangeError {}

/// `token` of RFC 9110 §5.6.2.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The type and subtype of a `Content-Type` value, parameters dropped.
fn split_media_type(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let essence = value.split(|&b| b == b';').next().unwrap_or_default();
    let essence = essence.trim_ascii();
    let slash = essence.iter().position(|&b| b == b'/')?;
    let (kind, subtype) = (&essence[..slash], &essence[slash + 1..]);
    (!kind.is_empty() && !subtype.is_empty()).then_some((kind, subtype))
}

/// What a configuration says about compressing responses on the fly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The codings that may be used.
    pub enabled: CodingSet,
    /// The media types compressed.
    pub types: Vec<MediaRange>,
    /// Bodies of a known length below this many bytes are sent as they are.
    pub min_length: u64,
    // One per coding, by `Coding::index`, each for its own coding.
    levels: [Level; 3],
}

impl Policy {
    /// The level `coding` is compressed at.
    pub fn level(&self, coding: Coding) -> Level {
        self.levels[coding.index()]
    }

    /// Sets the level of the coding `level` is for.
    pub fn set_level(&mut self, level: Level) {
        self.levels[level.coding().index()] = level;
    }

    /// Whether a `Content-Type` value is one of [`Policy::types`].
    pub fn compresses_type(&self, content_type: &[u8]) -> bool {
        self.types.iter().any(|range| range.matches(content_type))
    }
}

impl Default for Policy {
    /// Every coding at its [`Level::default_for`], [`DEFAULT_TYPES`] and
    /// [`DEFAULT_MIN_LENGTH`].
    fn default() -> Policy {
        Policy {
            enabled: CodingSet::ALL,
            types: DEFAULT_TYPES
                .iter()
                .map(|t| MediaRange::parse(t).expect("the default types are valid"))
                .collect(),
            min_length: DEFAULT_MIN_LENGTH,
            levels: [Coding::Gzip, Coding::Brotli, Coding::Zstd].map(Level::default_for),
        }
    }
}

/// Whether a response may be compressed on the fly.
///
/// Not when compression is off (no coding enabled); not for 1xx, 204 and 304,
/// which have no content, nor 206, whose byte ranges are of the identity
/// body; not when the response has a `Content-Encoding` already (an
/// `identity` or empty one aside), as coding it twice gains nothing; not when
/// its `Cache-Control` has `no-transform`, which forbids an intermediary such
/// as a server relaying a backend to change the content (RFC 9111 §5.2.2.6);
/// not without a `Content-Type` in [`Policy::types`]; not when the length is
/// known and below [`Policy::min_length`]. An unknown length (a body relayed
/// as it comes) is compressed: it is usually a large one.
pub fn should_compress(
    content_type: Option<&[u8]>,
    length: Option<u64>,
    content_encoding: Option<&[u8]>,
    status: u16,
    cache_control: Option<&[u8]>,
    policy: &Policy,
) -> bool {
    if policy.enabled.is_empty() || matches!(status, 100..=199 | 204 | 206 | 304) {
        return false;
    }
    if let Some(value) = content_encoding {
        let coded = value
            .split(|&b| b == b',')
            .map(<[u8]>::trim_ascii)
            .any(|c| !c.is_empty() && !c.eq_ignore_ascii_case(b"identity"));
        if coded {
            return false;
        }
    }
    if cache_control.is_some_and(has_no_transform) {
        return false;
    }
    if !content_type.is_some_and(|t| policy.compresses_type(t)) {
        return false;
    }
    length.is_none_or(|n| n >= policy.min_length)
}

/// Whether a `Cache-Control` value has the `no-transform` directive. Commas
/// inside quoted strings do not separate directives, so that
/// `private="a, no-transform"` names fields and does not forbid anything.
fn has_no_transform(cache_control: &[u8]) -> bool {
    let mut quoted = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, &b) in cache_control.iter().chain(b",").enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                let directive = &cache_control[start..i.min(cache_control.len())];
                let name = directive.split(|&c| c == b'=').next().unwrap_or_default();
                if name.trim_ascii().eq_ignore_ascii_case(b"no-transform") {
                    return true;
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    false
}

// ---------------------------------------------------------------------------
// ETags of compressed variants
// ---------------------------------------------------------------------------

/// The ETag of the `coding` variant of a representation whose ETag is `etag`:
/// `"abc"` becomes `"abc-gzip"`, `W/"abc"` becomes `W/"abc-gzip"`.
///
/// Each coding gets its own tag, as a strong validator must differ between
/// representations whose bytes differ (RFC 9110 §8.8.3), and a cache must not
/// answer a conditional request for the br variant with the gzip one. A weak
/// tag stays weak: the variant is no more exact than what it was made from.
/// `None` when `etag` is not an entity-tag; the variant is then sent without
/// one rather than with a tag that also names the identity body.
pub fn variant_etag(etag: &[u8], coding: Coding) -> Option<Vec<u8>> {
    let (weak, opaque) = split_entity_tag(etag)?;
    let token = coding.token().as_bytes();
    let mut tag = Vec::with_capacity(etag.len() + 1 + token.len());
    if weak {
        tag.extend_from_slice(b"W/");
    }
    tag.push(b'"');
    tag.extend_from_slice(opaque);
    tag.push(b'-');
    tag.extend_from_slice(token);
    tag.push(b'"');
    Some(tag)
}

/// The coding and base ETag of a variant's tag, as [`variant_etag`] made it:
/// `"abc-br"` gives br and `"abc"`. `None` for a tag without a coding's
/// suffix, or not an entity-tag.
///
/// This reads the tag's form only: a base tag that happens to end in `-br`
/// reads as a variant too, so the caller compares the result with the tags
/// it actually serves (the round trip through [`variant_etag`] is exact).
pub fn parse_variant_etag(tag: &[u8]) -> Option<(Coding, Vec<u8>)> {
    let (weak, opaque) = split_entity_tag(tag)?;
    let dash = opaque.iter().rposition(|&b| b == b'-')?;
    let coding = Coding::PREFERENCE
        .into_iter()
        .find(|c| &opaque[dash + 1..] == c.token().as_bytes())?;
    let mut base = Vec::with_capacity(tag.len());
    if weak {
        base.extend_from_slice(b"W/");
    }
    base.push(b'"');
    base.extend_from_slice(&opaque[..dash]);
    base.push(b'"');
    Some((coding, base))
}

/// `entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE` (RFC 9110 §8.8.3), as the
/// weakness and the opaque part.
fn split_entity_tag(tag: &[u8]) -> Option<(bool, &[u8])> {
    let (weak, quoted) = match tag.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, tag),
    };
    let opaque = quoted.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let etagc = |b: u8| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80;
    opaque.iter().all(|&b| etagc(b)).then_some((weak, opaque))
}

// ---------------------------------------------------------------------------
// Compressors
// ---------------------------------------------------------------------------

/// Largest brotli window, as a power of two, for a streamed body. brotli
/// holds back output until a metablock is full, and at the levels used on
/// the fly a metablock grows with the window: with 2^22, brotli's default,
/// a 4 MiB body gives no output before its end; with 2^18 (256 KiB) output
/// trails input by at most about twice the window (512 KiB), and that is
/// about what one stream holds. Bodies that large are rare among those
/// compressed on the fly, and smaller ones fit in the window anyway.
const BROTLI_STREAM_LGWIN: u32 = 18;

/// Largest brotli window for [`compress_whole`], brotli's own default
/// (4 MiB): the body is in memory anyway, and a window as large as the body
/// gives the smallest output for the cache to keep.
const BROTLI_WHOLE_MAX_LGWIN: u32 = 22;

/// How much output room to add at a time, so that a small push does not
/// allocate much and a large one does not reallocate often.
const OUT_STEP: usize = 16 * 1024;

/// The gzip member header (RFC 1952 §2.3): no name, no comment, and a
/// modification time of 0 ("none"), so that the same body always compresses
/// to the same bytes. OS 255 is "unknown"; XFL is set per level.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// Compresses a whole body, such as one a cache keeps.
///
/// The output is what an [`Encoder`] given the whole body in one piece would
/// produce, but for what only a known length allows: zstd records the length
/// in its frame header, and brotli's window fits the body, up to 4 MiB.
///
/// # Panics
///
/// Only if a compression library reports an error, which with a checked
/// level means it could not allocate memory.
pub fn compress_whole(level: Level, input: &[u8]) -> Vec<u8> {
    let mut encoder = Encoder::build(level, Some(input.len() as u64));
    let mut out = Vec::with_capacity(input.len() / 2 + 64);
    encoder.push(input, &mut out);
    encoder.finish(&mut out);
    out
}

/// A streaming compressor for a body that arrives in pieces.
///
/// Output is appended to the caller's buffer as the coding produces it, and
/// the encoder keeps no more than its coding's window and working state,
/// however long the body: output trails input by at most about 32 KiB for
/// gzip, 128 KiB (a block) for zstd and 512 KiB for brotli, while zstd's
/// window, from 512 KiB at level 1 to 8 MiB at 19, is the most any of them
/// holds. [`Encoder::flush`] makes everything pushed so far decodable, for a
/// relayed body that pauses.
///
/// Every method panics only if a compression library reports an error,
/// which with a checked level means it could not allocate memory.
pub struct Encoder {
    level: Level,
    state: State,
    // Input pushed since the last flush: flushing with none would only add
    // an empty block to the output.
    unflushed: bool,
}

enum State {
    Gzip(Gzip),
    // Boxed: brotli's state is a few kilobytes inline.
    Brotli(Box<Brotli>),
    Zstd(zstd::stream::raw::Encoder<'static>),
}

impl Encoder {
    /// An encoder compressing with `level`'s coding at that level.
    pub fn new(level: Level) -> Encoder {
        Encoder::build(level, None)
    }

    fn build(level: Level, length: Option<u64>) -> Encoder {
        let state = match level.coding() {
            Coding::Gzip => State::Gzip(Gzip::new(level.value())),
            Coding::Brotli => State::Brotli(Box::new(Brotli::new(level.value(), length))),
            Coding::Zstd => {
                let mut zstd = zstd::stream::raw::Encoder::new(level.value() as i32)
                    .expect("zstd: creating a compression context");
                if length.is_some() {
                    // Exact here: `compress_whole` pushes exactly this much.
                    zstd.set_pledged_src_size(length)
                        .expect("zstd: setting the length of the body");
                }
                State::Zstd(zstd)
            }
        };
        Encoder {
            level,
            state,
            unflushed: false,
        }
    }

    /// The coding and level this encoder uses.
    pub fn level(&self) -> Level {
        self.level
    }

    /// Compresses `input`, appending to `out` what the coding has ready.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.unflushed |= !input.is_empty();
        match &mut self.state {
            State::Gzip(gzip) => gzip.push(input, out),
            State::Brotli(brotli) => {
                brotli.run(BrotliEncoderOperation::BROTLI_OPERATION_PROCESS, input, out)
            }
            State::Zstd(zstd) => zstd_push(zstd, input, out),
        }
    }

    /// Appends to `out` everything needed to decode what was pushed so far,
    /// without ending the body. A flush costs a few bytes and some ratio, so
    /// it is for pauses of the input, not for every piece; it does nothing
    /// when nothing was pushed since the last one.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        if !std::mem::take(&mut self.unflushed) {
            return;
        }
        match &mut self.state {
            State::Gzip(gzip) => gzip.flush(out),
            State::Brotli(brotli) => {
                brotli.run(BrotliEncoderOperation::BROTLI_OPERATION_FLUSH, &[], out)
            }
            State::Zstd(zstd) => zstd_drain(out, |o| zstd.flush(o)),
        }
    }

    /// Ends the body, appending the rest of the output to `out`. Taking the
    /// encoder makes pushing after the end impossible.
    pub fn finish(mut self, out: &mut Vec<u8>) {
        match &mut self.state {
            State::Gzip(gzip) => gzip.finish(out),
            State::Brotli(brotli) => {
                brotli.run(BrotliEncoderOperation::BROTLI_OPERATION_FINISH, &[], out)
            }
            State::Zstd(zstd) => zstd_drain(out, |o| zstd.finish(o, false)),
        }
    }
}

impl fmt::Debug for Encoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encoder")
            .field("level", &self.level)
            .field("unflushed", &self.unflushed)
            .finish_non_exhaustive()
    }
}

/// Makes sure `out` has at least a little room, growing it by a step sized
/// to the input still to compress.
fn reserve_room(out: &mut Vec<u8>, pending_input: usize) {
    if out.capacity() - out.len() < 64 {
        out.reserve(pending_input.clamp(OUT_STEP / 4, OUT_STEP * 4));
    }
}

/// gzip as a raw deflate stream between a header and a trailer written
/// here, so that output goes straight into the caller's buffer, with nothing
/// held back in a writer's buffer between calls.
struct Gzip {
    deflate: Compress,
    crc: Crc,
    xfl: u8,
    header_written: bool,
}

impl Gzip {
    fn new(level: u32) -> Gzip {
        Gzip {
            deflate: Compress::new(flate2::Compression::new(level), false),
            crc: Crc::new(),
            // RFC 1952 §2.3.1: 2 for the slowest level, 4 for the fastest.
            xfl: match level {
                9 => 2,
                1 => 4,
                _ => 0,
            },
            header_written: false,
        }
    }

    fn header(&mut self, out: &mut Vec<u8>) {
        if !std::mem::replace(&mut self.header_written, true) {
            let mut header = GZIP_HEADER;
            header[8] = self.xfl;
            out.extend_from_slice(&header);
        }
    }

    fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.header(out);
        self.crc.update(input);
        self.deflate(input, FlushCompress::None, out);
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        self.header(out);
        self.deflate(&[], FlushCompress::Sync, out);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        self.header(out);
        self.deflate(&[], FlushCompress::Finish, out);
        out.extend_from_slice(&self.crc.sum().to_le_bytes());
        // ISIZE is the length modulo 2^32, which is what `amount` keeps.
        out.extend_from_slice(&self.crc.amount().to_le_bytes());
    }

    fn deflate(&mut self, mut input: &[u8], flush: FlushCompress, out: &mut Vec<u8>) {
        loop {
            reserve_room(out, input.len());
            let before = self.deflate.total_in();
            let status = self
                .deflate
                .compress_vec(input, out, flush)
                .expect("deflate: compressing");
            input = &input[(self.deflate.total_in() - before) as usize..];
            // zlib's rule: a call that leaves output room has produced all
            // it can for this input and flush mode.
            let drained = out.len() < out.capacity();
            let done = match flush {
                FlushCompress::Finish => status == Status::StreamEnd,
                _ => input.is_empty() && drained,
            };
            if done {
                return;
            }
        }
    }
}

/// brotli's streaming encoder, driven the way its C API documents: process,
/// flush or finish until the input is taken and no output is pending.
struct Brotli {
    state: BrotliEncoderStateStruct<StandardAlloc>,
}

impl Brotli {
    fn new(quality: u32, length: Option<u64>) -> Brotli {
        let mut state = BrotliEncoderStateStruct::new(StandardAlloc::default());
        let lgwin = match length {
            // The smallest window that covers the body: a larger one would
            // only cost memory.
            Some(n) => (10..BROTLI_WHOLE_MAX_LGWIN)
                .find(|&w| (1u64 << w) - 16 >= n)
                .unwrap_or(BROTLI_WHOLE_MAX_LGWIN),
            None => BROTLI_STREAM_LGWIN,
        };
        let set = [
            (BrotliEncoderParameter::BROTLI_PARAM_QUALITY, quality),
            (BrotliEncoderParameter::BROTLI_PARAM_LGWIN, lgwin),
            (
                BrotliEncoderParameter::BROTLI_PARAM_SIZE_HINT,
                length.map_or(0, |n| n.min(u64::from(u32::MAX)) as u32),
            ),
        ];
        for (param, value) in set {
            assert!(
                state.set_parameter(param, value),
                "brotli: setting {param:?} to {value}"
            );
        }
        Brotli { state }
    }

    fn run(&mut self, op: BrotliEncoderOperation, input: &[u8], out: &mut Vec<u8>) {
        let mut available_in = input.len();
        let mut next_in = 0;
        loop {
            // No output room is lent: brotli then keeps what it makes in its
            // own storage, taken below as it is, with no zeroed buffer to
            // prepare for every call however small the piece.
            let (mut available_out, mut next_out) = (0, 0);
            let ok = self.state.compress_stream(
                op,
                &mut available_in,
                input,
                &mut next_in,
                &mut available_out,
                &mut [],
                &mut next_out,
                &mut None,
                &mut |_, _, _, _| (),
            );
            assert!(ok, "brotli: compressing (operation {})", op as i32);
            // A call that leaves nothing pending has done all it can for
            // this input and operation.
            let pending = self.state.has_more_output();
            while self.state.has_more_output() {
                // 0 asks for all of it; the slice returned may run past what
                // was taken, which `size` tells.
                let mut size = 0;
                let taken = self.state.take_output(&mut size);
                out.extend_from_slice(&taken[..size]);
            }
            let done = match op {
                BrotliEncoderOperation::BROTLI_OPERATION_FINISH => self.state.is_finished(),
                _ => available_in == 0 && !pending,
            };
            if done {
                return;
            }
        }
    }
}

impl Drop for Brotli {
    fn drop(&mut self) {
        BrotliEncoderDestroyInstance(&mut self.state);
    }
}

fn zstd_push(zstd: &mut zstd::stream::raw::Encoder<'static>, input: &[u8], out: &mut Vec<u8>) {
    let mut input = InBuffer::around(input);
    while input.pos() < input.src.len() {
        reserve_room(out, input.src.len() - input.pos());
        let pos = out.len();
        let mut output = OutBuffer::around_pos(out, pos);
        zstd.run(&mut input, &mut output)
            .expect("zstd: compressing");
    }
}

/// Calls a zstd flush or end until it reports nothing left to write.
fn zstd_drain(
    out: &mut Vec<u8>,
    mut step: impl FnMut(&mut OutBuffer<'_, Vec<u8>>) -> std::io::Result<usize>,
) {
    loop {
        reserve_room(out, 0);
        let pos = out.len();
        let mut output = OutBuffer::around_pos(out, pos);
        let remaining = step(&mut output).expect("zstd: flushing");
        if remaining == 0 {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastpath_http::{etag_list_matches, parse_accept_encoding};
    use std::io::Read;

    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;

    // --- negotiation -------------------------------------------------------

    fn choose(header: Option<&str>, enabled: CodingSet) -> Option<Coding> {
        choose_coding(&parse_accept_encoding(header.map(str::as_bytes)), enabled)
    }

    fn all(header: &str) -> Option<Coding> {
        choose(Some(header), CodingSet::ALL)
    }

    #[test]
    fn tokens() {
        for (coding, token) in [
            (Coding::Gzip, "gzip"),
            (Coding::Brotli, "br"),
            (Coding::Zstd, "zstd"),
        ] {
            assert_eq!(coding.token(), token);
            assert_eq!(coding.to_string(), token);
            assert_eq!(Coding::from_token(token.as_bytes()), Some(coding));
            let upper = token.to_ascii_uppercase();
            assert_eq!(Coding::from_token(upper.as_bytes()), Some(coding));
        }
        assert_eq!(Coding::from_token(b"x-gzip"), Some(Coding::Gzip));
        assert_eq!(Coding::from_token(b"X-GZIP"), Some(Coding::Gzip));
        for other in [
            "deflate", "identity", "compress", "*", "", "gzip ", "x-zstd",
        ] {
            assert_eq!(Coding::from_token(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn coding_sets() {
        assert!(CodingSet::EMPTY.is_empty());
        assert!(!CodingSet::ALL.is_empty());
        assert_eq!(
            CodingSet::ALL.iter().collect::<Vec<_>>(),
            Coding::PREFERENCE
        );
        let set = CodingSet::EMPTY.with(Coding::Gzip).with(Coding::Brotli);
        assert!(set.contains(Coding::Gzip) && set.contains(Coding::Brotli));
        assert!(!set.contains(Coding::Zstd));
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Coding::Brotli, Coding::Gzip]
        );
        assert_eq!(
            set.without(Coding::Brotli),
            CodingSet::EMPTY.with(Coding::Gzip)
        );
        assert_eq!(set.without(Coding::Zstd), set);
        assert_eq!(
            [Coding::Gzip, Coding::Brotli]
                .into_iter()
                .collect::<CodingSet>(),
            set
        );
        assert_eq!(format!("{set:?}"), r#"{"br", "gzip"}"#);
        assert_eq!(format!("{:?}", CodingSet::EMPTY), "{}");
    }

    #[test]
    fn highest_q_wins() {
        assert_eq!(all("gzip;q=0.8, zstd;q=0.9, br;q=0.5"), Some(Coding::Zstd));
        assert_eq!(all("gzip, br;q=0.999"), Some(Coding::Gzip));
        assert_eq!(all("br;q=0.1, gzip;q=0.2"), Some(Coding::Gzip));
        assert_eq!(all("gzip;q=0.001"), Some(Coding::Gzip));
        assert_eq!(all("zstd;q=0.3, br;q=0.4"), Some(Coding::Brotli));
    }

    #[test]
    fn ties_go_to_br_then_zstd_then_gzip() {
        assert_eq!(all("gzip, deflate, br, zstd"), Some(Coding::Brotli));
        assert_eq!(all("gzip, zstd"), Some(Coding::Zstd));
        assert_eq!(all("zstd;q=0.5, gzip;q=0.5, br;q=0.4"), Some(Coding::Zstd));
        assert_eq!(all("gzip;q=0.7, br;q=0.7"), Some(Coding::Brotli));
        let no_br = CodingSet::ALL.without(Coding::Brotli);
        assert_eq!(choose(Some("gzip, br, zstd"), no_br), Some(Coding::Zstd));
    }

    #[test]
    fn only_enabled_codings() {
        let gzip = CodingSet::EMPTY.with(Coding::Gzip);
        assert_eq!(choose(Some("br, zstd"), gzip), None);
        assert_eq!(choose(Some("br, gzip;q=0.1"), gzip), Some(Coding::Gzip));
        assert_eq!(choose(Some("gzip, br"), CodingSet::EMPTY), None);
        let zstd = CodingSet::EMPTY.with(Coding::Zstd);
        assert_eq!(choose(Some("*"), zstd), Some(Coding::Zstd));
    }

    #[test]
    fn star() {
        assert_eq!(all("*"), Some(Coding::Brotli));
        assert_eq!(all("*;q=0.5, gzip"), Some(Coding::Gzip));
        assert_eq!(all("br;q=0, *"), Some(Coding::Zstd));
        assert_eq!(all("br;q=0, zstd;q=0, *"), Some(Coding::Gzip));
        assert_eq!(all("*;q=0"), None);
        assert_eq!(all("*;q=0, gzip;q=0.2"), Some(Coding::Gzip));
    }

    #[test]
    fn nothing_asked_means_no_coding() {
        assert_eq!(choose(None, CodingSet::ALL), None);
        assert_eq!(all(""), None);
        assert_eq!(all("identity"), None);
        assert_eq!(all("deflate, compress"), None);
        assert_eq!(all("gzip;q=0, br;q=0, zstd;q=0"), None);
    }

    #[test]
    fn identity() {
        // Refusing identity leaves the codings as they were...
        assert_eq!(all("gzip, identity;q=0"), Some(Coding::Gzip));
        // ...and when none is acceptable either, the caller learns that
        // identity is refused too.
        let accept = parse_accept_encoding(Some(b"identity;q=0, deflate"));
        assert_eq!(choose_coding(&accept, CodingSet::ALL), None);
        assert!(!accept.identity_acceptable());
        let accept = parse_accept_encoding(Some(b"*;q=0"));
        assert_eq!(choose_coding(&accept, CodingSet::ALL), None);
        assert!(!accept.identity_acceptable());
        // Identity named with a higher q-value is preferred to the codings;
        // named with an equal one, it loses the tie; not named, it does not
        // rank at all.
        assert_eq!(all("gzip;q=0.5, identity"), None);
        assert_eq!(all("gzip;q=0.5, identity;q=0.5"), Some(Coding::Gzip));
        assert_eq!(all("gzip;q=0.5"), Some(Coding::Gzip));
        // `*` speaks for identity when it is not named.
        let gzip = CodingSet::EMPTY.with(Coding::Gzip);
        assert_eq!(choose(Some("*;q=0.5, gzip;q=0.4"), gzip), None);
        assert_eq!(
            choose(Some("*;q=0.5, gzip;q=0.4"), CodingSet::ALL),
            Some(Coding::Brotli)
        );
        assert_eq!(
            choose(Some("*;q=0.5, identity;q=0.1, gzip;q=0.4"), gzip),
            Some(Coding::Gzip)
        );
    }

    #[test]
    fn x_gzip() {
        assert_eq!(all("x-gzip"), Some(Coding::Gzip));
        assert_eq!(all("x-gzip;q=0.9, br;q=0.8"), Some(Coding::Gzip));
    }

    #[test]
    fn invalid_q_values_refuse_the_coding() {
        assert_eq!(all("br;q=2, gzip"), Some(Coding::Gzip));
        assert_eq!(all("br;q=1.5, zstd;q=abc, gzip;q=0.1"), Some(Coding::Gzip));
        assert_eq!(all("br;q=-1"), None);
        assert_eq!(all("gzip;q=0.1234"), None);
        assert_eq!(all("gzip;q="), None);
        let nan = AcceptEncoding {
            br: f32::NAN,
            gzip: 0.0,
            zstd: 0.0,
            identity: None,
        };
        assert_eq!(choose_coding(&nan, CodingSet::ALL), None);
    }

    // --- levels --------------------------------------------------------------

    #[test]
    fn levels_in_range() {
        for (coding, low, high) in [
            (Coding::Gzip, 1, 9),
            (Coding::Brotli, 0, 11),
            (Coding::Zstd, 1, 19),
        ] {
            for value in [low, high] {
                let level = Level::new(coding, value).unwrap();
                assert_eq!((level.coding(), level.value()), (coding, value as u32));
            }
            for value in [low - 1, high + 1] {
                assert_eq!(Level::new(coding, value), Err(LevelError { coding, value }));
            }
        }
    }

    #[test]
    fn level_errors_say_what_is_wrong() {
        let message = |coding, value| Level::new(coding, value).unwrap_err().to_string();
        assert_eq!(
            message(Coding::Gzip, 0),
            "gzip level 0 is out of range: gzip levels are 1 to 9"
        );
        assert_eq!(
            message(Coding::Gzip, 10),
            "gzip level 10 is out of range: gzip levels are 1 to 9"
        );
        assert_eq!(
            message(Coding::Brotli, 12),
            "br level 12 is out of range: br levels are 0 to 11"
        );
        assert_eq!(
            message(Coding::Brotli, -1),
            "br level -1 is out of range: br levels are 0 to 11"
        );
        assert_eq!(
            message(Coding::Zstd, 20),
            "zstd level 20 is out of range: zstd levels are 1 to 19"
        );
        assert_eq!(
            message(Coding::Zstd, i64::MIN),
            format!(
                "zstd level {} is out of range: zstd levels are 1 to 19",
                i64::MIN
            )
        );
        // 2^32 + 1 must not wrap around to level 1.
        assert!(Level::new(Coding::Gzip, (1 << 32) + 1).is_err());
    }

    #[test]
    fn default_levels() {
        let policy = Policy::default();
        for (coding, value) in [(Coding::Gzip, 6), (Coding::Brotli, 5), (Coding::Zstd, 3)] {
            assert_eq!(Level::default_for(coding).value(), value);
            assert_eq!(Level::default_for(coding).coding(), coding);
            assert_eq!(policy.level(coding), Level::default_for(coding));
        }
    }

    #[test]
    fn set_level_changes_its_coding_only() {
        let mut policy = Policy::default();
        policy.set_level(Level::new(Coding::Brotli, 11).unwrap());
        assert_eq!(policy.level(Coding::Brotli).value(), 11);
        assert_eq!(policy.level(Coding::Gzip).value(), 6);
        assert_eq!(policy.level(Coding::Zstd).value(), 3);
        policy.set_level(Level::new(Coding::Zstd, 19).unwrap());
        assert_eq!(policy.level(Coding::Zstd).value(), 19);
        assert_eq!(policy.level(Coding::Brotli).value(), 11);
    }

    // --- which responses -----------------------------------------------------

    fn default_says(
        content_type: Option<&str>,
        length: Option<u64>,
        content_encoding: Option<&str>,
        status: u16,
    ) -> bool {
        should_compress(
            content_type.map(str::as_bytes),
            length,
            content_encoding.map(str::as_bytes),
            status,
            None,
            &Policy::default(),
        )
    }

    #[test]
    fn default_policy() {
        let policy = Policy::default();
        assert_eq!(policy.enabled, CodingSet::ALL);
        assert_eq!(policy.min_length, 256);
        let types: Vec<String> = policy.types.iter().map(ToString::to_string).collect();
        assert_eq!(types, DEFAULT_TYPES);
        for t in DEFAULT_TYPES {
            assert!(default_says(Some(t), Some(1000), None, 200), "{t}");
        }
    }

    #[test]
    fn types_match_without_parameters_or_case() {
        for t in [
            "text/html",
            "text/html; charset=utf-8",
            "text/html;charset=UTF-8",
            "Text/HTML",
            "APPLICATION/JSON ; charset=utf-8",
            " text/css ",
            "image/SVG+XML",
        ] {
            assert!(default_says(Some(t), Some(1000), None, 200), "{t}");
        }
        for t in [
            "image/png",
            "text/htmlx",
            "text/htm",
            "xtext/html",
            "text",
            "text/",
            "/html",
            "",
            "application/octet-stream",
            "text/html-sandboxed",
        ] {
            assert!(!default_says(Some(t), Some(1000), None, 200), "{t}");
        }
        assert!(!default_says(None, Some(1000), None, 200));
    }

    #[test]
    fn min_length() {
        assert!(!default_says(Some("text/html"), Some(0), None, 200));
        assert!(!default_says(Some("text/html"), Some(255), None, 200));
        assert!(default_says(Some("text/html"), Some(256), None, 200));
        assert!(default_says(Some("text/html"), Some(u64::MAX), None, 200));
        // A body of unknown length is compressed.
        assert!(default_says(Some("text/html"), None, None, 200));
        let policy = Policy {
            min_length: 0,
            ..Policy::default()
        };
        assert!(should_compress(
            Some(b"text/html"),
            Some(0),
            None,
            200,
            None,
            &policy
        ));
    }

    #[test]
    fn already_coded_responses() {
        for coding in [
            "gzip",
            "br",
            "zstd",
            "deflate",
            "GZIP",
            "identity, gzip",
            "x-custom",
        ] {
            assert!(
                !default_says(Some("text/html"), Some(1000), Some(coding), 200),
                "{coding}"
            );
        }
        for none in ["identity", "IDENTITY", "", " ", "identity, identity"] {
            assert!(
                default_says(Some("text/html"), Some(1000), Some(none), 200),
                "{none:?}"
            );
        }
    }

    #[test]
    fn no_transform() {
        let policy = Policy::default();
        let says = |cache_control: &str| {
            should_compress(
                Some(b"text/html"),
                Some(1000),
                None,
                200,
                Some(cache_control.as_bytes()),
                &policy,
            )
        };
        for forbids in [
            "no-transform",
            "No-Transform",
            "public, max-age=60, no-transform",
            "no-transform,max-age=0",
            " no-transform ",
            "private=\"a, b\", no-transform",
        ] {
            assert!(!says(forbids), "{forbids}");
        }
        for allows in [
            "",
            "public, max-age=60",
            "no-transformx",
            "xno-transform",
            "no-cache, no-store",
            "private=\"a, no-transform\"",
            "private=\"a\\\", no-transform\"",
        ] {
            assert!(says(allows), "{allows}");
        }
    }

    #[test]
    fn statuses() {
        for status in [100, 101, 103, 199, 204, 206, 304] {
            assert!(
                !default_says(Some("text/html"), Some(1000), None, status),
                "{status}"
            );
        }
        for status in [200, 201, 203, 301, 404, 410, 500, 503] {
            assert!(
                default_says(Some("text/html"), Some(1000), None, status),
                "{status}"
            );
        }
    }

    #[test]
    fn nothing_enabled_compresses_nothing() {
        let policy = Policy {
            enabled: CodingSet::EMPTY,
            ..Policy::default()
        };
        assert!(!should_compress(
            Some(b"text/html"),
            Some(1000),
            None,
            200,
            None,
            &policy
        ));
    }

    #[test]
    fn wildcard_types() {
        let policy = Policy {
            types: vec![MediaRange::parse("text/*").unwrap()],
            ..Policy::default()
        };
        assert!(policy.compresses_type(b"text/markdown"));
        assert!(policy.compresses_type(b"TEXT/csv; header=present"));
        assert!(!policy.compresses_type(b"application/json"));
        assert!(!policy.compresses_type(b"text"));
        assert!(!policy.compresses_type(b"textual/plain"));
        let any = MediaRange::parse("*/*").unwrap();
        assert!(any.matches(b"image/png"));
        assert!(!any.matches(b"image"));
        assert!(!any.matches(b""));
        let none = Policy {
            types: Vec::new(),
            ..Policy::default()
        };
        assert!(!none.compresses_type(b"text/html"));
    }

    #[test]
    fn media_ranges() {
        let parsed = |s: &str| MediaRange::parse(s).map(|r| r.to_string());
        assert_eq!(parsed("Text/HTML").as_deref(), Ok("text/html"));
        assert_eq!(parsed("TEXT/*").as_deref(), Ok("text/*"));
        assert_eq!(parsed("*/*").as_deref(), Ok("*/*"));
        assert_eq!(parsed("image/svg+xml").as_deref(), Ok("image/svg+xml"));
        assert_eq!(
            "text/css".parse::<MediaRange>(),
            MediaRange::parse("text/css")
        );
        let reason = |s: &str| MediaRange::parse(s).unwrap_err().reason;
        assert_eq!(reason("text"), "expected type/subtype, type/* or */*");
        assert_eq!(
            reason("text/html; charset=utf-8"),
            "parameters are not matched: give the type alone"
        );
        assert_eq!(reason("*/html"), "*/subtype is not a media range: use */*");
        assert_eq!(
            reason("application/*+json"),
            "a * stands only for a whole type or subtype"
        );
        assert_eq!(
            reason("te*t/html"),
            "a * stands only for a whole type or subtype"
        );
        assert_eq!(reason("te xt/html"), "the type is not a token");
        assert_eq!(reason("/html"), "the type is not a token");
        assert_eq!(reason("text/"), "the subtype is not a token");
        assert_eq!(reason("text/html/x"), "the subtype is not a token");
        assert_eq!(
            MediaRange::parse("text").unwrap_err().to_string(),
            "invalid media type `text`: expected type/subtype, type/* or */*"
        );
    }

    // --- ETags ---------------------------------------------------------------

    fn variant(etag: &str, coding: Coding) -> Option<String> {
        variant_etag(etag.as_bytes(), coding).map(|t| String::from_utf8(t).unwrap())
    }

    #[test]
    fn variant_etags() {
        assert_eq!(
            variant("\"abc\"", Coding::Gzip).as_deref(),
            Some("\"abc-gzip\"")
        );
        assert_eq!(
            variant("\"abc\"", Coding::Brotli).as_deref(),
            Some("\"abc-br\"")
        );
        assert_eq!(
            variant("\"abc\"", Coding::Zstd).as_deref(),
            Some("\"abc-zstd\"")
        );
        assert_eq!(
            variant("W/\"abc\"", Coding::Gzip).as_deref(),
            Some("W/\"abc-gzip\"")
        );
        assert_eq!(
            variant("W/\"abc\"", Coding::Brotli).as_deref(),
            Some("W/\"abc-br\"")
        );
        assert_eq!(variant("\"\"", Coding::Zstd).as_deref(), Some("\"-zstd\""));
        for bad in [
            "abc",
            "\"abc",
            "abc\"",
            "W/abc",
            "w/\"abc\"",
            "\"a\"b\"",
            "\"a b\"",
            "",
            " \"abc\"",
        ] {
            assert_eq!(variant(bad, Coding::Gzip), None, "{bad}");
        }
    }

    #[test]
    fn variant_etags_differ_per_coding() {
        let tags: Vec<String> = Coding::PREFERENCE
            .iter()
            .map(|&c| variant("\"5f3a-1c2\"", c).unwrap())
            .collect();
        assert!(!tags.contains(&"\"5f3a-1c2\"".to_owned()));
        assert_ne!(tags[0], tags[1]);
        assert_ne!(tags[1], tags[2]);
        assert_ne!(tags[0], tags[2]);
        // A conditional request matches the variant it was sent for only.
        let if_none_match = format!("\"other\", {}", tags[0]);
        assert!(etag_list_matches(if_none_match.as_bytes(), &tags[0], false));
        assert!(!etag_list_matches(
            if_none_match.as_bytes(),
            &tags[1],
            false
        ));
        assert!(!etag_list_matches(
            if_none_match.as_bytes(),
            &tags[2],
            false
        ));
        assert!(!etag_list_matches(
            if_none_match.as_bytes(),
            "\"5f3a-1c2\"",
            false
        ));
    }

    #[test]
    fn etag_round_trip() {
        for base in [
            "\"abc\"",
            "W/\"abc\"",
            "\"\"",
            "W/\"\"",
            "\"a-b-c\"",
            "\"x-gzip\"",
            "\"\u{e9}t\u{e9}\"",
        ] {
            for coding in Coding::PREFERENCE {
                let tag = variant_etag(base.as_bytes(), coding).unwrap();
                assert_eq!(
                    parse_variant_etag(&tag),
                    Some((coding, base.as_bytes().to_vec())),
                    "{base} {coding}"
                );
            }
        }
    }

    #[test]
    fn tags_that_are_not_variants() {
        for tag in [
            "\"abc\"",
            "\"abc-deflate\"",
            "\"abc-GZIP\"",
            "\"abc-gzip \"",
            "\"abcgzip\"",
            "abc-gzip",
            "w/\"abc-gzip\"",
            "\"abc-gzip",
            "*",
            "",
        ] {
            assert_eq!(parse_variant_etag(tag.as_bytes()), None, "{tag}");
        }
        assert_eq!(
            parse_variant_etag(b"W/\"-br\""),
            Some((Coding::Brotli, b"W/\"\"".to_vec()))
        );
    }

    // --- compressors ---------------------------------------------------------

    /// xorshift64: reproducible bytes without a dependency.
    fn random(len: usize, mut seed: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            out.extend_from_slice(&seed.to_le_bytes());
        }
        out.truncate(len);
        out
    }

    /// Markup-like text of random words: compressible, but not one repeated
    /// line that any coding would shrink to nothing.
    fn text(len: usize) -> Vec<u8> {
        const WORDS: &[&str] = &[
            "<p>",
            "</p>",
            "<div class=\"item\">",
            "</div>",
            "the",
            "server",
            "sends",
            "compressed",
            "bodies",
            "to",
            "clients",
            "that",
            "ask",
            "for",
            "them",
            "and",
            "a",
            "cache",
            "keeps",
            "each",
            "variant",
            "{\"id\":",
            "42,",
            "\"name\":",
            "\"fastpath\"}",
            "window",
            "stream",
            "of",
            "bytes",
            "\n",
        ];
        let mut out = Vec::with_capacity(len + 32);
        for (i, r) in random(len, 0x9e37_79b9_7f4a_7c15).into_iter().enumerate() {
            if out.len() >= len {
                break;
            }
            out.extend_from_slice(WORDS[r as usize % WORDS.len()].as_bytes());
            if i % 3 != 0 {
                out.push(b' ');
            }
        }
        out.truncate(len);
        out
    }

    fn bodies() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("empty", Vec::new()),
            ("small", b"<p>Hello, world.</p>\n".to_vec()),
            ("1 MiB random", random(MIB, 0x2545_f491_4f6c_dd1d)),
            ("1 MiB text", text(MIB)),
        ]
    }

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match coding {
            Coding::Gzip => {
                let mut decoder = flate2::bufread::GzDecoder::new(data);
                decoder.read_to_end(&mut out).expect("gzip decodes");
                assert!(
                    decoder.into_inner().is_empty(),
                    "bytes after the gzip member"
                );
            }
            Coding::Brotli => {
                brotli::Decompressor::new(data, 4096)
                    .read_to_end(&mut out)
                    .expect("brotli decodes");
            }
            Coding::Zstd => out = zstd::decode_all(data).expect("zstd decodes"),
        }
        out
    }

    /// What a decoder gives from an unfinished stream before it runs out.
    fn decode_prefix(coding: Coding, data: &[u8]) -> Vec<u8> {
        let mut reader: Box<dyn Read + '_> = match coding {
            Coding::Gzip => Box::new(flate2::bufread::GzDecoder::new(data)),
            Coding::Brotli => Box::new(brotli::Decompressor::new(data, 4096)),
            Coding::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(data).unwrap()),
        };
        let mut out = Vec::new();
        let mut buf = [0; 4096];
        while let Ok(n @ 1..) = reader.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        out
    }

    fn default_level(coding: Coding) -> Level {
        Level::default_for(coding)
    }

    /// Pushes `body` in pieces whose sizes cycle through `sizes`.
    fn streamed(level: Level, body: &[u8], sizes: &[usize]) -> Vec<u8> {
        let mut encoder = Encoder::new(level);
        let mut out = Vec::new();
        let mut rest = body;
        for &size in sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (piece, tail) = rest.split_at(size.min(rest.len()));
            encoder.push(piece, &mut out);
            rest = tail;
        }
        encoder.finish(&mut out);
        out
    }

    #[test]
    fn whole_bodies_round_trip() {
        for (name, body) in bodies() {
            for coding in Coding::PREFERENCE {
                let compressed = compress_whole(default_level(coding), &body);
                assert!(decode(coding, &compressed) == body, "{coding} {name}");
            }
        }
    }

    #[test]
    fn text_gets_smaller() {
        let body = text(MIB);
        for coding in Coding::PREFERENCE {
            let whole = compress_whole(default_level(coding), &body);
            assert!(whole.len() < body.len() / 3, "{coding}: {}", whole.len());
            let streamed = streamed(default_level(coding), &body, &[4096]);
            assert!(
                streamed.len() < body.len() / 3,
                "{coding}: {}",
                streamed.len()
            );
        }
    }

    #[test]
    fn streamed_bodies_round_trip() {
        let schedules: &[&[usize]] = &[
            &[1],
            &[1, 2, 3, 5, 8, 13, 1000, 4096, 65536, 7],
            &[16 * KIB],
            &[MIB],
        ];
        for (name, body) in bodies() {
            for coding in Coding::PREFERENCE {
                for sizes in schedules {
                    let compressed = streamed(default_level(coding), &body, sizes);
                    assert!(
                        decode(coding, &compressed) == body,
                        "{coding} {name} in pieces of {sizes:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_level_round_trips() {
        let body = text(64 * KIB);
        for coding in Coding::PREFERENCE {
            for value in coding.levels() {
                let level = Level::new(coding, value.into()).unwrap();
                let whole = compress_whole(level, &body);
                assert!(decode(coding, &whole) == body, "{coding} {value} whole");
                let streamed = streamed(level, &body, &[1, 1000, 4096]);
                assert!(
                    decode(coding, &streamed) == body,
                    "{coding} {value} streamed"
                );
            }
        }
    }

    #[test]
    fn empty_pushes_change_nothing() {
        let body = text(100 * KIB);
        for coding in Coding::PREFERENCE {
            let mut encoder = Encoder::new(default_level(coding));
            let mut out = Vec::new();
            for piece in body.chunks(10 * KIB) {
                encoder.push(&[], &mut out);
                encoder.push(piece, &mut out);
            }
            encoder.push(&[], &mut out);
            encoder.finish(&mut out);
            assert_eq!(
                out,
                streamed(default_level(coding), &body, &[10 * KIB]),
                "{coding}"
            );
        }
    }

    #[test]
    fn flush_makes_what_was_pushed_decodable() {
        let body = text(300 * KIB);
        for coding in Coding::PREFERENCE {
            let mut encoder = Encoder::new(default_level(coding));
            assert_eq!(encoder.level(), default_level(coding));
            let mut out = Vec::new();
            let mut pushed = 0;
            for piece in [1, 10, 3000, 50 * KIB, 200 * KIB] {
                encoder.push(&body[pushed..pushed + piece], &mut out);
                pushed += piece;
                encoder.flush(&mut out);
                assert!(
                    decode_prefix(coding, &out) == body[..pushed],
                    "{coding} after {pushed} bytes"
                );
                // Nothing new to flush: nothing is added.
                let len = out.len();
                encoder.flush(&mut out);
                assert_eq!(out.len(), len, "{coding}: second flush");
            }
            encoder.push(&body[pushed..], &mut out);
            encoder.finish(&mut out);
            assert!(decode(coding, &out) == body, "{coding} finished");
        }
    }

    #[test]
    fn flush_before_anything_and_finish_after_flush() {
        for coding in Coding::PREFERENCE {
            let mut encoder = Encoder::new(default_level(coding));
            let mut out = Vec::new();
            encoder.flush(&mut out);
            assert_eq!(out, b"", "{coding}: flush with nothing pushed");
            encoder.push(b"abc", &mut out);
            encoder.flush(&mut out);
            encoder.finish(&mut out);
            assert_eq!(decode(coding, &out), b"abc", "{coding}");
        }
    }

    #[test]
    fn streamed_output_does_not_wait_for_the_end() {
        // Random bytes do not compress, so output that keeps up with input
        // shows how much input an encoder holds back: at most its bound.
        let body = random(2 * MIB, 0x1234_5678_9abc_def1);
        let bounds = [
            (Coding::Gzip, 64 * KIB),
            (Coding::Zstd, 128 * KIB),
            (Coding::Brotli, 512 * KIB),
        ];
        for (coding, bound) in bounds {
            let mut encoder = Encoder::new(default_level(coding));
            let mut out = Vec::new();
            let mut pushed = 0;
            let mut most_held = 0;
            for piece in body.chunks(16 * KIB) {
                encoder.push(piece, &mut out);
                pushed += piece.len();
                most_held = most_held.max(pushed.saturating_sub(out.len()));
            }
            assert!(most_held <= bound, "{coding} held back {most_held} bytes");
            assert!(
                out.len() >= body.len() - bound,
                "{coding}: {} bytes out before the end",
                out.len()
            );
            encoder.finish(&mut out);
            assert!(decode(coding, &out) == body, "{coding}");
        }
    }

    #[test]
    fn encoders_move_between_threads() {
        fn send<T: Send>() {}
        send::<Encoder>();
    }

    #[test]
    fn gzip_framing() {
        let body = text(1000);
        let out = compress_whole(default_level(Coding::Gzip), &body);
        // No name, no modification time, unknown OS: the same body always
        // gives the same bytes.
        assert_eq!(out[..10], [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
        let crc = {
            let mut crc = Crc::new();
            crc.update(&body);
            crc.sum()
        };
        let trailer = &out[out.len() - 8..];
        assert_eq!(trailer[..4], crc.to_le_bytes());
        assert_eq!(trailer[4..], 1000u32.to_le_bytes());
        let slowest = compress_whole(Level::new(Coding::Gzip, 9).unwrap(), &body);
        assert_eq!(slowest[8], 2);
        let fastest = compress_whole(Level::new(Coding::Gzip, 1).unwrap(), &body);
        assert_eq!(fastest[8], 4);
        assert_eq!(compress_whole(default_level(Coding::Gzip), &body), out);
    }

    #[test]
    fn zstd_whole_bodies_record_their_length() {
        let body = text(5000);
        let out = compress_whole(default_level(Coding::Zstd), &body);
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&out).ok(),
            Some(Some(5000))
        );
        let streamed = streamed(default_level(Coding::Zstd), &body, &[5000]);
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&streamed).ok(),
            Some(None)
        );
    }
}
