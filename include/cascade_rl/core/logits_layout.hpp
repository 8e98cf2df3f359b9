#pragma once
// The shape of a logits buffer [rows, row_stride]: one row per label, the first `vocab`
// entries of each row its logits, row r starting at entry r * row_stride. Padded rows
// (row_stride > vocab: a vocabulary padded to a multiple of 64 or 128) need no copy.
// By name, so the two counts cannot be swapped: `{.vocab = 32000}` for unpadded rows,
// `{.vocab = 32000, .row_stride = 32064}` for padded ones.

#include <cstddef>

namespace cascade_rl {

struct logits_layout {
  std::size_t vocab = 0;
  std::size_t row_stride = 0;  // 0: rows of exactly vocab entries

  [[nodiscard]] constexpr std::size_t stride() const {
    return row_stride == 0 ? vocab : row_stride;
  }
};

}  // namespace cascade_rl
