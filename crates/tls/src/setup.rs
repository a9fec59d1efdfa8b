//! A TLS listener's setup: the rustls configuration every connection of it shares.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use fastpath_drivers::{Layers, Opened, Transport, TransportSetup, Transports};
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig};
use rustls::sign::CertifiedKey;

use crate::acme::{challenge_certificate, AutoCertificate, ACME_TLS_ALPN};
use crate::certs::{covered_names, load, provider, CertificateFiles};
use crate::error::TlsError;
use crate::session::TlsSession;
use crate::tickets::{SessionTickets, TicketKeys, TicketOrigin};

/// The protocol versions a listener accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersions {
    /// TLS 1.2 and 1.3 (Mozilla's "intermediate" profile).
    #[default]
    Tls12And13,
    /// TLS 1.3 only ("modern").
    Tls13Only,
}

/// What a ClientHello whose server name no certificate is for gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownName {
    /// The default certificate (as nginx does).
    #[default]
    DefaultCertificate,
    /// The handshake fails (`unrecognized_name`).
    Refuse,
}

/// What a TLS listener is set up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificates, each for its names; the first is the default unless
    /// `default_certificate` names another.
    pub certificates: Vec<CertificateFiles>,
    /// The index in `certificates` of the one served to a client that sends no server name
    /// (or an unknown one, with [`UnknownName::DefaultCertificate`]).
    pub default_certificate: usize,
    /// The protocol versions accepted.
    pub versions: TlsVersions,
    /// A server name no certificate is for.
    pub unknown_name: UnknownName,
    /// The application protocols offered by ALPN, most preferred first.
    pub alpn: Vec<Vec<u8>>,
    /// How long a handshake may take.
    pub handshake_timeout: Duration,
    /// Where the session ticket keys come from.
    pub tickets: TicketKeys,
    /// Certificates the ACME client keeps, each for its names: read when the listener is
    /// set up if they are there yet, and again whenever their chain's file changes.
    pub auto: Vec<CertificateFiles>,
    /// The ACME client's challenges directory when it answers tls-alpn-01: a ClientHello
    /// offering ALPN `acme-tls/1` gets the challenge certificate published there for its
    /// server name (and `acme-tls/1` is offered last).
    pub acme_challenges: Option<PathBuf>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            certificates: Vec::new(),
            default_certificate: 0,
            versions: TlsVersions::default(),
            unknown_name: UnknownName::default(),
            alpn: vec![b"http/1.1".to_vec()],
            handshake_timeout: Duration::from_secs(10),
            tickets: TicketKeys::default(),
            auto: Vec::new(),
            acme_challenges: None,
        }
    }
}

/// Why handshakes fail, as the metrics name them (a `TransportError::kind`, or `timeout`);
/// any other reason counts as `other`.
pub const FAILURE_REASONS: [&str; 10] = [
    "bad_message",
    "incompatible",
    "misbehaved",
    "alert_received",
    "decrypt",
    "certificate",
    "plain_http",
    "timeout",
    "general",
    "other",
];

/// The counters themselves, in memory every worker and preforked child shares.
#[derive(Default)]
struct HandshakeBlock {
    full: AtomicU64,
    resumed: AtomicU64,
    failed: [AtomicU64; FAILURE_REASONS.len()],
}

// SAFETY: atomics only, valid at zero; no pointers, no drop.
unsafe impl fastpath_sys::ProcessShared for HandshakeBlock {}

/// The handshakes of the TLS listeners so far, for the metrics: counted by every worker
/// and preforked child into memory they share (mapped before they start).
pub struct HandshakeCounts {
    block: fastpath_sys::SharedMapping<HandshakeBlock>,
}

impl HandshakeCounts {
    fn new() -> Result<Self, TlsError> {
        let block = fastpath_sys::SharedMapping::new(1)
            .map_err(|e| TlsError::general(format!("handshake counters: {e}")))?;
        Ok(HandshakeCounts { block })
    }

    /// Full handshakes that succeeded.
    pub fn full(&self) -> u64 {
        self.block[0].full.load(Relaxed)
    }

    /// Sessions resumed.
    pub fn resumed(&self) -> u64 {
        self.block[0].resumed.load(Relaxed)
    }

    /// Failed handshakes by reason ([`FAILURE_REASONS`]), each reason once.
    pub fn failed(&self) -> Vec<(&'static str, u64)> {
        FAILURE_REASONS
            .iter()
            .zip(&self.block[0].failed)
            .map(|(reason, count)| (*reason, count.load(Relaxed)))
            .collect()
    }

    fn succeed(&self, resumed: bool) {
        let block = &self.block[0];
        let count = if resumed { &block.resumed } else { &block.full };
        count.fetch_add(1, Relaxed);
    }

    fn fail(&self, reason: &str) {
        let at = FAILURE_REASONS
            .iter()
            .position(|r| *r == reason)
            .unwrap_or(FAILURE_REASONS.len() - 1);
        self.block[0].failed[at].fetch_add(1, Relaxed);
    }
}

impl std::fmt::Debug for HandshakeCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandshakeCounts")
            .field("full", &self.full())
            .field("resumed", &self.resumed())
            .finish()
    }
}

/// A TLS listener's setup: one rustls configuration, shared by its connections.
pub struct TlsSetup {
    config: Arc<ServerConfig>,
    handshake_timeout: Duration,
    counts: Arc<HandshakeCounts>,
    tickets: Option<(Arc<SessionTickets>, TicketOrigin)>,
}

impl TlsSetup {
    /// Reads the certificates and keys of `settings` and builds the configuration, with
    /// session ticket keys of its own.
    pub fn new(settings: &TlsSettings) -> Result<Self, TlsError> {
        Self::inheriting(settings, None)
    }

    /// As [`TlsSetup::new`], taking over the rotating ticket keys of the server this one
    /// replaces from the memory file it handed over (see [`TlsSetup::ticket_keys_file`]), so
    /// that sessions resume across a reload.
    pub fn inheriting(settings: &TlsSettings, handed: Option<OwnedFd>) -> Result<Self, TlsError> {
        let provider = provider();
        if settings.certificates.is_empty() && settings.auto.is_empty() {
            return Err(TlsError::general("a TLS listener needs a certificate"));
        }
        let mut resolver = SniResolver {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
            default: None,
            unknown_name: settings.unknown_name,
            provider: Arc::new(provider.clone()),
            acme_challenges: settings.acme_challenges.clone(),
        };
        // The names of a host whose certificate the ACME client keeps are its own, whatever
        // its certificate covers (there may be none yet).
        for files in &settings.auto {
            let cell = Arc::new(AutoCertificate::new(files.clone(), &provider));
            for name in &files.names {
                resolver
                    .exact
                    .entry(name.to_ascii_lowercase())
                    .or_insert_with(|| Slot::Auto(Arc::clone(&cell)));
            }
        }
        let loaded = settings
            .certificates
            .iter()
            .map(|files| load(files, &provider))
            .collect::<Result<Vec<_>, _>>()?;
        // The names a host is configured for choose its certificate first, then the names
        // the certificates cover (the top-level host has no names of its own).
        let configured =
            settings
                .certificates
                .iter()
                .zip(&loaded)
                .flat_map(|(files, certified)| {
                    files
                        .names
                        .iter()
                        .map(move |name| (name.clone(), certified))
                });
        let covered: Vec<_> = loaded
            .iter()
            .flat_map(|certified| {
                covered_names(certified)
                    .into_iter()
                    .map(move |name| (name, certified))
            })
            .collect();
        for (name, certified) in configured.chain(covered) {
            let name = name.to_ascii_lowercase();
            match name.strip_prefix("*.") {
                Some(parent) => resolver.wildcard.entry(parent.to_owned()),
                None => resolver.exact.entry(name),
            }
            .or_insert_with(|| Slot::Fixed(Arc::clone(certified)));
        }
        resolver.default = loaded.get(settings.default_certificate).cloned();
        // With only certificates the ACME client keeps, a client that names no host of
        // theirs has none to get.
        if resolver.default.is_none() && !settings.certificates.is_empty() {
            return Err(TlsError::general(
                "the default certificate is not among them",
            ));
        }
        let versions: &[&rustls::SupportedProtocolVersion] = match settings.versions {
            TlsVersions::Tls12And13 => &[&rustls::version::TLS13, &rustls::version::TLS12],
            TlsVersions::Tls13Only => &[&rustls::version::TLS13],
        };
        let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(versions)
            .map_err(|e| TlsError::general(format!("TLS configuration: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = settings.alpn.clone();
        if settings.acme_challenges.is_some() {
            // Last: rustls picks by the server's order, and only a validation offers it.
            config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
        }
        // Stateless tickets for TLS 1.3 and 1.2 resumption, with keys every serving process
        // shares; without them, sessions resume from the process's own cache (rustls's
        // default). 0-RTT stays off (replayable).
        let tickets = SessionTickets::new(&settings.tickets, handed)?
            .map(|(tickets, origin)| (Arc::new(tickets), origin));
        if let Some((tickets, _)) = &tickets {
            config.ticketer = Arc::clone(tickets) as Arc<dyn rustls::server::ProducesTickets>;
        }
        config.max_early_data_size = 0;
        // The engine bounds what is encoded ahead of the socket (ENCODE_AHEAD).
        config.send_half_rtt_data = false;
        Ok(TlsSetup {
            config: Arc::new(config),
            handshake_timeout: settings.handshake_timeout,
            counts: Arc::new(HandshakeCounts::new()?),
            tickets,
        })
    }

    /// The memory file of the rotating ticket keys, to hand to a server that replaces this
    /// one; `None` for keys from files or no tickets.
    pub fn ticket_keys_file(&self) -> Option<BorrowedFd<'_>> {
        self.tickets.as_ref()?.0.handover_file()
    }

    /// Where the ticket keys came from (`None`: no tickets), for the log.
    pub fn ticket_origin(&self) -> Option<&TicketOrigin> {
        self.tickets.as_ref().map(|(_, origin)| origin)
    }

    /// The handshakes of this listener so far.
    pub fn counts(&self) -> Arc<HandshakeCounts> {
        Arc::clone(&self.counts)
    }
}

/// TLS on every listener of a service (`fastpath echo`, `fastpath forward`, a NEST server):
/// one certificate chain and key, no ALPN (the services' protocols have no registered name),
/// TLS 1.2 and 1.3, tickets with keys made at start.
pub fn every_listener(
    chain: &Path,
    key: &Path,
    handshake_timeout: Duration,
) -> Result<Transports, TlsError> {
    let settings = TlsSettings {
        certificates: vec![CertificateFiles {
            names: Vec::new(),
            chain: chain.to_owned(),
            key: key.to_owned(),
        }],
        alpn: Vec::new(),
        handshake_timeout,
        ..TlsSettings::default()
    };
    let setup = TlsSetup::new(&settings)?;
    Ok(Transports::every_listener(Layers {
        proxy: None,
        transport: Some(Arc::new(setup)),
    }))
}

impl TransportSetup for TlsSetup {
    fn start(&self, _opened: &Opened) -> Box<dyn Transport> {
        Box::new(TlsSession::new(Arc::clone(&self.config)))
    }

    fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    fn handshake_done(&self, resumed: bool, failure: Option<&'static str>) {
        match failure {
            Some(reason) => self.counts.fail(reason),
            None => self.counts.succeed(resumed),
        }
    }
}

/// A name's certificate: read at start, or kept by the ACME client.
#[derive(Debug, Clone)]
enum Slot {
    Fixed(Arc<CertifiedKey>),
    Auto(Arc<AutoCertificate>),
}

/// Chooses the certificate by the ClientHello's server name: exact names first, then
/// wildcards one label up, then the default (or none, as configured). A tls-alpn-01
/// validation gets its challenge certificate instead.
#[derive(Debug)]
struct SniResolver {
    exact: HashMap<String, Slot>,
    /// By the parent domain of `*.parent`.
    wildcard: HashMap<String, Slot>,
    default: Option<Arc<CertifiedKey>>,
    unknown_name: UnknownName,
    /// Loads the keys of the certificates read while serving.
    provider: Arc<rustls::crypto::CryptoProvider>,
    acme_challenges: Option<PathBuf>,
}

impl SniResolver {
    fn serve(&self, slot: &Slot) -> Option<Arc<CertifiedKey>> {
        match slot {
            Slot::Fixed(key) => Some(Arc::clone(key)),
            // None before the ACME client has one: the handshake fails (no certificate)
            // rather than showing another host's.
            Slot::Auto(cell) => cell.get(&self.provider),
        }
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let Some(name) = hello.server_name() else {
            return self.default.clone();
        };
        let name = name.to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name);
        if let Some(dir) = &self.acme_challenges {
            let validation = hello
                .alpn()
                .is_some_and(|mut offered| offered.any(|p| p == ACME_TLS_ALPN));
            if validation {
                // Only the challenge's certificate, never the host's (RFC 8737 section 3).
                return challenge_certificate(dir, name, &self.provider);
            }
        }
        if let Some(found) = self.exact.get(name) {
            return self.serve(found);
        }
        if let Some((_, parent)) = name.split_once('.') {
            if let Some(found) = self.wildcard.get(parent) {
                return self.serve(found);
            }
        }
        match self.unknown_name {
            UnknownName::DefaultCertificate => self.default.clone(),
            UnknownName::Refuse => None,
        }
    }
}
