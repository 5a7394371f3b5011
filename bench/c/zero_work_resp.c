/* A zero-work RESP server in C, the reference the ceiling was stated against: one
 * thread, level-triggered epoll, non-blocking sockets with TCP_NODELAY, and for every read one
 * reply per `*` (array header) in it, an integer from a counter, written at once. No parsing, no
 * generator, no metrics, no allocation. Used by scripts/bench-resp-ceiling and by the comparison
 * harness (bench/src/ceiling.rs, the same redis-benchmark commands as our RESP port); never part
 * of the product.
 *
 *     cc -O2 -o zero_work_resp bench/c/zero_work_resp.c && ./zero_work_resp 6391
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 2 || atoi(argv[1]) <= 0 || atoi(argv[1]) > 65535) {
    fprintf(stderr, "usage: %s PORT (1..=65535, on 127.0.0.1)\n", argv[0]);
    return 2;
  }
  /* A client gone before its reply is written is an error to skip, not a signal that ends us. */
  signal(SIGPIPE, SIG_IGN);
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
  static char in[16384], out[16384 * 24];
  long long next = 1;
  for (;;) {
    int n = epoll_wait(ep, ready, 256, -1);
    for (int i = 0; i < n; i++) {
      int fd = ready[i].data.fd;
      if (fd == listener) {
        int conn = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
        if (conn < 0) continue;
        setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event e = {.events = EPOLLIN, .data.fd = conn};
        epoll_ctl(ep, EPOLL_CTL_ADD, conn, &e);
        continue;
      }
      ssize_t got = read(fd, in, sizeof in);
      if (got <= 0) {
        if (got == 0 || errno != EAGAIN) close(fd);
        continue;
      }
      int len = 0;
      for (ssize_t j = 0; j < got; j++)
        if (in[j] == '*') len += snprintf(out + len, 24, ":%lld\r\n", next++);
      /* A reply larger than the socket buffer would need a write queue; redis-benchmark's
       * replies (at most -P of them per read) never are. */
      if (len > 0 && write(fd, out, len) != len) close(fd);
    }
  }
}
