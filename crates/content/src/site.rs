//! Request-to-reply logic: resolution, validators, preconditions, ranges.

use std::borrow::Cow;
use std::fs::{File, Metadata};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use fastpath_http::{
    etag_list_matches, parse_accept_encoding, parse_http_date, parse_range, RangeRequest,
};

use crate::cache::ContentCache;
use crate::open::{status_for, Root};
use crate::ranges::{boundary, coalesce, multipart, MAX_MULTIPART_RANGES};
use crate::resource::{Coding, Representation, Resolved, Resource};
use crate::watch::Watch;
use crate::{Body, Reply, SiteOptions, StaticRequest};
use fastpath_modules::compress::Coding as Compression;

/// A document root plus its serving options.
///
/// Holds an `O_PATH|O_DIRECTORY|O_CLOEXEC` descriptor of the root; all
/// lookups are relative to it, so renaming the root directory away does not
/// redirect lookups elsewhere.
#[derive(Debug)]
pub struct Site {
    root: Root,
    options: SiteOptions,
    /// Tells cached lookups when something under the root may have changed.
    watch: Option<Watch>,
    /// Distinguishes this site's entries in a shared [`ContentCache`].
    id: u32,
}

const BR: Coding = Coding {
    suffix: b".br",
    name: "br",
    tag: "-br",
};
const GZIP: Coding = Coding {
    suffix: b".gz",
    name: "gzip",
    tag: "-gz",
};

impl Site {
    /// Opens the document root and detects whether `openat2(2)` is usable.
    pub fn open(root: &Path, options: SiteOptions) -> io::Result<Site> {
        Site::open_with(root, options, true)
    }

    /// Like [`Site::open`] but never uses `openat2`, to test the fallback.
    #[cfg(test)]
    pub(crate) fn open_fallback(root: &Path, options: SiteOptions) -> io::Result<Site> {
        Site::open_with(root, options, false)
    }

    fn open_with(root: &Path, options: SiteOptions, allow_openat2: bool) -> io::Result<Site> {
        static NEXT_ID: AtomicU32 = AtomicU32::new(0);
        Ok(Site {
            root: Root::open(root, allow_openat2)?,
            options,
            watch: None,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Starts watching the tree with inotify so that [`Site::serve_cached`] can keep
    /// lookups. Without a watch (or if it fails: too many watches, no inotify),
    /// `serve_cached` behaves like [`Site::serve`] and caches nothing.
    pub fn watch(&mut self) -> io::Result<()> {
        self.watch = Some(Watch::start(self.root.canonical())?);
        Ok(())
    }

    /// Like [`Site::watch`], but without a thread: changes are seen when
    /// [`Site::poll_changes`] is called, which a single-threaded process does on every tick
    /// and before each connection.
    pub fn watch_polled(&mut self) -> io::Result<()> {
        self.watch = Some(Watch::start_polled(self.root.canonical(), None)?);
        Ok(())
    }

    /// Like [`Site::watch_polled`], with `generation` (from [`crate::shared_generations`],
    /// mapped before the processes were forked) as the count of changes: a change read by
    /// any of the processes that share it makes every one's cached lookups stale at once.
    pub fn watch_polled_shared(&mut self, generation: &'static AtomicU64) -> io::Result<()> {
        self.watch = Some(Watch::start_polled(
            self.root.canonical(),
            Some(generation),
        )?);
        Ok(())
    }

    /// Reads the change events that arrived, for a site watched with
    /// [`Site::watch_polled`]; does nothing otherwise.
    pub fn poll_changes(&self) {
        if let Some(watch) = &self.watch {
            watch.poll();
        }
    }

    /// Whether changes under the root are being watched (and lookups cached).
    pub fn is_watched(&self) -> bool {
        self.watch.is_some()
    }

    /// Whether paths are resolved by the kernel (`openat2`) rather than by
    /// the racier `realpath` fallback. Worth logging at startup.
    pub fn uses_openat2(&self) -> bool {
        self.root.uses_openat2()
    }

    /// The options this site was opened with.
    pub fn options(&self) -> &SiteOptions {
        &self.options
    }

    /// Opens a file or directory beneath the root by its path relative to it, contained
    /// as the static files are (no `..`, no symbolic link out); a hidden name is not
    /// found unless the site serves them (`dotfiles`). For modules that read the
    /// site's files themselves (a directory listing).
    pub fn open_beneath(&self, rel: &[u8]) -> io::Result<File> {
        let mut path = Vec::with_capacity(rel.len() + 1);
        path.push(b'/');
        path.extend_from_slice(rel);
        if path.contains(&0) || (!self.options.dotfiles && has_hidden_segment(&path)) {
            return Err(io::ErrorKind::NotFound.into());
        }
        self.root.open_file(trim_leading_slashes(&path))
    }

    /// Decides the reply to a GET or HEAD request, looking at the file system
    /// afresh. Never panics.
    pub fn serve(&self, req: &StaticRequest<'_>) -> Reply {
        let resolved = self.resolve(req.path, None);
        respond(&resolved, req)
    }

    /// Like [`Site::serve`], but keeps what a path resolves to in `cache` (with the
    /// content of files up to [`ContentCache::in_memory_limit`],
    /// and the open descriptor of larger ones) until the watch reports a
    /// change under the root, so a hit costs no system call at all.
    pub fn serve_cached(&self, cache: &mut ContentCache, req: &StaticRequest<'_>) -> Reply {
        let Some(watch) = &self.watch else {
            return self.serve(req);
        };
        // Read the generation before looking at the files: a change that lands while
        // resolving then makes the new entry stale at once instead of never.
        let generation = watch.generation();
        if let Some(resolved) = cache.get(self.id, req.path, generation) {
            return respond(&resolved, req);
        }
        let resolved = self.resolve(req.path, Some(cache.in_memory_limit()));
        let reply = respond(&resolved, req);
        cache.insert(self.id, req.path, generation, resolved);
        reply
    }

    /// Maps a path to what it names. `in_memory` is `None` for an answer used once, else
    /// the entry is for the cache, with files up to that size read into memory.
    pub(crate) fn resolve(&self, path: &[u8], in_memory: Option<u64>) -> Resolved {
        // The server promises these; re-checking is cheap insurance.
        if path.first() != Some(&b'/') || path.contains(&0) {
            return Resolved::Status(404);
        }
        if !self.options.dotfiles && has_hidden_segment(path) {
            return Resolved::Status(404);
        }
        let rel = trim_leading_slashes(path);
        let file = match self.root.open_file(rel) {
            Ok(f) => f,
            Err(e) => return Resolved::Status(status_for(&e)),
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(_) => return Resolved::Status(500),
        };
        if meta.is_file() {
            return self.resource(rel, file, meta, in_memory);
        }
        if !meta.is_dir() {
            // FIFO, socket, device: never content.
            return Resolved::Status(403);
        }
        if !path.ends_with(b"/") {
            return Resolved::Redirect;
        }
        drop(file);
        for name in &self.options.index {
            let name = trim_leading_slashes(name.as_bytes());
            if name.is_empty() {
                continue;
            }
            let mut index_rel = rel.to_vec();
            index_rel.extend_from_slice(name);
            // Any failure just means "this index is not there"; try the next.
            if let Some((file, meta)) = self.open_regular(&index_rel) {
                return self.resource(&index_rel, file, meta, in_memory);
            }
        }
        Resolved::Status(403)
    }

    /// Opens `rel` if it is a regular file beneath the root.
    fn open_regular(&self, rel: &[u8]) -> Option<(File, Metadata)> {
        let file = self.root.open_file(rel).ok()?;
        let meta = file.metadata().ok()?;
        meta.is_file().then_some((file, meta))
    }

    /// A resource for the regular file `rel`, with its precompressed siblings.
    fn resource(&self, rel: &[u8], file: File, meta: Metadata, cached: Option<u64>) -> Resolved {
        let in_memory = cached.unwrap_or(0);
        let name = rel.rsplit(|&b| b == b'/').next().unwrap_or_default();
        let content_type = content_type_for(name);
        let identity = match Representation::new(file, meta, None, in_memory) {
            Ok(rep) => rep,
            Err(_) => return Resolved::Status(500),
        };
        let mut resource = Resource {
            identity,
            br: None,
            gzip: None,
            content_type,
            compressed: Default::default(),
        };
        // Already-compressed files are served as themselves; looking for
        // "x.gz.gz" would only cost system calls.
        if self.options.precompressed && !rel.ends_with(BR.suffix) && !rel.ends_with(GZIP.suffix) {
            for coding in [&BR, &GZIP] {
                let mut variant = rel.to_vec();
                variant.extend_from_slice(coding.suffix);
                let Some((file, meta)) = self.open_regular(&variant) else {
                    continue;
                };
                let Ok(rep) = Representation::new(file, meta, Some(coding), in_memory) else {
                    continue;
                };
                match coding.name {
                    "br" => resource.br = Some(rep),
                    _ => resource.gzip = Some(rep),
                }
            }
        }
        if cached.is_some() {
            // Only cached resources are answered often enough to pay for this.
            resource.prebuild_fields();
        }
        Resolved::File(Arc::new(resource))
    }
}

/// Decides the reply for a resolved path and the request's headers.
pub(crate) fn respond(resolved: &Resolved, req: &StaticRequest<'_>) -> Reply {
    match resolved {
        Resolved::Status(status) => Reply::status(*status),
        Resolved::Redirect => {
            let mut reply = Reply::status(301);
            reply.location = Some(redirect_location(req.raw_path, req.query));
            reply
        }
        Resolved::File(resource) => respond_file(resource, req),
    }
}

/// Picks the representation to send, and whether the response varies by
/// `Accept-Encoding`. Without a compression policy: the acceptable precompressed variant
/// with the highest q-value (br on ties), else the file itself. With one that applies to
/// the file (its type, its size): the coding the client prefers among the policy's, from a
/// precompressed sibling if there is one, else compressed on the fly.
fn select<'r>(resource: &'r Resource, req: &StaticRequest<'_>) -> (&'r Representation, bool) {
    let size = resource.identity.size;
    let policy = req.compress.filter(|policy| {
        size >= policy.min_length
            && size <= MAX_COMPRESSED_ON_THE_FLY
            && policy.compresses_type(resource.content_type.as_bytes())
    });
    if let Some(policy) = policy {
        let ae = parse_accept_encoding(req.accept_encoding);
        let rep = match fastpath_modules::compress::choose_coding(&ae, policy.enabled) {
            None => &resource.identity,
            Some(Compression::Gzip) if resource.gzip.is_some() => resource.gzip.as_ref().unwrap(),
            Some(Compression::Brotli) if resource.br.is_some() => resource.br.as_ref().unwrap(),
            Some(coding) => resource
                .compressed(coding, policy)
                .unwrap_or(&resource.identity),
        };
        return (rep, true);
    }
    if resource.br.is_none() && resource.gzip.is_none() {
        return (&resource.identity, false);
    }
    let ae = parse_accept_encoding(req.accept_encoding);
    let acceptable = |q: f32| !q.is_nan() && q > 0.0;
    let order = if ae.gzip > ae.br {
        [(&resource.gzip, ae.gzip), (&resource.br, ae.br)]
    } else {
        [(&resource.br, ae.br), (&resource.gzip, ae.gzip)]
    };
    let rep = order
        .into_iter()
        .find_map(|(rep, q)| rep.as_ref().filter(|_| acceptable(q)))
        .unwrap_or(&resource.identity);
    (rep, true)
}

/// The largest file compressed on the fly: its compressed copy is kept in memory, and
/// compressing it takes a worker for as long. Larger files are sent as they are, or as
/// their precompressed siblings.
pub const MAX_COMPRESSED_ON_THE_FLY: u64 = 16 << 20;

fn respond_file(resource: &Resource, req: &StaticRequest<'_>) -> Reply {
    let (rep, vary) = select(resource, req);
    let size = rep.size;
    let etag = rep.etag.as_str();
    let last_modified = rep.last_modified;

    // Fields every reply about this file carries (RFC 9110 §15.4.5 wants
    // ETag, Last-Modified and Vary on 304 too).
    let mut reply = Reply::status(200);
    reply.vary_accept_encoding = vary;
    reply.etag = Some(rep.etag.clone());
    reply.last_modified = last_modified;

    // RFC 9110 §13.2.2, steps 1-4.
    if let Some(v) = req.if_match {
        if !etag_list_matches(v, etag, true) {
            reply.status = 412;
            return reply;
        }
    } else if let (Some(lm), Some(date)) = (
        last_modified,
        req.if_unmodified_since.and_then(parse_http_date),
    ) {
        if lm > date {
            reply.status = 412;
            return reply;
        }
    }
    if let Some(v) = req.if_none_match {
        if etag_list_matches(v, etag, false) {
            reply.status = 304;
            return reply;
        }
    } else if let (Some(lm), Some(date)) = (
        last_modified,
        req.if_modified_since.and_then(parse_http_date),
    ) {
        if lm <= date {
            reply.status = 304;
            return reply;
        }
    }

    // Step 5: ranges, GET only; a failed If-Range means "send it all".
    let use_range = !req.head
        && req.range.is_some()
        && req
            .if_range
            .is_none_or(|v| if_range_matches(v, etag, last_modified));
    let range = if use_range {
        parse_range(req.range, size)
    } else {
        RangeRequest::Ignore
    };

    reply.accept_ranges = true;
    let ranges = match range {
        RangeRequest::Ignore => Vec::new(),
        RangeRequest::Unsatisfiable => return unsatisfiable(reply, size),
        RangeRequest::Ranges(r) => {
            // Do not trust the parser's bounds: they feed offsets/lengths.
            let r: Vec<_> = r.into_iter().filter(|&(a, b)| a <= b && b < size).collect();
            if r.is_empty() {
                return unsatisfiable(reply, size);
            }
            coalesce(r)
        }
    };
    reply.content_encoding = rep.coding.map(|c| c.name);
    let content_type = resource.content_type.clone();
    match ranges.as_slice() {
        &[(a, b)] => {
            reply.status = 206;
            reply.content_range = Some(format!("bytes {a}-{b}/{size}"));
            reply.content_type = Some(content_type);
            reply.content_length = b - a + 1;
            reply.body = rep.slice(a, b - a + 1);
        }
        // Multipart with a Content-Encoding would claim the multipart
        // framing itself is compressed, so encoded variants get the
        // whole representation instead (ignoring Range is always allowed).
        r if r.len() > 1 && r.len() <= MAX_MULTIPART_RANGES && rep.coding.is_none() => {
            let b = boundary(etag);
            let (parts, len) = multipart(r, size, &content_type, &b);
            reply.status = 206;
            reply.content_type = Some(Cow::Owned(format!("multipart/byteranges; boundary={b}")));
            reply.content_length = len;
            reply.body = Body::Parts {
                source: rep.source(),
                parts,
            };
        }
        _ => {
            reply.content_type = Some(content_type);
            reply.content_length = size;
            reply.body = rep.slice(0, size);
            // The prebuilt fields say Vary as the resource's siblings do; the identity
            // sent where a policy could have compressed it says it too, written now.
            if vary == resource.has_variants() || rep.coding.is_some() {
                reply.fields = rep.fields_200.clone();
            }
        }
    }
    reply
}

fn unsatisfiable(mut reply: Reply, size: u64) -> Reply {
    reply.status = 416;
    reply.content_range = Some(format!("bytes */{size}"));
    reply
}

/// `If-Range` (RFC 9110 §13.1.5): an entity-tag must strongly equal ours; a
/// date must equal Last-Modified exactly (both at whole seconds). Anything
/// else, including a weak tag or garbage, does not match.
fn if_range_matches(value: &[u8], etag: &str, last_modified: Option<SystemTime>) -> bool {
    let value = value.trim_ascii();
    if value.starts_with(b"\"") {
        return value == etag.as_bytes();
    }
    if value.starts_with(b"W/") {
        return false;
    }
    match (parse_http_date(value), last_modified) {
        (Some(date), Some(lm)) => date == lm,
        _ => false,
    }
}

/// `Content-Type` from the file name's extension; `charset=utf-8` for the
/// textual types browsers would otherwise sniff a charset for.
fn content_type_for(name: &[u8]) -> Cow<'static, str> {
    const OCTET: &str = "application/octet-stream";
    // As with Path::extension, a leading dot (".bashrc") is not an extension.
    let ext = match name.iter().rposition(|&b| b == b'.') {
        Some(i) if i > 0 => &name[i + 1..],
        _ => return Cow::Borrowed(OCTET),
    };
    let Ok(ext) = std::str::from_utf8(ext) else {
        return Cow::Borrowed(OCTET);
    };
    // mime_guess lists application/gzip first today; pin it regardless.
    if ext.eq_ignore_ascii_case("gz") {
        return Cow::Borrowed("application/gzip");
    }
    let Some(mime) = mime_guess::from_ext(ext).first_raw() else {
        return Cow::Borrowed(OCTET);
    };
    let textual = mime.starts_with("text/")
        || matches!(
            mime,
            "application/javascript" | "application/json" | "application/xml" | "image/svg+xml"
        );
    if textual {
        Cow::Owned(format!("{mime}; charset=utf-8"))
    } else {
        Cow::Borrowed(mime)
    }
}

/// A segment starting with '.' other than a leading `.well-known` (RFC 8615).
fn has_hidden_segment(path: &[u8]) -> bool {
    path.split(|&b| b == b'/')
        .filter(|s| !s.is_empty())
        .enumerate()
        .any(|(i, s)| s.starts_with(b".") && !(i == 0 && s == b".well-known"))
}

fn trim_leading_slashes(p: &[u8]) -> &[u8] {
    let n = p.iter().take_while(|&&b| b == b'/').count();
    &p[n..]
}

/// `raw_path + "/"` (+ `?query`), made safe to emit: leading slashes are
/// collapsed and `\` escaped so the result can never read as a
/// protocol-relative URL (`//evil.example/`, which browsers also accept as
/// `/\evil.example/`), and controls, spaces and non-ASCII are
/// percent-encoded so the value is always a valid header.
fn redirect_location(raw_path: &str, query: Option<&str>) -> String {
    let mut out = String::with_capacity(raw_path.len() + 2 + query.map_or(0, |q| q.len() + 1));
    out.push('/');
    let path = raw_path.trim_start_matches('/');
    push_escaped(&mut out, path.as_bytes(), true);
    out.push('/');
    if let Some(q) = query {
        out.push('?');
        push_escaped(&mut out, q.as_bytes(), false);
    }
    out
}

fn push_escaped(out: &mut String, bytes: &[u8], escape_backslash: bool) {
    for &b in bytes {
        if b <= b' ' || b >= 0x7f || (escape_backslash && b == b'\\') {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
}
