// SPDX-License-Identifier: MIT OR GPL-2.0
//
// Echo in the kernel: a stream verdict program on a sockhash. A socket is put in the hash
// (keyed by its socket cookie) once its 4-byte size header has been read in user space;
// from then on every skb that arrives on it is redirected to its own egress, so the echo
// never reaches user space.
//
// The hazard of a redirect: the kernel queues what it redirects until the destination's
// send buffer takes it, without limit and without charging it to either socket, and the
// receive window stays open (the skbs have left the receive queue). A peer that sends and
// never reads its echo would make that queue grow for as long as it sends. So the program
// counts, per socket, what it has redirected and compares it with what has reached the
// socket's send queue (tcp_sock.write_seq, read through BTF): past the socket's limit (its
// announced buffer size and some, set by user space) in between, the socket is marked
// overflowed and what arrives is dropped. User space sees
// the mark and resets the connection (the peer is told; nothing is silently lost on a
// connection that goes on).

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

// Only the field read here; its offset is relocated to the running kernel's (CO-RE).
struct tcp_sock {
    __u32 write_seq;
} __attribute__((preserve_access_index));

struct echo_state {
    // Bytes redirected since the socket was put in the map.
    __u64 redirected;
    // write_seq when the first byte was redirected.
    __u32 base_seq;
    // Bytes the kernel may hold for this socket beyond its send buffer; 0 for max_held.
    __u32 limit;
    // ECHO_FRESH until the first byte, then ECHO_COUNTING, or ECHO_OVERFLOW once more than
    // `limit` bytes were waiting: user space then resets the connection.
    __u32 state;
    __u32 pad;
};

#define ECHO_FRESH 0
#define ECHO_COUNTING 1
#define ECHO_OVERFLOW 2

struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    // Replaced at load time by the configured number of sockets (as below).
    __uint(max_entries, 65536);
    __type(key, __u64);
    // A socket descriptor going in; read back, its socket cookie (so bpftool can list it).
    __type(value, __u64);
} echo_socks SEC(".maps");

// LRU: user space deletes a socket's entry when it closes the connection, but a worker that
// dies leaves its entries behind; the oldest go first. An entry evicted while its socket is
// still open is only counted afresh.
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, __u64);
    __type(value, struct echo_state);
} echo_state SEC(".maps");

// Bytes the kernel may hold for a socket that user space gave no limit; set at load time.
volatile const __u32 max_held = 1 << 20;

SEC("sk_skb/stream_verdict")
int echo_verdict(struct __sk_buff *skb)
{
    __u64 cookie = bpf_get_socket_cookie(skb);
    struct bpf_sock *sk = skb->sk;
    struct tcp_sock *tp;
    struct echo_state *st;
    __u32 written, held, limit;

    if (!sk)
        return SK_DROP;
    tp = bpf_skc_to_tcp_sock(sk);
    if (!tp)
        return SK_DROP;
    st = bpf_map_lookup_elem(&echo_state, &cookie);
    if (!st) {
        // User space puts an entry in when it hands the socket over; one evicted since
        // (LRU) is made afresh.
        struct echo_state init = { .limit = max_held };

        bpf_map_update_elem(&echo_state, &cookie, &init, BPF_NOEXIST);
        st = bpf_map_lookup_elem(&echo_state, &cookie);
        if (!st)
            return bpf_sk_redirect_hash(skb, &echo_socks, &cookie, 0);
    }
    if (st->state == ECHO_FRESH) {
        st->base_seq = tp->write_seq;
        st->redirected = 0;
        st->state = ECHO_COUNTING;
    }
    limit = st->limit ? st->limit : max_held;
    // Sequence arithmetic: what was redirected and has not reached the send queue.
    written = tp->write_seq - st->base_seq;
    held = (__u32)st->redirected - written;
    if (st->state == ECHO_OVERFLOW || held + skb->len > limit) {
        st->state = ECHO_OVERFLOW;
        return SK_DROP;
    }
    // One socket's skbs are handled one at a time (under its lock): no atomics needed.
    st->redirected += skb->len;
    // Flags 0: to the egress of the socket found, i.e. back to the peer.
    return bpf_sk_redirect_hash(skb, &echo_socks, &cookie, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
