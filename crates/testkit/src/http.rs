//! HTTP/1.x responses read off a connection by a reader of the tests' own, so that a test sees
//! exactly what went over the wire: [`read_response`] and the [`Response`] it gives.

use std::fmt;
use std::io::{self, Read};

/// A response as it came: the status line's parts, the fields, the body (de-chunked).
#[derive(Clone, Debug)]
pub struct Response {
    /// `HTTP/1.1`.
    pub version: String,
    pub status: u16,
    pub reason: String,
    /// Fields in the order received, values trimmed.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The head as received, status line and fields.
    pub head: String,
}

/// Reads one response to a request with `method` off `stream`: its head, then its body (none
/// for HEAD, 1xx, 204 and 304; else chunked, by Content-Length, or up to the end of the
/// stream). `buf` holds what an earlier call read beyond its response, and keeps what this one
/// reads beyond its own, for the next. `Ok(None)` if the stream ends cleanly before the first
/// byte of a response.
pub fn read_response(
    stream: &mut impl Read,
    buf: &mut Vec<u8>,
    method: &str,
) -> io::Result<Option<Response>> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        if fill(stream, buf)? == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "end of stream inside a response head",
            ));
        }
    };
    let head: Vec<u8> = buf.drain(..head_end).collect();
    let head_text = String::from_utf8(head)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "response head not UTF-8"))?;
    let mut lines = head_text.trim_end_matches("\r\n").split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default().to_string();
    if !version.starts_with("HTTP/") {
        return Err(bad(&format!("bad status line {status_line:?}")));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(&format!("bad status code in {status_line:?}")))?;
    let reason = parts.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| bad(&format!("bad header line {line:?}")))?;
        if name.is_empty() || name.ends_with([' ', '\t']) {
            return Err(bad(&format!("bad header name in {line:?}")));
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    let mut r = Response {
        version,
        status,
        reason,
        headers,
        body: Vec::new(),
        head: head_text,
    };

    let no_body =
        method == "HEAD" || (100..200).contains(&status) || status == 204 || status == 304;
    if no_body {
        return Ok(Some(r));
    }
    let chunked = r.header("transfer-encoding").is_some_and(|te| {
        te.rsplit(',')
            .next()
            .unwrap_or_default()
            .trim()
            .eq_ignore_ascii_case("chunked")
    });
    if chunked {
        r.body = read_chunked(stream, buf)?;
    } else if let Some(cl) = r.header("content-length") {
        let n: usize = cl
            .parse()
            .map_err(|_| bad(&format!("bad Content-Length {cl:?}")))?;
        while buf.len() < n {
            if fill(stream, buf)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("end of stream after {} of {n} body bytes", buf.len()),
                ));
            }
        }
        r.body = buf.drain(..n).collect();
    } else {
        // Delimited by the end of the connection.
        loop {
            match fill(stream, buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => return Err(e),
            }
        }
        r.body = std::mem::take(buf);
    }
    Ok(Some(r))
}

fn read_line(stream: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<String> {
    loop {
        if let Some(i) = find(buf, b"\r\n") {
            let line: Vec<u8> = buf.drain(..i + 2).collect();
            return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
        }
        if fill(stream, buf)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "end of stream inside a chunked body",
            ));
        }
    }
}

fn read_chunked(stream: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(stream, buf)?;
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad chunk size {line:?}"),
            )
        })?;
        if size == 0 {
            // Trailer fields up to the empty line.
            while !read_line(stream, buf)?.is_empty() {}
            return Ok(body);
        }
        while buf.len() < size + 2 {
            if fill(stream, buf)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "end of stream inside a chunk",
                ));
            }
        }
        body.extend(buf.drain(..size));
        let crlf: Vec<u8> = buf.drain(..2).collect();
        if crlf != b"\r\n" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "chunk not followed by CRLF",
            ));
        }
    }
}

/// Reads more bytes into `buf`; returns how many (0 at the end of the stream).
fn fill(stream: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut tmp = [0u8; 65536];
    let n = stream.read(&mut tmp)?;
    buf.extend_from_slice(&tmp[..n]);
    Ok(n)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl fmt::Display for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.head)?;
        let body = String::from_utf8_lossy(&self.body);
        if body.len() > 600 {
            let mut cut = 600;
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            write!(f, "{}[... {} body bytes]", &body[..cut], self.body.len())
        } else {
            write!(f, "{body}")
        }
    }
}

impl Response {
    /// The status line as received: `HTTP/1.1 200 OK`.
    pub fn status_line(&self) -> &str {
        self.head.split("\r\n").next().unwrap_or_default()
    }

    /// The first field called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Every field called `name`.
    pub fn headers_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The field `name`; panics with the response if it is missing.
    pub fn expect_header(&self, name: &str) -> &str {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} field in the response:\n{self}"))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts the status code.
    #[track_caller]
    pub fn assert_status(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "unexpected status; response:\n{self}");
        self
    }

    /// Asserts status and body.
    #[track_caller]
    pub fn assert_ok(&self, status: u16, body: impl AsRef<[u8]>) -> &Self {
        self.assert_status(status);
        assert_eq!(
            self.body,
            body.as_ref(),
            "unexpected body; response:\n{self}"
        );
        self
    }

    /// Asserts a field value (exact, after trimming).
    #[track_caller]
    pub fn assert_header(&self, name: &str, value: &str) -> &Self {
        assert_eq!(
            self.header(name),
            Some(value),
            "unexpected {name}; response:\n{self}"
        );
        self
    }

    /// Asserts that a field is absent.
    #[track_caller]
    pub fn assert_no_header(&self, name: &str) -> &Self {
        assert_eq!(
            self.header(name),
            None,
            "unexpected {name} field; response:\n{self}"
        );
        self
    }

    /// Whether a `Connection` field lists `token`.
    pub fn connection_has(&self, token: &str) -> bool {
        self.headers_all("connection")
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// Asserts what every response of fastpath carries: `HTTP/1.1` (or `HTTP/2`, then with
    /// no field of a connection's), a Date that parses, a Server, and (except for 1xx and
    /// 304) a Content-Length that matches the body (`head`: the request was HEAD, so the body
    /// is not there).
    #[track_caller]
    pub fn assert_common(&self, head: bool) -> &Self {
        if self.version == "HTTP/2" {
            for name in ["connection", "keep-alive", "transfer-encoding", "upgrade"] {
                self.assert_no_header(name);
            }
        } else {
            assert_eq!(
                self.version, "HTTP/1.1",
                "response version; response:\n{self}"
            );
        }
        let date = self.expect_header("date");
        assert!(
            httpdate::parse_http_date(date).is_ok(),
            "Date {date:?} is not an HTTP date; response:\n{self}"
        );
        assert!(
            !self.expect_header("server").is_empty(),
            "empty Server field; response:\n{self}"
        );
        if !(100..200).contains(&self.status) && self.status != 304 {
            let cl = self.expect_header("content-length");
            let cl: usize = cl
                .parse()
                .unwrap_or_else(|_| panic!("bad Content-Length {cl:?}; response:\n{self}"));
            if !head {
                assert_eq!(
                    cl,
                    self.body.len(),
                    "Content-Length vs body; response:\n{self}"
                );
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(mut wire: &[u8], methods: &[&str]) -> Vec<Option<Response>> {
        let mut buf = Vec::new();
        let responses = methods
            .iter()
            .map(|method| read_response(&mut wire, &mut buf, method).unwrap())
            .collect();
        assert!(wire.is_empty() && buf.is_empty(), "all read");
        responses
    }

    #[test]
    fn pipelined_responses_are_read_one_at_a_time_by_their_framing() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi\
            HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n\
            HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=1\r\nabc\r\n1\r\nd\r\n0\r\nT: 1\r\n\r\n\
            HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n\
            HTTP/1.0 404 Not Found\r\nConnection: close\r\n\r\nto the end";
        let got = read_all(wire, &["GET", "HEAD", "GET", "GET", "GET", "GET"]);
        let got: Vec<Response> = got.into_iter().take(5).map(Option::unwrap).collect();
        assert_eq!(got[0].body, b"hi");
        assert_eq!(got[0].status_line(), "HTTP/1.1 200 OK");
        assert!(got[1].body.is_empty(), "HEAD: no body");
        assert_eq!(got[1].header("content-length"), Some("5"));
        assert_eq!(got[2].body, b"abcd");
        assert!(got[3].body.is_empty(), "304: no body");
        assert_eq!((got[4].status, got[4].reason.as_str()), (404, "Not Found"));
        assert!(got[4].connection_has("close"));
        assert_eq!(got[4].text(), "to the end");
    }

    #[test]
    fn a_clean_end_is_none_and_a_cut_one_an_error() {
        assert!(read_all(b"", &["GET"])[0].is_none());
        let mut buf = Vec::new();
        for cut in [
            &b"HTTP/1.1 200 OK\r\nContent-"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
        ] {
            buf.clear();
            let e = read_response(&mut &cut[..], &mut buf, "GET").unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{e}");
        }
        let e = read_response(&mut &b"SSH-2.0-x\r\n\r\n"[..], &mut buf, "GET").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
}
