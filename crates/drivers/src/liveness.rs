//! A heartbeat for a supervisor's watchdog (systemd's `WatchdogSec=`): the loops beat on every
//! tick, and a service registers what a beat does ([`on_beat`]). A beat proves that a loop is
//! turning, which a timer thread of its own would not: a worker stuck in a system call or a
//! busy loop stops beating, and the supervisor then restarts the server.
//!
//! Who beats: each epoll, uring and per-core worker on its tick (every [`crate::TICK`]) and when
//! its graceful stop begins; the thread pool's accept loop on each turn (at most
//! [`crate::TICK`] apart while a thread is idle); the prefork parent on each turn of its
//! maintenance loop (its children beat too, in their own process: a hook that must only run in
//! the parent checks its process id).

use std::sync::OnceLock;

type Hook = Box<dyn Fn() + Send + Sync>;

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Sets what every beat does, once per process: it runs on the beating thread, about ten times
/// a second per worker, so it must be cheap and must not block. False if one was set already.
pub fn on_beat(hook: impl Fn() + Send + Sync + 'static) -> bool {
    HOOK.set(Box::new(hook)).is_ok()
}

/// A loop is alive.
pub(crate) fn beat() {
    if let Some(hook) = HOOK.get() {
        hook();
    }
}
