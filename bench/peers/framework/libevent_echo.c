/*
 * Echo server on libevent 2.1: the user-space baseline of Slick's echo benchmark (seed 002,
 * section 3.2), single-threaded like the original.
 *
 * Protocol: the client sends its buffer size as a 4-byte big-endian integer, then messages;
 * every byte after the header is sent back as it arrives. With --plain there is no header.
 *
 * Usage: libevent_echo [--plain] PORT   (listens on 127.0.0.1)
 *
 * libevent's own buffered reads (bufferevents, evbuffer_read) take at most 4 KiB per call in
 * 2.1 (EVBUFFER_MAX_READ), so a 16 KiB message would cost four trips through the event loop.
 * Here each readable event is one read(2) of up to 64 KiB and the bytes go straight back
 * with write(2); only what the socket does not take waits in an evbuffer, flushed with
 * evbuffer_write when the socket is writable, and the client is not read meanwhile
 * (backpressure instead of unbounded memory).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/listener.h>

#define READ_MAX (64 * 1024)

static int plain;
static unsigned char buf[READ_MAX]; /* one thread: one read buffer for every connection */

struct conn {
    evutil_socket_t fd;
    struct event *rd, *wr;
    struct evbuffer *pending; /* echoed bytes the socket did not take yet */
    int header_left;          /* header bytes still to drop */
};

static void close_conn(struct conn *c) {
    event_free(c->rd);
    event_free(c->wr);
    evbuffer_free(c->pending);
    evutil_closesocket(c->fd);
    free(c);
}

static void on_readable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    struct conn *c = arg;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        close_conn(c);
        return;
    }
    if (n < 0)
        return;
    unsigned char *p = buf;
    if (c->header_left > 0) {
        ssize_t drop = n < c->header_left ? n : c->header_left;
        p += drop;
        n -= drop;
        c->header_left -= (int)drop;
    }
    if (n == 0)
        return;
    ssize_t w = write(fd, p, (size_t)n);
    if (w < 0) {
        if (errno != EAGAIN && errno != EINTR) {
            close_conn(c);
            return;
        }
        w = 0;
    }
    if (w < n) {
        evbuffer_add(c->pending, p + w, (size_t)(n - w));
        event_del(c->rd);
        event_add(c->wr, NULL);
    }
}

static void on_writable(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    struct conn *c = arg;
    if (evbuffer_write(c->pending, fd) < 0 && errno != EAGAIN && errno != EINTR) {
        close_conn(c);
        return;
    }
    if (evbuffer_get_length(c->pending) == 0) {
        event_del(c->wr);
        event_add(c->rd, NULL);
    }
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int len, void *arg) {
    (void)sa;
    (void)len;
    (void)arg;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct event_base *base = evconnlistener_get_base(l);
    struct conn *c = calloc(1, sizeof *c);
    if (c) {
        c->fd = fd;
        c->header_left = plain ? 0 : 4;
        c->pending = evbuffer_new();
        c->rd = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, c);
        c->wr = event_new(base, fd, EV_WRITE | EV_PERSIST, on_writable, c);
    }
    if (!c || !c->pending || !c->rd || !c->wr) {
        fprintf(stderr, "libevent_echo: out of memory\n");
        if (c) {
            if (c->rd)
                event_free(c->rd);
            if (c->wr)
                event_free(c->wr);
            if (c->pending)
                evbuffer_free(c->pending);
            free(c);
        }
        evutil_closesocket(fd);
        return;
    }
    event_add(c->rd, NULL);
}

static void on_listen_error(struct evconnlistener *l, void *arg) {
    (void)l;
    (void)arg;
    /* EMFILE and the like: keep the listener, report it. */
    int err = EVUTIL_SOCKET_ERROR();
    fprintf(stderr, "libevent_echo: accept: %s\n", evutil_socket_error_to_string(err));
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)sig;
    (void)what;
    event_base_loopexit(arg, NULL);
}

static void usage(void) {
    fprintf(stderr, "usage: libevent_echo [--plain] PORT\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *port_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--plain") == 0)
            plain = 1;
        else if (!port_arg && argv[i][0] != '-')
            port_arg = argv[i];
        else
            usage();
    }
    if (!port_arg)
        usage();
    char *end;
    long port = strtol(port_arg, &end, 10);
    if (*end || port < 1 || port > 65535) {
        fprintf(stderr, "libevent_echo: bad port %s\n", port_arg);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);

    struct event_base *base = event_base_new();
    if (!base) {
        fprintf(stderr, "libevent_echo: event_base_new failed\n");
        return 1;
    }
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_port = htons((unsigned short)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* Accepted sockets come non-blocking (no LEV_OPT_LEAVE_SOCKETS_BLOCKING). */
    struct evconnlistener *l = evconnlistener_new_bind(
        base, on_accept, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 1024,
        (struct sockaddr *)&sin, sizeof sin);
    if (!l) {
        fprintf(stderr, "libevent_echo: cannot listen on 127.0.0.1:%ld: %s\n", port,
                strerror(errno));
        return 1;
    }
    evconnlistener_set_error_cb(l, on_listen_error);
    struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);

    event_base_dispatch(base);

    event_free(sigint);
    event_free(sigterm);
    evconnlistener_free(l);
    event_base_free(base);
    return 0;
}
