//! What the kernel says of a TCP socket: `TCP_INFO`, and the queue lengths of `ioctl`.

use std::io;
use std::os::fd::RawFd;

use crate::syscall;

/// [`TcpInfo::state`] of an established connection (`TCP_ESTABLISHED` in Linux's
/// include/net/tcp_states.h): no FIN received or sent yet.
pub const TCP_ESTABLISHED: u8 = 1;
/// [`TcpInfo::state`] of a listening socket (`TCP_LISTEN`).
pub const TCP_LISTEN: u8 = 10;

/// The start of the kernel's `struct tcp_info`, up to the byte counts: every field fastpath
/// reads, at the kernel's offsets. The kernel fills as much of the struct as the length it is
/// given, so a prefix of it is all that needs declaring; fields nobody reads are padding.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpInfo {
    /// `tcpi_state`: [`TCP_ESTABLISHED`], [`TCP_LISTEN`]...
    pub state: u8,
    _ca_state_to_flags: [u8; 7],
    _rto_to_rcv_mss: [u32; 4],
    /// `tcpi_unacked`: segments sent and not yet acknowledged; for a listening socket, the
    /// connections waiting in its accept queue (what `ss` shows as Recv-Q).
    pub unacked: u32,
    _sacked_to_last_ack_sent: [u32; 6],
    /// `tcpi_last_data_recv`: milliseconds since data last arrived.
    pub last_data_recv: u32,
    _last_ack_recv_to_total_retrans: [u32; 12],
    _pacing_rate: u64,
    _max_pacing_rate: u64,
    /// `tcpi_bytes_acked`: bytes sent and acknowledged by the peer, since the socket opened.
    pub bytes_acked: u64,
    /// `tcpi_bytes_received`: bytes received since the socket opened, the peer's FIN counted
    /// as one more once it came.
    pub bytes_received: u64,
}

/// Reads `TCP_INFO` of a TCP socket. Fails on a socket that is not TCP, and on a kernel
/// whose `struct tcp_info` stops short of the byte counts (those before 4.19 may).
pub fn tcp_info(fd: RawFd) -> io::Result<TcpInfo> {
    let mut info = TcpInfo::default();
    let mut len = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which is plain data.
    syscall!(getsockopt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_INFO,
        (&mut info as *mut TcpInfo).cast::<libc::c_void>(),
        &mut len
    ))?;
    if (len as usize) < std::mem::size_of::<TcpInfo>() {
        return Err(io::Error::other(
            "TCP_INFO without byte counts (kernel < 4.19)",
        ));
    }
    Ok(info)
}

/// Bytes in a socket's send queue: written and not yet acknowledged (`TIOCOUTQ`).
pub fn send_queue(fd: RawFd) -> io::Result<u64> {
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int.
    syscall!(ioctl(fd, libc::TIOCOUTQ, &mut queued))?;
    Ok(queued.max(0) as u64)
}

/// Bytes waiting unread in a socket (`FIONREAD`).
pub fn unread(fd: RawFd) -> io::Result<usize> {
    let mut waiting: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int.
    syscall!(ioctl(fd, libc::FIONREAD, &mut waiting))?;
    Ok(waiting.max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::mem::offset_of;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    #[test]
    fn the_layout_is_the_kernels() {
        assert_eq!(
            offset_of!(TcpInfo, state),
            offset_of!(libc::tcp_info, tcpi_state)
        );
        assert_eq!(
            offset_of!(TcpInfo, unacked),
            offset_of!(libc::tcp_info, tcpi_unacked)
        );
        assert_eq!(
            offset_of!(TcpInfo, last_data_recv),
            offset_of!(libc::tcp_info, tcpi_last_data_recv)
        );
        assert_eq!(
            offset_of!(TcpInfo, bytes_acked),
            offset_of!(libc::tcp_info, tcpi_bytes_acked)
        );
        assert_eq!(
            offset_of!(TcpInfo, bytes_received),
            offset_of!(libc::tcp_info, tcpi_bytes_received)
        );
        assert_eq!(
            std::mem::size_of::<TcpInfo>(),
            offset_of!(libc::tcp_info, tcpi_bytes_received) + 8
        );
    }

    /// Waits until `done` holds of the socket's TCP_INFO (acknowledgements travel even on
    /// loopback), for at most 5 s.
    fn eventually(fd: RawFd, done: impl Fn(&TcpInfo) -> bool) -> TcpInfo {
        let start = Instant::now();
        loop {
            let info = tcp_info(fd).unwrap();
            if done(&info) || start.elapsed() > Duration::from_secs(5) {
                return info;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn an_established_pair_counts_what_it_carries() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, _) = listener.accept().unwrap();

        // Counted from the handshake on, which an active opener's count of acknowledged
        // bytes may include (its SYN): what matters is what the write adds.
        let before = tcp_info(client.as_raw_fd()).unwrap();
        assert_eq!(before.state, TCP_ESTABLISHED);
        let received_before = tcp_info(server.as_raw_fd()).unwrap().bytes_received;

        client.write_all(b"twelve bytes").unwrap();
        let acked = before.bytes_acked + 12;
        let sent = eventually(client.as_raw_fd(), |i| i.bytes_acked == acked);
        assert_eq!(sent.bytes_acked, acked);
        assert_eq!(send_queue(client.as_raw_fd()).unwrap(), 0);
        let received = received_before + 12;
        let got = eventually(server.as_raw_fd(), |i| i.bytes_received == received);
        assert_eq!(got.state, TCP_ESTABLISHED);
        assert_eq!(got.bytes_received, received);
        assert_eq!(unread(server.as_raw_fd()).unwrap(), 12);

        let mut buf = [0u8; 12];
        server.read_exact(&mut buf).unwrap();
        assert_eq!(unread(server.as_raw_fd()).unwrap(), 0);

        // The FIN counts as one more byte, and moves the state on.
        drop(client);
        let ended = eventually(server.as_raw_fd(), |i| i.bytes_received == received + 1);
        assert_eq!(ended.bytes_received, received + 1);
        assert_ne!(ended.state, TCP_ESTABLISHED);
    }

    #[test]
    fn a_listener_counts_the_connections_waiting() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let info = tcp_info(listener.as_raw_fd()).unwrap();
        assert_eq!((info.state, info.unacked), (TCP_LISTEN, 0));
        let _waiting = [
            TcpStream::connect(listener.local_addr().unwrap()).unwrap(),
            TcpStream::connect(listener.local_addr().unwrap()).unwrap(),
        ];
        let info = eventually(listener.as_raw_fd(), |i| i.unacked == 2);
        assert_eq!(info.unacked, 2);
    }

    #[test]
    fn a_socket_that_is_not_tcp_is_an_error() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        assert!(tcp_info(ours.as_raw_fd()).is_err());
        assert!(tcp_info(-1).is_err());
    }
}
