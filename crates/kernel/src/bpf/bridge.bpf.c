// SPDX-License-Identifier: MIT OR GPL-2.0
//
// The HTTP bridge in the kernel: a stream verdict program on a sockhash holding pairs of
// sockets (a client and its backend). Each socket's entry in `bridge_state` names its peer
// (by socket cookie, the key of both maps); every skb that arrives on a socket in the hash is
// redirected to its peer's egress, so the bytes of a bridged connection never reach user
// space. A sockhash keyed by cookie rather than a sockmap of slots 2k, 2k+1: cookies are
// unique in the whole system, so the workers (threads or prefork's processes) that share the
// map need no shared allocator of slots.
//
// The hazard of a redirect: the kernel queues what it redirects until the destination's send
// buffer takes it, without limit, and the source's receive window stays open (the skbs have
// left its receive queue): a client that does not read would make the kernel hold whatever
// the backend sends. There is no way to hold the source back from here (a verdict must
// consume what arrives), so the program counts what it redirected to the peer against what
// has reached the peer's send queue (tcp_sock.write_seq, read through BTF); past `limit`
// bytes in between, the socket is marked overflowed and what arrives on it from then on is
// passed to its own receive queue (SK_PASS). There it is charged to the socket, so TCP holds
// the sender back once the receive buffer is full, and user space, which sees the socket turn
// readable, copies it on, after the bytes the kernel still holds, with the usual backpressure.
// Nothing is dropped, and the kernel holds at most `limit` bytes per direction.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Only the field read here; its offset is relocated to the running kernel's (CO-RE).
struct tcp_sock {
    __u32 write_seq;
} __attribute__((preserve_access_index));

struct bridge_state {
    // The peer's socket cookie.
    __u64 peer;
    // Bytes redirected to the peer since the first one.
    __u64 redirected;
    // The peer's write_seq when the first byte was redirected.
    __u32 base_seq;
    // Bytes the kernel may hold for the peer beyond its send buffer.
    __u32 limit;
    // BRIDGE_FRESH until the first byte, then BRIDGE_COUNTING, or BRIDGE_OVERFLOW.
    __u32 state;
    __u32 pad;
};

#define BRIDGE_FRESH 0
#define BRIDGE_COUNTING 1
#define BRIDGE_OVERFLOW 2

struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    // Replaced at load time by the configured number of sockets (as below).
    __uint(max_entries, 65536);
    __type(key, __u64);
    // A socket descriptor going in; read back, its socket cookie.
    __type(value, __u64);
} bridge_socks SEC(".maps");

// Written by user space as it puts a pair in, deleted as it takes the pair out. A plain hash:
// an entry must never be evicted while its socket is bridged (its peer would be lost).
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, __u64);
    __type(value, struct bridge_state);
} bridge_state SEC(".maps");

SEC("sk_skb/stream_verdict")
int bridge_verdict(struct __sk_buff *skb)
{
    __u64 cookie = bpf_get_socket_cookie(skb);
    struct bridge_state *st;
    struct bpf_sock *peer;
    struct tcp_sock *tp;
    __u32 written, held, seq;

    // The skb of a FIN carries no bytes. Redirected, the peer's sender would count its empty
    // send as a failure and stop with EPIPE; the end itself is seen by user space (a read of
    // 0), which passes it on once everything before it has been sent.
    if (skb->len == 0)
        return SK_DROP;
    st = bpf_map_lookup_elem(&bridge_state, &cookie);
    // Not (or no longer) paired: up to user space, which resets the connection.
    if (!st || st->state == BRIDGE_OVERFLOW)
        return SK_PASS;
    peer = bpf_map_lookup_elem(&bridge_socks, &st->peer);
    if (!peer) {
        // The peer is not in the map: not yet (user space puts the pair in one socket after
        // the other) or no longer (it closed). Dropping would lose the bytes: they go up to
        // user space instead, as past the limit, which copies them on (or sees the peer gone).
        st->state = BRIDGE_OVERFLOW;
        return SK_PASS;
    }
    tp = bpf_skc_to_tcp_sock(peer);
    seq = tp ? tp->write_seq : 0;
    bpf_sk_release(peer);
    if (!tp) {
        st->state = BRIDGE_OVERFLOW;
        return SK_PASS;
    }
    if (st->state == BRIDGE_FRESH) {
        st->base_seq = seq;
        st->redirected = 0;
        st->state = BRIDGE_COUNTING;
    }
    // Sequence arithmetic: what was redirected and has not reached the peer's send queue.
    written = seq - st->base_seq;
    held = (__u32)st->redirected - written;
    if (held + skb->len > st->limit) {
        st->state = BRIDGE_OVERFLOW;
        return SK_PASS;
    }
    // One socket's skbs are handled one at a time (under its lock): no atomics needed.
    st->redirected += skb->len;
    // Flags 0: to the peer's egress.
    return bpf_sk_redirect_hash(skb, &bridge_socks, &st->peer, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
