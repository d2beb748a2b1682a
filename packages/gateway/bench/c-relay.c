/*
 * The C peer for the echo benchmark: what a web terminal written in C (ttyd: libwebsockets on one
 * epoll loop) does per keystroke, and nothing more. A WebSocket server on loopback (RFC 6455: the
 * handshake, masked client frames in, binary frames out), one `cat` in a pty per connection, each
 * message's payload written to the pty and each read from the pty sent back as one binary frame.
 * No protocol, no auth, no flow control, no scrollback: the floor of any server process between a
 * WebSocket client and a pty on this machine. Built by the bench with the C compiler the spawn
 * helper needs; prints its port; stops when its stdin closes. Serves one connection at a time.
 */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pty.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

/* SHA-1 (FIPS 180-1), only for the handshake's Sec-WebSocket-Accept. */
static uint32_t rol(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }
static void sha1(const unsigned char *data, size_t len, unsigned char out[20]) {
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  unsigned char block[64];
  size_t total = ((len + 8) / 64 + 1) * 64;
  for (size_t off = 0; off < total; off += 64) {
    for (size_t i = 0; i < 64; i++) {
      size_t at = off + i;
      block[i] = at < len ? data[at] : at == len ? 0x80 : 0;
    }
    if (off + 64 == total)
      for (int i = 0; i < 8; i++) block[63 - i] = (unsigned char)(((uint64_t)len * 8) >> (8 * i));
    uint32_t w[80];
    for (int i = 0; i < 16; i++)
      w[i] = (uint32_t)block[4 * i] << 24 | (uint32_t)block[4 * i + 1] << 16 | (uint32_t)block[4 * i + 2] << 8 |
             block[4 * i + 3];
    for (int i = 16; i < 80; i++) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; i++) {
      uint32_t f, k;
      if (i < 20) f = (b & c) | (~b & d), k = 0x5A827999;
      else if (i < 40) f = b ^ c ^ d, k = 0x6ED9EBA1;
      else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
      else f = b ^ c ^ d, k = 0xCA62C1D6;
      uint32_t t = rol(a, 5) + f + e + k + w[i];
      e = d, d = c, c = rol(b, 30), b = a, a = t;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  for (int i = 0; i < 20; i++) out[i] = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
}

static void base64(const unsigned char *in, size_t len, char *out) {
  static const char table[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < len; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < len ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < len ? in[i + 2] : 0);
    out[o++] = table[v >> 18 & 63];
    out[o++] = table[v >> 12 & 63];
    out[o++] = i + 1 < len ? table[v >> 6 & 63] : '=';
    out[o++] = i + 2 < len ? table[v & 63] : '=';
  }
  out[o] = 0;
}

/* Reads the upgrade request and answers it; 0 on success. */
static int handshake(int fd) {
  char request[8192];
  size_t used = 0;
  while (!memmem(request, used, "\r\n\r\n", 4)) {
    if (used == sizeof request) return -1;
    ssize_t n = read(fd, request + used, sizeof request - used);
    if (n <= 0) return -1;
    used += (size_t)n;
  }
  request[used < sizeof request ? used : sizeof request - 1] = 0;
  char *key = strcasestr(request, "\r\nSec-WebSocket-Key:");
  if (!key) return -1;
  key += 20;
  while (*key == ' ') key++;
  char joined[128];
  size_t keyLength = strcspn(key, "\r\n ");
  if (keyLength > 64) return -1;
  snprintf(joined, sizeof joined, "%.*s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", (int)keyLength, key);
  unsigned char digest[20];
  char accept[32];
  sha1((unsigned char *)joined, strlen(joined), digest);
  base64(digest, 20, accept);
  char response[256];
  int length = snprintf(response, sizeof response,
                        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Accept: %s\r\n\r\n",
                        accept);
  return write(fd, response, (size_t)length) == length ? 0 : -1;
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t size = sizeof address;
  if (bind(listener, (struct sockaddr *)&address, size) || listen(listener, 4) ||
      getsockname(listener, (struct sockaddr *)&address, &size)) {
    perror("c-relay");
    return 1;
  }
  printf("%d\n", ntohs(address.sin_port));
  fflush(stdout);
  int loop = epoll_create1(0);
  struct epoll_event event = {.events = EPOLLIN, .data.fd = 0};
  epoll_ctl(loop, EPOLL_CTL_ADD, 0, &event);
  event.data.fd = listener;
  epoll_ctl(loop, EPOLL_CTL_ADD, listener, &event);
  int client = -1, master = -1;
  pid_t cat = -1;
  static unsigned char in[65536 + 14], out[65536];
  size_t pending = 0; /* bytes of an incomplete frame kept in `in` */
  for (;;) {
    struct epoll_event ready[4];
    int count = epoll_wait(loop, ready, 4, -1);
    for (int i = 0; i < count; i++) {
      int fd = ready[i].data.fd;
      if (fd == 0) { /* stdin closed (or anything on it): the bench is done */
        if (cat > 0) kill(cat, SIGKILL), waitpid(cat, NULL, 0);
        return 0;
      }
      if (fd == listener) {
        int accepted = accept(listener, NULL, NULL);
        if (accepted < 0 || client >= 0 || handshake(accepted)) {
          if (accepted >= 0) close(accepted);
          continue;
        }
        int one = 1;
        setsockopt(accepted, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct winsize window = {.ws_row = 24, .ws_col = 80};
        cat = forkpty(&master, NULL, NULL, &window);
        if (cat == 0) {
          execl("/bin/cat", "cat", (char *)NULL);
          _exit(127);
        }
        client = accepted;
        pending = 0;
        event.data.fd = client;
        epoll_ctl(loop, EPOLL_CTL_ADD, client, &event);
        event.data.fd = master;
        epoll_ctl(loop, EPOLL_CTL_ADD, master, &event);
        continue;
      }
      if (fd == master) { /* the program's output: one binary frame per read */
        ssize_t n = read(master, out, sizeof out);
        if (n <= 0) goto hangup;
        unsigned char header[4] = {0x82};
        size_t headerLength = 2;
        if (n < 126) header[1] = (unsigned char)n;
        else header[1] = 126, header[2] = (unsigned char)(n >> 8), header[3] = (unsigned char)n, headerLength = 4;
        struct iovec parts[2] = {{header, headerLength}, {out, (size_t)n}};
        if (writev(client, parts, 2) < 0) goto hangup;
        continue;
      }
      /* the client's frames: each payload, unmasked, to the pty */
      ssize_t n = read(client, in + pending, sizeof in - pending);
      if (n <= 0) goto hangup;
      pending += (size_t)n;
      for (;;) {
        if (pending < 2) break;
        int opcode = in[0] & 0x0f;
        uint64_t length = in[1] & 0x7f;
        size_t at = 2;
        if (length == 126) {
          if (pending < 4) break;
          length = (uint64_t)in[2] << 8 | in[3], at = 4;
        } else if (length == 127) {
          if (pending < 10) break;
          length = 0;
          for (int b = 0; b < 8; b++) length = length << 8 | in[2 + b];
          at = 10;
        }
        if (length > 65536) goto hangup; /* a bench peer: bigger messages are not its job */
        if (pending < at + 4 + length) break;
        unsigned char *mask = in + at, *payload = in + at + 4;
        for (uint64_t b = 0; b < length; b++) payload[b] ^= mask[b % 4];
        if (opcode == 8) goto hangup;
        if (opcode == 1 || opcode == 2 || opcode == 0)
          if (length > 0 && write(master, payload, length) < 0) goto hangup;
        size_t used = at + 4 + length;
        memmove(in, in + used, pending - used);
        pending -= used;
      }
      continue;
    hangup:
      if (client >= 0) close(client);
      if (master >= 0) close(master);
      if (cat > 0) kill(cat, SIGKILL), waitpid(cat, NULL, 0);
      client = master = cat = -1;
    }
  }
}
