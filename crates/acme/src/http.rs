//! A small blocking HTTPS/1.1 client, just enough for ACME: one connection kept alive to
//! the server and reopened when it closes, every wait bounded, every body bounded.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::error::Error;

/// The largest response body read: ACME's JSON and certificate chains are a few KiB.
pub const MAX_BODY: usize = 1 << 20;
/// The largest response head read.
const MAX_HEAD: usize = 64 << 10;
const MAX_HEADERS: usize = 64;

/// Where the system's CA bundle may be, in the order tried (Debian and Ubuntu, Fedora and
/// RHEL, openSUSE, Alpine and others); `SSL_CERT_FILE` comes before them all, as for
/// OpenSSL.
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Which certificate authorities the client trusts for the ACME server's HTTPS.
#[derive(Debug, Clone, Default)]
pub struct TrustRoots {
    /// The system's CA bundle (`SSL_CERT_FILE`, else the first of the usual paths).
    pub system: bool,
    /// PEM files of further roots, e.g. a test CA's private root.
    pub extra: Vec<PathBuf>,
}

impl TrustRoots {
    /// The system's roots alone, as for a public CA.
    pub fn system() -> TrustRoots {
        TrustRoots {
            system: true,
            extra: Vec::new(),
        }
    }

    /// Only the roots in this PEM file (a private ACME server's).
    pub fn only(pem: impl Into<PathBuf>) -> TrustRoots {
        TrustRoots {
            system: false,
            extra: vec![pem.into()],
        }
    }

    fn store(&self) -> Result<RootCertStore, Error> {
        let mut store = RootCertStore::empty();
        if self.system {
            let env = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
            let bundle = env
                .into_iter()
                .chain(SYSTEM_BUNDLES.iter().map(PathBuf::from))
                .find(|path| path.is_file())
                .ok_or_else(|| {
                    Error::Local(format!(
                        "no system CA bundle (SSL_CERT_FILE, {})",
                        SYSTEM_BUNDLES.join(", ")
                    ))
                })?;
            // A bundle may hold a certificate webpki cannot read; the others still count.
            let (added, _ignored) = store.add_parsable_certificates(read_pem_certs(&bundle)?);
            if added == 0 {
                return Err(Error::Local(format!(
                    "{}: no usable CA certificate",
                    bundle.display()
                )));
            }
        }
        for path in &self.extra {
            for cert in read_pem_certs(path)? {
                store.add(cert).map_err(|e| {
                    Error::Local(format!("{}: not a usable root: {e}", path.display()))
                })?;
            }
        }
        if store.is_empty() {
            return Err(Error::Local("no root to trust the ACME server with".into()));
        }
        Ok(store)
    }
}

fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| Error::Local(format!("{}: {e}", path.display())))?
        .collect();
    let certs = certs.map_err(|e| Error::Local(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(Error::Local(format!(
            "{}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// How long the client waits.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// To open a TCP connection.
    pub connect: Duration,
    /// For one read or write to make progress.
    pub io: Duration,
    /// For a whole request, from connecting to the last byte of the body: a server that
    /// trickles bytes cannot hold the client past it.
    pub request: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(10),
            io: Duration::from_secs(15),
            request: Duration::from_secs(30),
        }
    }
}

/// An `https://` URL cut into what a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    pub host: String,
    pub port: u16,
    /// Path and query, from the first `/`.
    pub target: String,
}

impl Url {
    pub fn parse(url: &str) -> Result<Url, Error> {
        let rest = url
            .strip_prefix("https://")
            .ok_or_else(|| Error::Protocol(format!("not an https URL: {url:?}")))?;
        let (authority, target) = match rest.find(['/', '?']) {
            Some(at) if rest[at..].starts_with('/') => (&rest[..at], rest[at..].to_string()),
            Some(at) => (&rest[..at], format!("/{}", &rest[at..])),
            None => (rest, "/".to_string()),
        };
        let target = match target.find('#') {
            Some(at) => target[..at].to_string(),
            None => target,
        };
        let bad = || Error::Protocol(format!("bad URL authority: {url:?}"));
        if authority.contains('@') {
            return Err(bad());
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(bad)?;
            let port = match &v6[end + 1..] {
                "" => 443,
                p => p
                    .strip_prefix(':')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(bad)?,
            };
            (v6[..end].to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), port.parse().map_err(|_| bad())?),
                None => (authority.to_string(), 443),
            }
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Url { host, port, target })
    }

    /// The `Host` field's value.
    fn host_field(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 443 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// `reference` (absolute, or a path on this origin) as an absolute URL.
    pub fn join(&self, reference: &str) -> String {
        if reference.starts_with("https://") || reference.starts_with("http://") {
            reference.to_string()
        } else if reference.starts_with('/') {
            format!("https://{}{reference}", self.host_field())
        } else {
            let dir = match self.target.rfind('/') {
                Some(at) => &self.target[..=at],
                None => "/",
            };
            format!("https://{}{dir}{reference}", self.host_field())
        }
    }
}

/// A response: status, fields and the whole body.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The fields, names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body (decoded from chunks), at most [`MAX_BODY`] bytes.
    pub body: Vec<u8>,
    /// The URL asked, against which relative references are resolved.
    pub(crate) url: String,
}

impl Response {
    /// The first value of the field `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// `Replay-Nonce`: a fresh nonce for the next signed request (RFC 8555 section 6.5.1).
    pub fn nonce(&self) -> Option<&str> {
        self.header("replay-nonce")
            .filter(|n| !n.is_empty() && n.bytes().all(is_base64url))
    }

    /// `Location`, made absolute.
    pub fn location(&self) -> Option<String> {
        let location = self.header("location")?;
        Some(match Url::parse(&self.url) {
            Ok(base) => base.join(location),
            Err(_) => location.to_string(),
        })
    }

    /// `Retry-After` as a wait from `now` (RFC 9110 section 10.2.3: seconds or a date).
    pub fn retry_after(&self, now: SystemTime) -> Option<Duration> {
        parse_retry_after(self.header("retry-after")?, now)
    }

    /// The targets of the `Link` fields with relation `rel` (RFC 8288), made absolute.
    pub fn links(&self, rel: &str) -> Vec<String> {
        let base = Url::parse(&self.url).ok();
        self.headers
            .iter()
            .filter(|(n, _)| n == "link")
            .flat_map(|(_, v)| parse_links(v))
            .filter(|(_, rels)| rels.split_ascii_whitespace().any(|r| r == rel))
            .map(|(target, _)| match &base {
                Some(base) => base.join(&target),
                None => target,
            })
            .collect()
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

fn is_base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// `Retry-After`'s value as a wait from `now`: a number of seconds, or an HTTP date (a date
/// already past waits nothing). `None` for anything else.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse().ok().map(Duration::from_secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The `<target>; rel="…"` pairs of one `Link` field value.
fn parse_links(value: &str) -> Vec<(String, String)> {
    let mut links = Vec::new();
    let mut rest = value;
    while let Some(open) = rest.find('<') {
        let Some(close) = rest[open..].find('>') else {
            break;
        };
        let target = rest[open + 1..open + close].trim().to_string();
        rest = &rest[open + close + 1..];
        // The parameters run to the next comma outside quotes.
        let mut end = rest.len();
        let mut quoted = false;
        for (i, c) in rest.char_indices() {
            match c {
                '"' => quoted = !quoted,
                ',' if !quoted => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let params = &rest[..end];
        rest = &rest[end..];
        let rel = params
            .split(';')
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("rel"))
            .map(|(_, v)| v.trim().trim_matches('"').to_string())
            .unwrap_or_default();
        links.push((target, rel));
    }
    links
}

/// A request's method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
    Post,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
        }
    }
}

struct Connection {
    host: String,
    port: u16,
    stream: StreamOwned<ClientConnection, TcpStream>,
}

/// The HTTPS client: one connection at a time, to whichever origin the last request went.
pub(crate) struct Https {
    tls: Arc<ClientConfig>,
    timeouts: Timeouts,
    connection: Option<Connection>,
}

impl Https {
    pub fn new(roots: &TrustRoots, timeouts: Timeouts) -> Result<Https, Error> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Local(format!("TLS client: {e}")))?
            .with_root_certificates(roots.store()?)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Https {
            tls: Arc::new(tls),
            timeouts,
            connection: None,
        })
    }

    /// Sends one request and reads its response. A kept-alive connection the server had
    /// closed is reopened and the request sent again, only when nothing of a response came.
    pub fn request(
        &mut self,
        method: Method,
        url: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, Error> {
        let parsed = Url::parse(url)?;
        let deadline = Instant::now() + self.timeouts.request;
        let reused = self
            .connection
            .as_ref()
            .is_some_and(|c| c.host == parsed.host && c.port == parsed.port);
        if reused {
            match self.exchange(method, &parsed, url, body, deadline) {
                Ok(response) => return Ok(response),
                Err(Attempt::Unanswered(e)) => {
                    tracing::debug!("ACME connection closed while idle ({e}); reopening");
                }
                Err(Attempt::Failed(e)) => {
                    self.connection = None;
                    return Err(e);
                }
            }
        }
        self.connection = None;
        self.connection = Some(self.connect(&parsed, deadline)?);
        self.exchange(method, &parsed, url, body, deadline)
            .map_err(|attempt| {
                self.connection = None;
                match attempt {
                    Attempt::Unanswered(e) | Attempt::Failed(e) => e,
                }
            })
    }

    fn connect(&self, url: &Url, deadline: Instant) -> Result<Connection, Error> {
        let context = format!("connect to {}:{}", url.host, url.port);
        let addrs: Vec<_> = (url.host.as_str(), url.port)
            .to_socket_addrs()
            .map_err(|e| Error::io(context.clone(), e))?
            .collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        let mut tcp = None;
        for addr in addrs {
            let wait = remaining(deadline).min(self.timeouts.connect);
            match TcpStream::connect_timeout(&addr, wait) {
                Ok(stream) => {
                    tcp = Some(stream);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let tcp = tcp.ok_or_else(|| Error::io(context.clone(), last))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(url.host.clone())
            .map_err(|e| Error::Protocol(format!("{}: {e}", url.host)))?;
        let conn = ClientConnection::new(self.tls.clone(), name)
            .map_err(|e| Error::Local(format!("TLS client: {e}")))?;
        let mut stream = StreamOwned::new(conn, tcp);
        set_timeouts(&stream.sock, self.timeouts.io, deadline)
            .map_err(|e| Error::io(context.clone(), e))?;
        // The handshake now, so that its failure names itself.
        while stream.conn.is_handshaking() {
            stream
                .conn
                .complete_io(&mut stream.sock)
                .map_err(|e| Error::io(format!("TLS handshake with {}", url.host), e))?;
        }
        Ok(Connection {
            host: url.host.clone(),
            port: url.port,
            stream,
        })
    }

    fn exchange(
        &mut self,
        method: Method,
        parsed: &Url,
        url: &str,
        body: Option<&[u8]>,
        deadline: Instant,
    ) -> Result<Response, Attempt> {
        let timeouts = self.timeouts;
        let connection = self
            .connection
            .as_mut()
            .expect("a connection before an exchange");
        let stream = &mut connection.stream;
        let context = || format!("{} {url}", method.as_str());
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: fastpath-acme/{}\r\nAccept: */*\r\n",
            method.as_str(),
            parsed.target,
            parsed.host_field(),
            env!("CARGO_PKG_VERSION"),
        );
        if let Some(body) = body {
            head.push_str(&format!(
                "Content-Type: application/jose+json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body.unwrap_or_default());
        set_timeouts(&stream.sock, timeouts.io, deadline)
            .map_err(|e| Attempt::Failed(Error::io(context(), e)))?;
        if let Err(e) = stream.write_all(&out).and_then(|()| stream.flush()) {
            return Err(Attempt::Unanswered(Error::io(context(), e)));
        }

        // The head.
        let mut buf = Vec::with_capacity(4096);
        let (status, headers, head_len) = loop {
            let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut fields);
            match response.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let headers: Vec<(String, String)> = response
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_ascii_lowercase(),
                                String::from_utf8_lossy(h.value).trim().to_string(),
                            )
                        })
                        .collect();
                    let status = response.code.unwrap_or(0);
                    if (100..200).contains(&status) {
                        // An interim response: the real one follows.
                        buf.drain(..len);
                        continue;
                    }
                    let keep = response.version == Some(1);
                    break (status, (headers, keep), len);
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => {
                    return Err(Attempt::Failed(Error::Protocol(format!(
                        "{}: bad response head: {e}",
                        context()
                    ))))
                }
            }
            if buf.len() > MAX_HEAD {
                return Err(Attempt::Failed(Error::Protocol(format!(
                    "{}: response head over {MAX_HEAD} bytes",
                    context()
                ))));
            }
            let before = buf.len();
            match read_some(stream, &mut buf, timeouts.io, deadline) {
                Ok(0) if before == 0 => {
                    let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed");
                    return Err(Attempt::Unanswered(Error::io(context(), eof)));
                }
                Ok(0) => {
                    return Err(Attempt::Failed(Error::Protocol(format!(
                        "{}: connection closed in the response head",
                        context()
                    ))))
                }
                Ok(_) => {}
                Err(e) if before == 0 && e.kind() != io::ErrorKind::TimedOut => {
                    return Err(Attempt::Unanswered(Error::io(context(), e)))
                }
                Err(e) => return Err(Attempt::Failed(Error::io(context(), e))),
            }
        };
        let (headers, mut keep_alive) = headers;
        buf.drain(..head_len);
        let field = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        if field("connection")
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
        {
            keep_alive = false;
        }

        // The body.
        let no_body = method == Method::Head || status == 204 || status == 304;
        let chunked = field("transfer-encoding").is_some_and(|v| {
            v.rsplit(',')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"))
        });
        let length = match field("content-length") {
            Some(v) => Some(v.parse::<usize>().map_err(|_| {
                Attempt::Failed(Error::Protocol(format!(
                    "{}: bad Content-Length {v:?}",
                    context()
                )))
            })?),
            None => None,
        };
        let failed = |e: io::Error| Attempt::Failed(Error::io(context(), e));
        let body = if no_body {
            Vec::new()
        } else if chunked {
            read_chunked(&mut buf, |buf| {
                read_some(stream, buf, timeouts.io, deadline)
            })
            .map_err(|e| match e {
                ChunkError::Io(e) => failed(e),
                ChunkError::Bad(what) => {
                    Attempt::Failed(Error::Protocol(format!("{}: {what}", context())))
                }
            })?
        } else if let Some(length) = length {
            if length > MAX_BODY {
                return Err(Attempt::Failed(Error::Protocol(format!(
                    "{}: body of {length} bytes, over {MAX_BODY}",
                    context()
                ))));
            }
            while buf.len() < length {
                if read_some(stream, &mut buf, timeouts.io, deadline).map_err(failed)? == 0 {
                    return Err(Attempt::Failed(Error::Protocol(format!(
                        "{}: connection closed {} bytes into a body of {length}",
                        context(),
                        buf.len()
                    ))));
                }
            }
            buf.truncate(length);
            buf
        } else {
            // Delimited by the end of the connection.
            keep_alive = false;
            loop {
                match read_some(stream, &mut buf, timeouts.io, deadline) {
                    Ok(0) => break,
                    Ok(_) if buf.len() > MAX_BODY => {
                        return Err(Attempt::Failed(Error::Protocol(format!(
                            "{}: body over {MAX_BODY} bytes",
                            context()
                        ))))
                    }
                    Ok(_) => {}
                    // A server that closes without TLS's close_notify: the end of it.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(failed(e)),
                }
            }
            buf
        };
        if !keep_alive {
            self.connection = None;
        }
        Ok(Response {
            status,
            headers,
            body,
            url: url.to_string(),
        })
    }
}

/// How an exchange on a connection failed: before any byte of a response (a kept
/// connection the server had closed: try a new one), or after.
enum Attempt {
    Unanswered(Error),
    Failed(Error),
}

fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Read and write timeouts: the I/O timeout, cut short by the request's deadline.
fn set_timeouts(sock: &TcpStream, io_timeout: Duration, deadline: Instant) -> io::Result<()> {
    let left = remaining(deadline);
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "request deadline passed",
        ));
    }
    let wait = io_timeout.min(left).max(Duration::from_millis(1));
    sock.set_read_timeout(Some(wait))?;
    sock.set_write_timeout(Some(wait))
}

fn read_some(
    stream: &mut StreamOwned<ClientConnection, TcpStream>,
    buf: &mut Vec<u8>,
    io_timeout: Duration,
    deadline: Instant,
) -> io::Result<usize> {
    set_timeouts(&stream.sock, io_timeout, deadline)?;
    let mut chunk = [0u8; 16 << 10];
    loop {
        match stream.read(&mut chunk) {
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out"))
            }
            Err(e) => return Err(e),
        }
    }
}

enum ChunkError {
    Io(io::Error),
    Bad(String),
}

/// Decodes a chunked body whose first bytes are in `buf` with the server's own decoder
/// (`fastpath_http::ChunkedDecoder`); `read` appends more bytes to it (0 at the end of the
/// stream). What follows the body is left in `buf`.
fn read_chunked(
    buf: &mut Vec<u8>,
    mut read: impl FnMut(&mut Vec<u8>) -> io::Result<usize>,
) -> Result<Vec<u8>, ChunkError> {
    let mut decoder = fastpath_http::ChunkedDecoder::new();
    let mut body = Vec::new();
    loop {
        let (used, done) = decoder
            .feed(buf, |piece| body.extend_from_slice(piece))
            .map_err(|e| ChunkError::Bad(format!("bad chunked body: {e}")))?;
        buf.drain(..used);
        if body.len() as u64 + decoder.chunk_left() > MAX_BODY as u64 {
            return Err(ChunkError::Bad(format!("body over {MAX_BODY} bytes")));
        }
        if done {
            return Ok(body);
        }
        match read(buf) {
            Ok(0) => {
                return Err(ChunkError::Bad(
                    "connection closed in a chunked body".into(),
                ))
            }
            Ok(_) => {}
            Err(e) => return Err(ChunkError::Io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        let later = now + Duration::from_secs(90);
        assert_eq!(
            parse_retry_after(&httpdate::fmt_http_date(later), now),
            Some(Duration::from_secs(90))
        );
        // A date already past: no wait.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }

    #[test]
    fn urls_are_cut_and_joined() {
        let url = Url::parse("https://127.0.0.1:14000/dir?x=1").unwrap();
        assert_eq!(
            url,
            Url {
                host: "127.0.0.1".into(),
                port: 14000,
                target: "/dir?x=1".into()
            }
        );
        assert_eq!(
            url.join("/acme/new-nonce"),
            "https://127.0.0.1:14000/acme/new-nonce"
        );
        assert_eq!(url.join("https://other/x"), "https://other/x");
        let v6 = Url::parse("https://[::1]:8443").unwrap();
        assert_eq!(
            (v6.host.as_str(), v6.port, v6.target.as_str()),
            ("::1", 8443, "/")
        );
        assert_eq!(v6.host_field(), "[::1]:8443");
        assert_eq!(
            Url::parse("https://acme.example/a#frag").unwrap().target,
            "/a"
        );
        assert_eq!(
            Url::parse("https://acme.example").unwrap().host_field(),
            "acme.example"
        );
        assert!(Url::parse("http://acme.example/").is_err());
        assert!(Url::parse("https://user@acme.example/").is_err());
        assert!(Url::parse("https://:443/").is_err());
        assert!(Url::parse("https://acme.example:x/").is_err());
    }

    #[test]
    fn link_fields_are_read_by_relation() {
        let response = Response {
            status: 200,
            headers: vec![
                (
                    "link".into(),
                    r#"<https://ca.example/cert/1/1>;rel="alternate", </dir>;rel="index""#.into(),
                ),
                (
                    "link".into(),
                    r#"<https://ca.example/cert/1/2> ; rel=alternate"#.into(),
                ),
                (
                    "link".into(),
                    r#"<https://ca.example/x>; title="a, b"; rel="up""#.into(),
                ),
            ],
            body: Vec::new(),
            url: "https://ca.example:14000/order/1".into(),
        };
        assert_eq!(
            response.links("alternate"),
            vec!["https://ca.example/cert/1/1", "https://ca.example/cert/1/2"]
        );
        assert_eq!(
            response.links("index"),
            vec!["https://ca.example:14000/dir"]
        );
        assert_eq!(response.links("up"), vec!["https://ca.example/x"]);
        assert!(response.links("next").is_empty());
    }

    /// Decodes `wire` handed over `step` bytes at a time.
    fn dechunk(wire: &[u8], step: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
        let mut rest = wire;
        let mut buf = Vec::new();
        let body = read_chunked(&mut buf, |buf| {
            let n = step.min(rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            Ok(n)
        })
        .map_err(|e| match e {
            ChunkError::Io(e) => e.to_string(),
            ChunkError::Bad(what) => what,
        })?;
        buf.extend_from_slice(rest);
        Ok((body, buf))
    }

    #[test]
    fn chunked_bodies_are_decoded_however_the_bytes_arrive() {
        let wire = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 64] {
            let (body, left) = dechunk(wire, step).unwrap();
            assert_eq!(body, b"hello, world", "step {step}");
            assert_eq!(left, b"NEXT", "step {step}");
        }
        assert!(dechunk(b"5\r\nhelloXX0\r\n\r\n", 4).is_err());
        assert!(dechunk(b"zz\r\n", 4).is_err());
        assert!(dechunk(b"5\r\nhel", 4)
            .unwrap_err()
            .contains("connection closed"));
        let huge = format!("{:x}\r\n", MAX_BODY + 1);
        assert!(dechunk(huge.as_bytes(), 64).unwrap_err().contains("over"));
    }

    /// A TLS server on 127.0.0.1 for the client's tests: each accepted connection is handed
    /// to `serve` with its number, as a plaintext stream; the roots that trust it.
    fn tls_server(
        serve: impl Fn(usize, &mut dyn ReadWrite) + Send + Sync + 'static,
    ) -> (u16, TrustRoots, tempfile::TempDir) {
        use fastpath_testkit::{KeyKind, TestPki};
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::new(dir.path());
        let (chain, key) = pki.leaf("server", &["127.0.0.1"], KeyKind::EcdsaP256);
        let chain: Vec<_> = CertificateDer::pem_file_iter(&chain)
            .unwrap()
            .map(|c| c.unwrap())
            .collect();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let config = Arc::new(config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let serve = Arc::new(serve);
        std::thread::spawn(move || {
            for (n, sock) in listener.incoming().enumerate() {
                let Ok(sock) = sock else { continue };
                let (config, serve) = (config.clone(), serve.clone());
                std::thread::spawn(move || {
                    let conn = rustls::ServerConnection::new(config).unwrap();
                    let mut tls = StreamOwned::new(conn, sock);
                    serve(n, &mut tls);
                });
            }
        });
        let roots = TrustRoots::only(pki.ca());
        (port, roots, dir)
    }

    trait ReadWrite: Read + Write {}
    impl<T: Read + Write> ReadWrite for T {}

    /// Reads one request head (and a body of `Content-Length`), `false` at the end.
    fn read_request(stream: &mut dyn ReadWrite) -> bool {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return false,
            }
        }
        let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map(|v| v.trim().parse::<usize>().unwrap())
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).is_ok()
    }

    fn quick() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(2),
            io: Duration::from_millis(400),
            request: Duration::from_millis(700),
        }
    }

    #[test]
    fn a_connection_the_server_closed_is_reopened_and_bodies_come_whole() {
        let (port, roots, _dir) = tls_server(|n, stream| match n {
            // The first connection answers twice, chunked then by length, then closes as
            // an idle connection would.
            0 => {
                assert!(read_request(stream));
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nReplay-Nonce: n1\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                );
                assert!(read_request(stream));
                let _ = stream.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok");
                let _ = stream.flush();
            }
            // The second, after the client found the first closed.
            _ => {
                while read_request(stream) {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nagain",
                    );
                }
            }
        });
        let mut https = Https::new(&roots, quick()).unwrap();
        let url = format!("https://127.0.0.1:{port}/x");
        let first = https.request(Method::Get, &url, None).unwrap();
        assert_eq!(
            (first.status, &first.body[..], first.nonce()),
            (200, &b"abc"[..], Some("n1"))
        );
        let second = https.request(Method::Post, &url, Some(b"{}")).unwrap();
        assert_eq!((second.status, &second.body[..]), (201, &b"ok"[..]));
        // The server has closed the first connection: the third request goes on a new one.
        std::thread::sleep(Duration::from_millis(100));
        let third = https.request(Method::Get, &url, None).unwrap();
        assert_eq!((third.status, &third.body[..]), (200, &b"again"[..]));
        // `Connection: close` was heeded: nothing is kept.
        assert!(https.connection.is_none());
    }

    #[test]
    fn a_server_that_never_answers_times_out_and_a_huge_body_is_refused() {
        let (port, roots, _dir) = tls_server(|n, stream| {
            if read_request(stream) && n == 1 {
                let _ = stream.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                        MAX_BODY + 1
                    )
                    .as_bytes(),
                );
            }
            // Otherwise silent, connection held open.
            std::thread::sleep(Duration::from_secs(3));
        });
        let mut https = Https::new(&roots, quick()).unwrap();
        let url = format!("https://127.0.0.1:{port}/");
        let started = Instant::now();
        match https.request(Method::Get, &url, None) {
            Err(Error::Io { source, .. }) => {
                assert_eq!(source.kind(), io::ErrorKind::TimedOut, "{source}")
            }
            other => panic!("not a timeout: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        match https.request(Method::Get, &url, None) {
            Err(Error::Protocol(what)) => assert!(what.contains("over"), "{what}"),
            other => panic!("a huge body read: {other:?}"),
        }
    }

    #[test]
    fn a_server_not_trusted_is_refused_in_the_handshake() {
        let (port, _roots, _dir) = tls_server(|_, stream| {
            let _ = read_request(stream);
        });
        let other = tempfile::tempdir().unwrap();
        let pki = fastpath_testkit::TestPki::new(other.path());
        let mut https = Https::new(&TrustRoots::only(pki.ca()), quick()).unwrap();
        match https.request(Method::Get, &format!("https://127.0.0.1:{port}/"), None) {
            Err(Error::Io { context, .. }) => {
                assert!(context.contains("TLS handshake"), "{context}")
            }
            other => panic!("an untrusted server answered: {other:?}"),
        }
    }

    #[test]
    fn the_system_roots_and_a_private_root_are_trusted_together() {
        let dir = tempfile::tempdir().unwrap();
        let pki = fastpath_testkit::TestPki::new(dir.path());
        let private = TrustRoots::only(pki.ca()).store().unwrap();
        assert_eq!(private.len(), 1);
        let system = TrustRoots::system().store().unwrap();
        let both = TrustRoots {
            system: true,
            extra: vec![pki.ca().to_owned()],
        };
        assert_eq!(both.store().unwrap().len(), system.len() + 1);
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        assert!(TrustRoots::only(&empty).store().is_err());
        assert!(TrustRoots::default().store().is_err());
    }

    #[test]
    fn a_nonce_must_be_base64url() {
        let mut response = Response {
            status: 200,
            headers: vec![("replay-nonce".into(), "abc-_09".into())],
            body: Vec::new(),
            url: "https://ca.example/".into(),
        };
        assert_eq!(response.nonce(), Some("abc-_09"));
        response.headers[0].1 = "abc def".into();
        assert_eq!(response.nonce(), None);
    }
}
