//! Watching a document root with inotify, so cached lookups know when to look again.
//!
//! Every directory under the root gets a watch; any event anywhere (a file written,
//! replaced, renamed, deleted or created, a directory added, the event queue
//! overflowing) bumps one generation counter. Cache entries remember the generation
//! they were made at and are resolved afresh once it has moved. That throws away more
//! than strictly needed when files change often, but it is simple enough to be
//! obviously right: no event can be mapped to the wrong entry.
//!
//! The events are read by a thread of the watch's own, or, for a process that must stay
//! single-threaded (a prefork child), by its owner calling [`Watch::poll`] on every tick and
//! before each connection; reading an empty queue costs one system call per site. Processes
//! forked from one parent (prefork's children) can share the generation counter through
//! [`shared_generations`]: the first of them to read a change makes it seen by all at once,
//! and the others' own reading of it later only moves the counter once more.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use fastpath_sys::SharedMapping;

/// Events that can change what a path serves.
const WATCH_MASK: u32 = libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;
/// How often the watcher thread checks whether its site is gone.
const POLL_MS: i32 = 500;
/// Directories watched at most per site; past it the watch fails and nothing is cached.
const MAX_WATCHED_DIRS: usize = 100_000;

/// The shared side of a watch: the generation counter, its own or one in memory shared
/// with other processes.
#[derive(Debug)]
struct Shared {
    own: AtomicU64,
    mapped: Option<&'static AtomicU64>,
}

impl Shared {
    fn new(mapped: Option<&'static AtomicU64>) -> Arc<Shared> {
        Arc::new(Shared {
            own: AtomicU64::new(0),
            mapped,
        })
    }

    fn generation(&self) -> &AtomicU64 {
        self.mapped.unwrap_or(&self.own)
    }
}

/// `n` generation counters in anonymous memory shared with the processes forked after this
/// call (prefork's children), for [`crate::Site::watch_polled_shared`]. The mapping lasts as
/// long as the process.
pub fn shared_generations(n: usize) -> io::Result<&'static [AtomicU64]> {
    Ok(SharedMapping::new(n)?.leak())
}

/// A running watch on one document root; the thread ends when this is dropped.
#[derive(Debug)]
pub(crate) struct Watch {
    shared: Arc<Shared>,
    /// The inotify queue, for a watch without a thread.
    polled: Option<Mutex<Queue>>,
}

/// An inotify descriptor, the directories it watches, and a buffer to read events into.
#[derive(Debug)]
struct Queue {
    inotify: OwnedFd,
    dirs: HashMap<i32, PathBuf>,
    buf: Vec<u8>,
}

impl Queue {
    fn open(root: &Path) -> io::Result<Queue> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let inotify = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut dirs = HashMap::new();
        add_tree(&inotify, root, &mut dirs)?;
        Ok(Queue {
            inotify,
            dirs,
            buf: vec![0u8; 64 * 1024],
        })
    }

    /// Reads what the queue holds without waiting; true when anything changed.
    fn drain(&mut self) -> bool {
        let mut changed = false;
        loop {
            // SAFETY: reading into a buffer we own, of the length passed.
            let n = unsafe {
                libc::read(
                    self.inotify.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                )
            };
            if n <= 0 {
                return changed;
            }
            changed = true;
            self.handle(n as usize);
        }
    }

    /// Follows new directories among the `n` bytes of events in the buffer.
    fn handle(&mut self, n: usize) {
        let mut new_dirs = Vec::new();
        let mut offset = 0usize;
        let header = std::mem::size_of::<libc::inotify_event>();
        while offset + header <= n {
            // SAFETY: the kernel wrote whole events; read_unaligned copes with alignment.
            let event: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(self.buf.as_ptr().add(offset) as *const _) };
            let name_start = offset + header;
            let name_end = (name_start + event.len as usize).min(n);
            let name = &self.buf[name_start..name_end];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            if event.mask & libc::IN_ISDIR != 0
                && event.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0
            {
                if let Some(parent) = self.dirs.get(&event.wd) {
                    new_dirs.push(parent.join(std::ffi::OsStr::from_bytes(name)));
                }
            }
            if event.mask & libc::IN_IGNORED != 0 {
                self.dirs.remove(&event.wd);
            }
            offset = name_end;
        }
        for dir in new_dirs {
            // Files may already sit in the new directory; the caller's bump covers them.
            let _ = add_tree(&self.inotify, &dir, &mut self.dirs);
        }
    }
}

impl Watch {
    /// Watches every directory under `root` (not following symlinks out of it) and
    /// starts the thread that reads the events.
    pub(crate) fn start(root: &Path) -> io::Result<Watch> {
        let queue = Queue::open(root)?;
        let shared = Shared::new(None);
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("fastpath-watch".into())
            .spawn(move || watch_loop(queue, weak))?;
        Ok(Watch {
            shared,
            polled: None,
        })
    }

    /// Watches every directory under `root`, without a thread: the events are read by
    /// [`Watch::poll`]. With `mapped`, the generation is that counter, shared with other
    /// processes.
    pub(crate) fn start_polled(
        root: &Path,
        mapped: Option<&'static AtomicU64>,
    ) -> io::Result<Watch> {
        Ok(Watch {
            shared: Shared::new(mapped),
            polled: Some(Mutex::new(Queue::open(root)?)),
        })
    }

    /// Reads the events that arrived, for a watch without a thread; does nothing for one
    /// with a thread.
    pub(crate) fn poll(&self) {
        let Some(queue) = &self.polled else {
            return;
        };
        let mut queue = queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if queue.drain() {
            self.shared.generation().fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The current generation; it moves whenever something under the root changed.
    pub(crate) fn generation(&self) -> u64 {
        self.shared.generation().load(Ordering::Acquire)
    }
}

/// Adds a watch on `dir` and every directory below it.
fn add_tree(inotify: &OwnedFd, dir: &Path, dirs: &mut HashMap<i32, PathBuf>) -> io::Result<()> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        if dirs.len() >= MAX_WATCHED_DIRS {
            return Err(io::Error::other(format!(
                "more than {MAX_WATCHED_DIRS} directories to watch"
            )));
        }
        let c = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // IN_DONT_FOLLOW: a symlinked directory is reached through its real location if
        // that is inside the root; one outside the root is never served anyway.
        // SAFETY: valid descriptor and NUL-terminated path.
        let wd = unsafe {
            libc::inotify_add_watch(
                inotify.as_raw_fd(),
                c.as_ptr(),
                WATCH_MASK | libc::IN_DONT_FOLLOW,
            )
        };
        if wd < 0 {
            let err = io::Error::last_os_error();
            // A directory that vanished meanwhile needs no watch.
            if matches!(err.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) {
                continue;
            }
            return Err(err);
        }
        dirs.insert(wd, dir.clone());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(entry.path());
            }
        }
    }
    Ok(())
}

fn watch_loop(mut queue: Queue, shared: Weak<Shared>) {
    loop {
        let mut poll = libc::pollfd {
            fd: queue.inotify.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, POLL_MS) };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if ready <= 0 {
            continue;
        }
        if queue.drain() {
            shared.generation().fetch_add(1, Ordering::AcqRel);
        }
    }
}
