#pragma once
// The shape of a uniform group layout (host group_layout and cuda::device_group_layout),
// by name so that the two counts cannot be swapped: uniform({.groups = 2, .size = 3}).

#include <cstddef>

namespace cascade_rl {

struct uniform_groups {
  std::size_t groups = 0;  // prompts
  std::size_t size = 0;    // sequences sampled per prompt, >= 1
};

}  // namespace cascade_rl
