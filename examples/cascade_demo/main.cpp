// The cascade demo: a small Eigen transformer (eigen_policy.hpp) is warm-started by SFT
// on demonstrations of eight synthetic, verifiable domains, then trained by the
// Nemotron-Cascade 2 order of stages through cascade_rl's engine:
//   IF-RL -> multi-domain RL (MCQA, structured output, tool calls) -> MOPD (teachers:
//   the best snapshot of each domain seen so far) -> RLHF (a Bradley-Terry reward
//   model trained here) -> long-context RL -> code RL -> SWE RL.
// Code answers are programs, run on their unit tests by python3 in cascade_rl::verify's
// sandbox (the bounded interpreter where python3 cannot run); SWE RL is an agent with
// tools whose episodes are graded in sandboxed workspaces (swe_agent.hpp).
// One progress line per step, the forgetting matrix after each stage, a summary with
// what each step generated, padded and waited for. Writes into the working directory:
//   cascade_metrics.jsonl   the engine's metrics lines of the cascade
//   forgetting_matrix.csv   the cascade's forgetting matrix
//   steps.csv               per step of every run: reward (or MOPD's KL), tokens, padding,
//                           verification time, time waiting for the slowest verifier
//   evaluations.csv         every evaluation of every run
//   compare.json            (--compare) every variant's final scores and totals per seed
//   study.json              (--study) the forgetting study's runs (study_report.hpp)
// scripts/demo_figures.py draws the figures from these files.
//
//   cascade_demo [--seed N] [--threads N] [--smoke] [--compare] [--seeds N]
//                [--no-python] [--checkpoint-dir DIR] [--sweep] [--sft-steps N] [--study]
//                [--width N]
//   --smoke      a shortened cascade; exits non-zero unless IF-RL raises its rewards
//   --compare    Cascade RL's claims measured over --seeds seeds (default 3: seed,
//                seed + 1, ...): the cascade against itself without MOPD, with one
//                shared hyperparameter set, against one mixed-domain stage with the
//                same rollouts, IF-RL -> RLHF against RLHF -> IF-RL, and the cascade
//                with MOPD after its last stage as well
//   --study      the forgetting study (study.hpp): the grid of width, learning rate and
//                Adam's state at stage boundaries, over --seeds seeds (verified in
//                process, as with --no-python: the same scores, minutes instead of an hour)
//   --no-python  verify code with the bounded interpreter only, and run SWE episodes on
//                files in memory (the same scores; no sandboxed workspaces)
//   --sweep      the sweep that chose the per-domain learning rates: each GRPO stage
//                alone from the SFT model of the tuning seed (--seed, use 7), each rate
//                of {5e-4, 1e-3, 2e-3}, scored by the stage's own evaluation
//   --sft-steps  steps of the supervised warm start (default 300; the crash test uses
//                30 under AddressSanitizer, where each resumed process redoes SFT)
//   --width      the transformer's width d (default 128; 4 heads, MLP 2d, as the study's)

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <cascade_rl/cascade.hpp>

#include "experiment.hpp"
#include "study_report.hpp"

namespace {

namespace cr = cascade_rl;

struct options {
  std::uint64_t seed = 2024;
  unsigned threads = 2;
  bool smoke = false;
  bool compare = false;
  std::size_t seeds = 3;
  bool python = true;
  bool sweep = false;
  bool study = false;
  std::size_t sft_steps = 300;
  int width = demo::budget{}.width;
  std::string checkpoint_dir{};
};

const char* const usage =
    "usage: cascade_demo [--seed N] [--threads N] [--smoke] [--compare] [--seeds N] [--no-python]\n"
    "                    [--checkpoint-dir DIR] [--sweep] [--sft-steps N] [--study] [--width N]\n";

double mean_of(const std::vector<double>& v, std::size_t first, std::size_t last) {
  double s = 0;
  for (std::size_t i = first; i < last; ++i) s += v[i];
  return last > first ? s / static_cast<double>(last - first) : 0.0;
}

void write_csv(const cr::forgetting_matrix& m, const std::string& path) {
  std::ofstream out(path);
  out << "after";
  for (const auto& d : m.domains()) out << ',' << d;
  out << '\n';
  for (std::size_t r = 0; r < m.rows(); ++r) {
    out << m.label(r);
    for (std::size_t c = 0; c < m.domains().size(); ++c) out << ',' << m.score(r, c);
    out << '\n';
  }
  out << "backward_transfer";
  for (const auto& d : m.domains()) {
    const auto b = m.backward_transfer(d);
    out << ',';
    if (b) out << *b;
  }
  out << '\n';
}

// steps.csv and evaluations.csv rows of a run.
void append_trace(const demo::variant_result& r, std::ostream& steps, std::ostream& evaluations) {
  for (const auto& s : r.trace.steps)
    steps << r.name << ',' << r.seed << ',' << s.stage << ',' << s.global_step << ',' << s.distillation << ','
          << s.curve << ',' << s.responses << ',' << s.tokens << ',' << s.padded << ',' << s.verify_seconds << ','
          << s.wait_seconds << '\n';
  for (const auto& e : r.trace.evaluations)
    for (const auto& sc : e.scores)
      evaluations << r.name << ',' << r.seed << ',' << e.label << ',' << e.global_step << ',' << e.stage_end << ','
                  << sc.domain << ',' << sc.score << '\n';
}

nlohmann::json compute_json(const demo::compute_totals& t) {
  return {{"steps", t.steps},           {"rollouts", t.rollouts},          {"tokens", t.tokens},
          {"padded", t.padded},         {"waste", t.waste()},              {"waste_fraction", t.waste_fraction()},
          {"verify_seconds", t.verify_seconds}, {"wait_seconds", t.wait_seconds}};
}

nlohmann::json run_json(const demo::variant_result& r) {
  nlohmann::json final_scores = nlohmann::json::object();
  for (const auto& d : r.report.forgetting.domains()) final_scores[d] = r.final_score(d);
  const auto bwt = r.report.backward_transfer_overall;
  return {{"variant", r.name},
          {"seed", r.seed},
          {"final", final_scores},
          {"final_mean", r.final_mean()},
          {"backward_transfer", bwt ? nlohmann::json(*bwt) : nlohmann::json()},
          {"regressions", r.report.regressions.size()},
          {"rollouts", r.rollouts},
          {"seconds", r.seconds},
          {"compute", compute_json(demo::totals_of(r.trace.steps))},
          {"forgetting", r.report.forgetting.to_json()}};
}

// Per stage of a run: its steps' totals.
std::vector<std::pair<std::string, demo::compute_totals>> totals_by_stage(const demo::run_trace& t) {
  std::vector<std::pair<std::string, demo::compute_totals>> out;
  for (const auto& s : t.steps) {
    if (out.empty() || out.back().first != s.stage) out.emplace_back(s.stage, demo::compute_totals{});
    out.back().second.add(s);
  }
  return out;
}

void print_compute_table(const std::vector<std::pair<std::string, demo::compute_totals>>& rows) {
  std::printf("%-18s %6s %9s %9s %9s %7s %10s %10s\n", "stage", "steps", "rollouts", "tokens", "padded", "waste",
              "verify s", "wait s");
  for (const auto& [name, t] : rows)
    std::printf("%-18s %6zu %9zu %9.0f %9.0f %6.1f%% %10.3f %10.3f\n", name.c_str(), t.steps, t.rollouts, t.tokens,
                t.padded, 100 * t.waste_fraction(), t.verify_seconds, t.wait_seconds);
}

std::string pm(const demo::spread& s, int digits = 3) {
  char b[96];
  std::snprintf(b, sizeof b, "%.*f +- %.*f", digits, s.mean, digits, s.sd);
  return b;
}

// "A - B: mean +- sd (A higher on k of n seeds)"
std::string paired(const std::vector<double>& a, const std::vector<double>& b, int digits = 3) {
  std::vector<double> d;
  std::size_t higher = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d.push_back(a[i] - b[i]);
    higher += a[i] > b[i];
  }
  const demo::spread s = demo::spread_of(d);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%+.*f +- %.*f (higher on %zu of %zu seeds)", digits, s.mean, digits, s.sd, higher,
                a.size());
  return buf;
}

// The SWE agent's stage: its eval score before and after, its episodes (turns, end
// reasons, drift) and what grading them cost.
void print_swe_agent(const demo::variant_result& r, const demo::world& w) {
  const cr::forgetting_matrix& m = r.report.forgetting;
  std::size_t row = 0;
  for (std::size_t k = 1; k < m.rows(); ++k)
    if (m.label(k) == "swe_rl") row = k;
  std::vector<double> turns;
  std::array<std::size_t, cr::end_reason_count> reasons{};
  double drift = 0;
  for (const auto& s : r.trace.steps) {
    if (!s.episodes) continue;
    turns.push_back(s.episodes->turns_mean);
    for (std::size_t k = 0; k < reasons.size(); ++k) reasons[k] += s.episodes->end_reasons[k];
    drift = std::max(drift, s.episodes->log_prob_drift);
  }
  if (row == 0 || turns.empty()) return;
  const std::size_t k = std::min<std::size_t>(5, turns.size() / 2);
  std::printf("SWE RL as an agent (%s): eval swe %.3f -> %.3f; turns per episode %.2f -> %.2f (first/last %zu "
              "steps); end reasons over its %zu steps:",
              w.swe->description().c_str(), m.score(row - 1, "swe"), m.score(row, "swe"), mean_of(turns, 0, k),
              mean_of(turns, turns.size() - k, turns.size()), k, turns.size());
  for (std::size_t e = 0; e < reasons.size(); ++e)
    std::printf(" %s %zu", std::string(cr::name_of(static_cast<cr::end_reason>(e))).c_str(), reasons[e]);
  std::printf("; sampler/trainer drift %g\n  graded %zu episodes of this run's training and evaluation, %zu in the "
              "sandbox, %.1f s of grading (wall, summed over workers)\n",
              drift, w.swe->grades(), w.swe->sandbox_grades(), w.swe->grade_seconds());
}

// One greedy SWE episode of the policy: the trajectory's words and its outcome.
void print_swe_sample(demo::world& w, const cr::stage_config& swe) {
  const cr::prompt& p = w.data.at("swe").eval.front().prompt;
  const cr::episode_batch e =
      cr::run_episodes(w.policy, demo::swe_agent_factory{w.swe}, std::span<const cr::prompt>(&p, 1), 1,
                       swe.eval_sampling, cr::episode_options_of(swe), 0);
  std::printf("  %-22s %-46s -> %s  [%s] score %.2f\n", "swe", p.text.c_str(), demo::decode(e.batch.response_tokens(0)).c_str(),
              std::string(cr::name_of(e.batch.episodes[0].reason)).c_str(), e.rewards[0]);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") o.smoke = true;
    else if (a == "--compare") o.compare = true;
    else if (a == "--no-python") o.python = false;
    else if (a == "--sweep") o.sweep = true;
    else if (a == "--study") o.study = true;
    else if (a == "--seed" && i + 1 < argc) o.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--seeds" && i + 1 < argc) o.seeds = std::max<std::size_t>(1, std::strtoull(argv[++i], nullptr, 10));
    else if (a == "--threads" && i + 1 < argc) o.threads = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    else if (a == "--checkpoint-dir" && i + 1 < argc) o.checkpoint_dir = argv[++i];
    else if (a == "--sft-steps" && i + 1 < argc) o.sft_steps = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--width" && i + 1 < argc) {
      o.width = std::atoi(argv[++i]);
      if (o.width < 4 || o.width % 4 != 0) {
        std::fputs("cascade_demo: --width must be a positive multiple of 4 (the model has 4 heads)\n", stderr);
        return 2;
      }
    }
    else {
      std::fputs(usage, stderr);
      return 2;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  demo::budget b = demo::study_budget({}, o.width);
  b.sft_steps = o.sft_steps;
  if (o.smoke) {
    b.if_steps = 30;
    b.multi_steps = b.mopd_steps = b.rlhf_steps = b.long_steps = b.code_steps = b.swe_steps = 2;
    b.eval_prompts = 64;
    b.swe_eval_prompts = 16;
  }

  if (o.study && o.python) {
    // 54 cascades: each grading its 3,264 SWE episodes in sandboxed workspaces would
    // take the study from minutes to an hour; the interpreter gives the same scores.
    std::printf("--study verifies in process (as --no-python): the same scores as the sandbox, bit for bit\n");
    o.python = false;
  }
  const auto programs = std::make_shared<const demo::program_verifier>(o.python);
  std::printf("code verified by %s; SWE episodes %s\n", programs->description().c_str(),
              demo::swe_agent_host::description_for(programs->sandboxed()).c_str());
  if (o.study) return demo::run_study(b, programs, o.seed, o.seeds, o.threads);
  const auto make_world = [&](std::uint64_t seed) {
    auto w = std::make_unique<demo::world>(seed, b, programs, o.threads);
    std::printf("[seed %llu] reward model: Bradley-Terry on 4000 synthetic preference pairs, nll %.3f, held-out "
                "accuracy %.3f (labels are noisy), agreement with the hidden preference %.3f; SFT %zu steps, "
                "nll/token %.4f, %.1fs\n",
                static_cast<unsigned long long>(seed), w->rm_nll, w->rm_accuracy, w->rm_gold_agreement, b.sft_steps,
                w->sft_nll.empty() ? 0.0 : w->sft_nll.back(), w->sft_seconds);
    return w;
  };
  std::unique_ptr<demo::world> w = make_world(o.seed);
  std::printf("policy: one-layer Eigen transformer, %zu parameters (d %d, %d heads, MLP %d, vocabulary %d)\n",
              w->policy.weights().params.size(), b.width, b.heads, b.ffn, demo::vocabulary_size());

  if (o.sweep) {
    const std::vector<double> grid{5e-4, 1e-3, 2e-3};
    std::map<double, std::vector<double>> by_lr;
    std::printf("%-16s", "stage \\ lr");
    for (double lr : grid) std::printf(" %9.0e", lr);
    std::printf("   (own evaluation after the stage alone; SFT model of seed %llu)\n",
                static_cast<unsigned long long>(o.seed));
    for (const char* stage : {"if_rl", "multi_domain_rl", "rlhf", "long_context_rl", "code_rl", "swe_rl"}) {
      std::printf("%-16s", stage);
      double best = -1, best_lr = 0;
      for (double lr : grid) {
        demo::hparams h = demo::per_domain_hparams();
        demo::hparams_of(h, stage).lr = lr;
        const demo::variant_result r = demo::run_stage_alone(*w, h, stage);
        double own = 0;
        for (const auto& e : r.configs.front().evals) own += r.final_score(e.domain);
        own /= static_cast<double>(r.configs.front().evals.size());
        by_lr[lr].push_back(own);
        if (own > best) best = own, best_lr = lr;
        std::printf(" %9.4f", own);
        std::fflush(stdout);
      }
      std::printf("   best %.0e\n", best_lr);
    }
    std::printf("%-16s", "mean");
    for (double lr : grid) std::printf(" %9.4f", demo::spread_of(by_lr[lr]).mean);
    std::printf("   (the shared set takes the best mean)\nsweep done; wall time %.1fs\n", elapsed());
    return 0;
  }

  // ---- the cascade ------------------------------------------------------------------------
  std::ofstream metrics("cascade_metrics.jsonl", std::ios::trunc);
  std::ofstream steps_csv("steps.csv", std::ios::trunc), evaluations_csv("evaluations.csv", std::ios::trunc);
  steps_csv << "variant,seed,stage,global_step,distillation,curve,responses,tokens,padded,verify_seconds,wait_seconds\n";
  evaluations_csv << "variant,seed,label,global_step,stage_end,domain,score\n";
  const demo::variant_result main_run =
      demo::run_cascade_variant(*w, demo::per_domain_hparams(), true, "cascade", {o.checkpoint_dir},
                                cr::observer_list(cr::console_progress(std::cout), cr::forgetting_table(std::cout),
                                                  cr::jsonl_metrics(metrics)));
  const cr::forgetting_matrix& m = main_run.report.forgetting;
  write_csv(m, "forgetting_matrix.csv");
  append_trace(main_run, steps_csv, evaluations_csv);

  // ---- summary -------------------------------------------------------------------------
  std::printf("\n==== summary (seed %llu, %.1fs) ====\n", static_cast<unsigned long long>(o.seed), elapsed());
  std::map<std::string, std::vector<double>> curves;
  for (const auto& s : main_run.trace.steps) curves[s.stage].push_back(s.curve);
  bool every_stage_rose = true;
  for (std::size_t r = 1; r < m.rows(); ++r) {
    const std::string& stage = m.label(r);
    const auto& tr = curves[stage];
    const std::size_t k = std::min<std::size_t>(5, tr.size() / 2);
    std::printf("%-16s %s %.3f -> %.3f (first/last %zu steps)", stage.c_str(),
                stage == "mopd" ? "KL to teachers" : "train reward", mean_of(tr, 0, k),
                mean_of(tr, tr.size() - k, tr.size()), k);
    for (const auto& c : main_run.configs)
      if (c.name == stage && !c.evals.empty()) {
        std::printf("  eval");
        for (const auto& e : c.evals) {
          const double before = m.score(r - 1, e.domain), after = m.score(r, e.domain);
          every_stage_rose = every_stage_rose && (after > before || (before >= 1.0 && after >= before));
          std::printf("  %s %.3f -> %.3f", e.domain.c_str(), before, after);
        }
      }
    std::printf("\n");
  }
  std::printf("every RL stage raised its own domains' eval scores (or held a perfect one): %s\n",
              every_stage_rose ? "yes" : "NO");
  if (main_run.report.regressions.empty()) std::printf("no regression above %.2f\n", 0.02);
  for (const auto& r : main_run.report.regressions)
    std::printf("regression: %s fell %.3f after %s (%.3f -> %.3f)\n", r.domain.c_str(), r.drop(), r.stage.c_str(),
                r.before, r.after);
  std::printf("MOPD (teachers: best snapshot per domain):");
  for (const auto& d : std::vector<std::string>{"instruction_following", "mcqa", "structured_output", "tool_calling"})
    std::printf("  %s %.3f -> %.3f", d.c_str(), m.score(2, d), m.score(3, d));
  std::printf("\nfinal mean score over %zu domains: %.3f (before the cascade %.3f)\n", m.domains().size(),
              main_run.final_mean(), [&] {
                double s = 0;
                for (std::size_t c = 0; c < m.domains().size(); ++c) s += m.score(0, c);
                return s / static_cast<double>(m.domains().size());
              }());
  std::printf("\nwhat the steps cost (tokens generated; padded: every response padded to the step's longest; "
              "verify: verification wall time; wait: per step, how long a verification waits on average for "
              "the slowest of its step)\n");
  auto by_stage = totals_by_stage(main_run.trace);
  by_stage.emplace_back("cascade", demo::totals_of(main_run.trace.steps));
  print_compute_table(by_stage);
  print_swe_agent(main_run, *w);
  std::printf("verification latency per response (mean, ms):");
  for (const auto& [d, v] : main_run.trace.latency_by_domain)
    std::printf("  %s %.3f", d.c_str(), 1e3 * demo::spread_of(v).mean);
  std::printf("\n(%zu sandbox runs of python3; %zu failed and were redone by the interpreter; python3 and the "
              "interpreter disagreed on %zu of %zu programs)\n",
              programs->sandbox_runs(), programs->sandbox_failures(), programs->disagreements(), programs->programs());
  std::printf("greedy samples of the final policy:\n");
  for (const auto& d : demo::single_turn_domains()) {
    const cr::prompt& p = w->data[d].eval.front().prompt;
    const auto batch = w->policy.generate(std::span<const cr::prompt>(&p, 1),
                                          {1, {.temperature = 0.0, .max_response_length = b.eval_length}, 0});
    const double s = w->eval_reward.score(p, batch.response_tokens(0), batch.finish_reasons[0] == cr::finish_reason::truncated);
    std::printf("  %-22s %-46s -> %-30s score %.2f\n", d.c_str(), p.text.substr(0, 46).c_str(), batch.texts[0].c_str(), s);
  }
  print_swe_sample(*w, main_run.configs.back());
  std::printf("wrote cascade_metrics.jsonl, forgetting_matrix.csv, steps.csv, evaluations.csv; wall time %.1fs\n",
              elapsed());

  if (o.smoke) {
    const auto& tr = curves["if_rl"];
    const std::size_t k = std::min<std::size_t>(5, tr.size() / 2);
    const bool rose = mean_of(tr, tr.size() - k, tr.size()) > mean_of(tr, 0, k) &&
                      m.score(1, "instruction_following") > m.score(0, "instruction_following");
    std::printf("smoke: IF-RL rewards %s\n", rose ? "rose" : "did NOT rise");
    return rose ? 0 : 1;
  }
  if (!o.compare) return 0;

  // ---- the claims, over seeds ---------------------------------------------------------------
  std::printf("\n==== --compare: Cascade RL's claims over %zu seeds (%llu..%llu), every variant from the same SFT "
              "model with %zu training rollouts ====\n",
              o.seeds, static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.seed + o.seeds - 1),
              main_run.rollouts);
  std::map<std::string, std::vector<demo::variant_result>> runs;  // variant -> one per seed
  const auto quiet = [&](demo::variant_result r, bool traced = false) {
    const demo::compute_totals t = demo::totals_of(r.trace.steps);
    std::printf("  seed %llu %-15s final mean %.3f  rollouts %zu  tokens %.0f  waste %.1f%%  verify %.2fs  wait "
                "%.2fs  (%.1fs)\n",
                static_cast<unsigned long long>(r.seed), r.name.c_str(), r.final_mean(), r.rollouts, t.tokens,
                100 * t.waste_fraction(), t.verify_seconds, t.wait_seconds, r.seconds);
    if (!traced) append_trace(r, steps_csv, evaluations_csv);
    std::fflush(stdout);
    runs[r.name].push_back(std::move(r));
  };
  for (std::size_t k = 0; k < o.seeds; ++k) {
    const std::uint64_t seed = o.seed + k;
    if (k > 0) w = make_world(seed);
    if (k == 0) quiet(main_run, true);
    else quiet(demo::run_cascade_variant(*w, demo::per_domain_hparams(), true, "cascade", {}));
    quiet(demo::run_cascade_variant(*w, demo::per_domain_hparams(), false, "no_mopd", {}));
    quiet(demo::run_cascade_variant(*w, demo::shared_hparams(), true, "shared_hparams", {}));
    quiet(demo::run_mixed_variant(*w, demo::shared_hparams()));
    quiet(demo::run_order_variant(*w, demo::per_domain_hparams(), true));
    quiet(demo::run_order_variant(*w, demo::per_domain_hparams(), false));
    quiet(demo::run_mopd_end_variant(*w, demo::per_domain_hparams()));
  }

  const auto final_of = [&](const std::string& variant, const std::string& domain) {
    std::vector<double> v;
    for (const auto& r : runs[variant]) v.push_back(domain.empty() ? r.final_mean() : r.final_score(domain));
    return v;
  };
  // A variant without a domain's column (the order variants have no SWE stage) shows "-".
  const auto has = [&](const std::string& variant, const std::string& domain) {
    const auto& ds = runs[variant].front().report.forgetting.domains();
    return std::find(ds.begin(), ds.end(), domain) != ds.end();
  };
  const auto table = [&](const std::vector<std::pair<std::string, std::string>>& rows) {
    std::printf("%-26s", "final score (mean +- sd)");
    for (const auto& d : demo::domains()) std::printf(" %15s", d.substr(0, 15).c_str());
    std::printf(" %15s\n", "mean");
    for (const auto& [variant, label] : rows) {
      std::printf("%-26s", label.c_str());
      for (const auto& d : demo::domains())
        std::printf(" %15s", has(variant, d) ? pm(demo::spread_of(final_of(variant, d))).c_str() : "-");
      std::printf(" %15s\n", pm(demo::spread_of(final_of(variant, ""))).c_str());
    }
  };
  const auto series = [&](const std::string& variant, auto f) {
    std::vector<double> v;
    for (const auto& r : runs[variant]) v.push_back(f(r));
    return v;
  };

  std::printf("\n-- claim 1: later stages rarely degrade earlier domains, and MOPD recovers what was lost\n");
  const auto bwt = series("cascade", [](const demo::variant_result& r) {
    return r.report.backward_transfer_overall.value_or(0.0);
  });
  const auto worst = series("cascade", [](const demo::variant_result& r) {
    double lowest = 0;
    for (const auto& [d, b] : r.report.backward_transfer) lowest = std::min(lowest, b.value_or(0.0));
    return lowest;
  });
  const auto regressions = series("cascade", [](const demo::variant_result& r) {
    return static_cast<double>(r.report.regressions.size());
  });
  std::printf("backward transfer of the cascade (final - after the domain's last stage), mean over domains: %s; "
              "worst domain %s; regressions above 0.02: %s\n",
              pm(demo::spread_of(bwt)).c_str(), pm(demo::spread_of(worst)).c_str(),
              pm(demo::spread_of(regressions), 1).c_str());
  for (const auto& d : std::vector<std::string>{"instruction_following", "mcqa", "structured_output", "tool_calling"}) {
    const auto lost = series("cascade", [&](const demo::variant_result& r) {
      return r.report.forgetting.score(2, d) - r.report.forgetting.score(1, d);  // multi-domain RL's effect
    });
    const auto recovered = series("cascade", [&](const demo::variant_result& r) {
      return r.report.forgetting.score(3, d) - r.report.forgetting.score(2, d);  // MOPD's
    });
    std::printf("  %-22s multi-domain RL changed it by %s, MOPD by %s\n", d.c_str(), pm(demo::spread_of(lost)).c_str(),
                pm(demo::spread_of(recovered)).c_str());
  }
  table({{"cascade", "cascade (MOPD on)"}, {"no_mopd", "cascade, MOPD off"}});
  std::printf("MOPD on - off, final mean: %s\n", paired(final_of("cascade", ""), final_of("no_mopd", "")).c_str());
  std::printf("MOPD after the last stage as well (the seven single-turn domains, teachers: each domain's best "
              "snapshot; %zu rollouts), per domain: before it (after SWE RL), after it, the teacher's score (best "
              "row seen)\n",
              runs["mopd_end"].front().rollouts);
  for (const auto& d : demo::single_turn_domains()) {
    const auto row_of = [&](const demo::variant_result& r, std::size_t from_end) {
      return r.report.forgetting.score(r.report.forgetting.rows() - from_end, d);
    };
    const auto before = series("mopd_end", [&](const demo::variant_result& r) { return row_of(r, 2); });
    const auto after = series("mopd_end", [&](const demo::variant_result& r) { return row_of(r, 1); });
    const auto best = series("mopd_end", [&](const demo::variant_result& r) {
      double top = 0;
      for (std::size_t k = 0; k + 1 < r.report.forgetting.rows(); ++k) top = std::max(top, r.report.forgetting.score(k, d));
      return top;
    });
    std::printf("  %-22s %s -> %s (teacher %s): recovered %s\n", d.c_str(), pm(demo::spread_of(before)).c_str(),
                pm(demo::spread_of(after)).c_str(), pm(demo::spread_of(best)).c_str(), paired(after, before).c_str());
  }
  table({{"cascade", "cascade"}, {"mopd_end", "cascade + MOPD at the end"}});
  std::printf("MOPD at the end too - cascade, final mean: %s\n",
              paired(final_of("mopd_end", ""), final_of("cascade", "")).c_str());

  std::printf("\n-- claim 2: each domain with its own hyperparameters\n");
  table({{"cascade", "per-domain hyperparameters"}, {"shared_hparams", "one shared set"}});
  std::printf("per-domain - shared, final mean: %s\n",
              paired(final_of("cascade", ""), final_of("shared_hparams", "")).c_str());

  std::printf("\n-- claim 3: compute, the cascade against one mixed stage with the same rollouts\n");
  const auto compute_series = [&](const std::string& variant, auto f) {
    return series(variant, [&](const demo::variant_result& r) { return f(demo::totals_of(r.trace.steps)); });
  };
  std::printf("%-20s %26s %26s  %s\n", "", "cascade", "one mixed stage", "cascade - mixed");
  const auto compute_row = [&](const char* label, auto f, int digits) {
    const auto a = compute_series("cascade", f), c = compute_series("mixed", f);
    std::printf("%-20s %26s %26s  %s\n", label, pm(demo::spread_of(a), digits).c_str(), pm(demo::spread_of(c), digits).c_str(),
                paired(a, c, digits).c_str());
  };
  compute_row("generated tokens", [](const demo::compute_totals& t) { return t.tokens; }, 0);
  compute_row("padded tokens", [](const demo::compute_totals& t) { return t.padded; }, 0);
  compute_row("padding waste", [](const demo::compute_totals& t) { return t.waste(); }, 0);
  compute_row("waste fraction", [](const demo::compute_totals& t) { return t.waste_fraction(); }, 3);
  compute_row("verification s", [](const demo::compute_totals& t) { return t.verify_seconds; }, 2);
  compute_row("waiting s", [](const demo::compute_totals& t) { return t.wait_seconds; }, 2);
  table({{"cascade", "cascade"}, {"mixed", "one mixed stage"}});
  std::printf("cascade - mixed, final mean: %s\n", paired(final_of("cascade", ""), final_of("mixed", "")).c_str());

  std::printf("\n-- claim 4: IF-RL before RLHF (IF-RL hurts chat, RLHF after it barely hurts IF)\n");
  table({{"if_then_rlhf", "IF-RL -> RLHF"}, {"rlhf_then_if", "RLHF -> IF-RL"}});
  for (const auto& d : std::vector<std::string>{"instruction_following", "chat"})
    std::printf("%s: IF-RL -> RLHF minus RLHF -> IF-RL %s\n", d.c_str(),
                paired(final_of("if_then_rlhf", d), final_of("rlhf_then_if", d)).c_str());
  const auto effect = [&](const std::string& variant, std::size_t row, const std::string& d) {
    return series(variant, [&](const demo::variant_result& r) {
      return r.report.forgetting.score(row, d) - r.report.forgetting.score(row - 1, d);
    });
  };
  std::printf("the second stage's effect on the first's domain: RLHF after IF-RL on instruction following %s; "
              "IF-RL after RLHF on chat %s\n",
              pm(demo::spread_of(effect("if_then_rlhf", 2, "instruction_following"))).c_str(),
              pm(demo::spread_of(effect("rlhf_then_if", 2, "chat"))).c_str());

  nlohmann::json out = {{"seeds", nlohmann::json::array()},
                        {"domains", demo::domains()},
                        {"rollouts", main_run.rollouts},
                        {"verifier", programs->description()},
                        {"runs", nlohmann::json::array()}};
  for (std::size_t k = 0; k < o.seeds; ++k) out["seeds"].push_back(o.seed + k);
  for (const auto& [variant, rs] : runs)
    for (const auto& r : rs) out["runs"].push_back(run_json(r));
  nlohmann::json latency = nlohmann::json::object();
  for (const auto& [d, v] : main_run.trace.latency_by_domain) latency[d] = demo::spread_of(v).mean;
  out["latency_by_domain"] = latency;
  std::ofstream("compare.json") << out.dump(1) << '\n';
  std::printf("\nwrote compare.json; compare done; wall time %.1fs\n", elapsed());
  return 0;
}
