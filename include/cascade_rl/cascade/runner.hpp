#pragma once
// Runs a cascade on one policy:
//   validate everything (configs, teachers MOPD will need, checkpointing) before
//   touching the policy
//   evaluate every domain ("before" row of the forgetting matrix); offer teachers
//   for each stage: steps (lr from the stage schedule, seeds from the cascade's
//     generator), optional evaluations inside the stage for the stop criteria, then
//     evaluation of every domain (a forgetting-matrix row) and teacher capture
//   checkpoints along the way; resume() continues from the latest one exactly.
//
// A run can be cut short with run_options.max_steps (a time-limited job, or a test's
// "kill"): it checkpoints and returns; a later run() or a fresh runner's resume() +
// run() continues, and the final policy is bit for bit that of an uninterrupted run
// (the policy's snapshot holds its optimizer state; every random draw comes from the
// checkpointed generator).
//
// Data-parallel: give the runner a communicator (make_runner(cascade, policy, comm,
// options)); every rank runs the same program with the same options on its replica of
// the policy. Steps and evaluations are sharded by the stages (data_parallel.hpp says
// what the policy must do); every rank computes the same forgetting matrix, teacher
// decisions and checkpoint state. Rank 0 alone writes checkpoints (then tells the
// others whether it succeeded); every rank reads them on resume() and the ranks check
// that they loaded the same one. Observers are called on every rank: pass rank 0 the
// ones that print.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/checkpoint.hpp"
#include "cascade_rl/cascade/composition.hpp"
#include "cascade_rl/cascade/concepts.hpp"
#include "cascade_rl/cascade/data_parallel.hpp"
#include "cascade_rl/cascade/forgetting_matrix.hpp"
#include "cascade_rl/cascade/observers.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/cascade/run_state.hpp"
#include "cascade_rl/cascade/stage.hpp"
#include "cascade_rl/cascade/teacher_registry.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

struct run_options {
  std::uint64_t seed = 0;
  std::filesystem::path checkpoint_dir{};  // empty: no checkpoints
  std::size_t checkpoint_every = 1;        // in steps; the baseline, stage ends and
                                           // interrupted runs always checkpoint
  std::size_t keep_checkpoints = 2;
  std::size_t max_steps = 0;               // steps one run() may take; 0: no limit
  double regression_threshold = 0.02;      // a drop larger than this is a regression
};

struct cascade_report {
  bool finished = false;                   // false: cut short by max_steps
  std::size_t global_step = 0;
  forgetting_matrix forgetting;
  std::vector<std::pair<std::string, std::optional<double>>> backward_transfer;
  std::optional<double> backward_transfer_overall;
  std::vector<regression> regressions;
  std::vector<std::string> warnings;       // the ordering check
  std::vector<std::string> stopped_early;  // stages ended by their stop criteria
};

namespace detail {

// The evaluation seed: fixed for a run, independent of the training generator.
inline std::uint64_t evaluation_seed(std::uint64_t seed) { return seed ^ 0x9e3779b97f4a7c15ULL; }

}  // namespace detail

template <Policy P, stage_shape... S>
  requires(Stage<S, P> && ...)
class cascade_runner {
 public:
  using snapshot = snapshot_t<P>;

  cascade_runner(cascade<S...>& stages, P& policy, run_options options = {})
      : cascade_runner(stages, policy, communicator_ref{}, std::move(options)) {}

  // Data-parallel: `comm` (kept by reference) spans the ranks running this cascade.
  cascade_runner(cascade<S...>& stages, P& policy, communicator_ref comm, run_options options = {})
      : stages_(&stages),
        policy_(&policy),
        options_(std::move(options)),
        comm_(comm),
        state_{.stages = stage_names(stages),
               .rng = rng_type(options_.seed),
               .forgetting = forgetting_matrix(stages.eval_domains())} {}

  // Explicit teachers: assign before run() (an assigned teacher is never replaced).
  [[nodiscard]] teacher_registry<snapshot>& teachers() { return teachers_; }
  [[nodiscard]] const teacher_registry<snapshot>& teachers() const { return teachers_; }
  // Where the run stands: what a checkpoint written now would hold besides the policy
  // and the teachers (its sequence is that of the last one written).
  [[nodiscard]] run_state state() const {
    run_state now = state_;
    now.stage_state =
        now.position.stage < stages_->size()
            ? stages_->visit(now.position.stage, [](const auto& s) { return s.state(); })
            : nlohmann::json();
    return now;
  }
  [[nodiscard]] const forgetting_matrix& forgetting() const { return state_.forgetting; }
  [[nodiscard]] std::size_t stage_index() const { return state_.position.stage; }
  [[nodiscard]] std::size_t step() const { return state_.position.step; }
  [[nodiscard]] std::size_t global_step() const { return state_.position.global_step; }
  [[nodiscard]] bool finished() const { return state_.position.stage == stages_->size(); }
  [[nodiscard]] communicator_ref communicator() const { return comm_; }

  // Loads the latest checkpoint of options.checkpoint_dir, if there is one, and returns
  // whether it did. All or nothing: a malformed, truncated or foreign checkpoint throws
  // cascade_rl::error and leaves the runner, the stages and the policy as they were.
  bool resume() {
    if (options_.checkpoint_dir.empty())
      detail::fail("run_options.checkpoint_dir", "is empty: there is nothing to resume from");
    if constexpr (!Checkpointable<P>) {
      detail::fail("policy", "cannot resume: its type has no save(snapshot, path) / load(path)");
    } else {
      // Every rank reads; a failure or a different checkpoint on any rank fails all.
      std::optional<loaded_checkpoint<snapshot>> loaded;
      run_state parsed;
      std::exception_ptr failure;
      try {
        loaded = read_latest_checkpoint(options_.checkpoint_dir, *policy_);
        if (loaded) parsed = parse_state(loaded->state, loaded->path.string());
      } catch (...) {
        failure = std::current_exception();
      }
      agree_on_checkpoint(failure, loaded ? parsed.sequence : 0);
      if (!loaded) return false;
      if (parsed.position.stage < stages_->size())
        stages_->visit(parsed.position.stage, [&](auto& s) { s.load_state(parsed.stage_state); });
      // Commit: nothing below throws but restore, which runs last.
      state_ = std::move(parsed);
      teachers_ = std::move(loaded->teachers);
      policy_->restore(loaded->policy);
      return true;
    }
  }

  // Runs (or continues) the cascade. Observers: see observers.hpp.
  template <class... O>
  cascade_report run(O&&... observers) {
    const auto obs = std::forward_as_tuple(observers...);
    validate();
    const std::vector<std::string> warnings = stages_->warnings();
    for (const std::string& w : warnings) notify(obs, warning_event{w});

    run_position& at = state_.position;
    std::size_t taken = 0;
    bool dirty = false;
    if (!at.baseline_done) {
      evaluate_all("before", {}, obs);
      at.baseline_done = true;
      checkpoint();
    }
    while (at.stage < stages_->size()) {
      bool interrupted = false;
      stages_->visit(at.stage, [&](auto& stage) {
        const stage_config& config = stage.config();
        if (at.step == 0 && !at.stage_stopped) {
          require_teachers_now(stage);
          notify(obs, stage_begin_event{config, at.stage});
        }
        while (!at.stage_stopped && at.step < config.steps) {
          if (options_.max_steps != 0 && taken == options_.max_steps) {
            interrupted = true;
            return;
          }
          step_context<snapshot> context{at.step, config.lr.at(at.step, config.steps), state_.rng,
                                         teachers_, comm_};
          step_metrics m = stage.step(*policy_, context);
          ++at.step;
          ++at.global_step;
          ++taken;
          m.stage = config.name;
          m.stage_index = at.stage;
          m.step = at.step;
          m.steps = config.steps;
          m.global_step = at.global_step;
          m.lr = context.lr;
          notify(obs, step_event{m});
          if (config.stop.eval_every != 0 && at.step % config.stop.eval_every == 0 &&
              at.step < config.steps)
            evaluate_inside(stage, obs);
          dirty = true;
          if (at.global_step % std::max<std::size_t>(options_.checkpoint_every, 1) == 0) {
            checkpoint();
            dirty = false;
          }
        }
        evaluate_all(config.name, config.domains, obs);
        notify(obs, stage_end_event{config, state_.forgetting});
        ++at.stage;
        at.step = 0;
        at.stage_stopped = false;
        state_.stop = {};
        checkpoint();
        dirty = false;
      });
      if (interrupted) {
        if (dirty) checkpoint();
        return report(false, warnings);
      }
    }
    return report(true, warnings);
  }

 private:
  // ---- validation --------------------------------------------------------------------

  void validate() const {
    stages_->validate();
    if (comm_.size() > 1)
      stages_->for_each([&](const auto& stage) {
        if constexpr (!data_parallel_stage<std::decay_t<decltype(stage)>>)
          detail::fail("stage '" + stage.config().name + "'",
                       "does not declare data_parallel support, but the runner's communicator "
                       "has " + std::to_string(comm_.size()) + " ranks (a stage that ignores "
                       "step_context::comm would run its whole step on every rank)");
      });
    if (!options_.checkpoint_dir.empty() && !Checkpointable<P>)
      detail::fail("run_options.checkpoint_dir",
                   "is set, but the policy type has no save(snapshot, path) / load(path)");
    // MOPD stages still to run: every domain needs a teacher now, or an evaluation set
    // from which one will be captured (every domain is evaluated before the first stage).
    const std::vector<std::string> evaluated = stages_->eval_domains();
    const std::set<std::string> capturable(evaluated.begin(), evaluated.end());
    for (std::size_t k = state_.position.stage; k < stages_->size(); ++k)
      stages_->visit(k, [&](const auto& stage) {
        if constexpr (needs_teachers<std::decay_t<decltype(stage)>>)
          for (const std::string& d : stage.required_teachers())
            if (!teachers_.contains(d) && !capturable.contains(d))
              detail::fail("stage '" + stage.config().name + "'.domains",
                           "has domain '" + d + "' without a teacher: none is assigned, and no "
                           "evaluation set measures it, so none can be captured");
      });
  }

  template <class Stage_>
  void require_teachers_now(const Stage_& stage) const {
    if constexpr (needs_teachers<Stage_>)
      for (const std::string& d : stage.required_teachers())
        if (!teachers_.contains(d))
          detail::fail("stage '" + stage.config().name + "'.domains",
                       "has domain '" + d + "' without a teacher at the start of the stage");
  }

  // ---- evaluation and teachers -------------------------------------------------------

  // Domains a capture now could serve: those of MOPD stages after the current one (all
  // of them before the first stage).
  [[nodiscard]] std::set<std::string> wanted_teachers() const {
    std::set<std::string> wanted;
    const run_position& at = state_.position;
    const std::size_t first = at.baseline_done ? at.stage + 1 : 0;
    for (std::size_t k = first; k < stages_->size(); ++k)
      stages_->visit(k, [&](const auto& stage) {
        if constexpr (needs_teachers<std::decay_t<decltype(stage)>>)
          for (const std::string& d : stage.required_teachers()) wanted.insert(d);
      });
    return wanted;
  }

  void offer_teachers(const std::vector<domain_score>& scores, const std::string& label) {
    const std::set<std::string> wanted = wanted_teachers();
    std::vector<std::pair<std::string, double>> offered;
    for (const auto& s : scores)
      if (wanted.contains(s.domain)) offered.emplace_back(s.domain, s.score);
    teachers_.offer(offered, label, [&] { return policy_->snapshot(); });
  }

  template <class Stage_>
  std::vector<domain_score> evaluate_stage(Stage_& stage, std::uint64_t seed) {
    if constexpr (evaluates_across_ranks<Stage_, P>)
      return stage.evaluate(*policy_, seed, comm_);
    else
      return stage.evaluate(*policy_, seed);  // single process (validate() checked)
  }

  template <class Obs>
  void evaluate_all(const std::string& label, const std::vector<std::string>& trained, Obs& obs) {
    const std::uint64_t seed = detail::evaluation_seed(options_.seed);
    std::vector<domain_score> scores;
    stages_->for_each([&](auto& stage) {
      for (auto& s : evaluate_stage(stage, seed)) scores.push_back(std::move(s));
    });
    forgetting_matrix& matrix = state_.forgetting;
    std::vector<double> row(matrix.domains().size(), 0.0);
    for (const auto& s : scores) row[matrix.column(s.domain)] = s.score;
    matrix.add_row(label, trained, row);
    offer_teachers(scores, label);
    const evaluation_record record{label, state_.position.stage, state_.position.step, true,
                                   scores};
    notify(obs, evaluation_event{record});
  }

  template <class Stage_, class Obs>
  void evaluate_inside(Stage_& stage, Obs& obs) {
    const stage_config& config = stage.config();
    const std::vector<domain_score> scores = evaluate_stage(stage, detail::evaluation_seed(options_.seed));
    offer_teachers(scores, config.name);
    const evaluation_record record{config.name, state_.position.stage, state_.position.step, false,
                                   scores};
    notify(obs, evaluation_event{record});
    double mean = 0.0;
    for (const auto& s : scores) mean += s.score;
    if (!scores.empty()) mean /= static_cast<double>(scores.size());
    const stop_criteria& stop = config.stop;
    stop_progress& progress = state_.stop;
    if (!progress.best || mean > *progress.best + stop.plateau_min_delta) {
      progress.best = mean;
      progress.since_improvement = 0;
    } else {
      ++progress.since_improvement;
    }
    const bool reached = stop.target_score && mean >= *stop.target_score;
    const bool plateau =
        stop.plateau_patience != 0 && progress.since_improvement >= stop.plateau_patience;
    if (reached || plateau) {
      state_.position.stage_stopped = true;
      state_.stopped_early.push_back(config.name);
    }
  }

  // ---- checkpoints -------------------------------------------------------------------

  static std::vector<std::string> stage_names(const cascade<S...>& stages) {
    std::vector<std::string> names;
    for (const auto& c : stages.configs()) names.push_back(c.name);
    return names;
  }

  void checkpoint() {
    if (options_.checkpoint_dir.empty()) return;
    if constexpr (Checkpointable<P>) {
      const std::uint64_t sequence = state_.sequence + 1;
      run_state next = state();
      next.sequence = sequence;
      // Rank 0 writes (every rank's state is the same); the others learn whether it did.
      std::exception_ptr failure;
      if (comm_.rank() == 0) try {
          write_checkpoint(options_.checkpoint_dir, sequence, *policy_, teachers_,
                           run_state_to_json(next), options_.keep_checkpoints);
        } catch (...) {
          failure = std::current_exception();
        }
      if (comm_.size() > 1) {
        std::uint8_t failed = failure ? 1 : 0;
        comm_.broadcast(std::span<std::uint8_t>(&failed, 1), 0);
        if (failed != 0 && !failure)
          detail::fail("checkpoint", "writing checkpoint " + std::to_string(sequence) + " to '" +
                                         options_.checkpoint_dir.string() + "' failed on rank 0");
      }
      if (failure) std::rethrow_exception(failure);
      state_.sequence = sequence;
    }
  }

  // resume(): every rank must have read the same checkpoint (sequence 0: none).
  void agree_on_checkpoint(const std::exception_ptr& failure, std::uint64_t sequence) {
    if (comm_.size() == 1) {
      if (failure) std::rethrow_exception(failure);
      return;
    }
    const std::uint64_t mine[2] = {failure ? 1u : 0u, sequence};
    std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(comm_.size()));
    comm_.all_gather(std::span<const std::uint64_t>(mine), std::span<std::uint64_t>(all));
    if (failure) std::rethrow_exception(failure);
    for (std::size_t r = 0; r < all.size() / 2; ++r) {
      if (all[2 * r] != 0)
        detail::fail("run_options.checkpoint_dir", "'" + options_.checkpoint_dir.string() +
                                                       "': reading the latest checkpoint failed on rank " +
                                                       std::to_string(r));
      if (all[2 * r + 1] != sequence)
        detail::fail("run_options.checkpoint_dir",
                     "'" + options_.checkpoint_dir.string() + "': rank " + std::to_string(r) +
                         " found checkpoint " + std::to_string(all[2 * r + 1]) + ", rank " +
                         std::to_string(comm_.rank()) + " found " + std::to_string(sequence) +
                         " (0: none); data-parallel ranks must share the checkpoint directory");
    }
  }

  // The run state of a checkpoint's state.json, checked against this cascade.
  [[nodiscard]] run_state parse_state(const nlohmann::json& state, const std::string& where) const {
    const std::string field = "checkpoint '" + where + "' state";
    run_state p = run_state_from_json(state, field, detail::checkpoint_header_keys());
    if (p.stages != state_.stages)
      detail::fail(field + ".stages", "are " + detail::joined(p.stages) +
                                          ", but this cascade's stages are " +
                                          detail::joined(state_.stages));
    if (p.position.stage > stages_->size())
      detail::fail(field + ".position.stage", "is past the last stage");
    if (p.position.stage < stages_->size()) {
      const std::size_t steps =
          stages_->visit(p.position.stage, [](const auto& s) { return s.config().steps; });
      if (p.position.step > steps)
        detail::fail(field + ".position.step", "is past the stage's step budget");
    }
    if (p.forgetting.domains() != state_.forgetting.domains())
      detail::fail(field + ".forgetting", "has other domains than this cascade's evaluation sets");
    return p;
  }

  [[nodiscard]] cascade_report report(bool finished, std::vector<std::string> warnings) const {
    cascade_report r;
    r.finished = finished;
    const forgetting_matrix& matrix = state_.forgetting;
    r.global_step = state_.position.global_step;
    r.forgetting = matrix;
    for (const auto& d : matrix.domains())
      r.backward_transfer.emplace_back(d, matrix.backward_transfer(d));
    r.backward_transfer_overall = matrix.backward_transfer();
    r.regressions = matrix.regressions(options_.regression_threshold);
    r.warnings = std::move(warnings);
    r.stopped_early = state_.stopped_early;
    return r;
  }

  cascade<S...>* stages_;
  P* policy_;
  run_options options_;
  communicator_ref comm_;
  run_state state_;
  teacher_registry<snapshot> teachers_;
};

template <Policy P, stage_shape... S>
  requires(Stage<S, P> && ...)
[[nodiscard]] cascade_runner<P, S...> make_runner(cascade<S...>& stages, P& policy,
                                                  run_options options = {}) {
  return cascade_runner<P, S...>(stages, policy, std::move(options));
}

// Data-parallel: the same, over `comm` (any Communicator, kept by reference).
template <Policy P, Communicator C, stage_shape... S>
  requires(Stage<S, P> && ...) && (!std::same_as<std::remove_cvref_t<C>, run_options>)
[[nodiscard]] cascade_runner<P, S...> make_runner(cascade<S...>& stages, P& policy, C& comm,
                                                  run_options options = {}) {
  return cascade_runner<P, S...>(stages, policy, communicator_ref(comm), std::move(options));
}

// One call: a runner without checkpoints or explicit teachers, run to the end.
template <Policy P, stage_shape... S, class... O>
  requires(Stage<S, P> && ...)
cascade_report run_cascade(cascade<S...>& stages, P& policy, run_options options, O&&... observers) {
  cascade_runner<P, S...> runner(stages, policy, std::move(options));
  return runner.run(std::forward<O>(observers)...);
}

}  // namespace cascade_rl
