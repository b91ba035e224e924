/* The rabbitmq-c anchor of bench/client_bench.py: one connection, one channel, one phase per
 * process, the same workload as the Python rows (100-byte body, no properties, the default
 * exchange, routing key = queue).  The clock and the CPU time cover the phase only.
 *
 *   anchor PHASE HOST PORT USER PASSWORD VHOST QUEUE N PREFETCH ACK_EVERY WINDOW
 *
 *   publish  N basic.publish, then queue.declare passive (the broker has read them all)
 *   confirm         confirm.select (before the clock), then batches of WINDOW publishes, each
 *                   batch waited for until every one of its sequence numbers is acked
 *   confirm-window  confirm.select (before the clock), then publishes while fewer than WINDOW
 *                   are unconfirmed; with WINDOW outstanding it reads the next ack frame and
 *                   whatever else the read brought, then publishes again (pipelined)
 *   consume         basic.qos(PREFETCH) (before the clock), basic.consume, N deliveries,
 *                   basic.ack multiple every ACK_EVERY-th and on the N-th (the clock stops
 *                   after that ack); ACK_EVERY 1 acks each delivery alone (multiple=false)
 *
 * Prints one line that client_bench parses:
 *   AMQWIRE-ANCHOR phase=confirm n=200000 done=200000 wall_s=4.1 cpu_s=1.9
 * done counts what was confirmed (each sequence number settled once) or consumed.
 * Exit status 2 for bad arguments, 1 for a broker or protocol failure (reason on stderr). */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define BODY_SIZE 100

static _Noreturn void die(const char *what, const char *detail) {
  fprintf(stderr, "rabbitmq-c anchor: %s: %s\n", what, detail);
  exit(1);
}

static void check_reply(amqp_rpc_reply_t reply, const char *what) {
  char text[256];
  switch (reply.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return;
    case AMQP_RESPONSE_NONE:
      die(what, "missing RPC reply");
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
      die(what, amqp_error_string2(reply.library_error));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *m = reply.reply.decoded;
        snprintf(text, sizeof text, "connection closed by the broker: %u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
      } else if (reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = reply.reply.decoded;
        snprintf(text, sizeof text, "channel closed by the broker: %u %.*s", m->reply_code,
                 (int)m->reply_text.len, (char *)m->reply_text.bytes);
      } else {
        snprintf(text, sizeof text, "unexpected method 0x%08x", reply.reply.id);
      }
      die(what, text);
  }
}

static void check_status(int status, const char *what) {
  if (status != AMQP_STATUS_OK) die(what, amqp_error_string2(status));
}

static long parse_count(const char *text, const char *name) {
  char *end;
  long value = strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value <= 0) {
    fprintf(stderr, "rabbitmq-c anchor: %s must be a positive integer, got '%s'\n", name, text);
    exit(2);
  }
  return value;
}

typedef struct {
  double wall;
  double cpu;
} instant;

static instant now(void) {
  struct timespec ts;
  struct rusage ru;
  instant t;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  getrusage(RUSAGE_SELF, &ru);
  t.wall = ts.tv_sec + ts.tv_nsec * 1e-9;
  t.cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
          ru.ru_stime.tv_usec * 1e-6;
  return t;
}

static void publish_one(amqp_connection_state_t conn, amqp_bytes_t queue, amqp_bytes_t body) {
  check_status(amqp_basic_publish(conn, 1, amqp_empty_bytes, queue, 0, 0, NULL, body),
               "basic.publish");
}

static long run_publish(amqp_connection_state_t conn, amqp_bytes_t queue, amqp_bytes_t body,
                        long n) {
  for (long i = 0; i < n; i++) publish_one(conn, queue, body);
  amqp_queue_declare(conn, 1, queue, 1, 0, 0, 0, amqp_empty_table);
  check_reply(amqp_get_rpc_reply(conn), "queue.declare passive");
  return n;
}

/* Settles the sequence numbers of one batch [first, last] from basic.ack frames, each at most
 * once; a nack, a duplicate ack or an ack for an unpublished number is a failure. */
static long wait_batch(amqp_connection_state_t conn, uint64_t first, uint64_t last,
                       unsigned char *settled) {
  long left = (long)(last - first + 1);
  memset(settled, 0, (size_t)left);
  while (left > 0) {
    amqp_frame_t frame;
    check_status(amqp_simple_wait_frame(conn, &frame), "waiting for confirms");
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;
    if (frame.payload.method.id == AMQP_BASIC_ACK_METHOD) {
      amqp_basic_ack_t *ack = frame.payload.method.decoded;
      uint64_t tag = ack->delivery_tag;
      if (tag > last) die("confirm", "basic.ack for a sequence number not yet published");
      if (ack->multiple) {
        for (uint64_t t = first; t <= tag; t++) {
          if (!settled[t - first]) {
            settled[t - first] = 1;
            left--;
          }
        }
      } else {
        if (tag < first || settled[tag - first]) die("confirm", "a sequence number acked twice");
        settled[tag - first] = 1;
        left--;
      }
    } else if (frame.payload.method.id == AMQP_BASIC_NACK_METHOD) {
      die("confirm", "the broker nacked a publish");
    } else if (frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
               frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
      die("confirm", "the broker closed the channel or connection");
    }
  }
  amqp_maybe_release_buffers(conn);
  return (long)(last - first + 1);
}

static long run_confirm(amqp_connection_state_t conn, amqp_bytes_t queue, amqp_bytes_t body,
                        long n, long window) {
  unsigned char *settled = malloc((size_t)window);
  long confirmed = 0;
  uint64_t next = 1;
  if (settled == NULL) die("confirm", "out of memory");
  while (confirmed < n) {
    long k = n - confirmed < window ? n - confirmed : window;
    for (long i = 0; i < k; i++) publish_one(conn, queue, body);
    confirmed += wait_batch(conn, next, next + (uint64_t)k - 1, settled);
    next += (uint64_t)k;
  }
  free(settled);
  return confirmed;
}

/* Pipelined: at most WINDOW unconfirmed; each sequence number settled exactly once. */
static long run_confirm_window(amqp_connection_state_t conn, amqp_bytes_t queue,
                               amqp_bytes_t body, long n, long window) {
  unsigned char *settled = calloc((size_t)n + 1, 1);
  uint64_t published = 0, lowest = 1; /* lowest: the first sequence number not yet settled */
  long confirmed = 0;
  if (settled == NULL) die("confirm-window", "out of memory");
  while (confirmed < n) {
    while ((long)published < n && (long)published - confirmed < window) {
      publish_one(conn, queue, body);
      published++;
    }
    do {
      amqp_frame_t frame;
      check_status(amqp_simple_wait_frame(conn, &frame), "waiting for confirms");
      if (frame.frame_type != AMQP_FRAME_METHOD) continue;
      if (frame.payload.method.id == AMQP_BASIC_ACK_METHOD) {
        amqp_basic_ack_t *ack = frame.payload.method.decoded;
        uint64_t tag = ack->delivery_tag;
        if (tag > published || tag < 1)
          die("confirm-window", "basic.ack for a sequence number not yet published");
        if (ack->multiple) {
          for (uint64_t t = lowest; t <= tag; t++) {
            if (!settled[t]) {
              settled[t] = 1;
              confirmed++;
            }
          }
        } else {
          if (settled[tag]) die("confirm-window", "a sequence number acked twice");
          settled[tag] = 1;
          confirmed++;
        }
        while (lowest <= published && settled[lowest]) lowest++;
      } else if (frame.payload.method.id == AMQP_BASIC_NACK_METHOD) {
        die("confirm-window", "the broker nacked a publish");
      } else if (frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                 frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
        die("confirm-window", "the broker closed the channel or connection");
      }
    } while (amqp_frames_enqueued(conn) || amqp_data_in_buffer(conn));
    amqp_maybe_release_buffers(conn);
  }
  free(settled);
  return confirmed;
}

static long run_consume(amqp_connection_state_t conn, amqp_bytes_t queue, long n,
                        long ack_every) {
  long got = 0;
  amqp_basic_consume(conn, 1, queue, amqp_cstring_bytes("rabbitmq-c-anchor"), 0, 0, 0,
                     amqp_empty_table);
  check_reply(amqp_get_rpc_reply(conn), "basic.consume");
  while (got < n) {
    amqp_envelope_t envelope;
    amqp_maybe_release_buffers(conn);
    check_reply(amqp_consume_message(conn, &envelope, NULL, 0), "consuming");
    got++;
    if (got % ack_every == 0 || got == n)
      check_status(amqp_basic_ack(conn, 1, envelope.delivery_tag, ack_every > 1), "basic.ack");
    amqp_destroy_envelope(&envelope);
  }
  return got;
}

int main(int argc, char **argv) {
  if (argc != 12) {
    fprintf(stderr,
            "usage: %s publish|confirm|confirm-window|consume HOST PORT USER PASSWORD VHOST QUEUE N PREFETCH "
            "ACK_EVERY WINDOW\n",
            argv[0]);
    return 2;
  }
  const char *phase = argv[1];
  int port = (int)parse_count(argv[3], "PORT");
  long n = parse_count(argv[8], "N");
  long prefetch = parse_count(argv[9], "PREFETCH");
  long ack_every = parse_count(argv[10], "ACK_EVERY");
  long window = parse_count(argv[11], "WINDOW");
  if (strcmp(phase, "publish") && strcmp(phase, "confirm") && strcmp(phase, "confirm-window") &&
      strcmp(phase, "consume")) {
    fprintf(stderr,
            "rabbitmq-c anchor: PHASE must be publish, confirm, confirm-window or consume, got "
            "'%s'\n",
            phase);
    return 2;
  }
  if (prefetch > 65535) {
    fprintf(stderr, "rabbitmq-c anchor: PREFETCH must be at most 65535, got %ld\n", prefetch);
    return 2;
  }

  unsigned char body_bytes[BODY_SIZE];
  for (int i = 0; i < BODY_SIZE; i++) body_bytes[i] = (unsigned char)((i * 7 + 13) % 256);
  amqp_bytes_t body = {BODY_SIZE, body_bytes};
  amqp_bytes_t queue = amqp_cstring_bytes(argv[7]);

  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *sock = amqp_tcp_socket_new(conn);
  if (sock == NULL) die("connect", "cannot create a TCP socket");
  check_status(amqp_socket_open(sock, argv[2], port), "connect");
  check_reply(amqp_login(conn, argv[6], 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, argv[4], argv[5]),
              "login");
  amqp_channel_open(conn, 1);
  check_reply(amqp_get_rpc_reply(conn), "channel.open");
  if (!strcmp(phase, "confirm") || !strcmp(phase, "confirm-window")) {
    amqp_confirm_select(conn, 1);
    check_reply(amqp_get_rpc_reply(conn), "confirm.select");
  } else if (!strcmp(phase, "consume")) {
    amqp_basic_qos(conn, 1, 0, (uint16_t)prefetch, 0);
    check_reply(amqp_get_rpc_reply(conn), "basic.qos");
  }

  long done;
  instant t0 = now();
  if (!strcmp(phase, "publish"))
    done = run_publish(conn, queue, body, n);
  else if (!strcmp(phase, "confirm"))
    done = run_confirm(conn, queue, body, n, window);
  else if (!strcmp(phase, "confirm-window"))
    done = run_confirm_window(conn, queue, body, n, window);
  else
    done = run_consume(conn, queue, n, ack_every);
  instant t1 = now();

  printf("AMQWIRE-ANCHOR phase=%s n=%ld done=%ld wall_s=%.6f cpu_s=%.6f\n", phase, n, done,
         t1.wall - t0.wall, t1.cpu - t0.cpu);
  fflush(stdout);
  check_reply(amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS), "channel.close");
  check_reply(amqp_connection_close(conn, AMQP_REPLY_SUCCESS), "connection.close");
  check_status(amqp_destroy_connection(conn), "destroy");
  return 0;
}
