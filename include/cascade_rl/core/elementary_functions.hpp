#pragma once
// exp, expm1, log, log1p in double and exp, log in float, written with correctly
// rounded IEEE operations only (+, -, *, /, integer work on the bits), so that the host
// (any flags, any -march) and the GPU give the same bits. The library's per-token terms
// call these instead of <cmath> or CUDA's libdevice, whose results differ between
// implementations.
//
// Semantics (what the loss code relies on):
//   exp(x)    ratios exp(logp - old_logp), importance weights, KL's exp(x). Overflows to
//             +inf for x > 709.78, underflows through subnormals to +0 below -745.13;
//             exp(+-0) = 1, exp(-inf) = +0, exp(+inf) = +inf.
//   expm1(x)  e^x - 1 without cancellation near 0 (KL k3 = expm1(x) - x); expm1(x) = x
//             for |x| < 2^-54 (signed zeros kept); -1 below -45; +inf like exp.
//   log(x)    -inf at +-0, NaN below 0, +inf at +inf; subnormal x are exact inputs.
//   log1p(x)  log(1 + x) with 1 + x's rounding error put back; log1p(-1) = -inf, NaN
//             below -1, log1p(x) = x for |x| < 2^-54 (signed zeros kept).
//   float     exp(float) has the double version's shape (for the log-sum-exp of logits,
//             exp(-inf) = 0 exactly); log(float) is the double log rounded to float.
//   NaN in    -> the canonical quiet NaN (payloads are not propagated: x86 and CUDA
//             propagate different payloads, and bits must agree).
// Maximum errors measured against long double (tests/core/test_elementary_functions.cpp:
// 2^22 random points per function over its whole range, edge cases apart), with the
// bound the test asserts in brackets:
//   double exp 0.559 ulp [0.60], expm1 0.593 [0.63], log 0.631 [0.66], log1p 0.660
//   [0.69]; float exp 0.635 [0.66], float log 0.500 [0.501].
//   Subnormal results of exp are within 0.75 ulp of the subnormal spacing [1.0]: the
//   final scaling rounds a second time. Not correctly rounded, but every result is one
//   of the two doubles around the true value (error < 1 ulp).

// Numerical trap: contraction. A compiler may evaluate a*b + c as one fused multiply-add
// (GCC does in GNU mode whenever the target has FMA, -march=haswell or -march=native;
// nvcc does unless -fmad=false), with one rounding instead of two: different bits.
// A header cannot choose its users' flags, and none of the per-function switches holds:
// GCC 12 ignores `#pragma STDC FP_CONTRACT` (clang only); a function carrying
// `optimize("fp-contract=off")` is never inlined into a caller with other options, so no
// loop calling it vectorises, and once inlined the caller's setting would apply anyway;
// a product kept in a named intermediate is still fused (GIMPLE does not see statements);
// `__builtin_assoc_barrier(a*b) + c` stays unfused in scalar code but the vectoriser
// drops the barrier and the vector loop is fused again (measured, GCC 12.2 -O3
// -march=native). Explicit fma everywhere gives fixed bits but, on the baseline x86-64
// target (no FMA instruction), std::fma is a call into libm per operation and no loop
// vectorises: a degree-10 Horner loop ran at 27 M/s with std::fma, 323 M/s with
// product_unfused below and 542 M/s unprotected (one core, -O3, baseline target). What
// we do instead:
//   1. A product whose rounding does not matter is left free: n * ln2_hi (ln2_hi has
//      21 trailing zero bits, n < 2^11), scalings by powers of two. Fused or not, the
//      exact product gives the same sum.
//   2. Every other product that feeds an addition goes through product_unfused: the
//      product rounded to nearest with its last significand bit then cleared. The bit
//      operation between the multiply and the add is not floating-point arithmetic, so
//      no contraction mode may fuse across it, and on the host it is one vector `and`
//      (the loop still vectorises on SSE2 and AVX2). The cleared bit costs up to one ulp
//      of that product, which is why only small correction terms take this path.
//   3. Device code (nvcc, __CUDA_ARCH__) multiplies with __dmul_rn / __fmul_rn (never
//      fused, whatever -fmad says) before the same bit clearing, and divides with
//      __ddiv_rn / __fdiv_rn (correctly rounded even under -prec-div=false). So the
//      device bits equal the host bits without asking our users for -fmad=false.
// Selections, clamps included, are made on the bits (a mask from a comparison) rather
// than with ?: on values: GCC 12 turns `x = x < c ? c : x; ...arithmetic on x...` back
// into control flow (it threads the constant arm through the arithmetic), and under the
// default -ftrapping-math it does not if-convert a ?: whose arm holds arithmetic; either
// way the loop does not vectorise. For the same reason no special case is found with
// x == constant (GCC would thread the known value through the whole computation): a
// zero is x < 2^-1074, an infinity x > DBL_MAX.
// A plain loop calling any of them vectorises with GCC 12 at -O3: SSE2 on the baseline
// x86-64 target, AVX2 with -march=haswell or native, AVX-512 with -march=x86-64-v4. At
// -O2, GCC 12's very-cheap cost model vectorises a loop only when its trip count is a
// known multiple of the vector width (then these do too).
// Not supported: a floating-point environment other than the default (round to nearest,
// no flush-to-zero or denormals-are-zero, which -ffast-math's startup code sets; the
// exception flags these raise mean nothing, and with traps enabled a NaN comparison
// or an overflow in a discarded intermediate may trap),
// -ffast-math and its parts (-fassociative-math reorders the error-free
// sums, -ffinite-math-only drops the NaN and infinity handling, -freciprocal-math changes
// the divisions), nvcc's -use_fast_math / -ftz=true (flushes float subnormals), x87
// arithmetic (-mfpmath=387: extended intermediates). The tests build the same source at
// -O2 and at -O3 -march=native -ffp-contract=fast and compare the bits.

#include <cstdint>
#include <limits>

#include "cascade_rl/core/host_device.hpp"

namespace cascade_rl::math {

namespace detail {

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline std::uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  return __builtin_bit_cast(std::uint64_t, x);
#endif
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double double_from(std::uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  return __builtin_bit_cast(double, u);
#endif
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(std::uint32_t, x);
#endif
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline float float_from(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// a * b rounded to nearest, its last significand bit cleared (see the file comment).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double product_unfused(double a, double b) {
#if defined(__CUDA_ARCH__)
  const double p = __dmul_rn(a, b);
#else
  const double p = a * b;
#endif
  return double_from(bits_of(p) & ~std::uint64_t{1});
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline float product_unfused(float a, float b) {
#if defined(__CUDA_ARCH__)
  const float p = __fmul_rn(a, b);
#else
  const float p = a * b;
#endif
  return float_from(bits_of(p) & ~std::uint32_t{1});
}

// a * b rounded to nearest on its own, for a scalar sum that it joins
// (acc += product_rn(a, b)): the device multiplies with __dmul_rn, which nvcc never
// fuses; the host passes the product through an empty asm statement, which no
// contraction crosses. Not for a loop meant to vectorise (the asm stops the vectoriser):
// there the product is stored into a chunk before another loop sums it, rounded alone
// already (core/parallel.hpp's chunked_blocked_sum).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double product_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  double p = a * b;
  __asm__("" : "+g"(p));
  return p;
#endif
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double quotient(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

// All ones where c holds, else zero: a condition as a bit mask. Masks combine with
// & and | (integer work) where combined bools would not: GCC 12 turns `c1 | c2`, a
// select nested in another's arm, or std::min/max back into control flow, and a loop
// with control flow does not vectorise. On the host the ?: is between constants, which
// GCC if-converts even under -ftrapping-math.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline std::uint64_t mask_of(bool c) {
#if defined(__CUDA_ARCH__)
  return c ? ~std::uint64_t{0} : 0;
#else
  return bits_of(c ? double_from(~std::uint64_t{0}) : 0.0);
#endif
}

// The mask of a condition on parameters, the same for every value a loop computes (a
// mode, an option switched on). Integer work: GCC 12 threads a ?: on a loop-invariant
// integer comparison into control flow, where mask_of's ?: suits the per-value
// comparisons of vector lanes (on the baseline x86-64 target, an integer mask made from
// a vector comparison does not vectorise).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline std::uint64_t parameter_mask(bool c) {
  return std::uint64_t{0} - static_cast<std::uint64_t>(c);
}

// a where the mask is set, b elsewhere.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double blend(std::uint64_t mask, double a, double b) {
  return double_from((bits_of(a) & mask) | (bits_of(b) & ~mask));
}

// c ? a : b. On the host through a mask (blend of mask_of(c)).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double select(bool c, double a, double b) {
#if defined(__CUDA_ARCH__)
  return c ? a : b;
#else
  return blend(mask_of(c), a, b);
#endif
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline float select(bool c, float a, float b) {
#if defined(__CUDA_ARCH__)
  return c ? a : b;
#else
  const std::uint32_t m = bits_of(c ? float_from(~std::uint32_t{0}) : 0.0f);
  return float_from((bits_of(a) & m) | (bits_of(b) & ~m));
#endif
}

inline constexpr double max_finite = std::numeric_limits<double>::max();
inline constexpr double quiet_nan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double infinity = std::numeric_limits<double>::infinity();
inline constexpr float quiet_nan_f = std::numeric_limits<float>::quiet_NaN();

// ln 2 = ln2_hi + ln2_lo: ln2_hi has 32 significant bits, so n * ln2_hi is exact for
// |n| < 2^21; ln2_lo is the rest rounded (1e-26 left over).
inline constexpr double ln2_hi = 0x1.62e42fee00000p-1;
inline constexpr double ln2_lo = 0x1.a39ef35793c76p-33;
inline constexpr double inv_ln2 = 0x1.71547652b82fep+0;
// Adding 1.5 * 2^52 rounds a double of magnitude < 2^51 to an integer, which is then
// the low bits of the sum's significand.
inline constexpr double round_magic = 0x1.8p52;

// The reduction x = n ln2 + r shared by exp and expm1: x is already clamped (or NaN).
// r = r_hi - r_lo with r_hi exact, and
//   e^r - 1 = r_hi - r_lo + half_r2 + small,
// where half_r2 = r_h^2 / 2 is exact (r_h: the top 26 bits of the rounded r) and small
// holds the rest of r^2 / 2 (with the rounding error of r put back to first order) and
// r^3 Q(r), Q a Chebyshev fit of (e^r - 1 - r - r^2/2) / r^3 on [-ln2/2, ln2/2]
// (mpmath.chebyfit, 10 terms; the rounded coefficients are 2^-59.8 relative to e^r).
struct exp_reduced {
  double t;  // n + round_magic: n sits in the low significand bits
  double n, r_hi, r_lo, half_r2, small;
};

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline exp_reduced exp_reduce(double x) {
  exp_reduced e;
  e.t = product_unfused(x, inv_ln2) + round_magic;
  e.n = e.t - round_magic;
  e.r_hi = x - e.n * ln2_hi;
  e.r_lo = product_unfused(e.n, ln2_lo);
  const double r = e.r_hi - e.r_lo;
  const double r_error = (e.r_hi - r) - e.r_lo;
  const double r_h = double_from(bits_of(r) & 0xfffffffff8000000);
  const double r_l = r - r_h;
  e.half_r2 = (0.5 * r_h) * r_h;
  double q = 0x1.1f66d948a47fep-29;
  q = product_unfused(q, r) + 0x1.af389ecfc4be9p-26;
  q = product_unfused(q, r) + 0x1.27e4e1f7222cbp-22;
  q = product_unfused(q, r) + 0x1.71de0db2f6b19p-19;
  q = product_unfused(q, r) + 0x1.a01a01a47a591p-16;
  q = product_unfused(q, r) + 0x1.a01a01a7c2efep-13;
  q = product_unfused(q, r) + 0x1.6c16c16c167e2p-10;
  q = product_unfused(q, r) + 0x1.11111111109b5p-7;
  q = product_unfused(q, r) + 0x1.5555555555555p-5;
  q = product_unfused(q, r) + 0x1.5555555555556p-3;
  // (r^2 - r_h^2) / 2 = r_l (r + r_h) / 2, and (r + r_error)^2 / 2 - r^2 / 2 ~ r r_error.
  e.small = product_unfused(r_l, 0.5 * (r + r_h)) +
            (product_unfused((r * r) * r, q) + product_unfused(r, r_error));
  return e;
}

// 2^n as two factors 2^floor(n/2) and 2^ceil(n/2), each a normal double for
// |n| <= 1100, built from the bits of t (logical shifts only: SSE2 has no 64-bit
// arithmetic shift). Multiplying by them in turn rounds once, also into subnormals.
struct power_of_two_pair {
  double first, second;
};

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline power_of_two_pair exp_scales(double t) {
  const std::uint64_t u = bits_of(t);
  const std::uint64_t half = u >> 1;
  return {double_from((half + 1023) << 52), double_from((u - half + 1023) << 52)};
}

// e^x for clamped x from its reduction: 1 + r_hi is split exactly (Fast2Sum, |r_hi| < 1)
// so that the only large rounding is the last addition.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double exp_from(const exp_reduced& e) {
  const double hi = 1.0 + e.r_hi;
  const double hi_error = (1.0 - hi) + e.r_hi;
  const double lo = e.half_r2 + (e.small + (hi_error - e.r_lo));
  const power_of_two_pair s = exp_scales(e.t);
  return ((hi + lo) * s.first) * s.second;
}

// r with x's sign where x is +-0 (expm1(-0) = log1p(-0) = -0; the computation, exact
// for tiny x otherwise, gives +0). Integer work only: a select against r would let GCC
// compute r in a branch, and a branch holding floating-point work is not if-converted.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double keep_signed_zero(double x, double r) {
  const std::uint64_t bits = bits_of(x);
  const std::uint64_t zero = ((bits << 1) - 1) >> 63;  // 1 for +-0 (borrow), else 0
  return double_from(bits_of(r) | ((bits >> 63) & zero) << 63);
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double canonical_nan(double r) {
  return select(r != r, quiet_nan, r);
}
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline float canonical_nan(float r) {
  return select(r != r, quiet_nan_f, r);
}

// log(u) + c for a positive normal (or NaN/inf, fixed by the caller) u, with
// k_offset subtracted from u's binary exponent. u = 2^k m, m in [sqrt(1/2), sqrt(2)),
// f = m - 1 (exact), s = f / (2 + f), log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2))
// (the layout of fdlibm's log), R(z)/z a Chebyshev fit of
// (2 atanh(s) - 2s) / s^3 on [0, (3 - 2 sqrt 2)^2] (8 terms, 2^-54.6 absolute).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double log_core(double u, double k_offset, double c) {
  constexpr std::uint64_t sqrt_half_bits = 0x3fe6a09e667f3bcd;
  const std::uint64_t bits = bits_of(u);
  const std::uint64_t shifted = bits - sqrt_half_bits;
  // The top 12 bits of `shifted` are k in two's complement; xor 0x800 makes them
  // k + 2048, read exactly as a double by placing them in 2^52's significand.
  const double k = double_from(0x4330000000000000 | ((shifted >> 52) ^ 0x800)) -
                   0x1.00000000008p52 - k_offset;
  const double m = double_from(bits - (shifted & 0xfff0000000000000));
  const double f = m - 1.0;
  const double s = quotient(f, 2.0 + f);
  const double z = s * s;
  double p = 0x1.0c039c49989c6p-3;
  p = product_unfused(p, z) + 0x1.0fbe95d716020p-3;
  p = product_unfused(p, z) + 0x1.3b1c355a8f7a2p-3;
  p = product_unfused(p, z) + 0x1.745cf9048dd95p-3;
  p = product_unfused(p, z) + 0x1.c71c720159177p-3;
  p = product_unfused(p, z) + 0x1.2492492476cccp-2;
  p = product_unfused(p, z) + 0x1.9999999999a38p-2;
  p = product_unfused(p, z) + 0x1.5555555555555p-1;
  const double big_r = product_unfused(p, z);
  // f^2 / 2 = h_hi + h_lo exactly enough: f_hi keeps 26 significant bits, so
  // f_hi * f_hi and f_hi * f_lo are exact.
  const double f_hi = double_from(bits_of(f) & 0xfffffffff8000000);
  const double f_lo = f - f_hi;
  const double h_hi = (0.5 * f_hi) * f_hi;
  const double h_lo = product_unfused(f_lo, f_hi + 0.5 * f_lo);
  // s (f^2/2 + R) = s_h v_h + (s_h v_l + s_l v) with 26-bit s_h and v_h: the first
  // product is exact, so only the small rest passes through product_unfused.
  const double v = (h_hi + h_lo) + big_r;
  const double s_h = double_from(bits_of(s) & 0xfffffffff8000000);
  const double v_h = double_from(bits_of(v) & 0xfffffffff8000000);
  const double s_v_rest = product_unfused(s_h, v - v_h) + product_unfused(s - s_h, v);
  const double correction = s_h * v_h + ((s_v_rest - h_lo) + (product_unfused(k, ln2_lo) + c));
  // k ln2_hi + (f - h_hi) + correction, the two large additions made exact (Fast2Sum:
  // |f| >= h_hi, and |k ln2_hi| >= |f - h_hi| or k = 0).
  const double k_part = k * ln2_hi;
  const double d = f - h_hi;
  const double d_error = (f - d) - h_hi;
  const double hi = k_part + d;
  const double hi_error = (k_part - hi) + d;
  return hi + (hi_error + (d_error + correction));
}

}  // namespace detail

// The per-token terms round their own products the same way (see the file comment).
using detail::product_rn;
using detail::product_unfused;

// The square root, correctly rounded on every executor (IEEE 754 requires it of the
// host's instruction; the device's __dsqrt_rn is the rounded-to-nearest one).
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double sqrt(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return __builtin_sqrt(x);
#endif
}

// |x| with the sign bit cleared: abs(-0.0) = +0.0, as std::abs and CUDA's fabs give.
CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double abs(double x) {
  return detail::double_from(detail::bits_of(x) & ~(std::uint64_t{1} << 63));
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double exp(double x) {
  using namespace detail;
  x = select(x < -746.0, -746.0, x);  // exp(-746) rounds to +0, so does all below
  x = select(x > 710.0, 710.0, x);    // exp(710) overflows to +inf
  return canonical_nan(exp_from(exp_reduce(x)));
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double expm1(double x) {
  using namespace detail;
  const double input = x;
  x = select(x < -45.0, -45.0, x);  // e^-45 < 2^-64: -1 + e^x rounds to -1
  x = select(x > 710.0, 710.0, x);
  const exp_reduced e = exp_reduce(x);
  // e^x - 1 = 2^b ((2^a - 2^-b) + 2^a r_hi + 2^a (e^r - 1 - r_hi)) with 2^a 2^b = 2^n
  // (exp_scales). 2^a - 2^-b is split exactly into big + big_error (2Sum: it is exact
  // only for |n| <= 53); big and 2^a r_hi add exactly (Fast2Sum: |big| >= |2^a r_hi|,
  // or big = 0), and so does the exact 2^a r_h^2 / 2. The last product by 2^b is exact
  // (or overflows, as it should).
  const std::uint64_t u = bits_of(e.t);
  const std::uint64_t half = u >> 1;
  const double scale_a = double_from((half + 1023) << 52);
  const double scale_b = double_from((u - half + 1023) << 52);
  const double inverse_b = double_from((1023 - (u - half)) << 52);
  const double big = scale_a - inverse_b;
  const double big_b = big - scale_a;
  const double big_error = (scale_a - (big - big_b)) + (-inverse_b - big_b);
  const double mid = scale_a * e.r_hi;
  const double sum = big + mid;
  const double sum_error = (big - sum) + mid;
  const double square = scale_a * e.half_r2;
  const double total = sum + square;
  const double total_error = (sum - total) + square;
  const double small = scale_a * (e.small - e.r_lo) + big_error;
  const double r = (total + (total_error + (sum_error + small))) * scale_b;
  return canonical_nan(keep_signed_zero(input, r));
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double log(double x) {
  using namespace detail;
  // A subnormal x is scaled by 2^54 first; the test is integer work on the exponent
  // field (zero: (e - 1) >> 63 is 1, the offset 54), so no comparison can become a
  // branch.
  const std::uint64_t offset = (0 - (((bits_of(x) >> 52) - 1) >> 63)) & 54;
  const double u = x * double_from((1023 + offset) << 52);
  const double k_offset = double_from(0x4330000000000000 | offset) - 0x1p52;
  double r = log_core(u, k_offset, 0.0);
  r += select(x < 0x1p-1074, -infinity, 0.0);  // +-0 (negatives are next)
  r += select(x > max_finite, infinity, 0.0);
  r += select(!(x >= 0.0), quiet_nan, 0.0);  // negative or NaN
  return canonical_nan(r);
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline double log1p(double x) {
  using namespace detail;
  const double input = x;
  // -1 and below, and +inf, go through the computation as harmless values; their
  // results are set below.
  x = select(x < -0x1.fffffffffffffp-1, -0.5, x);
  x = select(x > max_finite, 1.0, x);
  // u = 1 + x rounded, error its exact rounding error (2Sum), put back as error / u.
  const double u = 1.0 + x;
  const double x_part = u - 1.0;
  const double one_part = u - x_part;
  const double error = (1.0 - one_part) + (x - x_part);
  double r = log_core(u, 0.0, quotient(error, u));
  r += select(input < -0x1.fffffffffffffp-1, -infinity, 0.0);  // -1 (below: next)
  r += select(input > max_finite, infinity, 0.0);
  r += select(!(input >= -1.0), quiet_nan, 0.0);  // below -1 or NaN
  return canonical_nan(keep_signed_zero(input, r));
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline float exp(float x) {
  using namespace detail;
  x = select(x < -104.0f, -104.0f, x);  // exp(-104) rounds to +0
  x = select(x > 89.0f, 89.0f, x);      // exp(89) overflows to +inf
  constexpr float magic = 0x1.8p23f;
  const float t = product_unfused(x, 0x1.715476p+0f) + magic;
  const float n = t - magic;
  // ln2 = 0x1.62e4p-1 (16 significant bits, n * it exact for |n| < 2^8) + the rest.
  const float r_hi = x - n * 0x1.62e4p-1f;
  const float r_lo = product_unfused(n, 0x1.7f7d1cp-20f);
  const float r = r_hi - r_lo;
  const float r2 = r * r;
  // (e^r - 1 - r - r^2/2) / r^3: Chebyshev fit, 5 terms, 2^-30.4 relative.
  float q = 0x1.a0f862p-13f;
  q = product_unfused(q, r) + 0x1.6d10fcp-10f;
  q = product_unfused(q, r) + 0x1.1110f6p-7f;
  q = product_unfused(q, r) + 0x1.55551ap-5f;
  q = product_unfused(q, r) + 0x1.555556p-3f;
  const float r3q = product_unfused(r2 * r, q);
  const float hi = 1.0f + r_hi;
  const float hi_error = (1.0f - hi) + r_hi;
  const float lo = r2 * 0.5f + (r3q + (hi_error - r_lo));
  // 2^n in two factors as for double: t's low significand bits hold 2^22 + n.
  const std::uint32_t u = bits_of(t);
  const std::uint32_t half = u >> 1;
  const float first = float_from((half + 127) << 23);
  const float second = float_from((u - half + 127) << 23);
  return canonical_nan(((hi + lo) * first) * second);
}

CASCADE_RL_HD CASCADE_RL_ALWAYS_INLINE inline float log(float x) {
  return static_cast<float>(log(static_cast<double>(x)));
}

}  // namespace cascade_rl::math
