#pragma once
// CASCADE_RL_HD marks a function that runs on the host and, compiled by nvcc, on the
// device: the per-token terms and the elementary functions are written once and called
// from host loops, the Thrust portable path and the CUDA kernels alike.

#if defined(__CUDACC__)
#define CASCADE_RL_HD __host__ __device__
#else
#define CASCADE_RL_HD
#endif

// CASCADE_RL_ALWAYS_INLINE marks the per-token functions (the elementary functions, the
// token terms) that a host loss loop must inline to vectorise. GCC's inliner stops once
// a driver's loop body has grown past its limits, which depends on what else the
// translation unit instantiates: CISPO's loop, left with a call to exp, ran five times
// slower than PPO's in the benchmark binary (see benchmarks/bench_policy_loss.cpp).
#if defined(__GNUC__) || defined(__clang__)
#define CASCADE_RL_ALWAYS_INLINE __attribute__((always_inline))
#else
#define CASCADE_RL_ALWAYS_INLINE
#endif
