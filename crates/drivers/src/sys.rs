//! Thin wrappers over the system calls the drivers use, each returning `io::Result`.

use std::io;
use std::os::fd::RawFd;

/// Calls a libc function and turns a `-1` return into `io::Error::last_os_error()`.
macro_rules! syscall {
    ($fn: ident ( $($arg: expr),* $(,)* ) ) => {{
        #[allow(unused_unsafe)]
        let res = unsafe { libc::$fn($($arg, )*) };
        if res == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}
pub(crate) use syscall;

/// Sets an integer socket option.
pub(crate) fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    syscall!(setsockopt(
        fd,
        level,
        name,
        &value as *const i32 as *const libc::c_void,
        std::mem::size_of::<i32>() as libc::socklen_t
    ))
    .map(|_| ())
}

/// Reads into the spare capacity of `buf`, at most `max` bytes; returns the count (0 = end of stream).
pub(crate) fn read_into(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    buf.reserve(max);
    let spare = buf.capacity() - buf.len();
    let want = spare.min(max);
    let n = syscall!(read(
        fd,
        buf.as_mut_ptr().add(buf.len()) as *mut libc::c_void,
        want
    ))? as usize;
    // SAFETY: the kernel initialised `n` bytes past the old length.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// Ignores SIGPIPE process-wide: a peer that goes away must give EPIPE, not kill the server
/// (sendfile has no MSG_NOSIGNAL).
pub fn ignore_sigpipe() {
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}
