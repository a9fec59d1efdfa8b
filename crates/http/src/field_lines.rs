//! Writing one field line: the primitive every encoder (fastpath's own response heads, the
//! forwarded request heads, relayed response heads) builds on, so that none of them can be
//! made to inject a line.

/// Appends "Name: value\r\n". CR and LF in `value` are written as spaces so
/// no value, however it was built, can inject extra header lines.
pub fn write_header(name: &str, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    if memchr::memchr2(b'\r', b'\n', value).is_none() {
        out.extend_from_slice(value);
    } else {
        out.extend(
            value
                .iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends "Name: n\r\n" without going through a formatted String, for
/// Content-Length and similar numeric fields.
pub fn write_header_u64(name: &str, n: u64, out: &mut Vec<u8>) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    write_header(name, &digits[i..], out);
}
