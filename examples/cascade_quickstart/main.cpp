// A complete cascade on a model small enough to read: GRPO on domain "short" (answers
// of one token), GRPO on domain "long" (prompts sharing the same table rows, other
// answers, so the policy forgets "short"), then MOPD routing "short" prompts to the
// best "short" snapshot seen so far. Prints one progress line per step, the forgetting
// table after each stage, metrics as JSON lines to cascade_metrics.jsonl, and
// checkpoints to cascade_checkpoints/ (run it again: it resumes, here finding the
// run finished). `--check` exits non-zero unless MOPD recovers "short".

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>
#include <vector>

#include <cascade_rl/cascade.hpp>

#include "../common/toy_task.hpp"

namespace cr = cascade_rl;

using toy::answer;
using toy::max_length;
using toy::reward;
using toy::rows;
using toy::table;
using toy::vocabulary;

// The Policy: generate, log_probs, apply_gradient (plain SGD on dL/dlogits =
// dL/dlogp * (onehot - softmax)), snapshot/restore, save/load for checkpoints.
struct tabular_policy {
  using snapshot_type = table;
  table params;

  cr::rollout_batch generate(std::span<const cr::prompt> prompts, const cr::generation_request& request) {
    cr::rng_type rng(request.seed);  // every draw from the request's seed
    cr::rollout_batch batch;
    for (const cr::prompt& prompt : prompts) {
      batch.add_prompt(prompt);
      for (std::size_t g = 0; g < request.group_size; ++g) {
        std::vector<std::int32_t> tokens;
        std::vector<float> logps;
        while (tokens.size() < max_length && (tokens.empty() || tokens.back() != 0)) {
          const auto p = params.p(prompt.id, tokens.size());
          int k = 0;
          if (request.sampling.temperature == 0) {
            k = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
          } else {
            for (double u = cr::detail::uniform01(rng); k < vocabulary - 1 && u >= p[k]; ++k) u -= p[k];
          }
          tokens.push_back(k);
          logps.push_back(static_cast<float>(std::log(p[k])));
        }
        batch.add_response(tokens, logps, tokens.back() == 0 ? cr::finish_reason::stopped : cr::finish_reason::truncated);
      }
    }
    return batch;
  }
  void log_probs(const cr::rollout_batch& b, std::span<float> out) const { params.log_probs(b, out); }
  void apply_gradient(const cr::rollout_batch& b, std::span<const float> dlogp, double lr) {
    table next = params;
    for (std::size_t i = 0; i < b.response_count(); ++i)
      for (std::size_t t = 0; t < b.length(i); ++t) {
        const std::int64_t id = b.prompts[b.group_of(i)].id;
        const auto p = params.p(id, t);
        const float d = dlogp[b.token_offsets[i] + t];
        double* z = &next.logits[((id % rows) * max_length + t) * vocabulary];
        for (int k = 0; k < vocabulary; ++k) z[k] -= lr * d * ((k == b.response_tokens(i)[t]) - p[k]);
      }
    params = next;
  }
  table snapshot() const { return params; }
  void restore(const table& t) { params = t; }
  void save(const table& t, const std::filesystem::path& path) const {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.logits.data()), t.logits.size() * sizeof(double));
  }
  table load(const std::filesystem::path& path) const {
    table t;
    std::ifstream in(path, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(t.logits.data()), t.logits.size() * sizeof(double)))
      throw cr::error(path.string(), "truncated policy file");
    return t;
  }
};

std::vector<cr::prompt> prompts(const char* domain, std::int64_t first) {
  std::vector<cr::prompt> out;
  for (std::int64_t id = first; id < first + 4; ++id) out.push_back({.id = id, .domain = domain});
  return out;
}

cr::stage_config grpo(const char* name, const char* domain, std::int64_t first, std::size_t steps) {
  return {.name = name, .domains = {domain}, .group_size = 8, .prompts_per_step = 4, .steps = steps,
          .lr = cr::constant_lr(2.0), .sampling = {.max_response_length = max_length},
          .evals = {{.domain = domain, .prompts = prompts(domain, first)}}};
}

int main(int argc, char** argv) {
  auto cascade = cr::make_cascade(
      cr::make_grpo_stage(grpo("grpo_short", "short", 0, 20), cr::prompt_pool(prompts("short", 0)), reward),
      cr::make_grpo_stage(grpo("grpo_long", "long", 4, 40), cr::prompt_pool(prompts("long", 4)), reward),
      cr::make_mopd_stage({.name = "mopd", .domains = {"short"}, .group_size = 4, .prompts_per_step = 4,
                           .steps = 30, .lr = cr::linear_warmup_lr(0.2, 2.0, 5),
                           .sampling = {.max_response_length = max_length}},
                          cr::prompt_pool(prompts("short", 0))));
  tabular_policy policy;
  auto runner = cr::make_runner(cascade, policy, {.seed = 7, .checkpoint_dir = "cascade_checkpoints"});
  if (runner.resume()) std::printf("resumed at stage %zu, step %zu\n", runner.stage_index(), runner.step());
  std::ofstream metrics("cascade_metrics.jsonl", std::ios::app);
  const cr::cascade_report report =
      runner.run(cr::console_progress(std::cout), cr::forgetting_table(std::cout), cr::jsonl_metrics(metrics));
  for (const auto& r : report.regressions)
    std::printf("regression: %s fell %.3f after %s\n", r.domain.c_str(), r.drop(), r.stage.c_str());
  const auto& m = report.forgetting;
  const std::size_t last = m.rows() - 1;
  const bool recovered = m.score(last, "short") > m.score(last - 1, "short");
  std::printf("short: %.3f after grpo_long, %.3f after mopd\n", m.score(last - 1, "short"), m.score(last, "short"));
  return argc > 1 && std::strcmp(argv[1], "--check") == 0 && !recovered ? 1 : 0;
}
