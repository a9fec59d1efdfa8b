//! Stop signals: SIGTERM and SIGINT set a flag that every worker checks each tick.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set when the process has been asked to stop.
pub static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_signal: libc::c_int) {
    // Only an atomic store: nothing else is async-signal-safe here.
    STOP.store(true, Ordering::SeqCst);
}

/// Installs handlers so SIGTERM and SIGINT set [`STOP`]; returns the flag.
pub fn install_stop_handler() -> &'static AtomicBool {
    unsafe {
        let handler = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
    &STOP
}
