// Layout validation: arbitrary token offsets, masks and group offsets. token_layout and
// group_layout must accept or refuse with cascade_rl::error, and every accessor of an
// accepted layout must stay in bounds.
#include <cstdint>
#include <vector>

#include "cascade_rl/cascade_rl.hpp"
#include "fuzz_input.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cascade_rl::fuzz::input in{data, size};
  const std::size_t n_offsets = in.byte() % 34, n_groups = in.byte() % 18;
  const std::uint8_t mask_mode = in.byte();
  std::vector<std::int64_t> offsets, group_offsets;
  for (std::size_t i = 0; i < n_offsets; ++i) offsets.push_back(static_cast<std::int64_t>(in.take<std::int16_t>()));
  for (std::size_t i = 0; i < n_groups; ++i) group_offsets.push_back(static_cast<std::int64_t>(in.take<std::int8_t>()));
  std::vector<std::uint8_t> mask;
  const std::size_t mask_size = mask_mode % 3 == 0 ? 0 : mask_mode % 3 == 1 ? (offsets.empty() ? 0 : static_cast<std::size_t>(std::max<std::int64_t>(offsets.back(), 0)) % 70000) : in.byte();
  for (std::size_t i = 0; i < mask_size; ++i) mask.push_back(static_cast<std::uint8_t>(i * 131 % 3));
  try {
    const cascade_rl::token_layout layout(offsets, mask);
    std::size_t total = 0;
    for (std::size_t s = 0; s < layout.sequences(); ++s) {
      total += layout.valid_tokens(s);
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) (void)layout.valid(t);
    }
    if (total > layout.tokens()) __builtin_trap();
  } catch (const cascade_rl::error&) {
  }
  try {
    const cascade_rl::group_layout groups(group_offsets);
    std::size_t total = 0;
    for (std::size_t g = 0; g < groups.groups(); ++g) total += groups.end(g) - groups.begin(g);
    if (total != groups.sequences()) __builtin_trap();
  } catch (const cascade_rl::error&) {
  }
  try {
    const auto groups = cascade_rl::group_layout::uniform({.groups = n_offsets, .size = n_groups});
    (void)groups.sequences();
  } catch (const cascade_rl::error&) {
  }
  return 0;
}
