#pragma once
// Payload <-> the wire's CompressedTensor table (common/wire/starling.fbs).
// Lives in its own library (compression_wire_dep) so that the codec itself stays
// free of Flatbuffers. Thread-safe on distinct arguments.

#include <flatbuffers/flatbuffers.h>

#include "starling/compression/payload.hpp"
#include "starling/util/status.hpp"

#include "starling_generated.h"

namespace starling::compression {

// Writes the payload as a CompressedTensor into builder; the caller finishes the
// enclosing message.
flatbuffers::Offset<wire::fb::CompressedTensor> toWire(flatbuffers::FlatBufferBuilder& builder, const Payload& payload);
// The same from a view: its bytes go straight into the builder.
flatbuffers::Offset<wire::fb::CompressedTensor> toWire(flatbuffers::FlatBufferBuilder& builder,
                                                       const PayloadView& payload);

// Copies a verified table into a Payload. Absent vectors become empty; enum values
// are copied as they are (decode() rejects unknown ones). A null table is kMalformed.
Result<Payload> fromWire(const wire::fb::CompressedTensor* tensor);

// The same fields as fromWire, without copying: the view points into the verified
// table's buffer and is valid while that buffer is. decode() takes it directly.
Result<PayloadView> viewWire(const wire::fb::CompressedTensor* tensor);

}  // namespace starling::compression
