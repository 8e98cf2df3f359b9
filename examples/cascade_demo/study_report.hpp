#pragma once
// The forgetting study's driver and report: every study point over `seeds` seeds (one
// world, hence one SFT model, per seed and width), the table of backward transfer,
// worst-domain drop and final mean per point, each stage's update size beside the
// change it made to the other domains, and study.json for scripts/demo_figures.py.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "study.hpp"

namespace demo {

inline nlohmann::json study_json(const std::vector<study_run>& runs, const std::vector<std::uint64_t>& seeds,
                                 std::size_t rollouts, std::size_t kl_prompts) {
  nlohmann::json out = {{"seeds", seeds},
                        {"rollouts", rollouts},
                        {"kl_prompts_per_domain", kl_prompts},
                        {"domains", domains()},
                        {"runs", nlohmann::json::array()}};
  for (const auto& r : runs) {
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& s : r.stages)
      stages.push_back({{"stage", s.stage}, {"kl_others", s.kl_others}, {"others_change", s.others_change},
                        {"own_change", s.own_change}});
    out["runs"].push_back({{"width", r.point.width},
                           {"lr_scale", r.point.lr_scale},
                           {"reset_adam", r.point.reset_adam},
                           {"seed", r.seed},
                           {"parameters", r.parameters},
                           {"backward_transfer", r.backward_transfer},
                           {"worst_drop", r.worst_drop},
                           {"final_mean", r.final_mean},
                           {"start_mean", r.start_mean},
                           {"final", r.final},
                           {"seconds", r.seconds},
                           {"stages", stages}});
  }
  return out;
}

inline std::string study_label(const study_point& p) {
  char b[96];
  std::snprintf(b, sizeof b, "d %-3d lr x%-4.2g Adam %s", p.width, p.lr_scale, p.reset_adam ? "reset" : "kept");
  return b;
}

inline int run_study(const budget& base, const std::shared_ptr<const program_verifier>& programs, std::uint64_t seed,
                     std::size_t seeds, unsigned threads) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t kl_prompts = 32;
  const std::vector<study_point> points = study_points();
  std::set<int> widths;
  for (const auto& p : points) widths.insert(p.width);
  std::vector<study_run> runs;
  std::vector<std::uint64_t> seed_list;
  std::size_t rollouts = 0;
  std::printf("==== --study: the cascade's forgetting over the grid of width x lr scale x Adam state (%zu points), "
              "%zu seeds ====\n",
              points.size(), seeds);
  for (std::size_t k = 0; k < seeds; ++k) {
    const std::uint64_t s = seed + k;
    seed_list.push_back(s);
    for (int width : widths) {
      const budget b = study_budget(base, width);
      world w(s, b, programs, threads);
      rollouts = cascade_rollouts(w);
      std::printf("[seed %llu, d %d: %zu parameters, SFT %.1fs]\n", static_cast<unsigned long long>(s), width,
                  w.policy.weights().params.size(), w.sft_seconds);
      for (const auto& p : points) {
        if (p.width != width) continue;
        runs.push_back(run_study_point(w, p, kl_prompts));
        const study_run& r = runs.back();
        std::printf("  %s  BWT %+.3f  worst %+.3f  final mean %.3f (start %.3f)  update KL", study_label(p).c_str(),
                    r.backward_transfer, r.worst_drop, r.final_mean, r.start_mean);
        for (const auto& u : r.stages) std::printf(" %s %.3f/%+.3f", u.stage.c_str(), u.kl_others, u.others_change);
        std::printf("  (%.1fs)\n", r.seconds);
        std::fflush(stdout);
      }
    }
  }

  const auto over_seeds = [&](const study_point& p, auto f) {
    std::vector<double> v;
    for (const auto& r : runs)
      if (r.point == p) v.push_back(f(r));
    return spread_of(v);
  };
  const auto pm = [](const spread& s) {
    char b[64];
    std::snprintf(b, sizeof b, "%+.3f +- %.3f", s.mean, s.sd);
    return std::string(b);
  };
  std::printf("\n%-34s %10s %16s %16s %16s %16s %16s\n", "point (mean +- sd over seeds)", "parameters", "BWT",
              "worst drop", "final mean", "final - start", "mean update KL");
  for (const auto& p : points) {
    std::size_t params = 0;
    for (const auto& r : runs)
      if (r.point == p) params = r.parameters;
    std::printf("%-34s %10zu %16s %16s %16s %16s %16s\n", study_label(p).c_str(), params,
                pm(over_seeds(p, [](const study_run& r) { return r.backward_transfer; })).c_str(),
                pm(over_seeds(p, [](const study_run& r) { return r.worst_drop; })).c_str(),
                pm(over_seeds(p, [](const study_run& r) { return r.final_mean; })).c_str(),
                pm(over_seeds(p, [](const study_run& r) { return r.final_mean - r.start_mean; })).c_str(),
                pm(over_seeds(p, [](const study_run& r) {
                     double s = 0;
                     for (const auto& u : r.stages) s += u.kl_others;
                     return r.stages.empty() ? 0.0 : s / static_cast<double>(r.stages.size());
                   })).c_str());
  }

  // The grid's two-way view: each metric by width (rows) and lr scale (columns), Adam
  // kept on the left and reset on the right.
  const auto two_way = [&](const char* name, auto f) {
    std::printf("\n%s, mean over seeds (Adam kept | Adam reset):\n%-8s", name, "width");
    for (bool reset : {false, true}) {
      for (double scale : study_lr_scales) std::printf(" %9s", ("x" + std::to_string(scale).substr(0, 3)).c_str());
      std::printf(reset ? "\n" : "  |");
    }
    for (int width : study_widths) {
      std::printf("d %-6d", width);
      for (bool reset : {false, true}) {
        for (double scale : study_lr_scales) std::printf(" %+9.3f", over_seeds({width, scale, reset}, f).mean);
        std::printf(reset ? "\n" : "  |");
      }
    }
  };
  two_way("backward transfer", [](const study_run& r) { return r.backward_transfer; });
  two_way("final mean - SFT start", [](const study_run& r) { return r.final_mean - r.start_mean; });

  std::printf("\neach stage's update (KL before || after on the other domains' prompts, nats/token) beside the "
              "change it made to the other domains' scores, mean over seeds:\n%-34s", "point");
  std::vector<std::string> stage_names;
  for (const auto& u : runs.front().stages) stage_names.push_back(u.stage);
  for (const auto& n : stage_names) std::printf(" %17s", n.substr(0, 17).c_str());
  std::printf("\n");
  std::vector<double> log_kl, change;
  for (const auto& p : points) {
    std::printf("%-34s", study_label(p).c_str());
    for (std::size_t j = 0; j < stage_names.size(); ++j) {
      const spread kl = over_seeds(p, [&](const study_run& r) { return r.stages.at(j).kl_others; });
      const spread ch = over_seeds(p, [&](const study_run& r) { return r.stages.at(j).others_change; });
      std::printf("   %6.3f / %+6.3f", kl.mean, ch.mean);
    }
    std::printf("\n");
  }
  for (const auto& r : runs)
    for (const auto& u : r.stages) {
      log_kl.push_back(std::log10(std::max(u.kl_others, 1e-6)));
      change.push_back(u.others_change);
    }
  std::printf("correlation of log10(update KL) with the other domains' change over all %zu stages of all runs: "
              "%+.3f\n",
              log_kl.size(), log_kl.size() > 1 ? pearson(log_kl, change) : 0.0);

  std::ofstream("study.json") << study_json(runs, seed_list, rollouts, kl_prompts).dump(1) << '\n';
  std::printf("wrote study.json; study done; wall time %.1fs\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace demo
