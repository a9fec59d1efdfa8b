//! The fastpath web server: configuration, virtual hosts, the HTTP connection handler and
//! the logs, composed over the drivers, protocol, content and hand-over layers.
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
mod clock;
pub mod config;
mod error_log;
mod hand_over;
mod handler;
mod kernel_bridge;
mod metrics;
mod privileges;
mod proxy;
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
use fastpath_drivers::{bind_listeners_with, DriverConfig, ListenAddr, Listeners, Process};
use fastpath_drivers::{Model as DriverModel, ModelKind};
use fastpath_handover::{BackendConfig, BackendState, Routes, SharedCache};

pub use access_log::AccessLog;
pub use error_log::init_error_log;

use crate::config::{Config, HostConfig};
use crate::handler::{HandlerSettings, HttpHandler};
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
    Ok(VirtualHosts::new(sites, default, names))
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
        unix_listeners: &[Option<&'static str>],
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
        .map_err(ServeError::AccessLog)?;
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
                unix_listeners: unix_listeners.to_vec(),
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
    inherited: Inherited,
) -> Result<(), ServeError> {
    let Inherited {
        mut systemd,
        mut handed,
    } = inherited;
    fastpath_drivers::ignore_sigpipe();
    // Decided before anything is bound or opened, so a refusal leaves nothing behind.
    let switch = privileges::plan(config.user.as_ref(), config.group, config.run_as_root)
        .map_err(ServeError::Privileges)?;
    for note in config.model_notes() {
        tracing::info!("{note}");
    }
    let model = driver_model(config);
    let workers = worker_count(config.workers);
    let layout = model.layout(workers);
    let inherited = std::mem::replace(&mut systemd.sockets, Ok(Vec::new())).map_err(|e| {
        ServeError::Bind(io::Error::new(e.kind(), format!("socket activation: {e}")))
    })?;
    // Sockets systemd passed to the first server stay systemd's across reloads.
    let from_systemd = handed.are_systemds();
    let handed_sockets = std::mem::take(&mut handed.sockets);
    let (inherited, mut handed_sockets) = if from_systemd {
        let labels = handed_sockets
            .into_iter()
            .map(|(fd, _)| {
                let label = format!("systemd socket fd {}", std::os::fd::AsRawFd::as_raw_fd(&fd));
                (fd, label)
            })
            .collect();
        (labels, Vec::new())
    } else {
        (inherited, handed_sockets)
    };
    let activated = !inherited.is_empty();
    let labels: Vec<String> = inherited.iter().map(|(_, label)| label.clone()).collect();
    let reloaded = !handed_sockets.is_empty();
    if reloaded {
        reload::name_process();
    }
    // HTTP's client speaks first: every listener defers accepting (TCP) until it has.
    let options = |addr: &ListenAddr| config.listen_options(addr);
    let listeners = if reloaded {
        reload::listeners(
            &config.listen,
            &options,
            &mut handed_sockets,
            layout.listener_sets,
        )
    } else if inherited.is_empty() {
        let specs: Vec<_> = config
            .listen
            .iter()
            .map(|a| (a.clone(), options(a)))
            .collect();
        bind_listeners_with(&specs, layout.listener_sets)
    } else {
        // The socket unit says where to listen: `listen` is not bound as well, as a server
        // that also bound its own addresses would hold ports the unit does not know of.
        tracing::info!(
            "socket activation: serving the {} socket{} systemd passed; `listen` is not used",
            labels.len(),
            if labels.len() == 1 { "" } else { "s" }
        );
        Listeners::from_inherited(inherited, layout.listener_sets)
    }
    .map_err(ServeError::Bind)?;
    if !listeners.features.defer_accept {
        tracing::info!("TCP_DEFER_ACCEPT is not available; accepting connections before their first bytes arrive");
    }
    let shape = model.shape(workers);
    for (i, addr) in listeners.local_addrs.iter().enumerate() {
        match labels.get(i) {
            Some(label) => {
                tracing::info!("listening on {addr} ({label}; {}, {shape})", model.name())
            }
            None => tracing::info!("listening on {addr} ({}, {shape})", model.name()),
        }
    }
    let addrs: Vec<String> = listeners
        .local_addrs
        .iter()
        .map(ToString::to_string)
        .collect();
    let status = format!(
        "serving on {} ({}, {shape})",
        addrs.join(", "),
        model.name()
    );
    let mut listeners = listeners;
    let metrics = match config.metrics.listen {
        Some(addr) => Some(Arc::new(metrics_listener(
            config,
            addr,
            &mut listeners,
            layout,
            &mut handed_sockets,
            reloaded,
        )?)),
        None => None,
    };
    if reloaded {
        reload::close_unused(handed_sockets);
    }
    // The clients of a Unix-domain listener have no address: the logs name them by the
    // listener, `unix:PATH`. One small string per such listener for the life of the process.
    let unix_listeners: Vec<Option<&'static str>> = listeners
        .local_addrs
        .iter()
        .map(|addr| match addr {
            ListenAddr::Unix(_) => Some(&*Box::leak(addr.to_string().into_boxed_str())),
            ListenAddr::Tcp(_) => None,
        })
        .collect();
    let driver_config = DriverConfig {
        max_connections: config.limits.max_connections,
        send_timeout: config.timeouts.send,
        linger_timeout: config.timeouts.linger,
        shutdown_timeout: config.timeouts.shutdown,
        ..DriverConfig::default()
    };
    // Open every root and the access log once here, so that a bad one stops the server at
    // start with its own error (and not each preforked child as it starts); the processes
    // that serve open their own.
    virtual_hosts(config, Watching::Off)?;
    AccessLog::start_direct(&config.log.access).map_err(ServeError::AccessLog)?;
    // Loaded while the process is still root, once: the workers and prefork's children
    // share its maps (they go when the last process holding them exits).
    let kernel_bridge = kernel_bridge::load(config).map_err(ServeError::Kernel)?;
    if let Some(switch) = &switch {
        tracing::info!("serving as {}", switch.who());
    }
    // Every process that serves opens its roots and its access log as root, then drops for
    // good before it takes a connection: here for the threaded models, in each child for
    // prefork, whose parent stays root to start children that can do the same
    // (docs/operations.md says why).
    // prefork's children each read their own inotify events, on their own ticks; one change
    // counter per site in memory they all share (mapped here, before they are forked) makes
    // a change the first of them reads stale for all at once.
    let generations = if model.kind() == ModelKind::Prefork && config.cache.enabled {
        fastpath_content::shared_generations(1 + config.hosts.len())
            .map_err(|e| tracing::warn!("children will see file changes one by one: {e}"))
            .ok()
    } else {
        None
    };
    let start = |process: Process| {
        let shared = Shared::start(
            config,
            layout.handlers,
            process.single_threaded,
            metrics.clone(),
            &unix_listeners,
            generations,
            kernel_bridge.clone(),
        )
        .map_err(io::Error::other)?;
        if let Some(switch) = &switch {
            switch.apply()?;
        }
        Ok(shared)
    };
    // Duplicates of every listening socket, for a successor on reload or upgrade. Systemd's
    // are passed once each (every worker holds a copy of the same socket).
    let mut handover = Vec::new();
    for (w, set) in listeners.per_worker.iter().enumerate() {
        if activated && w > 0 {
            break;
        }
        for (i, fd) in set.iter().enumerate() {
            let name = if activated {
                "systemd".to_owned()
            } else if let Some(addr) = config.listen.get(i) {
                addr.to_string()
            } else {
                // Only the metrics listener comes after the site's.
                metrics_name(config.metrics.listen)
            };
            handover.push((fd.try_clone().map_err(ServeError::Bind)?, name));
        }
    }
    let notify = Notify::start(&mut systemd);
    let _pid_file = match &config.pid_file {
        Some(path) => {
            Some(reload::PidFile::write(path).map_err(|e| ServeError::PidFile(path.clone(), e))?)
        }
        None => None,
    };
    let mut reloader = reload::Reloader::new(
        config.source.clone(),
        handover,
        std::mem::take(&mut systemd.pass_on),
        notify.clone(),
    );
    if model.kind() == ModelKind::Prefork {
        // The parent of the children answers on its turns: it must stay single-threaded.
        fastpath_drivers::signals::set_supervisor(Box::new(move || reloader.poll()));
    } else {
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
    }
    // The server this one replaces stops from here on.
    handed.ready();
    if let Some(notify) = &notify {
        notify.watch(&systemd);
        // Listening, with every root and the log checked: clients are served from here on.
        notify.send(&format!(
            "READY=1\nMAINPID={}\nSTATUS={status}",
            std::process::id()
        ));
    }
    let served = fastpath_drivers::run_service(
        model,
        listeners,
        &driver_config,
        stop,
        &start,
        |shared: &Shared, worker| shared.handler(worker),
    )
    .map_err(ServeError::Run);
    if let Some(notify) = &notify {
        // Said already when a graceful stop began; this covers a stop at once (SIGINT) and a
        // failure.
        notify.stopping();
    }
    served
}

/// The name the metrics listener's sockets are handed over under on a reload.
fn metrics_name(addr: Option<std::net::SocketAddr>) -> String {
    match addr {
        Some(addr) => format!("metrics {addr}"),
        None => "metrics".to_owned(),
    }
}

/// Binds the metrics listener at `addr` for every worker, after the others (so that its index
/// tells a scrape's connection apart), and maps the counters every worker will write: before
/// any worker or child process starts, so that they all share them.
fn metrics_listener(
    config: &Config,
    addr: std::net::SocketAddr,
    listeners: &mut Listeners,
    layout: fastpath_drivers::Layout,
    handed: &mut Vec<(OwnedFd, String)>,
    reloaded: bool,
) -> Result<Metrics, ServeError> {
    if addr.port() != 0 && listeners.local_addrs.contains(&ListenAddr::Tcp(addr)) {
        return Err(ServeError::Bind(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "[metrics] listen: {addr} is also where the site listens; metrics need an \
                 address of their own"
            ),
        )));
    }
    // A reload's successor takes the metrics sockets handed over, as it does the site's.
    let (fds, bound, _) = reload::adopt_or_bind(
        addr,
        &metrics_name(Some(addr)),
        handed,
        layout.listener_sets,
        reloaded,
    )
    .map_err(ServeError::Bind)?;
    let index = listeners.local_addrs.len();
    for (sockets, socket) in listeners.per_worker.iter_mut().zip(fds) {
        sockets.push(socket);
    }
    listeners.local_addrs.push(ListenAddr::Tcp(bound));
    let names = config.backends.iter().map(|b| b.name.clone()).collect();
    let metrics = Metrics::new(layout.handlers, names, index)
        .map_err(|e| ServeError::Run(io::Error::new(e.kind(), format!("metrics: {e}"))))?;
    tracing::info!("metrics on http://{}{}", bound, metrics::PATH);
    Ok(metrics)
}
