//! One worker's cache of whole backend responses, as TUX kept the output of
//! its user-space modules: bytes ready to send, looked up by request.

use std::sync::Arc;
use std::time::Instant;

use lru::LruCache;

/// Bookkeeping bytes counted per entry besides its key and response: the map
/// slot, the LRU links and the `Arc` header, rounded up.
const ENTRY_OVERHEAD: usize = 128;

/// Builds the cache key of a request into `out` (cleared first): the host name
/// (empty when the request named none), the request target as sent, and, for
/// a response that varies on it, the request's `Accept-Encoding` value.
///
/// The caller does not know, before it has a response, whether the response
/// varies; so a lookup tries the key without `Accept-Encoding` first and, on a
/// miss, the key with it; an insert uses the key with `Accept-Encoding` when
/// [`super::vary_accept_encoding`] says so. The value is used as sent, not
/// normalised: two spellings cost two entries, but no client ever gets a coding
/// it did not ask for. A request without the field and one with an empty field
/// get different keys.
///
/// The parts are separated by NUL, which none of them can contain, so two
/// different requests never share a key.
pub fn cache_key(out: &mut Vec<u8>, host: &[u8], target: &[u8], accept_encoding: Option<&[u8]>) {
    out.clear();
    out.extend_from_slice(host);
    out.push(0);
    out.extend_from_slice(target);
    if let Some(value) = accept_encoding {
        out.push(0);
        out.extend_from_slice(value);
    }
}

struct Entry {
    response: Arc<[u8]>,
    expires: Instant,
    memory: usize,
}

/// Per-worker cache of whole backend responses (head and body, ready to
/// send), least recently used first out, bounded in memory and in the size of
/// the largest response kept. Entries expire at the time given when inserted.
///
/// A hit takes no lock and copies nothing: the caller gets a shared reference
/// to the bytes, which stay valid while it sends them even if the entry is
/// evicted meanwhile.
pub struct ResponseCache {
    entries: LruCache<Box<[u8]>, Entry>,
    max_memory: usize,
    max_response: usize,
    memory: usize,
}

impl ResponseCache {
    /// An empty cache holding at most `max_memory` bytes (responses, keys and
    /// bookkeeping), keeping no response larger than `max_response` bytes.
    /// `max_memory` 0 keeps nothing.
    pub fn new(max_memory: usize, max_response: usize) -> Self {
        ResponseCache {
            entries: LruCache::unbounded(),
            max_memory,
            max_response,
            memory: 0,
        }
    }

    /// The response stored under `key` if it has not expired at `now`; an
    /// expired one is dropped. A hit makes the entry the most recently used.
    pub fn get(&mut self, key: &[u8], now: Instant) -> Option<Arc<[u8]>> {
        let entry = self.entries.get(key)?;
        if now < entry.expires {
            return Some(Arc::clone(&entry.response));
        }
        self.remove(key);
        None
    }

    /// Keeps `response` under `key` until `expires`, replacing what was there
    /// and evicting the least recently used entries to make room.
    ///
    /// A response larger than `max_response`, or one that would not fit even in
    /// an empty cache, is not kept; any older entry under `key` is dropped all
    /// the same, since the backend has just said something newer.
    pub fn insert(&mut self, key: &[u8], response: Arc<[u8]>, expires: Instant) {
        self.remove(key);
        let memory = response.len() + key.len() + ENTRY_OVERHEAD;
        if response.len() > self.max_response || memory > self.max_memory {
            return;
        }
        while self.memory + memory > self.max_memory {
            match self.entries.pop_lru() {
                Some((_, old)) => self.memory -= old.memory,
                None => break,
            }
        }
        self.memory += memory;
        self.entries.put(
            key.into(),
            Entry {
                response,
                expires,
                memory,
            },
        );
    }

    /// Drops the entry under `key`, if any; true if there was one. For
    /// invalidation after a successful unsafe request to the same target
    /// (RFC 9111 §4.4).
    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self.entries.pop(key) {
            Some(old) => {
                self.memory -= old.memory;
                true
            }
            None => false,
        }
    }

    /// Drops every entry expired at `now`; returns how many. Expired entries
    /// are also dropped when looked up or evicted, so calling this is optional:
    /// it returns their memory sooner. It walks the whole cache, so call it
    /// from a timer, not per request.
    pub fn remove_expired(&mut self, now: Instant) -> usize {
        let expired: Vec<Box<[u8]>> = self
            .entries
            .iter()
            .filter(|(_, e)| now >= e.expires)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &expired {
            self.remove(key);
        }
        expired.len()
    }

    /// Memory held by the entries, as counted against `max_memory`.
    pub fn memory(&self) -> usize {
        self.memory
    }

    /// Number of entries, expired ones not yet dropped included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The largest response kept, in bytes.
    pub fn max_response(&self) -> usize {
        self.max_response
    }
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache")
            .field("len", &self.entries.len())
            .field("memory", &self.memory)
            .field("max_memory", &self.max_memory)
            .field("max_response", &self.max_response)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn bytes(n: usize, fill: u8) -> Arc<[u8]> {
        vec![fill; n].into()
    }

    /// What one entry of `n` bytes under a one-byte key costs.
    fn cost(n: usize) -> usize {
        n + 1 + ENTRY_OVERHEAD
    }

    #[test]
    fn hit_until_expiry() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        c.insert(b"k", bytes(10, 1), t0 + Duration::from_secs(5));
        assert_eq!(c.get(b"k", t0).as_deref(), Some(&[1u8; 10][..]));
        assert!(c.get(b"k", t0 + Duration::from_millis(4999)).is_some());
        assert_eq!(c.len(), 1);
        assert_eq!(c.memory(), cost(10));
        assert!(c.get(b"k", t0 + Duration::from_secs(5)).is_none());
        assert!(c.is_empty());
        assert_eq!(c.memory(), 0);
        assert!(c.get(b"other", t0).is_none());
    }

    #[test]
    fn replacing_an_entry_counts_memory_once() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        c.insert(b"k", bytes(10, 1), later);
        c.insert(b"k", bytes(20, 2), later);
        assert_eq!(c.len(), 1);
        assert_eq!(c.memory(), cost(20));
        assert_eq!(c.get(b"k", t0).unwrap()[0], 2);
    }

    #[test]
    fn least_recently_used_is_evicted_by_memory() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(3 * cost(100), 1000);
        c.insert(b"a", bytes(100, 1), later);
        c.insert(b"b", bytes(100, 2), later);
        c.insert(b"c", bytes(100, 3), later);
        assert_eq!(c.memory(), 3 * cost(100));
        // Touch "a" so "b" is the least recently used.
        assert!(c.get(b"a", t0).is_some());
        c.insert(b"d", bytes(100, 4), later);
        assert!(c.get(b"b", t0).is_none());
        for key in [b"a", b"c", b"d"] {
            assert!(c.get(key, t0).is_some());
        }
        // A larger one pushes out as many as needed, oldest first.
        c.insert(b"e", bytes(250, 5), later);
        assert!(c.get(b"a", t0).is_none());
        assert!(c.get(b"c", t0).is_none());
        assert!(c.get(b"d", t0).is_some());
        assert!(c.get(b"e", t0).is_some());
        assert!(c.memory() <= 3 * cost(100));
        assert_eq!(c.memory(), cost(100) + cost(250));
    }

    #[test]
    fn oversized_responses_are_refused() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(10_000, 100);
        c.insert(b"k", bytes(100, 1), later);
        assert!(c.get(b"k", t0).is_some());
        c.insert(b"big", bytes(101, 1), later);
        assert!(c.get(b"big", t0).is_none());
        // A too-large replacement drops the old entry.
        c.insert(b"k", bytes(101, 2), later);
        assert!(c.get(b"k", t0).is_none());
        assert_eq!(c.memory(), 0);

        // Larger than the whole cache: refused without evicting anything.
        let mut small = ResponseCache::new(cost(50), 1000);
        small.insert(b"a", bytes(50, 1), later);
        small.insert(b"b", bytes(51, 1), later);
        assert!(small.get(b"a", t0).is_some());
        assert!(small.get(b"b", t0).is_none());

        let mut off = ResponseCache::new(0, 1000);
        off.insert(b"a", bytes(0, 1), later);
        assert!(off.is_empty());
    }

    #[test]
    fn remove_and_remove_expired() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        c.insert(b"short", bytes(1, 1), t0 + Duration::from_secs(1));
        c.insert(b"long", bytes(1, 1), t0 + Duration::from_secs(100));
        c.insert(b"gone", bytes(1, 1), t0 + Duration::from_secs(100));
        assert!(c.remove(b"gone"));
        assert!(!c.remove(b"gone"));
        assert_eq!(c.remove_expired(t0 + Duration::from_secs(1)), 1);
        assert_eq!(c.len(), 1);
        assert_eq!(c.memory(), 4 + 1 + ENTRY_OVERHEAD);
        assert!(c.get(b"long", t0).is_some());
    }

    #[test]
    fn a_hit_outlives_its_eviction() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(cost(10), 100);
        c.insert(b"a", bytes(10, 7), later);
        let held = c.get(b"a", t0).unwrap();
        c.insert(b"b", bytes(10, 8), later);
        assert!(c.get(b"a", t0).is_none());
        assert_eq!(&held[..], &[7u8; 10]);
    }

    #[test]
    fn keys() {
        let mut k = Vec::new();
        cache_key(&mut k, b"a.test", b"/x?y=1", None);
        assert_eq!(k, b"a.test\0/x?y=1");
        cache_key(&mut k, b"a.test", b"/x?y=1", Some(b"gzip, br"));
        assert_eq!(k, b"a.test\0/x?y=1\0gzip, br");
        let mut empty = Vec::new();
        cache_key(&mut empty, b"a.test", b"/x?y=1", Some(b""));
        let mut none = Vec::new();
        cache_key(&mut none, b"a.test", b"/x?y=1", None);
        assert_ne!(empty, none);
        // The host is part of the key, so virtual hosts do not share entries.
        let mut other = Vec::new();
        cache_key(&mut other, b"b.test", b"/x?y=1", None);
        assert_ne!(other, none);
        cache_key(&mut k, b"", b"/", None);
        assert_eq!(k, b"\0/");
    }

    #[test]
    fn vary_lookup_protocol() {
        // A response that varies is found by the second lookup; one that does
        // not, by the first.
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        let mut key = Vec::new();
        cache_key(&mut key, b"h", b"/v", Some(b"gzip"));
        c.insert(&key, bytes(1, 1), later);
        cache_key(&mut key, b"h", b"/v", None);
        assert!(c.get(&key, t0).is_none());
        cache_key(&mut key, b"h", b"/v", Some(b"gzip"));
        assert!(c.get(&key, t0).is_some());
        cache_key(&mut key, b"h", b"/v", Some(b"br"));
        assert!(c.get(&key, t0).is_none());
    }
}
