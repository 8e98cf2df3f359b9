// The smallest complete adapter of your own model type to cascade_rl's Policy concept.
//
// `bigram_model` stands for your model: it has its own API (next-token probabilities
// given the previous token, public logits) and knows nothing of
// cascade_rl. `bigram_policy` adapts it: five members and a snapshot type, then any
// cascade runs on it. Here: one GRPO stage that teaches it to answer "1 2 3".
//
// What g++ 12 says when a member is missing: see missing_member.cpp (built by the test
// examples_custom_policy_missing_member, which expects the compile to fail) and
// missing_member.txt.

#include <cmath>
#include <cstdio>
#include <iostream>
#include <span>
#include <vector>

#include <cascade_rl/cascade.hpp>

namespace cr = cascade_rl;

// ---- your model ------------------------------------------------------------------------
struct bigram_model {
  static constexpr int vocab = 5;  // token 0 ends a response
  std::vector<double> logits = std::vector<double>(vocab * vocab, 0.0);  // [previous][next]

  std::vector<double> probs(int previous) const {
    std::vector<double> p(logits.begin() + previous * vocab, logits.begin() + (previous + 1) * vocab);
    double sum = 0;
    for (double& x : p) sum += x = std::exp(x);
    for (double& x : p) x /= sum;
    return p;
  }
};

// ---- the adapter -----------------------------------------------------------------------
struct bigram_policy {
  using snapshot_type = bigram_model;  // copyable; frozen copies of the parameters
  bigram_model model;

  cr::rollout_batch generate(std::span<const cr::prompt> prompts, const cr::generation_request& request) {
    cr::rng_type rng(request.seed);  // every random draw from the request's seed
    cr::rollout_batch batch;
    for (const cr::prompt& p : prompts) {
      batch.add_prompt(p);
      for (std::size_t g = 0; g < request.group_size; ++g) {
        std::vector<std::int32_t> tokens;
        std::vector<float> logps;
        int previous = 0;
        while (static_cast<std::int64_t>(tokens.size()) < request.sampling.max_response_length) {
          const auto probs = model.probs(previous);
          double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
          int next = 0;
          while (next < bigram_model::vocab - 1 && u >= probs[next]) u -= probs[next++];
          tokens.push_back(next);
          logps.push_back(static_cast<float>(std::log(probs[next])));
          if (next == 0) break;
          previous = next;
        }
        batch.add_response(tokens, logps, tokens.back() == 0 ? cr::finish_reason::stopped : cr::finish_reason::truncated);
      }
    }
    return batch;
  }
  void log_probs(const cr::rollout_batch& batch, std::span<float> out) const {
    for (std::size_t i = 0; i < batch.response_count(); ++i) {
      int previous = 0;
      for (std::size_t t = 0; t < batch.length(i); ++t) {
        const int next = batch.response_tokens(i)[t];
        out[batch.token_offsets[i] + t] = static_cast<float>(std::log(model.probs(previous)[next]));
        previous = next;
      }
    }
  }
  // dL/dlogits = dL/dlogp * (onehot - softmax), summed at the current parameters.
  void apply_gradient(const cr::rollout_batch& batch, std::span<const float> dlogp, double lr) {
    bigram_model next_model = model;
    for (std::size_t i = 0; i < batch.response_count(); ++i) {
      int previous = 0;
      for (std::size_t t = 0; t < batch.length(i); ++t) {
        const int next = batch.response_tokens(i)[t];
        const auto p = model.probs(previous);
        for (int k = 0; k < bigram_model::vocab; ++k)
          next_model.logits[previous * bigram_model::vocab + k] -=
              lr * dlogp[batch.token_offsets[i] + t] * ((k == next) - p[k]);
        previous = next;
      }
    }
    model = next_model;
  }
  bigram_model snapshot() const { return model; }
  void restore(const bigram_model& s) { model = s; }
};

static_assert(cr::Policy<bigram_policy>);

// Reward: the fraction of positions of "1 2 3 <eos>" right.
double count_to_three(const cr::response_view& r) {
  const int want[] = {1, 2, 3, 0};
  int right = 0;
  for (std::size_t t = 0; t < 4 && t < r.tokens.size(); ++t) right += r.tokens[t] == want[t];
  return right / 4.0;
}

int main() {
  const std::vector<cr::prompt> prompts{{.id = 0, .domain = "count"}};
  auto cascade = cr::make_cascade(cr::make_grpo_stage(
      {.name = "count_rl", .domains = {"count"}, .group_size = 16, .prompts_per_step = 4, .steps = 40,
       .lr = cr::constant_lr(2.0), .sampling = {.max_response_length = 6},
       .evals = {{.domain = "count", .prompts = prompts}}},
      cr::prompt_pool(prompts), count_to_three));
  bigram_policy policy;
  auto runner = cr::make_runner(cascade, policy, {.seed = 1});
  const cr::cascade_report report = runner.run(cr::forgetting_table(std::cout));
  const double before = report.forgetting.score(0, "count"), after = report.forgetting.score(1, "count");
  std::printf("count: %.2f -> %.2f\n", before, after);
  return after > before ? 0 : 1;
}
