//! The bridge hand-over in the kernel: the engine's [`Carrier`] for a bridged connection, which
//! puts the client and backend sockets in the kernel crate's sockmap ([`BridgePath`]) once the
//! request head has been sent on, instead of splicing them through pipes. The engine keeps
//! watching both descriptors (ends, resets, idle time); this only puts the pair in and takes
//! it out.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use fastpath_drivers::Carrier;
use fastpath_handover::HandoverMethod;
use fastpath_kernel::{BridgeJoined, BridgePath, Mode, TakeOverError};

use crate::config::Config;

/// What `kernel_path = "auto"` gives bridged connections here: the kernel path, loaded, when
/// a probe at start found it relaying [`fastpath_kernel::KERNEL_MARGIN`] times splice's round
/// trips or more at every size it tried, else splice; and the line that says so, with the
/// figures (the start-up log and `fastpath check`).
fn auto_decision(config: &Config) -> (Option<BridgePath>, String) {
    let h = &config.handover;
    let path = match BridgePath::load(h.kernel_bridges, h.kernel_hold) {
        Ok(path) => path,
        Err(why) => {
            return (
                None,
                format!(
                    "splice (kernel_path = \"auto\"; the kernel path cannot be had here: {why})"
                ),
            )
        }
    };
    match fastpath_kernel::probe_bridge(
        &path,
        &fastpath_kernel::BRIDGE_PROBE_SIZES,
        fastpath_kernel::BRIDGE_PROBE_TIME,
    ) {
        Ok(results) => {
            let figures = format!(
                "measured at start, the kernel's round trips per second against splice's, {} × \
                 needed at every size: {}",
                fastpath_kernel::KERNEL_MARGIN,
                fastpath_kernel::describe(&results)
            );
            if fastpath_kernel::kernel_bridges_best(&results) {
                let line = format!(
                    "in the kernel (BPF sockmap, {} at once, then splice; kernel_path = \"auto\": \
                     {figures})",
                    h.kernel_bridges
                );
                (Some(path), line)
            } else {
                (None, format!("splice (kernel_path = \"auto\": {figures})"))
            }
        }
        Err(e) => (
            None,
            format!("splice (kernel_path = \"auto\"; the start-up probe failed: {e})"),
        ),
    }
}

/// One bridged connection's way through the kernel.
pub(crate) struct KernelBridge {
    path: Arc<BridgePath>,
    joined: Option<BridgeJoined>,
}

impl KernelBridge {
    pub(crate) fn new(path: Arc<BridgePath>) -> Self {
        KernelBridge { path, joined: None }
    }
}

impl Carrier for KernelBridge {
    fn carry(&mut self, client: BorrowedFd<'_>, upstream: BorrowedFd<'_>) -> io::Result<()> {
        match self.path.join(client, upstream) {
            Ok(joined) => {
                self.joined = Some(joined);
                Ok(())
            }
            Err(TakeOverError::Full) => Err(io::Error::other(format!(
                "the kernel path is full ({} bridged connections)",
                self.path.capacity()
            ))),
            Err(TakeOverError::Io(e)) => Err(e),
        }
    }

    fn stopped(&self, from_client: bool) -> Option<u64> {
        self.path.stopped(self.joined?, from_client)
    }

    fn release(&mut self) {
        if let Some(joined) = self.joined.take() {
            self.path.leave(joined);
        }
    }
}

impl Drop for KernelBridge {
    fn drop(&mut self) {
        self.release();
    }
}

/// Whether any route bridges.
fn bridges(config: &Config) -> bool {
    config
        .routes
        .iter()
        .any(|r| r.method == HandoverMethod::Bridge)
}

/// Loads the kernel path for bridged connections if the configuration bridges and asks for
/// it, logging in one line what they get; `Err` when `kernel_path = "on"` cannot be had.
pub(crate) fn load(config: &Config) -> Result<Option<Arc<BridgePath>>, String> {
    if !bridges(config) {
        return Ok(None);
    }
    let h = &config.handover;
    if h.kernel_path == Mode::Auto {
        let (path, line) = auto_decision(config);
        tracing::info!("bridged connections: {line}");
        return Ok(path.map(Arc::new));
    }
    fastpath_kernel::bridge_path(
        h.kernel_path,
        h.kernel_bridges,
        h.kernel_hold,
        "bridged connections",
    )
}

/// What `fastpath check` says bridged connections will get on this machine; `None` when no
/// route bridges.
pub(crate) fn report(config: &Config) -> Option<String> {
    if !bridges(config) {
        return None;
    }
    let h = &config.handover;
    let mode = h.kernel_path;
    if mode == Mode::Off {
        return Some("bridged connections: splice (kernel_path = \"off\")".to_string());
    }
    if mode == Mode::Auto {
        return Some(format!("bridged connections: {}", auto_decision(config).1));
    }
    Some(match BridgePath::load(1, h.kernel_hold) {
        Ok(_) => format!(
            "bridged connections: in the kernel (BPF sockmap, {} at once, then splice; \
             kernel_path = \"{}\")",
            h.kernel_bridges,
            mode.name()
        ),
        Err(why) => format!(
            "bridged connections: kernel_path = \"on\" cannot be had here, the server will not \
             start: {why}"
        ),
    })
}
