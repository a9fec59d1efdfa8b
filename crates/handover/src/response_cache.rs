//! A cache of whole backend responses, as TUX kept the output of its
//! user-space modules: bytes ready to send, looked up by request. One
//! [`ResponseCache`] is single-threaded; [`super::SharedCache`] makes one
//! for all the workers of a process out of several.
//!
//! A kept response is stored in two shared parts, the head without its
//! closing blank line and the body, so the one field that changes from hit to
//! hit, `Age` (RFC 9111 §5.1), is written between them when sent and nothing
//! else is copied. The head is written once, by the response-head encoder,
//! from the head the proxy parsed ([`Capture::new`]): nothing here reads HTTP
//! bytes again.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use fastpath_http::{
    write_not_modified_head, write_stored_response_head, BodyRelay, Recoding, ResponseHead, Version,
};
use lru::LruCache;

use super::cacheable::ResponseFields;

/// Bookkeeping bytes counted per entry besides its key and response: the map
/// slot, the LRU links and the two `Arc` headers, rounded up.
const ENTRY_OVERHEAD: usize = 128;

/// The largest `Age` sent: RFC 9111 §1.2.2 has a cache send 2^31 when an age
/// would be larger than it can represent.
pub const MAX_AGE: u64 = 1 << 31;

/// How often at most a hit moves its entry to the front of the LRU order:
/// moving it writes to the list's links, which workers that share the cache
/// and hit the same page would pass between their cores on every hit. An
/// entry hit within the last second is recent enough.
const PROMOTE_EVERY: Duration = Duration::from_secs(1);

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
    head: Arc<[u8]>,
    body: Arc<[u8]>,
    chunked: bool,
    status: u16,
    validators: Option<Arc<Validators>>,
    /// The `Age` the backend sent, seconds (0 if none or invalid).
    initial_age: u64,
    /// Where the entry's age starts counting on this server's clock.
    since: Instant,
    expires: Instant,
    memory: usize,
    /// When a hit last moved the entry to the front, if one has.
    promoted: Option<Instant>,
}

/// A response found in the cache, to be sent as `head`, then an `Age: {age}`
/// field and the blank line that ends the head, then `body`.
#[derive(Debug, Clone)]
pub struct Hit {
    /// The status line and header fields as relayed the first time, less any
    /// `Age` field, without the blank line that ends the head.
    pub head: Arc<[u8]>,
    /// The body as relayed (chunked if it was), possibly empty.
    pub body: Arc<[u8]>,
    /// The body is kept chunked (`head` says `Transfer-Encoding: chunked`): only an
    /// HTTP/1.1 client can be sent it as it is.
    pub chunked: bool,
    /// The response status, for the access log.
    pub status: u16,
    /// What a conditional request is checked against, for a 200 response that has an
    /// `ETag` or a `Last-Modified`.
    pub validators: Option<Arc<Validators>>,
    /// The response's current age in seconds (RFC 9111 §4.2.3): the backend's
    /// `Age` plus the whole seconds since the request that fetched it was
    /// sent, at most [`MAX_AGE`].
    pub age: u64,
}

/// A cache of whole backend responses (head and body, ready to send), least
/// recently used first out, bounded in memory and in the size of the largest
/// response kept. Entries expire at the time given when inserted. It is one
/// shard of a [`super::SharedCache`].
///
/// A hit copies nothing: the caller gets shared references
/// to the bytes, which stay valid while it sends them even if the entry is
/// evicted meanwhile, and the current age to put between them.
pub struct ResponseCache {
    entries: LruCache<Box<[u8]>, Entry>,
    max_memory: usize,
    max_response: usize,
    memory: usize,
    evictions: u64,
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
            evictions: 0,
        }
    }

    /// The response stored under `key` if it has not expired at `now`; an
    /// expired one is dropped. A hit makes the entry the most recently used
    /// (if another hit has not in the last second).
    pub fn get(&mut self, key: &[u8], now: Instant) -> Option<Hit> {
        self.lookup(key, now, true)
    }

    /// [`ResponseCache::get`], with the entry's validators only if
    /// `validators` (a conditional request): each part of a hit that is
    /// shared costs a reference count that other workers may be changing.
    pub fn lookup(&mut self, key: &[u8], now: Instant, validators: bool) -> Option<Hit> {
        let entry = self.entries.peek_mut(key)?;
        if now >= entry.expires {
            self.remove(key);
            return None;
        }
        let promote = entry
            .promoted
            .is_none_or(|at| now.saturating_duration_since(at) >= PROMOTE_EVERY);
        if promote {
            entry.promoted = Some(now);
        }
        // Whole seconds, rounded down: an entry is fresh only while its age is
        // below the lifetime it was given, so it never shows an Age as large
        // as its max-age.
        let resident = now.saturating_duration_since(entry.since).as_secs();
        let hit = Hit {
            head: Arc::clone(&entry.head),
            body: Arc::clone(&entry.body),
            chunked: entry.chunked,
            status: entry.status,
            validators: if validators {
                entry.validators.clone()
            } else {
                None
            },
            age: entry.initial_age.saturating_add(resident).min(MAX_AGE),
        };
        if promote {
            self.entries.promote(key);
        }
        Some(hit)
    }

    /// Keeps the captured response under `key` until `expires`, replacing
    /// what was there and evicting the least recently used entries to make
    /// room.
    ///
    /// `since` is when the request that fetched the response was sent. Its age
    /// when served is the backend's `Age` plus the time since then: counting
    /// from the request rather than the response includes the response delay,
    /// as RFC 9111 §4.2.3 does, so the caller computes `expires` from the same
    /// instant (`since` plus what [`super::cache_lifetime`] gave, which has
    /// already taken the backend's `Age` off). The backend's `Date` is not used
    /// (its one-second granularity would add a second of age to fresh
    /// responses).
    ///
    /// A response larger than `max_response` (head and body as kept), or one
    /// that would not fit even in an empty cache, is not kept; any older entry
    /// under `key` is dropped all the same, since the backend has just said
    /// something newer.
    ///
    /// An entry fetched by a request sent after `since` is newer than this
    /// response and stays: two fetches of one page that overlap (workers that
    /// missed together) end in the cache keeping the later version, so no
    /// client is served one older than a version already served.
    pub fn insert(&mut self, key: &[u8], capture: Capture, since: Instant, expires: Instant) {
        if self.entries.peek(key).is_some_and(|e| e.since > since) {
            return;
        }
        self.remove(key);
        if capture.size() > self.max_response {
            return;
        }
        let memory = capture.size()
            + key.len()
            + ENTRY_OVERHEAD
            + capture
                .validators
                .as_ref()
                .map_or(0, |v| v.not_modified.len());
        if memory > self.max_memory {
            return;
        }
        while self.memory + memory > self.max_memory {
            match self.entries.pop_lru() {
                Some((_, old)) => {
                    self.evictions += 1;
                    self.memory -= old.memory
                }
                None => break,
            }
        }
        self.memory += memory;
        self.entries.put(
            key.into(),
            Entry {
                head: capture.head.into(),
                body: capture.body.into(),
                chunked: capture.chunked,
                status: capture.status,
                validators: capture.validators.map(Arc::new),
                initial_age: capture.age,
                since,
                expires,
                memory,
                promoted: None,
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

    /// Entries dropped so far to make room for others.
    pub fn evictions(&self) -> u64 {
        self.evictions
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

/// The validators of a cached 200 response (RFC 9110 §8.8), and the head of the 304 that
/// answers a conditional request they satisfy.
#[derive(Debug)]
pub struct Validators {
    /// The `ETag` value, quotes and any `W/` included.
    pub etag: Option<String>,
    /// The `Last-Modified` date, if it is a valid HTTP-date.
    pub last_modified: Option<SystemTime>,
    /// "HTTP/1.1 304 Not Modified" and the fields RFC 9110 §15.4.5 has a 304 repeat
    /// (Cache-Control, Content-Location, Date, ETag, Expires, Vary), without the empty line
    /// that ends the head: an `Age` field and the empty line follow when it is sent.
    pub not_modified: Arc<[u8]>,
}

impl Validators {
    /// Whether a request with these conditional fields gets 304 (RFC 9110 §13.2.2, steps 3
    /// and 4 for GET and HEAD): `If-None-Match` when present, else `If-Modified-Since`.
    pub fn not_modified(
        &self,
        if_none_match: Option<&[u8]>,
        if_modified_since: Option<&[u8]>,
    ) -> bool {
        if let Some(list) = if_none_match {
            return self
                .etag
                .as_deref()
                .is_some_and(|etag| fastpath_http::etag_list_matches(list, etag, false));
        }
        let since = if_modified_since.and_then(fastpath_http::parse_http_date);
        matches!((self.last_modified, since), (Some(modified), Some(since)) if modified <= since)
    }
}

/// A backend response on its way to the cache: the head a hit sends, written
/// once from the head the proxy parsed, what the cache needs to know of it, and
/// the body as it is relayed.
#[derive(Debug)]
pub struct Capture {
    /// The head as relayed to an HTTP/1.1 client that keeps its connection, less
    /// its `Age` fields and its closing empty line.
    head: Vec<u8>,
    /// The body is kept chunked.
    chunked: bool,
    status: u16,
    /// The first `Age` field's value, read as [`super::cache_lifetime`] reads
    /// it; 0 if there is none or it is invalid.
    age: u64,
    validators: Option<Validators>,
    body: Vec<u8>,
}

impl Capture {
    /// Starts keeping the response whose head the proxy parsed as `head` (for a
    /// GET) and relays to a `client` of that version; `None` when its body could not
    /// be replayed from memory because it ends with the connection, or when the bytes
    /// relayed to this client are not the ones kept (a chunked body is dechunked for an
    /// HTTP/1.0 client, and kept chunked). A body coded on the way (`recoding`) is kept as
    /// coded, chunked.
    pub fn new(
        head: &ResponseHead<'_>,
        client: Version,
        fields: &ResponseFields<'_>,
        recoding: Recoding,
    ) -> Option<Capture> {
        let mut stored = Vec::with_capacity(head.head_len);
        let chunked = match write_stored_response_head(head, recoding, &mut stored) {
            BodyRelay::UntilClose | BodyRelay::Dechunk => return None,
            BodyRelay::Chunked if client != Version::Http11 => return None,
            relay => relay == BodyRelay::Chunked,
        };
        let age = fields.relayed_age();
        let mut validators = None;
        if head.status == 200 {
            let (etag, last_modified) = fields.validators();
            let etag = etag
                .and_then(|v| std::str::from_utf8(v.trim_ascii()).ok())
                .map(|tag| match recoding {
                    // As the coded response's head says it.
                    Recoding::Coded(_) if !tag.starts_with("W/") => format!("W/{tag}"),
                    _ => tag.to_owned(),
                });
            let last_modified =
                last_modified.and_then(|v| fastpath_http::parse_http_date(v.trim_ascii()));
            if etag.is_some() || last_modified.is_some() {
                let mut not_modified = Vec::with_capacity(128);
                write_not_modified_head(head, recoding, &mut not_modified);
                validators = Some(Validators {
                    etag,
                    last_modified,
                    not_modified: not_modified.into(),
                });
            }
        }
        Some(Capture {
            head: stored,
            chunked,
            status: head.status,
            age,
            validators,
            body: Vec::new(),
        })
    }

    /// Appends body bytes as they are relayed.
    pub fn push(&mut self, bytes: &[u8]) {
        self.body.extend_from_slice(bytes);
    }

    /// The bytes kept so far, head and body.
    pub fn size(&self) -> usize {
        self.head.len() + self.body.len()
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

    use fastpath_http::{Limits, ResponseParser};

    use super::*;

    /// What the proxy hands the cache for the backend response `response`:
    /// its parsed head, then its body.
    fn capture(response: &[u8]) -> Capture {
        let mut parser = ResponseParser::new(Limits::default());
        let head = parser
            .parse(response, false)
            .unwrap()
            .expect("a whole head");
        let mut capture = Capture::new(
            &head,
            Version::Http11,
            &ResponseFields::read(head.headers()),
            fastpath_http::Recoding::Unchanged,
        )
        .expect("a body that can be kept");
        capture.push(&response[head.head_len..]);
        capture
    }

    #[test]
    fn validators_of_a_stored_200_decide_304s() {
        let mut cache = ResponseCache::new(1 << 20, 1 << 16);
        let now = Instant::now();
        let stored = b"HTTP/1.1 200 OK\r\nServer: b\r\nETag: W/\"x1\"\r\nLast-Modified: Sat, 21 Nov 2026 10:00:00 GMT\r\nContent-Type: text/plain\r\nExpires: Sat, 21 Nov 2026 11:00:00 GMT\r\nContent-Length: 2\r\n\r\nhi";
        cache.insert(b"k", capture(stored), now, now + Duration::from_secs(60));
        let hit = cache.get(b"k", now).unwrap();
        let v = hit.validators.expect("validators");
        assert_eq!(v.etag.as_deref(), Some("W/\"x1\""));
        assert_eq!(
            &v.not_modified[..],
            &b"HTTP/1.1 304 Not Modified\r\nServer: b\r\nETag: W/\"x1\"\r\nExpires: Sat, 21 Nov 2026 11:00:00 GMT\r\n"[..]
        );
        // Weak comparison for If-None-Match; it overrides If-Modified-Since.
        assert!(v.not_modified(Some(b"\"x1\""), None));
        assert!(v.not_modified(Some(b"*"), None));
        assert!(!v.not_modified(Some(b"\"x2\""), Some(b"Sun, 22 Nov 2026 10:00:00 GMT")));
        assert!(v.not_modified(None, Some(b"Sat, 21 Nov 2026 10:00:00 GMT")));
        assert!(!v.not_modified(None, Some(b"Sat, 21 Nov 2026 09:59:59 GMT")));
        assert!(!v.not_modified(None, Some(b"not a date")));
        assert!(!v.not_modified(None, None));
        // Other statuses, and responses without validators, have none.
        cache.insert(
            b"n",
            capture(b"HTTP/1.1 404 Not Found\r\nETag: \"a\"\r\nContent-Length: 0\r\n\r\n"),
            now,
            now + Duration::from_secs(60),
        );
        assert!(cache.get(b"n", now).unwrap().validators.is_none());
        cache.insert(b"p", response(0, 0), now, now + Duration::from_secs(60));
        assert!(cache.get(b"p", now).unwrap().validators.is_none());
    }

    /// The head a hit sends for `response(n, _)`, less its Age and end.
    fn head(n: usize) -> String {
        format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n")
    }

    /// A 200 response with a body of `n` bytes of `fill`, captured.
    fn response(n: usize, fill: u8) -> Capture {
        let mut r = format!("{}\r\n", head(n)).into_bytes();
        r.resize(r.len() + n, fill);
        capture(&r)
    }

    /// What `response(n, _)` keeps: its head and body.
    fn size(n: usize) -> usize {
        head(n).len() + n
    }

    /// What one entry made by `response(n, _)` costs under a one-byte key.
    fn cost(n: usize) -> usize {
        size(n) + 1 + ENTRY_OVERHEAD
    }

    fn body_of(hit: Option<Hit>) -> Option<Vec<u8>> {
        hit.map(|h| h.body.to_vec())
    }

    /// The bytes a hit puts on the wire.
    fn wire(hit: &Hit) -> Vec<u8> {
        let mut out = hit.head.to_vec();
        out.extend_from_slice(format!("Age: {}\r\n\r\n", hit.age).as_bytes());
        out.extend_from_slice(&hit.body);
        out
    }

    #[test]
    fn hit_until_expiry() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        c.insert(b"k", response(10, 1), t0, t0 + Duration::from_secs(5));
        assert_eq!(body_of(c.get(b"k", t0)), Some(vec![1u8; 10]));
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
        c.insert(b"k", response(30, 1), t0, later);
        c.insert(b"k", response(40, 2), t0, later);
        assert_eq!(c.len(), 1);
        assert_eq!(c.memory(), cost(40));
        assert_eq!(c.get(b"k", t0).unwrap().body[0], 2);
    }

    #[test]
    fn least_recently_used_is_evicted_by_memory() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(3 * cost(100), 1000);
        c.insert(b"a", response(100, 1), t0, later);
        c.insert(b"b", response(100, 2), t0, later);
        c.insert(b"c", response(100, 3), t0, later);
        assert_eq!(c.memory(), 3 * cost(100));
        // Touch "a" so "b" is the least recently used.
        assert!(c.get(b"a", t0).is_some());
        c.insert(b"d", response(100, 4), t0, later);
        assert!(c.get(b"b", t0).is_none());
        for key in [b"a", b"c", b"d"] {
            assert!(c.get(key, t0).is_some());
        }
        // A larger one pushes out as many as needed, oldest first.
        c.insert(b"e", response(250, 5), t0, later);
        assert!(c.get(b"a", t0).is_none());
        assert!(c.get(b"c", t0).is_none());
        assert!(c.get(b"d", t0).is_some());
        assert!(c.get(b"e", t0).is_some());
        assert!(c.memory() <= 3 * cost(100));
        assert_eq!(c.memory(), cost(100) + cost(250));
    }

    #[test]
    fn a_hit_moves_its_entry_to_the_front_once_a_second() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(2 * cost(100), 1000);
        c.insert(b"a", response(100, 1), t0, later);
        c.insert(b"b", response(100, 2), t0, later);
        // The first hit on "a" moves it ahead of "b"...
        assert!(c.get(b"a", t0).is_some());
        assert!(c.get(b"b", t0).is_some());
        // ...and b's first hit moves it ahead again; a's second hit within the second does
        // not, so "a" goes first.
        assert!(c.get(b"a", t0 + Duration::from_millis(999)).is_some());
        c.insert(b"c", response(100, 3), t0, later);
        assert!(c.get(b"a", t0).is_none());
        assert!(c.get(b"b", t0).is_some());
        // A second later a hit moves it again.
        assert!(c.get(b"c", t0).is_some());
        assert!(c.get(b"b", t0 + Duration::from_secs(1)).is_some());
        c.insert(b"d", response(100, 4), t0, later);
        assert!(c.get(b"c", t0).is_none());
        assert!(c.get(b"b", t0).is_some());
        // Validators come only when asked for.
        let v = b"HTTP/1.1 200 OK\r\nETag: \"x\"\r\nContent-Length: 0\r\n\r\n";
        c.insert(b"v", capture(v), t0, later);
        assert!(c.lookup(b"v", t0, false).unwrap().validators.is_none());
        assert!(c.lookup(b"v", t0, true).unwrap().validators.is_some());
    }

    #[test]
    fn oversized_responses_are_refused() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(10_000, size(100));
        c.insert(b"k", response(100, 1), t0, later);
        assert!(c.get(b"k", t0).is_some());
        c.insert(b"big", response(101, 1), t0, later);
        assert!(c.get(b"big", t0).is_none());
        // A too-large replacement drops the old entry.
        c.insert(b"k", response(101, 2), t0, later);
        assert!(c.get(b"k", t0).is_none());
        assert_eq!(c.memory(), 0);

        // Larger than the whole cache: refused without evicting anything.
        let mut small = ResponseCache::new(cost(50), 1000);
        small.insert(b"a", response(50, 1), t0, later);
        small.insert(b"b", response(51, 1), t0, later);
        assert!(small.get(b"a", t0).is_some());
        assert!(small.get(b"b", t0).is_none());

        let mut off = ResponseCache::new(0, 1000);
        off.insert(b"a", response(0, 0), t0, later);
        assert!(off.is_empty());
    }

    #[test]
    fn remove_and_remove_expired() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        c.insert(b"short", response(20, 1), t0, t0 + Duration::from_secs(1));
        c.insert(b"long", response(20, 1), t0, t0 + Duration::from_secs(100));
        c.insert(b"gone", response(20, 1), t0, t0 + Duration::from_secs(100));
        assert!(c.remove(b"gone"));
        assert!(!c.remove(b"gone"));
        assert_eq!(c.remove_expired(t0 + Duration::from_secs(1)), 1);
        assert_eq!(c.len(), 1);
        assert_eq!(c.memory(), size(20) + 4 + ENTRY_OVERHEAD);
        assert!(c.get(b"long", t0).is_some());
    }

    #[test]
    fn a_later_fetch_is_never_replaced_by_an_earlier_one() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(10);
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        // The fetch sent at t1 ended first; the one sent at t0 ends after it.
        c.insert(b"k", response(10, 2), t1, later);
        c.insert(b"k", response(10, 1), t0, later);
        assert_eq!(c.get(b"k", t1).unwrap().body[0], 2);
        assert_eq!(c.memory(), cost(10));
        // A fetch sent later still replaces it.
        c.insert(b"k", response(10, 3), t1 + Duration::from_millis(1), later);
        assert_eq!(c.get(b"k", t1).unwrap().body[0], 3);
    }

    #[test]
    fn a_hit_outlives_its_eviction() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(60);
        let mut c = ResponseCache::new(cost(10), 100);
        c.insert(b"a", response(10, 7), t0, later);
        let held = c.get(b"a", t0).unwrap();
        c.insert(b"b", response(10, 8), t0, later);
        assert!(c.get(b"a", t0).is_none());
        assert_eq!(&held.body[..], &[7u8; 10]);
        assert_eq!(&held.head[..], head(10).as_bytes());
    }

    #[test]
    fn head_and_body_are_split_where_age_goes() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        let r = b"HTTP/1.1 203 Non-Authoritative Information\r\nX-A: 1\r\nContent-Length: 4\r\n\r\nbody";
        c.insert(b"k", capture(r), t0, t0 + Duration::from_secs(60));
        let hit = c.get(b"k", t0 + Duration::from_secs(3)).unwrap();
        assert_eq!(hit.status, 203);
        assert_eq!(
            &hit.head[..],
            b"HTTP/1.1 203 Non-Authoritative Information\r\nX-A: 1\r\nContent-Length: 4\r\n"
        );
        assert_eq!(&hit.body[..], b"body");
        assert_eq!(hit.age, 3);
        assert_eq!(
            wire(&hit),
            b"HTTP/1.1 203 Non-Authoritative Information\r\nX-A: 1\r\nContent-Length: 4\r\nAge: 3\r\n\r\nbody"
        );
        // A response without a body (a 204, say) has an empty one.
        c.insert(
            b"e",
            capture(b"HTTP/1.1 204 No Content\r\n\r\n"),
            t0,
            t0 + Duration::from_secs(60),
        );
        let hit = c.get(b"e", t0).unwrap();
        assert_eq!((hit.status, hit.body.len()), (204, 0));
        assert_eq!(wire(&hit), b"HTTP/1.1 204 No Content\r\nAge: 0\r\n\r\n");
    }

    #[test]
    fn age_counts_whole_seconds_since_the_request() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        c.insert(b"k", response(20, 1), t0, t0 + Duration::from_secs(60));
        let age = |c: &mut ResponseCache, ms: u64| {
            c.get(b"k", t0 + Duration::from_millis(ms)).map(|h| h.age)
        };
        assert_eq!(age(&mut c, 0), Some(0));
        assert_eq!(age(&mut c, 999), Some(0));
        assert_eq!(age(&mut c, 1000), Some(1));
        assert_eq!(age(&mut c, 2500), Some(2));
        // Never as large as the lifetime while fresh.
        assert_eq!(age(&mut c, 59_999), Some(59));
        assert_eq!(age(&mut c, 60_000), None);
        // A clock reading before the entry's start counts as no time at all.
        c.insert(
            b"k",
            response(20, 1),
            t0 + Duration::from_secs(5),
            t0 + Duration::from_secs(60),
        );
        assert_eq!(age(&mut c, 0), Some(0));
    }

    #[test]
    fn the_backends_age_is_replaced_and_counted() {
        let t0 = Instant::now();
        let mut c = ResponseCache::new(1 << 20, 1 << 10);
        // Age 50 with max-age=60 leaves 10 s, which the caller passes as the expiry.
        let r = b"HTTP/1.1 200 OK\r\nAge: 50\r\nCache-Control: max-age=60\r\nage: 7\r\nAgent: x\r\nX-Age: 9\r\nContent-Length: 2\r\n\r\nhi";
        c.insert(b"k", capture(r), t0, t0 + Duration::from_secs(10));
        let hit = c.get(b"k", t0).unwrap();
        assert_eq!(hit.age, 50);
        // Every Age field goes, others whose names only look alike stay.
        assert_eq!(
            &hit.head[..],
            b"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nAgent: x\r\nX-Age: 9\r\nContent-Length: 2\r\n"
        );
        assert_eq!(&hit.body[..], b"hi");
        let at = |c: &mut ResponseCache, ms: u64| {
            c.get(b"k", t0 + Duration::from_millis(ms)).map(|h| h.age)
        };
        assert_eq!(at(&mut c, 1500), Some(51));
        assert_eq!(at(&mut c, 9999), Some(59));
        assert_eq!(at(&mut c, 10_000), None);

        let cases: &[(&[u8], u64)] = &[
            (b"Age: 10, 20", 10),
            (b"AGE:3", 3),
            (b"Age:  4 \t", 4),
            // Invalid: ignored, and dropped all the same.
            (b"Age: old", 0),
            (b"Age: -1", 0),
            (b"Age:", 0),
            // Too large to represent: 2^31 (RFC 9111 §1.2.2).
            (b"Age: 99999999999999999999999", MAX_AGE),
            (b"Age: 2147483649", MAX_AGE),
        ];
        for &(field, want) in cases {
            let mut r = b"HTTP/1.1 200 OK\r\n".to_vec();
            r.extend_from_slice(field);
            r.extend_from_slice(b"\r\nX: y\r\nContent-Length: 0\r\n\r\n");
            c.insert(b"k", capture(&r), t0, t0 + Duration::from_secs(10));
            let hit = c.get(b"k", t0).unwrap();
            let text = String::from_utf8_lossy(field);
            assert_eq!(hit.age, want, "{text}");
            assert_eq!(
                &hit.head[..],
                b"HTTP/1.1 200 OK\r\nX: y\r\nContent-Length: 0\r\n",
                "{text}"
            );
        }
    }

    #[test]
    fn bodies_that_end_with_the_connection_are_not_kept() {
        let mut parser = ResponseParser::new(Limits::default());
        for r in [
            &b"HTTP/1.1 200 OK\r\nX: y\r\n\r\n"[..],
            b"HTTP/1.0 200 OK\r\nCache-Control: max-age=60\r\n\r\nbody",
        ] {
            let head = parser.parse(r, false).unwrap().unwrap();
            assert!(
                Capture::new(
                    &head,
                    Version::Http11,
                    &ResponseFields::read(head.headers()),
                    fastpath_http::Recoding::Unchanged,
                )
                .is_none(),
                "{}",
                String::from_utf8_lossy(r)
            );
            parser.reset();
        }
        // Chunked bodies are kept as relayed, chunks and all.
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";
        let kept = capture(r);
        assert_eq!(
            kept.head,
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
        );
        assert_eq!(kept.body, b"2\r\nhi\r\n0\r\n\r\n");
        assert!(kept.chunked);
        // An HTTP/1.0 client is sent that body dechunked, which is not what is kept.
        parser.reset();
        let head = parser.parse(r, false).unwrap().unwrap();
        assert!(Capture::new(
            &head,
            Version::Http10,
            &ResponseFields::read(head.headers()),
            fastpath_http::Recoding::Unchanged,
        )
        .is_none());
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
        c.insert(&key, response(0, 0), t0, later);
        cache_key(&mut key, b"h", b"/v", None);
        assert!(c.get(&key, t0).is_none());
        cache_key(&mut key, b"h", b"/v", Some(b"gzip"));
        assert!(c.get(&key, t0).is_some());
        cache_key(&mut key, b"h", b"/v", Some(b"br"));
        assert!(c.get(&key, t0).is_none());
    }
}
