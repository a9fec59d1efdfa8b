//! Linked connections: outgoing connections of the worker that serve the connection that
//! opened them (a proxy's backend connections), with the worker's pool of idle ones.
//!
//! A connection opens one with [`crate::Io::connect_linked`] and gets its [`ConnRef`] at
//! once. The linked connection is an ordinary connection of the worker (its own slot, the
//! loop's own reads and sends, its own deadlines), with three differences:
//!
//! - its events do not call the handler for it: they wake its owner, which reaches the linked
//!   connection's input and output through [`crate::Io::linked`] during its own calls. So the
//!   owner decides, in one place, what the bytes of both mean (the proxy's exchange), and a
//!   connection may hold any number of linked ones (an HTTP/2 client, one per stream);
//! - it reads at most [`LINKED_INPUT_MAX`] that its owner has not taken, and stays open after
//!   its peer's end until its owner lets it go: what arrived is the owner's to read;
//! - its owner lets it go with [`crate::Io::release`]: for reuse, into the worker's pool of
//!   idle connections under its [`PoolKey`], from which the next
//!   [`crate::Io::connect_linked`] with that key takes it with no system call (it is still
//!   registered with the loop, which closes it if its peer sends or closes meanwhile); or
//!   closed. When the owner closes, the connections it still holds close with it.
//!
//! The handler hears of a linked connection's open and close like of any other
//! ([`crate::Handler::on_open`] with [`crate::Origin::Linked`], [`crate::Handler::on_close`]),
//! so that it can keep per-connection state if it wants to; the owner learns why one closed
//! from [`crate::Io::linked`].

use std::collections::HashMap;
use std::fs::File;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use crate::buffers::{BufferPool, Input, Output};
use crate::connection::Link;
use crate::contract::ConnRef;
use crate::slab::{RawSlots, SlotIds, Token};
use crate::CloseReason;

/// Unconsumed input past which a linked connection stops reading until its owner takes some:
/// a backend faster than the client is held back by TCP instead of filling memory.
pub const LINKED_INPUT_MAX: usize = 64 * 1024;

/// Idle linked connections the worker keeps per pool key; more are closed when released.
pub(crate) const IDLE_PER_KEY: usize = 64;

/// Where a released linked connection waits for reuse: under `key` (the service's name for
/// its peer: a backend address, say), for at most `idle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolKey {
    /// The service's name for the peer; only connections opened under the same key are
    /// reused for each other.
    pub key: u64,
    /// How long a released connection is kept idle before it is closed.
    pub idle: Duration,
}

/// A connection an owner holds, as its owner's link records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkEntry {
    pub(crate) token: Token,
    /// It closed (for this reason), and the owner has not let go of it yet.
    pub(crate) closed: Option<CloseReason>,
}

/// What the loop's slot type gives a call that reaches other connections.
pub(crate) trait HasLink {
    /// The connection's link, if the slot holds a live connection.
    fn link_mut(&mut self) -> Option<&mut Link>;
}

/// How a handler call reaches the connections linked to its own, and reserves slots for new
/// ones: the loop's slots seen through a raw pointer for the length of the call. The call
/// borrows its own slot already, so a slot is lent here only if it is not that one; one at a
/// time, as each loan borrows the `Reach` itself.
pub(crate) struct Reach<'a> {
    base: *mut (),
    len: usize,
    link_at: unsafe fn(*mut (), usize) -> Option<NonNull<Link>>,
    pub(crate) ids: &'a mut SlotIds,
}

/// The link in slot `index` of a `[Option<T>]` starting at `base`.
///
/// # Safety
/// `base` points to at least `index + 1` slots of `Option<T>`, and the slot is not borrowed.
unsafe fn link_at<T: HasLink>(base: *mut (), index: usize) -> Option<NonNull<Link>> {
    // SAFETY: as the caller promises.
    let slot = unsafe { &mut *base.cast::<Option<T>>().add(index) };
    slot.as_mut()?.link_mut().map(NonNull::from)
}

impl<'a> Reach<'a> {
    pub(crate) fn new<T: HasLink>(raw: RawSlots<'a, T>, ids: &'a mut SlotIds) -> Self {
        let (base, len) = raw.into_raw();
        Reach {
            base: base.cast(),
            len,
            link_at: link_at::<T>,
            ids,
        }
    }

    /// The live connection `token` names, unless it is `me` (the call's own, borrowed
    /// already).
    pub(crate) fn link(&mut self, token: Token, me: Token) -> Option<&mut Link> {
        if token.index == me.index || token.index >= self.len || !self.ids.is_current(token) {
            return None;
        }
        // SAFETY: the index is within the slots, it is not the call's own slot (the only one
        // borrowed during a call besides what this lends), and the loan borrows `self`, so
        // no two loans overlap.
        unsafe { (self.link_at)(self.base, token.index).map(|mut link| link.as_mut()) }
    }
}

/// The worker's idle linked connections, per pool key, most recently released last.
#[derive(Default)]
pub(crate) struct IdlePool {
    by_key: HashMap<u64, Vec<Token>>,
    count: usize,
}

impl IdlePool {
    /// Keeps `token` under `key`; false when the key has its fill already.
    pub(crate) fn put(&mut self, key: u64, token: Token) -> bool {
        let list = self.by_key.entry(key).or_default();
        if list.len() >= IDLE_PER_KEY {
            return false;
        }
        list.push(token);
        self.count += 1;
        true
    }

    /// The most recently released connection under `key`.
    pub(crate) fn take(&mut self, key: u64) -> Option<Token> {
        let token = self.by_key.get_mut(&key)?.pop()?;
        self.count -= 1;
        Some(token)
    }

    /// Forgets `token`, which is closing.
    pub(crate) fn remove(&mut self, key: u64, token: Token) {
        if let Some(list) = self.by_key.get_mut(&key) {
            if let Some(at) = list.iter().position(|&t| t == token) {
                list.remove(at);
                self.count -= 1;
            }
        }
    }

    /// Every idle connection, for closing them all (a graceful stop).
    pub(crate) fn drain(&mut self) -> Vec<Token> {
        self.count = 0;
        self.by_key.drain().flat_map(|(_, list)| list).collect()
    }

    /// How many are kept.
    pub(crate) fn len(&self) -> usize {
        self.count
    }
}

/// Where a body splice between an owner and a linked connection stands
/// ([`Linked::splice_to_owner`], [`Linked::splice_from_owner`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spliced {
    /// None asked for (or the last one's outcome was taken).
    None,
    /// Bytes are still moving.
    Running,
    /// Every byte moved.
    Done,
    /// It failed: the source ended early, by its end of stream or an error (`UnexpectedEof`);
    /// the destination failed (the error's kind); or no pipe could be made.
    Failed(std::io::ErrorKind),
}

/// A linked connection as its owner's call sees it ([`crate::Io::linked`]): its input to
/// take, its output to queue bytes in (sent once the call is over, after what it holds), and
/// where it stands.
pub struct Linked<'a> {
    pub(crate) link: &'a mut Link,
    pub(crate) pool: &'a mut BufferPool,
    pub(crate) token: Token,
    /// Opened during this call: not in a slot yet.
    pub(crate) pending: bool,
}

impl Linked<'_> {
    /// This connection's name.
    pub fn conn(&self) -> ConnRef {
        ConnRef(self.token)
    }

    /// Bytes received and not yet consumed.
    pub fn input(&self) -> &Input {
        &self.link.input
    }

    /// Bytes received, to [`Input::consume`] what the owner takes.
    pub fn input_mut(&mut self) -> &mut Input {
        &mut self.link.input
    }

    /// Queues inline bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        self.link
            .output
            .write_with(self.pool, |buf| buf.extend_from_slice(bytes));
    }

    /// Queues inline bytes produced by `write`.
    pub fn write_with<R>(&mut self, write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        self.link.output.write_with(self.pool, write)
    }

    /// Queues `len` bytes of `file` from `offset`.
    pub fn push_file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        self.link.output.push_file(file, offset, len);
    }

    /// Queued output, for its size ([`Output::pending`]) and what was sent.
    pub fn output(&self) -> &Output {
        &self.link.output
    }

    /// The peer has finished sending.
    pub fn eof(&self) -> bool {
        self.link.eof
    }

    /// A byte has moved either way, so the connect has succeeded.
    pub fn connected(&self) -> bool {
        self.link.output.sent() > 0 || self.link.input.ever_received()
    }

    /// The connection was taken from the pool of idle ones: it carried an earlier exchange,
    /// and its peer may have closed it just before this one's bytes reached it (RFC 9112
    /// §9.3.1: an idempotent request can go again on another connection).
    pub fn reused(&self) -> bool {
        self.link.reused
    }

    /// Opened during this call and still being connected: its bytes go once it is.
    pub fn is_new(&self) -> bool {
        self.pending
    }
}
