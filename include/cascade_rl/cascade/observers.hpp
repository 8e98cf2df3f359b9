#pragma once
// Observers watch a run. An observer is any object with some of these members (the
// runner calls those that exist and skips the others):
//   on_warning(std::string_view)                       ordering check and the like
//   on_stage_begin(const stage_config&, std::size_t stage_index)
//   on_step(const step_metrics&)                       after every step
//   on_evaluation(const evaluation_record&)            before the first stage, inside a
//                                                      stage (stop criteria), after each
//   on_stage_end(const stage_config&, const forgetting_matrix&)
// The runner delivers each as an event struct through notify(observers, event), which
// calls the member on the observers that have it. Three ready-made observers: metrics as
// JSON lines, a one-line console progress per step, and the forgetting table after each
// stage.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/forgetting_matrix.hpp"
#include "cascade_rl/cascade/metrics.hpp"
#include "cascade_rl/cascade/stage_config.hpp"

namespace cascade_rl {

struct evaluation_record {
  std::string label{};          // "before", or the stage name
  std::size_t stage_index = 0;
  std::size_t step = 0;         // steps done in that stage (0 for "before")
  bool stage_end = false;       // a forgetting-matrix row (false: inside a stage)
  std::vector<domain_score> scores{};
};

// ---- events -------------------------------------------------------------------------------

struct warning_event {
  std::string_view text;
};
struct stage_begin_event {
  const stage_config& config;
  std::size_t stage_index;
};
struct step_event {
  const step_metrics& metrics;
};
struct evaluation_event {
  const evaluation_record& record;
};
struct stage_end_event {
  const stage_config& config;
  const forgetting_matrix& forgetting;
};

namespace detail {

// An event to one observer: its member for that event, when it has one.
template <class O>
void deliver(O& o, const warning_event& e) {
  if constexpr (requires { o.on_warning(e.text); }) o.on_warning(e.text);
}
template <class O>
void deliver(O& o, const stage_begin_event& e) {
  if constexpr (requires { o.on_stage_begin(e.config, e.stage_index); })
    o.on_stage_begin(e.config, e.stage_index);
}
template <class O>
void deliver(O& o, const step_event& e) {
  if constexpr (requires { o.on_step(e.metrics); }) o.on_step(e.metrics);
}
template <class O>
void deliver(O& o, const evaluation_event& e) {
  if constexpr (requires { o.on_evaluation(e.record); }) o.on_evaluation(e.record);
}
template <class O>
void deliver(O& o, const stage_end_event& e) {
  if constexpr (requires { o.on_stage_end(e.config, e.forgetting); })
    o.on_stage_end(e.config, e.forgetting);
}

}  // namespace detail

// Delivers `event` to every observer of the tuple, in order.
template <class Event, class... O>
void notify(const std::tuple<O&...>& observers, const Event& event) {
  std::apply([&](auto&... o) { (detail::deliver(o, event), ...); }, observers);
}

// ---- ready-made observers ----------------------------------------------------------------

// One JSON object per line: {"event": "step", ...step_metrics}, {"event": "evaluation",
// ...}, {"event": "stage_end", "forgetting": ...}. Flushed per line, so a killed run
// keeps every line it reported.
class jsonl_metrics {
 public:
  explicit jsonl_metrics(std::ostream& out) : out_(&out) {}

  void on_step(const step_metrics& m) const {
    nlohmann::json j = m;
    j["event"] = "step";
    write(j);
  }
  void on_evaluation(const evaluation_record& e) const {
    nlohmann::json scores = nlohmann::json::object();
    for (const auto& s : e.scores) scores[s.domain] = s.score;
    write({{"event", "evaluation"}, {"label", e.label}, {"stage_index", e.stage_index},
           {"step", e.step}, {"stage_end", e.stage_end}, {"scores", scores}});
  }
  void on_stage_end(const stage_config& c, const forgetting_matrix& m) const {
    nlohmann::json bwt = nlohmann::json::object();
    for (const auto& d : m.domains()) {
      const auto b = m.backward_transfer(d);
      bwt[d] = b ? nlohmann::json(*b) : nlohmann::json();
    }
    const auto overall = m.backward_transfer();
    write({{"event", "stage_end"}, {"stage", c.name}, {"forgetting", m.to_json()},
           {"backward_transfer", bwt},
           {"backward_transfer_overall", overall ? nlohmann::json(*overall) : nlohmann::json()}});
  }

 private:
  void write(const nlohmann::json& j) const { *out_ << j.dump() << '\n' << std::flush; }
  std::ostream* out_;
};

// One line per step:
// [if_rl 12/180 | 12] lr 3.00e-06  reward 0.412  acc 0.250  len 231  zero-var 0.19  ...
// A stage without a reward (pure-distillation MOPD) prints its own quantities instead
// of a reward: the KL to the teachers and the fraction of tokens the importance band
// masked,
// [mopd 3/40 | 123] lr 2.00e-07  kl 0.1140  band-masked 0.012  len 4  loss +0.0012  ...
class console_progress {
 public:
  explicit console_progress(std::ostream& out) : out_(&out) {}

  void on_warning(std::string_view w) const { *out_ << "warning: " << w << '\n'; }
  void on_stage_begin(const stage_config& c, std::size_t index) const {
    *out_ << "stage " << index + 1 << ": " << c.name << " (" << to_string(c.kind) << "), "
          << c.prompts_per_step << " prompts x " << c.group_size << ", " << c.steps << " steps\n";
  }
  void on_step(const step_metrics& m) const {
    std::string text = format("[%s %zu/%zu | %zu] lr %.2e", m.stage.c_str(), m.step, m.steps,
                              m.global_step, m.lr);
    if (m.rewarded) {
      text += format("  reward %.3f  acc %.3f  len %.0f  zero-var %.2f  filtered %zu", m.reward_mean,
                     m.accuracy, m.length_mean, m.zero_variance_fraction, m.filtered_sequences);
      if (m.kl_to_teacher)
        text += format("  kl %.4f  band-masked %.3f", *m.kl_to_teacher, m.importance_masked_fraction);
    } else {
      text += format("  kl %.4f  band-masked %.3f  len %.0f",
                     m.kl_to_teacher ? *m.kl_to_teacher : 0.0, m.importance_masked_fraction,
                     m.length_mean);
    }
    text += format("  loss %+.4f  time gen %.2fs rew %.2fs upd %.2fs", m.loss, m.generation_seconds,
                   m.reward_seconds, m.update_seconds);
    *out_ << text << '\n' << std::flush;
  }

 private:
  // snprintf into a string (the stage name may be long: the text is never cut).
  template <class... A>
  static std::string format(const char* pattern, A... args) {
    const int n = std::snprintf(nullptr, 0, pattern, args...);
    if (n <= 0) return {};
    std::string out(static_cast<std::size_t>(n) + 1, '\0');
    std::snprintf(out.data(), out.size(), pattern, args...);
    out.resize(static_cast<std::size_t>(n));
    return out;
  }

  std::ostream* out_;
};

// The forgetting table after each stage.
class forgetting_table {
 public:
  explicit forgetting_table(std::ostream& out) : out_(&out) {}
  void on_stage_end(const stage_config&, const forgetting_matrix& m) const { m.print(*out_); }

 private:
  std::ostream* out_;
};

}  // namespace cascade_rl
