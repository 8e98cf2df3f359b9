#pragma once
// CASCADE_RL_HD marks a function that runs on the host and, compiled by nvcc, on the
// device: the per-token terms and the elementary functions are written once and called
// from host loops, the Thrust portable path and the CUDA kernels alike.

#if defined(__CUDACC__)
#define CASCADE_RL_HD __host__ __device__
#else
#define CASCADE_RL_HD
#endif
