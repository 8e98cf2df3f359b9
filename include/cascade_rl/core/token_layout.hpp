#pragma once
// Ragged token layout, CSR style (like flash-attention's cu_seqlens): sequence i owns
// tokens [offsets[i], offsets[i+1]). An optional per-token loss mask excludes tokens
// (prompt, tool-observation spans, truncated tails): a token counts when its mask
// byte is non-zero. A padded [N, T] batch is offsets[i] = i * T with a mask.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

class token_layout {
 public:
  // Validates: at least one offset, offsets[0] == 0, non-decreasing offsets, and a
  // mask that is empty or holds exactly offsets.back() entries.
  explicit token_layout(std::span<const std::int64_t> offsets,
                        std::span<const std::uint8_t> mask = {})
      : offsets_(offsets), mask_(mask) {
    if (offsets.empty()) detail::fail("offsets", "must hold at least one entry (offsets[0] = 0)");
    if (offsets[0] != 0)
      detail::fail_at("offsets", 0, "must be 0, got " + std::to_string(offsets[0]));
    for (std::size_t i = 1; i < offsets.size(); ++i) {
      if (offsets[i] < offsets[i - 1])
        detail::fail_at("offsets", i,
                        "decreases: " + std::to_string(offsets[i]) + " after " +
                            std::to_string(offsets[i - 1]));
    }
    if (!mask.empty() && mask.size() != tokens())
      detail::fail("mask", "has " + std::to_string(mask.size()) + " entries, expected " +
                               std::to_string(tokens()) + " (one per token, offsets.back())");
  }

  [[nodiscard]] std::size_t sequences() const { return offsets_.size() - 1; }
  [[nodiscard]] std::size_t tokens() const { return static_cast<std::size_t>(offsets_.back()); }
  [[nodiscard]] std::size_t begin(std::size_t sequence) const {
    return static_cast<std::size_t>(offsets_[sequence]);
  }
  [[nodiscard]] std::size_t end(std::size_t sequence) const {
    return static_cast<std::size_t>(offsets_[sequence + 1]);
  }
  [[nodiscard]] std::size_t length(std::size_t sequence) const {
    return end(sequence) - begin(sequence);
  }
  [[nodiscard]] bool has_mask() const { return !mask_.empty(); }
  [[nodiscard]] bool valid(std::size_t token) const { return mask_.empty() || mask_[token] != 0; }

  // Number of tokens of `sequence` that the mask keeps.
  [[nodiscard]] std::size_t valid_tokens(std::size_t sequence) const {
    if (mask_.empty()) return length(sequence);
    std::size_t count = 0;
    for (std::size_t t = begin(sequence); t < end(sequence); ++t) count += mask_[t] != 0;
    return count;
  }

  [[nodiscard]] std::span<const std::int64_t> offsets() const { return offsets_; }
  [[nodiscard]] std::span<const std::uint8_t> mask() const { return mask_; }

 private:
  std::span<const std::int64_t> offsets_;
  std::span<const std::uint8_t> mask_;
};

// Offsets of a padded batch of `sequences` rows of `width` tokens: {0, T, 2T, ...}.
[[nodiscard]] inline std::vector<std::int64_t> padded_offsets(std::size_t sequences,
                                                              std::size_t width) {
  std::vector<std::int64_t> offsets(sequences + 1);
  for (std::size_t i = 0; i <= sequences; ++i)
    offsets[i] = static_cast<std::int64_t>(i * width);
  return offsets;
}

}  // namespace cascade_rl
