// Checkpoints and resume: a run cut at any step and resumed from its latest checkpoint
// (fresh policy, fresh stages, fresh runner: a new process) ends with the policy of an
// uninterrupted run, bit for bit; a torn checkpoint write is ignored; a checkpoint that
// fails its checksums is refused when no older one verifies (tests/reliability covers
// the fall-back to an older one); a malformed or foreign checkpoint (checksums intact)
// is refused with a clear error and changes nothing.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cascade_rl/cascade.hpp"
#include "support/expect_error.hpp"
#include "support/test_cascade.hpp"
#include "support/test_policy.hpp"

namespace {

namespace cr = cascade_rl;
namespace fs = std::filesystem;
using cr::testing::make_test_cascade;
using cr::testing::tabular_policy;

struct outcome {
  cr::testing::tabular_snapshot policy;
  nlohmann::json forgetting;
  cr::testing::tabular_snapshot teacher_a;
  std::size_t runs = 0;
};

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("cascade_rl_resume_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

outcome run_straight(std::uint64_t seed) {
  auto cascade = make_test_cascade();
  tabular_policy policy;
  auto runner = cr::make_runner(cascade, policy, {.seed = seed});
  const auto report = runner.run();
  EXPECT_TRUE(report.finished);
  return {policy.snapshot(), report.forgetting.to_json(), *runner.teachers().find("a")->snapshot, 1};
}

// Each iteration is a new process: new objects, resume, run at most `chunk` steps.
outcome run_in_pieces(std::uint64_t seed, const fs::path& dir, std::size_t chunk, std::size_t every = 1) {
  outcome o;
  for (;;) {
    auto cascade = make_test_cascade();
    tabular_policy policy;
    auto runner = cr::make_runner(cascade, policy,
                                  {.seed = seed, .checkpoint_dir = dir, .checkpoint_every = every, .max_steps = chunk});
    runner.resume();
    const auto report = runner.run();
    ++o.runs;
    if (report.finished) {
      o.policy = policy.snapshot();
      o.forgetting = report.forgetting.to_json();
      o.teacher_a = *runner.teachers().find("a")->snapshot;
      return o;
    }
    if (o.runs > 200) {
      ADD_FAILURE() << "did not finish";
      return o;
    }
  }
}

TEST(Resume, KilledAndResumedRunEqualsUninterruptedRunBitForBit) {
  const outcome straight = run_straight(11);
  for (std::size_t chunk : {1u, 5u, 7u, 12u, 29u, 50u}) {
    const fs::path dir = fresh_dir("chunk" + std::to_string(chunk));
    const outcome pieces = run_in_pieces(11, dir, chunk);
    EXPECT_GT(pieces.runs, 1u) << chunk;
    EXPECT_TRUE(pieces.policy == straight.policy) << "chunk " << chunk;
    EXPECT_TRUE(pieces.teacher_a == straight.teacher_a) << "chunk " << chunk;
    EXPECT_EQ(pieces.forgetting, straight.forgetting) << "chunk " << chunk;
    fs::remove_all(dir);
  }
}

TEST(Resume, SparseCheckpointsStillResumeExactly) {
  // Checkpoints every 4 steps; each interrupted run checkpoints where it stopped.
  const outcome straight = run_straight(5);
  const fs::path dir = fresh_dir("sparse");
  const outcome pieces = run_in_pieces(5, dir, 9, 4);
  EXPECT_TRUE(pieces.policy == straight.policy);
  fs::remove_all(dir);
}

TEST(Resume, FinishedRunResumesAsFinished) {
  const fs::path dir = fresh_dir("finished");
  run_in_pieces(2, dir, 1000);
  auto cascade = make_test_cascade();
  tabular_policy policy;
  auto runner = cr::make_runner(cascade, policy, {.seed = 2, .checkpoint_dir = dir});
  ASSERT_TRUE(runner.resume());
  EXPECT_TRUE(runner.finished());
  const auto report = runner.run();
  EXPECT_TRUE(report.finished);
  EXPECT_TRUE(policy.generate_calls.empty());  // nothing ran again
  fs::remove_all(dir);
}

TEST(Resume, KeepsOnlyTheNewestCheckpointsAndReferencedTeachers) {
  const fs::path dir = fresh_dir("prune");
  run_in_pieces(2, dir, 1000);
  std::size_t checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir))
    checkpoints += e.path().filename().string().starts_with("ckpt-");
  EXPECT_EQ(checkpoints, 2u);
  std::size_t teachers = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir / "teachers")) ++teachers;
  EXPECT_EQ(teachers, 1u);  // the one "a" teacher the kept checkpoints refer to
  fs::remove_all(dir);
}

TEST(Resume, TornCheckpointWriteIsIgnored) {
  const outcome straight = run_straight(11);
  const fs::path dir = fresh_dir("torn");
  {
    auto cascade = make_test_cascade();
    tabular_policy policy;
    auto runner = cr::make_runner(cascade, policy, {.seed = 11, .checkpoint_dir = dir, .max_steps = 17});
    runner.run();
  }
  // A crash while writing the next checkpoint: a half-written directory, a half-written
  // `latest` temporary. Neither is the latest checkpoint.
  fs::create_directories(dir / "ckpt-99999999.partial");
  std::ofstream(dir / "ckpt-99999999.partial" / "state.json") << "{\"format\": \"cascade_rl.che";
  std::ofstream(dir / "latest.tmp") << "ckpt-9999";
  const outcome pieces = run_in_pieces(11, dir, 1000);
  EXPECT_TRUE(pieces.policy == straight.policy);
  EXPECT_FALSE(fs::exists(dir / "ckpt-99999999.partial"));
  fs::remove_all(dir);
}

// A checkpoint written after 10 steps (the only one kept), and its path.
fs::path checkpoint_after_ten_steps(const fs::path& dir) {
  auto cascade = make_test_cascade();
  tabular_policy policy;
  auto runner = cr::make_runner(cascade, policy,
                                {.seed = 4, .checkpoint_dir = dir, .keep_checkpoints = 1, .max_steps = 10});
  runner.run();
  std::ifstream latest(dir / "latest");
  std::string name;
  latest >> name;
  return dir / name;
}

// Resume must throw and leave the runner and policy untouched.
template <class... Needles>
void expect_resume_refused(const fs::path& dir, const std::string& needle, const Needles&... more) {
  auto cascade = make_test_cascade();
  tabular_policy policy;
  policy.restore([] {
    tabular_policy p;
    auto s = p.snapshot();
    s.logits[3] = 0.25;  // recognisable
    return s;
  }());
  const auto before = policy.snapshot();
  auto runner = cr::make_runner(cascade, policy, {.seed = 4, .checkpoint_dir = dir});
  cr::testing::expect_error_naming([&] { runner.resume(); }, needle, more...);
  EXPECT_TRUE(policy.snapshot() == before);
  EXPECT_EQ(runner.stage_index(), 0u);
  EXPECT_EQ(runner.step(), 0u);
  EXPECT_EQ(runner.forgetting().rows(), 0u);
  EXPECT_TRUE(runner.teachers().empty());
  EXPECT_EQ(cascade.get<0>().source().epoch(), 0u);
}

TEST(Resume, TruncatedStateIsRefusedAndChangesNothing) {
  const fs::path dir = fresh_dir("truncated");
  const fs::path ckpt = checkpoint_after_ten_steps(dir);
  std::string text = cr::detail::read_text_file(ckpt / "state.json");
  std::ofstream(ckpt / "state.json", std::ios::trunc) << text.substr(0, text.size() / 2);
  expect_resume_refused(dir, "state.json", "checksums", "truncated");
  fs::remove_all(dir);
}

TEST(Resume, MalformedStateIsRefusedAndChangesNothing) {
  const fs::path dir = fresh_dir("malformed");
  const fs::path ckpt = checkpoint_after_ten_steps(dir);
  auto state = cr::detail::read_json_file(ckpt / "state.json");
  state["position"].erase("step");
  std::ofstream(ckpt / "state.json", std::ios::trunc) << state.dump();
  cr::detail::seal_checkpoint(ckpt);  // an edit with valid checksums: content checks refuse it
  expect_resume_refused(dir, "state.position.step", "is missing");
  fs::remove_all(dir);
}

// Header fields of the wrong JSON type are refused by name (found by the checkpoint
// fuzzer: {"format": 1} once escaped as nlohmann's type_error).
TEST(Resume, HeaderFieldsOfTheWrongTypeAreRefused) {
  const fs::path dir = fresh_dir("header_types");
  const fs::path ckpt = checkpoint_after_ten_steps(dir);
  const auto original = cr::detail::read_json_file(ckpt / "state.json");
  const auto refused = [&](const char* key, const nlohmann::json& value, const std::string& needle) {
    auto state = original;
    state[key] = value;
    std::ofstream(ckpt / "state.json", std::ios::trunc) << state.dump();
    cr::detail::seal_checkpoint(ckpt);  // valid checksums: the content checks refuse it
    expect_resume_refused(dir, needle);
  };
  refused("format", 1, "state.format");
  refused("version", "1", "state.version");
  refused("version", 1.5, "state.version");
  refused("format", nlohmann::json::object(), "state.format");
  refused("format", "cascade_rl.checkpoint-2", "state.format");
  refused("version", 2, "state.version");
  auto teachers = original.at("teachers");
  ASSERT_FALSE(teachers.empty());
  teachers[0]["origin"] = "borrowed";
  refused("teachers", teachers, "state.teachers[0].origin: unknown name \"borrowed\"");
  teachers[0].erase("origin");
  refused("teachers", teachers, "state.teachers[0].origin: is missing");
  refused("extra", 1, "state.extra: unknown key");
  fs::remove_all(dir);
}

// The state a resumed runner holds is the one the interrupted runner checkpointed, field
// for field (run_state_difference walks the same field list as the checkpoint writer).
TEST(Resume, ResumedRunnerHoldsTheStateItsPredecessorCheckpointed) {
  const fs::path dir = fresh_dir("state");
  for (const std::size_t steps : {3u, 10u, 17u}) {
    fs::remove_all(dir);
    auto cascade = make_test_cascade();
    tabular_policy policy;
    auto first =
        cr::make_runner(cascade, policy, {.seed = 8, .checkpoint_dir = dir, .max_steps = steps});
    ASSERT_FALSE(first.run().finished);
    const cr::run_state interrupted = first.state();
    EXPECT_EQ(interrupted.position.global_step, steps);
    EXPECT_GT(interrupted.sequence, 0u);

    auto again = make_test_cascade();
    tabular_policy fresh;
    auto second = cr::make_runner(again, fresh, {.seed = 8, .checkpoint_dir = dir});
    EXPECT_NE(cr::run_state_difference(second.state(), interrupted), "");
    ASSERT_TRUE(second.resume());
    EXPECT_EQ(cr::run_state_difference(second.state(), interrupted), "") << steps << " steps";
    EXPECT_TRUE(fresh.snapshot() == policy.snapshot());
  }
  fs::remove_all(dir);
}

TEST(Resume, CorruptGeneratorStateIsRefused) {
  const fs::path dir = fresh_dir("rng");
  const fs::path ckpt = checkpoint_after_ten_steps(dir);
  auto state = cr::detail::read_json_file(ckpt / "state.json");
  state["rng"] = "not a generator";
  std::ofstream(ckpt / "state.json", std::ios::trunc) << state.dump();
  cr::detail::seal_checkpoint(ckpt);  // an edit with valid checksums: content checks refuse it
  expect_resume_refused(dir, "state.rng");
  fs::remove_all(dir);
}

TEST(Resume, TruncatedPolicyFileIsRefusedAndChangesNothing) {
  const fs::path dir = fresh_dir("policy");
  const fs::path ckpt = checkpoint_after_ten_steps(dir);
  fs::resize_file(ckpt / "policy", fs::file_size(ckpt / "policy") / 2);
  expect_resume_refused(dir, "'policy'", "checksums", "truncated");
  cr::detail::seal_checkpoint(ckpt);  // checksums intact: the policy's own check refuses it
  expect_resume_refused(dir, "tabular_policy.load", "truncated");
  fs::remove_all(dir);
}

TEST(Resume, BadPromptPoolStateIsRefusedAndChangesNothing) {
  const fs::path dir = fresh_dir("pool");
  const fs::path ckpt = checkpoint_after_ten_steps(dir);
  auto state = cr::detail::read_json_file(ckpt / "state.json");
  state["stage_state"]["source"]["order"][2] = 99;
  std::ofstream(ckpt / "state.json", std::ios::trunc) << state.dump();
  cr::detail::seal_checkpoint(ckpt);  // an edit with valid checksums: content checks refuse it
  expect_resume_refused(dir, "prompt_pool state.order[2]");
  fs::remove_all(dir);
}

TEST(Resume, CheckpointOfAnotherCascadeIsRefused) {
  const fs::path dir = fresh_dir("foreign");
  checkpoint_after_ten_steps(dir);
  auto other = cr::make_cascade(cr::make_grpo_stage(
      cr::testing::test_grpo_config("other", "a", 3, 0.1, 2, 2, cr::testing::domain_prompts("a", 0, 2)),
      cr::prompt_pool(cr::testing::domain_prompts("a", 0, 2)), cr::testing::exact_answer_reward{}));
  tabular_policy policy;
  auto runner = cr::make_runner(other, policy, {.checkpoint_dir = dir});
  cr::testing::expect_error_naming([&] { runner.resume(); }, "state.stages", "stage_a", "other");
  fs::remove_all(dir);
}

TEST(Resume, NothingToResumeFromIsNotAnError) {
  const fs::path dir = fresh_dir("empty");
  auto cascade = make_test_cascade();
  tabular_policy policy;
  auto runner = cr::make_runner(cascade, policy, {.checkpoint_dir = dir});
  EXPECT_FALSE(runner.resume());
  auto no_dir = cr::make_runner(cascade, policy, {});
  cr::testing::expect_error_naming([&] { no_dir.resume(); }, "checkpoint_dir");
}

TEST(AtomicFile, WritesWholeFilesAndLeavesNoTemporary) {
  const fs::path dir = fresh_dir("atomic");
  fs::create_directories(dir);
  cr::detail::write_file_atomically(dir / "f.json", "{\"a\": 1}");
  cr::detail::write_file_atomically(dir / "f.json", "{\"a\": 2}");
  EXPECT_EQ(cr::detail::read_json_file(dir / "f.json").at("a"), 2);
  EXPECT_FALSE(fs::exists(dir / "f.json.tmp"));
  cr::testing::expect_error_naming([&] { cr::detail::write_file_atomically(dir / "missing" / "f", "x"); },
                                   "cannot be created");
  EXPECT_FALSE(fs::exists(dir / "missing"));
  fs::remove_all(dir);
}

}  // namespace
