//! The content cache: what paths resolve to, with small files' bytes and prebuilt
//! headers, bounded in memory and in open descriptors, least recently used first out.
//!
//! One cache serves all the workers of a process. It is split into shards by path, each
//! a least-recently-used map behind its own mutex with an equal share of the bounds: a
//! hit locks one shard for as long as it takes to move the entry to the front and clone
//! one `Arc`, so workers looking up different paths do not meet, and no lock covers the
//! whole cache. Entries are immutable once made (a changed file gets a new entry), so
//! what a worker took out stays one version of the file while it is sent. Each worker
//! looks through a [`ContentCache`] handle of its own, with its own lookup key buffer
//! and counters; [`ContentCache::share`] makes one for another worker.
//!
//! A process that shares nothing with others (a prefork child) has a cache of its own,
//! with its share of the bounds: descriptors cannot be shared between processes, and
//! the cached bytes are only worth sharing with the descriptors beside them. A worker of a
//! model that promises to share nothing on the request path (percore) has a private cache
//! ([`ContentCache::private`]): one shard, no lock, its share of the bounds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lru::LruCache;

use crate::resource::Resolved;

/// Bookkeeping bytes counted per entry besides its key and content.
const ENTRY_OVERHEAD: usize = 160;

/// The most shards a cache is split into: a hit holds its shard for tens of nanoseconds,
/// so the workers of a machine with a few dozen cores rarely want the same one at once;
/// more would split the bounds finer (each shard evicts on its own).
pub const MAX_SHARDS: usize = 16;

/// The descriptors one entry may need at most (a file and its `.br` and `.gz` siblings):
/// every shard must be able to keep that many.
const MAX_ENTRY_FILES: usize = 3;

/// The size from which a cached file is sent with sendfile from a kept descriptor instead
/// of copied from memory: the crossover measured by bench/sizes.py (docs/performance.md).
pub const DEFAULT_COPY_BELOW: u64 = 8 * 1024;

/// Bounds of a cache, for all the workers that share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Memory for entries (file contents, headers, keys), in bytes.
    pub max_memory: usize,
    /// The most memory one file may take: files up to this size may be kept in memory
    /// whole; larger ones are kept as open descriptors and sent with sendfile.
    pub max_file_size: u64,
    /// Files smaller than this (and within `max_file_size`) are kept in memory and copied
    /// into the socket; from this size on, sending from a kept descriptor with sendfile
    /// costs less CPU than the copy (see docs/performance.md).
    pub copy_below: u64,
    /// Descriptors kept open for large files.
    pub max_open_files: usize,
}

impl Default for CacheLimits {
    /// 64 MiB, 64 KiB files, copied below [`DEFAULT_COPY_BELOW`], 1,024 descriptors.
    fn default() -> Self {
        CacheLimits {
            max_memory: 64 * 1024 * 1024,
            max_file_size: 64 * 1024,
            copy_below: DEFAULT_COPY_BELOW,
            max_open_files: 1024,
        }
    }
}

impl CacheLimits {
    /// The largest file kept in memory: within the memory bound and below the size from
    /// which sendfile costs less than the copy.
    fn in_memory_limit(&self) -> u64 {
        self.max_file_size.min(self.copy_below.saturating_sub(1))
    }

    /// How many shards these bounds allow: [`MAX_SHARDS`] or fewer (a power of two), so
    /// that each shard can still keep the largest entry (a file and two precompressed
    /// siblings in memory, or their descriptors).
    fn shards(&self) -> usize {
        let largest = MAX_ENTRY_FILES * self.in_memory_limit() as usize + ENTRY_OVERHEAD;
        let by_memory = self.max_memory / largest;
        let by_files = self.max_open_files / MAX_ENTRY_FILES;
        let mut shards = 1;
        while shards * 2 <= MAX_SHARDS && shards * 2 <= by_memory && shards * 2 <= by_files {
            shards *= 2;
        }
        shards
    }
}

struct Entry {
    generation: u64,
    resolved: Resolved,
    memory: usize,
    open_files: usize,
}

/// One shard: its entries and what they hold, against its share of the bounds.
struct Shard {
    entries: LruCache<Box<[u8]>, Entry>,
    max_memory: usize,
    max_open_files: usize,
    memory: usize,
    open_files: usize,
}

impl Shard {
    fn new(max_memory: usize, max_open_files: usize) -> Shard {
        Shard {
            entries: LruCache::unbounded(),
            max_memory,
            max_open_files,
            memory: 0,
            open_files: 0,
        }
    }

    fn forget(&mut self, entry: &Entry) {
        self.memory -= entry.memory;
        self.open_files -= entry.open_files;
    }

    /// The entry for `key` if it is from `generation`; one from before it is dropped.
    fn get(&mut self, key: &[u8], generation: u64) -> Option<Resolved> {
        let entry = self.entries.get(key)?;
        if entry.generation == generation {
            return Some(entry.resolved.clone());
        }
        // Made before the last change: no worker may use it any more. One made after
        // this lookup's generation was read (by a worker that read it later) is left.
        if entry.generation < generation {
            if let Some(entry) = self.entries.pop(key) {
                self.forget(&entry);
            }
        }
        None
    }

    /// Keeps `entry` under `key`, evicting the least recently used entries to stay within
    /// the bounds; returns how many were evicted. An entry made at a later generation (by
    /// another worker) is not replaced, and one larger than the bounds is not kept.
    fn insert(&mut self, key: &[u8], entry: Entry) -> u64 {
        if entry.memory > self.max_memory || entry.open_files > self.max_open_files {
            return 0;
        }
        if let Some(old) = self.entries.peek(key) {
            if old.generation > entry.generation {
                return 0;
            }
        }
        if let Some(old) = self.entries.pop(key) {
            self.forget(&old);
        }
        let mut evicted = 0;
        while self.memory + entry.memory > self.max_memory
            || self.open_files + entry.open_files > self.max_open_files
        {
            match self.entries.pop_lru() {
                Some((_, old)) => {
                    evicted += 1;
                    self.forget(&old)
                }
                None => break,
            }
        }
        self.memory += entry.memory;
        self.open_files += entry.open_files;
        self.entries.put(key.into(), entry);
        evicted
    }
}

/// The cache the handles of one process share.
struct Shards {
    shards: Box<[Mutex<Shard>]>,
    limits: CacheLimits,
    evictions: AtomicU64,
}

impl Shards {
    fn lock(&self, shard: usize) -> MutexGuard<'_, Shard> {
        // A worker that panicked holding a shard left it whole: every change to it is
        // made by code that does not panic between its steps.
        self.shards[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard of a key (site id, then path): chosen from its length and last eight
    /// bytes, where the paths of a site differ most (the file name), rather than from a
    /// hash of it all, which would cost as much again as the rest of a hit. Paths that
    /// share a shard only take turns for its lock (the shard's map has a keyed hash of
    /// its own).
    fn shard_of(&self, key: &[u8]) -> usize {
        if self.shards.len() == 1 {
            return 0;
        }
        let last = &key[key.len().saturating_sub(8)..];
        let word = last.iter().fold(0u64, |w, &b| (w << 8) | u64::from(b));
        let hash = (word ^ ((key.len() as u64) << 56)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The top bits are the best mixed (they depend on every bit below).
        (hash >> (64 - self.shards.len().trailing_zeros())) as usize
    }

    fn sum(&self, of: impl Fn(&Shard) -> usize) -> usize {
        (0..self.shards.len()).map(|i| of(&self.lock(i))).sum()
    }
}

/// Where a handle's entries live.
enum Store {
    /// In the cache the process's workers share.
    Shared(Arc<Shards>),
    /// In a cache of this worker's own, one shard without a lock: for a model whose workers
    /// share nothing on the request path (percore).
    Own {
        shard: Box<Shard>,
        limits: CacheLimits,
        evictions: u64,
    },
}

/// A worker's handle on a content cache, for [`crate::Site::serve_cached`]: on the cache its
/// process's workers share ([`ContentCache::new`], then [`ContentCache::share`] for each
/// worker), or on one of its own ([`ContentCache::private`]). The lookup buffer and the hit
/// and miss counters are the worker's either way.
pub struct ContentCache {
    store: Store,
    /// Reused lookup key: site id then path.
    key: Vec<u8>,
    stats: CacheStats,
}

/// What a cache has done, for metrics: the hits and misses of one handle, the evictions of
/// the whole cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found a current entry.
    pub hits: u64,
    /// Lookups that found none, or a stale one.
    pub misses: u64,
    /// Entries dropped to make room for others.
    pub evictions: u64,
}

impl ContentCache {
    /// An empty cache with these bounds, to be shared by a process's workers, and a first
    /// handle on it.
    pub fn new(limits: CacheLimits) -> ContentCache {
        let shards = limits.shards();
        let store = Shards {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard::new(
                        limits.max_memory / shards,
                        limits.max_open_files / shards,
                    ))
                })
                .collect(),
            limits,
            evictions: AtomicU64::new(0),
        };
        ContentCache::with_store(Store::Shared(Arc::new(store)))
    }

    /// An empty cache with these bounds for one worker alone: one shard, taken without a
    /// lock.
    pub fn private(limits: CacheLimits) -> ContentCache {
        ContentCache::with_store(Store::Own {
            shard: Box::new(Shard::new(limits.max_memory, limits.max_open_files)),
            limits,
            evictions: 0,
        })
    }

    fn with_store(store: Store) -> ContentCache {
        ContentCache {
            store,
            key: Vec::with_capacity(256),
            stats: CacheStats::default(),
        }
    }

    /// Another handle on the same cache, with counters of its own: one per worker. A
    /// private cache shares nothing: the new handle is on a new private cache with the
    /// same bounds.
    pub fn share(&self) -> ContentCache {
        match &self.store {
            Store::Shared(shards) => ContentCache::with_store(Store::Shared(shards.clone())),
            Store::Own { limits, .. } => ContentCache::private(*limits),
        }
    }

    /// Whether this is a worker's own cache ([`ContentCache::private`]).
    pub fn is_private(&self) -> bool {
        matches!(self.store, Store::Own { .. })
    }

    fn limits(&self) -> &CacheLimits {
        match &self.store {
            Store::Shared(shards) => &shards.limits,
            Store::Own { limits, .. } => limits,
        }
    }

    /// This handle's hits and misses, and the whole cache's evictions, so far.
    pub fn stats(&self) -> CacheStats {
        let evictions = match &self.store {
            Store::Shared(shards) => shards.evictions.load(Ordering::Relaxed),
            Store::Own { evictions, .. } => *evictions,
        };
        CacheStats {
            evictions,
            ..self.stats
        }
    }

    /// The largest file kept in memory: within the memory bound and below the size from
    /// which sendfile costs less than the copy.
    pub fn in_memory_limit(&self) -> u64 {
        self.limits().in_memory_limit()
    }

    /// Number of shards the cache is split into.
    pub fn shards(&self) -> usize {
        match &self.store {
            Store::Shared(shards) => shards.shards.len(),
            Store::Own { .. } => 1,
        }
    }

    fn sum(&self, of: impl Fn(&Shard) -> usize) -> usize {
        match &self.store {
            Store::Shared(shards) => shards.sum(of),
            Store::Own { shard, .. } => of(shard),
        }
    }

    /// Number of entries in the whole cache.
    pub fn len(&self) -> usize {
        self.sum(|s| s.entries.len())
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Memory held by the entries of the whole cache, as counted against `max_memory`.
    pub fn memory(&self) -> usize {
        self.sum(|s| s.memory)
    }

    /// Descriptors held by the entries of the whole cache.
    pub fn open_files(&self) -> usize {
        self.sum(|s| s.open_files)
    }

    fn set_key(&mut self, site: u32, path: &[u8]) {
        self.key.clear();
        self.key.extend_from_slice(&site.to_le_bytes());
        self.key.extend_from_slice(path);
    }

    /// The entry for `path`, if there is one from the current `generation`; a stale one
    /// is dropped.
    pub(crate) fn get(&mut self, site: u32, path: &[u8], generation: u64) -> Option<Resolved> {
        self.set_key(site, path);
        let found = match &mut self.store {
            Store::Shared(shards) => {
                let index = shards.shard_of(&self.key);
                let found = shards.lock(index).get(&self.key, generation);
                found
            }
            Store::Own { shard, .. } => shard.get(&self.key, generation),
        };
        match found {
            Some(_) => self.stats.hits += 1,
            None => self.stats.misses += 1,
        }
        found
    }

    /// Keeps what `path` resolved to, evicting the least recently used entries of its
    /// shard to stay within the limits. Server errors are not kept: they may pass. An
    /// entry made at a later generation by another worker is not replaced.
    pub(crate) fn insert(&mut self, site: u32, path: &[u8], generation: u64, resolved: Resolved) {
        let (memory, open_files) = match &resolved {
            Resolved::Status(500) => return,
            Resolved::Status(_) | Resolved::Redirect => (0, 0),
            Resolved::File(resource) => (resource.memory(), resource.open_files()),
        };
        let entry = Entry {
            generation,
            resolved,
            memory: memory + path.len() + ENTRY_OVERHEAD,
            open_files,
        };
        self.set_key(site, path);
        match &mut self.store {
            Store::Shared(shards) => {
                let index = shards.shard_of(&self.key);
                let evicted = shards.lock(index).insert(&self.key, entry);
                if evicted > 0 {
                    shards.evictions.fetch_add(evicted, Ordering::Relaxed);
                }
            }
            Store::Own {
                shard, evictions, ..
            } => *evictions += shard.insert(&self.key, entry),
        }
    }
}

impl Default for ContentCache {
    fn default() -> Self {
        ContentCache::new(CacheLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::{Body, Site, SiteOptions, StaticRequest};

    fn get(path: &str) -> StaticRequest<'_> {
        StaticRequest {
            path: path.as_bytes(),
            raw_path: path,
            ..StaticRequest::default()
        }
    }

    fn bytes(site: &Site, cache: &mut ContentCache, path: &str) -> (u16, Vec<u8>) {
        let reply = site.serve_cached(cache, &get(path));
        let body = match &reply.body {
            Body::Memory { data, offset, len } => data[*offset..*offset + *len].to_vec(),
            Body::File { file, offset, len } => {
                use std::os::unix::fs::FileExt;
                let mut buf = vec![0; *len as usize];
                file.read_exact_at(&mut buf, *offset).unwrap();
                buf
            }
            _ => Vec::new(),
        };
        (reply.status, body)
    }

    /// Polls until `path` serves `want` (inotify is asynchronous), failing after 5 s.
    fn eventually(site: &Site, cache: &mut ContentCache, path: &str, want: (u16, &[u8])) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (status, body) = bytes(site, cache, path);
            if status == want.0 && body == want.1 {
                return;
            }
            assert!(Instant::now() < deadline, "{path}: still {status} {body:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn watched(dir: &std::path::Path, options: SiteOptions) -> Site {
        let mut site = Site::open(dir, options).unwrap();
        site.watch().unwrap();
        site
    }

    #[test]
    fn hits_come_from_memory_and_follow_every_kind_of_change() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a.txt"), "one").unwrap();
        let site = watched(root, SiteOptions::default());
        let mut cache = ContentCache::default();
        assert_eq!(bytes(&site, &mut cache, "/a.txt"), (200, b"one".to_vec()));
        let reply = site.serve_cached(&mut cache, &get("/a.txt"));
        assert!(matches!(reply.body, Body::Memory { .. }));
        assert!(reply.fields.is_some());
        assert_eq!(cache.len(), 1);

        // Rewritten in place.
        std::fs::write(root.join("a.txt"), "two!").unwrap();
        eventually(&site, &mut cache, "/a.txt", (200, b"two!"));
        // Replaced by rename.
        std::fs::write(root.join("tmp"), "three").unwrap();
        std::fs::rename(root.join("tmp"), root.join("a.txt")).unwrap();
        eventually(&site, &mut cache, "/a.txt", (200, b"three"));
        // Deleted, then created again.
        std::fs::remove_file(root.join("a.txt")).unwrap();
        eventually(&site, &mut cache, "/a.txt", (404, b""));
        std::fs::write(root.join("a.txt"), "four").unwrap();
        eventually(&site, &mut cache, "/a.txt", (200, b"four"));
        // A file in a directory created after the watch started.
        assert_eq!(bytes(&site, &mut cache, "/new/b.txt").0, 404);
        std::fs::create_dir(root.join("new")).unwrap();
        std::fs::write(root.join("new/b.txt"), "b").unwrap();
        eventually(&site, &mut cache, "/new/b.txt", (200, b"b"));
        std::fs::write(root.join("new/b.txt"), "bb").unwrap();
        eventually(&site, &mut cache, "/new/b.txt", (200, b"bb"));
    }

    #[test]
    fn prebuilt_fields_are_the_encoders_for_the_replys_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a.html"), "<p>hi</p>").unwrap();
        std::fs::write(root.join("a.html.gz"), "gz").unwrap();
        let options = SiteOptions {
            precompressed: true,
            ..SiteOptions::default()
        };
        let site = watched(root, options);
        let mut cache = ContentCache::default();
        for accept in [None, Some(&b"gzip"[..])] {
            let request = StaticRequest {
                accept_encoding: accept,
                ..get("/a.html")
            };
            let reply = site.serve_cached(&mut cache, &request);
            let prebuilt = reply.fields.clone().expect("prebuilt fields");
            let mut written = Vec::new();
            fastpath_http::Fields {
                meta: reply.metadata(),
                extra: b"",
                content_length: Some(reply.content_length),
            }
            .write(200, &mut written);
            assert_eq!(
                String::from_utf8_lossy(&prebuilt),
                String::from_utf8_lossy(&written)
            );
        }
    }

    #[test]
    fn a_new_precompressed_sibling_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.js"), "plain").unwrap();
        let options = SiteOptions {
            precompressed: true,
            ..SiteOptions::default()
        };
        let site = watched(dir.path(), options);
        let mut cache = ContentCache::default();
        let gzip = StaticRequest {
            accept_encoding: Some(b"gzip"),
            ..get("/app.js")
        };
        assert!(!site.serve_cached(&mut cache, &gzip).vary_accept_encoding);
        std::fs::write(dir.path().join("app.js.gz"), "zipped").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while site.serve_cached(&mut cache, &gzip).content_encoding != Some("gzip") {
            assert!(Instant::now() < deadline, "gzip variant never appeared");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            site.serve_cached(&mut cache, &get("/app.js"))
                .vary_accept_encoding
        );
    }

    #[test]
    fn a_file_is_compressed_once_per_change_and_kept_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let page = "<p>a row of the page</p>\n".repeat(400);
        std::fs::write(dir.path().join("page.html"), &page).unwrap();
        let site = watched(dir.path(), SiteOptions::default());
        let mut cache = ContentCache::default();
        let policy = fastpath_modules::compress::Policy::default();
        let gzip = StaticRequest {
            accept_encoding: Some(b"gzip"),
            compress: Some(&policy),
            ..get("/page.html")
        };
        let first = site.serve_cached(&mut cache, &gzip);
        assert_eq!(first.content_encoding, Some("gzip"));
        assert!(first.vary_accept_encoding);
        let Body::Memory {
            data: first_data, ..
        } = &first.body
        else {
            panic!("a compressed copy is sent from memory");
        };
        // The second request is sent the same copy: the same buffer, not compressed again.
        let second = site.serve_cached(&mut cache, &gzip);
        let Body::Memory {
            data: second_data, ..
        } = &second.body
        else {
            panic!("a compressed copy is sent from memory");
        };
        assert!(Arc::ptr_eq(first_data, second_data));
        assert!(first_data.len() < page.len() / 4);
        // Without the policy, nothing is compressed and nothing varies.
        let plain = site.serve_cached(&mut cache, &get("/page.html"));
        assert_eq!(plain.content_encoding, None);
        assert!(!plain.vary_accept_encoding);
        // A change makes a new copy.
        std::fs::write(dir.path().join("page.html"), page.repeat(2)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let reply = site.serve_cached(&mut cache, &gzip);
            if let Body::Memory { data, .. } = &reply.body {
                if !Arc::ptr_eq(data, first_data) {
                    assert_ne!(reply.etag, first.etag);
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the changed file was not compressed anew"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn memory_and_descriptors_stay_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..50 {
            std::fs::write(dir.path().join(format!("f{i}")), vec![b'x'; 1000]).unwrap();
            std::fs::write(dir.path().join(format!("big{i}")), vec![b'y'; 5000]).unwrap();
        }
        let site = watched(dir.path(), SiteOptions::default());
        let mut cache = ContentCache::new(CacheLimits {
            max_memory: 10_000,
            max_file_size: 2000,
            copy_below: 4000,
            max_open_files: 3,
        });
        for i in 0..50 {
            assert_eq!(bytes(&site, &mut cache, &format!("/f{i}")).1.len(), 1000);
            assert!(cache.memory() <= 10_000);
            assert_eq!(bytes(&site, &mut cache, &format!("/big{i}")).1.len(), 5000);
            assert!(cache.open_files() <= 3);
        }
        // The most recent entries survived.
        assert!(cache.len() >= 3);
    }

    #[test]
    fn copy_below_splits_memory_from_descriptors_within_max_file_size() {
        let dir = tempfile::tempdir().unwrap();
        for (name, size) in [
            ("small", 999),
            ("edge", 1000),
            ("mid", 5000),
            ("big", 20_000),
        ] {
            std::fs::write(dir.path().join(name), vec![b'z'; size]).unwrap();
        }
        let site = watched(dir.path(), SiteOptions::default());
        let in_memory = |limits: CacheLimits, path: &str| {
            let mut cache = ContentCache::new(limits);
            let reply = site.serve_cached(&mut cache, &get(path));
            assert!(
                reply.fields.is_some(),
                "{path}: cached replies have prebuilt fields"
            );
            assert_eq!(
                bytes(&site, &mut cache, path).1.len(),
                reply.content_length as usize
            );
            matches!(reply.body, Body::Memory { .. })
        };
        let split = CacheLimits {
            copy_below: 1000,
            max_file_size: 10_000,
            ..CacheLimits::default()
        };
        assert!(in_memory(split, "/small"));
        assert!(
            !in_memory(split, "/edge"),
            "copy_below itself goes with sendfile"
        );
        assert!(!in_memory(split, "/mid"));
        // max_file_size stays the bound when copy_below is above it.
        let bounded = CacheLimits {
            copy_below: 1 << 20,
            max_file_size: 10_000,
            ..CacheLimits::default()
        };
        assert!(in_memory(bounded, "/mid"));
        assert!(!in_memory(bounded, "/big"));
        let none = CacheLimits {
            copy_below: 0,
            ..CacheLimits::default()
        };
        assert!(!in_memory(none, "/small"));
    }

    #[test]
    fn handles_share_entries_and_count_their_own_lookups() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "a").unwrap();
        let site = watched(dir.path(), SiteOptions::default());
        let mut first = ContentCache::default();
        let mut second = first.share();
        assert_eq!(bytes(&site, &mut first, "/a"), (200, b"a".to_vec()));
        assert_eq!(bytes(&site, &mut second, "/a"), (200, b"a".to_vec()));
        assert_eq!(bytes(&site, &mut second, "/a"), (200, b"a".to_vec()));
        assert_eq!((first.stats().hits, first.stats().misses), (0, 1));
        assert_eq!((second.stats().hits, second.stats().misses), (2, 0));
        assert_eq!((first.len(), second.len()), (1, 1));
        assert_eq!(first.memory(), second.memory());
        // A change seen through one handle is seen through every other.
        std::fs::write(dir.path().join("a"), "b").unwrap();
        eventually(&site, &mut first, "/a", (200, b"b"));
        assert_eq!(bytes(&site, &mut second, "/a"), (200, b"b".to_vec()));
    }

    #[test]
    fn private_caches_share_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "a").unwrap();
        let site = watched(dir.path(), SiteOptions::default());
        let mut first = ContentCache::private(CacheLimits::default());
        let mut second = first.share();
        assert!(first.is_private() && second.is_private());
        assert_eq!(first.shards(), 1);
        assert_eq!(bytes(&site, &mut first, "/a"), (200, b"a".to_vec()));
        assert_eq!((first.len(), second.len()), (1, 0));
        assert_eq!(bytes(&site, &mut second, "/a"), (200, b"a".to_vec()));
        assert_eq!(second.stats().misses, 1);
        std::fs::write(dir.path().join("a"), "b").unwrap();
        eventually(&site, &mut first, "/a", (200, b"b"));
        eventually(&site, &mut second, "/a", (200, b"b"));
    }

    #[test]
    fn shards_are_as_many_as_the_bounds_allow() {
        assert_eq!(ContentCache::default().shards(), MAX_SHARDS);
        let small = CacheLimits {
            max_memory: 4 * (3 * 8191 + ENTRY_OVERHEAD),
            ..CacheLimits::default()
        };
        assert_eq!(ContentCache::new(small).shards(), 4);
        let few_files = CacheLimits {
            max_open_files: 7,
            ..CacheLimits::default()
        };
        assert_eq!(ContentCache::new(few_files).shards(), 2);
        let nothing = CacheLimits {
            max_memory: 0,
            max_open_files: 0,
            ..CacheLimits::default()
        };
        assert_eq!(ContentCache::new(nothing).shards(), 1);
    }

    #[test]
    fn workers_filling_one_cache_at_once_stay_within_its_bounds() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..200 {
            std::fs::write(dir.path().join(format!("s{i}")), vec![b'x'; 100 + i]).unwrap();
            std::fs::write(dir.path().join(format!("l{i}")), vec![b'y'; 9000 + i]).unwrap();
        }
        let site = Arc::new(watched(dir.path(), SiteOptions::default()));
        let limits = CacheLimits {
            max_memory: 64 * 1024,
            max_open_files: 48,
            ..CacheLimits::default()
        };
        let cache = ContentCache::new(limits);
        assert!(cache.shards() > 1);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (site, mut cache) = (site.clone(), cache.share());
                std::thread::spawn(move || {
                    for round in 0..3 {
                        for i in 0..200 {
                            let i = (i * 7 + t * 13 + round) % 200;
                            let small = bytes(&site, &mut cache, &format!("/s{i}"));
                            assert_eq!(small, (200, vec![b'x'; 100 + i]));
                            let large = bytes(&site, &mut cache, &format!("/l{i}"));
                            assert_eq!(large, (200, vec![b'y'; 9000 + i]));
                        }
                    }
                    cache.stats()
                })
            })
            .collect();
        let lookups: u64 = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .map(|s| s.hits + s.misses)
            .sum();
        assert_eq!(lookups, 4 * 3 * 400);
        assert!(cache.memory() <= limits.max_memory);
        assert!(cache.open_files() <= limits.max_open_files);
        assert!(cache.stats().evictions > 0);
        assert!(!cache.is_empty());
    }

    #[test]
    fn a_change_one_process_reads_is_seen_by_all_that_share_the_generation() {
        // Two sites on one root with caches of their own stand for two preforked children.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "one").unwrap();
        let generation = &crate::shared_generations(1).unwrap()[0];
        let open = || {
            let mut site = Site::open(dir.path(), SiteOptions::default()).unwrap();
            site.watch_polled_shared(generation).unwrap();
            site
        };
        let (first, second) = (open(), open());
        let (mut first_cache, mut second_cache) =
            (ContentCache::default(), ContentCache::default());
        assert_eq!(bytes(&first, &mut first_cache, "/a").1, b"one");
        assert_eq!(bytes(&second, &mut second_cache, "/a").1, b"one");
        std::fs::write(dir.path().join("a"), "two").unwrap();
        // Only the first reads its events; the second's kept entry is stale all the same.
        first.poll_changes();
        assert_eq!(bytes(&second, &mut second_cache, "/a").1, b"two");
        assert_eq!(bytes(&first, &mut first_cache, "/a").1, b"two");
        // Without a shared counter, the second would have served its kept entry.
        let alone = |site: &mut Site| site.watch_polled().unwrap();
        let (mut third, mut fourth) = (open(), open());
        alone(&mut third);
        alone(&mut fourth);
        let (mut third_cache, mut fourth_cache) =
            (ContentCache::default(), ContentCache::default());
        assert_eq!(bytes(&third, &mut third_cache, "/a").1, b"two");
        assert_eq!(bytes(&fourth, &mut fourth_cache, "/a").1, b"two");
        std::fs::write(dir.path().join("a"), "three").unwrap();
        third.poll_changes();
        assert_eq!(bytes(&fourth, &mut fourth_cache, "/a").1, b"two");
    }

    #[test]
    fn an_unwatched_site_caches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "a").unwrap();
        let site = Site::open(dir.path(), SiteOptions::default()).unwrap();
        let mut cache = ContentCache::default();
        assert_eq!(bytes(&site, &mut cache, "/a").1, b"a");
        assert!(cache.is_empty());
    }
}
