// Fuzz targets: the dataset loaders (IDX, CSV, LIBSVM, NPY), which read files a user
// points the client at. Built four times with STARLING_FUZZ_LOADER set to 1 (IDX),
// 2 (CSV), 3 (LIBSVM) or 4 (NPY, through loadData). The first input byte picks loader options; the rest is the
// file. For IDX, the next two bytes give the length of the labels file, which
// follows; the images file is what remains. What a loader accepts must be a
// consistent Dataset.

#include "starling/data/load.hpp"
#include "starling/data/loaders.hpp"

#include "fuzz_support.hpp"

#ifndef STARLING_FUZZ_LOADER
#error "define STARLING_FUZZ_LOADER (1 = IDX, 2 = CSV, 3 = LIBSVM, 4 = NPY)"
#endif

namespace {

using namespace starling;
using starling::fuzz::TempFile;

void check(const Result<data::Dataset>& r) {
  if (!r) return;
  const data::Dataset& d = *r;
  STARLING_FUZZ_CHECK(d.numClasses() >= 1);
  for (std::size_t i = 0; i < d.size(); ++i)
    STARLING_FUZZ_CHECK(d.label(i) >= 0 && d.label(i) < d.numClasses());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t opt = data[0];
  ++data;
  --size;
#if STARLING_FUZZ_LOADER == 1
  if (size < 2) return 0;
  size_t labelBytes = data[0] | size_t(data[1]) << 8;
  data += 2;
  size -= 2;
  if (labelBytes > size) labelBytes = size;
  TempFile labels(data, labelBytes);
  TempFile images(data + labelBytes, size - labelBytes);
  check(data::loadIdx(images.path(), labels.path(), opt % 4 == 0 ? 0 : opt % 16));
#elif STARLING_FUZZ_LOADER == 2
  TempFile file(data, size, ".csv");
  data::CsvOptions o;
  o.hasHeader = opt & 1;
  o.labelColumn = (opt & 2) ? -1 : ((opt >> 2) & 3);
  o.numClasses = (opt & 16) ? 10 : 0;
  o.delimiter = (opt & 32) ? ';' : ',';
  check(data::loadCsv(file.path(), o));
#elif STARLING_FUZZ_LOADER == 3
  TempFile file(data, size, ".svm");
  data::LibsvmOptions o;
  o.labels = static_cast<data::LibsvmLabels>(opt & 3);
  o.numClasses = (opt & 4) ? 10 : 0;
  o.featureDim = (opt & 8) ? 64 : 0;
  check(data::loadLibsvm(file.path(), o));
#elif STARLING_FUZZ_LOADER == 4
  TempFile file(data, size, ".npy");
  data::DataOptions o;
  o.task = static_cast<data::TaskKind>(opt % 3);
  o.numClasses = (opt & 4) ? 10 : 0;
  if (opt & 8) o.label = "0";
  check(data::loadData(file.path(), o));
#endif
  return 0;
}
