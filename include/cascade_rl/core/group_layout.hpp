#pragma once
// Group layout: the sequences sampled for one prompt are contiguous. Either every
// group has the same size G (uniform), or group g owns sequences
// [offsets[g], offsets[g+1]) (after filtering, or with partial groups). Like
// token_layout it views the offsets and refuses to be built from a temporary.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "cascade_rl/core/borrowed.hpp"
#include "cascade_rl/core/error.hpp"
#include "cascade_rl/core/uniform_groups.hpp"

namespace cascade_rl {

class group_layout {
 public:
  // shape.groups groups of shape.size sequences each.
  [[nodiscard]] static group_layout uniform(const uniform_groups& shape) {
    detail::require_valid(shape);
    group_layout layout;
    layout.group_count_ = shape.groups;
    layout.group_size_ = shape.size;
    return layout;
  }

  // Validates: offsets[0] == 0 and strictly increasing offsets (no empty group).
  explicit group_layout(std::span<const std::int64_t> offsets) : offsets_(offsets) {
    if (offsets.empty())
      detail::fail("group_offsets", "must hold at least one entry (group_offsets[0] = 0)");
    if (offsets[0] != 0)
      detail::fail_at("group_offsets", 0, "must be 0, got " + std::to_string(offsets[0]));
    for (std::size_t g = 1; g < offsets.size(); ++g) {
      if (offsets[g] < offsets[g - 1])
        detail::fail_at("group_offsets", g,
                        "decreases: " + std::to_string(offsets[g]) + " after " +
                            std::to_string(offsets[g - 1]));
      if (offsets[g] == offsets[g - 1])
        detail::fail_at("group_offsets", g, "closes an empty group (group " +
                                                std::to_string(g - 1) + " has no sequence)");
    }
    group_count_ = offsets.size() - 1;
  }
  // A temporary would be destroyed at the end of the statement while the layout views
  // it: refused at compile time (keep the offsets in a variable).
  template <detail::temporary_container Offsets>
  explicit group_layout(Offsets&& offsets) = delete;

  [[nodiscard]] std::size_t groups() const { return group_count_; }
  [[nodiscard]] std::size_t sequences() const {
    return offsets_.empty() ? group_count_ * group_size_
                            : static_cast<std::size_t>(offsets_.back());
  }
  [[nodiscard]] std::size_t begin(std::size_t group) const {
    return offsets_.empty() ? group * group_size_ : static_cast<std::size_t>(offsets_[group]);
  }
  [[nodiscard]] std::size_t end(std::size_t group) const {
    return offsets_.empty() ? (group + 1) * group_size_
                            : static_cast<std::size_t>(offsets_[group + 1]);
  }
  [[nodiscard]] std::size_t size(std::size_t group) const { return end(group) - begin(group); }
  [[nodiscard]] bool is_uniform() const { return offsets_.empty(); }

  // Throws unless the layout covers exactly `count` sequences held by `argument`.
  void require_sequences(std::size_t count, std::string_view argument) const {
    detail::require_one_per_sequence(count, sequences(), argument);
  }

 private:
  group_layout() = default;

  std::span<const std::int64_t> offsets_{};
  std::size_t group_count_ = 0;
  std::size_t group_size_ = 0;
};

}  // namespace cascade_rl
