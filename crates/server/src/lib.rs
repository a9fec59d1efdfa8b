//! The fastpath web server: configuration, virtual hosts, the HTTP connection handler and
//! the logs, composed over the drivers, protocol, content and hand-over layers.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! [`serve`] binds the listeners, opens every site, starts the access log and runs the
//! concurrency model named in the configuration until the stop flag is set; [`serve_with`]
//! does the same on what the process [`Inherited`]: under systemd (see [`systemd`]) on the
//! sockets it passed, telling it how the server is doing, and after a reload on the sockets of
//! the server it replaces. The handler it runs is the same for every model: it parses requests with
//! `fastpath-http`, asks `fastpath-handover` whether a backend takes each and
//! `fastpath-content` what the others get, and queues the response on the connection.
//!
//! ```no_run
//! use fastpath_server::{config::Config, serve};
//! let mut config = Config::default();
//! config.listen = vec!["127.0.0.1:8080".parse().unwrap()];
//! serve(&config, fastpath_drivers::signals::install_stop_handler()).unwrap();
//! ```
#![deny(missing_docs)]

mod access_log;
mod acme;
mod clock;
pub mod config;
mod error_log;
#[cfg(test)]
mod glue_tests;
mod hand_over;
mod handler;
mod kernel_bridge;
mod listening;
mod metrics;
pub mod module;
mod modules;
mod privileges;
mod reload;
mod reply;
mod routing;
pub mod systemd;
mod vhosts;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use fastpath_content::{CacheLimits, ContentCache, Site, SiteOptions};
use fastpath_drivers::{
    DriverConfig, Layers, ListenAddr, Listeners, Process, ProxyProtocol, TransportSetup, Transports,
};
use fastpath_drivers::{Model as DriverModel, ModelKind};
use fastpath_handover::{BackendConfig, BackendState, Routes, SharedCache};

pub use access_log::AccessLog;
pub use acme::{revoke_certificate, REVOCATION_REASONS};
pub use error_log::init_error_log;

use crate::config::{Config, HostConfig, Model};
use crate::handler::{HandlerSettings, HttpHandler, ListenerFacts};
use crate::listening::ListenerSource;
use crate::metrics::Metrics;
use crate::systemd::{Notify, Systemd};
use crate::vhosts::VirtualHosts;

/// Why the server could not start or stopped with an error.
#[derive(Debug)]
pub enum ServeError {
    /// A document root could not be opened.
    Site(std::path::PathBuf, io::Error),
    /// A listening address could not be bound.
    Bind(io::Error),
    /// The access log could not be opened.
    AccessLog(io::Error),
    /// The user, group and root settings do not allow starting (see `privileges`).
    Privileges(String),
    /// The pid file could not be written.
    PidFile(std::path::PathBuf, io::Error),
    /// The event loops failed.
    Run(io::Error),
    /// `kernel_path = "on"` and the kernel path cannot be had (why).
    Kernel(String),
    /// A TLS certificate or key could not be used.
    Tls(fastpath_tls::TlsError),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Site(root, e) => {
                write!(f, "cannot open document root {}: {e}", root.display())
            }
            ServeError::Bind(e) => write!(f, "cannot listen: {e}"),
            ServeError::AccessLog(e) => write!(f, "cannot open the access log: {e}"),
            ServeError::Privileges(why) => f.write_str(why),
            ServeError::PidFile(path, e) => {
                write!(f, "cannot write the pid file {}: {e}", path.display())
            }
            ServeError::Run(e) => write!(f, "server failed: {e}"),
            ServeError::Kernel(why) => f.write_str(why),
            ServeError::Tls(e) => write!(f, "TLS: {e}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// Number of workers for a configured count: 0 means one per CPU.
pub use fastpath_drivers::worker_count;

/// Whether and how a site's tree is watched for changes.
#[derive(Debug, Clone, Copy)]
enum Watching {
    /// Not at all (a root opened only to check it).
    Off,
    /// By a thread per site.
    Thread,
    /// By the handlers' ticks: for a process that must stay single-threaded. With the
    /// generation counters prefork's children share (one per site, in the order of
    /// [`virtual_hosts`]), a change one child reads is seen by all.
    Ticks(Option<&'static [AtomicU64]>),
}

/// Opens the `index`th site (the default host first, then `[[host]]` in order).
fn open_site(host: &HostConfig, index: usize, watch: Watching) -> Result<Site, ServeError> {
    let mut site = Site::open(
        &host.root,
        SiteOptions {
            index: host.index.clone(),
            dotfiles: host.dotfiles,
            precompressed: host.precompressed,
        },
    )
    .map_err(|e| ServeError::Site(host.root.clone(), e))?;
    let watched = match watch {
        Watching::Off => Ok(()),
        Watching::Thread => site.watch(),
        Watching::Ticks(shared) => match shared.and_then(|g| g.get(index)) {
            Some(generation) => site.watch_polled_shared(generation),
            None => site.watch_polled(),
        },
    };
    if let Err(e) = watched {
        // inotify fails with EMFILE at the per-user instance limit (each process, so each
        // preforked child, watches its roots) and ENOSPC at the watch limit: name the limit.
        let hint = match e.raw_os_error() {
            Some(libc::EMFILE) => {
                " (the limit of inotify instances per user, fs.inotify.max_user_instances, is \
                 reached: raise it, e.g. `sysctl fs.inotify.max_user_instances=1024`, or run \
                 fewer workers or children)"
            }
            Some(libc::ENOSPC) => {
                " (the limit of inotify watches per user, fs.inotify.max_user_watches, is \
                 reached: raise it, e.g. `sysctl fs.inotify.max_user_watches=524288`)"
            }
            _ => "",
        };
        // A preforked child at the instance limit was announced once at start (a model note):
        // the many children past it would otherwise each say it again.
        let message = format!(
            "cannot watch {} for changes ({e}){hint}; its files will not be cached",
            host.root.display()
        );
        if matches!(watch, Watching::Ticks(_)) && e.raw_os_error() == Some(libc::EMFILE) {
            tracing::debug!("{message}");
        } else {
            tracing::warn!("{message}");
        }
    }
    Ok(site)
}

/// Opens the sites and maps every configured name to its site, watching them for changes as
/// `watch` says (the content cache needs a watch).
fn virtual_hosts(config: &Config, watch: Watching) -> Result<VirtualHosts, ServeError> {
    let mut sites = vec![open_site(&config.default_host, 0, watch)?];
    let mut names = Vec::new();
    let mut default = 0;
    for host in &config.hosts {
        sites.push(open_site(host, sites.len(), watch)?);
        let index = sites.len() - 1;
        if host.is_default {
            default = index;
        }
        names.extend(host.names.iter().map(|name| (name.clone(), index)));
    }
    let hsts = std::iter::once(&config.default_host)
        .chain(&config.hosts)
        .map(|host| host.hsts.clone())
        .collect();
    Ok(VirtualHosts::new(sites, default, names).with_hsts(hsts))
}

/// The driver model for a configured one; io_uring falls back to epoll, with one warning,
/// where the kernel cannot run it.
fn driver_model(config: &Config) -> DriverModel {
    let model = config.driver_model();
    if model.kind() == ModelKind::Uring {
        if let Err(reason) = fastpath_drivers::uring_available() {
            tracing::warn!("io_uring unavailable ({reason}); using epoll");
            return DriverModel::Epoll;
        }
    }
    model
}

/// What the handlers of one process share: built once per process, after the fork for the
/// process model, because it starts threads (the access-log writer, the file watchers).
struct Shared {
    hosts: Arc<VirtualHosts>,
    settings: Arc<HandlerSettings>,
    routes: Arc<Routes>,
    backends: Vec<Arc<BackendConfig>>,
    access_log: AccessLog,
    /// The content cache, one for the process: each handler looks through a handle of its
    /// own; a prefork child has its own cache, and each percore worker a private one.
    content_cache: ContentCache,
    /// The worker whose metrics carry the content cache's memory, entries and evictions.
    content_reporter: Arc<std::sync::atomic::AtomicUsize>,
    /// The backend response cache, one for the process: all the workers of the threaded
    /// models share it; a prefork child has its own.
    response_cache: Arc<SharedCache>,
    /// The worker whose metrics carry the response cache's figures, once one has used it.
    reporter: Arc<std::sync::atomic::AtomicUsize>,
    handlers: usize,
    metrics: Option<Arc<Metrics>>,
    /// The kernel path of bridged connections, loaded once for the process (prefork's
    /// children share the parent's).
    kernel_bridge: Option<Arc<fastpath_kernel::BridgePath>>,
    /// The `[[module]]` tables, configured: each worker makes its hooks from them.
    modules: Vec<module::ModuleUse>,
}

impl Shared {
    /// Opens the sites and the access log; `single_threaded` (a prefork child) keeps the
    /// process to the one thread that serves, reading file changes on its ticks and writing
    /// its own log lines.
    fn start(
        config: &Config,
        handlers: usize,
        single_threaded: bool,
        metrics: Option<Arc<Metrics>>,
        listeners: &ListenerFacts,
        generations: Option<&'static [AtomicU64]>,
        kernel_bridge: Option<Arc<fastpath_kernel::BridgePath>>,
    ) -> Result<Shared, ServeError> {
        let watch = match (config.cache.enabled, single_threaded) {
            (false, _) => Watching::Off,
            (true, false) => Watching::Thread,
            (true, true) => Watching::Ticks(generations),
        };
        let hosts = Arc::new(virtual_hosts(config, watch)?);
        let access_log = if single_threaded {
            AccessLog::start_direct(&config.log.access)
        } else {
            AccessLog::start(&config.log.access)
        }
        .map_err(ServeError::AccessLog)?
        .with_tls_fields(config.log.tls_fields);
        // The processes that divide the budgets: a prefork pool's children, else one.
        let children = if single_threaded { handlers as u64 } else { 1 };
        // percore's workers share nothing on the request path: a private content cache
        // each, with an equal share of the budget.
        let private = config.driver_model().kind() == ModelKind::Percore;
        let caches = if private { handlers as u64 } else { children };
        let content_limits = CacheLimits {
            max_memory: (config.cache.max_memory / caches) as usize,
            max_file_size: config.cache.max_file_size,
            copy_below: config.cache.copy_below,
            max_open_files: config.cache.max_open_files / caches as usize,
        };
        Ok(Shared {
            hosts,
            settings: Arc::new(HandlerSettings {
                listeners: listeners.clone(),
                ..HandlerSettings::from_config(config)
            }),
            routes: Arc::new(Routes::new(config.routes.clone())),
            backends: config.backends.iter().cloned().map(Arc::new).collect(),
            access_log,
            // Whole for the process; a prefork child's is its share of the children's.
            content_cache: if private {
                ContentCache::private(content_limits)
            } else {
                ContentCache::new(content_limits)
            },
            content_reporter: Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX)),
            // Whole for the process; a prefork child's is its share of the children's.
            response_cache: Arc::new(SharedCache::new(
                if single_threaded {
                    config.handover.cache_memory / handlers
                } else {
                    config.handover.cache_memory
                },
                config.handover.cache_max_response,
            )),
            reporter: Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX)),
            handlers,
            metrics,
            kernel_bridge,
            modules: config.modules.clone(),
        })
    }

    fn handler(&self, worker: usize) -> HttpHandler {
        let backends = self
            .backends
            .iter()
            .map(|b| BackendState::new(b.clone(), (b.max_connections / self.handlers).max(1)))
            .collect();
        HttpHandler::new(
            self.hosts.clone(),
            self.settings.clone(),
            self.access_log.buffer(),
            (self.content_cache.share(), self.content_reporter.clone()),
            self.routes.clone(),
            backends,
            (self.response_cache.clone(), self.reporter.clone()),
            self.metrics.as_ref().map(|m| m.for_worker(worker)),
        )
        .with_kernel_bridge(self.kernel_bridge.clone())
        .with_modules(modules::WorkerModules::new(&self.modules))
    }
}

impl Drop for Shared {
    /// Flushes and closes the access log when the process stops serving.
    fn drop(&mut self) {
        self.access_log.finish();
    }
}

/// What `fastpath check` says bridged connections get on this machine (the kernel path or
/// splice, and why); `None` when no route bridges.
pub fn kernel_report(config: &Config) -> Option<String> {
    kernel_bridge::report(config)
}

/// What `model = "auto"` runs on this machine: the event loop a start-up probe found to
/// serve at the least CPU per request (`fastpath_drivers::probe_models`), with epoll kept
/// unless another is ahead by [`fastpath_drivers::MODEL_MARGIN`]; and the figures behind the
/// choice, for the log and `fastpath check`.
pub fn auto_model() -> (fastpath_drivers::ModelKind, String) {
    use fastpath_drivers::{ModelKind, HTTP_LOADS, MODEL_MARGIN};
    match fastpath_drivers::auto_model(&HTTP_LOADS) {
        Ok((kind, figures)) => {
            let unmeasured = match fastpath_drivers::uring_available() {
                Err(why) => format!("; io_uring unavailable ({why})"),
                Ok(()) => String::new(),
            };
            let note = format!(
                "model \"auto\" runs \"{}\" here: the one with the least CPU per request in a \
                 start-up probe, another than epoll only when {MODEL_MARGIN}× ahead \
                 ({figures}){unmeasured}",
                kind.name()
            );
            (kind, note)
        }
        Err(e) => (
            ModelKind::Epoll,
            format!("model \"auto\" runs \"epoll\": the start-up probe failed ({e})"),
        ),
    }
}

/// What this process was started with, read from the environment by
/// [`Inherited::from_env`]: what systemd passed it (see [`systemd`]), and what the server it
/// replaces handed over on a reload or an upgrade (docs/operations.md).
#[derive(Default)]
pub struct Inherited {
    systemd: Systemd,
    handed: reload::Handed,
}

impl Inherited {
    /// Reads the variables of systemd and of the server this process replaces, and unsets
    /// them all. Must run before the process has other threads (see [`Systemd::from_env`]):
    /// first thing in `main`.
    pub fn from_env() -> Inherited {
        Inherited {
            systemd: Systemd::from_env(),
            handed: reload::Handed::from_env(),
        }
    }

    /// Where the listening sockets come from, decided once: the sockets are taken out.
    fn listener_source(&mut self) -> Result<ListenerSource, ServeError> {
        let activated =
            std::mem::replace(&mut self.systemd.sockets, Ok(Vec::new())).map_err(|e| {
                ServeError::Bind(io::Error::new(e.kind(), format!("socket activation: {e}")))
            })?;
        let handed = std::mem::take(&mut self.handed.sockets);
        Ok(ListenerSource::decide(activated, handed))
    }
}

/// Runs the server described by `config` until `stop` is set, on the addresses it names.
pub fn serve(config: &Config, stop: &AtomicBool) -> Result<(), ServeError> {
    serve_with(config, stop, Inherited::default())
}

/// [`serve`] on what the process inherited: the sockets systemd passed, if any, instead of the
/// configured addresses, notifying it of readiness, status, the stop and the watchdog when it
/// asks; or the sockets of the server this one replaces.
pub fn serve_with(
    config: &Config,
    stop: &AtomicBool,
    mut inherited: Inherited,
) -> Result<(), ServeError> {
    fastpath_drivers::ignore_sigpipe();
    // Measured here, while no worker runs: the probe's loops have the machine to themselves
    // (and its threads are gone again before anything forks).
    let resolved;
    let mut auto_measured = None;
    let config = if config.model == Model::Auto {
        let (kind, note) = match inherited.handed.auto_model.take() {
            Some(kind) => (
                kind,
                format!(
                    "model \"auto\" runs \"{}\", as measured by the server this one replaces",
                    kind.name()
                ),
            ),
            None => auto_model(),
        };
        tracing::info!("{note}");
        auto_measured = Some(kind);
        resolved = Config {
            model: Model::Named(kind),
            ..config.clone()
        };
        &resolved
    } else {
        config
    };
    // Decided before anything is bound or opened, so a refusal leaves nothing behind.
    let switch = privileges::plan(config.user.as_ref(), config.group, config.run_as_root)
        .map_err(ServeError::Privileges)?;
    for note in config.model_notes().into_iter().chain(config.http2_notes()) {
        tracing::info!("{note}");
    }
    let model = driver_model(config);
    let workers = worker_count(config.workers);
    let layout = model.layout(workers);
    let serving = format!("{}, {}", model.name(), model.shape(workers));
    let source = inherited.listener_source()?;
    let served = listening::open(config, source, layout.listener_sets, &serving)
        .map_err(ServeError::Bind)?;
    // Read while the process may still read root's key files; shared by every worker and
    // preforked child.
    let layered = transports(config, &served, inherited.handed.ticket_keys.take())?;
    let metrics = start_metrics(config, &served, layout.handlers, layered.handshakes)?;
    check_roots_and_access_log(config)?;
    // Forked while this process has one thread, before the workers, the reload watcher
    // and the kernel path; ended when `serve` returns.
    let _acme = acme::start(config, switch.as_ref()).map_err(ServeError::Run)?;
    // Loaded while the process is still root, once: the workers and prefork's children
    // share its maps (they go when the last process holding them exits).
    let kernel_bridge = kernel_bridge::load(config).map_err(ServeError::Kernel)?;
    if let Some(switch) = &switch {
        tracing::info!("serving as {}", switch.who());
    }
    let plan = ProcessPlan {
        config,
        handlers: layout.handlers,
        metrics,
        listeners: ListenerFacts {
            unix_names: unix_listener_names(&served.listeners),
            https_redirects: https_redirects(config, &served),
            http2_only: served
                .configured_places(config)
                .map(|place| place.is_some_and(|place| config.is_http2_only(place)))
                .collect(),
        },
        generations: shared_generations(config, model.kind()),
        kernel_bridge,
        switch,
    };
    let handover = served.handover().map_err(ServeError::Bind)?;
    let notify = Notify::start(&mut inherited.systemd);
    let _pid_file = write_pid_file(config)?;
    let mut pass_on = std::mem::take(&mut inherited.systemd.pass_on);
    if let Some(kind) = auto_measured {
        pass_on.push((reload::AUTO_MODEL_VAR, kind.name().into()));
    }
    let handover = Handover {
        sockets: handover,
        pass_on,
        ticket_keys: layered.ticket_keys,
    };
    answer_reloads(config, model.kind(), handover, &notify)?;
    // The server this one replaces stops from here on.
    inherited.handed.ready();
    if let Some(notify) = &notify {
        say_ready(notify, &inherited.systemd, &served.status(&serving));
    }
    let outcome = fastpath_drivers::run_service(
        model,
        served.listeners,
        &DriverConfig {
            transports: layered.transports,
            ..driver_config(config)
        },
        stop,
        &|process| plan.start(process),
        |shared: &Shared, worker| shared.handler(worker),
    )
    .map_err(ServeError::Run);
    if let Some(notify) = &notify {
        // Said already when a graceful stop began; this covers a stop at once (SIGINT) and a
        // failure.
        notify.stopping();
    }
    outcome
}

/// What each listener's connections run under, and what goes with it.
struct Layered {
    transports: Transports,
    /// The TLS listeners' handshake counters, for the metrics.
    handshakes: Option<Arc<fastpath_tls::HandshakeCounts>>,
    /// The memory file of the session ticket keys, for the server a reload starts.
    ticket_keys: Option<OwnedFd>,
}

/// What each listener's connections run under: a PROXY protocol header first for the site's
/// listeners configured with `proxy_protocol`, then TLS for those with `tls = true` (see
/// [`listening::Served::configured_places`]); the others and the metrics listener are plain.
/// The TLS setup takes over the session ticket keys `handed_keys` of the server this one
/// replaces.
fn transports(
    config: &Config,
    served: &listening::Served,
    handed_keys: Option<OwnedFd>,
) -> Result<Layered, ServeError> {
    let mut handshakes = None;
    let mut ticket_keys = None;
    let tls = match config.tls_settings() {
        Some(settings) => {
            for note in config.tls_notes() {
                tracing::info!("{note}");
            }
            let setup = fastpath_tls::TlsSetup::inheriting(&settings, handed_keys)
                .map_err(ServeError::Tls)?;
            match setup.ticket_origin() {
                Some(fastpath_tls::TicketOrigin::MadeInstead(why)) => {
                    tracing::warn!("TLS session ticket keys made anew: {why}")
                }
                Some(fastpath_tls::TicketOrigin::Inherited) => {
                    tracing::info!("TLS session ticket keys taken over from the previous server")
                }
                _ => {}
            }
            handshakes = Some(setup.counts());
            ticket_keys = setup
                .ticket_keys_file()
                .map(|file| file.try_clone_to_owned())
                .transpose()
                .map_err(ServeError::Run)?;
            Some(Arc::new(setup) as Arc<dyn TransportSetup>)
        }
        None => None,
    };
    let by_listener = served
        .configured_places(config)
        .map(|place| {
            let Some(j) = place else {
                return Layers::default();
            };
            Layers {
                proxy: config.proxy_protocol_from(j).map(|from| {
                    Arc::new(ProxyProtocol {
                        trusted: from.to_vec(),
                        timeout: config.timeouts.header,
                    })
                }),
                transport: tls.clone().filter(|_| config.listens_with_tls(j)),
            }
        })
        .collect();
    Ok(Layered {
        transports: Transports::new(by_listener),
        handshakes,
        ticket_keys,
    })
}

/// The HTTPS port each of the site's listeners redirects its requests to, if it is one with
/// `redirect_to_https`.
fn https_redirects(config: &Config, served: &listening::Served) -> Vec<Option<u16>> {
    served
        .configured_places(config)
        .map(|place| config.https_redirect_of(place?))
        .collect()
}

/// Maps the counters every worker will write, for the metrics listener if there is one:
/// before any worker or child process starts, so that they all share them.
fn start_metrics(
    config: &Config,
    served: &listening::Served,
    handlers: usize,
    handshakes: Option<Arc<fastpath_tls::HandshakeCounts>>,
) -> Result<Option<Arc<Metrics>>, ServeError> {
    let names = config.backends.iter().map(|b| b.name.clone()).collect();
    let made = |index| {
        Metrics::new(handlers, names, index, handshakes)
            .map_err(|e| ServeError::Run(io::Error::new(e.kind(), format!("metrics: {e}"))))
    };
    let Some((index, addr)) = served.metrics() else {
        // The status page shows the counters: they are kept for it, with no listener
        // (an index no listener has, so that no connection is taken for a scrape).
        if config.modules.iter().any(|u| u.name == "status") {
            return Ok(Some(Arc::new(made(usize::MAX)?)));
        }
        return Ok(None);
    };
    // The listener's index tells a scrape's connection apart.
    let metrics = made(index)?;
    tracing::info!("metrics on http://{}{}", addr, metrics::PATH);
    Ok(Some(Arc::new(metrics)))
}

/// Opens every root and the access log once, so that a bad one stops the server at start with
/// its own error (and not each preforked child as it starts); the processes that serve open
/// their own.
fn check_roots_and_access_log(config: &Config) -> Result<(), ServeError> {
    virtual_hosts(config, Watching::Off)?;
    AccessLog::start_direct(&config.log.access).map_err(ServeError::AccessLog)?;
    Ok(())
}

/// The names the logs give the clients of each listener: `unix:PATH` for a Unix-domain one,
/// whose clients have no address; one small string per such listener for the life of the
/// process.
fn unix_listener_names(listeners: &Listeners) -> Vec<Option<&'static str>> {
    listeners
        .local_addrs
        .iter()
        .map(|addr| match addr {
            ListenAddr::Unix(_) => Some(&*Box::leak(addr.to_string().into_boxed_str())),
            ListenAddr::Tcp(_) => None,
        })
        .collect()
}

/// For prefork with the cache on, one change counter per site in memory the children share
/// (mapped before they are forked): each child reads its own inotify events, on its own ticks,
/// and a change the first of them reads is then stale for all at once.
fn shared_generations(config: &Config, model: ModelKind) -> Option<&'static [AtomicU64]> {
    if model != ModelKind::Prefork || !config.cache.enabled {
        return None;
    }
    fastpath_content::shared_generations(1 + config.hosts.len())
        .map_err(|e| tracing::warn!("children will see file changes one by one: {e}"))
        .ok()
}

/// What every process that serves starts from: the threaded models' one process, or each of
/// prefork's children.
struct ProcessPlan<'a> {
    config: &'a Config,
    handlers: usize,
    metrics: Option<Arc<Metrics>>,
    listeners: ListenerFacts,
    generations: Option<&'static [AtomicU64]>,
    kernel_bridge: Option<Arc<fastpath_kernel::BridgePath>>,
    switch: Option<privileges::Switch>,
}

impl ProcessPlan<'_> {
    /// Opens what the process's handlers share, as root, then drops privileges for good before
    /// it takes a connection: here for the threaded models, in each child for prefork, whose
    /// parent stays root to start children that can do the same (docs/operations.md says
    /// why).
    fn start(&self, process: Process) -> io::Result<Shared> {
        let shared = Shared::start(
            self.config,
            self.handlers,
            process.single_threaded,
            self.metrics.clone(),
            &self.listeners,
            self.generations,
            self.kernel_bridge.clone(),
        )
        .map_err(io::Error::other)?;
        if let Some(switch) = &self.switch {
            switch.apply()?;
        }
        Ok(shared)
    }
}

/// The drivers' settings from the configuration's limits and timeouts.
fn driver_config(config: &Config) -> DriverConfig {
    DriverConfig {
        max_connections: config.limits.max_connections,
        send_timeout: config.timeouts.send,
        linger_timeout: config.timeouts.linger,
        shutdown_timeout: config.timeouts.shutdown,
        ..DriverConfig::default()
    }
}

/// Writes the pid file, if one is configured: removed again when the value is dropped.
fn write_pid_file(config: &Config) -> Result<Option<reload::PidFile>, ServeError> {
    let Some(path) = &config.pid_file else {
        return Ok(None);
    };
    reload::PidFile::write(path)
        .map(Some)
        .map_err(|e| ServeError::PidFile(path.clone(), e))
}

/// What a reload hands to the new server: the listening sockets, systemd's variables and
/// the TLS session ticket keys.
struct Handover {
    sockets: Vec<(OwnedFd, String)>,
    pass_on: Vec<(&'static str, std::ffi::OsString)>,
    ticket_keys: Option<OwnedFd>,
}

/// Starts answering SIGHUP and SIGUSR2 (and changes of the TLS files) by handing `handover`
/// to a successor: on the prefork parent's turns, or on a thread of its own for the other
/// models.
fn answer_reloads(
    config: &Config,
    model: ModelKind,
    handover: Handover,
    notify: &Option<Arc<Notify>>,
) -> Result<(), ServeError> {
    let mut reloader = reload::Reloader::new(
        config.source.clone(),
        handover.sockets,
        handover.pass_on,
        handover.ticket_keys,
        reload::WatchedFiles::new(config.tls_files()),
        notify.clone(),
    );
    if model == ModelKind::Prefork {
        // The parent of the children answers on its turns: it must stay single-threaded.
        fastpath_drivers::signals::set_supervisor(Box::new(move || reloader.poll()));
        return Ok(());
    }
    std::thread::Builder::new()
        .name("fastpath-reload".into())
        .spawn(move || {
            // Asleep until a signal comes (the bound is only a safety net).
            while !fastpath_drivers::signals::draining() {
                fastpath_drivers::signals::wait_for_signal(std::time::Duration::from_secs(1));
                reloader.poll();
            }
        })
        .map_err(ServeError::Run)?;
    Ok(())
}

/// Tells systemd the server is ready, with its pid and `status`, and starts the watchdog's
/// pings if it asked for them: listening, with every root and the log checked, clients are
/// served from here on.
fn say_ready(notify: &Arc<Notify>, systemd: &Systemd, status: &str) {
    notify.watch(systemd);
    notify.send(&format!(
        "READY=1\nMAINPID={}\nSTATUS={status}",
        std::process::id()
    ));
}
