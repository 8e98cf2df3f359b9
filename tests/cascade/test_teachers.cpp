// MOPD teachers: the registry's capture and assignment rules, routing each prompt to its
// domain's teacher, and the error for a domain without one.

#include <gtest/gtest.h>

#include <vector>

#include "cascade_rl/cascade.hpp"
#include "support/expect_error.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
using cr::testing::domain_prompts;
using cr::testing::tabular_policy;
using cr::testing::tabular_snapshot;

// A teacher that writes a constant: tells routing apart.
struct constant_teacher {
  float value = 0;
  void log_probs(const cr::rollout_batch&, std::span<float> out) const {
    for (float& x : out) x = value;
  }
  bool operator==(const constant_teacher&) const = default;
};

TEST(TeacherRegistry, KeepsTheBestCapturedSnapshotPerDomain) {
  cr::teacher_registry<constant_teacher> r;
  int made = 0;
  const auto make = [&](float v) { return [&made, v] { ++made; return constant_teacher{v}; }; };
  EXPECT_EQ(r.offer({{"a", 0.5}, {"b", 0.2}}, "before", make(1)), 2u);
  EXPECT_EQ(made, 1);  // one snapshot shared by both domains
  EXPECT_EQ(r.find("a")->snapshot, r.find("b")->snapshot);
  EXPECT_EQ(r.offer({{"a", 0.4}, {"b", 0.3}}, "s1", make(2)), 1u);
  EXPECT_EQ(r.find("a")->snapshot->value, 1);
  EXPECT_EQ(r.find("b")->snapshot->value, 2);
  EXPECT_EQ(r.find("b")->source, "s1");
  EXPECT_DOUBLE_EQ(r.find("b")->score, 0.3);
  EXPECT_EQ(r.offer({{"a", 0.5}}, "s2", make(3)), 0u);  // a tie does not replace
  EXPECT_EQ(made, 2);
}

TEST(TeacherRegistry, AssignedTeachersAreNeverReplaced) {
  cr::teacher_registry<constant_teacher> r;
  r.assign("a", {7});
  EXPECT_EQ(r.offer({{"a", 1e9}}, "s", [] { return constant_teacher{1}; }), 0u);
  EXPECT_EQ(r.find("a")->snapshot->value, 7);
  EXPECT_EQ(r.find("a")->origin, cr::teacher_origin::assigned);
}

cr::rollout_batch two_domain_batch() {
  cr::rollout_batch b;
  const std::vector<std::int32_t> tokens{1, 2, 0};
  const std::vector<float> logps{-1, -1, -1};
  for (const char* d : {"math", "code", "math", "chat"}) {
    b.add_prompt({.id = 1, .domain = d});
    b.add_response(std::span(tokens).first(2), std::span(logps).first(2), cr::finish_reason::truncated);
    b.add_response(tokens, logps, cr::finish_reason::stopped);
  }
  return b;
}

TEST(Routing, EachPromptGetsItsDomainsTeacher) {
  cr::teacher_registry<constant_teacher> r;
  r.assign("math", {-1});
  r.assign("code", {-2});
  r.assign("chat", {-3});
  const auto b = two_domain_batch();
  std::vector<float> out(b.token_count(), 0);
  cr::route_teacher_log_probs(r, b, std::span<float>(out));
  const std::vector<float> expected{-1, -1, -1, -1, -1, -2, -2, -2, -2, -2,
                                    -1, -1, -1, -1, -1, -3, -3, -3, -3, -3};
  EXPECT_EQ(out, expected);
}

TEST(Routing, UnknownDomainNamesTheDomainAndThePromptBeforeScoring) {
  cr::teacher_registry<constant_teacher> r;
  r.assign("math", {-1});
  r.assign("code", {-2});
  const auto b = two_domain_batch();
  std::vector<float> out(b.token_count(), 5);
  cr::testing::expect_error_naming([&] { cr::route_teacher_log_probs(r, b, std::span<float>(out)); },
                                   "prompts[3]", "domain 'chat'", "code, math");
  EXPECT_EQ(out, std::vector<float>(b.token_count(), 5));  // nothing scored
}

TEST(Routing, TeachersScoreWithTheirOwnParameters) {
  // Two snapshots of the tabular policy; each domain's tokens must match its own.
  tabular_policy p;
  const auto before = p.snapshot();
  auto after = before;
  for (std::size_t i = 0; i < after.logits.size(); ++i) after.logits[i] = static_cast<double>(i % 5) * 0.3;
  cr::teacher_registry<tabular_snapshot> r;
  r.assign("math", before);
  r.assign("code", after);
  r.assign("chat", after);
  const auto b = two_domain_batch();
  std::vector<float> routed(b.token_count()), math(b.token_count()), code(b.token_count());
  cr::route_teacher_log_probs(r, b, std::span<float>(routed));
  before.log_probs(b, std::span<float>(math));
  after.log_probs(b, std::span<float>(code));
  for (std::size_t t = 0; t < b.token_count(); ++t) {
    const bool is_math = b.prompts[b.group_of(static_cast<std::size_t>(
                             std::upper_bound(b.token_offsets.begin(), b.token_offsets.end(),
                                              static_cast<std::int64_t>(t)) - b.token_offsets.begin() - 1))].domain == "math";
    EXPECT_EQ(routed[t], is_math ? math[t] : code[t]) << t;
  }
}

TEST(MopdStage, DistilsTowardTheRoutedTeacherWithTheBand) {
  // One MOPD step by hand: the stage's dlogp equals mopd_options' REINFORCE on
  // a_t = teacher - student with the step's token count as normaliser.
  tabular_policy teacher_policy;
  auto teacher = teacher_policy.snapshot();
  for (std::size_t i = 0; i < teacher.logits.size(); ++i) teacher.logits[i] = static_cast<double>(i % 7) * 0.2;
  cr::teacher_registry<tabular_snapshot> registry;
  registry.assign("a", teacher);

  auto stage = cr::make_mopd_stage(
      {.name = "mopd", .domains = {"a"}, .group_size = 3, .prompts_per_step = 2, .steps = 1,
       .lr = cr::constant_lr(0.1), .sampling = {.max_response_length = 6}},
      cr::prompt_pool(domain_prompts("a", 0, 2)));
  EXPECT_EQ(stage.config().kind, cr::stage_kind::mopd);
  stage.validate();
  tabular_policy student;
  cr::rng_type rng(9);
  cr::step_context<tabular_snapshot> context{0, 0.1, rng, registry};
  const cr::step_metrics m = stage.step(student, context);
  ASSERT_EQ(student.update_calls.size(), 1u);
  EXPECT_EQ(m.updates, 1u);
  ASSERT_TRUE(m.kl_to_teacher.has_value());

  // Recompute: replay the generation with the same seed on a fresh student.
  tabular_policy replay;
  cr::rng_type rng2(9);
  cr::prompt_pool pool(domain_prompts("a", 0, 2));
  const auto indices = pool.next(2, rng2);
  std::vector<cr::prompt> prompts;
  for (auto i : indices) prompts.push_back(pool.at(i));
  const auto batch = replay.generate(prompts, {3, {.max_response_length = 6}, rng2()});
  const std::size_t n = batch.token_count();
  std::vector<float> t(n), s(n), a(n), dlogp(n);
  teacher.log_probs(batch, std::span<float>(t));
  replay.log_probs(batch, std::span<float>(s));
  double kl = 0;
  for (std::size_t k = 0; k < n; ++k) {
    a[k] = t[k] - s[k];
    kl += s[k] - t[k];
  }
  const auto layout = batch.layout();
  cr::reinforce_loss(
      cr::exec::seq, layout,
      {.log_probs = s, .advantages = a, .behaviour_log_probs = batch.behaviour_log_probs}, dlogp,
      cr::local_loss_counts(cr::exec::seq, layout).normalizer(cr::loss_aggregation::token_mean),
      cr::mopd_options());
  double sum = 0;
  for (float d : dlogp) sum += d;
  EXPECT_DOUBLE_EQ(student.update_calls[0].dlogp_sum, sum);
  EXPECT_NEAR(*m.kl_to_teacher, kl / static_cast<double>(n), 1e-6);
  EXPECT_EQ(m.tokens, n);
}

}  // namespace
