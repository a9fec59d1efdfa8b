//! The htpasswd file: its entries, the identity of the file they were read from, and
//! reloading it when that identity changes.

use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::fs::{File, Metadata};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::hash::{Hash, HashError, Scheme, BCRYPT_COSTS};

/// How long after a file's last change its stamp may still be shared by a newer version.
///
/// File times are taken from a clock that advances in ticks (a few milliseconds on Linux,
/// a second or two on some file systems), so two writes of the same size within one tick
/// leave the same stamp. A file loaded less than this after its last change is therefore
/// not trusted to be unchanged until it has been read again once the window has passed
/// (the "racily clean" entries of git's index). Two seconds covers the coarsest common
/// granularity, FAT's.
pub const RACY_WINDOW: Duration = Duration::from_secs(2);

/// The entries of an htpasswd file, and what is needed to see that the file has changed.
///
/// The file is `user:hash` lines; blank lines and lines starting with `#` are skipped, and
/// whitespace around a line is ignored, as Apache's `ap_cfg_getline` does (so a file saved
/// with CRLF line ends reads the same). A user name is compared as the bytes it is: no
/// charset is assumed and nothing is normalised. The file is read strictly: one line that
/// is not understood refuses the whole file, with its line number, rather than skipping the
/// line and locking a user out (or in) silently. Refused in particular: a user listed twice
/// (Apache and nginx take the first silently, which hides an edit that did nothing), a
/// second `:` after the hash, and every hash scheme other than bcrypt, `$apr1$` and `{SHA}`,
/// each named in the error (crypt(3) DES uses 8 characters of a password, and plaintext is
/// not a hash).
///
/// # Reloading
///
/// nginx reads the file again for each request; this type instead keeps what it read with
/// the file's stamp (device, inode, size, and modification and status-change times to the
/// nanosecond), so [`changed`](Htpasswd::changed) costs one `stat`. An atomic replace by
/// rename changes the inode, an edit in place the size or times; the status-change time is
/// in the stamp because it cannot be set back by a tool that preserves modification times.
/// A file read within [`RACY_WINDOW`] of its last change counts as changed until it has been
/// read again after the window (see there), so an edit within the same clock tick is not
/// missed.
///
/// When a reload fails (the file vanished, became unreadable or stopped being a regular file,
/// or an edit left a line malformed), the entries last read stay in force and the error is
/// returned for the caller to log: a half-written or deleted file does not lock every user
/// out, and nothing is served on entries other than ones the file really held.
/// [`reload_if_changed`](Htpasswd::reload_if_changed) returns each failure once per state of
/// the file, so that a caller checking on every request does not log it on every request.
pub struct Htpasswd {
    path: PathBuf,
    entries: HashMap<Vec<u8>, Hash>,
    stamp: Stamp,
    /// When the read that produced `entries` began, in nanoseconds since the epoch.
    loaded_at: i128,
    generation: u64,
    failure: Option<Failure>,
    racy_window: Duration,
}

/// A file's identity and version, as `stat` tells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    /// Nanoseconds since the epoch.
    mtime: i128,
    ctime: i128,
}

impl Stamp {
    fn of(meta: &Metadata) -> Stamp {
        let nanos = |secs: i64, nsec: i64| i128::from(secs) * 1_000_000_000 + i128::from(nsec);
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: nanos(meta.mtime(), meta.mtime_nsec()),
            ctime: nanos(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether a read that began at `read_at` may have missed a change that left this stamp.
    fn racy(&self, read_at: i128, window: Duration) -> bool {
        self.mtime.max(self.ctime) + window.as_nanos() as i128 > read_at
    }
}

/// What a `stat` of the path found: the file's stamp, or why there was none.
type Probe = Result<Stamp, io::ErrorKind>;

fn probe(path: &Path) -> Probe {
    std::fs::metadata(path)
        .map(|meta| Stamp::of(&meta))
        .map_err(|e| e.kind())
}

/// A reload that failed: the state of the file then, so the same failure is reported once.
struct Failure {
    probe: Probe,
    /// When the failed read began, in nanoseconds since the epoch.
    at: i128,
}

fn now() -> i128 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_nanos() as i128,
        Err(before) => -(before.duration().as_nanos() as i128),
    }
}

impl Htpasswd {
    /// Reads the htpasswd file at `path`.
    ///
    /// Errors name the file, and the line (from 1) when one is at fault.
    pub fn load(path: impl AsRef<Path>) -> Result<Htpasswd, Error> {
        let path = path.as_ref().to_path_buf();
        let (entries, stamp, loaded_at) = read(&path)?;
        Ok(Htpasswd {
            path,
            entries,
            stamp,
            loaded_at,
            generation: 0,
            failure: None,
            racy_window: RACY_WINDOW,
        })
    }

    /// The path the file was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many users the file names.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file names no user (a file of comments only is valid, and lets no one in).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The scheme of `user`'s hash, or `None` if the file does not name `user`.
    pub fn scheme(&self, user: &[u8]) -> Option<Scheme> {
        self.entries.get(user).map(Hash::scheme)
    }

    /// Whether `password` is `user`'s, by the entry's hash, without any cache (see
    /// [`Verifier`](super::Verifier) for one).
    ///
    /// An unknown user is refused at once, without a dummy hash to take the time a known
    /// one would: user names are not treated as secret (nor are they by Apache or nginx),
    /// and a dummy bcrypt would give every request naming a made-up user milliseconds of CPU.
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        self.entry(user).is_some_and(|hash| hash.matches(password))
    }

    pub(super) fn entry(&self, user: &[u8]) -> Option<&Hash> {
        self.entries.get(user)
    }

    /// A number that grows each time a reload brings different entries (different users or
    /// hashes: a comment or reordering alone does not count). A cache of verified passwords
    /// is valid for one generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the file may differ from what was loaded, by one `stat` of the path: true when
    /// the path now names another file, the file's size or times differ, the path cannot be
    /// stat'ed (it vanished), or the entries were read too soon after the file's last change
    /// to be sure of them (see [`RACY_WINDOW`]).
    pub fn changed(&self) -> bool {
        probe(&self.path) != Ok(self.stamp) || self.stamp.racy(self.loaded_at, self.racy_window)
    }

    /// Reads the file again if [`changed`](Htpasswd::changed) says it may have changed.
    ///
    /// Returns whether the entries changed (the [`generation`](Htpasswd::generation) grew).
    /// On an error the entries last read stay in force; the error is returned once for a given
    /// state of the file (the same stamp, or the same reason the path cannot be stat'ed), and
    /// `Ok(false)` after that until the file changes again, so a caller can call this on every
    /// request and log what it returns.
    pub fn reload_if_changed(&mut self) -> Result<bool, Error> {
        let probe = probe(&self.path);
        if probe == Ok(self.stamp) && !self.stamp.racy(self.loaded_at, self.racy_window) {
            return Ok(false);
        }
        let reported = match &self.failure {
            Some(failure) if failure.probe == probe => {
                let racy = matches!(probe, Ok(stamp) if stamp.racy(failure.at, self.racy_window));
                if !racy {
                    return Ok(false);
                }
                true
            }
            _ => false,
        };
        match self.reload() {
            Err(_) if reported => Ok(false),
            result => result,
        }
    }

    /// Reads the file again, whatever its stamp says (on a signal to reload, say).
    ///
    /// Returns whether the entries changed. On an error the entries last read stay in force.
    pub fn reload(&mut self) -> Result<bool, Error> {
        let started = now();
        match read(&self.path) {
            Ok((entries, stamp, loaded_at)) => {
                let differ = entries != self.entries;
                if differ {
                    self.entries = entries;
                    self.generation += 1;
                }
                self.stamp = stamp;
                self.loaded_at = loaded_at;
                self.failure = None;
                Ok(differ)
            }
            Err(error) => {
                self.failure = Some(Failure {
                    probe: probe(&self.path),
                    at: started,
                });
                Err(error)
            }
        }
    }

    #[cfg(test)]
    pub(super) fn set_racy_window(&mut self, window: Duration) {
        self.racy_window = window;
    }
}

impl fmt::Debug for Htpasswd {
    // Neither user names nor hashes: a debug print may end up in a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Htpasswd")
            .field("path", &self.path)
            .field("users", &self.entries.len())
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

type Entries = HashMap<Vec<u8>, Hash>;

/// Opens, checks and parses the file: its entries, its stamp, and when the read began.
fn read(path: &Path) -> Result<(Entries, Stamp, i128), Error> {
    let error = |line, kind| Error {
        path: path.to_path_buf(),
        line,
        kind,
    };
    let loaded_at = now();
    // O_NONBLOCK: opening a FIFO put in the file's place must not block the caller until a
    // writer comes; it is refused below as not a regular file. On a regular file the flag
    // changes nothing.
    let mut file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| error(None, ErrorKind::Io(e)))?;
    // The stamp is taken from the descriptor that is read, so it describes these bytes even if
    // the path is renamed over meanwhile.
    let meta = file.metadata().map_err(|e| error(None, ErrorKind::Io(e)))?;
    if !meta.is_file() {
        return Err(error(None, ErrorKind::NotAFile));
    }
    let mut bytes = Vec::with_capacity(meta.len().min(1 << 20) as usize);
    file.read_to_end(&mut bytes)
        .map_err(|e| error(None, ErrorKind::Io(e)))?;
    let entries = parse(&bytes).map_err(|(line, kind)| error(Some(line), kind))?;
    Ok((entries, Stamp::of(&meta), loaded_at))
}

/// Parses the file's bytes; an error carries its line number (from 1).
pub(crate) fn parse(bytes: &[u8]) -> Result<Entries, (usize, ErrorKind)> {
    let mut entries: HashMap<Vec<u8>, (Hash, usize)> = HashMap::new();
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let number = index + 1;
        let line = line.trim_ascii();
        if line.is_empty() || line.starts_with(b"#") {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err((number, ErrorKind::MissingColon));
        };
        let (user, field) = (&line[..colon], &line[colon + 1..]);
        if user.is_empty() {
            return Err((number, ErrorKind::EmptyUser));
        }
        if field.is_empty() {
            return Err((number, ErrorKind::EmptyHash));
        }
        // No supported hash contains ':'. Apache would ignore what follows a second one;
        // here it is more likely a paste gone wrong than a comment.
        if field.contains(&b':') {
            return Err((number, ErrorKind::ExtraField));
        }
        let hash = Hash::parse(field).map_err(|e| {
            let kind = match e {
                HashError::Malformed(scheme, expected) => {
                    ErrorKind::MalformedHash { scheme, expected }
                }
                HashError::BcryptCost(cost) => ErrorKind::BcryptCost(cost),
                HashError::Unsupported(name) => ErrorKind::UnsupportedScheme(name),
            };
            (number, kind)
        })?;
        match entries.entry(user.to_vec()) {
            Entry::Occupied(first) => {
                return Err((
                    number,
                    ErrorKind::DuplicateUser {
                        user: user.escape_ascii().to_string(),
                        first_line: first.get().1,
                    },
                ));
            }
            Entry::Vacant(slot) => {
                slot.insert((hash, number));
            }
        }
    }
    Ok(entries
        .into_iter()
        .map(|(user, (hash, _))| (user, hash))
        .collect())
}

/// Why an htpasswd file was not read: the file, the line when one is at fault, and what.
///
/// Displayed as `FILE:LINE: message` (or `FILE: message`), the form of fastpath's
/// configuration errors.
#[derive(Debug)]
pub struct Error {
    path: PathBuf,
    line: Option<usize>,
    kind: ErrorKind,
}

impl Error {
    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The line at fault, from 1; `None` when the file as a whole is (it cannot be read).
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// What is wrong.
    pub fn kind(&self) -> &ErrorKind {
        &self.kind
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: {}", self.path.display(), line, self.kind),
            None => write!(f, "{}: {}", self.path.display(), self.kind),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// What is wrong with an htpasswd file or one of its lines.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file could not be opened or read.
    Io(io::Error),
    /// The path names a directory, FIFO, device or socket.
    NotAFile,
    /// A line that is neither blank, a comment, nor `user:hash`.
    MissingColon,
    /// A line starting with `:`.
    EmptyUser,
    /// A line ending with its first `:`.
    EmptyHash,
    /// A second `:` after the hash.
    ExtraField,
    /// A user listed a second time.
    DuplicateUser {
        /// The user name, with bytes other than printable ASCII escaped.
        user: String,
        /// The line that listed it first.
        first_line: usize,
    },
    /// The prefix of a supported scheme, followed by something that scheme does not write.
    MalformedHash {
        /// The scheme its prefix names.
        scheme: Scheme,
        /// What was expected after the prefix.
        expected: &'static str,
    },
    /// A bcrypt cost outside 4 to 17.
    BcryptCost(u32),
    /// A hash of another scheme (named), or no hash at all.
    UnsupportedScheme(&'static str),
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Io(e) => write!(f, "cannot read the file: {e}"),
            ErrorKind::NotAFile => f.write_str("not a regular file"),
            ErrorKind::MissingColon => f.write_str("expected user:hash, found no ':'"),
            ErrorKind::EmptyUser => f.write_str("empty user name before ':'"),
            ErrorKind::EmptyHash => f.write_str("empty hash after ':'"),
            ErrorKind::ExtraField => {
                f.write_str("a second ':' after the hash (expected user:hash)")
            }
            ErrorKind::DuplicateUser { user, first_line } => {
                write!(f, "user \"{user}\" is already listed on line {first_line}")
            }
            ErrorKind::MalformedHash { scheme, expected } => {
                write!(f, "malformed {scheme} hash: {expected}")
            }
            ErrorKind::BcryptCost(cost) => write!(
                f,
                "bcrypt cost {cost} is outside {} to {}, the costs htpasswd -C makes \
                 (each step doubles the time a check takes)",
                BCRYPT_COSTS.start(),
                BCRYPT_COSTS.end()
            ),
            ErrorKind::UnsupportedScheme(name) => write!(
                f,
                "unsupported hash scheme: {name}; use bcrypt (htpasswd -B), \
                 or $apr1$ (-m) or {{SHA}} (-s) from older files"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::process::Command;

    const BCRYPT: &str = "$2y$05$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2";
    const SHA: &str = "{SHA}L55TUjtiq8FBorTWAZ0jy6g129A=";
    const APR1: &str = "$apr1$Xy7/.aZ9$g2D40oCutz/lmW0n9x5er1";
    const PASSWORD: &str = "correct horse";

    /// An entry made by Apache's own `htpasswd -n -b FLAG`, or `None` (and a note on stderr)
    /// where apache2-utils is not installed: the fixed vectors cover the schemes then.
    fn made_by_htpasswd(flag: &str, user: &str, password: &str) -> Option<String> {
        let output = match Command::new("htpasswd")
            .args([&format!("-nb{flag}"), user, password])
            .output()
        {
            Ok(output) if output.status.success() => output,
            result => {
                eprintln!("htpasswd (apache2-utils) not usable, skipped: {result:?}");
                return None;
            }
        };
        let text = String::from_utf8(output.stdout).unwrap();
        Some(text.lines().next().unwrap().to_owned())
    }

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
        let path = dir.path().join(name);
        fs::write(&path, text).unwrap();
        path
    }

    fn load_err(text: &str) -> Error {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "htpasswd", text);
        Htpasswd::load(&path).unwrap_err()
    }

    #[test]
    fn fixed_entries_of_each_scheme_verify() {
        let dir = tempfile::tempdir().unwrap();
        let text =
            format!("# users\n\nalice:{BCRYPT}\r\n  bob:{SHA}  \n# carol below\ncarol:{APR1}\n");
        let file = Htpasswd::load(write(&dir, "htpasswd", &text)).unwrap();
        assert_eq!(file.len(), 3);
        for (user, scheme) in [
            ("alice", Scheme::Bcrypt),
            ("bob", Scheme::Sha1),
            ("carol", Scheme::Apr1),
        ] {
            assert_eq!(file.scheme(user.as_bytes()), Some(scheme));
            assert!(file.check(user.as_bytes(), PASSWORD.as_bytes()), "{user}");
            assert!(!file.check(user.as_bytes(), b"correct horse "), "{user}");
            assert!(!file.check(user.as_bytes(), b""), "{user}");
        }
        assert!(!file.check(b"dave", PASSWORD.as_bytes()));
        assert!(!file.check(b"alice ", PASSWORD.as_bytes()));
    }

    #[test]
    fn entries_made_by_apache_htpasswd_verify() {
        let dir = tempfile::tempdir().unwrap();
        let users = [
            ("b", "B", Scheme::Bcrypt),
            ("s", "s", Scheme::Sha1),
            ("m", "m", Scheme::Apr1),
        ];
        let password = "pä$$:wörd \\ \"x\"";
        let mut text = String::new();
        for (user, flag, _) in users {
            let Some(line) = made_by_htpasswd(flag, user, password) else {
                return;
            };
            text.push_str(&line);
            text.push('\n');
        }
        let file = Htpasswd::load(write(&dir, "htpasswd", &text)).unwrap();
        for (user, _, scheme) in users {
            assert_eq!(file.scheme(user.as_bytes()), Some(scheme));
            assert!(file.check(user.as_bytes(), password.as_bytes()), "{user}");
            assert!(!file.check(user.as_bytes(), b"pa$$:word"), "{user}");
        }
    }

    #[test]
    fn refused_lines_name_file_line_and_reason() {
        // <bcrypt>, <sha> and <apr1> stand for valid hashes of each scheme.
        let cases: [(&str, usize, &str); 10] = [
            ("alice:<bcrypt>\n\njustaname\n", 3, "expected user:hash"),
            ("# c\n:<sha>\n", 2, "empty user name"),
            ("bob:\n", 1, "empty hash"),
            ("bob:<sha>:comment\n", 1, "a second ':'"),
            (
                "a:<sha>\n#\nb:<sha>\na:<apr1>\n",
                4,
                "\"a\" is already listed on line 1",
            ),
            ("dave:e0FpaKTKuBWJY\n", 1, "crypt(3) DES"),
            ("dave:secret\n", 1, "plaintext passwords are not accepted"),
            ("x:<bcrypt>\ndave:$6$salt$hash\n", 2, "SHA-512-crypt"),
            ("dave:{SHA}abc=\n", 1, "malformed {SHA} hash"),
            (
                "dave:$2y$18$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2\n",
                1,
                "bcrypt cost 18",
            ),
        ];
        for (text, line, reason) in cases {
            let text = text
                .replace("<bcrypt>", BCRYPT)
                .replace("<apr1>", APR1)
                .replace("<sha>", SHA);
            let error = load_err(&text);
            assert_eq!(error.line(), Some(line), "{text:?}: {error}");
            let shown = error.to_string();
            let prefix = format!("{}:{line}: ", error.path().display());
            assert!(shown.starts_with(&prefix), "{shown}");
            assert!(shown.contains(reason), "{shown} lacks {reason}");
        }
    }

    #[test]
    fn a_missing_or_odd_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let error = Htpasswd::load(&missing).unwrap_err();
        assert!(matches!(error.kind(), ErrorKind::Io(e) if e.kind() == io::ErrorKind::NotFound));
        assert_eq!(error.line(), None);
        assert!(error
            .to_string()
            .starts_with(&format!("{}: ", missing.display())));
        let error = Htpasswd::load(dir.path()).unwrap_err();
        assert!(matches!(error.kind(), ErrorKind::NotAFile), "{error}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let status = Command::new("mkfifo").arg(&fifo).status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("mkfifo not usable, skipped");
            return;
        }
        let error = Htpasswd::load(&fifo).unwrap_err();
        assert!(matches!(error.kind(), ErrorKind::NotAFile), "{error}");
    }

    #[test]
    fn an_unchanged_file_is_not_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "htpasswd", &format!("alice:{SHA}\n"));
        let mut file = Htpasswd::load(&path).unwrap();
        // Fresh from the write, the stamp is not yet to be trusted.
        assert!(file.changed());
        assert!(!file.reload_if_changed().unwrap());
        assert_eq!(file.generation(), 0);
        file.set_racy_window(Duration::ZERO);
        assert!(!file.changed());
        assert!(!file.reload_if_changed().unwrap());
    }

    #[test]
    fn a_replacement_by_rename_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "htpasswd", &format!("alice:{SHA}\n"));
        let mut file = Htpasswd::load(&path).unwrap();
        file.set_racy_window(Duration::ZERO);
        // Same size, so only the inode tells.
        let next = write(&dir, "htpasswd.new", &format!("carol:{SHA}\n"));
        fs::rename(&next, &path).unwrap();
        assert!(file.changed());
        assert!(file.reload_if_changed().unwrap());
        assert_eq!(file.generation(), 1);
        assert!(file.check(b"carol", PASSWORD.as_bytes()));
        assert!(!file.check(b"alice", PASSWORD.as_bytes()));
        assert!(!file.changed());
    }

    #[test]
    fn an_edit_in_place_of_the_same_size_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "htpasswd", &format!("alice:{SHA}\n"));
        let mut file = Htpasswd::load(&path).unwrap();
        // Likely within the same clock tick as the first write: the racy window sees it.
        fs::write(&path, format!("carol:{SHA}\n")).unwrap();
        assert!(file.changed());
        assert!(file.reload_if_changed().unwrap());
        assert!(file.check(b"carol", PASSWORD.as_bytes()));

        // And once the stamps are trusted, the times themselves tell.
        file.set_racy_window(Duration::ZERO);
        assert!(!file.changed());
        std::thread::sleep(Duration::from_millis(20));
        fs::write(&path, format!("alice:{SHA}\n")).unwrap();
        assert!(file.changed());
        assert!(file.reload_if_changed().unwrap());
        assert!(file.check(b"alice", PASSWORD.as_bytes()));
        assert_eq!(file.generation(), 2);
    }

    #[test]
    fn a_comment_alone_does_not_make_a_new_generation() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "htpasswd", &format!("alice:{SHA}\n"));
        let mut file = Htpasswd::load(&path).unwrap();
        fs::write(&path, format!("# alice\nalice:{SHA}\n")).unwrap();
        assert!(!file.reload().unwrap());
        assert_eq!(file.generation(), 0);
    }

    #[test]
    fn a_vanished_file_keeps_the_entries_and_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "htpasswd", &format!("alice:{SHA}\n"));
        let mut file = Htpasswd::load(&path).unwrap();
        file.set_racy_window(Duration::ZERO);
        fs::remove_file(&path).unwrap();
        assert!(file.changed());
        let error = file.reload_if_changed().unwrap_err();
        assert_eq!(error.path(), path);
        assert!(matches!(error.kind(), ErrorKind::Io(e) if e.kind() == io::ErrorKind::NotFound));
        assert!(file.check(b"alice", PASSWORD.as_bytes()));
        // Reported once, not on every call.
        assert!(!file.reload_if_changed().unwrap());
        assert!(file.check(b"alice", PASSWORD.as_bytes()));
        // Back with other entries: read again.
        write(&dir, "htpasswd", &format!("bob:{SHA}\n"));
        assert!(file.reload_if_changed().unwrap());
        assert!(file.check(b"bob", PASSWORD.as_bytes()));
        assert!(!file.check(b"alice", PASSWORD.as_bytes()));
    }

    #[test]
    fn an_unreadable_or_broken_file_keeps_the_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "htpasswd", &format!("alice:{SHA}\n"));
        let mut file = Htpasswd::load(&path).unwrap();
        file.set_racy_window(Duration::ZERO);

        // A directory in its place: it opens (even for root, whom permissions do not stop)
        // but is no file.
        fs::remove_file(&path).unwrap();
        fs::create_dir(&path).unwrap();
        let error = file.reload_if_changed().unwrap_err();
        assert!(matches!(error.kind(), ErrorKind::NotAFile), "{error}");
        assert!(!file.reload_if_changed().unwrap());
        assert!(file.check(b"alice", PASSWORD.as_bytes()));

        // A half-done edit: the line is named, the old entries stay.
        fs::remove_dir(&path).unwrap();
        write(&dir, "htpasswd", &format!("alice:{SHA}\nbob\n"));
        let error = file.reload_if_changed().unwrap_err();
        assert_eq!(error.line(), Some(2));
        assert!(file.check(b"alice", PASSWORD.as_bytes()));
        assert_eq!(file.generation(), 0);

        // An explicit reload reports whatever it finds.
        assert!(file.reload().is_err());

        write(&dir, "htpasswd", &format!("alice:{SHA}\nbob:{APR1}\n"));
        assert!(file.reload_if_changed().unwrap());
        assert!(file.check(b"bob", PASSWORD.as_bytes()));
    }

    #[test]
    fn a_fresh_broken_edit_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(&dir, "htpasswd", &format!("alice:{SHA}\n"));
        let mut file = Htpasswd::load(&path).unwrap();
        write(&dir, "htpasswd", "alice\n");
        assert_eq!(file.reload_if_changed().unwrap_err().line(), Some(1));
        // The stamp is too fresh to trust, so the file is read again, but the same failure
        // of the same stamp is not returned again.
        assert!(file.changed());
        assert!(!file.reload_if_changed().unwrap());
        assert!(file.check(b"alice", PASSWORD.as_bytes()));
        write(&dir, "htpasswd", &format!("bob:{SHA}\n"));
        assert!(file.reload_if_changed().unwrap());
        assert!(file.check(b"bob", PASSWORD.as_bytes()));
    }

    #[test]
    fn debug_shows_no_user_or_hash() {
        let dir = tempfile::tempdir().unwrap();
        let file = Htpasswd::load(write(&dir, "htpasswd", &format!("alice:{SHA}\n"))).unwrap();
        let shown = format!("{file:?}");
        assert!(
            !shown.contains("alice") && !shown.contains("L55T"),
            "{shown}"
        );
    }
}
