//! The per-worker content cache: what paths resolve to, with small files' bytes and
//! prebuilt headers, bounded in memory and in open descriptors, least recently used
//! first out.
//!
//! Each worker has its own cache, so a hit takes no lock and touches no shared
//! memory but the watch's generation counter, which only changes when files do.

use lru::LruCache;

use crate::resource::Resolved;

/// Bookkeeping bytes counted per entry besides its key and content.
const ENTRY_OVERHEAD: usize = 160;

/// The size from which a cached file is sent with sendfile from a kept descriptor instead
/// of copied from memory: the crossover measured by bench/sizes.py (docs/performance.md).
pub const DEFAULT_COPY_BELOW: u64 = 8 * 1024;

/// Bounds of one worker's cache.
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

struct Entry {
    generation: u64,
    resolved: Resolved,
    memory: usize,
    open_files: usize,
}

/// One worker's cache of resolved paths, for [`crate::Site::serve_cached`].
pub struct ContentCache {
    entries: LruCache<Box<[u8]>, Entry>,
    limits: CacheLimits,
    memory: usize,
    open_files: usize,
    /// Reused lookup key: site id then path.
    key: Vec<u8>,
    stats: CacheStats,
}

/// What a cache has done since it was made, for metrics: plain counters, as a cache belongs
/// to one worker.
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
    /// An empty cache with these bounds.
    pub fn new(limits: CacheLimits) -> ContentCache {
        ContentCache {
            entries: LruCache::unbounded(),
            limits,
            memory: 0,
            open_files: 0,
            key: Vec::with_capacity(256),
            stats: CacheStats::default(),
        }
    }

    /// Hits, misses and evictions so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// The largest file kept in memory: within the memory bound and below the size from
    /// which sendfile costs less than the copy.
    pub fn in_memory_limit(&self) -> u64 {
        self.limits
            .max_file_size
            .min(self.limits.copy_below.saturating_sub(1))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Memory held by the entries, as counted against `max_memory`.
    pub fn memory(&self) -> usize {
        self.memory
    }

    fn set_key(&mut self, site: u32, path: &[u8]) {
        self.key.clear();
        self.key.extend_from_slice(&site.to_le_bytes());
        self.key.extend_from_slice(path);
    }

    /// The entry for `path`, if there is one from the current `generation`; a stale one
    /// is dropped.
    pub(crate) fn get(&mut self, site: u32, path: &[u8], generation: u64) -> Option<&Resolved> {
        self.set_key(site, path);
        let Some(entry) = self.entries.get(&self.key[..]) else {
            self.stats.misses += 1;
            return None;
        };
        let fresh = entry.generation == generation;
        if !fresh {
            self.stats.misses += 1;
            if let Some(entry) = self.entries.pop(&self.key[..]) {
                self.forget(&entry);
            }
            return None;
        }
        self.stats.hits += 1;
        self.entries.peek(&self.key[..]).map(|e| &e.resolved)
    }

    /// Keeps what `path` resolved to, evicting the least recently used entries to stay
    /// within the limits. Server errors are not kept: they may pass.
    pub(crate) fn insert(&mut self, site: u32, path: &[u8], generation: u64, resolved: Resolved) {
        let (memory, open_files) = match &resolved {
            Resolved::Status(500) => return,
            Resolved::Status(_) | Resolved::Redirect => (0, 0),
            Resolved::File(resource) => (resource.memory(), resource.open_files()),
        };
        let memory = memory + path.len() + ENTRY_OVERHEAD;
        if memory > self.limits.max_memory || open_files > self.limits.max_open_files {
            return;
        }
        self.set_key(site, path);
        if let Some(old) = self.entries.pop(&self.key[..]) {
            self.forget(&old);
        }
        while self.memory + memory > self.limits.max_memory
            || self.open_files + open_files > self.limits.max_open_files
        {
            match self.entries.pop_lru() {
                Some((_, old)) => {
                    self.stats.evictions += 1;
                    self.forget(&old)
                }
                None => break,
            }
        }
        self.memory += memory;
        self.open_files += open_files;
        let key: Box<[u8]> = self.key.as_slice().into();
        self.entries.put(
            key,
            Entry {
                generation,
                resolved,
                memory,
                open_files,
            },
        );
    }

    fn forget(&mut self, entry: &Entry) {
        self.memory -= entry.memory;
        self.open_files -= entry.open_files;
    }
}

impl Default for ContentCache {
    fn default() -> Self {
        ContentCache::new(CacheLimits::default())
    }
}

#[cfg(test)]
mod tests {
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
            assert!(cache.open_files <= 3);
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
    fn an_unwatched_site_caches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "a").unwrap();
        let site = Site::open(dir.path(), SiteOptions::default()).unwrap();
        let mut cache = ContentCache::default();
        assert_eq!(bytes(&site, &mut cache, "/a").1, b"a");
        assert!(cache.is_empty());
    }
}
