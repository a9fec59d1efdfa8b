//! The per-core model: one event-loop thread per CPU, pinned to it, sharing nothing.
//!
//! This is the bare-machine design carried over to a general-purpose kernel: each core runs
//! one task that takes a request from arrival to completion, with everything of a connection
//! in one entry of that core's table, its own listener, its own caches and its own buffers. No
//! lock is taken and nothing is shared on the request path; the one shared word is the count
//! of open connections, touched once per accept and once per close so that `max_connections`
//! means the same as in the other models (a per-core share would refuse a connection while
//! another core has room). Where the CPUs the process may use are numbered 0..n, a
//! classic BPF program attached to the SO_REUSEPORT group sends each new connection to the
//! listener of the CPU that received it, so a connection's packets and its worker meet on the
//! same core; elsewhere the kernel's hash spreads connections as in the epoll model.
//!
//! Optional busy polling trades a core's idle time for latency: after each event the loop
//! keeps polling without sleeping for the configured time, and the sockets ask the kernel to
//! busy-poll the device queue (SO_BUSY_POLL) where it allows.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use fastpath_sys::setsockopt_int;

use crate::loops::epoll::{LoopOptions, Worker};
use crate::loops::Env;
use crate::{common, DriverConfig, Handler, Listeners};

/// The per-core model's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PercoreConfig {
    /// Keep polling for this long after each event instead of sleeping; `None` to sleep at
    /// once (the default: busy polling keeps every core at 100%).
    pub busy_poll: Option<Duration>,
}

/// The CPUs this process may run on, in increasing order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, filled in by the kernel.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        return (0..n).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

pub(crate) fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; `cpu` is below CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t; 0 is the calling thread.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches a classic BPF program to the SO_REUSEPORT group of `first` that picks the socket
/// whose index is the number of the CPU handling the incoming packet.
fn steer_by_cpu(first: &impl AsRawFd) -> io::Result<()> {
    // SKF_AD_OFF + SKF_AD_CPU: the "load the current CPU" ancillary operation.
    const SKF_AD_CPU: u32 = 36;
    let load_cpu = libc::sock_filter {
        code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
        jt: 0,
        jf: 0,
        k: (libc::SKF_AD_OFF as u32).wrapping_add(SKF_AD_CPU),
    };
    let return_it = libc::sock_filter {
        code: (libc::BPF_RET | libc::BPF_A) as u16,
        jt: 0,
        jf: 0,
        k: 0,
    };
    let program = [load_cpu, return_it];
    let fprog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `fprog` points at `program`, which outlives the call; the kernel copies it.
    let rc = unsafe {
        libc::setsockopt(
            first.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            &fprog as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn run<H, F>(
    listeners: Listeners,
    config: &DriverConfig,
    make_handler: &F,
    stop: &AtomicBool,
    percore: PercoreConfig,
) -> io::Result<()>
where
    H: Handler,
    F: Fn(usize) -> H + Sync,
{
    let cpus = allowed_cpus();
    let workers = listeners.per_worker.len();
    let identity = workers == cpus.len() && cpus.iter().enumerate().all(|(i, &c)| i == c);
    // An inherited socket is one socket shared by every core: there is no group to steer in.
    if identity && workers > 1 && !listeners.inherited {
        // One group per address: the first worker's socket of each stands for its group.
        for socket in &listeners.per_worker[0] {
            if let Err(e) = steer_by_cpu(socket) {
                tracing::info!(
                    "cannot steer connections by CPU ({e}); the kernel's hash spreads them"
                );
                break;
            }
        }
    }
    if let Some(spin) = percore.busy_poll {
        let micros = spin.as_micros().min(i32::MAX as u128) as i32;
        'sockets: for sockets in &listeners.per_worker {
            for socket in sockets {
                if let Err(e) = setsockopt_int(
                    socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_BUSY_POLL,
                    micros,
                ) {
                    tracing::info!(
                        "SO_BUSY_POLL refused ({e}); busy polling in the event loop only"
                    );
                    break 'sockets;
                }
            }
        }
    }
    let options = LoopOptions {
        busy_poll: percore.busy_poll,
    };
    common::run_workers(
        listeners,
        make_handler,
        |worker, sockets, handler, active| {
            let cpu = cpus[worker % cpus.len()];
            if let Err(e) = pin_to_cpu(cpu) {
                tracing::warn!("cannot pin worker {worker} to CPU {cpu}: {e}");
            }
            let worker = Worker::new(
                sockets,
                handler,
                Env {
                    config,
                    active,
                    stop,
                },
                options,
            )?;
            worker.run()
        },
    )
}
