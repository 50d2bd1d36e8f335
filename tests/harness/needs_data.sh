#!/usr/bin/env bash
# needs_data.sh DATA_DIR COMMAND [ARG...]: runs COMMAND when DATA_DIR holds
# Fashion-MNIST, else says so and exits 77, which meson reports as a skipped test.
data=$1
shift
if [ ! -f "$data/train-labels-idx1-ubyte.gz" ] && [ ! -f "$data/train-labels-idx1-ubyte" ]; then
  echo "skip: no Fashion-MNIST in $data (scripts/setup installs dataset-fashion-mnist)"
  exit 77
fi
exec "$@"
