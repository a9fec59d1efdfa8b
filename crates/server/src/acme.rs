//! Certificates for the hosts with `tls = "auto"`: one process of their own obtains and
//! renews them with the ACME client (`fastpath-acme`), and every serving process reads
//! the results from the state directory (`fastpath-tls` for the certificates and the
//! tls-alpn-01 answers, the HTTP handler for the http-01 ones).
//!
//! Why a process, forked by `serve` before any worker: `prefork`'s parent must stay
//! single-threaded (it forks), and the serving processes must never wait on a CA. The
//! files are the only link: each is replaced atomically, so a reader sees the old version
//! or the new one. The process runs as the serving processes do (it drops privileges the
//! same way), so that they can read what it writes, and it dies with the server
//! (`PR_SET_PDEATHSIG`).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use fastpath_acme::{
    Account, CertificateStore, ChallengeBoard, ChallengeKind, Client, ClientConfig, Error,
    Published, StoredCertificate, TrustRoots,
};

use fastpath_tls::FileStamp;

use crate::config::{AcmeConfig, Config};

/// The first wait after a failure the CA or the network may get over soon (unreachable,
/// a server error); doubled after each failure in a row.
const RETRY_SOON: Duration = Duration::from_secs(2);
/// The first wait after the CA refused (a failed validation, a bad contact): CAs limit
/// failed validations (Let's Encrypt: 5 an hour per name), so these are not hurried.
const RETRY_REFUSED: Duration = Duration::from_secs(60);
/// The longest wait between tries, and between looks at a certificate that is not due.
const MAX_WAIT: Duration = Duration::from_secs(3600);
/// How often the CA's renewal window (ARI) is asked for, unless it says otherwise
/// (`Retry-After`, taken within [`ARI_LEAST`] and [`ARI_MOST`] as RFC 9773 advises).
const ARI_EVERY: Duration = Duration::from_secs(6 * 3600);
const ARI_LEAST: Duration = Duration::from_secs(60);
const ARI_MOST: Duration = Duration::from_secs(24 * 3600);
/// When asking for the window failed: asked again this much later.
const ARI_AFTER_FAILURE: Duration = Duration::from_secs(3600);
/// How often the certificates' files are looked at, so that one set aside (`fastpath acme
/// revoke`) or removed by hand is replaced within this long.
const WATCH: Duration = Duration::from_secs(2);
/// The first wait before the keeping process is started again after it failed; doubled
/// after each failure soon after its start, up to [`RESTART_MOST`].
const RESTART_FIRST: Duration = Duration::from_secs(1);
const RESTART_MOST: Duration = Duration::from_secs(300);
/// A keeping process that ran this long before failing starts its successor's waits over.
const RESTART_FORGIVEN: Duration = Duration::from_secs(600);

/// The ACME process, ended (and collected) when dropped.
pub(crate) struct AcmeProcess {
    pid: libc::pid_t,
}

impl Drop for AcmeProcess {
    fn drop(&mut self) {
        // SAFETY: signals and collects our own child. `prefork`'s parent collects every
        // child that ends, this one too: a pid that is no longer our child (ECHILD) may be
        // another process's by now, and is left alone.
        unsafe {
            let mut status = 0;
            if libc::waitpid(self.pid, &mut status, libc::WNOHANG) == 0 {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, &mut status, 0);
            }
        }
    }
}

/// Forks the process that keeps the auto hosts' certificates, if there are any; it drops
/// privileges with `switch` before anything else. Call while the process has one thread.
pub(crate) fn start(
    config: &Config,
    switch: Option<&crate::privileges::Switch>,
) -> std::io::Result<Option<AcmeProcess>> {
    // Each host's names, and the chain file the serving processes read for it.
    let hosts: Vec<(Vec<String>, PathBuf)> = config
        .acme_hosts()
        .map(|h| {
            let chain = config
                .acme_certificate_dir(h)
                .join(fastpath_acme::CERT_FILE);
            (h.names.clone(), chain)
        })
        .collect();
    if hosts.is_empty() {
        return Ok(None);
    }
    let Some(directory) = config.acme.directory.clone() else {
        return Ok(None);
    };
    // Made before the fork so that the serving processes find them, and with a mode that
    // lets them read what the ACME process writes.
    let challenges = config.acme.challenges_dir();
    for dir in [&config.acme.state_dir, &challenges] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        // The ACME process writes here after dropping privileges: the directories are
        // given to the user it drops to (their files are its own already).
        if let Some((uid, gid)) = switch.map(|s| s.owner()) {
            std::os::unix::fs::chown(dir, Some(uid), Some(gid)).map_err(|e| {
                std::io::Error::new(e.kind(), format!("chown {}: {e}", dir.display()))
            })?;
        }
    }
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the caller has one thread; the child only runs `child_main` and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid > 0 {
        tracing::info!(
            "ACME: certificates for {} from {directory}, kept by process {pid}",
            hosts
                .iter()
                .map(|(names, _)| names.join(" "))
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(Some(AcmeProcess { pid }));
    }
    // SAFETY: in the child: dies with its parent; the server's signal handlers are not
    // its own.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::getppid() != parent {
            libc::_exit(0);
        }
        for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
    if let Err(e) = switch.map(|s| s.apply()).transpose() {
        tracing::error!("ACME: {e}; no certificate will be obtained");
        // SAFETY: ends the child without running what it inherited (buffered output, the
        // parent's destructors).
        unsafe { libc::_exit(1) }
    }
    guard(|| {
        // A panic must not unwind into `serve`: this process would then go on as a second
        // server.
        let keeper = Keeper::new(&config.acme, directory.clone(), hosts.clone());
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| keeper.run()));
    })
}

/// Runs `keep` in a child process of its own, and again whenever that process ends (it
/// only ends by failing: a panic, a signal, the out-of-memory killer), after a wait that
/// doubles from [`RESTART_FIRST`] to [`RESTART_MOST`] while it keeps failing soon after
/// its start. The state is all in files, so a new keeper takes over where the last one
/// was; the serving processes never notice. This process does nothing else, and dies with
/// the server; the keeper dies with it.
fn guard(keep: impl Fn()) -> ! {
    let guardian = std::process::id() as libc::pid_t;
    let mut failures = 0u32;
    loop {
        let started = Instant::now();
        // SAFETY: this process has one thread; the child runs `keep` and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: in the child: dies with the guardian, and ends without running what
            // it inherited.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != guardian {
                    libc::_exit(0);
                }
            }
            keep();
            tracing::error!("ACME: the process keeping the certificates failed");
            // SAFETY: as above.
            unsafe { libc::_exit(1) }
        }
        let how = if pid < 0 {
            format!("could not start: {}", std::io::Error::last_os_error())
        } else {
            tracing::info!("ACME: process {pid} obtains and renews the certificates");
            ended(pid)
        };
        if started.elapsed() >= RESTART_FORGIVEN {
            failures = 0;
        }
        failures += 1;
        let wait = RESTART_FIRST
            .saturating_mul(1 << (failures - 1).min(16))
            .min(RESTART_MOST);
        tracing::error!(
            "ACME: the process keeping the certificates {how}; started again in {}s",
            wait.as_secs()
        );
        std::thread::sleep(wait);
    }
}

/// Waits for child `pid` to end, and says how it did.
fn ended(pid: libc::pid_t) -> String {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return format!("was lost: {e}");
        }
    }
    if libc::WIFSIGNALED(status) {
        format!("was killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    }
}

/// One auto host's certificate, and when to look at it again.
struct Host {
    names: Vec<String>,
    /// When to look at the certificate: when it is due, or when to try again after a
    /// failure.
    next: Instant,
    failures: u32,
    /// When to ask the CA for the certificate's renewal window (ARI) again.
    ari_next: Option<Instant>,
    /// The chain's file, where the store keeps it and the serving processes read it.
    chain: PathBuf,
    /// The chain's file as last looked at: a change made by someone else (a revocation
    /// that set it aside, a file removed by hand) is looked at at once.
    seen: Option<fastpath_tls::FileStamp>,
}

struct Keeper {
    settings: AcmeConfig,
    directory: String,
    hosts: Vec<Host>,
    account: Option<Account>,
    board: FileBoard,
}

impl Keeper {
    fn new(settings: &AcmeConfig, directory: String, hosts: Vec<(Vec<String>, PathBuf)>) -> Keeper {
        let now = Instant::now();
        Keeper {
            board: FileBoard {
                dir: settings.challenges_dir(),
            },
            settings: settings.clone(),
            directory,
            hosts: hosts
                .into_iter()
                .map(|(names, chain)| Host {
                    names,
                    next: now,
                    failures: 0,
                    ari_next: None,
                    chain,
                    seen: None,
                })
                .collect(),
            account: None,
        }
    }

    fn run(mut self) -> ! {
        loop {
            let now = Instant::now();
            let mut wake = now + WATCH;
            for i in 0..self.hosts.len() {
                let host = &self.hosts[i];
                let due = host.next <= now || host.ari_next.is_some_and(|at| at <= now);
                // A change by someone else counts only while the CA is not refusing or
                // failing: the backoff holds whatever happens to the files.
                let changed = host.failures == 0 && FileStamp::of(&host.chain) != host.seen;
                if due || changed {
                    let outcome = self.tend(i);
                    let seen = FileStamp::of(&self.hosts[i].chain);
                    let host = &mut self.hosts[i];
                    host.seen = seen;
                    match outcome {
                        Ok(next) => {
                            host.failures = 0;
                            host.next = next;
                        }
                        Err(e) => {
                            host.failures += 1;
                            let wait = retry_wait(&e, host.failures);
                            tracing::warn!(
                                "ACME: {}: {e}; trying again in {}s",
                                host.names.join(", "),
                                wait.as_secs()
                            );
                            if matches!(e, Error::Io { .. }) {
                                // The directory is read again: the CA may have moved.
                                self.account = None;
                            }
                            host.next = Instant::now() + wait;
                        }
                    }
                }
                let host = &self.hosts[i];
                wake = wake.min(host.next);
                if let Some(at) = host.ari_next {
                    wake = wake.min(at);
                }
            }
            std::thread::sleep(wake.saturating_duration_since(Instant::now()));
        }
    }

    /// The account, opened (or made) on first use.
    fn account(&mut self) -> Result<&Account, Error> {
        if self.account.is_none() {
            self.account = Some(open_account(&self.settings, &self.directory)?);
        }
        Ok(self.account.as_ref().expect("just opened"))
    }

    /// Obtains or renews host `i`'s certificate if it is missing, does not cover the
    /// host's names, or is due (by its lifetime, or by the renewal window the CA suggests
    /// when asked now and then); returns when to look again.
    fn tend(&mut self, i: usize) -> Result<Instant, Error> {
        let store = CertificateStore::new(&self.settings.state_dir)?;
        let names = self.hosts[i].names.clone();
        let kind = self.settings.challenge;
        let mut current = store.load(&names[0]).unwrap_or_else(|e| {
            tracing::warn!("ACME: {e}; a new certificate is obtained in its place");
            None
        });
        let covers = |c: &StoredCertificate| names.iter().all(|n| c.names.contains(n));
        if let Some(cert) = current.as_mut().filter(|c| covers(c)) {
            if self.hosts[i].ari_next.is_none_or(|at| at <= Instant::now()) {
                self.ask_renewal_window(i, &store, cert);
            }
        }
        let cert = match current {
            Some(cert) if covers(&cert) && renew_at(&cert) > SystemTime::now() => cert,
            current => {
                let board = FileBoard {
                    dir: self.board.dir.clone(),
                };
                let account = self.account()?;
                let issued = match &current {
                    Some(old) if covers(old) => {
                        fastpath_acme::renew(account, old, kind, &board, &store)?
                    }
                    _ => fastpath_acme::obtain(account, &names, kind, &board, &store)?,
                };
                let cert = issued.certificate;
                tracing::info!(
                    "ACME: certificate for {} {}, valid until {}, to be renewed from {}",
                    names.join(", "),
                    if current.is_some() {
                        "renewed"
                    } else {
                        "obtained"
                    },
                    httpdate::fmt_http_date(cert.not_after),
                    httpdate::fmt_http_date(renew_at(&cert))
                );
                // The window was asked for with the issuance (when the CA has ARI).
                self.hosts[i].ari_next = Some(Instant::now() + ari_interval(&cert));
                cert
            }
        };
        let until = renew_at(&cert)
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Ok(Instant::now() + until.min(MAX_WAIT))
    }

    /// Asks the CA for `cert`'s renewal window (ARI), which may bring its renewal forward:
    /// at once when the CA revoked it. A failure here is no failure of the certificate:
    /// the window is asked for again later.
    fn ask_renewal_window(
        &mut self,
        i: usize,
        store: &CertificateStore,
        cert: &mut StoredCertificate,
    ) {
        let asked = self
            .account()
            .and_then(|account| fastpath_acme::refresh_renewal_info(account, store, cert));
        let next = match asked {
            Ok(Some(window)) => {
                cert.renewal_window = Some(window);
                if renew_at(cert) <= SystemTime::now() {
                    let window = cert.renewal_window.as_ref().expect("just set");
                    tracing::warn!(
                        "ACME: the CA asks for the certificate of {} to be replaced from {}{}; renewing it now",
                        cert.names.join(", "),
                        httpdate::fmt_http_date(window.start),
                        window
                            .explanation_url
                            .as_ref()
                            .map(|url| format!(" (see {url})"))
                            .unwrap_or_default()
                    );
                }
                ari_interval(cert)
            }
            Ok(None) => ARI_EVERY,
            Err(e) => {
                tracing::info!("ACME: renewal window for {}: {e}", cert.names.join(", "));
                ARI_AFTER_FAILURE
            }
        };
        self.hosts[i].ari_next = Some(Instant::now() + next);
    }
}

/// The revocation reasons a CA takes (RFC 5280 section 5.3.1, as Let's Encrypt accepts
/// them), by the names `fastpath acme revoke --reason` takes.
pub const REVOCATION_REASONS: [(&str, u8); 5] = [
    ("unspecified", 0),
    ("keyCompromise", 1),
    ("affiliationChanged", 3),
    ("superseded", 4),
    ("cessationOfOperation", 5),
];

/// `fastpath acme revoke`: revokes the certificate kept for the auto host named `name`
/// (with `reason`, one of [`REVOCATION_REASONS`]' codes) and sets it aside, so that the
/// running server's ACME process obtains a new one, with a new key, within seconds (a
/// stopped server does so when it starts). The serving processes go on with the revoked
/// certificate until the new one is there: a handshake never finds none. Returns what was
/// done, for the operator.
pub fn revoke_certificate(
    config: &Config,
    name: &str,
    reason: Option<u8>,
) -> Result<String, String> {
    let wanted = name.trim_end_matches('.').to_ascii_lowercase();
    let host = config
        .acme_hosts()
        .find(|h| h.names.iter().any(|n| n.eq_ignore_ascii_case(&wanted)))
        .ok_or_else(|| format!("no host with tls = \"auto\" is named {name}"))?;
    let directory = config
        .acme
        .directory
        .as_deref()
        .ok_or("[acme] has no directory")?;
    let store = CertificateStore::new(&config.acme.state_dir).map_err(|e| e.to_string())?;
    let cert = store
        .load(&host.names[0])
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "no certificate is kept for {} under {}",
                host.names.join(", "),
                config.acme.state_dir.display()
            )
        })?;
    let account = open_account(&config.acme, directory).map_err(|e| e.to_string())?;
    let revoked = match account.revoke(&cert.leaf_der, reason) {
        Ok(()) => "revoked",
        Err(e) if e.problem().is_some_and(|p| p.is("alreadyRevoked")) => "already revoked",
        Err(e) => return Err(format!("the CA did not revoke it: {e}")),
    };
    let aside = store
        .set_aside(&cert, "revoked")
        .map_err(|e| format!("{revoked} at the CA, but not set aside: {e}"))?;
    Ok(format!(
        "the certificate for {} (valid until {}) is {revoked}; kept as {}; a running server \
         obtains a new one within {}s",
        cert.names.join(", "),
        httpdate::fmt_http_date(cert.not_after),
        aside.display(),
        WATCH.as_secs()
    ))
}

/// Opens the ACME account `settings` describe at `directory` (made on first use).
fn open_account(settings: &AcmeConfig, directory: &str) -> Result<Account, Error> {
    let mut config = ClientConfig::new(directory.to_owned());
    config.roots = match &settings.ca_root {
        Some(root) => TrustRoots::only(root),
        None => TrustRoots::system(),
    };
    let client = Client::new(config)?;
    let account = Account::open(
        client,
        &settings.account_key_path(),
        &settings.contact,
        settings.agree_terms,
    )?;
    tracing::info!("ACME: account {}", account.url());
    Ok(account)
}

/// How long until `cert`'s renewal window is asked for again: the CA's `Retry-After`
/// within [`ARI_LEAST`] and [`ARI_MOST`], else [`ARI_EVERY`].
fn ari_interval(cert: &StoredCertificate) -> Duration {
    cert.renewal_window
        .as_ref()
        .and_then(|window| window.retry_after)
        .map_or(ARI_EVERY, |after| after.clamp(ARI_LEAST, ARI_MOST))
}

/// When to renew `cert`: two thirds into its lifetime, or, when the CA suggested a
/// renewal window (ARI), a point in the first half of it. RFC 9773 asks for a random point,
/// so that the CA's clients do not all come at once; here the point follows from the
/// certificate itself, so that a restart does not move it. Not the window's start: a CA may
/// start it at issuance (Pebble does for short-lived certificates), which would renew each
/// new certificate at once.
fn renew_at(cert: &StoredCertificate) -> SystemTime {
    use std::hash::{Hash, Hasher};
    let Some(window) = &cert.renewal_window else {
        return cert.renew_at();
    };
    let Ok(width) = window.end.duration_since(window.start) else {
        return window.start;
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    cert.leaf_der.hash(&mut hasher);
    let fraction = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
    window.start + width.mul_f64(fraction / 2.0)
}

/// How long to wait after the `failures`th failure in a row: the CA's Retry-After when it
/// gave one, else a wait that doubles from [`RETRY_SOON`] or [`RETRY_REFUSED`], at most
/// [`MAX_WAIT`].
fn retry_wait(e: &Error, failures: u32) -> Duration {
    if let Error::RateLimited {
        retry_after: Some(after),
        ..
    } = e
    {
        return *after;
    }
    let first = match e {
        Error::Io { .. } | Error::Timeout(_) | Error::Protocol(_) => RETRY_SOON,
        Error::Problem(p) if p.status.is_some_and(|s| s >= 500) => RETRY_SOON,
        _ => RETRY_REFUSED,
    };
    first
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(MAX_WAIT)
}

/// Challenges shown through files of the state directory, which every serving process
/// reads: `CHALLENGES/TOKEN` holds an http-01 key authorization,
/// `CHALLENGES/tls-alpn-01/NAME.pem` a tls-alpn-01 certificate and its key.
struct FileBoard {
    dir: PathBuf,
}

impl FileBoard {
    fn path(&self, c: &Published) -> PathBuf {
        match c.kind {
            ChallengeKind::Http01 => self.dir.join(&c.token),
            ChallengeKind::TlsAlpn01 => self
                .dir
                .join(fastpath_tls::ALPN_CHALLENGES)
                .join(format!("{}.pem", c.name)),
        }
    }
}

impl ChallengeBoard for FileBoard {
    fn publish(&self, c: &Published) {
        let contents = match (&c.kind, &c.alpn_certificate) {
            (ChallengeKind::Http01, _) => c.key_authorization.clone().into_bytes(),
            (ChallengeKind::TlsAlpn01, Some(alpn)) => alpn.to_pem().into_bytes(),
            (ChallengeKind::TlsAlpn01, None) => return,
        };
        let path = self.path(c);
        // The validation then fails, and says why; the order is tried again later.
        if let Err(e) = write_atomic(&path, &contents) {
            tracing::warn!("ACME: cannot publish {}: {e}", path.display());
        }
    }

    fn withdraw(&self, c: &Published) {
        let _ = std::fs::remove_file(self.path(c));
    }
}

/// Writes `path` whole or not at all (a reader never sees half of it), making its
/// directory if needed. The tls-alpn-01 file holds a key, but one that proves nothing once
/// the validation is over; it is readable by the serving processes' user, the only one the
/// directory lets in.
fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    fastpath_acme::write_atomic(path, contents, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_soon_or_refused_and_follow_retry_after() {
        let io = Error::Io {
            context: "connect".into(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        };
        assert_eq!(retry_wait(&io, 1), RETRY_SOON);
        assert_eq!(retry_wait(&io, 3), RETRY_SOON * 4);
        assert_eq!(retry_wait(&io, 40), MAX_WAIT);
        let invalid = Error::Invalid {
            what: "the authorization for a.test".into(),
            problem: None,
        };
        assert_eq!(retry_wait(&invalid, 1), RETRY_REFUSED);
        assert_eq!(retry_wait(&invalid, 2), RETRY_REFUSED * 2);
        let problem = fastpath_acme::Problem::parse(
            br#"{"type":"urn:ietf:params:acme:error:rateLimited","detail":"slow down"}"#,
            429,
        )
        .unwrap();
        let limited = Error::RateLimited {
            problem: Box::new(problem),
            retry_after: Some(Duration::from_secs(7200)),
        };
        assert_eq!(retry_wait(&limited, 1), Duration::from_secs(7200));
    }

    #[test]
    fn renewal_is_at_two_thirds_or_in_the_first_half_of_the_cas_window() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut cert = StoredCertificate {
            dir: PathBuf::from("/nowhere"),
            names: vec!["a.example.test".into()],
            chain_pem: String::new(),
            leaf_der: vec![1, 2, 3],
            not_before: start,
            not_after: start + Duration::from_secs(90),
            ari_id: None,
            renewal_window: None,
        };
        assert_eq!(renew_at(&cert), start + Duration::from_secs(60));
        // A window from issuance to expiry, as Pebble gives a short-lived certificate.
        let window = |from: u64, to: u64| fastpath_acme::RenewalInfo {
            start: start + Duration::from_secs(from),
            end: start + Duration::from_secs(to),
            explanation_url: None,
            retry_after: None,
        };
        cert.renewal_window = Some(window(0, 90));
        let mut points = Vec::new();
        for leaf in 0..50u8 {
            cert.leaf_der = vec![leaf; 8];
            let at = renew_at(&cert);
            assert!(
                at >= start && at <= start + Duration::from_secs(45),
                "{at:?}"
            );
            // The same certificate, the same point.
            assert_eq!(renew_at(&cert), at);
            points.push(at);
        }
        points.sort();
        points.dedup();
        assert!(points.len() > 40, "spread over the window: {points:?}");
        // A window in the past (the CA wants it replaced now) is due at once.
        cert.renewal_window = Some(window(0, 1));
        assert!(renew_at(&cert) <= start + Duration::from_secs(1));
    }

    #[test]
    fn challenges_are_files_the_handler_and_tls_read() {
        let dir = tempfile::tempdir().unwrap();
        let board = FileBoard {
            dir: dir.path().join("challenges"),
        };
        let http = Published {
            name: "a.example.test".into(),
            kind: ChallengeKind::Http01,
            token: "tok_1".into(),
            key_authorization: "tok_1.thumb".into(),
            alpn_certificate: None,
        };
        board.publish(&http);
        let file = dir.path().join("challenges/tok_1");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "tok_1.thumb");
        board.withdraw(&http);
        assert!(!file.exists());
        let alpn = Published {
            kind: ChallengeKind::TlsAlpn01,
            alpn_certificate: Some(
                fastpath_acme::tls_alpn01_certificate("a.example.test", "tok_1.thumb").unwrap(),
            ),
            ..http
        };
        board.publish(&alpn);
        let file = dir.path().join("challenges/tls-alpn-01/a.example.test.pem");
        let text = std::fs::read_to_string(&file).unwrap();
        use rustls_pki_types::pem::PemObject;
        let cert = rustls_pki_types::CertificateDer::from_pem_slice(text.as_bytes()).unwrap();
        assert_eq!(
            cert.as_ref(),
            &alpn.alpn_certificate.as_ref().unwrap().certificate_der[..]
        );
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(text.as_bytes()).unwrap();
        assert_eq!(
            key.secret_der(),
            &alpn.alpn_certificate.as_ref().unwrap().key_pkcs8_der[..]
        );
        board.withdraw(&alpn);
        assert!(!file.exists());
    }
}
