//! fastpath's system calls, each wrapped once.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! The [`syscall!`] macro turns a libc call's `-1` and `errno` into an
//! [`io::Result`](std::io::Result); the crates of fastpath make their own system calls with
//! it. On it are built safe wrappers for the calls that are general, or that several crates
//! make: an [`Epoll`] instance, accepting a connection, integer socket options, a
//! connection's [`TcpInfo`], and memory shared with forked processes ([`SharedMapping`]).
//! What only one crate needs, for its own purpose, stays in that crate.
//!
//! Why a crate of its own: the unsafe FFI (pointers and lengths handed to the kernel, a
//! struct layout that must match the kernel's) is then written, reviewed and tested in one
//! place, and each call site sees an ordinary `io::Result`, whatever the call. The crate
//! depends on nothing but libc, so every crate of the workspace can use it. It is shaped
//! after mio's `syscall!` macro and `sys` modules.
//!
//! ```
//! use std::io::Write;
//! use std::os::fd::AsRawFd;
//! use std::os::unix::net::UnixStream;
//!
//! use fastpath_sys::{Epoll, Event};
//!
//! let (mut ours, theirs) = UnixStream::pair()?;
//! let epoll = Epoll::new()?;
//! epoll.add(theirs.as_raw_fd(), libc::EPOLLIN as u32, 7)?;
//! ours.write_all(b"ping")?;
//! let mut events = [Event::default(); 4];
//! let n = epoll.wait(&mut events, 1000)?;
//! assert_eq!(n, 1);
//! assert_eq!(events[0].token(), 7);
//!
//! // Any other libc function, its failure as an io::Error:
//! let pid = fastpath_sys::syscall!(getpid())?;
//! assert!(pid > 0);
//! # Ok::<(), std::io::Error>(())
//! ```
#![deny(missing_docs)]
// `syscall!` puts its arguments inside the unsafe block of the FFI call it makes, on purpose:
// it stands for that call, and its callers uphold what the C function requires.
#![allow(clippy::macro_metavars_in_unsafe)]

mod epoll;
mod shared;
mod socket;
mod tcp;

pub use epoll::{Epoll, Event};
pub use shared::{ProcessShared, SharedMapping};
pub use socket::{accept, getsockopt_int, peer_addr, setsockopt_int};
pub use tcp::{send_queue, tcp_info, unread, TcpInfo, TCP_ESTABLISHED, TCP_LISTEN};

/// Calls the libc function named, and turns a `-1` return into
/// `io::Error::last_os_error()`, so that every call site gets an `io::Result` of what the
/// function returned.
///
/// The function is looked up as `libc::name` where the macro is used, so the calling crate
/// depends on libc, as any crate making system calls of its own does.
///
/// The arguments go to the C function unchecked, inside the macro's `unsafe` block: pointers
/// and lengths must be valid for the call, as for any call into libc. That is the caller's
/// to uphold; a `// SAFETY:` comment at the call site says how.
///
/// ```
/// let pid = fastpath_sys::syscall!(getpid()).unwrap();
/// assert!(pid > 0);
/// let bad = fastpath_sys::syscall!(close(-1)).unwrap_err();
/// assert_eq!(bad.raw_os_error(), Some(libc::EBADF));
/// ```
#[macro_export]
macro_rules! syscall {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        #[allow(unused_unsafe)]
        // SAFETY: the caller vouches for the arguments (see the macro's documentation).
        let res = unsafe { libc::$fn($($arg, )*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}
