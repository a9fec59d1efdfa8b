//! The concurrency models: what each is called, how it lays out its workers, and the one entry
//! point that runs any of them ([`run_service`], or [`run`] for a service with no per-process
//! state). A model is described here and nowhere else: a configuration names it by
//! [`ModelKind::name`], and a server sizes its budgets by [`Model::layout`].

use std::io;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::pools::{percore, prefork, threads};
use crate::{
    loops, Handler, Listeners, PercoreConfig, PreforkConfig, ThreadsConfig, Transported, Transports,
};

/// Transport settings shared by every model.

#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Connections open at once across all workers; past it new ones are refused.
    pub max_connections: usize,
    /// A connection whose queued output makes no progress for this long is closed.
    pub send_timeout: Duration,
    /// After a graceful close, late input is discarded for at most this long.
    pub linger_timeout: Duration,
    /// Input a handler may leave unconsumed before the connection is aborted; handlers enforce
    /// their own, smaller limits, this one only guards against a handler that does not.
    pub max_input: usize,
    /// How long a graceful stop lets open connections finish before closing them.
    pub shutdown_timeout: Duration,
    /// What each listener's connections run under (TLS); plain where it names none.
    pub transports: Transports,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            max_connections: 10_000,
            send_timeout: Duration::from_secs(60),
            linger_timeout: Duration::from_secs(2),
            max_input: 1024 * 1024,
            shutdown_timeout: Duration::from_secs(30),
            transports: Transports::default(),
        }
    }
}

/// A concurrency model: how connections are spread over threads or processes and how a
/// worker learns that its connections can make progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Model {
    /// One edge-triggered epoll loop per worker, with a system call per read and per send.
    Epoll,
    /// One io_uring completion loop per worker: multishot accept and receive, and the sends of
    /// a whole loop iteration submitted in one system call. Check [`uring_available`] first.
    Uring,
    /// One epoll loop per CPU, pinned to it, sharing nothing.
    Percore(PercoreConfig),
    /// A pool of threads, each serving one connection at a time, with a bound on how many run
    /// at once.
    Threads(ThreadsConfig),
    /// A pool of single-threaded child processes, each serving one connection at a time. Must
    /// be started before the process has other threads.
    Prefork(PreforkConfig),
}

/// A model without its settings: what a configuration file or command line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    /// See [`Model::Epoll`].
    Epoll,
    /// See [`Model::Uring`].
    Uring,
    /// See [`Model::Percore`].
    Percore,
    /// See [`Model::Threads`].
    Threads,
    /// See [`Model::Prefork`].
    Prefork,
}

impl ModelKind {
    /// Every model, in the order help texts and error messages list them.
    pub const ALL: [ModelKind; 5] = [
        ModelKind::Epoll,
        ModelKind::Uring,
        ModelKind::Percore,
        ModelKind::Threads,
        ModelKind::Prefork,
    ];

    /// The model's name, as configurations spell it.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Epoll => "epoll",
            ModelKind::Uring => "uring",
            ModelKind::Percore => "percore",
            ModelKind::Threads => "threads",
            ModelKind::Prefork => "prefork",
        }
    }

    /// The model called `name` (exact, lower-case), if any.
    pub fn from_name(name: &str) -> Option<ModelKind> {
        ModelKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// One line on what the model is, for help texts.
    pub fn summary(self) -> &'static str {
        match self {
            ModelKind::Epoll => "an epoll event loop per worker thread",
            ModelKind::Uring => "an io_uring completion loop per worker thread",
            ModelKind::Percore => "one pinned event loop per CPU, sharing nothing",
            ModelKind::Threads => {
                "a pool of threads, one connection each, a bounded number running at once"
            }
            ModelKind::Prefork => "a pool of single-threaded processes, one connection each",
        }
    }

    /// Whether the model ignores a configured worker count (it has its own sizing).
    pub fn sizes_itself(self) -> bool {
        !matches!(self, ModelKind::Epoll | ModelKind::Uring)
    }

    /// The model of this kind, with its settings taken from `settings`.
    pub fn with(self, settings: &ModelSettings) -> Model {
        match self {
            ModelKind::Epoll => Model::Epoll,
            ModelKind::Uring => Model::Uring,
            ModelKind::Percore => Model::Percore(settings.percore),
            ModelKind::Threads => Model::Threads(settings.threads),
            ModelKind::Prefork => Model::Prefork(settings.prefork),
        }
    }
}

/// The settings of the models that have any, for [`ModelKind::with`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelSettings {
    /// For [`Model::Percore`].
    pub percore: PercoreConfig,
    /// For [`Model::Threads`].
    pub threads: ThreadsConfig,
    /// For [`Model::Prefork`].
    pub prefork: PreforkConfig,
}

/// How a model spreads its work, for sizing what the handlers share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Layout {
    /// Sets of listening sockets to bind (one per worker that accepts on its own).
    pub listener_sets: usize,
    /// The most handlers alive at once: each should get this share of a server-wide budget.
    pub handlers: usize,
    /// What holds one handler ("worker", "core", "thread", "child process"), for messages.
    pub holder: &'static str,
}

impl Model {
    /// The model's kind, without settings.
    pub fn kind(&self) -> ModelKind {
        match self {
            Model::Epoll => ModelKind::Epoll,
            Model::Uring => ModelKind::Uring,
            Model::Percore(_) => ModelKind::Percore,
            Model::Threads(_) => ModelKind::Threads,
            Model::Prefork(_) => ModelKind::Prefork,
        }
    }

    /// The model's name, as the configuration spells it.
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// How the model lays out its work given `workers` worker threads (used by the models
    /// that have workers: epoll and uring).
    pub fn layout(&self, workers: usize) -> Layout {
        let workers = workers.max(1);
        match self {
            Model::Epoll | Model::Uring => Layout {
                listener_sets: workers,
                handlers: workers,
                holder: "worker",
            },
            Model::Percore(_) => {
                let cores = percore::allowed_cpus().len().max(1);
                Layout {
                    listener_sets: cores,
                    handlers: cores,
                    holder: "core",
                }
            }
            Model::Threads(threads) => Layout {
                listener_sets: 1,
                handlers: threads.threads.max(1),
                holder: "thread",
            },
            Model::Prefork(prefork) => Layout {
                listener_sets: 1,
                handlers: prefork.max_children.max(1),
                holder: "child process",
            },
        }
    }

    /// The model's shape in a few words, for the log line that says where the server listens:
    /// "2 workers", "4 cores", "64 threads", "2 to 16 processes".
    pub fn shape(&self, workers: usize) -> String {
        let layout = self.layout(workers);
        match self {
            Model::Epoll | Model::Uring | Model::Percore(_) => {
                format!("{} {}s", layout.handlers, layout.holder)
            }
            Model::Threads(threads) => format!("{} threads", threads.threads),
            Model::Prefork(prefork) => {
                format!("{} to {} processes", prefork.start, prefork.max_children)
            }
        }
    }
}

/// Checks whether the io_uring model can run on this kernel: a ring can be set up (it can be
/// compiled out, or disabled by `kernel.io_uring_disabled`), it has timed waits and every
/// operation the model uses, and a provided-buffer ring can be registered. The error says
/// what is missing.
pub fn uring_available() -> Result<(), io::Error> {
    loops::uring::probe()
}

/// A configured number of workers (or threads running at once): 0 means one per CPU.
pub fn worker_count(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The process a service's shared state is started in, given to [`run_service`]'s `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Process {
    /// The process must stay single-threaded (a preforked child): the service may not start
    /// threads of its own and does their work on its ticks instead.
    pub single_threaded: bool,
}

/// Runs `model` until `stop` is set; `make_handler(worker)` builds each worker's handler on
/// the thread (or, for prefork, in the child process) that uses it.
pub fn run<H, F>(
    model: Model,
    listeners: Listeners,
    config: &DriverConfig,
    make_handler: F,
    stop: &AtomicBool,
) -> io::Result<()>
where
    H: Handler,
    F: Fn(usize) -> H + Sync,
{
    run_service(
        model,
        listeners,
        config,
        stop,
        &|_| Ok(()),
        |_: &(), worker| make_handler(worker),
    )
}

/// Runs `model` until `stop` is set, for a service with state shared by the handlers of one
/// process: `start` builds it once in every process that serves (in each preforked child,
/// after the fork; once here for the other models), `make_handler(&shared, worker)` builds
/// each worker's handler from it, and it is dropped when that process stops serving.
pub fn run_service<S, H, F>(
    model: Model,
    mut listeners: Listeners,
    config: &DriverConfig,
    stop: &AtomicBool,
    start: &(dyn Fn(Process) -> io::Result<S> + Sync),
    make_handler: F,
) -> io::Result<()>
where
    S: Sync,
    H: Handler,
    F: Fn(&S, usize) -> H + Sync,
{
    // Unix sockets' files go once every worker has stopped, whatever the model does with the
    // sockets meanwhile.
    let _unix_files = std::mem::take(&mut listeners.unix_files);
    if let Model::Prefork(prefork) = model {
        return prefork::run(listeners, config, prefork, stop, &|child| {
            let shared = start(Process {
                single_threaded: true,
            })?;
            let handler = make_handler(&shared, child.slot());
            child.serve(Transported::new(handler, config.transports.clone()))
        });
    }
    let shared = start(Process {
        single_threaded: false,
    })?;
    let make_handler =
        |worker| Transported::new(make_handler(&shared, worker), config.transports.clone());
    match model {
        Model::Epoll => {
            loops::run::<loops::epoll::Epoll, _, _>(listeners, config, &make_handler, stop)
        }
        Model::Uring => {
            loops::run::<loops::uring::Uring, _, _>(listeners, config, &make_handler, stop)
        }
        Model::Percore(percore) => percore::run(listeners, config, &make_handler, stop, percore),
        Model::Threads(threads) => threads::run(listeners, config, &make_handler, stop, threads),
        Model::Prefork(_) => unreachable!("started above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in ModelKind::ALL {
            assert_eq!(ModelKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(ModelKind::from_name("Epoll"), None);
    }

    #[test]
    fn layouts() {
        assert_eq!(Model::Epoll.layout(3).listener_sets, 3);
        assert_eq!(Model::Uring.layout(0).handlers, 1);
        let threads = Model::Threads(ThreadsConfig {
            threads: 8,
            ..ThreadsConfig::default()
        });
        assert_eq!(threads.layout(3).listener_sets, 1);
        assert_eq!(threads.layout(3).handlers, 8);
        assert_eq!(threads.shape(3), "8 threads");
        assert_eq!(Model::Epoll.shape(2), "2 workers");
    }
}
