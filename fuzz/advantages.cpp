// GRPO / Dr. GRPO and RLOO advantages on arbitrary floats (NaN, inf, denormals, huge),
// group shapes and options, sequential and parallel: refuse with cascade_rl::error or
// produce finite advantages (NaN/inf only where a non-finite reward was zero-grouped is
// not allowed either), identical across executors.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cascade_rl/cascade_rl.hpp"
#include "fuzz_input.hpp"

namespace cr = cascade_rl;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  cr::fuzz::input in{data, size};
  const std::uint8_t bits = in.byte(), bits2 = in.byte();
  const std::size_t group_size = in.byte() % 9;
  const std::size_t n = in.byte() % 65;
  std::vector<float> rewards;
  for (std::size_t i = 0; i < n; ++i) rewards.push_back(in.take<float>());
  const double eps_choices[] = {1e-6, 0.0, 1e-8, -1.0, 1e300, std::nan("")};
  const cr::grpo_options o{.scale_by_std = (bits & 1) != 0,
                           .epsilon = eps_choices[(bits >> 1) % 6],
                           .epsilon_at = (bits & 16) ? cr::epsilon_placement::inside_sqrt : cr::epsilon_placement::added_to_std,
                           .estimator = (bits & 32) ? cr::std_estimator::biased : cr::std_estimator::unbiased,
                           .singleton = static_cast<cr::singleton_rule>(bits2 % 3),
                           .nonfinite = static_cast<cr::nonfinite_rule>((bits2 >> 2) % 2),
                           .accumulation = static_cast<cr::mean_accumulation>((bits2 >> 3) % 3)};
  const std::size_t out_size = (bits2 & 64) ? n + 1 : n;
  try {
    const auto groups =
        group_size == 0 || n % group_size != 0 || (bits2 & 128)
            ? cr::group_layout::uniform(
                  {.groups = group_size == 0 ? 0 : n / std::max<std::size_t>(group_size, 1),
                   .size = std::max<std::size_t>(group_size, 1)})
            : cr::group_layout::uniform({.groups = n / group_size, .size = group_size});
    std::vector<float> a(out_size), b(out_size);
    cr::grpo_advantages(cr::exec::seq, groups, rewards, a, o);
    cr::grpo_advantages(cr::exec::par, groups, rewards, b, o);
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) __builtin_trap();
  } catch (const cr::error&) {
  }
  try {
    const auto groups = cr::group_layout::uniform({.groups = group_size == 0 ? 0 : n / group_size,
                                                   .size = std::max<std::size_t>(group_size, 1)});
    std::vector<float> a(out_size);
    cr::rloo_advantages(
        cr::exec::seq, groups, rewards, a,
        {.singleton = o.singleton, .nonfinite = o.nonfinite, .accumulation = o.accumulation});
  } catch (const cr::error&) {
  }
  return 0;
}
