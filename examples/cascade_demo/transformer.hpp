#pragma once
// A one-layer causal transformer language model in Eigen, small enough to train on two
// CPU cores in seconds (about 20 thousand parameters with the default shape):
//
//   x0_t  = E[tok_t] + S[tok_{t-1}] + P[pos_t]          token, previous token, position
//   q,k,v = x0 Wq, x0 Wk, x0 Wv                          `heads` heads, causal softmax
//   h1    = x0 + attention(q, k, v) Wo
//   h2    = h1 + relu(h1 W1 + b1) W2 + b2
//   logp  = log_softmax(h2 U + c)
//
// S, the embedding of the previous token ("token shift"), lets one attention layer
// find "the value that followed key k" (long-context retrieval, multiple choice), which
// otherwise takes two layers (an induction head). Positions are counted from the start
// of the prompt for prompt tokens and from the start of the response for response
// tokens (slots prompt_positions + j), so a response can count its own length.
//
// The input of a (prompt, response) pair is prompt + <sep> + response[0 .. R-2]; the
// row of <sep> predicts response[0], and so on. Only those R rows run the attention
// output, MLP and unembedding; the other rows feed keys and values.
//
// backward() is seeded by dL/dlogp of each response token (the library's currency):
// dL/dlogits = dL/dlogp * (onehot(y) - softmax), then the chain rule by hand.
// Everything is templated on the scalar: float in the demo, double in the gradient
// check.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

// The model parallelises over sequences itself (eigen_policy.hpp); Eigen's own OpenMP
// threads inside each small product only oversubscribe the cores (the library's target
// links OpenMP), which made a d = 48 model 60x slower than a d = 32 one.
#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif
#include <Eigen/Dense>

namespace demo {

struct lm_shape {
  int vocab = 0;
  int d = 32;     // model width
  int heads = 2;
  int ffn = 64;   // MLP width
  int prompt_positions = 64;    // longest prompt + <sep>
  int response_positions = 32;  // longest response - 1 (an SWE episode, observations and all)

  bool operator==(const lm_shape&) const = default;
};

// Offsets of the parameter blocks in one flat vector (what Adam and snapshots see).
struct lm_layout {
  enum block { E, S, P, Wq, Wk, Wv, Wo, W1, b1, W2, b2, U, c, count };
  int rows[count]{}, cols[count]{};
  std::size_t offset[count + 1]{};

  explicit lm_layout(const lm_shape& s) {
    const int positions = s.prompt_positions + s.response_positions;
    const int shape[count][2] = {{s.vocab, s.d}, {s.vocab, s.d}, {positions, s.d}, {s.d, s.d}, {s.d, s.d},
                                 {s.d, s.d},     {s.d, s.d},     {s.d, s.ffn},     {1, s.ffn},  {s.ffn, s.d},
                                 {1, s.d},       {s.d, s.vocab}, {1, s.vocab}};
    for (int b = 0; b < count; ++b) {
      rows[b] = shape[b][0];
      cols[b] = shape[b][1];
      offset[b + 1] = offset[b] + static_cast<std::size_t>(rows[b]) * static_cast<std::size_t>(cols[b]);
    }
  }
  [[nodiscard]] std::size_t size() const { return offset[count]; }
};

template <class T>
using row_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using row_vector = Eigen::Matrix<T, 1, Eigen::Dynamic>;

// Activations of one (prompt, response) pair, kept for the backward pass.
template <class T>
struct lm_pass {
  std::vector<std::int32_t> input, previous, position;
  std::vector<std::int32_t> targets;  // the response tokens
  int context = 0;                    // prompt length + 1 (<sep>): rows before the predicting ones
  row_matrix<T> x0, q, k, v, o, h1, z, act, h2, probs;
  std::vector<row_matrix<T>> attention;  // per head, R x L
  std::vector<T> log_probs;              // of each target
};

// The parameters (and the Adam state that travels with them in a snapshot). Scores
// tokens, so a snapshot can serve as a MOPD teacher.
template <class T>
struct lm_weights {
  using matrix = row_matrix<T>;
  using cmap = Eigen::Map<const matrix>;
  using map = Eigen::Map<matrix>;

  lm_shape shape{};
  std::vector<T> params{}, m{}, v{};
  std::int64_t adam_steps = 0;

  lm_weights() = default;
  // Initialised from `seed` (Box-Muller on mt19937_64, so the same on every platform).
  lm_weights(const lm_shape& s, std::uint64_t seed) : shape(s) {
    if (s.d % s.heads != 0) throw std::invalid_argument("lm_shape: d must be a multiple of heads");
    const lm_layout layout(s);
    params.assign(layout.size(), T(0));
    m.assign(layout.size(), T(0));
    v.assign(layout.size(), T(0));
    std::mt19937_64 rng(seed);
    const auto normal = [&] {
      const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    };
    const double d = s.d, f = s.ffn;
    const double scale[lm_layout::count] = {0.5, 0.5, 0.5, 1 / std::sqrt(d), 1 / std::sqrt(d), 1 / std::sqrt(d),
                                            0.5 / std::sqrt(d), 1 / std::sqrt(d), 0, 0.5 / std::sqrt(f), 0,
                                            0.5 / std::sqrt(d), 0};
    for (int b = 0; b < lm_layout::count; ++b)
      for (std::size_t i = layout.offset[b]; i < layout.offset[b + 1]; ++i)
        params[i] = static_cast<T>(scale[b] * normal());
  }

  bool operator==(const lm_weights&) const = default;

  [[nodiscard]] cmap block(const lm_layout& l, int b) const {
    return cmap(params.data() + l.offset[b], l.rows[b], l.cols[b]);
  }
  static map block(const lm_layout& l, int b, std::vector<T>& storage) {
    return map(storage.data() + l.offset[b], l.rows[b], l.cols[b]);
  }

  // ---- the forward pass of one (prompt, response) pair ---------------------------------

  void forward(std::span<const std::int32_t> prompt, std::span<const std::int32_t> response, lm_pass<T>& p) const {
    const lm_layout l(shape);
    const int np = static_cast<int>(prompt.size());
    const int R = static_cast<int>(response.size());
    if (R == 0) throw std::invalid_argument("lm forward: empty response");
    if (np + 1 > shape.prompt_positions)
      throw std::invalid_argument("lm forward: prompt of " + std::to_string(np) + " tokens is too long");
    if (R - 1 > shape.response_positions)
      throw std::invalid_argument("lm forward: response of " + std::to_string(R) + " tokens is too long");
    const int L = np + R;  // prompt, <sep>, response[0 .. R-2]
    p.context = np;
    p.input.assign(prompt.begin(), prompt.end());
    p.input.push_back(1);  // <sep>
    for (int j = 0; j + 1 < R; ++j) p.input.push_back(response[static_cast<std::size_t>(j)]);
    p.previous.resize(static_cast<std::size_t>(L));
    p.position.resize(static_cast<std::size_t>(L));
    for (int t = 0; t < L; ++t) {
      p.previous[static_cast<std::size_t>(t)] = t == 0 ? 2 : p.input[static_cast<std::size_t>(t - 1)];  // <bos>
      p.position[static_cast<std::size_t>(t)] = t <= np ? t : shape.prompt_positions + (t - np - 1);
    }
    p.targets.assign(response.begin(), response.end());

    const cmap E = block(l, lm_layout::E), S = block(l, lm_layout::S), P = block(l, lm_layout::P);
    p.x0.resize(L, shape.d);
    for (int t = 0; t < L; ++t)
      p.x0.row(t) = E.row(p.input[static_cast<std::size_t>(t)]) + S.row(p.previous[static_cast<std::size_t>(t)]) +
                    P.row(p.position[static_cast<std::size_t>(t)]);
    p.q.noalias() = p.x0.bottomRows(R) * block(l, lm_layout::Wq);
    p.k.noalias() = p.x0 * block(l, lm_layout::Wk);
    p.v.noalias() = p.x0 * block(l, lm_layout::Wv);

    const int dh = shape.d / shape.heads;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    p.attention.resize(static_cast<std::size_t>(shape.heads));
    p.o.resize(R, shape.d);
    for (int h = 0; h < shape.heads; ++h) {
      matrix& a = p.attention[static_cast<std::size_t>(h)];
      a.noalias() = (p.q.middleCols(h * dh, dh) * p.k.middleCols(h * dh, dh).transpose()) * scale;
      for (int r = 0; r < R; ++r) {
        const int visible = np + r + 1;  // row np + r sees columns 0 .. np + r
        auto row = a.row(r);
        const T top = row.head(visible).maxCoeff();
        row.head(visible) = (row.head(visible).array() - top).exp();
        row.head(visible) /= row.head(visible).sum();
        row.tail(L - visible).setZero();
      }
      p.o.middleCols(h * dh, dh).noalias() = a * p.v.middleCols(h * dh, dh);
    }
    p.h1 = p.x0.bottomRows(R);
    p.h1.noalias() += p.o * block(l, lm_layout::Wo);
    p.z.noalias() = p.h1 * block(l, lm_layout::W1);
    p.z.rowwise() += row_vector<T>(block(l, lm_layout::b1));
    p.act = p.z.cwiseMax(T(0));
    p.h2 = p.h1;
    p.h2.noalias() += p.act * block(l, lm_layout::W2);
    p.h2.rowwise() += row_vector<T>(block(l, lm_layout::b2));
    p.probs.noalias() = p.h2 * block(l, lm_layout::U);
    p.probs.rowwise() += row_vector<T>(block(l, lm_layout::c));
    p.log_probs.resize(static_cast<std::size_t>(R));
    for (int r = 0; r < R; ++r) {
      auto row = p.probs.row(r);
      const T top = row.maxCoeff();
      const T target = row(p.targets[static_cast<std::size_t>(r)]) - top;
      row = (row.array() - top).exp();
      const T sum = row.sum();
      row /= sum;
      p.log_probs[static_cast<std::size_t>(r)] = target - std::log(sum);
    }
  }

  // ---- the backward pass, seeded by dL/dlogp of each target ------------------------------

  // Adds dL/dparams to grad (same layout as params).
  void backward(const lm_pass<T>& p, std::span<const T> dlogp, std::vector<T>& grad) const {
    const lm_layout l(shape);
    const int R = static_cast<int>(p.targets.size());
    const int L = static_cast<int>(p.input.size());
    const int dh = shape.d / shape.heads;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));

    matrix g = p.probs;  // dL/dlogits = dlogp * (onehot - softmax)
    for (int r = 0; r < R; ++r) {
      g.row(r) *= -dlogp[static_cast<std::size_t>(r)];
      g(r, p.targets[static_cast<std::size_t>(r)]) += dlogp[static_cast<std::size_t>(r)];
    }
    block(l, lm_layout::U, grad).noalias() += p.h2.transpose() * g;
    block(l, lm_layout::c, grad) += g.colwise().sum();
    matrix dh2 = g * block(l, lm_layout::U).transpose();
    block(l, lm_layout::W2, grad).noalias() += p.act.transpose() * dh2;
    block(l, lm_layout::b2, grad) += dh2.colwise().sum();
    matrix dz = dh2 * block(l, lm_layout::W2).transpose();
    dz = dz.cwiseProduct((p.z.array() > T(0)).template cast<T>().matrix());
    block(l, lm_layout::W1, grad).noalias() += p.h1.transpose() * dz;
    block(l, lm_layout::b1, grad) += dz.colwise().sum();
    matrix dh1 = dh2;
    dh1.noalias() += dz * block(l, lm_layout::W1).transpose();
    block(l, lm_layout::Wo, grad).noalias() += p.o.transpose() * dh1;
    const matrix d_o = dh1 * block(l, lm_layout::Wo).transpose();

    matrix dq(R, shape.d), dk(L, shape.d), dv(L, shape.d);
    for (int h = 0; h < shape.heads; ++h) {
      const matrix& a = p.attention[static_cast<std::size_t>(h)];
      const matrix da = d_o.middleCols(h * dh, dh) * p.v.middleCols(h * dh, dh).transpose();
      dv.middleCols(h * dh, dh).noalias() = a.transpose() * d_o.middleCols(h * dh, dh);
      // softmax: dS = A .* (dA - rowsum(A .* dA))
      const Eigen::Matrix<T, Eigen::Dynamic, 1> inner = a.cwiseProduct(da).rowwise().sum();
      const matrix ds = (a.array() * (da.colwise() - inner).array()).matrix() * scale;
      dq.middleCols(h * dh, dh).noalias() = ds * p.k.middleCols(h * dh, dh);
      dk.middleCols(h * dh, dh).noalias() = ds.transpose() * p.q.middleCols(h * dh, dh);
    }
    block(l, lm_layout::Wq, grad).noalias() += p.x0.bottomRows(R).transpose() * dq;
    block(l, lm_layout::Wk, grad).noalias() += p.x0.transpose() * dk;
    block(l, lm_layout::Wv, grad).noalias() += p.x0.transpose() * dv;
    matrix dx0 = dk * block(l, lm_layout::Wk).transpose();
    dx0.noalias() += dv * block(l, lm_layout::Wv).transpose();
    dx0.bottomRows(R) += dh1;
    dx0.bottomRows(R).noalias() += dq * block(l, lm_layout::Wq).transpose();
    map dE = block(l, lm_layout::E, grad), dS = block(l, lm_layout::S, grad), dP = block(l, lm_layout::P, grad);
    for (int t = 0; t < L; ++t) {
      dE.row(p.input[static_cast<std::size_t>(t)]) += dx0.row(t);
      dS.row(p.previous[static_cast<std::size_t>(t)]) += dx0.row(t);
      dP.row(p.position[static_cast<std::size_t>(t)]) += dx0.row(t);
    }
  }

  // ---- incremental decoding --------------------------------------------------------------

  // Keys and values of the rows seen so far, and the x0 of the row about to predict.
  struct decoder {
    matrix k, v;
    row_vector<T> x0;
    int rows = 0;       // rows in k and v
    int generated = 0;  // response tokens so far
    std::int32_t last = 1;  // token at the newest row
  };

  // A decoder positioned at the <sep> row of `prompt`.
  [[nodiscard]] decoder start(std::span<const std::int32_t> prompt) const {
    const lm_layout l(shape);
    const int np = static_cast<int>(prompt.size());
    if (np + 1 > shape.prompt_positions)
      throw std::invalid_argument("lm decode: prompt of " + std::to_string(np) + " tokens is too long");
    const int capacity = shape.prompt_positions + shape.response_positions;
    decoder dec;
    dec.k.resize(capacity, shape.d);
    dec.v.resize(capacity, shape.d);
    matrix x0(np + 1, shape.d);
    const cmap E = block(l, lm_layout::E), S = block(l, lm_layout::S), P = block(l, lm_layout::P);
    for (int t = 0; t <= np; ++t) {
      const std::int32_t tok = t == np ? 1 : prompt[static_cast<std::size_t>(t)];
      const std::int32_t prev = t == 0 ? 2 : prompt[static_cast<std::size_t>(t - 1)];
      x0.row(t) = E.row(tok) + S.row(prev) + P.row(t);
    }
    dec.k.topRows(np + 1).noalias() = x0 * block(l, lm_layout::Wk);
    dec.v.topRows(np + 1).noalias() = x0 * block(l, lm_layout::Wv);
    dec.x0 = x0.row(np);
    dec.rows = np + 1;
    return dec;
  }

  // The next-token logits at the decoder's newest row.
  void logits(const decoder& dec, row_vector<T>& out) const {
    const lm_layout l(shape);
    const int dh = shape.d / shape.heads;
    const T scale = T(1) / std::sqrt(static_cast<T>(dh));
    const row_vector<T> q = dec.x0 * block(l, lm_layout::Wq);
    row_vector<T> o(shape.d);
    for (int h = 0; h < shape.heads; ++h) {
      row_vector<T> s = (q.segment(h * dh, dh) * dec.k.topRows(dec.rows).middleCols(h * dh, dh).transpose()) * scale;
      s = (s.array() - s.maxCoeff()).exp();
      s /= s.sum();
      o.segment(h * dh, dh).noalias() = s * dec.v.topRows(dec.rows).middleCols(h * dh, dh);
    }
    row_vector<T> h1 = dec.x0;
    h1.noalias() += o * block(l, lm_layout::Wo);
    row_vector<T> z = h1 * block(l, lm_layout::W1) + row_vector<T>(block(l, lm_layout::b1));
    z = z.cwiseMax(T(0));
    row_vector<T> h2 = h1 + row_vector<T>(block(l, lm_layout::b2));
    h2.noalias() += z * block(l, lm_layout::W2);
    out = h2 * block(l, lm_layout::U) + row_vector<T>(block(l, lm_layout::c));
  }

  // Appends response token `token` as the decoder's new row.
  void advance(decoder& dec, std::int32_t token) const {
    const lm_layout l(shape);
    if (dec.generated >= shape.response_positions) throw std::invalid_argument("lm decode: response too long");
    const cmap E = block(l, lm_layout::E), S = block(l, lm_layout::S), P = block(l, lm_layout::P);
    dec.x0 = E.row(token) + S.row(dec.last) + P.row(shape.prompt_positions + dec.generated);
    dec.k.row(dec.rows).noalias() = dec.x0 * block(l, lm_layout::Wk);
    dec.v.row(dec.rows).noalias() = dec.x0 * block(l, lm_layout::Wv);
    ++dec.rows;
    ++dec.generated;
    dec.last = token;
  }
};

// The demo's precision, compiled once, in cascade_demo_experiments (experiment.cpp),
// rather than in every program of the demo and its tests. (Its tests' gradient checks
// use double, which they instantiate themselves.)
extern template struct lm_weights<float>;

}  // namespace demo
