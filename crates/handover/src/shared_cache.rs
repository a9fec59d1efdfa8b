//! One backend response cache for all the workers of a process.
//!
//! Workers of the threaded models are threads of one process: they share one
//! [`SharedCache`] behind an `Arc`, so a page is fetched once whatever worker a
//! client lands on, and every client sees the same version. The cache is split
//! into shards, each a [`ResponseCache`] behind its own mutex, chosen by the
//! page (host and target): a lookup locks one shard, for the time it takes to
//! clone two `Arc`s, so workers looking up different pages do not meet, and no
//! lock covers the whole cache. Sharding was chosen over entries swapped
//! atomically under a read lock because it keeps the exact LRU order and costs
//! one uncontended lock per hit (BENCHMARKS.md has the figures).
//!
//! Concurrent misses collapse: the first request that misses a page claims its
//! fetch ([`Found::Fill`]); the others meanwhile are told to wait
//! ([`Found::Wait`]) and look again a moment later, until the claim is fulfilled
//! (a hit), given up (one of them claims it next), or [`FILL_WAIT`] has passed
//! (it goes to the backend itself). Nothing here blocks: a waiting request is
//! parked by the caller, which looks again on a timer, so an event loop serves
//! its other connections meanwhile.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::response_cache::{cache_key, Capture, Hit, ResponseCache};

/// The most shards a cache is split into: a hit holds its shard for tens of
/// nanoseconds, so workers of a machine with a few dozen cores rarely want
/// the same one at once; more would split the memory budget finer (each shard
/// evicts on its own).
pub const MAX_SHARDS: usize = 16;

/// How long a request waits for a fetch of the same page another one claimed
/// before going to the backend itself, as nginx's `proxy_cache_lock_timeout`.
/// A fetch that fails or ends unkept gives up its claim at once, so this bounds
/// only the wait for a slow backend.
pub const FILL_WAIT: Duration = Duration::from_secs(5);

/// How long a page whose fetch ended without being kept (the backend said
/// `no-store`, or it was too large) is passed straight to the backend when
/// requests for it meet, without waiting for each other's fetches.
pub const PASS_FOR: Duration = Duration::from_secs(10);

/// What a lookup found.
#[derive(Debug)]
pub enum Found {
    /// A fresh response the request may be sent.
    Hit(Hit),
    /// Nothing: the request goes to the backend, and this claim stands for its
    /// fetch until it is fulfilled ([`Fill::keep`]) or dropped.
    Fill(Fill),
    /// Another request is fetching the page: look again a little later.
    Wait,
    /// Nothing, and nothing to wait for: go to the backend without a claim.
    Miss,
}

/// What a shard knows of a page being fetched.
enum Pending {
    /// A request is fetching it since `at`; `waited` once another was told to
    /// wait for it.
    Claimed { id: u64, at: Instant, waited: bool },
    /// Its last fetch, which others waited for, was not kept: requests for it
    /// go to the backend without claiming it until `until`.
    Pass { until: Instant },
}

struct Shard {
    cache: ResponseCache,
    /// Pages being fetched, by the key without `Accept-Encoding`.
    pending: HashMap<Box<[u8]>, Pending>,
    next_id: u64,
}

/// The backend response cache of one process, shared by its workers (see the
/// module doc). The memory budget is the whole cache's, divided among shards.
pub struct SharedCache {
    shards: Box<[Mutex<Shard>]>,
    max_response: usize,
    /// When the cache was made, and when the next sweep of expired entries is due, in
    /// milliseconds since: the workers share the sweeping.
    born: Instant,
    next_sweep: AtomicU64,
}

/// How often [`SharedCache::sweep`] walks the cache.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A request's claim on the fetch of a page: dropping it gives the claim up, so
/// the next request that looks claims the page in turn.
pub struct Fill {
    cache: Arc<SharedCache>,
    shard: usize,
    page: Box<[u8]>,
    id: u64,
}

impl std::fmt::Debug for Fill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fill")
            .field("page", &String::from_utf8_lossy(&self.page))
            .finish()
    }
}

impl SharedCache {
    /// An empty cache holding at most `max_memory` bytes in all, keeping no
    /// response larger than `max_response` bytes. It has [`MAX_SHARDS`] shards,
    /// or fewer (a power of two) when the budget is small, so that each shard
    /// can still keep the largest response allowed.
    pub fn new(max_memory: usize, max_response: usize) -> Self {
        let fit = max_memory / max_response.max(1);
        let mut shards = 1;
        while shards * 2 <= MAX_SHARDS && shards * 2 <= fit {
            shards *= 2;
        }
        Self::with_shards(max_memory, max_response, shards)
    }

    /// [`SharedCache::new`] with `shards` shards (at least one), for comparing
    /// layouts.
    pub fn with_shards(max_memory: usize, max_response: usize, shards: usize) -> Self {
        let shards = shards.max(1);
        SharedCache {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        cache: ResponseCache::new(max_memory / shards, max_response),
                        pending: HashMap::new(),
                        next_id: 0,
                    })
                })
                .collect(),
            max_response,
            born: Instant::now(),
            next_sweep: AtomicU64::new(SWEEP_EVERY.as_millis() as u64),
        }
    }

    /// The shard of a page: every variant of it lives in the same one, so a
    /// lookup of both its keys takes one lock. Chosen from the lengths and
    /// the last eight bytes of the host and the target, where the pages of a
    /// site differ most (the file, the query), and not from all of them: a
    /// hash of the whole key cost as much again as the rest of a lookup.
    /// Pages that share a shard only take turns for its lock (and an attacker
    /// who makes them do so gains nothing more: each shard's map has its own
    /// keyed hash).
    fn shard_of(&self, host: &[u8], target: &[u8]) -> usize {
        if self.shards.len() == 1 {
            return 0;
        }
        let tail = |part: &[u8]| {
            let last = &part[part.len().saturating_sub(8)..];
            let word = last.iter().fold(0u64, |w, &b| (w << 8) | u64::from(b));
            word ^ ((part.len() as u64) << 56)
        };
        let hash = (tail(target).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ tail(host))
            .wrapping_mul(0x517c_c1b7_2722_0a95);
        // The top bits are the best mixed (they depend on every bit below).
        (hash >> (64 - self.shards.len().trailing_zeros())) as usize
    }

    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        // A worker that panicked holding a shard left it whole: every change to
        // it is made by code that does not panic between its steps.
        self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Looks up the page `target` of `host` at `now`: under the key without
    /// `Accept-Encoding` first, then (for a response that varies on it) with
    /// `accept_encoding`. A hit `usable` refuses (a chunked body for an HTTP/1.0
    /// client) is passed over; a hit has its validators only if `validators`
    /// (see [`ResponseCache::lookup`]). `key` is scratch space for the keys.
    ///
    /// With `claim` set (a GET that could fill the cache), a miss claims the
    /// fetch or is told to wait for one under way; `claim` is then when the
    /// request first waited, or `now`, and a request that has waited
    /// [`FILL_WAIT`] since is sent on without a claim. Without it, a miss is a
    /// [`Found::Miss`].
    pub fn find(
        self: &Arc<Self>,
        key: &mut Vec<u8>,
        (host, target, accept_encoding): (&[u8], &[u8], Option<&[u8]>),
        now: Instant,
        (usable, validators): (impl Fn(&Hit) -> bool, bool),
        claim: Option<Instant>,
    ) -> Found {
        let index = self.shard_of(host, target);
        let mut shard = self.lock(index);
        let mut stored = false;
        for with_encoding in [None, accept_encoding] {
            cache_key(key, host, target, with_encoding);
            if let Some(hit) = shard.cache.lookup(key, now, validators) {
                if usable(&hit) {
                    return Found::Hit(hit);
                }
                stored = true;
            }
            if accept_encoding.is_none() {
                break;
            }
        }
        let Some(first_waited) = claim else {
            return Found::Miss;
        };
        // A response is kept that this client cannot be sent: fetching for it
        // would fill nothing the others wait for.
        if stored {
            return Found::Miss;
        }
        cache_key(key, host, target, None);
        let shard = &mut *shard;
        match shard.pending.get_mut(&key[..]) {
            Some(Pending::Claimed { at, waited, .. }) if now < *at + FILL_WAIT => {
                if now >= first_waited + FILL_WAIT {
                    return Found::Miss;
                }
                *waited = true;
                return Found::Wait;
            }
            Some(Pending::Pass { until }) if now < *until => return Found::Miss,
            _ => {}
        }
        shard.next_id += 1;
        let id = shard.next_id;
        let page: Box<[u8]> = key[..].into();
        shard.pending.insert(
            page.clone(),
            Pending::Claimed {
                id,
                at: now,
                waited: false,
            },
        );
        Found::Fill(Fill {
            cache: Arc::clone(self),
            shard: index,
            page,
            id,
        })
    }

    /// Keeps `capture`, the response to a request for the page `target` of
    /// `host` sent at `since`, until `expires`: under the key with
    /// `accept_encoding` when the response varies on it. See
    /// [`ResponseCache::insert`].
    pub fn insert(
        &self,
        key: &mut Vec<u8>,
        (host, target, accept_encoding): (&[u8], &[u8], Option<&[u8]>),
        capture: Capture,
        since: Instant,
        expires: Instant,
    ) {
        let index = self.shard_of(host, target);
        cache_key(key, host, target, accept_encoding);
        self.lock(index).cache.insert(key, capture, since, expires);
    }

    /// Drops the expired entries and the lapsed notes on pages being fetched;
    /// returns how many entries went. It walks every shard, one at a time: call
    /// it from a timer, not per request.
    pub fn remove_expired(&self, now: Instant) -> usize {
        let mut removed = 0;
        for index in 0..self.shards.len() {
            let mut shard = self.lock(index);
            removed += shard.cache.remove_expired(now);
            shard.pending.retain(|_, p| match p {
                Pending::Claimed { at, .. } => now < *at + FILL_WAIT,
                Pending::Pass { until } => now < *until,
            });
        }
        removed
    }

    /// [`SharedCache::remove_expired`] if no worker has done it for a second: every
    /// worker may call it on its timer, and one of them walks the cache each time.
    pub fn sweep(&self, now: Instant) {
        let at = now.saturating_duration_since(self.born).as_millis() as u64;
        let due = self.next_sweep.load(Ordering::Relaxed);
        let next = at + SWEEP_EVERY.as_millis() as u64;
        if at >= due
            && self
                .next_sweep
                .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.remove_expired(now);
        }
    }

    /// The largest response kept, in bytes.
    pub fn max_response(&self) -> usize {
        self.max_response
    }

    /// How many shards the cache has.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Entries dropped to make room for others, memory held and entries, over
    /// all shards.
    pub fn figures(&self) -> (u64, usize, usize) {
        let mut figures = (0, 0, 0);
        for index in 0..self.shards.len() {
            let shard = self.lock(index);
            figures.0 += shard.cache.evictions();
            figures.1 += shard.cache.memory();
            figures.2 += shard.cache.len();
        }
        figures
    }
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache")
            .field("shards", &self.shards.len())
            .field("max_response", &self.max_response)
            .finish()
    }
}

impl Fill {
    /// The fetch ended with a response that may be kept: keeps it (see
    /// [`SharedCache::insert`]) and ends the claim, in one step, so a request
    /// that looks next finds it.
    pub fn keep(
        self,
        key: &mut Vec<u8>,
        accept_encoding: Option<&[u8]>,
        capture: Capture,
        since: Instant,
        expires: Instant,
    ) {
        let mut shard = self.cache.lock(self.shard);
        let page = &self.page[..];
        key.clear();
        key.extend_from_slice(page);
        if let Some(value) = accept_encoding {
            key.push(0);
            key.extend_from_slice(value);
        }
        shard.cache.insert(key, capture, since, expires);
        if matches!(shard.pending.get(page), Some(Pending::Claimed { id, .. }) if *id == self.id) {
            shard.pending.remove(page);
        }
        drop(shard);
        std::mem::forget(self);
    }

    /// The fetch's response may not be kept (its head said so, or it grew too
    /// large): the claim ends at once, and requests for the page that meet from
    /// `now` on go to the backend side by side for [`PASS_FOR`] (if any waited
    /// for this one), rather than one at a time.
    pub fn pass(self, now: Instant) {
        self.end(Some(now + PASS_FOR));
    }

    fn end(&self, pass_until: Option<Instant>) {
        let mut shard = self.cache.lock(self.shard);
        let page = &self.page[..];
        if let Some(Pending::Claimed { id, waited, .. }) = shard.pending.get(page) {
            if *id != self.id {
                return;
            }
            match pass_until {
                Some(until) if *waited => {
                    shard
                        .pending
                        .insert(self.page.clone(), Pending::Pass { until });
                }
                _ => {
                    shard.pending.remove(page);
                }
            }
        }
    }
}

impl Drop for Fill {
    /// The fetch was cut short: the claim goes, and the next request claims it.
    fn drop(&mut self) {
        self.end(None);
    }
}

#[cfg(test)]
mod tests {
    use crate::ResponseFields;
    use fastpath_http::{Limits, ResponseParser, Version};

    use super::*;

    fn capture(body: &str) -> Capture {
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut parser = ResponseParser::new(Limits::default());
        let head = parser.parse(response.as_bytes(), false).unwrap().unwrap();
        let mut capture = Capture::new(
            &head,
            Version::Http11,
            &ResponseFields::read(head.headers()),
            fastpath_http::Recoding::Unchanged,
        )
        .unwrap();
        capture.push(&response.as_bytes()[head.head_len..]);
        capture
    }

    const PAGE: (&[u8], &[u8], Option<&[u8]>) = (b"h", b"/p", None);

    fn body(found: Found) -> String {
        match found {
            Found::Hit(hit) => String::from_utf8(hit.body.to_vec()).unwrap(),
            other => panic!("not a hit: {other:?}"),
        }
    }

    #[test]
    fn concurrent_misses_wait_for_one_fetch() {
        let cache = Arc::new(SharedCache::new(1 << 20, 1 << 16));
        let t0 = Instant::now();
        let mut key = Vec::new();
        let any = |_: &Hit| true;
        let Found::Fill(fill) = cache.find(&mut key, PAGE, t0, (any, false), Some(t0)) else {
            panic!("the first miss does not claim the fetch");
        };
        for _ in 0..20 {
            assert!(matches!(
                cache.find(&mut key, PAGE, t0, (any, false), Some(t0)),
                Found::Wait
            ));
        }
        // A HEAD (no claim) never waits.
        assert!(matches!(
            cache.find(&mut key, PAGE, t0, (any, false), None),
            Found::Miss
        ));
        // Another page is not held up.
        let other = (&b"h"[..], &b"/q"[..], None);
        assert!(matches!(
            cache.find(&mut key, other, t0, (any, false), Some(t0)),
            Found::Fill(_)
        ));
        fill.keep(
            &mut key,
            None,
            capture("v1"),
            t0,
            t0 + Duration::from_secs(60),
        );
        assert_eq!(
            body(cache.find(&mut key, PAGE, t0, (any, false), Some(t0))),
            "v1"
        );
    }

    #[test]
    fn a_fetch_given_up_is_claimed_by_the_next_request() {
        let cache = Arc::new(SharedCache::new(1 << 20, 1 << 16));
        let t0 = Instant::now();
        let mut key = Vec::new();
        let any = |_: &Hit| true;
        let first = cache.find(&mut key, PAGE, t0, (any, false), Some(t0));
        assert!(matches!(first, Found::Fill(_)));
        drop(first);
        let Found::Fill(second) = cache.find(&mut key, PAGE, t0, (any, false), Some(t0)) else {
            panic!("a given-up claim still holds");
        };
        assert!(matches!(
            cache.find(&mut key, PAGE, t0, (any, false), Some(t0)),
            Found::Wait
        ));
        // Unkept after others waited: they go side by side for a while.
        second.pass(t0);
        for _ in 0..3 {
            assert!(matches!(
                cache.find(&mut key, PAGE, t0, (any, false), Some(t0)),
                Found::Miss
            ));
        }
        let after = t0 + PASS_FOR;
        assert!(matches!(
            cache.find(&mut key, PAGE, after, (any, false), Some(after)),
            Found::Fill(_)
        ));
    }

    #[test]
    fn waiting_is_bounded() {
        let cache = Arc::new(SharedCache::new(1 << 20, 1 << 16));
        let t0 = Instant::now();
        let mut key = Vec::new();
        let any = |_: &Hit| true;
        let first = cache.find(&mut key, PAGE, t0, (any, false), Some(t0));
        let almost = t0 + FILL_WAIT - Duration::from_millis(1);
        assert!(matches!(
            cache.find(&mut key, PAGE, almost, (any, false), Some(t0)),
            Found::Wait
        ));
        // A claim that old no longer holds anyone back.
        let late = t0 + FILL_WAIT;
        let Found::Fill(second) = cache.find(&mut key, PAGE, late, (any, false), Some(late)) else {
            panic!("a lapsed claim still holds");
        };
        // The first fetch ending late does not end the claim that replaced it.
        drop(first);
        assert!(matches!(
            cache.find(&mut key, PAGE, late, (any, false), Some(late)),
            Found::Wait
        ));
        // A request that has waited FILL_WAIT goes on its own, whoever holds the claim.
        assert!(matches!(
            cache.find(&mut key, PAGE, late, (any, false), Some(t0)),
            Found::Miss
        ));
        drop(second);
        assert_eq!(cache.remove_expired(late), 0);
    }

    #[test]
    fn an_unusable_hit_is_a_miss_that_claims_nothing() {
        let cache = Arc::new(SharedCache::new(1 << 20, 1 << 16));
        let t0 = Instant::now();
        let mut key = Vec::new();
        cache.insert(
            &mut key,
            PAGE,
            capture("v1"),
            t0,
            t0 + Duration::from_secs(60),
        );
        let none = |_: &Hit| false;
        assert!(matches!(
            cache.find(&mut key, PAGE, t0, (none, false), Some(t0)),
            Found::Miss
        ));
        assert_eq!(cache.figures().2, 1);
    }

    #[test]
    fn the_budget_is_the_whole_caches() {
        assert_eq!(SharedCache::new(32 << 20, 1 << 20).shards(), MAX_SHARDS);
        assert_eq!(SharedCache::new(4 << 20, 1 << 20).shards(), 4);
        assert_eq!(SharedCache::new(1 << 20, 1 << 20).shards(), 1);
        assert_eq!(SharedCache::new(0, 1 << 20).shards(), 1);
        let cache = Arc::new(SharedCache::new(64 << 10, 1 << 10));
        let t0 = Instant::now();
        let mut key = Vec::new();
        for i in 0..1000 {
            let target = format!("/p{i}");
            let page = (&b"h"[..], target.as_bytes(), None);
            cache.insert(
                &mut key,
                page,
                capture("x"),
                t0,
                t0 + Duration::from_secs(60),
            );
        }
        let (evictions, memory, entries) = cache.figures();
        assert!(memory <= 64 << 10, "{memory}");
        assert!(evictions > 0 && entries > 100, "{evictions} {entries}");
    }

    #[test]
    fn pages_spread_over_the_shards() {
        let cache = SharedCache::new(32 << 20, 1 << 20);
        let mut counts = [0usize; MAX_SHARDS];
        for i in 0..1600 {
            counts[cache.shard_of(b"example.com", format!("/app/page/{i}").as_bytes())] += 1;
            counts[cache.shard_of(b"example.com", format!("/app/list?page={i}").as_bytes())] += 1;
        }
        assert!(counts.iter().all(|&n| n > 100 && n < 300), "{counts:?}");
        // Virtual hosts with the same paths spread too.
        let mut counts = [0usize; MAX_SHARDS];
        for i in 0..1600 {
            counts[cache.shard_of(format!("site{i}.test").as_bytes(), b"/")] += 1;
        }
        assert!(counts.iter().all(|&n| n > 50 && n < 150), "{counts:?}");
    }

    #[test]
    fn workers_share_entries() {
        let cache = Arc::new(SharedCache::new(1 << 20, 1 << 16));
        let t0 = Instant::now();
        let filler = Arc::clone(&cache);
        std::thread::spawn(move || {
            let mut key = Vec::new();
            let Found::Fill(fill) =
                filler.find(&mut key, PAGE, t0, (|_: &Hit| true, false), Some(t0))
            else {
                panic!("no claim");
            };
            fill.keep(
                &mut key,
                None,
                capture("v1"),
                t0,
                t0 + Duration::from_secs(60),
            );
        })
        .join()
        .unwrap();
        let mut key = Vec::new();
        assert_eq!(
            body(cache.find(&mut key, PAGE, t0, (|_: &Hit| true, false), Some(t0))),
            "v1"
        );
    }
}
