// GRPO, then multi-domain on-policy distillation (MOPD), on a model small enough to
// read: an autoregressive policy whose logits are a table indexed by (prompt, position).
//
// The task is verifiable: prompt k must be answered with a fixed token string of
// length 1 + k % 4 followed by end-of-sequence. The reward is the fraction of answer
// positions right (the end-of-sequence position included), so a group's rewards vary
// and GRPO has signal from the first step.
//
//   Stage 1, GRPO: G responses per prompt, group-normalised advantages
//     A = (r - mean) / (std + eps), strictly on-policy REINFORCE with token-mean
//     aggregation over the step's total tokens. The library returns dL/dlogp per token;
//     the model turns it into dL/dlogits = dL/dlogp * (onehot - softmax) and runs Adam.
//   Stage 2, MOPD: a fresh student samples; the stage-1 policy is the teacher. Token
//     advantage a_t = log pi_teacher(y_t) - log pi_student(y_t), band importance mask
//     [0.5, 2] against the behaviour log-probs, same backward path.
//
// `--check` exits non-zero unless each stage reaches its accuracy target (a ctest).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <cascade_rl/cascade_rl.hpp>

namespace {

namespace cr = cascade_rl;

constexpr int prompts = 8;
constexpr int vocabulary = 8;  // token 0 is end-of-sequence
constexpr int max_length = 6;  // responses longer than this are cut (truncated)
constexpr int group_size = 8;

std::vector<int> answer_for(int prompt) {
  std::vector<int> answer;
  const int length = 1 + prompt % 4;
  for (int t = 0; t < length; ++t) answer.push_back(1 + (3 * prompt + 2 * t) % (vocabulary - 1));
  answer.push_back(0);
  return answer;
}

// Fraction of answer positions the response gets right.
float reward_for(int prompt, std::span<const int> response) {
  const std::vector<int> answer = answer_for(prompt);
  int right = 0;
  for (std::size_t t = 0; t < answer.size() && t < response.size(); ++t) right += response[t] == answer[t];
  return static_cast<float>(right) / static_cast<float>(answer.size());
}

// The policy: logits[prompt][position][token], softmax per (prompt, position).
struct tabular_policy {
  std::vector<double> logits = std::vector<double>(prompts * max_length * vocabulary, 0.0);
  // Adam state.
  std::vector<double> m = std::vector<double>(logits.size(), 0.0);
  std::vector<double> v = std::vector<double>(logits.size(), 0.0);
  int steps = 0;

  [[nodiscard]] std::span<const double> row(int prompt, int position) const {
    return std::span<const double>(logits).subspan((prompt * max_length + position) * vocabulary, vocabulary);
  }

  [[nodiscard]] std::vector<double> softmax(int prompt, int position) const {
    const auto z = row(prompt, position);
    const double top = *std::max_element(z.begin(), z.end());
    std::vector<double> p(vocabulary);
    double sum = 0;
    for (int k = 0; k < vocabulary; ++k) sum += p[k] = std::exp(z[k] - top);
    for (double& x : p) x /= sum;
    return p;
  }

  [[nodiscard]] float log_prob(int prompt, int position, int token) const {
    return static_cast<float>(std::log(softmax(prompt, position)[token]));
  }

  // dL/dlogits = sum over tokens of dL/dlogp_t * (onehot(y_t) - softmax), then Adam.
  void apply_gradient(std::span<const int> prompt_of_sequence, std::span<const int> tokens,
                      const cr::token_layout& layout, std::span<const float> dlogp, double lr) {
    std::vector<double> grad(logits.size(), 0.0);
    for (std::size_t s = 0; s < layout.sequences(); ++s) {
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
        const int prompt = prompt_of_sequence[s];
        const int position = static_cast<int>(t - layout.begin(s));
        const std::vector<double> p = softmax(prompt, position);
        double* g = &grad[(prompt * max_length + position) * vocabulary];
        for (int k = 0; k < vocabulary; ++k) g[k] += dlogp[t] * ((k == tokens[t]) - p[k]);
      }
    }
    ++steps;
    const double b1 = 0.9, b2 = 0.999;
    for (std::size_t i = 0; i < logits.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * grad[i];
      v[i] = b2 * v[i] + (1 - b2) * grad[i] * grad[i];
      const double m_hat = m[i] / (1 - std::pow(b1, steps));
      const double v_hat = v[i] / (1 - std::pow(b2, steps));
      logits[i] -= lr * m_hat / (std::sqrt(v_hat) + 1e-8);
    }
  }
};

// One rollout batch, ragged: sequence s owns tokens [offsets[s], offsets[s+1]).
struct rollouts {
  std::vector<int> prompt_of_sequence;
  std::vector<std::int64_t> offsets{0};
  std::vector<int> tokens;
  std::vector<float> behaviour_log_probs;
  std::vector<float> rewards;
  int exact = 0;

  [[nodiscard]] cr::token_layout layout() const { return cr::token_layout(offsets); }
};

rollouts sample(const tabular_policy& policy, std::mt19937& rng) {
  rollouts batch;
  for (int prompt = 0; prompt < prompts; ++prompt) {
    for (int g = 0; g < group_size; ++g) {
      const std::size_t first = batch.tokens.size();
      for (int position = 0; position < max_length; ++position) {
        const std::vector<double> p = policy.softmax(prompt, position);
        std::discrete_distribution<int> draw(p.begin(), p.end());
        const int token = draw(rng);
        batch.tokens.push_back(token);
        batch.behaviour_log_probs.push_back(static_cast<float>(std::log(p[token])));
        if (token == 0) break;
      }
      const std::span<const int> response(batch.tokens.data() + first, batch.tokens.size() - first);
      batch.rewards.push_back(reward_for(prompt, response));
      batch.exact += batch.rewards.back() == 1.0f;
      batch.prompt_of_sequence.push_back(prompt);
      batch.offsets.push_back(static_cast<std::int64_t>(batch.tokens.size()));
    }
  }
  return batch;
}

// Accuracy of greedy decoding: the fraction of prompts answered exactly.
double greedy_accuracy(const tabular_policy& policy) {
  int exact = 0;
  for (int prompt = 0; prompt < prompts; ++prompt) {
    std::vector<int> response;
    for (int position = 0; position < max_length; ++position) {
      const auto z = policy.row(prompt, position);
      response.push_back(static_cast<int>(std::max_element(z.begin(), z.end()) - z.begin()));
      if (response.back() == 0) break;
    }
    exact += reward_for(prompt, response) == 1.0f;
  }
  return static_cast<double>(exact) / prompts;
}

double grpo_stage(tabular_policy& policy, int steps, std::mt19937& rng) {
  std::printf("stage 1: GRPO, %d prompts x %d responses, on-policy REINFORCE, token-mean\n",
              prompts, group_size);
  const auto groups = cr::group_layout::uniform({.groups = prompts, .size = group_size});
  for (int step = 1; step <= steps; ++step) {
    const rollouts batch = sample(policy, rng);
    const cr::token_layout layout = batch.layout();

    std::vector<cr::group_statistic> statistics(prompts);
    cr::group_statistics(cr::exec::seq, groups, batch.rewards,
                         std::span<cr::group_statistic>(statistics));
    const auto zero_variance = std::count_if(statistics.begin(), statistics.end(),
                                             [](const auto& s) { return s.zero_variance; });

    std::vector<float> advantages(batch.rewards.size());
    cr::grpo_advantages(cr::exec::seq, groups, batch.rewards, advantages);
    std::vector<float> token_advantages(batch.tokens.size());
    cr::broadcast_to_tokens(cr::exec::seq, layout, advantages, token_advantages);

    // On-policy: the trainer's log-probs are the sampler's (same parameters).
    std::vector<float> dlogp(batch.tokens.size());
    const cr::loss_normalizer normalizer =
        cr::local_loss_counts(cr::exec::seq, layout).normalizer(cr::loss_aggregation::token_mean);
    const cr::policy_loss_result loss =
        cr::reinforce_loss(cr::exec::seq, layout,
                           {.log_probs = batch.behaviour_log_probs, .advantages = token_advantages},
                           dlogp, normalizer);
    policy.apply_gradient(batch.prompt_of_sequence, batch.tokens, layout, dlogp, 0.05);

    double mean_reward = 0;
    for (float r : batch.rewards) mean_reward += r;
    mean_reward /= static_cast<double>(batch.rewards.size());
    if (step % 5 == 0 || step == 1)
      std::printf("  step %3d  reward %.3f  exact %2d/%d  zero-variance groups %ld/%d  loss %+.4f  tokens %zu\n",
                  step, mean_reward, batch.exact, prompts * group_size, static_cast<long>(zero_variance),
                  prompts, loss.loss, loss.metrics.valid_tokens);
  }
  const double accuracy = greedy_accuracy(policy);
  std::printf("  greedy accuracy after GRPO: %.3f\n", accuracy);
  return accuracy;
}

double mopd_stage(tabular_policy& student, const tabular_policy& teacher, int steps, std::mt19937& rng) {
  std::printf("stage 2: MOPD into a fresh student, teacher = the GRPO policy, band [0.5, 2]\n");
  for (int step = 1; step <= steps; ++step) {
    const rollouts batch = sample(student, rng);
    const cr::token_layout layout = batch.layout();

    std::vector<float> teacher_logp(batch.tokens.size()), student_logp(batch.tokens.size());
    for (std::size_t s = 0; s < layout.sequences(); ++s)
      for (std::size_t t = layout.begin(s); t < layout.end(s); ++t) {
        const int position = static_cast<int>(t - layout.begin(s));
        teacher_logp[t] = teacher.log_prob(batch.prompt_of_sequence[s], position, batch.tokens[t]);
        student_logp[t] = student.log_prob(batch.prompt_of_sequence[s], position, batch.tokens[t]);
      }
    std::vector<float> advantages(batch.tokens.size());
    cr::distillation_advantages(
        cr::exec::seq, layout,
        {.teacher_log_probs = teacher_logp, .student_log_probs = student_logp}, advantages);

    std::vector<float> dlogp(batch.tokens.size());
    const cr::loss_normalizer normalizer =
        cr::local_loss_counts(cr::exec::seq, layout).normalizer(cr::loss_aggregation::token_mean);
    const cr::policy_loss_result loss =
        cr::reinforce_loss(cr::exec::seq, layout,
                           {.log_probs = student_logp,
                            .advantages = advantages,
                            .behaviour_log_probs = batch.behaviour_log_probs},
                           dlogp, normalizer, cr::mopd_options());
    student.apply_gradient(batch.prompt_of_sequence, batch.tokens, layout, dlogp, 0.05);

    // Mean of log pi_student - log pi_teacher on sampled tokens: the reverse KL estimate.
    double reverse_kl = 0;
    for (float a : advantages) reverse_kl -= a;
    reverse_kl /= static_cast<double>(advantages.size());
    if (step % 5 == 0 || step == 1)
      std::printf("  step %3d  reverse KL to teacher %.4f  exact %2d/%d  band-masked %zu/%zu\n", step,
                  reverse_kl, batch.exact, prompts * group_size, loss.metrics.importance_masked,
                  loss.metrics.valid_tokens);
  }
  const double accuracy = greedy_accuracy(student);
  std::printf("  student greedy accuracy after MOPD: %.3f\n", accuracy);
  return accuracy;
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  std::mt19937 rng(20261202);
  tabular_policy policy;
  std::printf("cascade_rl example: %d prompts, vocabulary %d, answers of 1-4 tokens + EOS\n", prompts, vocabulary);
  std::printf("greedy accuracy before training: %.3f\n", greedy_accuracy(policy));
  const double grpo_accuracy = grpo_stage(policy, 60, rng);
  tabular_policy student;
  const double mopd_accuracy = mopd_stage(student, policy, 40, rng);
  if (check && (grpo_accuracy < 1.0 || mopd_accuracy < grpo_accuracy)) {
    std::printf("check failed: GRPO accuracy %.3f (want 1), MOPD accuracy %.3f (want >= GRPO)\n",
                grpo_accuracy, mopd_accuracy);
    return 1;
  }
  return 0;
}
