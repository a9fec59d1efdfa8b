//! Prometheus metrics, counted per worker without a lock and summed by the scraper.
//!
//! Every worker owns one block of counters in a shared anonymous mapping made before any
//! worker starts (before the fork, for the prefork model, so that every child writes into
//! the same memory and any of them can answer a scrape). A block has one writer, its worker,
//! so a count is a relaxed load and store rather than a locked read-modify-write, and blocks
//! are cache-line aligned so that no two workers write the same line. A scrape, answered by
//! whichever worker the metrics listener's connection lands on, reads every block with
//! relaxed loads and writes the text exposition format (version 0.0.4), one series per
//! worker (`worker` label). The caches belong to their workers and are not shared: each
//! worker copies its caches' figures into its block on every tick (100 ms).

use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fastpath_content::CacheStats;
use fastpath_http::Method;
use fastpath_sys::{ProcessShared, SharedMapping};

/// The one path the metrics listener serves.
pub(crate) const PATH: &str = "/metrics";
/// The fields of a scrape's answer.
pub(crate) const CONTENT_TYPE: &[u8] =
    b"Content-Type: text/plain; version=0.0.4; charset=utf-8\r\nCache-Control: no-store\r\n";

/// Methods counted under their own name; any other is `other`.
const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE",
];
const OTHER_METHOD: usize = METHODS.len();
const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
/// Upper bounds of the backend response time buckets, in seconds: the Prometheus client
/// libraries' default buckets.
const BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// The same bounds in microseconds, as they are compared on the request path.
const BUCKETS_MICROS: [u64; 11] = [
    5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
    10_000_000,
];

/// A cache figure's name suffix, type, help (`{}` for the cache) and place in the block.
type CacheFigure = (
    &'static str,
    &'static str,
    &'static str,
    fn(&CacheBlock) -> &AtomicU64,
);

/// One cache's figures, as a worker last published them.
#[derive(Default)]
struct CacheBlock {
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    memory: AtomicU64,
    entries: AtomicU64,
}

/// One worker's counters.
#[repr(C, align(64))]
#[derive(Default)]
struct WorkerBlock {
    /// Responses by method and status class.
    requests: [[AtomicU64; CLASSES.len()]; METHODS.len() + 1],
    body_bytes: AtomicU64,
    opened: AtomicU64,
    closed: AtomicU64,
    /// Connections waiting between requests (a gauge).
    idle: AtomicU64,
    content: CacheBlock,
    response: CacheBlock,
}

/// One worker's figures for the status page (`status` module): the exposition's, by
/// worker.
pub(crate) struct WorkerStatus {
    pub(crate) worker: usize,
    /// Requests answered by status class (1xx to 5xx).
    pub(crate) requests_by_class: [u64; 5],
    pub(crate) body_bytes: u64,
    pub(crate) connections_total: u64,
    pub(crate) connections_open: u64,
    pub(crate) connections_idle: u64,
    /// Hits, misses, memory and entries, as last published.
    pub(crate) content_cache: [u64; 4],
    pub(crate) response_cache: [u64; 4],
}

/// The status classes, for the status page.
pub(crate) const STATUS_CLASSES: [&str; 5] = CLASSES;

/// One worker's counters for one backend.
#[repr(C, align(64))]
#[derive(Default)]
struct BackendBlock {
    requests: AtomicU64,
    errors: AtomicU64,
    /// Responses per bucket, not cumulative (made so when scraped); the last one is +Inf.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

/// Adds to a counter only its worker writes: a plain load and store, no locked instruction.
#[inline]
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

// SAFETY: atomics (and arrays and a struct of them) only, valid at zero; no pointers, no drop.
unsafe impl ProcessShared for WorkerBlock {}
// SAFETY: as above.
unsafe impl ProcessShared for BackendBlock {}

/// The counters of every worker, in memory shared by all of them.
pub(crate) struct Metrics {
    /// One block per worker.
    workers: SharedMapping<WorkerBlock>,
    /// One block per worker and backend, a worker's backends together.
    backend_blocks: SharedMapping<BackendBlock>,
    backends: Vec<String>,
    /// The index of the metrics listener among the bound addresses.
    listener: usize,
    /// When the server started, in seconds since the epoch.
    started: f64,
    /// The TLS listeners' handshakes, when there are TLS listeners.
    tls: Option<Arc<fastpath_tls::HandshakeCounts>>,
}

impl Metrics {
    /// Maps zeroed counters for `workers` workers and the named backends; `listener` is the
    /// index of the address scrapes come in on. Must be called before the workers (or
    /// processes) start, so that they all share it.
    pub(crate) fn new(
        workers: usize,
        backends: Vec<String>,
        listener: usize,
        tls: Option<Arc<fastpath_tls::HandshakeCounts>>,
    ) -> io::Result<Self> {
        let workers = workers.max(1);
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        Ok(Metrics {
            workers: SharedMapping::new(workers)?,
            backend_blocks: SharedMapping::new(workers * backends.len())?,
            backends,
            listener,
            started,
            tls,
        })
    }

    /// The index of the listening address scrapes come in on.
    pub(crate) fn listener(&self) -> usize {
        self.listener
    }

    fn worker(&self, worker: usize) -> &WorkerBlock {
        &self.workers[worker]
    }

    fn backend(&self, worker: usize, backend: usize) -> &BackendBlock {
        assert!(backend < self.backends.len());
        &self.backend_blocks[worker * self.backends.len() + backend]
    }

    /// The counters worker `worker` writes. A model's worker numbers are below the count the
    /// mapping was made for; one that is not (never expected) shares the last block.
    pub(crate) fn for_worker(self: &Arc<Self>, worker: usize) -> WorkerMetrics {
        let worker = worker.min(self.workers.len() - 1);
        WorkerMetrics {
            metrics: Arc::clone(self),
            worker,
            block: self.worker(worker),
        }
    }

    /// Each worker's figures that have served, as the exposition shows them, for the
    /// status page; and when the server started.
    pub(crate) fn status(&self) -> (f64, Vec<WorkerStatus>) {
        let workers = (0..self.workers.len())
            .filter(|&w| self.worker(w).opened.load(Relaxed) > 0)
            .map(|w| {
                let b = self.worker(w);
                let mut by_class = [0u64; CLASSES.len()];
                for classes in &b.requests {
                    for (c, count) in classes.iter().enumerate() {
                        by_class[c] += count.load(Relaxed);
                    }
                }
                let cache = |c: &CacheBlock| {
                    [
                        c.hits.load(Relaxed),
                        c.misses.load(Relaxed),
                        c.memory.load(Relaxed),
                        c.entries.load(Relaxed),
                    ]
                };
                let opened = b.opened.load(Relaxed);
                WorkerStatus {
                    worker: w,
                    requests_by_class: by_class,
                    body_bytes: b.body_bytes.load(Relaxed),
                    connections_total: opened,
                    connections_open: opened.saturating_sub(b.closed.load(Relaxed)),
                    connections_idle: b.idle.load(Relaxed),
                    content_cache: cache(&b.content),
                    response_cache: cache(&b.response),
                }
            })
            .collect();
        (self.started, workers)
    }

    /// Writes the exposition of every worker's counters.
    pub(crate) fn render(&self, out: &mut String) {
        let shown: Vec<usize> = (0..self.workers.len())
            .filter(|&w| self.worker(w).opened.load(Relaxed) > 0)
            .collect();
        family(
            out,
            "fastpath_build_info",
            "gauge",
            "The running fastpath's version; always 1.",
        );
        let _ = writeln!(
            out,
            "fastpath_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        family(
            out,
            "process_start_time_seconds",
            "gauge",
            "When the server started, in seconds since the Unix epoch.",
        );
        let _ = writeln!(out, "process_start_time_seconds {:.3}", self.started);

        family(
            out,
            "fastpath_http_requests_total",
            "counter",
            "Requests answered, by worker, method and status class.",
        );
        for &w in &shown {
            let block = self.worker(w);
            for (m, classes) in block.requests.iter().enumerate() {
                let method = METHODS.get(m).copied().unwrap_or("other");
                for (c, count) in classes.iter().enumerate() {
                    let count = count.load(Relaxed);
                    if count > 0 {
                        let _ = writeln!(
                            out,
                            "fastpath_http_requests_total{{worker=\"{w}\",method=\"{method}\",code=\"{}\"}} {count}",
                            CLASSES[c]
                        );
                    }
                }
            }
        }
        let per_worker = |out: &mut String,
                          name: &str,
                          kind: &str,
                          help: &str,
                          get: &dyn Fn(&WorkerBlock) -> u64| {
            family(out, name, kind, help);
            for &w in &shown {
                let _ = writeln!(out, "{name}{{worker=\"{w}\"}} {}", get(self.worker(w)));
            }
        };
        per_worker(
            out,
            "fastpath_http_response_body_bytes_total",
            "counter",
            "Response body bytes sent (as the access log counts them).",
            &|b| b.body_bytes.load(Relaxed),
        );
        per_worker(
            out,
            "fastpath_connections_total",
            "counter",
            "Client connections accepted.",
            &|b| b.opened.load(Relaxed),
        );
        per_worker(
            out,
            "fastpath_connections_open",
            "gauge",
            "Client connections open.",
            &|b| {
                let closed = b.closed.load(Relaxed);
                b.opened.load(Relaxed).saturating_sub(closed)
            },
        );
        per_worker(
            out,
            "fastpath_connections_idle",
            "gauge",
            "Client connections kept alive, waiting for their next request.",
            &|b| b.idle.load(Relaxed),
        );
        for (prefix, what, cache) in [
            (
                "fastpath_content_cache",
                "the content cache",
                (|b: &WorkerBlock| &b.content) as fn(&WorkerBlock) -> &CacheBlock,
            ),
            (
                "fastpath_response_cache",
                "the backend response cache",
                |b: &WorkerBlock| &b.response,
            ),
        ] {
            let figures: [CacheFigure; 5] = [
                (
                    "hits_total",
                    "counter",
                    "Lookups in {} that found a fresh entry.",
                    |c| &c.hits,
                ),
                (
                    "misses_total",
                    "counter",
                    "Lookups in {} that found none.",
                    |c| &c.misses,
                ),
                (
                    "evictions_total",
                    "counter",
                    "Entries of {} dropped to make room for others.",
                    |c| &c.evictions,
                ),
                ("memory_bytes", "gauge", "Memory held by {}.", |c| &c.memory),
                ("entries", "gauge", "Entries in {}.", |c| &c.entries),
            ];
            for (suffix, kind, help, get) in figures {
                let name = format!("{prefix}_{suffix}");
                family(out, &name, kind, &help.replace("{}", what));
                for &w in &shown {
                    let value = get(cache(self.worker(w))).load(Relaxed);
                    let _ = writeln!(out, "{name}{{worker=\"{w}\"}} {value}");
                }
            }
        }
        self.render_backends(out, &shown);
        self.render_tls(out);
    }

    /// The TLS listeners' handshakes, counted by every worker together.
    fn render_tls(&self, out: &mut String) {
        let Some(tls) = &self.tls else {
            return;
        };
        family(
            out,
            "fastpath_tls_handshakes_total",
            "counter",
            "TLS handshakes that succeeded, full or resumed.",
        );
        let _ = writeln!(
            out,
            "fastpath_tls_handshakes_total{{kind=\"full\"}} {}",
            tls.full()
        );
        let _ = writeln!(
            out,
            "fastpath_tls_handshakes_total{{kind=\"resumed\"}} {}",
            tls.resumed()
        );
        family(
            out,
            "fastpath_tls_handshake_failures_total",
            "counter",
            "TLS handshakes that failed, by reason.",
        );
        for (reason, count) in tls.failed() {
            let _ = writeln!(
                out,
                "fastpath_tls_handshake_failures_total{{reason=\"{reason}\"}} {count}"
            );
        }
    }

    fn render_backends(&self, out: &mut String, shown: &[usize]) {
        let series = || {
            shown.iter().flat_map(move |&w| {
                self.backends
                    .iter()
                    .enumerate()
                    .map(move |(b, name)| (w, name, self.backend(w, b)))
            })
        };
        family(
            out,
            "fastpath_backend_requests_total",
            "counter",
            "Requests sent to a backend (answers from the response cache not included).",
        );
        for (w, name, block) in series() {
            let value = block.requests.load(Relaxed);
            let _ = writeln!(
                out,
                "fastpath_backend_requests_total{{worker=\"{w}\",backend=\"{name}\"}} {value}"
            );
        }
        family(
            out,
            "fastpath_backend_errors_total",
            "counter",
            "Requests to a backend that got no complete answer: no connection to be had, a \
             failed or timed-out exchange (502, 503, 504), or a response cut short.",
        );
        for (w, name, block) in series() {
            let value = block.errors.load(Relaxed);
            let _ = writeln!(
                out,
                "fastpath_backend_errors_total{{worker=\"{w}\",backend=\"{name}\"}} {value}"
            );
        }
        let name = "fastpath_backend_response_seconds";
        family(
            out,
            name,
            "histogram",
            "Time from sending a request to a backend to the end of its relayed response.",
        );
        for (w, backend, block) in series() {
            let labels = format!("worker=\"{w}\",backend=\"{backend}\"");
            let mut cumulative = 0;
            for (i, bound) in BUCKETS.iter().enumerate() {
                cumulative += block.buckets[i].load(Relaxed);
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
            }
            cumulative += block.buckets[BUCKETS.len()].load(Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
            let sum = block.sum_micros.load(Relaxed) as f64 / 1e6;
            let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
            let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
        }
    }
}

/// A family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// What one worker counts into.
#[derive(Clone)]
pub(crate) struct WorkerMetrics {
    metrics: Arc<Metrics>,
    worker: usize,
    /// The worker's block, found once: the request path does no index arithmetic.
    block: *const WorkerBlock,
}

// SAFETY: the block lives in the mapping `metrics` keeps alive, and is only accessed
// through atomics.
unsafe impl Send for WorkerMetrics {}

impl WorkerMetrics {
    #[inline]
    fn block(&self) -> &WorkerBlock {
        // SAFETY: a block of the mapping, which lives as long as `self.metrics`.
        unsafe { &*self.block }
    }

    /// All the workers' counters, for a scrape.
    pub(crate) fn all(&self) -> &Metrics {
        &self.metrics
    }

    /// A response was sent (or cut short: `body_bytes` is what left). `method` is the
    /// request's method, or the start of a line that could not be parsed.
    #[inline]
    pub(crate) fn request(&self, method: Method, status: u16, body_bytes: u64) {
        let class = match status {
            100..=599 => (status / 100 - 1) as usize,
            // Not an answer fastpath made (a bridged connection, whose status it never sees).
            _ => return,
        };
        // In the order of METHODS.
        let method = match method {
            Method::Get => 0,
            Method::Head => 1,
            Method::Post => 2,
            Method::Put => 3,
            Method::Delete => 4,
            Method::Options => 5,
            Method::Patch => 6,
            Method::Connect => 7,
            Method::Trace => 8,
            Method::Other => OTHER_METHOD,
        };
        let block = self.block();
        bump(&block.requests[method][class], 1);
        bump(&block.body_bytes, body_bytes);
    }

    /// A connection was accepted.
    #[inline]
    pub(crate) fn opened(&self) {
        bump(&self.block().opened, 1);
    }

    /// A connection closed.
    #[inline]
    pub(crate) fn closed(&self) {
        bump(&self.block().closed, 1);
    }

    /// A connection began (`true`) or stopped (`false`) waiting between requests.
    #[inline]
    pub(crate) fn idle(&self, idle: bool) {
        let gauge = &self.block().idle;
        let value = gauge.load(Relaxed);
        gauge.store(
            if idle {
                value + 1
            } else {
                value.saturating_sub(1)
            },
            Relaxed,
        );
    }

    /// A request was sent to backend `backend`.
    pub(crate) fn backend_request(&self, backend: usize) {
        bump(&self.metrics.backend(self.worker, backend).requests, 1);
    }

    /// A request to backend `backend` got no complete answer.
    pub(crate) fn backend_error(&self, backend: usize) {
        bump(&self.metrics.backend(self.worker, backend).errors, 1);
    }

    /// A backend's response was relayed whole, `took` after its request was sent.
    pub(crate) fn backend_response(&self, backend: usize, took: Duration) {
        let block = self.metrics.backend(self.worker, backend);
        let micros = took.as_micros().min(u64::MAX as u128) as u64;
        let bucket = BUCKETS_MICROS
            .iter()
            .position(|&bound| micros <= bound)
            .unwrap_or(BUCKETS.len());
        bump(&block.buckets[bucket], 1);
        bump(&block.sum_micros, micros);
    }

    /// Publishes the worker's hits and misses in the content cache (the whole cache's
    /// figures go on one worker's series: [`WorkerMetrics::content_cache_of`]).
    pub(crate) fn content_cache(&self, hits: u64, misses: u64) {
        let block = &self.block().content;
        block.hits.store(hits, Relaxed);
        block.misses.store(misses, Relaxed);
    }

    /// Publishes the evictions, memory and entries of the content cache the process's
    /// workers share on the series of `worker`, the one that carries them.
    pub(crate) fn content_cache_of(
        &self,
        worker: usize,
        evictions: u64,
        memory: usize,
        entries: usize,
    ) {
        let block = &self.carrier(worker).content;
        publish_shared(block, evictions, memory, entries);
    }

    /// Publishes the figures of the worker's backend response cache.
    pub(crate) fn response_cache(&self, stats: CacheStats, memory: usize, entries: usize) {
        publish(&self.block().response, stats, memory, entries);
    }

    /// Publishes the evictions, memory and entries of the response cache the process's
    /// workers share on the series of `worker`, the one that carries them.
    pub(crate) fn response_cache_of(
        &self,
        worker: usize,
        evictions: u64,
        memory: usize,
        entries: usize,
    ) {
        let block = &self.carrier(worker).response;
        publish_shared(block, evictions, memory, entries);
    }

    /// The series of `worker`, which carries a cache the process's workers share.
    fn carrier(&self, worker: usize) -> &WorkerBlock {
        self.metrics
            .worker(worker.min(self.metrics.workers.len() - 1))
    }

    /// The index of the worker these counters are.
    pub(crate) fn worker(&self) -> usize {
        self.worker
    }
}

/// The part of [`publish`] a shared cache's carrier publishes (hits and misses are each
/// worker's own).
fn publish_shared(block: &CacheBlock, evictions: u64, memory: usize, entries: usize) {
    block.evictions.store(evictions, Relaxed);
    block.memory.store(memory as u64, Relaxed);
    block.entries.store(entries as u64, Relaxed);
}

fn publish(block: &CacheBlock, stats: CacheStats, memory: usize, entries: usize) {
    block.hits.store(stats.hits, Relaxed);
    block.misses.store(stats.misses, Relaxed);
    publish_shared(block, stats.evictions, memory, entries);
}

/// The status a request on the metrics listener gets: the exposition for a GET or HEAD of
/// [`PATH`] (any query ignored), 405 for another method there, 404 anywhere else.
pub(crate) fn status(method: &str, target: &str) -> u16 {
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    match (path == PATH, method) {
        (false, _) => 404,
        (true, "GET" | "HEAD") => 200,
        (true, _) => 405,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sum_per_worker_and_render() {
        let metrics = Arc::new(Metrics::new(2, vec!["app".into()], 1, None).unwrap());
        let (a, b) = (metrics.for_worker(0), metrics.for_worker(1));
        a.opened();
        b.opened();
        a.request(Method::Get, 200, 10);
        a.request(Method::Get, 200, 5);
        b.request(Method::Other, 418, 1);
        a.request(Method::Get, 0, 0);
        a.idle(true);
        b.backend_request(0);
        b.backend_response(0, Duration::from_millis(7));
        let mut out = String::new();
        metrics.render(&mut out);
        assert!(out.contains(
            "fastpath_http_requests_total{worker=\"0\",method=\"GET\",code=\"2xx\"} 2\n"
        ));
        assert!(out.contains(
            "fastpath_http_requests_total{worker=\"1\",method=\"other\",code=\"4xx\"} 1\n"
        ));
        assert!(out.contains("fastpath_http_response_body_bytes_total{worker=\"0\"} 15\n"));
        assert!(out.contains("fastpath_connections_idle{worker=\"0\"} 1\n"));
        assert!(out.contains(
            "fastpath_backend_response_seconds_bucket{worker=\"1\",backend=\"app\",le=\"0.005\"} 0\n"
        ));
        assert!(out.contains(
            "fastpath_backend_response_seconds_bucket{worker=\"1\",backend=\"app\",le=\"0.01\"} 1\n"
        ));
        assert!(out.contains(
            "fastpath_backend_response_seconds_sum{worker=\"1\",backend=\"app\"} 0.007\n"
        ));
    }

    #[test]
    fn every_method_counts_under_its_name() {
        let metrics = Arc::new(Metrics::new(1, Vec::new(), 1, None).unwrap());
        let worker = metrics.for_worker(0);
        worker.opened();
        for method in METHODS {
            worker.request(Method::of(method), 204, 0);
        }
        worker.request(Method::of("get"), 204, 0);
        let mut out = String::new();
        metrics.render(&mut out);
        for method in METHODS.iter().chain(&["other"]) {
            let series = format!("method=\"{method}\",code=\"2xx\"}} 1\n");
            assert!(out.contains(&series), "{series} in {out}");
        }
    }

    #[test]
    fn block_sizes_keep_alignment() {
        assert_eq!(std::mem::size_of::<WorkerBlock>() % 64, 0);
        assert_eq!(std::mem::size_of::<BackendBlock>() % 64, 0);
    }

    #[test]
    fn statuses() {
        assert_eq!(status("GET", "/metrics"), 200);
        assert_eq!(status("HEAD", "/metrics?x=1"), 200);
        assert_eq!(status("POST", "/metrics"), 405);
        assert_eq!(status("GET", "/"), 404);
        assert_eq!(status("GET", "/metrics/"), 404);
    }
}
