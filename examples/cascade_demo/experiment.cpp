// The demo's compiled part (experiment.hpp declares it): the Eigen policy, a seed's world
// (the reward model and the SFT warm start) and the run of every variant. Each variant's cascade is a
// different tuple of stages, so each instantiates the runner, the stages' steps and the
// Eigen policy's training code; compiled here once, in the static library
// cascade_demo_experiments, they are shared by the demo and its tests instead of being
// compiled in both (README, "How long the test line takes"). The observers a caller
// passes arrive as one cascade_rl::observer_list, so the runner is instantiated once per
// cascade whatever the caller watches with.

#include "experiment.hpp"

#include <chrono>
#include <random>
#include <stdexcept>
#include <utility>

namespace demo {

// The Eigen transformer and its policy at the demo's precision (declared extern in their
// headers): the one copy every program of the demo and its tests links.
template struct lm_weights<float>;
template class basic_eigen_policy<float>;

world::world(std::uint64_t s, const budget& b, std::shared_ptr<const program_verifier> verifier, unsigned threads)
    : seed(s), sizes(b), programs(std::move(verifier)), swe(std::make_shared<const swe_agent_host>(programs)),
      train_reward(reward_model, programs, chat_judge::reward_model, ledger),
      eval_reward(reward_model, programs, chat_judge::gold),
      policy(lm_shape{.vocab = vocabulary_size(), .d = b.width, .heads = b.heads, .ffn = b.ffn}, s, {}, threads) {
  for (std::size_t k = 0; k < domains().size(); ++k) {
    const std::string& d = domains()[k];
    data[d].train = make_tasks(d, b.train_prompts, s * 1000 + 2 * k, static_cast<std::int64_t>(k) * 100000);
    data[d].eval = make_tasks(d, d == "swe" ? b.swe_eval_prompts : b.eval_prompts, s * 1000 + 2 * k + 1,
                              static_cast<std::int64_t>(k) * 100000 + 50000);
  }
  const auto pairs = make_preference_pairs(4000, s + 7);
  const auto held_out = make_preference_pairs(1000, s + 8);
  rm_nll = reward_model->train(pairs);
  rm_accuracy = reward_model->accuracy(held_out);
  rm_gold_agreement = reward_model->gold_agreement(held_out);

  const auto start = std::chrono::steady_clock::now();
  std::vector<task> demos;
  for (const auto& d : domains())
    for (const auto& t : data[d].train) demos.push_back(t);
  std::mt19937_64 rng(s + 11);
  for (std::size_t step = 0; step < b.sft_steps; ++step) {
    const auto batch = sft_step(policy, demos, b.sft_batch, b.sft_lr, rng);
    if ((step + 1) % std::max<std::size_t>(b.sft_steps / 10, 1) == 0) sft_nll.push_back(demonstration_nll(policy, batch));
  }
  sft_model = policy.snapshot();
  sft_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

namespace {

// Runs a cascade from the world's SFT model, recording its trace beside the caller's
// observers (resumed from settings.checkpoint_dir when that holds a checkpoint).
template <class Cascade>
variant_result run_variant(world& w, Cascade& cascade, std::string name, const run_settings& settings,
                           const cr::observer_list& observers) {
  variant_result r;
  r.name = std::move(name);
  r.seed = w.seed;
  r.configs = cascade.configs();
  r.rollouts = rollouts_of(r.configs);
  const auto start = std::chrono::steady_clock::now();
  w.policy.restore(w.sft_model);
  w.ledger->take();
  auto runner = cr::make_runner(cascade, w.policy,
                                {.seed = w.seed, .checkpoint_dir = settings.checkpoint_dir, .checkpoint_every = 1000});
  if (!settings.checkpoint_dir.empty() && runner.resume())
    std::printf("resumed at stage %zu, step %zu\n", runner.stage_index(), runner.step());
  cr::observer_list all(trace_recorder(r.trace, w.ledger));
  all.add(observers);
  r.report = runner.run(all);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// A GRPO stage of the demo: trained with the training reward, evaluated with the
// evaluation reward (chat judged by the hidden preference).
auto demo_stage(const world& w, const cr::stage_config& c, const std::vector<std::string>& ds) {
  return cr::with_eval_reward(cr::make_grpo_stage(c, w.pool(ds), w.train_reward), w.eval_reward);
}

// SWE RL: the agentic stage, an episode's outcome its reward in training and evaluation.
auto swe_stage(const world& w, const cr::stage_config& c) {
  return cr::make_agentic_stage(c, w.pool({"swe"}), swe_agent_factory{w.swe});
}

}  // namespace

variant_result run_cascade_variant(world& w, const hparams& h, bool with_mopd, std::string name,
                                   const run_settings& settings, const cr::observer_list& observers) {
  const cascade_configs c = make_cascade_configs(w, h, with_mopd);
  if (with_mopd) {
    auto cascade = cr::make_cascade(demo_stage(w, c.if_rl, {"instruction_following"}), demo_stage(w, c.multi, c.multi.domains),
                                    cr::make_mopd_stage(c.mopd, w.pool(c.mopd.domains)), demo_stage(w, c.rlhf, {"chat"}),
                                    demo_stage(w, c.long_context, {"long_context"}), demo_stage(w, c.code, {"code"}),
                                    swe_stage(w, c.swe));
    return run_variant(w, cascade, std::move(name), settings, observers);
  }
  auto cascade = cr::make_cascade(demo_stage(w, c.if_rl, {"instruction_following"}), demo_stage(w, c.multi, c.multi.domains),
                                  demo_stage(w, c.rlhf, {"chat"}), demo_stage(w, c.long_context, {"long_context"}),
                                  demo_stage(w, c.code, {"code"}), swe_stage(w, c.swe));
  return run_variant(w, cascade, std::move(name), settings, observers);
}

variant_result run_mopd_end_variant(world& w, const hparams& h, const cr::observer_list& observers) {
  const cascade_configs c = make_cascade_configs(w, h, true);
  auto cascade = cr::make_cascade(demo_stage(w, c.if_rl, {"instruction_following"}), demo_stage(w, c.multi, c.multi.domains),
                                  cr::make_mopd_stage(c.mopd, w.pool(c.mopd.domains)), demo_stage(w, c.rlhf, {"chat"}),
                                  demo_stage(w, c.long_context, {"long_context"}), demo_stage(w, c.code, {"code"}),
                                  swe_stage(w, c.swe), cr::make_mopd_stage(c.mopd_end, w.pool(c.mopd_end.domains)));
  return run_variant(w, cascade, "mopd_end", {}, observers);
}

variant_result run_stage_alone(world& w, const hparams& h, const std::string& stage) {
  const cascade_configs c = make_cascade_configs(w, h, true);
  if (stage == c.swe.name) {
    cr::stage_config alone = c.swe;
    alone.stop.eval_every = 0;
    auto cascade = cr::make_cascade(swe_stage(w, alone));
    return run_variant(w, cascade, stage, {}, {});
  }
  for (const cr::stage_config* config : {&c.if_rl, &c.multi, &c.rlhf, &c.long_context, &c.code}) {
    if (config->name != stage) continue;
    cr::stage_config alone = *config;
    alone.stop.eval_every = 0;
    auto cascade = cr::make_cascade(demo_stage(w, alone, alone.domains));
    return run_variant(w, cascade, stage, {}, {});
  }
  throw std::invalid_argument("demo: no stage '" + stage + "'");
}

variant_result run_mixed_variant(world& w, const hparams& h, const cr::observer_list& observers) {
  const cr::stage_config c = make_mixed_config(w, h);
  auto cascade = cr::make_cascade(demo_stage(w, c, c.domains), swe_stage(w, make_cascade_configs(w, h, true).swe));
  return run_variant(w, cascade, "mixed", {}, observers);
}

variant_result run_order_variant(world& w, const hparams& h, bool if_first, const cr::observer_list& observers) {
  const auto [first, second] = make_order_configs(w, h, if_first);
  const std::vector<std::string> if_domains{"instruction_following"}, chat{"chat"};
  auto cascade = cr::make_cascade(demo_stage(w, first, if_first ? if_domains : chat),
                                  demo_stage(w, second, if_first ? chat : if_domains));
  return run_variant(w, cascade, if_first ? "if_then_rlhf" : "rlhf_then_if", {}, observers);
}

}  // namespace demo
