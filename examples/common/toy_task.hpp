#pragma once
// The toy task and tabular parameters shared by examples/cascade_quickstart and
// examples/cascade_data_parallel: two domains of prompt ids, answers of one or three
// tokens, and a logits table that scores tokens (so a snapshot can teach in MOPD).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <cascade_rl/cascade.hpp>

namespace toy {

namespace cr = cascade_rl;

constexpr int vocabulary = 8, max_length = 4, rows = 4;  // token 0 ends a response

// The answer to prompt id k: one token for ids 0-3, three tokens for ids 4-7.
std::vector<int> answer(std::int64_t k) {
  std::vector<int> a;
  for (int t = 0; t < (k < 4 ? 1 : 3); ++t) a.push_back(1 + static_cast<int>(3 * k + 2 * t) % 7);
  a.push_back(0);
  return a;
}

// Reward: the fraction of answer positions right. Called from worker threads.
float reward(const cr::response_view& r) {
  const auto a = answer(r.input.id);
  float right = 0;
  for (std::size_t t = 0; t < a.size() && t < r.tokens.size(); ++t) right += r.tokens[t] == a[t];
  return right / static_cast<float>(a.size());
}

// Parameters: logits[row = id % rows][position][token]. Scores tokens, so it can teach.
struct table {
  std::vector<double> logits = std::vector<double>(rows * max_length * vocabulary, 0.0);
  std::vector<double> p(std::int64_t id, std::size_t position) const {
    const double* z = &logits[((id % rows) * max_length + position) * vocabulary];
    std::vector<double> out(z, z + vocabulary);
    const double top = *std::max_element(out.begin(), out.end());
    double sum = 0;
    for (double& x : out) sum += x = std::exp(x - top);
    for (double& x : out) x /= sum;
    return out;
  }
  void log_probs(const cr::rollout_batch& b, std::span<float> out) const {
    for (std::size_t i = 0; i < b.response_count(); ++i)
      for (std::size_t t = 0; t < b.length(i); ++t)
        out[b.token_offsets[i] + t] = static_cast<float>(std::log(p(b.prompts[b.group_of(i)].id, t)[b.response_tokens(i)[t]]));
  }
};

}  // namespace toy
