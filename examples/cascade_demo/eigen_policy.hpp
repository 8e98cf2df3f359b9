#pragma once
// The demo's model as a cascade_rl Policy: the Eigen transformer of transformer.hpp,
// sampling with temperature and top-p, behaviour log-probs recorded, a backward pass
// seeded by dL/dlogp, Adam with global-norm clipping, snapshots (parameters and Adam
// state) that score tokens (so they serve as MOPD teachers), save/load for checkpoints.
//
// Work is split into a fixed number of chunks (of prompts, or of responses) whatever
// the thread count, and chunk results are combined in order: the same seed gives the
// same bits on one thread or many.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <cascade_rl/cascade/concepts.hpp>
#include <cascade_rl/cascade/rng.hpp>
#include <cascade_rl/cascade/rollout_batch.hpp>
#include <cascade_rl/cascade/turn_policy.hpp>
#include <cascade_rl/core/error.hpp>

#include "transformer.hpp"
#include "vocabulary.hpp"

namespace demo {

namespace cr = cascade_rl;

// Calls f(chunk) for chunk in [0, chunks) on up to `threads` threads.
template <class F>
void for_chunks(std::size_t chunks, unsigned threads, F&& f) {
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(chunks)));
  if (threads == 1) {
    for (std::size_t c = 0; c < chunks; ++c) f(c);
    return;
  }
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      for (std::size_t c = w; c < chunks; c += threads) f(c);
    });
  for (auto& t : pool) t.join();
}

inline constexpr std::size_t work_chunks = 8;

// [begin, end) of chunk c of n items.
inline std::pair<std::size_t, std::size_t> chunk_range(std::size_t n, std::size_t c) {
  return {n * c / work_chunks, n * (c + 1) / work_chunks};
}

// softmax(logits / t) in double, into p: the one arithmetic of sampling and scoring.
template <class T>
void next_token_probabilities(const row_vector<T>& logits, double t, std::vector<double>& p) {
  const double top = static_cast<double>(logits.maxCoeff());
  double sum = 0;
  for (std::size_t k = 0; k < p.size(); ++k)
    sum += p[k] = std::exp((static_cast<double>(logits(static_cast<Eigen::Index>(k))) - top) / t);
  for (double& x : p) x /= sum;
}

// log pi(y) under the next-token logits at temperature 1, with the sampler's own
// arithmetic (draw() at temperature 1 and top_p 1 records these bits).
template <class T>
double token_log_prob(const row_vector<T>& logits, std::int32_t y, std::vector<double>& p) {
  next_token_probabilities(logits, 1.0, p);
  double mass = 0;
  for (const double x : p) mass += x;
  return std::log(p[static_cast<std::size_t>(y)] / mass);
}

// The snapshot: weights and Adam state. Scores tokens like the policy does.
template <class T>
struct policy_state {
  lm_weights<T> weights{};
  bool operator==(const policy_state&) const = default;

  // log pi(y_t) of every token of the batch, by the incremental decoder that samples
  // (start, then advance token by token): the trainer's log-probs are the sampler's
  // bits, so the sampler/trainer drift of the demo's policy is exactly 0, observations
  // between an episode's turns included. (The gradient's forward pass computes the
  // same function in matrix form; float rounding puts it within about 1e-5.)
  void log_probs(const cr::rollout_batch& batch, std::span<float> out, unsigned threads = 2) const {
    cr::detail::require_size(out.size(), batch.token_count(), "out", "one per token");
    const std::size_t n = batch.response_count();
    for_chunks(work_chunks, threads, [&](std::size_t c) {
      row_vector<T> logits;
      std::vector<double> p(static_cast<std::size_t>(weights.shape.vocab));
      const auto [first, last] = chunk_range(n, c);
      for (std::size_t i = first; i < last; ++i) {
        const std::span<const std::int32_t> response = batch.response_tokens(i);
        if (response.empty()) continue;
        auto dec = weights.start(encode(batch.prompts[batch.group_of(i)].text));
        for (std::size_t t = 0; t < response.size(); ++t) {
          weights.logits(dec, logits);
          out[static_cast<std::size_t>(batch.token_offsets[i]) + t] =
              static_cast<float>(token_log_prob(logits, response[t], p));
          if (t + 1 < response.size()) weights.advance(dec, response[t]);
        }
      }
    });
  }
};

struct adam_options {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double clip_norm = 1.0;  // global gradient norm; 0: no clipping
};

template <class T>
class basic_eigen_policy {
 public:
  using snapshot_type = policy_state<T>;

  explicit basic_eigen_policy(lm_shape shape = {.vocab = vocabulary_size()}, std::uint64_t seed = 1,
                              adam_options adam = {}, unsigned threads = 2)
      : state_{lm_weights<T>(shape, seed)}, adam_(adam), threads_(threads) {}

  // group_size responses per prompt; prompt g draws from its own generator seeded by
  // (request.seed, g), so chunking cannot change what is sampled.
  cr::rollout_batch generate(std::span<const cr::prompt> prompts, const cr::generation_request& request) {
    const lm_weights<T>& w = state_.weights;
    const auto limit = static_cast<std::size_t>(std::clamp<std::int64_t>(request.sampling.max_response_length, 0,
                                                                         w.shape.response_positions));
    struct sample {
      std::vector<std::int32_t> tokens;
      std::vector<float> log_probs;
      bool stopped = false;
    };
    std::vector<std::vector<sample>> samples(prompts.size());
    for_chunks(work_chunks, threads_, [&](std::size_t c) {
      const auto [first, last] = chunk_range(prompts.size(), c);
      sampler_scratch scratch(w.shape.vocab);
      for (std::size_t g = first; g < last; ++g) {
        cr::rng_type rng(request.seed ^ (0x9e3779b97f4a7c15ULL * (g + 1)));
        const std::vector<std::int32_t> prompt = encode(prompts[g].text);
        const auto start = w.start(prompt);
        for (std::size_t k = 0; k < request.group_size; ++k) {
          auto dec = start;
          sample s;
          s.stopped = sample_tokens(dec, limit, request.sampling, rng, scratch, s.tokens, s.log_probs);
          samples[g].push_back(std::move(s));
        }
      }
    });
    cr::rollout_batch batch;
    for (std::size_t g = 0; g < prompts.size(); ++g) {
      batch.add_prompt(prompts[g]);
      for (const sample& s : samples[g])
        batch.add_response(s.tokens, s.log_probs, s.stopped ? cr::finish_reason::stopped : cr::finish_reason::truncated,
                           decode(s.tokens));
    }
    return batch;
  }

  void log_probs(const cr::rollout_batch& batch, std::span<float> out) const {
    state_.log_probs(batch, out, threads_);
  }

  // ---- episodes (cascade_rl::TurnPolicy) -------------------------------------------
  // A context is the prompt's words, <sep>, then the episode's response so far (actions
  // with their <eos>, observations' words): exactly the (prompt, response) pair the
  // trainer scores, so nothing is re-tokenised between turns.
  [[nodiscard]] std::vector<std::int32_t> render_prompt(const cr::prompt& input) const {
    std::vector<std::int32_t> tokens = encode(input.text);
    tokens.push_back(sep);
    return tokens;
  }
  [[nodiscard]] std::vector<std::int32_t> render_observation(std::span<const std::int32_t>,
                                                             std::string_view text) const {
    return encode(text);
  }

  // One action per request, sampled as generate() samples a response (request.seed
  // is the episode's draw for the turn), up to max_tokens and to the model's last
  // response position; chunked as generate() is, so the thread count changes nothing.
  std::vector<cr::turn_output> continue_generation(std::span<const cr::turn_request> requests,
                                                   const cr::sampling_params& sampling) {
    const lm_weights<T>& w = state_.weights;
    std::vector<cr::turn_output> out(requests.size());
    for_chunks(work_chunks, threads_, [&](std::size_t c) {
      const auto [first, last] = chunk_range(requests.size(), c);
      sampler_scratch scratch(w.shape.vocab);
      for (std::size_t r = first; r < last; ++r) {
        const std::span<const std::int32_t> context = requests[r].context;
        const auto boundary = std::find(context.begin(), context.end(), sep);
        if (boundary == context.end())
          cr::detail::fail_at("continue_generation requests", r, "context has no <sep> after its prompt");
        const auto prompt_length = static_cast<std::size_t>(boundary - context.begin());
        const std::span<const std::int32_t> so_far = context.subspan(prompt_length + 1);
        // A response of R tokens uses R - 1 positions (the last token is only predicted).
        const std::size_t room = static_cast<std::size_t>(w.shape.response_positions) + 1;
        const std::size_t limit = std::min(requests[r].max_tokens, room - std::min(room, so_far.size()));
        cr::turn_output& action = out[r];
        action.finish = cr::finish_reason::truncated;
        if (limit == 0) continue;
        auto dec = w.start(context.first(prompt_length));
        for (const std::int32_t token : so_far) w.advance(dec, token);
        cr::rng_type rng(requests[r].seed);
        if (sample_tokens(dec, limit, sampling, rng, scratch, action.tokens, action.log_probs))
          action.finish = cr::finish_reason::stopped;
        action.text = decode(action.tokens);
      }
    });
    return out;
  }

  // Backward pass of every response seeded by its tokens' dL/dlogp, then one Adam step.
  void apply_gradient(const cr::rollout_batch& batch, std::span<const float> dlogp, double lr) {
    cr::detail::require_size(dlogp.size(), batch.token_count(), "dlogp", "one per token");
    const lm_weights<T>& w = state_.weights;
    std::vector<std::vector<T>> partial(work_chunks);
    const std::size_t n = batch.response_count();
    for_chunks(work_chunks, threads_, [&](std::size_t c) {
      std::vector<T>& grad = partial[c];
      grad.assign(w.params.size(), T(0));
      lm_pass<T> pass;
      std::vector<T> seed;
      const auto [first, last] = chunk_range(n, c);
      for (std::size_t i = first; i < last; ++i) {
        const std::size_t length = batch.length(i);
        if (length == 0) continue;
        const auto offset = static_cast<std::size_t>(batch.token_offsets[i]);
        seed.assign(length, T(0));
        bool any = false;
        for (std::size_t t = 0; t < length; ++t) {
          const bool valid = batch.loss_mask.empty() || batch.loss_mask[offset + t] != 0;
          seed[t] = valid ? static_cast<T>(dlogp[offset + t]) : T(0);
          any = any || seed[t] != T(0);
        }
        if (!any) continue;
        w.forward(encode(batch.prompts[batch.group_of(i)].text), batch.response_tokens(i), pass);
        w.backward(pass, seed, grad);
      }
    });
    std::vector<T> grad = std::move(partial[0]);
    for (std::size_t c = 1; c < work_chunks; ++c)
      for (std::size_t k = 0; k < grad.size(); ++k) grad[k] += partial[c][k];
    adam_step(grad, lr);
  }

  // One Adam step on an explicit gradient (dL/dparams, the layout of lm_layout).
  void adam_step(std::vector<T>& grad, double lr) {
    lm_weights<T>& w = state_.weights;
    if (adam_.clip_norm > 0) {
      double norm = 0;
      for (T g : grad) norm += static_cast<double>(g) * static_cast<double>(g);
      norm = std::sqrt(norm);
      last_grad_norm_ = norm;
      if (norm > adam_.clip_norm)
        for (T& g : grad) g = static_cast<T>(static_cast<double>(g) * adam_.clip_norm / norm);
    }
    ++w.adam_steps;
    const double b1 = adam_.beta1, b2 = adam_.beta2;
    const double c1 = 1 - std::pow(b1, static_cast<double>(w.adam_steps));
    const double c2 = 1 - std::pow(b2, static_cast<double>(w.adam_steps));
    for (std::size_t k = 0; k < grad.size(); ++k) {
      const double g = grad[k];
      const double m = b1 * w.m[k] + (1 - b1) * g;
      const double v = b2 * w.v[k] + (1 - b2) * g * g;
      w.m[k] = static_cast<T>(m);
      w.v[k] = static_cast<T>(v);
      w.params[k] -= static_cast<T>(lr * (m / c1) / (std::sqrt(v / c2) + adam_.epsilon));
    }
  }

  [[nodiscard]] snapshot_type snapshot() const { return state_; }
  void restore(const snapshot_type& s) { state_ = s; }

  void save(const snapshot_type& s, const std::filesystem::path& path) const {
    std::ofstream out(path, std::ios::binary);
    const lm_shape& sh = s.weights.shape;
    const std::int64_t header[9] = {0x44454d4f4c4d3031, sizeof(T), sh.vocab, sh.d, sh.heads, sh.ffn,
                                    sh.prompt_positions, sh.response_positions, s.weights.adam_steps};
    out.write(reinterpret_cast<const char*>(header), sizeof header);
    for (const auto* v : {&s.weights.params, &s.weights.m, &s.weights.v})
      out.write(reinterpret_cast<const char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(T)));
    if (!out) cr::detail::fail("eigen_policy.save", "cannot write " + path.string());
  }
  [[nodiscard]] snapshot_type load(const std::filesystem::path& path) const {
    std::ifstream in(path, std::ios::binary);
    std::int64_t header[9] = {};
    in.read(reinterpret_cast<char*>(header), sizeof header);
    if (!in || header[0] != 0x44454d4f4c4d3031 || header[1] != static_cast<std::int64_t>(sizeof(T)))
      cr::detail::fail("eigen_policy.load", path.string() + " is not a saved demo model");
    snapshot_type s;
    s.weights.shape = {static_cast<int>(header[2]), static_cast<int>(header[3]), static_cast<int>(header[4]),
                       static_cast<int>(header[5]), static_cast<int>(header[6]), static_cast<int>(header[7])};
    if (!(s.weights.shape == state_.weights.shape))
      cr::detail::fail("eigen_policy.load", path.string() + " holds a model of another shape");
    s.weights.adam_steps = header[8];
    for (auto* v : {&s.weights.params, &s.weights.m, &s.weights.v}) {
      v->resize(state_.weights.params.size());
      in.read(reinterpret_cast<char*>(v->data()), static_cast<std::streamsize>(v->size() * sizeof(T)));
    }
    if (!in || in.peek() != std::char_traits<char>::eof())
      cr::detail::fail("eigen_policy.load", path.string() + " is truncated or too long");
    return s;
  }

  [[nodiscard]] const lm_weights<T>& weights() const { return state_.weights; }
  [[nodiscard]] lm_weights<T>& weights() { return state_.weights; }
  [[nodiscard]] double last_grad_norm() const { return last_grad_norm_; }

 private:
  // What sampling reuses from token to token.
  struct sampler_scratch {
    explicit sampler_scratch(int vocab) : p(static_cast<std::size_t>(vocab)), order(p.size()) {}
    row_vector<T> logits;
    std::vector<double> p;
    std::vector<int> order;
  };

  // Draws up to `limit` tokens after the decoder's state (advancing it over each but the
  // last), stopping after <eos>; appends them and the sampler's log-probs. Whether it
  // stopped at <eos>.
  bool sample_tokens(typename lm_weights<T>::decoder& dec, std::size_t limit, const cr::sampling_params& sampling,
                     cr::rng_type& rng, sampler_scratch& scratch, std::vector<std::int32_t>& tokens,
                     std::vector<float>& log_probs) const {
    const lm_weights<T>& w = state_.weights;
    for (std::size_t j = 0; j < limit; ++j) {
      w.logits(dec, scratch.logits);
      const std::int32_t y = draw(scratch.logits, sampling, rng, scratch.p, scratch.order, log_probs);
      tokens.push_back(y);
      if (y == eos) return true;
      if (j + 1 < limit) w.advance(dec, y);
    }
    return false;
  }

  // Samples one token: greedy at temperature 0, else softmax(logits / temperature)
  // restricted to the smallest set of tokens whose probability reaches top_p. Records
  // the log-probability the sampler drew it with (greedy: the model's).
  static std::int32_t draw(const row_vector<T>& logits, const cr::sampling_params& s, cr::rng_type& rng,
                           std::vector<double>& p, std::vector<int>& order, std::vector<float>& log_probs) {
    const auto V = static_cast<std::size_t>(logits.size());
    next_token_probabilities(logits, s.temperature == 0.0 ? 1.0 : s.temperature, p);
    if (s.temperature == 0.0) {
      const auto y = static_cast<std::size_t>(std::max_element(p.begin(), p.end()) - p.begin());
      log_probs.push_back(static_cast<float>(std::log(p[y])));
      return static_cast<std::int32_t>(y);
    }
    std::iota(order.begin(), order.end(), 0);
    std::size_t kept = V;
    if (s.top_p < 1.0) {
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)]; });
      double mass = 0;
      for (kept = 0; kept < V && mass < s.top_p;) mass += p[static_cast<std::size_t>(order[kept++])];
    }
    double mass = 0;
    for (std::size_t r = 0; r < kept; ++r) mass += p[static_cast<std::size_t>(order[r])];
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * mass;
    std::size_t y = static_cast<std::size_t>(order[kept - 1]);
    for (std::size_t r = 0; r < kept; ++r) {
      const auto k = static_cast<std::size_t>(order[r]);
      if (u < p[k]) {
        y = k;
        break;
      }
      u -= p[k];
    }
    log_probs.push_back(static_cast<float>(std::log(p[y] / mass)));
    return static_cast<std::int32_t>(y);
  }

  policy_state<T> state_;
  adam_options adam_;
  unsigned threads_ = 2;
  double last_grad_norm_ = 0;
};

// Compiled once, in cascade_demo_experiments (experiment.cpp), as lm_weights<float> is.
extern template class basic_eigen_policy<float>;

using eigen_policy = basic_eigen_policy<float>;

static_assert(cr::Checkpointable<eigen_policy>);
static_assert(cr::TurnPolicy<eigen_policy>);
static_assert(cr::Teacher<eigen_policy::snapshot_type>);

}  // namespace demo
