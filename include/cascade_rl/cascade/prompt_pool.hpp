#pragma once
// A stage's prompts in shuffled epochs, with the curriculum hook of Nemotron-Cascade 1:
// a prompt that every sample solved at its latest visit leaves the next epoch, and is
// reinserted with a small probability (so that it is checked again now and then).
// The pool's position and curriculum flags are part of the checkpoint.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cascade_rl/cascade/prompt.hpp"
#include "cascade_rl/cascade/rng.hpp"
#include "cascade_rl/core/error.hpp"

namespace cascade_rl {

struct curriculum_options {
  bool drop_solved = false;
  double reinsert_probability = 0.0;  // per dropped prompt and epoch
};

class prompt_pool {
 public:
  explicit prompt_pool(std::vector<prompt> prompts, curriculum_options curriculum = {})
      : prompts_(std::move(prompts)), curriculum_(curriculum), solved_(prompts_.size(), 0) {
    if (prompts_.empty()) detail::fail("prompt_pool", "holds no prompt");
    if (!(curriculum.reinsert_probability >= 0 && curriculum.reinsert_probability <= 1))
      detail::fail("curriculum.reinsert_probability",
                   "must lie in [0, 1], got " + std::to_string(curriculum.reinsert_probability));
  }

  [[nodiscard]] std::size_t size() const { return prompts_.size(); }
  [[nodiscard]] const prompt& at(std::size_t i) const { return prompts_.at(i); }
  [[nodiscard]] std::size_t epoch() const { return epoch_; }
  [[nodiscard]] bool solved(std::size_t i) const { return solved_.at(i) != 0; }

  // The next n prompt indices; a new epoch starts (and is shuffled) when one runs out.
  std::vector<std::size_t> next(std::size_t n, rng_type& rng) {
    std::vector<std::size_t> out;
    out.reserve(n);
    while (out.size() < n) {
      if (position_ == order_.size()) start_epoch(rng);
      out.push_back(order_[position_++]);
    }
    return out;
  }

  // Whether every response to prompt i was right at this visit.
  void record(std::size_t i, bool solved_all) { solved_.at(i) = solved_all ? 1 : 0; }

  [[nodiscard]] nlohmann::json state() const {
    return {{"order", order_}, {"position", position_}, {"epoch", epoch_}, {"solved", solved_}};
  }

  // All or nothing: a state that does not fit this pool changes nothing.
  void load_state(const nlohmann::json& state) {
    std::vector<std::size_t> order;
    std::size_t position = 0, epoch = 0;
    std::vector<std::uint8_t> solved;
    try {
      order = state.at("order").get<std::vector<std::size_t>>();
      position = state.at("position").get<std::size_t>();
      epoch = state.at("epoch").get<std::size_t>();
      solved = state.at("solved").get<std::vector<std::uint8_t>>();
    } catch (const nlohmann::json::exception& e) {
      detail::fail("prompt_pool state", std::string("is malformed: ") + e.what());
    }
    if (solved.size() != prompts_.size())
      detail::fail("prompt_pool state.solved", "has " + std::to_string(solved.size()) +
                                                   " entries for a pool of " +
                                                   std::to_string(prompts_.size()) + " prompts");
    if (position > order.size()) detail::fail("prompt_pool state.position", "is past the epoch's end");
    for (std::size_t k = 0; k < order.size(); ++k)
      if (order[k] >= prompts_.size())
        detail::fail_at("prompt_pool state.order", k, "is not a prompt of this pool");
    order_ = std::move(order);
    position_ = position;
    epoch_ = epoch;
    solved_ = std::move(solved);
  }

 private:
  void start_epoch(rng_type& rng) {
    order_.clear();
    for (std::size_t i = 0; i < prompts_.size(); ++i) {
      const bool dropped = curriculum_.drop_solved && solved_[i] != 0 &&
                           !(detail::uniform01(rng) < curriculum_.reinsert_probability);
      if (!dropped) order_.push_back(i);
    }
    // Everything solved and nothing reinserted: keep training on the whole pool rather
    // than stall.
    if (order_.empty())
      for (std::size_t i = 0; i < prompts_.size(); ++i) order_.push_back(i);
    detail::shuffle(order_, rng);
    position_ = 0;
    ++epoch_;
  }

  std::vector<prompt> prompts_;
  curriculum_options curriculum_;
  std::vector<std::size_t> order_;
  std::size_t position_ = 0;
  std::size_t epoch_ = 0;
  std::vector<std::uint8_t> solved_;  // solved at the latest visit
};

}  // namespace cascade_rl
