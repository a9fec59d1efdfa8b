//! Resolved files: what the cache keeps for a path.

use std::borrow::Cow;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fastpath_modules::compress::{compress_whole, variant_etag, Coding as Compression, Policy};

use fastpath_http::Fields;

use crate::{Body, Source};

/// Attempts at reading a file whose metadata stays the same before and after the read.
const SNAPSHOT_ATTEMPTS: usize = 3;

/// A regular file and its precompressed siblings.
#[derive(Debug)]
pub(crate) struct Resource {
    pub(crate) identity: Representation,
    pub(crate) br: Option<Representation>,
    pub(crate) gzip: Option<Representation>,
    /// The type of the identity file (variants share it).
    pub(crate) content_type: Cow<'static, str>,
    /// The identity compressed on the fly (gzip, br, zstd, by `Coding::index`), made when
    /// a request first wants it and kept with the resource, so a file is compressed once
    /// per change (a changed file is resolved anew) rather than per request. `None` in a
    /// slot: the file could not be read whole as the version resolved.
    pub(crate) compressed: [Slot; 3],
}

/// A value made the first time it is asked for and kept, in a pointer: making a resource
/// (every miss of the cache) then costs no lock and a pointer's room, where a `OnceLock`
/// would be a lock word and the whole value, mostly never made. Two workers asking at
/// once may both make it; one is kept, the other dropped.
#[derive(Default)]
pub(crate) struct Slot(AtomicPtr<Option<Representation>>);

impl Slot {
    /// The value, made by `make` if it is not there yet.
    pub(crate) fn get_or_init(
        &self,
        make: impl FnOnce() -> Option<Representation>,
    ) -> &Option<Representation> {
        let found = self.0.load(Ordering::Acquire);
        if !found.is_null() {
            // SAFETY: a non-null pointer was stored from a Box below and is only freed
            // by Drop, which takes the slot by `&mut`: it lives as long as `self`.
            return unsafe { &*found };
        }
        let made = Box::into_raw(Box::new(make()));
        match self.0.compare_exchange(
            std::ptr::null_mut(),
            made,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: `made` is ours until stored, and from then on as above.
            Ok(_) => unsafe { &*made },
            Err(other) => {
                // SAFETY: `made` was never stored: it is freed here, once.
                drop(unsafe { Box::from_raw(made) });
                // SAFETY: as for `found` above.
                unsafe { &*other }
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let stored = *self.0.get_mut();
        if !stored.is_null() {
            // SAFETY: stored from a Box in `get_or_init`, freed only here.
            drop(unsafe { Box::from_raw(stored) });
        }
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.load(Ordering::Relaxed).is_null() {
            "Slot(empty)"
        } else {
            "Slot(made)"
        })
    }
}

impl Resource {
    pub(crate) fn has_variants(&self) -> bool {
        self.br.is_some() || self.gzip.is_some()
    }

    /// Memory the resource holds (file contents and headers), for cache accounting.
    pub(crate) fn memory(&self) -> usize {
        [Some(&self.identity), self.br.as_ref(), self.gzip.as_ref()]
            .into_iter()
            .flatten()
            .map(|rep| {
                rep.bytes.as_ref().map_or(0, |b| b.len())
                    + rep.fields_200.as_ref().map_or(0, |f| f.len())
                    + rep.etag.len()
            })
            .sum::<usize>()
            + std::mem::size_of::<Resource>()
    }

    /// The identity compressed with `coding` on the fly, made at the policy's level the
    /// first time it is asked for (a second policy's level for the same file waits for
    /// the file to change). Memory so made is not counted in the cache's budget: it is
    /// at most the identity's size per coding, for the types a policy compresses.
    pub(crate) fn compressed(
        &self,
        coding: Compression,
        policy: &Policy,
    ) -> Option<&Representation> {
        self.compressed[coding.index()]
            .get_or_init(|| {
                let identity = &self.identity;
                let bytes = match &identity.bytes {
                    Some(bytes) => bytes.clone(),
                    None => read_version(identity)?,
                };
                let body = compress_off_stack(policy, coding, &bytes)?;
                let etag = variant_etag(identity.etag.as_bytes(), coding)
                    .and_then(|tag| String::from_utf8(tag).ok())?;
                let mut rep = Representation {
                    file: None,
                    size: body.len() as u64,
                    bytes: Some(Arc::from(body)),
                    etag,
                    last_modified: identity.last_modified,
                    coding: Some(on_the_fly(coding)),
                    fields_200: None,
                };
                rep.fields_200 = Some(rep.build_fields(&self.content_type, true));
                Some(rep)
            })
            .as_ref()
    }

    /// Descriptors the resource keeps open, for the open-file limit.
    pub(crate) fn open_files(&self) -> usize {
        [Some(&self.identity), self.br.as_ref(), self.gzip.as_ref()]
            .into_iter()
            .flatten()
            .filter(|rep| rep.bytes.is_none())
            .count()
    }

    /// Fills in the prebuilt header lines of every representation's 200 response.
    pub(crate) fn prebuild_fields(&mut self) {
        let vary = self.has_variants();
        let content_type = self.content_type.clone();
        for rep in [
            Some(&mut self.identity),
            self.br.as_mut(),
            self.gzip.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            rep.fields_200 = Some(rep.build_fields(&content_type, vary));
        }
    }
}

/// One file that can be sent: the identity file or a precompressed sibling.
#[derive(Debug)]
pub(crate) struct Representation {
    /// Open while the content is not held in memory.
    pub(crate) file: Option<Arc<File>>,
    /// The whole content, for files small enough to keep.
    pub(crate) bytes: Option<Arc<[u8]>>,
    pub(crate) size: u64,
    pub(crate) etag: String,
    pub(crate) last_modified: Option<SystemTime>,
    pub(crate) coding: Option<&'static Coding>,
    /// The fields of a full 200 response between Date and Connection (Content-Type
    /// through Content-Length), written once by the response-head encoder for cached
    /// resources.
    pub(crate) fields_200: Option<Arc<[u8]>>,
}

impl Representation {
    /// Describes an open file; reads it whole if it is no larger than `in_memory`.
    pub(crate) fn new(
        file: File,
        meta: Metadata,
        coding: Option<&'static Coding>,
        in_memory: u64,
    ) -> io::Result<Representation> {
        let (meta, bytes, file) = if in_memory > 0 && meta.len() <= in_memory {
            match snapshot(&file, meta)? {
                (meta, Some(bytes)) => (meta, Some(bytes), None),
                (meta, None) => (meta, None, Some(Arc::new(file))),
            }
        } else {
            (meta, None, Some(Arc::new(file)))
        };
        Ok(Representation {
            file,
            bytes,
            size: meta.len(),
            etag: entity_tag(&meta, coding.map_or("", |c| c.tag)),
            last_modified: last_modified(&meta, SystemTime::now()),
            coding,
            fields_200: None,
        })
    }

    /// Where the body comes from.
    pub(crate) fn source(&self) -> Source {
        match (&self.bytes, &self.file) {
            (Some(bytes), _) => Source::Memory(bytes.clone()),
            (None, Some(file)) => Source::File(file.clone()),
            // `new` always sets one of the two.
            (None, None) => Source::Memory(Arc::from(&[][..])),
        }
    }

    /// `len` bytes from `offset` as a body.
    pub(crate) fn slice(&self, offset: u64, len: u64) -> Body {
        match self.source() {
            Source::Memory(data) => Body::Memory {
                data,
                offset: offset as usize,
                len: len as usize,
            },
            Source::File(file) => Body::File { file, offset, len },
        }
    }

    /// The fields of this representation's full 200 response, as the response-head
    /// encoder writes them, so a hit copies them instead of formatting them again.
    fn build_fields(&self, content_type: &str, vary: bool) -> Arc<[u8]> {
        let fields = Fields {
            meta: fastpath_http::Metadata {
                content_type: Some(content_type),
                content_encoding: self.coding.map(|c| c.name),
                last_modified: self.last_modified,
                etag: Some(&self.etag),
                accept_ranges: true,
                vary_accept_encoding: vary,
                ..fastpath_http::Metadata::default()
            },
            content_length: Some(self.size),
            ..Fields::default()
        };
        let mut out = Vec::with_capacity(200);
        fields.write(200, &mut out);
        Arc::from(out)
    }
}

/// Reads the whole file, and keeps the bytes only if its metadata (size, mtime, ctime)
/// is the same before and after the read: a file rewritten meanwhile is read again, so
/// the bytes kept are one version of the file, never a mix. A file that keeps
/// changing is left to be sent from its descriptor.
fn snapshot(file: &File, mut before: Metadata) -> io::Result<(Metadata, Option<Arc<[u8]>>)> {
    for _ in 0..SNAPSHOT_ATTEMPTS {
        let size = before.len() as usize;
        let mut bytes = vec![0u8; size];
        let mut filled = 0;
        while filled < size {
            match file.read_at(&mut bytes[filled..], filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let after = file.metadata()?;
        if filled == size && same_version(&before, &after) {
            return Ok((after, Some(Arc::from(bytes))));
        }
        before = after;
    }
    Ok((before, None))
}

/// True when two stats of one file describe the same content version.
pub(crate) fn same_version(a: &Metadata, b: &Metadata) -> bool {
    a.len() == b.len()
        && a.mtime() == b.mtime()
        && a.mtime_nsec() == b.mtime_nsec()
        && a.ctime() == b.ctime()
        && a.ctime_nsec() == b.ctime_nsec()
        && a.ino() == b.ino()
}

/// Stack for a compression: brotli's and zstd's encoders keep large tables on the stack,
/// more than the small stacks of the thread-pool model's many threads hold.
const COMPRESS_STACK: usize = 16 << 20;

/// `bytes` compressed on a thread of its own, with a stack the encoders fit in whatever
/// thread asked (a file is compressed once per change, so the thread costs little);
/// `None` if no thread could be made.
fn compress_off_stack(policy: &Policy, coding: Compression, bytes: &[u8]) -> Option<Vec<u8>> {
    let level = policy.level(coding);
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("fastpath-compress".into())
            .stack_size(COMPRESS_STACK)
            .spawn_scoped(scope, || compress_whole(level, bytes))
            .ok()?
            .join()
            .ok()
    })
}

/// The file of `rep` read whole, if it is still the version `rep` describes (its entity
/// tag after the read is the same): compressing a file rewritten meanwhile would give a
/// body that is neither version.
fn read_version(rep: &Representation) -> Option<Arc<[u8]>> {
    let file = rep.file.as_ref()?;
    let (meta, bytes) = snapshot(file, file.metadata().ok()?).ok()?;
    (entity_tag(&meta, "") == rep.etag).then_some(bytes?)
}

/// The codings of bodies compressed on the fly, for `Content-Encoding`; their ETag
/// suffix is added by `variant_etag`, so `tag` is not used.
fn on_the_fly(coding: Compression) -> &'static Coding {
    static GZIP: Coding = Coding {
        suffix: b"",
        name: "gzip",
        tag: "",
    };
    static BR: Coding = Coding {
        suffix: b"",
        name: "br",
        tag: "",
    };
    static ZSTD: Coding = Coding {
        suffix: b"",
        name: "zstd",
        tag: "",
    };
    match coding {
        Compression::Gzip => &GZIP,
        Compression::Brotli => &BR,
        Compression::Zstd => &ZSTD,
    }
}

/// A precompressed sibling: file suffix, `Content-Encoding`, ETag suffix.
#[derive(Debug)]
pub(crate) struct Coding {
    pub(crate) suffix: &'static [u8],
    pub(crate) name: &'static str,
    pub(crate) tag: &'static str,
}

/// What a path resolves to, before any request header is looked at: the part
/// of serving that the cache can keep.
#[derive(Debug, Clone)]
pub(crate) enum Resolved {
    /// An error status (404, 403, 500).
    Status(u16),
    /// A directory named without its trailing slash: 301 to add it.
    Redirect,
    /// A regular file and its precompressed siblings.
    File(Arc<Resource>),
}

/// Strong ETag: `"{mtime_secs:x}.{mtime_nsec:x}-{size:x}-{inode:x}{suffix}"`.
/// Any rewrite changes mtime or size, a replace-by-rename changes the inode,
/// and the suffix (`-br`, `-gz`) keeps encoded variants distinct from the
/// identity file even if their stat fields coincided.
pub(crate) fn entity_tag(meta: &Metadata, suffix: &str) -> String {
    format!(
        "\"{:x}.{:x}-{:x}-{:x}{suffix}\"",
        meta.mtime(),
        meta.mtime_nsec(),
        meta.size(),
        meta.ino()
    )
}

/// Last-Modified at whole seconds (what the header carries, so comparisons
/// with dates clients echo back are exact), clamped to `now` as RFC 9110
/// §8.8.2.1 requires for future mtimes. `None` before 1970: HTTP-dates cannot
/// express it (and `httpdate` would panic formatting it).
pub(crate) fn last_modified(meta: &Metadata, now: SystemTime) -> Option<SystemTime> {
    let mtime = meta.modified().ok()?.min(now);
    let secs = mtime.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}
