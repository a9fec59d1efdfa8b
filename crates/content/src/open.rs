//! Opening paths strictly beneath the document root.
//!
//! The preferred mechanism is `openat2(2)` with `RESOLVE_BENEATH`: the kernel
//! resolves the whole path, symlinks included, relative to the root
//! descriptor and refuses (`EXDEV`) anything that would leave it, atomically.
//! Where `openat2` is unavailable (kernels before 5.6, or seccomp filters that
//! answer `ENOSYS`/`EPERM`), a fallback canonicalises the path in user space
//! and checks it is beneath the canonical root before opening it. That check
//! and the open are separate steps, so someone able to swap a directory for a
//! symlink in between can race it; the fallback is only as safe as the
//! document root is trusted.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Kernel `struct open_how` (linux/openat2.h). Declared here because libc's
/// version is `#[non_exhaustive]` and cannot be built with a literal.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;

/// Flags for content files. `O_NONBLOCK` so a FIFO in the tree opens at once
/// instead of waiting for a writer; `O_NOCTTY` so a terminal device can never
/// become our controlling terminal. Neither affects regular-file reads.
const CONTENT_FLAGS: libc::c_int =
    libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;

/// A document root and the means of opening files beneath it.
#[derive(Debug)]
pub(crate) struct Root {
    fd: OwnedFd,
    canonical: PathBuf,
    openat2: bool,
}

impl Root {
    /// Opens `path` as an `O_PATH` directory descriptor and probes `openat2`.
    pub(crate) fn open(path: &Path, allow_openat2: bool) -> io::Result<Root> {
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(path)?;
        let canonical = std::fs::canonicalize(path)?;
        let mut root = Root {
            fd: OwnedFd::from(dir),
            canonical,
            openat2: false,
        };
        // Any failure of the probe (ENOSYS, EPERM from seccomp, EINVAL from
        // an old kernel that knows the syscall but not a flag) means "use the
        // fallback"; the root itself was already opened successfully above.
        root.openat2 = allow_openat2
            && root
                .openat2(c".", libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY)
                .is_ok();
        Ok(root)
    }

    /// The canonical path of the root.
    pub(crate) fn canonical(&self) -> &Path {
        &self.canonical
    }

    /// Whether the kernel resolves paths for us (`openat2`).
    pub(crate) fn uses_openat2(&self) -> bool {
        self.openat2
    }

    /// Opens `rel` (relative, may be empty for the root itself) read-only.
    pub(crate) fn open_file(&self, rel: &[u8]) -> io::Result<File> {
        let rel: &[u8] = if rel.is_empty() { b"." } else { rel };
        if self.openat2 {
            let c = CString::new(rel).map_err(|_| io::Error::from_raw_os_error(libc::ENOENT))?;
            match self.openat2(&c, CONTENT_FLAGS) {
                Ok(fd) => Ok(File::from(fd)),
                // RESOLVE_BENEATH refuses every absolute symlink, even one that points back
                // inside the root (common in deployed sites); those get the containment check
                // on the canonical path instead, which still refuses anything outside.
                Err(e) if e.raw_os_error() == Some(libc::EXDEV) => self.open_fallback(rel),
                Err(e) => Err(e),
            }
        } else {
            self.open_fallback(rel)
        }
    }

    fn openat2(&self, rel: &std::ffi::CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
        let how = OpenHow {
            flags: flags as u64,
            mode: 0,
            resolve: RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        loop {
            // SAFETY: `rel` is NUL-terminated, `how` is a valid open_how of
            // the size passed; the kernel only reads both.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    self.fd.as_raw_fd(),
                    rel.as_ptr(),
                    &how as *const OpenHow,
                    std::mem::size_of::<OpenHow>(),
                )
            };
            if r >= 0 {
                // SAFETY: a non-negative return is a fresh descriptor we own.
                return Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) });
            }
            let err = io::Error::last_os_error();
            // EAGAIN: the kernel saw a concurrent rename during resolution
            // and asks to retry; EINTR is the usual.
            match err.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                _ => return Err(err),
            }
        }
    }

    /// Racy fallback: canonicalise, check containment, open the result
    /// without following a final symlink (which would mean it changed since).
    fn open_fallback(&self, rel: &[u8]) -> io::Result<File> {
        let full = self.canonical.join(OsStr::from_bytes(rel));
        let canon = std::fs::canonicalize(&full)?;
        if !canon.starts_with(&self.canonical) {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        // canonicalize drops a trailing '/', which would let "/file/" open a
        // regular file; keep the ENOTDIR the kernel would give.
        let mut target = canon.into_os_string();
        if rel.ends_with(b"/") {
            target.push("/");
        }
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW)
            .open(target)
    }
}

/// Maps an open error to the status the client gets.
pub(crate) fn status_for(err: &io::Error) -> u16 {
    match err.raw_os_error() {
        // ENAMETOOLONG would merit 414, but the server has already accepted
        // the target's length; to the client the file simply is not there.
        Some(libc::ENOENT | libc::ENOTDIR | libc::ENAMETOOLONG) => 404,
        // EXDEV: resolution would leave the root; ELOOP: symlink loop or a
        // magic link; ENXIO/ENODEV: a socket or device node.
        Some(
            libc::EACCES | libc::EPERM | libc::EXDEV | libc::ELOOP | libc::ENXIO | libc::ENODEV,
        ) => 403,
        _ => 500,
    }
}
