#pragma once
// Log softmax and entropy of one row in double, the slow obvious way: the reference the
// host and portable log-probs tests compare with.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace cascade_rl::testing {

inline void reference_row(const std::vector<double>& x, std::int64_t label, double& logp,
                          double& entropy) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : x) m = std::max(m, v);
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  const double lse = m + std::log(s);
  entropy = 0;
  for (double v : x)
    if (v != -std::numeric_limits<double>::infinity()) entropy -= std::exp(v - lse) * (v - lse);
  logp = x[static_cast<std::size_t>(label)] - lse;
}

}  // namespace cascade_rl::testing
