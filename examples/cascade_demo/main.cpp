// The cascade demo: a small Eigen transformer (eigen_policy.hpp) is warm-started by SFT
// on demonstrations of eight synthetic, verifiable domains, then trained by the
// Nemotron-Cascade 2 order of stages through cascade_rl's engine:
//   IF-RL -> multi-domain RL (MCQA, structured output, tool calls) -> MOPD (teachers:
//   the best snapshot of each domain seen so far) -> RLHF (a Bradley-Terry reward
//   model trained here) -> long-context RL -> code RL -> SWE RL.
// One progress line per step, the forgetting matrix after each stage, a summary.
// Writes cascade_metrics.jsonl and forgetting_matrix.csv into the working directory.
//
//   cascade_demo [--seed N] [--threads N] [--smoke] [--compare] [--checkpoint-dir DIR]
//   --smoke    a shortened cascade; exits non-zero unless IF-RL raises its rewards
//   --compare  also runs, from the same SFT model and with the same rollout budget,
//              the cascade without MOPD and one mixed-domain GRPO stage

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cascade_rl/cascade.hpp>

#include "eigen_policy.hpp"
#include "reward_model.hpp"
#include "sft.hpp"
#include "tasks.hpp"

namespace {

namespace cr = cascade_rl;
using demo::eigen_policy;

struct options {
  std::uint64_t seed = 2024;
  unsigned threads = 2;
  bool smoke = false;
  bool compare = false;
  std::string checkpoint_dir{};
  std::string tune{};  // development: "key=value,..." overrides of the budget
};

struct domain_data {
  std::vector<demo::task> train, eval;
};

// The sizes of the run. --smoke shortens every stage after the first.
struct budget {
  std::size_t sft_steps = 300, sft_batch = 64;
  std::size_t prompts = 16, group = 8, mopd_group = 4;
  std::size_t if_steps = 60, multi_steps = 60, mopd_steps = 40, rlhf_steps = 40, long_steps = 60,
              code_steps = 60, swe_steps = 60;
  std::size_t eval_prompts = 128;
  double sft_lr = 3e-3, rl_lr = 1e-3, mopd_lr = 1e-3;
  int width = 64, heads = 4, ffn = 128;
};

double tuned(const std::string& tune, const std::string& key, double fallback) {
  const auto at = tune.find(key + "=");
  return at == std::string::npos ? fallback : std::atof(tune.c_str() + at + key.size() + 1);
}

// Records every step's mean reward per stage (for the smoke check and the summary).
struct reward_trace {
  std::map<std::string, std::vector<double>>* rewards;
  // MOPD has no reward: its trace is the KL to the teachers.
  void on_step(const cr::step_metrics& m) const {
    (*rewards)[m.stage].push_back(m.kl_to_teacher ? *m.kl_to_teacher : m.reward_mean);
  }
};

double mean_of(const std::vector<double>& v, std::size_t first, std::size_t last) {
  double s = 0;
  for (std::size_t i = first; i < last; ++i) s += v[i];
  return last > first ? s / static_cast<double>(last - first) : 0.0;
}

cr::stage_config grpo_config(cr::stage_config c, const budget& b, std::size_t steps, double lr,
                             std::int64_t max_length, std::vector<cr::eval_set> evals) {
  c.group_size = b.group;
  c.prompts_per_step = b.prompts;
  c.steps = steps;
  c.lr = cr::constant_lr(lr);
  c.sampling = {.temperature = 1.0, .top_p = 1.0, .max_response_length = max_length};
  c.eval_sampling = {.temperature = 0.0, .top_p = 1.0, .max_response_length = max_length};
  c.reward_workers = 2;
  c.evals = std::move(evals);
  return c;
}

cr::eval_set eval_of(const std::map<std::string, domain_data>& data, const std::string& domain) {
  return {.domain = domain, .prompts = demo::prompts_of(data.at(domain).eval)};
}

std::vector<cr::prompt> train_prompts(const std::map<std::string, domain_data>& data,
                                      const std::vector<std::string>& domains) {
  std::vector<cr::prompt> out;
  for (const auto& d : domains)
    for (const auto& p : demo::prompts_of(data.at(d).train)) out.push_back(p);
  return out;
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

// Runs a cascade on `policy` with the demo's observers; returns the report.
template <class Cascade>
cr::cascade_report run(Cascade& cascade, eigen_policy& policy, const options& o, std::ostream& metrics,
                       std::map<std::string, std::vector<double>>& rewards, bool quiet) {
  auto runner = cr::make_runner(cascade, policy, {.seed = o.seed, .checkpoint_dir = o.checkpoint_dir,
                                                   .checkpoint_every = 1000});
  if (!o.checkpoint_dir.empty() && runner.resume())
    std::printf("resumed at stage %zu, step %zu\n", runner.stage_index(), runner.step());
  std::ostringstream sink;
  std::ostream& console = quiet ? static_cast<std::ostream&>(sink) : std::cout;
  cr::cascade_report report = runner.run(cr::console_progress(console), cr::forgetting_table(console),
                                         cr::jsonl_metrics(metrics), reward_trace{&rewards});
  if (quiet) report.forgetting.print(std::cout);
  return report;
}

std::size_t rollouts(const std::vector<cr::stage_config>& configs) {
  std::size_t n = 0;
  for (const auto& c : configs) n += c.steps * c.prompts_per_step * c.group_size;
  return n;
}

double final_mean(const cr::forgetting_matrix& m) {
  double s = 0;
  for (std::size_t c = 0; c < m.domains().size(); ++c) s += m.score(m.rows() - 1, c);
  return s / static_cast<double>(m.domains().size());
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--smoke") o.smoke = true;
    else if (a == "--compare") o.compare = true;
    else if (a == "--seed" && i + 1 < argc) o.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--threads" && i + 1 < argc) o.threads = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a == "--checkpoint-dir" && i + 1 < argc) o.checkpoint_dir = argv[++i];
    else if (a == "--tune" && i + 1 < argc) o.tune = argv[++i];
    else {
      std::fprintf(stderr, "usage: cascade_demo [--seed N] [--threads N] [--smoke] [--compare] [--checkpoint-dir DIR]\n");
      return 2;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto tune = [&](const char* key, auto& value) {
    value = static_cast<std::remove_reference_t<decltype(value)>>(tuned(o.tune, key, static_cast<double>(value)));
  };
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  budget b;
  tune("sft_steps", b.sft_steps); tune("if", b.if_steps); tune("multi", b.multi_steps); tune("mopd", b.mopd_steps);
  tune("rlhf", b.rlhf_steps); tune("long", b.long_steps); tune("code", b.code_steps); tune("swe", b.swe_steps);
  tune("sft_lr", b.sft_lr); tune("rl_lr", b.rl_lr); tune("mopd_lr", b.mopd_lr); tune("width", b.width);
  tune("heads", b.heads); tune("ffn", b.ffn); tune("group", b.group); tune("prompts", b.prompts);
  if (o.smoke) {
    b.if_steps = 30;
    b.multi_steps = b.mopd_steps = b.rlhf_steps = b.long_steps = b.code_steps = b.swe_steps = 2;
    b.eval_prompts = 64;
  }

  // ---- data: train prompts (with demonstrations) and held-out evaluation prompts ---------
  std::map<std::string, domain_data> data;
  for (std::size_t k = 0; k < demo::domains().size(); ++k) {
    const std::string& d = demo::domains()[k];
    data[d].train = demo::make_tasks(d, 512, o.seed * 1000 + 2 * k, static_cast<std::int64_t>(k) * 100000);
    data[d].eval = demo::make_tasks(d, b.eval_prompts, o.seed * 1000 + 2 * k + 1,
                                    static_cast<std::int64_t>(k) * 100000 + 50000);
  }
  for (auto& t : data["chat"].eval) t.prompt.reference = "gold";  // judged by the hidden preference

  // ---- the reward model of RLHF -----------------------------------------------------------
  auto rm = std::make_shared<demo::bt_reward_model>();
  const auto pairs = demo::make_preference_pairs(4000, o.seed + 7);
  const auto held_out = demo::make_preference_pairs(1000, o.seed + 8);
  const double nll = rm->train(pairs);
  std::printf("reward model: Bradley-Terry on %zu synthetic preference pairs, nll %.3f, held-out "
              "accuracy %.3f (labels are noisy), agreement with the hidden preference %.3f\n",
              pairs.size(), nll, rm->accuracy(held_out), rm->gold_agreement(held_out));
  const demo::task_reward reward{rm};

  // ---- SFT warm start ---------------------------------------------------------------------
  eigen_policy policy(demo::lm_shape{.vocab = demo::vocabulary_size(), .d = b.width, .heads = b.heads, .ffn = b.ffn},
                      o.seed, {}, o.threads);
  std::printf("policy: one-layer Eigen transformer, %zu parameters (d %d, %d heads, MLP %d, vocabulary %d)\n",
              policy.weights().params.size(), policy.weights().shape.d, policy.weights().shape.heads,
              policy.weights().shape.ffn, policy.weights().shape.vocab);
  {
    std::vector<demo::task> demos;
    for (const auto& d : demo::domains())
      for (const auto& t : data[d].train) demos.push_back(t);
    std::mt19937_64 rng(o.seed + 11);
    std::printf("SFT: %zu steps of %zu demonstrations from %zu, Adam lr %.0e\n", b.sft_steps, b.sft_batch, demos.size(), b.sft_lr);
    for (std::size_t s = 0; s < b.sft_steps; ++s) {
      const auto batch = demo::sft_step(policy, demos, b.sft_batch, b.sft_lr, rng);
      if ((s + 1) % (b.sft_steps / 10) == 0)
        std::printf("[sft %zu/%zu] nll/token %.4f\n", s + 1, b.sft_steps, demo::demonstration_nll(policy, batch));
    }
    std::printf("SFT done in %.1fs\n", elapsed());
  }
  const eigen_policy::snapshot_type sft_model = policy.snapshot();

  // ---- the cascade ------------------------------------------------------------------------
  auto schedule = cr::nemotron_cascade2_schedule();  // published shapes; sized down below
  const cr::stage_config if_rl = grpo_config(schedule.if_rl, b, b.if_steps, b.rl_lr, 8,
                                             {eval_of(data, "instruction_following")});
  cr::stage_config multi = grpo_config(schedule.multi_domain_rl, b, b.multi_steps, b.rl_lr, 12,
                                       {eval_of(data, "mcqa"), eval_of(data, "structured_output"),
                                        eval_of(data, "tool_calling")});
  multi.domains = {"mcqa", "structured_output", "tool_calling"};
  cr::stage_config mopd = schedule.mopd;
  mopd.domains = {"instruction_following", "mcqa", "structured_output", "tool_calling"};
  mopd.group_size = b.mopd_group;
  mopd.prompts_per_step = b.prompts;
  mopd.steps = b.mopd_steps;
  mopd.lr = cr::linear_warmup_lr(b.mopd_lr / 10, b.mopd_lr, 6);
  mopd.sampling = {.temperature = 1.0, .top_p = 1.0, .max_response_length = 12};
  mopd.reward_workers = 2;
  const cr::stage_config rlhf = grpo_config(schedule.rlhf, b, b.rlhf_steps, b.rl_lr, 9, {eval_of(data, "chat")});
  const cr::stage_config long_rl = grpo_config(schedule.long_context_rl, b, b.long_steps, b.rl_lr, 3,
                                               {eval_of(data, "long_context")});
  const cr::stage_config code_rl = grpo_config(schedule.code_rl, b, b.code_steps, b.rl_lr, 8, {eval_of(data, "code")});
  const cr::stage_config swe_rl = grpo_config(schedule.swe_rl, b, b.swe_steps, b.rl_lr, 6, {eval_of(data, "swe")});
  const auto pool = [&](const std::vector<std::string>& domains) { return cr::prompt_pool(train_prompts(data, domains)); };

  std::ofstream metrics("cascade_metrics.jsonl", std::ios::trunc);
  std::map<std::string, std::vector<double>> rewards;
  auto cascade = cr::make_cascade(
      cr::make_grpo_stage(if_rl, pool({"instruction_following"}), reward),
      cr::make_grpo_stage(multi, pool(multi.domains), reward),
      cr::make_mopd_stage(mopd, pool(mopd.domains)),
      cr::make_grpo_stage(rlhf, pool({"chat"}), reward),
      cr::make_grpo_stage(long_rl, pool({"long_context"}), reward),
      cr::make_grpo_stage(code_rl, pool({"code"}), reward),
      cr::make_grpo_stage(swe_rl, pool({"swe"}), reward));
  const cr::cascade_report report = run(cascade, policy, o, metrics, rewards, false);
  const cr::forgetting_matrix& m = report.forgetting;
  write_csv(m, "forgetting_matrix.csv");

  // ---- summary -------------------------------------------------------------------------
  std::printf("\n==== summary (seed %llu, %.1fs) ====\n", static_cast<unsigned long long>(o.seed), elapsed());
  bool every_stage_rose = true;
  for (std::size_t r = 1; r < m.rows(); ++r) {
    const std::string& stage = m.label(r);
    const auto& tr = rewards[stage];
    const std::size_t k = std::min<std::size_t>(5, tr.size() / 2);
    std::printf("%-16s %s %.3f -> %.3f (first/last %zu steps)", stage.c_str(),
                stage == "mopd" ? "KL to teachers" : "train reward", mean_of(tr, 0, k),
                mean_of(tr, tr.size() - k, tr.size()), k);
    for (const auto& c : cascade.configs())
      if (c.name == stage && !c.evals.empty()) {
        std::printf("  eval");
        for (const auto& e : c.evals) {
          const double before = m.score(r - 1, e.domain), after = m.score(r, e.domain);
          every_stage_rose = every_stage_rose && after > before;
          std::printf("  %s %.3f -> %.3f", e.domain.c_str(), before, after);
        }
      }
    std::printf("\n");
  }
  std::printf("every RL stage raised its own domains' eval scores: %s\n", every_stage_rose ? "yes" : "NO");
  if (report.regressions.empty()) std::printf("no regression above %.2f\n", 0.02);
  for (const auto& r : report.regressions)
    std::printf("regression: %s fell %.3f after %s (%.3f -> %.3f)\n", r.domain.c_str(), r.drop(), r.stage.c_str(),
                r.before, r.after);
  {
    const std::size_t row = 3;  // after mopd
    std::printf("MOPD (teachers: best snapshot per domain):");
    for (const auto& d : mopd.domains)
      std::printf("  %s %.3f -> %.3f", d.c_str(), m.score(row - 1, d), m.score(row, d));
    std::printf("\n");
  }
  std::printf("final mean score over %zu domains: %.3f (before the cascade %.3f)\n", m.domains().size(),
              final_mean(m), [&] {
                double s = 0;
                for (std::size_t c = 0; c < m.domains().size(); ++c) s += m.score(0, c);
                return s / static_cast<double>(m.domains().size());
              }());
  std::printf("greedy samples of the final policy:\n");
  for (const auto& d : demo::domains()) {
    const cr::prompt& p = data[d].eval.front().prompt;
    const auto batch = policy.generate(std::span<const cr::prompt>(&p, 1), {1, {.temperature = 0.0, .max_response_length = 12}, 0});
    const double s = reward.score(p, batch.response_tokens(0), batch.finish_reasons[0] == cr::finish_reason::truncated);
    std::printf("  %-22s %-46s -> %-22s score %.2f\n", d.c_str(), p.text.substr(0, 46).c_str(),
                batch.texts[0].c_str(), s);
  }
  std::printf("wrote cascade_metrics.jsonl, forgetting_matrix.csv; wall time %.1fs\n", elapsed());

  if (o.smoke) {
    const auto& tr = rewards["if_rl"];
    const std::size_t k = std::min<std::size_t>(5, tr.size() / 2);
    const bool rose = mean_of(tr, tr.size() - k, tr.size()) > mean_of(tr, 0, k) &&
                      m.score(1, "instruction_following") > m.score(0, "instruction_following");
    std::printf("smoke: IF-RL rewards %s\n", rose ? "rose" : "did NOT rise");
    return rose ? 0 : 1;
  }
  if (!o.compare) return 0;

  // ---- the skeptic's comparisons: same SFT model, same rollout budget ----------------------
  const std::size_t budget_rollouts = rollouts(cascade.configs());
  std::printf("\n==== --compare: same SFT model, same budget of %zu training rollouts ====\n", budget_rollouts);
  cr::forgetting_matrix no_mopd_matrix, mixed_matrix;
  {
    // The cascade without MOPD: its rollouts go to multi-domain RL instead.
    cr::stage_config longer_multi = multi;
    longer_multi.steps += (mopd.steps * mopd.group_size) / b.group;
    policy.restore(sft_model);
    std::ofstream sink("cascade_metrics_no_mopd.jsonl", std::ios::trunc);
    std::map<std::string, std::vector<double>> r2;
    auto c2 = cr::make_cascade(cr::make_grpo_stage(if_rl, pool({"instruction_following"}), reward),
                               cr::make_grpo_stage(longer_multi, pool(multi.domains), reward),
                               cr::make_grpo_stage(rlhf, pool({"chat"}), reward),
                               cr::make_grpo_stage(long_rl, pool({"long_context"}), reward),
                               cr::make_grpo_stage(code_rl, pool({"code"}), reward),
                               cr::make_grpo_stage(swe_rl, pool({"swe"}), reward));
    std::printf("-- cascade without MOPD (multi-domain RL gets MOPD's rollouts: %zu steps, %zu rollouts)\n",
                longer_multi.steps, rollouts(c2.configs()));
    options quiet = o;
    quiet.checkpoint_dir.clear();
    no_mopd_matrix = run(c2, policy, quiet, sink, r2, true).forgetting;
  }
  {
    // One GRPO stage on all domains mixed.
    std::vector<cr::eval_set> all;
    for (const auto& d : demo::domains()) all.push_back(eval_of(data, d));
    const std::size_t steps = budget_rollouts / (b.prompts * b.group);
    cr::stage_config mixed = grpo_config({.name = "mixed_rl", .kind = cr::stage_kind::multi_domain_rl,
                                          .domains = demo::domains()},
                                         b, steps, b.rl_lr, 12, all);
    policy.restore(sft_model);
    std::ofstream sink("cascade_metrics_mixed.jsonl", std::ios::trunc);
    std::map<std::string, std::vector<double>> r3;
    auto c3 = cr::make_cascade(cr::make_grpo_stage(mixed, pool(demo::domains()), reward));
    std::printf("-- one mixed-domain GRPO stage (%zu steps, %zu rollouts)\n", steps, rollouts(c3.configs()));
    options quiet = o;
    quiet.checkpoint_dir.clear();
    mixed_matrix = run(c3, policy, quiet, sink, r3, true).forgetting;
  }
  std::printf("\nfinal scores          ");
  for (const auto& d : demo::domains()) std::printf("%12s", d.substr(0, 11).c_str());
  std::printf("        mean\n");
  const auto row = [&](const char* name, const cr::forgetting_matrix& mm) {
    std::printf("%-22s", name);
    for (const auto& d : demo::domains()) std::printf("%12.4f", mm.score(mm.rows() - 1, d));
    std::printf("%12.4f\n", final_mean(mm));
  };
  row("SFT only", [&] {
    cr::forgetting_matrix only(m.domains());
    std::vector<double> s;
    for (std::size_t c = 0; c < m.domains().size(); ++c) s.push_back(m.score(0, c));
    only.add_row("before", {}, s);
    return only;
  }());
  row("cascade (with MOPD)", m);
  row("cascade without MOPD", no_mopd_matrix);
  row("one mixed stage", mixed_matrix);
  std::printf("compare done; wall time %.1fs\n", elapsed());
  return 0;
}
