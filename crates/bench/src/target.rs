//! What to request: URLs, the request set of one target, and how each request is chosen.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::Path;

/// An `http://` or `https://` URL, split into what the load generator needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `https://`: requests go over TLS.
    pub tls: bool,
    /// Host as written (brackets kept for IPv6 literals).
    pub host: String,
    /// Port (80, or 443 for https, if not written).
    pub port: u16,
    /// Path and query, always starting with `/`.
    pub path: String,
}

/// A URL or a target that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetError(pub String);

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TargetError {}

impl Url {
    /// Parses `http://host[:port][/path]` or `https://...`.
    pub fn parse(s: &str) -> Result<Url, TargetError> {
        let err = |why: &str| TargetError(format!("bad URL `{s}`: {why}"));
        let (tls, rest) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (_, Some(rest)) => (true, rest),
            _ => return Err(err("only http:// and https:// URLs are supported")),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(err("spaces or control characters in the path"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(|| err("unclosed ["))?;
            let host = &authority[..end + 2];
            match &v6[end + 1..] {
                "" => (host, None),
                p => (
                    host,
                    Some(p.strip_prefix(':').ok_or_else(|| err("junk after ]"))?),
                ),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() || host.contains('@') {
            return Err(err("missing or unsupported host"));
        }
        let port = match port {
            None => Url::default_port(tls),
            Some(p) => p.parse().map_err(|_| err("bad port"))?,
        };
        Ok(Url {
            tls,
            host: host.to_string(),
            port,
            path,
        })
    }

    fn default_port(tls: bool) -> u16 {
        if tls {
            443
        } else {
            80
        }
    }

    /// The Host header value: the port is left out when it is the scheme's default.
    pub fn host_header(&self) -> String {
        if self.port == Url::default_port(self.tls) {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// For `https://`, the name TLS sends and verifies: the host without the brackets of an
    /// IPv6 literal.
    pub fn tls_name(&self) -> Option<String> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        self.tls.then(|| host.to_string())
    }

    /// Resolves the host, once, before the run. A name with both kinds of address gets its
    /// IPv4 one, which is where test servers usually listen (`localhost` → 127.0.0.1).
    pub fn resolve(&self) -> Result<SocketAddr, TargetError> {
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = (host, self.port)
            .to_socket_addrs()
            .map_err(|e| TargetError(format!("cannot resolve {}: {e}", self.host)))?
            .collect();
        addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| TargetError(format!("{} has no address", self.host)))
    }

    /// Joins a path from a URL list or a manifest onto this URL's path (a base directory).
    pub fn join(&self, path: &str) -> String {
        let base = self.path.split('?').next().unwrap_or("/");
        let base = base.trim_end_matches('/');
        let path = path.trim_start_matches('/');
        format!("{base}/{path}")
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}{}", self.host, self.port, self.path)
    }
}

/// What a reply to a request must carry, checked with `--verify`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Expect {
    /// Body length.
    pub len: Option<u64>,
    /// CRC-32 (IEEE) of the body.
    pub crc32: Option<u32>,
}

/// One request of a target: a path and what its reply must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Path and query sent in the request line.
    pub path: String,
    /// Checks for a 2xx reply.
    pub expect: Expect,
}

/// How a worker picks the next request of a target.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// In turn, one after another.
    RoundRobin,
    /// At random with these relative weights (one per request), e.g. the SPECweb96 mix.
    Weighted(Vec<f64>),
}

/// One server under load and the requests sent to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Name in reports.
    pub name: String,
    /// The URL as given (for reports).
    pub url: String,
    /// Where to connect.
    pub addr: SocketAddr,
    /// Host header sent with every request.
    pub host: String,
    /// Over TLS (`https://`): the server name to send and verify, unless `--sni` says
    /// another (the URL's host, without the brackets of an IPv6 literal).
    pub tls_name: Option<String>,
    /// The requests; at least one.
    pub requests: Vec<Request>,
    /// How the next request is chosen.
    pub selection: Selection,
}

impl Target {
    /// A target that requests these URLs in turn; all must name the same host and port,
    /// since one connection carries requests to several of them.
    pub fn from_urls(name: &str, urls: &[Url]) -> Result<Target, TargetError> {
        let first = urls
            .first()
            .ok_or_else(|| TargetError("no URL given".into()))?;
        if let Some(other) = urls
            .iter()
            .find(|u| u.host != first.host || u.port != first.port || u.tls != first.tls)
        {
            return Err(TargetError(format!(
                "all URLs of a target must share scheme, host and port: {first} vs {other}"
            )));
        }
        Ok(Target {
            name: name.to_string(),
            url: first.to_string(),
            addr: first.resolve()?,
            host: first.host_header(),
            tls_name: first.tls_name(),
            requests: urls
                .iter()
                .map(|u| Request {
                    path: u.path.clone(),
                    expect: Expect::default(),
                })
                .collect(),
            selection: Selection::RoundRobin,
        })
    }
}

/// Reads a URL list: one absolute URL or path per line; blank lines and `#` comments are
/// skipped. Paths are joined onto `base`.
pub fn read_url_list(path: &Path, base: &Url) -> Result<Vec<Url>, TargetError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| TargetError(format!("cannot read {}: {e}", path.display())))?;
    let mut urls = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let url = if line.starts_with('/') {
            Url {
                path: base.join(line),
                ..base.clone()
            }
        } else {
            Url::parse(line)
                .map_err(|e| TargetError(format!("{}:{}: {e}", path.display(), n + 1)))?
        };
        urls.push(url);
    }
    if urls.is_empty() {
        return Err(TargetError(format!(
            "{}: no URL in the list",
            path.display()
        )));
    }
    Ok(urls)
}

/// Renders the bytes of a GET request once; workers copy them into a connection's output.
pub(crate) fn render_request(path: &str, host: &str, keepalive: bool) -> Vec<u8> {
    let close = if keepalive {
        ""
    } else {
        "Connection: close\r\n"
    };
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: fastpath-bench\r\n{close}\r\n")
        .into_bytes()
}

/// Picks requests without allocating: round robin, or a cumulative-weight table searched
/// with a small per-thread random generator (deterministic, so runs are repeatable).
pub(crate) struct Picker {
    next: usize,
    len: usize,
    cumulative: Vec<u64>,
    rng: u64,
}

impl Picker {
    pub(crate) fn new(target: &Target, seed: u64) -> Picker {
        let cumulative = match &target.selection {
            Selection::RoundRobin => Vec::new(),
            Selection::Weighted(weights) => {
                let total: f64 = weights.iter().sum();
                let mut acc = 0u64;
                weights
                    .iter()
                    .map(|w| {
                        // Scale to 2^32 so a u32 random draw indexes it.
                        acc += ((w / total) * 4_294_967_296.0).round() as u64;
                        acc
                    })
                    .collect()
            }
        };
        Picker {
            next: seed as usize % target.requests.len(),
            len: target.requests.len(),
            cumulative,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        }
    }

    #[inline]
    pub(crate) fn pick(&mut self) -> usize {
        if self.cumulative.is_empty() {
            let i = self.next;
            self.next = if i + 1 == self.len { 0 } else { i + 1 };
            return i;
        }
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let draw = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32;
        let i = self.cumulative.partition_point(|&c| c <= draw);
        i.min(self.len - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = Url::parse("http://127.0.0.1:8080/a/b?x=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8080, "/a/b?x=1")
        );
        let u = Url::parse("http://localhost").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/"));
        assert_eq!(u.host_header(), "localhost");
        let u = Url::parse("http://[::1]:9000/x").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("[::1]", 9000));
        assert_eq!(u.host_header(), "[::1]:9000");
        let u = Url::parse("http://h?q").unwrap();
        assert_eq!(u.path, "/?q");
        let u = Url::parse("http://localhost:8080/").unwrap();
        assert_eq!(u.resolve().unwrap(), "127.0.0.1:8080".parse().unwrap());
        let u = Url::parse("https://localhost/a").unwrap();
        assert_eq!(
            (u.tls, u.port, u.host_header().as_str()),
            (true, 443, "localhost")
        );
        assert_eq!(u.to_string(), "https://localhost:443/a");
        let u = Url::parse("https://[::1]:8443/").unwrap();
        assert_eq!(
            (u.tls, u.port, u.host_header().as_str()),
            (true, 8443, "[::1]:8443")
        );
        assert!(Url::parse("ftp://x/").is_err());
        assert!(Url::parse("http://x:99999/").is_err());
        assert!(Url::parse("http://x/a b").is_err());
        assert!(Url::parse("http:///a").is_err());
    }

    #[test]
    fn joins_paths() {
        let u = Url::parse("http://h:1/base/").unwrap();
        assert_eq!(u.join("/dir00000/class0_1"), "/base/dir00000/class0_1");
        let u = Url::parse("http://h:1").unwrap();
        assert_eq!(u.join("/a"), "/a");
    }

    #[test]
    fn picker_follows_weights() {
        let req = |p: &str| Request {
            path: p.into(),
            expect: Expect::default(),
        };
        let mut t = Target {
            name: "t".into(),
            url: "u".into(),
            addr: "127.0.0.1:1".parse().unwrap(),
            host: "h".into(),
            tls_name: None,
            requests: vec![req("/a"), req("/b"), req("/c")],
            selection: Selection::RoundRobin,
        };
        let mut p = Picker::new(&t, 0);
        assert_eq!([p.pick(), p.pick(), p.pick(), p.pick()], [0, 1, 2, 0]);
        t.selection = Selection::Weighted(vec![0.7, 0.2, 0.1]);
        let mut p = Picker::new(&t, 7);
        let mut counts = [0u32; 3];
        for _ in 0..100_000 {
            counts[p.pick()] += 1;
        }
        assert!((69_000..71_000).contains(&counts[0]), "{counts:?}");
        assert!((19_000..21_000).contains(&counts[1]), "{counts:?}");
        assert!((9_000..11_000).contains(&counts[2]), "{counts:?}");
    }
}
