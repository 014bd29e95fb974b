/* Publish -> deliver load for compare_go.py's latency rows, in C so that the load generator's own CPU and
 * wakeups do not set the row (the Python one, on the same 2 cores, held both servers to the same offer).
 *
 *   paced_load PORT RATE PRODUCERS CONSUMERS COUNT TOPIC CHANNEL
 *
 * One thread offers COUNT single PUBs of 200 B at RATE a second over PRODUCERS connections: each message is due at
 * its slot and goes out on a connection whose last PUB has its OK (none idle: it waits, the server holding the rate
 * back). Another thread holds CONSUMERS subscriptions at RDY 1 and FINs each message; a message's latency is from
 * nsqd's own timestamp in it (taken when it accepted the PUB) to its receipt. The first tenth of the receipts warms
 * up and is left out. Prints one JSON line: received, published_rate and the latency percentiles in microseconds.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BODY_SIZE 200
#define OK_FRAME_SIZE 10 /* size 6, type 0, "OK" */
#define FRAME_MESSAGE 2
#define GIVE_UP_SECONDS 600

static int port;

static void die(const char *what) {
    fprintf(stderr, "paced_load: %s: %s\n", what, strerror(errno));
    exit(2);
}

static double now_monotonic(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t now_realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void send_all(int fd, const char *data, size_t size) {
    while (size) {
        ssize_t n = send(fd, data, size, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("send");
        }
        data += n;
        size -= (size_t)n;
    }
}

static int connect_v2(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    send_all(fd, "  V2", 4);
    return fd;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read one whole frame (blocking); its data into out (up to cap bytes), its type returned. */
static int read_frame(int fd, char *out, size_t cap) {
    unsigned char head[8];
    size_t got = 0;
    while (got < 8) {
        ssize_t n = recv(fd, head + got, 8 - got, 0);
        if (n <= 0) die("recv frame head");
        got += (size_t)n;
    }
    size_t size = be32(head) - 4;
    if (size > cap) {
        errno = EMSGSIZE;
        die("frame too large");
    }
    for (got = 0; got < size;) {
        ssize_t n = recv(fd, out + got, size - got, 0);
        if (n <= 0) die("recv frame data");
        got += (size_t)n;
    }
    return (int)be32(head + 4);
}

/* ---- consumers at RDY 1 ---------------------------------------------------------------------------------- */

struct consumers {
    int count;          /* connections */
    long wanted;        /* messages to receive */
    long received;
    double *latencies;  /* microseconds, in order of receipt */
    int *fds;
};

struct inbuf {
    unsigned char data[1 << 16];
    size_t used;
};

static void *consume(void *arg) {
    struct consumers *c = arg;
    int ep = epoll_create1(0);
    struct inbuf *bufs = calloc((size_t)c->count, sizeof *bufs);
    if (ep < 0 || !bufs) die("epoll/calloc");
    for (int i = 0; i < c->count; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fds[i], &ev) < 0) die("epoll_ctl");
    }
    double give_up = now_monotonic() + GIVE_UP_SECONDS;
    struct epoll_event events[64];
    while (c->received < c->wanted && now_monotonic() < give_up) {
        int ready = epoll_wait(ep, events, 64, 1000);
        if (ready < 0 && errno != EINTR) die("epoll_wait");
        for (int e = 0; e < ready; e++) {
            int i = (int)events[e].data.u32;
            struct inbuf *b = &bufs[i];
            ssize_t n = recv(c->fds[i], b->data + b->used, sizeof b->data - b->used, 0);
            if (n <= 0) die("recv");
            int64_t receipt = now_realtime_ns();
            b->used += (size_t)n;
            size_t pos = 0;
            char fins[64 * 21];
            size_t fin_len = 0;
            while (b->used - pos >= 8) {
                size_t size = be32(b->data + pos);
                if (b->used - pos < 4 + size) break;
                int type = (int)be32(b->data + pos + 4);
                const unsigned char *frame = b->data + pos + 8;
                if (type == FRAME_MESSAGE) {
                    int64_t stamp = (int64_t)((uint64_t)be32(frame) << 32 | be32(frame + 4));
                    if (c->received < c->wanted) c->latencies[c->received++] = (receipt - stamp) / 1000.0;
                    if (fin_len + 21 > sizeof fins) {
                        send_all(c->fds[i], fins, fin_len);
                        fin_len = 0;
                    }
                    memcpy(fins + fin_len, "FIN ", 4);
                    memcpy(fins + fin_len + 4, frame + 10, 16);
                    fins[fin_len + 20] = '\n';
                    fin_len += 21;
                } else if (size - 4 == 11 && memcmp(frame, "_heartbeat_", 11) == 0) {
                    send_all(c->fds[i], "NOP\n", 4);
                }
                pos += 4 + size;
            }
            if (fin_len) send_all(c->fds[i], fins, fin_len);
            memmove(b->data, b->data + pos, b->used - pos);
            b->used -= pos;
        }
    }
    free(bufs);
    close(ep);
    return NULL;
}

/* ---- paced producers ------------------------------------------------------------------------------------- */

struct producers {
    int count;
    long total;
    double rate;
    const char *command;
    size_t command_len;
    double seconds;  /* from the first PUB to the last OK */
};

static void *publish(void *arg) {
    struct producers *p = arg;
    int ep = epoll_create1(0);
    int *fds = calloc((size_t)p->count, sizeof *fds);
    int *idle = calloc((size_t)p->count, sizeof *idle);
    size_t *pending = calloc((size_t)p->count, sizeof *pending); /* bytes of OK frames read so far */
    if (ep < 0 || !fds || !idle || !pending) die("epoll/calloc");
    int idle_count = 0;
    for (int i = 0; i < p->count; i++) {
        fds[i] = connect_v2();
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0) die("epoll_ctl");
        idle[idle_count++] = i;
    }
    double start = now_monotonic();
    long sent = 0, acknowledged = 0;
    struct epoll_event events[64];
    while (acknowledged < p->total) {
        while (idle_count && sent < p->total && now_monotonic() >= start + sent / p->rate) {
            send_all(fds[idle[--idle_count]], p->command, p->command_len);
            sent++;
        }
        double wait = 1.0; /* to the next message's slot, to the nanosecond (epoll_wait's milliseconds would spin) */
        if (idle_count && sent < p->total) {
            wait = start + sent / p->rate - now_monotonic();
            if (wait < 0) wait = 0;
        }
        struct timespec timeout = {.tv_sec = (time_t)wait, .tv_nsec = (long)((wait - (time_t)wait) * 1e9)};
        int ready = epoll_pwait2(ep, events, 64, &timeout, NULL);
        if (ready < 0 && errno != EINTR) die("epoll_wait");
        for (int e = 0; e < ready; e++) {
            int i = (int)events[e].data.u32;
            unsigned char answer[OK_FRAME_SIZE * 4];
            ssize_t n = recv(fds[i], answer, sizeof answer, 0);
            if (n <= 0) die("recv OK");
            static const unsigned char ok[OK_FRAME_SIZE] = {0, 0, 0, 6, 0, 0, 0, 0, 'O', 'K'};
            for (ssize_t k = 0; k < n; k++) {
                if (answer[k] != ok[pending[i]]) {
                    fprintf(stderr, "paced_load: not OK from nsqd\n");
                    exit(2);
                }
                if (++pending[i] == OK_FRAME_SIZE) {
                    pending[i] = 0;
                    acknowledged++;
                    idle[idle_count++] = i;
                }
            }
        }
    }
    p->seconds = now_monotonic() - start;
    for (int i = 0; i < p->count; i++) close(fds[i]);
    free(fds);
    free(idle);
    free(pending);
    close(ep);
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: paced_load PORT RATE PRODUCERS CONSUMERS COUNT TOPIC CHANNEL\n");
        return 2;
    }
    port = atoi(argv[1]);
    struct producers p = {.rate = atof(argv[2]), .count = atoi(argv[3]), .total = atol(argv[5])};
    struct consumers c = {.count = atoi(argv[4]), .wanted = p.total};
    const char *topic = argv[6], *channel = argv[7];
    if (port <= 0 || p.rate <= 0 || p.count <= 0 || c.count <= 0 || p.total <= 0) {
        fprintf(stderr, "paced_load: PORT, RATE, PRODUCERS, CONSUMERS and COUNT must be positive\n");
        return 2;
    }
    char command[128 + BODY_SIZE];
    int head = snprintf(command, 128, "PUB %s\n", topic);
    if (head <= 0 || head >= 120) {
        fprintf(stderr, "paced_load: topic name too long\n");
        return 2;
    }
    command[head] = 0, command[head + 1] = 0, command[head + 2] = 0, command[head + 3] = BODY_SIZE;
    memset(command + head + 4, 'x', BODY_SIZE);
    p.command = command;
    p.command_len = (size_t)head + 4 + BODY_SIZE;

    c.fds = calloc((size_t)c.count, sizeof *c.fds);
    c.latencies = calloc((size_t)c.wanted, sizeof *c.latencies);
    if (!c.fds || !c.latencies) die("calloc");
    char sub[256], frame[1024];
    snprintf(sub, sizeof sub, "SUB %s %s\n", topic, channel);
    for (int i = 0; i < c.count; i++) {
        c.fds[i] = connect_v2();
        send_all(c.fds[i], sub, strlen(sub));
        int type = read_frame(c.fds[i], frame, sizeof frame - 1);
        if (type != 0 || memcmp(frame, "OK", 2) != 0) {
            fprintf(stderr, "paced_load: SUB failed\n");
            return 2;
        }
        send_all(c.fds[i], "RDY 1\n", 6);
    }

    pthread_t consumer, producer;
    if (pthread_create(&consumer, NULL, consume, &c) || pthread_create(&producer, NULL, publish, &p)) die("thread");
    pthread_join(producer, NULL);
    pthread_join(consumer, NULL);

    long skip = c.received / 10, kept = c.received - skip;
    double *lat = c.latencies + skip;
    qsort(lat, (size_t)kept, sizeof *lat, by_value);
#define RANK(q) (kept ? lat[(long)((q) * kept) < kept ? (long)((q) * kept) : kept - 1] : 0.0)
    printf("{\"received\": %ld, \"published_rate\": %.1f, \"p50\": %.1f, \"p99\": %.1f, \"p999\": %.1f, "
           "\"max\": %.1f}\n",
           c.received, p.total / p.seconds, RANK(0.5), RANK(0.99), RANK(0.999), kept ? lat[kept - 1] : 0.0);
    return 0;
}
