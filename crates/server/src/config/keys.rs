//! Every key of the configuration file, described once: one table of key
//! specifications per TOML table, each entry giving the key's name, its
//! default (as `docs/configuration.md` shows it), what kind of value it takes
//! and where that value is stored, under a one-line description.
//! [`check`](super::check) walks a document against these tables: the
//! unknown-key errors (with "did you mean"), the type and range errors with
//! their positions and the filling of the typed [`Config`] all come from here.
//!
//! Keys are read in table order, which is also the order in which the
//! unknown-key error lists them, so a key that needs another (a `[[host]]`
//! inherits the top-level `root`) comes after it.
//!
//! # Adding a key
//!
//! 1. Add the field to the struct the table fills (`Limits` in `config.rs`,
//!    say), with its default in that struct's `Default`.
//! 2. Add one entry to the table here:
//!
//!    ```text
//!    // Most `/`-separated segments in a request path.
//!    key("max_segments", "64", Count(1, MAX_USIZE, |l, n| l.max_segments = to_usize(n))),
//!    ```
//!
//!    The kind checks the value and reports errors at its position; the
//!    closure stores a good one. `Bool`, `Count`, `Size` and `Duration` are
//!    plain values; `Text` and `List` take strings and a closure that
//!    validates them too (its `Err` is reported at the string); `Custom` is
//!    for anything else, usually a `Checker` method below. Use `required`
//!    instead of `key` for a key that must be given.
//! 3. Add a row for it to its section of `docs/configuration.md`. The tests
//!    check that every key has one, showing the same default, and that
//!    writing the default in a file changes nothing.

use std::net::{Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use fastpath_drivers::{ListenAddr, UpstreamAddr};
use fastpath_drivers::{PercoreConfig, PreforkConfig, ThreadsConfig};
use fastpath_handover::{
    parse_backend_addr, BackendConfig, HandoverMethod, RouteRule, MAX_UNIX_PATH,
};
use toml_edit::Item;

use crate::module::{ModuleUse, Order, Settings};
use crate::privileges::{lookup_group, lookup_user};

use super::check::{
    check_dir, key, required, resolve, to_usize, Checker, Field, Kind, Section, SeenBackend, Span,
    TableSpec,
};
use super::{
    AcmeConfig, CacheConfig, Config, HandoverConfig, HostConfig, Http2Config, Limits, LogConfig,
    LogTarget, MetricsConfig, Timeouts, TlsConfig, MAX_WORKERS,
};
use fastpath_tls::{TlsVersions, UnknownName};
use Kind::*;

/// More threads than this is almost certainly a typo, not a plan.
/// More children or pool threads than this is almost certainly a typo.
const MAX_POOL: u64 = 65_536;
const MAX_USIZE: u64 = usize::MAX as u64;
const LEVELS: &[&str] = &["error", "warn", "info", "debug", "trace"];

#[rustfmt::skip]
pub(super) const TOP: TableSpec<Config> = TableSpec { place: "at the top level", keys: &[
    // Addresses to accept connections on, each IP:PORT or unix:PATH (a Unix-domain socket).
    key("listen", "\"127.0.0.1:8080\"", Custom(|ck, f, c| ck.listen(f, c))),
    // Worker threads; 0 for one per CPU core.
    key("workers", "0", Count(0, MAX_WORKERS as u64, |c, n| c.workers = to_usize(n))),

    // ---- The concurrency model: its name, and the tables of the models that have
    // settings (PREFORK, THREADS, PERCORE below). The names and their parsing
    // belong to `Model` in config.rs; the file's `model` is read here and nowhere else.
    // Concurrency model, one of `Model::ALL`.
    key("model", "\"auto\"", Text(|c, name| name.parse().map(|m| c.model = m))),
    // The process model's pool.
    key("prefork", "", Table(|ck, s, c| ck.prefork(s, &mut c.prefork))),
    // The thread-pool model's pool.
    key("threads", "", Table(|ck, s, c| ck.read_table(s, &THREADS, &mut c.threads))),
    // The per-core model's options.
    key("percore", "", Table(|ck, s, c| ck.read_table(s, &PERCORE, &mut c.percore))),
    // ---- End of the concurrency model.

    // Document root of the top-level host.
    key("root", "the configuration file's directory",
        Custom(|ck, f, c| ck.root(f, &mut c.default_host.root))),
    // File names tried, in order, when a directory is requested.
    key("index", "[\"index.html\"]", Custom(|ck, f, c| ck.index(f, &mut c.default_host.index))),
    // Serve names starting with `.` (`.well-known` always is).
    key("dotfiles", "false", Bool(|c, b| c.default_host.dotfiles = b)),
    // Serve `X.br` or `X.gz` instead of `X` to clients that accept them.
    key("precompressed", "true", Bool(|c, b| c.default_host.precompressed = b)),
    // Strict-Transport-Security on responses over TLS: true (two years), false, or the
    // value itself; [[host]] tables inherit it, so it is read before them.
    key("hsts", "false", Custom(|ck, f, c| ck.hsts(f, &mut c.default_host.hsts))),
    // Protocol limits.
    key("limits", "", Table(|ck, s, c| ck.read_table(s, &LIMITS, &mut c.limits))),
    // Connection timeouts.
    key("timeouts", "", Table(|ck, s, c| ck.read_table(s, &TIMEOUTS, &mut c.timeouts))),
    // The content cache.
    key("cache", "", Table(|ck, s, c| ck.read_table(s, &CACHE, &mut c.cache))),
    // Access and error logs.
    key("log", "", Table(|ck, s, c| ck.read_table(s, &LOG, &mut c.log))),
    // Virtual hosts; after the top-level host's keys, which they inherit.
    key("host", "", Tables(|ck, tables, c| c.hosts = ck.hosts(tables, &c.default_host))),
    // The backend response cache.
    key("handover", "", Table(|ck, s, c| ck.read_table(s, &HANDOVER, &mut c.handover))),
    // Backend servers; before the routes, which name them.
    key("backend", "", Tables(|ck, tables, c| c.backends = ck.backends(tables))),
    // Which requests go to which backend, and how.
    key("route", "", Tables(|ck, tables, c| c.routes = ck.routes(tables))),
    // Modules, each in the scope of some hosts and a path prefix (docs/modules.md).
    key("module", "", Tables(|ck, tables, c| c.modules = ck.modules(tables))),
    // The path answered `200 ok` for a load balancer's health check, before any routing.
    key("health_check", "none", Text(|c, path| {
        if !path.starts_with('/') || path.contains(['?', '#']) || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!("`health_check` \"{}\" must be a path: a `/` first, no query, no spaces", path.escape_debug()));
        }
        c.health_check = Some(path.to_owned());
        Ok(())
    })),
    // The Prometheus metrics listener; after `listen`, which it must not repeat.
    key("metrics", "", Table(|ck, s, c| ck.metrics(s, c))),
    // The top-level host's certificate chain (PEM) for TLS listeners, the default one
    // unless a [[host]] with `default = true` has its own.
    key("tls_certificate", "none",
        Custom(|ck, f, c| ck.path(f, &mut c.default_host.tls_certificate))),
    // Its private key (PEM).
    key("tls_key", "none", Custom(|ck, f, c| ck.path(f, &mut c.default_host.tls_key))),
    // How TLS listeners speak TLS.
    key("tls", "", Table(|ck, s, c| ck.read_table(s, &TLS, &mut c.tls))),
    // HTTP/2.
    key("http2", "", Table(|ck, s, c| ck.read_table(s, &HTTP2, &mut c.http2))),
    // Where the hosts with `tls = "auto"` get their certificates.
    key("acme", "", Table(|ck, s, c| ck.read_table(s, &ACME, &mut c.acme))),

    // ---- Privileges: who the serving processes run as when started as root.
    // The user, a name or a numeric id.
    key("user", "none", Text(|c, s| lookup_user(s).map(|u| c.user = Some(u)))),
    // The group, a name or a numeric id.
    key("group", "the user's primary group",
        Text(|c, s| lookup_group(s).map(|g| c.group = Some(g)))),
    // Started as root without `user`, keep running as root rather than refuse to start.
    key("run_as_root", "false", Bool(|c, b| c.run_as_root = b)),
    // Who may connect to the Unix-domain listeners (`listen = ["unix:PATH"]`): the
    // permissions of their socket files, in octal ("0660": the owner and its group may
    // connect); unset leaves what the umask gives.
    key("unix_mode", "unset", Text(|c, s| parse_mode(s).map(|m| c.unix_mode = Some(m)))),

    // ---- Operations.
    // Where to write the process id once serving, for `fastpath reload`.
    key("pid_file", "none", Text(|c, s| {
        if s.is_empty() {
            return Err("`pid_file` must be a path, not empty".to_owned());
        }
        c.pid_file = Some(PathBuf::from(s));
        Ok(())
    })),
]};

// The concurrency models' own tables, read through `prefork`, `threads` and
// `percore` in TOP.

#[rustfmt::skip]
pub(super) const PREFORK: TableSpec<PreforkConfig> = TableSpec { place: "in [prefork]", keys: &[
    // Children forked at start.
    key("start", "5", Count(1, MAX_POOL, |p, n| p.start = to_usize(n))),
    // More children are forked while fewer than this are idle.
    key("min_spare", "5", Count(1, MAX_POOL, |p, n| p.min_spare = to_usize(n))),
    // Idle children are retired while more than this are idle.
    key("max_spare", "10", Count(1, MAX_POOL, |p, n| p.max_spare = to_usize(n))),
    // Most children at once.
    key("max_children", "256", Count(1, MAX_POOL, |p, n| p.max_children = to_usize(n))),
    // A child exits after serving this many connections; 0 for never.
    key("max_connections_per_child", "0",
        Count(0, u64::MAX, |p, n| p.max_connections_per_child = n)),
]};

#[rustfmt::skip]
pub(super) const THREADS: TableSpec<ThreadsConfig> = TableSpec { place: "in [threads]", keys: &[
    // Threads in the pool: the most connections served at once.
    key("threads", "256", Count(1, MAX_POOL, |t, n| t.threads = to_usize(n))),
    // Threads running handler code at once; 0 for one per CPU.
    key("max_active", "0", Count(0, MAX_POOL, |t, n| t.max_active = to_usize(n))),
    // Stack of each pool thread; below 64 KiB a thread cannot even run the
    // standard library's start-up.
    key("stack_size", "\"256k\"", Size(64 * 1024, |t, n| t.stack_size = to_usize(n))),
]};

#[rustfmt::skip]
pub(super) const PERCORE: TableSpec<PercoreConfig> = TableSpec { place: "in [percore]", keys: &[
    // Keep polling this long after each event instead of sleeping.
    key("busy_poll", "unset", Duration(|p, d| p.busy_poll = Some(d))),
]};

#[rustfmt::skip]
pub(super) const LIMITS: TableSpec<Limits> = TableSpec { place: "in [limits]", keys: &[
    // Simultaneously open client connections.
    key("max_connections", "10000", Count(1, MAX_USIZE, |l, n| l.max_connections = to_usize(n))),
    // Longest request line; longer gets 414.
    key("max_request_line", "8192", Size(64, |l, n| l.max_request_line = to_usize(n))),
    // Largest request head; larger gets 431.
    key("max_header_bytes", "16384", Size(256, |l, n| l.max_header_bytes = to_usize(n))),
    // Most header fields in one request; more gets 431.
    key("max_headers", "100", Count(1, MAX_USIZE, |l, n| l.max_headers = to_usize(n))),
    // Request bodies to static paths up to this size are read and discarded.
    key("max_discard_body", "1048576", Size(0, |l, n| l.max_discard_body = n)),
    // Requests served on one connection before it is closed.
    key("max_requests_per_connection", "10000",
        Count(1, u64::MAX, |l, n| l.max_requests_per_connection = n)),
    // SO_SNDBUF of client connections; 0 leaves the kernel's autotuning.
    key("send_buffer", "0", Size(0, |l, n| l.send_buffer = to_usize(n))),
]};

#[rustfmt::skip]
pub(super) const TIMEOUTS: TableSpec<Timeouts> = TableSpec { place: "in [timeouts]", keys: &[
    // The whole request head must arrive within this after its first byte.
    key("header", "\"10s\"", Duration(|t, d| t.header = d)),
    // Idle time allowed between requests on a kept-alive connection.
    key("keepalive", "\"75s\"", Duration(|t, d| t.keepalive = d)),
    // A client that accepts no response bytes this long is disconnected.
    key("send", "\"60s\"", Duration(|t, d| t.send = d)),
    // Unread client bytes are drained this long before closing.
    key("linger", "\"2s\"", Duration(|t, d| t.linger = d)),
    // A graceful stop (SIGTERM) lets open connections finish this long.
    key("shutdown", "\"30s\"", Duration(|t, d| t.shutdown = d)),
]};

#[rustfmt::skip]
pub(super) const CACHE: TableSpec<CacheConfig> = TableSpec { place: "in [cache]", keys: &[
    // Cache resolved paths and small files.
    key("enabled", "true", Bool(|c, b| c.enabled = b)),
    // Memory for cached entries, all workers together.
    key("max_memory", "\"64MiB\"", Size(0, |c, n| c.max_memory = n)),
    // Files up to this size may be kept in memory whole.
    key("max_file_size", "\"64KiB\"", Size(0, |c, n| c.max_file_size = n)),
    // Smaller files are copied from memory; larger ones go with sendfile.
    key("copy_below", "\"8KiB\"", Size(0, |c, n| c.copy_below = n)),
    // Descriptors of larger files kept open, all workers together.
    key("max_open_files", "1024", Count(0, 1 << 20, |c, n| c.max_open_files = to_usize(n))),
]};

#[rustfmt::skip]
pub(super) const LOG: TableSpec<LogConfig> = TableSpec { place: "in [log]", keys: &[
    // Where access log lines go: "off", "stdout", "stderr" or a file.
    key("access", "\"stdout\"", Custom(|ck, f, l| ck.log_target(f, &mut l.access, true))),
    // Where errors and diagnostics go: "stdout", "stderr" or a file.
    key("error", "\"stderr\"", Custom(|ck, f, l| ck.log_target(f, &mut l.error, false))),
    // Least severe diagnostics written.
    key("level", "\"info\"", Text(|l, level| log_level(level).map(|s| l.level = s))),
    // Access log lines end with the TLS protocol, cipher and `r` (resumed) or `.`.
    key("tls_fields", "false", Bool(|l, b| l.tls_fields = b)),
]};

#[rustfmt::skip]
pub(super) const HOST: TableSpec<HostConfig> = TableSpec { place: "in [[host]]", keys: &[
    // Host names served: exact, or wildcards "*.domain".
    required("names", "[[host]] needs `names`, a list of the host names it serves",
        Custom(|ck, f, h| ck.host_names(f, &mut h.names))),
    // Document root.
    key("root", "top-level `root`", Custom(|ck, f, h| ck.root(f, &mut h.root))),
    // As at the top level.
    key("index", "top-level `index`", Custom(|ck, f, h| ck.index(f, &mut h.index))),
    // As at the top level.
    key("dotfiles", "top-level `dotfiles`", Bool(|h, b| h.dotfiles = b)),
    // As at the top level.
    key("precompressed", "top-level `precompressed`", Bool(|h, b| h.precompressed = b)),
    // Serve requests that match no host name; one host at most.
    key("default", "false", Custom(|ck, f, h| ck.default_host(f, &mut h.is_default))),
    // The certificate chain (PEM) served to TLS clients asking for these names.
    key("tls_certificate", "the default certificate",
        Custom(|ck, f, h| ck.path(f, &mut h.tls_certificate))),
    // Its private key (PEM).
    key("tls_key", "none", Custom(|ck, f, h| ck.path(f, &mut h.tls_key))),
    // As at the top level.
    key("hsts", "top-level `hsts`", Custom(|ck, f, h| ck.hsts(f, &mut h.hsts))),
    // "auto": the certificate is obtained and renewed from the ACME server of [acme].
    key("tls", "none", Text(|h, s| match s {
        "auto" => {
            h.tls_auto = true;
            Ok(())
        }
        _ => Err(format!("[[host]] `tls` \"{}\" is not \"auto\"", s.escape_debug())),
    })),
]};

#[rustfmt::skip]
pub(super) const ACME: TableSpec<AcmeConfig> = TableSpec { place: "in [acme]", keys: &[
    // The ACME server's directory URL; needed when a [[host]] has `tls = "auto"`.
    key("directory", "none", Text(|a, s| {
        if !s.starts_with("https://") {
            return Err(format!("[acme] `directory` \"{}\" must be an https:// URL", s.escape_debug()));
        }
        a.directory = Some(s.to_owned());
        Ok(())
    })),
    // The account's contacts: e-mail addresses ("mailto:" is added to a bare one).
    key("contact", "none", List(|a, s| {
        if s.is_empty() || s.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!("[acme] `contact` \"{}\" is not an address", s.escape_debug()));
        }
        a.contact.push(if s.contains(':') { s.to_owned() } else { format!("mailto:{s}") });
        Ok(())
    })),
    // Where certificates, their keys and the answers to challenges are kept.
    key("state_dir", "\"/var/lib/fastpath/acme\"", Custom(|ck, f, a| {
        let mut dir = None;
        ck.path(f, &mut dir);
        if let Some(dir) = dir {
            a.state_dir = dir;
        }
    })),
    // The account key (PKCS#8 PEM, made if missing); after `state_dir`, where it is by default.
    key("account_key", "`state_dir`/account.key", Custom(|ck, f, a| ck.path(f, &mut a.account_key))),
    // The roots (PEM) the ACME server's HTTPS is checked with, for a private CA; unset:
    // the system's CA bundle.
    key("ca_root", "the system's roots", Custom(|ck, f, a| ck.path(f, &mut a.ca_root))),
    // "http-01" (on a plain listener, port 80 for a public CA) or "tls-alpn-01" (on a TLS
    // listener, port 443).
    key("challenge", "\"http-01\"", Text(|a, s| {
        a.challenge = match s {
            "http-01" => fastpath_acme::ChallengeKind::Http01,
            "tls-alpn-01" => fastpath_acme::ChallengeKind::TlsAlpn01,
            _ => return Err(format!("[acme] `challenge` \"{}\" is not \"http-01\" or \"tls-alpn-01\"", s.escape_debug())),
        };
        Ok(())
    })),
    // Agree to the CA's terms of service when the account is made.
    key("agree_terms", "true", Bool(|a, b| a.agree_terms = b)),
]};

#[rustfmt::skip]
pub(super) const TLS: TableSpec<TlsConfig> = TableSpec { place: "in [tls]", keys: &[
    // The versions accepted: ["TLSv1.2", "TLSv1.3"] (Mozilla's intermediate profile) or
    // ["TLSv1.3"] (modern).
    key("protocols", "[\"TLSv1.2\", \"TLSv1.3\"]", Custom(|ck, f, t| ck.tls_protocols(f, t))),
    // A server name (SNI) no host has a certificate for: "default" (the default
    // certificate) or "refuse" (the handshake fails).
    key("unknown_name", "\"default\"", Text(|t, s| {
        t.unknown_name = match s {
            "default" => UnknownName::DefaultCertificate,
            "refuse" => UnknownName::Refuse,
            _ => return Err(format!("[tls] `unknown_name` \"{s}\" is not \"default\" or \"refuse\"")),
        };
        Ok(())
    })),
    // Session tickets (resumption without server state); off: sessions resume only from
    // the serving process's own cache.
    key("session_tickets", "true", Bool(|t, b| t.session_tickets = b)),
    // Files of 48 or 80 random bytes (`openssl rand 80`) that key the tickets, the first
    // encrypting and all decrypting: nodes sharing them resume each other's sessions.
    key("ticket_keys", "keys made at start", Custom(|ck, f, t| ck.ticket_key_files(f, t))),
    // How long a key made at start encrypts tickets before the next one is made.
    key("ticket_key_rotation", "\"12h\"", Duration(|t, d| t.ticket_key_rotation = d)),
]};

#[rustfmt::skip]
pub(super) const HTTP2: TableSpec<Http2Config> = TableSpec { place: "in [http2]", keys: &[
    // Offer HTTP/2: by ALPN ("h2") on TLS listeners, and on plain ones to clients that
    // open with its preface (prior knowledge, h2c).
    key("enabled", "true", Bool(|h, b| h.enabled = b)),
    // Streams one client may have open at once on a connection (RFC 9113
    // SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with REFUSED_STREAM.
    key("max_concurrent_streams", "100",
        Count(1, MAX_CONCURRENT_STREAMS, |h, n| h.max_concurrent_streams = n as u32)),
]};

/// The most streams `[http2] max_concurrent_streams` allows: each holds buffers and a
/// request of its own, and browsers open at most about a hundred.
const MAX_CONCURRENT_STREAMS: u64 = 1000;

#[rustfmt::skip]
pub(super) const HANDOVER: TableSpec<HandoverConfig> = TableSpec { place: "in [handover]", keys: &[
    // Memory for cached backend responses, all workers together.
    key("cache_memory", "\"32m\"", Size(0, |h, n| h.cache_memory = to_usize(n))),
    // Larger responses are never cached.
    key("cache_max_response", "\"1m\"", Size(0, |h, n| h.cache_max_response = to_usize(n))),
    // Bridged connections joined in the kernel (BPF sockmap) or spliced: auto, on or off.
    key("kernel_path", "\"auto\"", Text(|h, s| s.parse().map(|m| h.kernel_path = m))),
    // Bridged connections the kernel path holds at once.
    key("kernel_bridges", "4096", Count(1, 1 << 20, |h, n| h.kernel_bridges = n as u32)),
    // Bytes the kernel may hold for a destination that does not read, per direction.
    key("kernel_hold", "\"4m\"", Size(65_536, |h, n| h.kernel_hold = n.min(u32::MAX as u64) as u32)),
]};

/// One `[[listen]]` table, as read.
#[derive(Default)]
pub(super) struct ListenEntry {
    address: Option<String>,
    unix_mode: Option<u32>,
    tls: bool,
    redirect_to_https: Option<u16>,
    http2_only: bool,
    proxy_protocol: bool,
    proxy_from: Option<Vec<fastpath_drivers::Cidr>>,
}

#[rustfmt::skip]
pub(super) const LISTEN: TableSpec<ListenEntry> = TableSpec { place: "in [[listen]]", keys: &[
    // Where: IP:PORT or unix:PATH, as in the list form.
    required("address", "[[listen]] needs `address`, IP:PORT or unix:PATH",
        Text(|e, s| {
            e.address = Some(s.to_owned());
            Ok(())
        })),
    // This Unix socket's file permissions, in octal, over the top-level `unix_mode`.
    key("unix_mode", "the top-level `unix_mode`",
        Text(|e, s| parse_mode(s).map(|m| e.unix_mode = Some(m)))),
    // Speak TLS (HTTPS) here, with the hosts' `tls_certificate`s.
    key("tls", "false", Bool(|e, b| e.tls = b)),
    // Answer every request with a redirect to the same URL over HTTPS, on this port.
    key("redirect_to_https", "unset",
        Count(1, 65_535, |e, n| e.redirect_to_https = Some(n as u16))),
    // Every connection speaks HTTP/2 from its first byte (prior knowledge), none HTTP/1.
    key("http2_only", "false", Bool(|e, b| e.http2_only = b)),
    // Every connection starts with a PROXY protocol header (v1 or v2) naming the client.
    key("proxy_protocol", "false", Bool(|e, b| e.proxy_protocol = b)),
    // The addresses (or blocks, "10.0.0.0/8") of the balancers the header is taken from.
    // (A bad one is reported where it is, and not again as missing.)
    key("proxy_from", "none",
        Custom(|ck, f, e| e.proxy_from = Some(ck.address_blocks(f).unwrap_or_default()))),
]};

#[rustfmt::skip]
pub(super) const METRICS: TableSpec<MetricsConfig> = TableSpec { place: "in [metrics]", keys: &[
    // Where `/metrics` is served; unset for nowhere.
    key("listen", "unset", Text(|m, s| match s.parse::<SocketAddr>() {
        Ok(addr) => {
            m.listen = Some(addr);
            Ok(())
        }
        Err(_) => Err(format!(
            "[metrics] `listen` \"{s}\" is not IP:PORT (for example \"127.0.0.1:9145\"; \
             host names are not resolved)"
        )),
    })),
]};

#[rustfmt::skip]
pub(super) const BACKEND: TableSpec<BackendConfig> = TableSpec { place: "in [[backend]]", keys: &[
    // What routes call the backend.
    required("name", "[[backend]] needs `name`, which routes use to refer to it",
        Custom(|ck, f, b| ck.backend_name(f, &mut b.name))),
    // Where it listens: "IP:PORT" or "unix:PATH", used in turn.
    required("addresses",
        "[[backend]] needs `addresses`, one \"IP:PORT\" or \"unix:PATH\" or an array of them",
        Custom(|ck, f, b| b.addresses = ck.backend_addresses(f))),
    // Open connections to it, all workers together.
    key("max_connections", "256", Count(1, MAX_USIZE, |b, n| b.max_connections = to_usize(n))),
    // A connect not done within this is abandoned.
    key("connect_timeout", "\"2s\"", Duration(|b, d| b.connect_timeout = d)),
    // No response head within this after the request: 504.
    key("response_timeout", "\"30s\"", Duration(|b, d| b.response_timeout = d)),
    // A kept-alive backend connection idle this long is closed.
    key("idle_timeout", "\"60s\"", Duration(|b, d| b.idle_timeout = d)),
    // An address that refused or timed out is skipped this long.
    key("fail_timeout", "\"10s\"", Duration(|b, d| b.fail_timeout = d)),
    // Add X-Forwarded-For, X-Forwarded-Proto and Forwarded to proxied requests.
    key("forwarded", "true", Bool(|b, v| b.forwarded = v)),
    // Its base URL as clients reach it, for redirect routes.
    key("public_url", "none",
        Text(|b, url| check_public_url(url).map(|()| b.public_url = Some(url.to_owned())))),
    // Keep its cacheable responses in memory.
    key("cache", "true", Bool(|b, v| b.cache = v)),
    // Read a request body whole before a backend connection is taken.
    key("request_buffering", "true", Bool(|b, v| b.request_buffering = v)),
    // Most of a buffered request body held in memory; the rest goes to a temporary file.
    key("request_buffer_memory", "\"64k\"", Size(0, |b, n| b.request_buffer_memory = n)),
    // Largest request body; larger gets 413. 0 for no limit.
    key("max_body_size", "\"1m\"", Size(0, |b, n| b.max_body_size = n)),
    // A buffered request body must arrive whole within this after its head: 408.
    key("body_timeout", "\"60s\"", Duration(|b, d| b.body_timeout = d)),
    // Read a response as fast as the backend sends it, whatever the client's pace.
    key("response_buffering", "true", Bool(|b, v| b.response_buffering = v)),
    // Most of a buffered response held in memory; the rest goes to a temporary file.
    key("response_buffer_memory", "\"64k\"", Size(0, |b, n| b.response_buffer_memory = n)),
    // Most of one response in a temporary file; past it, the client's pace. 0 for none.
    key("max_temp_file_size", "\"1g\"", Size(0, |b, n| b.max_temp_file_size = n)),
    // Where temporary files are made.
    key("temp_dir", "$TMPDIR, else /tmp", Custom(|ck, f, b| ck.temp_dir(f, &mut b.temp_dir))),
]};

#[rustfmt::skip]
pub(super) const ROUTE: TableSpec<Route> = TableSpec { place: "in [[route]]", keys: &[
    // The `name` of a [[backend]].
    required("backend", "[[route]] needs `backend`, the name of a [[backend]]",
        Custom(|ck, f, r| ck.route_backend(f, r))),
    // "proxy", "bridge" or "redirect".
    key("method", "\"proxy\"", Custom(|ck, f, r| ck.route_method(f, r))),
    // Condition: the decoded path starts with this.
    key("prefix", "none",
        Text(|r, p| check_prefix(p).map(|()| r.rule.prefix = Some(p.to_owned())))),
    // Condition: the last path segment has one of these extensions.
    key("extensions", "none",
        List(|r, e| check_extension(e).map(|()| r.rule.extensions.push(e.to_ascii_lowercase())))),
    // Condition: the method is neither GET nor HEAD.
    key("unsafe_methods", "false", Bool(|r, b| r.rule.unsafe_methods = b)),
    // Condition: the target has a query string.
    key("query", "false", Bool(|r, b| r.rule.query = b)),
    // Condition: the static lookup found nothing.
    key("fallback", "false", Bool(|r, b| r.rule.fallback = b)),
    // Only requests for these host names.
    key("hosts", "all hosts", List(|r, name| host_name(name).map(|n| r.rule.hosts.push(n)))),
]};

/// The keys every `[[module]]` table has; the others are its module's.
#[rustfmt::skip]
pub(super) const MODULE: TableSpec<ModuleEntry> = TableSpec { place: "in [[module]]", keys: &[
    // Which module (docs/modules.md lists them).
    required("name", "[[module]] needs `name`, the module it configures",
        Custom(|ck, f, m| m.name = ck.string(f).map(|n| (n.to_owned(), f.value_span())))),
    // Only requests for these host names.
    key("hosts", "all hosts", List(|m, name| host_name(name).map(|n| m.hosts.push(n)))),
    // Only requests whose decoded path starts with this.
    key("prefix", "\"/\"", Text(|m, p| check_prefix(p).map(|()| m.prefix = Some(p.to_owned())))),
    // Where its hooks run among the others' of a phase: "first", "middle" or "last".
    key("order", "the module's", Text(|m, o| o.parse().map(|o| m.order = Some(o)))),
]};

/// A `[[module]]` table's own keys, as read.
#[derive(Default)]
pub(super) struct ModuleEntry {
    name: Option<(String, Span)>,
    hosts: Vec<String>,
    prefix: Option<String>,
    order: Option<Order>,
}

/// A `[[route]]` being read.
#[derive(Default)]
pub(super) struct Route {
    rule: RouteRule,
    /// The backend it names, if one has that name.
    backend: Option<usize>,
}

/// The readers of keys that no plain kind covers.
impl<'a> Checker<'a> {
    pub(super) fn config(&mut self, top: &'a toml_edit::Table) -> Config {
        let mut c = Config::default();
        c.default_host.root = resolve(self.base_dir, Path::new("."));
        let top = Section {
            table: top,
            span: None,
        };
        self.read_table(&top, &TOP, &mut c);
        self.user_and_group(top.table, &c);
        self.tls_pair(top.table, &c.default_host);
        self.tls_listeners(top.table, &c);
        self.acme_hosts(top.table, &c);
        if Field::get(top.table, "root").is_none() {
            // The default root is the config file's directory, which
            // normally exists; a position-less error covers the odd case.
            if let Err(e) = check_dir(&c.default_host.root) {
                let root = c.default_host.root.display();
                self.error(None, format!("default `root` {root}: {e}"));
            }
        }
        c
    }

    /// `group` needs `user`, and a numeric `user` the system does not know needs `group`.
    fn user_and_group(&mut self, top: &'a dyn toml_edit::TableLike, c: &Config) {
        let group = Field::get(top, "group");
        match (Field::get(top, "user"), &c.user) {
            (None, _) => {
                if let Some(f) = group {
                    let message = "`group` needs `user`: the group is only switched to \
                                   together with the user"
                        .to_owned();
                    self.error(f.key.span(), message);
                }
            }
            (Some(f), Some(user)) if user.gid.is_none() && group.is_none() => {
                let message = format!(
                    "user {} is not in the user database, so it has no primary group: set `group`",
                    user.uid
                );
                self.error(f.value_span(), message);
            }
            _ => {}
        }
    }

    /// `listen`: a list of addresses, or `[[listen]]` tables, each with its address and
    /// options of its own.
    fn listen(&mut self, f: Field<'a>, c: &mut Config) {
        let tables = matches!(f.item, Item::ArrayOfTables(_))
            || f.item
                .as_array()
                .is_some_and(|a| a.iter().next().is_some_and(|v| v.is_inline_table()));
        let mut addrs = Vec::new();
        if tables {
            for s in self.array_tables(f) {
                let mut entry = ListenEntry::default();
                self.read_table(&s, &LISTEN, &mut entry);
                let (Some(text), Some(field)) = (entry.address, Field::get(s.table, "address"))
                else {
                    continue;
                };
                let span = field.value_span();
                let Some(addr) = self.listen_address(&text, span.clone(), &addrs) else {
                    continue;
                };
                match (&addr, entry.unix_mode) {
                    (ListenAddr::Unix(path), Some(mode)) => c.unix_modes.push((path.clone(), mode)),
                    (ListenAddr::Tcp(_), Some(_)) => self.error(
                        span.clone(),
                        format!(
                            "[[listen]] \"{text}\" is a TCP address: `unix_mode` is for unix:PATH"
                        ),
                    ),
                    (_, None) => {}
                }
                if entry.tls {
                    c.tls.listen.push(addrs.len());
                }
                match (entry.redirect_to_https, entry.tls) {
                    (Some(_), true) => self.error(
                        span.clone(),
                        format!(
                            "[[listen]] \"{text}\" speaks TLS: `redirect_to_https` is for a plain \
                             listener"
                        ),
                    ),
                    (Some(port), false) => c.https_redirects.push((addrs.len(), port)),
                    (None, _) => {}
                }
                if entry.http2_only {
                    if entry.tls {
                        self.error(
                            span.clone(),
                            format!(
                                "[[listen]] \"{text}\" speaks TLS, where ALPN chooses the protocol: \
                                 `http2_only` is for a plain listener"
                            ),
                        );
                    } else if entry.redirect_to_https.is_some() {
                        self.error(
                            span.clone(),
                            format!(
                                "[[listen]] \"{text}\": `http2_only` and `redirect_to_https` \
                                 exclude each other"
                            ),
                        );
                    } else {
                        c.http2_only.push(addrs.len());
                    }
                }
                match (entry.proxy_protocol, entry.proxy_from) {
                    (true, Some(from)) => c.proxy_protocol.push((addrs.len(), from)),
                    (true, None) => self.error(
                        span.clone(),
                        format!(
                            "[[listen]] \"{text}\" has `proxy_protocol` but no `proxy_from`: \
                             name the balancers whose headers are trusted"
                        ),
                    ),
                    (false, Some(_)) => self.error(
                        span,
                        format!(
                            "[[listen]] \"{text}\": `proxy_from` needs `proxy_protocol = true`"
                        ),
                    ),
                    (false, None) => {}
                }
                addrs.push(addr);
            }
        } else {
            for (s, span) in self.string_list(f, false).unwrap_or_default() {
                if let Some(addr) = self.listen_address(s, span, &addrs) {
                    addrs.push(addr);
                }
            }
        }
        if addrs.is_empty() {
            // Nothing valid: keep the default so a caller never sees an
            // empty list (errors were reported anyway).
            addrs = Config::default().listen;
        }
        c.listen = addrs;
    }

    /// One listening address written `s`, or `None` with the error reported at `span`. A
    /// relative socket path is the configuration file's, as a backend's is; its length is
    /// checked once joined to the file's directory.
    fn listen_address(&mut self, s: &str, span: Span, seen: &[ListenAddr]) -> Option<ListenAddr> {
        let parsed = match s.parse::<ListenAddr>() {
            Ok(ListenAddr::Unix(path)) => {
                let path = resolve(self.base_dir, &path);
                format!("unix:{}", path.display()).parse::<ListenAddr>()
            }
            other => other,
        };
        let message = match parsed {
            Ok(addr) if seen.contains(&addr) => format!("`listen` address \"{s}\" is listed twice"),
            Ok(addr) => return Some(addr),
            Err(why) if s.starts_with("unix:") => format!("`listen` address \"{s}\": {why}"),
            Err(_) => format!(
                "`listen` address \"{s}\" is not IP:PORT or unix:PATH (for example \
                 \"127.0.0.1:8080\", \"[::1]:8080\" or \"unix:/run/fastpath.sock\"; host \
                 names are not resolved)"
            ),
        };
        self.error(span, message);
        None
    }

    fn metrics(&mut self, s: &Section<'a>, c: &mut Config) {
        self.read_table(s, &METRICS, &mut c.metrics);
        // Port 0 is a new port for each, never the same.
        let taken =
            |addr: &SocketAddr| addr.port() != 0 && c.listen.contains(&ListenAddr::Tcp(*addr));
        if let Some(addr) = c.metrics.listen.filter(taken) {
            self.error(
                s.span.clone(),
                format!(
                    "[metrics] `listen` ({addr}) is also in the top-level `listen`: metrics \
                     need an address of their own"
                ),
            );
        }
    }

    fn prefork(&mut self, s: &Section<'a>, p: &mut PreforkConfig) {
        self.read_table(s, &PREFORK, p);
        if p.min_spare >= p.max_spare {
            self.error(
                s.span.clone(),
                format!(
                    "[prefork] `min_spare` ({}) must be below `max_spare` ({})",
                    p.min_spare, p.max_spare
                ),
            );
        }
        if p.start > p.max_children || p.min_spare > p.max_children {
            self.error(
                s.span.clone(),
                format!(
                    "[prefork] `start` ({}) and `min_spare` ({}) must not exceed `max_children` ({})",
                    p.start, p.min_spare, p.max_children
                ),
            );
        }
    }

    fn root(&mut self, f: Field<'a>, root: &mut PathBuf) {
        let Some(s) = self.string(f) else { return };
        if s.is_empty() {
            self.error(f.value_span(), "`root` must not be empty".to_owned());
            return;
        }
        let path = resolve(self.base_dir, Path::new(s));
        match check_dir(&path) {
            Ok(()) => *root = path,
            Err(e) => self.error(
                f.value_span(),
                format!("`root` \"{s}\" ({}): {e}", path.display()),
            ),
        }
    }

    /// A backend's `temp_dir`: a directory, relative to the configuration file's.
    fn temp_dir(&mut self, f: Field<'a>, dir: &mut PathBuf) {
        let Some(s) = self.string(f) else { return };
        if s.is_empty() {
            self.error(f.value_span(), "`temp_dir` must not be empty".to_owned());
            return;
        }
        let path = resolve(self.base_dir, Path::new(s));
        match check_dir(&path) {
            Ok(()) => *dir = path,
            Err(e) => self.error(
                f.value_span(),
                format!("`temp_dir` \"{s}\" ({}): {e}", path.display()),
            ),
        }
    }

    fn index(&mut self, f: Field<'a>, index: &mut Vec<String>) {
        let Some(list) = self.string_list(f, true) else {
            return;
        };
        index.clear();
        for (name, span) in list {
            if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
                self.error(
                    span,
                    format!("`index` entry \"{name}\" must be a plain file name (no '/')"),
                );
            } else {
                index.push(name.to_owned());
            }
        }
    }

    fn log_target(&mut self, f: Field<'a>, target: &mut LogTarget, may_be_off: bool) {
        let Some(s) = self.string(f) else { return };
        *target = match s {
            "off" if !may_be_off => {
                return self.error(
                    f.value_span(),
                    "`error` cannot be \"off\": errors must go somewhere; use \"stderr\", \
                     \"stdout\" or a file path"
                        .to_owned(),
                );
            }
            "off" => LogTarget::Off,
            "stdout" => LogTarget::Stdout,
            "stderr" => LogTarget::Stderr,
            "" => return self.error(f.value_span(), format!("`{}` must not be empty", f.name)),
            path => LogTarget::File(resolve(self.base_dir, Path::new(path))),
        };
    }

    fn hosts(&mut self, tables: &[Section<'a>], top: &HostConfig) -> Vec<HostConfig> {
        let mut hosts = Vec::new();
        for s in tables {
            let mut h = HostConfig {
                names: Vec::new(),
                ..top.clone()
            };
            // A certificate is for the names of the host that names it.
            h.tls_certificate = None;
            h.tls_key = None;
            self.read_table(s, &HOST, &mut h);
            self.tls_pair(s.table, &h);
            hosts.push(h);
        }
        hosts
    }

    /// `hsts`: `true` for two years (what Mozilla and the HSTS preload list ask), `false`
    /// for none, or a value of `max-age=SECONDS` with `includeSubDomains` and `preload`
    /// (RFC 6797 §6.1), checked here so that no header is ever malformed.
    fn hsts(&mut self, f: Field<'a>, hsts: &mut Option<String>) {
        if let Some(on) = f.item.as_bool() {
            *hsts = on.then(|| "max-age=63072000".to_owned());
            return;
        }
        let Some(value) = f.item.as_str() else {
            return self.wrong_type(f, "true, false or a Strict-Transport-Security value");
        };
        match hsts_value(value) {
            Ok(value) => *hsts = Some(value),
            Err(e) => self.error(
                f.value_span(),
                format!("`hsts` \"{}\": {e}", value.escape_debug()),
            ),
        }
    }

    /// A path, resolved against the configuration file's directory.
    fn path(&mut self, f: Field<'a>, path: &mut Option<PathBuf>) {
        match self.string(f) {
            Some("") => self.error(f.value_span(), format!("`{}` must not be empty", f.name)),
            Some(s) => *path = Some(resolve(self.base_dir, Path::new(s))),
            None => {}
        }
    }

    /// A host's certificate and key: both or neither, readable, matching each other, and
    /// not expired.
    fn tls_pair(&mut self, table: &'a dyn toml_edit::TableLike, host: &HostConfig) {
        let certificate = Field::get(table, "tls_certificate");
        let key = Field::get(table, "tls_key");
        match (&host.tls_certificate, &host.tls_key) {
            (Some(chain), Some(key_path)) => {
                let span = certificate.map(|f| f.value_span()).unwrap_or(None);
                let files = fastpath_tls::CertificateFiles {
                    names: host.names.clone(),
                    chain: chain.clone(),
                    key: key_path.clone(),
                };
                match fastpath_tls::inspect(&files) {
                    Ok(report) if report.remaining(std::time::SystemTime::now()).is_none() => {
                        self.error(span, format!("certificate {} has expired", chain.display()))
                    }
                    Ok(_) => {}
                    Err(e) => self.error(span, format!("`tls_certificate`: {e}")),
                }
            }
            (Some(_), None) => {
                if let Some(f) = certificate {
                    let message = "`tls_certificate` needs `tls_key`, its private key".to_owned();
                    self.error(f.key.span(), message);
                }
            }
            (None, Some(_)) => {
                if let Some(f) = key {
                    let message = "`tls_key` needs `tls_certificate`".to_owned();
                    self.error(f.key.span(), message);
                }
            }
            (None, None) => {}
        }
    }

    /// A host with `tls = "auto"` has neither certificate files nor wildcard names, and the
    /// configuration has an ACME server and a TLS listener to serve what it obtains on.
    fn acme_hosts(&mut self, top: &'a dyn toml_edit::TableLike, c: &Config) {
        // The `tls` key's place, where the host is a `[[host]]` table (an inline one's
        // errors have none).
        let tables = Field::get(top, "host").and_then(|f| f.item.as_array_of_tables());
        let mut any = None;
        for (i, host) in c.hosts.iter().enumerate() {
            if !host.tls_auto {
                continue;
            }
            let span = tables
                .and_then(|t| t.get(i))
                .and_then(|t| Field::get(t, "tls"))
                .and_then(|f| f.value_span());
            any = any.or(Some(span.clone()));
            if host.tls_certificate.is_some() || host.tls_key.is_some() {
                let message = "a [[host]] with `tls = \"auto\"` has no `tls_certificate` or \
                               `tls_key`: its certificate comes from the ACME server"
                    .to_owned();
                self.error(span.clone(), message);
            }
            if let Some(name) = host.names.iter().find(|n| n.starts_with("*.")) {
                let message = format!(
                    "`tls = \"auto\"` cannot cover the wildcard `{name}`: it needs the dns-01 \
                     challenge, which fastpath does not answer"
                );
                self.error(span, message);
            }
        }
        let Some(span) = any else {
            return;
        };
        if c.acme.directory.is_none() {
            let message = "a [[host]] with `tls = \"auto\"` needs `[acme] directory`, the \
                           ACME server's directory URL"
                .to_owned();
            self.error(span.clone(), message);
        }
        if c.tls.listen.is_empty() {
            let message = "a [[host]] with `tls = \"auto\"` needs a `[[listen]]` with \
                           `tls = true` to serve its certificate on"
                .to_owned();
            self.error(span, message);
        }
    }

    /// A TLS listener needs a certificate to serve.
    fn tls_listeners(&mut self, top: &'a dyn toml_edit::TableLike, c: &Config) {
        if c.tls.listen.is_empty() {
            return;
        }
        let any = std::iter::once(&c.default_host)
            .chain(&c.hosts)
            .any(|h| h.tls_auto || (h.tls_certificate.is_some() && h.tls_key.is_some()));
        if !any {
            let span = Field::get(top, "listen")
                .map(|f| f.value_span())
                .unwrap_or(None);
            self.error(
                span,
                "a `[[listen]]` with `tls = true` needs a certificate: set `tls_certificate` \
                 and `tls_key` at the top level or in a [[host]], or `tls = \"auto\"` in a \
                 [[host]]"
                    .to_owned(),
            );
        }
    }

    /// A list of addresses or address blocks; `None` after reporting a bad one.
    fn address_blocks(&mut self, f: Field<'a>) -> Option<Vec<fastpath_drivers::Cidr>> {
        let mut blocks = Vec::new();
        for (s, span) in self.string_list(f, false)? {
            match s.parse() {
                Ok(block) => blocks.push(block),
                Err(e) => {
                    self.error(span, format!("`{}`: {e}", f.name));
                    return None;
                }
            }
        }
        Some(blocks)
    }

    /// `[tls] protocols`: TLS 1.3, with or without 1.2.
    fn tls_protocols(&mut self, f: Field<'a>, t: &mut TlsConfig) {
        let Some(list) = self.string_list(f, false) else {
            return;
        };
        let mut names: Vec<&str> = list.iter().map(|(s, _)| *s).collect();
        names.sort_unstable();
        names.dedup();
        t.versions = match names.as_slice() {
            ["TLSv1.2", "TLSv1.3"] => TlsVersions::Tls12And13,
            ["TLSv1.3"] => TlsVersions::Tls13Only,
            _ => {
                return self.error(
                    f.value_span(),
                    "[tls] `protocols` must be [\"TLSv1.2\", \"TLSv1.3\"] or [\"TLSv1.3\"]: \
                     older versions are broken, and TLS 1.3 is always offered"
                        .to_owned(),
                )
            }
        };
    }

    /// Ticket key files: each readable and 48 or 80 bytes long.
    fn ticket_key_files(&mut self, f: Field<'a>, t: &mut TlsConfig) {
        for (name, span) in self.string_list(f, false).unwrap_or_default() {
            let path = resolve(self.base_dir, Path::new(name));
            match std::fs::metadata(&path) {
                Ok(meta) if meta.len() == 48 || meta.len() == 80 => t.ticket_keys.push(path),
                Ok(meta) => self.error(
                    span,
                    format!(
                        "{}: a ticket key file holds 48 or 80 random bytes (`openssl rand 80 \
                         > FILE`), not {}",
                        path.display(),
                        meta.len()
                    ),
                ),
                Err(e) => self.error(span, format!("{}: {e}", path.display())),
            }
        }
    }

    fn host_names(&mut self, f: Field<'a>, names: &mut Vec<String>) {
        for (name, span) in self.string_list(f, false).unwrap_or_default() {
            let name = match host_name(name) {
                Ok(name) => name,
                Err(e) => {
                    self.error(span, e);
                    continue;
                }
            };
            let at = self.position(span.as_ref().map_or(0, |s| s.start));
            if let Some((line, column)) = self.seen.host_names.get(&name) {
                let message = format!("host name `{name}` is already used at {line}:{column}");
                self.error(span, message);
            } else {
                self.seen.host_names.insert(name.clone(), at);
                names.push(name);
            }
        }
    }

    fn default_host(&mut self, f: Field<'a>, is_default: &mut bool) {
        if self.boolean(f) != Some(true) {
            return;
        }
        let span = f.key.span();
        if let Some((line, column)) = self.seen.default_host {
            self.error(
                span,
                format!(
                    "only one [[host]] may have `default = true`; \
                     another one already has it at {line}:{column}"
                ),
            );
        } else {
            self.seen.default_host = Some(self.position(span.map_or(0, |s| s.start)));
            *is_default = true;
        }
    }

    fn backends(&mut self, tables: &[Section<'a>]) -> Vec<BackendConfig> {
        let mut backends = Vec::new();
        for s in tables {
            let mut b = BackendConfig::default();
            self.read_table(s, &BACKEND, &mut b);
            self.seen.backends.push(SeenBackend {
                name: b.name.clone(),
                at: self.position(s.span.as_ref().map_or(0, |s| s.start)),
                public_url: Field::get(s.table, "public_url").is_some(),
            });
            backends.push(b);
        }
        backends
    }

    fn backend_name(&mut self, f: Field<'a>, slot: &mut String) {
        let Some(name) = self.string(f) else { return };
        *slot = name.to_owned();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_'))
        {
            let message = format!(
                "backend name \"{name}\" must be lower-case letters, digits, '-' and '_' \
                 (at least one)"
            );
            self.error(f.value_span(), message);
        }
        // Even a malformed name is remembered, so routes naming it are not
        // reported a second time.
        let index = self.seen.backends.len();
        let first = *self
            .seen
            .backend_index
            .entry(name.to_owned())
            .or_insert(index);
        if first != index {
            let (line, column) = self.seen.backends[first].at;
            let message = format!(
                "backend name `{name}` is already used by the [[backend]] at {line}:{column}"
            );
            self.error(f.value_span(), message);
        }
    }

    fn backend_addresses(&mut self, f: Field<'a>) -> Vec<UpstreamAddr> {
        let mut addrs = Vec::new();
        for (s, span) in self.string_list(f, false).unwrap_or_default() {
            let addr = match parse_backend_addr(s) {
                Ok(UpstreamAddr::Unix(path)) => {
                    let path = resolve(self.base_dir, &path);
                    if path.as_os_str().len() > MAX_UNIX_PATH {
                        self.error(
                            span,
                            format!(
                                "backend address \"{s}\" ({}): a Unix socket path may be at \
                                 most {MAX_UNIX_PATH} bytes",
                                path.display()
                            ),
                        );
                        continue;
                    }
                    UpstreamAddr::Unix(path)
                }
                Ok(addr) => addr,
                Err(e) => {
                    self.error(span, format!("`addresses`: {e}"));
                    continue;
                }
            };
            if addrs.contains(&addr) {
                self.error(span, format!("backend address \"{s}\" is listed twice"));
            } else {
                addrs.push(addr);
            }
        }
        addrs
    }

    fn routes(&mut self, tables: &[Section<'a>]) -> Vec<RouteRule> {
        let mut routes = Vec::new();
        for s in tables {
            let mut r = Route::default();
            self.read_table(s, &ROUTE, &mut r);
            // A condition key that is present counts even if its value is bad, so
            // one mistake is reported once.
            let given = |name| Field::get(s.table, name).is_some();
            let set =
                |name| Field::get(s.table, name).is_some_and(|f| f.item.as_bool() != Some(false));
            let conditions = given("prefix")
                || given("extensions")
                || ["unsafe_methods", "query", "fallback"].into_iter().any(set);
            if !conditions {
                let whom = if given("hosts") {
                    "every request for its hosts"
                } else {
                    "every request"
                };
                self.error(
                    s.span.clone(),
                    format!(
                        "[[route]] has no condition, so it would send {whom} to the backend; \
                         say fallback = true or prefix = \"/\" if that is meant"
                    ),
                );
            }
            routes.push(r.rule);
        }
        routes
    }

    /// The `[[module]]` tables: the keys every one has ([`MODULE`]) read here, the rest
    /// by its module.
    fn modules(&mut self, tables: &[Section<'a>]) -> Vec<ModuleUse> {
        let mut uses = Vec::new();
        for s in tables {
            let mut entry = ModuleEntry::default();
            self.read_keys(s, &MODULE, &mut entry);
            let Some((name, span)) = entry.name else {
                continue;
            };
            let Some(module) = crate::modules::find(&name) else {
                let names = crate::modules::names();
                let hint = match super::check::closest(&name, &names) {
                    Some(near) => format!(" (did you mean \"{near}\"?)"),
                    None => String::new(),
                };
                self.error(
                    span,
                    format!(
                        "unknown module \"{name}\"{hint}; the modules: {}",
                        names.join(", ")
                    ),
                );
                continue;
            };
            let mut settings = Settings {
                table: s.table,
                base_dir: self.base_dir,
                read: Vec::new(),
                errors: Vec::new(),
            };
            let configured = module.configure(&mut settings);
            let generic: Vec<&str> = MODULE.keys.iter().map(|k| k.name).collect();
            settings.report_unread(&generic, &format!("in [[module]] \"{name}\""));
            for (span, message) in std::mem::take(&mut settings.errors) {
                self.error(span, format!("[[module]] \"{name}\": {message}"));
            }
            // The module's own keys as written, so that equal tables make equal uses.
            let own = s
                .table
                .iter()
                .filter(|(key, _)| !generic.contains(key))
                .map(|(key, item)| format!("{key} = {}", item.to_string().trim()))
                .collect::<Vec<_>>()
                .join("\n");
            match configured {
                Ok(configured) => uses.push(ModuleUse {
                    name,
                    hosts: entry.hosts,
                    prefix: entry.prefix.unwrap_or_else(|| "/".to_owned()),
                    order: entry.order.unwrap_or_else(|| configured.order()),
                    own,
                    configured,
                }),
                Err(e) => self.error(s.span.clone(), format!("[[module]] \"{name}\": {e}")),
            }
        }
        uses
    }

    fn route_backend(&mut self, f: Field<'a>, r: &mut Route) {
        let Some(name) = self.string(f) else { return };
        r.backend = self.seen.backend_index.get(name).copied();
        if let Some(i) = r.backend {
            r.rule.backend = i;
            return;
        }
        let names: Vec<&str> = self.seen.backends.iter().map(|b| b.name.as_str()).collect();
        let message = if names.is_empty() {
            format!("no [[backend]] is named `{name}`: there is no [[backend]] table")
        } else {
            format!(
                "no [[backend]] is named `{name}`; backends: {}",
                names.join(", ")
            )
        };
        self.error(f.value_span(), message);
    }

    fn route_method(&mut self, f: Field<'a>, r: &mut Route) {
        let Some(m) = self.string(f) else { return };
        match m.parse::<HandoverMethod>() {
            Ok(m) => r.rule.method = m,
            Err(e) => self.error(f.value_span(), e),
        }
        if let (HandoverMethod::Redirect, Some(i)) = (r.rule.method, r.backend) {
            let backend = &self.seen.backends[i];
            if !backend.public_url {
                let (line, column) = backend.at;
                let message = format!(
                    "method \"redirect\" sends clients to the backend's `public_url`, \
                     but [[backend]] `{}` at {line}:{column} has none",
                    backend.name
                );
                self.error(f.value_span(), message);
            }
        }
    }
}

fn log_level(level: &str) -> Result<String, String> {
    if LEVELS.contains(&level) {
        Ok(level.to_owned())
    } else {
        Err(format!(
            "`level` must be one of {}; found \"{level}\"",
            LEVELS.join(", ")
        ))
    }
}

/// A URL clients can be redirected to: `http://` or `https://`, a host, and
/// only visible ASCII, since it is sent in a `Location` field.
fn check_public_url(url: &str) -> Result<(), String> {
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return Err(format!(
            "`public_url` \"{url}\" must start with http:// or https://"
        ));
    };
    if rest.split('/').next().unwrap_or_default().is_empty() {
        return Err(format!("`public_url` \"{url}\" has no host"));
    }
    if !url
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#')
    {
        return Err(format!(
            "`public_url` \"{url}\" must be visible ASCII without '?' or '#' \
             (percent-encode anything else); the request target is appended to it"
        ));
    }
    Ok(())
}

/// A prefix that some normalised path can start with.
fn check_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!("`prefix` \"{prefix}\" must start with '/'"));
    }
    // The last segment may be cut short ("/app" also matches "/apple"), so only
    // the segments before it must be whole and proper.
    let segments: Vec<&str> = prefix[1..].split('/').collect();
    let inner = &segments[..segments.len() - 1];
    if prefix.contains('\0') || inner.iter().any(|s| matches!(*s, "" | "." | "..")) {
        return Err(format!(
            "`prefix` \"{prefix}\" can never match: request paths are normalised, \
             without empty, \".\" or \"..\" segments"
        ));
    }
    Ok(())
}

fn check_extension(ext: &str) -> Result<(), String> {
    if ext.is_empty() {
        return Err("`extensions` entries must not be empty".to_owned());
    }
    if let Some(bare) = ext.strip_prefix('.') {
        return Err(format!(
            "`extensions` entry \"{ext}\" must be written without the dot: \"{bare}\""
        ));
    }
    if ext.contains(['.', '/', '\0']) {
        return Err(format!(
            "`extensions` entry \"{ext}\" can never match: the extension is what follows \
             the last '.' of the last path segment"
        ));
    }
    Ok(())
}

/// Validates and lower-cases a host name, as in `[[host]]` `names`.
fn host_name(raw: &str) -> Result<String, String> {
    let name = raw.to_ascii_lowercase();
    if name.is_empty() {
        return Err("host names must not be empty".to_owned());
    }
    if let Some(inner) = name.strip_prefix('[') {
        // IPv6 literal as it appears in a Host header, e.g. "[::1]".
        return match inner.split_once(']') {
            Some((addr, "")) if addr.parse::<Ipv6Addr>().is_ok() => Ok(name),
            Some((_, rest)) if rest.starts_with(':') => Err(format!(
                "host name \"{raw}\" must not include a port; ports are chosen by `listen`"
            )),
            _ => Err(format!("host name \"{raw}\" is not a valid IPv6 literal")),
        };
    }
    if name.contains(':') {
        return Err(format!(
            "host name \"{raw}\" must not include a port; ports are chosen by `listen`"
        ));
    }
    let valid_label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    let valid_domain = |d: &str| d.len() <= 253 && d.split('.').all(valid_label);
    if name.contains('*') {
        match name.strip_prefix("*.") {
            Some(rest) if valid_domain(rest) => {}
            _ => {
                return Err(format!(
                    "wildcard host name \"{raw}\" must have the form \"*.domain\" \
                     ('*' only as the whole first label)"
                ))
            }
        }
    } else if !valid_domain(&name) {
        return Err(format!(
            "host name \"{raw}\" is not a valid domain name or IP address \
             (letters, digits, '-' and '_' in dot-separated labels)"
        ));
    }
    Ok(name)
}

/// A file mode written in octal, as chmod takes it ("0660", "660"): permission bits only.
fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|&mode| mode <= 0o777 && !s.is_empty())
        .ok_or_else(|| {
            format!("`unix_mode` \"{s}\" is not a file mode in octal (for example \"0660\")")
        })
}

/// A `Strict-Transport-Security` value as written: its directives checked and rejoined.
fn hsts_value(value: &str) -> Result<String, String> {
    let mut max_age = None;
    let mut directives = Vec::new();
    for directive in value.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let (name, argument) = match directive.split_once('=') {
            Some((name, argument)) => (name.trim(), Some(argument.trim())),
            None => (directive, None),
        };
        match (name.to_ascii_lowercase().as_str(), argument) {
            ("max-age", Some(seconds))
                if !seconds.is_empty() && seconds.bytes().all(|b| b.is_ascii_digit()) =>
            {
                if max_age.replace(seconds).is_some() {
                    return Err("`max-age` is given twice".into());
                }
                directives.push(format!("max-age={seconds}"));
            }
            ("max-age", _) => return Err("`max-age` needs a whole number of seconds".into()),
            ("includesubdomains", None) => directives.push("includeSubDomains".into()),
            ("preload", None) => directives.push("preload".into()),
            _ => {
                return Err(format!(
                    "`{directive}` is not max-age=SECONDS, includeSubDomains or preload"
                ))
            }
        }
    }
    if max_age.is_none() {
        return Err("it needs max-age=SECONDS (63072000 is two years)".into());
    }
    Ok(directives.join("; "))
}
