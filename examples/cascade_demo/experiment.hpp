#pragma once
// The demo's experiments on Cascade RL's claims. One seed's "world" holds the data, the
// RLHF reward model, the rewards and the SFT model every variant starts from; a variant
// is a cascade (or one stage) run from that SFT model:
//
//   cascade          the Nemotron-Cascade 2 order, per-domain hyperparameters, MOPD
//   no_mopd          the same without MOPD; its rollouts go to multi-domain RL
//   shared_hparams   the cascade with one hyperparameter set for every stage
//   mixed            one GRPO stage on the seven single-turn domains, then the agentic
//                    SWE stage; as many rollouts as the cascade
//   if_then_rlhf     IF-RL then RLHF, nothing else
//   rlhf_then_if     RLHF then IF-RL
//   mopd_end         the cascade with a second MOPD stage after SWE RL, on the seven
//                    single-turn domains (teachers: each one's best snapshot so far), where
//                    what the later stages forgot can still be recovered; MOPD's
//                    rollouts once more (40,960 + 2,560)
//
// Every variant is evaluated the same way (greedy, 16 tokens at most, chat judged by the
// hidden preference through the stages' evaluation reward), so final rows compare.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cascade_rl/cascade.hpp>

#include "demo_reward.hpp"
#include "eigen_policy.hpp"
#include "measurements.hpp"
#include "program_verifier.hpp"
#include "reward_model.hpp"
#include "sft.hpp"
#include "swe_agent.hpp"
#include "tasks.hpp"

namespace demo {

// The sizes of a run (--smoke shortens every stage after the first).
struct budget {
  std::size_t sft_steps = 300, sft_batch = 64;
  std::size_t prompts = 16, group = 8, mopd_group = 4;
  std::size_t if_steps = 60, multi_steps = 60, mopd_steps = 40, rlhf_steps = 40, long_steps = 60,
              code_steps = 60, swe_steps = 40;
  // SWE RL's episodes are graded one by one in a sandboxed workspace (swe_agent.hpp):
  // fewer episodes per step (more prompts, smaller groups: in --no-python runs of seed
  // 2024 this learnt more than 8 x 8 did) and a smaller evaluation set.
  std::size_t swe_prompts = 16, swe_group = 4, swe_eval_prompts = 64;
  std::size_t train_prompts = 512, eval_prompts = 128;
  std::size_t eval_every = 10;        // evaluations inside each cascade stage (the curves)
  std::size_t mixed_eval_every = 40;  // inside the one mixed stage (it evaluates seven domains)
  double sft_lr = 3e-3;
  int width = 128, heads = 4, ffn = 256;  // the forgetting study's best point (README)
  std::int64_t eval_length = 16;      // evaluation: greedy, this many tokens at most
};

// What a stage may set for its own domains.
struct stage_hparams {
  double lr = 1e-3;
  std::int64_t max_length = 16;  // sampling limit while training
};

struct hparams {
  std::string name;
  stage_hparams if_rl, multi, rlhf, long_context, code, swe;
  double mopd_lr = 1e-3;
  std::int64_t mopd_max_length = 12;
};

// Per-domain hyperparameters: each stage's learning rate is what `cascade_demo --sweep
// --seed 7` chose (each GRPO stage alone from the SFT model of seed 7, which is not
// among the reported seeds; own evaluation after the stage; ties to the smaller rate):
//
//   stage \ lr           5e-04     1e-03     2e-03
//   if_rl               0.9980    1.0000    1.0000   best 1e-03
//   multi_domain_rl     0.9941    0.9896    0.9740   best 5e-04
//   rlhf                0.6875    0.6875    0.6875   best 5e-04
//   long_context_rl     0.9766    0.9844    0.9766   best 1e-03
//   code_rl             0.9484    0.9766    0.8719   best 1e-03
//   swe_rl              0.5312    0.6266    0.5859   best 1e-03
//   mean                0.8560    0.8774    0.8493   (the shared set's rate: 1e-03)
//
// and each stage's sampling limit is a little above its domain's longest right answer.
// (swe_rl's row was measured when SWE RL was one response, a hunk; the agent's stage
// keeps that rate, and its limit bounds each action.)
// These are the swept rates; the demo runs them times default_lr_scale.
inline hparams swept_hparams() {
  return {.name = "per-domain",
          .if_rl = {1e-3, 8},
          .multi = {5e-4, 12},
          .rlhf = {5e-4, 10},
          .long_context = {1e-3, 3},
          .code = {1e-3, 12},
          .swe = {1e-3, 10},
          .mopd_lr = 1e-3,
          .mopd_max_length = 12};
}

// Every learning rate of a hyperparameter set times `scale`.
inline hparams scaled(hparams h, double scale) {
  if (!(scale > 0)) cr::detail::fail("scale", "must be positive");
  for (stage_hparams* s : {&h.if_rl, &h.multi, &h.rlhf, &h.long_context, &h.code, &h.swe}) s->lr *= scale;
  h.mopd_lr *= scale;
  return h;
}

// The swept rates are what each stage alone does best, not what a cascade of them can
// afford: `cascade_demo --study` (study.hpp; README, "Why the demo forgot") measured the
// cascade's backward transfer over seeds 2024-2026 at -0.209 +- 0.078 with them (width
// 64) and at -0.004 +- 0.022 with every rate times 0.3 (final mean 0.788 +- 0.066 against
// 0.627 +- 0.084, the SFT start 0.700); at width 128 and times 0.3, -0.008 +- 0.012 and
// 0.896 +- 0.004 (start 0.819), the demo's default. Times 0.1 forgets as little but RLHF
// barely moves chat at width 64 (+0.03 against +0.39 at 0.3): 0.3 is the smallest step
// at which every stage still trains its domain.
inline constexpr double default_lr_scale = 0.3;

// The demo's per-domain set: the swept rates times default_lr_scale.
inline hparams per_domain_hparams() { return scaled(swept_hparams(), default_lr_scale); }

// One set for every stage: the common learning rate (the sweep's best single rate,
// times default_lr_scale), and a sampling limit that fits every domain's longest answer.
inline hparams shared_hparams() {
  const stage_hparams one{1e-3 * default_lr_scale, 16};
  return {.name = "shared", .if_rl = one, .multi = one, .rlhf = one, .long_context = one, .code = one,
          .swe = one, .mopd_lr = 1e-3 * default_lr_scale, .mopd_max_length = 16};
}

// The domains a single-turn stage trains and evaluates: all but SWE, whose tasks are
// an agent's episodes (swe_agent.hpp).
inline std::vector<std::string> single_turn_domains() {
  std::vector<std::string> out;
  for (const auto& d : domains())
    if (d != "swe") out.push_back(d);
  return out;
}

struct domain_data {
  std::vector<task> train, eval;
};

// Everything the variants of one seed share. The policy is restored to the SFT model
// before each variant.
struct world {
  std::uint64_t seed = 0;
  budget sizes;
  std::map<std::string, domain_data> data;
  std::shared_ptr<bt_reward_model> reward_model = std::make_shared<bt_reward_model>();
  double rm_nll = 0, rm_accuracy = 0, rm_gold_agreement = 0;
  std::shared_ptr<const program_verifier> programs;
  std::shared_ptr<const swe_agent_host> swe;  // the SWE agent's repositories and sandbox
  std::shared_ptr<verification_ledger> ledger = std::make_shared<verification_ledger>();
  demo_reward train_reward, eval_reward;
  eigen_policy policy;
  eigen_policy::snapshot_type sft_model;
  std::vector<double> sft_nll;  // every tenth of SFT
  double sft_seconds = 0;

  // Makes the seed's data, trains the reward model and runs SFT (experiment.cpp).
  world(std::uint64_t s, const budget& b, std::shared_ptr<const program_verifier> verifier, unsigned threads);

  [[nodiscard]] cr::eval_set eval_of(const std::string& domain) const {
    return {.domain = domain, .prompts = prompts_of(data.at(domain).eval)};
  }
  [[nodiscard]] cr::prompt_pool pool(const std::vector<std::string>& ds) const {
    std::vector<cr::prompt> out;
    for (const auto& d : ds)
      for (const auto& p : prompts_of(data.at(d).train)) out.push_back(p);
    return cr::prompt_pool(std::move(out));
  }
};

// A GRPO stage's config: the budget's shape, the stage's hyperparameters, evaluation
// the same for every variant.
inline cr::stage_config grpo_config(cr::stage_config c, const budget& b, std::size_t steps, const stage_hparams& h,
                                    std::vector<cr::eval_set> evals, std::size_t eval_every) {
  c.group_size = b.group;
  c.prompts_per_step = b.prompts;
  c.steps = steps;
  c.lr = cr::constant_lr(h.lr);
  c.sampling = {.temperature = 1.0, .top_p = 1.0, .max_response_length = h.max_length};
  c.eval_sampling = {.temperature = 0.0, .top_p = 1.0, .max_response_length = b.eval_length};
  c.reward_workers = 1;  // the demo's reward is batched (demo_reward.hpp)
  c.stop.eval_every = eval_every;
  c.evals = std::move(evals);
  return c;
}

// SWE RL as an agentic stage (swe_agent.hpp): an episode is show, a hunk, test, submit
// in the warm start's script, so six turns leave room for a second try; the context
// holds the prompt (11 words and <sep>) and as many response tokens as the model has
// positions; an action may be as long as the stage's sampling limit. The environments'
// steps and gradings run on two workers.
inline cr::stage_config swe_agent_config(const world& w, cr::stage_config c, const stage_hparams& h) {
  const budget& b = w.sizes;
  c = grpo_config(std::move(c), b, b.swe_steps, h, {w.eval_of("swe")}, b.eval_every);
  c.prompts_per_step = b.swe_prompts;
  c.group_size = b.swe_group;
  c.reward_workers = 2;
  const auto prompt_tokens = static_cast<std::size_t>(encode(w.data.at("swe").train.front().prompt.text).size()) + 1;
  c.episodes = {.max_turns = 6,
                .context_budget = prompt_tokens + static_cast<std::size_t>(w.policy.weights().shape.response_positions) + 1,
                .max_turn_tokens = static_cast<std::size_t>(h.max_length),
                .observation_token_cap = 12,
                .observation_text_cap = 256};
  return c;
}

// The configs of the cascade (MOPD's rollouts go to multi-domain RL without it).
struct cascade_configs {
  cr::stage_config if_rl, multi, mopd, rlhf, long_context, code, swe, mopd_end;
};

inline cascade_configs make_cascade_configs(const world& w, const hparams& h, bool with_mopd) {
  const budget& b = w.sizes;
  const auto schedule = cr::nemotron_cascade2_schedule();  // published shapes, sized down
  cascade_configs c;
  c.if_rl = grpo_config(schedule.if_rl, b, b.if_steps, h.if_rl, {w.eval_of("instruction_following")}, b.eval_every);
  const std::size_t multi_steps = b.multi_steps + (with_mopd ? 0 : b.mopd_steps * b.mopd_group / b.group);
  c.multi = grpo_config(schedule.multi_domain_rl, b, multi_steps, h.multi,
                        {w.eval_of("mcqa"), w.eval_of("structured_output"), w.eval_of("tool_calling")}, b.eval_every);
  c.multi.domains = {"mcqa", "structured_output", "tool_calling"};
  c.mopd = schedule.mopd;
  c.mopd.domains = {"instruction_following", "mcqa", "structured_output", "tool_calling"};
  c.mopd.group_size = b.mopd_group;
  c.mopd.prompts_per_step = b.prompts;
  c.mopd.steps = b.mopd_steps;
  c.mopd.lr = cr::linear_warmup_lr(h.mopd_lr / 10, h.mopd_lr, 6);
  c.mopd.sampling = {.temperature = 1.0, .top_p = 1.0, .max_response_length = h.mopd_max_length};
  c.mopd.reward_workers = 1;
  c.rlhf = grpo_config(schedule.rlhf, b, b.rlhf_steps, h.rlhf, {w.eval_of("chat")}, b.eval_every);
  c.long_context = grpo_config(schedule.long_context_rl, b, b.long_steps, h.long_context, {w.eval_of("long_context")},
                               b.eval_every);
  c.code = grpo_config(schedule.code_rl, b, b.code_steps, h.code, {w.eval_of("code")}, b.eval_every);
  c.swe = swe_agent_config(w, schedule.swe_rl, h.swe);
  c.mopd_end = c.mopd;
  c.mopd_end.name = "mopd_end";
  c.mopd_end.domains = single_turn_domains();
  c.mopd_end.sampling.max_response_length = b.eval_length;  // every domain's longest answer
  return c;
}

inline std::size_t rollouts_of(const std::vector<cr::stage_config>& configs) {
  std::size_t n = 0;
  for (const auto& c : configs) n += c.steps * c.prompts_per_step * c.group_size;
  return n;
}

// The cascade's training rollouts (with MOPD): the budget every variant of the
// comparison gets.
inline std::size_t cascade_rollouts(const world& w) {
  const cascade_configs c = make_cascade_configs(w, per_domain_hparams(), true);
  return rollouts_of({c.if_rl, c.multi, c.mopd, c.rlhf, c.long_context, c.code, c.swe});
}

// The one mixed-domain stage on the seven single-turn domains; the agentic SWE stage
// follows it as in the cascade, and the two have the cascade's rollout budget.
inline cr::stage_config make_mixed_config(const world& w, const hparams& h) {
  const budget& b = w.sizes;
  std::vector<cr::eval_set> all;
  for (const auto& d : single_turn_domains()) all.push_back(w.eval_of(d));
  const cascade_configs c = make_cascade_configs(w, h, true);
  const std::size_t steps = (cascade_rollouts(w) - rollouts_of({c.swe})) / (b.prompts * b.group);
  const stage_hparams one{h.multi.lr, 16};
  return grpo_config({.name = "mixed_rl", .kind = cr::stage_kind::multi_domain_rl, .domains = single_turn_domains()}, b,
                     steps, one, std::move(all), b.mixed_eval_every);
}

// IF-RL and RLHF alone, in either order; the other single-turn domains ride along in
// the first stage's evaluation sets so that the rows are complete (SWE's episodes need
// its agentic stage: no SWE column).
inline std::pair<cr::stage_config, cr::stage_config> make_order_configs(const world& w, const hparams& h,
                                                                        bool if_first) {
  const budget& b = w.sizes;
  const auto schedule = cr::nemotron_cascade2_schedule();
  cr::stage_config if_rl = grpo_config(schedule.if_rl, b, b.if_steps, h.if_rl, {w.eval_of("instruction_following")},
                                       b.eval_every);
  cr::stage_config rlhf = grpo_config(schedule.rlhf, b, b.rlhf_steps, h.rlhf, {w.eval_of("chat")}, b.eval_every);
  cr::stage_config& first = if_first ? if_rl : rlhf;
  for (const auto& d : single_turn_domains())
    if (d != "instruction_following" && d != "chat") first.evals.push_back(w.eval_of(d));
  return if_first ? std::pair{if_rl, rlhf} : std::pair{rlhf, if_rl};
}

// ---- running ---------------------------------------------------------------------------

struct variant_result {
  std::string name;
  std::uint64_t seed = 0;
  cr::cascade_report report;
  run_trace trace;
  std::size_t rollouts = 0;
  double seconds = 0;
  std::vector<cr::stage_config> configs;

  [[nodiscard]] double final_score(const std::string& domain) const {
    const auto& m = report.forgetting;
    return m.score(m.rows() - 1, domain);
  }
  [[nodiscard]] double final_mean() const {
    const auto& m = report.forgetting;
    double s = 0;
    for (std::size_t c = 0; c < m.domains().size(); ++c) s += m.score(m.rows() - 1, c);
    return s / static_cast<double>(m.domains().size());
  }
};

struct run_settings {
  std::string checkpoint_dir{};
};

// The variants, each from the world's SFT model, watched by `observers` beside the
// trace recorder (experiment.cpp, compiled once into cascade_demo_experiments).
variant_result run_cascade_variant(world& w, const hparams& h, bool with_mopd, std::string name,
                                   const run_settings& settings, const cr::observer_list& observers = {});
// The cascade with MOPD after its last stage as well (mopd_end above).
variant_result run_mopd_end_variant(world& w, const hparams& h, const cr::observer_list& observers = {});
// One GRPO stage of the cascade alone, from the SFT model (the hyperparameter sweep).
// stage: "if_rl", "multi_domain_rl", "rlhf", "long_context_rl", "code_rl" or "swe_rl".
variant_result run_stage_alone(world& w, const hparams& h, const std::string& stage);
variant_result run_mixed_variant(world& w, const hparams& h, const cr::observer_list& observers = {});
variant_result run_order_variant(world& w, const hparams& h, bool if_first, const cr::observer_list& observers = {});

// The learning rate of a stage in a hyperparameter set, by stage name.
inline stage_hparams& hparams_of(hparams& h, const std::string& stage) {
  if (stage == "if_rl") return h.if_rl;
  if (stage == "multi_domain_rl") return h.multi;
  if (stage == "rlhf") return h.rlhf;
  if (stage == "long_context_rl") return h.long_context;
  if (stage == "code_rl") return h.code;
  if (stage == "swe_rl") return h.swe;
  throw std::invalid_argument("demo: no stage '" + stage + "'");
}

}  // namespace demo
