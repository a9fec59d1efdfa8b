//! [`Relay`]: messages from many connections to many destinations on one worker, with
//! backpressure from each destination back to its sources.

use std::collections::VecDeque;

use fastpath_drivers::{ConnRef, Worker};

use crate::BufferedSocket;

/// What [`Relay::post`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Posted {
    /// Queued for its destination.
    Queued,
    /// Queued, and the destination's queue is now over its limit: the source should read no
    /// more ([`fastpath_drivers::Next::Wait`]); it is woken once the queue has drained to half.
    Full,
}

/// What a destination connection that went away had not delivered ([`Relay::detach`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Undelivered {
    /// Messages not wholly handed to the kernel (a message cut short counts).
    pub messages: u64,
    /// Their bytes not handed to the kernel.
    pub bytes: u64,
}

/// One destination: the connection that carries its messages now (if any), the messages
/// waiting for it, and the sources waiting for room. Positions count bytes ever posted to the
/// route, so that a message can be followed from the queue into a connection and out.
#[derive(Default)]
struct Route {
    conn: Option<ConnRef>,
    /// Bytes posted and not yet handed to a connection, whole messages but for a first one
    /// partly handed.
    queue: Vec<u8>,
    /// Where each message not yet known to be sent ends.
    ends: VecDeque<u64>,
    /// Position of the first byte of `queue`: everything before was handed to a connection.
    handed: u64,
    /// Position of the first byte handed to the current connection.
    base: u64,
    /// Sources told [`Posted::Full`], to wake when the queue drains.
    waiting: Vec<ConnRef>,
    /// The connection has been asked to wake since its last delivery.
    woken: bool,
}

impl Route {
    /// Forgets the messages the current connection's kernel has taken all of.
    fn confirm(&mut self, sent: u64) {
        let delivered = self.base + sent;
        while self.ends.front().is_some_and(|&end| end <= delivered) {
            self.ends.pop_front();
        }
    }
}

/// Queues of whole messages for a worker's destinations, filled from any connection's call
/// and drained into each destination's own connection when it is woken: Slick's forward from
/// one ThriftSocket to another, for many sources and many destinations on one loop.
///
/// A destination is a route number the service chooses (`0..routes`). While a route has a
/// connection ([`Relay::attach`]), posting to it wakes that connection once, and the
/// connection's call moves the queue into its output with [`Relay::deliver`]: many messages
/// from many sources leave in one write. A route's queue is bounded: past its limit the
/// source that posted is told [`Posted::Full`], remembered, and woken when the queue has
/// drained to half; so a destination that stops reading stops its sources instead of
/// growing memory. Wakes are gathered and sent with [`Relay::wake`] after the call's work.
/// The queue is kept while a route has no connection (a reconnect takes it over); what a
/// connection had taken but not sent when it died is counted by [`Relay::detach`].
///
/// ```
/// use fastpath_sockets::{ConnRef, Posted, Relay};
///
/// let source = ConnRef::from_raw(1, 0);
/// let mut relay = Relay::new(2, 8);
/// // No connection for route 1 yet: the message waits in its queue.
/// assert_eq!(relay.post(1, b"hello", source), Posted::Queued);
/// // Past the limit the source is told to wait; it is woken once the queue drains.
/// assert_eq!(relay.post(1, b"world", source), Posted::Full);
/// assert_eq!(relay.queued(1), 10);
/// // The destination cannot be reached: what waited is given up and counted.
/// assert_eq!(relay.drop_queue(1).messages, 2);
/// ```
pub struct Relay {
    routes: Vec<Route>,
    limit: usize,
    wakes: Vec<ConnRef>,
}

impl Relay {
    /// A relay for `routes` destinations, each queueing up to `limit` bytes before its
    /// sources must wait.
    pub fn new(routes: usize, limit: usize) -> Self {
        Relay {
            routes: (0..routes).map(|_| Route::default()).collect(),
            limit: limit.max(1),
            wakes: Vec::new(),
        }
    }

    /// The number of routes.
    pub fn routes(&self) -> usize {
        self.routes.len()
    }

    /// `conn` carries route `route`'s messages from now on; it is woken to take what waits.
    pub fn attach(&mut self, route: usize, conn: ConnRef) {
        let r = &mut self.routes[route];
        r.conn = Some(conn);
        r.base = r.handed;
        r.woken = true;
        self.wakes.push(conn);
    }

    /// The connection carrying `route` now, if any.
    pub fn connection(&self, route: usize) -> Option<ConnRef> {
        self.routes[route].conn
    }

    /// Route `route`'s connection is gone after its kernel took `sent` of the bytes it was
    /// handed: returns the messages it had taken and not wholly sent. A message it had taken
    /// in part is given up whole (its rest never goes to another connection, where it would
    /// arrive torn). The other waiting messages stay for the next connection
    /// ([`Relay::drop_queue`] gives them up); the route's waiting sources are woken.
    pub fn detach(&mut self, route: usize, sent: u64) -> Undelivered {
        let r = &mut self.routes[route];
        r.conn = None;
        r.woken = false;
        let delivered = r.base + sent;
        let mut lost = Undelivered::default();
        let mut start = delivered;
        while let Some(&end) = r.ends.front() {
            if end <= delivered {
                r.ends.pop_front();
                start = end;
                continue;
            }
            if start >= r.handed {
                break;
            }
            // Handed, at least in part, and not wholly sent.
            lost.messages += 1;
            lost.bytes += end.min(r.handed) - start.max(delivered);
            if end > r.handed {
                let tail = (end - r.handed) as usize;
                r.queue.drain(..tail);
                r.handed = end;
            }
            r.ends.pop_front();
            start = end;
        }
        self.wakes.append(&mut r.waiting);
        lost
    }

    /// Gives up what waits in route `route`'s queue (its destination cannot be reached) and
    /// wakes its sources; returns what was dropped. For a route without a connection.
    pub fn drop_queue(&mut self, route: usize) -> Undelivered {
        let r = &mut self.routes[route];
        let dropped = Undelivered {
            messages: r.ends.iter().filter(|&&end| end > r.handed).count() as u64,
            bytes: r.queue.len() as u64,
        };
        r.handed += r.queue.len() as u64;
        r.queue = Vec::new();
        r.ends.retain(|&end| end <= r.handed);
        self.wakes.append(&mut r.waiting);
        dropped
    }

    /// Queues one whole message for route `route`, posted by connection `from`.
    pub fn post(&mut self, route: usize, message: &[u8], from: ConnRef) -> Posted {
        let r = &mut self.routes[route];
        r.queue.extend_from_slice(message);
        r.ends.push_back(r.handed + r.queue.len() as u64);
        if let (Some(conn), false) = (r.conn, r.woken) {
            r.woken = true;
            self.wakes.push(conn);
        }
        if r.queue.len() >= self.limit {
            if !r.waiting.contains(&from) {
                r.waiting.push(from);
            }
            return Posted::Full;
        }
        Posted::Queued
    }

    /// Bytes waiting in route `route`'s queue.
    pub fn queued(&self, route: usize) -> usize {
        self.routes[route].queue.len()
    }

    /// In the call of route `route`'s connection: moves the waiting messages into its output
    /// as far as its room allows (whole messages: the first always goes, so a message larger
    /// than the room still moves), forgets those the kernel has taken, and wakes the sources
    /// once the queue has drained to half its limit. Returns true when messages are left
    /// waiting for room (answer [`fastpath_drivers::Next::Drain`]).
    pub fn deliver(&mut self, route: usize, sock: &mut BufferedSocket<'_, '_>) -> bool {
        let (sent, room) = (sock.sent(), sock.room());
        self.hand_over(route, sent, room, |queue, take| {
            if take == queue.len() {
                sock.write_vec(queue);
            } else {
                sock.write_all(&queue[..take]);
                queue.drain(..take);
            }
        })
    }

    /// [`Relay::deliver`] for a connection that has sent `sent` bytes and has `room` left:
    /// `write(queue, n)` queues the first `n` bytes of the queue and removes them from it.
    fn hand_over(
        &mut self,
        route: usize,
        sent: u64,
        room: usize,
        write: impl FnOnce(&mut Vec<u8>, usize),
    ) -> bool {
        let r = &mut self.routes[route];
        r.woken = false;
        r.confirm(sent);
        if !r.queue.is_empty() && room > 0 {
            // All that waits goes when there is room, in one copy; otherwise what fits (a
            // message may be split between deliveries: the stream stays whole).
            let take = r.queue.len().min(room);
            write(&mut r.queue, take);
            r.handed += take as u64;
        }
        if r.queue.len() <= self.limit / 2 {
            self.wakes.append(&mut r.waiting);
        }
        !r.queue.is_empty()
    }

    /// Sends the wakes gathered since the last time: destinations with news, sources with
    /// room again.
    pub fn wake(&mut self, worker: &mut Worker<'_>) {
        for conn in self.wakes.drain(..) {
            worker.wake(conn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(n: u32) -> ConnRef {
        ConnRef::from_raw(n, 0)
    }

    #[test]
    fn a_destination_gets_whole_messages_in_order_and_wakes_once() {
        let mut relay = Relay::new(1, 1 << 20);
        let dest = conn(9);
        relay.attach(0, dest);
        relay.post(0, b"one", conn(1));
        relay.post(0, b"two", conn(2));
        assert_eq!(
            relay.wakes,
            vec![dest],
            "woken once, by the attach, for both"
        );
        let mut out = Vec::new();
        assert!(!relay.hand_over(0, 0, 100, |q, n| out.extend(q.drain(..n))));
        assert_eq!(out, b"onetwo");
        relay.wakes.clear();
        relay.post(0, b"three", conn(1));
        relay.post(0, b"four", conn(2));
        assert_eq!(relay.wakes, vec![dest], "woken once after its delivery");
    }

    #[test]
    fn a_full_queue_makes_its_sources_wait_until_half_drained() {
        let mut relay = Relay::new(1, 8);
        let source = conn(1);
        assert_eq!(relay.post(0, b"12345", source), Posted::Queued);
        assert_eq!(relay.post(0, b"67890", source), Posted::Full);
        relay.attach(0, conn(9));
        relay.wakes.clear();
        // Room for 4 bytes only: 6 stay, more than half the limit; the source still waits.
        let mut out = Vec::new();
        assert!(relay.hand_over(0, 0, 4, |q, n| out.extend(q.drain(..n))));
        assert!(relay.wakes.is_empty());
        assert!(!relay.hand_over(0, 0, 100, |q, n| out.extend(q.drain(..n))));
        assert_eq!(relay.wakes, vec![source]);
        assert_eq!(out, b"1234567890");
    }

    #[test]
    fn a_dead_connection_counts_what_it_had_not_sent_and_never_tears_a_message() {
        let mut relay = Relay::new(1, 1 << 20);
        relay.attach(0, conn(9));
        for m in [&b"aaaa"[..], b"bbbb", b"cccc", b"dddd"] {
            relay.post(0, m, conn(1));
        }
        // 10 bytes handed (the third message in part), 6 taken by the kernel.
        let mut out = Vec::new();
        relay.hand_over(0, 0, 10, |q, n| out.extend(q.drain(..n)));
        let lost = relay.detach(0, 6);
        assert_eq!(
            lost,
            Undelivered {
                messages: 2,
                bytes: 4
            },
            "b cut short and c handed in part are lost"
        );
        // The next connection starts at a message boundary: d, whole.
        relay.attach(0, conn(10));
        let mut next = Vec::new();
        relay.hand_over(0, 0, 100, |q, n| next.extend(q.drain(..n)));
        assert_eq!(next, b"dddd");
        assert_eq!(relay.detach(0, 4), Undelivered::default());
    }

    #[test]
    fn an_unreachable_destination_gives_up_its_queue() {
        let mut relay = Relay::new(2, 4);
        let source = conn(1);
        relay.post(1, b"xyz", source);
        assert_eq!(relay.post(1, b"w", source), Posted::Full);
        let dropped = relay.drop_queue(1);
        assert_eq!(
            dropped,
            Undelivered {
                messages: 2,
                bytes: 4
            }
        );
        assert_eq!(relay.wakes, vec![source], "the waiting source goes on");
        assert_eq!(relay.queued(1), 0);
    }
}
