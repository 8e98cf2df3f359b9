#pragma once
// A guessing game for the agentic tests (tests/agentic, the MPI cascade): each prompt
// hides a digit, the agent guesses over up to three turns and the environment answers
// "higher", "lower" or "right"; the outcome is 1 for a right guess. The tabular policy
// keys its action on (prompt, turn, last answer), so it can learn to use the answers;
// it checkpoints (raw doubles) and sums its gradient exactly over a communicator, so
// resumed and data-parallel runs can be compared bit for bit.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cascade_rl/cascade/agentic_stage.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/rng.hpp"

namespace cascade_rl::testing::guessing {

namespace cr = cascade_rl;

constexpr int digits = 7;            // actions: tokens 1..7
constexpr int turns = 3;             // the policy's table covers turns 0..2
constexpr int answers = 4;           // 0 none yet, 1 higher, 2 lower, 3 anything else
constexpr std::int32_t prompt_base = 100, answer_base = 200;

inline int secret_of(std::int64_t id) { return 1 + static_cast<int>((3 * id + 2) % digits); }

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
  // Every action token of a batch: its index in the batch, its logits row, its digit.
  template <class F>
  static void for_each_action(const cr::rollout_batch& batch, F&& at_action) {
    for (std::size_t i = 0; i < batch.response_count(); ++i) {
      const auto first = static_cast<std::size_t>(batch.token_offsets[i]);
      const auto last = static_cast<std::size_t>(batch.token_offsets[i + 1]);
      walk(batch.prompts[batch.group_of(i)].id,
           std::span<const std::int32_t>(batch.tokens).subspan(first, last - first),
           [&](std::size_t t, std::size_t r, std::int32_t digit) { at_action(first + t, r, digit); });
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
    for_each_action(batch, [&](std::size_t t, std::size_t r, std::int32_t digit) {
      out[t] = static_cast<float>(std::log(softmax(r)[static_cast<std::size_t>(digit - 1)]));
    });
  }
  // Plain gradient descent on the logits: dL/dz = dL/dlogp (onehot - softmax), summed
  // exactly (cr::exact_sum) and all-reduced over `comm`, so that any number of ranks
  // takes the one-process step bit for bit.
  void apply_gradient(const cr::rollout_batch& batch, std::span<const float> dlogp, double lr) {
    cr::exact_sum grad(state_.logits.size());
    for (const cr::episode_summary& e : batch.episodes) trained_reasons.push_back(e.reason);
    for (std::size_t t = 0; t < batch.token_count(); ++t)
      if (!batch.loss_mask.empty() && batch.loss_mask[t] == 0) observation_dlogp.push_back(dlogp[t]);
    for_each_action(batch, [&](std::size_t t, std::size_t r, std::int32_t digit) {
      const std::vector<double> p = softmax(r);
      for (int k = 0; k < digits; ++k)
        grad.add(r + static_cast<std::size_t>(k), dlogp[t] * ((k + 1 == digit ? 1.0 : 0.0) - p[k]));
    });
    grad.all_reduce(comm);
    for (std::size_t k = 0; k < state_.logits.size(); ++k) state_.logits[k] -= lr * grad[k];
    ++updates;
  }
  [[nodiscard]] guess_snapshot snapshot() const { return state_; }
  void restore(const guess_snapshot& s) { state_ = s; }

  // ---- Checkpointable: the logits as raw doubles; another size is refused ----
  void save(const guess_snapshot& s, const std::filesystem::path& path) const {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(s.logits.data()),
              static_cast<std::streamsize>(s.logits.size() * sizeof(double)));
    if (!out) cr::detail::fail("guessing_policy.save", "cannot write " + path.string());
  }
  [[nodiscard]] guess_snapshot load(const std::filesystem::path& path) const {
    guess_snapshot s;
    s.logits.resize(state_.logits.size());
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(s.logits.data()),
            static_cast<std::streamsize>(s.logits.size() * sizeof(double)));
    if (!in || in.peek() != std::char_traits<char>::eof())
      cr::detail::fail("guessing_policy.load", path.string() + " is not a snapshot of this size");
    return s;
  }

  cr::communicator_ref comm{};  // the data-parallel group the gradient is summed over

  std::vector<float> observation_dlogp;  // dL/dlogp the trainer gave tokens of mask 0
  std::vector<cr::end_reason> trained_reasons;  // the end reasons of the episodes trained on
  std::size_t turn_calls = 0;
  std::size_t updates = 0;

 private:
  guess_snapshot state_;
};
static_assert(cr::Checkpointable<guessing_policy> && cr::TurnPolicy<guessing_policy>);

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
inline guessing_game make_game(const cr::prompt&, std::size_t) { return {}; }

inline std::vector<cr::prompt> game_prompts() {
  std::vector<cr::prompt> prompts;
  for (std::int64_t id = 0; id < 4; ++id)
    prompts.push_back({.id = id, .domain = "guess", .text = "guess " + std::to_string(id)});
  return prompts;
}

inline cr::stage_config game_config() {
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

}  // namespace cascade_rl::testing::guessing
