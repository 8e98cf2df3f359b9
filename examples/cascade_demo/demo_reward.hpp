#pragma once
// The reward of every single-turn stage, as a batched cascade_rl Reward (score_batch):
// each response goes to its domain's verifier. The instant verifiers (rules, exact
// match, the reward model) run in process and are timed one by one; the code responses
// of the batch are collected and run by the program verifier (program_verifier.hpp) in
// one go. (SWE RL is an agent: its environment grades its episodes, swe_agent.hpp.)
//
// Training and evaluation use two instances: chat judged by the reward model while
// training, by the hidden gold preference in evaluation (cascade_rl::with_eval_reward
// gives a stage its evaluation reward). A training reward can keep the latencies of the
// last batch it scored in a verification_ledger, which the demo's observer reads after
// every step (measurements.hpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <cascade_rl/cascade/concepts.hpp>
#include <cascade_rl/cascade/rollout_batch.hpp>

#include "program_verifier.hpp"
#include "reward_model.hpp"
#include "tasks.hpp"

namespace demo {

// The verification of one batch: per response, its domain and the seconds until its
// score was known.
struct verification_record {
  std::vector<std::string> domains;
  std::vector<double> latency;
  std::size_t sandbox_runs = 0;
};

class verification_ledger {
 public:
  void put(verification_record r) {
    const std::lock_guard lock(mutex_);
    last_ = std::move(r);
  }
  // The last record, leaving an empty one.
  verification_record take() {
    const std::lock_guard lock(mutex_);
    return std::exchange(last_, {});
  }

 private:
  std::mutex mutex_;
  verification_record last_;
};

class demo_reward {
 public:
  demo_reward(std::shared_ptr<const bt_reward_model> rm, std::shared_ptr<const program_verifier> programs,
              chat_judge judge, std::shared_ptr<verification_ledger> ledger = nullptr)
      : rm_(std::move(rm)), programs_(std::move(programs)), judge_(judge), ledger_(std::move(ledger)) {}

  void score_batch(const cr::rollout_batch& batch, std::span<float> out) const {
    using clock = std::chrono::steady_clock;
    const std::size_t n = batch.response_count();
    verification_record record;
    record.latency.assign(n, 0.0);
    record.domains.resize(n);
    struct pending {
      std::vector<program_job> jobs;
      std::vector<std::size_t> index;
    } code;
    for (std::size_t i = 0; i < n; ++i) {
      const auto start = clock::now();
      const cr::prompt& p = batch.prompts[batch.group_of(i)];
      record.domains[i] = p.domain;
      out[i] = 0.0f;
      const auto reply = reply_of(batch.response_tokens(i), batch.finish_reasons[i] == cr::finish_reason::truncated);
      if (reply && runs_programs(p.domain)) {
        if (auto job = program_job_of(p, *reply)) {
          code.jobs.push_back(std::move(*job));
          code.index.push_back(i);
          continue;
        }
      } else if (reply) {
        out[i] = static_cast<float>(verify_instant(p, *reply, judge_, rm_.get()));
      }
      record.latency[i] = std::chrono::duration<double>(clock::now() - start).count();
    }
    if (!code.jobs.empty()) {
      const program_results r = programs_->verify(code.jobs);
      for (std::size_t j = 0; j < code.index.size(); ++j) {
        out[code.index[j]] = static_cast<float>(r.passed[j]) / static_cast<float>(std::size(test_inputs));
        record.latency[code.index[j]] = r.latency[j];
      }
      record.sandbox_runs += r.sandboxed;
    }
    if (ledger_) ledger_->put(std::move(record));
  }

  // One response (the greedy samples, tests).
  [[nodiscard]] double score(const cr::prompt& p, std::span<const std::int32_t> tokens, bool truncated) const {
    cr::rollout_batch batch;
    batch.add_prompt(p);
    const std::vector<float> logp(tokens.size(), 0.0f);
    batch.add_response(tokens, logp, truncated ? cr::finish_reason::truncated : cr::finish_reason::stopped,
                       decode(tokens));
    float s = 0.0f;
    score_batch(batch, std::span<float>(&s, 1));
    return s;
  }

  [[nodiscard]] const program_verifier& programs() const { return *programs_; }

 private:
  std::shared_ptr<const bt_reward_model> rm_;
  std::shared_ptr<const program_verifier> programs_;
  chat_judge judge_;
  std::shared_ptr<verification_ledger> ledger_;
};

static_assert(cr::Reward<demo_reward>);

}  // namespace demo
