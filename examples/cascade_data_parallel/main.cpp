// The quickstart cascade (GRPO "short", GRPO "long", MOPD recovering "short") run
// data-parallel under MPI:
//
//   mpiexec -n 2 ./cascade_data_parallel [--matrix FILE] [--checkpoints DIR] [--check]
//
// Every rank runs this program on its own replica of the policy. The runner gives each
// rank its shard of every step's prompts and of every evaluation set; rank 0 prints
// and writes checkpoints. What the policy does for data parallelism, and why 1 and N
// processes then give the same forgetting matrix bit for bit:
//   - generate() samples prompt j from cr::prompt_seed(request, j), which depends on
//     the prompt's position in the whole step, not on the rank that generates it;
//   - apply_gradient() accumulates its gradient in a cr::exact_sum (64-bit fixed
//     point), all-reduces it over the communicator (integer sums: exact, in any order)
//     and only then takes the step, so every replica takes the same step, equal to the
//     single-process one. It is called on every rank, with an empty batch where a rank
//     holds nothing.
// --matrix FILE: rank 0 writes the forgetting matrix as JSON (full precision) to FILE.
// --check: exit non-zero unless MOPD recovers "short".

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <cascade_rl/cascade.hpp>
#include <cascade_rl/cascade/data_parallel.hpp>
#include <cascade_rl/comm/mpi_communicator.hpp>

#include "../common/toy_task.hpp"

namespace cr = cascade_rl;

using toy::answer;
using toy::max_length;
using toy::reward;
using toy::rows;
using toy::table;
using toy::vocabulary;

struct data_parallel_policy {
  using snapshot_type = table;
  cr::communicator_ref comm;  // the ranks whose gradients are summed
  table params;

  cr::rollout_batch generate(std::span<const cr::prompt> prompts, const cr::generation_request& request) {
    cr::rollout_batch batch;
    for (std::size_t j = 0; j < prompts.size(); ++j) {
      cr::rng_type rng(cr::prompt_seed(request, j));  // independent of the sharding
      const cr::prompt& prompt = prompts[j];
      batch.add_prompt(prompt);
      for (std::size_t g = 0; g < request.group_size; ++g) {
        std::vector<std::int32_t> tokens;
        std::vector<float> logps;
        while (tokens.size() < max_length && (tokens.empty() || tokens.back() != 0)) {
          const auto p = params.p(prompt.id, tokens.size());
          int k = 0;
          if (request.sampling.temperature == 0) {
            k = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
          } else {
            for (double u = cr::detail::uniform01(rng); k < vocabulary - 1 && u >= p[k]; ++k) u -= p[k];
          }
          tokens.push_back(k);
          logps.push_back(static_cast<float>(std::log(p[k])));
        }
        batch.add_response(tokens, logps, tokens.back() == 0 ? cr::finish_reason::stopped : cr::finish_reason::truncated);
      }
    }
    return batch;
  }
  void log_probs(const cr::rollout_batch& b, std::span<float> out) const { params.log_probs(b, out); }

  // dL/dlogits = dL/dlogp * (onehot - softmax), summed exactly over this rank's tokens
  // and then over ranks; plain SGD.
  void apply_gradient(const cr::rollout_batch& b, std::span<const float> dlogp, double lr) {
    cr::exact_sum gradient(params.logits.size());
    for (std::size_t i = 0; i < b.response_count(); ++i)
      for (std::size_t t = 0; t < b.length(i); ++t) {
        const std::int64_t id = b.prompts[b.group_of(i)].id;
        const auto p = params.p(id, t);
        const float d = dlogp[b.token_offsets[i] + t];
        const std::size_t base = static_cast<std::size_t>(((id % rows) * max_length + static_cast<std::int64_t>(t)) * vocabulary);
        for (int k = 0; k < vocabulary; ++k)
          gradient.add(base + static_cast<std::size_t>(k), d * ((k == b.response_tokens(i)[t]) - p[k]));
      }
    gradient.all_reduce(comm);
    for (std::size_t c = 0; c < params.logits.size(); ++c) params.logits[c] -= lr * gradient[c];
  }
  table snapshot() const { return params; }
  void restore(const table& t) { params = t; }
  void save(const table& t, const std::filesystem::path& path) const {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(t.logits.data()), t.logits.size() * sizeof(double));
  }
  table load(const std::filesystem::path& path) const {
    table t;
    std::ifstream in(path, std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(t.logits.data()), t.logits.size() * sizeof(double)))
      throw cr::error(path.string(), "truncated policy file");
    return t;
  }
};

std::vector<cr::prompt> prompts(const char* domain, std::int64_t first) {
  std::vector<cr::prompt> out;
  for (std::int64_t id = first; id < first + 4; ++id) out.push_back({.id = id, .domain = domain});
  return out;
}

cr::stage_config grpo(const char* name, const char* domain, std::int64_t first, std::size_t steps) {
  return {.name = name, .domains = {domain}, .group_size = 8, .prompts_per_step = 4, .steps = steps,
          .lr = cr::constant_lr(2.0), .sampling = {.max_response_length = max_length},
          .evals = {{.domain = domain, .prompts = prompts(domain, first)}}};
}

int main(int argc, char** argv) {
  cr::mpi_session mpi(argc, argv);  // MPI_Abort with a message, never a hang, on failure
  try {
    std::string matrix_file, checkpoints;
    bool check = false;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--matrix") == 0 && i + 1 < argc) matrix_file = argv[++i];
      else if (std::strcmp(argv[i], "--checkpoints") == 0 && i + 1 < argc) checkpoints = argv[++i];
      else if (std::strcmp(argv[i], "--check") == 0) check = true;
      else
        throw std::runtime_error(std::string("cascade_data_parallel: unknown argument '") +
                                 argv[i] + "'");
    }
    auto comm = cr::mpi_communicator::world({.timeout = std::chrono::minutes(2)});
    const bool printer = comm.rank() == 0;

    auto cascade = cr::make_cascade(
        cr::make_grpo_stage(grpo("grpo_short", "short", 0, 20), cr::prompt_pool(prompts("short", 0)), reward),
        cr::make_grpo_stage(grpo("grpo_long", "long", 4, 40), cr::prompt_pool(prompts("long", 4)), reward),
        cr::make_mopd_stage({.name = "mopd", .domains = {"short"}, .group_size = 4, .prompts_per_step = 4,
                             .steps = 30, .lr = cr::linear_warmup_lr(0.2, 2.0, 5),
                             .sampling = {.max_response_length = max_length}},
                            cr::prompt_pool(prompts("short", 0))));
    data_parallel_policy policy{.comm = comm, .params = {}};
    auto runner = cr::make_runner(cascade, policy, comm, {.seed = 7, .checkpoint_dir = checkpoints});
    if (!checkpoints.empty() && runner.resume() && printer)
      std::printf("resumed at stage %zu, step %zu\n", runner.stage_index(), runner.step());

    std::ostringstream discard;  // observers run on every rank; rank 0 prints
    std::ostream& out = printer ? std::cout : discard;
    if (printer) std::printf("data-parallel cascade on %d rank(s)\n", comm.size());
    const cr::cascade_report report = runner.run(cr::console_progress(out), cr::forgetting_table(out));
    const auto& m = report.forgetting;
    const std::size_t last = m.rows() - 1;
    const bool recovered = m.score(last, "short") > m.score(last - 1, "short");
    if (printer) {
      for (const auto& r : report.regressions)
        std::printf("regression: %s fell %.3f after %s\n", r.domain.c_str(), r.drop(), r.stage.c_str());
      std::printf("short: %.3f after grpo_long, %.3f after mopd\n", m.score(last - 1, "short"),
                  m.score(last, "short"));
      if (!matrix_file.empty()) {
        std::ofstream file(matrix_file);
        file << m.to_json().dump() << '\n';
        if (!file) throw std::runtime_error("cascade_data_parallel: cannot write " + matrix_file);
      }
    }
    comm.barrier();
    return check && !recovered ? 1 : 0;
  } catch (const std::exception& e) {
    mpi.abort(e.what());
  }
}
