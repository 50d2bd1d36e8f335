/* embed: a C program that embeds the Starling client through starling_client.h.
 *
 *   embed HOST:PORT CERTS_DIR CLIENT_ID DATA_DIR [I/N]
 *
 * reads shard I of N of Fashion-MNIST's training set (every N-th example, starting
 * at I; default 0/10, 6,000 examples) from DATA_DIR with a small IDX reader of its
 * own, hands it to the client as bytes through the array API, joins the coordinator
 * at HOST:PORT with CERTS_DIR/ca.crt, CERTS_DIR/CLIENT_ID.crt and CLIENT_ID.key
 * (as `starling-coordinator init` writes them), trains until the coordinator says
 * training is complete, and prints the client's statistics. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "starling_client.h"

/* Reads a big-endian 32-bit integer; 0 on success. */
static int readU32(gzFile f, uint32_t* out) {
  unsigned char b[4];
  if (gzread(f, b, 4) != 4) return -1;
  *out = ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | (uint32_t)b[3];
  return 0;
}

/* Opens an IDX file (gzip-compressed or not) and checks its magic: unsigned bytes,
 * `dims` dimensions. On success returns the open file with *count = the first
 * dimension and *rowBytes = the product of the others. */
static gzFile openIdx(const char* path, uint32_t dims, uint32_t* count, size_t* rowBytes) {
  uint32_t magic, d, i;
  gzFile f = gzopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "embed: cannot open %s\n", path);
    return NULL;
  }
  if (readU32(f, &magic) != 0 || magic != (0x0800u | dims) || readU32(f, count) != 0) {
    fprintf(stderr, "embed: %s is not an IDX file of %u-dimensional unsigned bytes\n", path, (unsigned)dims);
    gzclose(f);
    return NULL;
  }
  *rowBytes = 1;
  for (i = 1; i < dims; ++i) {
    if (readU32(f, &d) != 0) {
      gzclose(f);
      return NULL;
    }
    *rowBytes *= d;
  }
  return f;
}

/* Loads the examples i with i % n == shard from the IDX pair; 0 on success.
 * *pixels and *labels are malloc'ed; the caller frees them. */
static int loadShard(const char* dir, unsigned shard, unsigned n, uint8_t** pixels, int32_t** labels, size_t* count,
                     size_t* dim) {
  char imagesPath[4096], labelsPath[4096];
  uint32_t numImages, numLabels, i;
  size_t labelBytes, kept = 0;
  unsigned char* row;
  unsigned char label;
  gzFile images, labelFile;
  snprintf(imagesPath, sizeof imagesPath, "%s/train-images-idx3-ubyte.gz", dir);
  snprintf(labelsPath, sizeof labelsPath, "%s/train-labels-idx1-ubyte.gz", dir);
  images = openIdx(imagesPath, 3, &numImages, dim);
  if (images == NULL) return -1;
  labelFile = openIdx(labelsPath, 1, &numLabels, &labelBytes);
  if (labelFile == NULL || numLabels != numImages) {
    if (labelFile != NULL) fprintf(stderr, "embed: %s and %s disagree on the count\n", imagesPath, labelsPath);
    gzclose(images);
    if (labelFile != NULL) gzclose(labelFile);
    return -1;
  }
  *count = numImages / n + 1;
  *pixels = malloc(*count * *dim);
  *labels = malloc(*count * sizeof **labels);
  row = malloc(*dim);
  for (i = 0; i < numImages && *pixels != NULL && *labels != NULL && row != NULL; ++i) {
    if (gzread(images, row, (unsigned)*dim) != (int)*dim || gzread(labelFile, &label, 1) != 1) break;
    if (i % n != shard) continue;
    memcpy(*pixels + kept * *dim, row, *dim);
    (*labels)[kept++] = label;
  }
  free(row);
  gzclose(images);
  gzclose(labelFile);
  if (i != numImages) {
    fprintf(stderr, "embed: %s is truncated (or out of memory)\n", imagesPath);
    return -1;
  }
  *count = kept;
  return 0;
}

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
