//! The hand-over layer of fastpath: the requests the static fast path should
//! not answer go to an unmodified backend web server. This crate decides which
//! requests go (routes), where they go (backends and their passive health), and
//! which backend responses may be answered from memory next time (the RFC 9111
//! response cache).
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! kHTTPd and TUX served static files in the kernel and pushed every other
//! request into the accept queue of a user-space server, choosing by URL and
//! file name extension. fastpath keeps that split with three methods
//! ([`HandoverMethod`]): proxy the request and keep the client connection,
//! bridge the client connection to the backend for good, or redirect the client
//! to the backend's own address.
//!
//! # Why it is shaped this way
//!
//! * **A crate beside the static content, not inside it.** It sits in the same
//!   layer as `fastpath-content` and shares nothing with it: routes run before
//!   any file is looked at, the response cache keeps backend bytes rather than
//!   files. Both depend only on the protocol layer below (`fastpath-http`) and,
//!   for the one type they share with the event loops, on the drivers:
//!   a backend's address is the drivers' [`UpstreamAddr`], the address they
//!   connect to, so the server passes it on unconverted.
//! * **Decisions only, no I/O.** This crate decides; the server and the
//!   drivers connect, send, splice and time out. Every rule here is a plain
//!   function of its inputs (times are passed in as
//!   [`Instant`](std::time::Instant)s), so it is tested without sockets or
//!   clocks.
//! * **Per worker where it can be, shared where users see it.** [`BackendState`]
//!   belongs to one worker thread: no locks on the request path. A worker learns
//!   that an address is down from its own failures; connection limits are the
//!   whole server's figures divided among workers by the caller
//!   ([`BackendConfig::per_worker_connections`]). The response cache is one per
//!   process ([`SharedCache`]), sharded so that no lock covers all of it: a page
//!   is fetched once and every client sees the same version, whatever worker
//!   it lands on.
//! * **Rules before files, fallback after.** [`Routes::classify`] runs before
//!   any file system lookup, so a `.php` request never touches the disk of the
//!   static path; [`Routes::fallback`] runs only after the static lookup found
//!   nothing, like nginx's `try_files`.
//! * **Cache only what the backend allows.** [`cache_lifetime`] follows the
//!   shared-cache rules of RFC 9111 but never guesses a lifetime: a response
//!   without an explicit one is not kept.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use fastpath_drivers::UpstreamAddr;
//! use fastpath_handover::{
//!     cache_lifetime, parse_backend_addr, BackendConfig, HandoverMethod, RouteRequest,
//!     RouteRule, Routes,
//! };
//!
//! let backend = BackendConfig::new("app", vec![parse_backend_addr("unix:/run/app.sock")?]);
//! assert_eq!(backend.addresses, [UpstreamAddr::Unix("/run/app.sock".into())]);
//!
//! let routes = Routes::new(vec![RouteRule {
//!     extensions: vec!["php".to_owned()],
//!     ..RouteRule::default()
//! }]);
//! let req = RouteRequest { method: "GET", path: b"/index.php", query: None, host: None };
//! let rule = routes.classify(&req).expect("handed over");
//! assert_eq!(rule.method, HandoverMethod::Proxy);
//!
//! let headers: &[(&str, &[u8])] = &[("Cache-Control", b"public, max-age=60"), ("Age", b"10")];
//! assert_eq!(cache_lifetime("GET", false, 200, headers), Some(Duration::from_secs(50)));
//! # Ok::<(), String>(())
//! ```
#![deny(missing_docs)]

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use fastpath_drivers::UpstreamAddr;

mod backend;
mod cacheable;
pub mod exchange;
mod response_cache;
mod routes;
mod shared_cache;

pub use backend::BackendState;
pub use cacheable::{
    cache_lifetime, vary_accept_encoding, ResponseFields, CACHEABLE_STATUSES, MAX_LIFETIME,
};
pub use response_cache::{cache_key, Capture, Hit, ResponseCache, Validators, MAX_AGE};
pub use routes::{RouteRequest, RouteRule, Routes};
pub use shared_cache::{Fill, Found, SharedCache, FILL_WAIT, MAX_SHARDS, PASS_FOR};

/// Longest Unix socket path, in bytes: `sun_path` holds 108 bytes including
/// the terminating NUL.
pub const MAX_UNIX_PATH: usize = 107;

/// How a request is handed to its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HandoverMethod {
    /// fastpath sends the request to the backend and relays the response; the
    /// client connection stays with fastpath for its next requests.
    #[default]
    Proxy,
    /// fastpath sends the request head it has read and then splices bytes both
    /// ways for the rest of the connection's life: the backend owns the client
    /// from then on (needed for protocol upgrades such as WebSocket).
    Bridge,
    /// fastpath answers `307 Temporary Redirect` to the backend's `public_url`;
    /// the client makes a new connection to the backend itself.
    Redirect,
}

impl HandoverMethod {
    /// Every method, in the order shown in error messages.
    pub const ALL: &[HandoverMethod] = &[
        HandoverMethod::Proxy,
        HandoverMethod::Bridge,
        HandoverMethod::Redirect,
    ];

    /// The name used in the configuration file.
    pub fn name(self) -> &'static str {
        match self {
            HandoverMethod::Proxy => "proxy",
            HandoverMethod::Bridge => "bridge",
            HandoverMethod::Redirect => "redirect",
        }
    }

    /// The method called `name` (exact, lower case), if any.
    pub fn from_name(name: &str) -> Option<HandoverMethod> {
        HandoverMethod::ALL
            .iter()
            .copied()
            .find(|m| m.name() == name)
    }
}

impl FromStr for HandoverMethod {
    type Err = String;

    /// Parses a method name; the error lists the valid names.
    fn from_str(s: &str) -> Result<HandoverMethod, String> {
        HandoverMethod::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = HandoverMethod::ALL.iter().map(|m| m.name()).collect();
            format!(
                "unknown hand-over method `{s}`; valid methods are: {}",
                names.join(", ")
            )
        })
    }
}

impl fmt::Display for HandoverMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reads a backend address as the configuration writes it: `IP:PORT` or
/// `unix:PATH`. Host names are not resolved (a lookup at start-up would pin one
/// answer anyway, and a lookup per connection would block a worker). A relative
/// `PATH` is kept as written; the caller decides what it is relative to.
pub fn parse_backend_addr(s: &str) -> Result<UpstreamAddr, String> {
    if let Some(path) = s.strip_prefix("unix:") {
        if path.is_empty() {
            return Err(format!(
                "backend address \"{s}\" has no socket path after `unix:`"
            ));
        }
        if path.contains('\0') {
            return Err(format!("backend address \"{s}\" contains a NUL byte"));
        }
        if path.len() > MAX_UNIX_PATH {
            return Err(format!(
                "backend address \"{s}\": a Unix socket path may be at most \
                 {MAX_UNIX_PATH} bytes"
            ));
        }
        return Ok(UpstreamAddr::Unix(PathBuf::from(path)));
    }
    match s.parse::<SocketAddr>() {
        Ok(addr) if addr.port() == 0 => Err(format!(
            "backend address \"{s}\" has port 0, which cannot be connected to"
        )),
        Ok(addr) => Ok(UpstreamAddr::Tcp(addr)),
        Err(_) => Err(format!(
            "backend address \"{s}\" is neither IP:PORT nor unix:PATH \
             (for example \"127.0.0.1:9000\", \"[::1]:9000\" or \"unix:/run/app.sock\"; \
             host names are not resolved)"
        )),
    }
}

/// Default of [`BackendConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// Default of [`BackendConfig::connect_timeout`]: a backend on the same host or
/// network connects in far less; longer usually means it is down or overloaded.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default of [`BackendConfig::response_timeout`]: generous for slow pages, short
/// enough that a hung backend does not pin client connections for minutes.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`BackendConfig::idle_timeout`]. Backends with a shorter keep-alive
/// timeout close their end first, so the pool must cope with that anyway; this
/// only bounds how long idle descriptors are held.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of [`BackendConfig::fail_timeout`].
pub const DEFAULT_FAIL_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`BackendConfig::max_body_size`]: nginx's `client_max_body_size`.
pub const DEFAULT_MAX_BODY_SIZE: u64 = 1 << 20;
/// Default of [`BackendConfig::body_timeout`]: nginx's `client_body_timeout`, here for the
/// whole body, as the header timeout is for the whole head.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default of [`BackendConfig::request_buffer_memory`] and
/// [`BackendConfig::response_buffer_memory`]: nginx's `proxy_buffers` (8 buffers of 8 KiB);
/// anything larger goes to a temporary file.
pub const DEFAULT_BUFFER_MEMORY: u64 = 64 * 1024;
/// Default of [`BackendConfig::max_temp_file_size`]: nginx's `proxy_max_temp_file_size`.
pub const DEFAULT_MAX_TEMP_FILE_SIZE: u64 = 1 << 30;

/// One backend server (`[[backend]]`): its addresses and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Unique name, referred to by routes.
    pub name: String,
    /// Addresses of equivalent servers, used in turn; at least one.
    pub addresses: Vec<UpstreamAddr>,
    /// Open connections to this backend, whole server (the caller divides them
    /// among workers, see [`BackendConfig::per_worker_connections`]).
    pub max_connections: usize,
    /// A connect not done within this makes the caller try the next address,
    /// then answer 502.
    pub connect_timeout: Duration,
    /// No response head from the backend within this after the request was
    /// sent: 504.
    pub response_timeout: Duration,
    /// A kept-alive backend connection idle this long is closed.
    pub idle_timeout: Duration,
    /// An address that refused or timed out is skipped this long (passive
    /// health check).
    pub fail_timeout: Duration,
    /// Add `X-Forwarded-For`, `X-Forwarded-Proto` and `Forwarded` to requests.
    pub forwarded: bool,
    /// Base URL of the backend as clients reach it (`"http://127.0.0.1:9000"`),
    /// for the redirect method.
    pub public_url: Option<String>,
    /// Keep cacheable GET responses (see [`cache_lifetime`]).
    pub cache: bool,
    /// Read a request body whole (memory, then a temporary file) before a
    /// backend connection is taken, so a slow client never holds one; when
    /// false the body is passed on as it arrives (long uploads that the
    /// backend wants as a stream).
    pub request_buffering: bool,
    /// Most of a buffered request body kept in memory; the rest of a larger
    /// one goes to a temporary file.
    pub request_buffer_memory: u64,
    /// Largest request body taken, buffered or not: larger gets 413. 0 for
    /// no limit.
    pub max_body_size: u64,
    /// A buffered request body must arrive whole within this after its head:
    /// 408 otherwise.
    pub body_timeout: Duration,
    /// Read a response from the backend as fast as it comes (memory, then a
    /// temporary file), so the backend connection is free while a slow
    /// client still downloads; when false the response goes at the client's
    /// pace (server-sent events stream either way).
    pub response_buffering: bool,
    /// Most of a buffered response kept in memory before the rest goes to a
    /// temporary file.
    pub response_buffer_memory: u64,
    /// Most bytes of one response written to a temporary file; past it the
    /// response goes at the client's pace. 0 for no temporary file.
    pub max_temp_file_size: u64,
    /// Where temporary files are made (unlinked from the start, so nothing is
    /// left behind).
    pub temp_dir: PathBuf,
}

impl BackendConfig {
    /// A backend with these addresses and every other setting at its default.
    pub fn new(name: impl Into<String>, addresses: Vec<UpstreamAddr>) -> BackendConfig {
        BackendConfig {
            name: name.into(),
            addresses,
            ..BackendConfig::default()
        }
    }

    /// One worker's share of [`BackendConfig::max_connections`]: rounded down so
    /// the whole server stays within the limit, but at least 1 so no worker is
    /// cut off from the backend.
    pub fn per_worker_connections(&self, workers: usize) -> usize {
        (self.max_connections / workers.max(1)).max(1)
    }
}

impl Default for BackendConfig {
    /// No name and no addresses; every other field at its default: 256
    /// connections, timeouts 2 s / 30 s / 60 s / 10 s, forwarded headers on,
    /// no public URL, caching on, request and response buffering on with
    /// 64 KiB in memory, a 1 GiB temporary file at most per response, bodies up to
    /// 1 MiB arriving within 60 s, temporary files in the system's directory.
    fn default() -> Self {
        BackendConfig {
            name: String::new(),
            addresses: Vec::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            fail_timeout: DEFAULT_FAIL_TIMEOUT,
            forwarded: true,
            public_url: None,
            cache: true,
            request_buffering: true,
            request_buffer_memory: DEFAULT_BUFFER_MEMORY,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            response_buffering: true,
            response_buffer_memory: DEFAULT_BUFFER_MEMORY,
            max_temp_file_size: DEFAULT_MAX_TEMP_FILE_SIZE,
            temp_dir: std::env::temp_dir(),
        }
    }
}

/// The `Location` of the 307 sent by the redirect method: `public_url` without
/// its trailing `/`s, then the request target as sent (path and query, still
/// percent-encoded, so the backend sees exactly what the client asked for).
///
/// A target that does not start with `/` (the asterisk form `*`) gets one, so
/// the result is always a URL with a path.
pub fn redirect_location(public_url: &str, target: &str) -> String {
    let base = public_url.trim_end_matches('/');
    let mut location = String::with_capacity(base.len() + target.len() + 1);
    location.push_str(base);
    if !target.starts_with('/') {
        location.push('/');
    }
    location.push_str(target);
    location
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn method_names_round_trip() {
        for &m in HandoverMethod::ALL {
            assert_eq!(m.name().parse::<HandoverMethod>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
        }
        assert_eq!(HandoverMethod::default(), HandoverMethod::Proxy);
        let e = "Proxy".parse::<HandoverMethod>().unwrap_err();
        assert!(
            e.contains("valid methods are: proxy, bridge, redirect"),
            "{e}"
        );
    }

    #[test]
    fn addresses_parse() {
        let tcp = |s: &str| UpstreamAddr::Tcp(s.parse().unwrap());
        let cases = [
            ("127.0.0.1:9000", tcp("127.0.0.1:9000")),
            ("[::1]:9000", tcp("[::1]:9000")),
            (
                "unix:/run/app.sock",
                UpstreamAddr::Unix("/run/app.sock".into()),
            ),
            (
                "unix:app.sock",
                UpstreamAddr::Unix(Path::new("app.sock").to_path_buf()),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_backend_addr(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_addresses() {
        let long = format!("unix:/{}", "a".repeat(MAX_UNIX_PATH));
        let cases = [
            ("localhost:9000", "neither IP:PORT nor unix:PATH"),
            ("127.0.0.1", "neither IP:PORT nor unix:PATH"),
            ("::1:9000", "neither IP:PORT nor unix:PATH"),
            ("", "neither IP:PORT nor unix:PATH"),
            ("127.0.0.1:0", "port 0"),
            ("unix:", "no socket path"),
            ("unix:/a\0b", "NUL"),
            (long.as_str(), "at most 107 bytes"),
        ];
        for (text, needle) in cases {
            let e = parse_backend_addr(text).unwrap_err();
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        let longest = format!("unix:/{}", "a".repeat(MAX_UNIX_PATH - 1));
        assert!(parse_backend_addr(&longest).is_ok());
    }

    #[test]
    fn backend_defaults_and_worker_share() {
        let b = BackendConfig::new("app", vec![parse_backend_addr("127.0.0.1:9000").unwrap()]);
        assert_eq!(b.name, "app");
        assert_eq!(b.max_connections, 256);
        assert_eq!(b.connect_timeout, Duration::from_secs(2));
        assert_eq!(b.response_timeout, Duration::from_secs(30));
        assert_eq!(b.idle_timeout, Duration::from_secs(60));
        assert_eq!(b.fail_timeout, Duration::from_secs(10));
        assert!(b.forwarded);
        assert!(b.cache);
        assert_eq!(b.public_url, None);
        assert_eq!(b.per_worker_connections(1), 256);
        assert_eq!(b.per_worker_connections(0), 256);
        assert_eq!(b.per_worker_connections(3), 85);
        assert_eq!(b.per_worker_connections(1000), 1);
    }

    #[test]
    fn redirect_locations() {
        let cases = [
            (
                "http://127.0.0.1:9000",
                "/app/x?a=1",
                "http://127.0.0.1:9000/app/x?a=1",
            ),
            ("http://127.0.0.1:9000/", "/", "http://127.0.0.1:9000/"),
            ("https://b.test//", "/a%20b", "https://b.test/a%20b"),
            ("https://b.test/base", "/x", "https://b.test/base/x"),
            ("http://b.test", "*", "http://b.test/*"),
            ("http://b.test", "/?", "http://b.test/?"),
        ];
        for (base, target, want) in cases {
            assert_eq!(redirect_location(base, target), want, "{base} + {target}");
        }
    }
}
