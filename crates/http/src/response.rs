//! Response-head serialisation: status lines and header fields appended to a
//! caller-owned buffer, so building a head allocates nothing once the buffer
//! has grown to its working size.

/// Standard reason phrase for `status` (RFC 9110 §15), or "" for codes we do
/// not know (the status line then ends "NNN \r\n", which RFC 9112 allows).
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        203 => "Non-Authoritative Information",
        204 => "No Content",
        205 => "Reset Content",
        206 => "Partial Content",
        300 => "Multiple Choices",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        426 => "Upgrade Required",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Appends "HTTP/1.1 {status} {reason}\r\n". `status` should be 100..=999;
/// other values are written as 500 so the line always has three digits.
pub fn write_status_line(status: u16, out: &mut Vec<u8>) {
    let status = if (100..=999).contains(&status) {
        status
    } else {
        500
    };
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(&[
        b'0' + (status / 100) as u8,
        b'0' + (status / 10 % 10) as u8,
        b'0' + (status % 10) as u8,
        b' ',
    ]);
    out.extend_from_slice(reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\n");
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_phrases() {
        assert_eq!(reason_phrase(200), "OK");
        assert_eq!(reason_phrase(206), "Partial Content");
        assert_eq!(reason_phrase(304), "Not Modified");
        assert_eq!(reason_phrase(416), "Range Not Satisfiable");
        assert_eq!(reason_phrase(431), "Request Header Fields Too Large");
        assert_eq!(reason_phrase(505), "HTTP Version Not Supported");
        assert_eq!(reason_phrase(299), "");
    }

    #[test]
    fn status_lines() {
        let mut out = Vec::new();
        write_status_line(200, &mut out);
        write_status_line(404, &mut out);
        write_status_line(299, &mut out);
        write_status_line(7, &mut out);
        assert_eq!(
            out,
            b"HTTP/1.1 200 OK\r\nHTTP/1.1 404 Not Found\r\nHTTP/1.1 299 \r\nHTTP/1.1 500 Internal Server Error\r\n"
        );
    }

    #[test]
    fn header_lines() {
        let mut out = Vec::new();
        write_header("Content-Type", b"text/html", &mut out);
        write_header("X-Empty", b"", &mut out);
        write_header("X-Evil", b"a\r\nSet-Cookie: x\n", &mut out);
        write_header_u64("Content-Length", 0, &mut out);
        write_header_u64("Content-Length", u64::MAX, &mut out);
        assert_eq!(
            out,
            &b"Content-Type: text/html\r\nX-Empty: \r\nX-Evil: a  Set-Cookie: x \r\nContent-Length: 0\r\nContent-Length: 18446744073709551615\r\n"[..]
        );
    }
}
