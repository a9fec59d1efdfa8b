//! One worker's view of a backend: which address to connect to next, which
//! addresses recently failed, and how many connections are open.

use std::sync::Arc;
use std::time::Instant;

use super::{BackendConfig, UpstreamAddr};

/// Per-worker state of one backend: round robin over its addresses, passive
/// health (an address that failed is skipped for `fail_timeout`), and the
/// worker's share of the connection limit.
///
/// The caller reports what happened with [`opened`](Self::opened),
/// [`closed`](Self::closed), [`failed`](Self::failed) and
/// [`succeeded`](Self::succeeded); nothing here reads a clock or a socket.
/// Idle kept-alive connections are the caller's to reuse before asking
/// [`pick`](Self::pick) for a new one, and they count as open.
#[derive(Debug)]
pub struct BackendState {
    config: Arc<BackendConfig>,
    max_connections: usize,
    open: usize,
    /// Where the round robin resumes.
    next: usize,
    addresses: Vec<Address>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Address {
    open: usize,
    /// When the last failure happened, if no success came after it.
    failed_at: Option<Instant>,
}

impl BackendState {
    /// The state of a backend for one worker allowed `max_connections` open
    /// connections to it (its share of the whole server's; raised to 1 if 0).
    pub fn new(config: Arc<BackendConfig>, max_connections: usize) -> Self {
        let addresses = vec![Address::default(); config.addresses.len()];
        BackendState {
            config,
            max_connections: max_connections.max(1),
            open: 0,
            next: 0,
            addresses,
        }
    }

    /// The backend's configuration.
    pub fn config(&self) -> &BackendConfig {
        &self.config
    }

    /// The index of an address to open a new connection to, or `None` when this
    /// worker's connection limit is reached (or the backend has no address).
    ///
    /// Addresses are taken in turn, skipping those that failed less than
    /// `fail_timeout` ago. When every address failed that recently, the one that
    /// failed longest ago is returned anyway: real requests then probe the
    /// backend, so it is found again as soon as it recovers, and a request is
    /// only answered 502 after a connect was actually tried.
    pub fn pick(&mut self, now: Instant) -> Option<usize> {
        let n = self.addresses.len();
        if self.open >= self.max_connections || n == 0 {
            return None;
        }
        let fail_timeout = self.config.fail_timeout;
        let healthy = |a: &Address| match a.failed_at {
            None => true,
            Some(at) => now.saturating_duration_since(at) >= fail_timeout,
        };
        let start = self.next % n;
        let chosen = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| healthy(&self.addresses[i]))
            .or_else(|| {
                (0..n)
                    .map(|i| (start + i) % n)
                    .min_by_key(|&i| self.addresses[i].failed_at)
            })?;
        self.next = chosen + 1;
        Some(chosen)
    }

    /// The address at `index`, as returned by [`pick`](Self::pick).
    pub fn address(&self, index: usize) -> &UpstreamAddr {
        &self.config.addresses[index]
    }

    /// A connection to address `index` was opened (or its connect started): it
    /// counts against the limit until [`closed`](Self::closed).
    pub fn opened(&mut self, index: usize) {
        self.open += 1;
        self.addresses[index].open += 1;
    }

    /// A connection counted by [`opened`](Self::opened) was closed, whatever
    /// the reason.
    pub fn closed(&mut self, index: usize) {
        // Saturating: a caller's double close must not wrap the count into a
        // limit that blocks the backend forever.
        debug_assert!(self.addresses[index].open > 0, "closed more than opened");
        self.open = self.open.saturating_sub(1);
        self.addresses[index].open = self.addresses[index].open.saturating_sub(1);
    }

    /// Connecting to address `index` was refused or timed out (or the backend
    /// sent nothing): skip it for `fail_timeout` from `now`.
    pub fn failed(&mut self, index: usize, now: Instant) {
        self.addresses[index].failed_at = Some(now);
    }

    /// Address `index` answered: it is healthy again.
    pub fn succeeded(&mut self, index: usize) {
        self.addresses[index].failed_at = None;
    }

    /// Connections this worker has open to the backend, idle ones included.
    pub fn open_connections(&self) -> usize {
        self.open
    }

    /// Connections this worker has open to address `index`.
    pub fn open_connections_to(&self, index: usize) -> usize {
        self.addresses[index].open
    }

    /// This worker's connection limit.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// Whether this worker's connections to the backend are all in use: a request now would
    /// find none to open.
    pub fn is_at_limit(&self) -> bool {
        self.open >= self.max_connections
    }

    /// Whether address `index` is being skipped at `now` because of a recent
    /// failure.
    pub fn is_failed(&self, index: usize, now: Instant) -> bool {
        self.addresses[index]
            .failed_at
            .is_some_and(|at| now.saturating_duration_since(at) < self.config.fail_timeout)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const FAIL: Duration = Duration::from_secs(10);

    fn state(addresses: usize, max: usize) -> BackendState {
        let addrs = (0..addresses)
            .map(|i| crate::parse_backend_addr(&format!("127.0.0.1:{}", 9000 + i)).unwrap())
            .collect();
        let config = BackendConfig {
            fail_timeout: FAIL,
            ..BackendConfig::new("app", addrs)
        };
        BackendState::new(Arc::new(config), max)
    }

    fn picks(s: &mut BackendState, now: Instant, count: usize) -> Vec<usize> {
        (0..count).map(|_| s.pick(now).unwrap()).collect()
    }

    #[test]
    fn round_robin() {
        let now = Instant::now();
        let mut s = state(3, 100);
        assert_eq!(picks(&mut s, now, 7), [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(
            s.address(1),
            &UpstreamAddr::Tcp("127.0.0.1:9001".parse().unwrap())
        );
        assert_eq!(s.config().name, "app");
    }

    #[test]
    fn single_address() {
        let now = Instant::now();
        let mut s = state(1, 100);
        assert_eq!(picks(&mut s, now, 3), [0, 0, 0]);
        s.failed(0, now);
        // The only address is still tried: there is nothing else.
        assert_eq!(s.pick(now), Some(0));
    }

    #[test]
    fn failed_addresses_are_skipped_until_fail_timeout() {
        let t0 = Instant::now();
        let mut s = state(3, 100);
        s.failed(1, t0);
        assert!(s.is_failed(1, t0));
        assert_eq!(picks(&mut s, t0, 4), [0, 2, 0, 2]);
        let almost = t0 + FAIL - Duration::from_millis(1);
        assert_eq!(picks(&mut s, almost, 2), [0, 2]);
        // After fail_timeout it is tried again, in its turn.
        let later = t0 + FAIL;
        assert!(!s.is_failed(1, later));
        assert_eq!(picks(&mut s, later, 3), [0, 1, 2]);
    }

    #[test]
    fn success_clears_a_failure_at_once() {
        let t0 = Instant::now();
        let mut s = state(2, 100);
        s.failed(0, t0);
        assert_eq!(picks(&mut s, t0, 2), [1, 1]);
        s.succeeded(0);
        assert_eq!(picks(&mut s, t0, 2), [0, 1]);
    }

    #[test]
    fn all_failed_picks_the_oldest_failure() {
        let t0 = Instant::now();
        let mut s = state(3, 100);
        s.failed(2, t0);
        s.failed(0, t0 + Duration::from_secs(1));
        s.failed(1, t0 + Duration::from_secs(2));
        let now = t0 + Duration::from_secs(3);
        assert_eq!(s.pick(now), Some(2));
        // It fails again: now 0 is the oldest.
        s.failed(2, now);
        assert_eq!(s.pick(now), Some(0));
        // The backend recovers: one success and that address is back in turn.
        s.succeeded(0);
        assert_eq!(picks(&mut s, now, 3), [0, 0, 0]);
        // Once fail_timeout passes, everything is tried again.
        let later = now + FAIL;
        let mut seen = picks(&mut s, later, 3);
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2]);
    }

    #[test]
    fn connection_limit() {
        let now = Instant::now();
        let mut s = state(2, 2);
        assert_eq!(s.max_connections(), 2);
        let a = s.pick(now).unwrap();
        s.opened(a);
        let b = s.pick(now).unwrap();
        s.opened(b);
        assert_eq!(s.open_connections(), 2);
        assert_eq!((s.open_connections_to(0), s.open_connections_to(1)), (1, 1));
        assert_eq!(s.pick(now), None);
        s.closed(a);
        assert_eq!(s.open_connections(), 1);
        assert!(s.pick(now).is_some());
    }

    #[test]
    fn limit_is_at_least_one_and_no_address_means_none() {
        let now = Instant::now();
        let mut s = state(1, 0);
        assert_eq!(s.max_connections(), 1);
        assert_eq!(s.pick(now), Some(0));
        s.opened(0);
        assert_eq!(s.pick(now), None);
        let mut empty = state(0, 10);
        assert_eq!(empty.pick(now), None);
    }
}
