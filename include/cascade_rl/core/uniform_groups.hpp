#pragma once
// The shape of a uniform group layout (host group_layout and cuda::device_group_layout),
// by name so that the two counts cannot be swapped: uniform({.groups = 2, .size = 3}).

#include <cstddef>
#include <string>
#include <string_view>

#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

struct uniform_groups {
  std::size_t groups = 0;  // prompts
  std::size_t size = 0;    // sequences sampled per prompt, >= 1
};

namespace detail {

// The check both layouts make when they are built (host code).
inline void require_valid(const uniform_groups& shape) {
  if (shape.size == 0) fail("uniform_groups.size", "must be at least 1 (sequences per group)");
}

// The check of an argument that holds one entry per sequence of a group layout (host
// code; both layouts' require_sequences).
inline void require_one_per_sequence(std::size_t count, std::size_t sequences,
                                     std::string_view argument) {
  if (count != sequences)
    fail(argument, "has " + std::to_string(count) + " entries, but the groups hold " +
                       std::to_string(sequences) + " sequences");
}

}  // namespace detail
}  // namespace cascade_rl
