// The cascade runner data-parallel (issue 6), under mpiexec with 1 and 2 processes:
// every rank runs the distributed cascade over MPI; rank 0 also runs the same cascade
// in-process on one rank (the default local communicator) and the two must agree bit
// for bit: the forgetting matrix, the final parameters and optimizer state, the step
// metrics that are counts or gathered values. Reduced floating-point metrics (the loss,
// the KL to the teacher) agree within 1e-6 relative. Every rank's replica must end
// equal to rank 0's. The cascade covers the paths that shard differently: GRPO
// on-policy with the overlong filter and zero-variance dropping, an estimator that
// looks across groups, PPO mini-batches cut across ranks, MOPD mixing an outcome
// reward, prompts_per_step not divisible by the rank count; and a checkpointed run cut
// short and resumed on every rank. An agentic stage (multi-turn episodes on the
// guessing game, tests/agentic/guessing_game.hpp) too: its episodes sharded over the
// ranks are the one-process episodes, so its run agrees with one process bit for bit.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agentic/guessing_game.hpp"
#include "cascade_rl/cascade.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "mpi_test_main.hpp"

namespace {

namespace cr = cascade_rl;

constexpr int vocabulary = 6, max_length = 5, slots = 4;

std::vector<std::int32_t> answer_for(std::int64_t k) {
  std::vector<std::int32_t> a;
  for (int t = 0; t < 1 + static_cast<int>(k % 3); ++t)
    a.push_back(1 + static_cast<int>(3 * k + 2 * t) % (vocabulary - 1));
  a.push_back(0);
  return a;
}

struct answer_reward {
  float operator()(const cr::response_view& r) const {
    const auto a = answer_for(r.input.id);
    int right = 0;
    for (std::size_t t = 0; t < a.size() && t < r.tokens.size(); ++t) right += r.tokens[t] == a[t];
    return static_cast<float>(right) / static_cast<float>(a.size());
  }
};

// Parameters and Adam state; scores tokens, so it can teach.
struct weights {
  std::vector<double> logits = std::vector<double>(slots * max_length * vocabulary, 0.0);
  std::vector<double> m = logits, v = logits;
  std::int64_t steps = 0;
  bool operator==(const weights&) const = default;

  [[nodiscard]] std::size_t row(std::int64_t id, std::size_t t) const {
    return (static_cast<std::size_t>(id % slots) * max_length + t) * vocabulary;
  }
  [[nodiscard]] std::vector<double> p(std::int64_t id, std::size_t t) const {
    const double* z = &logits[row(id, t)];
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
        out[static_cast<std::size_t>(b.token_offsets[i]) + t] = static_cast<float>(
            std::log(p(b.prompts[b.group_of(i)].id, t)[static_cast<std::size_t>(b.response_tokens(i)[t])]));
  }
};

// The data-parallel policy: prompt_seed per prompt, exact_sum gradient all-reduced
// over `comm`, then Adam. Counts its gradient calls (every rank calls each one).
struct dp_policy {
  using snapshot_type = weights;
  cr::communicator_ref comm{};
  weights w{};
  std::size_t gradient_calls = 0;

  cr::rollout_batch generate(std::span<const cr::prompt> prompts, const cr::generation_request& request) {
    cr::rollout_batch batch;
    for (std::size_t j = 0; j < prompts.size(); ++j) {
      cr::rng_type rng(cr::prompt_seed(request, j));
      batch.add_prompt(prompts[j]);
      for (std::size_t g = 0; g < request.group_size; ++g) {
        std::vector<std::int32_t> tokens;
        std::vector<float> logps;
        while (tokens.size() < static_cast<std::size_t>(max_length) && (tokens.empty() || tokens.back() != 0)) {
          const auto p = w.p(prompts[j].id, tokens.size());
          int k = 0;
          if (request.sampling.temperature == 0) {
            k = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
          } else {
            for (double u = cr::detail::uniform01(rng); k < vocabulary - 1 && u >= p[static_cast<std::size_t>(k)]; ++k)
              u -= p[static_cast<std::size_t>(k)];
          }
          tokens.push_back(k);
          logps.push_back(static_cast<float>(std::log(p[static_cast<std::size_t>(k)])));
        }
        batch.add_response(tokens, logps, tokens.back() == 0 ? cr::finish_reason::stopped : cr::finish_reason::truncated);
      }
    }
    return batch;
  }
  void log_probs(const cr::rollout_batch& b, std::span<float> out) const { w.log_probs(b, out); }
  void apply_gradient(const cr::rollout_batch& b, std::span<const float> dlogp, double lr) {
    ++gradient_calls;
    cr::exact_sum g(w.logits.size());
    for (std::size_t i = 0; i < b.response_count(); ++i)
      for (std::size_t t = 0; t < b.length(i); ++t) {
        const std::int64_t id = b.prompts[b.group_of(i)].id;
        const auto p = w.p(id, t);
        const float d = dlogp[static_cast<std::size_t>(b.token_offsets[i]) + t];
        for (int k = 0; k < vocabulary; ++k)
          g.add(w.row(id, t) + static_cast<std::size_t>(k), d * ((k == b.response_tokens(i)[t]) - p[static_cast<std::size_t>(k)]));
      }
    g.all_reduce(comm);
    ++w.steps;
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    const double c1 = 1 - std::pow(b1, static_cast<double>(w.steps));
    const double c2 = 1 - std::pow(b2, static_cast<double>(w.steps));
    for (std::size_t c = 0; c < w.logits.size(); ++c) {
      w.m[c] = b1 * w.m[c] + (1 - b1) * g[c];
      w.v[c] = b2 * w.v[c] + (1 - b2) * g[c] * g[c];
      w.logits[c] -= lr * (w.m[c] / c1) / (std::sqrt(w.v[c] / c2) + eps);
    }
  }
  weights snapshot() const { return w; }
  void restore(const weights& s) { w = s; }
  void save(const weights& s, const std::filesystem::path& path) const {
    std::ofstream out(path);
    out << nlohmann::json{{"logits", s.logits}, {"m", s.m}, {"v", s.v}, {"steps", s.steps}}.dump();
  }
  weights load(const std::filesystem::path& path) const {
    std::ifstream in(path);
    const auto j = nlohmann::json::parse(in);
    weights s;
    s.logits = j.at("logits").get<std::vector<double>>();
    s.m = j.at("m").get<std::vector<double>>();
    s.v = j.at("v").get<std::vector<double>>();
    s.steps = j.at("steps").get<std::int64_t>();
    return s;
  }
};

std::vector<cr::prompt> prompts(const char* domain, std::int64_t first, std::int64_t n) {
  std::vector<cr::prompt> out;
  for (std::int64_t id = first; id < first + n; ++id) out.push_back({.id = id, .domain = domain});
  return out;
}

// Every ready-made path that shards: see the top of the file.
auto make_dp_cascade() {
  cr::stage_config a{.name = "grpo_a", .domains = {"a"}, .group_size = 4, .prompts_per_step = 5,
                     .steps = 6, .lr = cr::constant_lr(0.1), .sampling = {.max_response_length = max_length},
                     .evals = {{.domain = "a", .prompts = prompts("a", 0, 5), .samples_per_prompt = 3}},
                     .eval_sampling = {.temperature = 1.0}};
  a.filters.overlong = cr::overlong_options{.mode = cr::overlong_mode::mask, .max_length = 4};
  cr::stage_config b{.name = "ppo_b", .domains = {"b"}, .group_size = 3, .prompts_per_step = 7,
                     .steps = 5, .lr = cr::constant_lr(0.05), .sampling = {.max_response_length = max_length},
                     .evals = {{.domain = "b", .prompts = prompts("b", 4, 3)}}};
  b.update = {.rule = cr::ppo_clip_update{.epochs = 2, .mini_batches = 3}};
  cr::stage_config c{.name = "mopd", .domains = {"a"}, .group_size = 2, .prompts_per_step = 3,
                     .steps = 5, .lr = cr::linear_warmup_lr(0.02, 0.1, 2),
                     .sampling = {.max_response_length = max_length}};
  c.mopd.outcome_weight = 0.5;
  return cr::make_cascade(
      cr::make_grpo_stage(a, cr::prompt_pool(prompts("a", 0, 5)), answer_reward{}),
      cr::make_grpo_stage(b, cr::prompt_pool(prompts("b", 4, 3)), answer_reward{}, cr::rloo_estimator{}),
      cr::make_mopd_stage(c, cr::prompt_pool(prompts("a", 0, 5)), answer_reward{}));
}

struct metrics_log {
  std::vector<cr::step_metrics> steps;
  void on_step(const cr::step_metrics& m) { steps.push_back(m); }
};

struct run_result {
  cr::cascade_report report;
  weights final;
  std::vector<cr::step_metrics> steps;
  std::size_t gradient_calls = 0;
};

run_result run_over(cr::communicator_ref comm, bool distributed) {
  auto cascade = make_dp_cascade();
  dp_policy policy{.comm = comm};
  metrics_log log;
  auto runner = distributed ? cr::make_runner(cascade, policy, comm, {.seed = 11})
                            : cr::make_runner(cascade, policy, {.seed = 11});
  run_result r{runner.run(log), {}, {}, 0};
  r.final = policy.w;
  r.steps = std::move(log.steps);
  r.gradient_calls = policy.gradient_calls;
  return r;
}

void expect_near_relative(double a, double b, const std::string& what) {
  EXPECT_LE(std::fabs(a - b), 1e-6 * std::max({1.0, std::fabs(a), std::fabs(b)})) << what << ": " << a << " vs " << b;
}

// Exact where the value is an integer count or computed from gathered values.
void expect_same_metrics(const std::vector<cr::step_metrics>& x, const std::vector<cr::step_metrics>& y) {
  ASSERT_EQ(x.size(), y.size());
  for (std::size_t s = 0; s < x.size(); ++s) {
    const std::string at = "step " + std::to_string(s + 1);
    EXPECT_EQ(x[s].prompts, y[s].prompts) << at;
    EXPECT_EQ(x[s].responses, y[s].responses) << at;
    EXPECT_EQ(x[s].reward_mean, y[s].reward_mean) << at;
    EXPECT_EQ(x[s].accuracy, y[s].accuracy) << at;
    EXPECT_EQ(x[s].length_mean, y[s].length_mean) << at;
    EXPECT_EQ(x[s].length_min, y[s].length_min) << at;
    EXPECT_EQ(x[s].length_max, y[s].length_max) << at;
    EXPECT_EQ(x[s].zero_variance_groups, y[s].zero_variance_groups) << at;
    EXPECT_EQ(x[s].filtered_sequences, y[s].filtered_sequences) << at;
    EXPECT_EQ(x[s].overlong, y[s].overlong) << at;
    EXPECT_EQ(x[s].updates, y[s].updates) << at;
    EXPECT_EQ(x[s].tokens, y[s].tokens) << at;
    EXPECT_EQ(x[s].clip_fraction, y[s].clip_fraction) << at;
    EXPECT_EQ(x[s].importance_masked_fraction, y[s].importance_masked_fraction) << at;
    expect_near_relative(x[s].loss, y[s].loss, at + " loss");
    EXPECT_EQ(x[s].kl_to_teacher.has_value(), y[s].kl_to_teacher.has_value()) << at;
    if (x[s].kl_to_teacher && y[s].kl_to_teacher)
      expect_near_relative(*x[s].kl_to_teacher, *y[s].kl_to_teacher, at + " kl_to_teacher");
  }
}

// Every rank's value equals rank 0's.
void expect_replicas_equal(cr::communicator_ref comm, const std::vector<double>& mine) {
  std::vector<double> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const double>(mine), std::span<double>(all));
  for (int r = 1; r < comm.size(); ++r)
    EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(r * mine.size())))
        << "rank " << r << "'s parameters differ from rank 0's";
}

TEST(MpiCascade, DataParallelEqualsOneProcessBitForBit) {
  cr::communicator_ref comm(cr::testing::world());
  const run_result distributed = run_over(comm, true);
  ASSERT_TRUE(distributed.report.finished);
  expect_replicas_equal(comm, distributed.final.logits);
  expect_replicas_equal(comm, distributed.final.v);
  // Every rank took every optimizer step (one per on-policy/MOPD step, 6 per PPO step
  // when no group was filtered away).
  std::uint64_t calls[1] = {distributed.gradient_calls};
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const std::uint64_t>(calls), std::span<std::uint64_t>(all));
  for (auto c : all) EXPECT_EQ(c, distributed.gradient_calls);

  if (comm.rank() == 0) {
    const run_result single = run_over(cr::communicator_ref{}, false);
    const auto& x = distributed.report.forgetting;
    const auto& y = single.report.forgetting;
    ASSERT_EQ(x.rows(), y.rows());
    EXPECT_EQ(x.to_json().dump(), y.to_json().dump());
    EXPECT_TRUE(distributed.final == single.final) << "final parameters differ from one process's";
    EXPECT_EQ(distributed.gradient_calls, single.gradient_calls);
    expect_same_metrics(distributed.steps, single.steps);
    // Something was learnt and the paths were exercised.
    EXPECT_NE(x.to_json().dump(), cr::forgetting_matrix(x.domains()).to_json().dump());
    bool overlong = false, kl = false;
    for (const auto& m : single.steps) {
      overlong = overlong || m.overlong > 0;
      kl = kl || m.kl_to_teacher.has_value();
    }
    EXPECT_TRUE(overlong);
    EXPECT_TRUE(kl);
  }
}

TEST(MpiCascade, ResumedOnEveryRankEqualsUninterrupted) {
  cr::communicator_ref comm(cr::testing::world());
  // One directory for all ranks: rank 0 names it.
  std::vector<std::byte> name(256);
  if (comm.rank() == 0) {
    const std::string dir = (std::filesystem::temp_directory_path() /
                             ("cascade_rl_mpi_cascade_" + std::to_string(std::chrono::steady_clock::now()
                                                                              .time_since_epoch().count())))
                                .string();
    ASSERT_LT(dir.size(), name.size());
    std::copy_n(reinterpret_cast<const std::byte*>(dir.data()), dir.size(), name.begin());
  }
  comm.broadcast(std::span<std::byte>(name), 0);
  const std::filesystem::path dir(std::string(reinterpret_cast<const char*>(name.data())));

  const run_result uninterrupted = run_over(comm, true);

  std::size_t pieces = 0;
  cr::cascade_report report;
  dp_policy policy{.comm = comm};
  for (;;) {
    auto cascade = make_dp_cascade();
    policy = dp_policy{.comm = comm};  // a fresh process, as after a kill
    auto runner = cr::make_runner(cascade, policy, comm, {.seed = 11, .checkpoint_dir = dir, .max_steps = 7});
    runner.resume();
    report = runner.run();
    ++pieces;
    if (report.finished || pieces > 10) break;
  }
  EXPECT_TRUE(report.finished);
  EXPECT_GT(pieces, 1u);
  EXPECT_EQ(report.forgetting.to_json().dump(), uninterrupted.report.forgetting.to_json().dump());
  EXPECT_TRUE(policy.w == uninterrupted.final) << "the resumed run ended elsewhere";
  comm.barrier();
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
}

// Two agentic stages (the second's prompts share the first's table slots with other
// secrets), 4 prompts a step: 4, 2 or 1 prompt's episodes per rank. The first drops the
// episodes that never found the digit, the second masks them (its PPO rule cuts
// mini-batches across ranks).
struct agentic_result {
  cr::cascade_report report;
  cr::testing::guessing::guess_snapshot final;
  std::vector<cr::step_metrics> steps;
};

agentic_result run_agentic_over(cr::communicator_ref comm, bool distributed) {
  namespace guessing = cr::testing::guessing;
  const auto config = [](const char* name, const char* domain, std::int64_t first) {
    cr::stage_config c = guessing::game_config();
    c.name = name;
    c.domains = {domain};
    c.steps = 6;
    std::vector<cr::prompt> p = prompts(domain, first, 4);
    c.evals = {{.domain = domain, .prompts = p, .samples_per_prompt = 2}};
    c.eval_sampling = {.temperature = 1.0};
    return std::pair{c, p};
  };
  auto [a, a_prompts] = config("swe_a", "guess_a", 0);
  a.filters.end_reasons.max_turns = cr::episode_treatment::drop;
  auto [b, b_prompts] = config("swe_b", "guess_b", 4);
  b.update = {.rule = cr::ppo_clip_update{.epochs = 2, .mini_batches = 3}};
  b.filters.end_reasons.max_turns = cr::episode_treatment::mask;
  auto cascade = cr::make_cascade(cr::make_agentic_stage(a, cr::prompt_pool(a_prompts), guessing::make_game),
                                  cr::make_agentic_stage(b, cr::prompt_pool(b_prompts), guessing::make_game));
  guessing::guessing_policy policy;
  policy.comm = comm;
  metrics_log log;
  auto runner = distributed ? cr::make_runner(cascade, policy, comm, {.seed = 5})
                            : cr::make_runner(cascade, policy, {.seed = 5});
  agentic_result r{runner.run(log), policy.snapshot(), std::move(log.steps)};
  return r;
}

TEST(MpiCascade, AgenticStagesDataParallelEqualOneProcessBitForBit) {
  cr::communicator_ref comm(cr::testing::world());
  const agentic_result distributed = run_agentic_over(comm, true);
  ASSERT_TRUE(distributed.report.finished);
  expect_replicas_equal(comm, distributed.final.logits);
  if (comm.rank() == 0) {
    const agentic_result single = run_agentic_over(cr::communicator_ref{}, false);
    EXPECT_EQ(distributed.report.forgetting.to_json().dump(), single.report.forgetting.to_json().dump());
    EXPECT_TRUE(distributed.final == single.final) << "final parameters differ from one process's";
    EXPECT_NE(single.final, cr::testing::guessing::guessing_policy().snapshot());
    expect_same_metrics(distributed.steps, single.steps);
    ASSERT_EQ(distributed.steps.size(), single.steps.size());
    std::size_t masked = 0, dropped = 0;
    for (std::size_t s = 0; s < single.steps.size(); ++s) {
      ASSERT_TRUE(distributed.steps[s].episodes && single.steps[s].episodes) << "step " << s + 1;
      const cr::episode_metrics& x = *distributed.steps[s].episodes;
      const cr::episode_metrics& y = *single.steps[s].episodes;
      EXPECT_EQ(x.turns_mean, y.turns_mean) << "step " << s + 1;
      EXPECT_EQ(x.end_reasons, y.end_reasons) << "step " << s + 1;
      EXPECT_EQ(x.log_prob_drift, 0.0) << "step " << s + 1;
      EXPECT_EQ(x.masked, y.masked) << "step " << s + 1;
      EXPECT_EQ(x.dropped, y.dropped) << "step " << s + 1;
      masked += y.masked;
      dropped += y.dropped;
    }
    EXPECT_GT(masked, 0u);
    EXPECT_GT(dropped, 0u);
  }
}

}  // namespace

int main(int argc, char** argv) { return cascade_rl::testing::run_mpi_tests(argc, argv); }
