#pragma once
// Ragged token layout, CSR style (like flash-attention's cu_seqlens): sequence i owns
// tokens [offsets[i], offsets[i+1]). An optional per-token loss mask excludes tokens
// (prompt, tool-observation spans, truncated tails): a token counts when its mask
// byte is non-zero. A padded [N, T] batch needs no offsets array:
// token_layout::padded(N, T, mask) computes offsets[i] = i * T.
//
// A layout is a view: it keeps spans of the offsets and the mask, never a copy. It
// therefore refuses, at compile time, to be built from a temporary container that
// would be destroyed at the end of the statement (`token_layout(padded_offsets(4, 8))`
// used to compile and read freed memory); an lvalue container or a span (a view the
// caller vouches for) binds.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/core/borrowed.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

class token_layout {
 public:
  // Validates: at least one offset, offsets[0] == 0, non-decreasing offsets, and a
  // mask that is empty or holds exactly offsets.back() entries.
  explicit token_layout(std::span<const std::int64_t> offsets,
                        std::span<const std::uint8_t> mask = {})
      : offsets_(offsets), mask_(mask) {
    validate();
  }

  // Temporaries the layout would dangle on are refused (deleted, so the misuse does
  // not compile): keep the offsets and mask in a variable, or use padded().
  template <detail::temporary_container Offsets>
  explicit token_layout(Offsets&& offsets, std::span<const std::uint8_t> mask = {}) = delete;
  template <detail::temporary_container Mask>
  token_layout(std::span<const std::int64_t> offsets, Mask&& mask) = delete;

  // A padded [sequences, width] batch: sequence i owns tokens [i * width, (i + 1) *
  // width). Validates that the mask is empty or holds sequences * width entries.
  [[nodiscard]] static token_layout padded(std::size_t sequences, std::size_t width,
                                           std::span<const std::uint8_t> mask = {}) {
    token_layout layout;
    layout.sequences_ = sequences;
    layout.width_ = width;
    layout.mask_ = mask;
    layout.validate_mask();
    return layout;
  }
  template <detail::temporary_container Mask>
  static token_layout padded(std::size_t sequences, std::size_t width, Mask&& mask) = delete;

  [[nodiscard]] std::size_t sequences() const { return sequences_; }
  [[nodiscard]] std::size_t tokens() const { return begin(sequences_); }
  [[nodiscard]] std::size_t begin(std::size_t sequence) const {
    return is_padded() ? sequence * width_ : static_cast<std::size_t>(offsets_[sequence]);
  }
  [[nodiscard]] std::size_t end(std::size_t sequence) const { return begin(sequence + 1); }
  [[nodiscard]] std::size_t length(std::size_t sequence) const {
    return end(sequence) - begin(sequence);
  }
  [[nodiscard]] bool is_padded() const { return offsets_.empty(); }
  [[nodiscard]] bool has_mask() const { return !mask_.empty(); }
  [[nodiscard]] bool valid(std::size_t token) const { return mask_.empty() || mask_[token] != 0; }

  // Number of tokens of `sequence` that the mask keeps.
  [[nodiscard]] std::size_t valid_tokens(std::size_t sequence) const {
    if (mask_.empty()) return length(sequence);
    std::size_t count = 0;
    for (std::size_t t = begin(sequence); t < end(sequence); ++t) count += mask_[t] != 0;
    return count;
  }

  [[nodiscard]] std::span<const std::uint8_t> mask() const { return mask_; }
  // The same sequences with another mask (one byte per token, or empty): a view like this
  // one, so `mask` must outlive it.
  [[nodiscard]] token_layout with_mask(std::span<const std::uint8_t> mask) const {
    token_layout layout = *this;
    layout.mask_ = mask;
    layout.validate_mask();
    return layout;
  }

 private:
  token_layout() = default;

  void validate() {
    if (offsets_.empty()) detail::fail("offsets", "must hold at least one entry (offsets[0] = 0)");
    if (offsets_[0] != 0)
      detail::fail_at("offsets", 0, "must be 0, got " + std::to_string(offsets_[0]));
    for (std::size_t i = 1; i < offsets_.size(); ++i) {
      if (offsets_[i] < offsets_[i - 1])
        detail::fail_at("offsets", i,
                        "decreases: " + std::to_string(offsets_[i]) + " after " +
                            std::to_string(offsets_[i - 1]));
    }
    sequences_ = offsets_.size() - 1;
    validate_mask();
  }

  void validate_mask() const {
    if (!mask_.empty() && mask_.size() != tokens())
      detail::fail("mask", "has " + std::to_string(mask_.size()) + " entries, expected " +
                               std::to_string(tokens()) + " (one per token)");
  }

  std::span<const std::int64_t> offsets_;  // empty for a padded layout
  std::span<const std::uint8_t> mask_;
  std::size_t sequences_ = 0;
  std::size_t width_ = 0;  // padded layouts only
};

// Offsets of a padded batch of `sequences` rows of `width` tokens: {0, T, 2T, ...}, for
// code that needs the array itself (a device copy); keep it in a variable while a
// token_layout views it, or use token_layout::padded.
[[nodiscard]] inline std::vector<std::int64_t> padded_offsets(std::size_t sequences,
                                                              std::size_t width) {
  std::vector<std::int64_t> offsets(sequences + 1);
  for (std::size_t i = 0; i <= sequences; ++i)
    offsets[i] = static_cast<std::int64_t>(i * width);
  return offsets;
}

}  // namespace cascade_rl
