/* idx_shard.c: see idx_shard.h. */
#include "idx_shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

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
    fprintf(stderr, "idx: cannot open %s\n", path);
    return NULL;
  }
  if (readU32(f, &magic) != 0 || magic != (0x0800u | dims) || readU32(f, count) != 0) {
    fprintf(stderr, "idx: %s is not an IDX file of %u-dimensional unsigned bytes\n", path, (unsigned)dims);
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
int loadShard(const char* dir, unsigned shard, unsigned n, uint8_t** pixels, int32_t** labels, size_t* count,
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
    if (labelFile != NULL) fprintf(stderr, "idx: %s and %s disagree on the count\n", imagesPath, labelsPath);
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
    fprintf(stderr, "idx: %s is truncated (or out of memory)\n", imagesPath);
    return -1;
  }
  *count = kept;
  return 0;
}
