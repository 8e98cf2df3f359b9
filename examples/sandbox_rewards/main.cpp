// A code-RL stage whose reward runs the model's programs: each "response" is one of
// four Python programs for the prompt (right, wrong, an infinite loop, one that tries
// the network and the host's files), and cascade_rl::verify's unit_test_reward runs it
// with python3 in the sandbox on the prompt's tests. GRPO on a tabular policy learns to
// pick the right program. Then the SWE reward scores three patches to a tiny repository.
// `--check` exits non-zero unless the greedy policy ends up solving every prompt.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <span>
#include <vector>

#include <cascade_rl/cascade.hpp>
#include <cascade_rl/verify/verify.hpp>

namespace cr = cascade_rl;
namespace v = cascade_rl::verify;
using namespace std::chrono_literals;

constexpr int candidates = 4;

// Programs for prompt 0 (sum of two numbers) and prompt 1 (reverse a line).
const char* const programs[2][candidates] = {
    {"a, b = map(int, input().split())\nprint(a - b)\n",
     "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 22), timeout=1)\nexcept OSError:\n    pass\n"
     "open('/etc/passwd', 'a').write('pwned')\n",
     "while True:\n    pass\n",
     "```python\na, b = map(int, input().split())\nprint(a + b)\n```"},
    {"print(input())\n", "```python\nprint(input()[::-1])\n```", "import os\nwhile True:\n    os.fork()\n",
     "print(''.join(sorted(input())))\n"}};

std::vector<cr::prompt> code_prompts() {
  return {{.id = 0, .domain = "code", .text = "print a + b",
           .reference = R"([{"input": "1 2\n", "output": "3\n"}, {"input": "40 2\n", "output": "42\n"}])"},
          {.id = 1, .domain = "code", .text = "reverse the line",
           .reference = R"([{"input": "abc\n", "output": "cba\n"}, {"input": "ab\n", "output": "ba\n"}])"}};
}

// The policy: softmax over the four programs of each prompt; one token per response.
struct program_picker {
  using snapshot_type = std::vector<double>;
  std::vector<double> logits = std::vector<double>(2 * candidates, 0.0);

  std::vector<double> p(std::int64_t id) const {
    std::vector<double> out(logits.begin() + id * candidates, logits.begin() + (id + 1) * candidates);
    const double top = *std::max_element(out.begin(), out.end());
    double sum = 0;
    for (double& x : out) sum += x = std::exp(x - top);
    for (double& x : out) x /= sum;
    return out;
  }
  cr::rollout_batch generate(std::span<const cr::prompt> prompts, const cr::generation_request& request) {
    cr::rng_type rng(request.seed);
    cr::rollout_batch batch;
    for (const cr::prompt& prompt : prompts) {
      batch.add_prompt(prompt);
      const auto probs = p(prompt.id);
      for (std::size_t g = 0; g < request.group_size; ++g) {
        int k = 0;
        if (request.sampling.temperature == 0) {
          k = static_cast<int>(std::max_element(probs.begin(), probs.end()) - probs.begin());
        } else {
          for (double u = cr::detail::uniform01(rng); k < candidates - 1 && u >= probs[k]; ++k) u -= probs[k];
        }
        const std::int32_t token = k;
        const float logp = static_cast<float>(std::log(probs[k]));
        batch.add_response(std::span(&token, 1), std::span(&logp, 1), cr::finish_reason::stopped, programs[prompt.id][k]);
      }
    }
    return batch;
  }
  void log_probs(const cr::rollout_batch& b, std::span<float> out) const {
    for (std::size_t i = 0; i < b.response_count(); ++i)
      out[b.token_offsets[i]] = static_cast<float>(std::log(p(b.prompts[b.group_of(i)].id)[b.response_tokens(i)[0]]));
  }
  void apply_gradient(const cr::rollout_batch& b, std::span<const float> dlogp, double lr) {
    std::vector<double> next = logits;
    for (std::size_t i = 0; i < b.response_count(); ++i) {
      const std::int64_t id = b.prompts[b.group_of(i)].id;
      const auto probs = p(id);
      for (int k = 0; k < candidates; ++k)
        next[id * candidates + k] -= lr * dlogp[b.token_offsets[i]] * ((k == b.response_tokens(i)[0]) - probs[k]);
    }
    logits = next;
  }
  snapshot_type snapshot() const { return logits; }
  void restore(const snapshot_type& s) { logits = s; }
};

int main(int argc, char** argv) {
  const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  // Hostile candidates cost at most 300 ms of wall time each.
  const v::sandbox box({.limits = {.wall_time = 300ms, .cpu_time = 1s, .address_space_bytes = 512ull << 20,
                                   .max_processes = 8}});
  std::printf("sandbox isolation: %s\n", box.isolation().describe().c_str());
  const v::unit_test_reward reward(box);

  auto cascade = cr::make_cascade(cr::make_grpo_stage(
      {.name = "code_rl", .domains = {"code"}, .group_size = 4, .prompts_per_step = 2, .steps = 6,
       .lr = cr::constant_lr(3.0), .sampling = {.max_response_length = 1}, .reward_workers = 4,
       .evals = {{.domain = "code", .prompts = code_prompts()}}},
      cr::prompt_pool(code_prompts()), reward));
  program_picker policy;
  auto runner = cr::make_runner(cascade, policy, {.seed = 3});
  const cr::cascade_report report = runner.run(cr::console_progress(std::cout), cr::forgetting_table(std::cout));
  const auto& m = report.forgetting;
  const double before = m.score(0, "code"), after = m.score(m.rows() - 1, "code");
  std::printf("code: %.2f before, %.2f after code_rl\n", before, after);

  // The SWE reward on a two-file repository.
  const v::scratch_directory repo(std::filesystem::temp_directory_path());
  repo.write({.path = "calc.py", .contents = "def add(a, b):\n    return a - b\n"});
  repo.write({.path = "test_calc.py", .contents = "from calc import add\nassert add(2, 3) == 5\n"});
  const v::swe_task task{.repository = repo.path(), .test_command = {"python3", "test_calc.py"}};
  const v::patch_test_reward swe(box, [&](const cr::prompt&) { return task; });
  for (const char* patch : {"--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n",
                            "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return b - a\n",
                            "Just flip the sign."}) {
    const auto r = swe.evaluate(patch, task);
    std::printf("swe patch: %-13s reward %+.1f\n", std::string(v::to_string(r.outcome)).c_str(), r.reward);
  }
  return check && after < 1.0 ? 1 : 0;
}
