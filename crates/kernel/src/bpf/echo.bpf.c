// SPDX-License-Identifier: MIT OR GPL-2.0
//
// Echo in the kernel: a stream verdict program on a sockhash. A socket is put in the hash
// (keyed by its socket cookie) once its 4-byte size header has been read in user space;
// from then on every skb that arrives on it is redirected to its own egress, so the echo
// never reaches user space. A socket that is not in the hash (removed, or closed) gets
// SK_DROP from bpf_sk_redirect_hash, but such a socket has no verdict program either: the
// program only runs for sockets in this map.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
    __uint(type, BPF_MAP_TYPE_SOCKHASH);
    // Replaced at load time by the configured number of sockets.
    __uint(max_entries, 65536);
    __type(key, __u64);
    // A socket descriptor going in; read back, its socket cookie (so bpftool can list it).
    __type(value, __u64);
} echo_socks SEC(".maps");

SEC("sk_skb/stream_verdict")
int echo_verdict(struct __sk_buff *skb)
{
    __u64 cookie = bpf_get_socket_cookie(skb);

    // Flags 0: to the egress of the socket found, i.e. back to the peer.
    return bpf_sk_redirect_hash(skb, &echo_socks, &cookie, 0);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
