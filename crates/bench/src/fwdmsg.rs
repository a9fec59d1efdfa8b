//! The messages the Thrift forwarder load generator sends, and the check a sink makes of
//! each one it receives. No I/O.
//!
//! Every message is the oneway call `msg(key, payload)` of examples/thrift/forwarder.thrift,
//! strict header, encoded by `fastpath-thrift`. They come from a ring built once: ring slot
//! `i` goes to destination `i % N` (so the keys spread evenly), with a key chosen among
//! several that map there by `rem_euclid`, a quarter of them negative, and a payload whose
//! bytes after the stamp are a pattern derived from the slot. A sender copies slot
//! `seq % ring_len` and writes the stamp into the copy:
//!
//! ```text
//! payload = client id (u32 BE) | sequence number (u64 BE) | send time (u64 BE, CLOCK_MONOTONIC ns) | pattern(slot)
//! ```
//!
//! so a sink rebuilds what each message must be from its own sequence number and checks
//! every byte, whatever process sent it: the frame, the header (the Thrift sequence id is
//! the slot), the key, the payload and the STOP byte.

use std::cell::RefCell;
use std::rc::Rc;

use fastpath_thrift::{encode_forwarder_msg, Transport};

/// Bytes of the stamp at the start of every payload.
pub const STAMP: usize = 20;

/// Most client connections a sink tells apart (the client id indexes a table per sink).
pub const MAX_CLIENTS: u32 = 1 << 16;

/// Slots in the ring for `n` destinations: a multiple of `n`, at least 4 rounds (so every
/// destination gets a negative key) and about 256 messages.
pub fn ring_len(n: usize) -> usize {
    n * 256usize.div_ceil(n).max(4)
}

/// The key of ring slot `slot` with `n` destinations: it maps to `slot % n`; every fourth
/// round uses a negative key.
pub fn key_of(slot: usize, n: usize) -> i32 {
    let (dest, round) = ((slot % n) as i64, (slot / n) as i64);
    let n = n as i64;
    let key = if round % 4 == 3 {
        dest - n * (1 + round % 3)
    } else {
        dest + n * (round % 5)
    };
    key as i32
}

/// The pattern word `i` of slot `slot` (splitmix64: cheap, and no two slots alike).
#[inline]
fn word(slot: u64, i: u64) -> u64 {
    let mut z = (slot << 32 ^ i).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `out` with the pattern of `slot`.
pub fn fill_pattern(slot: u64, out: &mut [u8]) {
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let w = word(slot, i as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Whether `data` is the pattern of `slot`.
pub fn is_pattern(slot: u64, data: &[u8]) -> bool {
    data.chunks(8).enumerate().all(|(i, chunk)| {
        let w = word(slot, i as u64).to_le_bytes();
        chunk == &w[..chunk.len()]
    })
}

/// Where the variable parts of a message lie, for one transport.
#[derive(Debug, Clone)]
pub struct Layout {
    /// 4 (framed) or 0.
    frame: usize,
    /// The message up to the payload, with zeros for the frame length, sequence id, key
    /// and payload length.
    template: Vec<u8>,
}

// Offsets after the frame header: version (4), name length (4), "msg" (3), then the
// sequence id; field 1 header (3), then the key; field 2 header (3), then the length.
const SEQ_ID_AT: usize = 11;
const KEY_AT: usize = 18;
const LEN_AT: usize = 25;

impl Layout {
    /// The layout of messages on `transport`.
    pub fn new(transport: Transport) -> Layout {
        let mut template = Vec::new();
        let len = encode_forwarder_msg(&mut template, transport, true, 0, 0, b"");
        template.truncate(len - 1); // the STOP byte follows the payload
        let frame = if transport == Transport::Framed { 4 } else { 0 };
        template[..frame].fill(0);
        Layout { frame, template }
    }

    /// Bytes before the payload.
    pub fn prefix_len(&self) -> usize {
        self.template.len()
    }

    /// Wire length of a message with `payload` bytes.
    pub fn wire_len(&self, payload: usize) -> usize {
        self.template.len() + payload + 1
    }

    /// Writes the variable parts of the prefix into `prefix` (a copy of the template).
    fn patch(&self, prefix: &mut [u8], wire_len: usize, slot: usize, key: i32) {
        let f = self.frame;
        if f == 4 {
            prefix[..4].copy_from_slice(&((wire_len - 4) as u32).to_be_bytes());
        }
        prefix[f + SEQ_ID_AT..f + SEQ_ID_AT + 4].copy_from_slice(&(slot as i32).to_be_bytes());
        prefix[f + KEY_AT..f + KEY_AT + 4].copy_from_slice(&key.to_be_bytes());
        let payload = (wire_len - self.template.len() - 1) as u32;
        prefix[f + LEN_AT..f + LEN_AT + 4].copy_from_slice(&payload.to_be_bytes());
    }

    /// The ring for `n` destinations and `payload`-byte payloads: `ring_len(n)` messages of
    /// `wire_len(payload)` bytes back to back, stamps zero.
    pub fn ring(&self, n: usize, payload: usize) -> Vec<u8> {
        let wire = self.wire_len(payload);
        let slots = ring_len(n);
        let mut ring = vec![0u8; wire * slots];
        for (slot, msg) in ring.chunks_mut(wire).enumerate() {
            let p = self.template.len();
            msg[..p].copy_from_slice(&self.template);
            self.patch(&mut msg[..p], wire, slot, key_of(slot, n));
            fill_pattern(slot as u64, &mut msg[p + STAMP..wire - 1]);
            msg[wire - 1] = 0; // STOP
        }
        ring
    }

    /// Writes the stamp into a message copied from the ring.
    #[inline]
    pub fn stamp(&self, msg: &mut [u8], client: u32, seq: u64, time_ns: u64) {
        let p = self.template.len();
        msg[p..p + 4].copy_from_slice(&client.to_be_bytes());
        msg[p + 4..p + 12].copy_from_slice(&seq.to_be_bytes());
        msg[p + 12..p + 20].copy_from_slice(&time_ns.to_be_bytes());
    }
}

/// What a sink makes of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Right bytes, right sink, next in order for its client: its send time.
    Delivered {
        /// Send time, CLOCK_MONOTONIC ns.
        sent_ns: u64,
        /// Payload bytes.
        payload: usize,
    },
    /// The same message as the last one from this client.
    Duplicated,
    /// Older than one already received from this client.
    Reordered,
    /// Not the bytes that message must have.
    Corrupt,
    /// Right bytes, but its key maps to another destination.
    Misrouted,
}

/// Largest ring a checker builds to compare messages against: beyond it (huge payloads),
/// it computes the pattern instead.
const MAX_CHECK_RING: usize = 64 << 20;

/// The messages a checker compares against: the ring for the payload length last seen,
/// shared by the checkers of one thread.
#[derive(Debug)]
struct Expected {
    layout: Layout,
    dests: usize,
    /// Payload length the ring is built for (`usize::MAX`: none yet).
    payload: usize,
    ring: Vec<u8>,
    /// Scratch prefix for the computed check.
    prefix: Vec<u8>,
}

impl Expected {
    /// Whether `wire` is, apart from the stamp, the message of `slot`.
    fn matches(&mut self, wire: &[u8], slot: usize) -> bool {
        let p = self.layout.prefix_len();
        let payload = wire.len() - p - 1;
        if payload != self.payload && ring_len(self.dests) * wire.len() <= MAX_CHECK_RING {
            // Built once per payload length: a run uses one.
            self.ring = self.layout.ring(self.dests, payload);
            self.payload = payload;
        }
        if payload == self.payload {
            // Two memcmp: about ten times faster than computing the pattern.
            let msg = &self.ring[slot * wire.len()..(slot + 1) * wire.len()];
            return wire[..p] == msg[..p] && wire[p + STAMP..] == msg[p + STAMP..];
        }
        let key = key_of(slot, self.dests);
        self.layout.patch(&mut self.prefix, wire.len(), slot, key);
        wire[..p] == self.prefix[..]
            && wire[wire.len() - 1] == 0
            && is_pattern(slot as u64, &wire[p + STAMP..wire.len() - 1])
    }
}

/// The checks of one sink: which destination it is, and the last sequence number seen from
/// each client.
#[derive(Debug, Clone)]
pub struct Checker {
    expected: Rc<RefCell<Expected>>,
    dests: usize,
    index: usize,
    /// Per client: 1 + the highest sequence number received, 0 for none.
    next: Vec<u64>,
}

impl Checker {
    /// The checker of destination `index` of `dests`.
    pub fn new(transport: Transport, dests: usize, index: usize) -> Checker {
        let layout = Layout::new(transport);
        let prefix = layout.template.clone();
        Checker {
            expected: Rc::new(RefCell::new(Expected {
                layout,
                dests,
                payload: usize::MAX,
                ring: Vec::new(),
                prefix,
            })),
            dests,
            index,
            next: Vec::new(),
        }
    }

    /// The checker of destination `index`, sharing `other`'s expected messages (one copy
    /// per thread instead of one per sink).
    pub fn sharing(other: &Checker, index: usize) -> Checker {
        Checker {
            expected: other.expected.clone(),
            dests: other.dests,
            index,
            next: Vec::new(),
        }
    }

    /// Checks one whole message as delimited on the wire (frame header included).
    pub fn check(&mut self, wire: &[u8]) -> Verdict {
        let mut expected = self.expected.borrow_mut();
        let p = expected.layout.prefix_len();
        if wire.len() < p + STAMP + 1 {
            return Verdict::Corrupt;
        }
        let stamp = &wire[p..p + STAMP];
        let client = u32::from_be_bytes(stamp[..4].try_into().unwrap_or_default());
        let seq = u64::from_be_bytes(stamp[4..12].try_into().unwrap_or_default());
        let sent_ns = u64::from_be_bytes(stamp[12..20].try_into().unwrap_or_default());
        let slot = (seq % ring_len(self.dests) as u64) as usize;
        let key = key_of(slot, self.dests);
        if client >= MAX_CLIENTS || !expected.matches(wire, slot) {
            return Verdict::Corrupt;
        }
        if key.rem_euclid(self.dests as i32) as usize != self.index {
            return Verdict::Misrouted;
        }
        let client = client as usize;
        if client >= self.next.len() {
            self.next.resize(client + 1, 0);
        }
        let next = &mut self.next[client];
        if seq + 1 > *next {
            *next = seq + 1;
            Verdict::Delivered {
                sent_ns,
                payload: wire.len() - p - 1,
            }
        } else if seq + 1 == *next {
            Verdict::Duplicated
        } else {
            Verdict::Reordered
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastpath_thrift::{Decoded, Decoder, ForwarderMsg, Limits, MessageType};

    #[test]
    fn keys_spread_evenly_and_some_are_negative() {
        for n in [1, 2, 3, 4, 7, 64, 300] {
            let len = ring_len(n);
            assert_eq!(len % n, 0);
            let mut per_dest = vec![0usize; n];
            let mut negative = vec![false; n];
            for slot in 0..len {
                let k = key_of(slot, n);
                let d = k.rem_euclid(n as i32) as usize;
                assert_eq!(d, slot % n);
                per_dest[d] += 1;
                negative[d] |= k < 0;
            }
            assert!(per_dest.iter().all(|&c| c == len / n), "{n}: {per_dest:?}");
            assert!(
                negative.iter().all(|&b| b),
                "{n}: every destination gets a negative key"
            );
        }
    }

    #[test]
    fn ring_messages_decode_and_check() {
        for transport in [Transport::Framed, Transport::Unframed] {
            let layout = Layout::new(transport);
            let n = 3;
            let payload = 50;
            let wire = layout.wire_len(payload);
            let ring = layout.ring(n, payload);
            let decoder = Decoder::new(transport, Limits::default());
            let mut checkers: Vec<Checker> =
                (0..n).map(|i| Checker::new(transport, n, i)).collect();
            for seq in 0..(2 * ring_len(n)) as u64 {
                let slot = (seq % ring_len(n) as u64) as usize;
                let mut msg = ring[slot * wire..(slot + 1) * wire].to_vec();
                layout.stamp(&mut msg, 9, seq, 1234 + seq);
                let Decoded::Message(m) = decoder.decode(&msg).unwrap() else {
                    panic!("whole message")
                };
                assert_eq!(m.wire_len(), wire);
                assert_eq!(m.message_type(), MessageType::Oneway);
                assert_eq!(m.seq_id(), slot as i32);
                let args = ForwarderMsg::from_message(&m).unwrap();
                assert_eq!(args.key, key_of(slot, n));
                assert_eq!(args.payload.len(), payload);
                // The library's encoder gives the same bytes.
                let mut again = Vec::new();
                encode_forwarder_msg(
                    &mut again,
                    transport,
                    true,
                    slot as i32,
                    args.key,
                    args.payload,
                );
                assert_eq!(again, msg);
                let dest = slot % n;
                assert_eq!(
                    checkers[dest].check(&msg),
                    Verdict::Delivered {
                        sent_ns: 1234 + seq,
                        payload
                    }
                );
                assert_eq!(checkers[dest].check(&msg), Verdict::Duplicated);
                assert_eq!(checkers[(dest + 1) % n].check(&msg), Verdict::Misrouted);
                for i in 0..msg.len() {
                    let mut bad = msg.clone();
                    bad[i] ^= 0x40;
                    let v = Checker::sharing(&checkers[dest], dest).check(&bad);
                    // A flipped stamp byte still names a message, but then not this one's
                    // pattern, slot or key, unless it only moved the send time.
                    let in_time = (layout.prefix_len() + 12..layout.prefix_len() + 20).contains(&i);
                    let in_client = (layout.prefix_len()..layout.prefix_len() + 4).contains(&i);
                    if !(in_time || in_client) {
                        assert!(
                            matches!(v, Verdict::Corrupt | Verdict::Misrouted),
                            "byte {i} flipped: {v:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn huge_payloads_are_checked_without_a_ring() {
        // 256 slots of this would be 77 MB: the checker computes the pattern instead.
        let payload = 300_000;
        let slot = 5;
        let mut body = vec![0u8; payload];
        body[4..12].copy_from_slice(&(slot as u64).to_be_bytes());
        body[12..20].copy_from_slice(&7u64.to_be_bytes());
        fill_pattern(slot as u64, &mut body[STAMP..]);
        let mut msg = Vec::new();
        encode_forwarder_msg(
            &mut msg,
            Transport::Framed,
            true,
            slot as i32,
            key_of(slot, 1),
            &body,
        );
        let mut c = Checker::new(Transport::Framed, 1, 0);
        assert_eq!(
            c.check(&msg),
            Verdict::Delivered {
                sent_ns: 7,
                payload
            }
        );
        assert!(c.expected.borrow().ring.is_empty());
        let mut bad = msg.clone();
        bad[200_000] ^= 1;
        assert_eq!(
            Checker::new(Transport::Framed, 1, 0).check(&bad),
            Verdict::Corrupt
        );
        let last = msg.len() - 1;
        msg[last] = 1; // not STOP
        assert_eq!(
            Checker::new(Transport::Framed, 1, 0).check(&msg),
            Verdict::Corrupt
        );
    }

    #[test]
    fn order_per_client() {
        let layout = Layout::new(Transport::Framed);
        let ring = layout.ring(1, 32);
        let wire = layout.wire_len(32);
        let msg = |client: u32, seq: u64| {
            let slot = (seq % ring_len(1) as u64) as usize;
            let mut m = ring[slot * wire..(slot + 1) * wire].to_vec();
            layout.stamp(&mut m, client, seq, 1);
            m
        };
        let mut c = Checker::new(Transport::Framed, 1, 0);
        assert!(matches!(c.check(&msg(0, 0)), Verdict::Delivered { .. }));
        assert!(matches!(c.check(&msg(1, 0)), Verdict::Delivered { .. }));
        assert!(matches!(c.check(&msg(0, 2)), Verdict::Delivered { .. }));
        assert_eq!(c.check(&msg(0, 2)), Verdict::Duplicated);
        assert_eq!(c.check(&msg(0, 1)), Verdict::Reordered);
        assert!(matches!(c.check(&msg(1, 1)), Verdict::Delivered { .. }));
        assert_eq!(c.check(&msg(MAX_CLIENTS, 0)), Verdict::Corrupt);
    }
}
