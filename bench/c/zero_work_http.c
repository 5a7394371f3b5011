/* A zero-work HTTP/1.1 server in C: the ceiling `GET /v1/id` is measured against (the
 * comparison harness builds it with `cc -O2` and runs it beside our server, under the same
 * `wrk` command). One thread, level-triggered epoll, non-blocking sockets with TCP_NODELAY, as
 * Redis and the zero-work RESP server (zero_work_resp.c) are.
 *
 * Keep-alive and pipelining-safe: every read is appended to the connection's buffer, every
 * complete request head in it (up to its blank line) is answered in order, and the answers of
 * one read go out in one write. A write the socket does not take whole is kept and finished
 * when the socket is writable, reading nothing from that connection meanwhile.
 *
 * `GET /v1/id` is answered with a fixed answer shaped like ours: the same status line, the same
 * three headers (content-type, content-length, date) with values of the same length, and a
 * JSON body of the same length as a 19-digit ID. Anything else is a short 404. A
 * request carrying a body (transfer-encoding, or a content-length other than 0), or a head
 * larger than the buffer, is answered 400 and the connection closed; `connection: close` closes after the
 * answer.
 *
 * What it does not do, that our server does: no ID (no clock read, no generator), no date
 * formatting, no routing beyond the path's prefix, no header parsing beyond a search, no
 * metrics, no latency histogram, no timers (idle, header-read and write deadlines), no
 * connection cap, no allocation per request (one buffer per connection). Never part of the
 * product.
 *
 *     cc -O2 -o zero_work_http bench/c/zero_work_http.c && ./zero_work_http 8089
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BODY "{\"id\":\"1999999999999999999\"}"
#define HEAD(status, type, len) \
  "HTTP/1.1 " status "\r\ncontent-type: " type "\r\ncontent-length: " len \
  "\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n"
static const char OK[] = HEAD("200 OK", "application/json", "28") BODY;
static const char NOT_FOUND[] = HEAD("404 Not Found", "text/plain", "9") "not found";
static const char BAD[] =
    "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

/* One connection: its unanswered input, and an answer the socket has not taken yet. */
struct conn {
  size_t have;
  char in[8192];
  char *pending;
  size_t pending_len, pending_off;
  /* Closed once the pending answer is out (it ended with a 400 or `connection: close`). */
  int close_when_sent;
};

#define MAX_FD 65536
static struct conn *conns[MAX_FD];
/* The answers of one read: at most one per 16 bytes of input (a request head is longer), and
 * a 400; none is longer than 256 bytes. */
static char out[(sizeof ((struct conn *)0)->in / 16 + 2) * 256];

static void drop(int ep, int fd) {
  epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
  close(fd);
  if (fd < MAX_FD && conns[fd]) {
    free(conns[fd]->pending);
    free(conns[fd]);
    conns[fd] = NULL;
  }
}

/* Case-insensitive search for a header line of the head that starts with `line` (a name, or
 * a name and its value): where the rest of that line starts, or NULL. */
static const char *header(const char *head, size_t len, const char *line) {
  size_t n = strlen(line);
  for (const char *p = head; p + n + 2 <= head + len; p++)
    if (p[0] == '\n' && strncasecmp(p + 1, line, n) == 0) return p + 1 + n;
  return NULL;
}

/* A request with a body: transfer-encoding, or a content-length other than 0. */
static int has_body(const char *head, size_t len) {
  const char *length = header(head, len, "content-length:");
  if (length) {
    while (*length == ' ') length++;
    if (length[0] != '0' || length[1] != '\r') return 1;
  }
  return header(head, len, "transfer-encoding:") != NULL;
}

/* Writes `len` bytes of `buf` once; keeps what the socket did not take. 0, or -1 to close. */
static int send_once(int ep, int fd, struct conn *c, const char *buf, size_t len) {
  ssize_t n = write(fd, buf, len);
  if (n < 0 && errno != EAGAIN) return -1;
  if (n < 0) n = 0;
  if ((size_t)n == len) return 0;
  c->pending = malloc(len - n);
  if (!c->pending) return -1;
  memcpy(c->pending, buf + n, len - n);
  c->pending_len = len - n;
  c->pending_off = 0;
  struct epoll_event e = {.events = EPOLLOUT, .data.fd = fd};
  epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
  return 0;
}

/* Reads once, answers every complete request head in order, writes the answers once. */
static void on_readable(int ep, int fd, struct conn *c) {
  ssize_t got = read(fd, c->in + c->have, sizeof c->in - c->have);
  if (got <= 0) {
    if (got == 0 || errno != EAGAIN) drop(ep, fd);
    return;
  }
  c->have += got;
  size_t len = 0, at = 0;
  int close_after = 0;
  for (;;) {
    char *end = memmem(c->in + at, c->have - at, "\r\n\r\n", 4);
    if (!end) break;
    size_t head_len = end + 4 - (c->in + at);
    const char *head = c->in + at;
    if (has_body(head, head_len)) {
      memcpy(out + len, BAD, sizeof BAD - 1);
      len += sizeof BAD - 1;
      close_after = 1;
      break;
    }
    int id = head_len >= 11 && memcmp(head, "GET /v1/id", 10) == 0 &&
             (head[10] == ' ' || head[10] == '?');
    const char *answer = id ? OK : NOT_FOUND;
    size_t answer_len = id ? sizeof OK - 1 : sizeof NOT_FOUND - 1;
    memcpy(out + len, answer, answer_len);
    len += answer_len;
    at += head_len;
    if (header(head, head_len, "connection: close")) {
      close_after = 1;
      break;
    }
  }
  memmove(c->in, c->in + at, c->have - at);
  c->have -= at;
  if (!close_after && c->have == sizeof c->in) {
    memcpy(out + len, BAD, sizeof BAD - 1);
    len += sizeof BAD - 1;
    close_after = 1;
  }
  if (len > 0 && send_once(ep, fd, c, out, len) != 0) {
    drop(ep, fd);
    return;
  }
  if (close_after && c->pending)
    c->close_when_sent = 1;
  else if (close_after)
    drop(ep, fd);
}

/* Finishes a kept answer; once it is all out, reads again. */
static void on_writable(int ep, int fd, struct conn *c) {
  ssize_t n = write(fd, c->pending + c->pending_off, c->pending_len - c->pending_off);
  if (n < 0 && errno != EAGAIN) {
    drop(ep, fd);
    return;
  }
  if (n > 0) c->pending_off += n;
  if (c->pending_off < c->pending_len) return;
  if (c->close_when_sent) {
    drop(ep, fd);
    return;
  }
  free(c->pending);
  c->pending = NULL;
  struct epoll_event e = {.events = EPOLLIN, .data.fd = fd};
  epoll_ctl(ep, EPOLL_CTL_MOD, fd, &e);
}

int main(int argc, char **argv) {
  _Static_assert(sizeof OK <= 256 && sizeof NOT_FOUND <= 256 && sizeof BAD <= 256, "out");
  signal(SIGPIPE, SIG_IGN);
  if (argc != 2 || atoi(argv[1]) <= 0 || atoi(argv[1]) > 65535) {
    fprintf(stderr, "usage: %s PORT (1..=65535, on 127.0.0.1)\n", argv[0]);
    return 2;
  }
  int one = 1, listener = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 511) != 0) {
    perror("bind/listen");
    return 1;
  }
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = listener}, ready[256];
  epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
  for (;;) {
    int n = epoll_wait(ep, ready, 256, -1);
    for (int i = 0; i < n; i++) {
      int fd = ready[i].data.fd;
      if (fd == listener) {
        int conn = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
        if (conn < 0) continue;
        if (conn >= MAX_FD || !(conns[conn] = calloc(1, sizeof(struct conn)))) {
          close(conn);
          continue;
        }
        setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event e = {.events = EPOLLIN, .data.fd = conn};
        epoll_ctl(ep, EPOLL_CTL_ADD, conn, &e);
        continue;
      }
      struct conn *c = conns[fd];
      if (!c) continue;
      if (c->pending)
        on_writable(ep, fd, c);
      else
        on_readable(ep, fd, c);
    }
  }
}
