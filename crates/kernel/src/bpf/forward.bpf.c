// SPDX-License-Identifier: MIT OR GPL-2.0
//
// The Thrift forwarder in the kernel: a stream parser frames the framed transport's
// messages (a 4-byte big-endian length, then that many bytes), and a stream verdict reads
// the head of each: a strict `msg` call (oneway or call) whose first field is the i32 `key`
// (id 1) goes whole to destination `key mod routes` (Euclidean, as user space routes), the
// socket that user space registered in fwd_dests under (worker tag, route). Anything else
// goes up to user space (SK_PASS), which forwards it with the same rules.
//
// Order per client and destination: once one of a client's messages goes up, everything
// after it goes up too (the client's state is PASSING) until user space has taken every
// byte that went up and forwarded it: user space then writes the count it took
// (fwd_taken), and the verdict goes back to routing in the kernel only when that count
// equals what it passed up. Comparing in the verdict, which runs for one socket at a time,
// makes the switch atomic with the arrival of the next message.
//
// User space never writes to a destination socket in fwd_dests: the kernel queues what it
// redirects and sends it in pieces, so a write from user space could land inside one of its
// messages. What user space forwards while the kernel path is on goes through the worker's
// injector, a loopback connection whose receiving end is in fwd_clients like a client (state
// INJECTOR), one per destination: its messages, framed by the same parser, go whole to that
// destination, behind those already queued.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_core_read.h>

// What the verdict does with a socket's messages.
#define FWD_KERNEL 0   // routes canonical messages, passes up the rest
#define FWD_PASSING 1  // passes everything up until user space has taken it
#define FWD_UNFRAMED 2 // the framing is lost (a length past the limit): all goes up, for good
#define FWD_INJECTOR 3 // user space's own messages: routed, never passed up
#define FWD_OVERFLOW 4 // more went up than user space takes: dropped, user space resets

struct fwd_state {
    // The worker whose destinations this socket's messages go to.
    __u64 tag;
    // Bytes passed up to user space since the socket joined.
    __u64 passed;
    // Bytes the verdict has seen (routed, passed or dropped).
    __u64 seen;
    // Messages dropped (an injected message whose destination is gone).
    __u64 lost;
    // The number of destinations.
    __u32 routes;
    __u32 state;
    // Where the stream stands (see stream_state).
    __u32 msg_seq;
    __u32 head_seq;
    __u32 msg_len;
    __u32 flags;
    // Bytes user space had read from the socket when the kernel began to parse it: what it
    // reads beyond those came up from here.
    __u64 start_bytes;
};

#define FLAG_STARTED 1 // msg_seq is set
#define FLAG_PENDING 2 // the parser waits for more of the same skb chain

struct dest_key {
    __u64 tag;
    __u32 route;
    __u32 pad;
};

// The clients (and the injectors): the parser and the verdict run on their input.
struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    __uint(max_entries, 65536);
    __type(key, __u64);
    __type(value, __u64);
} fwd_clients SEC(".maps");

// The destinations, by worker and route: only redirect targets, no program runs on them.
struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    __uint(max_entries, 4096);
    __type(key, struct dest_key);
    __type(value, __u64);
} fwd_dests SEC(".maps");

// Per socket (cookie): written by user space when the socket joins, then by the verdict.
// For an injector, `routes` is the one destination it feeds.
// LRU, twice the sockets' capacity: user space deletes a socket's entries when it closes,
// but a worker that dies leaves its own behind. A socket whose entry is gone has its
// messages passed up, which is always safe for a client.
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, __u64);
    __type(value, struct fwd_state);
} fwd_state SEC(".maps");

// Per socket (cookie), written by user space only: of what went up, the bytes user space
// has taken out, and of those the bytes it has forwarded into the kernel's queues (~0 until
// it has).
struct fwd_taken {
    __u64 forwarded;
    __u64 read;
};

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, __u64);
    __type(value, struct fwd_taken);
} fwd_taken SEC(".maps");

// The largest message (frame length) the kernel frames; a longer length is not framed: the
// socket's input goes up to user space from there on. Set at load time (below the receive
// buffer, past which the stream parser would abort the socket).
volatile const __u32 max_frame = 65536;

// The frame length and the canonical message's fixed part, as user space's fast path reads
// it (ForwarderMsg::peek_canonical): version+type, name length, "msg", seqid, the key's
// field header (i32, id 1), the key, the payload's field header (binary, id 2), its length.
// Then the payload and the struct's end (a 0).
#define HEAD_LEN (4 + 4 + 4 + 3 + 4 + 3 + 4 + 3 + 4)

// Only the fields read here; their offsets are relocated to the running kernel's (CO-RE).
struct tcp_sock {
    __u64 bytes_received;
    __u32 rcv_nxt;
    __u32 copied_seq;
    __u32 write_seq;
} __attribute__((preserve_access_index));

struct sock {
    void *sk_user_data;
} __attribute__((preserve_access_index));

// Since 6.14 the stream parser reads a socket with a position of its own (the psock's
// copied_seq; tcp_sock.copied_seq then lags by what was passed up and not yet read).
struct sk_psock {
    __u32 copied_seq;
} __attribute__((preserve_access_index));

// The programs see the skb a message starts in from that skb's first byte, not from the
// message's (the stream parser keeps the offset to itself), and the verdict sees it with
// whatever follows the message. So each socket's state follows the stream: the sequence
// number where the next message starts (msg_seq) and the one where the skb handed to the
// parser starts (head_seq). While the parser runs, tcp_read_sock has not yet moved
// copied_seq past the skb it reads, and the stream parser reads every skb whole, so the
// skb a message starts in starts at copied_seq.
static __always_inline struct fwd_state *stream_state(struct __sk_buff *skb)
{
    __u64 cookie = bpf_get_socket_cookie(skb);
    struct fwd_state *st = bpf_map_lookup_elem(&fwd_state, &cookie);

    if (!st) {
        // Not joined through user space, or evicted: all of it goes up.
        struct fwd_state init = { .state = FWD_UNFRAMED };

        bpf_map_update_elem(&fwd_state, &cookie, &init, BPF_NOEXIST);
        st = bpf_map_lookup_elem(&fwd_state, &cookie);
    }
    return st;
}

static __always_inline int read_position(struct bpf_sock *sk, __u32 *seq)
{
    struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
    struct sk_psock *psock;

    if (!tp)
        return -1;
    if (bpf_core_field_exists(struct sk_psock, copied_seq)) {
        // The low bits of sk_user_data are flags (SK_USER_DATA_PTRMASK).
        psock = (void *)((unsigned long)BPF_CORE_READ((struct sock *)tp, sk_user_data) & ~7UL);
        if (!psock)
            return -1;
        return bpf_core_read(seq, sizeof(*seq), &psock->copied_seq);
    }
    *seq = tp->copied_seq;
    return 0;
}

SEC("sk_skb/stream_parser")
int fwd_parser(struct __sk_buff *skb)
{
    struct fwd_state *st = stream_state(skb);
    struct bpf_sock *sk = skb->sk;
    __u32 len, off;

    if (!st || !sk)
        return -1;
    if (!(st->flags & FLAG_PENDING)) {
        // A new message: its skb starts at copied_seq.
        if (read_position(sk, &st->head_seq))
            return -1;
        if (!(st->flags & FLAG_STARTED)) {
            struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);

            if (!tp)
                return -1;
            st->msg_seq = st->head_seq;
            // Everything received before the parser's first position was read by user space
            // (perhaps after the socket joined: a receive already under way).
            st->start_bytes = tp->bytes_received - (__u32)(tp->rcv_nxt - st->head_seq);
            st->flags |= FLAG_STARTED;
        }
    }
    off = st->msg_seq - st->head_seq;
    if (off > skb->len)
        return -1;
    if (st->state == FWD_UNFRAMED) {
        len = skb->len - off;
        goto framed;
    }
    if (skb->len - off < 4 || bpf_skb_load_bytes(skb, off, &len, 4)) {
        st->flags |= FLAG_PENDING;
        return 0;
    }
    len = bpf_ntohl(len);
    if (len > max_frame) {
        // Not an error (that would abort the socket): what has arrived goes up as it is,
        // and so does everything after it. User space frames it with its own limit, and
        // refuses or forwards it.
        st->state = FWD_UNFRAMED;
        len = skb->len - off;
        goto framed;
    }
    len += 4;
framed:
    st->flags &= ~FLAG_PENDING;
    st->msg_len = len;
    return len;
}

// What the kernel holds for a destination: it queues what it redirects until the
// destination's send buffer takes it, without a limit and without charging it to either
// socket, while the clients' receive windows stay open. So the bytes redirected to each
// destination are counted and compared with what has reached its send queue (write_seq);
// past max_held in between, a client's messages go up instead, where user space queues
// them with its own limit and stops reading the client (TCP then stops it). User space
// holds its injectors back the same way (ForwardPath::held).
struct dest_held {
    __u64 redirected;
    __u32 base_seq;
    // 1 until the first redirect, which sets base_seq.
    __u32 fresh;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, struct dest_key);
    __type(value, struct dest_held);
} fwd_held SEC(".maps");

// Bytes a destination may have waiting in the kernel beyond its send buffer; set at load.
volatile const __u32 max_held = 1 << 20;

// Whether redirecting `len` more bytes to `sk` would pass max_held; counts them if not (and
// always for an injector, which user space holds back itself).
static __always_inline int held_over(struct bpf_sock *sk, struct dest_key *dest, __u32 len,
                                     int injector)
{
    struct dest_held *h = bpf_map_lookup_elem(&fwd_held, dest);
    struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
    __u32 written, held;

    if (!h || !tp)
        return 0;
    if (h->fresh) {
        // Clients on several CPUs may race here; the loser's bytes are only counted from a
        // base a few bytes off.
        h->base_seq = tp->write_seq;
        h->fresh = 0;
    }
    written = tp->write_seq - h->base_seq;
    // Sequence arithmetic: what was redirected and has not reached the send queue.
    held = (__u32)h->redirected - written;
    if (!injector && (__u64)held + len > max_held)
        return 1;
    __sync_fetch_and_add(&h->redirected, len);
    return 0;
}

// Bytes gone up to a client's user space and not yet taken out, past which the client is
// given up (user space resets it); set at load time.
volatile const __u32 max_up = 4 << 20;

// Up to user space, in order. Not SK_PASS: on this kernel generation (6.14 and later) data
// passed up while earlier passed data is unread moves the socket's copied_seq past what
// arrived (tcp_bpf_strp_read_sock), and a later small segment no longer wakes the stream
// parser: the client stalls. A redirect to the socket's own ingress is counted as read when
// the parser reads it and reaches user space through the same queue. It is not held back
// by the receive window, so what waits is bounded here: past max_up untaken, the client
// is marked and what comes is dropped; user space sees the mark and resets it.
static __always_inline int pass_up(struct __sk_buff *skb, struct fwd_state *st, __u64 *cookie,
                                   __u32 len)
{
    struct fwd_taken *taken = bpf_map_lookup_elem(&fwd_taken, cookie);
    __u64 read = taken ? taken->read : 0;

    if (st->state == FWD_OVERFLOW || st->passed + len > read + max_up) {
        st->state = FWD_OVERFLOW;
        return SK_DROP;
    }
    if (st->state == FWD_KERNEL)
        st->state = FWD_PASSING;
    st->passed += len;
    return bpf_sk_redirect_hash(skb, &fwd_clients, cookie, BPF_F_INGRESS);
}

SEC("sk_skb/stream_verdict")
int fwd_verdict(struct __sk_buff *skb)
{
    __u64 cookie = bpf_get_socket_cookie(skb);
    struct fwd_state *st = bpf_map_lookup_elem(&fwd_state, &cookie);
    struct dest_key dest = {};
    __u8 head[HEAD_LEN];
    __u32 len, off;
    __u32 word, frame, payload;
    __u8 end;
    __s32 key;
    __u32 route;
    struct fwd_taken *taken;
    struct bpf_sock *sk;
    int over;

    if (!st)
        // Not joined through user space, or evicted: up, where it is handled.
        return SK_PASS;
    // The message is msg_len bytes from msg_seq; the next starts after it.
    off = st->msg_seq - st->head_seq;
    len = st->msg_len;
    st->msg_seq += len;
    st->seen += len;
    if (st->state == FWD_OVERFLOW)
        return SK_DROP;
    if (st->state == FWD_UNFRAMED)
        return pass_up(skb, st, &cookie, len);
    if (st->state == FWD_PASSING) {
        taken = bpf_map_lookup_elem(&fwd_taken, &cookie);
        if (!taken || taken->forwarded != st->passed)
            return pass_up(skb, st, &cookie, len);
        // User space has forwarded all that went up: what comes now may overtake nothing.
        st->state = FWD_KERNEL;
    }
    if (st->state == FWD_INJECTOR) {
        // User space chose the destination (`routes` holds it): any framed message goes.
        route = st->routes;
        goto redirect;
    }
    if (len < HEAD_LEN + 1 || off > 0xffffff || bpf_skb_load_bytes(skb, off, head, HEAD_LEN))
        goto unroutable;
    frame = ((__u32)head[0] << 24) | ((__u32)head[1] << 16) | ((__u32)head[2] << 8) | head[3];
    word = ((__u32)head[4] << 24) | ((__u32)head[5] << 16) | ((__u32)head[6] << 8) | head[7];
    if (frame + 4 != len || (word != 0x80010004 && word != 0x80010001))
        goto unroutable;
    if (head[8] || head[9] || head[10] || head[11] != 3 || head[12] != 'm' ||
        head[13] != 's' || head[14] != 'g')
        goto unroutable;
    if (head[19] != 8 || head[20] != 0 || head[21] != 1)
        goto unroutable;
    key = (__s32)(((__u32)head[22] << 24) | ((__u32)head[23] << 16) |
                  ((__u32)head[24] << 8) | head[25]);
    if (head[26] != 11 || head[27] != 0 || head[28] != 2)
        goto unroutable;
    payload = ((__u32)head[29] << 24) | ((__u32)head[30] << 16) | ((__u32)head[31] << 8) |
              head[32];
    if (payload != len - HEAD_LEN - 1)
        goto unroutable;
    if (len > 0xffffff || bpf_skb_load_bytes(skb, off + len - 1, &end, 1) || end != 0)
        goto unroutable;
    if (!st->routes)
        goto unroutable;
    // Euclidean remainder in unsigned arithmetic (BPF has no signed division).
    if (key >= 0) {
        route = (__u32)key % st->routes;
    } else {
        route = (__u32)((__u64)(-(__s64)key) % st->routes);
        route = route ? st->routes - route : 0;
    }
redirect:
    dest.tag = st->tag;
    dest.route = route;
    // Flags 0: to the destination's egress. Fails (SK_DROP) only if the destination is not
    // in the map: looked up first so that its message goes up instead.
    sk = bpf_map_lookup_elem(&fwd_dests, &dest);
    if (!sk)
        goto unroutable;
    over = held_over(sk, &dest, len, st->state == FWD_INJECTOR);
    bpf_sk_release(sk);
    if (over)
        goto unroutable;
    return bpf_sk_redirect_hash(skb, &fwd_dests, &dest, 0);

unroutable:
    if (st->state == FWD_INJECTOR) {
        // User space feeds an injector only once its destination is registered; one that
        // has gone since loses them, as its connection would have: counted.
        st->lost += 1;
        return SK_DROP;
    }
    return pass_up(skb, st, &cookie, len);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
