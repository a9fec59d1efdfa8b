//! What a run counts: per-thread counters and histograms, merged at the end into a
//! [`Report`] that serialises to the `--json` output.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Why a request failed, in httperf's classes plus the response checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The connection was refused (ECONNREFUSED).
    Refused,
    /// The connection was reset (ECONNRESET, EPIPE), or closed before any byte of the reply.
    Reset,
    /// No complete reply (or connection) within `--timeout`.
    Timeout,
    /// No file descriptor for a new socket (EMFILE, ENFILE).
    FdUnavail,
    /// No local address/port for a new connection (EADDRNOTAVAIL).
    AddrUnavail,
    /// The connection ended inside a response head or body.
    ShortBody,
    /// The response was malformed, badly framed, or longer than its framing said.
    BadResponse,
    /// The body did not match the expected length or checksum (`--verify`).
    Verify,
    /// TLS failed: the handshake (a certificate not trusted, no common version or cipher,
    /// an alert) or a record later on.
    Tls,
    /// Any other socket error.
    Other,
}

impl ErrorClass {
    /// Number of classes.
    pub const COUNT: usize = 10;

    /// Every class, in report order.
    pub const ALL: [ErrorClass; Self::COUNT] = [
        ErrorClass::Refused,
        ErrorClass::Reset,
        ErrorClass::Timeout,
        ErrorClass::FdUnavail,
        ErrorClass::AddrUnavail,
        ErrorClass::ShortBody,
        ErrorClass::BadResponse,
        ErrorClass::Verify,
        ErrorClass::Tls,
        ErrorClass::Other,
    ];

    /// The name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Refused => "refused",
            ErrorClass::Reset => "reset",
            ErrorClass::Timeout => "timeout",
            ErrorClass::FdUnavail => "fd_unavail",
            ErrorClass::AddrUnavail => "addr_unavail",
            ErrorClass::ShortBody => "short_body",
            ErrorClass::BadResponse => "bad_response",
            ErrorClass::Verify => "verify",
            ErrorClass::Tls => "tls",
            ErrorClass::Other => "other",
        }
    }

    /// The class of a socket error number.
    pub fn from_errno(errno: i32) -> ErrorClass {
        match errno {
            libc::ECONNREFUSED => ErrorClass::Refused,
            libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED => ErrorClass::Reset,
            libc::ETIMEDOUT => ErrorClass::Timeout,
            libc::EMFILE | libc::ENFILE => ErrorClass::FdUnavail,
            libc::EADDRNOTAVAIL => ErrorClass::AddrUnavail,
            _ => ErrorClass::Other,
        }
    }

    /// The class of an I/O error.
    pub fn from_io(e: &std::io::Error) -> ErrorClass {
        e.raw_os_error()
            .map_or(ErrorClass::Other, ErrorClass::from_errno)
    }
}

/// Highest value the histograms hold, in nanoseconds (an hour); larger values saturate.
const HIST_MAX_NS: u64 = 3_600_000_000_000;

/// Significant figures kept by the histograms: 0.1% resolution.
const HIST_SIGFIG: u8 = 3;

pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, HIST_SIGFIG).expect("valid histogram bounds")
}

/// Counters and histograms of one thread (or, merged, of a run). Times in nanoseconds.
#[derive(Debug, Clone)]
pub struct Stats {
    /// Requests issued in the measured window.
    pub requests: u64,
    /// Complete, well-formed replies (final responses) that passed every check.
    pub replies: u64,
    /// Bytes of those replies on the wire (heads, bodies, chunk framing).
    pub bytes: u64,
    /// Body bytes of those replies.
    pub body_bytes: u64,
    /// Connections attempted.
    pub conns_opened: u64,
    /// Connections established.
    pub conns_established: u64,
    /// Failed requests by class, indexed like [`ErrorClass::ALL`].
    pub errors: [u64; ErrorClass::COUNT],
    /// Responses by status class 1xx..5xx (interim 1xx included); index 0 is 1xx.
    pub status: [u64; 5],
    /// Responses whose status is outside 100..=599.
    pub status_other: u64,
    /// Requests still waiting for a reply when the run ended.
    pub in_flight_at_end: u64,
    /// Open loop: requests (or connections) due in the window that could not be issued.
    pub missed: u64,
    /// Issue to complete reply (from the intended send time in open-loop modes).
    pub latency: Histogram<u64>,
    /// Connect call to established.
    pub connect: Histogram<u64>,
    /// Request written to first byte of the reply.
    pub first_byte: Histogram<u64>,
    /// First byte to last byte of the reply.
    pub transfer: Histogram<u64>,
    /// Open loop: scheduled time to when the request (or connection) went out.
    pub send_lag: Histogram<u64>,
    /// HTTPS: what TLS did on the measured connections.
    pub tls: TlsStats,
}

/// What TLS did on a run's measured connections.
#[derive(Debug, Clone)]
pub struct TlsStats {
    /// Full handshakes finished.
    pub full: u64,
    /// Resumed handshakes finished.
    pub resumed: u64,
    /// Connections TLS failed on, by reason (indexed like [`crate::tls::FAILURE_REASONS`]).
    pub failures: [u64; crate::tls::FAILURE_REASONS.len()],
    /// The first failure's message.
    pub first_failure: Option<String>,
    pub(crate) negotiated: Option<crate::tls::Negotiated>,
    /// TCP established to handshake finished.
    pub handshake: Histogram<u64>,
}

impl TlsStats {
    fn new() -> TlsStats {
        TlsStats {
            full: 0,
            resumed: 0,
            failures: [0; crate::tls::FAILURE_REASONS.len()],
            first_failure: None,
            negotiated: None,
            handshake: histogram(),
        }
    }

    fn merge(&mut self, other: &TlsStats) {
        self.full += other.full;
        self.resumed += other.resumed;
        for (a, b) in self.failures.iter_mut().zip(other.failures) {
            *a += b;
        }
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&other.first_failure);
        }
        self.negotiated = self.negotiated.or(other.negotiated);
        let _ = self.handshake.add(&other.handshake);
    }

    pub(crate) fn report(&self) -> TlsReport {
        let negotiated = self.negotiated.unwrap_or_default();
        TlsReport {
            handshakes_full: self.full,
            handshakes_resumed: self.resumed,
            failures: self.failures.iter().sum(),
            failure_reasons: crate::tls::FAILURE_REASONS
                .iter()
                .zip(self.failures)
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (*r, n))
                .collect(),
            first_failure: self.first_failure.clone(),
            protocol: negotiated.protocol,
            cipher: negotiated.cipher,
            group: negotiated.group,
            handshake_us: Percentiles::from_histogram(&self.handshake),
        }
    }
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    /// Empty statistics.
    pub fn new() -> Stats {
        Stats {
            requests: 0,
            replies: 0,
            bytes: 0,
            body_bytes: 0,
            conns_opened: 0,
            conns_established: 0,
            errors: [0; ErrorClass::COUNT],
            status: [0; 5],
            status_other: 0,
            in_flight_at_end: 0,
            missed: 0,
            latency: histogram(),
            connect: histogram(),
            first_byte: histogram(),
            transfer: histogram(),
            send_lag: histogram(),
            tls: TlsStats::new(),
        }
    }

    /// Counts one failed request.
    #[inline]
    pub fn error(&mut self, class: ErrorClass) {
        self.errors[class as usize] += 1;
    }

    /// Failed requests of one class.
    pub fn errors_of(&self, class: ErrorClass) -> u64 {
        self.errors[class as usize]
    }

    /// Failed requests of every class.
    pub fn error_total(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Counts a response by its status class.
    #[inline]
    pub fn status(&mut self, code: u16) {
        match code {
            100..=599 => self.status[usize::from(code / 100 - 1)] += 1,
            _ => self.status_other += 1,
        }
    }

    /// Adds another thread's figures.
    pub fn merge(&mut self, other: &Stats) {
        self.requests += other.requests;
        self.replies += other.replies;
        self.bytes += other.bytes;
        self.body_bytes += other.body_bytes;
        self.conns_opened += other.conns_opened;
        self.conns_established += other.conns_established;
        for (a, b) in self.errors.iter_mut().zip(other.errors) {
            *a += b;
        }
        for (a, b) in self.status.iter_mut().zip(other.status) {
            *a += b;
        }
        self.status_other += other.status_other;
        self.in_flight_at_end += other.in_flight_at_end;
        self.missed += other.missed;
        // Same bounds everywhere, so adding cannot fail.
        let _ = self.latency.add(&other.latency);
        let _ = self.connect.add(&other.connect);
        let _ = self.first_byte.add(&other.first_byte);
        let _ = self.transfer.add(&other.transfer);
        let _ = self.send_lag.add(&other.send_lag);
        self.tls.merge(&other.tls);
    }
}

/// Percentiles of one measure, in microseconds. All zero when nothing was measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Number of samples.
    pub count: u64,
    /// Smallest sample.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
}

impl Percentiles {
    /// Reads a nanosecond histogram into microseconds (rounded to 0.1 µs).
    pub fn from_histogram(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
        Percentiles {
            count: h.len(),
            min: us(h.min()),
            mean: (h.mean() / 100.0).round() / 10.0,
            p50: us(h.value_at_quantile(0.50)),
            p90: us(h.value_at_quantile(0.90)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// Failed requests by class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Errors {
    /// Sum of all classes.
    pub total: u64,
    /// See [`ErrorClass::Refused`].
    pub refused: u64,
    /// See [`ErrorClass::Reset`].
    pub reset: u64,
    /// See [`ErrorClass::Timeout`].
    pub timeout: u64,
    /// See [`ErrorClass::FdUnavail`].
    pub fd_unavail: u64,
    /// See [`ErrorClass::AddrUnavail`].
    pub addr_unavail: u64,
    /// See [`ErrorClass::ShortBody`].
    pub short_body: u64,
    /// See [`ErrorClass::BadResponse`].
    pub bad_response: u64,
    /// See [`ErrorClass::Verify`].
    pub verify: u64,
    /// See [`ErrorClass::Tls`].
    pub tls: u64,
    /// See [`ErrorClass::Other`].
    pub other: u64,
}

/// Responses by status class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatusClasses {
    /// 100..=199, interim responses included.
    #[serde(rename = "1xx")]
    pub s1xx: u64,
    /// 200..=299.
    #[serde(rename = "2xx")]
    pub s2xx: u64,
    /// 300..=399.
    #[serde(rename = "3xx")]
    pub s3xx: u64,
    /// 400..=499.
    #[serde(rename = "4xx")]
    pub s4xx: u64,
    /// 500..=599.
    #[serde(rename = "5xx")]
    pub s5xx: u64,
    /// Any other code.
    pub other: u64,
}

/// Everything a run measured: the `--json` object of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The settings of the run. Flattened, so its fields are keys of this object like
    /// the measured ones.
    #[serde(flatten)]
    pub meta: ReportMeta,
    /// Length of the measured window, seconds.
    pub duration_s: f64,
    /// Requests issued in the window.
    pub requests: u64,
    /// Complete replies that passed every check.
    pub replies: u64,
    /// Replies per second (what wrk calls Requests/sec).
    pub rps: f64,
    /// Requests issued per second.
    pub request_rate: f64,
    /// Reply bytes on the wire.
    pub bytes: u64,
    /// Reply bytes per second.
    pub bytes_per_s: f64,
    /// Body bytes of the replies.
    pub body_bytes: u64,
    /// Connections attempted.
    pub conns_opened: u64,
    /// Connections established.
    pub conns_established: u64,
    /// Connections attempted per second.
    pub conn_rate: f64,
    /// Most connections open at once (summed over threads).
    pub max_open: usize,
    /// Issue to complete reply, µs; open-loop modes measure from the intended send time.
    pub latency_us: Percentiles,
    /// Connect to established, µs.
    pub connect_us: Percentiles,
    /// Request written to first reply byte, µs.
    pub first_byte_us: Percentiles,
    /// First to last reply byte, µs.
    pub transfer_us: Percentiles,
    /// Open loop: scheduled time to when each request (`rate`) or connection (`conn-rate`)
    /// went out, µs. Waiting for a free connection shows here; so does a client that
    /// cannot keep up with its schedule.
    pub send_lag_us: Percentiles,
    /// Failed requests by class.
    pub errors: Errors,
    /// Responses by status class.
    pub status: StatusClasses,
    /// Requests still waiting for a reply when the window closed (neither replies nor errors).
    pub in_flight_at_end: u64,
    /// Open loop: requests (`rate`) or requests of connections (`conn-rate`) due in the
    /// window that were never issued because every connection was busy, the client fell
    /// more than a timeout behind them, or the run ended.
    pub missed: u64,
    /// CPU time the load generator used (user + system), seconds.
    pub cpu_s: f64,
    /// HTTPS only: handshakes (full, resumed, failed) and what they negotiated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsReport>,
}

impl Report {
    /// Builds a report from merged statistics.
    pub fn new(meta: ReportMeta, stats: &Stats, duration_s: f64, cpu_s: f64) -> Report {
        let per_s = |n: u64| {
            if duration_s > 0.0 {
                n as f64 / duration_s
            } else {
                0.0
            }
        };
        let e = |c: ErrorClass| stats.errors_of(c);
        Report {
            meta,
            duration_s,
            requests: stats.requests,
            replies: stats.replies,
            rps: per_s(stats.replies),
            request_rate: per_s(stats.requests),
            bytes: stats.bytes,
            bytes_per_s: per_s(stats.bytes),
            body_bytes: stats.body_bytes,
            conns_opened: stats.conns_opened,
            conns_established: stats.conns_established,
            conn_rate: per_s(stats.conns_opened),
            max_open: 0,
            latency_us: Percentiles::from_histogram(&stats.latency),
            connect_us: Percentiles::from_histogram(&stats.connect),
            first_byte_us: Percentiles::from_histogram(&stats.first_byte),
            transfer_us: Percentiles::from_histogram(&stats.transfer),
            send_lag_us: Percentiles::from_histogram(&stats.send_lag),
            errors: Errors {
                total: stats.error_total(),
                refused: e(ErrorClass::Refused),
                reset: e(ErrorClass::Reset),
                timeout: e(ErrorClass::Timeout),
                fd_unavail: e(ErrorClass::FdUnavail),
                addr_unavail: e(ErrorClass::AddrUnavail),
                short_body: e(ErrorClass::ShortBody),
                bad_response: e(ErrorClass::BadResponse),
                verify: e(ErrorClass::Verify),
                tls: e(ErrorClass::Tls),
                other: e(ErrorClass::Other),
            },
            status: StatusClasses {
                s1xx: stats.status[0],
                s2xx: stats.status[1],
                s3xx: stats.status[2],
                s4xx: stats.status[3],
                s5xx: stats.status[4],
                other: stats.status_other,
            },
            in_flight_at_end: stats.in_flight_at_end,
            missed: stats.missed,
            cpu_s,
            tls: None,
        }
    }
}

/// The settings of a run, which its [`Report`] carries so it can be read alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportMeta {
    /// Name of the target (the URL unless `--compare` named it).
    pub name: String,
    /// URL of the target (the first one if several).
    pub url: String,
    /// `closed`, `rate` or `conn-rate`.
    pub mode: &'static str,
    /// Offered rate: requests/s (`rate`) or connections/s (`conn-rate`).
    pub offered_rate: Option<f64>,
    /// Requests per connection (`conn-rate`).
    pub calls: Option<u32>,
    /// Worker threads.
    pub threads: usize,
    /// Connections (the most open at once; unbounded in `conn-rate`, reported as 0).
    pub connections: usize,
    /// Pipelining depth.
    pub pipeline: usize,
    /// Whether connections are kept alive between requests.
    pub keepalive: bool,
}

/// The `tls` object of an `https://` run's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TlsReport {
    /// Measured connections whose handshake was a full one.
    pub handshakes_full: u64,
    /// Measured connections that resumed a session.
    pub handshakes_resumed: u64,
    /// Connections on which TLS failed (each failed its requests as `errors.tls`).
    pub failures: u64,
    /// Those failures by reason (the nonzero ones, as [`crate::tls::FAILURE_REASONS`] names them).
    pub failure_reasons: std::collections::BTreeMap<&'static str, u64>,
    /// The first failure's message, to say what went wrong.
    pub first_failure: Option<String>,
    /// Negotiated protocol version (`TLSv1.3`, `TLSv1.2`); empty if no handshake finished.
    pub protocol: &'static str,
    /// Negotiated cipher suite, as rustls names it.
    pub cipher: &'static str,
    /// Negotiated key exchange group.
    pub group: &'static str,
    /// TCP established to handshake finished, µs.
    pub handshake_us: Percentiles,
}
