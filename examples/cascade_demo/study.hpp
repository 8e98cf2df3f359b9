#pragma once
// The forgetting study (cascade_demo --study): the cascade's forgetting against model
// width, learning rate and Adam's state at a stage boundary, at the same rollouts, over
// the full factorial grid (18 points, each over the study's seeds):
//   width       32, 64, 128 (MLP twice the width, 4 heads)
//   lr scale    0.1, 0.3, 1 (every swept rate, MOPD's included, times the scale; the
//               demo runs at 0.3, experiment.hpp's default_lr_scale)
//   Adam        kept across stages (the engine's default: one optimizer) or reset at
//               the start of every stage
// The grid holds the demo's former default (d 64, the swept rates, Adam kept) and its
// present one (d 64, x 0.3, Adam kept); a width-128 point costs about four times a
// width-64 one.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "experiment.hpp"
#include "measurements.hpp"
#include "update_size.hpp"

namespace demo {

struct study_point {
  int width = 64;
  double lr_scale = 1.0;
  bool reset_adam = false;
  bool operator==(const study_point&) const = default;
};

inline const int study_widths[] = {32, 64, 128};
inline const double study_lr_scales[] = {0.1, 0.3, 1.0};

// Every (width, lr scale, Adam) combination, by width first (one SFT model per width and
// seed serves its six points).
inline std::vector<study_point> study_points() {
  std::vector<study_point> out;
  for (int width : study_widths)
    for (double scale : study_lr_scales)
      for (bool reset : {false, true}) out.push_back({width, scale, reset});
  return out;
}

// The budget of a study point: the default sizes at the point's width.
inline budget study_budget(budget b, int width) {
  b.width = width;
  b.heads = 4;
  b.ffn = 2 * width;
  return b;
}

// Pearson's correlation of x and y (0 when either is constant).
inline double pearson(std::span<const double> x, std::span<const double> y) {
  cr::detail::require_size(y.size(), x.size(), "y", "one per entry of x");
  if (x.size() < 2) cr::detail::fail("x", "needs at least two entries");
  const spread sx = spread_of(x), sy = spread_of(y);
  if (sx.sd == 0 || sy.sd == 0) return 0.0;
  double c = 0;
  for (std::size_t i = 0; i < x.size(); ++i) c += (x[i] - sx.mean) * (y[i] - sy.mean);
  return c / (static_cast<double>(x.size() - 1) * sx.sd * sy.sd);
}

// One run of the study.
struct study_run {
  study_point point;
  std::uint64_t seed = 0;
  std::size_t parameters = 0;
  double backward_transfer = 0, worst_drop = 0, final_mean = 0, start_mean = 0, seconds = 0;
  std::map<std::string, double> final;
  std::vector<stage_update> stages;
};

// The cascade of one study point from the world's SFT model (the world's width must be
// the point's).
inline study_run run_study_point(world& w, const study_point& p, std::size_t kl_prompts) {
  std::vector<std::pair<std::string, std::vector<cr::prompt>>> prompts;
  for (const auto& d : domains()) {
    const auto& eval = w.data.at(d).eval;
    std::vector<cr::prompt> ps;
    for (std::size_t i = 0; i < std::min(kl_prompts, eval.size()); ++i) ps.push_back(eval[i].prompt);
    prompts.emplace_back(d, std::move(ps));
  }
  study_run r;
  r.point = p;
  r.seed = w.seed;
  r.parameters = w.policy.weights().params.size();
  const update_probe probe(w.policy, std::move(prompts), r.stages, static_cast<int>(w.sizes.eval_length));
  const hparams h = scaled(swept_hparams(), p.lr_scale);
  const cr::observer_list observers =
      p.reset_adam ? cr::observer_list(probe, adam_reset(w.policy)) : cr::observer_list(probe);
  const variant_result v = run_cascade_variant(w, h, true, "study", {}, observers);
  const auto& m = v.report.forgetting;
  r.backward_transfer = v.report.backward_transfer_overall.value_or(0.0);
  r.worst_drop = worst_backward_transfer(m);
  r.final_mean = v.final_mean();
  for (std::size_t c = 0; c < m.domains().size(); ++c) {
    r.start_mean += m.score(0, c) / static_cast<double>(m.domains().size());
    r.final[m.domains()[c]] = m.score(m.rows() - 1, c);
  }
  r.seconds = v.seconds;
  return r;
}

}  // namespace demo
