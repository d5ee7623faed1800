#include "orchard/train/optimizers.h"

#include <torch/torch.h>

#include <algorithm>
#include <cctype>

#include "orchard/core/error.h"
#include "orchard/proto/object_detection/optimizer.pb.h"

namespace orchard::train {
namespace {

namespace pb = object_detection::protos;

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_tf_optimizer(const std::string& optimizer, std::vector<at::Tensor> params,
                                                           double momentum) {
  std::string name = optimizer;
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (name == "sgd") return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.0));
  if (name == "momentum")
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.0).momentum(momentum));
  if (name == "adam")  // TF's defaults: beta1 0.9, beta2 0.999, epsilon 1e-8
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(0.0).eps(1e-8));
  if (name == "adagrad")  // TF's initial accumulator value 0.1
    return std::make_unique<torch::optim::Adagrad>(params,
                                                   torch::optim::AdagradOptions(0.0).initial_accumulator_value(0.1));
  if (name == "rmsprop")  // TF's decay 0.9, epsilon 1e-10
    return std::make_unique<torch::optim::RMSprop>(params, torch::optim::RMSpropOptions(0.0).alpha(0.9).eps(1e-10));
  throw Error("--optimizer must be SGD, Momentum, Adam, Adagrad or RMSProp, not '" + optimizer + "'");
}

Schedule od_api_learning_rate(const pb::LearningRate& lr) {
  if (lr.has_exponential_decay_learning_rate()) {
    const auto& e = lr.exponential_decay_learning_rate();
    ExponentialDecay c;
    c.initial_learning_rate = e.initial_learning_rate();
    c.decay_steps = e.decay_steps();
    c.decay_factor = e.decay_factor();
    c.staircase = e.staircase();
    c.burnin_learning_rate = e.burnin_learning_rate();
    c.burnin_steps = e.burnin_steps();
    c.min_learning_rate = e.min_learning_rate();
    return exponential_decay(c);
  }
  if (lr.has_manual_step_learning_rate()) {
    const auto& m = lr.manual_step_learning_rate();
    ManualStep c;
    c.initial_learning_rate = m.initial_learning_rate();
    for (const auto& s : m.schedule()) c.schedule.emplace_back(s.step(), s.learning_rate());
    c.warmup = m.warmup();
    return manual_step(c);
  }
  if (lr.has_cosine_decay_learning_rate()) {
    const auto& m = lr.cosine_decay_learning_rate();
    CosineDecay c;
    c.learning_rate_base = m.learning_rate_base();
    c.total_steps = m.total_steps();
    c.warmup_learning_rate = m.warmup_learning_rate();
    c.warmup_steps = m.warmup_steps();
    c.hold_base_rate_steps = m.hold_base_rate_steps();
    return cosine_decay(c);
  }
  return constant_learning_rate(lr.constant_learning_rate().learning_rate());
}

OptimizerAndSchedule make_od_api_optimizer(const pb::Optimizer& o, const std::vector<at::Tensor>& params) {
  if (o.has_rms_prop_optimizer()) {
    // TF's RMSProp adds epsilon inside the square root, torch's outside; with the OD API's
    // epsilon 1.0 both damp small second moments the same way to first order.
    const auto& r = o.rms_prop_optimizer();
    torch::optim::RMSpropOptions opt(0.0);
    opt.alpha(r.decay()).eps(r.epsilon()).momentum(r.momentum_optimizer_value());
    return {std::make_unique<torch::optim::RMSprop>(params, opt), od_api_learning_rate(r.learning_rate())};
  }
  if (o.has_adam_optimizer()) {
    const auto& a = o.adam_optimizer();
    torch::optim::AdamOptions opt(0.0);
    opt.eps(a.epsilon());
    return {std::make_unique<torch::optim::Adam>(params, opt), od_api_learning_rate(a.learning_rate())};
  }
  const auto& m = o.momentum_optimizer();
  return {
      std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.0).momentum(m.momentum_optimizer_value())),
      od_api_learning_rate(m.learning_rate())};
}

}  // namespace orchard::train
