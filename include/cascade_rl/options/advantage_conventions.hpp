#pragma once
// Conventions on which the peer frameworks disagree, shared by the group-based
// advantage estimators (GRPO, Dr. GRPO, RLOO, REINFORCE++-baseline) and the group
// statistics. Each is a field of an options struct; presets/ picks them per peer.

namespace cascade_rl {

// Which variance estimator a standard deviation uses.
enum class std_estimator {
  biased,    // sum (x - mean)^2 / n
  unbiased,  // sum (x - mean)^2 / (n - 1), Bessel; torch.std's default, so veRL and TRL
};

// Where the epsilon that guards the division goes.
enum class epsilon_placement {
  added_to_std,  // (r - mean) / (std + eps)      veRL, TRL
  inside_sqrt,   // (r - mean) / sqrt(var + eps)
};

// What a group of one sequence gets where the estimator needs at least two
// (GRPO with the unbiased std, RLOO, leave-one-out statistics).
enum class singleton_rule {
  error,           // refuse the batch (the default: a lone sample carries no baseline)
  zero_advantage,  // the sequence gets advantage 0
  raw_score,       // veRL: mean 0 and std 1, so the advantage is the score itself
                   // (under GRPO with scaling, score / (1 + eps), exactly as veRL divides)
};

// What a group holding a NaN or infinite reward gets.
enum class nonfinite_rule {
  error,       // refuse the batch, naming the first bad index (the default)
  zero_group,  // every sequence of that group gets advantage 0
};

// How a group mean is accumulated.
enum class mean_accumulation {
  double_precision,  // sum in double, divide in double (the default)
  // Sum sequentially in float32, divide in float32, and take the deviations x - mean
  // in float32, as PyTorch does for a small float32 group (veRL's torch.mean). Only
  // useful to reproduce a float32 peer bit for bit where it amplifies rounding: on
  // seven rewards of 0.35f and one 0.35f + 1 ulp, the float32 mean is 0.35f - 1 ulp
  // and veRL's GRPO gives 0.0287 to the seven, where the double mean gives -0.0037.
  float32_sequential,
  // Sum in double, round the sum to float32, divide by the count in float32, and take
  // the deviations in float32: a float32 tensor's accurate (pairwise, vectorised) sum
  // divided by its count, as veRL's masked_mean does over a whole batch of tokens. On
  // the reference batch of 29 returns of 0.35f and 7 of 0.35f + 1 ulp, the float32 sum
  // rounds up and the mean is 0.35f + 1 ulp; a double mean is 0.35f + 7/36 ulp.
  float32_rounded_sum,
};

}  // namespace cascade_rl
