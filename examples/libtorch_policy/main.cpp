// A libtorch model plugged into cascade_rl through the Policy concept.
//
// `lm_impl` is an ordinary torch::nn module: a tiny autoregressive language model over 8
// tokens that reads the prompt (a task and an operand), the position and the previous
// token through embeddings, then an MLP. `torch_policy` adapts it:
//   generate        samples on the CPU, every draw from the request's seed
//   log_probs       one batched forward pass, no grad
//   apply_gradient  the same pass with grad, autograd seeded with the engine's dL/dlogp
//                   (logp.backward(dlogp)), then one Adam step at the stage's lr
//   snapshot        a cloned module plus Adam's state; it scores tokens, so it can be a
//                   MOPD teacher
//   save / load     both in one torch archive, for checkpoints
//
// The cascade: GRPO on "repeat" (answer k), GRPO on "successor" (answer k+1; the same
// operands, so learning it overwrites "repeat"), then MOPD on both domains from their
// best snapshots. `--check` fails unless each GRPO stage raised its own domain's score. `--selftest` checks the gradient against finite
// differences in double, Adam's first step, snapshot/restore, save/load, and that a run
// interrupted and resumed from a checkpoint ends with the same parameters.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <torch/torch.h>

#include <cascade_rl/cascade.hpp>

namespace cr = cascade_rl;

constexpr std::int64_t vocab = 8;      // token 0 ends a response; 1..7 are digits
constexpr std::int64_t bos = vocab;    // the "previous token" of the first position
constexpr std::int64_t positions = 4;  // the longest response the model can write
constexpr std::int64_t width = 32, hidden = 64;

// ---- the toy domains: prompt.domain names the task, prompt.id is the operand k -------
std::int64_t task_of(const cr::prompt& p) { return p.domain == "repeat" ? 0 : 1; }

std::vector<std::int32_t> answer(const cr::prompt& p) {
  const auto k = static_cast<std::int32_t>(p.id);
  return {task_of(p) == 0 ? k : k + 1, 0};
}

// The fraction of answer positions right. Called from the reward worker threads.
double reward(const cr::response_view& r) {
  const auto a = answer(r.input);
  int right = 0;
  for (std::size_t t = 0; t < a.size() && t < r.tokens.size(); ++t) right += r.tokens[t] == a[t];
  return static_cast<double>(right) / static_cast<double>(a.size());
}

std::vector<cr::prompt> prompts(const char* domain) {
  std::vector<cr::prompt> out;
  for (std::int64_t k = 1; k <= 5; ++k)  // the answers stay below the vocabulary
    out.push_back({.id = k, .domain = domain, .text = std::string(domain) + " " + std::to_string(k)});
  return out;
}

std::vector<cr::prompt> both() {
  auto out = prompts("repeat");
  for (auto& p : prompts("successor")) out.push_back(p);
  return out;
}

// ---- the model: knows nothing of cascade_rl ------------------------------------------
// Cloneable gives a deep copy (clone()), which is what a snapshot needs.
struct lm_impl : torch::nn::Cloneable<lm_impl> {
  torch::nn::Embedding task{nullptr}, operand{nullptr}, position{nullptr}, previous{nullptr};
  torch::nn::Linear layer{nullptr}, out{nullptr};

  lm_impl() { reset(); }
  void reset() override {
    task = register_module("task", torch::nn::Embedding(2, width));
    operand = register_module("operand", torch::nn::Embedding(vocab, width));
    position = register_module("position", torch::nn::Embedding(positions, width));
    previous = register_module("previous", torch::nn::Embedding(vocab + 1, width));
    layer = register_module("layer", torch::nn::Linear(width, hidden));
    out = register_module("out", torch::nn::Linear(hidden, vocab));
  }
  // Next-token logits, one row per (task, operand, position, previous token).
  torch::Tensor forward(const torch::Tensor& t, const torch::Tensor& k, const torch::Tensor& pos,
                        const torch::Tensor& prev) {
    return out(torch::tanh(layer(task(t) + operand(k) + position(pos) + previous(prev))));
  }
};

// The model's inputs for a set of positions, gathered on the host, then one forward.
struct inputs {
  std::vector<std::int64_t> task, operand, position, previous;
  void add(const cr::prompt& p, std::size_t pos, std::int64_t prev) {
    task.push_back(task_of(p));
    operand.push_back(p.id);
    position.push_back(static_cast<std::int64_t>(pos));
    previous.push_back(prev);
  }
  torch::Tensor logits(lm_impl& model) const {
    return model.forward(torch::tensor(task), torch::tensor(operand), torch::tensor(position),
                         torch::tensor(previous));
  }
};

// log pi(token) of every token of the batch, in batch order: the tensor both log_probs
// (no grad) and apply_gradient (with grad) use.
torch::Tensor token_log_probs(lm_impl& model, const cr::rollout_batch& b) {
  inputs x;
  std::vector<std::int64_t> y;
  for (std::size_t i = 0; i < b.response_count(); ++i) {
    const cr::prompt& p = b.prompts[b.group_of(i)];
    const auto tokens = b.response_tokens(i);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      x.add(p, t, t == 0 ? bos : tokens[t - 1]);
      y.push_back(tokens[t]);
    }
  }
  return torch::log_softmax(x.logits(model), 1).gather(1, torch::tensor(y).unsqueeze(1)).squeeze(1);
}

void write_log_probs(lm_impl& model, const cr::rollout_batch& b, std::span<float> out) {
  torch::NoGradGuard no_grad;
  const torch::Tensor logp = token_log_probs(model, b).to(torch::kFloat32).contiguous();
  std::copy_n(logp.data_ptr<float>(), logp.numel(), out.begin());
}

// ---- the adapter ---------------------------------------------------------------------
// A frozen deep copy: a cloned module that is never trained (copies of the snapshot
// share it, which is safe because nothing writes to it) and Adam's moments, serialized.
struct torch_snapshot {
  std::shared_ptr<lm_impl> model;
  std::string adam_state;
  // A teacher for MOPD.
  void log_probs(const cr::rollout_batch& b, std::span<float> out) const { write_log_probs(*model, b, out); }
};

class torch_policy {
 public:
  using snapshot_type = torch_snapshot;

  // The initial weights come from `seed`; dtype kFloat64 is for the gradient check.
  explicit torch_policy(std::uint64_t seed, torch::Dtype dtype = torch::kFloat32)
      : dtype_(dtype), model_(new_model(seed, dtype)), adam_(model_->parameters(), torch::optim::AdamOptions(1e-3)) {}

  cr::rollout_batch generate(std::span<const cr::prompt> prompts, const cr::generation_request& request) {
    torch::NoGradGuard no_grad;
    const std::size_t G = request.group_size, n = prompts.size() * G;
    const auto limit = static_cast<std::size_t>(std::min(request.sampling.max_response_length, positions));
    // One generator per prompt, seeded from the request and the prompt's position in
    // the step, so that a data-parallel split samples what one process samples.
    std::vector<cr::rng_type> rngs;
    for (std::size_t j = 0; j < prompts.size(); ++j) rngs.emplace_back(cr::prompt_seed(request, j));
    std::vector<std::vector<std::int32_t>> tokens(n);
    std::vector<std::vector<float>> logps(n);
    // All responses advance together: one forward pass per position over the live ones.
    for (std::size_t pos = 0; pos < limit; ++pos) {
      inputs x;
      std::vector<std::size_t> live;
      for (std::size_t r = 0; r < n; ++r)
        if (tokens[r].empty() || tokens[r].back() != 0) {
          live.push_back(r);
          x.add(prompts[r / G], pos, pos == 0 ? bos : tokens[r].back());
        }
      if (live.empty()) break;
      const torch::Tensor logits = x.logits(*model_).to(torch::kFloat64).contiguous();
      for (std::size_t l = 0; l < live.size(); ++l) {
        const std::size_t r = live[l];
        float logp = 0;
        tokens[r].push_back(draw(logits.data_ptr<double>() + l * vocab, request.sampling, rngs[r / G], logp));
        logps[r].push_back(logp);
      }
    }
    cr::rollout_batch batch;
    for (std::size_t j = 0; j < prompts.size(); ++j) {
      batch.add_prompt(prompts[j]);
      for (std::size_t r = j * G; r < (j + 1) * G; ++r)
        batch.add_response(tokens[r], logps[r],
                           tokens[r].back() == 0 ? cr::finish_reason::stopped : cr::finish_reason::truncated);
    }
    return batch;
  }

  void log_probs(const cr::rollout_batch& b, std::span<float> out) const { write_log_probs(*model_, b, out); }

  // Fills every parameter's .grad() with d(sum_t dlogp[t] * logp[t]) / dtheta: autograd
  // seeded with dL/dlogp. The engine's loss, its normalisation and its masks are all in
  // dlogp already.
  void backward(const cr::rollout_batch& b, std::span<const float> dlogp) {
    const torch::Tensor logp = token_log_probs(*model_, b);
    // from_blob wraps the engine's buffer without copying; the copy makes the seed the
    // model's dtype and leaves the engine's memory alone.
    const torch::Tensor seed =
        torch::from_blob(const_cast<float*>(dlogp.data()), {static_cast<std::int64_t>(dlogp.size())}, torch::kFloat32)
            .to(logp.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    logp.backward(seed);
  }

  void apply_gradient(const cr::rollout_batch& b, std::span<const float> dlogp, double lr) {
    adam_.zero_grad();
    if (b.token_count() > 0) backward(b, dlogp);
    static_cast<torch::optim::AdamOptions&>(adam_.param_groups().front().options()).lr(lr);
    adam_.step();
  }

  torch_snapshot snapshot() const {
    std::ostringstream state;
    torch::serialize::OutputArchive archive;
    adam_.save(archive);
    archive.save_to(state);
    return {std::dynamic_pointer_cast<lm_impl>(model_->clone()), state.str()};
  }

  void restore(const torch_snapshot& s) {
    {
      torch::NoGradGuard no_grad;
      const auto src = s.model->parameters();
      auto dst = model_->parameters();
      for (std::size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
    }
    // Adam's load only adds the saved moments: without the clear, moments of a later
    // step would survive the restore of a snapshot taken before any step.
    adam_.state().clear();
    std::istringstream state(s.adam_state);
    torch::serialize::InputArchive archive;
    archive.load_from(state);
    adam_.load(archive);
  }

  void save(const torch_snapshot& s, const std::filesystem::path& path) const {
    torch::serialize::OutputArchive archive, weights;
    s.model->save(weights);
    archive.write("model", weights);
    archive.write("adam", c10::IValue(s.adam_state));
    archive.save_to(path.string());
  }

  torch_snapshot load(const std::filesystem::path& path) const {
    torch::serialize::InputArchive archive, weights;
    archive.load_from(path.string());
    archive.read("model", weights);
    torch_snapshot s{std::make_shared<lm_impl>(), {}};
    s.model->to(dtype_);  // load keeps each parameter's dtype and wants the file's to match
    s.model->load(weights);
    c10::IValue adam;
    archive.read("adam", adam);
    s.adam_state = adam.toStringRef();
    return s;
  }

  std::vector<torch::Tensor> parameters() const { return model_->parameters(); }
  lm_impl& model() const { return *model_; }

 private:
  static std::shared_ptr<lm_impl> new_model(std::uint64_t seed, torch::Dtype dtype) {
    torch::manual_seed(seed);
    auto model = std::make_shared<lm_impl>();
    model->to(dtype);
    return model;
  }

  // Greedy at temperature 0, else softmax(logits / temperature) over the smallest set
  // of tokens whose probability reaches top_p. Records the log-probability the sampler
  // drew the token with (greedy: the model's).
  static std::int32_t draw(const double* logits, const cr::sampling_params& s, cr::rng_type& rng, float& logp) {
    const double t = s.temperature == 0 ? 1.0 : s.temperature;
    const double top = *std::max_element(logits, logits + vocab);
    std::vector<double> p(vocab);
    double sum = 0;
    for (std::int64_t k = 0; k < vocab; ++k) sum += p[k] = std::exp((logits[k] - top) / t);
    for (double& x : p) x /= sum;
    std::vector<std::int32_t> order(vocab);
    for (std::int32_t k = 0; k < vocab; ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return p[a] > p[b]; });
    if (s.temperature == 0) {
      logp = static_cast<float>(std::log(p[order[0]]));
      return order[0];
    }
    std::size_t kept = 0;
    double mass = 0;
    while (kept < order.size() && (kept == 0 || mass < s.top_p)) mass += p[order[kept++]];
    double u = cr::detail::uniform01(rng) * mass;
    std::int32_t y = order[kept - 1];
    for (std::size_t r = 0; r < kept; ++r) {
      if (u < p[order[r]]) {
        y = order[r];
        break;
      }
      u -= p[order[r]];
    }
    logp = static_cast<float>(std::log(p[y] / mass));
    return y;
  }

  torch::Dtype dtype_;
  std::shared_ptr<lm_impl> model_;
  torch::optim::Adam adam_;
};

static_assert(cr::Checkpointable<torch_policy>);
static_assert(cr::Teacher<torch_snapshot>);

// ---- the cascade ---------------------------------------------------------------------
cr::stage_config grpo(const char* name, const char* domain, std::size_t steps) {
  return {.name = name, .domains = {domain}, .group_size = 16, .prompts_per_step = 5, .steps = steps,
          .lr = cr::constant_lr(0.005),
          .sampling = {.max_response_length = positions},
          .evals = {{.domain = domain, .prompts = prompts(domain)}}};
}

// GRPO on "repeat", GRPO on "successor", then MOPD on both from per-domain teachers
// (each the best snapshot of its domain seen so far, captured by the runner).
auto make_cascade(std::size_t repeat_steps, std::size_t successor_steps, std::size_t mopd_steps) {
  return cr::make_cascade(
      cr::make_grpo_stage(grpo("grpo_repeat", "repeat", repeat_steps), cr::prompt_pool(prompts("repeat")), reward),
      cr::make_grpo_stage(grpo("grpo_successor", "successor", successor_steps),
                          cr::prompt_pool(prompts("successor")), reward),
      cr::make_mopd_stage({.name = "mopd", .domains = {"repeat", "successor"}, .group_size = 4,
                           .prompts_per_step = 10, .steps = mopd_steps, .lr = cr::constant_lr(0.01),
                           .sampling = {.max_response_length = positions}},
                          cr::prompt_pool(both())));
}

// ---- the self-test -------------------------------------------------------------------
torch::Tensor flat(const torch_policy& p) {
  std::vector<torch::Tensor> parts;
  for (const auto& t : p.parameters()) parts.push_back(t.detach().flatten().clone());
  return torch::cat(parts);
}

int selftest() {
  int failures = 0;
  const auto expect = [&](bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
    failures += ok ? 0 : 1;
  };

  // A batch sampled from a double-precision policy, and a dL/dlogp for each token.
  torch_policy policy(3, torch::kFloat64);
  const auto ps = prompts("successor");
  const cr::rollout_batch batch =
      policy.generate(ps, {.group_size = 3, .sampling = {.max_response_length = positions}, .seed = 11});
  cr::validate_rollout_batch(batch, "torch_policy.generate", ps.size(), 3);
  std::vector<float> dlogp(batch.token_count());
  cr::rng_type rng(5);
  for (float& d : dlogp) d = static_cast<float>(cr::detail::uniform01(rng) - 0.5);

  // autograd's gradient of f = sum dlogp * logp against central differences.
  const auto f = [&] {
    torch::NoGradGuard no_grad;
    const torch::Tensor logp = token_log_probs(policy.model(), batch);
    return (logp * torch::tensor(std::vector<double>(dlogp.begin(), dlogp.end()), torch::kFloat64)).sum().item<double>();
  };
  policy.backward(batch, dlogp);
  double worst = 0;
  for (auto& t : policy.parameters()) {
    auto v = t.detach().view(-1);
    const auto g = t.grad().view(-1);
    for (std::int64_t i = 0; i < v.numel(); i += std::max<std::int64_t>(1, v.numel() / 7)) {
      const double h = 1e-6, old = v[i].item<double>();
      v[i] = old + h;
      const double up = f();
      v[i] = old - h;
      const double down = f();
      v[i] = old;
      const double fd = (up - down) / (2 * h), ag = g[i].item<double>();
      worst = std::max(worst, std::abs(fd - ag) / (1e-6 + std::abs(fd)));
    }
  }
  std::printf("      worst relative gradient error %.2e\n", worst);
  expect(worst < 1e-5, "logp.backward(dlogp) = d(sum dlogp*logp)/dtheta (finite differences, double)");

  // apply_gradient: Adam's first step is -lr * g / (|g| + eps) with that gradient.
  torch::Tensor grad;
  {
    std::vector<torch::Tensor> parts;
    for (const auto& t : policy.parameters()) parts.push_back(t.grad().flatten().clone());
    grad = torch::cat(parts);
  }
  const double lr = 0.01;
  const cr::snapshot_t<torch_policy> s0 = policy.snapshot();
  const torch::Tensor theta0 = flat(policy);
  policy.apply_gradient(batch, dlogp, lr);
  const torch::Tensor theta1 = flat(policy);
  const torch::Tensor want = theta0 - lr * grad / (grad.abs() + 1e-8);
  expect(torch::allclose(theta1, want, 0, 1e-12), "apply_gradient takes one Adam step on that gradient");

  // snapshot / restore / save / load carry the parameters and Adam's moments: from
  // each, the same steps give the same bits.
  const cr::snapshot_t<torch_policy> s1 = policy.snapshot();
  policy.apply_gradient(batch, dlogp, lr);
  const torch::Tensor theta2 = flat(policy);
  policy.restore(s0);
  expect(torch::equal(flat(policy), theta0), "restore puts the parameters back");
  policy.apply_gradient(batch, dlogp, lr);
  policy.apply_gradient(batch, dlogp, lr);
  expect(torch::equal(flat(policy), theta2), "restore of a step-0 snapshot drops Adam's moments");
  policy.restore(s1);
  policy.apply_gradient(batch, dlogp, lr);
  expect(torch::equal(flat(policy), theta2), "restore of a step-1 snapshot brings Adam's moments back");
  const auto file = std::filesystem::temp_directory_path() / ("cascade_rl_libtorch_selftest_" + std::to_string(getpid()) + ".pt");
  policy.save(s1, file);
  policy.restore(policy.load(file));
  std::filesystem::remove(file);
  policy.apply_gradient(batch, dlogp, lr);
  expect(torch::equal(flat(policy), theta2), "save / load round-trips a snapshot");
  std::vector<float> a(batch.token_count()), b(batch.token_count());
  policy.restore(s1);
  policy.log_probs(batch, a);
  s1.log_probs(batch, b);
  expect(a == b, "a snapshot scores tokens as the policy did (a MOPD teacher)");

  // A run cut after 5 steps and resumed by a fresh runner and policy from its checkpoint
  // ends where the uninterrupted run ends.
  const auto dir = std::filesystem::temp_directory_path() / ("cascade_rl_libtorch_selftest_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  torch_policy whole(1), first(1), second(1);
  auto c0 = make_cascade(3, 3, 2);
  (void)cr::make_runner(c0, whole, {.seed = 9}).run();
  auto c1 = make_cascade(3, 3, 2);
  const bool cut = !cr::make_runner(c1, first, {.seed = 9, .checkpoint_dir = dir, .max_steps = 5}).run().finished;
  auto c2 = make_cascade(3, 3, 2);
  auto resumed = cr::make_runner(c2, second, {.seed = 9, .checkpoint_dir = dir});
  const bool found = resumed.resume();
  (void)resumed.run();
  std::filesystem::remove_all(dir);
  expect(cut && found && torch::equal(flat(whole), flat(second)),
         "a resumed run ends with the uninterrupted run's parameters, bit for bit");
  return failures == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  // One intra-op thread: the ops are tiny, and the reward workers share the two cores.
  torch::set_num_threads(1);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--selftest") return selftest();

  auto cascade = make_cascade(20, 80, 20);
  torch_policy policy(1);
  auto runner = cr::make_runner(cascade, policy, {.seed = 7});
  const cr::cascade_report report = runner.run(cr::forgetting_table(std::cout));
  for (const auto& r : report.regressions)
    std::printf("regression: %s fell %.3f after %s\n", r.domain.c_str(), r.drop(), r.stage.c_str());
  const auto& m = report.forgetting;
  const double repeat0 = m.score(0, "repeat"), repeat1 = m.score(1, "repeat");
  const double successor1 = m.score(1, "successor"), successor2 = m.score(2, "successor");
  std::printf("repeat: %.3f -> %.3f after grpo_repeat; successor: %.3f -> %.3f after grpo_successor\n", repeat0,
              repeat1, successor1, successor2);
  const bool raised = repeat1 > repeat0 && successor2 > successor1;
  if (mode == "--check") std::printf("check: %s\n", raised ? "each GRPO stage raised its own domain" : "FAILED");
  return mode == "--check" && !raised ? 1 : 0;
}
