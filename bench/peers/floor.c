/*
 * The floor: the least a user-space HTTP/1.1 server can do per keep-alive request, to
 * measure real servers against (bench/sizes.py's "floor" row). One thread, epoll, level
 * triggered; every file under ROOT is read into memory at start, with its response head
 * made once; a request costs one read and one write (pipelined requests share both), and
 * its only parsing is finding the path after "GET " and the head's end. No Date field,
 * no logging, no checks a real server owes its clients: what is left is the kernel's work
 * on the two system calls, which every server here pays too.
 *
 * Usage: floor PORT ROOT    (build: cc -O2 -o floor floor.c)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FILES 256
#define MAX_EVENTS 64
#define READ_SIZE 16384
#define MAX_PIPELINED 16

struct file {
    char path[512];
    size_t path_len;
    char *response; /* head and body */
    size_t len;
};

static struct file files[MAX_FILES];
static size_t nfiles;
static const char not_found[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n";

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* Every regular file under DIR, as URL path PREFIX/NAME. */
static void load(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d)
        die(dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char full[1024], url[512];
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        snprintf(url, sizeof url, "%s/%s", prefix, e->d_name);
        struct stat st;
        if (stat(full, &st) != 0)
            die(full);
        if (S_ISDIR(st.st_mode)) {
            load(full, url);
            continue;
        }
        if (!S_ISREG(st.st_mode) || nfiles == MAX_FILES)
            continue;
        struct file *f = &files[nfiles++];
        snprintf(f->path, sizeof f->path, "%s", url);
        f->path_len = strlen(f->path);
        char head[256];
        int head_len = snprintf(head, sizeof head,
                                "HTTP/1.1 200 OK\r\nServer: floor\r\nContent-Type: "
                                "application/octet-stream\r\nContent-Length: %lld\r\n\r\n",
                                (long long)st.st_size);
        f->len = head_len + st.st_size;
        f->response = malloc(f->len);
        memcpy(f->response, head, head_len);
        int fd = open(full, O_RDONLY);
        if (fd < 0)
            die(full);
        size_t got = 0;
        while (got < (size_t)st.st_size) {
            ssize_t n = read(fd, f->response + head_len + got, st.st_size - got);
            if (n <= 0)
                die(full);
            got += n;
        }
        close(fd);
    }
    closedir(d);
}

static struct iovec find(const char *path, size_t len) {
    for (size_t i = 0; i < nfiles; i++)
        if (files[i].path_len == len && memcmp(files[i].path, path, len) == 0)
            return (struct iovec){files[i].response, files[i].len};
    return (struct iovec){(void *)not_found, sizeof not_found - 1};
}

/* Answers the whole requests in buf[0..len); returns the bytes they used. A reply that
 * the socket does not take whole closes the connection (it never happens at the sizes
 * measured, whose replies fit the socket's buffer). */
static size_t serve(int fd, char *buf, size_t len, int *close_it) {
    struct iovec iov[MAX_PIPELINED];
    int n = 0;
    size_t used = 0, want = 0;
    while (n < MAX_PIPELINED) {
        char *end = memmem(buf + used, len - used, "\r\n\r\n", 4);
        if (!end)
            break;
        char *path = buf + used + 4; /* after "GET " */
        char *space = memchr(path, ' ', end - path);
        iov[n] = space ? find(path, space - path) : find("", 0);
        want += iov[n].iov_len;
        n++;
        used = end + 4 - buf;
    }
    if (n > 0 && writev(fd, iov, n) != (ssize_t)want)
        *close_it = 1;
    return used;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: floor PORT ROOT\n");
        return 2;
    }
    load(argv[2], "");
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1])),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 1024))
        die("listen");
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    /* Unanswered bytes of a partly received request, per descriptor. */
    static char *pending[65536];
    static size_t pending_len[65536];
    char buf[READ_SIZE * 2];
    struct epoll_event events[MAX_EVENTS];
    for (;;) {
        int ready = epoll_wait(ep, events, MAX_EVENTS, -1);
        for (int i = 0; i < ready; i++) {
            int fd = events[i].data.fd;
            if (fd == lfd) {
                int c;
                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= 65536) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            size_t have = pending_len[fd];
            if (have)
                memcpy(buf, pending[fd], have);
            ssize_t n = read(fd, buf + have, READ_SIZE);
            int close_it = n <= 0 && !(n < 0 && errno == EAGAIN);
            if (n > 0) {
                size_t len = have + n;
                size_t used = serve(fd, buf, len, &close_it);
                free(pending[fd]);
                pending[fd] = NULL;
                pending_len[fd] = len - used;
                if (len - used > READ_SIZE)
                    close_it = 1;
                else if (len > used) {
                    pending[fd] = malloc(len - used);
                    memcpy(pending[fd], buf + used, len - used);
                }
            }
            if (close_it) {
                free(pending[fd]);
                pending[fd] = NULL;
                pending_len[fd] = 0;
                close(fd);
            }
        }
    }
}
