#pragma once
// What the kernels and the portable Thrust path still hold of their own: distillation's
// token difference, and the device's online log-sum-exp (float, __expf: not yet the
// host's 16-lane form, so log-probs agree within float tolerance, not bit for bit). The
// group section only names the terms the kernels call. Every per-token and
// per-group formula itself is in include/cascade_rl/terms/, called from here and from
// the host alike.

#include <cuda/std/cmath>
#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>

#include "cascade_rl/algorithms/advantage_options.hpp"
#include "cascade_rl/algorithms/grpo_advantages.hpp"
#include "cascade_rl/algorithms/reinforce_plus_plus.hpp"
#include "cascade_rl/algorithms/rloo_advantages.hpp"
#include "cascade_rl/cuda/device_layout.hpp"
#include "cascade_rl/terms/discounted_return.hpp"
#include "cascade_rl/terms/group_advantage.hpp"
#include "cascade_rl/terms/group_moments.hpp"
#include "cascade_rl/terms/whitening.hpp"

namespace cascade_rl::cuda::detail {

template <class T>
CASCADE_RL_HD constexpr T min_of(T a, T b) { return b < a ? b : a; }
template <class T>
CASCADE_RL_HD constexpr T max_of(T a, T b) { return a < b ? b : a; }

// ---- group advantages ---------------------------------------------------------------
// The formulas are terms/group_moments.hpp, the per-group decisions
// terms/group_advantage.hpp; the options become group_params in each algorithm's header.

using cascade_rl::detail::group_params_of;
using terms::advantage_of;
using terms::group_kind;
using terms::group_moments;
using terms::group_params;
using terms::group_plan;
using terms::plan_group;

// ---- token advantages -----------------------------------------------------------------

// distillation_advantages of distillation_advantages.hpp (in T, as the host core).
template <class T>
CASCADE_RL_HD inline T distillation_advantage(T teacher, T student, bool valid) {
  return valid ? teacher - student : T(0);
}

using terms::discounted_return;

// ---- log-probs from logits: the online log-sum-exp ---------------------------------

// Over the values x seen so far, relative to the running maximum m:
//   s = sum exp(x - m),  w = sum exp(x - m) * (x - m).
// Then lse = m + log s and the entropy H = lse - sum p x = log s - w / s.
// Masked logits of -inf add nothing; a NaN logit makes the row NaN.
inline constexpr float minus_infinity = -::cuda::std::numeric_limits<float>::infinity();

struct lse_state {
  float m = minus_infinity;
  float s = 0;
  float w = 0;
};

// exp in float: the fast intrinsic on the device (the row sum is bandwidth-bound and
// the intrinsic's error is far below the float32 tolerance of the result).
CASCADE_RL_HD inline float lse_exp(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return ::cuda::std::exp(x);
#endif
}

// Moves the state to a new, larger maximum.
CASCADE_RL_HD inline void lse_rescale(lse_state& st, float new_max) {
  if (!(new_max > st.m)) return;
  if (st.m == minus_infinity) {
    st.m = new_max;
    return;
  }
  const float d = st.m - new_max;
  const float a = lse_exp(d);
  st.w = a * (st.w + d * st.s);
  st.s *= a;
  st.m = new_max;
}

// Adds a chunk of N already-scaled values: one rescale per chunk, one exp per value.
template <int N>
CASCADE_RL_HD inline void lse_add(lse_state& st, const float (&x)[N]) {
  float chunk_max = x[0];
  for (int k = 1; k < N; ++k) chunk_max = x[k] > chunk_max ? x[k] : chunk_max;
  lse_rescale(st, chunk_max);
  if (st.m == minus_infinity) return;  // every value so far is -inf
  for (int k = 0; k < N; ++k) {
    const float d = x[k] - st.m;
    const float e = lse_exp(d);
    st.s += e;
    st.w += d == minus_infinity ? 0.0f : e * d;
  }
}

// Joins two states (fixed call order keeps results deterministic).
CASCADE_RL_HD inline lse_state lse_merge(lse_state a, const lse_state& b) {
  if (b.m == minus_infinity) return a;
  lse_rescale(a, b.m);
  const float d = b.m - a.m;  // <= 0
  const float e = lse_exp(d);
  a.s += e * b.s;
  a.w += e * (b.w + d * b.s);
  return a;
}

struct merge_lse {
  CASCADE_RL_HD lse_state operator()(const lse_state& a, const lse_state& b) const {
    return lse_merge(a, b);
  }
};

CASCADE_RL_HD inline float log_sum_exp(const lse_state& st) { return st.m + ::cuda::std::log(st.s); }
CASCADE_RL_HD inline float entropy_of(const lse_state& st) {
  return ::cuda::std::log(st.s) - st.w / st.s;
}

}  // namespace cascade_rl::cuda::detail
