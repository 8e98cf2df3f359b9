#pragma once
// What the demo measures of a run, beyond the engine's own metrics:
//   per step  generated tokens; the tokens of the batch padded to its longest response
//             and the padding waste (padded - generated); the verification wall time
//             (the engine's reward time); and the time a response's verification waits
//             for the slowest one of its step: max - mean of the responses' verification
//             latencies (a response verified by a sandbox run waits for that run);
//   per run   those summed, and the curves (training reward or MOPD's KL per step, every
//             evaluation) for the figures;
//   per seed  mean, sample standard deviation, min and max of a quantity over seeds.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <cascade_rl/cascade/metrics.hpp>
#include <cascade_rl/cascade/observers.hpp>

#include "demo_reward.hpp"

namespace demo {

struct step_compute {
  std::string stage;
  std::size_t global_step = 0;
  std::size_t responses = 0;
  double tokens = 0;      // generated
  double padded = 0;      // responses x longest response
  double verify_seconds = 0;
  double wait_seconds = 0;
  bool distillation = false;  // MOPD: no reward, the curve is the KL to the teachers
  double curve = 0;           // reward mean, or KL to the teachers
  std::optional<cr::episode_metrics> episodes{};  // an agentic stage's (SWE RL)
  [[nodiscard]] double waste() const { return padded - tokens; }
};

// max - mean of the latencies (0 for none).
inline double wait_for_slowest(std::span<const double> latency) {
  if (latency.empty()) return 0.0;
  double sum = 0.0, top = latency[0];
  for (double t : latency) {
    sum += t;
    top = std::max(top, t);
  }
  return top - sum / static_cast<double>(latency.size());
}

inline step_compute compute_of(const cr::step_metrics& m, const verification_record& v) {
  step_compute s;
  s.stage = m.stage;
  s.global_step = m.global_step;
  s.responses = m.responses;
  s.tokens = std::round(static_cast<double>(m.responses) * m.length_mean);
  s.padded = static_cast<double>(m.responses) * static_cast<double>(m.length_max);
  s.verify_seconds = m.reward_seconds;
  s.wait_seconds = wait_for_slowest(v.latency);
  s.distillation = m.kl_to_teacher.has_value() && !m.rewarded;
  s.curve = s.distillation ? *m.kl_to_teacher : m.reward_mean;
  s.episodes = m.episodes;
  return s;
}

struct compute_totals {
  std::size_t steps = 0, rollouts = 0;
  double tokens = 0, padded = 0, verify_seconds = 0, wait_seconds = 0;
  [[nodiscard]] double waste() const { return padded - tokens; }
  [[nodiscard]] double waste_fraction() const { return padded > 0 ? waste() / padded : 0.0; }
  void add(const step_compute& s) {
    ++steps;
    rollouts += s.responses;
    tokens += s.tokens;
    padded += s.padded;
    verify_seconds += s.verify_seconds;
    wait_seconds += s.wait_seconds;
  }
};

inline compute_totals totals_of(std::span<const step_compute> steps) {
  compute_totals t;
  for (const auto& s : steps) t.add(s);
  return t;
}

// One evaluation: a forgetting-matrix row (stage_end) or one inside a stage.
struct evaluation_point {
  std::string label;
  std::size_t global_step = 0;
  bool stage_end = false;
  std::vector<cr::domain_score> scores;
};

// What the demo keeps of a run: per-step compute and curves, every evaluation, and the
// latencies of each domain's verifications.
struct run_trace {
  std::vector<step_compute> steps;
  std::vector<evaluation_point> evaluations;
  std::map<std::string, std::vector<double>> latency_by_domain;
  std::size_t sandbox_runs = 0;
};

// The observer that fills a run_trace (the training reward's ledger holds the step's
// verification record when on_step is called).
class trace_recorder {
 public:
  trace_recorder(run_trace& trace, std::shared_ptr<verification_ledger> ledger)
      : trace_(&trace), ledger_(std::move(ledger)) {}

  void on_step(const cr::step_metrics& m) const {
    const verification_record v = ledger_ ? ledger_->take() : verification_record{};
    trace_->steps.push_back(compute_of(m, v));
    trace_->sandbox_runs += v.sandbox_runs;
    for (std::size_t i = 0; i < v.latency.size(); ++i) trace_->latency_by_domain[v.domains[i]].push_back(v.latency[i]);
  }
  void on_evaluation(const cr::evaluation_record& e) const {
    const std::size_t at = trace_->steps.empty() ? 0 : trace_->steps.back().global_step;
    trace_->evaluations.push_back({e.label, at, e.stage_end, e.scores});
  }

 private:
  run_trace* trace_;
  std::shared_ptr<verification_ledger> ledger_;
};

// ---- over seeds ------------------------------------------------------------------------

struct spread {
  double mean = 0, sd = 0, min = 0, max = 0;
  std::size_t n = 0;
};

// Mean, sample standard deviation (n - 1; 0 for one value), min, max.
inline spread spread_of(std::span<const double> v) {
  spread s;
  s.n = v.size();
  if (v.empty()) return s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

}  // namespace demo
