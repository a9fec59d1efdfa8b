//! [`serve`]: runs a service the way fastpath's own services run.

use fastpath_drivers::{
    bind_listeners_with, run, signals, take_inherited, uring_available, worker_count, DriverConfig,
    Handler, ListenAddr, ListenOptions, Listeners, ModelKind, ModelSettings,
};
use std::io;

/// Where and how a service runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServiceOptions {
    /// Addresses to listen on: TCP, or Unix-domain sockets (`unix:PATH`).
    pub listen: Vec<ListenAddr>,
    /// The concurrency model. `Uring` falls back to `Epoll`, with a log line saying why,
    /// where io_uring cannot run.
    pub model: ModelKind,
    /// Workers for the event-loop models; 0 means one per CPU.
    pub workers: usize,
    /// The settings of the models that have any.
    pub settings: ModelSettings,
    /// Limits and timeouts the driver enforces.
    pub driver: DriverConfig,
    /// Whether the client speaks first (then the kernel holds a new connection back until it
    /// has sent something: TCP_DEFER_ACCEPT). False for a service that greets its clients.
    pub client_speaks_first: bool,
}

impl ServiceOptions {
    /// Listening on `listen`, with the defaults for everything else (epoll, a worker per CPU);
    /// set the other fields on the value.
    pub fn listening(listen: Vec<ListenAddr>) -> Self {
        ServiceOptions {
            listen,
            ..ServiceOptions::default()
        }
    }
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            listen: Vec::new(),
            model: ModelKind::Epoll,
            workers: 0,
            settings: ModelSettings::default(),
            driver: DriverConfig::default(),
            client_speaks_first: true,
        }
    }
}

/// Runs the service whose worker handlers `make_handler(worker)` builds, under `name` in the
/// logs, until SIGTERM or SIGQUIT (a graceful stop: new clients are refused, connections are
/// told through [`Handler::on_drain`] and given the driver's grace period) or SIGINT (at
/// once). Binds the listeners (an address in use is an error naming it) or, started by
/// systemd's socket activation (`LISTEN_FDS` for this process), serves the sockets it passed
/// instead; logs one line saying where it listens and on which model, and returns once every
/// worker has stopped. Call it before starting threads: it takes the activation variables out
/// of the environment.
pub fn serve<H, F>(name: &str, options: &ServiceOptions, make_handler: F) -> io::Result<()>
where
    H: Handler,
    F: Fn(usize) -> H + Sync,
{
    fastpath_drivers::ignore_sigpipe();
    let stop = signals::install_stop_handler();
    let mut kind = options.model;
    if kind == ModelKind::Uring {
        if let Err(why) = uring_available() {
            tracing::warn!("{name}: io_uring cannot run here ({why}): using the epoll model");
            kind = ModelKind::Epoll;
        }
    }
    let model = kind.with(&options.settings);
    let workers = worker_count(options.workers);
    let layout = model.layout(workers);
    let inherited = take_inherited()
        .map_err(|e| io::Error::new(e.kind(), format!("socket activation: {e}")))?;
    let activated = !inherited.is_empty();
    let listeners = if activated {
        Listeners::from_inherited(inherited, layout.listener_sets)
            .map_err(|e| io::Error::new(e.kind(), format!("socket activation: {e}")))?
    } else {
        bind(options, layout.listener_sets)?
    };
    let addrs: Vec<String> = listeners
        .local_addrs
        .iter()
        .map(|a| a.to_string())
        .collect();
    tracing::info!(
        "{name}: listening on {} ({}{} model, {})",
        addrs.join(", "),
        if activated { "inherited; " } else { "" },
        model.name(),
        model.shape(workers)
    );
    run(model, listeners, &options.driver, make_handler, stop)?;
    tracing::info!("{name}: stopped");
    Ok(())
}

/// Binds `options.listen`, with TCP_DEFER_ACCEPT where the client speaks first.
fn bind(options: &ServiceOptions, sets: usize) -> io::Result<Listeners> {
    let listen = if options.client_speaks_first {
        ListenOptions::default()
    } else {
        ListenOptions::server_speaks_first()
    };
    let specs: Vec<_> = options
        .listen
        .iter()
        .map(|addr| (addr.clone(), listen))
        .collect();
    bind_listeners_with(&specs, sets).map_err(|e| {
        let addrs: Vec<String> = options.listen.iter().map(|a| a.to_string()).collect();
        io::Error::new(
            e.kind(),
            format!("cannot listen on {}: {e}", addrs.join(", ")),
        )
    })
}
