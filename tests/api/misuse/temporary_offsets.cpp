// A token layout built from a temporary offsets vector would dangle: a deleted constructor.
// expect: use of deleted function|call to deleted constructor
#include <cstdint>
#include <vector>

#include "cascade_rl/core/token_layout.hpp"

std::vector<std::int64_t> offsets_of_two_sequences() { return {0, 2, 5}; }

std::size_t tokens() {
#if defined(CASCADE_RL_CORRECT_USE)
  const std::vector<std::int64_t> offsets = offsets_of_two_sequences();
  const cascade_rl::token_layout layout(offsets);
#else
  const cascade_rl::token_layout layout(offsets_of_two_sequences());
#endif
  return layout.tokens();
}
