#pragma once
// Tolerances that come from the conditioning of a computation, for parity with a peer
// where the peer's output is rounding noise amplified (values one float32 ulp apart,
// then normalised by a std that is nearly zero).
//
// Model: the peer computes in float32 and reduces in an order we cannot know (torch's
// CPU sums depend on the vector width of the CPU that ran them), so its result is taken
// to be the exact map applied to inputs each moved by up to one float32 ulp. To first
// order two correct implementations then differ at output i by at most
//     sum_j |d y_i / d x_j| * ulp(x_j),
// the Jacobian of the exact map times one ulp of each input. Where the map is well
// conditioned (a std of 0.3, say) this is a few 1e-7 and the usual float32 tolerance
// dominates; where the std is ~1e-8 and an epsilon of 1e-8 guards it, the bound grows
// to ~1e-4 and says how much of the peer's output is noise. The Jacobians below are
// written out analytically from each formula and composed by matrix products.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace cascade_rl::testing {

// The spacing of float32 values at x (distance to the next float away from zero).
inline double float_ulp(double x) {
  const float f = std::abs(static_cast<float>(x));
  return static_cast<double>(std::nextafter(f, std::numeric_limits<float>::infinity())) -
         static_cast<double>(f);
}

// A dense Jacobian: rows outputs, columns inputs.
struct jacobian {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<double> values;  // row-major

  jacobian(std::size_t r, std::size_t c) : rows(r), cols(c), values(r * c, 0.0) {}
  double& at(std::size_t i, std::size_t j) { return values[i * cols + j]; }
  [[nodiscard]] double at(std::size_t i, std::size_t j) const { return values[i * cols + j]; }
};

// The Jacobian of f(g(x)) from J_f (at g(x)) and J_g (at x).
inline jacobian compose(const jacobian& outer, const jacobian& inner) {
  jacobian out(outer.rows, inner.cols);
  for (std::size_t i = 0; i < outer.rows; ++i)
    for (std::size_t k = 0; k < outer.cols; ++k)
      for (std::size_t j = 0; j < inner.cols; ++j) out.at(i, j) += outer.at(i, k) * inner.at(k, j);
  return out;
}

// sum_j |J_ij| * ulp(x_j) for every output i.
inline std::vector<double> one_ulp_sensitivity(const jacobian& J, std::span<const double> inputs) {
  std::vector<double> bound(J.rows, 0.0);
  for (std::size_t i = 0; i < J.rows; ++i)
    for (std::size_t j = 0; j < J.cols; ++j) bound[i] += std::abs(J.at(i, j)) * float_ulp(inputs[j]);
  return bound;
}

// Mean and unbiased (Bessel) standard deviation of x, in double.
struct moments {
  double mean = 0;
  double std = 0;
};
inline moments unbiased_moments(std::span<const double> x) {
  const auto n = static_cast<double>(x.size());
  double sum = 0;
  for (double v : x) sum += v;
  moments m{.mean = sum / n};
  if (x.size() < 2) return m;
  double squares = 0;
  for (double v : x) squares += (v - m.mean) * (v - m.mean);
  m.std = std::sqrt(squares / (n - 1));
  return m;
}

// y_i = (x_i - m) / s with s = sqrt(var + eps) (whitening, eps added to the variance) or
// s = std + eps (GRPO, eps added to the std); var and std unbiased over all of x.
// dy_i/dx_j = (delta_ij - 1/n) / s - (x_i - m) / s^2 * ds/dx_j, where
// ds/dx_j = (x_j - m) / ((n - 1) s) for the variance form and (x_j - m) / ((n - 1) std)
// for the std form (the latter only where std > 0; at std = 0 every x_i - m is 0 and
// the term vanishes). A singleton (n = 1) is passed through by the peers: J = 1.
enum class epsilon_on { variance, std };

inline jacobian normalisation_jacobian(std::span<const double> x, double eps, epsilon_on where) {
  const std::size_t n = x.size();
  jacobian J(n, n);
  if (n == 1) {
    J.at(0, 0) = 1.0;
    return J;
  }
  const moments m = unbiased_moments(x);
  const double s = where == epsilon_on::variance ? std::sqrt(m.std * m.std + eps) : m.std + eps;
  const double scale_denominator = where == epsilon_on::variance ? s : m.std;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      double d = ((i == j ? 1.0 : 0.0) - 1.0 / static_cast<double>(n)) / s;
      if (x[i] != m.mean && scale_denominator > 0) {
        const double ds = (x[j] - m.mean) / ((static_cast<double>(n) - 1) * scale_denominator);
        d -= (x[i] - m.mean) / (s * s) * ds;
      }
      J.at(i, j) = d;
    }
  }
  return J;
}

// y_i = x_i - m (Dr. GRPO, the REINFORCE++ baseline): delta_ij - 1/n.
inline jacobian centring_jacobian(std::size_t n) {
  jacobian J(n, n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j)
      J.at(i, j) = (i == j ? 1.0 : 0.0) - (n == 1 ? 0.0 : 1.0 / static_cast<double>(n));
  return J;
}

// The float32 rounding of a peer's sum of per-token terms, on float32 inputs we share
// with it (the second source of noise beside the one-ulp input model above, and the one
// that matters where terms cancel: P4's extreme batch gives a loss of 3e-4 from terms of
// 0.03). A float32 sum of n terms in any order errs by at most (n - 1) u sum |t_i|
// (u = 2^-24, the recursive-summation bound; a pairwise order does better), and each
// term carries the relative error of its own float32 evaluation, given per term as a
// count of units of u. Returns the bound on |peer's sum - exact sum|.
inline double float32_sum_slack(std::span<const double> terms,
                                std::span<const double> term_units_of_u) {
  constexpr double u = 0x1p-24;
  const double n = static_cast<double>(terms.size());
  double slack = 0;
  for (std::size_t i = 0; i < terms.size(); ++i)
    slack += (std::max(n - 1.0, 0.0) + term_units_of_u[i]) * std::abs(terms[i]);
  return u * slack;
}

// The units of u in a float32 token term that goes through exp(logp - old_logp): the
// subtraction rounds the log-ratio by up to |log-ratio| u absolute, which exp turns into
// that much relative error; a handful of products, the exp and a sigmoid add a few
// more (8 covers every ratio loss's formula).
inline double ratio_term_units_of_u(double log_ratio) { return std::abs(log_ratio) + 8.0; }

}  // namespace cascade_rl::testing
