// A consumer of cascade_rl::openmp: the same REINFORCE loss under exec::omp with two and
// three threads gives exec::seq's bits (a batch of several 4096-token blocks, so the
// blocks really are spread over the threads).
#include <cascade_rl/cascade_rl.hpp>
#include <cascade_rl/core/exec_openmp.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  namespace cr = cascade_rl;
  const std::size_t sequences = 40, length = 1000;
  std::vector<std::int64_t> offsets(sequences + 1);
  for (std::size_t i = 0; i <= sequences; ++i) offsets[i] = static_cast<std::int64_t>(i * length);
  const cr::token_layout tokens(offsets);
  std::vector<float> log_probs(tokens.tokens()), advantages(tokens.tokens());
  for (std::size_t t = 0; t < tokens.tokens(); ++t) {
    log_probs[t] = -0.001f * static_cast<float>(t % 997);
    advantages[t] = 0.01f * static_cast<float>(static_cast<int>(t % 211) - 105);
  }
  const cr::loss_normalizer normalizer =
      cr::local_loss_counts(cr::exec::seq, tokens).normalizer(cr::loss_aggregation::token_mean);
  std::vector<float> grad_seq(tokens.tokens()), grad_omp(tokens.tokens());
  const double seq =
      cr::reinforce_loss(cr::exec::seq, tokens, {.log_probs = log_probs, .advantages = advantages},
                         grad_seq, normalizer)
          .loss;
  bool ok = true;
  for (const int threads : {2, 3}) {
    const double omp =
        cr::reinforce_loss(cr::exec::omp.with_threads(threads), tokens,
                           {.log_probs = log_probs, .advantages = advantages}, grad_omp, normalizer)
            .loss;
    const bool same = std::memcmp(&seq, &omp, sizeof seq) == 0 &&
                      std::memcmp(grad_seq.data(), grad_omp.data(), grad_seq.size() * sizeof(float)) == 0;
    std::printf("exec::omp with %d threads: loss %.17g, %s exec::seq's bits\n", threads, omp,
                same ? "the same as" : "NOT the same as");
    ok = ok && same;
  }
  return ok ? 0 : 1;
}
