/*
 * Echo server on libevent 2.1: the user-space baseline of Slick's echo benchmark (seed 002,
 * section 3.2), single-threaded like the original.
 *
 * Protocol: the client sends its buffer size as a 4-byte big-endian integer, then messages;
 * every byte after the header is sent back as it arrives. With --plain there is no header.
 *
 * Usage: libevent_echo [--plain] PORT   (listens on 127.0.0.1)
 *
 * Bytes move from the input to the output evbuffer without a copy (evbuffer_add_buffer).
 * A client that does not read its echoes is not read from either once its output holds
 * OUT_HIGH bytes (backpressure instead of unbounded memory).
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

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#define OUT_HIGH (1024 * 1024)

static int plain;

struct conn {
    int header_left; /* header bytes still to drop */
};

static void close_conn(struct bufferevent *bev, struct conn *c) {
    bufferevent_free(bev);
    free(c);
}

static void on_read(struct bufferevent *bev, void *arg) {
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    struct evbuffer *out = bufferevent_get_output(bev);
    if (c->header_left > 0) {
        size_t have = evbuffer_get_length(in);
        size_t drop = have < (size_t)c->header_left ? have : (size_t)c->header_left;
        evbuffer_drain(in, drop);
        c->header_left -= (int)drop;
        if (c->header_left > 0)
            return;
    }
    evbuffer_add_buffer(out, in);
    if (evbuffer_get_length(out) >= OUT_HIGH)
        bufferevent_disable(bev, EV_READ);
}

static void on_write(struct bufferevent *bev, void *arg) {
    (void)arg;
    /* Called when the output drained to its low watermark (0): read again. */
    bufferevent_enable(bev, EV_READ);
}

static void on_event(struct bufferevent *bev, short what, void *arg) {
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        close_conn(bev, arg);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                      int len, void *arg) {
    (void)sa;
    (void)len;
    (void)arg;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct event_base *base = evconnlistener_get_base(l);
    struct bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    struct conn *c = calloc(1, sizeof *c);
    if (!bev || !c) {
        fprintf(stderr, "libevent_echo: out of memory\n");
        if (bev)
            bufferevent_free(bev);
        else
            evutil_closesocket(fd);
        free(c);
        return;
    }
    c->header_left = plain ? 0 : 4;
    bufferevent_setcb(bev, on_read, on_write, on_event, c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static void on_listen_error(struct evconnlistener *l, void *arg) {
    (void)arg;
    /* EMFILE and the like: keep the listener, report it. */
    int err = EVUTIL_SOCKET_ERROR();
    fprintf(stderr, "libevent_echo: accept: %s\n", evutil_socket_error_to_string(err));
    (void)l;
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
