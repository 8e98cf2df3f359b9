// The runner end to end on the tabular test policy: stage order and per-stage
// hyperparameters, the forgetting matrix rows, teacher capture feeding MOPD, stop
// criteria, observers.

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade.hpp"
#include "support/expect_error.hpp"
#include "support/test_cascade.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
using cr::testing::domain_prompts;
using cr::testing::exact_answer_reward;
using cr::testing::tabular_policy;

using cr::testing::make_test_cascade;

cr::stage_config grpo_config(std::string name, std::string domain, std::size_t steps, double lr,
                             std::size_t group, std::size_t prompts, std::vector<cr::prompt> evals) {
  return cr::testing::test_grpo_config(std::move(name), std::move(domain), steps, lr, group, prompts,
                                       std::move(evals));
}

TEST(CascadeRun, RunsStagesInOrderWithTheirOwnHyperparameters) {
  auto cascade = make_test_cascade();
  tabular_policy policy;
  const cr::cascade_report report = cr::run_cascade(cascade, policy, {.seed = 3});
  ASSERT_TRUE(report.finished);
  EXPECT_EQ(report.global_step, 72u);

  // Training generations (temperature 1) in order: 12 of stage a, 30 of b, 30 of MOPD.
  std::vector<cr::testing::generate_call> training;
  for (const auto& c : policy.generate_calls)
    if (c.request.sampling.temperature != 0.0) training.push_back(c);
  ASSERT_EQ(training.size(), 72u);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(training[i].prompts, 4u);
    EXPECT_EQ(training[i].request.group_size, 8u);
  }
  for (std::size_t i = 12; i < 42; ++i) {
    EXPECT_EQ(training[i].prompts, 2u);
    EXPECT_EQ(training[i].request.group_size, 4u);
  }
  for (std::size_t i = 42; i < 72; ++i) {
    EXPECT_EQ(training[i].prompts, 4u);
    EXPECT_EQ(training[i].request.group_size, 4u);
  }

  // Learning rates per update: constant 0.05, constant 0.1, then the MOPD warm-up.
  std::vector<double> lrs;
  for (const auto& u : policy.update_calls) lrs.push_back(u.lr);
  ASSERT_GE(lrs.size(), 30u);
  const std::vector<double> mopd_lrs(lrs.end() - 30, lrs.end());
  EXPECT_DOUBLE_EQ(mopd_lrs[0], 0.01);
  EXPECT_DOUBLE_EQ(mopd_lrs[1], 0.01 + 0.19 / 3);
  EXPECT_DOUBLE_EQ(mopd_lrs[2], 0.01 + 0.19 * 2 / 3);
  for (std::size_t i = 3; i < 30; ++i) EXPECT_DOUBLE_EQ(mopd_lrs[i], 0.2);
  // GRPO steps whose groups were all filtered take no update, so count by value.
  bool seen_b = false;
  for (std::size_t i = 0; i + 30 < lrs.size(); ++i) {
    EXPECT_TRUE(lrs[i] == (seen_b ? 0.1 : 0.05) || (!seen_b && lrs[i] == 0.1)) << i;
    seen_b = seen_b || lrs[i] == 0.1;
  }
}

TEST(CascadeRun, FillsTheForgettingMatrixBeforeAndAfterEveryStage) {
  auto cascade = make_test_cascade();
  tabular_policy policy;
  const cr::cascade_report report = cr::run_cascade(cascade, policy, {.seed = 3});
  const cr::forgetting_matrix& m = report.forgetting;
  ASSERT_EQ(m.rows(), 4u);
  EXPECT_EQ(m.label(0), "before");
  EXPECT_EQ(m.label(1), "stage_a");
  EXPECT_EQ(m.label(2), "stage_b");
  EXPECT_EQ(m.label(3), "mopd");
  EXPECT_EQ(m.domains(), (std::vector<std::string>{"a", "b"}));
  // GRPO on "a" improves "a"; "b" (same slots, other answers) improves "b" and costs
  // "a"; MOPD toward the best "a" snapshot recovers "a".
  EXPECT_GT(m.score(1, "a"), m.score(0, "a"));
  EXPECT_GT(m.score(2, "b"), m.score(1, "b"));
  EXPECT_LT(m.score(2, "a"), m.score(1, "a"));
  EXPECT_GT(m.score(3, "a"), m.score(2, "a"));
  // "a" was last trained by MOPD, the final stage: excluded from the overall BWT.
  ASSERT_TRUE(report.backward_transfer_overall.has_value());
  EXPECT_DOUBLE_EQ(*report.backward_transfer_overall, m.score(3, "b") - m.score(2, "b"));
  bool a_regressed_after_b = false;
  for (const auto& r : report.regressions)
    a_regressed_after_b = a_regressed_after_b || (r.domain == "a" && r.stage == "stage_b");
  EXPECT_TRUE(a_regressed_after_b);
}

TEST(CascadeRun, CapturesTheBestSnapshotPerDomainAsTeacher) {
  auto cascade = make_test_cascade();
  tabular_policy policy;
  auto runner = cr::make_runner(cascade, policy, {.seed = 3});
  const auto report = runner.run();
  const auto* teacher = runner.teachers().find("a");
  ASSERT_NE(teacher, nullptr);
  EXPECT_EQ(teacher->origin, cr::teacher_origin::captured);
  // The best "a" score among the rows before MOPD.
  const auto& m = report.forgetting;
  const double best = std::max({m.score(0, "a"), m.score(1, "a"), m.score(2, "a")});
  EXPECT_DOUBLE_EQ(teacher->score, best);
  // Only MOPD's domains are captured.
  EXPECT_FALSE(runner.teachers().contains("b"));
}

TEST(CascadeRun, ExplicitTeacherIsNeverReplaced) {
  auto cascade = make_test_cascade();
  tabular_policy policy;
  const tabular_policy fresh;
  auto runner = cr::make_runner(cascade, policy, {.seed = 3});
  runner.teachers().assign("a", fresh.snapshot());
  runner.run();
  const auto* teacher = runner.teachers().find("a");
  ASSERT_NE(teacher, nullptr);
  EXPECT_EQ(teacher->origin, cr::teacher_origin::assigned);
  EXPECT_EQ(*teacher->snapshot, fresh.snapshot());
}

TEST(CascadeRun, StopsAStageWhenItsTargetScoreIsReached) {
  auto a = cr::make_grpo_stage(grpo_config("stage_a", "a", 200, 0.05, 8, 4, domain_prompts("a", 0, 4)),
                               cr::prompt_pool(domain_prompts("a", 0, 4)), exact_answer_reward{});
  a.config().stop = {.eval_every = 5, .target_score = 0.9};
  auto cascade = cr::make_cascade(std::move(a));
  tabular_policy policy;
  const auto report = cr::run_cascade(cascade, policy, {.seed = 1});
  EXPECT_EQ(report.stopped_early, std::vector<std::string>{"stage_a"});
  EXPECT_LT(report.global_step, 200u);
  EXPECT_EQ(report.global_step % 5, 0u);
  EXPECT_GE(report.forgetting.score(1, "a"), 0.9);
}

TEST(CascadeRun, ObserversGetJsonLinesProgressAndTheForgettingTable) {
  auto cascade = make_test_cascade(3, 2, 2);
  tabular_policy policy;
  std::ostringstream lines, console, table;
  cr::run_cascade(cascade, policy, {.seed = 3}, cr::jsonl_metrics(lines), cr::console_progress(console),
                  cr::forgetting_table(table));
  std::istringstream in(lines.str());
  std::string line;
  std::size_t steps = 0, evaluations = 0, stage_ends = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string event = j.at("event");
    if (event == "step") {
      ++steps;
      for (const char* key : {"stage", "step", "reward_mean", "accuracy", "response_length",
                              "zero_variance_fraction", "filtered_sequences", "clip_fraction",
                              "kl_to_teacher", "time"})
        EXPECT_TRUE(j.contains(key)) << key;
      if (j.at("stage") == "mopd") {
        EXPECT_TRUE(j.at("kl_to_teacher").is_number());
      }
    }
    evaluations += event == "evaluation";
    stage_ends += event == "stage_end";
  }
  EXPECT_EQ(steps, 7u);
  EXPECT_EQ(evaluations, 4u);
  EXPECT_EQ(stage_ends, 3u);
  std::size_t progress_lines = 0;
  std::istringstream c(console.str());
  while (std::getline(c, line)) progress_lines += line.starts_with("[");
  EXPECT_EQ(progress_lines, 7u);
  EXPECT_NE(table.str().find("forgetting matrix"), std::string::npos);
  EXPECT_NE(table.str().find("BWT"), std::string::npos);
}

// Records every event as one line; the second observer has two members only.
struct event_log {
  std::vector<std::string>* lines;
  void on_stage_begin(const cr::stage_config& c, std::size_t index) const {
    lines->push_back("begin " + c.name + " " + std::to_string(index));
  }
  void on_step(const cr::step_metrics& m) const {
    lines->push_back("step " + m.stage + " " + std::to_string(m.step));
  }
  void on_evaluation(const cr::evaluation_record& e) const {
    lines->push_back("evaluation " + e.label + (e.stage_end ? " end" : " inside"));
  }
  void on_stage_end(const cr::stage_config& c, const cr::forgetting_matrix& m) const {
    lines->push_back("end " + c.name + " " + std::to_string(m.rows()));
  }
};
struct stage_counter {
  int begun = 0, ended = 0;
  void on_stage_begin(const cr::stage_config&, std::size_t) { ++begun; }
  void on_stage_end(const cr::stage_config&, const cr::forgetting_matrix&) { ++ended; }
};

TEST(CascadeRun, EventsArriveInRunOrderAndOnlyWhereAnObserverHasTheirMember) {
  auto cascade = make_test_cascade(2, 1, 1);
  tabular_policy policy;
  std::vector<std::string> lines;
  stage_counter counter;
  cr::run_cascade(cascade, policy, {.seed = 3}, event_log{&lines}, counter);
  const std::vector<std::string> expected = {
      "evaluation before end",  "begin stage_a 0", "step stage_a 1",  "step stage_a 2",
      "evaluation stage_a end", "end stage_a 2",   "begin stage_b 1", "step stage_b 1",
      "evaluation stage_b end", "end stage_b 3",   "begin mopd 2",    "step mopd 1",
      "evaluation mopd end",    "end mopd 4"};
  EXPECT_EQ(lines, expected);
  EXPECT_EQ(counter.begun, 3);
  EXPECT_EQ(counter.ended, 3);

  // notify() itself: a step event reaches the log, and the counter (no on_step) is skipped.
  lines.clear();
  cr::step_metrics m;
  m.stage = "x";
  m.step = 9;
  const event_log log{&lines};
  cr::notify(std::forward_as_tuple(log, counter), cr::step_event{m});
  EXPECT_EQ(lines, std::vector<std::string>{"step x 9"});
}

// Appends the warnings it sees (a member the other observers lack).
struct warning_log {
  std::vector<std::string>* lines;
  void on_warning(std::string_view w) const { lines->push_back("warning " + std::string(w)); }
};

TEST(CascadeRun, AnObserverListDeliversAsThePackOfItsObservers) {
  // The same run watched through a pack and through a list of the same observers: the
  // same events in the same order, the counter (an lvalue) counted in place.
  std::vector<std::string> by_pack, by_list;
  stage_counter pack_counter, list_counter;
  {
    auto cascade = make_test_cascade(2, 1, 1);
    tabular_policy policy;
    cr::run_cascade(cascade, policy, {.seed = 3}, event_log{&by_pack}, pack_counter);
  }
  {
    auto cascade = make_test_cascade(2, 1, 1);
    tabular_policy policy;
    const cr::observer_list list(event_log{&by_list}, list_counter);
    EXPECT_EQ(list.size(), 2u);
    cr::run_cascade(cascade, policy, {.seed = 3}, list);
  }
  EXPECT_EQ(by_list, by_pack);
  EXPECT_EQ(by_list.size(), 14u);
  EXPECT_EQ(list_counter.begun, 3);
  EXPECT_EQ(list_counter.ended, 3);

  // Adding a list appends its observers after those already there (no nesting): a step
  // reaches log one, then the two of `inner` in their order; the warning only the
  // observer that has on_warning.
  std::vector<std::string> lines;
  cr::observer_list inner;
  EXPECT_TRUE(inner.empty());
  inner.add(event_log{&lines}).add(warning_log{&lines});
  cr::observer_list outer(event_log{&lines});
  outer.add(inner);
  ASSERT_EQ(outer.size(), 3u);
  cr::step_metrics m;
  m.stage = "x";
  m.step = 4;
  outer.on_step(m);
  outer.on_warning("w");
  EXPECT_EQ(lines, (std::vector<std::string>{"step x 4", "step x 4", "warning w"}));
  // A list added to itself doubles (each observer twice, in order).
  lines.clear();
  inner.add(inner);
  ASSERT_EQ(inner.size(), 4u);
  inner.on_warning("v");
  EXPECT_EQ(lines, (std::vector<std::string>{"warning v", "warning v"}));

  // An observer held by value lives as long as a copy of the list does.
  lines.clear();
  cr::observer_list copy;
  {
    cr::observer_list owner(warning_log{&lines});
    copy = owner;
  }
  copy.on_warning("kept");
  EXPECT_EQ(lines, std::vector<std::string>{"warning kept"});
}

TEST(CascadeRun, OrderingCheckWarnsThroughObservers) {
  auto rlhf = cr::make_grpo_stage(grpo_config("rlhf", "a", 1, 0.01, 2, 2, domain_prompts("a", 0, 2)),
                                  cr::prompt_pool(domain_prompts("a", 0, 2)), exact_answer_reward{});
  rlhf.config().kind = cr::stage_kind::rlhf;
  auto if_rl = cr::make_grpo_stage(grpo_config("if_rl", "b", 1, 0.01, 2, 2, domain_prompts("b", 8, 2)),
                                   cr::prompt_pool(domain_prompts("b", 8, 2)), exact_answer_reward{});
  if_rl.config().kind = cr::stage_kind::if_rl;
  auto cascade = cr::make_cascade(std::move(rlhf), std::move(if_rl));
  tabular_policy policy;
  std::ostringstream console;
  const auto report = cr::run_cascade(cascade, policy, {}, cr::console_progress(console));
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_NE(console.str().find("warning: stage 'if_rl' (IF-RL) runs after stage 'rlhf'"), std::string::npos);
}

}  // namespace
