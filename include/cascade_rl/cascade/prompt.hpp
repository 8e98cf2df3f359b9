#pragma once
// What generation starts from: a prompt, how to sample, and how a response ended.

#include <cstddef>
#include <cstdint>
#include <string>

namespace cascade_rl {

struct prompt {
  std::int64_t id = 0;     // the caller's key (a dataset row), passed through untouched
  std::string domain{};    // routes MOPD to a teacher; names a forgetting-matrix column
  std::string text{};      // what the model reads (a tabular test model may ignore it)
  std::string reference{}; // ground truth for a verifier (answer, tests); optional
};

enum class finish_reason : std::uint8_t {
  stopped,    // the model ended the response (end-of-sequence, stop string)
  truncated,  // cut at the length limit (vLLM finish_reason "length")
};

struct sampling_params {
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;        // in (0, 1]
  std::int64_t max_response_length = 1024;
};

// One call of Policy::generate: group_size responses for every prompt. All sampling
// randomness must come from `seed` (the cascade draws it from its checkpointed RNG), so
// that a resumed run samples exactly what the uninterrupted run sampled.
struct generation_request {
  std::size_t group_size = 1;
  sampling_params sampling{};
  std::uint64_t seed = 0;
  // The position of prompts[0] among the step's (or evaluation set's) prompts: 0 in a
  // single process; rank r of a data-parallel run generates a shard starting there.
  // With prompt_seed(request, j) (data_parallel.hpp) a policy samples the same
  // responses whatever the split.
  std::size_t first_prompt = 0;
};

}  // namespace cascade_rl
