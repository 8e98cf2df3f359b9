// Helpers the demo area's test files share (they are one translation unit under the
// unity build, so a helper is written once here rather than once per file).
#pragma once

#include <memory>

#include "experiment.hpp"
#include "program_verifier.hpp"

namespace demo_test {

// The interpreter-backed program verifier (no sandbox), one for the whole program.
inline std::shared_ptr<const demo::program_verifier> interpreter() {
  static const auto verifier = std::make_shared<const demo::program_verifier>(false);
  return verifier;
}

// A budget small enough for a whole cascade in a test: two steps per stage, width 8.
inline demo::budget tiny_budget() {
  demo::budget b;
  b.sft_steps = 3;
  b.sft_batch = 8;
  b.prompts = 2;
  b.group = 2;
  b.mopd_group = 2;
  b.if_steps = b.multi_steps = b.mopd_steps = b.rlhf_steps = b.long_steps = b.code_steps = b.swe_steps = 2;
  b.swe_prompts = 2;
  b.swe_group = 2;
  b.train_prompts = 16;
  b.eval_prompts = 4;
  b.swe_eval_prompts = 4;
  b.eval_every = 1;
  b.width = 8;
  b.heads = 2;
  b.ffn = 8;
  return b;
}

}  // namespace demo_test
