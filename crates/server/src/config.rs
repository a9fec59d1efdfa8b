//! The fastpath configuration file (TOML).
//!
//! The file is parsed with `toml_edit` rather than serde because we want to
//! report *every* mistake at once, each with the line and column of the
//! offending key or value (like `nginx -t`), instead of stopping at the
//! first one. See `docs/configuration.md` for the user-facing reference.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use fastpath_drivers::{ListenAddr, ListenOptions, ModelKind, ModelSettings};
use fastpath_handover::{BackendConfig, RouteRule};

pub use crate::privileges::User;

mod check;
mod keys;
#[cfg(test)]
mod tests;

/// The whole server configuration, with every default filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Addresses to listen on (`listen`), TCP or Unix-domain; default `127.0.0.1:8080`.
    pub listen: Vec<ListenAddr>,
    /// The permissions of the Unix-domain listening sockets' files (`unix_mode`); `None`
    /// leaves what the umask gives.
    pub unix_mode: Option<u32>,
    /// The permissions of the Unix sockets whose `[[listen]]` table sets its own, by path.
    pub unix_modes: Vec<(PathBuf, u32)>,
    /// Number of worker threads (`workers`); 0 means one per CPU core.
    pub workers: usize,
    /// Concurrency model (`model`).
    pub model: Model,
    /// The process model's pool (`[prefork]`).
    pub prefork: fastpath_drivers::PreforkConfig,
    /// The thread-pool model's pool (`[threads]`).
    pub threads: fastpath_drivers::ThreadsConfig,
    /// The per-core model's options (`[percore]`).
    pub percore: fastpath_drivers::PercoreConfig,
    /// Protocol limits (`[limits]`).
    pub limits: Limits,
    /// Connection timeouts (`[timeouts]`).
    pub timeouts: Timeouts,
    /// Table `[cache]`.
    pub cache: CacheConfig,
    /// Logging (`[log]`).
    pub log: LogConfig,
    /// The host built from the top-level `root`, `index`, `dotfiles` and
    /// `precompressed` keys; it has no names and serves requests that match
    /// no `[[host]]` unless one of those is marked `default = true`.
    pub default_host: HostConfig,
    /// Virtual hosts (`[[host]]`), in file order.
    pub hosts: Vec<HostConfig>,
    /// Hand-over settings shared by all backends (`[handover]`).
    pub handover: HandoverConfig,
    /// Backend servers (`[[backend]]`), in file order; routes refer to them by
    /// index.
    pub backends: Vec<BackendConfig>,
    /// Route rules (`[[route]]`), in file order, which is the order they are
    /// tried in.
    pub routes: Vec<RouteRule>,
    /// The user the serving processes run as when started as root (`user`), looked up when
    /// the file is read.
    pub user: Option<User>,
    /// Their group (`group`); `None` for the user's primary group.
    pub group: Option<u32>,
    /// Keep running as root when started as root without `user` (`run_as_root`).
    pub run_as_root: bool,
    /// Where the server writes its process id once it serves (`pid_file`), for
    /// `fastpath reload`; relative to the configuration file's directory.
    pub pid_file: Option<PathBuf>,
    /// The file this configuration was read from ([`Config::load`]): a reload reads it again.
    pub source: Option<PathBuf>,
    /// The Prometheus metrics listener (`[metrics]`).
    pub metrics: MetricsConfig,
    /// The path a load balancer's health check asks for (`health_check`); `None`: none.
    pub health_check: Option<String>,
    /// HTTPS: which listeners speak TLS (`[[listen]] tls`) and how (`[tls]`).
    pub tls: TlsConfig,
    /// HTTP/2 (`[http2]`).
    pub http2: Http2Config,
    /// The listeners that expect a PROXY protocol header (`[[listen]] proxy_protocol`): their
    /// place in `listen`, and the addresses the header is accepted from (`proxy_from`).
    pub proxy_protocol: Vec<(usize, Vec<fastpath_drivers::Cidr>)>,
    /// The plain listeners that redirect every request to HTTPS (`[[listen]]
    /// redirect_to_https`): their place in `listen`, and the HTTPS port.
    pub https_redirects: Vec<(usize, u16)>,
    /// The places in `listen` of the plain listeners whose every connection speaks HTTP/2
    /// (`[[listen]] http2_only`).
    pub http2_only: Vec<usize>,
    /// Modules (`[[module]]`), in file order, each configured by its module.
    pub modules: Vec<crate::module::ModuleUse>,
    /// Certificates obtained from an ACME server for the hosts with `tls = "auto"`
    /// (`[acme]`).
    pub acme: AcmeConfig,
}

/// The `[acme]` table: where the hosts with `tls = "auto"` get their certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeConfig {
    /// The ACME server's directory URL (`directory`); required when a host is auto.
    pub directory: Option<String>,
    /// The account's contact URLs (`contact`), `mailto:` added to a bare address.
    pub contact: Vec<String>,
    /// The account key's file (`account_key`); `None`: `STATE_DIR/account.key`.
    pub account_key: Option<PathBuf>,
    /// Where certificates, keys and challenges are kept (`state_dir`).
    pub state_dir: PathBuf,
    /// A PEM file of the roots the ACME server's own HTTPS is checked with, for a private
    /// CA (`ca_root`); `None`: the system's bundle.
    pub ca_root: Option<PathBuf>,
    /// The challenge type answered (`challenge`).
    pub challenge: fastpath_acme::ChallengeKind,
    /// Agree to the CA's terms of service when the account is made (`agree_terms`).
    pub agree_terms: bool,
}

impl Default for AcmeConfig {
    fn default() -> Self {
        AcmeConfig {
            directory: None,
            contact: Vec::new(),
            account_key: None,
            state_dir: PathBuf::from(ACME_STATE_DIR),
            ca_root: None,
            challenge: fastpath_acme::ChallengeKind::Http01,
            agree_terms: true,
        }
    }
}

/// Where `[acme] state_dir` is unless set.
pub const ACME_STATE_DIR: &str = "/var/lib/fastpath/acme";

impl AcmeConfig {
    /// The account key's file.
    pub fn account_key_path(&self) -> PathBuf {
        self.account_key
            .clone()
            .unwrap_or_else(|| self.state_dir.join("account.key"))
    }

    /// Where answers to challenges are written for every serving process to read:
    /// `STATE_DIR/challenges` (http-01 key authorizations by token, tls-alpn-01
    /// certificates by name under `tls-alpn-01/`).
    pub fn challenges_dir(&self) -> PathBuf {
        self.state_dir.join("challenges")
    }
}

/// The `[http2]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http2Config {
    /// HTTP/2 is offered: by ALPN on TLS listeners, and to clients that open a plain
    /// connection with its preface (prior knowledge).
    pub enabled: bool,
    /// Streams a client may have open at once on one connection.
    pub max_concurrent_streams: u32,
}

impl Default for Http2Config {
    fn default() -> Self {
        Http2Config {
            enabled: true,
            max_concurrent_streams: 100,
        }
    }
}

/// The `[tls]` table, and the listeners that speak TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The places in `listen` of the addresses with `tls = true`, in order.
    pub listen: Vec<usize>,
    /// The protocol versions accepted (`protocols`).
    pub versions: fastpath_tls::TlsVersions,
    /// What a server name no host has a certificate for gets (`unknown_name`).
    pub unknown_name: fastpath_tls::UnknownName,
    /// Whether sessions resume with tickets (`session_tickets`).
    pub session_tickets: bool,
    /// Ticket key files, the first encrypting (`ticket_keys`); none: keys made at start.
    pub ticket_keys: Vec<PathBuf>,
    /// How long a key made at start encrypts tickets before the next (`ticket_key_rotation`).
    pub ticket_key_rotation: Duration,
}

impl Default for TlsConfig {
    fn default() -> Self {
        TlsConfig {
            listen: Vec::new(),
            versions: fastpath_tls::TlsVersions::default(),
            unknown_name: fastpath_tls::UnknownName::default(),
            session_tickets: true,
            ticket_keys: Vec::new(),
            ticket_key_rotation: Duration::from_secs(12 * 3600),
        }
    }
}

impl TlsConfig {
    /// Where the session ticket keys come from.
    pub fn ticket_source(&self) -> fastpath_tls::TicketKeys {
        if !self.session_tickets {
            fastpath_tls::TicketKeys::Off
        } else if !self.ticket_keys.is_empty() {
            fastpath_tls::TicketKeys::Files(self.ticket_keys.clone())
        } else {
            fastpath_tls::TicketKeys::Rotating {
                every: self.ticket_key_rotation,
            }
        }
    }
}

/// The `[metrics]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Where `/metrics` is served (`listen`); `None` (the default) serves no metrics.
    pub listen: Option<SocketAddr>,
}

/// A certificate that expires sooner than this is warned of.
pub const CERTIFICATE_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// The most worker threads a configuration or the command line may ask for.
pub const MAX_WORKERS: usize = 4096;

/// Concurrency model used to run connections: `auto`, or one of the drivers' models by its
/// name (the drivers own the names, descriptions and layouts of the models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Model {
    /// Let fastpath pick the best model available on this system.
    #[default]
    Auto,
    /// The model named.
    Named(ModelKind),
}

/// Limits that protect the server from oversized or abusive clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Maximum number of simultaneously open client connections.
    pub max_connections: usize,
    /// Longest accepted request line in bytes, without its line ending;
    /// longer gets 414.
    pub max_request_line: usize,
    /// Largest accepted request head in bytes (request line, fields and the
    /// blank line); larger gets 431.
    pub max_header_bytes: usize,
    /// Maximum number of header fields in one request; more gets 431.
    pub max_headers: usize,
    /// A request body sent to a static path up to this many bytes is read
    /// and discarded so the connection can be kept alive; a larger one makes
    /// the server close the connection after the response.
    pub max_discard_body: u64,
    /// Requests served on one connection before it is closed.
    pub max_requests_per_connection: u64,
    /// SO_SNDBUF of the client connections, in bytes (the kernel doubles it for its
    /// bookkeeping); 0 leaves the kernel's autotuning.
    pub send_buffer: usize,
}

/// Connection timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// The whole request head must arrive within this after its first byte.
    pub header: Duration,
    /// Idle time allowed between requests on a kept-alive connection.
    pub keepalive: Duration,
    /// A client that accepts no response bytes for this long is disconnected.
    pub send: Duration,
    /// After the last response on a closing connection, unread client bytes
    /// are drained this long so a TCP reset does not destroy the response.
    pub linger: Duration,
    /// A graceful stop (SIGTERM, SIGQUIT) lets open connections finish
    /// this long, then closes those still open.
    pub shutdown: Duration,
}

/// The content cache (`[cache]`): one per process, shared by its workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Keep what paths resolve to (and small files' bytes) in memory, invalidated by
    /// inotify; default true.
    pub enabled: bool,
    /// Memory for cached entries, all workers together; default 64 MiB.
    pub max_memory: u64,
    /// Files up to this size may be kept in memory whole; default 64 KiB.
    pub max_file_size: u64,
    /// Files smaller than this (and within `max_file_size`) are copied from memory into
    /// the socket; larger ones are sent with sendfile from a kept descriptor.
    pub copy_below: u64,
    /// Descriptors of larger files kept open, all workers together; default 1024.
    pub max_open_files: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_memory: 64 * 1024 * 1024,
            max_file_size: 64 * 1024,
            copy_below: fastpath_content::DEFAULT_COPY_BELOW,
            max_open_files: 1024,
        }
    }
}

/// The `[handover]` table: the backend response cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoverConfig {
    /// Memory for cached backend responses, all workers together; default 32 MiB.
    pub cache_memory: usize,
    /// Larger backend responses are not cached; default 1 MiB.
    pub cache_max_response: usize,
    /// Whether bridged connections are joined in the kernel (a BPF sockmap) rather than
    /// spliced through pipes; default auto (see docs/configuration.md).
    pub kernel_path: fastpath_kernel::Mode,
    /// Bridged connections the kernel path holds at once, the whole server; default 4096.
    pub kernel_bridges: u32,
    /// Bytes the kernel may hold for one direction of a bridged connection beyond the
    /// destination's send buffer; default 4 MiB.
    pub kernel_hold: u32,
}

impl Default for HandoverConfig {
    fn default() -> Self {
        HandoverConfig {
            cache_memory: 32 * 1024 * 1024,
            cache_max_response: 1024 * 1024,
            kernel_path: fastpath_kernel::Mode::Auto,
            kernel_bridges: 4096,
            kernel_hold: 4 * 1024 * 1024,
        }
    }
}

/// Logging configuration (`[log]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Where access log lines go; default stdout.
    pub access: LogTarget,
    /// Where error and diagnostic messages go; default stderr, never off.
    pub error: LogTarget,
    /// Minimum level of diagnostics: `error`, `warn`, `info`, `debug` or `trace`.
    pub level: String,
    /// Access log lines end with the TLS protocol, cipher and resumption (`tls_fields`).
    pub tls_fields: bool,
}

/// Destination of a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// Logging disabled.
    Off,
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// Append to this file (relative paths are resolved against the
    /// configuration file's directory).
    File(PathBuf),
}

/// One virtual host, or the top-level default host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Lower-cased host names: exact (`example.com`) or wildcards
    /// (`*.example.com`, any subdomain but not the bare domain). Empty for
    /// the top-level default host.
    pub names: Vec<String>,
    /// Document root, resolved against the configuration file's directory
    /// and checked to be an existing directory when parsed.
    pub root: PathBuf,
    /// File names tried, in order, when a directory is requested.
    pub index: Vec<String>,
    /// Serve files and directories whose name starts with `.`
    /// (`.well-known` is always served).
    pub dotfiles: bool,
    /// Serve `X.br` / `X.gz` siblings to clients that accept them.
    pub precompressed: bool,
    /// This `[[host]]` replaces the top-level host as the default.
    pub is_default: bool,
    /// The PEM certificate chain served to TLS clients asking for these names
    /// (`tls_certificate`), resolved against the configuration file's directory.
    pub tls_certificate: Option<PathBuf>,
    /// Its private key (`tls_key`).
    pub tls_key: Option<PathBuf>,
    /// The `Strict-Transport-Security` value its responses over TLS carry (`hsts`);
    /// inherited from the top level unless a `[[host]]` sets its own.
    pub hsts: Option<String>,
    /// Its certificate is obtained and renewed from the ACME server (`tls = "auto"`).
    pub tls_auto: bool,
}

/// One problem found in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// 1-based line; 0 when the error has no position (e.g. unreadable file).
    pub line: usize,
    /// 1-based column in characters; 0 when the error has no position.
    pub column: usize,
    /// What is wrong, naming the key or value concerned.
    pub message: String,
}

/// The error of a file that is not UTF-8 (TOML must be), at its first bad byte: its line, and
/// its column counted in the characters before it, as every other error's.
fn not_utf8(bytes: &[u8], error: std::str::Utf8Error) -> ConfigError {
    let at = error.valid_up_to();
    let before = std::str::from_utf8(&bytes[..at]).expect("valid up to here");
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let message = match error.error_len() {
        Some(_) => format!(
            "not UTF-8 text, as a configuration file must be: byte 0x{:02x} here does not \
             start a UTF-8 character (was the file saved in Latin-1 or another encoding?)",
            bytes[at]
        ),
        None => "not UTF-8 text, as a configuration file must be: the file ends in the middle \
                 of a UTF-8 character"
            .to_owned(),
    };
    ConfigError {
        line: before.matches('\n').count() + 1,
        column: before[line_start..].chars().count() + 1,
        message,
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: vec![ListenAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], 8080)))],
            unix_mode: None,
            unix_modes: Vec::new(),
            workers: 0,
            model: Model::Auto,
            prefork: fastpath_drivers::PreforkConfig::default(),
            threads: fastpath_drivers::ThreadsConfig::default(),
            percore: fastpath_drivers::PercoreConfig::default(),
            limits: Limits::default(),
            timeouts: Timeouts::default(),
            cache: CacheConfig::default(),
            log: LogConfig::default(),
            default_host: HostConfig::default(),
            hosts: Vec::new(),
            handover: HandoverConfig::default(),
            backends: Vec::new(),
            routes: Vec::new(),
            metrics: MetricsConfig::default(),
            health_check: None,
            tls: TlsConfig::default(),
            http2: Http2Config::default(),
            proxy_protocol: Vec::new(),
            https_redirects: Vec::new(),
            http2_only: Vec::new(),
            modules: Vec::new(),
            acme: AcmeConfig::default(),
            user: None,
            group: None,
            run_as_root: false,
            pid_file: None,
            source: None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 10_000,
            max_request_line: 8192,
            max_header_bytes: 16 * 1024,
            max_headers: 100,
            max_discard_body: 1024 * 1024,
            max_requests_per_connection: 10_000,
            send_buffer: 0,
        }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            header: Duration::from_secs(10),
            keepalive: Duration::from_secs(75),
            send: Duration::from_secs(60),
            linger: Duration::from_secs(2),
            shutdown: Duration::from_secs(30),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            access: LogTarget::Stdout,
            error: LogTarget::Stderr,
            level: "info".to_owned(),
            tls_fields: false,
        }
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            names: Vec::new(),
            root: PathBuf::from("."),
            index: vec!["index.html".to_owned()],
            dotfiles: false,
            precompressed: true,
            is_default: false,
            tls_certificate: None,
            tls_key: None,
            hsts: None,
            tls_auto: false,
        }
    }
}

impl Config {
    /// Parses and validates a configuration.
    ///
    /// Relative paths (`root`, log files) are resolved against `base_dir`,
    /// normally the directory of the configuration file. On failure every
    /// problem found is returned, sorted by position; a TOML syntax error
    /// stops parsing and is returned alone.
    pub fn from_toml(text: &str, base_dir: &Path) -> Result<Config, Vec<ConfigError>> {
        check::parse(text, base_dir)
    }

    /// Reads and parses the configuration file at `path`; relative paths in
    /// it are resolved against the file's directory.
    ///
    /// A file that cannot be read gives one error at position 0:0; one that is not UTF-8, one
    /// error at its first byte that is not.
    pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
        let bytes = std::fs::read(path).map_err(|e| {
            vec![ConfigError {
                line: 0,
                column: 0,
                message: format!("cannot read the configuration file: {e}"),
            }]
        })?;
        let text =
            String::from_utf8(bytes).map_err(|e| vec![not_utf8(e.as_bytes(), e.utf8_error())])?;
        let base_dir = path.parent().unwrap_or(Path::new(""));
        let mut config = Config::from_toml(&text, base_dir)?;
        config.pid_file = config.pid_file.map(|p| base_dir.join(p));
        config.source = Some(path.to_owned());
        Ok(config)
    }

    /// The host that serves requests matching no `[[host]]` name: the one
    /// marked `default = true`, else the top-level host.
    pub fn fallback_host(&self) -> &HostConfig {
        self.hosts
            .iter()
            .find(|h| h.is_default)
            .unwrap_or(&self.default_host)
    }

    /// The TLS listeners' settings: a certificate per host that has one, for its names; the
    /// default one is the fallback host's (see [`Config::fallback_host`]) if it has one, else
    /// the first. `None` when no listener speaks TLS.
    pub fn tls_settings(&self) -> Option<fastpath_tls::TlsSettings> {
        if self.tls.listen.is_empty() {
            return None;
        }
        let fallback = self.fallback_host();
        let mut certificates = Vec::new();
        let mut default_certificate = 0;
        for host in std::iter::once(&self.default_host).chain(&self.hosts) {
            let (Some(chain), Some(key)) = (&host.tls_certificate, &host.tls_key) else {
                continue;
            };
            if std::ptr::eq(host, fallback) {
                default_certificate = certificates.len();
            }
            certificates.push(fastpath_tls::CertificateFiles {
                names: host.names.clone(),
                chain: chain.clone(),
                key: key.clone(),
            });
        }
        Some(fastpath_tls::TlsSettings {
            certificates,
            default_certificate,
            versions: self.tls.versions,
            unknown_name: self.tls.unknown_name,
            handshake_timeout: self.timeouts.header,
            tickets: self.tls.ticket_source(),
            // HTTP/2 first: a client that speaks it is served on one connection.
            alpn: if self.http2.enabled {
                vec![b"h2".to_vec(), b"http/1.1".to_vec()]
            } else {
                vec![b"http/1.1".to_vec()]
            },
            auto: self
                .acme_hosts()
                .map(|host| {
                    let dir = self.acme_certificate_dir(host);
                    fastpath_tls::CertificateFiles {
                        names: host.names.clone(),
                        chain: dir.join(fastpath_acme::CERT_FILE),
                        key: dir.join(fastpath_acme::KEY_FILE),
                    }
                })
                .collect(),
            acme_challenges: (self.acme_hosts().next().is_some()
                && self.acme.challenge == fastpath_acme::ChallengeKind::TlsAlpn01)
                .then(|| self.acme.challenges_dir()),
        })
    }

    /// The hosts with `tls = "auto"`.
    pub fn acme_hosts(&self) -> impl Iterator<Item = &HostConfig> {
        self.hosts.iter().filter(|h| h.tls_auto)
    }

    /// Where the ACME client stores `host`'s certificate: the store's directory of its
    /// first name.
    pub fn acme_certificate_dir(&self, host: &HostConfig) -> PathBuf {
        let first = host.names.first().map_or("", String::as_str);
        self.acme.state_dir.join(first)
    }

    /// The files TLS is read from, watched for changes that reload the server: every
    /// certificate chain and key, and the ticket key files. None without a TLS listener.
    pub fn tls_files(&self) -> Vec<PathBuf> {
        let Some(settings) = self.tls_settings() else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = settings
            .certificates
            .into_iter()
            .flat_map(|files| [files.chain, files.key])
            .collect();
        if let fastpath_tls::TicketKeys::Files(keys) = settings.tickets {
            files.extend(keys);
        }
        files.sort();
        files.dedup();
        files
    }

    /// Whether the listener bound for `listen[index]` speaks TLS.
    pub fn listens_with_tls(&self, index: usize) -> bool {
        self.tls.listen.contains(&index)
    }

    /// The addresses the listener bound for `listen[index]` takes a PROXY protocol header
    /// from, if it expects one.
    pub fn proxy_protocol_from(&self, index: usize) -> Option<&[fastpath_drivers::Cidr]> {
        self.proxy_protocol
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, from)| from.as_slice())
    }

    /// The HTTPS port the listener bound for `listen[index]` redirects its requests to.
    pub fn https_redirect_of(&self, index: usize) -> Option<u16> {
        self.https_redirects
            .iter()
            .find(|(i, _)| *i == index)
            .map(|&(_, port)| port)
    }

    /// Whether the listener bound for `listen[index]` speaks HTTP/2 alone.
    pub fn is_http2_only(&self, index: usize) -> bool {
        self.http2.enabled && self.http2_only.contains(&index)
    }

    /// Adds a listening address that speaks TLS (`--tls-listen`).
    pub fn add_tls_listener(&mut self, addr: ListenAddr) {
        self.tls.listen.push(self.listen.len());
        self.listen.push(addr);
    }

    /// What to know about HTTP/2, one sentence each: the bridging routes' streams are
    /// proxied. `fastpath check` prints these and `fastpath serve` logs them at start.
    pub fn http2_notes(&self) -> Vec<String> {
        let bridges = self
            .routes
            .iter()
            .any(|r| r.method == fastpath_handover::HandoverMethod::Bridge);
        if !(self.http2.enabled && bridges) {
            return Vec::new();
        }
        vec![
            "routes with method \"bridge\" bridge HTTP/1 connections only: an HTTP/2 \
              stream shares its connection with others, so the streams of a bridging route are \
              proxied instead"
                .to_owned(),
        ]
    }

    /// What to know about the certificates, one sentence each: what each covers and until
    /// when, those that expire within [`CERTIFICATE_WARNING`], and names a certificate is
    /// configured for but does not cover.
    /// `fastpath check` prints these and `fastpath serve` logs them at start.
    pub fn tls_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let Some(settings) = self.tls_settings() else {
            return notes;
        };
        let bridges = self
            .routes
            .iter()
            .any(|r| r.method == fastpath_handover::HandoverMethod::Bridge);
        if bridges {
            notes.push(
                "routes with method \"bridge\" bridge only the plain listeners' connections: \
                 a bridge moves bytes around the server, so requests that come over TLS are \
                 proxied instead (an upgrade such as WebSocket is not carried over TLS)"
                    .to_owned(),
            );
        }
        let now = std::time::SystemTime::now();
        for files in &settings.certificates {
            let Ok(report) = fastpath_tls::inspect(files) else {
                continue;
            };
            let chain = files.chain.display();
            notes.push(format!(
                "TLS: certificate {chain} covers {}, valid until {}",
                report.covers.join(", "),
                httpdate::fmt_http_date(report.not_after)
            ));
            match report.remaining(now) {
                Some(left) if left < CERTIFICATE_WARNING => notes.push(format!(
                    "certificate {chain} expires in {} hours",
                    left.as_secs() / 3600
                )),
                Some(_) => {}
                None => notes.push(format!("certificate {chain} has expired")),
            }
            if !report.uncovered.is_empty() {
                notes.push(format!(
                    "certificate {chain} does not cover {} (it covers {}): clients will refuse it \
                     for those names",
                    report.uncovered.join(", "),
                    report.covers.join(", ")
                ));
            }
        }
        let directory = self.acme.directory.as_deref().unwrap_or("the ACME server");
        for files in &settings.auto {
            let names = files.names.join(", ");
            let chain = files.chain.display();
            notes.push(match fastpath_tls::inspect(files) {
                Ok(report) => format!(
                    "TLS: {names}: certificate from ACME on disk ({chain}), valid until {},                      renewed by the server before then",
                    httpdate::fmt_http_date(report.not_after)
                ),
                Err(_) if !files.chain.exists() => {
                    format!("TLS: {names}: certificate to be obtained from {directory}")
                }
                Err(e) => format!("TLS: {names}: the certificate on disk cannot be used ({e})"),
            });
        }
        notes.push(match &settings.tickets {
            fastpath_tls::TicketKeys::Rotating { every } => format!(
                "TLS: session ticket keys made at start, shared by every process and kept \
                 across reloads, replaced every {} s",
                every.as_secs()
            ),
            fastpath_tls::TicketKeys::Files(files) => format!(
                "TLS: session ticket keys from {} ({} file(s), the first encrypting): nodes \
                 with the same files resume each other's sessions",
                files[0].display(),
                files.len()
            ),
            fastpath_tls::TicketKeys::Off => {
                "TLS: no session tickets (session_tickets = false): sessions resume only \
                 from each process's own cache"
                    .to_owned()
            }
        });
        notes.push(
            "TLS: the certificate, key and ticket key files are watched: a change reloads the \
             server"
                .to_owned(),
        );
        notes
    }

    /// What the chosen model does differently from what the file asks, one sentence each:
    /// `fastpath check` prints these and `fastpath serve` logs them at start.
    pub fn model_notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let name = self.model.name();
        let kind = self.model.kind();
        let proxies = self
            .routes
            .iter()
            .any(|r| r.method == fastpath_handover::HandoverMethod::Proxy);
        if kind == ModelKind::Uring && proxies {
            notes.push(
                "model \"uring\": proxied bodies are copied through memory (the io_uring loop \
                 does not splice them)"
                    .to_owned(),
            );
        }
        if kind.sizes_itself() && self.workers > 0 {
            let instead = match kind {
                ModelKind::Percore => "one worker per CPU",
                ModelKind::Threads => "the pool size is [threads] threads",
                _ => "the pool size is [prefork] max_children",
            };
            notes.push(format!(
                "`workers` is ignored by model \"{name}\": {instead}"
            ));
        }
        // The models whose handlers are many small pools rather than a few workers.
        let layout = self.driver_model().layout(self.workers);
        let (holder, count) = (layout.holder, layout.handlers);
        if kind == ModelKind::Percore && self.cache.enabled {
            notes.push(format!(
                "model \"{name}\" keeps its content cache per {holder}, so that nothing is \
                 shared on the request path (the other models keep one per process): each of \
                 {count} gets 1/{count} of [cache] max_memory ({} bytes) and max_open_files, \
                 and a file is read into each that serves it",
                self.cache.max_memory / count as u64
            ));
        }
        if kind == ModelKind::Prefork && (self.cache.enabled || !self.routes.is_empty()) {
            notes.push(format!(
                "model \"{name}\" keeps its caches per {holder} (the other models keep one \
                 per process): each of up to {count} gets 1/{count} of [cache] max_memory ({} \
                 bytes) and of [handover] cache_memory ({} bytes); a backend response \
                 cached by one is not seen by the others, so a page may be fetched once per child, and a \
                 client may be sent an older version of it by another child than the one it \
                 was sent last",
                self.cache.max_memory / count as u64,
                self.handover.cache_memory / count
            ));
        }
        // Each child watches the roots with an inotify instance of its own; past the per-user
        // limit a child caches nothing. Said once here rather than by every child.
        let inotify_limit = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_instances")
            .ok()
            .and_then(|text| text.trim().parse::<usize>().ok());
        if let Some(limit) = inotify_limit
            .filter(|&limit| kind == ModelKind::Prefork && self.cache.enabled && count > limit)
        {
            notes.push(format!(
                "model \"{name}\": each of up to {count} children watches the document roots \
                 with an inotify instance of its own, and this system allows {limit} per user \
                 (fs.inotify.max_user_instances): children past that serve without a content \
                 cache; raise it (`sysctl fs.inotify.max_user_instances={}`) or lower [prefork] \
                 max_children",
                (count + 64).next_power_of_two()
            ));
        }
        notes
    }

    /// The drivers' model this configuration asks for, with its settings.
    pub fn driver_model(&self) -> fastpath_drivers::Model {
        self.model.kind().with(&ModelSettings {
            percore: self.percore,
            threads: self.threads,
            prefork: self.prefork,
        })
    }

    /// The options a listener at `addr` is bound with: HTTP's client speaks first, so each
    /// defers accepting (TCP) until it has; a Unix socket's file gets its `[[listen]]`
    /// table's `unix_mode`, or the top-level one.
    pub fn listen_options(&self, addr: &ListenAddr) -> ListenOptions {
        let options = ListenOptions::default();
        let ListenAddr::Unix(path) = addr else {
            return options;
        };
        let own = self
            .unix_modes
            .iter()
            .find(|(p, _)| p == path)
            .map(|&(_, m)| m);
        match own.or(self.unix_mode) {
            Some(mode) => options.with_unix_mode(mode),
            None => options,
        }
    }

    /// Replaces the top-level document root (the `serve DIR` argument).
    ///
    /// `[[host]]` tables that inherited the old top-level root (their root is
    /// the same path) follow the new one, as if the file had said `root =
    /// DIR`. `dir` is used as given (relative to the current directory), and
    /// must be a directory.
    pub fn set_root(&mut self, dir: &Path) -> Result<(), String> {
        check::check_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let old = std::mem::replace(&mut self.default_host.root, dir.to_path_buf());
        for host in &mut self.hosts {
            if host.root == old {
                host.root = dir.to_path_buf();
            }
        }
        Ok(())
    }
}

impl Model {
    /// Every model, in the order shown in error messages and help text.
    pub fn all() -> impl Iterator<Item = Model> {
        std::iter::once(Model::Auto).chain(ModelKind::ALL.into_iter().map(Model::Named))
    }

    /// The name used in the configuration file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Model::Auto => "auto",
            Model::Named(kind) => kind.name(),
        }
    }

    /// The model called `name` (exact, lower-case), if any.
    pub fn from_name(name: &str) -> Option<Model> {
        Model::all().find(|m| m.name() == name)
    }

    /// Comma-separated list of the valid names, for error messages.
    pub fn valid_names() -> String {
        let names: Vec<&str> = Model::all().map(Model::name).collect();
        names.join(", ")
    }

    /// The kind of model that runs: `auto` is epoll until a benchmark shows io_uring ahead
    /// across the SPECweb mix (then it becomes io_uring where the kernel can run it).
    pub fn kind(self) -> ModelKind {
        match self {
            Model::Auto => ModelKind::Epoll,
            Model::Named(kind) => kind,
        }
    }
}

impl FromStr for Model {
    type Err = String;

    /// Parses a model name; the error lists the valid names.
    fn from_str(s: &str) -> Result<Model, String> {
        Model::from_name(s).ok_or_else(|| {
            format!(
                "unknown model `{s}`; valid models are: {}",
                Model::valid_names()
            )
        })
    }
}

impl fmt::Display for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for LogTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogTarget::Off => f.write_str("off"),
            LogTarget::Stdout => f.write_str("stdout"),
            LogTarget::Stderr => f.write_str("stderr"),
            LogTarget::File(path) => write!(f, "{}", path.display()),
        }
    }
}

impl fmt::Display for ConfigError {
    /// `line:column: message`, so a caller can prefix the file name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ConfigError {}
