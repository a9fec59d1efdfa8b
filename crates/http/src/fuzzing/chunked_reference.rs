//! A second chunked decoder to check [`crate::ChunkedDecoder`] against:
//! written straight from the ABNF of RFC 9112 §7.1 and RFC 9110 §5.5/§5.6 as
//! a recursive descent over the whole input, with its own character classes,
//! and no state carried between calls. Slow and obvious on purpose; only the
//! limits and the list of forbidden trailer fields are shared, since those
//! are policy rather than parsing.

use crate::{
    FORBIDDEN_TRAILERS, MAX_CHUNK_LINE, MAX_CHUNK_SIZE_DIGITS, MAX_TRAILER_BYTES,
    MAX_TRAILER_FIELDS,
};

/// What a chunked body at the start of some input amounts to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkedOutcome {
    /// The body ends after `consumed` bytes; `body` is its data.
    Done {
        /// Bytes of the input the body takes, trailer section included.
        consumed: usize,
        /// The chunks' data.
        body: Vec<u8>,
    },
    /// The input is the start of a valid body; `body` is the data so far.
    Partial {
        /// The chunks' data seen so far.
        body: Vec<u8>,
    },
    /// No valid body starts like this: answer with `status`.
    Invalid {
        /// 400 for bad syntax, 431 for a trailer section over its limits.
        status: u16,
    },
}

/// Why parsing stopped before the end of the body.
enum Stop {
    /// The input ended; more could make it valid.
    Incomplete,
    /// No continuation can make it valid.
    Invalid(u16),
}

type Step<T = ()> = Result<T, Stop>;

struct Cursor<'a> {
    input: &'a [u8],
    pos: usize,
    /// Reading at or past `limit`, when the input has a byte there, fails
    /// with `over`: how the size line and trailer section limits apply.
    limit: usize,
    over: u16,
}

impl Cursor<'_> {
    fn peek(&self) -> Step<u8> {
        match self.input.get(self.pos) {
            None => Err(Stop::Incomplete),
            Some(_) if self.pos >= self.limit => Err(Stop::Invalid(self.over)),
            Some(&b) => Ok(b),
        }
    }

    /// Takes the next byte if `ok` accepts it; whether it did.
    fn take_if(&mut self, ok: impl Fn(u8) -> bool) -> Step<bool> {
        let b = self.peek()?;
        if ok(b) {
            self.pos += 1;
        }
        Ok(ok(b))
    }

    /// The next byte must be `want`.
    fn expect(&mut self, want: u8) -> Step {
        if self.take_if(|b| b == want)? {
            Ok(())
        } else {
            Err(Stop::Invalid(400))
        }
    }

    fn crlf(&mut self) -> Step {
        self.expect(b'\r')?;
        self.expect(b'\n')
    }

    /// BWS = *( SP / HTAB )
    fn bws(&mut self) -> Step {
        while self.take_if(|b| b == b' ' || b == b'\t')? {}
        Ok(())
    }

    /// token = 1*tchar
    fn token(&mut self) -> Step {
        if !self.take_if(tchar)? {
            return Err(Stop::Invalid(400));
        }
        while self.take_if(tchar)? {}
        Ok(())
    }

    /// quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE
    fn quoted_string(&mut self) -> Step {
        self.expect(b'"')?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.pos += 1;
                    // quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text )
                    if !self.take_if(|b| b == b'\t' || b == b' ' || vchar(b) || obs_text(b))? {
                        return Err(Stop::Invalid(400));
                    }
                }
                // qdtext = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
                b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff => self.pos += 1,
                _ => return Err(Stop::Invalid(400)),
            }
        }
    }

    /// chunk-size [ chunk-ext ] CRLF, returning the size.
    fn size_line(&mut self) -> Step<u64> {
        let mut size: u64 = 0;
        let mut digits = 0;
        while let Some(d) = hex_value(self.peek()?) {
            digits += 1;
            if digits > MAX_CHUNK_SIZE_DIGITS {
                return Err(Stop::Invalid(400));
            }
            size = size * 16 + d;
            self.pos += 1;
        }
        if digits == 0 {
            return Err(Stop::Invalid(400));
        }
        // chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
        loop {
            let before = self.pos;
            self.bws()?;
            if !self.take_if(|b| b == b';')? {
                self.pos = before;
                break;
            }
            self.bws()?;
            self.token()?;
            let after_name = self.pos;
            self.bws()?;
            if self.take_if(|b| b == b'=')? {
                self.bws()?;
                if self.peek()? == b'"' {
                    self.quoted_string()?;
                } else {
                    self.token()?;
                }
            } else {
                self.pos = after_name;
            }
        }
        self.crlf()?;
        Ok(size)
    }

    /// trailer-section = *( field-line CRLF ) CRLF
    fn trailer_section(&mut self) -> Step {
        let mut fields = 0;
        loop {
            if self.peek()? == b'\r' {
                return self.crlf();
            }
            if self.peek()? == b'\n' {
                return Err(Stop::Invalid(400));
            }
            if fields == MAX_TRAILER_FIELDS {
                return Err(Stop::Invalid(431));
            }
            fields += 1;
            // field-line = field-name ":" OWS field-value OWS; OWS and the
            // value's inner spaces are all SP / HTAB, so the part after the
            // colon is any run of SP, HTAB, VCHAR and obs-text.
            let start = self.pos;
            self.token()?;
            let name = &self.input[start..self.pos];
            self.expect(b':')?;
            if FORBIDDEN_TRAILERS
                .iter()
                .any(|(n, _)| n.as_bytes().eq_ignore_ascii_case(name))
            {
                return Err(Stop::Invalid(400));
            }
            while self.take_if(|b| b == b' ' || b == b'\t' || vchar(b) || obs_text(b))? {}
            self.crlf()?;
        }
    }
}

fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn vchar(b: u8) -> bool {
    (0x21..=0x7e).contains(&b)
}

fn obs_text(b: u8) -> bool {
    b >= 0x80
}

fn hex_value(b: u8) -> Option<u64> {
    match b {
        b'0'..=b'9' => Some(u64::from(b - b'0')),
        b'a'..=b'f' => Some(u64::from(b - b'a') + 10),
        b'A'..=b'F' => Some(u64::from(b - b'A') + 10),
        _ => None,
    }
}

/// Decodes the chunked body at the start of `input` in one go.
pub fn reference_chunked(input: &[u8]) -> ChunkedOutcome {
    let mut body = Vec::new();
    let mut cur = Cursor {
        input,
        pos: 0,
        limit: 0,
        over: 400,
    };
    match chunked_body(&mut cur, &mut body) {
        Ok(()) => ChunkedOutcome::Done {
            consumed: cur.pos,
            body,
        },
        Err(Stop::Incomplete) => ChunkedOutcome::Partial { body },
        Err(Stop::Invalid(status)) => ChunkedOutcome::Invalid { status },
    }
}

/// chunked-body = *chunk last-chunk trailer-section CRLF
fn chunked_body(cur: &mut Cursor<'_>, body: &mut Vec<u8>) -> Step {
    loop {
        cur.limit = cur.pos + MAX_CHUNK_LINE;
        cur.over = 400;
        let size = cur.size_line()?;
        if size == 0 {
            cur.limit = cur.pos + MAX_TRAILER_BYTES;
            cur.over = 431;
            return cur.trailer_section();
        }
        cur.limit = usize::MAX;
        let rest = &cur.input[cur.pos..];
        let n = usize::try_from(size).unwrap_or(usize::MAX).min(rest.len());
        body.extend_from_slice(&rest[..n]);
        cur.pos += n;
        if (n as u64) < size {
            return Err(Stop::Incomplete);
        }
        cur.crlf()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(consumed: usize, body: &[u8]) -> ChunkedOutcome {
        ChunkedOutcome::Done {
            consumed,
            body: body.to_vec(),
        }
    }

    #[test]
    fn reads_the_grammar() {
        assert_eq!(
            reference_chunked(b"5 ; a = \"b\\\"\" ;c\r\nhello\r\n0\r\nX: y\r\n\r\nNEXT"),
            done(36, b"hello")
        );
        assert_eq!(
            reference_chunked(b"5\r\nhel"),
            ChunkedOutcome::Partial {
                body: b"hel".to_vec()
            }
        );
        assert_eq!(
            reference_chunked(b"5;a "),
            ChunkedOutcome::Partial { body: Vec::new() }
        );
        for bad in [
            &b"5 \r\n"[..],
            b"5;a \r\n",
            b"2;\nxx",
            b"5\r\nhello\n",
            b"0\r\nhello\r\n",
            b"0\r\nHost: x\r\n",
            b"0\r\nX: a\r\n b\r\n",
        ] {
            assert_eq!(
                reference_chunked(bad),
                ChunkedOutcome::Invalid { status: 400 },
                "{bad:?}"
            );
        }
    }
}
