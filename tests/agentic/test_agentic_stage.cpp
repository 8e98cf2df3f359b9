// The agentic stage (cascade/agentic_stage.hpp) on a guessing game: each prompt hides a
// digit, the agent guesses over up to three turns and the environment answers "higher",
// "lower" or "right"; the outcome is 1 for a right guess. A small tabular policy whose
// action depends on (prompt, turn, last answer) learns to use the answers. Checked: the
// stage trains (greedy evaluation before and after), observations carry no gradient,
// the episode metrics (end reasons, turns, drift exactly 0, lengths of the actions
// only), both update rules, the same bits from the same seed, and its config in JSON
// with refusals by path.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/cascade/agentic_stage.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/stage_config_difference.hpp"
#include "cascade_rl/cascade/stage_config_json.hpp"
#include "cascade_rl/cascade/teacher_registry.hpp"
#include "support/expect_error.hpp"

namespace {

namespace cr = cascade_rl;

constexpr int digits = 7;            // actions: tokens 1..7
constexpr int turns = 3;             // the policy's table covers turns 0..2
constexpr int answers = 4;           // 0 none yet, 1 higher, 2 lower, 3 anything else
constexpr std::int32_t prompt_base = 100, answer_base = 200;

int secret_of(std::int64_t id) { return 1 + static_cast<int>((3 * id + 2) % digits); }

struct guess_snapshot {
  std::vector<double> logits;
  bool operator==(const guess_snapshot&) const = default;
};

// logits[((slot * turns + turn) * answers + answer) * digits + (digit - 1)].
class guessing_policy {
 public:
  using snapshot_type = guess_snapshot;
  static constexpr int slots = 4;

  guessing_policy() { state_.logits.assign(slots * turns * answers * digits, 0.0); }

  // Where each action token's logits live, walking a trajectory: the turn and the last
  // answer before it.
  template <class F>
  static void walk(std::int64_t id, std::span<const std::int32_t> tokens, F&& at_action) {
    int turn = 0, answer = 0;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      if (tokens[t] >= 1 && tokens[t] <= digits) {
        at_action(t, row(id, std::min(turn, turns - 1), answer), tokens[t]);
        ++turn;
      } else if (tokens[t] >= answer_base) {
        answer = tokens[t] - answer_base;
      }
    }
  }
  static std::size_t row(std::int64_t id, int turn, int answer) {
    return static_cast<std::size_t>(((id % slots) * turns + turn) * answers + answer) * digits;
  }
  [[nodiscard]] std::vector<double> softmax(std::size_t row, double temperature = 1.0) const {
    std::vector<double> p(digits);
    const double* z = &state_.logits[row];
    const double top = *std::max_element(z, z + digits);
    double sum = 0;
    for (int k = 0; k < digits; ++k) sum += p[k] = std::exp((z[k] - top) / temperature);
    for (double& x : p) x /= sum;
    return p;
  }

  // ---- TurnPolicy ----
  std::vector<std::int32_t> render_prompt(const cr::prompt& p) const {
    return {static_cast<std::int32_t>(prompt_base + p.id)};
  }
  std::vector<std::int32_t> render_observation(std::span<const std::int32_t>,
                                               std::string_view text) const {
    const int answer = text == "higher" ? 1 : text == "lower" ? 2 : 3;
    return {answer_base + answer};
  }
  std::vector<cr::turn_output> continue_generation(std::span<const cr::turn_request> requests,
                                                   const cr::sampling_params& sampling) {
    ++turn_calls;
    std::vector<cr::turn_output> out;
    for (const cr::turn_request& r : requests) {
      const std::int64_t id = r.context[0] - prompt_base;
      int turn = 0, answer = 0;
      for (std::size_t t = 1; t < r.context.size(); ++t) {
        if (r.context[t] >= 1 && r.context[t] <= digits) ++turn;
        if (r.context[t] >= answer_base) answer = r.context[t] - answer_base;
      }
      const std::size_t row_at = row(id, std::min(turn, turns - 1), answer);
      const std::vector<double> p = softmax(row_at);
      int digit = 1;
      if (sampling.temperature == 0.0) {
        digit = 1 + static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
      } else {
        cr::rng_type rng(r.seed);
        const std::vector<double> tempered = softmax(row_at, sampling.temperature);
        double u = cr::detail::uniform01(rng);
        digit = digits;
        for (int k = 0; k < digits; ++k) {
          if (u < tempered[k]) {
            digit = k + 1;
            break;
          }
          u -= tempered[k];
        }
      }
      cr::turn_output a;
      a.tokens = {digit};
      a.log_probs = {static_cast<float>(std::log(p[static_cast<std::size_t>(digit - 1)]))};
      a.text = std::to_string(digit);
      out.push_back(std::move(a));
    }
    return out;
  }

  // ---- Policy ----
  cr::rollout_batch generate(std::span<const cr::prompt>, const cr::generation_request&) {
    cr::detail::fail("guessing_policy.generate", "plays episodes only");
  }
  void log_probs(const cr::rollout_batch& batch, std::span<float> out) const {
    std::fill(out.begin(), out.end(), 0.0f);  // observations: never read by the loss
    for (std::size_t i = 0; i < batch.response_count(); ++i) {
      const auto first = static_cast<std::size_t>(batch.token_offsets[i]);
      const auto last = static_cast<std::size_t>(batch.token_offsets[i + 1]);
      walk(batch.prompts[batch.group_of(i)].id,
           std::span<const std::int32_t>(batch.tokens).subspan(first, last - first),
           [&](std::size_t t, std::size_t r, std::int32_t digit) {
             out[first + t] =
                 static_cast<float>(std::log(softmax(r)[static_cast<std::size_t>(digit - 1)]));
           });
    }
  }
  // Plain gradient descent on the logits: dL/dz = dL/dlogp (onehot - softmax).
  void apply_gradient(const cr::rollout_batch& batch, std::span<const float> dlogp, double lr) {
    std::vector<double> grad(state_.logits.size(), 0.0);
    for (std::size_t t = 0; t < batch.token_count(); ++t)
      if (!batch.loss_mask.empty() && batch.loss_mask[t] == 0) observation_dlogp.push_back(dlogp[t]);
    for (std::size_t i = 0; i < batch.response_count(); ++i) {
      const auto first = static_cast<std::size_t>(batch.token_offsets[i]);
      const auto last = static_cast<std::size_t>(batch.token_offsets[i + 1]);
      walk(batch.prompts[batch.group_of(i)].id,
           std::span<const std::int32_t>(batch.tokens).subspan(first, last - first),
           [&](std::size_t t, std::size_t r, std::int32_t digit) {
             const std::vector<double> p = softmax(r);
             const double g = dlogp[first + t];
             for (int k = 0; k < digits; ++k)
               grad[r + static_cast<std::size_t>(k)] += g * ((k + 1 == digit ? 1.0 : 0.0) - p[k]);
           });
    }
    for (std::size_t k = 0; k < grad.size(); ++k) state_.logits[k] -= lr * grad[k];
    ++updates;
  }
  [[nodiscard]] guess_snapshot snapshot() const { return state_; }
  void restore(const guess_snapshot& s) { state_ = s; }

  std::vector<float> observation_dlogp;  // dL/dlogp the trainer gave observation tokens
  std::size_t turn_calls = 0;
  std::size_t updates = 0;

 private:
  guess_snapshot state_;
};
static_assert(cr::Policy<guessing_policy> && cr::TurnPolicy<guessing_policy>);

// The game: "right" ends it; the outcome is 1 when the digit was found.
struct guessing_game {
  int secret = 0;
  bool found = false;
  std::string reset(const cr::prompt& p) {
    secret = secret_of(p.id);
    return "";
  }
  cr::environment_step step(std::string_view action) {
    const int guess = std::stoi(std::string(action));
    if (guess == secret) {
      found = true;
      return {.observation = "right", .reward = 1.0, .done = true};
    }
    return {.observation = guess < secret ? "higher" : "lower"};
  }
  double outcome() const { return found ? 1.0 : 0.0; }
};
const auto make_game = [](const cr::prompt&, std::size_t) { return guessing_game{}; };

std::vector<cr::prompt> game_prompts() {
  std::vector<cr::prompt> prompts;
  for (std::int64_t id = 0; id < 4; ++id)
    prompts.push_back({.id = id, .domain = "guess", .text = "guess " + std::to_string(id)});
  return prompts;
}

cr::stage_config game_config() {
  return {.name = "swe",
          .kind = cr::stage_kind::swe_rl,
          .domains = {"guess"},
          .group_size = 8,
          .prompts_per_step = 4,
          .steps = 40,
          .lr = cr::constant_lr(2.0),
          .sampling = {.temperature = 1.0, .max_response_length = 8},
          .filters = {.drop_zero_variance_groups = false},
          .episodes = {.max_turns = 3,
                       .context_budget = 16,
                       .max_turn_tokens = 1,
                       .observation_token_cap = 1,
                       .observation_text_cap = 16},
          .success_threshold = 1.0,
          .reward_workers = 2,
          .evals = {{.domain = "guess", .prompts = game_prompts(), .samples_per_prompt = 1}}};
}

template <class Stage>
cr::step_metrics run_step(Stage& stage, guessing_policy& policy, cr::rng_type& rng,
                          std::size_t step) {
  const cr::teacher_registry<guess_snapshot> none;
  const cr::stage_config& c = stage.config();
  cr::step_context<guess_snapshot> context{step, c.lr.at(step, c.steps), rng, none};
  return stage.step(policy, context);
}

TEST(AgenticStage, LearnsToUseTheEnvironmentsAnswers) {
  auto stage = cr::make_agentic_stage(game_config(), cr::prompt_pool(game_prompts()), make_game);
  stage.validate();
  guessing_policy policy;
  // Greedy with equal logits guesses 1 every turn: only a secret of 1 is found.
  const double before = stage.evaluate(policy, 7)[0].score;
  cr::rng_type rng(3);
  double first_reward = 0, last_reward = 0;
  for (std::size_t s = 0; s < 40; ++s) {
    const auto m = run_step(stage, policy, rng, s);
    if (s == 0) first_reward = m.reward_mean;
    last_reward = m.reward_mean;
  }
  const double after = stage.evaluate(policy, 7)[0].score;
  EXPECT_LE(before, 0.25);
  EXPECT_EQ(after, 1.0) << "before " << before;
  EXPECT_GT(last_reward, first_reward);
  EXPECT_EQ(policy.updates, 40u);
}

TEST(AgenticStage, ObservationsCarryNoGradientAndEpisodesAreReported) {
  for (const cr::update_options& update :
       {cr::update_options{}, cr::update_options{.rule = cr::ppo_clip_update{
                                                     .epochs = 2, .mini_batches = 2}}}) {
    auto config = game_config();
    config.update = update;
    auto stage = cr::make_agentic_stage(config, cr::prompt_pool(game_prompts()), make_game);
    guessing_policy policy;
    cr::rng_type rng(5);
    const auto m = run_step(stage, policy, rng, 0);
    ASSERT_TRUE(m.episodes.has_value());
    const cr::episode_metrics& e = *m.episodes;
    EXPECT_EQ(m.responses, 32u);
    std::size_t ended = 0;
    for (const std::size_t n : e.end_reasons) ended += n;
    EXPECT_EQ(ended, 32u);
    // Only found (done) or three wrong guesses (max_turns) end this game.
    EXPECT_EQ(e.end_reasons[static_cast<std::size_t>(cr::end_reason::done)] +
                  e.end_reasons[static_cast<std::size_t>(cr::end_reason::max_turns)],
              32u);
    EXPECT_GT(e.end_reasons[static_cast<std::size_t>(cr::end_reason::max_turns)], 0u);
    EXPECT_GE(e.turns_mean, 1.0);
    EXPECT_LE(e.turns_mean, 3.0);
    EXPECT_EQ(e.log_prob_drift, 0.0);  // the trainer scores the sampler's own ids
    // Lengths count the actions (one token a turn), not the answers between them.
    EXPECT_EQ(m.length_min, 1);
    EXPECT_EQ(m.length_max, 3);
    EXPECT_EQ(m.length_mean, e.turns_mean);
    EXPECT_GT(m.tokens, 0u);
    ASSERT_FALSE(policy.observation_dlogp.empty());
    for (const float g : policy.observation_dlogp) EXPECT_EQ(g, 0.0f);
    EXPECT_EQ(policy.turn_calls, 3u);  // one batched call per turn
  }
}

TEST(AgenticStage, SameSeedSameBits) {
  const auto run = [] {
    auto stage = cr::make_agentic_stage(game_config(), cr::prompt_pool(game_prompts()), make_game);
    guessing_policy policy;
    cr::rng_type rng(11);
    std::vector<double> losses;
    for (std::size_t s = 0; s < 5; ++s) losses.push_back(run_step(stage, policy, rng, s).loss);
    return std::pair{policy.snapshot(), losses};
  };
  const auto [a, la] = run();
  const auto [b, lb] = run();
  EXPECT_EQ(a, b);
  EXPECT_EQ(la, lb);
  EXPECT_NE(a, guessing_policy().snapshot());
}

TEST(AgenticStage, EpisodeSettingsInJsonAndRefusedByPath) {
  auto config = game_config();
  config.episodes.episode_time_budget_ms = 2500;
  const auto json = cr::stage_config_to_json(config);
  EXPECT_EQ(json.at("episodes").dump(),
            R"({"max_turns":3,"context_budget":16,"max_turn_tokens":1,"observation_token_cap":1,)"
            R"("observation_text_cap":16,"episode_time_budget_ms":2500})");
  EXPECT_EQ(cr::stage_config_difference(
                config, cr::stage_config_from_json(nlohmann::json::parse(json.dump()))),
            "");
  EXPECT_EQ(cr::episode_options_of(config).episode_time_budget.count(), 2500);
  EXPECT_EQ(cr::episode_options_of(config).workers, config.reward_workers);

  config.episodes.max_turns = 0;
  auto zero_turns = cr::make_agentic_stage(config, cr::prompt_pool(game_prompts()), make_game);
  cr::testing::expect_error_naming([&] { zero_turns.validate(); },
                                   "stage 'swe'.episodes.max_turns", "must be positive");
  config = game_config();
  config.episodes.max_turn_tokens = 17;
  auto too_long = cr::make_agentic_stage(config, cr::prompt_pool(game_prompts()), make_game);
  cr::testing::expect_error_naming([&] { too_long.validate(); },
                                   "stage 'swe'.episodes.max_turn_tokens", "context_budget");
}

}  // namespace
