//! Directory listings, in the manner of nginx's `autoindex`: what a directory holds, read
//! once, then written as an HTML page or as JSON.
//!
//! Decisions, and why:
//! - Entries are read from a directory descriptor ([`read_dir_at`]) and each one is looked
//!   up with `fstatat` relative to it, so that the listing describes the directory the
//!   server opened beneath its root, whatever happens to the path meanwhile.
//! - Symbolic links are followed, as nginx does: a link to a directory is listed as a
//!   directory, with the size and time of what a request for it would get.
//! - Names starting with `.` are hidden: the server refuses dotfiles (all but
//!   `/.well-known/`), so listing them would advertise names that cannot be fetched, and
//!   they are often what should not be advertised at all (`.git`, `.env`, `.htpasswd`).
//! - Only directories and regular files are listed: the server answers 403 for FIFOs,
//!   sockets and devices, so they would be dead links.
//! - An entry that vanishes between `readdir` and `fstatat` (or a link whose target does
//!   not exist, or loops) is skipped, as nginx does: it is not there to be fetched. Any
//!   other error fails the listing, so that the server answers 500 and logs why rather
//!   than show a list that silently lacks entries.
//! - Directories come first, then files; each group in byte order of the names (nginx's
//!   order, and the same on every machine whatever its locale).
//! - At most `max_entries` entries are listed ([`DEFAULT_MAX_ENTRIES`]), and reading
//!   stops there: a directory of a million files must not cost a worker a million
//!   `fstatat` calls and the memory to sort them. Which entries are kept is then the
//!   directory's own order, and both outputs say the list was cut.
//! - Links are relative (`name`, `dir/`), percent-encoded for every byte outside RFC
//!   3986's unreserved set, so they work behind any prefix the server is mounted at and
//!   a name such as `a:b` cannot read as a scheme. They assume the page's URL ends in
//!   `/`, which the server's directory redirect ensures.
//! - A name that is not UTF-8 is shown with U+FFFD in place of its bad bytes, and its
//!   link carries the exact bytes percent-encoded, so that it still leads to the file.
//! - Sizes are exact byte counts (nginx's default), times are UTC to the second: RFC 3339
//!   in JSON, `YYYY-MM-DD HH:MM:SS UTC` in HTML inside a `<time>` carrying the RFC 3339
//!   form.

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many entries a listing holds unless configured otherwise.
pub const DEFAULT_MAX_ENTRIES: usize = 10_000;

/// The `Content-Type` of [`Listing::to_html`]'s output.
pub const HTML_CONTENT_TYPE: &str = "text/html; charset=utf-8";

/// The `Content-Type` of [`Listing::to_json`]'s output.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// What a listed entry is, after following symbolic links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory: listed with a trailing `/`.
    Directory,
    /// A regular file.
    File,
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name's bytes as the directory holds them (not necessarily UTF-8).
    pub name: Vec<u8>,
    /// Directory or file.
    pub kind: Kind,
    /// Size in bytes (as `stat` says; not shown for directories).
    pub size: u64,
    /// Last modification time.
    pub modified: SystemTime,
}

/// A directory's entries, sorted, ready to be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Directories first, then files, each in byte order of their names.
    pub entries: Vec<Entry>,
    /// The directory held more entries than were read (`max_entries`).
    pub truncated: bool,
    /// The cap the listing was read with, for the note that it was cut.
    pub max_entries: usize,
}

/// Opens the directory at `path` and reads it as [`read_dir_at`] does.
pub fn read_dir(path: &Path, max_entries: usize) -> io::Result<Listing> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    read_dir_at(&fd, max_entries)
}

/// Reads the directory open at `dir` (opened for reading, not `O_PATH`) into a sorted
/// listing of at most `max_entries` entries. `dir` is left as it was: entries are read
/// through a descriptor of its own, so its position does not move.
pub fn read_dir_at<Fd: AsFd>(dir: Fd, max_entries: usize) -> io::Result<Listing> {
    let dir = dir.as_fd();
    let mut stream = Dir::read_from(dir)?;
    let mut entries = Vec::new();
    let mut truncated = false;
    while let Some(entry) = stream.read() {
        let entry = entry?;
        let name = entry.file_name();
        // Also drops "." and "..".
        if name.to_bytes().first() == Some(&b'.') {
            continue;
        }
        let stat = match rustix::fs::statat(dir, name, AtFlags::empty()) {
            Ok(stat) => stat,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP) => continue,
            Err(e) => return Err(e.into()),
        };
        let kind = match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Kind::Directory,
            FileType::RegularFile => Kind::File,
            _ => continue,
        };
        if entries.len() == max_entries {
            truncated = true;
            break;
        }
        entries.push(Entry {
            name: name.to_bytes().to_vec(),
            kind,
            size: u64::try_from(stat.st_size).unwrap_or(0),
            modified: system_time(mtime_secs(&stat)),
        });
    }
    sort(&mut entries);
    Ok(Listing {
        entries,
        truncated,
        max_entries,
    })
}

/// `st_mtime` as i64, which it is on 64-bit Linux and is not on 32-bit.
#[allow(clippy::useless_conversion)]
fn mtime_secs(stat: &rustix::fs::Stat) -> i64 {
    i64::from(stat.st_mtime)
}

/// Directories first, then files; byte order of names within each.
fn sort(entries: &mut [Entry]) {
    entries.sort_by(|a, b| {
        let dir_first = (a.kind != Kind::Directory).cmp(&(b.kind != Kind::Directory));
        dir_first.then_with(|| a.name.cmp(&b.name))
    });
}

/// The time `secs` whole seconds from the epoch (listings show no finer time).
fn system_time(secs: i64) -> SystemTime {
    let since = Duration::from_secs(secs.unsigned_abs());
    if secs >= 0 {
        UNIX_EPOCH + since
    } else {
        UNIX_EPOCH - since
    }
}

impl Listing {
    /// The listing as an HTML page for the URL path `url_path` (decoded, as the server
    /// resolved it; shown in the title and heading), with a link to `../` unless the path
    /// is `/`. Every name and the path are escaped; links are percent-encoded.
    pub fn to_html(&self, url_path: &[u8]) -> String {
        let mut out = String::with_capacity(512 + self.entries.len() * 160);
        let mut title = String::new();
        escape_html_into(&String::from_utf8_lossy(url_path), &mut title);
        out.push_str("<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n<title>Index of ");
        out.push_str(&title);
        out.push_str("</title>\n</head>\n<body>\n<h1>Index of ");
        out.push_str(&title);
        out.push_str(
            "</h1>\n<table>\n<thead><tr><th>Name</th><th>Size</th><th>Modified</th></tr></thead>\n<tbody>\n",
        );
        if url_path != b"/" {
            out.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
        }
        for entry in &self.entries {
            let is_dir = entry.kind == Kind::Directory;
            out.push_str("<tr><td><a href=\"");
            percent_encode_into(&entry.name, false, &mut out);
            if is_dir {
                out.push('/');
            }
            out.push_str("\">");
            escape_html_into(&String::from_utf8_lossy(&entry.name), &mut out);
            if is_dir {
                out.push('/');
            }
            out.push_str("</a></td><td>");
            if is_dir {
                out.push('-');
            } else {
                out.push_str(&entry.size.to_string());
            }
            let civil = Civil::from(entry.modified);
            out.push_str("</td><td><time datetime=\"");
            out.push_str(&civil.rfc3339());
            out.push_str("\">");
            out.push_str(&civil.readable());
            out.push_str("</time></td></tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
        if self.truncated {
            out.push_str(&format!(
                "<p>This directory holds more entries: the list was cut at {}.</p>\n",
                self.max_entries
            ));
        }
        out.push_str("</body>\n</html>\n");
        out
    }

    /// The listing as a JSON object, `url_path` as in [`Listing::to_html`]:
    /// `{"entries": [...], "path": P, "truncated": B}`, each entry
    /// `{"href": H, "modified": M, "name": N, "size": S, "type": "directory"|"file"}`.
    ///
    /// `name` is the name as text (U+FFFD where it is not UTF-8), `href` the exact bytes
    /// percent-encoded with a trailing `/` for a directory (the way to reach it, and the
    /// exact name for a client that needs it), `size` is given for files only (as nginx's
    /// JSON does), `modified` is RFC 3339 in UTC.
    pub fn to_json(&self, url_path: &[u8]) -> String {
        // Keys go in in alphabetical order, so the text is the same whether serde_json
        // keeps insertion order (its `preserve_order` feature, which any crate of the
        // build may turn on) or sorts.
        let entries: Vec<serde_json::Value> = self
            .entries
            .iter()
            .map(|entry| {
                let mut href = String::new();
                percent_encode_into(&entry.name, false, &mut href);
                if entry.kind == Kind::Directory {
                    href.push('/');
                }
                let mut object = serde_json::Map::new();
                object.insert("href".into(), href.into());
                object.insert(
                    "modified".into(),
                    Civil::from(entry.modified).rfc3339().into(),
                );
                object.insert(
                    "name".into(),
                    String::from_utf8_lossy(&entry.name).into_owned().into(),
                );
                let kind = match entry.kind {
                    Kind::Directory => "directory",
                    Kind::File => {
                        object.insert("size".into(), entry.size.into());
                        "file"
                    }
                };
                object.insert("type".into(), kind.into());
                serde_json::Value::Object(object)
            })
            .collect();
        let mut top = serde_json::Map::new();
        top.insert("entries".into(), entries.into());
        top.insert(
            "path".into(),
            String::from_utf8_lossy(url_path).into_owned().into(),
        );
        top.insert("truncated".into(), self.truncated.into());
        let mut out = serde_json::Value::Object(top).to_string();
        out.push('\n');
        out
    }
}

/// Appends `text` with the five characters that matter in HTML text and attribute values
/// escaped.
fn escape_html_into(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// Appends `bytes` percent-encoded: every byte outside RFC 3986's unreserved set
/// (`A-Z a-z 0-9 - . _ ~`) as `%XX`, and `/` too unless `keep_slash`. Rewrite rules use
/// it as well, for what they put into a URL.
pub(crate) fn percent_encode_into(bytes: &[u8], keep_slash: bool, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in bytes {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// A time in UTC to the second, as calendar fields.
struct Civil {
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl From<SystemTime> for Civil {
    fn from(time: SystemTime) -> Self {
        // Whole seconds, rounded down also before 1970.
        let secs = match time.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => {
                let d = e.duration();
                let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                -whole - i64::from(d.subsec_nanos() > 0)
            }
        };
        let days = secs.div_euclid(86_400);
        let rest = secs.rem_euclid(86_400) as u32;
        let (year, month, day) = fastpath_http::civil_from_days(days);
        Civil {
            year,
            month,
            day,
            hour: rest / 3600,
            minute: rest / 60 % 60,
            second: rest % 60,
        }
    }
}

impl Civil {
    fn rfc3339(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    fn readable(&self) -> String {
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::fs::{self, File, FileTimes};
    use std::os::unix::ffi::OsStrExt;

    /// 2024-02-29T12:34:56Z.
    const LEAP_DAY: u64 = 1_709_210_096;

    fn set_mtime(path: &Path, secs: u64) {
        let file = File::options().read(true).open(path).unwrap();
        let time = UNIX_EPOCH + Duration::from_secs(secs);
        file.set_times(FileTimes::new().set_modified(time)).unwrap();
    }

    fn write(dir: &Path, name: &[u8], contents: &[u8]) {
        let path = dir.join(OsStr::from_bytes(name));
        fs::write(&path, contents).unwrap();
        set_mtime(&path, LEAP_DAY);
    }

    /// A directory whose names need every kind of care.
    fn awkward_dir() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, b"<img src=x onerror=alert(1)>", b"x");
        write(dir, b"a&b", b"12345");
        write(dir, b"say \"hi\" 'there'", b"");
        write(dir, b"100%", b"ab");
        write(dir, b"caf\xe9.txt", b"abc");
        write(dir, b".env", b"SECRET=1");
        fs::create_dir(dir.join("sub dir")).unwrap();
        set_mtime(&dir.join("sub dir"), 0);
        fs::create_dir(dir.join(".git")).unwrap();
        tmp
    }

    fn names(listing: &Listing) -> Vec<&[u8]> {
        listing.entries.iter().map(|e| e.name.as_slice()).collect()
    }

    #[test]
    fn reads_sorted_directories_first_without_dotfiles() {
        let tmp = awkward_dir();
        let listing = read_dir(tmp.path(), DEFAULT_MAX_ENTRIES).unwrap();
        assert_eq!(
            names(&listing),
            vec![
                &b"sub dir"[..],
                b"100%",
                b"<img src=x onerror=alert(1)>",
                b"a&b",
                b"caf\xe9.txt",
                b"say \"hi\" 'there'",
            ]
        );
        assert!(!listing.truncated);
        assert_eq!(listing.entries[0].kind, Kind::Directory);
        assert_eq!(listing.entries[3].kind, Kind::File);
        assert_eq!(listing.entries[3].size, 5);
        assert_eq!(
            listing.entries[3].modified,
            UNIX_EPOCH + Duration::from_secs(LEAP_DAY)
        );
    }

    #[test]
    fn reads_from_a_descriptor_and_leaves_it_usable() {
        let tmp = awkward_dir();
        let fd = rustix::fs::open(
            tmp.path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let first = read_dir_at(&fd, DEFAULT_MAX_ENTRIES).unwrap();
        let second = read_dir_at(&fd, DEFAULT_MAX_ENTRIES).unwrap();
        assert_eq!(first.entries.len(), 6);
        assert_eq!(first, second);
    }

    #[test]
    fn html_escapes_names_and_encodes_links() {
        let tmp = awkward_dir();
        let html = read_dir(tmp.path(), DEFAULT_MAX_ENTRIES)
            .unwrap()
            .to_html(b"/files/<x>&'\"/");
        let row = |href: &str, text: &str, size: &str, time: &str| {
            format!(
                "<tr><td><a href=\"{href}\">{text}</a></td><td>{size}</td><td>{time}</td></tr>\n"
            )
        };
        let leap = "<time datetime=\"2024-02-29T12:34:56Z\">2024-02-29 12:34:56 UTC</time>";
        let epoch = "<time datetime=\"1970-01-01T00:00:00Z\">1970-01-01 00:00:00 UTC</time>";
        let expected_rows = [
            row("../", "../", "", ""),
            row("sub%20dir/", "sub dir/", "-", epoch),
            row("100%25", "100%", "2", leap),
            row(
                "%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E",
                "&lt;img src=x onerror=alert(1)&gt;",
                "1",
                leap,
            ),
            row("a%26b", "a&amp;b", "5", leap),
            row("caf%E9.txt", "caf\u{fffd}.txt", "3", leap),
            row(
                "say%20%22hi%22%20%27there%27",
                "say &quot;hi&quot; &#39;there&#39;",
                "0",
                leap,
            ),
        ]
        .concat();
        let expected = format!(
            "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n\
             <title>Index of /files/&lt;x&gt;&amp;&#39;&quot;/</title>\n</head>\n<body>\n\
             <h1>Index of /files/&lt;x&gt;&amp;&#39;&quot;/</h1>\n<table>\n\
             <thead><tr><th>Name</th><th>Size</th><th>Modified</th></tr></thead>\n<tbody>\n\
             {expected_rows}</tbody>\n</table>\n</body>\n</html>\n"
        );
        assert_eq!(html, expected);
    }

    #[test]
    fn html_has_no_unescaped_name() {
        let tmp = awkward_dir();
        let html = read_dir(tmp.path(), DEFAULT_MAX_ENTRIES)
            .unwrap()
            .to_html(b"/");
        for raw in ["<img", "a&b", "\"hi\"", "'there'", "100%\""] {
            assert!(!html.contains(raw), "{raw} unescaped in {html}");
        }
        // The markup's own quotes and brackets are the only ones: every `<` opens a tag
        // of the page's.
        for (i, _) in html.match_indices('<') {
            let tag = &html[i + 1..];
            assert!(
                [
                    "!DOCTYPE", "html", "/html", "head", "/head", "meta", "title", "/title",
                    "body", "/body", "h1", "/h1", "table", "/table", "thead", "/thead", "tbody",
                    "/tbody", "tr", "/tr", "th", "/th", "td", "/td", "a ", "/a", "time", "/time",
                ]
                .iter()
                .any(|t| tag.starts_with(t)),
                "stray < at {}",
                &html[i..(i + 20).min(html.len())]
            );
        }
        assert!(!html.contains(".env"));
        assert!(!html.contains(".git"));
        // At the root there is no way up.
        assert!(!html.contains("href=\"../\""));
    }

    #[test]
    fn json_round_trips() {
        let tmp = awkward_dir();
        let json = read_dir(tmp.path(), DEFAULT_MAX_ENTRIES)
            .unwrap()
            .to_json(b"/d\xff/");
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["path"], "/d\u{fffd}/");
        assert_eq!(value["truncated"], false);
        let entries = value["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 6);
        assert_eq!(
            entries[0],
            serde_json::json!({
                "name": "sub dir",
                "href": "sub%20dir/",
                "type": "directory",
                "modified": "1970-01-01T00:00:00Z",
            })
        );
        assert_eq!(
            entries[4],
            serde_json::json!({
                "name": "caf\u{fffd}.txt",
                "href": "caf%E9.txt",
                "type": "file",
                "size": 3,
                "modified": "2024-02-29T12:34:56Z",
            })
        );
        let texts: Vec<&str> = entries
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            texts,
            [
                "sub dir",
                "100%",
                "<img src=x onerror=alert(1)>",
                "a&b",
                "caf\u{fffd}.txt",
                "say \"hi\" 'there'",
            ]
        );
        assert_eq!(entries[5]["href"], "say%20%22hi%22%20%27there%27");
    }

    #[test]
    fn cut_at_the_cap_and_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..5 {
            write(tmp.path(), format!("f{i}").as_bytes(), b"");
        }
        write(tmp.path(), b".hidden", b"");
        let listing = read_dir(tmp.path(), 3).unwrap();
        assert_eq!(listing.entries.len(), 3);
        assert!(listing.truncated);
        // Sorted, whichever three the directory gave first.
        assert!(listing.entries.windows(2).all(|w| w[0].name < w[1].name));
        assert!(listing
            .to_html(b"/")
            .contains("<p>This directory holds more entries: the list was cut at 3.</p>\n"));
        let json: serde_json::Value = serde_json::from_str(&listing.to_json(b"/")).unwrap();
        assert_eq!(json["truncated"], true);

        // Exactly at the cap is not cut; hidden names do not count.
        let listing = read_dir(tmp.path(), 5).unwrap();
        assert_eq!(listing.entries.len(), 5);
        assert!(!listing.truncated);
        assert!(!listing.to_html(b"/").contains("was cut"));
    }

    #[test]
    fn skips_what_cannot_be_looked_up_and_what_is_not_served() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        write(dir, b"real", b"data");
        fs::create_dir(dir.join("realdir")).unwrap();
        // A dangling link fails `fstatat` with ENOENT exactly as an entry removed after
        // `readdir` does; a looping one with ELOOP.
        std::os::unix::fs::symlink("missing", dir.join("dangling")).unwrap();
        std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
        std::os::unix::fs::symlink("real", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("realdir", dir.join("linkdir")).unwrap();
        let fifo = dir.join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let listing = read_dir(dir, DEFAULT_MAX_ENTRIES).unwrap();
        assert_eq!(
            names(&listing),
            vec![&b"linkdir"[..], b"realdir", b"link", b"real"]
        );
        assert_eq!(listing.entries[0].kind, Kind::Directory);
        assert_eq!(listing.entries[2].size, 4);
    }

    #[test]
    fn not_a_directory_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        write(tmp.path(), b"file", b"");
        let err = read_dir(&tmp.path().join("file"), 10).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::NOTDIR.raw_os_error())
        );
        let err = read_dir(&tmp.path().join("none"), 10).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn empty_root_listing() {
        let tmp = tempfile::tempdir().unwrap();
        let listing = read_dir(tmp.path(), 10).unwrap();
        assert_eq!(
            listing.to_json(b"/"),
            "{\"entries\":[],\"path\":\"/\",\"truncated\":false}\n"
        );
        assert!(listing
            .to_html(b"/")
            .contains("<tbody>\n</tbody>\n</table>\n</body>"));
    }

    #[test]
    fn calendar_dates() {
        let at = |secs: i64| Civil::from(system_time(secs)).rfc3339();
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(LEAP_DAY as i64), "2024-02-29T12:34:56Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(4_102_444_799), "2099-12-31T23:59:59Z");
        assert_eq!(at(-1), "1969-12-31T23:59:59Z");
        assert_eq!(
            Civil::from(UNIX_EPOCH - Duration::from_millis(500)).rfc3339(),
            "1969-12-31T23:59:59Z"
        );
        assert_eq!(at(-86_400 * 365), "1969-01-01T00:00:00Z");
    }
}
