/* background: a C program that trains in its own loop while libstarling-client
 * synchronizes in the background (ShadowSync, starling_client_start_background()).
 *
 *   background HOST:PORT CERTS_DIR CLIENT_ID DATA_DIR [I/N] [easgd|ma]
 *
 * reads shard I of N of Fashion-MNIST's training set (default 0/10) like embed.c,
 * starts background training (S-EASGD by default, or S-MA), and then, on its main
 * thread, draws minibatches of 32 examples and calls starling_client_train_step() until
 * the coordinator says training is complete. It measures how long each step takes (the
 * app's thread must never wait on the network) and prints its statistics at the end. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "idx_shard.h"
#include "starling_client.h"

#define BATCH 32

static void logLine(void* user, int level, const char* line) {
  static const char* const names[] = {"trace", "debug", "info", "warn", "error", "error", "off"};
  fprintf((FILE*)user, "[%s] %s\n", names[level >= 0 && level <= 6 ? level : 2], line);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* xorshift64*: the app's own minibatch draw. */
static uint64_t nextRandom(uint64_t* s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ULL;
}

int main(int argc, char** argv) {
  char ca[4096], cert[4096], key[4096];
  unsigned shard = 0, n = 10;
  int variant = STARLING_SYNC_EASGD;
  uint8_t* pixels = NULL;
  int32_t* labels = NULL;
  size_t count = 0, dim = 0, i, j;
  float* x = NULL;
  int32_t y[BATCH];
  uint64_t rng = 88172645463325252ULL, steps = 0, again = 0, slow = 0;
  double stepSeconds = 0, longest = 0, started;
  starling_client_config config;
  starling_client_background_config bg;
  starling_client* client = NULL;
  starling_client_stats stats;
  starling_client_background_stats bs;
  int rc, state;
  if (argc < 5 || (argc > 5 && sscanf(argv[5], "%u/%u", &shard, &n) != 2) || n == 0 || shard >= n ||
      (argc > 6 && strcmp(argv[6], "easgd") != 0 && strcmp(argv[6], "ma") != 0)) {
    fprintf(stderr, "usage: background HOST:PORT CERTS_DIR CLIENT_ID DATA_DIR [I/N] [easgd|ma]\n");
    return 2;
  }
  if (argc > 6 && strcmp(argv[6], "ma") == 0) variant = STARLING_SYNC_MA;
  if (loadShard(argv[4], shard, n, &pixels, &labels, &count, &dim) != 0) return 1;
  x = malloc(BATCH * dim * sizeof *x);
  if (x == NULL) return 1;
  snprintf(ca, sizeof ca, "%s/ca.crt", argv[2]);
  snprintf(cert, sizeof cert, "%s/%s.crt", argv[2], argv[3]);
  snprintf(key, sizeof key, "%s/%s.key", argv[2], argv[3]);
  rng += shard;

  starling_client_config_init(&config);
  config.coordinator = argv[1];
  config.ca_file = ca;
  config.cert_file = cert;
  config.key_file = key;
  config.client_id = argv[3];
  config.seed = shard;
  config.log = logLine;
  config.log_user = stderr;
  rc = starling_client_create(&config, &client);
  starling_client_background_config_init(&bg);
  bg.variant = variant;
  bg.feature_dim = dim;
  bg.num_classes = 10;
  bg.num_examples = count;
  if (rc == STARLING_OK) rc = starling_client_start_background(client, &bg);
  if (rc != STARLING_OK) {
    fprintf(stderr, "background: %s (status %d)\n", starling_client_last_error(client), rc);
    starling_client_destroy(client);
    return 1;
  }
  printf("training on %zu examples (shard %u/%u) in the app's loop, %s in the background\n", count, shard, n,
         variant == STARLING_SYNC_MA ? "S-MA" : "S-EASGD");

  /* The app's loop: its own minibatches, until the federation has ended. */
  started = now();
  for (;;) {
    double t0;
    state = starling_client_state(client);
    if (state != STARLING_STATE_CONNECTING && state != STARLING_STATE_TRAINING) break;
    for (i = 0; i < BATCH; ++i) {
      const size_t k = (size_t)(nextRandom(&rng) % count);
      for (j = 0; j < dim; ++j)
        x[i * dim + j] = (float)pixels[k * dim + j] * (1.0f / 255.0f);
      y[i] = labels[k];
    }
    t0 = now();
    rc = starling_client_train_step(client, x, y, BATCH, NULL);
    if (rc == STARLING_OK) {
      const double took = now() - t0;
      stepSeconds += took;
      if (took > longest) longest = took;
      if (took > 0.010) ++slow;
      ++steps;
    } else if (rc == STARLING_ERR_AGAIN) {
      /* No model before the first round: the app waits a little, by its own choice. */
      const struct timespec ms = {0, 1000000};
      ++again;
      nanosleep(&ms, NULL);
    } else {
      fprintf(stderr, "background: train_step: %s (status %d)\n", starling_client_last_error(client), rc);
      starling_client_stop(client);
      break;
    }
  }
  rc = starling_client_join_background(client);
  free(pixels);
  free(labels);
  free(x);
  if (rc != STARLING_OK) {
    fprintf(stderr, "background: %s (status %d)\n", starling_client_last_error(client), rc);
    starling_client_destroy(client);
    return 1;
  }
  starling_client_get_stats(client, &stats);
  starling_client_get_background_stats(client, &bs);
  printf(
      "app steps %llu in %.2f s (%llu tries before the first round); step mean %.3f ms, longest %.3f ms, "
      "%llu over 10 ms\n",
      (unsigned long long)steps, now() - started, (unsigned long long)again,
      steps > 0 ? 1e3 * stepSeconds / (double)steps : 0.0, 1e3 * longest, (unsigned long long)slow);
  printf("lock waits %llu, longest %llu us\n", (unsigned long long)bs.lock_waits,
         (unsigned long long)bs.longest_lock_wait_us);
  printf(
      "rounds synced %llu, accepted %llu, rejected %llu, empty %llu; %llu bytes up, %llu bytes down; last loss %.4f\n",
      (unsigned long long)bs.rounds_synced, (unsigned long long)stats.rounds_accepted,
      (unsigned long long)stats.rounds_rejected, (unsigned long long)bs.rounds_empty,
      (unsigned long long)stats.bytes_up, (unsigned long long)stats.bytes_down, bs.last_loss);
  starling_client_destroy(client);
  return 0;
}
