//! What a server generated from a NEST specification links against (`fastpath nest build`):
//! the option table ([`options`]), the patterns ([`pattern`]), the per-connection state
//! machine (START, the rules, END), the actions' view of their connection ([`Cx`]), and
//! [`run`], which reads the options and config.nest and serves on the model the specification
//! chose, standalone (with systemd socket activation) or under inetd.
//!
//! Where it sits among fastpath's crates, and what it must not do: docs/architecture.md.
//!
//! The semantics are written down in docs/nest.md ("Semantics"). In short: START's action runs
//! when a connection opens, then DEFAULT is seen; input is matched against the pattern of
//! every rule whose qualifier holds, each anchored at the start of the unconsumed input, the
//! longest match winning and ties going to the rule written first; input that no qualifying
//! rule can ever match, or that fills the input buffer unmatched, ends the connection; END
//! runs exactly once before every close.
#![deny(missing_docs)]

mod cx;
mod inetd;
mod machine;
pub mod options;
pub mod pattern;
mod receive;
mod run;
mod service;

use std::net::SocketAddr;

pub use cx::{Captures, Cx, ReplyFile, COPY_BELOW};
pub use machine::Machine;
pub use run::{run, run_with_args};
pub use service::NestService;

/// A state of the specification: `START` is 0, `END` 1, `DEFAULT` 2, the declared states
/// follow in declaration order.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub struct StateId(pub u16);

impl StateId {
    /// The state a connection is in from its opening on; never cleared.
    pub const START: StateId = StateId(0);
    /// Seen when END's action runs.
    pub const END: StateId = StateId(1);
    /// Seen on leaving START.
    pub const DEFAULT: StateId = StateId(2);
}

/// One rule of the specification.
#[derive(Debug)]
pub struct Rule {
    /// Its line in the specification, for messages.
    pub line: u32,
    /// Its pattern, macros substituted (see [`pattern`]).
    pub pattern: &'static str,
}

/// What the compiler knows of a specification that the runtime needs.
#[derive(Debug)]
pub struct Spec {
    /// The server's name (the specification's file stem), for the log.
    pub name: &'static str,
    /// The specification's file name, for messages.
    pub file: &'static str,
    /// Every state's name, indexed by [`StateId`].
    pub states: &'static [&'static str],
    /// The rules, in the order written (ties go to the first).
    pub rules: &'static [Rule],
    /// Every `%option` line: name, value as text, line.
    pub options: &'static [(&'static str, &'static str, u32)],
}

/// Which states a connection has seen and not cleared, and which was seen last.
#[derive(Clone, Debug, Default)]
pub struct States {
    bits: Vec<u64>,
    last: Option<StateId>,
}

impl States {
    fn new(count: usize) -> States {
        States {
            bits: vec![0; count.max(3).div_ceil(64)],
            last: None,
        }
    }

    /// State `s` has been seen and not cleared since.
    pub fn is(&self, s: StateId) -> bool {
        let i = s.0 as usize;
        self.bits
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// `$LASTSEEN(S)`: `s` was the last state seen, and has not been cleared since.
    pub fn last_seen(&self, s: StateId) -> bool {
        self.last == Some(s) && self.is(s)
    }

    fn set(&mut self, s: StateId) {
        let i = s.0 as usize;
        if i / 64 >= self.bits.len() {
            self.bits.resize(i / 64 + 1, 0);
        }
        self.bits[i / 64] |= 1 << (i % 64);
        self.last = Some(s);
    }

    fn unset(&mut self, s: StateId) {
        if s == StateId::START {
            return;
        }
        let i = s.0 as usize;
        if let Some(w) = self.bits.get_mut(i / 64) {
            *w &= !(1 << (i % 64));
        }
    }

    fn unset_all(&mut self) {
        let start = self.is(StateId::START);
        self.bits.iter_mut().for_each(|w| *w = 0);
        if start {
            self.bits[0] |= 1;
        }
    }
}

/// A generated server: its specification, its qualifiers and its actions.
pub trait Server: Send + Sync + 'static {
    /// The per-connection variables.
    type Conn: Default + Send + 'static;
    /// The specification.
    fn spec(&self) -> &'static Spec;
    /// Whether rule `rule`'s qualifying expression holds in `states`.
    fn qualifies(&self, rule: usize, states: &States) -> bool;
    /// START's action: runs when the connection opens, before any input.
    fn start(&self, conn: &mut Self::Conn, cx: &mut Cx<'_>);
    /// END's action: runs once, before the connection closes.
    fn end(&self, conn: &mut Self::Conn, cx: &mut Cx<'_>);
    /// Rule `rule`'s action, with its match.
    fn action(&self, rule: usize, conn: &mut Self::Conn, cx: &mut Cx<'_>, m: &Captures<'_>);
    /// START sends nothing, so the client speaks first: listeners then wait for its first
    /// bytes before waking the server (TCP_DEFER_ACCEPT), which saves a wake-up, a read
    /// that finds nothing and a poll registration per connection. The compiler says so when
    /// START is absent or empty; the default keeps a greeting from being delayed.
    fn client_speaks_first(&self) -> bool {
        false
    }
}

/// What generated code imports.
pub mod prelude {
    pub use crate::{run, run_with_args, Captures, Cx, Rule, Server, Spec, StateId, States};
}

/// The peer of a descriptor, if it is an inet socket.
pub(crate) fn peer_of(fd: std::os::fd::RawFd) -> Option<SocketAddr> {
    // SAFETY: the descriptor is borrowed for the call only; SockRef does not close it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let sock = socket2::SockRef::from(&fd);
    sock.peer_addr().ok()?.as_socket()
}
