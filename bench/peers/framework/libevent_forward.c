/*
 * Thrift forwarder on libevent 2.1: the user-space baseline of Slick's forwarder benchmark
 * (seed 002, section 3.3), single-threaded like the original.
 *
 * Clients send framed Thrift binary messages `msg(1: i32 key, 2: string payload)` (strict
 * header). Each frame goes, unchanged and with its length prefix, to destination number
 * key mod N (Euclidean: never negative) over one kept connection per destination, opened
 * when the first message for it arrives (the destinations may start after the forwarder)
 * and opened again after it breaks. Only the message header and the first field (the key)
 * are parsed; the payload is never copied into the program, the frame moves between
 * evbuffers. A malformed message closes its client with a line on stderr.
 *
 * Clients are read with one read(2) of up to 64 KiB straight into their input evbuffer
 * (evbuffer_reserve_space) per readable event: libevent 2.1's own buffered reads
 * (bufferevents, evbuffer_read) take at most 4 KiB per call. Destinations are bufferevents,
 * whose writes have no such limit.
 *
 * Usage: libevent_forward PORT DEST [DEST...]   (listens on 127.0.0.1; DEST is HOST:PORT)
 *
 * Backpressure: when a destination has more than DEST_HIGH bytes waiting, no client is read
 * until it is down to DEST_LOW, so memory stays bounded when a destination is slow.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#define MAX_FRAME (16 * 1024 * 1024)
#define READ_MAX (64 * 1024)
#define DEST_HIGH (4 * 1024 * 1024)
#define DEST_LOW (1024 * 1024)
#define T_I32 8
#define T_CALL 1
#define T_ONEWAY 4

struct dest {
    const char *name;
    struct sockaddr_storage addr;
    int addr_len;
    struct bufferevent *bev; /* NULL until the first message for it */
    int over;                /* counted in `blocked` */
};

struct client {
    evutil_socket_t fd;
    struct event *rd;
    struct evbuffer *in;
    struct client *prev, *next;
    char peer[64];
};

static struct event_base *base;
static struct dest *dests;
static int ndest;
static struct client *clients; /* all connected clients, to pause and resume reading */
static int blocked;            /* destinations over DEST_HIGH */

static void process(struct client *c);

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void free_client(struct client *c) {
    if (c->prev)
        c->prev->next = c->next;
    else
        clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    event_free(c->rd);
    evbuffer_free(c->in);
    evutil_closesocket(c->fd);
    free(c);
}

static void set_blocked(struct dest *d, int over) {
    if (d->over == over)
        return;
    d->over = over;
    blocked += over ? 1 : -1;
    if (over && blocked == 1) {
        for (struct client *c = clients; c; c = c->next)
            event_del(c->rd);
    } else if (!over && blocked == 0) {
        /* Frames may be waiting in the input buffers already: forward them now, as no new
         * data may come to trigger a read callback. */
        struct client *c = clients;
        while (c) {
            struct client *next = c->next;
            event_add(c->rd, NULL);
            process(c);
            if (blocked)
                break;
            c = next;
        }
    }
}

static void dest_drop(struct dest *d, const char *why) {
    size_t pending = evbuffer_get_length(bufferevent_get_output(d->bev));
    fprintf(stderr, "libevent_forward: destination %s: %s; %zu bytes not delivered\n", d->name,
            why, pending);
    bufferevent_free(d->bev);
    d->bev = NULL;
    set_blocked(d, 0);
}

static void dest_event(struct bufferevent *bev, short what, void *arg) {
    struct dest *d = arg;
    (void)bev;
    if (what & BEV_EVENT_CONNECTED) {
        int one = 1;
        setsockopt(bufferevent_getfd(d->bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return;
    }
    if (what & BEV_EVENT_ERROR)
        dest_drop(d, evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    else if (what & BEV_EVENT_EOF)
        dest_drop(d, "closed by the destination");
}

static void dest_read(struct bufferevent *bev, void *arg) {
    (void)arg;
    /* Destinations never answer (oneway); whatever comes is discarded. */
    struct evbuffer *in = bufferevent_get_input(bev);
    evbuffer_drain(in, evbuffer_get_length(in));
}

static void dest_write(struct bufferevent *bev, void *arg) {
    (void)bev;
    /* The output went down to DEST_LOW. */
    set_blocked(arg, 0);
}

static struct bufferevent *dest_bev(struct dest *d) {
    if (d->bev)
        return d->bev;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev)
        return NULL;
    bufferevent_setcb(bev, dest_read, dest_write, dest_event, d);
    bufferevent_setwatermark(bev, EV_WRITE, DEST_LOW, 0);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    d->bev = bev;
    /* Non-blocking: what is written before the connection is up waits in the buffer. */
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&d->addr, d->addr_len) < 0) {
        if (d->bev)
            dest_drop(d, "cannot connect");
        return NULL;
    }
    return d->bev;
}

/* The key of the message in a frame body, or an error message. `p` holds the first `have`
 * bytes of a body of `frame` bytes. */
static const char *parse_key(const unsigned char *p, size_t have, uint32_t frame, int32_t *key,
                             size_t *need) {
    *need = 8;
    if (frame < 8)
        return "frame too short for a message header";
    if (have < 8)
        return NULL;
    uint32_t ver = be32(p);
    if ((ver & 0xffff0000u) != 0x80010000u)
        return "not a strict binary protocol message header";
    unsigned type = ver & 0xff;
    if (type != T_CALL && type != T_ONEWAY)
        return "message type is neither call nor oneway";
    int32_t name_len = (int32_t)be32(p + 4);
    if (name_len < 0 || (uint32_t)name_len > frame - 8)
        return "method name length out of the frame";
    *need = 8 + (size_t)name_len + 4 + 3 + 4;
    if (*need > frame)
        return "frame ends before the key";
    if (have < *need)
        return NULL;
    if (name_len != 3 || memcmp(p + 8, "msg", 3) != 0)
        return "method is not msg";
    const unsigned char *f = p + 8 + name_len + 4;
    if (f[0] != T_I32 || f[1] != 0 || f[2] != 1)
        return "first field is not 1: i32 key";
    *key = (int32_t)be32(f + 3);
    return "";
}

static int forward_one(struct client *c) {
    struct evbuffer *in = c->in;
    size_t len = evbuffer_get_length(in);
    unsigned char lenbuf[4];
    if (len < 4)
        return 0;
    evbuffer_copyout(in, lenbuf, 4);
    uint32_t frame = be32(lenbuf);
    const char *err = NULL;
    if (frame > MAX_FRAME)
        err = "frame larger than 16 MiB";
    else if (len < 4 + (size_t)frame)
        return 0;
    int32_t key = 0;
    size_t need = 0;
    if (!err) {
        /* Two steps: the fixed part, then up to the key once the name length is known. */
        const unsigned char *p = evbuffer_pullup(in, 4 + (frame < 8 ? frame : 8));
        err = parse_key(p + 4, frame < 8 ? frame : 8, frame, &key, &need);
        if (!err) {
            p = evbuffer_pullup(in, 4 + need);
            err = parse_key(p + 4, need, frame, &key, &need);
        }
    }
    if (err && *err) {
        fprintf(stderr, "libevent_forward: client %s: %s; closing it\n", c->peer, err);
        free_client(c);
        return -1;
    }
    /* Euclidean remainder: -1 goes to the last destination, not out of range. */
    int64_t m = (int64_t)key % ndest;
    if (m < 0)
        m += ndest;
    struct dest *d = &dests[m];
    struct bufferevent *out = dest_bev(d);
    if (!out) {
        evbuffer_drain(in, 4 + (size_t)frame);
        return 1;
    }
    evbuffer_remove_buffer(in, bufferevent_get_output(out), 4 + (size_t)frame);
    if (evbuffer_get_length(bufferevent_get_output(out)) > DEST_HIGH)
        set_blocked(d, 1);
    return 1;
}

static void process(struct client *c) {
    while (!blocked) {
        int r = forward_one(c);
        if (r <= 0)
            return;
    }
}

static void client_readable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    struct client *c = arg;
    struct evbuffer_iovec vec;
    if (evbuffer_reserve_space(c->in, READ_MAX, &vec, 1) != 1) {
        fprintf(stderr, "libevent_forward: out of memory\n");
        free_client(c);
        return;
    }
    ssize_t n = read(fd, vec.iov_base, vec.iov_len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        /* Whole frames were forwarded as they came: what is left is a frame cut short. */
        size_t left = evbuffer_get_length(c->in);
        if (left)
            fprintf(stderr, "libevent_forward: client %s: closed inside a frame (%zu bytes)\n",
                    c->peer, left);
        free_client(c);
        return;
    }
    vec.iov_len = (size_t)n;
    evbuffer_commit_space(c->in, &vec, 1);
    process(c);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int len, void *arg) {
    (void)l;
    (void)len;
    (void)arg;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct client *c = calloc(1, sizeof *c);
    if (c) {
        c->fd = fd;
        c->in = evbuffer_new();
        c->rd = event_new(base, fd, EV_READ | EV_PERSIST, client_readable, c);
    }
    if (!c || !c->in || !c->rd) {
        fprintf(stderr, "libevent_forward: out of memory\n");
        if (c) {
            if (c->in)
                evbuffer_free(c->in);
            if (c->rd)
                event_free(c->rd);
            free(c);
        }
        evutil_closesocket(fd);
        return;
    }
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)sa;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
        snprintf(c->peer, sizeof c->peer, "%s:%u", ip, ntohs(sin->sin_port));
    } else {
        snprintf(c->peer, sizeof c->peer, "fd %d", (int)fd);
    }
    c->next = clients;
    if (clients)
        clients->prev = c;
    clients = c;
    if (!blocked)
        event_add(c->rd, NULL);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)sig;
    (void)what;
    event_base_loopexit(arg, NULL);
}

static void usage(void) {
    fprintf(stderr, "usage: libevent_forward PORT DEST_HOST:PORT [DEST_HOST:PORT...]\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 3 || argv[1][0] == '-')
        usage();
    char *end;
    long port = strtol(argv[1], &end, 10);
    if (*end || port < 1 || port > 65535) {
        fprintf(stderr, "libevent_forward: bad port %s\n", argv[1]);
        return 2;
    }
    ndest = argc - 2;
    dests = calloc((size_t)ndest, sizeof *dests);
    if (!dests)
        return 1;
    for (int i = 0; i < ndest; i++) {
        dests[i].name = argv[i + 2];
        dests[i].addr_len = sizeof dests[i].addr;
        if (evutil_parse_sockaddr_port(argv[i + 2], (struct sockaddr *)&dests[i].addr,
                                       &dests[i].addr_len) < 0) {
            fprintf(stderr, "libevent_forward: bad destination %s (want HOST:PORT)\n",
                    argv[i + 2]);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    base = event_base_new();
    if (!base) {
        fprintf(stderr, "libevent_forward: event_base_new failed\n");
        return 1;
    }
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_port = htons((unsigned short)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct evconnlistener *l =
        evconnlistener_new_bind(base, on_accept, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE,
                                1024, (struct sockaddr *)&sin, sizeof sin);
    if (!l) {
        fprintf(stderr, "libevent_forward: cannot listen on 127.0.0.1:%ld: %s\n", port,
                strerror(errno));
        return 1;
    }
    struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);

    event_base_dispatch(base);

    while (clients)
        free_client(clients);
    for (int i = 0; i < ndest; i++)
        if (dests[i].bev)
            bufferevent_free(dests[i].bev);
    event_free(sigint);
    event_free(sigterm);
    evconnlistener_free(l);
    event_base_free(base);
    free(dests);
    return 0;
}
