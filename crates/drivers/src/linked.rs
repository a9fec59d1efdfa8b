//! Linked connections: outgoing connections of the worker that serve the connection that
//! opened them (a proxy's backend connections), with the worker's pool of idle ones.
//!
//! A connection opens one with [`crate::Io::connect_linked`] and gets its [`ConnRef`] at
//! once. The linked connection is an ordinary connection of the worker (its own slot, the
//! loop's own reads and sends, its own deadlines), with three differences:
//!
//! - its events do not call the handler for it: they wake its owner (its output all sent
//!   only if the owner asked, [`Linked::wake_when_sent`]), which reaches the linked
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
use crate::slab::{RawSlots, Slab, SlotIds, Token};
use crate::splice::{Direction, Failure, PumpError, Pumped, Side};
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
    /// A body splice between the two may be under way: the loop pumps it when either side
    /// is ready, and does not read the owner's socket meanwhile if it goes outward.
    pub(crate) splicing: bool,
}

impl LinkEntry {
    pub(crate) fn new(token: Token) -> Self {
        LinkEntry {
            token,
            closed: None,
            splicing: false,
        }
    }
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

    /// The same view, lent for a shorter call.
    pub(crate) fn reborrow(&mut self) -> Reach<'_> {
        Reach {
            base: self.base,
            len: self.len,
            link_at: self.link_at,
            ids: &mut *self.ids,
        }
    }

    /// The live connection `token` names, unless it is `me` (the call's own, borrowed
    /// already).
    pub(crate) fn link(&mut self, token: Token, me: Token) -> Option<&mut Link> {
        if token.index() == me.index() || token.index() >= self.len || !self.ids.is_current(token) {
            return None;
        }
        // SAFETY: the index is within the slots, it is not the call's own slot (the only one
        // borrowed during a call besides what this lends), and the loan borrows `self`, so
        // no two loans overlap.
        unsafe { (self.link_at)(self.base, token.index()).map(|mut link| link.as_mut()) }
    }
}

/// Slot `index` of `slots` with the reach of the others, for one handler call.
pub(crate) fn lend<T: HasLink>(slots: &mut Slab<T>, index: usize) -> Option<(&mut T, Reach<'_>)> {
    let (raw, ids) = slots.split();
    // SAFETY: the only slot borrowed here; the reach lends others, never this one.
    let slot = unsafe { raw.get(index) }?;
    Some((slot, Reach::new(raw, ids)))
}

/// The reach of every slot, for a call that borrows none yet (a connection's `on_open`).
pub(crate) fn reach<T: HasLink>(slots: &mut Slab<T>) -> Reach<'_> {
    let (raw, ids) = slots.split();
    Reach::new(raw, ids)
}

/// Whether `partner` may be joined with connection `owner`: a connection linked to it that
/// is open and not joined already.
pub(crate) fn joinable(owner: Token, partner: &Link) -> bool {
    partner.owner() == Some(owner) && partner.state == crate::connection::State::Reading
}

/// Joins connection `index` with `partner`, a connection linked to it, as the epoll and
/// in-memory loops do: what either received and its handler did not pass on goes to the
/// other, the partner is marked joined, the owner's deadline set. The two slots, or `None`
/// when `partner` cannot be joined.
pub(crate) fn join_slots<'s, T: HasLink>(
    slots: &'s mut Slab<T>,
    index: usize,
    partner: Token,
    pool: &mut BufferPool,
    deadline: std::time::Instant,
) -> Option<(&'s mut T, &'s mut T)> {
    let owner = slots.token(index);
    if !slots
        .get_mut(partner)?
        .link_mut()
        .is_some_and(|link| joinable(owner, link))
    {
        return None;
    }
    let (slot, other) = slots.pair(index, partner.index())?;
    if let (Some(a), Some(b)) = (slot.link_mut(), other.link_mut()) {
        cross_over(a, b, pool);
        b.state = crate::connection::State::Joined;
        a.deadline = Some(deadline);
    }
    Some((slot, other))
}

/// What either of two connections about to be joined received and its handler did not pass
/// on goes to the other first.
pub(crate) fn cross_over(a: &mut Link, b: &mut Link, pool: &mut BufferPool) {
    a.input.move_to(&mut b.output, pool);
    b.input.move_to(&mut a.output, pool);
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spliced {
    /// None asked for (or the last one's outcome was taken).
    #[default]
    None,
    /// Bytes are still moving.
    Running,
    /// Every byte moved.
    Done,
    /// It failed: the source ended early, by its end of stream or an error (`UnexpectedEof`);
    /// the destination failed (the error's kind); or no pipe could be made.
    Failed(std::io::ErrorKind),
}

/// Body splices between a linked connection and its owner (see [`Linked::splice_in`]),
/// kept on the linked connection.
#[derive(Default)]
pub(crate) struct Splices {
    /// From the linked connection's socket to the owner's.
    pub(crate) inward: Option<BodySplice>,
    /// From the owner's socket to the linked connection's.
    pub(crate) outward: Option<BodySplice>,
    /// How the last splice each way ended, until another one starts.
    pub(crate) outcomes: [Spliced; 2],
}

/// Indexes of [`Splices::outcomes`].
pub(crate) const INWARD: usize = 0;
pub(crate) const OUTWARD: usize = 1;

/// One body splice under way, and the idle time after which the owner's deadline fires.
pub(crate) struct BodySplice {
    pub(crate) direction: Direction,
    pub(crate) idle: Duration,
}

impl Splices {
    /// Neither way is moving.
    pub(crate) fn idle(&self) -> bool {
        self.inward.is_none() && self.outward.is_none()
    }
}

/// A linked connection as its owner's call sees it ([`crate::Io::linked`]), lent together
/// with the owner's own buffers: its input to take, its output to queue bytes in (sent once
/// the call is over, after what it holds), and where it stands.
pub struct Linked<'a> {
    /// What the linked connection's peer sent and the owner has not consumed.
    pub input: &'a mut Input,
    /// What goes to the linked connection's peer.
    pub output: &'a mut Output,
    /// The owner's own input, lent beside.
    pub own_input: &'a mut Input,
    /// The owner's own output, lent beside.
    pub own_output: &'a mut Output,
    /// The worker's buffer pool, for the outputs' writes.
    pub pool: &'a mut BufferPool,
    pub(crate) eof: bool,
    pub(crate) reused: bool,
    pub(crate) token: Token,
    /// Opened during this call: not in a slot yet.
    pub(crate) pending: bool,
    pub(crate) splices: &'a mut Option<Box<Splices>>,
    pub(crate) wake_when_sent: &'a mut bool,
    pub(crate) entry: &'a mut LinkEntry,
    /// The loop can splice bodies.
    pub(crate) can_splice: bool,
}

impl Linked<'_> {
    /// This connection's name.
    pub fn conn(&self) -> ConnRef {
        ConnRef(self.token)
    }

    /// Queues inline bytes for the linked connection.
    pub fn write(&mut self, bytes: &[u8]) {
        self.output
            .write_with(self.pool, |buf| buf.extend_from_slice(bytes));
    }

    /// Queues `len` bytes of `file` from `offset` for the linked connection.
    pub fn push_file(&mut self, file: Arc<File>, offset: u64, len: u64) {
        self.output.push_file(file, offset, len);
    }

    /// Wakes the owner once everything queued for the linked connection has been sent (once:
    /// ask again in the call that queues more). Input, the peer's end, a close and a splice's
    /// end always wake the owner; output gone does only when asked, since most owners have
    /// nothing to do until an answer comes. Ask when the next step waits on the output: a
    /// connect confirmed by its first bytes leaving, more of a body to queue, a timeout that
    /// starts once the request is out. Nothing happens if nothing is queued.
    pub fn wake_when_sent(&mut self) {
        *self.wake_when_sent = true;
    }

    /// The linked connection's peer has finished sending.
    pub fn eof(&self) -> bool {
        self.eof
    }

    /// A byte has moved either way, so the connect has succeeded.
    pub fn connected(&self) -> bool {
        self.output.sent() > 0 || self.input.ever_received()
    }

    /// The connection was taken from the pool of idle ones: it carried an earlier exchange,
    /// and its peer may have closed it just before this one's bytes reached it (RFC 9112
    /// §9.3.1: an idempotent request can go again on another connection).
    pub fn reused(&self) -> bool {
        self.reused
    }

    /// Opened during this call and still being connected: its bytes go once it is.
    pub fn is_new(&self) -> bool {
        self.pending
    }

    /// After the call, moves exactly `len` bytes of the linked connection's stream to the
    /// owner's socket through a kernel pipe (splice), after what the owner's output and the
    /// linked input already hold; meanwhile nothing is read from the linked connection into
    /// its input. The owner is woken when it is over ([`Linked::spliced_in`]); each time
    /// bytes move, the owner's deadline is pushed to `idle` from then, so its timeout fires
    /// only when nothing moved for that long. Where the loop cannot splice
    /// ([`crate::Io::can_splice`]) it fails at once.
    pub fn splice_in(&mut self, len: u64, idle: Duration) {
        self.start_splice(INWARD, len, idle);
    }

    /// After the call, moves exactly `len` bytes of the owner's stream to the linked
    /// connection through a kernel pipe, after what the linked output already holds;
    /// meanwhile nothing is read from the owner's socket into its input. As
    /// [`Linked::splice_in`] otherwise.
    pub fn splice_out(&mut self, len: u64, idle: Duration) {
        self.start_splice(OUTWARD, len, idle);
    }

    /// Where the splice towards the owner stands; a finished one's outcome is shown until
    /// another splice that way.
    pub fn spliced_in(&self) -> Spliced {
        self.spliced(INWARD)
    }

    /// Where the splice from the owner stands.
    pub fn spliced_out(&self) -> Spliced {
        self.spliced(OUTWARD)
    }

    fn spliced(&self, way: usize) -> Spliced {
        self.splices
            .as_ref()
            .map_or(Spliced::None, |splices| splices.outcomes[way])
    }

    fn start_splice(&mut self, way: usize, len: u64, idle: Duration) {
        let splices = self.splices.get_or_insert_with(Box::default);
        let made = if self.can_splice && !self.pending {
            Direction::new(Some(len), false)
        } else {
            Err(std::io::ErrorKind::Unsupported.into())
        };
        match made {
            Ok(direction) => {
                splices.outcomes[way] = Spliced::Running;
                let splice = Some(BodySplice { direction, idle });
                if way == INWARD {
                    splices.inward = splice;
                } else {
                    splices.outward = splice;
                }
                self.entry.splicing = true;
            }
            Err(e) => {
                if self.can_splice {
                    tracing::warn!("cannot make a pipe to splice a body through: {e}");
                }
                splices.outcomes[way] = Spliced::Failed(e.kind());
            }
        }
    }
}

/// Where a joined connection stands after a pump.
pub(crate) enum JointStep {
    /// Still joined; `moved` when bytes (or an end of stream) moved; `recheck` when it must
    /// be pumped again soon ([`crate::splice::CARRIED_RECHECK`]) whatever happens.
    Going { moved: bool, recheck: bool },
    /// The linked side's end has reached the owner: the joint is done.
    Finished,
    /// A side failed: close the owner (and with it the linked side) for this reason.
    Close(CloseReason),
}

impl JointStep {
    /// What a pump of a joint (the owner as its client side) means for the two connections.
    pub(crate) fn of(pumped: Result<Pumped, PumpError>) -> JointStep {
        match pumped {
            Ok(pumped) if pumped.finished => JointStep::Finished,
            Ok(pumped) => JointStep::Going {
                moved: pumped.moved,
                recheck: pumped.recheck,
            },
            Err(PumpError::Client(e)) => {
                tracing::debug!("joined client failed: {e}");
                JointStep::Close(CloseReason::PeerGone)
            }
            Err(PumpError::Upstream(e)) => {
                tracing::debug!("joined linked connection failed: {e}");
                JointStep::Close(CloseReason::Error)
            }
        }
    }
}

/// What pumping the body splices of a linked connection achieved.
pub(crate) struct SplicePump {
    /// Bytes moved: push the owner's deadline to `idle` from now.
    pub(crate) moved: Option<Duration>,
    /// A splice finished or failed: the owner must hear of it.
    pub(crate) news: bool,
}

impl Splices {
    /// Moves body bytes spliced either way between the `owner` and the `linked` connection's
    /// sockets, each after what user space still holds for the same destination.
    pub(crate) fn pump(
        &mut self,
        owner: Side<'_>,
        linked: Side<'_>,
        owner_output_pending: bool,
        linked_output_pending: bool,
    ) -> SplicePump {
        let mut result = SplicePump {
            moved: None,
            news: false,
        };
        if !owner_output_pending {
            if let Some(splice) = self.inward.as_mut() {
                let pumped =
                    splice
                        .direction
                        .pump(linked.fd, linked.readable, owner.fd, owner.writable);
                result.news |= settle(
                    &mut self.inward,
                    &mut self.outcomes[INWARD],
                    pumped,
                    &mut result.moved,
                );
            }
        }
        if !linked_output_pending {
            if let Some(splice) = self.outward.as_mut() {
                let pumped =
                    splice
                        .direction
                        .pump(owner.fd, owner.readable, linked.fd, linked.writable);
                result.news |= settle(
                    &mut self.outward,
                    &mut self.outcomes[OUTWARD],
                    pumped,
                    &mut result.moved,
                );
            }
        }
        result
    }
}

/// Records a splice pump's result; true when the splice is over (done or failed).
fn settle(
    slot: &mut Option<BodySplice>,
    outcome: &mut Spliced,
    pumped: Result<bool, Failure>,
    moved: &mut Option<Duration>,
) -> bool {
    let Some(splice) = slot.as_ref() else {
        return false;
    };
    let over = match pumped {
        Ok(any) => {
            if any {
                *moved = Some(splice.idle);
            }
            if splice.direction.is_done() {
                *outcome = if splice.direction.fell_short() {
                    Spliced::Failed(std::io::ErrorKind::UnexpectedEof)
                } else {
                    Spliced::Done
                };
                true
            } else {
                false
            }
        }
        // Which side failed matters to the owner (whose fault it was), not how.
        Err(Failure::Source(_)) => {
            *outcome = Spliced::Failed(std::io::ErrorKind::UnexpectedEof);
            true
        }
        Err(Failure::Destination(e)) => {
            *outcome = Spliced::Failed(e.kind());
            true
        }
    };
    if over {
        *slot = None;
    }
    over
}
