//! The Huffman code of HPACK (RFC 7541 §5.2, Appendix B): an encoder, and a
//! strict table-driven decoder.
//!
//! Header strings may be sent Huffman-coded; the encoder uses the code when
//! it is shorter, and the decoder refuses what §5.2 forbids: padding longer
//! than 7 bits, padding that is not the most significant bits of EOS (all
//! ones), and the EOS symbol itself inside a string.
//!
//! ```
//! use fastpath_http::h2::huffman;
//!
//! let mut coded = Vec::new();
//! huffman::encode(b"www.example.com", &mut coded);
//! assert_eq!(coded.len(), huffman::encoded_len(b"www.example.com"));
//! let mut plain = Vec::new();
//! huffman::decode(&coded, &mut plain, 64).unwrap();
//! assert_eq!(plain, b"www.example.com");
//! ```
//!
//! The decoder reads four bits at a time. Its states are the 256 internal
//! nodes of the code tree (a complete prefix code of 257 symbols has exactly
//! 256), and each state has one transition per nibble: the next state, and
//! the symbol completed on the way, if any. Codes are at least 5 bits long,
//! so a nibble completes at most one symbol. The table is 256 × 16
//! transitions of 3 bytes, 12 KiB, plus 256 bytes saying how a string may end
//! in each state; it is built from `CODES` once, on first use
//! (`OnceLock`), so the code is written down only once and a build-time
//! generator is not needed. Two lookups per input byte, no branch per bit:
//! an 8-bit table would halve the lookups but take 256 × 256 transitions
//! (about 200 KiB, far past the L1 cache), and a bit-by-bit tree walk would
//! take eight dependent steps per byte.

use std::fmt;
use std::sync::OnceLock;

/// The code of each symbol, 0..=255 and EOS (256), right-aligned, with its
/// length in bits (RFC 7541 Appendix B).
#[rustfmt::skip]
pub(crate) const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13), // 0
    (0x7fffd8, 23), // 1
    (0xfffffe2, 28), // 2
    (0xfffffe3, 28), // 3
    (0xfffffe4, 28), // 4
    (0xfffffe5, 28), // 5
    (0xfffffe6, 28), // 6
    (0xfffffe7, 28), // 7
    (0xfffffe8, 28), // 8
    (0xffffea, 24), // 9
    (0x3ffffffc, 30), // 10
    (0xfffffe9, 28), // 11
    (0xfffffea, 28), // 12
    (0x3ffffffd, 30), // 13
    (0xfffffeb, 28), // 14
    (0xfffffec, 28), // 15
    (0xfffffed, 28), // 16
    (0xfffffee, 28), // 17
    (0xfffffef, 28), // 18
    (0xffffff0, 28), // 19
    (0xffffff1, 28), // 20
    (0xffffff2, 28), // 21
    (0x3ffffffe, 30), // 22
    (0xffffff3, 28), // 23
    (0xffffff4, 28), // 24
    (0xffffff5, 28), // 25
    (0xffffff6, 28), // 26
    (0xffffff7, 28), // 27
    (0xffffff8, 28), // 28
    (0xffffff9, 28), // 29
    (0xffffffa, 28), // 30
    (0xffffffb, 28), // 31
    (0x14, 6), // ' '
    (0x3f8, 10), // '!'
    (0x3f9, 10), // '"'
    (0xffa, 12), // '#'
    (0x1ff9, 13), // '$'
    (0x15, 6), // '%'
    (0xf8, 8), // '&'
    (0x7fa, 11), // '\''
    (0x3fa, 10), // '('
    (0x3fb, 10), // ')'
    (0xf9, 8), // '*'
    (0x7fb, 11), // '+'
    (0xfa, 8), // ','
    (0x16, 6), // '-'
    (0x17, 6), // '.'
    (0x18, 6), // '/'
    (0x0, 5), // '0'
    (0x1, 5), // '1'
    (0x2, 5), // '2'
    (0x19, 6), // '3'
    (0x1a, 6), // '4'
    (0x1b, 6), // '5'
    (0x1c, 6), // '6'
    (0x1d, 6), // '7'
    (0x1e, 6), // '8'
    (0x1f, 6), // '9'
    (0x5c, 7), // ':'
    (0xfb, 8), // ';'
    (0x7ffc, 15), // '<'
    (0x20, 6), // '='
    (0xffb, 12), // '>'
    (0x3fc, 10), // '?'
    (0x1ffa, 13), // '@'
    (0x21, 6), // 'A'
    (0x5d, 7), // 'B'
    (0x5e, 7), // 'C'
    (0x5f, 7), // 'D'
    (0x60, 7), // 'E'
    (0x61, 7), // 'F'
    (0x62, 7), // 'G'
    (0x63, 7), // 'H'
    (0x64, 7), // 'I'
    (0x65, 7), // 'J'
    (0x66, 7), // 'K'
    (0x67, 7), // 'L'
    (0x68, 7), // 'M'
    (0x69, 7), // 'N'
    (0x6a, 7), // 'O'
    (0x6b, 7), // 'P'
    (0x6c, 7), // 'Q'
    (0x6d, 7), // 'R'
    (0x6e, 7), // 'S'
    (0x6f, 7), // 'T'
    (0x70, 7), // 'U'
    (0x71, 7), // 'V'
    (0x72, 7), // 'W'
    (0xfc, 8), // 'X'
    (0x73, 7), // 'Y'
    (0xfd, 8), // 'Z'
    (0x1ffb, 13), // '['
    (0x7fff0, 19), // '\\'
    (0x1ffc, 13), // ']'
    (0x3ffc, 14), // '^'
    (0x22, 6), // '_'
    (0x7ffd, 15), // '`'
    (0x3, 5), // 'a'
    (0x23, 6), // 'b'
    (0x4, 5), // 'c'
    (0x24, 6), // 'd'
    (0x5, 5), // 'e'
    (0x25, 6), // 'f'
    (0x26, 6), // 'g'
    (0x27, 6), // 'h'
    (0x6, 5), // 'i'
    (0x74, 7), // 'j'
    (0x75, 7), // 'k'
    (0x28, 6), // 'l'
    (0x29, 6), // 'm'
    (0x2a, 6), // 'n'
    (0x7, 5), // 'o'
    (0x2b, 6), // 'p'
    (0x76, 7), // 'q'
    (0x2c, 6), // 'r'
    (0x8, 5), // 's'
    (0x9, 5), // 't'
    (0x2d, 6), // 'u'
    (0x77, 7), // 'v'
    (0x78, 7), // 'w'
    (0x79, 7), // 'x'
    (0x7a, 7), // 'y'
    (0x7b, 7), // 'z'
    (0x7ffe, 15), // '{'
    (0x7fc, 11), // '|'
    (0x3ffd, 14), // '}'
    (0x1ffd, 13), // '~'
    (0xffffffc, 28), // 127
    (0xfffe6, 20), // 128
    (0x3fffd2, 22), // 129
    (0xfffe7, 20), // 130
    (0xfffe8, 20), // 131
    (0x3fffd3, 22), // 132
    (0x3fffd4, 22), // 133
    (0x3fffd5, 22), // 134
    (0x7fffd9, 23), // 135
    (0x3fffd6, 22), // 136
    (0x7fffda, 23), // 137
    (0x7fffdb, 23), // 138
    (0x7fffdc, 23), // 139
    (0x7fffdd, 23), // 140
    (0x7fffde, 23), // 141
    (0xffffeb, 24), // 142
    (0x7fffdf, 23), // 143
    (0xffffec, 24), // 144
    (0xffffed, 24), // 145
    (0x3fffd7, 22), // 146
    (0x7fffe0, 23), // 147
    (0xffffee, 24), // 148
    (0x7fffe1, 23), // 149
    (0x7fffe2, 23), // 150
    (0x7fffe3, 23), // 151
    (0x7fffe4, 23), // 152
    (0x1fffdc, 21), // 153
    (0x3fffd8, 22), // 154
    (0x7fffe5, 23), // 155
    (0x3fffd9, 22), // 156
    (0x7fffe6, 23), // 157
    (0x7fffe7, 23), // 158
    (0xffffef, 24), // 159
    (0x3fffda, 22), // 160
    (0x1fffdd, 21), // 161
    (0xfffe9, 20), // 162
    (0x3fffdb, 22), // 163
    (0x3fffdc, 22), // 164
    (0x7fffe8, 23), // 165
    (0x7fffe9, 23), // 166
    (0x1fffde, 21), // 167
    (0x7fffea, 23), // 168
    (0x3fffdd, 22), // 169
    (0x3fffde, 22), // 170
    (0xfffff0, 24), // 171
    (0x1fffdf, 21), // 172
    (0x3fffdf, 22), // 173
    (0x7fffeb, 23), // 174
    (0x7fffec, 23), // 175
    (0x1fffe0, 21), // 176
    (0x1fffe1, 21), // 177
    (0x3fffe0, 22), // 178
    (0x1fffe2, 21), // 179
    (0x7fffed, 23), // 180
    (0x3fffe1, 22), // 181
    (0x7fffee, 23), // 182
    (0x7fffef, 23), // 183
    (0xfffea, 20), // 184
    (0x3fffe2, 22), // 185
    (0x3fffe3, 22), // 186
    (0x3fffe4, 22), // 187
    (0x7ffff0, 23), // 188
    (0x3fffe5, 22), // 189
    (0x3fffe6, 22), // 190
    (0x7ffff1, 23), // 191
    (0x3ffffe0, 26), // 192
    (0x3ffffe1, 26), // 193
    (0xfffeb, 20), // 194
    (0x7fff1, 19), // 195
    (0x3fffe7, 22), // 196
    (0x7ffff2, 23), // 197
    (0x3fffe8, 22), // 198
    (0x1ffffec, 25), // 199
    (0x3ffffe2, 26), // 200
    (0x3ffffe3, 26), // 201
    (0x3ffffe4, 26), // 202
    (0x7ffffde, 27), // 203
    (0x7ffffdf, 27), // 204
    (0x3ffffe5, 26), // 205
    (0xfffff1, 24), // 206
    (0x1ffffed, 25), // 207
    (0x7fff2, 19), // 208
    (0x1fffe3, 21), // 209
    (0x3ffffe6, 26), // 210
    (0x7ffffe0, 27), // 211
    (0x7ffffe1, 27), // 212
    (0x3ffffe7, 26), // 213
    (0x7ffffe2, 27), // 214
    (0xfffff2, 24), // 215
    (0x1fffe4, 21), // 216
    (0x1fffe5, 21), // 217
    (0x3ffffe8, 26), // 218
    (0x3ffffe9, 26), // 219
    (0xffffffd, 28), // 220
    (0x7ffffe3, 27), // 221
    (0x7ffffe4, 27), // 222
    (0x7ffffe5, 27), // 223
    (0xfffec, 20), // 224
    (0xfffff3, 24), // 225
    (0xfffed, 20), // 226
    (0x1fffe6, 21), // 227
    (0x3fffe9, 22), // 228
    (0x1fffe7, 21), // 229
    (0x1fffe8, 21), // 230
    (0x7ffff3, 23), // 231
    (0x3fffea, 22), // 232
    (0x3fffeb, 22), // 233
    (0x1ffffee, 25), // 234
    (0x1ffffef, 25), // 235
    (0xfffff4, 24), // 236
    (0xfffff5, 24), // 237
    (0x3ffffea, 26), // 238
    (0x7ffff4, 23), // 239
    (0x3ffffeb, 26), // 240
    (0x7ffffe6, 27), // 241
    (0x3ffffec, 26), // 242
    (0x3ffffed, 26), // 243
    (0x7ffffe7, 27), // 244
    (0x7ffffe8, 27), // 245
    (0x7ffffe9, 27), // 246
    (0x7ffffea, 27), // 247
    (0x7ffffeb, 27), // 248
    (0xffffffe, 28), // 249
    (0x7ffffec, 27), // 250
    (0x7ffffed, 27), // 251
    (0x7ffffee, 27), // 252
    (0x7ffffef, 27), // 253
    (0x7fffff0, 27), // 254
    (0x3ffffee, 26), // 255
    (0x3fffffff, 30), // EOS
];

/// The symbol number of EOS, which is never part of a string.
const EOS: usize = 256;

/// Why a Huffman-coded string was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HuffmanError {
    /// The EOS symbol appeared inside the string.
    Eos,
    /// The padding after the last symbol is 8 bits or more.
    PaddingTooLong,
    /// The padding after the last symbol is not all ones.
    PaddingNotOnes,
    /// The decoded string would be longer than the caller allowed.
    TooLong,
}

impl fmt::Display for HuffmanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HuffmanError::Eos => "EOS symbol inside a Huffman-coded string",
            HuffmanError::PaddingTooLong => "Huffman-coded string padded with more than 7 bits",
            HuffmanError::PaddingNotOnes => {
                "Huffman-coded string padded with bits that are not all ones"
            }
            HuffmanError::TooLong => "Huffman-coded string longer than allowed",
        })
    }
}

impl std::error::Error for HuffmanError {}

/// The number of bytes `src` takes Huffman-coded, padding included.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(CODES[usize::from(b)].1))
        .sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-coded to `out`, padded with ones to a whole byte.
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    out.reserve(encoded_len(src));
    // At most 7 bits wait in `acc` between symbols, and a code is at most 30
    // bits, so 37 bits is the most it holds: a u64 never loses a pending bit.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if bits > 0 {
        // The padding is the top bits of EOS, which are all ones.
        out.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
    }
}

/// One transition of the decoder: from a state, on one nibble.
#[derive(Debug, Clone, Copy, Default)]
struct Step {
    /// The state after the nibble.
    next: u8,
    /// The symbol completed on the way, if `flags` has [`EMIT`].
    symbol: u8,
    flags: u8,
}

/// The nibble completes `symbol`.
const EMIT: u8 = 1;
/// The nibble completes EOS: the string is malformed.
const FAIL: u8 = 2;

/// How a string may end in a state: the bits read since the last symbol are
/// the padding, and §5.2 wants at most 7 of them, all ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum End {
    #[default]
    NotOnes,
    Accept,
    TooLong,
}

struct Tables {
    steps: Box<[[Step; 16]; 256]>,
    ends: [End; 256],
}

fn tables() -> &'static Tables {
    static TABLES: OnceLock<Tables> = OnceLock::new();
    TABLES.get_or_init(build)
}

/// A child in the code tree: an internal node (a state) or a symbol.
#[derive(Debug, Clone, Copy)]
enum Node {
    Empty,
    Inner(usize),
    Leaf(usize),
}

/// Builds the code tree from [`CODES`], then the transitions of each of its
/// internal nodes.
fn build() -> Tables {
    // children[n] are node n's children on bit 0 and bit 1; node 0 is the root.
    let mut children: Vec<[Node; 2]> = vec![[Node::Empty; 2]];
    for (symbol, &(code, len)) in CODES.iter().enumerate() {
        let mut node = 0;
        for i in (0..len).rev() {
            let bit = ((code >> i) & 1) as usize;
            if i == 0 {
                assert!(
                    matches!(children[node][bit], Node::Empty),
                    "not a prefix code"
                );
                children[node][bit] = Node::Leaf(symbol);
            } else {
                node = match children[node][bit] {
                    Node::Inner(next) => next,
                    Node::Empty => {
                        children.push([Node::Empty; 2]);
                        let next = children.len() - 1;
                        children[node][bit] = Node::Inner(next);
                        next
                    }
                    Node::Leaf(_) => panic!("not a prefix code"),
                };
            }
        }
    }
    assert_eq!(
        children.len(),
        256,
        "a complete code of 257 symbols has 256 inner nodes"
    );

    // The nodes reached from the root by ones alone, with their depth: a
    // string may end in one of these if it is at most 7 deep.
    let mut ends = [End::NotOnes; 256];
    let mut node = 0;
    let mut depth = 0;
    loop {
        ends[node] = if depth <= 7 {
            End::Accept
        } else {
            End::TooLong
        };
        match children[node][1] {
            Node::Inner(next) => node = next,
            _ => break,
        }
        depth += 1;
    }

    let mut steps = Box::new([[Step::default(); 16]; 256]);
    for (state, row) in steps.iter_mut().enumerate() {
        for (nibble, step) in row.iter_mut().enumerate() {
            let mut node = state;
            for i in (0..4).rev() {
                match children[node][(nibble >> i) & 1] {
                    Node::Inner(next) => node = next,
                    Node::Leaf(EOS) => {
                        step.flags = FAIL;
                        break;
                    }
                    Node::Leaf(symbol) => {
                        assert_eq!(step.flags, 0, "codes are at least 5 bits long");
                        step.flags = EMIT;
                        step.symbol = symbol as u8;
                        node = 0;
                    }
                    Node::Empty => unreachable!("the code is complete"),
                }
            }
            step.next = node as u8;
        }
    }
    Tables { steps, ends }
}

/// Appends the Huffman-coded `src` decoded to `out`, refusing it if the
/// decoded string would be longer than `max_len`: `out` then holds a partial
/// string, which the caller drops.
pub fn decode(src: &[u8], out: &mut Vec<u8>, max_len: usize) -> Result<(), HuffmanError> {
    let Tables { steps, ends } = tables();
    // Each symbol takes at least 5 bits: a bound on the length, not a guess.
    let start = out.len();
    out.reserve((src.len().saturating_mul(8) / 5).min(max_len));
    let limit = start.saturating_add(max_len);
    let mut state = 0usize;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0x0f] {
            let step = steps[state][usize::from(nibble)];
            if step.flags != 0 {
                if step.flags & FAIL != 0 {
                    return Err(HuffmanError::Eos);
                }
                if out.len() == limit {
                    return Err(HuffmanError::TooLong);
                }
                out.push(step.symbol);
            }
            state = usize::from(step.next);
        }
    }
    match ends[state] {
        End::Accept => Ok(()),
        End::TooLong => Err(HuffmanError::PaddingTooLong),
        End::NotOnes => Err(HuffmanError::PaddingNotOnes),
    }
}

/// The fewest bytes a Huffman-coded string of `coded_len` bytes decodes to:
/// every symbol but EOS is at most 30 bits, and at most 7 bits are padding.
/// A string whose least decoded length is over a budget can be refused
/// before it is decoded.
pub(crate) fn min_decoded_len(coded_len: usize) -> usize {
    coded_len.saturating_mul(8).saturating_sub(7).div_ceil(30)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `symbol`'s code alone, padded with ones.
    fn single(symbol: usize) -> Vec<u8> {
        let (code, len) = CODES[symbol];
        let len = u32::from(len);
        let padded = len.div_ceil(8) * 8;
        let value = (u64::from(code) << (padded - len)) | ((1u64 << (padded - len)) - 1);
        (0..padded / 8)
            .rev()
            .map(|i| (value >> (i * 8)) as u8)
            .collect()
    }

    #[test]
    fn every_symbol_alone_decodes_and_eos_is_refused() {
        for symbol in 0..256 {
            let coded = single(symbol);
            let mut out = Vec::new();
            assert_eq!(decode(&coded, &mut out, 1), Ok(()), "symbol {symbol}");
            assert_eq!(out, [symbol as u8], "symbol {symbol}");
            let mut again = Vec::new();
            encode(&[symbol as u8], &mut again);
            assert_eq!(again, coded, "symbol {symbol}");
            assert_eq!(encoded_len(&[symbol as u8]), coded.len());
        }
        // EOS is 30 ones: 0xff 0xff 0xff 0xfc plus two padding ones.
        let eos = single(EOS);
        assert_eq!(eos, [0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decode(&eos, &mut Vec::new(), 8), Err(HuffmanError::Eos));
        // EOS after a symbol is refused too.
        let mut coded = vec![0x1f, 0xff, 0xff, 0xff, 0xff];
        // 'a' is 00011, so 0x1f is 'a' then three ones of EOS.
        assert_eq!(decode(&coded, &mut Vec::new(), 8), Err(HuffmanError::Eos));
        coded.truncate(1);
        assert_eq!(decode(&coded, &mut Vec::new(), 8), Ok(()));
    }

    #[test]
    fn padding_must_be_short_and_all_ones() {
        let mut out = Vec::new();
        assert_eq!(decode(&[], &mut out, 8), Ok(()));
        assert!(out.is_empty());
        // A whole byte of ones is padding of 8 bits.
        assert_eq!(
            decode(&[0xff], &mut out, 8),
            Err(HuffmanError::PaddingTooLong)
        );
        // 'a' (00011) then 111 is fine; then another 0xff makes 11 bits.
        assert_eq!(
            decode(&[0x1f, 0xff], &mut out, 8),
            Err(HuffmanError::PaddingTooLong)
        );
        // 'a' then 110: not all ones.
        assert_eq!(
            decode(&[0x1e], &mut out, 8),
            Err(HuffmanError::PaddingNotOnes)
        );
        // 'a' then 000: the start of another code, not padding.
        assert_eq!(
            decode(&[0x18], &mut out, 8),
            Err(HuffmanError::PaddingNotOnes)
        );
        // A code ending in 0 cut short by that bit and padded with ones is
        // never taken for its symbol: the padding cannot stand for the 0.
        for (symbol, &(code, len)) in CODES[..EOS].iter().enumerate() {
            if code & 1 == 1 {
                continue;
            }
            let shorter = (code >> 1, len - 1);
            let len = u32::from(shorter.1);
            let padded = len.div_ceil(8) * 8;
            let value = (u64::from(shorter.0) << (padded - len)) | ((1u64 << (padded - len)) - 1);
            let coded: Vec<u8> = (0..padded / 8)
                .rev()
                .map(|i| (value >> (i * 8)) as u8)
                .collect();
            let mut out = Vec::new();
            match decode(&coded, &mut out, 8) {
                Ok(()) => assert_ne!(out, [symbol as u8], "symbol {symbol} cut short"),
                Err(e) => assert_ne!(e, HuffmanError::TooLong, "symbol {symbol}"),
            }
        }
    }

    #[test]
    fn decoded_length_is_capped() {
        let mut coded = Vec::new();
        encode(b"abcdef", &mut coded);
        let mut out = Vec::new();
        assert_eq!(decode(&coded, &mut out, 5), Err(HuffmanError::TooLong));
        out.clear();
        assert_eq!(decode(&coded, &mut out, 6), Ok(()));
        assert_eq!(out, b"abcdef");
        assert_eq!(
            decode(&coded, &mut Vec::new(), 0),
            Err(HuffmanError::TooLong)
        );
    }

    #[test]
    fn min_decoded_len_is_a_lower_bound() {
        // 256 symbols of 30 bits... the longest non-EOS codes are 30 bits.
        let longest = (0..256).filter(|&s| CODES[s].1 == 30).collect::<Vec<_>>();
        assert!(!longest.is_empty());
        for n in 0..40 {
            let plain = vec![longest[0] as u8; n];
            let coded_len = encoded_len(&plain);
            assert!(
                min_decoded_len(coded_len) <= n,
                "{n} symbols in {coded_len} bytes"
            );
        }
        assert_eq!(min_decoded_len(0), 0);
        assert_eq!(min_decoded_len(1), 1);
        assert!(min_decoded_len(usize::MAX) > 0);
    }

    #[test]
    fn round_trips_every_byte_sequence_shape() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for n in 0..300 {
            let plain: Vec<u8> = (0..n % 70)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            let mut coded = Vec::new();
            encode(&plain, &mut coded);
            assert_eq!(coded.len(), encoded_len(&plain));
            let mut out = Vec::new();
            decode(&coded, &mut out, plain.len()).unwrap();
            assert_eq!(out, plain);
        }
    }
}
