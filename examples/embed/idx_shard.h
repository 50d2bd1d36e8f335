/* idx_shard: one shard of Fashion-MNIST's training set from its IDX files, with a
 * small reader of the examples' own (zlib for the .gz files). Shared by embed.c and
 * background.c. */
#ifndef STARLING_EXAMPLES_IDX_SHARD_H
#define STARLING_EXAMPLES_IDX_SHARD_H

#include <stddef.h>
#include <stdint.h>

/* Loads the examples i with i % n == shard from DIR/train-images-idx3-ubyte.gz and
 * DIR/train-labels-idx1-ubyte.gz; 0 on success (else a message on standard error).
 * *pixels (count x dim bytes) and *labels are malloc'ed; the caller frees them. */
int loadShard(const char* dir, unsigned shard, unsigned n, uint8_t** pixels, int32_t** labels, size_t* count,
              size_t* dim);

#endif
