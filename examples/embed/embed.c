/* embed: a C program that embeds the Starling client through starling_client.h.
 *
 *   embed HOST:PORT CERTS_DIR CLIENT_ID DATA_DIR [I/N]
 *
 * reads shard I of N of Fashion-MNIST's training set (every N-th example, starting
 * at I; default 0/10, 6,000 examples) from DATA_DIR with a small IDX reader
 * (idx_shard.c), hands it to the client as bytes through the array API, joins the coordinator
 * at HOST:PORT with CERTS_DIR/ca.crt, CERTS_DIR/CLIENT_ID.crt and CLIENT_ID.key
 * (as `starling-coordinator init` writes them), trains until the coordinator says
 * training is complete, and prints the client's statistics. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idx_shard.h"
#include "starling_client.h"

static void logLine(void* user, int level, const char* line) {
  static const char* const names[] = {"trace", "debug", "info", "warn", "error", "error", "off"};
  fprintf((FILE*)user, "[%s] %s\n", names[level >= 0 && level <= 6 ? level : 2], line);
}

int main(int argc, char** argv) {
  char ca[4096], cert[4096], key[4096];
  unsigned shard = 0, n = 10;
  uint8_t* pixels = NULL;
  int32_t* labels = NULL;
  size_t count = 0, dim = 0;
  starling_client_config config;
  starling_client* client = NULL;
  starling_client_stats stats;
  int rc;
  if (argc < 5 || (argc > 5 && sscanf(argv[5], "%u/%u", &shard, &n) != 2) || n == 0 || shard >= n) {
    fprintf(stderr, "usage: embed HOST:PORT CERTS_DIR CLIENT_ID DATA_DIR [I/N]\n");
    return 2;
  }
  if (loadShard(argv[4], shard, n, &pixels, &labels, &count, &dim) != 0) return 1;
  snprintf(ca, sizeof ca, "%s/ca.crt", argv[2]);
  snprintf(cert, sizeof cert, "%s/%s.crt", argv[2], argv[3]);
  snprintf(key, sizeof key, "%s/%s.key", argv[2], argv[3]);

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
  if (rc == STARLING_OK) rc = starling_client_set_data_u8(client, pixels, labels, count, dim, 10, 1.0f / 255.0f);
  /* The client holds its own copy now. */
  free(pixels);
  free(labels);
  if (rc == STARLING_OK) {
    printf("training on %zu examples (shard %u/%u), starling-client %s\n", count, shard, n, starling_client_version());
    rc = starling_client_run(client);
  }
  if (rc != STARLING_OK) {
    fprintf(stderr, "embed: %s (status %d)\n", starling_client_last_error(client), rc);
    starling_client_destroy(client);
    return 1;
  }
  starling_client_get_stats(client, &stats);
  printf(
      "rounds trained %llu, accepted %llu, rejected %llu; %llu bytes up, %llu bytes down; "
      "held round %llu; last loss %.4f\n",
      (unsigned long long)stats.rounds_trained, (unsigned long long)stats.rounds_accepted,
      (unsigned long long)stats.rounds_rejected, (unsigned long long)stats.bytes_up,
      (unsigned long long)stats.bytes_down, (unsigned long long)stats.held_round, stats.last_loss);
  starling_client_destroy(client);
  return 0;
}
