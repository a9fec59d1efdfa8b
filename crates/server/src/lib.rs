//! The fastpath web server: configuration, virtual hosts, the HTTP connection handler and
//! the logs, composed over the drivers, protocol and content layers.
//!
//! [`serve`] binds the listeners, opens every site, starts the access log and runs the
//! concurrency model named in the configuration until the stop flag is set. The handler it
//! runs is the same for every model: it parses requests with `fastpath-http`, asks
//! `fastpath-content` what each gets, and queues the response on the connection.
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
mod handler;
mod proxy;
mod vhosts;

use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use fastpath_content::handover::{BackendConfig, BackendState, ResponseCache, Routes};
use fastpath_content::{CacheLimits, ContentCache, Site, SiteOptions};
use fastpath_drivers::Model as DriverModel;
use fastpath_drivers::{bind_listeners, DriverConfig};

pub use access_log::AccessLog;
pub use error_log::init_error_log;

use crate::config::{Config, HostConfig, Model};
use crate::handler::{HandlerSettings, HttpHandler};
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
    /// The event loops failed.
    Run(io::Error),
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Site(root, e) => {
                write!(f, "cannot open document root {}: {e}", root.display())
            }
            ServeError::Bind(e) => write!(f, "cannot listen: {e}"),
            ServeError::AccessLog(e) => write!(f, "cannot open the access log: {e}"),
            ServeError::Run(e) => write!(f, "server failed: {e}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// Number of workers for a configured count: 0 means one per CPU.
pub fn worker_count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn open_site(host: &HostConfig, cache: bool) -> Result<Site, ServeError> {
    let mut site = Site::open(
        &host.root,
        SiteOptions {
            index: host.index.clone(),
            dotfiles: host.dotfiles,
            precompressed: host.precompressed,
        },
    )
    .map_err(|e| ServeError::Site(host.root.clone(), e))?;
    if cache {
        if let Err(e) = site.watch() {
            tracing::warn!(
                "cannot watch {} for changes ({e}); its files will not be cached",
                host.root.display()
            );
        }
    }
    Ok(site)
}

/// Opens the sites and maps every configured name to its site.
fn virtual_hosts(config: &Config) -> Result<VirtualHosts, ServeError> {
    let cache = config.cache.enabled;
    let mut sites = vec![open_site(&config.default_host, cache)?];
    let mut names = Vec::new();
    let mut default = 0;
    for host in &config.hosts {
        sites.push(open_site(host, cache)?);
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
fn driver_model(model: Model) -> DriverModel {
    match model {
        // epoll until a benchmark shows io_uring ahead across the SPECweb mix; then `auto`
        // becomes io_uring where uring_available() says it can run.
        Model::Auto | Model::Epoll => DriverModel::Epoll,
        Model::Uring => match fastpath_drivers::uring_available() {
            Ok(()) => DriverModel::Uring,
            Err(reason) => {
                tracing::warn!("io_uring unavailable ({reason}); using epoll");
                DriverModel::Epoll
            }
        },
    }
}

/// Runs the server described by `config` until `stop` is set.
pub fn serve(config: &Config, stop: &'static AtomicBool) -> Result<(), ServeError> {
    fastpath_drivers::ignore_sigpipe();
    let hosts = Arc::new(virtual_hosts(config)?);
    let settings = Arc::new(HandlerSettings::from_config(config));
    let workers = worker_count(config.workers);
    let mut model = driver_model(config.model);
    let routes = Arc::new(Routes::new(config.routes.clone()));
    if !routes.is_empty() && model == DriverModel::Uring {
        // The io_uring loop does not run upstream connections yet.
        tracing::warn!(
            "hand-over routes are configured and the uring model cannot run them yet; using epoll"
        );
        model = DriverModel::Epoll;
    }
    let backend_configs: Vec<Arc<BackendConfig>> =
        config.backends.iter().cloned().map(Arc::new).collect();
    let model_name = match model {
        DriverModel::Epoll => "epoll",
        DriverModel::Uring => "uring",
    };
    let listeners = bind_listeners(&config.listen, workers).map_err(ServeError::Bind)?;
    if !listeners.features.defer_accept {
        tracing::info!("TCP_DEFER_ACCEPT is not available; accepting connections before their first bytes arrive");
    }
    for addr in &listeners.local_addrs {
        tracing::info!("listening on {addr} ({model_name}, {workers} workers)");
    }
    let access_log = AccessLog::start(&config.log.access).map_err(ServeError::AccessLog)?;
    // The budget is for the whole server: each worker keeps its own share.
    let cache_limits = CacheLimits {
        max_memory: (config.cache.max_memory / workers as u64) as usize,
        max_file_size: config.cache.max_file_size,
        max_open_files: config.cache.max_open_files / workers,
    };
    let driver_config = DriverConfig {
        max_connections: config.limits.max_connections,
        send_timeout: config.timeouts.send,
        linger_timeout: config.timeouts.linger,
        ..DriverConfig::default()
    };
    let result = fastpath_drivers::run(
        model,
        listeners,
        &driver_config,
        |_worker| {
            let backends = backend_configs
                .iter()
                .map(|b| BackendState::new(b.clone(), (b.max_connections / workers).max(1)))
                .collect();
            HttpHandler::new(
                hosts.clone(),
                settings.clone(),
                access_log.buffer(),
                ContentCache::new(cache_limits),
                routes.clone(),
                backends,
                ResponseCache::new(
                    config.handover.cache_memory / workers,
                    config.handover.cache_max_response,
                ),
            )
        },
        stop,
    );
    access_log.finish();
    result.map_err(ServeError::Run)
}
