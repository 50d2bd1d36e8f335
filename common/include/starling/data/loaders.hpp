#pragma once
// Loaders: files on disk -> Dataset.
//
// Every loader returns a Result: a missing file is kNotFound (kIo when it exists but
// cannot be read), a file that does not parse is kMalformed (kUnsupported for a valid
// IDX element type other than unsigned bytes, kOutOfRange for sizes that overflow).
// Messages start with the path as given and then name the place: "path:LINE: ..." for
// the text formats (lines count from 1, header and blank lines included) and
// "path: offset N: ..." for IDX (N is a byte offset into the decompressed contents).
// No loader reads past what the file holds, whatever its header claims.
//
// Every loader reads gzip-compressed files too: zlib recognises the gzip magic bytes
// (1f 8b) and otherwise reads the file as it is.
//
// The loaders keep no state; any thread may call them.

#include <cstddef>
#include <string>

#include "starling/data/dataset.hpp"
#include "starling/util/status.hpp"

namespace starling::data {

// IDX (LeCun's MNIST format): an images file of unsigned bytes with dimensions
// N x d1 x ... and a labels file of N unsigned bytes. Images stay bytes (scale 1/255);
// shape is {1, d1, d2} for the usual 3-dimensional files, {d1, ...} otherwise.
// numClasses = 0 infers it as the largest label + 1; otherwise every label must be
// below numClasses.
Result<Dataset> loadIdx(const std::string& imagesPath, const std::string& labelsPath, int numClasses = 0);

struct CsvOptions {
  // The first line names the columns and is skipped.
  bool hasHeader = false;
  // Which field holds the label, counting from 0; negative counts from the end
  // (-1 is the last field). Every other field is a feature, in file order.
  int labelColumn = 0;
  // 0 infers the number of classes as the largest label + 1.
  int numClasses = 0;
  // Fields are separated by this character; spaces and tabs around a field are ignored.
  char delimiter = ',';
};

// CSV of numbers, one example per line: an integral label >= 0 ("3" or "3.0") and
// finite features. Every row has as many fields as the first data row; blank lines
// are skipped; quoting is not supported. Features are held as floats.
Result<Dataset> loadCsv(const std::string& path, const CsvOptions& options = {});

// How the label at the start of a LIBSVM line maps to a class.
enum class LibsvmLabels {
  // -1/+1 when every label is -1 or +1 and some label is -1 (-1 -> 0, +1 -> 1);
  // otherwise 0-based when some label is 0; otherwise 1-based (label - 1).
  kAuto,
  kZeroBased,  // class = label
  kOneBased,   // class = label - 1
  kSigned,     // -1 -> 0, +1 -> 1; any other label is an error
};

struct LibsvmOptions {
  // Number of features; 0 infers the largest index in the file. Indices are 1-based,
  // as LIBSVM writes them, so index i is feature i - 1.
  std::size_t featureDim = 0;
  // 0 infers the number of classes as the largest class + 1.
  int numClasses = 0;
  LibsvmLabels labels = LibsvmLabels::kAuto;
  // Each example's group (Dataset::groups(), partition "by-column:NAME"): with NAME set,
  // every line carries the token "NAME:VALUE" right after its label, VALUE any text
  // without blanks (SVMlight's "qid:3" is NAME "qid"; "sender:example.com" another);
  // group ids in order of first appearance. "" = none (such a token is then an error).
  std::string groupName;
};

// LIBSVM / SVMlight: "label index:value index:value ... [# comment]", indices strictly
// increasing. The Dataset is sparse (CSR, Dataset::fromSparse): 8 bytes per non-zero
// plus 12 per example, whatever featureDim (at most 2^32; a larger index is
// kOutOfRange). The file is read in 1 MiB blocks, so the memory follows its
// non-zeros, not its size.
Result<Dataset> loadLibsvm(const std::string& path, const LibsvmOptions& options = {});

// Fashion-MNIST as its authors distribute it: a directory with
// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte, each optionally with ".gz". 10 classes, shape {1, 28, 28}.
struct FashionMnist {
  Dataset train;  // 60,000 examples
  Dataset test;   // 10,000 examples
};

enum class FashionMnistSplit { kTrain, kTest };

// Where Debian's dataset-fashion-mnist package puts the files:
// /usr/share/datasets/fashion-mnist.
std::string defaultFashionMnistDir();

Result<FashionMnist> loadFashionMnist(const std::string& dir = defaultFashionMnistDir());
// One split only (the test split alone reads a sixth of the data).
Result<Dataset> loadFashionMnistSplit(const std::string& dir, FashionMnistSplit split);

}  // namespace starling::data
