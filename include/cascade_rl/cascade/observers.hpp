#pragma once
// Observers watch a run. An observer is any object with some of these members (the
// runner calls those that exist and skips the others):
//   on_warning(std::string_view)                       ordering check and the like
//   on_stage_begin(const stage_config&, std::size_t stage_index)
//   on_step(const step_metrics&)                       after every step
//   on_evaluation(const evaluation_record&)            before the first stage, inside a
//                                                      stage (stop criteria), after each
//   on_stage_end(const stage_config&, const forgetting_matrix&)
// Three ready-made ones: metrics as JSON lines, a one-line console progress per step,
// and the forgetting table after each stage.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <ostream>
#include <string>
#include <string_view>
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
class console_progress {
 public:
  explicit console_progress(std::ostream& out) : out_(&out) {}

  void on_warning(std::string_view w) const { *out_ << "warning: " << w << '\n'; }
  void on_stage_begin(const stage_config& c, std::size_t index) const {
    *out_ << "stage " << index + 1 << ": " << c.name << " (" << to_string(c.kind) << "), "
          << c.prompts_per_step << " prompts x " << c.group_size << ", " << c.steps << " steps\n";
  }
  void on_step(const step_metrics& m) const {
    char line[320];
    const int n = std::snprintf(
        line, sizeof line,
        "[%s %zu/%zu | %zu] lr %.2e  reward %.3f  acc %.3f  len %.0f  zero-var %.2f  "
        "filtered %zu  loss %+.4f",
        m.stage.c_str(), m.step, m.steps, m.global_step, m.lr, m.reward_mean, m.accuracy,
        m.length_mean, m.zero_variance_fraction, m.filtered_sequences, m.loss);
    std::string text(line, static_cast<std::size_t>(n > 0 ? std::min<int>(n, sizeof line - 1) : 0));
    if (m.kl_to_teacher) {
      std::snprintf(line, sizeof line, "  kl %.4f  band-masked %.3f", *m.kl_to_teacher,
                    m.importance_masked_fraction);
      text += line;
    }
    std::snprintf(line, sizeof line, "  time gen %.2fs rew %.2fs upd %.2fs", m.generation_seconds,
                  m.reward_seconds, m.update_seconds);
    *out_ << text << line << '\n' << std::flush;
  }

 private:
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
