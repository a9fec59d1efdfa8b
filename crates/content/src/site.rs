//! Request-to-reply logic: resolution, validators, preconditions, ranges.

use std::borrow::Cow;
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::deps::{
    etag_list_matches, parse_accept_encoding, parse_http_date, parse_range, RangeRequest,
};
use crate::open::{status_for, Root};
use crate::ranges::{boundary, coalesce, multipart, MAX_MULTIPART_RANGES};
use crate::{Body, Reply, SiteOptions, StaticRequest};

/// A document root plus its serving options.
///
/// Holds an `O_PATH|O_DIRECTORY|O_CLOEXEC` descriptor of the root; all
/// lookups are relative to it, so renaming the root directory away does not
/// redirect lookups elsewhere.
#[derive(Debug)]
pub struct Site {
    root: Root,
    options: SiteOptions,
}

/// A precompressed sibling: file suffix, `Content-Encoding`, ETag suffix.
struct Coding {
    suffix: &'static [u8],
    name: &'static str,
    tag: &'static str,
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

/// The file chosen to answer with and what is known about it.
struct Selected {
    file: File,
    meta: Metadata,
    coding: Option<&'static Coding>,
}

impl Site {
    /// Opens the document root and detects whether `openat2(2)` is usable.
    pub fn open(root: &Path, options: SiteOptions) -> io::Result<Site> {
        Ok(Site {
            root: Root::open(root, true)?,
            options,
        })
    }

    /// Like [`Site::open`] but never uses `openat2`, to test the fallback.
    #[cfg(test)]
    pub(crate) fn open_fallback(root: &Path, options: SiteOptions) -> io::Result<Site> {
        Ok(Site {
            root: Root::open(root, false)?,
            options,
        })
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

    /// Decides the reply to a GET or HEAD request. Never panics.
    pub fn serve(&self, req: &StaticRequest<'_>) -> Reply {
        let path = req.path;
        // The server promises these; re-checking is cheap insurance.
        if path.first() != Some(&b'/') || path.contains(&0) {
            return Reply::status(404);
        }
        if !self.options.dotfiles && has_hidden_segment(path) {
            return Reply::status(404);
        }
        let rel = trim_leading_slashes(path);
        let file = match self.root.open_file(rel) {
            Ok(f) => f,
            Err(e) => return Reply::status(status_for(&e)),
        };
        let meta = match file.metadata() {
            Ok(m) => m,
            Err(_) => return Reply::status(500),
        };
        if meta.is_file() {
            return self.serve_file(req, rel, file, meta);
        }
        if !meta.is_dir() {
            // FIFO, socket, device: never content.
            return Reply::status(403);
        }
        if !path.ends_with(b"/") {
            let mut reply = Reply::status(301);
            reply.location = Some(redirect_location(req.raw_path, req.query));
            return reply;
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
            let Ok(file) = self.root.open_file(&index_rel) else {
                continue;
            };
            match file.metadata() {
                Ok(meta) if meta.is_file() => return self.serve_file(req, &index_rel, file, meta),
                _ => continue,
            }
        }
        Reply::status(403)
    }

    /// Opens `rel` if it is a regular file beneath the root.
    fn open_regular(&self, rel: &[u8]) -> Option<(File, Metadata)> {
        let file = self.root.open_file(rel).ok()?;
        let meta = file.metadata().ok()?;
        meta.is_file().then_some((file, meta))
    }

    /// Picks a precompressed variant of `rel` if there is an acceptable one.
    /// Returns it (if chosen) and whether any variant exists (for `Vary`).
    fn select_variant(&self, req: &StaticRequest<'_>, rel: &[u8]) -> (Option<Selected>, bool) {
        // Already-compressed files are served as themselves; looking for
        // "x.gz.gz" would only cost syscalls.
        if !self.options.precompressed || rel.ends_with(BR.suffix) || rel.ends_with(GZIP.suffix) {
            return (None, false);
        }
        let ae = parse_accept_encoding(req.accept_encoding);
        // Higher q first; br wins ties (it is usually smaller).
        let order: [(&'static Coding, f32); 2] = if ae.gzip > ae.br {
            [(&GZIP, ae.gzip), (&BR, ae.br)]
        } else {
            [(&BR, ae.br), (&GZIP, ae.gzip)]
        };
        let mut probed = [false; 2];
        for (i, &(coding, q)) in order.iter().enumerate() {
            if q.is_nan() || q <= 0.0 {
                continue;
            }
            probed[i] = true;
            let mut variant = rel.to_vec();
            variant.extend_from_slice(coding.suffix);
            if let Some((file, meta)) = self.open_regular(&variant) {
                let selected = Selected {
                    file,
                    meta,
                    coding: Some(coding),
                };
                return (Some(selected), true);
            }
        }
        // Nothing acceptable was found, but Vary must still be sent if a
        // variant exists, or a shared cache could hand it to other clients.
        let exists = order.iter().zip(probed).any(|(&(coding, _), probed)| {
            if probed {
                return false;
            }
            let mut variant = rel.to_vec();
            variant.extend_from_slice(coding.suffix);
            self.open_regular(&variant).is_some()
        });
        (None, exists)
    }

    fn serve_file(&self, req: &StaticRequest<'_>, rel: &[u8], file: File, meta: Metadata) -> Reply {
        let (variant, vary) = self.select_variant(req, rel);
        let Selected { file, meta, coding } = variant.unwrap_or(Selected {
            file,
            meta,
            coding: None,
        });
        let size = meta.len();
        let etag = entity_tag(&meta, coding.map_or("", |c| c.tag));
        let last_modified = last_modified(&meta, SystemTime::now());

        // Fields every reply about this file carries (RFC 9110 §15.4.5 wants
        // ETag, Last-Modified and Vary on 304 too).
        let mut reply = Reply::status(200);
        reply.vary_accept_encoding = vary;
        reply.etag = Some(etag.clone());
        reply.last_modified = last_modified;
        let etag = etag.as_str();

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

        let name = rel.rsplit(|&b| b == b'/').next().unwrap_or_default();
        let content_type = content_type_for(name);
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
        reply.content_encoding = coding.map(|c| c.name);
        let file = Arc::new(file);
        match ranges.as_slice() {
            &[(a, b)] => {
                reply.status = 206;
                reply.content_range = Some(format!("bytes {a}-{b}/{size}"));
                reply.content_type = Some(content_type);
                reply.content_length = b - a + 1;
                reply.body = Body::File {
                    file,
                    offset: a,
                    len: b - a + 1,
                };
            }
            // Multipart with a Content-Encoding would claim the multipart
            // framing itself is compressed, so encoded variants get the
            // whole representation instead (ignoring Range is always allowed).
            r if r.len() > 1 && r.len() <= MAX_MULTIPART_RANGES && coding.is_none() => {
                let b = boundary(etag);
                let (parts, len) = multipart(r, size, &content_type, &b);
                reply.status = 206;
                reply.content_type =
                    Some(Cow::Owned(format!("multipart/byteranges; boundary={b}")));
                reply.content_length = len;
                reply.body = Body::Parts { file, parts };
            }
            _ => {
                reply.content_type = Some(content_type);
                reply.content_length = size;
                reply.body = Body::File {
                    file,
                    offset: 0,
                    len: size,
                };
            }
        }
        reply
    }
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

/// Strong ETag: `"{mtime_secs:x}.{mtime_nsec:x}-{size:x}-{inode:x}{suffix}"`.
/// Any rewrite changes mtime or size, a replace-by-rename changes the inode,
/// and the suffix (`-br`, `-gz`) keeps encoded variants distinct from the
/// identity file even if their stat fields coincided.
fn entity_tag(meta: &Metadata, suffix: &str) -> String {
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
fn last_modified(meta: &Metadata, now: SystemTime) -> Option<SystemTime> {
    let mtime = meta.modified().ok()?.min(now);
    let secs = mtime.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_secs();
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
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
