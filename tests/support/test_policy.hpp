#pragma once
// A small deterministic policy for the engine's tests: an autoregressive model whose
// logits are a table indexed by (slot, position), slot = prompt.id % slots, trained
// with Adam from dL/dlogp. Every random draw comes from the request's seed, and the
// snapshot holds the parameters and the Adam state, so runs are reproducible bit for
// bit. It records the calls it receives, for tests of what a stage asked for.
//
// The task (exact_answer_reward): prompt k must be answered with answer_for(k) and then
// end-of-sequence (token 0); the reward is the fraction of positions right. Prompts
// whose ids share a slot but not an answer interfere: training one hurts the other,
// which gives the forgetting matrix something to see.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <vector>

#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/rollout_batch.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl::testing {

inline constexpr int test_vocabulary = 8;  // token 0 is end-of-sequence
inline constexpr int test_max_length = 6;

inline std::vector<std::int32_t> answer_for(std::int64_t id) {
  std::vector<std::int32_t> answer;
  const auto k = static_cast<int>(id);
  for (int t = 0; t < 1 + k % 3; ++t) answer.push_back(1 + (3 * k + 2 * t) % (test_vocabulary - 1));
  answer.push_back(0);
  return answer;
}

// Fraction of answer positions the response gets right.
struct exact_answer_reward {
  float operator()(const response_view& r) const {
    const auto answer = answer_for(r.input.id);
    int right = 0;
    for (std::size_t t = 0; t < answer.size() && t < r.tokens.size(); ++t) right += r.tokens[t] == answer[t];
    return static_cast<float>(right) / static_cast<float>(answer.size());
  }
};

// The parameters: scores tokens too, so a snapshot serves as a MOPD teacher.
struct tabular_snapshot {
  int slots = 8;
  std::vector<double> logits, m, v;
  std::int64_t adam_steps = 0;

  bool operator==(const tabular_snapshot&) const = default;

  [[nodiscard]] std::size_t row(std::int64_t id, std::size_t position) const {
    return (static_cast<std::size_t>(id % slots) * test_max_length + position) * test_vocabulary;
  }
  [[nodiscard]] std::vector<double> softmax(std::int64_t id, std::size_t position, double temperature = 1.0) const {
    std::vector<double> p(test_vocabulary);
    const double* z = &logits[row(id, position)];
    const double top = *std::max_element(z, z + test_vocabulary);
    double sum = 0.0;
    for (int k = 0; k < test_vocabulary; ++k) sum += p[k] = std::exp((z[k] - top) / temperature);
    for (double& x : p) x /= sum;
    return p;
  }
  void log_probs(const rollout_batch& batch, std::span<float> out) const {
    detail::require_size(out.size(), batch.token_count(), "out", "one per token");
    for (std::size_t i = 0; i < batch.response_count(); ++i) {
      const std::int64_t id = batch.prompts[batch.group_of(i)].id;
      const auto first = static_cast<std::size_t>(batch.token_offsets[i]);
      for (std::size_t t = first; t < static_cast<std::size_t>(batch.token_offsets[i + 1]); ++t)
        out[t] = static_cast<float>(std::log(softmax(id, t - first)[static_cast<std::size_t>(batch.tokens[t])]));
    }
  }
};

struct generate_call {
  std::size_t prompts = 0;
  generation_request request;
};
struct update_call {
  std::size_t prompts = 0;
  std::size_t responses = 0;
  std::size_t tokens = 0;
  double lr = 0.0;
  double dlogp_sum = 0.0;
};

class tabular_policy {
 public:
  using snapshot_type = tabular_snapshot;

  explicit tabular_policy(int slots = 8) {
    state_.slots = slots;
    const std::size_t n = static_cast<std::size_t>(slots) * test_max_length * test_vocabulary;
    state_.logits.assign(n, 0.0);
    state_.m.assign(n, 0.0);
    state_.v.assign(n, 0.0);
  }

  rollout_batch generate(std::span<const prompt> prompts, const generation_request& request) {
    generate_calls.push_back({prompts.size(), request});
    rng_type rng(request.seed);
    const auto limit = static_cast<std::size_t>(
        std::min<std::int64_t>(request.sampling.max_response_length, test_max_length));
    rollout_batch batch;
    for (const prompt& p : prompts) {
      batch.add_prompt(p);
      for (std::size_t g = 0; g < request.group_size; ++g) {
        std::vector<std::int32_t> tokens;
        std::vector<float> logps;
        finish_reason finish = finish_reason::truncated;
        for (std::size_t position = 0; position < limit; ++position) {
          const auto probs = state_.softmax(p.id, position);
          int token = 0;
          if (request.sampling.temperature == 0.0) {
            token = static_cast<int>(std::max_element(probs.begin(), probs.end()) - probs.begin());
          } else {
            const auto tempered = state_.softmax(p.id, position, request.sampling.temperature);
            double u = detail::uniform01(rng);
            token = test_vocabulary - 1;
            for (int k = 0; k < test_vocabulary; ++k) {
              if (u < tempered[k]) {
                token = k;
                break;
              }
              u -= tempered[k];
            }
          }
          tokens.push_back(token);
          logps.push_back(static_cast<float>(std::log(probs[static_cast<std::size_t>(token)])));
          if (token == 0) {
            finish = finish_reason::stopped;
            break;
          }
        }
        batch.add_response(tokens, logps, finish);
      }
    }
    return batch;
  }

  void log_probs(const rollout_batch& batch, std::span<float> out) const { state_.log_probs(batch, out); }

  // dL/dlogits = sum_t dL/dlogp_t * (onehot(y_t) - softmax), then one Adam step.
  void apply_gradient(const rollout_batch& batch, std::span<const float> dlogp, double lr) {
    detail::require_size(dlogp.size(), batch.token_count(), "dlogp", "one per token");
    update_call call{batch.prompt_count(), batch.response_count(), batch.token_count(), lr, 0.0};
    std::vector<double> grad(state_.logits.size(), 0.0);
    for (std::size_t i = 0; i < batch.response_count(); ++i) {
      const std::int64_t id = batch.prompts[batch.group_of(i)].id;
      const auto first = static_cast<std::size_t>(batch.token_offsets[i]);
      for (std::size_t t = first; t < static_cast<std::size_t>(batch.token_offsets[i + 1]); ++t) {
        call.dlogp_sum += dlogp[t];
        const auto p = state_.softmax(id, t - first);
        double* g = &grad[state_.row(id, t - first)];
        for (int k = 0; k < test_vocabulary; ++k) g[k] += dlogp[t] * ((k == batch.tokens[t]) - p[k]);
      }
    }
    update_calls.push_back(call);
    ++state_.adam_steps;
    const double b1 = 0.9, b2 = 0.999;
    const auto s = static_cast<double>(state_.adam_steps);
    for (std::size_t i = 0; i < grad.size(); ++i) {
      state_.m[i] = b1 * state_.m[i] + (1 - b1) * grad[i];
      state_.v[i] = b2 * state_.v[i] + (1 - b2) * grad[i] * grad[i];
      const double m_hat = state_.m[i] / (1 - std::pow(b1, s));
      const double v_hat = state_.v[i] / (1 - std::pow(b2, s));
      state_.logits[i] -= lr * m_hat / (std::sqrt(v_hat) + 1e-8);
    }
  }

  [[nodiscard]] snapshot_type snapshot() const { return state_; }
  void restore(const snapshot_type& s) { state_ = s; }

  // Raw bytes: exact doubles. A short or oversized file is refused.
  void save(const snapshot_type& s, const std::filesystem::path& path) const {
    std::ofstream out(path, std::ios::binary);
    const std::int64_t header[3] = {s.slots, s.adam_steps, static_cast<std::int64_t>(s.logits.size())};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for (const auto* v : {&s.logits, &s.m, &s.v})
      out.write(reinterpret_cast<const char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(double)));
    if (!out) detail::fail("tabular_policy.save", "cannot write " + path.string());
  }
  [[nodiscard]] snapshot_type load(const std::filesystem::path& path) const {
    std::ifstream in(path, std::ios::binary);
    if (!in) detail::fail("tabular_policy.load", "cannot open " + path.string());
    std::int64_t header[3] = {0, 0, 0};
    in.read(reinterpret_cast<char*>(header), sizeof header);
    snapshot_type s;
    s.slots = static_cast<int>(header[0]);
    s.adam_steps = header[1];
    if (!in || header[2] != static_cast<std::int64_t>(state_.logits.size()))
      detail::fail("tabular_policy.load", path.string() + " is truncated or of another shape");
    for (auto* v : {&s.logits, &s.m, &s.v}) {
      v->resize(static_cast<std::size_t>(header[2]));
      in.read(reinterpret_cast<char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(double)));
    }
    if (!in || in.peek() != std::char_traits<char>::eof())
      detail::fail("tabular_policy.load", path.string() + " is truncated or too long");
    return s;
  }

  // Greedy accuracy over prompts (fraction answered exactly).
  [[nodiscard]] double greedy_reward(std::span<const prompt> prompts) {
    const rollout_batch b = generate(prompts, {1, {.temperature = 0.0}, 0});
    generate_calls.pop_back();
    double sum = 0;
    for (std::size_t i = 0; i < b.response_count(); ++i)
      sum += exact_answer_reward{}({b.prompts[i], b.response_tokens(i), {}, b.finish_reasons[i], i});
    return sum / static_cast<double>(b.response_count());
  }

  std::vector<generate_call> generate_calls;
  std::vector<update_call> update_calls;

 private:
  tabular_snapshot state_;
};

// Prompts ids [first, first + count) of one domain.
inline std::vector<prompt> domain_prompts(const std::string& domain, std::int64_t first, std::int64_t count) {
  std::vector<prompt> out;
  for (std::int64_t id = first; id < first + count; ++id) out.push_back({id, domain, "", ""});
  return out;
}

}  // namespace cascade_rl::testing
