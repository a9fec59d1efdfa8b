//! The drivers' own uses of system calls, each returning `io::Result`: what is general is in
//! `fastpath_sys`.

use std::io;
use std::os::fd::RawFd;

use fastpath_sys::syscall;

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

/// Turns a connection away at the limit: drain what it sent (so closing does not reset the
/// refusal away), send the refusal, close.
pub(crate) fn refuse(fd: RawFd, refusal: &[u8]) {
    let mut scratch = [0u8; 4096];
    let _ = syscall!(recv(
        fd,
        scratch.as_mut_ptr() as *mut libc::c_void,
        scratch.len(),
        libc::MSG_DONTWAIT
    ));
    if !refusal.is_empty() {
        let _ = syscall!(send(
            fd,
            refusal.as_ptr() as *const libc::c_void,
            refusal.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL
        ));
    }
    let _ = syscall!(shutdown(fd, libc::SHUT_WR));
}

/// Ignores SIGPIPE process-wide: a peer that goes away must give EPIPE, not kill the server
/// (sendfile has no MSG_NOSIGNAL).
pub fn ignore_sigpipe() {
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}
