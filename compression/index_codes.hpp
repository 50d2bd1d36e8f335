#pragma once
// Private: the index formats of the payload codec for top-k tensors (encoding.hpp has
// their layouts): delta + LEB128 varint, bitmap, Rice-coded gaps, and relative to a
// reference list. decodeIndices treats the payload as hostile, as decode() does
// (payload.hpp): it reads nothing out of bounds and returns kMalformed naming what is
// wrong.

#include <cstdint>
#include <span>
#include <vector>

#include "starling/compression/compressed.hpp"
#include "starling/compression/payload.hpp"
#include "starling/util/status.hpp"

namespace starling::compression::detail {

// Codes indices (increasing, below count, else kInvalidArgument) as kDeltaVarint,
// kBitmap or kRice over a tensor of count elements, whichever is smallest: sets format
// and overwrites out. The row sets (row_set.hpp) use it as top-k does.
Status encodeIndexList(const std::vector<std::uint32_t>& indices, std::uint32_t count, IndexFormat& format,
                       std::vector<std::uint8_t>& out);

// encodeIndexList() of c.indices over c.count: sets out.indexFormat and out.indices.
Status encodeIndices(const Compressed& c, Payload& out);

// IndexFormat::kRelative (encoding.hpp has the layout): the kept elements of the
// reference as a bitmap over its positions or as Rice-coded positions, whichever is
// smaller, then the other indices as Rice-coded gaps over the tensor. kInvalidArgument
// for a reference that is not increasing below count. out is overwritten.
Status putRelative(const std::vector<std::uint32_t>& indices, std::uint32_t count,
                   std::span<const std::uint32_t> reference, std::vector<std::uint8_t>& out);

// The p.selected indices of p in any top-k index format into out.
// reference: the list kRelative indices are coded against (null: none held).
Status decodeIndices(const PayloadView& p, const std::span<const std::uint32_t>* reference,
                     std::vector<std::uint32_t>& out);

}  // namespace starling::compression::detail
