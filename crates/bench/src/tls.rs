//! HTTPS: the client side of TLS for the engine, with rustls (aws-lc-rs, as the server's
//! crate uses). One [`ClientConfig`] per run, shared by every thread; each connection of an
//! `https://` target carries a `ClientConnection` driven from the same event loop as plain
//! sockets (see `engine`).

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{
    ClientSessionMemoryCache, ClientSessionStore, Resumption, Tls12ClientSessionValue,
    Tls13ClientSessionValue,
};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, NamedGroup, RootCertStore, SignatureScheme};

/// A TLS protocol version to pin with `--tls-version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    /// TLS 1.2.
    Tls12,
    /// TLS 1.3.
    Tls13,
}

/// How `https://` targets are reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file of the roots to trust.
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (the handshake's signatures are still checked).
    pub insecure: bool,
    /// The server name sent (SNI) and verified, instead of the URL's host.
    pub sni: Option<String>,
    /// Keep sessions across connections so later ones resume.
    pub resume: bool,
    /// Only this protocol version (default: 1.3 and 1.2).
    pub version: Option<TlsVersion>,
    /// Only this cipher suite, by its IANA name as rustls spells it
    /// (e.g. `TLS13_AES_128_GCM_SHA256`).
    pub cipher: Option<String>,
}

/// Servers whose TLS 1.2 sessions and key exchange hints a resuming run keeps (a run has one).
const SESSION_CACHE: usize = 64;

/// TLS 1.3 tickets a resuming run keeps per server: more than the connections that open at
/// once, each of which takes one.
const TICKETS_PER_SERVER: usize = 4096;

/// The configuration every connection of a run shares, and the name they send.
pub(crate) struct TlsClient {
    pub config: Arc<ClientConfig>,
    pub name: ServerName<'static>,
}

impl TlsClient {
    /// Builds the client for a target whose host is `host` (brackets of an IPv6 literal
    /// removed).
    pub(crate) fn new(options: &TlsOptions, host: &str) -> Result<TlsClient, String> {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        if let Some(name) = &options.cipher {
            let known: Vec<&str> = provider
                .cipher_suites
                .iter()
                .filter_map(|s| s.suite().as_str())
                .collect();
            provider
                .cipher_suites
                .retain(|s| s.suite().as_str() == Some(name.as_str()));
            if provider.cipher_suites.is_empty() {
                return Err(format!(
                    "unknown --tls-cipher `{name}` (known: {})",
                    known.join(", ")
                ));
            }
        }
        let versions: &[&rustls::SupportedProtocolVersion] = match options.version {
            Some(TlsVersion::Tls12) => &[&rustls::version::TLS12],
            Some(TlsVersion::Tls13) => &[&rustls::version::TLS13],
            None => rustls::DEFAULT_VERSIONS,
        };
        let provider = Arc::new(provider);
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_protocol_versions(versions)
            .map_err(|e| format!("TLS settings: {e}"))?;
        let mut config = match (&options.ca_file, options.insecure) {
            (Some(path), _) => {
                let mut roots = RootCertStore::empty();
                let certs = CertificateDer::pem_file_iter(path)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| format!("--cacert {}: {e}", path.display()))?;
                let (added, _) = roots.add_parsable_certificates(certs);
                if added == 0 {
                    return Err(format!(
                        "--cacert {}: no usable PEM certificate",
                        path.display()
                    ));
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            (None, true) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(InsecureNoCertificateVerification(
                    provider,
                )))
                .with_no_client_auth(),
            (None, false) => {
                return Err("an https:// URL needs --cacert FILE (or --insecure)".into())
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        // rustls resumes by default; a run that measures full handshakes must not.
        config.resumption = if options.resume {
            Resumption::store(Arc::new(TicketStore::default()))
        } else {
            Resumption::disabled()
        };
        let name = options.sni.as_deref().unwrap_or(host);
        let name = ServerName::try_from(name.to_owned())
            .map_err(|e| format!("`{name}` cannot be a TLS server name: {e}"))?;
        Ok(TlsClient {
            config: Arc::new(config),
            name,
        })
    }
}

/// The sessions of a resuming run: rustls's memory cache, with room for many more TLS 1.3
/// tickets. It keeps 8 per server, and a burst of connections opened together (one per reply
/// of an event loop pass, with many connections) would find it empty and make full
/// handshakes nobody asked for: at 32 connections, half of them.
#[derive(Debug)]
struct TicketStore {
    cache: ClientSessionMemoryCache,
    tickets: Mutex<HashMap<ServerName<'static>, VecDeque<Tls13ClientSessionValue>>>,
}

impl Default for TicketStore {
    fn default() -> Self {
        TicketStore {
            cache: ClientSessionMemoryCache::new(SESSION_CACHE),
            tickets: Mutex::default(),
        }
    }
}

impl ClientSessionStore for TicketStore {
    fn set_kx_hint(&self, name: ServerName<'static>, group: NamedGroup) {
        self.cache.set_kx_hint(name, group)
    }

    fn kx_hint(&self, name: &ServerName<'_>) -> Option<NamedGroup> {
        self.cache.kx_hint(name)
    }

    fn set_tls12_session(&self, name: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.cache.set_tls12_session(name, value)
    }

    fn tls12_session(&self, name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.cache.tls12_session(name)
    }

    fn remove_tls12_session(&self, name: &ServerName<'static>) {
        self.cache.remove_tls12_session(name)
    }

    fn insert_tls13_ticket(&self, name: ServerName<'static>, value: Tls13ClientSessionValue) {
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        let queue = tickets.entry(name).or_default();
        if queue.len() == TICKETS_PER_SERVER {
            queue.pop_front();
        }
        queue.push_back(value);
    }

    fn take_tls13_ticket(&self, name: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        let mut tickets = self.tickets.lock().unwrap_or_else(|e| e.into_inner());
        // The newest, as rustls's cache takes: the least likely to have expired.
        tickets.get_mut(name).and_then(VecDeque::pop_back)
    }
}

/// `--insecure`: any certificate chain and name is accepted. The signatures of the
/// handshake are still verified, so the client does the same cryptographic work as one that
/// verifies, bar the chain.
#[derive(Debug)]
struct InsecureNoCertificateVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for InsecureNoCertificateVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Why TLS failed on a connection, as reported: the same names as the server's metrics.
pub const FAILURE_REASONS: [&str; 8] = [
    "certificate",
    "alert_received",
    "incompatible",
    "decrypt",
    "bad_message",
    "misbehaved",
    "general",
    "other",
];

/// The index in [`FAILURE_REASONS`] of a rustls error.
pub(crate) fn failure_reason(error: &rustls::Error) -> usize {
    use rustls::Error::*;
    match error {
        InvalidCertificate(_) | NoCertificatesPresented => 0,
        AlertReceived(_) => 1,
        PeerIncompatible(_) => 2,
        DecryptError => 3,
        InvalidMessage(_) => 4,
        PeerMisbehaved(_) => 5,
        General(_) => 6,
        _ => 7,
    }
}

/// What a run's connections negotiated (the first one measured; a run pins one server, so
/// they all agree unless the server's settings let them differ).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Negotiated {
    pub protocol: &'static str,
    pub cipher: &'static str,
    pub group: &'static str,
}

impl Negotiated {
    pub(crate) fn of(conn: &rustls::ClientConnection) -> Negotiated {
        Negotiated {
            protocol: match conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "TLS",
            },
            cipher: conn
                .negotiated_cipher_suite()
                .and_then(|s| s.suite().as_str())
                .unwrap_or("unknown"),
            group: conn
                .negotiated_key_exchange_group()
                .and_then(|g| g.name().as_str())
                .unwrap_or("none"),
        }
    }
}
