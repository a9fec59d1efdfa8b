//! HPACK (RFC 7541): the header compression of HTTP/2, as a [`Decoder`] for
//! the blocks a peer sends and an [`Encoder`] for those fastpath sends.
//!
//! Both work on whole header blocks (a HEADERS frame's fragment and its
//! CONTINUATIONs joined by the caller), with no I/O: bytes in, fields out, and
//! fields in, bytes out.
//!
//! ```
//! use fastpath_http::h2::{DecodeLimits, Decoder, Encoder, Field, Representation};
//!
//! let mut encoder = Encoder::new();
//! let mut block = Vec::new();
//! encoder.encode(
//!     [
//!         Field::new(b":status", b"200"),
//!         Field::new(b"content-type", b"text/html"),
//!         Field::never_indexed(b"x-token", b"secret"),
//!     ],
//!     &mut block,
//! );
//!
//! let mut decoder = Decoder::new(4096);
//! let mut fields = Vec::new();
//! decoder
//!     .decode(&block, &DecodeLimits::default(), |name, value, how| {
//!         fields.push((name.to_vec(), value.to_vec(), how));
//!     })
//!     .unwrap();
//! assert_eq!(fields[0], (b":status".to_vec(), b"200".to_vec(), Representation::Indexed));
//! assert_eq!(fields[2].2, Representation::LiteralNeverIndexed);
//! ```
//!
//! The decoder is strict and bounded: every malformed block is an
//! [`HpackError`], never a panic; an integer over `u32` or with more than five
//! continuation bytes, an index past the tables, a truncated string, a size
//! update above the limit fastpath advertised or after the first field, and
//! Huffman strings with EOS or bad padding are all refused. The fields it
//! emits are borrowed from the block, from the dynamic table or from a scratch
//! buffer holding a Huffman-decoded string, so a block costs no allocation
//! beyond the entries it adds to the table. The header list is bounded as
//! SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 §6.5.2: 32 + name +
//! value per field), and a string that cannot fit the rest of that budget is
//! refused from its length alone, before it is copied or decoded. It does
//! not check field names or values against HTTP/2's rules (lower case,
//! pseudo-fields first, no connection-specific fields): that is the next
//! layer's work.
//!
//! What it costs: a [`Decoder`] holds its dynamic table (at most the
//! advertised SETTINGS_HEADER_TABLE_SIZE in names and values, so at most a
//! 32nd of that in entries, each one allocation in a ring) and two scratch
//! buffers for Huffman-decoded names and values, which grow to the longest
//! string decoded and never past the list budget or the table size. The
//! Huffman decoder's 12.25 KiB of tables are built once and shared by every
//! connection (see [`super::huffman`] for why they are shaped as
//! they are). The [`Encoder`] holds at most [`MAX_ENCODER_TABLE_SIZE`] and
//! looks fields up by scanning its table and the static table: at most 128
//! and 61 entries, mostly told apart by length, where a hash index would
//! cost more to keep up to date on every insertion and eviction than the
//! scans it saves.
//!
//! Limits and errors come in two kinds. A malformed block leaves the
//! dynamic table out of step with the peer's encoder, so the connection must
//! end (COMPRESSION_ERROR, RFC 9113 §4.3); the decoder then repeats the error.
//! A block over [`DecodeLimits`] is still read to its end so that the table
//! stays in step, with nothing more emitted, and only that stream need be
//! refused (431): [`HpackError::is_connection_error`] tells the two apart.

use std::collections::VecDeque;
use std::fmt;

use super::huffman::{self, HuffmanError};

/// The dynamic table size both sides start with (SETTINGS_HEADER_TABLE_SIZE's
/// initial value, RFC 9113 §6.5.2).
pub const DEFAULT_TABLE_SIZE: usize = 4096;

/// The largest dynamic table the [`Encoder`] keeps, whatever the peer
/// allows: 4 KiB already holds the fields a connection repeats, and every
/// connection pays for it in memory.
pub const MAX_ENCODER_TABLE_SIZE: usize = 4096;

/// Default [`DecodeLimits::max_header_list_size`]: the same 16 KiB that
/// bounds an HTTP/1 request head.
pub const DEFAULT_MAX_HEADER_LIST_SIZE: usize = crate::DEFAULT_MAX_HEADER_BYTES;

/// Default [`DecodeLimits::max_fields`]: as many fields as an HTTP/1 head
/// may carry.
pub const DEFAULT_MAX_FIELDS: usize = crate::DEFAULT_MAX_HEADERS;

/// What an entry costs beyond its name and value, in the dynamic table
/// (RFC 7541 §4.1) and in the header list size (RFC 9113 §6.5.2).
const ENTRY_OVERHEAD: usize = 32;

/// Most continuation bytes after an integer's prefix: five carry 35 bits,
/// enough for every u32 however the prefix is split (RFC 7541 §5.1 lets a
/// decoder refuse integers over its limits in value or length).
const MAX_INTEGER_CONTINUATION: usize = 5;

/// The static table (RFC 7541 Appendix A); index 1 is the first entry.
#[rustfmt::skip]
pub(crate) const STATIC_TABLE: [(&[u8], &[u8]); 61] = [
    (b":authority", b""), // 1
    (b":method", b"GET"), // 2
    (b":method", b"POST"), // 3
    (b":path", b"/"), // 4
    (b":path", b"/index.html"), // 5
    (b":scheme", b"http"), // 6
    (b":scheme", b"https"), // 7
    (b":status", b"200"), // 8
    (b":status", b"204"), // 9
    (b":status", b"206"), // 10
    (b":status", b"304"), // 11
    (b":status", b"400"), // 12
    (b":status", b"404"), // 13
    (b":status", b"500"), // 14
    (b"accept-charset", b""), // 15
    (b"accept-encoding", b"gzip, deflate"), // 16
    (b"accept-language", b""), // 17
    (b"accept-ranges", b""), // 18
    (b"accept", b""), // 19
    (b"access-control-allow-origin", b""), // 20
    (b"age", b""), // 21
    (b"allow", b""), // 22
    (b"authorization", b""), // 23
    (b"cache-control", b""), // 24
    (b"content-disposition", b""), // 25
    (b"content-encoding", b""), // 26
    (b"content-language", b""), // 27
    (b"content-length", b""), // 28
    (b"content-location", b""), // 29
    (b"content-range", b""), // 30
    (b"content-type", b""), // 31
    (b"cookie", b""), // 32
    (b"date", b""), // 33
    (b"etag", b""), // 34
    (b"expect", b""), // 35
    (b"expires", b""), // 36
    (b"from", b""), // 37
    (b"host", b""), // 38
    (b"if-match", b""), // 39
    (b"if-modified-since", b""), // 40
    (b"if-none-match", b""), // 41
    (b"if-range", b""), // 42
    (b"if-unmodified-since", b""), // 43
    (b"last-modified", b""), // 44
    (b"link", b""), // 45
    (b"location", b""), // 46
    (b"max-forwards", b""), // 47
    (b"proxy-authenticate", b""), // 48
    (b"proxy-authorization", b""), // 49
    (b"range", b""), // 50
    (b"referer", b""), // 51
    (b"refresh", b""), // 52
    (b"retry-after", b""), // 53
    (b"server", b""), // 54
    (b"set-cookie", b""), // 55
    (b"strict-transport-security", b""), // 56
    (b"transfer-encoding", b""), // 57
    (b"user-agent", b""), // 58
    (b"vary", b""), // 59
    (b"via", b""), // 60
    (b"www-authenticate", b""), // 61
];

/// What a header block may decode to, beyond which the [`Decoder`] refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest header list, each field counted as 32 + name + value bytes
    /// (what fastpath advertises as SETTINGS_MAX_HEADER_LIST_SIZE).
    pub max_header_list_size: usize,
    /// Most fields in one block.
    pub max_fields: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_header_list_size: DEFAULT_MAX_HEADER_LIST_SIZE,
            max_fields: DEFAULT_MAX_FIELDS,
        }
    }
}

/// How a decoded field was sent (RFC 7541 §6.1, §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Representation {
    /// An index into the static or dynamic table.
    Indexed,
    /// A literal the peer added to the dynamic table.
    LiteralIndexed,
    /// A literal kept out of the dynamic table this once.
    LiteralNotIndexed,
    /// A literal that must stay out of every dynamic table it passes through
    /// (§6.2.3): a proxy re-encoding it must send it never-indexed again.
    LiteralNeverIndexed,
}

impl Representation {
    /// Whether the field must be re-encoded as never-indexed.
    pub fn is_never_indexed(self) -> bool {
        self == Representation::LiteralNeverIndexed
    }
}

/// A header block refused by the [`Decoder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HpackError {
    /// The block ends inside an integer.
    TruncatedInteger,
    /// An integer is over `u32::MAX` or has more than five continuation bytes.
    IntegerOverflow,
    /// A string's length runs past the end of the block.
    TruncatedString {
        /// The length the string claims.
        len: usize,
        /// The bytes left in the block.
        available: usize,
    },
    /// Index 0, which names no entry (RFC 7541 §6.1).
    IndexZero,
    /// An index past the static and dynamic tables.
    IndexOutOfRange {
        /// The index sent.
        index: usize,
        /// How many entries the two tables held.
        entries: usize,
    },
    /// A Huffman-coded string holds the EOS symbol.
    HuffmanEos,
    /// A Huffman-coded string ends in more than 7 bits of padding.
    HuffmanPaddingTooLong,
    /// A Huffman-coded string ends in padding that is not all ones.
    HuffmanPaddingNotOnes,
    /// A dynamic table size update above the limit fastpath advertised.
    SizeUpdateTooLarge {
        /// The size asked for.
        size: usize,
        /// The limit (SETTINGS_HEADER_TABLE_SIZE).
        max: usize,
    },
    /// A dynamic table size update after a field of the block (RFC 7541 §4.2).
    SizeUpdateAfterField,
    /// The first block after the limit was lowered does not start with a
    /// size update within it (RFC 7541 §4.2).
    MissingSizeUpdate {
        /// The lowered limit.
        max: usize,
    },
    /// The header list is larger than [`DecodeLimits::max_header_list_size`].
    HeaderListTooLarge {
        /// The limit passed.
        limit: usize,
    },
    /// The block has more fields than [`DecodeLimits::max_fields`].
    TooManyFields {
        /// The limit passed.
        limit: usize,
    },
}

impl HpackError {
    /// Whether the decoder's table may no longer match the peer's, so that
    /// the connection must end with COMPRESSION_ERROR (RFC 9113 §4.3). The
    /// two limits of [`DecodeLimits`] are not: the block was read to its end,
    /// and only its stream need be refused.
    pub fn is_connection_error(&self) -> bool {
        !matches!(
            self,
            HpackError::HeaderListTooLarge { .. } | HpackError::TooManyFields { .. }
        )
    }
}

impl fmt::Display for HpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            HpackError::TruncatedInteger => write!(f, "header block ends inside an integer"),
            HpackError::IntegerOverflow => write!(
                f,
                "integer over 2^32-1 or with more than {MAX_INTEGER_CONTINUATION} continuation bytes"
            ),
            HpackError::TruncatedString { len, available } => write!(
                f,
                "string of {len} bytes with {available} left in the header block"
            ),
            HpackError::IndexZero => write!(f, "index 0 names no table entry"),
            HpackError::IndexOutOfRange { index, entries } => write!(
                f,
                "index {index} past the {entries} entries of the static and dynamic tables"
            ),
            HpackError::HuffmanEos => write!(f, "EOS symbol inside a Huffman-coded string"),
            HpackError::HuffmanPaddingTooLong => {
                write!(f, "Huffman-coded string padded with more than 7 bits")
            }
            HpackError::HuffmanPaddingNotOnes => {
                write!(f, "Huffman-coded string padded with bits that are not all ones")
            }
            HpackError::SizeUpdateTooLarge { size, max } => write!(
                f,
                "dynamic table size update to {size} above the limit of {max}"
            ),
            HpackError::SizeUpdateAfterField => {
                write!(f, "dynamic table size update after a field of the block")
            }
            HpackError::MissingSizeUpdate { max } => write!(
                f,
                "no dynamic table size update starts the first block after the limit fell to {max}"
            ),
            HpackError::HeaderListTooLarge { limit } => {
                write!(f, "header list larger than {limit} bytes")
            }
            HpackError::TooManyFields { limit } => {
                write!(f, "more than {limit} fields in the header block")
            }
        }
    }
}

impl std::error::Error for HpackError {}

/// Reads an integer with an `prefix`-bit prefix at `*pos` (RFC 7541 §5.1),
/// moving `*pos` past it.
pub(crate) fn decode_integer(
    block: &[u8],
    pos: &mut usize,
    prefix: u8,
) -> Result<usize, HpackError> {
    let mask = ((1u16 << prefix) - 1) as u8;
    let first = block.get(*pos).ok_or(HpackError::TruncatedInteger)? & mask;
    *pos += 1;
    if first < mask {
        return Ok(usize::from(first));
    }
    let mut value = u64::from(mask);
    for shift in (0..MAX_INTEGER_CONTINUATION as u32).map(|i| i * 7) {
        let byte = *block.get(*pos).ok_or(HpackError::TruncatedInteger)?;
        *pos += 1;
        // At most 255 + 2^35: no overflow in u64.
        value += u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return u32::try_from(value)
                .map(|v| v as usize)
                .map_err(|_| HpackError::IntegerOverflow);
        }
    }
    Err(HpackError::IntegerOverflow)
}

/// Appends `value` with an `prefix`-bit prefix, the first byte's other bits
/// being `flags` (RFC 7541 §5.1).
pub(crate) fn encode_integer(value: usize, prefix: u8, flags: u8, out: &mut Vec<u8>) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// Appends `s` as a string literal (RFC 7541 §5.2), Huffman-coded when that
/// is shorter.
fn encode_string(s: &[u8], out: &mut Vec<u8>) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        encode_integer(coded, 7, 0x80, out);
        huffman::encode(s, out);
    } else {
        encode_integer(s.len(), 7, 0, out);
        out.extend_from_slice(s);
    }
}

/// One dynamic table entry: name and value in one allocation.
#[derive(Debug, Clone)]
struct Entry {
    bytes: Box<[u8]>,
    name_len: usize,
}

impl Entry {
    fn new(name: &[u8], value: &[u8]) -> Self {
        let mut bytes = Vec::with_capacity(name.len() + value.len());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(value);
        Entry {
            bytes: bytes.into_boxed_slice(),
            name_len: name.len(),
        }
    }

    fn name(&self) -> &[u8] {
        &self.bytes[..self.name_len]
    }

    fn value(&self) -> &[u8] {
        &self.bytes[self.name_len..]
    }

    fn size(&self) -> usize {
        ENTRY_OVERHEAD + self.bytes.len()
    }
}

/// The dynamic table (RFC 7541 §2.3.2, §4): newest entry first.
#[derive(Debug, Clone)]
struct Table {
    entries: VecDeque<Entry>,
    /// The sum of the entries' sizes (§4.1).
    size: usize,
    /// The most `size` may be: the last size update's value.
    max_size: usize,
}

impl Table {
    fn new(max_size: usize) -> Self {
        Table {
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some(entry) = self.entries.pop_back() else {
                break;
            };
            self.size -= entry.size();
        }
    }

    /// Adds an entry, evicting the oldest to make room (§4.4); one larger
    /// than the whole table empties it and is not added.
    fn insert(&mut self, entry: Entry) {
        let size = entry.size();
        if size > self.max_size {
            self.clear();
            return;
        }
        self.evict_to(self.max_size - size);
        self.entries.push_front(entry);
        self.size += size;
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.size = 0;
    }

    /// The entry at `index` of the combined address space (§2.3.3).
    fn get(&self, index: usize) -> Result<(&[u8], &[u8]), HpackError> {
        match index {
            0 => Err(HpackError::IndexZero),
            1..=61 => Ok(STATIC_TABLE[index - 1]),
            _ => self
                .entries
                .get(index - 62)
                .map(|e| (e.name(), e.value()))
                .ok_or(HpackError::IndexOutOfRange {
                    index,
                    entries: 61 + self.entries.len(),
                }),
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entries.iter().map(|e| (e.name(), e.value()))
    }
}

/// Where a decoded string is.
#[derive(Debug, Clone, Copy)]
enum Text {
    /// Sent as it is, at this range of the block.
    Block(usize, usize),
    /// Huffman-decoded into the scratch buffer of its kind (name or value).
    Scratch,
    /// The name of this table entry.
    Index(usize),
    /// Longer than anything it was wanted for: not copied, not decoded.
    Skipped,
}

impl Text {
    fn resolve<'a>(self, block: &'a [u8], scratch: &'a [u8], table: &'a Table) -> &'a [u8] {
        match self {
            Text::Block(start, end) => &block[start..end],
            Text::Scratch => scratch,
            Text::Index(index) => table.get(index).map_or(&[][..], |(name, _)| name),
            Text::Skipped => &[],
        }
    }
}

/// Decodes the header blocks one peer sends on one connection.
#[derive(Debug, Clone)]
pub struct Decoder {
    table: Table,
    /// The largest size update allowed: the SETTINGS_HEADER_TABLE_SIZE
    /// fastpath advertised.
    max_table_size: usize,
    /// The limit was lowered below the table's size: the next block must
    /// start with a size update.
    update_required: bool,
    /// Huffman-decoded names and values, reused from block to block.
    name_scratch: Vec<u8>,
    value_scratch: Vec<u8>,
    /// The error that ended the connection's compression context.
    failed: Option<HpackError>,
}

impl Decoder {
    /// A decoder for a connection on which fastpath advertised
    /// SETTINGS_HEADER_TABLE_SIZE = `max_table_size`.
    pub fn new(max_table_size: usize) -> Self {
        Decoder {
            table: Table::new(max_table_size),
            max_table_size,
            update_required: false,
            name_scratch: Vec::new(),
            value_scratch: Vec::new(),
            failed: None,
        }
    }

    /// Takes a new SETTINGS_HEADER_TABLE_SIZE once the peer has acknowledged
    /// it. A limit below the table's present size must be answered by a size
    /// update at the start of the next block (RFC 7541 §4.2).
    pub fn set_max_table_size(&mut self, max_table_size: usize) {
        self.max_table_size = max_table_size;
        if max_table_size < self.table.max_size {
            self.update_required = true;
        }
    }

    /// The dynamic table's entries, newest first.
    pub fn dynamic_table(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.table.iter()
    }

    /// The dynamic table's size as RFC 7541 §4.1 counts it.
    pub fn dynamic_table_size(&self) -> usize {
        self.table.size
    }

    /// Decodes one whole header block, calling `emit` with each field's
    /// name, value and representation in order.
    ///
    /// `emit` cannot stop the decoding: the dynamic table must see the whole
    /// block to stay in step with the peer, so a caller that refuses a field
    /// notes it and answers once the block is done. On an error that
    /// [`HpackError::is_connection_error`], fields already emitted belong to
    /// a block that is refused as a whole, and every later call returns the
    /// same error.
    pub fn decode<F>(
        &mut self,
        block: &[u8],
        limits: &DecodeLimits,
        mut emit: F,
    ) -> Result<(), HpackError>
    where
        F: FnMut(&[u8], &[u8], Representation),
    {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let result = self.decode_block(block, limits, &mut emit);
        if let Err(e) = result {
            if e.is_connection_error() {
                self.failed = Some(e);
            }
        }
        result
    }

    fn decode_block(
        &mut self,
        block: &[u8],
        limits: &DecodeLimits,
        emit: &mut impl FnMut(&[u8], &[u8], Representation),
    ) -> Result<(), HpackError> {
        let list_limit = limits.max_header_list_size;
        let mut pos = 0;
        let mut fields = 0usize;
        let mut list_size = 0usize;
        // The limit the block passed, if it did: from there on, fields are
        // read only to keep the table in step, and none is emitted.
        let mut refused: Option<HpackError> = None;
        while pos < block.len() {
            let first = block[pos];
            if first & 0xe0 == 0x20 {
                if fields > 0 {
                    return Err(HpackError::SizeUpdateAfterField);
                }
                let size = decode_integer(block, &mut pos, 5)?;
                if size > self.max_table_size {
                    return Err(HpackError::SizeUpdateTooLarge {
                        size,
                        max: self.max_table_size,
                    });
                }
                self.table.set_max_size(size);
                self.update_required = false;
                continue;
            }
            if self.update_required {
                return Err(HpackError::MissingSizeUpdate {
                    max: self.max_table_size,
                });
            }
            fields += 1;
            if fields > limits.max_fields && refused.is_none() {
                refused = Some(HpackError::TooManyFields {
                    limit: limits.max_fields,
                });
            }
            let too_large = HpackError::HeaderListTooLarge { limit: list_limit };

            if first & 0x80 != 0 {
                let index = decode_integer(block, &mut pos, 7)?;
                let (name, value) = self.table.get(index)?;
                if refused.is_none() {
                    match charge(list_size, name.len(), value.len(), list_limit) {
                        Some(size) => {
                            list_size = size;
                            emit(name, value, Representation::Indexed);
                        }
                        None => refused = Some(too_large),
                    }
                }
                continue;
            }

            let (how, prefix) = if first & 0xc0 == 0x40 {
                (Representation::LiteralIndexed, 6)
            } else if first & 0xf0 == 0x10 {
                (Representation::LiteralNeverIndexed, 4)
            } else {
                (Representation::LiteralNotIndexed, 4)
            };
            let indexing = how == Representation::LiteralIndexed;
            let table_max = self.table.max_size;

            // The name: each string is wanted up to what is left of the list
            // budget (while the block is within it) or of the table (if the
            // field is to enter it), and read no further than that.
            let name_index = decode_integer(block, &mut pos, prefix)?;
            let name = if name_index == 0 {
                let list_room = refused
                    .is_none()
                    .then(|| list_limit.checked_sub(list_size.checked_add(ENTRY_OVERHEAD)?))
                    .flatten();
                let table_room = indexing
                    .then(|| table_max.checked_sub(ENTRY_OVERHEAD))
                    .flatten();
                read_string(
                    block,
                    &mut pos,
                    list_room.max(table_room),
                    &mut self.name_scratch,
                )?
            } else {
                self.table.get(name_index)?;
                Text::Index(name_index)
            };
            let name_len = match name {
                Text::Block(start, end) => Some(end - start),
                Text::Scratch => Some(self.name_scratch.len()),
                Text::Index(index) => Some(self.table.get(index)?.0.len()),
                Text::Skipped => None,
            };
            let room = |limit: usize, used: usize| {
                name_len.and_then(|n| {
                    limit.checked_sub(used.checked_add(ENTRY_OVERHEAD)?.checked_add(n)?)
                })
            };
            let list_room = if refused.is_none() {
                let room = room(list_limit, list_size);
                if room.is_none() {
                    refused = Some(too_large);
                }
                room
            } else {
                None
            };
            let table_room = if indexing { room(table_max, 0) } else { None };

            let value = read_string(
                block,
                &mut pos,
                list_room.max(table_room),
                &mut self.value_scratch,
            )?;
            let value_len = match value {
                Text::Block(start, end) => Some(end - start),
                Text::Scratch => Some(self.value_scratch.len()),
                Text::Index(_) | Text::Skipped => None,
            };
            let fits =
                |room: Option<usize>| matches!((room, value_len), (Some(r), Some(v)) if v <= r);

            if refused.is_none() {
                if fits(list_room) {
                    list_size += ENTRY_OVERHEAD + name_len.unwrap_or(0) + value_len.unwrap_or(0);
                    emit(
                        name.resolve(block, &self.name_scratch, &self.table),
                        value.resolve(block, &self.value_scratch, &self.table),
                        how,
                    );
                } else {
                    refused = Some(too_large);
                }
            }
            if indexing {
                if fits(table_room) {
                    // The name may be an entry this insertion evicts (§4.4),
                    // so the table is changed only after both are copied.
                    let entry = Entry::new(
                        name.resolve(block, &self.name_scratch, &self.table),
                        value.resolve(block, &self.value_scratch, &self.table),
                    );
                    self.table.insert(entry);
                } else {
                    // Larger than the table: it empties the table (§4.4).
                    self.table.clear();
                }
            }
        }
        if self.update_required {
            return Err(HpackError::MissingSizeUpdate {
                max: self.max_table_size,
            });
        }
        refused.map_or(Ok(()), Err)
    }
}

/// The list size after a field of `name` and `value` bytes, if within `limit`.
fn charge(list_size: usize, name: usize, value: usize, limit: usize) -> Option<usize> {
    let size = list_size
        .checked_add(ENTRY_OVERHEAD)?
        .checked_add(name)?
        .checked_add(value)?;
    (size <= limit).then_some(size)
}

/// Reads a string literal at `*pos` (RFC 7541 §5.2), moving `*pos` past it.
/// One longer than `room` (or any, if `room` is `None`) is skipped unread;
/// a Huffman-coded one within it is decoded into `scratch`.
fn read_string(
    block: &[u8],
    pos: &mut usize,
    room: Option<usize>,
    scratch: &mut Vec<u8>,
) -> Result<Text, HpackError> {
    let huffman = block.get(*pos).is_some_and(|b| b & 0x80 != 0);
    let len = decode_integer(block, pos, 7)?;
    let start = *pos;
    let available = block.len() - start;
    if len > available {
        return Err(HpackError::TruncatedString { len, available });
    }
    *pos += len;
    let Some(room) = room else {
        return Ok(Text::Skipped);
    };
    if !huffman {
        return Ok(if len <= room {
            Text::Block(start, start + len)
        } else {
            Text::Skipped
        });
    }
    if huffman::min_decoded_len(len) > room {
        return Ok(Text::Skipped);
    }
    scratch.clear();
    match huffman::decode(&block[start..start + len], scratch, room) {
        Ok(()) => Ok(Text::Scratch),
        Err(HuffmanError::TooLong) => Ok(Text::Skipped),
        Err(HuffmanError::Eos) => Err(HpackError::HuffmanEos),
        Err(HuffmanError::PaddingTooLong) => Err(HpackError::HuffmanPaddingTooLong),
        Err(HuffmanError::PaddingNotOnes) => Err(HpackError::HuffmanPaddingNotOnes),
    }
}

/// A field to encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    /// The name, lower case as HTTP/2 requires (not checked here).
    pub name: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// Must be sent never-indexed (RFC 7541 §6.2.3): a secret, or a field
    /// that arrived never-indexed and is passed on.
    pub never_indexed: bool,
}

impl<'a> Field<'a> {
    /// A field the encoder may index.
    pub fn new(name: &'a [u8], value: &'a [u8]) -> Self {
        Field {
            name,
            value,
            never_indexed: false,
        }
    }

    /// A field to send never-indexed.
    pub fn never_indexed(name: &'a [u8], value: &'a [u8]) -> Self {
        Field {
            name,
            value,
            never_indexed: true,
        }
    }
}

/// Whether a field is sent never-indexed whatever the caller said: those
/// carrying credentials, whose compression alongside attacker-chosen data
/// would let the attacker guess them from the compressed size (RFC 7541
/// §7.1.3). A cookie of 20 bytes or more is left to the usual rules, as
/// §7.1.3 suggests, because guessing one is impractical and cookies repeat
/// on every request.
fn is_sensitive(name: &[u8], value: &[u8]) -> bool {
    match name {
        b"authorization" | b"proxy-authorization" | b"set-cookie" => true,
        b"cookie" => value.len() < 20,
        _ => false,
    }
}

/// Whether adding a field to the dynamic table is likely to pay: not for
/// fields whose values are seldom the same twice on a connection, and not
/// for one that would push out most of the table.
fn worth_indexing(name: &[u8], value: &[u8], table_size: usize) -> bool {
    let unique = matches!(
        name,
        b":path"
            | b"content-length"
            | b"content-range"
            | b"etag"
            | b"last-modified"
            | b"age"
            | b"if-modified-since"
            | b"if-none-match"
            | b"location"
    );
    !unique && ENTRY_OVERHEAD + name.len() + value.len() <= table_size / 4 * 3
}

/// The first static table index with this name. A scan rather than a map:
/// 61 entries whose lengths mostly differ, so few comparisons look at bytes.
fn static_name(name: &[u8]) -> Option<usize> {
    STATIC_TABLE
        .iter()
        .position(|&(n, _)| n == name)
        .map(|i| i + 1)
}

/// The static table index holding exactly this field.
fn static_field(name: &[u8], value: &[u8]) -> Option<usize> {
    let first = static_name(name)?;
    STATIC_TABLE[first - 1..]
        .iter()
        .take_while(|&&(n, _)| n == name)
        .position(|&(_, v)| v == value)
        .map(|i| first + i)
}

/// Appends one field as a literal: with the name's index if it has one, the
/// representation given by `flags` and `prefix`.
fn encode_literal(
    field: &Field<'_>,
    name_index: Option<usize>,
    flags: u8,
    prefix: u8,
    out: &mut Vec<u8>,
) {
    match name_index {
        Some(index) => encode_integer(index, prefix, flags, out),
        None => {
            encode_integer(0, prefix, flags, out);
            encode_string(field.name, out);
        }
    }
    encode_string(field.value, out);
}

/// Appends a field with no dynamic table: an index for a whole static
/// match, else a literal not indexed (or never indexed).
fn encode_static(field: &Field<'_>, out: &mut Vec<u8>) {
    let never = field.never_indexed || is_sensitive(field.name, field.value);
    if !never {
        if let Some(index) = static_field(field.name, field.value) {
            return encode_integer(index, 7, 0x80, out);
        }
    }
    let flags = if never { 0x10 } else { 0x00 };
    encode_literal(field, static_name(field.name), flags, 4, out);
}

/// Appends a header block that uses only the static table and literals, so
/// that it decodes the same on any connection whatever its dynamic table
/// holds: a cached response head is encoded once and sent as it is. A
/// connection that has a size update waiting must send it first
/// ([`Encoder::begin_block`]).
pub fn encode_without_table<'a>(fields: impl IntoIterator<Item = Field<'a>>, out: &mut Vec<u8>) {
    for field in fields {
        encode_static(&field, out);
    }
}

/// Encodes the header blocks fastpath sends on one connection.
#[derive(Debug, Clone)]
pub struct Encoder {
    table: Table,
    /// The smallest table size since the last block began, if the size
    /// changed: the next block signals it before the final size (§4.2).
    pending_min: Option<usize>,
}

impl Default for Encoder {
    fn default() -> Self {
        Encoder::new()
    }
}

impl Encoder {
    /// An encoder with the initial dynamic table size of 4096 bytes.
    pub fn new() -> Self {
        Encoder {
            table: Table::new(DEFAULT_TABLE_SIZE),
            pending_min: None,
        }
    }

    /// Takes the peer's SETTINGS_HEADER_TABLE_SIZE. The encoder uses at
    /// most [`MAX_ENCODER_TABLE_SIZE`] of it, and a change is signalled at
    /// the start of the next block.
    pub fn set_max_table_size(&mut self, peer_max: usize) {
        let size = peer_max.min(MAX_ENCODER_TABLE_SIZE);
        if size == self.table.max_size && self.pending_min.is_none() {
            return;
        }
        self.pending_min = Some(self.pending_min.map_or(size, |min| min.min(size)));
        self.table.set_max_size(size);
    }

    /// The dynamic table's entries, newest first.
    pub fn dynamic_table(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.table.iter()
    }

    /// The dynamic table's size as RFC 7541 §4.1 counts it.
    pub fn dynamic_table_size(&self) -> usize {
        self.table.size
    }

    /// Appends the size updates waiting since the table size changed, if
    /// any: the start of every block. [`Encoder::encode`] calls it; a caller
    /// sending a block made by [`encode_without_table`] calls it first.
    pub fn begin_block(&mut self, out: &mut Vec<u8>) {
        if let Some(min) = self.pending_min.take() {
            // A size lowered and raised again is signalled at its lowest
            // first, so that the peer evicts what this table evicted.
            if min < self.table.max_size {
                encode_integer(min, 5, 0x20, out);
            }
            encode_integer(self.table.max_size, 5, 0x20, out);
        }
    }

    /// Appends one whole header block holding `fields`, in order.
    ///
    /// Each field is the shortest of what is allowed for it: an index when
    /// a table holds it whole; otherwise a literal with the name's index if
    /// one holds the name, its strings Huffman-coded when that is shorter,
    /// and added to the dynamic table if worth it. Credentials
    /// (`authorization`, `proxy-authorization`, `set-cookie`, a `cookie`
    /// under 20 bytes) and fields marked [`Field::never_indexed`] are always
    /// never-indexed literals.
    pub fn encode<'a>(&mut self, fields: impl IntoIterator<Item = Field<'a>>, out: &mut Vec<u8>) {
        self.begin_block(out);
        for field in fields {
            self.encode_field(&field, out);
        }
    }

    fn encode_field(&mut self, field: &Field<'_>, out: &mut Vec<u8>) {
        let (name, value) = (field.name, field.value);
        let never = field.never_indexed || is_sensitive(name, value);
        if never {
            let name_index = static_name(name).or_else(|| self.dynamic_name(name));
            return encode_literal(field, name_index, 0x10, 4, out);
        }
        if let Some(index) = static_field(name, value) {
            return encode_integer(index, 7, 0x80, out);
        }
        if let Some(i) = self.table.iter().position(|(n, v)| n == name && v == value) {
            return encode_integer(62 + i, 7, 0x80, out);
        }
        let name_index = static_name(name).or_else(|| self.dynamic_name(name));
        if worth_indexing(name, value, self.table.max_size) {
            encode_literal(field, name_index, 0x40, 6, out);
            self.table.insert(Entry::new(name, value));
        } else {
            encode_literal(field, name_index, 0x00, 4, out);
        }
    }

    /// The dynamic table index of the newest entry with this name. A scan:
    /// a 4 KiB table holds at most 128 entries, usually a few dozen.
    fn dynamic_name(&self, name: &[u8]) -> Option<usize> {
        self.table
            .iter()
            .position(|(n, _)| n == name)
            .map(|i| 62 + i)
    }
}

#[cfg(test)]
#[path = "hpack_tests.rs"]
mod tests;
